//! Egress IPs (OpenShift SDN's `NetNamespace.egressIPs`, `HostSubnet.egressIPs` and
//! `HostSubnet.egressCIDRs`): what namespaces request, what nodes may host, node liveness, and
//! the placement of every requested IP on a node.
//!
//! * *Manual*: a node lists the IPs it hosts (`HostSubnet.egressIPs`). Several nodes listing
//!   different IPs of one namespace give failover: a namespace's traffic is spread over all of
//!   its usable IPs, and an offline node's IP simply drops out.
//! * *Automatic*: a node lists ranges it may host (`HostSubnet.egressCIDRs`); the model places
//!   each requested IP on one online node whose range contains it, the node with the fewest
//!   egress IPs first, and moves it when that node goes offline. A placed IP stays where it is
//!   while its node is online and still covers it (no rebalancing behind the operator's back).
//!
//! The flows are keyed by NETID, so an IP serves the traffic of its namespace's NETID (every
//! namespace sharing it), and a node hosts at most one IP per NETID (the host's SNAT is chosen
//! by the NETID's packet mark). An IP requested but not usable (no node hosts it, its node is
//! offline, ...) is reported with the reason; a NETID with requested IPs and none usable has its
//! outside traffic dropped, never sent from a node's own address.

use super::*;

/// `HostSubnet.egressIPs` / `egressCIDRs` of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostSubnetEgress {
    /// IPs this node hosts (manual assignment), in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_ips: Vec<Ipv4Addr>,
    /// Ranges from which the controller may assign IPs to this node (automatic).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_cidrs: Vec<Ipv4Cidr>,
}

impl HostSubnetEgress {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.egress_ips.is_empty() && self.egress_cidrs.is_empty()
    }
}

/// The saved egress-IP state: requests, node settings and the automatic placements (so that a
/// restarted controller keeps every IP where it was).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressSnapshot {
    /// `NetNamespace.egressIPs`, by namespace.
    #[serde(default)]
    pub namespaces: BTreeMap<String, Vec<Ipv4Addr>>,
    /// `HostSubnet.egressIPs` / `egressCIDRs`, by node.
    #[serde(default)]
    pub nodes: BTreeMap<String, HostSubnetEgress>,
    /// Automatic placements: IP → node.
    #[serde(default)]
    pub automatic: BTreeMap<Ipv4Addr, String>,
}

impl EgressSnapshot {
    /// Whether no egress IP is requested or configured.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.nodes.is_empty() && self.automatic.is_empty()
    }
}

/// The model's egress-IP state: the saved part and node liveness (not saved: every node counts
/// as online until told otherwise).
#[derive(Clone, Debug, Default)]
pub(super) struct EgressState {
    pub(super) spec: EgressSnapshot,
    pub(super) offline: BTreeSet<String>,
}

/// Why an egress-IP request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// Unspecified, loopback, multicast, broadcast or link-local.
    #[error("{object}: egress IP {ip} is not a usable unicast address")]
    NotUnicast {
        /// `netnamespace/NAME` or `hostsubnet/NAME`.
        object: String,
        /// The IP.
        ip: Ipv4Addr,
    },
    /// Inside a cluster network.
    #[error("{object}: egress IP {ip} lies inside cluster network {cidr}; egress IPs must be addresses of the nodes' own (underlay) network")]
    InClusterNetwork {
        /// The object.
        object: String,
        /// The IP.
        ip: Ipv4Addr,
        /// The range.
        cidr: Ipv4Cidr,
    },
    /// Inside the service network.
    #[error("{object}: egress IP {ip} lies inside the service network {cidr}")]
    InServiceNetwork {
        /// The object.
        object: String,
        /// The IP.
        ip: Ipv4Addr,
        /// The range.
        cidr: Ipv4Cidr,
    },
    /// A node's own address.
    #[error("{object}: egress IP {ip} is the address of node {node}; pick an unused address")]
    NodeAddress {
        /// The object.
        object: String,
        /// The IP.
        ip: Ipv4Addr,
        /// The node.
        node: String,
    },
    /// Listed twice.
    #[error("{object}: egress IP {ip} is listed twice")]
    Repeated {
        /// The object.
        object: String,
        /// The IP.
        ip: Ipv4Addr,
    },
    /// Another namespace requests it.
    #[error("netnamespace/{namespace}: egress IP {ip} is already requested by netnamespace/{other}; an egress IP serves one namespace")]
    NamespaceClaimed {
        /// The namespace.
        namespace: String,
        /// The IP.
        ip: Ipv4Addr,
        /// The namespace holding it.
        other: String,
    },
    /// Another node hosts it (manual).
    #[error("hostsubnet/{node}: egress IP {ip} is already listed by hostsubnet/{other}; an egress IP is hosted by one node")]
    NodeClaimed {
        /// The node.
        node: String,
        /// The IP.
        ip: Ipv4Addr,
        /// The node listing it.
        other: String,
    },
    /// Both egressIPs and egressCIDRs on one node.
    #[error(
        "hostsubnet/{node}: set either egressIPs (manual) or egressCIDRs (automatic), not both"
    )]
    ManualAndAutomatic {
        /// The node.
        node: String,
    },
    /// An egressCIDR overlapping a cluster or the service network.
    #[error("hostsubnet/{node}: egressCIDR {cidr} overlaps {what} {other}")]
    CidrOverlaps {
        /// The node.
        node: String,
        /// The egressCIDR.
        cidr: Ipv4Cidr,
        /// `cluster network` or `the service network`.
        what: &'static str,
        /// The range it overlaps.
        other: Ipv4Cidr,
    },
}

