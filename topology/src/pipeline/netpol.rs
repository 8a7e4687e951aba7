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
//! policy, direction, rule and variant, unique in the cluster (probed to the next free value
//! on a collision), so its peer, port and `conj_id` flows are the same on every node: they are
//! built once ([`SharedConj`]) and shared by the nodes' FlowSets. Stateful: `ct_state=+est`/`+rel` pass before any policy (static flows), so only the
//! first packet of a connection is judged; the connection is committed after the last
//! judgement (table 30 for traffic leaving this node, table 80 for local delivery).
//!
//! One file on purpose: the conjunction planning (dimensions, ids, priorities) and the flows it
//! emits for tables 27 and 80 share one set of invariants, tested together; half the file is
//! those tests.

use super::audit::{audit_cookie, AuditTag, Verdict};
use super::builder::{FlowBuilder, PipelineError};
use super::cookie::{self, Feature, ObjectKind};
use super::flowset::{key_cmp, packed_key, FlowSet, SharedRun};
use super::priority::Band;
use super::regs;
use super::tables::TableId;
use crate::model::{
    ClusterModel, LabelSelector, NetworkPolicy, Peer, PodInfo, PolicyPort, PortSpec, Protocol,
};
use crate::Ipv4Cidr;
use ofproto::oxm::ct_state::{NEW, TRK};
use ofproto::oxm::eth_type::IPV4;
use ofproto::{Action, Field, Flow, Match};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

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

/// A verdict flow's logging twin: `m` for new connections only, the packet's headers to the
/// shim (metered), then the allow's own actions.
fn audit_allow(
    dir: Direction,
    band: Band,
    verdict_cookie: u64,
    m: Match,
    tag: &AuditTag,
) -> Result<Flow, PipelineError> {
    allow(
        FlowBuilder::new(dir.table(), band, audit_cookie(verdict_cookie))
            .matching(m.ct_state(NEW | TRK, NEW | TRK))
            .action(tag.action()),
        dir,
    )
    .build()
}

/// One alternative of a dimension: a match fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Clause {
    /// An IPv4 prefix in the direction's target or peer field.
    Net(Field, Ipv4Addr, u8),
    /// reg0 = NETID (ingress peers that are whole namespaces).
    SrcNetId(u32),
    /// A protocol with an optional `tp_dst` value/mask.
    Port(Protocol, Option<(u16, u16)>),
}

