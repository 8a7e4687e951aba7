use super::*;
use crate::config::Mode;

pub(crate) fn config(mode: Mode) -> ClusterNetworkConfig {
    ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        mode,
    )
}

fn attach<'a>(ns: &'a str, name: &'a str, node: &'a str, ofport: u32) -> PodAttach<'a> {
    PodAttach {
        namespace: ns,
        name,
        node,
        port_name: name,
        ofport,
    }
}

#[test]
fn nodes_subnets_tunnels() {
    let mut m = ClusterModel::new(config(Mode::Multitenant)).expect("model");
    let (a, aff) = m
        .add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("a");
    assert!(aff.all_nodes);
    assert_eq!(a.subnet.to_string(), "10.128.0.0/23");
    assert_eq!(a.gateway(), Ipv4Addr::new(10, 128, 0, 1));
    m.add_node("b", Ipv4Addr::new(192, 168, 0, 2), 2)
        .expect("b");
    m.add_node("c", Ipv4Addr::new(192, 168, 0, 3), 3)
        .expect("c");
    assert_eq!(m.tunnel_count(), 3);
    assert_eq!(m.tunnel_peers("a").len(), 2);
    assert!(matches!(
        m.add_node("d", Ipv4Addr::new(192, 168, 0, 3), 4),
        Err(ModelError::NodeIpInUse { .. })
    ));
    assert!(matches!(
        m.add_node("d", Ipv4Addr::new(192, 168, 0, 4), 3),
        Err(ModelError::DatapathInUse { .. })
    ));
    assert!(matches!(
        m.add_node("d", Ipv4Addr::new(10, 128, 9, 9), 9),
        Err(ModelError::NodeIp { .. })
    ));
    // Re-adding identical is a no-op; a new IP keeps the subnet.
    assert!(m
        .add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("same")
        .1
        .is_empty());
    let (a2, _) = m
        .add_node("a", Ipv4Addr::new(192, 168, 0, 9), 1)
        .expect("new ip");
    assert_eq!(a2.subnet, a.subnet);
    m.delete_node("b").expect("delete");
    assert_eq!(m.tunnel_count(), 1);
    assert_eq!(m.node_by_dpid(3).map(|n| n.name.as_str()), Some("c"));
    // b's subnet is free again, handed out after the cursor wraps; d gets the next one.
    let (d, _) = m
        .add_node("d", Ipv4Addr::new(192, 168, 0, 4), 4)
        .expect("d");
    assert_eq!(d.subnet.to_string(), "10.128.6.0/23");
}

#[test]
fn netids_join_isolate_global() {
    let mut m = ClusterModel::new(config(Mode::Multitenant)).expect("model");
    m.add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("a");
    assert_eq!(m.add_namespace("default").expect("ns").0.netid, 0);
    assert_eq!(m.add_namespace("x").expect("ns").0.netid, 10);
    assert_eq!(m.add_namespace("y").expect("ns").0.netid, 11);
    m.add_pod(attach("y", "p", "a", 3)).expect("pod");
    let aff = m.join(&["y"], "x").expect("join");
    assert!(aff.contains("a"));
    assert_eq!(m.effective_netid("y"), 10);
    assert_eq!(m.namespaces_with_netid(10), ["x", "y"]);
    // 11 is free again but the cursor moved on.
    assert_eq!(m.add_namespace("z").expect("ns").0.netid, 12);
    m.isolate("y").expect("isolate");
    assert_eq!(m.effective_netid("y"), 13);
    assert!(m.isolate("y").expect("alone").is_empty());
    m.make_global("y").expect("global");
    assert_eq!(m.effective_netid("y"), 0);
    assert!(m.namespaces_with_netid(13).is_empty());
    assert!(matches!(
        m.isolate("default"),
        Err(ModelError::DefaultNamespace(_))
    ));
    assert!(matches!(
        m.join(&["default"], "x"),
        Err(ModelError::DefaultNamespace(_))
    ));

    let mut np = ClusterModel::new(config(Mode::Networkpolicy)).expect("model");
    np.add_namespace("x").expect("ns");
    np.add_namespace("y").expect("ns");
    assert!(matches!(
        np.join(&["y"], "x"),
        Err(ModelError::ModeRefuses { .. })
    ));
    assert!(matches!(
        np.isolate("y"),
        Err(ModelError::ModeRefuses { .. })
    ));
    let mut sn = ClusterModel::new(config(Mode::Subnet)).expect("model");
    assert_eq!(sn.add_namespace("x").expect("ns").0.netid, 0);
}

#[test]
fn netid_exhaustion_is_an_error() {
    let mut m = ClusterModel::new(config(Mode::Multitenant))
        .expect("model")
        .with_netid_allocator(NetIdAllocator::with_range(10, 11));
    m.add_namespace("a").expect("a");
    m.add_namespace("b").expect("b");
    assert!(matches!(
        m.add_namespace("c"),
        Err(ModelError::Alloc {
            source: AllocError::NetIdsExhausted { .. },
            ..
        })
    ));
    m.delete_namespace("a").expect("del");
    assert_eq!(m.add_namespace("c").expect("c").0.netid, 10);
}