/// How one requested IP stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressIpStatus {
    /// The IP.
    pub ip: Ipv4Addr,
    /// The namespace requesting it.
    pub namespace: String,
    /// Its NETID (the flows' key).
    pub netid: u32,
    /// The node hosting it, if any.
    pub node: Option<String>,
    /// Placed by the controller (egressCIDRs) rather than listed by the node (egressIPs).
    pub automatic: bool,
    /// Whether traffic uses it now.
    pub usable: bool,
    /// Why not, when it is not usable.
    pub reason: Option<String>,
}

/// Where every requested egress IP stands, and what the flows of each NETID use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPlan {
    /// Every requested IP.
    pub ips: BTreeMap<Ipv4Addr, EgressIpStatus>,
    /// NETIDs with requested egress IPs → their usable (node, IP) pairs, by IP. An empty list
    /// means the NETID's outside traffic is dropped.
    pub netids: BTreeMap<u32, Vec<(String, Ipv4Addr)>>,
}

impl EgressPlan {
    /// The IPs hosted (usable) on `node`, with their NETIDs.
    pub fn hosted_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = (u32, Ipv4Addr)> + 'a {
        self.netids.iter().flat_map(move |(netid, v)| {
            v.iter()
                .filter(move |(n, _)| n == node)
                .map(move |(_, ip)| (*netid, *ip))
        })
    }
}

/// The packet mark selecting a NETID's SNAT on the egress node (OpenShift SDN's
/// `getMarkForVNID`): the NETID, with NETID 0 as `0xff000000`, the kubelet drop bit (0x8000)
/// moved to `0x10000000` and kube-proxy's masquerade bit (0x4000) moved to `0x01000000`.
pub fn egress_mark(netid: u32) -> u32 {
    if netid == 0 {
        return 0xff00_0000;
    }
    let mut m = netid;
    if m & 0x8000 != 0 {
        m = (m & !0x8000) | 0x1000_0000;
    }
    if m & 0x4000 != 0 {
        m = (m & !0x4000) | 0x0100_0000;
    }
    m
}

impl ClusterModel {
    fn check_egress_ip(&self, object: &str, ip: Ipv4Addr) -> Result<(), EgressError> {
        let object = object.to_string();
        if ip.is_unspecified()
            || ip.is_loopback()
            || ip.is_multicast()
            || ip.is_broadcast()
            || ip.is_link_local()
        {
            return Err(EgressError::NotUnicast { object, ip });
        }
        if let Some(e) = self
            .config
            .cluster_networks
            .iter()
            .find(|e| e.cidr.contains(ip))
        {
            return Err(EgressError::InClusterNetwork {
                object,
                ip,
                cidr: e.cidr,
            });
        }
        if self.config.service_network.contains(ip) {
            return Err(EgressError::InServiceNetwork {
                object,
                ip,
                cidr: self.config.service_network,
            });
        }
        if let Some(node) = self.node_ips.get(&ip) {
            return Err(EgressError::NodeAddress {
                object,
                ip,
                node: node.clone(),
            });
        }
        Ok(())
    }

    fn check_repeats(object: &str, ips: &[Ipv4Addr]) -> Result<(), EgressError> {
        let mut seen = BTreeSet::new();
        for ip in ips {
            if !seen.insert(*ip) {
                return Err(EgressError::Repeated {
                    object: object.to_string(),
                    ip: *ip,
                });
            }
        }
        Ok(())
    }

