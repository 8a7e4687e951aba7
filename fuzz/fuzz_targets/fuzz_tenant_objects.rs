//! cargo-fuzz target for the Kubernetes objects a tenant (or anyone with write access to a
//! namespace) influences and that the Kubernetes datastore turns into stored records: a Pod's
//! labels and named container ports, NetworkPolicy, Namespace labels, EgressNetworkPolicy,
//! and the annotations flowmesh reads (NetNamespace multicast, HostSubnet datapath id), as
//! the API server's JSON: `cargo fuzz run fuzz_tenant_objects`.
//!
//! The input is a sequence of objects separated by 0xff bytes; each starts with a byte that
//! says its kind (and the first one's also the cluster mode), then its JSON. Every object is
//! deserialized, converted and checked the way `controller/src/state/kube` does (the `kinds`
//! conversions, the model's checks), applied to a small cluster model, and the flows of every
//! node are recomputed: no input may panic, a refusal must describe itself, and a recompute
//! from an unchanged model must change nothing.
#![no_main]

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kinds::openshift::{EgressNetworkPolicy, HostSubnet, NetNamespace};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use topology::model::multicast::{parse_multicast_value, MULTICAST_ANNOTATION};
use topology::model::{Affected, PodAttach};
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Pipeline};

/// `controller::state::kube::DPID`.
const DPID_ANNOTATION: &str = "flowmesh.io/datapath-id";

fn model(mode: Mode) -> Option<ClusterModel> {
    let cfg = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().ok()?,
        23,
        "172.30.0.0/16".parse().ok()?,
        mode,
    );
    let mut m = ClusterModel::new(cfg).ok()?;
    m.set_egress_dns_name_limit(8);
    m.add_node("n1", Ipv4Addr::new(192, 168, 1, 1), 1).ok()?;
    m.add_node("n2", Ipv4Addr::new(192, 168, 1, 2), 2).ok()?;
    for ns in ["default", "a", "b"] {
        m.add_namespace(ns).ok()?;
    }
    for (i, (ns, node)) in [("a", "n1"), ("b", "n2"), ("a", "n2")].into_iter().enumerate() {
        let name = format!("p{i}");
        let port = format!("veth{i}");
        m.add_pod(PodAttach {
            namespace: ns,
            name: &name,
            node,
            port_name: &port,
            ofport: 3 + i as u32,
        })
        .ok()?;
    }
    Some(m)
}

