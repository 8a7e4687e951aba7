//! The trace judge of `pipeline_ovs`: a packet goes through the topology simulator and through
//! `ofproto/trace` on the real bridges (continuing on the receiving bridge after each VXLAN
//! hop, with the packet as that bridge's vxlan0 hands it over), and the two verdicts are
//! compared node by node: the flows matched (table, priority, cookie) and the outputs (pod
//! port, tun0, or vxlan0 with tun_id and tun_dst; none = dropped).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use flowmesh_tests::{BridgeSpec, OvsSandbox};
use topology::sim::L3;
use topology::{ClusterModel, FlowSet, Packet, Pipeline, Simulator};

/// Every node's FlowSet, computed by one pipeline.
pub fn flowsets(m: &ClusterModel) -> BTreeMap<String, FlowSet> {
    let mut p = Pipeline::new();
    m.nodes()
        .map(|n| (n.name.clone(), p.node_flows(m, &n.name).expect("flows")))
        .collect()
}

/// Our own rendering of a FlowSet, normalized like `OvsSandbox::dump_flows`.
pub fn rendered(fs: &FlowSet) -> Vec<String> {
    let mut v: Vec<String> = fs.iter().map(|f| f.to_string()).collect();
    v.sort();
    v
}

/// A sandbox with one bridge per node (its datapath id, VXLAN address and pod ports).
pub fn sandbox(m: &ClusterModel) -> OvsSandbox {
    let mut b = OvsSandbox::builder().vxlan_dst_port(m.config().vxlan_port);
    for n in m.nodes() {
        let mut spec = BridgeSpec::new(n.name.clone(), n.dpid).local_ip(n.ip);
        for p in m.pods_on_node(&n.name) {
            spec = spec.pod(p.port_name.clone(), p.ofport);
        }
        b = b.bridge(spec);
    }
    b.start().expect("sandbox starts")
}

/// A sandbox holding every node's flows.
#[allow(dead_code)] // not every test binary using the judge installs flows without groups
pub fn installed(m: &ClusterModel, sets: &BTreeMap<String, FlowSet>) -> OvsSandbox {
    let sbx = sandbox(m);
    for (node, fs) in sets {
        sbx.add_flows(node, &rendered(fs))
            .unwrap_or_else(|e| panic!("{node}: OVS refuses our flows: {e}"));
    }
    sbx
}

/// One connection to ovs-vswitchd's unixctl socket, kept open for every `ofproto/trace`:
/// the same JSON-RPC `ovs-appctl` speaks, without a process per trace (hundreds of traces run
/// on every commit).
pub struct Appctl {
    stream: std::io::BufReader<std::os::unix::net::UnixStream>,
    next_id: u64,
}

impl Appctl {
    /// Connects to the sandbox's ovs-vswitchd control socket.
    pub fn connect(sbx: &OvsSandbox) -> Self {
        let path = sbx.ovs().vswitchd_ctl();
        let stream = std::os::unix::net::UnixStream::connect(&path)
            .unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("read timeout");
        Appctl {
            stream: std::io::BufReader::new(stream),
            next_id: 0,
        }
    }

    /// `ovs-appctl ofproto/trace BRIDGE FLOW`, parsed.
    #[allow(dead_code)] // not every test binary using the judge traces without conntrack
    pub fn trace(&mut self, bridge: &str, flow: &str) -> Result<flowmesh_tests::Trace, String> {
        self.trace_ct(bridge, flow, &[])
    }

    /// `ovs-appctl ofproto/trace BRIDGE FLOW --ct-next S1 --ct-next S2 ...`, parsed: each
    /// recirculation through `ct` resumes with the next of `ct_next` (then OVS's default
    /// `trk,new`).
    pub fn trace_ct(
        &mut self,
        bridge: &str,
        flow: &str,
        ct_next: &[&str],
    ) -> Result<flowmesh_tests::Trace, String> {
        use serde::Deserialize as _;
        use std::io::Write as _;
        self.next_id += 1;
        let id = self.next_id;
        let mut params = vec![bridge.to_owned(), flow.to_owned()];
        for s in ct_next {
            params.push("--ct-next".to_owned());
            params.push((*s).to_owned());
        }
        let req = serde_json::json!({"method": "ofproto/trace", "params": params, "id": id});
        let mut bytes = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        self.stream
            .get_mut()
            .write_all(&bytes)
            .map_err(|e| format!("unixctl write: {e}"))?;
        // One reply object; no `end()`: the connection stays open.
        let mut de = serde_json::Deserializer::from_reader(&mut self.stream);
        let reply =
            serde_json::Value::deserialize(&mut de).map_err(|e| format!("unixctl reply: {e}"))?;
        if reply["id"] != serde_json::json!(id) {
            return Err(format!("unixctl reply for another request: {reply}"));
        }
        match (&reply["error"], &reply["result"]) {
            (serde_json::Value::Null, serde_json::Value::String(text)) => {
                flowmesh_tests::Trace::parse(text.as_str()).map_err(|e| e.to_string())
            }
            (err, _) => Err(format!("ofproto/trace {bridge} {flow}: {err}")),
        }
    }
}

