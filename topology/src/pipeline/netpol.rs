//! NetworkPolicy flows (networkpolicy mode): tables 27 (egress, on the source pod's node) and
//! 80 (ingress, on the destination pod's node), built with OVS `conjunction` so that a rule's
//! flows grow with the sum of its selected pods, peers and ports, never their product.
//!
//! A rule becomes one or more *conjunctions* of up to three dimensions:
//! 1. the selected pods on this node (`nw_dst=POD` for ingress, `nw_src=POD` for egress);
//! 2. the peers (`nw_src`/`nw_dst` prefixes of pod IPs and ipBlocks, or `reg0=NETID` for
//!    ingress peers that are whole namespaces), left out when the rule allows every peer;
//! 3. the ports (`tcp,tp_dst=V/MASK`, `udp`, ...), left out when the rule allows every port.
//!
//! Named ports resolve on the destination pod, so a rule with named ports is split into one
//! conjunction per distinct set of resolved ports. A rule with one dimension left becomes
//! plain flows. Clause flows with the same match are shared by every conjunction that uses
//! them (one flow, several `conjunction` actions). A conjunction's id is a hash of its
//! policy, direction, rule and group, probed to the next free value on a collision on this
//! node. Stateful: `ct_state=+est`/`+rel` pass before any policy (static flows), so only the
//! first packet of a connection is judged; the connection is committed after the last
//! judgement (table 30 for traffic leaving this node, table 80 for local delivery).

use super::builder::{FlowBuilder, PipelineError};
use super::cookie::{self, Feature, ObjectKind};
use super::flowset::{key_cmp, SharedRun};
use super::priority::Band;
use super::regs;
use super::tables::TableId;
use crate::model::{
    ClusterModel, LabelSelector, NetworkPolicy, Peer, PodInfo, PolicyKey, PolicyPort, PortSpec,
    Protocol,
};
use crate::Ipv4Cidr;
use ofproto::oxm::eth_type::IPV4;
use ofproto::{Action, Field, Flow, Match};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Which way a rule looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// `spec.ingress`: judged in table 80 on the destination's node.
    Ingress,
    /// `spec.egress`: judged in table 27 on the source's node.
    Egress,
}

impl Direction {
    fn table(self) -> TableId {
        match self {
            Direction::Ingress => TableId::Isolation,
            Direction::Egress => TableId::PolicyEgress,
        }
    }
    /// `ingress` / `egress`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
    /// The field naming the pod a policy selects (destination for ingress, source for egress).
    fn target_field(self) -> Field {
        match self {
            Direction::Ingress => Field::Ipv4Dst,
            Direction::Egress => Field::Ipv4Src,
        }
    }
    /// The field naming the peer.
    fn peer_field(self) -> Field {
        match self {
            Direction::Ingress => Field::Ipv4Src,
            Direction::Egress => Field::Ipv4Dst,
        }
    }
}

/// The verdict actions of an allowed packet: ingress commits and delivers, egress goes on to
/// the commit table.
fn allow(fb: FlowBuilder, dir: Direction) -> FlowBuilder {
    match dir {
        Direction::Ingress => fb.actions([regs::ct_commit(), regs::output_dst_port()]),
        Direction::Egress => fb.goto(TableId::CtCommit),
    }
}

/// One alternative of a dimension: a match fragment.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Clause {
    /// An IPv4 prefix in the direction's target or peer field.
    Net(Field, Ipv4Addr, u8),
    /// reg0 = NETID (ingress peers that are whole namespaces).
    SrcNetId(u32),
    /// A protocol with an optional `tp_dst` value/mask.
    Port(Protocol, Option<(u16, u16)>),
}

impl Clause {
    fn to_match(&self) -> Match {
        let ip = Match::new().eth_type(IPV4);
        match *self {
            Clause::Net(Field::Ipv4Src, a, p) => ip.ipv4_src(a, p),
            Clause::Net(_, a, p) => ip.ipv4_dst(a, p),
            Clause::SrcNetId(n) => ip.reg(regs::REG_SRC_NETID, n),
            Clause::Port(proto, tp) => {
                let m = ip.ip_proto(proto.ip_proto());
                match tp {
                    None => m,
                    Some((v, mask)) => {
                        let f = match proto {
                            Protocol::Tcp => Field::TcpDst,
                            Protocol::Udp => Field::UdpDst,
                            Protocol::Sctp => Field::SctpDst,
                        };
                        if mask == u16::MAX {
                            m.with_u64(f, v as u64)
                        } else {
                            m.with_u64_masked(f, v as u64, mask as u64)
                        }
                    }
                }
            }
        }
    }
}