#[test]
fn pods_ips_and_errors() {
    let mut cfg = config(Mode::Multitenant);
    cfg.cluster_networks[0].host_prefix = 30;
    let mut m = ClusterModel::new(cfg).expect("model");
    m.add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("a");
    m.add_namespace("x").expect("ns");
    let (p, aff) = m.add_pod(attach("x", "p1", "a", 3)).expect("pod");
    assert_eq!(p.ip, Ipv4Addr::new(10, 128, 0, 2));
    assert_eq!(p.mac(), [0x0a, 0x58, 10, 128, 0, 2]);
    assert_eq!(aff, Affected::node("a"));
    assert!(matches!(
        m.add_pod(attach("x", "p2", "a", 4)),
        Err(ModelError::Alloc {
            source: AllocError::PodIpsExhausted(_),
            ..
        })
    ));
    assert!(matches!(
        m.add_pod(attach("x", "p1", "a", 5)),
        Err(ModelError::PodExists(_))
    ));
    assert!(matches!(
        m.add_pod(attach("q", "p3", "a", 5)),
        Err(ModelError::UnknownNamespace(_))
    ));
    assert!(matches!(
        m.add_pod(attach("x", "p3", "zz", 5)),
        Err(ModelError::UnknownNode(_))
    ));
    assert!(matches!(
        m.add_pod(attach("x", "p3", "a", 2)),
        Err(ModelError::ReservedOfport { .. })
    ));
    m.delete_pod("x", "p1").expect("del");
    assert!(m.add_pod(attach("x", "p2", "a", 3)).is_ok());
}

#[test]
fn snapshot_restore_identical_future() {
    let mut m = ClusterModel::new(config(Mode::Multitenant)).expect("model");
    for i in 0..4u8 {
        m.add_node(
            &format!("n{i}"),
            Ipv4Addr::new(192, 168, 0, i + 1),
            i as u64 + 1,
        )
        .expect("node");
    }
    m.delete_node("n1").expect("del");
    for ns in ["default", "a", "b", "c"] {
        m.add_namespace(ns).expect("ns");
    }
    m.delete_namespace("b").expect("del ns");
    m.join(&["c"], "a").expect("join");
    for i in 0..5u32 {
        m.add_pod(attach("a", &format!("p{i}"), "n0", 10 + i))
            .expect("pod");
    }
    m.delete_pod("a", "p1").expect("del pod");
    let snap = m.snapshot();
    let json = serde_json::to_string(&snap).expect("json");
    let back: ModelSnapshot = serde_json::from_str(&json).expect("parse");
    let mut r = ClusterModel::restore(&back).expect("restore");
    assert_eq!(r.snapshot(), snap);
    // Identical future allocations.
    for model in [&mut m, &mut r] {
        model
            .add_node("n9", Ipv4Addr::new(192, 168, 0, 9), 9)
            .expect("node");
        model.add_namespace("d").expect("ns");
        model.add_pod(attach("d", "q", "n0", 50)).expect("pod");
    }
    assert_eq!(m.snapshot(), r.snapshot());

    let mut dup = snap.clone();
    dup.nodes.push(dup.nodes[0].clone());
    assert!(matches!(
        ClusterModel::restore(&dup),
        Err(ModelError::Duplicate { kind: "node", .. })
    ));
    let mut dup = snap.clone();
    dup.pods.push(dup.pods[0].clone());
    assert!(matches!(
        ClusterModel::restore(&dup),
        Err(ModelError::Duplicate { kind: "pod", .. })
    ));
    let mut dup = snap.clone();
    dup.namespaces.push(dup.namespaces[1].clone());
    assert!(ClusterModel::restore(&dup).is_err());
    let mut bad = snap.clone();
    bad.pods[0].info.ip = Ipv4Addr::new(10, 200, 0, 5);
    assert!(matches!(
        ClusterModel::restore(&bad),
        Err(ModelError::Alloc { .. })
    ));
    let mut bad = snap;
    bad.nodes[1].info.subnet = bad.nodes[0].info.subnet;
    assert!(ClusterModel::restore(&bad).is_err());
}

#[test]
fn config_change_refused_when_running() {
    let mut m = ClusterModel::new(config(Mode::Multitenant)).expect("model");
    m.add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("a");
    let mut c = config(Mode::Multitenant);
    c.cluster_networks[0].host_prefix = 24;
    assert!(matches!(
        m.update_config(c),
        Err(ModelError::Config(ConfigError::ChangeRefused { .. }))
    ));
    let mut c = config(Mode::Multitenant);
    c.mtu = 1400;
    assert!(m.update_config(c).expect("mtu").all_nodes);
}

/// A config change that changes only the mode affects every node, and a cached pipeline's
/// result afterwards is the from-scratch one (subnet → multitenant isolates the namespaces).
#[test]
fn a_mode_only_change_affects_every_node() {
    use crate::pipeline::{compute_node, Pipeline};
    let mut m = ClusterModel::new(config(Mode::Subnet)).expect("model");
    m.add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("a");
    m.add_node("b", Ipv4Addr::new(192, 168, 0, 2), 2)
        .expect("b");
    m.add_namespace("x").expect("x");
    m.add_namespace("y").expect("y");
    m.add_pod(attach("x", "p", "a", 3)).expect("p");
    m.add_pod(attach("y", "q", "b", 3)).expect("q");
    let mut p = Pipeline::new();
    let before = p.recompute(&m, &Affected::all()).expect("flows");
    let epoch = m.config_epoch();
    let aff = m
        .update_config(config(Mode::Multitenant))
        .expect("mode change");
    assert!(aff.all_nodes, "a mode change must reprogram every node");
    assert!(m.config_epoch() > epoch);
    assert_eq!(m.config().mode, Mode::Multitenant);
    let after = p.recompute(&m, &aff).expect("flows");
    for n in ["a", "b"] {
        let fresh = compute_node(&m, n).expect("fresh");
        assert!(
            after[n].iter().eq(fresh.iter()),
            "node {n}: cached result differs from a fresh compute"
        );
        assert!(
            !before[n].iter().eq(after[n].iter()),
            "node {n}: flows unchanged by the mode change"
        );
    }
    // The same config again changes nothing.
    assert!(
        !m.update_config(config(Mode::Multitenant))
            .expect("same")
            .all_nodes
    );
}
