#!/usr/bin/env python3
"""Capture real OpenFlow 1.3 messages from an Open vSwitch dummy-datapath sandbox.

    python3 ofproto/tests/capture_tool/capture.py [OUT_DIR]   (default: ofproto/tests/data/msg)

Starts a private ovsdb-server + ovs-vswitchd (--enable-dummy --disable-system
--disable-system-route) in a fresh temporary run dir, creates bridge br0 (datapath_type=dummy,
protocols=OpenFlow13, fail-mode=secure), loads 2,000 flows and 4 groups with ovs-ofctl, then
points the bridge at a listener on 127.0.0.1 that this script runs. The listener plays the
controller: it sends hand-built requests (exact bytes below) and records every message the
switch sends, one hex line per message, into OUT_DIR/<label>.hex. Everything it starts is
stopped by PID and the run dir is removed at the end.

Pure stdlib. Needs root only for nothing in particular; it touches no system OVS state.
"""
import asyncio
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

OFP13 = 4
ONF = 0x4F4E4600
N_FLOWS = 2000


def msg(t, xid, body=b"", version=OFP13):
    return struct.pack("!BBHI", version, t, 8 + len(body), xid) + body


def multipart(mtype, xid, body=b""):
    return msg(18, xid, struct.pack("!HH4x", mtype, 0) + body)


EMPTY_MATCH = struct.pack("!HH4x", 1, 4)


def flow_stats_body(table=0xFF):
    # ofp_flow_stats_request: table_id, pad[3], out_port, out_group, pad[4], cookie, cookie_mask, match
    return struct.pack("!B3xII4xQQ", table, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0) + EMPTY_MATCH


# ofp_match with one OXM field, in_port=1 (OXM_OF_IN_PORT, 4 bytes), padded to 8.
IN_PORT_1_MATCH = struct.pack("!HHII4x", 1, 12, 0x80000004, 1)


def flow_mod(table, priority, command=0, flags=0, match=EMPTY_MATCH):
    # ofp_flow_mod with no instructions (drop)
    return struct.pack(
        "!QQBBHHHIIIH2x", 0, 0, table, command, 0, 0, priority, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, flags
    ) + match


def bundle_ctrl(bundle_id, btype, flags):
    return struct.pack("!IIIHH", ONF, 2300, bundle_id, btype, flags)


def bundle_add(bundle_id, flags, inner):
    return struct.pack("!IIIHH", ONF, 2301, bundle_id, 0, flags) + inner


def flows_text():
    lines = []
    for i in range(N_FLOWS):
        k = i % 4
        a, b = (i >> 8) & 0xFF, i & 0xFF
        if k == 0:
            lines.append(
                f"table=0,priority=100,cookie={0x1000 + i:#x},in_port={2 + i % 3},"
                f"dl_src=0a:58:0a:f4:{a:02x}:{b:02x},actions=set_field:{i}->reg0,goto_table:10"
            )
        elif k == 1:
            lines.append(
                f"table=10,priority=100,cookie={0x2000 + i:#x},ip,nw_dst=10.{128 + a % 64}.{b}.0/24,"
                f"actions=set_field:{100 + i}->tun_id,set_field:172.31.{a}.{b}->tun_dst,output:1"
            )
        elif k == 2:
            lines.append(
                f"table=20,priority=200,cookie={0x3000 + i:#x},ip,reg1=0x64,nw_dst=10.244.{a}.{b},"
                f"actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG2[],"
                f"set_field:0a:58:0a:f4:{a:02x}:{b:02x}->eth_src,dec_ttl,output:2"
            )
        else:
            lines.append(
                f"table=30,priority=300,cookie={0x4000 + i:#x},tcp,nw_src=10.{a}.{b}.1,tp_dst={1 + i % 60000},"
                f"actions=load:0x{i:x}->NXM_NX_REG3[],resubmit(,40),group:2"
            )
    lines.append("table=0,priority=1000,in_port=4,actions=controller:128")
    return "\n".join(lines) + "\n"