impl Clause {
    fn to_match(self) -> Match {
        // Room for exactly its fields: the built flow keeps this allocation as it is.
        let fields = match self {
            Clause::Port(_, Some(_)) => 3,
            _ => 2,
        };
        let ip = Match::with_capacity(fields).eth_type(IPV4);
        match self {
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

/// A conjunction of one rule as one node needs it: its node-independent name and other
/// dimensions (peers and/or ports; none when the rule allows every peer on every port), and the
/// node's selected pods (the target dimension).
#[derive(Debug)]
struct ConjSpec {
    /// Stable, node-independent name (hashed into the conjunction's id).
    name: Arc<str>,
    /// The target dimension: the selected pods on this node (sorted, unique).
    targets: Box<[Clause]>,
    /// The other dimensions (peers, then ports).
    others: Vec<Arc<BTreeSet<Clause>>>,
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
    dim: Arc<BTreeSet<Clause>>,
}

/// Namespaces by name, each with its NETID.
type NamespaceNetIds = Arc<Vec<(String, u32)>>;

/// Resolves selectors against the model, caching namespace selections per selector.
struct Resolver<'m, 'c> {
    model: &'m ClusterModel,
    ns_cache: &'c mut HashMap<LabelSelector, NamespaceNetIds, FastHash>,
}

impl Resolver<'_, '_> {
    /// The namespaces `sel` selects, with their NETIDs: taken from the selection itself
    /// rather than looked up again by name for each of the ~10,000 rules naming a team.
    /// Policies are computed in networkpolicy mode only, where a namespace's effective NETID
    /// is its own.
    fn namespaces(&mut self, sel: &LabelSelector) -> NamespaceNetIds {
        if let Some(v) = self.ns_cache.get(sel) {
            return v.clone();
        }
        let v: NamespaceNetIds = Arc::new(
            self.model
                .selected_namespaces(sel)
                .map(|n| (n.name, n.netid))
                .collect(),
        );
        self.ns_cache.insert(sel.clone(), v.clone());
        v
    }

    /// The peers of rule `idx` of `p` in direction `dir`, resolved once per policy stamp.
    fn rule_peers(
        &mut self,
        entry: &mut PolicyEntry,
        p: &NetworkPolicy,
        dir: Direction,
        idx: usize,
        rule: &crate::model::PolicyRule,
    ) -> Arc<Peers> {
        if let Some(v) = entry.peers.get(&(dir, idx)) {
            return v.clone();
        }
        let mut peers = self.peers(p, &rule.peers, dir);
        peers.dim = Arc::new(peers.clauses(dir));
        let v = Arc::new(peers);
        entry.peers.insert((dir, idx), v.clone());
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
                    let names: NamespaceNetIds = match namespace_selector {
                        None => Arc::new(vec![(
                            p.namespace.clone(),
                            self.model.effective_netid(&p.namespace),
                        )]),
                        Some(s) => self.namespaces(s),
                    };
                    // Every pod of the namespaces (`podSelector: {}` or none).
                    let whole_ns = pod_selector.as_ref().is_none_or(|s| s.is_empty());
                    let psel = pod_selector.as_ref().unwrap_or(&all);
                    for (ns, netid) in names.iter() {
                        let netid = *netid;
                        // Ingress from a whole namespace is its NETID in reg0, except NETID 0,
                        // which host and external traffic share: those pods go by address.
                        let by_netid = whole_ns && dir == Direction::Ingress && netid != 0;
                        if by_netid {
                            out.netids.insert(netid);
                            if !keep_pods {
                                continue; // the NETID stands for every pod of the namespace
                            }
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

/// The target dimension of `pods`: one exact address each, sorted and unique.
fn net_clauses(f: Field, pods: &[&PodInfo]) -> Box<[Clause]> {
    let mut v: Vec<Clause> = pods.iter().map(|p| Clause::Net(f, p.ip, 32)).collect();
    v.sort_unstable();
    v.dedup();
    v.into_boxed_slice()
}

/// A set of port clauses as text, for names (`tcp:8080,udp:53`).
fn ports_name(ports: &BTreeSet<Clause>) -> String {
    let mut parts = Vec::new();
    for c in ports {
        if let Clause::Port(proto, tp) = c {
            parts.push(match tp {
                None => proto.as_str().to_ascii_lowercase(),
                Some((v, m)) if *m == u16::MAX => {
                    format!("{}:{v}", proto.as_str().to_ascii_lowercase())
                }
                Some((v, m)) => format!("{}:{v}/{m:#x}", proto.as_str().to_ascii_lowercase()),
            });
        }
    }
    parts.join(",")
}

/// The conjunctions of one rule for the pods `selected` on this node.
#[allow(clippy::too_many_arguments)]
fn rule_conjs(
    res: &mut Resolver<'_, '_>,
    entry: &mut PolicyEntry,
    p: &NetworkPolicy,
    dir: Direction,
    idx: usize,
    rule: &crate::model::PolicyRule,
    selected: &[&PodInfo],
    out: &mut Vec<ConjSpec>,
) {
    let peers = res.rule_peers(entry, p, dir, idx, rule);
    if !peers.any && peers.dim.is_empty() {
        return; // the peers select nothing (yet)
    }
    let names = entry.names.entry((dir, idx)).or_insert_with(|| {
        let base = format!("{}/{}/{}/{idx}", p.namespace, p.name, dir.as_str());
        let numeric = Arc::from(format!("{base}/n"));
        (Arc::from(base), numeric)
    });
    let (base, numeric_name) = (names.0.clone(), names.1.clone());
    let has_named = rule.has_named_ports();
    let targets = net_clauses(dir.target_field(), selected);
    let peer_opt = || (!peers.any).then(|| peers.dim.clone());
    let mut push = |name: Arc<str>,
                    targets: Box<[Clause]>,
                    peer: Option<Arc<BTreeSet<Clause>>>,
                    ports: Option<Arc<BTreeSet<Clause>>>| {
        out.push(ConjSpec {
            name,
            targets,
            others: peer.into_iter().chain(ports).collect(),
        });
    };
    if rule.ports.is_empty() {
        push(base, targets, peer_opt(), None);
        return;
    }
    let numeric = numeric_port_clauses(&rule.ports);
    if !numeric.is_empty() {
        let ports = entry
            .ports
            .entry((dir, idx))
            .or_insert_with(|| Arc::new(numeric))
            .clone();
        push(numeric_name, targets.clone(), peer_opt(), Some(ports));
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
            for (ports, pods) in groups {
                let t = net_clauses(dir.target_field(), &pods);
                let name = format!("{base}/p/{}", ports_name(&ports));
                push(Arc::from(name), t, peer_opt(), Some(Arc::new(ports)));
            }
        }
        Direction::Egress => {
            // Named ports resolve on the destination: the peer pods; node-independent, so
            // resolved once per policy stamp.
            let variants = match entry.named.get(&idx) {
                Some(v) => v.clone(),
                None => {
                    let v = Arc::new(egress_named_variants(res.model, &peers, rule, &base));
                    entry.named.insert(idx, v.clone());
                    v
                }
            };
            for (name, pd, ports) in variants.iter() {
                push(
                    name.clone(),
                    targets.clone(),
                    Some(pd.clone()),
                    Some(ports.clone()),
                );
            }
        }
    }
}

/// An egress rule's named-port conjunctions: per distinct set of ports the names resolve to,
/// the peer pods (for ipBlocks and "every peer", the pods whose addresses they cover) that
/// resolve to it.
fn egress_named_variants(
    model: &ClusterModel,
    peers: &Peers,
    rule: &crate::model::PolicyRule,
    base: &str,
) -> Vec<NamedVariant> {
    let candidates: Vec<(Ipv4Addr, Vec<crate::model::ContainerPort>)> =
        if peers.any || !peers.blocks.is_empty() {
            let mut v: Vec<_> = model
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
    groups
        .into_iter()
        .map(|(ports, ips)| {
            let pd: BTreeSet<Clause> = aggregate(&ips)
                .into_iter()
                .map(|(a, l)| Clause::Net(Direction::Egress.peer_field(), a, l))
                .collect();
            (
                Arc::from(format!("{base}/p/{}", ports_name(&ports))),
                Arc::new(pd),
                Arc::new(ports),
            )
        })
        .collect()
}

/// A named-port conjunction of an egress rule: name, peer dimension, port dimension.
type NamedVariant = (Arc<str>, Arc<BTreeSet<Clause>>, Arc<BTreeSet<Clause>>);

/// One node's policy flows, sorted (no cache).
pub fn node_policy_flows(model: &ClusterModel, node: &str) -> Result<SharedRun, PipelineError> {
    let pods: Vec<&PodInfo> = model.pods_on_node(node).collect();
    let fs = PolicyCache::default().node_flows(model, node, &pods)?;
    Ok(fs.iter().cloned().collect())
}

/// The node-independent part of one conjunction, shared (`Arc`) by every node whose pods the
/// rule selects: its id, its `conj_id` flow, and its *solo* flows — one clause flow per
/// alternative of the peer and port dimensions, each with this conjunction's action alone.
/// A node whose other conjunctions use the same clause holds one merged flow for it instead,
/// so the solo flows are built (once) only when a node first takes one of them: a clause every
/// node merges (the egress ipBlock prefixes each namespace's policies share) is never built
/// solo.
#[derive(Debug)]
struct SharedConj {
    id: u32,
    /// Dimensions in all, the target dimension included.
    n: u8,
    /// The direction (its table) and the policy's cookie, to build the solo flows.
    dir: Direction,
    cookie: u64,
    /// The peer and port clauses with their dimension, in dimension order.
    clauses: Vec<(Clause, u8)>,
    /// The `conj_id` flow alone (for nodes that take no solo flow).
    conj: SharedRun,
    /// Its packed key (None when it does not pack).
    conj_key: Option<[[u64; 4]; 1]>,
    /// The solo flows, built the first time a node takes one.
    solo: OnceLock<SoloRun>,
}

/// A shared conjunction's solo clause flows and its `conj_id` flow, sorted: a node that takes
/// solo flows takes them and the `conj_id` flow as pieces of one run.
#[derive(Debug)]
struct SoloRun {
    run: SharedRun,
    /// Per run entry: the index of its clause in [`SharedConj::clauses`] ([`CONJ_ID_ENTRY`] for
    /// the `conj_id` flow).
    clause_index: Vec<u32>,
    /// Per run entry: its packed key (None when one does not pack).
    keys: Option<Vec<[u64; 4]>>,
}

impl SharedConj {
    fn build(
        id: u32,
        cookie: u64,
        dir: Direction,
        others: &[Arc<BTreeSet<Clause>>],
    ) -> Result<Self, PipelineError> {
        let n = others.len() as u8 + 1;
        let clauses = others
            .iter()
            .enumerate()
            // 0-based on the wire (OVS prints k+1); the target dimension is 0.
            .flat_map(|(k, dim)| dim.iter().map(move |cl| (*cl, k as u8 + 1)))
            .collect();
        let conj = allow(
            FlowBuilder::new(dir.table(), Band::PolicyConjunction, cookie)
                .matching(Match::with_capacity(2).eth_type(IPV4).conj_id(id)),
            dir,
        )
        .build()?;
        let conj_key = packed_key(&conj).map(|k| [k]);
        Ok(SharedConj {
            id,
            n,
            dir,
            cookie,
            clauses,
            conj: Arc::from([conj]),
            conj_key,
            solo: OnceLock::new(),
        })
    }

    /// The solo clause flows, built on first use.
    fn solo(&self) -> Result<&SoloRun, PipelineError> {
        if let Some(s) = self.solo.get() {
            return Ok(s);
        }
        let mut entries: Vec<(Flow, u32)> = Vec::with_capacity(self.clauses.len() + 1);
        entries.extend(self.conj.iter().map(|f| (f.clone(), CONJ_ID_ENTRY)));
        for (i, (cl, k)) in self.clauses.iter().enumerate() {
            let f = FlowBuilder::new(self.dir.table(), Band::PolicyConjunction, self.cookie)
                .matching(cl.to_match())
                .actions([Action::Conjunction {
                    id: self.id,
                    clause: *k,
                    n_clauses: self.n,
                }])
                .build()?;
            entries.push((f, i as u32));
        }
        entries.sort_by(|a, b| key_cmp(&a.0, &b.0));
        let (flows, clause_index): (Vec<Flow>, Vec<u32>) = entries.into_iter().unzip();
        let keys = flows.iter().map(packed_key).collect();
        Ok(self.solo.get_or_init(|| SoloRun {
            run: Arc::from(flows),
            clause_index,
            keys,
        }))
    }
}

/// The clause index of a solo run's `conj_id` flow (not a clause: every node takes it).
const CONJ_ID_ENTRY: u32 = u32::MAX;

/// A rule's conjunction names: its base name and its numeric-ports variant (`{base}/n`).
type RuleNames = (Arc<str>, Arc<str>);

/// What the cache derived from one policy, valid while its stamp is unchanged.
#[derive(Debug, Default)]
struct PolicyEntry {
    /// (reset epoch, policy stamp, config epoch) it was derived at.
    stamp: (u64, u64, u64),
    /// The policy's cookie (0 until computed).
    cookie: u64,
    peers: HashMap<(Direction, usize), Arc<Peers>, FastHash>,
    /// Numeric port dimensions per rule.
    ports: HashMap<(Direction, usize), Arc<BTreeSet<Clause>>, FastHash>,
    /// Egress named-port conjunctions per rule.
    named: HashMap<usize, Arc<Vec<NamedVariant>>, FastHash>,
    /// Shared conjunctions by name.
    conjs: HashMap<Arc<str>, Arc<SharedConj>, FastHash>,
    /// Conjunction names per rule: the rule's base name and its numeric-ports variant.
    names: HashMap<(Direction, usize), RuleNames, FastHash>,
}

/// Conjunction ids: a hash of the conjunction's name, probed to the next free value on a
/// collision. Ids are unique in the whole cluster, so a conjunction's shared flows are the
/// same on every node.
#[derive(Debug, Default)]
struct ConjIds {
    by_name: HashMap<String, u32, FastHash>,
    taken: HashMap<u32, String, FastHash>,
}

impl ConjIds {
    fn get(&mut self, name: &str) -> u32 {
        if let Some(id) = self.by_name.get(name) {
            return *id;
        }
        let mut id = cookie::object_hash(&format!("conj/{name}")).max(1);
        while self.taken.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        self.taken.insert(id, name.to_string());
        self.by_name.insert(name.to_string(), id);
        id
    }

    /// Release the ids of one policy's conjunctions.
    fn release(&mut self, names: impl Iterator<Item = Arc<str>>) {
        for n in names {
            if let Some(id) = self.by_name.remove(&*n) {
                self.taken.remove(&id);
            }
        }
    }
}

/// A node's policy flows with what they were computed from.
#[derive(Debug)]
struct NodeEntry {
    signature: u64,
    flows: FlowSet,
    /// Whether the flows hold logging flows (the node needs the audit meter).
    audit: bool,
    /// What each namespace with pods on the node contributed (by namespace name, sorted),
    /// with the namespace's signature.
    groups: Vec<(String, NsGroup)>,
}

/// A conjunction a node uses: its shared part (None for plain allow flows), its target
/// clauses on this node (sorted, unique), direction and cookie.
type Used = (Option<Arc<SharedConj>>, Box<[Clause]>, Direction, u64);

/// What the policies of one namespace contribute to one node: the conjunctions its pods there
/// use, and the flows that name only those pods (sorted): target clause flows, direct allows
/// and isolation drops. A pod's address is its own, so no other namespace's flows share these
/// keys, and a node re-derives them only for the namespaces a change touches.
#[derive(Debug, Clone)]
struct NsGroup {
    signature: u64,
    /// Whether `own` holds logging flows (the namespace has audit logging on).
    audit: bool,
    used: Arc<Vec<Used>>,
    own: SharedRun,
    /// Packed keys of `own`, computed once (None when one does not pack).
    own_keys: Option<Box<[[u64; 4]]>>,
}

/// Caches what policies derive to: per policy (invalidated by its stamp) the resolved peers
/// and the shared conjunctions; per node its policy flows (invalidated when its pods or the
/// stamps of the policies of its pods' namespaces change); and the namespaces each namespace
/// selector selects (per namespace epoch).
#[derive(Debug, Default)]
pub struct PolicyCache {
    /// (namespace epoch, config epoch) `ns_cache` is valid for: a mode change may change
    /// the NETIDs it holds.
    ns_cache_epochs: (u64, u64),
    ns_cache: HashMap<LabelSelector, NamespaceNetIds, FastHash>,
    /// By namespace, then name.
    policies: HashMap<String, HashMap<String, PolicyEntry, FastHash>, FastHash>,
    ids: ConjIds,
    nodes: HashMap<String, NodeEntry, FastHash>,
    /// Number of policy entries (all namespaces).
    entries: usize,
    /// Buffers of [`assemble`], kept between nodes: allocated afresh per node they land on
    /// new pages each time (the heap grows by what every node keeps), which costs more than
    /// their filling.
    scratch: AssemblyScratch,
}

/// Working memory of [`assemble`], empty between calls.
#[derive(Debug, Default)]
struct AssemblyScratch {
    /// How many conjunctions on the node use each non-target clause.
    count: HashMap<(TableId, Clause), u32, FastHash>,
    /// Packed key, run and index of every entry of the node's policy flows.
    entries: Vec<([u64; 4], u32, u32)>,
    /// The pieces of runs the node takes: run (an index into the runs) and range.
    pieces: Vec<(u32, std::ops::Range<u32>)>,
    /// Per clause of the shared conjunction at hand: whether the node takes its solo flow.
    is_solo: Vec<bool>,
}

impl PolicyCache {
    /// The node's policy flows (empty outside networkpolicy mode); `pods` are the node's pods
    /// by key ([`ClusterModel::pods_on_node`]).
    pub fn node_flows(
        &mut self,
        model: &ClusterModel,
        node: &str,
        pods: &[&PodInfo],
    ) -> Result<FlowSet, PipelineError> {
        // Namespace selections change only with the namespaces and their labels, their NETIDs
        // with the mode.
        let epochs = (model.namespace_epoch(), model.config_epoch());
        if epochs != self.ns_cache_epochs {
            self.ns_cache_epochs = epochs;
            self.ns_cache.clear();
        }
        if !model.is_policy_mode() {
            self.nodes.clear();
            return Ok(FlowSet::default());
        }
        if self.entries > model.policy_count() {
            self.prune(model);
        }
        // Pods by key are grouped by namespace, in namespace order.
        let local: Vec<&[&PodInfo]> = pods
            .chunk_by(|a, b| a.key.namespace == b.key.namespace)
            .collect();
        let ns_sigs: Vec<u64> = local
            .iter()
            .map(|ns_pods| ns_signature(model, ns_pods))
            .collect();
        let signature = {
            use std::hash::{BuildHasher, Hash, Hasher};
            let mut h = FastHash::default().build_hasher();
            (model.policy_reset_epoch(), model.config_epoch()).hash(&mut h);
            for ns_pods in &local {
                namespace_of(ns_pods).hash(&mut h);
            }
            ns_sigs.hash(&mut h);
            h.finish()
        };
        let prev = match self.nodes.remove(node) {
            Some(e) if e.signature == signature => {
                let flows = e.flows.clone();
                self.nodes.insert(node.to_string(), e);
                return Ok(flows);
            }
            Some(e) => e.groups,
            None => Vec::new(),
        };
        let mut prev = prev.into_iter().peekable();
        let mut groups: Vec<(String, NsGroup)> = Vec::with_capacity(local.len());
        for (ns_pods, sig) in local.iter().zip(ns_sigs) {
            let ns = namespace_of(ns_pods);
            // Both lists are in namespace order: a merge join.
            while prev.next_if(|(p, _)| p.as_str() < ns).is_some() {}
            let g = match prev.next_if(|(p, _)| p == ns) {
                Some((_, g)) if g.signature == sig => g,
                _ => self.ns_group(model, ns, ns_pods, sig)?,
            };
            groups.push((ns.to_string(), g));
        }
        let flows = assemble(&mut self.scratch, groups.iter().map(|(_, g)| g))?;
        let audit = groups.iter().any(|(_, g)| g.audit);
        self.nodes.insert(
            node.to_string(),
            NodeEntry {
                signature,
                flows: flows.clone(),
                audit,
                groups,
            },
        );
        Ok(flows)
    }

    /// Whether the node's policy flows (as last computed) hold logging flows.
    pub fn node_has_audit(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|e| e.audit)
    }

    /// Forget a node.
    pub fn forget_node(&mut self, node: &str) {
        self.nodes.remove(node);
    }

    /// Drop what was derived from policies that no longer exist.
    fn prune(&mut self, model: &ClusterModel) {
        for (ns, by_name) in self.policies.iter_mut() {
            let gone: Vec<String> = by_name
                .keys()
                .filter(|n| model.policy(ns, n).is_none())
                .cloned()
                .collect();
            for n in gone {
                if let Some(e) = by_name.remove(&n) {
                    self.entries = self.entries.saturating_sub(1);
                    self.ids.release(e.conjs.into_keys());
                }
            }
        }
        self.policies.retain(|_, by_name| !by_name.is_empty());
    }

    /// What namespace `ns`'s policies contribute for its pods `pods` on one node.
    fn ns_group(
        &mut self,
        model: &ClusterModel,
        ns: &str,
        pods: &[&PodInfo],
        signature: u64,
    ) -> Result<NsGroup, PipelineError> {
        let mut res = Resolver {
            model,
            ns_cache: &mut self.ns_cache,
        };
        let mut used: Vec<Used> = Vec::new();
        let logging = model.acl_logging(ns);
        let mut audit_flows: Vec<Flow> = Vec::new();
        // Pods isolated per direction (a policy of that type selects them).
        let mut isolated: [BTreeMap<Ipv4Addr, &PodInfo>; 2] = Default::default();
        let stamp_base = (model.policy_reset_epoch(), model.config_epoch());
        // The rules of a direction already turned into conjunctions for the same pods here:
        // rules of one namespace that are equal select the same peers and ports, so a policy
        // repeating an earlier one's rules for the same pods adds no traffic, and its
        // conjunctions would only add a `conjunction` action to every clause flow (10,000
        // identical policies gave each peer flow 10,000 actions). Its pods stay isolated.
        let mut seen: HashSet<SeenRules<'_>, FastHash> = HashSet::default();
        for (p, policy_stamp) in model.policies_in_stamped(ns) {
            let selected: Vec<&PodInfo> = pods
                .iter()
                .copied()
                .filter(|pod| p.pod_selector.matches(&pod.labels))
                .collect();
            if selected.is_empty() {
                continue;
            }
            let targets: Box<[Ipv4Addr]> = selected.iter().map(|pod| pod.ip).collect();
            let stamp = (stamp_base.0, policy_stamp, stamp_base.1);
            let by_name = match self.policies.get_mut(p.namespace.as_str()) {
                Some(m) => m,
                None => self.policies.entry(p.namespace.clone()).or_default(),
            };
            let entry = match by_name.get_mut(p.name.as_str()) {
                Some(e) => e,
                None => {
                    self.entries += 1;
                    by_name.entry(p.name.clone()).or_default()
                }
            };
            if entry.stamp != stamp || entry.cookie == 0 {
                let old = std::mem::take(entry);
                self.ids.release(old.conjs.into_keys());
                entry.stamp = stamp;
                entry.cookie = cookie::policy_cookie(&p.namespace, &p.name);
            }
            let pc = entry.cookie;
            for (di, dir, on, rules) in [
                (0, Direction::Ingress, p.ingress_isolation, &p.ingress),
                (1, Direction::Egress, p.egress_isolation, &p.egress),
            ] {
                if !on {
                    continue;
                }
                for pod in &selected {
                    isolated[di].insert(pod.ip, pod);
                }
                if !seen.insert((di, targets.clone(), rules.as_slice())) {
                    continue;
                }
                let mut specs = Vec::new();
                for (i, r) in rules.iter().enumerate() {
                    rule_conjs(&mut res, entry, p, dir, i, r, &selected, &mut specs);
                }
                for spec in specs {
                    if let Some(sev) = logging.and_then(|l| l.allow) {
                        let tag = AuditTag {
                            verdict: Verdict::Allow,
                            direction: dir.as_str(),
                            severity: sev,
                            reference: format!("NP:{}:{}", p.namespace, p.name),
                        };
                        if spec.others.is_empty() {
                            for cl in spec.targets.iter() {
                                audit_flows.push(audit_allow(
                                    dir,
                                    Band::AuditDirect,
                                    pc,
                                    cl.to_match(),
                                    &tag,
                                )?);
                            }
                        } else {
                            let id = match entry.conjs.get(&spec.name) {
                                Some(c) => c.id,
                                None => self.ids.get(&spec.name),
                            };
                            let m = Match::with_capacity(3).eth_type(IPV4).conj_id(id);
                            audit_flows.push(audit_allow(
                                dir,
                                Band::AuditConjunction,
                                pc,
                                m,
                                &tag,
                            )?);
                        }
                    }
                    if spec.others.is_empty() {
                        used.push((None, spec.targets, dir, pc));
                        continue;
                    }
                    let shared = match entry.conjs.get(&spec.name) {
                        Some(c) => c.clone(),
                        None => {
                            let id = self.ids.get(&spec.name);
                            let c = Arc::new(SharedConj::build(id, pc, dir, &spec.others)?);
                            entry.conjs.insert(spec.name.clone(), c.clone());
                            c
                        }
                    };
                    used.push((Some(shared), spec.targets, dir, pc));
                }
            }
        }
        // A pod isolated both ways has one cookie: hashed once.
        let mut cookies: HashMap<Ipv4Addr, u64, FastHash> = HashMap::default();
        let isolated: [Vec<(Ipv4Addr, u64)>; 2] = isolated.map(|m| {
            m.into_iter()
                .map(|(ip, pod)| {
                    let ck = *cookies.entry(ip).or_insert_with(|| {
                        cookie::cookie(
                            Feature::NetworkPolicy,
                            ObjectKind::Pod,
                            cookie::object_hash(&format!("pod/{}", pod.key)),
                        )
                    });
                    (ip, ck)
                })
                .collect()
        });
        if let Some(sev) = logging.and_then(|l| l.deny) {
            for (di, dir) in [Direction::Ingress, Direction::Egress]
                .into_iter()
                .enumerate()
            {
                let name = match dir {
                    Direction::Ingress => "Ingress",
                    Direction::Egress => "Egress",
                };
                let tag = AuditTag {
                    verdict: Verdict::Drop,
                    direction: dir.as_str(),
                    severity: sev,
                    reference: format!("NP:{ns}:{name}"),
                };
                for (ip, ck) in &isolated[di] {
                    let m = Clause::Net(dir.target_field(), *ip, 32)
                        .to_match()
                        .ct_state(NEW | TRK, NEW | TRK);
                    audit_flows.push(
                        FlowBuilder::new(dir.table(), Band::AuditIsolate, audit_cookie(*ck))
                            .matching(m)
                            .action(tag.action())
                            .build()?,
                    );
                }
            }
        }
        let audit = !audit_flows.is_empty();
        let own = target_flows(&used, &isolated, audit_flows)?;
        Ok(NsGroup {
            signature,
            audit,
            used: Arc::new(used),
            own_keys: own.iter().map(packed_key).collect(),
            own,
        })
    }
}

/// A direction's rules (by index: 0 ingress, 1 egress) for the pods with these addresses.
type SeenRules<'m> = (usize, Box<[Ipv4Addr]>, &'m [crate::model::PolicyRule]);

/// The namespace of a non-empty run of one namespace's pods.
fn namespace_of<'p>(pods: &[&'p PodInfo]) -> &'p str {
    pods.first().map_or("", |p| p.key.namespace.as_str())
}

/// A hash of what one namespace's contribution to a node depends on besides what the
/// policies' stamps cover: its pods there (name, address, labels, named ports), and when its
/// policies or their stamps last changed.
fn ns_signature(model: &ClusterModel, pods: &[&PodInfo]) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let ns = namespace_of(pods);
    let mut h = FastHash::default().build_hasher();
    (model.policy_reset_epoch(), model.config_epoch(), ns).hash(&mut h);
    model.namespace_policies_stamp(ns).hash(&mut h);
    model.acl_logging(ns).hash(&mut h);
    for p in pods {
        (&p.key.name, p.ip, &p.labels, &p.ports).hash(&mut h);
    }
    h.finish()
}

/// The flows of one namespace's conjunctions on a node that name its pods, sorted: per target
/// clause one flow with the `conjunction` actions of every conjunction using it, the direct
/// allows of one-dimension rules, and the isolation drops (`isolated`: address and cookie per
/// direction).
fn target_flows(
    used: &[Used],
    isolated: &[Vec<(Ipv4Addr, u64)>; 2],
    audit: Vec<Flow>,
) -> Result<SharedRun, PipelineError> {
    type ClauseKey = (TableId, Clause);
    let mut merged: BTreeMap<ClauseKey, ClauseUse> = BTreeMap::new();
    let mut direct: BTreeMap<ClauseKey, (Direction, u64)> = BTreeMap::new();
    for (shared, targets, dir, pc) in used {
        let table = dir.table();
        let Some(c) = shared else {
            for cl in targets.iter() {
                direct.entry((table, *cl)).or_insert((*dir, *pc));
            }
            continue;
        };
        for cl in targets.iter() {
            let e = merged.entry((table, *cl)).or_insert((Vec::new(), *pc));
            e.0.push((c.id, 0, c.n));
            e.1 = e.1.min(*pc);
        }
    }
    let mut flows: Vec<Flow> = Vec::with_capacity(
        merged.len() + direct.len() + isolated[0].len() + isolated[1].len() + audit.len(),
    );
    flows.extend(audit);
    clause_flows(merged, &mut flows)?;
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
        for (ip, ck) in &isolated[di] {
            let m = Clause::Net(dir.target_field(), *ip, 32).to_match();
            flows.push(
                FlowBuilder::new(dir.table(), Band::PolicyIsolate, *ck)
                    .matching(m)
                    .build()?,
            );
        }
    }
    flows.sort_unstable_by(key_cmp);
    flows.dedup_by(|a, b| key_cmp(a, b) == std::cmp::Ordering::Equal);
    Ok(Arc::from(flows))
}