/// One output a node's pipeline performed, as both judges can say it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Out {
    /// A pod port (or any port other than vxlan0 and tun0).
    Port(u32),
    /// tun0: the node's host.
    Host,
    /// vxlan0 with the tunnel metadata set before the output.
    Vxlan { tun_id: u64, tun_dst: Ipv4Addr },
    /// Anything else (controller, loop, ...).
    Other(String),
}

/// What one node did with one packet: the flows it matched and where it sent the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVerdict {
    /// Per table visit: `t<table> p<priority> <cookie>` of the matched flow, or `t<table> miss`;
    /// a `conj_id` flow (reached by a completed conjunctive match) is `t<table> p<priority>
    /// conj`, its cookie kept in `conj`.
    path: Vec<String>,
    /// Outputs, sorted; empty = dropped.
    outs: Vec<Out>,
    /// The `controller(...)` copies made (audit logging), in order: `id=N,userdata=XX.XX..`.
    logged: Vec<String>,
    /// Cookies of the `conj_id` flows matched, in order. Not part of the verdict: when a packet
    /// completes several conjunctions of one priority (two policies allowing it), which one
    /// Open vSwitch re-looks up is unspecified (ovs-fields(7), "Conjunctive flows must not
    /// overlap ... unpredictable results"), so only the path and outputs must agree.
    conj: Vec<u64>,
}

impl NodeVerdict {
    fn agrees(&self, other: &NodeVerdict) -> bool {
        self.path == other.path && self.outs == other.outs && self.logged == other.logged
    }

    /// The copies to a controller this node made.
    #[allow(dead_code)] // not every test binary using the judge logs
    pub fn logged(&self) -> &[String] {
        &self.logged
    }
}

fn hit(table: u8, flow: Option<(u16, u64)>) -> String {
    match flow {
        Some((priority, cookie)) => format!("t{table} p{priority} {cookie:#x}"),
        None => format!("t{table} miss"),
    }
}

/// (node, table, priority, cookie) of every `conj_id` flow.
type ConjFlows = std::collections::BTreeSet<(String, u8, u16, u64)>;

/// The simulator's verdict for `node` (a trace may cross several nodes).
fn sim_verdict(t: &topology::Trace, node: &str, conj_flows: &ConjFlows) -> NodeVerdict {
    use topology::Outcome as O;
    let mut conj = Vec::new();
    let path = t
        .steps
        .iter()
        .filter(|s| s.node == node)
        .map(|s| match s.priority {
            // The simulator's final hit at a conjunction's priority is never a clause flow.
            Some(p) if conj_flows.contains(&(node.to_owned(), s.table, p, s.cookie)) => {
                conj.push(s.cookie);
                format!("t{} p{p} conj", s.table)
            }
            _ => hit(s.table, s.priority.map(|p| (p, s.cookie))),
        })
        .collect();
    let mut outs: Vec<Out> = t
        .outcomes
        .iter()
        .filter_map(|o| match o {
            O::Delivered {
                node: n, ofport, ..
            } if n == node => Some(Out::Port(*ofport)),
            O::UnknownPort { node: n, ofport } if n == node => Some(Out::Port(*ofport)),
            O::Host { node: n } if n == node => Some(Out::Host),
            O::Loop { node: n } if n == node => Some(Out::Other("loop".into())),
            _ => None,
        })
        .collect();
    outs.extend(
        t.tunnels
            .iter()
            .filter(|h| h.from == node)
            .map(|h| Out::Vxlan {
                tun_id: h.tun_id,
                tun_dst: h.tun_dst,
            }),
    );
    outs.sort();
    let logged = t
        .packet_ins
        .iter()
        .filter(|c| c.node == node)
        .map(|c| logged_text(c.controller_id, &c.userdata))
        .collect();
    NodeVerdict {
        path,
        outs,
        conj,
        logged,
    }
}

