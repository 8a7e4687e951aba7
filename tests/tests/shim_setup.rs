//! flowmesh-shim node setup against a fake node API in a one-node `NetnsLab` (no tun0 from the
//! lab: the shim makes it): what it builds, and that running it again changes nothing.

mod shim_common;

use std::time::Instant;

use flowmesh_tests::cni::{shim_setup_once, ShimOptions};
use flowmesh_tests::NetnsLab;
use shim_common::{Call, FakeNodeApi};

/// OVSDB, addresses, routes, nftables and forwarding of node 1, as text.
fn snapshot(lab: &NetnsLab) -> Vec<String> {
    let n = lab.node(1).expect("node 1");
    let ns = n.ns();
    let vsctl = |args: &[&str]| n.ovs().vsctl(args).expect("ovs-vsctl");
    vec![
        vsctl(&[
            "--columns=_uuid,name,datapath_type,fail_mode,protocols,other_config,controller",
            "list",
            "Bridge",
            "br0",
        ]),
        vsctl(&[
            "--columns=_uuid,name,type,ofport,ofport_request,options,mtu_request",
            "list",
            "Interface",
            "vxlan0",
            "tun0",
        ]),
        vsctl(&["get-controller", "br0"]),
        // Its UUID too: a repair of a setting must not replace the row (the switch would drop
        // its connection).
        vsctl(&["--columns=_uuid,target,max_backoff", "list", "Controller"]),
        vsctl(&["list-ports", "br0"]),
        // IPv4 only: the kernel's own IPv6 link-local address carries a transient
        // `tentative` while duplicate address detection runs (the shim sets none of it).
        lab.run_in(ns, "ip", &["-4", "addr", "show", "dev", "tun0"])
            .expect("ip addr"),
        lab.run_in(ns, "ip", &["route", "show", "table", "main"])
            .expect("ip route"),
        lab.run_in(ns, "nft", &["list", "table", "ip", "flowmesh"])
            .expect("nft list"),
        lab.run_in(ns, "cat", &["/proc/sys/net/ipv4/ip_forward"])
            .expect("sysctl"),
    ]
}

