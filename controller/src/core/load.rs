//! Building the model from a store's records at start-up and on reload.

use super::changes::cursors_change;
use crate::error::ApiError;
use crate::state::{Change, Record, StateBackend};
use topology::model::ModelSnapshot;
use topology::{ClusterModel, ClusterNetworkConfig};

/// Build the model from stored records (or from `config` when the store is empty).
pub fn load_model(
    store: &dyn StateBackend,
    config: Option<&ClusterNetworkConfig>,
) -> Result<(ClusterModel, Vec<Change>), ApiError> {
    let records = store
        .load()
        .map_err(|e| ApiError::Unavailable(format!("loading state: {e}")))?;
    load_model_from(records, config)
}

/// Build the model from a store's records (or from `config` when there are none): the model
/// and the records to store so the store matches it (a new config, the default namespace).
pub fn load_model_from(
    records: Vec<Record>,
    config: Option<&ClusterNetworkConfig>,
) -> Result<(ClusterModel, Vec<Change>), ApiError> {
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
            let mut m = ClusterModel::restore(&ModelSnapshot {
                config: stored.clone(),
                ..snap.clone()
            })
            .map_err(|e| ApiError::Internal(format!("stored state is inconsistent: {e}")))?;
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
    let inconsistent = |e| ApiError::Internal(format!("stored state is inconsistent: {e}"));
    let mut model = match mode_changed_from {
        None => ClusterModel::restore(&snap).map_err(inconsistent)?,
        Some(old) => {
            let mut m = ClusterModel::restore(&ModelSnapshot {
                config: old,
                ..snap.clone()
            })
            .map_err(inconsistent)?;
            m.update_config(snap.config.clone()).map_err(|e| {
                ApiError::FailedPrecondition(format!(
                    "the --config cluster network differs from the stored one and cannot be applied: {e}"
                ))
            })?;
            changes.extend(m.namespaces().map(|n| Change::Put(Record::Namespace(n))));
            changes.push(cursors_change(&m));
            m
        }
    };
    // The default namespace always exists, with NETID 0.
    if model.namespace("default").is_none() {
        let (info, _) = model.add_namespace("default")?;
        changes.push(Change::Put(Record::Namespace(info)));
        changes.push(cursors_change(&model));
    }
    Ok((model, changes))
}