/// (id, clause, n_clauses) of every conjunction a clause flow serves, and its cookie.
type ClauseUse = (Vec<(u32, u8, u8)>, u64);

/// One clause flow per entry, with the `conjunction` actions of every conjunction using it.
fn clause_flows(
    merged: BTreeMap<(TableId, Clause), ClauseUse>,
    flows: &mut Vec<Flow>,
) -> Result<(), PipelineError> {
    for ((table, cl), (mut acts, ck)) in merged {
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
    Ok(())
}

/// One node's policy flows from the conjunctions it uses: each namespace's own run (see
/// [`target_flows`]), the peer and port clause flows several of its conjunctions share
/// (merged here, across namespaces), and each shared conjunction's `conj_id` flow and solo
/// flows less those clauses.
fn assemble<'g>(
    scratch: &mut AssemblyScratch,
    groups: impl Iterator<Item = &'g NsGroup> + Clone,
) -> Result<FlowSet, PipelineError> {
    let used = groups.clone().flat_map(|g| g.used.iter());
    type ClauseKey = (TableId, Clause);
    let count = &mut scratch.count;
    count.clear();
    for (shared, _, dir, _) in used.clone() {
        if let Some(c) = shared {
            for (cl, _) in &c.clauses {
                *count.entry((dir.table(), *cl)).or_default() += 1;
            }
        }
    }
    let pieces = &mut scratch.pieces;
    pieces.clear();
    let is_solo = &mut scratch.is_solo;
    let mut runs: Vec<KeyedRun<'_>> = Vec::new();
    for g in groups {
        let r = push_run(&mut runs, (&g.own, g.own_keys.as_deref()));
        pieces.push((r, 0..g.own.len() as u32));
    }
    let mut merged: BTreeMap<ClauseKey, ClauseUse> = BTreeMap::new();
    for (shared, _, dir, pc) in used {
        let table = dir.table();
        let Some(c) = shared else { continue };
        // A clause another conjunction here uses too goes into the node's merged flows.
        is_solo.clear();
        for (cl, k) in &c.clauses {
            let solo = count.get(&(table, *cl)).copied().unwrap_or(0) < 2;
            is_solo.push(solo);
            if solo {
                continue;
            }
            let e = merged.entry((table, *cl)).or_insert((Vec::new(), *pc));
            e.0.push((c.id, *k, c.n));
            e.1 = e.1.min(*pc);
        }
        if !is_solo.contains(&true) {
            let r = push_run(&mut runs, (&c.conj, c.conj_key.as_ref().map(|k| &k[..])));
            pieces.push((r, 0..1));
            continue;
        }
        // The solo run (with the `conj_id` flow: fewer pieces), less the merged clauses.
        let solo = c.solo()?;
        let r = push_run(&mut runs, (&solo.run, solo.keys.as_deref()));
        let mut start = 0;
        for (i, clause) in solo.clause_index.iter().enumerate() {
            // The `conj_id` entry has no clause: taken.
            let merged_here = is_solo.get(*clause as usize).is_some_and(|solo| !solo);
            if !merged_here {
                continue;
            }
            if start < i {
                pieces.push((r, start as u32..i as u32));
            }
            start = i + 1;
        }
        if start < solo.run.len() {
            pieces.push((r, start as u32..solo.run.len() as u32));
        }
    }
    let mut flows: Vec<Flow> = Vec::with_capacity(merged.len());
    clause_flows(merged, &mut flows)?;
    let cross: SharedRun = Arc::from(flows);
    let cross_keys: Option<Vec<[u64; 4]>> = cross.iter().map(packed_key).collect();
    let r = push_run(&mut runs, (&cross, cross_keys.as_deref()));
    pieces.push((r, 0..cross.len() as u32));
    Ok(merge_parts(&mut scratch.entries, &runs, pieces))
}

