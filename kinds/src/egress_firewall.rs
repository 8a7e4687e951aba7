//! EgressNetworkPolicy (`network.openshift.io/v1`) in its outside shapes — the API object of
//! `apply -f` and `flowmeshctl get egressnetworkpolicies -o yaml` (serde structs with the API's
//! field names), the admin API's proto message — and the model's [`EgressFirewall`]. Every
//! conversion into the model checks each rule and names its index (`spec.egress[3].to: ...`).
//! The operations that apply them live in the controller (`resources::egress_firewall`).

use proto::admin as pa;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use topology::model::{
    normalize_dns_name, EgressAction, EgressFirewall, EgressRule, EgressTo, FirewallStatus,
};
use topology::{ClusterModel, Ipv4Cidr};

/// The API object (`apiVersion: network.openshift.io/v1`, `kind: EgressNetworkPolicy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressNetworkPolicyObject {
    /// `network.openshift.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `EgressNetworkPolicy`.
    #[serde(default)]
    pub kind: String,
    /// Name and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The rules.
    #[serde(default)]
    pub spec: EgressNetworkPolicySpec,
    /// flowmesh's view (output only): whether it is enforced and its names' addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EgressNetworkPolicyStatus>,
}

/// `metadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
    /// Namespace.
    #[serde(default)]
    pub namespace: Option<String>,
}

// The spec, rule and destination are the API types of `crate::openshift`.
pub use crate::openshift::{
    EgressNetworkPolicyPeer, EgressNetworkPolicyRule, EgressNetworkPolicySpec,
};

/// `status` (flowmesh's own, output only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressNetworkPolicyStatus {
    /// `Enforced`, `DropAll` or `Ignored`.
    pub state: String,
    /// Why, when not `Enforced`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Each DNS name: its current addresses and next refresh.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_names: Vec<DnsNameStatus>,
}

/// One DNS name's resolution state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsNameStatus {
    /// The name.
    pub name: String,
    /// Its current addresses (those in the flows).
    pub addresses: Vec<String>,
    /// When it is resolved next (RFC 3339, UTC), if scheduled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_refresh: String,
    /// The last lookup's error, if it failed (the old addresses are kept).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

/// A refused rule: the field path and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct RuleError {
    /// e.g. `spec.egress[2].to.cidrSelector`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

fn rule_err(field: String, reason: impl Into<String>) -> RuleError {
    RuleError {
        field,
        reason: reason.into(),
    }
}

/// One rule from its API spelling (`type`, `to.cidrSelector`, `to.dnsName`); `i` is its index.
pub fn rule_from_api(
    i: usize,
    rule_type: &str,
    cidr: Option<&str>,
    dns: Option<&str>,
) -> Result<EgressRule, RuleError> {
    let base = format!("spec.egress[{i}]");
    let action = match rule_type {
        "Allow" => EgressAction::Allow,
        "Deny" => EgressAction::Deny,
        "" => {
            return Err(rule_err(
                format!("{base}.type"),
                "is required (Allow or Deny)",
            ))
        }
        other => {
            return Err(rule_err(
                format!("{base}.type"),
                format!("unknown type {other:?} (Allow or Deny)"),
            ))
        }
    };
    let cidr = cidr.filter(|s| !s.is_empty());
    let dns = dns.filter(|s| !s.is_empty());
    let to = match (cidr, dns) {
        (Some(_), Some(_)) => {
            return Err(rule_err(
                format!("{base}.to"),
                "has both cidrSelector and dnsName; give exactly one",
            ))
        }
        (None, None) => {
            return Err(rule_err(
                format!("{base}.to"),
                "needs cidrSelector or dnsName (exactly one)",
            ))
        }
        (Some(c), None) => EgressTo::Cidr(
            parse_cidr(c).map_err(|e| rule_err(format!("{base}.to.cidrSelector"), e))?,
        ),
        (None, Some(d)) => EgressTo::DnsName(
            normalize_dns_name(d).map_err(|e| rule_err(format!("{base}.to.dnsName"), e))?,
        ),
    };
    Ok(EgressRule { action, to })
}

/// An IPv4 CIDR; host bits are cleared (`10.1.2.3/8` is `10.0.0.0/8`, as OpenShift SDN
/// read it).
fn parse_cidr(text: &str) -> Result<Ipv4Cidr, String> {
    match text.parse::<Ipv4Cidr>() {
        Ok(c) => Ok(c),
        Err(topology::cidr::CidrError::HostBitsSet { canonical, .. }) => Ok(canonical),
        Err(e) => Err(e.to_string()),
    }
}

/// The model's form of an API object in `namespace` named `name`.
pub fn from_api(
    namespace: &str,
    name: &str,
    spec: &EgressNetworkPolicySpec,
) -> Result<EgressFirewall, RuleError> {
    let mut rules = Vec::with_capacity(spec.egress.len());
    for (i, r) in spec.egress.iter().enumerate() {
        rules.push(rule_from_api(
            i,
            &r.rule_type,
            r.to.cidr_selector.as_deref(),
            r.to.dns_name.as_deref(),
        )?);
    }
    Ok(EgressFirewall {
        namespace: namespace.to_string(),
        name: name.to_string(),
        rules,
    })
}

/// The model's form of the admin API's message.
pub fn from_proto(p: &pa::EgressNetworkPolicy) -> Result<EgressFirewall, RuleError> {
    let mut rules = Vec::with_capacity(p.egress.len());
    for (i, r) in p.egress.iter().enumerate() {
        rules.push(rule_from_api(
            i,
            &r.r#type,
            Some(r.cidr_selector.as_str()),
            Some(r.dns_name.as_str()),
        )?);
    }
    Ok(EgressFirewall {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        rules,
    })
}

