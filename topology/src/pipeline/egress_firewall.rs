//! Egress firewall flows (table 100): one run of flows per NETID, built once and shared by
//! every node that holds it.
//!
//! Traffic reaches table 100 only when it leaves the cluster: table 31 sends the cluster
//! networks (local and remote pods), the service network and the gateway elsewhere, and table
//! 99 sends DNS to the node's own IP straight to tun0, so none of those are subject to the
//! firewall. Each flow matches `ip,reg0=NETID` and one destination prefix; Allow continues to
//! table 101, Deny drops.
//!
//! **Priorities.** A rule's flows get `priority = 100 + prefix length`, and a flow whose
//! prefix lies inside a prefix of an *earlier* rule is left out (an earlier rule already
//! decides every packet it could match). After that, any two remaining flows that overlap come
//! from rules in order with the earlier one strictly more specific, so the longest prefix
//! is always the first rule that matches: the flows decide exactly as "in order, first match
//! wins" does. No priority depends on a rule's position, so inserting, editing or deleting
//! one rule changes only that rule's flows and the flows it shadows or stops shadowing, never
//! the priorities of the others; the limit is the 33 prefix lengths, which the scheme always
//! fits. A DNS name's addresses are `/32` prefixes of its rule; when they change, only their
//! flows change.
//!
//! **Audit logging.** In networkpolicy mode a namespace with `k8s.ovn.org/acl-logging` gets,
//! for each rule flow whose verdict it logs, a logging twin: the same match plus
//! `ct_state=-trk` and `tun_src=0.0.0.0`, at `AuditFirewall + prefix length`, with a metered
//! copy to the shim (`EF:NAMESPACE:RULE-INDEX`) before the rule's own verdict.
//! * `-trk` is "a new connection" here: table 0 tracks every IP packet, and table 30 commits
//!   the `+new` ones with a `ct(commit)` that does not recirculate, after which Open vSwitch
//!   clears the packet's conntrack fields; established packets and replies reach table 100
//!   still `+trk`. (Multitenant mode tracks nothing, so it gets no twins.)
//! * `tun_src=0.0.0.0`: not relayed over VXLAN. An egress-IP node judges relayed traffic
//!   again, but the pod's own node has already judged and logged it.
//! * All twins lie above all rule flows and keep their longest-prefix order among
//!   themselves, so a new connection meets the same first matching rule as before, now
//!   logged; every other packet meets the rule flows.

use super::audit::{audit_cookie, AuditTag, Verdict};
use super::builder::{FlowBuilder, PipelineError};
use super::cookie::{self, Feature, ObjectKind};
use super::flowset::{key_cmp, SharedRun};
use super::priority::Band;
use super::regs;
use super::tables::TableId;
use crate::model::audit::AclLogging;
use crate::model::{ClusterModel, EgressAction, EgressFirewall, EgressTo, FirewallPlan};
use crate::Ipv4Cidr;
use ofproto::oxm::ct_state::TRK;
use ofproto::oxm::eth_type::IPV4;
use ofproto::{Flow, Match};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// The cookie of an EgressNetworkPolicy's flows (`egressnetworkpolicy/NAMESPACE/NAME`).
pub fn firewall_cookie(namespace: &str, name: &str) -> u64 {
    cookie::cookie(
        Feature::EgressFirewall,
        ObjectKind::EgressFirewall,
        cookie::object_hash(&format!("egressnetworkpolicy/{namespace}/{name}")),
    )
}

/// The cookie of a NETID's drop-all flow (joined projects whose firewalls differ).
pub fn drop_all_cookie(netid: u32) -> u64 {
    cookie::cookie(Feature::EgressFirewall, ObjectKind::NetId, netid)
}

/// Priority of a rule flow whose destination prefix has length `len`.
pub fn rule_priority(len: u8) -> u16 {
    Band::PerObject.value() + len.min(32) as u16
}

/// One destination prefix of a rule with the rule's index (for explanations and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RulePrefix {
    /// Index of the rule in `spec.egress`.
    pub rule: usize,
    /// The prefix.
    pub prefix: Ipv4Cidr,
    /// Allow or Deny.
    pub action: EgressAction,
}