/// A controller copy as both judges describe it.
fn logged_text(id: u16, userdata: &[u8]) -> String {
    let hex: Vec<String> = userdata.iter().map(|b| format!("{b:02x}")).collect();
    format!("id={id},userdata={}", hex.join("."))
}

/// The controller copy an `ofproto/trace` action line made (`controller(max_len=128,id=N,
/// userdata=XX.XX,meter_id=1)`), if it is one.
fn logged_in_trace(action: &str) -> Option<String> {
    let inner = action
        .trim()
        .strip_prefix("controller(")?
        .strip_suffix(')')?;
    let mut id = 0u16;
    let mut userdata = Vec::new();
    for part in inner.split(',') {
        if let Some(v) = part.strip_prefix("id=") {
            id = v.parse().ok()?;
        } else if let Some(v) = part.strip_prefix("userdata=") {
            userdata = v
                .split('.')
                .map(|b| u8::from_str_radix(b, 16))
                .collect::<Result<_, _>>()
                .ok()?;
        }
    }
    Some(logged_text(id, &userdata))
}

/// `"ip,nw_dst=10.1.0.0/16, priority 100, cookie 0x1"` -> (100, 1); no cookie -> 0.
fn rule_priority_cookie(rule: &str) -> Option<(u16, u64)> {
    let (_, tail) = rule.rsplit_once("priority ")?;
    let (prio, cookie) = match tail.split_once(", cookie ") {
        Some((p, c)) => (
            p,
            u64::from_str_radix(c.trim().trim_start_matches("0x"), 16).ok()?,
        ),
        None => (tail, 0),
    };
    Some((prio.trim().parse().ok()?, cookie))
}

