//! cargo-fuzz target for the cluster network config as it is stored and handed to the
//! controller: the YAML of `--config` (the `cluster-network.yaml` of the ConfigMap that
//! `deploy/` mounts) and the ClusterNetwork object (`network.openshift.io/v1`) the Kubernetes
//! datastore reads, converted by `kinds::manifest::to_config`: `cargo fuzz run
//! fuzz_cluster_config`.
//!
//! No input may panic. A config that validates builds a model; applying it to a running
//! cluster (nodes, namespaces, pods) is accepted or refused with a reason, and an accepted
//! change leaves a model whose flows can be computed; a refused one leaves the model as it was.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use topology::model::{Affected, PodAttach};
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Pipeline};

fn running() -> Option<ClusterModel> {
    let cfg = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().ok()?,
        23,
        "172.30.0.0/16".parse().ok()?,
        Mode::Multitenant,
    );
    let mut m = ClusterModel::new(cfg).ok()?;
    for i in 0..3u8 {
        m.add_node(&format!("n{i}"), Ipv4Addr::new(192, 168, 1, i + 1), u64::from(i) + 1)
            .ok()?;
    }
    m.add_namespace("a").ok()?;
    m.add_pod(PodAttach {
        namespace: "a",
        name: "p",
        node: "n1",
        port_name: "veth0",
        ofport: 3,
    })
    .ok()?;
    Some(m)
}

fn try_config(cfg: ClusterNetworkConfig) {
    match cfg.validate() {
        Ok(()) => {
            if let Ok(m) = ClusterModel::new(cfg.clone()) {
                let _ = Pipeline::new().recompute(&m, &Affected::all());
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let Some(mut m) = running() else {
        return;
    };
    let before = m.snapshot();
    match m.update_config(cfg) {
        Ok(_) => {
            let _ = Pipeline::new().recompute(&m, &Affected::all());
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert_eq!(m.snapshot(), before, "a refused config changed the model");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The --config file (the ConfigMap's cluster-network.yaml).
    if let Ok(cfg) = serde_yaml::from_str::<ClusterNetworkConfig>(text) {
        try_config(cfg);
    }
    // A ClusterNetwork object, as the Kubernetes datastore and `apply -f` read it.
    if let Ok(objs) = kinds::manifest::parse(text) {
        for o in objs {
            if let kinds::manifest::ManifestObject::ClusterNetwork(spec) = o {
                if let Some(base) = running() {
                    match kinds::manifest::to_config(&spec, base.config()) {
                        Ok(cfg) => try_config(cfg),
                        Err(e) => assert!(!e.is_empty()),
                    }
                }
            }
        }
    }
});
