//! A reference evaluator of Kubernetes `networking.k8s.io/v1` NetworkPolicy, written for the
//! tests from the API's documented semantics, not from the pipeline: a connection from a
//! source (pod or address) to a destination (pod or address) on (protocol, port) is allowed
//! when egress from the source and ingress to the destination both allow it.
//!
//! * A pod is isolated for a direction when some policy of its namespace selects it
//!   (`podSelector`) and lists that direction in its policy types; a non-isolated pod allows
//!   everything in that direction.
//! * An isolated pod allows what the union of the rules of the policies selecting it allow.
//!   A rule matches when its peer list is empty or one peer matches, and its port list is
//!   empty or one port matches.
//! * Peers: `podSelector` alone — pods of the policy's namespace; `namespaceSelector` alone —
//!   every pod of the selected namespaces; both — the selected pods of the selected
//!   namespaces; `ipBlock` — addresses in `cidr` outside every `except` (this implementation
//!   applies ipBlocks to pod addresses too).
//! * Ports: same protocol, and no port (every port), a number (or the range to `endPort`), or
//!   a name that the *destination* pod has as a container port of that protocol and number.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use topology::model::{LabelSelector, NetworkPolicy, Peer, PolicyRule, PortSpec};
use topology::{ClusterModel, PodInfo};

/// One end of a connection.
#[derive(Clone, Copy, Debug)]
pub enum End<'a> {
    /// A pod.
    Pod(&'a PodInfo),
    /// An address outside the pod network.
    Addr(Ipv4Addr),
}

impl End<'_> {
    fn ip(&self) -> Ipv4Addr {
        match self {
            End::Pod(p) => p.ip,
            End::Addr(a) => *a,
        }
    }
}

fn selects(sel: &LabelSelector, labels: &std::collections::BTreeMap<String, String>) -> bool {
    // Spelled out here rather than calling the model's matcher: matchLabels all equal, and
    // every expression holds.
    sel.match_labels
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        && sel.match_expressions.iter().all(|r| {
            use topology::model::SelectorOp::*;
            let v = labels.get(&r.key);
            match r.op {
                In => v.is_some_and(|v| r.values.contains(v)),
                NotIn => !v.is_some_and(|v| r.values.contains(v)),
                Exists => v.is_some(),
                DoesNotExist => v.is_none(),
            }
        })
}

fn peer_matches(m: &ClusterModel, policy_ns: &str, peer: &Peer, other: End<'_>) -> bool {
    match peer {
        Peer::IpBlock { cidr, except } => {
            let ip = other.ip();
            cidr.contains(ip) && !except.iter().any(|e| e.contains(ip))
        }
        Peer::Pods {
            namespace_selector,
            pod_selector,
        } => {
            let End::Pod(p) = other else {
                return false;
            };
            let ns_ok = match namespace_selector {
                None => p.key.namespace == policy_ns,
                Some(s) => {
                    let labels = m
                        .namespace_labels(&p.key.namespace)
                        .cloned()
                        .unwrap_or_default();
                    selects(s, &labels)
                }
            };
            let pod_ok = pod_selector.as_ref().is_none_or(|s| selects(s, &p.labels));
            ns_ok && pod_ok
        }
    }
}

fn port_matches(rule: &PolicyRule, dst: End<'_>, proto: u8, port: u16) -> bool {
    if rule.ports.is_empty() {
        return true;
    }
    rule.ports.iter().any(|pp| {
        if pp.protocol.ip_proto() != proto {
            return false;
        }
        match &pp.port {
            None => true,
            Some(PortSpec::Number(p)) => {
                let end = pp.end_port.unwrap_or(*p);
                *p <= port && port <= end
            }
            Some(PortSpec::Name(n)) => match dst {
                End::Pod(d) => d
                    .ports
                    .iter()
                    .any(|c| &c.name == n && c.protocol == pp.protocol && c.port == port),
                End::Addr(_) => false,
            },
        }
    })
}

fn rules_allow(
    m: &ClusterModel,
    p: &NetworkPolicy,
    rules: &[PolicyRule],
    other: End<'_>,
    dst: End<'_>,
    proto: u8,
    port: u16,
) -> bool {
    rules.iter().any(|r| {
        (r.peers.is_empty()
            || r.peers
                .iter()
                .any(|pe| peer_matches(m, &p.namespace, pe, other)))
            && port_matches(r, dst, proto, port)
    })
}

/// Whether `pod`'s egress (`egress = true`) or ingress allows the connection with `other`.
fn direction_allows(
    m: &ClusterModel,
    pod: &PodInfo,
    egress: bool,
    other: End<'_>,
    dst: End<'_>,
    proto: u8,
    port: u16,
) -> bool {
    let mut isolated = false;
    for p in m.policies() {
        if p.namespace != pod.key.namespace || !selects(&p.pod_selector, &pod.labels) {
            continue;
        }
        let (on, rules) = if egress {
            (p.egress_isolation, &p.egress)
        } else {
            (p.ingress_isolation, &p.ingress)
        };
        if !on {
            continue;
        }
        isolated = true;
        if rules_allow(m, p, rules, other, dst, proto, port) {
            return true;
        }
    }
    !isolated
}

/// Whether a new connection `src` → `dst` on (`proto`, `port`) is allowed.
pub fn allowed(m: &ClusterModel, src: End<'_>, dst: End<'_>, proto: u8, port: u16) -> bool {
    let egress_ok = match src {
        End::Pod(s) => direction_allows(m, s, true, dst, dst, proto, port),
        End::Addr(_) => true,
    };
    let ingress_ok = match dst {
        End::Pod(d) => direction_allows(m, d, false, src, dst, proto, port),
        End::Addr(_) => true,
    };
    egress_ok && ingress_ok
}