#[test]
fn shim_setup_builds_the_node_and_rerunning_changes_nothing() {
    let lab = NetnsLab::builder()
        .nodes(1)
        .tun0(false)
        .start()
        .expect("lab");
    let fake = FakeNodeApi::start(&lab);
    let node = lab.node(1).expect("node 1");
    // Start from an empty OVSDB: the shim creates br0 itself.
    node.ovs().vsctl(["del-br", "br0"]).expect("del-br");
    let mut opts = ShimOptions::new(fake.url.clone());
    let of_target = format!("tcp:{}:6653", lab.controller_ip());
    opts.openflow_target = Some(of_target.clone());

    let t0 = Instant::now();
    let first = shim_setup_once(&lab, 1, &opts).expect("first setup");
    let t_first = t0.elapsed();
    println!(
        "first setup ({:.0} ms): {first:#?}",
        t_first.as_secs_f64() * 1e3
    );
    assert!(first.iter().any(|c| c == "create bridge br0"), "{first:?}");
    assert!(first.iter().any(|c| c.starts_with("nftables")), "{first:?}");
    // NetworkManager is told to leave the node's devices alone (the lab's conf.d).
    let nm = flowmesh_tests::cni::networkmanager_dir(&lab, 1).join("flowmesh.conf");
    assert!(
        first.iter().any(|c| c.starts_with("NetworkManager")),
        "{first:?}"
    );
    let conf = std::fs::read_to_string(&nm).expect("NetworkManager file");
    assert!(
        conf.contains("[keyfile]")
            && conf.contains(
                "unmanaged-devices=interface-name:br0;interface-name:vxlan0;interface-name:tun0;"
            ),
        "{conf}"
    );
    let before = snapshot(&lab);

    let t0 = Instant::now();
    let second = shim_setup_once(&lab, 1, &opts).expect("second setup");
    println!(
        "second setup ({:.0} ms): {second:?}",
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert!(
        second.is_empty(),
        "a correct node must not be changed: {second:?}"
    );
    assert_eq!(snapshot(&lab), before, "state changed on re-run");

    // What was built.
    let [bridge, ifaces, controller, controller_row, _ports, addr, routes, nft, fwd] = &before[..]
    else {
        panic!("snapshot shape");
    };
    for want in [
        "datapath_type       : netdev",
        "fail_mode           : secure",
        "protocols           : [OpenFlow13]",
        "datapath-id=\"0000000000000001\"",
        "disable-in-band=\"true\"",
    ] {
        assert!(bridge.contains(want), "{want} not in\n{bridge}");
    }
    assert_eq!(controller.trim(), of_target);
    // The switch retries its controller at least every second (Open vSwitch's own default
    // waits up to 8 s between attempts).
    assert!(
        controller_row.contains("max_backoff         : 1000"),
        "{controller_row}"
    );
    assert_eq!(node.ovs().ofport("vxlan0").expect("ofport"), 1);
    assert_eq!(node.ovs().ofport("tun0").expect("ofport"), 2);
    let local_ip = format!("local_ip=\"{}\"", lab.underlay_ip(1));
    for want in [
        "dst_port=\"4789\"",
        "key=flow",
        "remote_ip=flow",
        &local_ip,
        "mtu_request         : 1450",
    ] {
        assert!(ifaces.contains(want), "{want} not in\n{ifaces}");
    }
    assert!(addr.contains("inet 10.128.1.1/24"), "{addr}");
    assert!(addr.contains("mtu 1450"), "{addr}");
    assert!(
        routes.contains("10.128.0.0/14 dev tun0 proto static scope link"),
        "{routes}"
    );
    assert!(
        routes.contains("172.30.0.0/16 dev tun0 proto static scope link"),
        "{routes}"
    );
    assert!(
        !routes.contains("10.128.1.0/24"),
        "connected subnet route not removed:\n{routes}"
    );
    assert!(
        nft.contains("ip saddr @cluster-networks ip daddr != @cluster-networks masquerade"),
        "{nft}"
    );
    assert!(nft.contains("elements = { 10.128.0.0/14 }"), "{nft}");
    // Host firewall: the VXLAN port and tun0 in, tun0 forwarded, no redirects into tun0.
    for want in [
        "type filter hook input priority filter; policy accept;\n\t\tudp dport 4789 accept\n\t\tiifname \"tun0\" accept\n\t}",
        "type filter hook forward priority filter; policy accept;\n\t\tiifname \"tun0\" accept\n\t\toifname \"tun0\" accept\n\t}",
        "type filter hook output priority filter; policy accept;\n\t\toifname \"tun0\" icmp type redirect drop\n\t}",
    ] {
        assert!(nft.contains(want), "{want} not in\n{nft}");
    }
    assert_eq!(fwd.trim(), "1");
    let registers = fake
        .state()
        .calls
        .iter()
        .filter(|c| matches!(c, Call::Register(r) if r.name == "node1" && r.dpid == 1))
        .count();
    assert_eq!(registers, 2);

    // Damage three things: the shim repairs exactly those and the node is as before.
    node.ovs()
        .vsctl(["set", "Interface", "tun0", "mtu_request=1500"])
        .expect("break mtu");
    let uuid = node
        .ovs()
        .vsctl(["--bare", "--columns=_uuid", "list", "Controller"])
        .expect("controller uuid");
    node.ovs()
        .vsctl(["clear", "Controller", uuid.trim(), "max_backoff"])
        .expect("break max_backoff");
    lab.run_in(node.ns(), "ip", &["route", "del", "172.30.0.0/16"])
        .expect("break route");
    let third = shim_setup_once(&lab, 1, &opts).expect("repair");
    println!("repair: {third:?}");
    assert_eq!(third.len(), 3, "{third:?}");
    assert!(
        third
            .iter()
            .any(|c| c == &format!("controller {of_target}: max_backoff 1000 ms")),
        "{third:?}"
    );
    assert!(
        third.iter().any(|c| c.contains("mtu_request=1450")),
        "{third:?}"
    );
    assert!(
        third.iter().any(|c| c.contains("172.30.0.0/16")),
        "{third:?}"
    );
    assert_eq!(snapshot(&lab), before, "repair did not restore the node");

    // --uninstall removes what the shim set up, and a second one finds nothing left.
    let removed = flowmesh_tests::cni::shim_uninstall(&lab, 1, &opts).expect("uninstall");
    println!("uninstall: {removed:?}");
    assert_eq!(
        removed,
        [
            "bridge br0".to_string(),
            "nftables table ip flowmesh".into(),
            format!("NetworkManager: {}", nm.display()),
        ],
        "{removed:?}"
    );
    assert!(
        node.ovs().vsctl(["br-exists", "br0"]).is_err(),
        "br0 is still there"
    );
    assert!(lab
        .run_in(node.ns(), "nft", &["list", "table", "ip", "flowmesh"])
        .is_err());
    assert!(!nm.exists());
    let again = flowmesh_tests::cni::shim_uninstall(&lab, 1, &opts).expect("uninstall again");
    assert!(again.is_empty(), "{again:?}");
}
