//! Services through the host's kube-proxy, in the simulator: the test plays the host (it
//! DNATs a pod's packet to the service IP and sends it back in through tun0, and un-DNATs the
//! replies the pipeline hands back to it). Properties, in every mode, for endpoints on the
//! client's node and on another node:
//! * pod → service IP goes to the client node's host (t60);
//! * the DNATed packet (from tun0, the client's own source) reaches the endpoint when the
//!   client may reach it as a pod (multitenant: judged by the client's NETID, restored in t25);
//! * the endpoint's replies go back to the client node's host (zone 1, ct_mark 1, t31), never
//!   straight to the client, which would drop an answer from an address it did not call;
//! * the host's un-DNATed reply (source: the service IP) reaches the client, in networkpolicy
//!   mode even when the client's ingress is isolated (a reply of its connection to the
//!   service IP, committed in zone 1 in t60), but not without that connection;
//! * ordinary pod-to-pod replies are not sent to the host.

mod common;

use common::all_flows;
use std::net::Ipv4Addr;
use topology::model::{LabelSelector, NetworkPolicy, PodAttach, PodInfo};
use topology::sim::{Packet, Simulator, L3};
use topology::{ClusterModel, ClusterNetworkConfig, Mode};

const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 10);
const SERVICE_PORT: u16 = 80;
const ENDPOINT_PORT: u16 = 8080;
const CLIENT_PORT: u16 = 41000;

/// Three nodes; namespaces `client`, `svc` and `other`; the client on n1, endpoints of `svc`
/// on n1 and n2, a pod of `other` on n3.
fn cluster(mode: Mode) -> ClusterModel {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        mode,
    );
    let mut m = ClusterModel::new(config).expect("model");
    for (i, n) in ["n1", "n2", "n3"].into_iter().enumerate() {
        let k = u8::try_from(i + 1).expect("small");
        m.add_node(n, Ipv4Addr::new(192, 168, 0, k), u64::from(k))
            .expect("node");
    }
    for ns in ["client", "svc", "other"] {
        m.add_namespace(ns).expect("namespace");
    }
    for (ns, name, node, ofport) in [
        ("client", "c", "n1", 3),
        ("svc", "e1", "n1", 4),
        ("svc", "e2", "n2", 3),
        ("other", "o", "n3", 3),
    ] {
        m.add_pod(PodAttach {
            namespace: ns,
            name,
            node,
            port_name: name,
            ofport,
        })
        .expect("pod");
    }
    m
}

/// A policy of `namespace` selecting all its pods and admitting nothing.
fn deny_all_ingress(namespace: &str) -> NetworkPolicy {
    NetworkPolicy {
        namespace: namespace.into(),
        name: "deny-all-ingress".into(),
        pod_selector: LabelSelector::default(),
        ingress_isolation: true,
        egress_isolation: false,
        ingress: Vec::new(),
        egress: Vec::new(),
    }
}

fn pod(m: &ClusterModel, ns: &str, name: &str) -> PodInfo {
    m.pod(ns, name).cloned().expect("pod")
}

fn tcp(
    in_port: u32,
    mac: [u8; 6],
    (src, sport): (Ipv4Addr, u16),
    (dst, dport): (Ipv4Addr, u16),
) -> Packet {
    Packet::l3(
        in_port,
        mac,
        [0x0a, 0x58, 0, 0, 0, 1],
        L3::Ipv4 {
            src,
            dst,
            proto: 6,
            src_port: sport,
            dst_port: dport,
        },
    )
}

/// What happened to one service connection from `c` to endpoint `e`.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The DNATed packet did not reach the endpoint.
    Refused,
    /// It did, and the whole exchange went as it must.
    Served,
}

/// One connection c → service → e through the simulated host of c's node; asserts every leg
/// of an allowed exchange.
fn connect(m: &ClusterModel, sim: &Simulator, c: &PodInfo, e: &PodInfo, sport: u16) -> Verdict {
    let host_mac = [0x0a, 0x58, 0, 0, 0, 1];
    let client = (c.ip, sport);
    // The pod sends to the service IP: the pipeline hands it to its node's host.
    let t = sim.trace(
        &c.node,
        tcp(c.ofport, c.mac(), client, (SERVICE_IP, SERVICE_PORT)),
    );
    assert_eq!(t.to_host(), vec![c.node.as_str()], "c → service: {t:?}");
    // The host DNATs it to the endpoint and routes it back into tun0.
    let t = sim.trace(&c.node, tcp(2, host_mac, client, (e.ip, ENDPOINT_PORT)));
    if t.delivered().is_empty() {
        assert!(
            t.dropped(),
            "DNATed packet neither delivered nor dropped: {t:?}"
        );
        return Verdict::Refused;
    }
    assert_eq!(
        t.delivered(),
        vec![(e.node.as_str(), e.port_name.as_str())],
        "DNATed packet: {t:?}"
    );
    // The endpoint answers the client's address: back to the client node's host.
    let reply = tcp(e.ofport, e.mac(), (e.ip, ENDPOINT_PORT), client);
    let t = sim.trace(&e.node, reply);
    assert_eq!(
        (t.to_host(), t.delivered()),
        (vec![c.node.as_str()], vec![]),
        "the endpoint's reply must go to the host of {}: {t:?}",
        c.node
    );
    // The host un-DNATs it (source: the service IP) and routes it to the client.
    let t = sim.trace(
        &c.node,
        tcp(2, host_mac, (SERVICE_IP, SERVICE_PORT), client),
    );
    assert_eq!(
        t.delivered(),
        vec![(c.node.as_str(), c.port_name.as_str())],
        "un-DNATed reply: {t:?}"
    );
    // The next packets of the connection take the same ways.
    let t = sim.trace(&c.node, tcp(2, host_mac, client, (e.ip, ENDPOINT_PORT)));
    assert_eq!(t.delivered(), vec![(e.node.as_str(), e.port_name.as_str())]);
    let _ = m;
    Verdict::Served
}

