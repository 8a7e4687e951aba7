//! OpenShift's `network.openshift.io/v1` EgressNetworkPolicy (the egress firewall) as the model
//! holds it: the object, its validation (errors name the rule's index), the one-per-project and
//! not-in-`default` rules, the resolved addresses of its DNS names, and what table 100 must do
//! for each NETID ([`FirewallPlan`]).

use super::*;
use std::sync::Arc;

/// Most rules one EgressNetworkPolicy may hold (the issue asks for at least 8,000; OpenShift
/// SDN allowed 50).
pub const MAX_EGRESS_RULES: usize = 10_000;

/// Default of the most distinct `dnsName`s one project's firewall may use (every name is a
/// lookup the controller repeats for as long as the policy exists).
pub const DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE: usize = 256;

/// What a rule does with the traffic it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EgressAction {
    /// Let it leave the cluster.
    Allow,
    /// Drop it.
    Deny,
}

impl EgressAction {
    /// `Allow` / `Deny`, as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EgressAction::Allow => "Allow",
            EgressAction::Deny => "Deny",
        }
    }
}

/// A rule's destination: `to.cidrSelector` or `to.dnsName`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EgressTo {
    /// An IPv4 network.
    Cidr(Ipv4Cidr),
    /// A DNS name (lowercase, no trailing dot), resolved by the controller (A records).
    DnsName(String),
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EgressRule {
    /// Allow or Deny.
    pub action: EgressAction,
    /// The destination.
    pub to: EgressTo,
}

/// An EgressNetworkPolicy: rules in order, the first that matches wins; traffic no rule
/// matches is allowed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EgressFirewall {
    /// Namespace (project).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.egress`, in order.
    pub rules: Vec<EgressRule>,
}

/// Why an EgressNetworkPolicy was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressFirewallError {
    /// A field is invalid; the message names it (`spec.egress[3].to.dnsName`).
    #[error("egressnetworkpolicy {namespace}/{name}: {detail}")]
    Invalid {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The field and what is wrong with it.
        detail: String,
    },
    /// The project already has another one.
    #[error("egressnetworkpolicy {namespace}/{name}: namespace {namespace} already has egressnetworkpolicy {existing:?}; only one per project is allowed (edit or delete it)")]
    SecondInProject {
        /// Namespace.
        namespace: String,
        /// Name given.
        name: String,
        /// The one it has.
        existing: String,
    },
    /// None in `default`.
    #[error("egressnetworkpolicy {namespace}/{name}: an egress firewall is not allowed in the {DEFAULT_NAMESPACE:?} project (its pods have the global NETID 0)")]
    DefaultProject {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// No such object.
    #[error("egressnetworkpolicy {namespace}/{name} not found")]
    Unknown {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// Check and normalize a `dnsName`: a DNS-1123 subdomain (letters, digits, `-` and `.`,
/// labels of 1–63 characters that start and end with a letter or digit, at most 253
/// characters), an optional trailing dot. Returns it lowercase without the trailing dot.
pub fn normalize_dns_name(name: &str) -> Result<String, String> {
    let n = name.strip_suffix('.').unwrap_or(name);
    if n.is_empty() {
        return Err("a DNS name must not be empty".into());
    }
    if n.len() > 253 {
        return Err(format!(
            "{name:?} is not a valid DNS name: longer than 253 characters"
        ));
    }
    for label in n.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "{name:?} is not a valid DNS name (labels of 1-63 letters, digits and '-', \
                 not starting or ending with '-', separated by '.'; no wildcards)"
            ));
        }
    }
    Ok(n.to_ascii_lowercase())
}

impl EgressFirewall {
    /// Check every rule (the error names the rule's index) and the rule count.
    pub fn validate(&self) -> Result<(), EgressFirewallError> {
        let invalid = |detail: String| EgressFirewallError::Invalid {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            detail,
        };
        if self.rules.len() > MAX_EGRESS_RULES {
            return Err(invalid(format!(
                "spec.egress: {} rules; at most {MAX_EGRESS_RULES} are allowed",
                self.rules.len()
            )));
        }
        for (i, r) in self.rules.iter().enumerate() {
            if let EgressTo::DnsName(n) = &r.to {
                match normalize_dns_name(n) {
                    Ok(norm) if &norm == n => {}
                    Ok(norm) => {
                        return Err(invalid(format!(
                            "spec.egress[{i}].to.dnsName: {n:?} is not normalized (want {norm:?})"
                        )))
                    }
                    Err(e) => return Err(invalid(format!("spec.egress[{i}].to.dnsName: {e}"))),
                }
            }
        }
        Ok(())
    }

