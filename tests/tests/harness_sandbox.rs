//! Smoke tests of `OvsSandbox` against real Open vSwitch (dummy datapath).

use std::time::{Duration, Instant};

use flowmesh_tests::{BridgeSpec, OfHandshakeListener, OvsSandbox};

/// 50 bridges, each its own OpenFlow connection to a raw test listener: all 50 distinct
/// datapath ids finish HELLO + FEATURES.
#[test]
fn fifty_bridges_complete_the_openflow_handshake() {
    let listener = OfHandshakeListener::bind().expect("listener");
    let t0 = Instant::now();
    let sandbox = OvsSandbox::builder()
        .bridges((0..50).map(|i| BridgeSpec::numbered(i, 2)))
        .controller(listener.target())
        .start()
        .expect("sandbox starts");
    let started = t0.elapsed();
    let got = listener
        .wait_for(50, Duration::from_secs(15))
        .expect("50 handshakes");
    let all = t0.elapsed();
    let want: Vec<u64> = (1..=50).collect();
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), want);
    let t = sandbox.timings();
    // The listener stamps each FEATURES_REPLY relative to its bind, just before t0.
    let last = got.values().max().copied().unwrap_or_default();
    println!(
        "sandbox: daemons up {:.3}s, 50 bridges configured {:.3}s (start() returned {:.3}s), last of 50 handshakes at {:.3}s, wait_for returned {:.3}s",
        t.daemons_up.as_secs_f64(),
        t.bridges_configured.as_secs_f64(),
        started.as_secs_f64(),
        last.as_secs_f64(),
        all.as_secs_f64()
    );

    // The port layout is what the docs promise.
    let show = sandbox.ofctl(&["show", "br49"]).expect("ofctl show");
    assert!(show.contains(" 1(br49-vxlan0)"), "{show}");
    assert!(show.contains(" 2(br49-tun0)"), "{show}");
    assert!(show.contains(" 3(br49-pod1)"), "{show}");
    assert!(show.contains(" 4(br49-pod2)"), "{show}");
    assert!(show.contains("dpid:0000000000000032"), "{show}");
    let vx = sandbox
        .vsctl(&["get", "interface", "br49-vxlan0", "options"])
        .expect("options");
    assert!(vx.contains("local_ip=\"172.31.0.50\""), "{vx}");
    assert!(
        vx.contains("remote_ip=flow") && vx.contains("key=flow"),
        "{vx}"
    );
    assert_eq!(
        sandbox
            .vsctl(&["get", "bridge", "br0", "fail_mode"])
            .expect("fail_mode")
            .trim(),
        "secure"
    );
}