    /// Set `NetNamespace.egressIPs` of a namespace (empty: none). Every node's flows change.
    pub fn set_namespace_egress_ips(
        &mut self,
        namespace: &str,
        ips: &[Ipv4Addr],
    ) -> Result<Affected, ModelError> {
        if !self.namespaces.contains_key(namespace) {
            return Err(ModelError::UnknownNamespace(namespace.to_string()));
        }
        let object = format!("netnamespace/{namespace}");
        Self::check_repeats(&object, ips)?;
        for ip in ips {
            self.check_egress_ip(&object, *ip)?;
            if let Some((other, _)) = self
                .egress
                .spec
                .namespaces
                .iter()
                .find(|(n, v)| n.as_str() != namespace && v.contains(ip))
            {
                return Err(EgressError::NamespaceClaimed {
                    namespace: namespace.to_string(),
                    ip: *ip,
                    other: other.clone(),
                }
                .into());
            }
        }
        let old = self.egress.spec.namespaces.get(namespace);
        if old.map_or(ips.is_empty(), |o| o.as_slice() == ips) {
            return Ok(Affected::none());
        }
        if ips.is_empty() {
            self.egress.spec.namespaces.remove(namespace);
        } else {
            self.egress
                .spec
                .namespaces
                .insert(namespace.to_string(), ips.to_vec());
        }
        self.reallocate_egress_ips();
        Ok(Affected::all())
    }

    /// Set `HostSubnet.egressIPs` and `egressCIDRs` of a node (both empty: none). Every
    /// node's flows change.
    pub fn set_host_subnet_egress(
        &mut self,
        node: &str,
        egress: HostSubnetEgress,
    ) -> Result<Affected, ModelError> {
        if !self.nodes.contains_key(node) {
            return Err(ModelError::UnknownNode(node.to_string()));
        }
        let object = format!("hostsubnet/{node}");
        if !egress.egress_ips.is_empty() && !egress.egress_cidrs.is_empty() {
            return Err(EgressError::ManualAndAutomatic {
                node: node.to_string(),
            }
            .into());
        }
        Self::check_repeats(&object, &egress.egress_ips)?;
        for ip in &egress.egress_ips {
            self.check_egress_ip(&object, *ip)?;
            if let Some((other, _)) = self
                .egress
                .spec
                .nodes
                .iter()
                .find(|(n, e)| n.as_str() != node && e.egress_ips.contains(ip))
            {
                return Err(EgressError::NodeClaimed {
                    node: node.to_string(),
                    ip: *ip,
                    other: other.clone(),
                }
                .into());
            }
        }
        let mut cidrs: Vec<Ipv4Cidr> = Vec::new();
        for c in &egress.egress_cidrs {
            let c = Ipv4Cidr::new(c.network(), c.prefix());
            for e in &self.config.cluster_networks {
                if e.cidr.overlaps(&c) {
                    return Err(EgressError::CidrOverlaps {
                        node: node.to_string(),
                        cidr: c,
                        what: "cluster network",
                        other: e.cidr,
                    }
                    .into());
                }
            }
            if self.config.service_network.overlaps(&c) {
                return Err(EgressError::CidrOverlaps {
                    node: node.to_string(),
                    cidr: c,
                    what: "the service network",
                    other: self.config.service_network,
                }
                .into());
            }
            if !cidrs.contains(&c) {
                cidrs.push(c);
            }
        }
        let new = HostSubnetEgress {
            egress_ips: egress.egress_ips,
            egress_cidrs: cidrs,
        };
        let old = self
            .egress
            .spec
            .nodes
            .get(node)
            .cloned()
            .unwrap_or_default();
        if old == new {
            return Ok(Affected::none());
        }
        if new.is_empty() {
            self.egress.spec.nodes.remove(node);
        } else {
            self.egress.spec.nodes.insert(node.to_string(), new);
        }
        self.reallocate_egress_ips();
        Ok(Affected::all())
    }

    /// Tell the model whether a node is alive (its switch answers). Offline nodes host no
    /// usable egress IP: automatic IPs move to other nodes, manual ones drop out. Returns
    /// every node when that changes any NETID's egress, else nothing.
    pub fn set_node_online(&mut self, node: &str, online: bool) -> Affected {
        let before = self.egress_plan().netids;
        let changed = if online {
            self.egress.offline.remove(node)
        } else {
            self.nodes.contains_key(node) && self.egress.offline.insert(node.to_string())
        };
        if !changed || self.egress.spec.namespaces.is_empty() {
            return Affected::none();
        }
        self.reallocate_egress_ips();
        if self.egress_plan().netids == before {
            Affected::none()
        } else {
            Affected::all()
        }
    }