fn annotation<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Applies one object; the nodes whose flows it changed.
fn apply(m: &mut ClusterModel, kind: u8, json: &str, seq: usize) -> Affected {
    let refused = |e: &dyn std::fmt::Display| {
        assert!(!e.to_string().is_empty(), "a refusal says why");
        Affected::none()
    };
    match kind % 6 {
        0 => {
            let Ok(p) = serde_json::from_str::<Pod>(json) else {
                return Affected::none();
            };
            let labels: Vec<(String, String)> = p
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect();
            let mut ports = Vec::new();
            for c in p.spec.iter().flat_map(|s| s.containers.iter()) {
                for cp in c.ports.iter().flatten() {
                    let (Some(name), Ok(port)) = (cp.name.clone(), u32::try_from(cp.container_port))
                    else {
                        continue;
                    };
                    ports.push((name, cp.protocol.clone().unwrap_or_default(), port));
                }
            }
            let meta = match kinds::netpol::pod_meta(labels, &ports) {
                Ok(meta) => meta,
                Err(e) => return refused(&e),
            };
            let ns = if seq % 2 == 0 { "a" } else { "b" };
            let name = format!("fuzz-{seq}");
            let port = format!("vfuzz{seq}");
            match m.add_pod_with(
                PodAttach {
                    namespace: ns,
                    name: &name,
                    node: "n1",
                    port_name: &port,
                    ofport: 10 + seq as u32,
                },
                meta,
            ) {
                Ok((_, a)) => a,
                Err(e) => refused(&e),
            }
        }
        1 => {
            let Ok(np) = serde_json::from_str::<NetworkPolicy>(json) else {
                return Affected::none();
            };
            let name = np.metadata.name.clone().unwrap_or_else(|| "np".into());
            match kinds::netpol::from_k8s("a", &name, &np) {
                Ok(p) => m.apply_policy(p).unwrap_or_else(|e| refused(&e)),
                Err(e) => refused(&e),
            }
        }
        2 => {
            let Ok(ns) = serde_json::from_str::<Namespace>(json) else {
                return Affected::none();
            };
            let labels = ns.metadata.labels.unwrap_or_default().into_iter().collect();
            m.set_namespace_labels("b", labels)
                .unwrap_or_else(|e| refused(&e))
        }
        3 => {
            let Ok(nn) = serde_json::from_str::<NetNamespace>(json) else {
                return Affected::none();
            };
            let _ = nn.netname.len();
            match annotation(&nn.metadata, MULTICAST_ANNOTATION).map(parse_multicast_value) {
                Some(Ok(on)) => m.set_multicast("a", on).unwrap_or_else(|e| refused(&e)),
                Some(Err(e)) => refused(&e),
                None => Affected::none(),
            }
        }
        4 => {
            let Ok(h) = serde_json::from_str::<HostSubnet>(json) else {
                return Affected::none();
            };
            let dpid = match annotation(&h.metadata, DPID_ANNOTATION) {
                Some(t) => match kinds::manifest::parse_dpid(t) {
                    Ok(d) => d,
                    Err(e) => return refused(&e),
                },
                None => 0x100 + seq as u64,
            };
            let _ = h.subnet.parse::<topology::Ipv4Cidr>();
            let Ok(ip) = h.host_ip.parse::<Ipv4Addr>() else {
                return Affected::none();
            };
            let name = h.metadata.name.clone().unwrap_or_else(|| "h".into());
            match m.add_node(&name, ip, dpid) {
                Ok((_, a)) => a,
                Err(e) => refused(&e),
            }
        }
        _ => {
            let Ok(p) = serde_json::from_str::<EgressNetworkPolicy>(json) else {
                return Affected::none();
            };
            let name = p.metadata.name.clone().unwrap_or_else(|| "fw".into());
            match kinds::egress_firewall::from_api("a", &name, &p.spec) {
                Ok(fw) => {
                    let names: Vec<String> = fw.dns_names().map(str::to_string).collect();
                    let mut a = match m.apply_egress_firewall(fw) {
                        Ok(a) => a,
                        Err(e) => return refused(&e),
                    };
                    for (i, n) in names.iter().enumerate() {
                        let addrs = [Ipv4Addr::new(198, 51, 100, i as u8)].into();
                        a.merge(m.set_egress_dns_addresses(n, addrs));
                    }
                    a
                }
                Err(e) => refused(&e),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mode = match data.first().map(|b| b >> 6) {
        Some(0) => Mode::Subnet,
        Some(1) => Mode::Multitenant,
        _ => Mode::Networkpolicy,
    };
    let Some(mut m) = model(mode) else {
        return;
    };
    let mut pipeline = Pipeline::new();
    let Ok(mut flows) = pipeline.recompute(&m, &Affected::all()) else {
        return;
    };
    for (seq, part) in data.split(|b| *b == 0xff).take(16).enumerate() {
        let Some((kind, rest)) = part.split_first() else {
            continue;
        };
        let Ok(json) = std::str::from_utf8(rest) else {
            continue;
        };
        let affected = apply(&mut m, *kind, json, seq);
        if let Ok(changed) = pipeline.recompute(&m, &affected) {
            flows.extend(changed);
        }
    }
    // Recomputing everything from scratch gives what the incremental pipeline holds.
    if let Ok(all) = Pipeline::new().recompute(&m, &Affected::all()) {
        let again: BTreeMap<_, _> = all;
        for (node, fs) in &again {
            if let Some(inc) = flows.get(node) {
                assert!(
                    topology::FlowSet::diff(inc, fs).is_empty(),
                    "node {node}: the incremental flows differ from a full recompute"
                );
            }
        }
    }
});