fn flows() -> Vec<String> {
    [
        "table=0,priority=100,in_port=3,dl_src=0a:58:0a:f4:00:03 actions=set_field:0x3->reg0,goto_table:10",
        "table=0,priority=0 actions=drop",
        "table=10,priority=100,ip,nw_dst=10.244.0.4 actions=set_field:0a:58:0a:f4:00:04->eth_dst,output:4",
        "table=10,priority=100,ip,nw_dst=10.244.1.0/24 actions=set_field:0x64->tun_id,set_field:172.31.0.2->tun_dst,output:1",
        "table=10,priority=50,ip,nw_dst=10.244.9.0/24 actions=group:7",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

const POD1: &str = "eth(src=0a:58:0a:f4:00:03,dst=0a:58:00:00:00:01),eth_type(0x0800)";

fn icmp_from_pod1(dst: &str) -> String {
    format!(
        "{POD1},ipv4(src=10.244.0.3,dst={dst},proto=1,tos=0,ttl=64,frag=no),icmp(type=8,code=0)"
    )
}

/// Hand-written flows judged three ways: parsed `ofproto/trace` verdicts, packets injected
/// with `netdev-dummy/receive` and read back from tx_pcap, and flow counters.
#[test]
fn trace_verdicts_and_packet_injection() {
    let sandbox = OvsSandbox::builder()
        .bridge(BridgeSpec::new("br0", 1).pod("pod1", 3).pod("pod2", 4))
        .bridge(BridgeSpec::new("br1", 2).pod("pod1", 3))
        .start()
        .expect("sandbox");
    sandbox
        .ofctl(&["add-group", "br0", "group_id=7,type=all,bucket=output:4"])
        .expect("group");
    sandbox.add_flows("br0", &flows()).expect("flows");
    let dumped = sandbox.dump_flows("br0").expect("dump");
    assert_eq!(dumped.len(), 5, "{dumped:?}");
    assert!(
        dumped.contains(&"priority=0 actions=drop".to_owned()),
        "{dumped:?}"
    );
    assert!(sandbox.dump_flows("br1").expect("dump br1").is_empty());
    assert_eq!(
        sandbox.dump_groups("br0").expect("groups"),
        vec!["group_id=7,type=all,bucket=actions=output:4".to_owned()]
    );

    // Output to a pod port.
    let t = sandbox
        .trace(
            "br0",
            "in_port=3,dl_src=0a:58:0a:f4:00:03,ip,nw_src=10.244.0.3,nw_dst=10.244.0.4",
        )
        .expect("trace");
    assert_eq!(t.output_ports(), vec![4], "{}", t.raw);
    assert!(t
        .final_datapath_actions()
        .contains("set(eth(dst=0a:58:0a:f4:00:04))"));
    // Tunnel: id and destination set before the output to vxlan (ofport 1).
    let t = sandbox
        .trace(
            "br0",
            "in_port=3,dl_src=0a:58:0a:f4:00:03,ip,nw_dst=10.244.1.7",
        )
        .expect("trace");
    let tun = t.tunnel_outputs(1);
    assert_eq!(tun.len(), 1, "{}", t.raw);
    assert_eq!(tun[0].tun_id, Some(100));
    assert_eq!(tun[0].tun_dst, Some("172.31.0.2".parse().expect("ip")));
    // Drop: unknown source MAC hits the priority-0 drop.
    let t = sandbox
        .trace(
            "br0",
            "in_port=3,dl_src=0a:58:0a:f4:00:99,ip,nw_dst=10.244.0.4",
        )
        .expect("trace");
    assert!(t.dropped() && t.datapath_drop(), "{}", t.raw);
    // Group bucket output.
    let t = sandbox
        .trace(
            "br0",
            "in_port=3,dl_src=0a:58:0a:f4:00:03,ip,nw_dst=10.244.9.1",
        )
        .expect("trace");
    assert_eq!(t.output_ports(), vec![4], "{}", t.raw);
    // A bad flow spec is a typed error carrying OVS's stderr.
    let err = sandbox
        .trace("br0", "in_port=3,bogus=1")
        .expect_err("bad flow");
    assert!(err.to_string().contains("bogus"), "{err}");

    // Real packets through the dummy datapath.
    let pcap2 = sandbox.capture_tx("br0", "pod2").expect("pcap");
    let before = sandbox
        .coverage_counter("netdev_received")
        .expect("coverage counter");
    sandbox
        .inject("br0", "pod1", &icmp_from_pod1("10.244.0.4"))
        .expect("inject");
    let frames = sandbox
        .wait_captured(&pcap2, 1, Duration::from_secs(5))
        .expect("frame on pod2");
    assert_eq!(
        frames[0].get(..6),
        Some(&[0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x04][..]),
        "dst MAC rewritten by the flow"
    );
    // A packet from an unknown MAC is dropped: the drop rule counts it, pod2 sees nothing more.
    let bad = icmp_from_pod1("10.244.0.4").replace("0a:58:0a:f4:00:03", "0a:58:0a:f4:00:99");
    sandbox.inject("br0", "pod1", &bad).expect("inject");
    let drop_hits = || -> u64 {
        let text = sandbox.ofctl(&["dump-flows", "br0"]).expect("dump");
        text.lines()
            .find(|l| l.ends_with("priority=0 actions=drop"))
            .and_then(|l| l.split("n_packets=").nth(1))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .expect("drop rule with n_packets")
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while drop_hits() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(drop_hits(), 1);
    assert_eq!(sandbox.captured(&pcap2).expect("pcap").len(), 1);
    // Coverage counters are folded in by vswitchd's main loop: poll briefly.
    let mut after = before;
    let deadline = Instant::now() + Duration::from_secs(5);
    while after < before + 2 && Instant::now() < deadline {
        after = sandbox
            .coverage_counter("netdev_received")
            .expect("coverage");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        after >= before + 2,
        "netdev_received counts both injected packets: {before} -> {after}"
    );
}

/// Ports come and go; vswitchd restarts keep the bridges but lose the flows.
#[test]
fn ports_and_vswitchd_restart() {
    let mut sandbox = OvsSandbox::builder()
        .bridge(BridgeSpec::numbered(0, 1))
        .start()
        .expect("sandbox");
    let name = sandbox.add_port("br0", "extra", 9).expect("add port");
    assert_eq!(name, "br0-extra");
    assert_eq!(sandbox.ovs().ofport("br0-extra").expect("ofport"), 9);
    sandbox.del_port("br0", "extra").expect("del port");
    assert!(sandbox.ovs().ofport("br0-extra").is_err());

    sandbox
        .add_flows("br0", &["priority=5,ip actions=output:3".to_owned()])
        .expect("flow");
    assert_eq!(sandbox.dump_flows("br0").expect("dump").len(), 1);
    let old = sandbox.vswitchd_pid().expect("running");
    sandbox.restart_vswitchd().expect("restart");
    assert_ne!(sandbox.vswitchd_pid(), Some(old));
    assert!(
        sandbox.dump_flows("br0").expect("dump").is_empty(),
        "flows gone after restart"
    );
    sandbox.kill_vswitchd();
    assert!(sandbox.vswitchd_pid().is_none());
    assert!(
        sandbox.dump_flows("br0").is_err(),
        "no vswitchd, no OpenFlow"
    );
    sandbox.restart_vswitchd().expect("start again after kill");
    assert!(sandbox
        .ofctl(&["show", "br0"])
        .expect("show")
        .contains("3(br0-pod1)"));
}
