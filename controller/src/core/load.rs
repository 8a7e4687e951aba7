//! Building the model from a store's records at start-up and on reload. A stored record that
//! does not fit the model (an address another pod holds, a pod on a node that is not stored,
//! a policy the model refuses) is left out and reported ([`Loaded::skipped`]), never fatal:
//! one bad record must not keep every replica down. Only the cluster network config itself
//! must be usable.

use super::changes::cursors_change;
use crate::error::ApiError;
use crate::state::{Change, Record, RecordKey, StateBackend};
use topology::model::{ModelError, ModelSnapshot};
use topology::{ClusterModel, ClusterNetworkConfig};

/// A stored record left out of the model, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Its key (`pod/NS/NAME`, ...).
    pub key: String,
    /// Why the model refused it.
    pub reason: String,
}

/// The model built from a store's records.
pub struct Loaded {
    /// The model.
    pub model: ClusterModel,
    /// The records to store so the store matches it (a new config, the default namespace).
    pub changes: Vec<Change>,
    /// Stored records that do not fit, left out (each was logged).
    pub skipped: Vec<Skipped>,
}

/// Build the model from stored records (or from `config` when the store is empty).
pub fn load_model(
    store: &dyn StateBackend,
    config: Option<&ClusterNetworkConfig>,
) -> Result<Loaded, ApiError> {
    let records = store
        .load()
        .map_err(|e| ApiError::Unavailable(format!("loading state: {e}")))?;
    load_model_from(records, config)
}

/// Build the model from a store's records (or from `config` when there are none).
pub fn load_model_from(
    records: Vec<Record>,
    config: Option<&ClusterNetworkConfig>,
) -> Result<Loaded, ApiError> {
    let mut snap = ModelSnapshot {
        config: config.cloned().unwrap_or_else(crate::state::default_config),
        nodes: Vec::new(),
        namespaces: Vec::new(),
        pods: Vec::new(),
        subnet_cursors: Vec::new(),
        netid_cursor: 0,
        policies: Vec::new(),
        egress: Default::default(),
        egress_firewalls: Vec::new(),
        egress_dns: Default::default(),
    };
    let mut stored_config = None;
    let mut cursors = None;
    for r in records {
        match r {
            Record::ClusterNetwork(c) => stored_config = Some(c),
            Record::Node(n) => snap.nodes.push(n),
            Record::Namespace(n) => snap.namespaces.push(n),
            Record::Pod(p) => snap.pods.push(p),
            Record::Cursors(c) => cursors = Some(c),
            Record::NetworkPolicy(p) => snap.policies.push(p),
            Record::EgressIps(e) => snap.egress = e,
            Record::EgressNetworkPolicy(f) => snap.egress_firewalls.push(f),
            Record::EgressDns(d) => {
                snap.egress_dns.insert(d.name, d.addresses);
            }
        }
    }
    let mut changes = Vec::new();
    // A mode change from --config is replayed on the full model below (leaving subnet mode
    // gives every namespace a NETID of its own, which must be stored).
    let mut mode_changed_from = None;
    match (&stored_config, config) {
        (Some(stored), Some(wanted)) if stored != wanted => {
            // A running cluster may only grow its ranges; the model enforces the rules.
            let (mut m, _) = restore_reporting(&ModelSnapshot {
                config: stored.clone(),
                ..snap.clone()
            })
            .map_err(|e| ApiError::Internal(format!("the stored cluster network: {e}")))?;
            m.update_config(wanted.clone()).map_err(|e| {
                ApiError::FailedPrecondition(format!(
                    "the --config cluster network differs from the stored one and cannot be applied: {e}"
                ))
            })?;
            if stored.mode != wanted.mode {
                mode_changed_from = Some(stored.clone());
            }
            snap.config = wanted.clone();
            changes.push(Change::Put(Record::ClusterNetwork(wanted.clone())));
        }
        (Some(stored), _) => snap.config = stored.clone(),
        (None, _) => changes.push(Change::Put(Record::ClusterNetwork(snap.config.clone()))),
    }
    if let Some(c) = cursors {
        snap.subnet_cursors = c.subnet_cursors;
        snap.netid_cursor = c.netid_cursor;
    } else {
        snap.subnet_cursors = vec![0; snap.config.cluster_networks.len()];
    }
    snap.subnet_cursors
        .resize(snap.config.cluster_networks.len(), 0);
    let unusable = |e| ApiError::Internal(format!("the cluster network config: {e}"));
    let (mut model, skipped) = match mode_changed_from {
        None => restore_reporting(&snap).map_err(unusable)?,
        Some(old) => {
            let (mut m, s) = restore_reporting(&ModelSnapshot {
                config: old,
                ..snap.clone()
            })
            .map_err(unusable)?;
            m.update_config(snap.config.clone()).map_err(|e| {
                ApiError::FailedPrecondition(format!(
                    "the --config cluster network differs from the stored one and cannot be applied: {e}"
                ))
            })?;
            changes.extend(m.namespaces().map(|n| Change::Put(Record::Namespace(n))));
            changes.push(cursors_change(&m));
            (m, s)
        }
    };
    // The default namespace always exists, with NETID 0.
    if model.namespace("default").is_none() {
        let (info, _) = model.add_namespace("default")?;
        changes.push(Change::Put(Record::Namespace(info)));
        changes.push(cursors_change(&model));
    }
    Ok(Loaded {
        model,
        changes,
        skipped,
    })
}

