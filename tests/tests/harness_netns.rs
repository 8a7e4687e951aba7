//! Smoke tests of `NetnsLab`: real packets through three userspace-datapath Open vSwitches.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{lab_with_pods, pod_ip};
use flowmesh_tests::OfHandshakeListener;

/// Three nodes, one pod each, hand-written VXLAN flows: pods on different nodes ping each
/// other and a 5 MB TCP stream crosses VXLAN. Removing the tunnel flow breaks the ping.
#[test]
fn three_node_lab_ping_and_tcp_across_vxlan() {
    let t0 = Instant::now();
    let (lab, pods) = lab_with_pods(3);
    println!(
        "netns lab: 3 nodes up in {:.3}s (start()), with pods and flows {:.3}s",
        lab.startup_time().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    let [p1, p2, p3] = &pods[..] else {
        panic!("three pods");
    };
    for (from, to) in [(p1, p2), (p1, p3), (p3, p2)] {
        let st = lab.ping(&from.ns, IpAddr::V4(to.ip), 3).expect("ping runs");
        println!(
            "ping {} -> {}: {}/{} replies",
            from.ip, to.ip, st.received, st.transmitted
        );
        assert!(
            st.received >= 1,
            "no reply {} -> {}:\n{}",
            from.ip,
            to.ip,
            st.output
        );
        assert!(
            st.output.contains("ttl=63"),
            "routed by dec_ttl flows:\n{}",
            st.output
        );
    }

    let xfer = lab
        .tcp_transfer(p1, p3, 5001, 5 << 20)
        .expect("TCP transfer across VXLAN");
    assert_eq!(xfer.bytes, 5 << 20);
    println!(
        "tcp {} -> {}: {} bytes in {:.3}s = {:.0} Mbit/s",
        p1.ip,
        p3.ip,
        xfer.bytes,
        xfer.elapsed.as_secs_f64(),
        xfer.mbit_per_s()
    );

    // The underlay really carried VXLAN: node 1's tunnel datapath flow exists.
    let dp = lab
        .node(1)
        .expect("node 1")
        .ovs()
        .appctl(["dpctl/dump-flows"])
        .expect("dpctl");
    assert!(dp.contains("tnl_push("), "{dp}");

    // The controller namespace is reachable from every node over the underlay: each node's
    // br0 completes an OpenFlow handshake with a listener there (datapath id = node number).
    let listener =
        OfHandshakeListener::bind_in_netns(lab.controller_ns(), IpAddr::V4(lab.controller_ip()))
            .expect("listener in the controller namespace");
    lab.set_controller_all(&listener.target())
        .expect("set controllers");
    let got = listener
        .wait_for(3, Duration::from_secs(10))
        .expect("3 nodes reach the controller namespace");
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);

    // Without node 1's route to node 2's pods, the ping must fail.
    let n1 = lab.node(1).expect("node 1");
    n1.ovs()
        .ofctl([
            "--strict",
            "del-flows",
            lab.bridge(),
            "table=10,priority=100,ip,nw_dst=10.244.2.0/24",
        ])
        .expect("del-flows");
    let st = lab
        .ping(&p1.ns, IpAddr::V4(pod_ip(2)), 2)
        .expect("ping runs");
    assert_eq!(st.received, 0, "{}", st.output);
}

/// An underlay ARP request for a node's address is answered by the node's `br-phy` alone, so
/// the tunnel neighbour OVS snoops from the answer is always `br-phy`'s MAC. The chaos soak
/// (issue 33) found the node's kernel answering a second time from `eth0` (`br-phy`'s port,
/// with a MAC of its own): when OVS snooped that answer last, every VXLAN packet to the node
/// went to a MAC `br-phy` does not own and was dropped, and traffic between two nodes stopped
/// for up to 135 s after a br0 deletion set off ARP.
#[test]
fn underlay_arp_is_answered_by_br_phy_alone() {
    let (lab, pods) = lab_with_pods(3);
    for (asker, target) in [(1, 2), (1, 3), (2, 1), (2, 3), (3, 1), (3, 2)] {
        let a = lab.node(asker).expect("node");
        let t = lab.node(target).expect("node");
        let ip = t.underlay_ip().to_string();
        let out = lab
            .run_in(
                a.ns(),
                "arping",
                &["-c", "2", "-w", "3", "-I", "br-phy", &ip],
            )
            .expect("arping answered");
        // "42 bytes from 0a:00:00:00:00:02 (172.31.X.2): index=0 time=..."
        let macs: BTreeSet<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" bytes from ")?.1.split_whitespace().next())
            .collect();
        assert_eq!(
            macs,
            BTreeSet::from([t.phy_mac()]),
            "node{asker} asking for node{target}'s {ip}:\n{out}"
        );
    }

    // OVS snooped those answers (they crossed each asker's br-phy): every node's tunnel
    // neighbours are still the other nodes' br-phy MACs, and every pair of pods talks.
    for (i, j) in [(0usize, 1usize), (1, 2), (2, 0)] {
        let t = Instant::now();
        while lab
            .ping(&pods[i].ns, IpAddr::V4(pods[j].ip), 1)
            .expect("ping runs")
            .received
            == 0
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "pod {} -> {}: no traffic after the ARP exchanges",
                pods[i].ip,
                pods[j].ip
            );
        }
    }
    for n in 1..=3 {
        let shown = lab
            .node(n)
            .expect("node")
            .ovs()
            .appctl(["tnl/neigh/show"])
            .expect("show");
        for m in (1..=3).filter(|&m| m != n) {
            let other = lab.node(m).expect("node");
            let ip = other.underlay_ip().to_string();
            let entry = shown
                .lines()
                .find(|l| l.split_whitespace().next() == Some(ip.as_str()));
            assert!(
                entry.is_some_and(|l| l.split_whitespace().nth(1) == Some(other.phy_mac())),
                "node{n}'s neighbour for node{m} ({ip}) is not its br-phy MAC {}:\n{shown}",
                other.phy_mac()
            );
        }
    }
}