    /// Whether a node counts as online for egress IPs.
    pub fn node_online(&self, node: &str) -> bool {
        self.nodes.contains_key(node) && !self.egress.offline.contains(node)
    }

    /// The requested egress IPs of a namespace.
    pub fn namespace_egress_ips(&self, namespace: &str) -> &[Ipv4Addr] {
        self.egress
            .spec
            .namespaces
            .get(namespace)
            .map_or(&[], Vec::as_slice)
    }

    /// `HostSubnet.egressIPs` / `egressCIDRs` of a node.
    pub fn host_subnet_egress(&self, node: &str) -> HostSubnetEgress {
        self.egress
            .spec
            .nodes
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// The egress-IP state to save.
    pub fn egress_snapshot(&self) -> &EgressSnapshot {
        &self.egress.spec
    }

    /// Whether a namespace requests egress IPs.
    pub(super) fn namespace_has_egress(&self, namespace: &str) -> bool {
        self.egress.spec.namespaces.contains_key(namespace)
    }

    /// A deleted node takes its egress settings and placements with it.
    pub(super) fn forget_node_egress(&mut self, node: &str) {
        self.egress.offline.remove(node);
        let had = self.egress.spec.nodes.remove(node).is_some();
        if had || self.egress.spec.automatic.values().any(|n| n == node) {
            self.reallocate_egress_ips();
        }
    }

    /// A deleted namespace takes its egress IPs with it.
    pub(super) fn forget_namespace_egress(&mut self, namespace: &str) {
        if self.egress.spec.namespaces.remove(namespace).is_some() {
            self.reallocate_egress_ips();
        }
    }

    /// Restore saved egress state (after nodes and namespaces), checking it like a change.
    pub(super) fn restore_egress(&mut self, s: &EgressSnapshot) -> Result<(), ModelError> {
        for (node, e) in &s.nodes {
            self.set_host_subnet_egress(node, e.clone())?;
        }
        for (ns, ips) in &s.namespaces {
            self.set_namespace_egress_ips(ns, ips)?;
        }
        // The saved placements, once every request is back (placing while requests were still
        // missing would have moved IPs), kept where they still fit.
        self.egress.spec.automatic = s
            .automatic
            .iter()
            .filter(|(_, n)| self.nodes.contains_key(*n))
            .map(|(ip, n)| (*ip, n.clone()))
            .collect();
        self.reallocate_egress_ips();
        Ok(())
    }

    /// The node listing `ip` in its `egressIPs`.
    fn manual_owner(&self, ip: Ipv4Addr) -> Option<&str> {
        self.egress
            .spec
            .nodes
            .iter()
            .find(|(_, e)| e.egress_ips.contains(&ip))
            .map(|(n, _)| n.as_str())
    }

    /// Why `ip` can never be used as it stands (independent of placement), if so.
    fn egress_ip_problem(&self, ip: Ipv4Addr) -> Option<String> {
        self.check_egress_ip("", ip).err().map(|e| {
            let s = e.to_string();
            s.strip_prefix(": ").unwrap_or(&s).to_string()
        })
    }

    /// Re-place automatic IPs: keep every placement whose node is online and still covers the
    /// IP; place the others (namespaces asking for fewer IPs first, then IPs with fewer
    /// candidate nodes) on the online covering node with the fewest egress IPs that does not
    /// already host an IP of the same NETID. Returns whether a placement changed.
    pub(super) fn reallocate_egress_ips(&mut self) -> bool {
        // (ip, namespace, netid, how many IPs the namespace asks for)
        let mut wanted: Vec<(Ipv4Addr, String, u32, usize)> = Vec::new();
        for (ns, ips) in &self.egress.spec.namespaces {
            let netid = self.effective_netid(ns);
            for ip in ips {
                if self.manual_owner(*ip).is_none() && self.egress_ip_problem(*ip).is_none() {
                    wanted.push((*ip, ns.clone(), netid, ips.len()));
                }
            }
        }
        let online_cidr_nodes: Vec<(&String, &HostSubnetEgress)> = self
            .egress
            .spec
            .nodes
            .iter()
            .filter(|(n, e)| !e.egress_cidrs.is_empty() && self.node_online(n))
            .collect();
        let covers = |node: &str, ip: Ipv4Addr| {
            online_cidr_nodes
                .iter()
                .any(|(n, e)| n.as_str() == node && e.egress_cidrs.iter().any(|c| c.contains(ip)))
        };
        // Load and NETIDs per node: manual IPs of online nodes count too.
        let mut load: BTreeMap<String, usize> = BTreeMap::new();
        let mut netids_on: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for (ns, ips) in &self.egress.spec.namespaces {
            let netid = self.effective_netid(ns);
            for ip in ips {
                if let Some(n) = self.manual_owner(*ip) {
                    *load.entry(n.to_string()).or_default() += 1;
                    netids_on.entry(n.to_string()).or_default().insert(netid);
                }
            }
        }
        let old = std::mem::take(&mut self.egress.spec.automatic);
        let mut new: BTreeMap<Ipv4Addr, String> = BTreeMap::new();
        let mut rest: Vec<(Ipv4Addr, u32, usize, usize)> = Vec::new();
        for (ip, _ns, netid, n_req) in &wanted {
            match old.get(ip) {
                Some(node)
                    if covers(node, *ip)
                        && !netids_on.get(node).is_some_and(|s| s.contains(netid)) =>
                {
                    new.insert(*ip, node.clone());
                    *load.entry(node.clone()).or_default() += 1;
                    netids_on.entry(node.clone()).or_default().insert(*netid);
                }
                _ => {
                    let candidates = online_cidr_nodes
                        .iter()
                        .filter(|(n, _)| covers(n, *ip))
                        .count();
                    rest.push((*ip, *netid, *n_req, candidates));
                }
            }
        }
        rest.sort_by_key(|(ip, _, n_req, cands)| (*n_req, *cands, *ip));
        for (ip, netid, _, _) in rest {
            let best = online_cidr_nodes
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| covers(n, ip))
                .filter(|n| !netids_on.get(*n).is_some_and(|s| s.contains(&netid)))
                .min_by_key(|n| (load.get(*n).copied().unwrap_or(0), n.to_string()));
            if let Some(n) = best {
                let n = n.to_string();
                *load.entry(n.clone()).or_default() += 1;
                netids_on.entry(n.clone()).or_default().insert(netid);
                new.insert(ip, n);
            }
        }
        let changed = new != old;
        self.egress.spec.automatic = new;
        changed
    }

