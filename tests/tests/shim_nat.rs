//! Host side of a shim-wired pod with hand-written patch flows (pod port <-> tun0, no
//! controller): the pod reaches its gateway (tun0), and a host outside the cluster answers
//! the pod although it has no route back to the pod network, because the node masquerades
//! pod traffic to its own address.

mod shim_common;

use std::net::{IpAddr, Ipv4Addr};

use flowmesh_tests::cni::{add_pod_via_cni, start_shim, ShimOptions};
use flowmesh_tests::NetnsLab;
use shim_common::FakeNodeApi;

#[test]
fn pod_reaches_gateway_and_outside_host_sees_the_node_address() {
    let lab = NetnsLab::builder()
        .nodes(1)
        .tun0(false)
        .start()
        .expect("lab");
    let fake = FakeNodeApi::start(&lab);
    let shim = start_shim(&lab, 1, &ShimOptions::new(fake.url.clone())).expect("shim");
    let pod = add_pod_via_cni(&lab, 1, &shim, "ns1", "p1").expect("pod");
    let node = lab.node(1).expect("node");
    let ofport = node.ovs().ofport(&pod.host_veth).expect("ofport");
    node.ovs()
        .add_flows(
            lab.bridge(),
            &[
                format!("table=0,priority=100,in_port={ofport} actions=output:2"),
                format!("table=0,priority=100,in_port=2 actions=output:{ofport}"),
            ],
        )
        .expect("patch flows");

    // A host on the underlay with no route to 10.128.0.0/14.
    let outside = lab.add_netns("ext").expect("ext ns");
    lab.add_veth(&outside, "eth0", lab.underlay_ns(), "ext")
        .expect("veth");
    lab.run_in(
        lab.underlay_ns(),
        "ip",
        &["link", "set", "ext", "master", "br-ul", "up"],
    )
    .expect("attach ext");
    let ext_ip = Ipv4Addr::new(172, 31, lab.controller_ip().octets()[2], 200);
    lab.run_in(
        &outside,
        "ip",
        &["addr", "add", &format!("{ext_ip}/24"), "dev", "eth0"],
    )
    .expect("ext addr");
    lab.run_in(&outside, "ip", &["link", "set", "eth0", "up"])
        .expect("ext up");

    let gw = lab
        .ping(&pod.ns, IpAddr::V4(Ipv4Addr::new(10, 128, 1, 1)), 3)
        .expect("ping gw");
    assert!(
        gw.received >= 1,
        "pod cannot reach its gateway:\n{}",
        gw.output
    );
    let ext = lab.ping(&pod.ns, IpAddr::V4(ext_ip), 3).expect("ping ext");
    assert!(
        ext.received >= 1,
        "outside host did not answer:\n{}",
        ext.output
    );

    // The translation comes from the shim's table: without it the outside host cannot answer
    // (a new ping uses a new ICMP id, hence a new, untranslated conntrack entry).
    let ct = lab
        .run_in(node.ns(), "nft", &["list", "table", "ip", "flowmesh"])
        .expect("nft");
    assert!(ct.contains("masquerade"), "{ct}");
    lab.run_in(node.ns(), "nft", &["delete", "table", "ip", "flowmesh"])
        .expect("drop table");
    let none = lab.ping(&pod.ns, IpAddr::V4(ext_ip), 2).expect("ping ext");
    assert_eq!(none.received, 0, "replies without NAT?\n{}", none.output);
}