/// Restore a snapshot; when it does not fit as a whole, restore it record by record, as the
/// store's watched changes are applied, leaving out (and logging) each record the model
/// refuses. Fails only when the cluster network config is unusable.
// The model's own error type, as its operations return it.
#[allow(clippy::result_large_err)]
fn restore_reporting(snap: &ModelSnapshot) -> Result<(ClusterModel, Vec<Skipped>), ModelError> {
    let whole = match ClusterModel::restore(snap) {
        Ok(m) => return Ok((m, Vec::new())),
        Err(e) => e,
    };
    tracing::warn!(error = %whole, "stored state does not fit as a whole; loading it record by record and leaving out what does not fit");
    let mut m = ClusterModel::new(snap.config.clone())?;
    let mut skipped = Vec::new();
    let mut note = |key: RecordKey, r: Result<topology::Affected, ModelError>| {
        if let Err(e) = r {
            let key = key.as_string();
            tracing::error!(%key, error = %e, "a stored record does not fit the model; it is left out");
            skipped.push(Skipped {
                key,
                reason: e.to_string(),
            });
        }
    };
    for n in &snap.nodes {
        note(RecordKey::Node(n.info.name.clone()), m.sync_node(n));
    }
    for ns in &snap.namespaces {
        note(RecordKey::Namespace(ns.name.clone()), m.sync_namespace(ns));
    }
    for p in &snap.pods {
        let k = &p.info.key;
        note(
            RecordKey::Pod(k.namespace.clone(), k.name.clone()),
            m.sync_pod(p),
        );
    }
    for p in &snap.policies {
        note(
            RecordKey::NetworkPolicy(p.namespace.clone(), p.name.clone()),
            m.apply_policy(p.clone()),
        );
    }
    note(RecordKey::EgressIps, m.sync_egress(&snap.egress));
    for f in &snap.egress_firewalls {
        note(
            RecordKey::EgressNetworkPolicy(f.namespace.clone()),
            m.apply_egress_firewall(f.clone()),
        );
    }
    for (name, addrs) in &snap.egress_dns {
        m.set_egress_dns_addresses(name, addrs.iter().copied().collect());
    }
    m.sync_cursors(&snap.subnet_cursors, snap.netid_cursor);
    Ok((m, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use topology::model::{NodeInfo, NodeRecord, PodRecord};

    fn node(name: &str, ip: [u8; 4], subnet: &str) -> Record {
        Record::Node(NodeRecord {
            info: NodeInfo {
                name: name.into(),
                ip: Ipv4Addr::from(ip),
                dpid: u64::from(u32::from(Ipv4Addr::from(ip))),
                subnet: subnet.parse().expect("cidr"),
            },
            pod_ip_cursor: 0,
        })
    }

    fn default_ns() -> Record {
        Record::Namespace(topology::model::NamespaceInfo {
            name: "default".into(),
            netid: 0,
            labels: Default::default(),
            multicast: false,
            acl_logging: None,
        })
    }

    fn pod(name: &str, node: &str, ofport: u32, ip: [u8; 4]) -> Record {
        Record::Pod(PodRecord {
            info: topology::PodInfo {
                key: topology::model::PodKey {
                    namespace: "default".into(),
                    name: name.into(),
                },
                node: node.into(),
                port_name: format!("veth-{name}"),
                ofport,
                ip: Ipv4Addr::from(ip),
                labels: Default::default(),
                ports: Vec::new(),
            },
        })
    }

    /// Records that cannot all be true at once (two pods on one address, a pod outside its
    /// node's subnet, a pod on a node that is not stored) load with the bad ones left out and
    /// named; the others are all there.
    #[test]
    fn records_that_do_not_fit_are_left_out_and_named() {
        let cfg = crate::state::default_config();
        let records = vec![
            Record::ClusterNetwork(cfg.clone()),
            default_ns(),
            node("n1", [172, 31, 0, 1], "10.128.0.0/23"),
            pod("good", "n1", 3, [10, 128, 0, 2]),
            pod("same-ip", "n1", 4, [10, 128, 0, 2]),
            pod("elsewhere", "n1", 5, [10, 130, 0, 2]),
            pod("no-node", "n9", 3, [10, 128, 2, 2]),
            pod("good2", "n1", 6, [10, 128, 0, 3]),
        ];
        // Before: one bad record failed the whole load.
        let l = load_model_from(records, None).expect("loads");
        let mut keys: Vec<&str> = l.skipped.iter().map(|s| s.key.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "pod/default/elsewhere",
                "pod/default/no-node",
                "pod/default/same-ip"
            ],
            "{:?}",
            l.skipped
        );
        assert!(l.skipped.iter().all(|s| !s.reason.is_empty()));
        let pods: Vec<String> = l.model.pods().map(|p| p.key.name.clone()).collect();
        assert_eq!(pods.len(), 2, "{pods:?}");
        assert!(l.model.pod("default", "good").is_some());
        assert!(l.model.pod("default", "good2").is_some());
        assert!(l.model.node("n1").is_some());
    }

    #[test]
    fn consistent_records_skip_nothing() {
        let cfg = crate::state::default_config();
        let records = vec![
            Record::ClusterNetwork(cfg),
            default_ns(),
            node("n1", [172, 31, 0, 1], "10.128.0.0/23"),
            pod("good", "n1", 3, [10, 128, 0, 2]),
        ];
        let l = load_model_from(records, None).expect("loads");
        assert!(l.skipped.is_empty());
        assert_eq!(l.model.pod_count(), 1);
    }
}