/// The prefixes that become flows: every rule's prefixes in order (a DNS name's addresses as
/// `/32`s, none while it is unresolved), minus those inside a prefix of an earlier rule.
pub fn effective_prefixes<'a>(
    fw: &EgressFirewall,
    addrs: impl Fn(&str) -> Option<&'a BTreeSet<Ipv4Addr>>,
) -> Vec<RulePrefix> {
    let mut seen: HashSet<(u32, u8)> = HashSet::new();
    let mut out = Vec::new();
    let mut mine: Vec<Ipv4Cidr> = Vec::new();
    for (i, r) in fw.rules.iter().enumerate() {
        mine.clear();
        match &r.to {
            EgressTo::Cidr(c) => mine.push(*c),
            EgressTo::DnsName(n) => {
                if let Some(a) = addrs(n) {
                    mine.extend(a.iter().map(|ip| Ipv4Cidr::new(*ip, 32)));
                }
            }
        }
        for p in &mine {
            let net = u32::from(p.network());
            let shadowed = (0..=p.prefix()).any(|l| {
                let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
                seen.contains(&(net & mask, l))
            });
            if !shadowed {
                out.push(RulePrefix {
                    rule: i,
                    prefix: *p,
                    action: r.action,
                });
            }
        }
        for p in &mine {
            seen.insert((u32::from(p.network()), p.prefix()));
        }
    }
    out
}

/// The reference an audit line gives an egress firewall rule: `EF:NAMESPACE:INDEX`, the index
/// of the rule in `spec.egress` (from 0).
pub fn rule_reference(namespace: &str, rule: usize) -> String {
    format!("EF:{namespace}:{rule}")
}

/// The table-100 flows of `netid` under `plan`, sorted; with `logging` (what the firewall's
/// namespace logs, networkpolicy mode only) the logging twins of the rules it logs.
pub fn netid_firewall_flows<'a>(
    netid: u32,
    plan: &FirewallPlan,
    addrs: impl Fn(&str) -> Option<&'a BTreeSet<Ipv4Addr>>,
    logging: Option<AclLogging>,
) -> Result<Vec<Flow>, PipelineError> {
    let base = Match::new().eth_type(IPV4).reg(regs::REG_SRC_NETID, netid);
    let mut v = Vec::new();
    match plan {
        FirewallPlan::Open => {}
        FirewallPlan::DropAll(_) => {
            v.push(
                FlowBuilder::new(
                    TableId::EgressFirewall,
                    Band::PerObject,
                    drop_all_cookie(netid),
                )
                .matching(base)
                .build()?,
            );
        }
        FirewallPlan::Rules(fw) => {
            let ck = firewall_cookie(&fw.namespace, &fw.name);
            let prefixes = effective_prefixes(fw, addrs);
            v.reserve(prefixes.len());
            for p in prefixes {
                let m = if p.prefix.prefix() == 0 {
                    base.clone()
                } else {
                    base.clone().ipv4_dst(p.prefix.network(), p.prefix.prefix())
                };
                let (verdict, severity) = match p.action {
                    EgressAction::Allow => (Verdict::Allow, logging.and_then(|l| l.allow)),
                    EgressAction::Deny => (Verdict::Drop, logging.and_then(|l| l.deny)),
                };
                if let Some(severity) = severity {
                    let tag = AuditTag {
                        verdict,
                        direction: "egress",
                        severity,
                        reference: rule_reference(&fw.namespace, p.rule),
                    };
                    let b = FlowBuilder::new(
                        TableId::EgressFirewall,
                        Band::AuditFirewall,
                        audit_cookie(ck),
                    )
                    .raise(p.prefix.prefix() as u16)
                    .matching(m.clone().ct_state(0, TRK).tun_src(Ipv4Addr::UNSPECIFIED))
                    .action(tag.action());
                    v.push(match p.action {
                        EgressAction::Allow => b.goto(TableId::EgressIp).build()?,
                        EgressAction::Deny => b.build()?,
                    });
                }
                let b = FlowBuilder::new(TableId::EgressFirewall, Band::PerObject, ck)
                    .raise(p.prefix.prefix() as u16)
                    .matching(m);
                v.push(match p.action {
                    EgressAction::Allow => b.goto(TableId::EgressIp).build()?,
                    EgressAction::Deny => b.build()?,
                });
            }
        }
    }
    v.sort_unstable_by(key_cmp);
    Ok(v)
}