/// The admin API's message for a firewall, with its status and names (`dns`: name →
/// next refresh (ms since the epoch, 0 = none) and last error).
pub fn to_proto(
    m: &ClusterModel,
    f: &EgressFirewall,
    dns: &BTreeMap<String, DnsSchedule>,
) -> pa::EgressNetworkPolicy {
    let (state, reason) = match m.egress_firewall_status(&f.namespace) {
        FirewallStatus::Enforced => ("Enforced", String::new()),
        FirewallStatus::DropAll(r) => ("DropAll", r),
        FirewallStatus::Ignored(r) => ("Ignored", r),
    };
    let names: BTreeSet<&str> = f.dns_names().collect();
    pa::EgressNetworkPolicy {
        namespace: f.namespace.clone(),
        name: f.name.clone(),
        egress: f
            .rules
            .iter()
            .map(|r| pa::EgressNetworkPolicyRule {
                r#type: r.action.as_str().to_string(),
                cidr_selector: match &r.to {
                    EgressTo::Cidr(c) => c.to_string(),
                    EgressTo::DnsName(_) => String::new(),
                },
                dns_name: match &r.to {
                    EgressTo::DnsName(n) => n.clone(),
                    EgressTo::Cidr(_) => String::new(),
                },
            })
            .collect(),
        state: state.to_string(),
        reason,
        dns_names: names
            .into_iter()
            .map(|n| {
                let s = dns.get(n).cloned().unwrap_or_default();
                pa::EgressDnsName {
                    name: n.to_string(),
                    addresses: m
                        .egress_dns_addresses(n)
                        .map(|a| a.iter().map(|ip| ip.to_string()).collect())
                        .unwrap_or_default(),
                    next_refresh_unix_ms: s.next_refresh_unix_ms,
                    last_error: s.last_error,
                }
            })
            .collect(),
    }
}

/// The API object of an admin API message (for `get -o yaml|json`).
pub fn proto_to_api(p: &pa::EgressNetworkPolicy) -> EgressNetworkPolicyObject {
    EgressNetworkPolicyObject {
        api_version: "network.openshift.io/v1".into(),
        kind: "EgressNetworkPolicy".into(),
        metadata: ObjectMeta {
            name: Some(p.name.clone()),
            namespace: Some(p.namespace.clone()),
        },
        spec: EgressNetworkPolicySpec {
            egress: p
                .egress
                .iter()
                .map(|r| EgressNetworkPolicyRule {
                    rule_type: r.r#type.clone(),
                    to: EgressNetworkPolicyPeer {
                        cidr_selector: Some(r.cidr_selector.clone()).filter(|s| !s.is_empty()),
                        dns_name: Some(r.dns_name.clone()).filter(|s| !s.is_empty()),
                    },
                })
                .collect(),
        },
        status: Some(EgressNetworkPolicyStatus {
            state: p.state.clone(),
            reason: p.reason.clone(),
            dns_names: p
                .dns_names
                .iter()
                .map(|d| DnsNameStatus {
                    name: d.name.clone(),
                    addresses: d.addresses.clone(),
                    next_refresh: rfc3339_ms(d.next_refresh_unix_ms),
                    last_error: d.last_error.clone(),
                })
                .collect(),
        }),
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC (`""` for 0).
pub fn rfc3339_ms(ms: i64) -> String {
    if ms <= 0 {
        return String::new();
    }
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// When a name is resolved next, and how the last lookup failed (the resolver's view).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsSchedule {
    /// Milliseconds since the epoch (0: not scheduled).
    pub next_refresh_unix_ms: i64,
    /// The last lookup's error ("" when it succeeded).
    pub last_error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> EgressNetworkPolicySpec {
        serde_yaml::from_str(yaml).expect("yaml")
    }

    #[test]
    fn rules_are_checked_and_named_by_index() {
        let ok = from_api(
            "a",
            "fw",
            &spec("egress:\n- type: Allow\n  to: {cidrSelector: 10.1.2.3/8}\n- type: Deny\n  to: {dnsName: WWW.Example.com.}\n"),
        )
        .expect("ok");
        assert_eq!(
            ok.rules[0].to,
            EgressTo::Cidr("10.0.0.0/8".parse().expect("c"))
        );
        assert_eq!(ok.rules[1].to, EgressTo::DnsName("www.example.com".into()));
        let cases = [
            ("egress:\n- type: Allow\n  to: {cidrSelector: 10.0.0.0/33}\n", "spec.egress[0].to.cidrSelector"),
            ("egress:\n- type: Allow\n  to: {cidrSelector: 1.0.0.0/8}\n- type: Deny\n  to: {cidrSelector: 1.0.0.0/8, dnsName: a.b}\n", "spec.egress[1].to: has both"),
            ("egress:\n- type: Allow\n  to: {}\n", "spec.egress[0].to: needs"),
            ("egress:\n- type: Allow\n  to: {dnsName: 'bad_name'}\n", "spec.egress[0].to.dnsName"),
            ("egress:\n- type: Reject\n  to: {dnsName: a.b}\n", "spec.egress[0].type: unknown type \"Reject\""),
            ("egress:\n- to: {dnsName: a.b}\n", "spec.egress[0].type: is required"),
        ];
        for (y, want) in cases {
            let e = from_api("a", "fw", &spec(y)).expect_err(y);
            assert!(e.to_string().starts_with(want), "{y}: {e}");
        }
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339_ms(0), "");
        assert_eq!(rfc3339_ms(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
