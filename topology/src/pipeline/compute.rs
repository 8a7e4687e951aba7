//! `(model, node) -> FlowSet`, pure and deterministic, with an incremental cache.
//!
//! A node's FlowSet is the merge of
//! * its *local* part: its static flows and one fragment (5 flows) per local pod, sorted; a pod
//!   attached or detached (found by its version in the model, without looking the other pods
//!   up) puts its fragment in as a run of its own or cuts its flows out, slices of the shared
//!   runs, and past a bound of slices the part is copied into one run again;
//! * its *NETID* part (multitenant): one flow per NETID of its pods, built once per NETID and
//!   shared by every node with a pod of it;
//! * its *policy* run (networkpolicy mode): tables 27 and 80, rebuilt when a policy, a label
//!   or a pod changes (see `netpol`), with the logging flows of namespaces that log and then
//!   the bridge's audit meter (see `audit`);
//! * its *egress-IP* run (table 101) and groups, computed from the egress plan (see `egress_ip`);
//! * its *multicast* run and groups (tables 110, 111, 120; see `multicast`), rebuilt on every
//!   call (it is empty unless a NETID with a local pod has multicast);
//! * its *egress firewall* runs (table 100): one per NETID of its pods that has a firewall,
//!   built once per NETID and shared by every node (see `egress_firewall`);
//! * the *mesh* runs of tables 10, 50 and 90: the flows for every node, built once for the whole
//!   cluster and shared (`Arc`) by every node's FlowSet, minus the node's own entry.

use super::builder::PipelineError;
use super::cookie;
use super::flowset::{key_cmp, FlowSet, SharedRun};
use super::fragments::{
    netid_flow, pod_flows_with_cookie, remote_node_flows, static_flows, PodInputs, StaticInputs,
};
use super::netpol::PolicyCache;
use crate::config::Mode;
use crate::model::{ClusterModel, PodInfo, PodKey};
use ofproto::Flow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What a local pod's flows depend on (None: the pod is gone).
fn pod_inputs(model: &ClusterModel, key: &PodKey) -> Option<PodInputs> {
    let p = model.pod(&key.namespace, &key.name)?;
    Some(PodInputs {
        ip: p.ip,
        ofport: p.ofport,
        netid: model.effective_netid(&key.namespace),
    })
}

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

/// A local pod as the node's cache last saw it.
#[derive(Debug)]
struct PodSlot {
    cookie: u64,
    inputs: PodInputs,
}

#[derive(Debug)]
struct NodeCache {
    statics: StaticInputs,
    /// The model's NETID and config epochs the pods' inputs were read at.
    epochs: (u64, u64),
    /// The local pods by version (see `ClusterModel::node_pod_versions`), sorted by version.
    pods: Vec<(u64, PodSlot)>,
    /// Multitenant: the NETIDs of local pods (other than 0), with how many pods use each.
    netids: BTreeMap<u32, u32>,
    /// Static and pod flows: slices of the node's own runs and of one run per changed pod.
    local: FlowSet,
    /// The NETIDs' flows, slices of the shared per-NETID runs.
    netid_part: FlowSet,
    /// The last egress-IP and multicast runs, reused (same `Arc`) while their flows are equal.
    egress: SharedRun,
    multicast: SharedRun,
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
    /// Table 80's flow of each NETID (multitenant), one run each, shared by every node with a
    /// pod of it: a flow independent of the node.
    netid_runs: HashMap<u32, SharedRun>,
    /// How many runs the last sweep of `netid_runs` kept.
    netid_runs_kept: usize,
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