/// What a NETID's run was built from.
#[derive(Debug, PartialEq, Eq)]
struct Inputs {
    plan: FirewallPlan,
    addrs: Vec<Option<BTreeSet<Ipv4Addr>>>,
    logging: Option<AclLogging>,
}

fn inputs_of(model: &ClusterModel, plan: FirewallPlan) -> Inputs {
    let (addrs, logging) = match &plan {
        FirewallPlan::Rules(fw) => (
            fw.dns_names()
                .map(|n| model.egress_dns_addresses(n).cloned())
                .collect(),
            // Only networkpolicy mode tracks every packet (t0), which the twins need.
            model
                .is_policy_mode()
                .then(|| model.acl_logging(&fw.namespace))
                .flatten(),
        ),
        _ => (Vec::new(), None),
    };
    Inputs {
        plan,
        addrs,
        logging,
    }
}

#[derive(Debug)]
struct Entry {
    inputs: Inputs,
    run: SharedRun,
    /// Whether the run holds logging flows (its nodes need the audit meter).
    audit: bool,
}

/// Per-NETID table-100 runs, rebuilt only when the NETID's firewall or one of its names'
/// addresses changed. Every node holding a NETID's flows shares the same run.
#[derive(Debug, Default)]
pub struct FirewallCache {
    epoch: Option<((u64, u64, u64), u64)>,
    /// The NETIDs with flows in table 100, and what they must do.
    plans: BTreeMap<u32, FirewallPlan>,
    runs: HashMap<u32, Entry>,
}

impl FirewallCache {
    fn refresh(&mut self, model: &ClusterModel) -> Result<(), PipelineError> {
        let epoch = (model.egress_firewall_epoch(), model.audit_epoch());
        if self.epoch == Some(epoch) {
            return Ok(());
        }
        self.epoch = Some(epoch);
        self.plans = model.egress_firewall_plans();
        self.runs.retain(|n, _| self.plans.contains_key(n));
        for (netid, plan) in &self.plans {
            let inputs = inputs_of(model, plan.clone());
            if self.runs.get(netid).is_some_and(|e| e.inputs == inputs) {
                continue;
            }
            let flows = netid_firewall_flows(
                *netid,
                plan,
                |n| model.egress_dns_addresses(n),
                inputs.logging,
            )?;
            let audit = flows
                .iter()
                .any(|f| cookie::decode(f.cookie).feature == Feature::Audit as u8);
            self.runs.insert(
                *netid,
                Entry {
                    inputs,
                    run: Arc::from(flows),
                    audit,
                },
            );
        }
        Ok(())
    }

    /// The shared runs of the given NETIDs (those without a firewall have none).
    pub fn runs_for(
        &mut self,
        model: &ClusterModel,
        netids: impl IntoIterator<Item = u32>,
    ) -> Result<Vec<SharedRun>, PipelineError> {
        self.refresh(model)?;
        Ok(netids
            .into_iter()
            .filter_map(|n| self.runs.get(&n).map(|e| e.run.clone()))
            .collect())
    }

