//! The record changes a mutation writes: the store's view of what it changed in the model.

use crate::state::{Change, CursorsRecord, Record, RecordKey};
use std::collections::BTreeSet;
use topology::model::{NodeRecord, PodRecord};
use topology::ClusterModel;

/// The record change for the allocation cursors.
pub fn cursors_change(m: &ClusterModel) -> Change {
    Change::Put(Record::Cursors(CursorsRecord {
        subnet_cursors: m.subnet_cursors(),
        netid_cursor: m.netid_cursor(),
    }))
}

/// The record change for a node (Put, or Delete when gone).
pub fn node_change(m: &ClusterModel, name: &str) -> Change {
    match m.node_record(name) {
        Some(r) => Change::Put(Record::Node(NodeRecord { ..r })),
        None => Change::Delete(RecordKey::Node(name.to_string())),
    }
}

/// The record change for a pod (Put, or Delete when gone).
pub fn pod_change(m: &ClusterModel, namespace: &str, name: &str) -> Change {
    match m.pod(namespace, name) {
        Some(p) => Change::Put(Record::Pod(PodRecord { info: p.clone() })),
        None => Change::Delete(RecordKey::Pod(namespace.to_string(), name.to_string())),
    }
}

/// The record change for the egress-IP state (Put, or Delete when empty).
pub fn egress_change(m: &ClusterModel) -> Change {
    let e = m.egress_snapshot();
    if e.is_empty() {
        Change::Delete(RecordKey::EgressIps)
    } else {
        Change::Put(Record::EgressIps(e.clone()))
    }
}

/// The record change for a namespace (Put, or Delete when gone).
pub fn namespace_change(m: &ClusterModel, name: &str) -> Change {
    match m.namespace(name) {
        Some(n) => Change::Put(Record::Namespace(n)),
        None => Change::Delete(RecordKey::Namespace(name.to_string())),
    }
}

/// Record changes for the resolved names that disappeared between `before` and now.
pub fn dropped_dns_changes(m: &ClusterModel, before: &BTreeSet<String>) -> Vec<Change> {
    let now: BTreeSet<String> = m.egress_dns_all().map(|(n, _)| n.to_string()).collect();
    before
        .difference(&now)
        .map(|n| Change::Delete(RecordKey::EgressDns(n.clone())))
        .collect()
}

/// Names resolved now.
pub fn resolved_names(m: &ClusterModel) -> BTreeSet<String> {
    m.egress_dns_all().map(|(n, _)| n.to_string()).collect()
}