    /// The first rule whose `dnsName` is one distinct name more than `limit`: (its index,
    /// the name).
    pub fn rule_over_dns_limit(&self, limit: usize) -> Option<(usize, &str)> {
        let mut seen = BTreeSet::new();
        for (i, r) in self.rules.iter().enumerate() {
            if let EgressTo::DnsName(n) = &r.to {
                if seen.insert(n.as_str()) && seen.len() > limit {
                    return Some((i, n));
                }
            }
        }
        None
    }

    /// The DNS names its rules use.
    pub fn dns_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.rules.iter().filter_map(|r| match &r.to {
            EgressTo::DnsName(n) => Some(n.as_str()),
            EgressTo::Cidr(_) => None,
        })
    }
}

/// What table 100 does for one NETID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirewallPlan {
    /// No firewall: the table's default (allow) applies.
    Open,
    /// The rules of one EgressNetworkPolicy (shared by every namespace of the NETID).
    Rules(Arc<EgressFirewall>),
    /// Everything leaving the cluster is dropped; the reason says why (joined projects with
    /// different firewalls).
    DropAll(String),
}

/// Whether a project's EgressNetworkPolicy is enforced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirewallStatus {
    /// Its rules are in table 100 for the project's NETID.
    Enforced,
    /// The project's egress is dropped entirely; the reason says why.
    DropAll(String),
    /// Not enforced; the reason says why.
    Ignored(String),
}

/// The egress firewall state of the model.
#[derive(Clone, Debug, Default)]
pub(super) struct EgressFirewalls {
    /// By namespace (one per project).
    by_namespace: BTreeMap<String, Arc<EgressFirewall>>,
    /// Resolved addresses of the DNS names the firewalls use.
    dns: BTreeMap<String, BTreeSet<Ipv4Addr>>,
    /// Bumped whenever a firewall or a name's addresses change.
    epoch: u64,
    /// The most distinct DNS names a project's firewall may use (None: the default).
    max_dns_names: Option<usize>,
}

impl ClusterModel {
    /// Create or replace a project's EgressNetworkPolicy. Refused (and nothing changed) when
    /// a rule is invalid, the namespace does not exist or is `default`, or the project already
    /// has one under another name. Affects the nodes with pods of the project's NETID.
    pub fn apply_egress_firewall(&mut self, fw: EgressFirewall) -> Result<Affected, ModelError> {
        fw.validate()?;
        if fw.namespace == DEFAULT_NAMESPACE {
            return Err(EgressFirewallError::DefaultProject {
                namespace: fw.namespace,
                name: fw.name,
            }
            .into());
        }
        if !self.namespaces.contains_key(&fw.namespace) {
            return Err(ModelError::UnknownNamespace(fw.namespace.clone()));
        }
        if let Some(old) = self.firewalls.by_namespace.get(&fw.namespace) {
            if old.name != fw.name {
                return Err(EgressFirewallError::SecondInProject {
                    namespace: fw.namespace.clone(),
                    name: fw.name.clone(),
                    existing: old.name.clone(),
                }
                .into());
            }
            if **old == fw {
                return Ok(Affected::none());
            }
        }
        let limit = self.egress_dns_name_limit();
        if let Some((i, n)) = fw.rule_over_dns_limit(limit) {
            return Err(EgressFirewallError::Invalid {
                namespace: fw.namespace.clone(),
                name: fw.name.clone(),
                detail: format!(
                    "spec.egress[{i}].to.dnsName: {n:?} would be the project's DNS name number {}; \
                     a project may use at most {limit} distinct dnsNames \
                     (flowmesh-controller --egress-dns-names-per-namespace); use cidrSelector \
                     rules for the rest",
                    limit + 1
                ),
            }
            .into());
        }
        let ns = fw.namespace.clone();
        self.firewalls.by_namespace.insert(ns.clone(), Arc::new(fw));
        self.egress_names_changed();
        self.firewalls.epoch += 1;
        Ok(self.nodes_of_netid(self.effective_netid(&ns)))
    }