    /// The runs a node holds (those of the NETIDs of its pods and of the egress IPs it
    /// hosts), and whether any of them logs.
    pub fn node_runs(
        &mut self,
        model: &ClusterModel,
        node: &str,
    ) -> Result<(Vec<SharedRun>, bool), PipelineError> {
        self.refresh(model)?;
        if self.plans.is_empty() {
            return Ok((Vec::new(), false));
        }
        let netids: BTreeSet<u32> = model
            .egress_firewall_netids(node)
            .into_iter()
            .filter(|n| self.plans.contains_key(n))
            .collect();
        let audit = netids
            .iter()
            .any(|n| self.runs.get(n).is_some_and(|e| e.audit));
        Ok((self.runs_for(model, netids)?, audit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EgressRule;

    fn fw(rules: &[(EgressAction, &str)]) -> EgressFirewall {
        EgressFirewall {
            namespace: "a".into(),
            name: "fw".into(),
            rules: rules
                .iter()
                .map(|(a, t)| EgressRule {
                    action: *a,
                    to: match t.parse::<Ipv4Cidr>() {
                        Ok(c) => EgressTo::Cidr(c),
                        Err(_) => EgressTo::DnsName(t.to_string()),
                    },
                })
                .collect(),
        }
    }

    /// First match wins, by brute force over the rules.
    fn first_match(f: &EgressFirewall, ip: Ipv4Addr) -> EgressAction {
        for r in &f.rules {
            if let EgressTo::Cidr(c) = &r.to {
                if c.contains(ip) {
                    return r.action;
                }
            }
        }
        EgressAction::Allow
    }

    /// Longest prefix of the effective prefixes.
    fn lpm(p: &[RulePrefix], ip: Ipv4Addr) -> EgressAction {
        p.iter()
            .filter(|x| x.prefix.contains(ip))
            .max_by_key(|x| x.prefix.prefix())
            .map_or(EgressAction::Allow, |x| x.action)
    }

    #[test]
    fn longest_prefix_after_shadowing_equals_first_match() {
        use EgressAction::*;
        let cases: Vec<Vec<(EgressAction, &str)>> = vec![
            vec![(Allow, "10.0.0.0/8"), (Deny, "10.1.0.0/16")],
            vec![
                (Deny, "10.1.0.0/16"),
                (Allow, "10.0.0.0/8"),
                (Deny, "0.0.0.0/0"),
            ],
            vec![
                (Allow, "10.1.2.0/24"),
                (Deny, "10.1.0.0/16"),
                (Allow, "10.0.0.0/8"),
            ],
            vec![
                (Deny, "10.0.0.0/8"),
                (Deny, "10.0.0.0/8"),
                (Allow, "10.0.0.0/9"),
            ],
            vec![(Allow, "0.0.0.0/0"), (Deny, "1.2.3.4/32")],
        ];
        let mut seed = 7u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for c in &cases {
            let f = fw(c);
            let p = effective_prefixes(&f, |_| None);
            for _ in 0..2000 {
                let r = rnd() as u32;
                // Mostly inside 10/8 to hit the interesting prefixes.
                let ip = if r & 1 == 0 {
                    (r & 0x00ff_ffff) | 0x0a00_0000
                } else {
                    r
                };
                let ip = Ipv4Addr::from(ip);
                assert_eq!(lpm(&p, ip), first_match(&f, ip), "{c:?} {ip}");
            }
        }
        // Random rule lists.
        for _ in 0..200 {
            let n = (rnd() % 12) as usize + 1;
            let rules: Vec<(EgressAction, String)> = (0..n)
                .map(|_| {
                    let len = (rnd() % 33) as u8;
                    let net = Ipv4Cidr::new(
                        Ipv4Addr::from((rnd() as u32 & 0x0fff_ffff) | 0x0a00_0000),
                        len.max(4),
                    );
                    let a = if rnd() & 1 == 0 { Allow } else { Deny };
                    (a, net.to_string())
                })
                .collect();
            let refs: Vec<(EgressAction, &str)> =
                rules.iter().map(|(a, s)| (*a, s.as_str())).collect();
            let f = fw(&refs);
            let p = effective_prefixes(&f, |_| None);
            for _ in 0..500 {
                let ip = Ipv4Addr::from((rnd() as u32 & 0x0fff_ffff) | 0x0a00_0000);
                assert_eq!(lpm(&p, ip), first_match(&f, ip), "{refs:?} {ip}");
            }
        }
    }

    #[test]
    fn flows_priorities_and_cookie() {
        use EgressAction::*;
        let f = Arc::new(fw(&[
            (Allow, "10.1.0.0/16"),
            (Deny, "10.0.0.0/8"),
            (Allow, "h.example"),
            (Deny, "0.0.0.0/0"),
        ]));
        let addrs: BTreeSet<Ipv4Addr> =
            [Ipv4Addr::new(10, 2, 0, 1), Ipv4Addr::new(192, 0, 2, 7)].into();
        let flows =
            netid_firewall_flows(42, &FirewallPlan::Rules(f.clone()), |_| Some(&addrs), None)
                .expect("flows");
        let text: Vec<(u16, String)> = flows
            .iter()
            .map(|f| (f.priority, format!("{:?}", f.matches)))
            .collect();
        // 10.2.0.1 is inside the earlier 10/8 Deny: shadowed; 192.0.2.7 is kept.
        assert_eq!(flows.len(), 4, "{text:?}");
        assert_eq!(flows[0].priority, 132);
        assert_eq!(flows[1].priority, 116);
        assert_eq!(flows[2].priority, 108);
        assert_eq!(flows[3].priority, 100);
        assert!(flows.iter().all(|x| x.cookie == firewall_cookie("a", "fw")));
        assert!(flows[3].instructions.is_empty(), "final 0/0 Deny drops");
    }

    /// The cached, shared runs always equal a from-scratch computation, through firewall
    /// edits, address changes, joins, pod moves and deletions.
    #[test]
    fn incremental_equals_from_scratch() {
        use crate::model::PodAttach;
        use crate::{compute_node, ClusterNetworkConfig, Mode, Pipeline};
        let c = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("c"),
            23,
            "172.30.0.0/16".parse().expect("s"),
            Mode::Multitenant,
        );
        let mut m = ClusterModel::new(c).expect("model");
        for (i, n) in ["n1", "n2"].iter().enumerate() {
            m.add_node(n, Ipv4Addr::new(192, 168, 9, i as u8 + 1), 0x10 + i as u64)
                .expect("node");
        }
        for ns in ["default", "a", "b"] {
            m.add_namespace(ns).expect("ns");
        }
        let pod = |m: &mut ClusterModel, ns: &str, name: &str, node: &str, of: u32| {
            m.add_pod(PodAttach {
                namespace: ns,
                name,
                node,
                port_name: name,
                ofport: of,
            })
            .expect("pod");
        };
        pod(&mut m, "a", "p", "n1", 3);
        pod(&mut m, "b", "q", "n2", 3);
        let mut p = Pipeline::new();
        let check = |p: &mut Pipeline, m: &ClusterModel, step: &str| {
            for n in ["n1", "n2"] {
                let inc = p.node_flows(m, n).expect("inc");
                let full = compute_node(m, n).expect("full");
                assert_eq!(inc, full, "{step}: {n}");
            }
        };
        check(&mut p, &m, "start");
        let mut f = fw(&[
            (EgressAction::Allow, "h.example"),
            (EgressAction::Deny, "0.0.0.0/0"),
        ]);
        m.apply_egress_firewall(f.clone()).expect("fw");
        check(&mut p, &m, "firewall");
        m.set_egress_dns_addresses("h.example", [Ipv4Addr::new(192, 0, 2, 1)].into());
        check(&mut p, &m, "resolved");
        m.set_egress_dns_addresses("h.example", [Ipv4Addr::new(192, 0, 2, 2)].into());
        check(&mut p, &m, "re-resolved");
        f.rules.insert(
            0,
            EgressRule {
                action: EgressAction::Deny,
                to: EgressTo::Cidr("192.0.2.0/24".parse().expect("c")),
            },
        );
        m.apply_egress_firewall(f.clone()).expect("edit");
        check(&mut p, &m, "edit");
        pod(&mut m, "a", "p2", "n2", 4);
        check(&mut p, &m, "pod on n2");
        m.join(&["b"], "a").expect("join");
        check(&mut p, &m, "join (drop-all)");
        m.isolate("b").expect("isolate");
        check(&mut p, &m, "isolate");
        m.delete_namespace("a").expect("delete ns");
        check(&mut p, &m, "namespace deleted");
        assert!(m.egress_firewalls().next().is_none());
    }

    #[test]
    fn one_edit_changes_one_flow() {
        let rules: Vec<(EgressAction, String)> = (0..8000u32)
            .map(|i| {
                (
                    EgressAction::Deny,
                    Ipv4Cidr::new(Ipv4Addr::from(0x0b00_0000 + (i << 8)), 24).to_string(),
                )
            })
            .collect();
        let refs: Vec<(EgressAction, &str)> = rules.iter().map(|(a, s)| (*a, s.as_str())).collect();
        let a = Arc::new(fw(&refs));
        let mut b = (*a).clone();
        b.rules[4000].to = EgressTo::Cidr("192.168.7.0/24".parse().expect("c"));
        b.rules.insert(10, b.rules[20].clone());
        let fa = netid_firewall_flows(9, &FirewallPlan::Rules(a), |_| None, None).expect("a");
        let fb =
            netid_firewall_flows(9, &FirewallPlan::Rules(Arc::new(b)), |_| None, None).expect("b");
        let sa = crate::FlowSet::new(fa, vec![]);
        let sb = crate::FlowSet::new(fb, vec![]);
        let d = crate::FlowSet::diff(&sa, &sb);
        assert_eq!((d.adds.len(), d.deletes.len(), d.modifies.len()), (1, 1, 0));
    }
}
