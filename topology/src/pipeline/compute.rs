//! `(model, node) -> FlowSet`, pure and deterministic, with an incremental cache.
//!
//! A node's FlowSet is the merge of
//! * its *local* run: its static flows, one fragment per local pod, one flow per NETID in use
//!   (multitenant), kept sorted and rebuilt by splicing only the fragments whose inputs changed;
//! * its *policy* run (networkpolicy mode): tables 27 and 80, rebuilt when a policy, a label
//!   or a pod changes (see `netpol`);
//! * its *egress-IP* run (table 101) and groups, computed from the egress plan (see `egress_ip`);
//! * its *multicast* run and groups (tables 110, 111, 120; see `multicast`), rebuilt on every
//!   call (it is empty unless a NETID with a local pod has multicast);
//! * its *egress firewall* runs (table 100): one per NETID of its pods that has a firewall,
//!   built once per NETID and shared by every node (see `egress_firewall`);
//! * the *mesh* runs of tables 10, 50 and 90: the flows for every node, built once for the whole
//!   cluster and shared (`Arc`) by every node's FlowSet, minus the node's own entry.

use super::builder::PipelineError;
use super::flowset::{key_cmp, FlowSet, SharedRun};
use super::fragments::{
    netid_flow, pod_flows, remote_node_flows, static_flows, PodInputs, StaticInputs,
};
use super::netpol::PolicyCache;
use crate::config::Mode;
use crate::model::{ClusterModel, PodInfo, PodKey};
use ofproto::Flow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Compute one node's complete FlowSet from scratch (no cache).
pub fn compute_node(model: &ClusterModel, node: &str) -> Result<FlowSet, PipelineError> {
    Pipeline::new().node_flows(model, node)
}

#[derive(Debug)]
struct Mesh {
    epoch: (u64, u64),
    runs: [SharedRun; 3],
    /// Position of each node's own entry in each run.
    index: HashMap<String, [usize; 3]>,
}

#[derive(Debug)]
struct NodeCache {
    statics: StaticInputs,
    pods: BTreeMap<PodKey, PodInputs>,
    netids: BTreeSet<u32>,
    local: SharedRun,
}

/// Incremental pipeline: caches per-node fragments and the shared mesh runs. Results are
/// always equal to [`compute_node`] on the same model.
#[derive(Debug, Default)]
pub struct Pipeline {
    mesh: Option<Mesh>,
    nodes: HashMap<String, NodeCache>,
    /// The model's node epoch when the caches of deleted nodes were last dropped.
    pruned_epoch: Option<u64>,
    policies: PolicyCache,
    firewall: super::egress_firewall::FirewallCache,
}