    /// The node's complete FlowSet, recomputing only what changed since the last call: a pod
    /// attached or detached costs its own flows (and its NETID's, when it is the first or last
    /// of it on the node), found by pod version without looking the node's other pods up.
    pub fn node_flows(
        &mut self,
        model: &ClusterModel,
        node: &str,
    ) -> Result<FlowSet, PipelineError> {
        let info = model
            .node(node)
            .ok_or_else(|| PipelineError::UnknownNode(node.to_string()))?;
        let statics = StaticInputs::of(model, info);
        let epochs = (model.netid_epoch(), model.config_epoch());
        let mut cache = match self.nodes.remove(node) {
            Some(mut c) if c.statics == statics && c.epochs == epochs => {
                self.update_local(model, node, &mut c)?;
                c
            }
            _ => self.full_local(model, node, statics, epochs)?,
        };
        // The policy and multicast parts read the node's pods themselves (looked up once).
        let policy_mode = model.is_policy_mode();
        let multicast = model.any_multicast_annotated();
        let local_pods: Vec<&PodInfo> = if policy_mode || multicast {
            model.pods_on_node(node).collect()
        } else {
            Vec::new()
        };
        let policy = self.policies.node_flows(model, node, &local_pods)?;
        let (egress, mut groups) = super::egress_ip::egress_flows(model, info)?;
        if *cache.egress != *egress {
            cache.egress = Arc::from(egress);
        }
        if multicast {
            let (flows, mc_groups) = super::multicast::pods_multicast(model, node, &local_pods)?;
            if *cache.multicast != *flows {
                cache.multicast = Arc::from(flows);
            }
            groups.extend(mc_groups);
        } else if !cache.multicast.is_empty() {
            cache.multicast = Arc::from([]);
        }
        groups.sort_by_key(|g| g.group_id);
        let (firewall, firewall_audit) = self.firewall.node_runs(model, node)?;
        let mesh = self.mesh(model)?;
        let own = mesh.index.get(node).copied();
        let whole = |r: &SharedRun| FlowSet::from_chain(vec![(r.clone(), 0..r.len())]);
        let mut parts = vec![
            cache.local.clone(),
            cache.netid_part.clone(),
            policy,
            whole(&cache.egress),
            whole(&cache.multicast),
        ];
        parts.extend(firewall.iter().map(whole));
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
        let mut out = FlowSet::merge(parts, groups);
        if self.policies.node_has_audit(node) || firewall_audit {
            // The logging flows' meter: on the bridges that have some, at the configured rate.
            let rate = model.audit_config().rate_limit;
            out = out.with_meters(vec![super::audit::audit_meter(rate)]);
        }
        self.nodes.insert(node.to_string(), cache);
        Ok(out)
    }

    /// The shared run of a NETID's table-80 flow.
    fn netid_run(&mut self, netid: u32) -> Result<SharedRun, PipelineError> {
        if let Some(r) = self.netid_runs.get(&netid) {
            return Ok(r.clone());
        }
        let r: SharedRun = Arc::from([netid_flow(netid)?]);
        if self.netid_runs.len() >= 2 * self.netid_runs_kept.max(64) {
            // Runs no node's FlowSet uses any more (namespaces come and go): dropped once the
            // map has doubled since the last sweep, so the sweep costs O(1) per insert.
            self.netid_runs.retain(|_, r| Arc::strong_count(r) > 1);
            self.netid_runs_kept = self.netid_runs.len();
        }
        self.netid_runs.insert(netid, r.clone());
        Ok(r)
    }

    /// The node's NETID flows: slices of the shared runs, in NETID order (their key order).
    fn netid_part(&mut self, netids: &BTreeMap<u32, u32>) -> Result<FlowSet, PipelineError> {
        let mut pieces = Vec::with_capacity(netids.len());
        for n in netids.keys() {
            let r = self.netid_run(*n)?;
            pieces.push((r, 0..1));
        }
        Ok(FlowSet::from_chain(pieces))
    }

    /// The node's local flows from scratch: every pod looked up.
    fn full_local(
        &mut self,
        model: &ClusterModel,
        node: &str,
        statics: StaticInputs,
        epochs: (u64, u64),
    ) -> Result<NodeCache, PipelineError> {
        let multitenant = statics.mode == Mode::Multitenant;
        let count = model.node_pod_count(node);
        let mut pods: Vec<(u64, PodSlot)> = Vec::with_capacity(count);
        let mut netids: BTreeMap<u32, u32> = BTreeMap::new();
        let mut v = static_flows(&statics)?;
        v.reserve_exact(count * 5);
        for (key, version) in model.node_pod_versions(node) {
            let Some(inputs) = pod_inputs(model, key) else {
                continue;
            };
            if multitenant && inputs.netid != 0 {
                *netids.entry(inputs.netid).or_insert(0) += 1;
            }
            let cookie = cookie::pod_cookie(&key.namespace, &key.name);
            v.extend(pod_flows_with_cookie(cookie, &inputs)?);
            pods.push((version, PodSlot { cookie, inputs }));
        }
        pods.sort_unstable_by_key(|(v, _)| *v);
        v.sort_unstable_by(key_cmp);
        let run: SharedRun = Arc::from(v);
        Ok(NodeCache {
            statics,
            epochs,
            pods,
            netid_part: self.netid_part(&netids)?,
            netids,
            local: FlowSet::from_chain(vec![(run.clone(), 0..run.len())]),
            egress: Arc::from([]),
            multicast: Arc::from([]),
        })
    }

