//! Smoke tests of `NetnsLab`: real packets through three userspace-datapath Open vSwitches.

mod common;

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