impl Pipeline {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The desired FlowSets of every node a mutation affected (all nodes when
    /// `affected.all_nodes`); caches of nodes no longer in the model are dropped.
    pub fn recompute(
        &mut self,
        model: &ClusterModel,
        affected: &crate::model::Affected,
    ) -> Result<BTreeMap<String, FlowSet>, PipelineError> {
        // Only a change of the node set can leave caches of deleted nodes behind (and a stale
        // cache is only memory: every use checks its inputs).
        if self.pruned_epoch != Some(model.node_epoch()) {
            self.nodes.retain(|n, _| model.node(n).is_some());
            self.pruned_epoch = Some(model.node_epoch());
        }
        let names: Vec<String> = if affected.all_nodes {
            model.nodes().map(|n| n.name.clone()).collect()
        } else {
            affected
                .nodes
                .iter()
                .filter(|n| model.node(n).is_some())
                .cloned()
                .collect()
        };
        let mut out = BTreeMap::new();
        for n in names {
            let fs = self.node_flows(model, &n)?;
            out.insert(n, fs);
        }
        Ok(out)
    }

    /// Drop the cache of a node (e.g. deleted).
    pub fn forget_node(&mut self, node: &str) {
        self.nodes.remove(node);
        self.policies.forget_node(node);
    }

    fn mesh(&mut self, model: &ClusterModel) -> Result<&Mesh, PipelineError> {
        let epoch = (model.node_epoch(), model.config_epoch());
        if self.mesh.as_ref().is_none_or(|m| m.epoch != epoch) {
            let mut per: [Vec<(Flow, &str)>; 3] = Default::default();
            for n in model.nodes() {
                let [a, b, c] = remote_node_flows(n)?;
                per[0].push((a, &n.name));
                per[1].push((b, &n.name));
                per[2].push((c, &n.name));
            }
            let mut index: HashMap<String, [usize; 3]> = HashMap::new();
            let mut runs: Vec<SharedRun> = Vec::with_capacity(3);
            for (t, v) in per.iter_mut().enumerate() {
                v.sort_by(|a, b| key_cmp(&a.0, &b.0));
                for (i, (_, name)) in v.iter().enumerate() {
                    index.entry(name.to_string()).or_insert([0; 3])[t] = i;
                }
                runs.push(v.drain(..).map(|(f, _)| f).collect());
            }
            let [r0, r1, r2]: [SharedRun; 3] = runs
                .try_into()
                .unwrap_or_else(|_| [Arc::from([]), Arc::from([]), Arc::from([])]);
            self.mesh = Some(Mesh {
                epoch,
                runs: [r0, r1, r2],
                index,
            });
        }
        self.mesh
            .as_ref()
            .ok_or_else(|| PipelineError::UnknownNode(String::new()))
    }

    /// The node's complete FlowSet, recomputing only what changed since the last call.
    pub fn node_flows(
        &mut self,
        model: &ClusterModel,
        node: &str,
    ) -> Result<FlowSet, PipelineError> {
        let info = model
            .node(node)
            .ok_or_else(|| PipelineError::UnknownNode(node.to_string()))?;
        let statics = StaticInputs::of(model, info);
        let multitenant = statics.mode == Mode::Multitenant;
        // The node's pods, looked up once for the local, policy and multicast parts.
        let local_pods: Vec<&PodInfo> = model.pods_on_node(node).collect();
        let mut netids: BTreeSet<u32> = BTreeSet::new();
        // Collected (the pods come in key order: a bulk build) rather than inserted one by
        // one, each insert a search comparing `String`s.
        let pods: BTreeMap<PodKey, PodInputs> = local_pods
            .iter()
            .map(|p| {
                let netid = model.effective_netid(&p.key.namespace);
                if multitenant && netid != 0 {
                    netids.insert(netid);
                }
                let inputs = PodInputs {
                    ip: p.ip,
                    ofport: p.ofport,
                    netid,
                };
                (p.key.clone(), inputs)
            })
            .collect();
        let local = match self.nodes.get(node) {
            Some(c) if c.statics == statics => {
                if c.pods == pods && c.netids == netids {
                    c.local.clone()
                } else {
                    splice(c, &pods, &netids)?
                }
            }
            _ => full_local(&statics, &pods, &netids)?,
        };
        self.nodes.insert(
            node.to_string(),
            NodeCache {
                statics,
                pods,
                netids,
                local: local.clone(),
            },
        );
        let policy = self.policies.node_flows(model, node, &local_pods)?;
        let (egress, mut groups) = super::egress_ip::egress_flows(model, info)?;
        let egress: SharedRun = Arc::from(egress);
        let (multicast, mc_groups) = super::multicast::pods_multicast(model, node, &local_pods)?;
        let multicast: SharedRun = Arc::from(multicast);
        groups.extend(mc_groups);
        groups.sort_by_key(|g| g.group_id);
        let firewall = self.firewall.node_runs(model, node)?;
        let mesh = self.mesh(model)?;
        let own = mesh.index.get(node).copied();
        let mut parts = vec![
            FlowSet::from_chain(vec![(local.clone(), 0..local.len())]),
            policy,
            FlowSet::from_chain(vec![(egress.clone(), 0..egress.len())]),
            FlowSet::from_chain(vec![(multicast.clone(), 0..multicast.len())]),
        ];
        parts.extend(
            firewall
                .into_iter()
                .map(|r| FlowSet::from_chain(vec![(r.clone(), 0..r.len())])),
        );
        for (t, run) in mesh.runs.iter().enumerate() {
            // The mesh run without the node's own entry (still sorted).
            let pieces = match own {
                Some(idx) => vec![
                    (run.clone(), 0..idx[t]),
                    (run.clone(), idx[t] + 1..run.len()),
                ],
                None => vec![(run.clone(), 0..run.len())],
            };
            parts.push(FlowSet::from_chain(pieces));
        }
        Ok(FlowSet::merge(parts, groups))
    }
}

fn full_local(
    statics: &StaticInputs,
    pods: &BTreeMap<PodKey, PodInputs>,
    netids: &BTreeSet<u32>,
) -> Result<SharedRun, PipelineError> {
    let mut v = static_flows(statics)?;
    v.reserve(pods.len() * 5 + netids.len());
    for (k, p) in pods {
        v.extend(pod_flows(k, p)?);
    }
    for n in netids {
        v.push(netid_flow(*n)?);
    }
    v.sort_unstable_by(key_cmp);
    Ok(Arc::from(v))
}

fn splice(
    c: &NodeCache,
    pods: &BTreeMap<PodKey, PodInputs>,
    netids: &BTreeSet<u32>,
) -> Result<SharedRun, PipelineError> {
    let mut removed: Vec<Flow> = Vec::new();
    let mut added: Vec<Flow> = Vec::new();
    for (k, old) in &c.pods {
        if pods.get(k) != Some(old) {
            removed.extend(pod_flows(k, old)?);
        }
    }
    for (k, new) in pods {
        if c.pods.get(k) != Some(new) {
            added.extend(pod_flows(k, new)?);
        }
    }
    for n in c.netids.difference(netids) {
        removed.push(netid_flow(*n)?);
    }
    for n in netids.difference(&c.netids) {
        added.push(netid_flow(*n)?);
    }
    removed.sort_unstable_by(key_cmp);
    added.sort_unstable_by(key_cmp);
    let mut out: Vec<Flow> = Vec::with_capacity(c.local.len() + added.len());
    let mut ri = 0;
    let mut adds = added.into_iter().peekable();
    for f in c.local.iter() {
        while ri < removed.len() && key_cmp(&removed[ri], f) == Ordering::Less {
            ri += 1;
        }
        if ri < removed.len() && key_cmp(&removed[ri], f) == Ordering::Equal {
            ri += 1;
            continue;
        }
        while let Some(a) = adds.next_if(|a| key_cmp(a, f) == Ordering::Less) {
            out.push(a);
        }
        // An added flow with the same key as a kept one replaces it.
        if adds
            .peek()
            .is_some_and(|a| key_cmp(a, f) == Ordering::Equal)
        {
            if let Some(a) = adds.next() {
                out.push(a);
            }
            continue;
        }
        out.push(f.clone());
    }
    out.extend(adds);
    Ok(Arc::from(out))
}