/// A conjunction to build: up to three dimensions (each a set of alternatives).
#[derive(Debug)]
struct Conj {
    policy: PolicyKey,
    /// Stable name of the conjunction (hashed into its id).
    name: String,
    dir: Direction,
    dims: Vec<BTreeSet<Clause>>,
}

/// The smallest list of prefixes covering exactly `[lo, hi]`.
pub fn range_prefixes(lo: u32, hi: u32, bits: u8) -> Vec<(u32, u8)> {
    let mut out = Vec::new();
    let mut cur = lo as u64;
    let end = hi as u64;
    while cur <= end {
        let mut size: u64 = if cur == 0 {
            1u64 << bits
        } else {
            1u64 << cur.trailing_zeros().min(bits as u32)
        };
        while cur + size - 1 > end {
            size >>= 1;
        }
        let len = bits - size.trailing_zeros() as u8;
        out.push((cur as u32, len));
        cur += size;
    }
    out
}

/// `[lo, hi]` as tp_dst value/mask pairs.
fn port_masks(lo: u16, hi: u16) -> Vec<(u16, u16)> {
    range_prefixes(lo as u32, hi as u32, 16)
        .into_iter()
        .map(|(v, len)| {
            let mask = if len == 0 {
                0
            } else {
                (u16::MAX << (16 - len)) as u32
            };
            (v as u16, mask as u16)
        })
        .collect()
}

/// A CIDR minus its exceptions, as prefixes.
pub fn cidr_minus(cidr: Ipv4Cidr, except: &[Ipv4Cidr]) -> Vec<Ipv4Cidr> {
    let lo = u32::from(cidr.network());
    let hi = u32::from(cidr.broadcast());
    let mut holes: Vec<(u32, u32)> = except
        .iter()
        .map(|e| (u32::from(e.network()), u32::from(e.broadcast())))
        .collect();
    holes.sort_unstable();
    let mut ranges = Vec::new();
    let mut cur = lo as u64;
    for (a, b) in holes {
        if (a as u64) > cur {
            ranges.push((cur as u32, a - 1));
        }
        cur = cur.max(b as u64 + 1);
    }
    if cur <= hi as u64 {
        ranges.push((cur as u32, hi));
    }
    ranges
        .into_iter()
        .flat_map(|(a, b)| range_prefixes(a, b, 32))
        .map(|(a, len)| Ipv4Cidr::new(Ipv4Addr::from(a), len))
        .collect()
}

/// An exact set of addresses as the fewest prefixes that hold only those addresses.
fn aggregate(ips: &BTreeSet<Ipv4Addr>) -> Vec<(Ipv4Addr, u8)> {
    let mut out = Vec::new();
    let mut it = ips.iter().map(|a| u32::from(*a)).peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while let Some(&n) = it.peek() {
            if end.checked_add(1) == Some(n) {
                end = n;
                it.next();
            } else {
                break;
            }
        }
        out.extend(
            range_prefixes(start, end, 32)
                .into_iter()
                .map(|(a, l)| (Ipv4Addr::from(a), l)),
        );
    }
    out
}

/// What a peer list resolves to, computed once per policy rule and shared by every node.
#[derive(Debug, Default)]
struct Peers {
    /// Every peer (the rule has no `from`/`to`).
    any: bool,
    /// Exact pod addresses.
    pod_ips: BTreeSet<Ipv4Addr>,
    /// ipBlock prefixes (except removed).
    blocks: Vec<Ipv4Cidr>,
    /// Whole namespaces by NETID (ingress only).
    netids: BTreeSet<u32>,
    /// The pods among the peers (for named ports on egress).
    pods: Vec<(Ipv4Addr, Vec<crate::model::ContainerPort>)>,
    /// The peer dimension's clauses (computed once).
    dim: BTreeSet<Clause>,
}