#[test]
fn services_reach_local_and_remote_endpoints_in_every_mode() {
    for mode in [Mode::Subnet, Mode::Multitenant, Mode::Networkpolicy] {
        let mut m = cluster(mode);
        if mode == Mode::Multitenant {
            m.join(&["client"], "svc").expect("join");
        }
        let sim = Simulator::from_model(&m, &all_flows(&m));
        let c = pod(&m, "client", "c");
        for (i, e) in ["e1", "e2"].iter().enumerate() {
            let e = pod(&m, "svc", e);
            let sport = CLIENT_PORT + u16::try_from(i).expect("small");
            assert_eq!(
                connect(&m, &sim, &c, &e, sport),
                Verdict::Served,
                "{mode:?} → {}",
                e.port_name
            );
        }
    }
}

#[test]
fn multitenant_services_of_another_project_are_refused_until_joined_or_global() {
    let mut m = cluster(Mode::Multitenant);
    let c = pod(&m, "client", "c");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    for e in ["e1", "e2"] {
        let e = pod(&m, "svc", e);
        assert_eq!(connect(&m, &sim, &c, &e, CLIENT_PORT), Verdict::Refused);
    }
    m.make_global("client").expect("global");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    for e in ["e1", "e2"] {
        let e = pod(&m, "svc", e);
        assert_eq!(connect(&m, &sim, &c, &e, CLIENT_PORT), Verdict::Served);
    }
}

#[test]
fn networkpolicy_judges_the_real_addresses_and_lets_the_replies_in() {
    let mut m = cluster(Mode::Networkpolicy);
    // The client accepts no connection at all: the service's answers still reach it.
    m.apply_policy(deny_all_ingress("client")).expect("policy");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    let c = pod(&m, "client", "c");
    for (i, e) in ["e1", "e2"].iter().enumerate() {
        let e = pod(&m, "svc", e);
        let sport = CLIENT_PORT + u16::try_from(i).expect("small");
        assert_eq!(connect(&m, &sim, &c, &e, sport), Verdict::Served);
    }
    // A packet from a service IP that answers no connection of the client is judged by the
    // client's ingress policy: dropped.
    sim.flush_conntrack();
    let t = sim.trace(
        "n1",
        tcp(
            2,
            [0x0a, 0x58, 0, 0, 0, 1],
            (SERVICE_IP, SERVICE_PORT),
            (c.ip, 45000),
        ),
    );
    assert!(t.dropped(), "{t:?}");
    // The endpoints accept nothing from the client's namespace: the DNATed packet is judged
    // with its real addresses and refused, on either node.
    m.apply_policy(deny_all_ingress("svc")).expect("policy");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    for e in ["e1", "e2"] {
        let e = pod(&m, "svc", e);
        assert_eq!(connect(&m, &sim, &c, &e, CLIENT_PORT), Verdict::Refused);
    }
}

#[test]
fn pod_to_pod_replies_stay_in_the_overlay() {
    for mode in [Mode::Subnet, Mode::Networkpolicy] {
        let m = cluster(mode);
        let sim = Simulator::from_model(&m, &all_flows(&m));
        let c = pod(&m, "client", "c");
        for e in ["e1", "e2"] {
            let e = pod(&m, "svc", e);
            let client = (c.ip, CLIENT_PORT);
            let t = sim.trace(
                &c.node,
                tcp(c.ofport, c.mac(), client, (e.ip, ENDPOINT_PORT)),
            );
            assert_eq!(t.delivered(), vec![(e.node.as_str(), e.port_name.as_str())]);
            let t = sim.trace(
                &e.node,
                tcp(e.ofport, e.mac(), (e.ip, ENDPOINT_PORT), client),
            );
            assert_eq!(
                (t.delivered(), t.to_host()),
                (vec![(c.node.as_str(), c.port_name.as_str())], vec![]),
                "{mode:?}: {t:?}"
            );
        }
    }
}