/// A fast, fixed-seed hasher for the per-node maps (keys are our own values, not input).
type FastHash = foldhash::fast::FixedState;

/// A sorted run a node's policy flows take pieces of, and its packed keys (None when one does
/// not pack).
type KeyedRun<'a> = (&'a SharedRun, Option<&'a [[u64; 4]]>);

/// Add a run to `runs`; its index there.
fn push_run<'a>(runs: &mut Vec<KeyedRun<'a>>, run: KeyedRun<'a>) -> u32 {
    runs.push(run);
    runs.len() as u32 - 1
}

/// The pieces (run index, range) of `runs` a node takes, merged. Every key is unique (a
/// clause two conjunctions use is in the node's merged clause flows only), so sorting the
/// entries by their packed keys is the merge; flows whose key does not pack go through
/// [`FlowSet::merge`].
fn merge_parts(
    entries: &mut Vec<([u64; 4], u32, u32)>,
    runs: &[KeyedRun<'_>],
    pieces: &[(u32, std::ops::Range<u32>)],
) -> FlowSet {
    entries.clear();
    let packed = (|| {
        entries.reserve(pieces.iter().map(|(_, r)| r.len()).sum());
        for (r, range) in pieces {
            let keys = runs.get(*r as usize)?.1?;
            for i in range.clone() {
                entries.push((*keys.get(i as usize)?, *r, i));
            }
        }
        // Stable sort: it merges the runs already in order (each piece is sorted) instead of
        // partitioning them; keys are unique, so the order is the same.
        entries.sort_by_key(|e| e.0);
        Some(())
    })();
    if packed.is_none() {
        let mut per_run: Vec<Vec<(SharedRun, std::ops::Range<usize>)>> =
            vec![Vec::new(); runs.len()];
        for (r, range) in pieces {
            if let (Some(v), Some((run, _))) = (per_run.get_mut(*r as usize), runs.get(*r as usize))
            {
                v.push(((*run).clone(), range.start as usize..range.end as usize));
            }
        }
        let sets = per_run.into_iter().map(FlowSet::from_chain).collect();
        return FlowSet::merge(sets, Vec::new());
    }
    let mut out: Vec<(SharedRun, std::ops::Range<usize>)> = Vec::new();
    let mut cur: Option<(u32, usize, usize)> = None;
    let mut flush = |cur: Option<(u32, usize, usize)>| {
        if let Some((r, a, b)) = cur {
            if let Some((run, _)) = runs.get(r as usize) {
                out.push(((*run).clone(), a..b));
            }
        }
    };
    for &(_, r, i) in entries.iter() {
        let i = i as usize;
        match &mut cur {
            Some((cr, _, end)) if *cr == r && *end == i => *end = i + 1,
            _ => {
                flush(cur.take());
                cur = Some((r, i, i + 1));
            }
        }
    }
    flush(cur);
    FlowSet::from_chain(out)
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

    /// Packed keys order flows exactly as `key_cmp` (every flow of a node: all tables, masked
    /// and exact fields, NXM and OXM classes).
    #[test]
    fn packed_keys_order_as_key_cmp() {
        let m = one_node_policy();
        let flows: Vec<Flow> = crate::pipeline::compute_node(&m, "n1")
            .expect("flows")
            .iter()
            .cloned()
            .collect();
        let packed: Vec<(&Flow, [u64; 4])> = flows
            .iter()
            .filter_map(|f| packed_key(f).map(|k| (f, k)))
            .collect();
        assert!(
            packed.len() > 40,
            "{} of {} pack",
            packed.len(),
            flows.len()
        );
        for (a, ka) in &packed {
            for (b, kb) in &packed {
                assert_eq!(ka.cmp(kb), key_cmp(a, b), "{a} vs {b}");
            }
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