/// Resolves selectors against the model, caching namespace selections per selector.
struct Resolver<'m, 'c> {
    model: &'m ClusterModel,
    ns_cache: &'c mut HashMap<LabelSelector, Arc<Vec<String>>>,
    peer_cache: &'c mut HashMap<(PolicyKey, Direction, usize), Arc<Peers>>,
}

impl Resolver<'_, '_> {
    fn namespaces(&mut self, sel: &LabelSelector) -> Arc<Vec<String>> {
        if let Some(v) = self.ns_cache.get(sel) {
            return v.clone();
        }
        let v: Arc<Vec<String>> = Arc::new(
            self.model
                .selected_namespaces(sel)
                .map(|n| n.name)
                .collect(),
        );
        self.ns_cache.insert(sel.clone(), v.clone());
        v
    }

    /// The peers of rule `idx` of `p` in direction `dir`, resolved once per model state.
    fn rule_peers(
        &mut self,
        p: &NetworkPolicy,
        dir: Direction,
        idx: usize,
        rule: &crate::model::PolicyRule,
    ) -> Arc<Peers> {
        let key = (p.key(), dir, idx);
        if let Some(v) = self.peer_cache.get(&key) {
            return v.clone();
        }
        let mut peers = self.peers(p, &rule.peers, dir);
        peers.dim = peers.clauses(dir);
        let v = Arc::new(peers);
        self.peer_cache.insert(key, v.clone());
        v
    }