    /// Where every requested egress IP stands and which (node, IP) pairs each NETID uses.
    pub fn egress_plan(&self) -> EgressPlan {
        let mut plan = EgressPlan::default();
        // NETIDs already served on each node (one IP per NETID per node).
        let mut taken: BTreeMap<(String, u32), Ipv4Addr> = BTreeMap::new();
        for (ns, ips) in &self.egress.spec.namespaces {
            let netid = self.effective_netid(ns);
            let usable = plan.netids.entry(netid).or_default();
            for ip in ips {
                let (node, automatic) = match self.manual_owner(*ip) {
                    Some(n) => (Some(n.to_string()), false),
                    None => (self.egress.spec.automatic.get(ip).cloned(), true),
                };
                let reason = if let Some(p) = self.egress_ip_problem(*ip) {
                    Some(p)
                } else {
                    match &node {
                        None if self.egress.spec.nodes.values().any(|e| {
                            e.egress_cidrs.iter().any(|c| c.contains(*ip))
                        }) =>
                        {
                            Some("no online node with a matching egressCIDR can take it".into())
                        }
                        None => Some("no node's egressIPs or egressCIDRs contain it".into()),
                        Some(n) if !self.node_online(n) => Some(format!("node {n} is offline")),
                        Some(n) => taken.get(&(n.clone(), netid)).map(|other| {
                            format!(
                                "node {n} already hosts {other} for NETID {netid} (one egress IP per NETID per node)"
                            )
                        }),
                    }
                };
                let ok = reason.is_none();
                if let (true, Some(n)) = (ok, &node) {
                    taken.insert((n.clone(), netid), *ip);
                    usable.push((n.clone(), *ip));
                }
                plan.ips.insert(
                    *ip,
                    EgressIpStatus {
                        ip: *ip,
                        namespace: ns.clone(),
                        netid,
                        node,
                        automatic,
                        usable: ok,
                        reason,
                    },
                );
            }
        }
        for v in plan.netids.values_mut() {
            v.sort_by_key(|(_, ip)| *ip);
        }
        plan
    }
}