    /// Delete a project's EgressNetworkPolicy.
    pub fn delete_egress_firewall(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Affected, ModelError> {
        match self.firewalls.by_namespace.get(namespace) {
            Some(fw) if fw.name == name => {}
            _ => {
                return Err(EgressFirewallError::Unknown {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                }
                .into())
            }
        }
        self.firewalls.by_namespace.remove(namespace);
        self.egress_names_changed();
        self.firewalls.epoch += 1;
        Ok(self.nodes_of_netid(self.effective_netid(namespace)))
    }

    /// Drop the resolved addresses of names no firewall uses any more.
    fn egress_names_changed(&mut self) {
        let used = self.egress_dns_names();
        self.firewalls.dns.retain(|n, _| used.contains(n));
    }

    /// The most distinct DNS names one project's firewall may use (checked when a firewall
    /// is applied; firewalls restored from a snapshot are not checked again).
    pub fn egress_dns_name_limit(&self) -> usize {
        self.firewalls
            .max_dns_names
            .unwrap_or(DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE)
    }

    /// Sets [`ClusterModel::egress_dns_name_limit`] (at least 1).
    pub fn set_egress_dns_name_limit(&mut self, limit: usize) {
        self.firewalls.max_dns_names = Some(limit.max(1));
    }

    /// A project's EgressNetworkPolicy.
    pub fn egress_firewall(&self, namespace: &str) -> Option<&EgressFirewall> {
        self.firewalls
            .by_namespace
            .get(namespace)
            .map(|a| a.as_ref())
    }

    /// Every EgressNetworkPolicy, by namespace.
    pub fn egress_firewalls(&self) -> impl Iterator<Item = &EgressFirewall> {
        self.firewalls.by_namespace.values().map(|a| a.as_ref())
    }

    /// Every DNS name some firewall uses.
    pub fn egress_dns_names(&self) -> BTreeSet<String> {
        self.firewalls
            .by_namespace
            .values()
            .flat_map(|f| f.dns_names().map(str::to_string))
            .collect()
    }

    /// The addresses a DNS name resolved to last (`None`: not resolved yet or not used).
    pub fn egress_dns_addresses(&self, name: &str) -> Option<&BTreeSet<Ipv4Addr>> {
        self.firewalls.dns.get(name)
    }

    /// Every resolved name with its addresses.
    pub fn egress_dns_all(&self) -> impl Iterator<Item = (&str, &BTreeSet<Ipv4Addr>)> {
        self.firewalls.dns.iter().map(|(n, a)| (n.as_str(), a))
    }

    /// Record what `name` resolves to. Ignored (nothing affected) for a name no firewall uses
    /// or when the addresses did not change; otherwise affects the nodes with pods of the
    /// NETIDs whose firewalls use the name.
    pub fn set_egress_dns_addresses(&mut self, name: &str, addrs: BTreeSet<Ipv4Addr>) -> Affected {
        let users: Vec<String> = self
            .firewalls
            .by_namespace
            .values()
            .filter(|f| f.dns_names().any(|n| n == name))
            .map(|f| f.namespace.clone())
            .collect();
        if users.is_empty() || self.firewalls.dns.get(name) == Some(&addrs) {
            return Affected::none();
        }
        self.firewalls.dns.insert(name.to_string(), addrs);
        self.firewalls.epoch += 1;
        let mut a = Affected::none();
        for ns in users {
            a.merge(self.nodes_of_netid(self.effective_netid(&ns)));
        }
        a
    }

    /// Counter bumped whenever a firewall, a name's addresses, or the NETIDs of namespaces
    /// change (what table 100 depends on, besides where pods run).
    pub fn egress_firewall_epoch(&self) -> (u64, u64, u64) {
        (self.firewalls.epoch, self.netid_epoch(), self.config_epoch)
    }

    /// A value that changes whenever any namespace's NETID or the namespace set changes.
    pub fn netid_epoch(&self) -> u64 {
        self.namespace_epoch
            .wrapping_mul(1_000_003)
            .wrapping_add(self.netid_changes)
    }

    /// The nodes with pods of any namespace using `netid`.
    pub fn nodes_of_netid(&self, netid: u32) -> Affected {
        let mut a = Affected::none();
        if self.config.mode == Mode::Subnet {
            return a;
        }
        for ns in self.namespaces_with_netid(netid) {
            a.merge(self.nodes_of_namespace(&ns));
        }
        // The egress nodes of the NETID's egress IPs judge the traffic they relay too.
        if let Some(usable) = self.egress_plan().netids.get(&netid) {
            a.nodes.extend(usable.iter().map(|(n, _)| n.clone()));
        }
        a
    }

    /// The NETIDs whose table-100 flows `node` holds: those of its pods, and those whose
    /// egress IPs it hosts (traffic relayed to it over VXLAN is judged there too), that have a
    /// firewall (0 excluded; none in subnet mode).
    pub fn egress_firewall_netids(&self, node: &str) -> BTreeSet<u32> {
        let plans = self.egress_firewall_plans();
        if plans.is_empty() {
            return BTreeSet::new();
        }
        let plan = self.egress_plan();
        self.pods_on_node(node)
            .map(|p| self.effective_netid(&p.key.namespace))
            .chain(plan.hosted_on(node).map(|(netid, _)| netid))
            .filter(|n| plans.contains_key(n))
            .collect()
    }

    /// Every NETID whose table-100 flows are not just the default, with its plan.
    pub fn egress_firewall_plans(&self) -> BTreeMap<u32, FirewallPlan> {
        let netids: BTreeSet<u32> = self
            .firewalls
            .by_namespace
            .keys()
            .map(|n| self.effective_netid(n))
            .collect();
        netids
            .into_iter()
            .map(|n| (n, self.egress_firewall_plan(n)))
            .filter(|(_, p)| *p != FirewallPlan::Open)
            .collect()
    }

    /// What table 100 does for `netid`: the firewall of its namespaces when they agree (one
    /// namespace, or joined namespaces with identical rules), drop-all when joined namespaces
    /// have different firewalls (or only some of them have one), open otherwise.
    pub fn egress_firewall_plan(&self, netid: u32) -> FirewallPlan {
        if netid == NETID_GLOBAL || self.config.mode == Mode::Subnet {
            return FirewallPlan::Open;
        }
        let names = self.namespaces_with_netid(netid);
        let fws: Vec<Option<&Arc<EgressFirewall>>> = names
            .iter()
            .map(|n| self.firewalls.by_namespace.get(n))
            .collect();
        let Some(first) = fws.iter().flatten().next() else {
            return FirewallPlan::Open;
        };
        let agree = fws
            .iter()
            .all(|f| f.is_some_and(|f| f.rules == first.rules));
        if agree {
            FirewallPlan::Rules((*first).clone())
        } else {
            FirewallPlan::DropAll(format!(
                "namespaces {} share NETID {netid} but do not have the same egress firewall; \
                 all their egress traffic is dropped (give them the same rules, or isolate them: \
                 flowmeshctl adm pod-network isolate-projects ...)",
                names.join(", ")
            ))
        }
    }

    /// Whether a project's firewall is enforced, and if not why.
    pub fn egress_firewall_status(&self, namespace: &str) -> FirewallStatus {
        if self.config.mode == Mode::Subnet {
            return FirewallStatus::Ignored(
                "the cluster is in subnet mode; egress firewalls need multitenant or \
                 networkpolicy mode"
                    .into(),
            );
        }
        let netid = self.effective_netid(namespace);
        if netid == NETID_GLOBAL {
            return FirewallStatus::Ignored(format!(
                "namespace {namespace} has the global NETID 0; egress firewalls apply only \
                 to projects with a NETID of their own"
            ));
        }
        match self.egress_firewall_plan(netid) {
            FirewallPlan::DropAll(r) => FirewallStatus::DropAll(r),
            _ => FirewallStatus::Enforced,
        }
    }

    /// The NETIDs whose egress is dropped because joined namespaces disagree, with the reason.
    pub fn egress_firewall_conflicts(&self) -> BTreeMap<u32, String> {
        self.egress_firewall_plans()
            .into_iter()
            .filter_map(|(n, p)| match p {
                FirewallPlan::DropAll(r) => Some((n, r)),
                _ => None,
            })
            .collect()
    }

    /// A namespace moved from NETID `old` to `new`: when a firewall is involved, every node
    /// with pods of either NETID takes the change (a join may create or end a conflict).
    pub(super) fn egress_firewall_netid_change(&mut self, old: u32, new: u32) -> Affected {
        let involved = self.firewalls.by_namespace.keys().any(|ns| {
            let n = self.effective_netid(ns);
            n == old || n == new
        });
        if !involved {
            return Affected::none();
        }
        self.firewalls.epoch += 1;
        let mut a = self.nodes_of_netid(old);
        a.merge(self.nodes_of_netid(new));
        a
    }

    /// A namespace is being deleted: its firewall goes with it.
    pub(super) fn drop_egress_firewall_of(&mut self, namespace: &str) -> Affected {
        let Some(name) = self
            .firewalls
            .by_namespace
            .get(namespace)
            .map(|f| f.name.clone())
        else {
            return Affected::none();
        };
        self.delete_egress_firewall(namespace, &name)
            .unwrap_or_default()
    }

    /// Restore saved firewalls and resolved names (after namespaces).
    pub(super) fn restore_egress_firewalls(
        &mut self,
        fws: &[EgressFirewall],
        dns: &BTreeMap<String, Vec<Ipv4Addr>>,
    ) -> Result<(), ModelError> {
        // What was stored was accepted under the limit of its day: not checked again, so a
        // lowered limit never stops a restart.
        let limit = self.firewalls.max_dns_names.replace(usize::MAX);
        let restored = fws.iter().try_for_each(|f| {
            if self.firewalls.by_namespace.contains_key(&f.namespace) {
                return Err(ModelError::Duplicate {
                    kind: "egressnetworkpolicy",
                    name: format!("{}/{}", f.namespace, f.name),
                });
            }
            self.apply_egress_firewall(f.clone()).map(|_| ())
        });
        self.firewalls.max_dns_names = limit;
        restored?;
        for (name, addrs) in dns {
            self.set_egress_dns_addresses(name, addrs.iter().copied().collect());
        }
        Ok(())
    }

    /// The firewalls and resolved names to save.
    pub(super) fn snapshot_egress_firewalls(
        &self,
    ) -> (Vec<EgressFirewall>, BTreeMap<String, Vec<Ipv4Addr>>) {
        (
            self.egress_firewalls().cloned().collect(),
            self.firewalls
                .dns
                .iter()
                .map(|(n, a)| (n.clone(), a.iter().copied().collect()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterNetworkConfig;

    fn model() -> ClusterModel {
        let c = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("c"),
            23,
            "172.30.0.0/16".parse().expect("s"),
            Mode::Multitenant,
        );
        let mut m = ClusterModel::new(c).expect("config");
        for ns in ["default", "a", "b"] {
            m.add_namespace(ns).expect("ns");
        }
        m
    }

    fn fw(ns: &str, name: &str, rules: Vec<EgressRule>) -> EgressFirewall {
        EgressFirewall {
            namespace: ns.into(),
            name: name.into(),
            rules,
        }
    }

    fn cidr(action: EgressAction, c: &str) -> EgressRule {
        EgressRule {
            action,
            to: EgressTo::Cidr(c.parse().expect("cidr")),
        }
    }

    fn dns(action: EgressAction, n: &str) -> EgressRule {
        EgressRule {
            action,
            to: EgressTo::DnsName(n.into()),
        }
    }

    #[test]
    fn one_per_project_none_in_default() {
        let mut m = model();
        m.apply_egress_firewall(fw("a", "x", vec![cidr(EgressAction::Deny, "0.0.0.0/0")]))
            .expect("first");
        let e = m
            .apply_egress_firewall(fw("a", "y", vec![]))
            .expect_err("second");
        assert!(
            e.to_string()
                .contains("already has egressnetworkpolicy \"x\""),
            "{e}"
        );
        let e = m
            .apply_egress_firewall(fw("default", "x", vec![]))
            .expect_err("default");
        assert!(
            e.to_string().contains("not allowed in the \"default\""),
            "{e}"
        );
        let e = m
            .apply_egress_firewall(fw("nope", "x", vec![]))
            .expect_err("unknown ns");
        assert!(matches!(e, ModelError::UnknownNamespace(_)));
        assert_eq!(m.egress_firewalls().count(), 1);
        m.delete_egress_firewall("a", "x").expect("delete");
        assert!(m.delete_egress_firewall("a", "x").is_err());
    }

    #[test]
    fn dns_names_are_checked_and_named_by_index() {
        let mut m = model();
        let e = m
            .apply_egress_firewall(fw(
                "a",
                "x",
                vec![
                    dns(EgressAction::Allow, "ok.example.com"),
                    dns(EgressAction::Allow, "bad_name.example.com"),
                ],
            ))
            .expect_err("bad");
        assert!(e.to_string().contains("spec.egress[1].to.dnsName"), "{e}");
        assert_eq!(m.egress_firewalls().count(), 0);
        assert_eq!(
            normalize_dns_name("WWW.Example.com.").as_deref(),
            Ok("www.example.com")
        );
        for bad in [
            "",
            ".",
            "a..b",
            "-a.b",
            "a-.b",
            "*.example.com",
            &"a".repeat(64),
        ] {
            assert!(normalize_dns_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn distinct_dns_names_past_the_limit_refuse_the_policy_and_name_the_rule() {
        let mut m = model();
        m.set_egress_dns_name_limit(2);
        let rules = |names: &[&str]| {
            names
                .iter()
                .map(|n| dns(EgressAction::Allow, n))
                .collect::<Vec<_>>()
        };
        // A name used twice counts once.
        m.apply_egress_firewall(fw("a", "x", rules(&["a.test", "b.test", "a.test"])))
            .expect("two distinct names");
        let e = m
            .apply_egress_firewall(fw(
                "a",
                "x",
                rules(&["a.test", "b.test", "a.test", "c.test"]),
            ))
            .expect_err("three");
        let text = e.to_string();
        assert!(
            text.contains("spec.egress[3].to.dnsName")
                && text.contains("\"c.test\"")
                && text.contains("at most 2 distinct dnsNames")
                && text.contains("--egress-dns-names-per-namespace"),
            "{text}"
        );
        // Nothing changed; another project has a limit of its own.
        assert_eq!(m.egress_firewall("a").map(|f| f.rules.len()), Some(3));
        m.apply_egress_firewall(fw("b", "y", rules(&["c.test", "d.test"])))
            .expect("project b");
        // A policy accepted under a larger limit is restored whatever the default.
        m.set_egress_dns_name_limit(DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE + 1);
        let many: Vec<String> = (0..=DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE)
            .map(|i| format!("n{i}.test"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        m.apply_egress_firewall(fw("a", "x", rules(&many)))
            .expect("under the larger limit");
        let restored = ClusterModel::restore(&m.snapshot()).expect("restore");
        assert_eq!(restored.egress_firewalls().count(), 2);
        assert_eq!(
            restored.egress_dns_name_limit(),
            DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE,
            "the restored model keeps its own limit"
        );
        assert_eq!(
            DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE,
            model().egress_dns_name_limit()
        );
    }

    #[test]
    fn joined_projects_with_different_firewalls_drop_all() {
        let mut m = model();
        m.apply_egress_firewall(fw("a", "x", vec![cidr(EgressAction::Deny, "1.2.3.0/24")]))
            .expect("a");
        let na = m.effective_netid("a");
        assert!(matches!(m.egress_firewall_plan(na), FirewallPlan::Rules(_)));
        m.join(&["b"], "a").expect("join");
        assert!(matches!(
            m.egress_firewall_plan(na),
            FirewallPlan::DropAll(_)
        ));
        assert_eq!(m.egress_firewall_conflicts().len(), 1);
        m.apply_egress_firewall(fw("b", "y", vec![cidr(EgressAction::Deny, "1.2.3.0/24")]))
            .expect("b");
        assert!(matches!(m.egress_firewall_plan(na), FirewallPlan::Rules(_)));
        assert!(m.egress_firewall_conflicts().is_empty());
    }

    #[test]
    fn dns_addresses_only_for_used_names_and_survive_snapshot() {
        let mut m = model();
        m.apply_egress_firewall(fw("a", "x", vec![dns(EgressAction::Allow, "h.example")]))
            .expect("a");
        let addrs: BTreeSet<Ipv4Addr> = [Ipv4Addr::new(192, 0, 2, 1)].into();
        m.set_egress_dns_addresses("h.example", addrs.clone());
        assert!(m
            .set_egress_dns_addresses("other.example", addrs.clone())
            .is_empty());
        assert_eq!(m.egress_dns_addresses("h.example"), Some(&addrs));
        assert_eq!(m.egress_dns_addresses("other.example"), None);
        let r = ClusterModel::restore(&m.snapshot()).expect("restore");
        assert_eq!(r.egress_dns_addresses("h.example"), Some(&addrs));
        assert_eq!(r.egress_firewall("a"), m.egress_firewall("a"));
        m.delete_egress_firewall("a", "x").expect("delete");
        assert_eq!(m.egress_dns_addresses("h.example"), None);
    }
}