    fn peers(&mut self, p: &NetworkPolicy, peers: &[Peer], dir: Direction) -> Peers {
        let keep_pods = dir == Direction::Egress && p.has_named_ports();
        let mut out = Peers {
            any: peers.is_empty(),
            ..Peers::default()
        };
        let all = LabelSelector::everything();
        for peer in peers {
            match peer {
                Peer::IpBlock { cidr, except } => out.blocks.extend(cidr_minus(*cidr, except)),
                Peer::Pods {
                    namespace_selector,
                    pod_selector,
                } => {
                    let names: Arc<Vec<String>> = match namespace_selector {
                        None => Arc::new(vec![p.namespace.clone()]),
                        Some(s) => self.namespaces(s),
                    };
                    let whole_ns = namespace_selector.is_some()
                        && pod_selector.as_ref().is_none_or(|s| s.is_empty());
                    let psel = pod_selector.as_ref().unwrap_or(&all);
                    for ns in names.iter() {
                        let netid = self.model.effective_netid(ns);
                        // Ingress from a whole namespace is its NETID in reg0, except NETID 0,
                        // which host and external traffic share: those pods go by address.
                        let by_netid = whole_ns && dir == Direction::Ingress && netid != 0;
                        if by_netid {
                            out.netids.insert(netid);
                        }
                        for pod in self.model.pods_in(ns) {
                            if psel.matches(&pod.labels) {
                                if keep_pods {
                                    out.pods.push((pod.ip, pod.ports.clone()));
                                }
                                if !by_netid {
                                    out.pod_ips.insert(pod.ip);
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

impl Peers {
    fn clauses(&self, dir: Direction) -> BTreeSet<Clause> {
        let f = dir.peer_field();
        let mut s: BTreeSet<Clause> = aggregate(&self.pod_ips)
            .into_iter()
            .map(|(a, l)| Clause::Net(f, a, l))
            .collect();
        s.extend(
            self.blocks
                .iter()
                .map(|c| Clause::Net(f, c.network(), c.prefix())),
        );
        s.extend(self.netids.iter().map(|n| Clause::SrcNetId(*n)));
        s
    }
}

fn numeric_port_clauses(ports: &[PolicyPort]) -> BTreeSet<Clause> {
    let mut s = BTreeSet::new();
    for p in ports {
        match (&p.port, p.range()) {
            (None, _) => {
                s.insert(Clause::Port(p.protocol, None));
            }
            (Some(PortSpec::Number(_)), Some((lo, hi))) => {
                s.extend(
                    port_masks(lo, hi)
                        .into_iter()
                        .map(|vm| Clause::Port(p.protocol, Some(vm))),
                );
            }
            _ => {}
        }
    }
    s
}

/// The ports named entries resolve to on a pod with these container ports.
fn named_port_clauses(
    ports: &[PolicyPort],
    container: &[crate::model::ContainerPort],
) -> BTreeSet<Clause> {
    let mut s = BTreeSet::new();
    for p in ports {
        if let Some(PortSpec::Name(n)) = &p.port {
            for c in container {
                if &c.name == n && c.protocol == p.protocol {
                    s.insert(Clause::Port(p.protocol, Some((c.port, u16::MAX))));
                }
            }
        }
    }
    s
}

fn net_clauses(f: Field, pods: &[&PodInfo]) -> BTreeSet<Clause> {
    pods.iter().map(|p| Clause::Net(f, p.ip, 32)).collect()
}

/// The conjunctions of one rule for the pods `selected` on this node.
fn rule_conjs(
    res: &mut Resolver<'_, '_>,
    p: &NetworkPolicy,
    dir: Direction,
    idx: usize,
    rule: &crate::model::PolicyRule,
    selected: &[&PodInfo],
    out: &mut Vec<Conj>,
) {
    let key = p.key();
    let peers = res.rule_peers(p, dir, idx, rule);
    let peer_dim = &peers.dim;
    if !peers.any && peer_dim.is_empty() {
        return; // the peers select nothing (yet)
    }
    let base = format!("{}/{}/{}/{idx}", p.namespace, p.name, dir.as_str());
    let has_named = rule.has_named_ports();
    let numeric = numeric_port_clauses(&rule.ports);
    let targets = net_clauses(dir.target_field(), selected);
    let mut push = |name: String, t: BTreeSet<Clause>, peer: Option<BTreeSet<Clause>>, ports| {
        let mut dims = vec![t];
        if let Some(pd) = peer {
            dims.push(pd);
        }
        if let Some(ps) = ports {
            dims.push(ps);
        }
        out.push(Conj {
            policy: key.clone(),
            name,
            dir,
            dims,
        });
    };
    let peer_opt = |d: &BTreeSet<Clause>| if peers.any { None } else { Some(d.clone()) };
    if rule.ports.is_empty() {
        push(base, targets, peer_opt(peer_dim), None);
        return;
    }
    if !numeric.is_empty() {
        push(
            format!("{base}/n"),
            targets.clone(),
            peer_opt(peer_dim),
            Some(numeric),
        );
    }
    if !has_named {
        return;
    }
    match dir {
        Direction::Ingress => {
            // Named ports resolve on the destination: the selected pods.
            let mut groups: BTreeMap<BTreeSet<Clause>, Vec<&PodInfo>> = BTreeMap::new();
            for pod in selected {
                let ports = named_port_clauses(&rule.ports, &pod.ports);
                if !ports.is_empty() {
                    groups.entry(ports).or_default().push(pod);
                }
            }
            for (i, (ports, pods)) in groups.into_iter().enumerate() {
                let t = net_clauses(dir.target_field(), &pods);
                push(format!("{base}/p{i}"), t, peer_opt(peer_dim), Some(ports));
            }
        }
        Direction::Egress => {
            // Named ports resolve on the destination: the peer pods (for ipBlocks and
            // "every peer", the pods whose addresses they cover).
            let candidates: Vec<(Ipv4Addr, Vec<crate::model::ContainerPort>)> =
                if peers.any || !peers.blocks.is_empty() {
                    let mut v: Vec<_> = res
                        .model
                        .pods()
                        .filter(|pod| {
                            peers.any
                                || peers.pod_ips.contains(&pod.ip)
                                || peers.blocks.iter().any(|b| b.contains(pod.ip))
                        })
                        .map(|pod| (pod.ip, pod.ports.clone()))
                        .collect();
                    v.extend(peers.pods.iter().cloned());
                    v
                } else {
                    peers.pods.clone()
                };
            let mut groups: BTreeMap<BTreeSet<Clause>, BTreeSet<Ipv4Addr>> = BTreeMap::new();
            for (ip, cports) in candidates {
                let ports = named_port_clauses(&rule.ports, &cports);
                if !ports.is_empty() {
                    groups.entry(ports).or_default().insert(ip);
                }
            }
            for (i, (ports, ips)) in groups.into_iter().enumerate() {
                let pd: BTreeSet<Clause> = aggregate(&ips)
                    .into_iter()
                    .map(|(a, l)| Clause::Net(dir.peer_field(), a, l))
                    .collect();
                push(
                    format!("{base}/p{i}"),
                    targets.clone(),
                    Some(pd),
                    Some(ports),
                );
            }
        }
    }
}

/// Pick each conjunction's id: a hash of its name, probed past ids taken on this node.
fn conj_ids(conjs: &[Conj]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..conjs.len()).collect();
    order.sort_by(|a, b| conjs[*a].name.cmp(&conjs[*b].name));
    let mut taken = BTreeSet::new();
    let mut ids = vec![0u32; conjs.len()];
    for i in order {
        let mut id = cookie::object_hash(&format!("conj/{}", conjs[i].name)).max(1);
        while !taken.insert(id) {
            id = id.wrapping_add(1).max(1);
        }
        ids[i] = id;
    }
    ids
}

/// One node's policy flows, sorted (no cache).
pub fn node_policy_flows(model: &ClusterModel, node: &str) -> Result<SharedRun, PipelineError> {
    PolicyCache::default().node_flows(model, node)
}

/// Caches, for one model state (`policy_epoch`, `config_epoch`), each node's policy flows and
/// the namespaces each namespace selector selects.
#[derive(Debug, Default)]
pub struct PolicyCache {
    epoch: (u64, u64),
    namespace_epoch: u64,
    ns_cache: HashMap<LabelSelector, Arc<Vec<String>>>,
    peer_cache: HashMap<(PolicyKey, Direction, usize), Arc<Peers>>,
    nodes: HashMap<String, SharedRun>,
}

impl PolicyCache {
    /// The node's policy flows (empty outside networkpolicy mode).
    pub fn node_flows(
        &mut self,
        model: &ClusterModel,
        node: &str,
    ) -> Result<SharedRun, PipelineError> {
        let epoch = (model.policy_epoch(), model.config_epoch());
        if epoch != self.epoch {
            self.epoch = epoch;
            self.peer_cache.clear();
            self.nodes.clear();
        }
        // Namespace selections change only with the namespaces and their labels.
        if model.namespace_epoch() != self.namespace_epoch {
            self.namespace_epoch = model.namespace_epoch();
            self.ns_cache.clear();
        }
        if !model.is_policy_mode() {
            return Ok(Arc::from([]));
        }
        if let Some(r) = self.nodes.get(node) {
            return Ok(r.clone());
        }
        let mut res = Resolver {
            model,
            ns_cache: &mut self.ns_cache,
            peer_cache: &mut self.peer_cache,
        };
        let r = node_policy_flows_with(&mut res, node)?;
        self.nodes.insert(node.to_string(), r.clone());
        Ok(r)
    }

    /// Forget a node.
    pub fn forget_node(&mut self, node: &str) {
        self.nodes.remove(node);
    }
}

fn node_policy_flows_with(
    res: &mut Resolver<'_, '_>,
    node: &str,
) -> Result<SharedRun, PipelineError> {
    let model = res.model;
    let mut conjs: Vec<Conj> = Vec::new();
    // Pods isolated per direction (a policy of that type selects them).
    let mut isolated: [BTreeMap<Ipv4Addr, String>; 2] = Default::default();
    let mut local: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
    for p in model.pods_on_node(node) {
        local.entry(p.key.namespace.as_str()).or_default().push(p);
    }
    for (ns, pods) in local {
        for p in model.policies_in(ns) {
            let selected: Vec<&PodInfo> = pods
                .iter()
                .copied()
                .filter(|pod| p.pod_selector.matches(&pod.labels))
                .collect();
            if selected.is_empty() {
                continue;
            }
            for (di, dir, on, rules) in [
                (0, Direction::Ingress, p.ingress_isolation, &p.ingress),
                (1, Direction::Egress, p.egress_isolation, &p.egress),
            ] {
                if !on {
                    continue;
                }
                for pod in &selected {
                    isolated[di].insert(pod.ip, pod.key.to_string());
                }
                for (i, r) in rules.iter().enumerate() {
                    rule_conjs(res, p, dir, i, r, &selected, &mut conjs);
                }
            }
        }
    }
    let ids = conj_ids(&conjs);
    let mut flows: Vec<Flow> = Vec::new();
    // Clause flows shared between conjunctions: (table, match) -> (conjunction actions, cookie).
    type ClauseKey = (TableId, Clause);
    // (id, clause, n_clauses) of every conjunction a clause flow serves, and its cookie.
    type ClauseUse = (Vec<(u32, u8, u8)>, u64);
    let mut clauses: BTreeMap<ClauseKey, ClauseUse> = BTreeMap::new();
    let mut direct: BTreeMap<ClauseKey, (Direction, u64)> = BTreeMap::new();
    for (c, id) in conjs.iter().zip(&ids) {
        let pc = cookie::policy_cookie(&c.policy.0, &c.policy.1);
        let table = c.dir.table();
        if c.dims.len() == 1 {
            for cl in &c.dims[0] {
                direct.entry((table, cl.clone())).or_insert((c.dir, pc));
            }
            continue;
        }
        let n = c.dims.len() as u8;
        for (k, dim) in c.dims.iter().enumerate() {
            for cl in dim {
                let e = clauses
                    .entry((table, cl.clone()))
                    .or_insert((Vec::new(), pc));
                // 0-based on the wire and in `Action::Conjunction` (OVS prints k+1).
                e.0.push((*id, k as u8, n));
                e.1 = e.1.min(pc);
            }
        }
        flows.push(
            allow(
                FlowBuilder::new(table, Band::PolicyConjunction, pc)
                    .matching(Match::new().eth_type(IPV4).conj_id(*id)),
                c.dir,
            )
            .build()?,
        );
    }
    for ((table, cl), (mut acts, ck)) in clauses {
        acts.sort_unstable();
        acts.dedup();
        flows.push(
            FlowBuilder::new(table, Band::PolicyConjunction, ck)
                .matching(cl.to_match())
                .actions(
                    acts.into_iter()
                        .map(|(id, clause, n_clauses)| Action::Conjunction {
                            id,
                            clause,
                            n_clauses,
                        }),
                )
                .build()?,
        );
    }
    for ((table, cl), (dir, ck)) in direct {
        flows.push(
            allow(
                FlowBuilder::new(table, Band::PolicyDirect, ck).matching(cl.to_match()),
                dir,
            )
            .build()?,
        );
    }
    for (di, dir) in [Direction::Ingress, Direction::Egress]
        .into_iter()
        .enumerate()
    {
        for (ip, pod) in &isolated[di] {
            let ck = cookie::cookie(
                Feature::NetworkPolicy,
                ObjectKind::Pod,
                cookie::object_hash(&format!("pod/{pod}")),
            );
            let m = Clause::Net(dir.target_field(), *ip, 32).to_match();
            flows.push(
                FlowBuilder::new(dir.table(), Band::PolicyIsolate, ck)
                    .matching(m)
                    .build()?,
            );
        }
    }
    flows.sort_unstable_by(key_cmp);
    flows.dedup_by(|a, b| key_cmp(a, b) == std::cmp::Ordering::Equal);
    Ok(Arc::from(flows))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{ClusterNetworkConfig, Mode};
    use crate::model::{PodAttach, PodMeta, PolicyRule};

    /// One node, pods `a` (app=a) and `b` (app=b) in namespace `ns`, and a policy letting
    /// `a` reach `b` on TCP 80 and 443: a three-dimension conjunction.
    pub(crate) fn one_node_policy() -> ClusterModel {
        let config = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            Mode::Networkpolicy,
        );
        let mut m = ClusterModel::new(config).expect("model");
        m.add_node("n1", Ipv4Addr::new(192, 168, 0, 1), 1)
            .expect("node");
        m.add_namespace("ns").expect("namespace");
        for (name, ofport) in [("a", 3), ("b", 4)] {
            let meta = PodMeta {
                labels: [("app".to_string(), name.to_string())].into(),
                ports: Vec::new(),
            };
            let attach = PodAttach {
                namespace: "ns",
                name,
                node: "n1",
                port_name: name,
                ofport,
            };
            m.add_pod_with(attach, meta).expect("pod");
        }
        let tcp = |n| PolicyPort {
            protocol: Protocol::Tcp,
            port: Some(PortSpec::Number(n)),
            end_port: None,
        };
        m.apply_policy(NetworkPolicy {
            namespace: "ns".into(),
            name: "b-from-a".into(),
            pod_selector: LabelSelector::labels([("app", "b")]),
            ingress_isolation: true,
            egress_isolation: false,
            ingress: vec![PolicyRule {
                peers: vec![Peer::Pods {
                    namespace_selector: None,
                    pod_selector: Some(LabelSelector::labels([("app", "a")])),
                }],
                ports: vec![tcp(80), tcp(443)],
            }],
            egress: Vec::new(),
        })
        .expect("policy");
        m
    }

    /// `Action::Conjunction` holds the wire's 0-based clause index (OVS prints it 1-based and
    /// refuses `k/n` with k > n): every conjunction uses clauses 0..n exactly.
    #[test]
    fn conjunction_clauses_are_zero_based() {
        let m = one_node_policy();
        let flows = node_policy_flows(&m, "n1").expect("flows");
        let mut clauses: BTreeMap<u32, (u8, BTreeSet<u8>)> = BTreeMap::new();
        for f in flows.iter() {
            for ins in &f.instructions {
                if let ofproto::Instruction::ApplyActions(acts) = ins {
                    for a in acts {
                        if let Action::Conjunction {
                            id,
                            clause,
                            n_clauses,
                        } = a
                        {
                            let e = clauses.entry(*id).or_insert((*n_clauses, BTreeSet::new()));
                            e.1.insert(*clause);
                        }
                    }
                }
            }
        }
        assert_eq!(clauses.len(), 1, "{clauses:?}");
        for (id, (n, seen)) in clauses {
            assert_eq!(n, 3, "conjunction {id}");
            assert_eq!(seen, (0..n).collect::<BTreeSet<u8>>(), "conjunction {id}");
        }
        let text: Vec<String> = flows.iter().map(|f| f.to_string()).collect();
        for k in 1..=3 {
            assert!(
                text.iter().any(|l| l.contains(&format!(",{k}/3)"))),
                "no clause {k}/3 in:\n{}",
                text.join("\n")
            );
        }
    }

    #[test]
    fn prefixes_cover_exactly() {
        assert_eq!(port_masks(80, 80), vec![(80, 0xffff)]);
        assert_eq!(port_masks(0, 65535), vec![(0, 0)]);
        assert_eq!(port_masks(1000, 1023), vec![(1000, 0xfff8), (1008, 0xfff0)]);
        for (lo, hi) in [(1u16, 65535u16), (3, 9), (32000, 32768), (7, 7)] {
            let ms = port_masks(lo, hi);
            for v in 0..=u16::MAX {
                let inside = ms.iter().any(|(val, m)| v & m == *val);
                assert_eq!(inside, (lo..=hi).contains(&v), "{lo}-{hi}: {v}");
            }
        }
        let c: Ipv4Cidr = "10.0.0.0/8".parse().expect("cidr");
        let e: Ipv4Cidr = "10.1.0.0/16".parse().expect("cidr");
        let parts = cidr_minus(c, &[e]);
        assert_eq!(parts.len(), 8);
        assert!(parts.iter().all(|p| !p.overlaps(&e) && c.covers(p)));
        let total: u64 = parts.iter().map(|p| p.size()).sum();
        assert_eq!(total, c.size() - e.size());
        let ips: BTreeSet<Ipv4Addr> = (2u8..=9).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
        assert_eq!(
            aggregate(&ips),
            vec![
                (Ipv4Addr::new(10, 0, 0, 2), 31),
                (Ipv4Addr::new(10, 0, 0, 4), 30),
                (Ipv4Addr::new(10, 0, 0, 8), 31)
            ]
        );
    }
}