/// OVS's verdict for `bridge` from a parsed `ofproto/trace`.
fn ovs_verdict(t: &flowmesh_tests::Trace, bridge: &str) -> NodeVerdict {
    use flowmesh_tests::OutputPort as P;
    let mut conj = Vec::new();
    let path = t
        .steps
        .iter()
        .filter(|s| s.bridge == bridge)
        .map(|s| {
            let rule = s.rule.as_deref().map(|r| {
                rule_priority_cookie(r).unwrap_or_else(|| panic!("unparsed trace rule {r:?}"))
            });
            match (s.rule.as_deref(), rule) {
                (Some(r), Some((p, cookie)))
                    if r.starts_with("conj_id=") || r.contains(",conj_id=") =>
                {
                    conj.push(cookie);
                    format!("t{} p{p} conj", s.table)
                }
                _ => hit(s.table, rule),
            }
        })
        .collect();
    let mut outs: Vec<Out> = t
        .outputs_on(bridge)
        // A copy to a controller is judged as `logged` (with its id and userdata).
        .filter(|o| o.port != P::Controller)
        .map(|o| match (&o.port, &o.tunnel) {
            (P::Port(1), tunnel) => {
                let tunnel = tunnel.clone().unwrap_or_default();
                Out::Vxlan {
                    tun_id: tunnel.tun_id.unwrap_or(0),
                    tun_dst: tunnel.tun_dst.unwrap_or(Ipv4Addr::UNSPECIFIED),
                }
            }
            (P::Port(2), _) => Out::Host,
            (P::Port(p), _) => Out::Port(*p),
            (other, _) => Out::Other(format!("{other:?}")),
        })
        .collect();
    outs.sort();
    let logged = t
        .steps
        .iter()
        .filter(|s| s.bridge == bridge)
        .flat_map(|s| s.actions.iter().filter_map(|a| logged_in_trace(a)))
        .collect();
    NodeVerdict {
        path,
        outs,
        conj,
        logged,
    }
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A simulator packet as an `ofproto/trace` flow (protocol keyword first: OVS checks
/// prerequisites left to right).
pub fn trace_flow(p: &Packet) -> String {
    let (proto, fields) = match p.l3 {
        L3::Arp {
            op,
            spa,
            tpa,
            sha,
            tha,
        } => (
            "arp".to_owned(),
            format!(
                "arp_op={op},arp_spa={spa},arp_tpa={tpa},arp_sha={},arp_tha={}",
                mac_text(sha),
                mac_text(tha)
            ),
        ),
        L3::Ipv4 {
            src,
            dst,
            proto,
            src_port,
            dst_port,
        } => {
            let (kw, l4) = match proto {
                1 => ("icmp".to_owned(), ",icmp_type=8,icmp_code=0".to_owned()),
                // `tp_src` means tcp_src to OVS's exact-flow parser: name each protocol's own.
                6 => (
                    "tcp".to_owned(),
                    format!(",tcp_src={src_port},tcp_dst={dst_port}"),
                ),
                17 => (
                    "udp".to_owned(),
                    format!(",udp_src={src_port},udp_dst={dst_port}"),
                ),
                132 => (
                    "sctp".to_owned(),
                    format!(",sctp_src={src_port},sctp_dst={dst_port}"),
                ),
                other => (format!("ip,nw_proto={other}"), String::new()),
            };
            (kw, format!("nw_src={src},nw_dst={dst},nw_ttl=64{l4}"))
        }
    };
    let mut s = format!("{proto},in_port={}", p.in_port);
    if p.in_port == 1 {
        s += &format!(
            ",tun_id={:#x},tun_src={},tun_dst={}",
            p.tun_id, p.tun_src, p.tun_dst
        );
    }
    s += &format!(
        ",dl_src={},dl_dst={},{fields}",
        mac_text(p.eth_src),
        mac_text(p.eth_dst)
    );
    // A packet that arrives already tracked (as after a recirculation).
    if p.ct_state != 0 {
        s += &format!(
            ",ct_state={:#x},ct_zone={},ct_mark={:#x}",
            p.ct_state, p.ct_zone, p.ct_mark
        );
    }
    s
}

/// The `--ct-next` states of one leg (the packet on `node`): the caller's `given` states stand
/// for the default zone's lookups, in order (OVS's default `trk,new` once they run out); a
/// lookup in another zone (the service zone, which every packet to a local pod crosses first)
/// takes the state the simulator's own conntrack gave it, so callers keep describing only the
/// connections they set up.
fn leg_ct_next(t: &topology::Trace, node: &str, given: &[&str]) -> Vec<String> {
    let mut given = given.iter();
    let mut out: Vec<String> = Vec::new();
    for l in t.conntrack.iter().filter(|l| l.node == node) {
        out.push(if l.zone == 0 {
            given
                .next()
                .map_or_else(|| "trk,new".to_owned(), |s| (*s).to_owned())
        } else {
            ct_state_text(l.state)
        });
    }
    out.extend(given.map(|s| (*s).to_owned()));
    out
}

/// A ct_state as `--ct-next` takes it (`trk,est,rpl`).
fn ct_state_text(state: u32) -> String {
    use ofproto::oxm::ct_state::{DNAT, EST, INV, NEW, REL, RPL, SNAT, TRK};
    [
        (TRK, "trk"),
        (NEW, "new"),
        (EST, "est"),
        (REL, "rel"),
        (RPL, "rpl"),
        (INV, "inv"),
        (SNAT, "snat"),
        (DNAT, "dnat"),
    ]
    .iter()
    .filter(|(bit, _)| state & bit != 0)
    .map(|(_, name)| *name)
    .collect::<Vec<_>>()
    .join(",")
}

/// Runs every packet through the simulator and through `ofproto/trace` on the real bridges
/// (continuing on the receiving bridge after each VXLAN hop) and records every disagreement.
pub struct Judge {
    ovs: Appctl,
    sim: Simulator,
    conj_flows: ConjFlows,
    /// Packets judged.
    pub packets: usize,
    /// Packets on which every node's verdict agreed.
    pub agreed: usize,
    /// Node verdicts compared (a VXLAN hop adds one).
    pub node_checks: usize,
    /// Node verdicts that ended in a select group's `dp_hash` recirculation (path compared,
    /// buckets not followed by `ofproto/trace`).
    pub select_recircs: usize,
    /// One report per disagreeing node verdict (both verdicts and OVS's raw trace).
    pub mismatches: Vec<String>,
    /// Agreeing node verdicts where the simulator and Open vSwitch credited different
    /// `conj_id` flows (overlapping conjunctions; see [`NodeVerdict::conj`]).
    pub conj_choices: Vec<String>,
}

impl Judge {
    pub fn new(sbx: &OvsSandbox, m: &ClusterModel, sets: &BTreeMap<String, FlowSet>) -> Self {
        let conj_flows = sets
            .iter()
            .flat_map(|(node, fs)| {
                fs.iter()
                    .filter(|f| f.to_string().contains("conj_id="))
                    .map(move |f| (node.clone(), f.table, f.priority, f.cookie))
            })
            .collect();
        Judge {
            ovs: Appctl::connect(sbx),
            sim: Simulator::from_model(m, sets),
            conj_flows,
            conj_choices: Vec::new(),
            packets: 0,
            agreed: 0,
            node_checks: 0,
            select_recircs: 0,
            mismatches: Vec::new(),
        }
    }

    /// Judge `p` entering `node` as the first packet of a connection (both conntracks empty:
    /// OVS's trace resumes every `ct` with `trk,new`); returns the simulator's trace for
    /// further expectations.
    #[allow(dead_code)]
    pub fn check(&mut self, label: &str, node: &str, p: Packet) -> topology::Trace {
        self.sim.flush_conntrack();
        self.check_ct(label, node, p, &[])
    }

    /// Forget every connection the simulator's switches committed (a fresh conntrack, as
    /// OVS's default `--ct-next trk,new` assumes).
    #[allow(dead_code)] // not every test binary using the judge runs conntrack
    pub fn flush_conntrack(&mut self) {
        self.sim.flush_conntrack();
    }

    /// Run `p` through the simulator only (e.g. to commit a connection before judging its
    /// established and reply packets); nothing is compared or counted.
    #[allow(dead_code)]
    pub fn prime(&mut self, node: &str, p: Packet) -> topology::Trace {
        self.sim.trace(node, p)
    }

    /// Like [`Judge::check`], with the conntrack states `ofproto/trace` resumes with after
    /// each `ct` recirculation on every node the packet visits (`--ct-next`); the simulator
    /// uses its own conntrack table, so the caller prepares it (flush or prime) to match.
    pub fn check_ct(
        &mut self,
        label: &str,
        node: &str,
        p: Packet,
        ct_next: &[&str],
    ) -> topology::Trace {
        let t = self.sim.trace(node, p.clone());
        let mut legs = vec![(node.to_owned(), p)];
        legs.extend(
            t.tunnels
                .iter()
                .filter_map(|h| h.to.clone().map(|to| (to, h.received.clone()))),
        );
        let mut ok = true;
        for (n, packet) in legs {
            let flow = trace_flow(&packet);
            let leg_ct = leg_ct_next(&t, &n, ct_next);
            let ct_next: Vec<&str> = leg_ct.iter().map(String::as_str).collect();
            let ct_next = ct_next.as_slice();
            let ovs = self
                .ovs
                .trace_ct(&n, &flow, ct_next)
                .unwrap_or_else(|e| panic!("{label}: ofproto/trace {n} {flow}: {e}"));
            let (ours, theirs) = (sim_verdict(&t, &n, &self.conj_flows), ovs_verdict(&ovs, &n));
            self.node_checks += 1;
            if ours.agrees(&theirs) && ours.conj != theirs.conj {
                self.conj_choices.push(format!(
                    "{label}: on {n}: simulator credits {:x?}, OVS {:x?}",
                    ours.conj, theirs.conj
                ));
            }
            // A select group under the userspace datapath's default `dp_hash` method ends
            // OVS's trace in `hash(...),recirc(...)` before any bucket runs: only the path up
            // to the group is comparable there (the buckets are compared as dump-groups text).
            let select_recirc = ovs.raw.contains("hash(sym_l4(");
            self.select_recircs += usize::from(select_recirc);
            let agrees = if select_recirc {
                ours.path == theirs.path && theirs.outs.is_empty()
            } else {
                ours.agrees(&theirs)
            };
            if !agrees {
                ok = false;
                self.mismatches.push(format!(
                    "{label}: on {n} with {flow}{}\n  simulator: {ours:?}\n  OVS:       {theirs:?}\n{}",
                    ct_next
                        .iter()
                        .map(|s| format!(" --ct-next {s}"))
                        .collect::<String>(),
                    ovs.raw
                ));
            }
        }
        self.packets += 1;
        self.agreed += usize::from(ok);
        t
    }
}