GROUPS = """group_id=1,type=all,bucket=output:2,bucket=output:3
group_id=2,type=select,bucket=weight:10,actions=output:2,bucket=weight:20,actions=set_field:0a:58:0a:f4:00:05->eth_dst,output:3
group_id=3,type=indirect,bucket=actions=set_field:100->tun_id,output:1
group_id=4,type=fast_failover,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3
"""


class Sandbox:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="flowmesh-capture-")
        self.env = dict(os.environ)
        for k in ("OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"):
            self.env[k] = self.dir
        self.pidfiles = []

    def run(self, *args, input=None):
        r = subprocess.run(args, env=self.env, input=input, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    def start(self):
        d = self.dir
        self.run("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        self.run("ovsdb-server", "--detach", "--no-chdir", f"--pidfile={d}/ovsdb-server.pid",
                 f"--log-file={d}/ovsdb-server.log", "-vconsole:off", f"--remote=punix:{d}/db.sock",
                 f"{d}/conf.db")
        self.pidfiles.append(f"{d}/ovsdb-server.pid")
        self.run("ovs-vsctl", "--no-wait", "init")
        self.run("ovs-vswitchd", "--enable-dummy", "--disable-system", "--disable-system-route",
                 "--detach", "--no-chdir", f"--pidfile={d}/ovs-vswitchd.pid",
                 f"--log-file={d}/ovs-vswitchd.log", "-vconsole:off")
        self.pidfiles.append(f"{d}/ovs-vswitchd.pid")

    def stop(self):
        for pf in reversed(self.pidfiles):
            try:
                pid = int(open(pf).read().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                continue
            deadline = time.time() + 5
            while os.path.exists(pf) and time.time() < deadline:
                time.sleep(0.02)
        shutil.rmtree(self.dir, ignore_errors=True)


class Conn:
    def __init__(self, reader, writer, out):
        self.r, self.w, self.out, self.xid = reader, writer, out, 100

    async def recv(self):
        hdr = await asyncio.wait_for(self.r.readexactly(8), 10)
        _, typ, length, xid = struct.unpack("!BBHI", hdr)
        body = await asyncio.wait_for(self.r.readexactly(length - 8), 10)
        return typ, xid, hdr + body

    def record(self, label, raw):
        if os.environ.get("CAPTURE_VERBOSE"):
            print(f"<- {label} ({len(raw)} bytes)", flush=True)
        self.out.setdefault(label, []).append(raw.hex())

    async def send(self, raw):
        self.w.write(raw)
        await self.w.drain()

    def next_xid(self):
        self.xid += 1
        return self.xid

    async def until(self, label, want_xid=None, want_types=(), multi=False, others=None):
        """Receive until a message with want_xid (or type in want_types) arrives; record it.

        Echo requests from the switch are answered; PORT_STATUS etc. are recorded under their own
        labels. With multi, keep going while the multipart MORE flag is set."""
        while True:
            typ, xid, raw = await self.recv()
            if typ == 2:
                await self.send(msg(3, xid, raw[8:]))
                continue
            if (want_xid is not None and xid == want_xid) or typ in want_types:
                self.record(label, raw)
                if multi and typ == 19 and struct.unpack("!H", raw[10:12])[0] & 1:
                    continue
                return raw
            self.record(others or ("port_status" if typ == 12 else f"unsolicited_type{typ}"), raw)

    async def request(self, label, raw_fn, multi=False):
        xid = self.next_xid()
        await self.send(raw_fn(xid))
        return await self.until(label, want_xid=xid, multi=multi)


async def conversation(conn, sbx, loaded):
    typ, _, raw = await conn.recv()
    assert typ == 0, f"expected HELLO, got type {typ}"
    conn.record("hello", raw)
    await conn.send(msg(0, 1, struct.pack("!HHI", 1, 8, 1 << OFP13)))
    # Flows and groups are loaded after the bridge has its controller: setting a controller
    # on a bridge flushes its flow table.
    await loaded.wait()
    await conn.request("features_reply", lambda x: msg(5, x))
    await conn.request("get_config_reply", lambda x: msg(7, x))
    await conn.send(msg(9, conn.next_xid(), struct.pack("!HH", 0, 0xFFFF)))
    await conn.request("echo_reply", lambda x: msg(2, x, b"flowmesh"))
    await conn.request("role_reply", lambda x: msg(24, x, struct.pack("!I4xQ", 2, 1)))
    await conn.request("get_async_reply", lambda x: msg(26, x))
    await conn.request("desc_reply", lambda x: multipart(0, x))
    await conn.request("port_desc_reply", lambda x: multipart(13, x), multi=True)
    await conn.request("table_stats_reply", lambda x: multipart(3, x), multi=True)
    await conn.request("port_stats_reply", lambda x: multipart(4, x, struct.pack("!I4x", 0xFFFFFFFF)), multi=True)
    await conn.request("flow_stats_reply", lambda x: multipart(1, x, flow_stats_body()), multi=True)
    await conn.request("aggregate_reply", lambda x: multipart(2, x, flow_stats_body()), multi=True)
    await conn.request("group_desc_reply", lambda x: multipart(7, x), multi=True)
    await conn.request("group_stats_reply", lambda x: multipart(6, x, struct.pack("!I4x", 0xFFFFFFFC)), multi=True)
    await conn.request("group_features_reply", lambda x: multipart(8, x), multi=True)
    # A flow-mod to table 255 (OFPTT_ALL) with ADD: OFPFMFC_BAD_TABLE_ID.
    await conn.request("error_bad_flow_mod", lambda x: msg(14, x, flow_mod(255, 1)))
    # A group-mod ADD of group 1, which exists: OFPGMFC_GROUP_EXISTS.
    await conn.request("error_bad_group_mod", lambda x: msg(15, x, struct.pack("!HBxI", 0, 0, 1)))
    # A bundle: open, add one good flow-mod, commit.
    await conn.request("bundle_open_reply", lambda x: msg(4, x, bundle_ctrl(7, 0, 3)))
    await conn.send(msg(4, conn.next_xid(), bundle_add(7, 3, msg(14, conn.xid, flow_mod(50, 7)))))
    await conn.request("bundle_commit_reply", lambda x: msg(4, x, bundle_ctrl(7, 4, 3)))
    # A bundle-add whose embedded message has another xid than the bundle-add itself:
    # OVS refuses it with OFPBFC_MSG_BAD_XID (the inner xid must equal the outer one).
    await conn.request("bundle_open_reply", lambda x: msg(4, x, bundle_ctrl(8, 0, 3)))
    add_xid = conn.next_xid()
    await conn.send(msg(4, add_xid, bundle_add(8, 3, msg(14, add_xid + 1000, flow_mod(50, 8)))))
    await conn.until("bundle_error_bad_xid", want_xid=add_xid)
    await conn.request("bundle_discard_reply", lambda x: msg(4, x, bundle_ctrl(8, 6, 3)))
    # A bundle whose only flow-mod is bad (table 255): everything up to the commit's answer is
    # recorded (the refusal of the add or of the commit, whichever OVS sends).
    await conn.request("bundle_open_reply", lambda x: msg(4, x, bundle_ctrl(9, 0, 3)))
    add_xid = conn.next_xid()
    await conn.send(msg(4, add_xid, bundle_add(9, 3, msg(14, add_xid, flow_mod(255, 7)))))
    commit_xid = conn.next_xid()
    await conn.send(msg(4, commit_xid, bundle_ctrl(9, 4, 3)))
    await conn.until("bundle_error", want_xid=commit_xid, others="bundle_error")
    # A bundle that fails at commit time: a match-all flow, then an in_port=1 flow of the same
    # table and priority with CHECK_OVERLAP. OVS reports the failing message's error (with its
    # xid) and OFPBFC_MSG_FAILED for the commit.
    await conn.request("bundle_open_reply", lambda x: msg(4, x, bundle_ctrl(10, 0, 3)))
    for match, flags in ((EMPTY_MATCH, 0), (IN_PORT_1_MATCH, 2)):
        add_xid = conn.next_xid()
        fm = flow_mod(51, 1, flags=flags, match=match)
        await conn.send(msg(4, add_xid, bundle_add(10, 3, msg(14, add_xid, fm))))
    commit_xid = conn.next_xid()
    await conn.send(msg(4, commit_xid, bundle_ctrl(10, 4, 3)))
    await conn.until("bundle_commit_failed", want_xid=commit_xid, others="bundle_commit_failed")
    # Committing a bundle that does not exist: OFPBFC_BAD_ID.
    await conn.request("bundle_error_bad_id", lambda x: msg(4, x, bundle_ctrl(99, 4, 3)))
    await conn.request("barrier_reply", lambda x: msg(20, x))
    # A port added while connected: OFPT_PORT_STATUS (ADD).
    await asyncio.to_thread(sbx.run, "ovs-vsctl", "add-port", "br0", "p9", "--", "set", "interface", "p9",
                            "type=dummy", "ofport_request=9")
    await conn.until("port_status", want_types=(12,))
    # A packet from port 4 hits the controller flow: OFPT_PACKET_IN.
    await asyncio.to_thread(sbx.run, "ovs-appctl", "netdev-dummy/receive", "p4",
                            "eth(src=0a:58:0a:f4:00:04,dst=0a:58:0a:f4:00:01),eth_type(0x0800),"
                            "ipv4(src=10.244.0.4,dst=10.244.0.1,proto=1,tos=0,ttl=64,frag=no),icmp(type=8,code=0)")
    await conn.until("packet_in", want_types=(10,))
    # A flow with send_flow_rem, deleted: OFPT_FLOW_REMOVED.
    await asyncio.to_thread(sbx.run, "ovs-ofctl", "-O", "OpenFlow13", "add-flow", "br0",
                            "table=60,priority=5,cookie=0x77,ip,nw_dst=10.1.2.3,send_flow_rem,actions=drop")
    await asyncio.to_thread(sbx.run, "ovs-ofctl", "-O", "OpenFlow13", "del-flows", "br0", "table=60")
    await conn.until("flow_removed", want_types=(11,))
    await conn.request("barrier_reply", lambda x: msg(20, x))


async def main(out_dir):
    sbx = Sandbox()
    out = {}
    done = asyncio.get_running_loop().create_future()
    loaded = asyncio.Event()

    async def handle(reader, writer):
        if done.done():
            writer.close()
            return
        try:
            await conversation(Conn(reader, writer, out), sbx, loaded)
            done.set_result(None)
        except Exception as e:  # noqa: BLE001 - report any failure of the conversation
            if not done.done():
                done.set_exception(e)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        sbx.start()
        ports = []
        for n in range(2, 6):
            ports += ["--", "add-port", "br0", f"p{n}", "--", "set", "interface", f"p{n}", "type=dummy",
                      f"ofport_request={n}"]
        sbx.run("ovs-vsctl", "--", "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy",
                "protocols=OpenFlow13", "fail-mode=secure", "other-config:datapath-id=00000000000000a1",
                "other-config:disable-in-band=true", *ports, "--", "set-controller", "br0",
                f"tcp:127.0.0.1:{port}")
        await asyncio.to_thread(sbx.run, "ovs-ofctl", "-O", "OpenFlow13", "add-groups", "br0", "-", input=GROUPS)
        await asyncio.to_thread(sbx.run, "ovs-ofctl", "-O", "OpenFlow13", "--bundle", "add-flows", "br0", "-",
                                input=flows_text())
        loaded.set()
        await asyncio.wait_for(done, 60)
    finally:
        server.close()
        sbx.stop()
    os.makedirs(out_dir, exist_ok=True)
    for label, lines in sorted(out.items()):
        with open(os.path.join(out_dir, f"{label}.hex"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{label}: {len(lines)} message(s)")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "data", "msg")
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else default))