    /// Bring a node's cached local flows up to date with its pods: only the pods whose version
    /// is new or gone are looked up and have their flows built or taken out.
    fn update_local(
        &mut self,
        model: &ClusterModel,
        node: &str,
        c: &mut NodeCache,
    ) -> Result<(), PipelineError> {
        let mut added: Vec<(&PodKey, u64)> = Vec::new();
        let mut found = vec![false; c.pods.len()];
        let mut seen = 0;
        for (key, version) in model.node_pod_versions(node) {
            match c.pods.binary_search_by_key(&version, |(v, _)| *v) {
                Ok(i) => {
                    found[i] = true;
                    seen += 1;
                }
                Err(_) => added.push((key, version)),
            }
        }
        if added.is_empty() && seen == c.pods.len() {
            return Ok(());
        }
        let multitenant = c.statics.mode == Mode::Multitenant;
        if seen < c.pods.len() {
            let mut kept = Vec::with_capacity(seen + added.len());
            let mut gone = Vec::new();
            for (e, f) in std::mem::take(&mut c.pods).into_iter().zip(&found) {
                if *f {
                    kept.push(e);
                } else {
                    gone.push(e.1);
                }
            }
            c.pods = kept;
            for slot in gone {
                for f in pod_flows_with_cookie(slot.cookie, &slot.inputs)? {
                    c.local.remove_key(&f);
                }
                let n = slot.inputs.netid;
                if multitenant && n != 0 {
                    if let Some(k) = c.netids.get_mut(&n) {
                        *k -= 1;
                        if *k == 0 {
                            c.netids.remove(&n);
                            let run = self.netid_run(n)?;
                            for f in run.iter() {
                                c.netid_part.remove_key(f);
                            }
                        }
                    }
                }
            }
        }
        for (key, version) in added {
            let Some(inputs) = pod_inputs(model, key) else {
                continue;
            };
            let cookie = cookie::pod_cookie(&key.namespace, &key.name);
            let mut flows = pod_flows_with_cookie(cookie, &inputs)?;
            flows.sort_unstable_by(key_cmp);
            c.local.insert_run(&Arc::from(flows));
            if multitenant && inputs.netid != 0 {
                let k = c.netids.entry(inputs.netid).or_insert(0);
                *k += 1;
                if *k == 1 {
                    let run = self.netid_run(inputs.netid)?;
                    c.netid_part.insert_run(&run);
                }
            }
            let at = c.pods.partition_point(|(v, _)| *v < version);
            c.pods.insert(at, (version, PodSlot { cookie, inputs }));
        }
        // Each change cuts slices; past a bound the flows are copied into one run again (a
        // cost shared by the changes since the last copy).
        if c.local.slice_count() > 64 + c.local.len() / 4 {
            c.local = c.local.compacted();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterNetworkConfig, Mode};
    use crate::model::{Affected, PodAttach};
    use std::net::Ipv4Addr;

    /// Namespaces that come and go (CI projects) do not leave their NETID runs behind.
    #[test]
    fn netid_runs_of_gone_namespaces_are_dropped() {
        let cfg = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            Mode::Multitenant,
        );
        let mut m = ClusterModel::new(cfg).expect("model");
        m.add_node("a", Ipv4Addr::new(192, 168, 0, 1), 1)
            .expect("a");
        let mut p = Pipeline::new();
        let mut most = 0;
        for i in 0..1_000 {
            let ns = format!("ci-{i}");
            m.add_namespace(&ns).expect("ns");
            m.add_pod(PodAttach {
                namespace: &ns,
                name: "job",
                node: "a",
                port_name: "job",
                ofport: 3,
            })
            .expect("pod");
            p.recompute(&m, &Affected::all()).expect("flows");
            m.delete_pod(&ns, "job").expect("del pod");
            m.delete_namespace(&ns).expect("del ns");
            p.recompute(&m, &Affected::all()).expect("flows");
            most = most.max(p.netid_runs.len());
        }
        assert!(
            most <= 128,
            "{most} NETID runs kept for 1 live namespace at a time"
        );
        let fresh = compute_node(&m, "a").expect("fresh");
        let cached = p.node_flows(&m, "a").expect("cached");
        assert!(cached.iter().eq(fresh.iter()));
    }
}
