//! NetworkPolicy in its three outside shapes — Kubernetes' own type (`apply -f`, `flowmeshctl
//! get networkpolicies -o yaml`), the admin API's proto message — and the model's
//! [`NetworkPolicy`]. Every conversion into the model checks each field and names the bad one
//! (`spec.ingress[0].from[1].ipBlock.except[0]: ...`), then runs the model's own validation.

use k8s_openapi::api::networking::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proto::admin as pa;
use std::collections::{BTreeMap, BTreeSet};
use topology::model::labels::{check_key, check_value, Requirement, SelectorOp};
use topology::model::{
    ContainerPort, LabelSelector, Labels, NetworkPolicy, Peer, PolicyError, PolicyPort, PolicyRule,
    PortSpec, Protocol,
};
use topology::Ipv4Cidr;

/// A refused field: its path and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// The field path, e.g. `spec.ingress[0].ports[1].endPort`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl FieldError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Convert a Kubernetes `networking.k8s.io/v1` NetworkPolicy of namespace `namespace` and name
/// `name` into the model's form, checking every field. `policyTypes` defaults to Ingress, plus
/// Egress when the policy has egress rules; a port's protocol defaults to TCP.
pub fn from_k8s(
    namespace: &str,
    name: &str,
    np: &k8s::NetworkPolicy,
) -> Result<NetworkPolicy, FieldError> {
    let default_spec = k8s::NetworkPolicySpec::default();
    let spec = np.spec.as_ref().unwrap_or(&default_spec);
    let pod_selector = match &spec.pod_selector {
        Some(s) => selector(s, "spec.podSelector")?,
        None => LabelSelector::everything(),
    };
    let mut ingress = Vec::new();
    for (i, r) in spec.ingress.iter().flatten().enumerate() {
        let base = format!("spec.ingress[{i}]");
        ingress.push(rule(
            r.from.as_deref().unwrap_or_default(),
            r.ports.as_deref().unwrap_or_default(),
            &base,
            "from",
        )?);
    }
    let mut egress = Vec::new();
    for (i, r) in spec.egress.iter().flatten().enumerate() {
        let base = format!("spec.egress[{i}]");
        egress.push(rule(
            r.to.as_deref().unwrap_or_default(),
            r.ports.as_deref().unwrap_or_default(),
            &base,
            "to",
        )?);
    }
    let (ingress_isolation, egress_isolation) =
        policy_types(spec.policy_types.as_deref(), spec.egress.as_deref())?;
    let p = NetworkPolicy {
        namespace: namespace.to_string(),
        name: name.to_string(),
        pod_selector,
        ingress_isolation,
        egress_isolation,
        ingress,
        egress,
    };
    p.validate().map_err(|e| match e {
        PolicyError::Invalid { detail, .. } => match detail.split_once(": ") {
            Some((f, r)) => FieldError::new(f, r),
            None => FieldError::new("spec", detail),
        },
        PolicyError::Labels(l) => FieldError::new("spec", l.0),
    })?;
    Ok(p)
}

/// The isolation a policy's `policyTypes` asks for (ingress, egress), defaulted as the API
/// server defaults it: an absent or empty list is Ingress, plus Egress when `egress` has at
/// least one rule (an empty `egress: []` does not count). Validated as the API server
/// validates it: at most two entries, each Ingress or Egress (a repeated one is accepted).
fn policy_types(
    types: Option<&[String]>,
    egress: Option<&[k8s::NetworkPolicyEgressRule]>,
) -> Result<(bool, bool), FieldError> {
    let types = types.unwrap_or_default();
    if types.is_empty() {
        return Ok((true, egress.is_some_and(|e| !e.is_empty())));
    }
    if types.len() > 2 {
        return Err(FieldError::new(
            "spec.policyTypes",
            format!("{types:?}: may not specify more than two policyTypes"),
        ));
    }
    let (mut ingress, mut egress) = (false, false);
    for (n, t) in types.iter().enumerate() {
        match t.as_str() {
            "Ingress" => ingress = true,
            "Egress" => egress = true,
            other => {
                return Err(FieldError::new(
                    format!("spec.policyTypes[{n}]"),
                    format!(
                        "unsupported value {other:?}: supported values: \"Ingress\", \"Egress\""
                    ),
                ))
            }
        }
    }
    Ok((ingress, egress))
}

fn rule(
    peers: &[k8s::NetworkPolicyPeer],
    ports: &[k8s::NetworkPolicyPort],
    base: &str,
    peers_word: &str,
) -> Result<PolicyRule, FieldError> {
    let mut r = PolicyRule::default();
    for (j, p) in peers.iter().enumerate() {
        r.peers.push(peer(p, &format!("{base}.{peers_word}[{j}]"))?);
    }
    for (j, p) in ports.iter().enumerate() {
        r.ports.push(port(p, &format!("{base}.ports[{j}]"))?);
    }
    Ok(r)
}

fn peer(p: &k8s::NetworkPolicyPeer, field: &str) -> Result<Peer, FieldError> {
    if p.ip_block.is_none() && p.pod_selector.is_none() && p.namespace_selector.is_none() {
        return Err(FieldError::new(
            field,
            "must specify a peer (podSelector, namespaceSelector or ipBlock)",
        ));
    }
    if let Some(b) = &p.ip_block {
        if p.pod_selector.is_some() || p.namespace_selector.is_some() {
            return Err(FieldError::new(
                field,
                "may not specify both ipBlock and another peer (podSelector or namespaceSelector)",
            ));
        }
        if b.cidr.is_empty() {
            return Err(FieldError::new(format!("{field}.ipBlock.cidr"), "required"));
        }
        let cidr = cidr(&b.cidr, &format!("{field}.ipBlock.cidr"))?;
        let mut except = Vec::new();
        for (k, e) in b.except.iter().flatten().enumerate() {
            except.push(self::cidr(e, &format!("{field}.ipBlock.except[{k}]"))?);
        }
        return Ok(Peer::IpBlock { cidr, except });
    }
    Ok(Peer::Pods {
        namespace_selector: p
            .namespace_selector
            .as_ref()
            .map(|s| selector(s, &format!("{field}.namespaceSelector")))
            .transpose()?,
        pod_selector: p
            .pod_selector
            .as_ref()
            .map(|s| selector(s, &format!("{field}.podSelector")))
            .transpose()?,
    })
}

/// A CIDR as the API server's strict validation takes it: subnet form (no bits set past the
/// prefix), no leading zeros, no spaces. flowmesh is IPv4-only: an IPv6 block is refused
/// rather than dropped (a rule whose only peer was dropped would allow every peer).
fn cidr(text: &str, field: &str) -> Result<Ipv4Cidr, FieldError> {
    let bad = |why: String| FieldError::new(field, format!("invalid value {text:?}: {why}"));
    if let Some((_, prefix)) = text.split_once('/') {
        if prefix.len() > 1 && prefix.starts_with('0') {
            return Err(bad("the prefix length may not have leading zeros".into()));
        }
    }
    text.parse::<Ipv4Cidr>().map_err(|e| bad(e.to_string()))
}

/// A policy port as the API server defaults and validates it: an absent protocol is TCP (an
/// empty one is refused, as any but TCP, UDP and SCTP); a numeric port is 1-65535, a named
/// one an IANA service name; endPort only after a numeric port, 1-65535 and >= port.
fn port(p: &k8s::NetworkPolicyPort, field: &str) -> Result<PolicyPort, FieldError> {
    let protocol = match p.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(t) => Protocol::parse(t).ok_or_else(|| {
            FieldError::new(
                format!("{field}.protocol"),
                format!("unsupported value {t:?}: supported values: \"TCP\", \"UDP\", \"SCTP\""),
            )
        })?,
    };
    let end_field = format!("{field}.endPort");
    let port = match &p.port {
        None => {
            if let Some(e) = p.end_port {
                return Err(FieldError::new(
                    end_field,
                    format!("{e}: may not be specified when `port` is not specified"),
                ));
            }
            None
        }
        Some(IntOrString::Int(n)) => {
            let first = port_number(i64::from(*n), &format!("{field}.port"))?;
            if let Some(e) = p.end_port {
                let last = port_number(i64::from(e), &end_field)?;
                if last < first {
                    return Err(FieldError::new(
                        end_field,
                        format!("{e}: must be greater than or equal to `port` ({first})"),
                    ));
                }
            }
            Some(PortSpec::Number(first))
        }
        Some(IntOrString::String(name)) => {
            if let Some(e) = p.end_port {
                return Err(FieldError::new(
                    end_field,
                    format!("{e}: may not be specified when `port` is non-numeric"),
                ));
            }
            topology::model::policy::check_port_name(name)
                .map_err(|e| FieldError::new(format!("{field}.port"), e))?;
            Some(PortSpec::Name(name.clone()))
        }
    };
    let end_port = p.end_port.and_then(|e| u16::try_from(e).ok());
    Ok(PolicyPort {
        protocol,
        port,
        end_port,
    })
}

/// A protocol name; `None` or empty is TCP.
pub fn protocol(text: Option<&str>, field: &str) -> Result<Protocol, FieldError> {
    match text {
        None | Some("") => Ok(Protocol::Tcp),
        Some(t) => Protocol::parse(t).ok_or_else(|| {
            FieldError::new(
                field,
                format!("unsupported protocol {t:?} (TCP, UDP or SCTP)"),
            )
        }),
    }
}

fn port_number(n: i64, field: &str) -> Result<u16, FieldError> {
    match u16::try_from(n) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(FieldError::new(
            field,
            format!("{n}: must be between 1 and 65535, inclusive"),
        )),
    }
}

/// A Kubernetes label selector in the model's form, keys, values and operators checked.
pub fn selector(s: &meta::LabelSelector, field: &str) -> Result<LabelSelector, FieldError> {
    let mut out = LabelSelector::default();
    for (k, v) in s.match_labels.iter().flatten() {
        out.match_labels.insert(k.clone(), v.clone());
    }
    for (i, r) in s.match_expressions.iter().flatten().enumerate() {
        let op = SelectorOp::parse(&r.operator).ok_or_else(|| {
            FieldError::new(
                format!("{field}.matchExpressions[{i}].operator"),
                format!("{:?} is not In, NotIn, Exists or DoesNotExist", r.operator),
            )
        })?;
        out.match_expressions.push(Requirement {
            key: r.key.clone(),
            op,
            values: r.values.iter().flatten().cloned().collect::<BTreeSet<_>>(),
        });
    }
    out.validate(field)
        .map_err(|e| match e.0.split_once(": ") {
            Some((f, r)) => FieldError::new(f, r),
            None => FieldError::new(field, e.0),
        })?;
    Ok(out)
}

/// Check a label map (`metadata.labels`), naming the bad key.
pub fn check_label_map(labels: &Labels, field: &str) -> Result<(), FieldError> {
    for (k, v) in labels {
        check_key(k).map_err(|e| FieldError::new(field, e))?;
        check_value(v).map_err(|e| FieldError::new(format!("{field}[{k}]"), e))?;
    }
    Ok(())
}

fn to_k8s_selector(s: &LabelSelector) -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: (!s.match_labels.is_empty()).then(|| s.match_labels.clone()),
        match_expressions: (!s.match_expressions.is_empty()).then(|| {
            s.match_expressions
                .iter()
                .map(|r| meta::LabelSelectorRequirement {
                    key: r.key.clone(),
                    operator: r.op.as_str().to_string(),
                    values: (!r.values.is_empty()).then(|| r.values.iter().cloned().collect()),
                })
                .collect()
        }),
    }
}

fn to_k8s_peer(p: &Peer) -> k8s::NetworkPolicyPeer {
    match p {
        Peer::Pods {
            namespace_selector,
            pod_selector,
        } => k8s::NetworkPolicyPeer {
            namespace_selector: namespace_selector.as_ref().map(to_k8s_selector),
            pod_selector: pod_selector.as_ref().map(to_k8s_selector),
            ip_block: None,
        },
        Peer::IpBlock { cidr, except } => k8s::NetworkPolicyPeer {
            ip_block: Some(k8s::IPBlock {
                cidr: cidr.to_string(),
                except: (!except.is_empty())
                    .then(|| except.iter().map(|e| e.to_string()).collect()),
            }),
            ..Default::default()
        },
    }
}

fn to_k8s_port(p: &PolicyPort) -> k8s::NetworkPolicyPort {
    k8s::NetworkPolicyPort {
        protocol: Some(p.protocol.as_str().to_string()),
        port: p.port.as_ref().map(|s| match s {
            PortSpec::Number(n) => IntOrString::Int(i32::from(*n)),
            PortSpec::Name(n) => IntOrString::String(n.clone()),
        }),
        end_port: p.end_port.map(i32::from),
    }
}

/// The model's policy as a Kubernetes object (with `policyTypes` spelled out).
pub fn to_k8s(p: &NetworkPolicy) -> k8s::NetworkPolicy {
    let rules =
        |rs: &[PolicyRule]| -> Vec<(Vec<k8s::NetworkPolicyPeer>, Vec<k8s::NetworkPolicyPort>)> {
            rs.iter()
                .map(|r| {
                    (
                        r.peers.iter().map(to_k8s_peer).collect(),
                        r.ports.iter().map(to_k8s_port).collect(),
                    )
                })
                .collect()
        };
    let mut types = Vec::new();
    if p.ingress_isolation {
        types.push("Ingress".to_string());
    }
    if p.egress_isolation {
        types.push("Egress".to_string());
    }
    k8s::NetworkPolicy {
        metadata: meta::ObjectMeta {
            namespace: Some(p.namespace.clone()),
            name: Some(p.name.clone()),
            ..Default::default()
        },
        spec: Some(k8s::NetworkPolicySpec {
            pod_selector: Some(to_k8s_selector(&p.pod_selector)),
            policy_types: Some(types),
            ingress: some(
                rules(&p.ingress)
                    .into_iter()
                    .map(|(from, ports)| k8s::NetworkPolicyIngressRule {
                        from: some(from),
                        ports: some(ports),
                    })
                    .collect(),
            ),
            egress: some(
                rules(&p.egress)
                    .into_iter()
                    .map(|(to, ports)| k8s::NetworkPolicyEgressRule {
                        to: some(to),
                        ports: some(ports),
                    })
                    .collect(),
            ),
        }),
    }
}

/// `None` for an empty list (Kubernetes omits empty lists).
fn some<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn proto_selector(s: &LabelSelector) -> pa::LabelSelector {
    pa::LabelSelector {
        match_labels: s.match_labels.clone().into_iter().collect(),
        match_expressions: s
            .match_expressions
            .iter()
            .map(|r| pa::LabelSelectorRequirement {
                key: r.key.clone(),
                operator: r.op.as_str().to_string(),
                values: r.values.iter().cloned().collect(),
            })
            .collect(),
    }
}

fn proto_rule(r: &PolicyRule) -> pa::NetworkPolicyRule {
    pa::NetworkPolicyRule {
        peers: r
            .peers
            .iter()
            .map(|p| match p {
                Peer::Pods {
                    namespace_selector,
                    pod_selector,
                } => pa::NetworkPolicyPeer {
                    pod_selector: pod_selector.as_ref().map(proto_selector),
                    namespace_selector: namespace_selector.as_ref().map(proto_selector),
                    ip_block: None,
                },
                Peer::IpBlock { cidr, except } => pa::NetworkPolicyPeer {
                    pod_selector: None,
                    namespace_selector: None,
                    ip_block: Some(pa::IpBlock {
                        cidr: cidr.to_string(),
                        except: except.iter().map(|e| e.to_string()).collect(),
                    }),
                },
            })
            .collect(),
        ports: r
            .ports
            .iter()
            .map(|p| pa::NetworkPolicyPort {
                protocol: p.protocol.as_str().to_string(),
                port: p.port.as_ref().map(|s| match s {
                    PortSpec::Number(n) => pa::network_policy_port::Port::Number(u32::from(*n)),
                    PortSpec::Name(n) => pa::network_policy_port::Port::Name(n.clone()),
                }),
                end_port: p.end_port.map(u32::from),
            })
            .collect(),
    }
}

/// The model's policy as the admin API's message (`policy_types` spelled out).
pub fn to_proto(p: &NetworkPolicy) -> pa::NetworkPolicy {
    let mut policy_types = Vec::new();
    if p.ingress_isolation {
        policy_types.push("Ingress".to_string());
    }
    if p.egress_isolation {
        policy_types.push("Egress".to_string());
    }
    pa::NetworkPolicy {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        pod_selector: Some(proto_selector(&p.pod_selector)),
        policy_types,
        ingress: p.ingress.iter().map(proto_rule).collect(),
        egress: p.egress.iter().map(proto_rule).collect(),
    }
}

fn k8s_selector_of(s: &pa::LabelSelector) -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: (!s.match_labels.is_empty()).then(|| {
            s.match_labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<BTreeMap<_, _>>()
        }),
        match_expressions: (!s.match_expressions.is_empty()).then(|| {
            s.match_expressions
                .iter()
                .map(|r| meta::LabelSelectorRequirement {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: (!r.values.is_empty()).then(|| r.values.clone()),
                })
                .collect()
        }),
    }
}

fn k8s_rule_parts(
    r: &pa::NetworkPolicyRule,
) -> (Vec<k8s::NetworkPolicyPeer>, Vec<k8s::NetworkPolicyPort>) {
    let peers = r
        .peers
        .iter()
        .map(|p| k8s::NetworkPolicyPeer {
            pod_selector: p.pod_selector.as_ref().map(k8s_selector_of),
            namespace_selector: p.namespace_selector.as_ref().map(k8s_selector_of),
            ip_block: p.ip_block.as_ref().map(|b| k8s::IPBlock {
                cidr: b.cidr.clone(),
                except: (!b.except.is_empty()).then(|| b.except.clone()),
            }),
        })
        .collect();
    let ports = r
        .ports
        .iter()
        .map(|p| k8s::NetworkPolicyPort {
            protocol: (!p.protocol.is_empty()).then(|| p.protocol.clone()),
            port: p.port.as_ref().map(|s| match s {
                pa::network_policy_port::Port::Number(n) => {
                    IntOrString::Int(i32::try_from(*n).unwrap_or(i32::MAX))
                }
                pa::network_policy_port::Port::Name(n) => IntOrString::String(n.clone()),
            }),
            end_port: p.end_port.map(|e| i32::try_from(e).unwrap_or(i32::MAX)),
        })
        .collect();
    (peers, ports)
}

/// The admin API's message as a Kubernetes object (for `-o json|yaml`, and to check an API
/// request with the same rules as `apply -f`).
pub fn proto_to_k8s(p: &pa::NetworkPolicy) -> k8s::NetworkPolicy {
    k8s::NetworkPolicy {
        metadata: meta::ObjectMeta {
            namespace: Some(p.namespace.clone()),
            name: Some(p.name.clone()),
            ..Default::default()
        },
        spec: Some(k8s::NetworkPolicySpec {
            pod_selector: Some(
                p.pod_selector
                    .as_ref()
                    .map(k8s_selector_of)
                    .unwrap_or_default(),
            ),
            policy_types: some(p.policy_types.clone()),
            ingress: some(
                p.ingress
                    .iter()
                    .map(|r| {
                        let (from, ports) = k8s_rule_parts(r);
                        k8s::NetworkPolicyIngressRule {
                            from: some(from),
                            ports: some(ports),
                        }
                    })
                    .collect(),
            ),
            egress: some(
                p.egress
                    .iter()
                    .map(|r| {
                        let (to, ports) = k8s_rule_parts(r);
                        k8s::NetworkPolicyEgressRule {
                            to: some(to),
                            ports: some(ports),
                        }
                    })
                    .collect(),
            ),
        }),
    }
}

/// An admin API request's policy in the model's form, checked like `apply -f` checks it.
/// A message cannot tell an absent list from an empty one, which the API server treats
/// alike: empty `policy_types` default (Egress only with egress rules), an empty `protocol` is
/// TCP, empty peers or ports allow all.
pub fn from_proto(p: &pa::NetworkPolicy) -> Result<NetworkPolicy, FieldError> {
    // Numbers past what the Kubernetes object can hold are refused here, with their value.
    for (dir, rules) in [("ingress", &p.ingress), ("egress", &p.egress)] {
        for (i, r) in rules.iter().enumerate() {
            for (j, port) in r.ports.iter().enumerate() {
                let field = format!("spec.{dir}[{i}].ports[{j}]");
                if let Some(pa::network_policy_port::Port::Number(n)) = port.port {
                    if n > u32::from(u16::MAX) {
                        port_number(i64::from(n), &format!("{field}.port"))?;
                    }
                }
                if let Some(e) = port.end_port.filter(|e| *e > u32::from(u16::MAX)) {
                    port_number(i64::from(e), &format!("{field}.endPort"))?;
                }
            }
        }
    }
    from_k8s(&p.namespace, &p.name, &proto_to_k8s(p))
}

/// A pod's named container port from the API's message.
pub fn container_port(p: &pa::ContainerPort, field: &str) -> Result<ContainerPort, FieldError> {
    Ok(ContainerPort {
        name: p.name.clone(),
        protocol: protocol(Some(&p.protocol), &format!("{field}.protocol"))?,
        port: port_number(
            i64::from(p.container_port),
            &format!("{field}.containerPort"),
        )?,
    })
}

/// A pod's labels and named ports from an attach request (`(name, protocol, port)` per port),
/// checked; errors name the field (the API answers them as invalid arguments).
pub fn pod_meta(
    labels: impl IntoIterator<Item = (String, String)>,
    ports: &[(String, String, u32)],
) -> Result<topology::model::PodMeta, String> {
    let labels: Labels = labels.into_iter().collect();
    check_label_map(&labels, "labels").map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (i, (name, proto, port)) in ports.iter().enumerate() {
        let field = format!("ports[{i}]");
        let p = pa::ContainerPort {
            name: name.clone(),
            protocol: proto.clone(),
            container_port: *port,
        };
        out.push(container_port(&p, &field).map_err(|e| e.to_string())?);
    }
    Ok(topology::model::PodMeta { labels, ports: out })
}

/// A pod's named container port as the API's message.
pub fn proto_container_port(p: &ContainerPort) -> pa::ContainerPort {
    pa::ContainerPort {
        name: p.name.clone(),
        protocol: p.protocol.as_str().to_string(),
        container_port: u32::from(p.port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<NetworkPolicy, FieldError> {
        let np: k8s::NetworkPolicy = serde_yaml::from_str(yaml).expect("k8s shape");
        from_k8s("ns", "web", &np)
    }

    const HEAD: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web, namespace: ns}\n";

    #[test]
    fn defaults_and_round_trip() {
        let p = parse(&format!(
            "{HEAD}spec:\n  podSelector: {{matchLabels: {{app: web}}}}\n  ingress:\n  - from:\n    - namespaceSelector: {{matchExpressions: [{{key: team, operator: In, values: [a, b]}}]}}\n      podSelector: {{}}\n    - ipBlock: {{cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}\n    ports:\n    - port: 80\n    - {{port: http, protocol: UDP}}\n    - {{port: 1000, endPort: 2000}}\n"
        ))
        .expect("valid");
        assert!(p.ingress_isolation && !p.egress_isolation);
        assert_eq!(p.ingress[0].ports[0].protocol, Protocol::Tcp);
        assert_eq!(
            p.ingress[0].ports[1].port,
            Some(PortSpec::Name("http".into()))
        );
        assert_eq!(p.ingress[0].ports[2].end_port, Some(2000));
        let back = from_k8s("ns", "web", &to_k8s(&p)).expect("round trip");
        assert_eq!(back, p);
        let via_proto = from_proto(&to_proto(&p)).expect("proto round trip");
        assert_eq!(via_proto, p);
        let e = parse(&format!("{HEAD}spec:\n  egress: [{{}}]\n")).expect("egress");
        assert!(e.ingress_isolation && e.egress_isolation);
        let only_egress =
            parse(&format!("{HEAD}spec:\n  policyTypes: [Egress]\n")).expect("egress only");
        assert!(!only_egress.ingress_isolation && only_egress.egress_isolation);
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            ("spec:\n  ingress: [{from: [{podSelector: {}}, {ipBlock: {cidr: 10.0.0.0/8, except: ['fd00::/8']}}]}]\n",
             "spec.ingress[0].from[1].ipBlock.except[0]"),
            ("spec:\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]\n", "spec.ingress[0].from[0].ipBlock.cidr"),
            ("spec:\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [11.0.0.0/16]}}]}]\n",
             "spec.ingress[0].from[0].ipBlock.except[0]"),
            ("spec:\n  egress: [{ports: [{port: 0}]}]\n", "spec.egress[0].ports[0].port"),
            ("spec:\n  egress: [{ports: [{port: 90, endPort: 80}]}]\n", "spec.egress[0].ports[0].endPort"),
            ("spec:\n  egress: [{ports: [{port: http, endPort: 80}]}]\n", "spec.egress[0].ports[0].endPort"),
            ("spec:\n  egress: [{ports: [{port: 80, protocol: ICMP}]}]\n", "spec.egress[0].ports[0].protocol"),
            ("spec:\n  podSelector: {matchLabels: {'-bad': x}}\n", "spec.podSelector.matchLabels"),
            ("spec:\n  podSelector: {matchExpressions: [{key: a, operator: Has}]}\n",
             "spec.podSelector.matchExpressions[0].operator"),
            ("spec:\n  policyTypes: [Both]\n", "spec.policyTypes[0]"),
        ];
        for (spec, field) in cases {
            let e = parse(&format!("{HEAD}{spec}")).expect_err(spec);
            assert_eq!(e.field, field, "{spec}: {e}");
        }
    }

    /// `spec` parsed; the error's field and reason, or the policy.
    fn spec(spec: &str) -> Result<NetworkPolicy, FieldError> {
        parse(&format!("{HEAD}spec:\n{spec}"))
    }

    /// Each `(spec, field)` is refused naming `field`, with a reason containing `why`.
    fn refused(cases: &[(&str, &str, &str)]) {
        for (text, field, why) in cases {
            let e = spec(text).expect_err(text);
            assert_eq!(e.field, *field, "{text}: {e}");
            assert!(e.reason.contains(why), "{text}: {e} (want {why:?})");
        }
    }

    fn isolation(text: &str) -> (bool, bool) {
        let p = spec(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        (p.ingress_isolation, p.egress_isolation)
    }

    /// SetDefaults_NetworkPolicy (pkg/apis/networking/v1/defaults.go): with `policyTypes`
    /// absent or empty, Ingress, plus Egress when `len(spec.egress) != 0`. Issue 27: ingress
    /// rules and `egress: []` isolated egress in flowmesh, not on the API server.
    #[test]
    fn policy_types_default_as_the_api_server_does() {
        let rule = "  ingress: [{from: [{podSelector: {}}]}]\n";
        assert_eq!(isolation(&format!("{rule}  egress: []\n")), (true, false));
        assert_eq!(isolation(rule), (true, false));
        assert_eq!(isolation("  podSelector: {}\n"), (true, false));
        assert_eq!(
            isolation(&format!("{rule}  egress: [{{}}]\n")),
            (true, true)
        );
        assert_eq!(
            isolation("  policyTypes: []\n  egress: [{}]\n"),
            (true, true)
        );
        assert_eq!(
            isolation("  policyTypes: []\n  egress: []\n"),
            (true, false)
        );
        // Given types are taken as they are, whatever the rules.
        assert_eq!(isolation("  policyTypes: [Egress]\n"), (false, true));
        assert_eq!(
            isolation("  policyTypes: [Egress]\n  ingress: [{}]\n"),
            (false, true)
        );
        assert_eq!(
            isolation("  policyTypes: [Ingress]\n  egress: [{}]\n"),
            (true, false)
        );
        assert_eq!(
            isolation("  policyTypes: [Ingress, Egress]\n"),
            (true, true)
        );
    }

    /// ValidateNetworkPolicySpec: more than two policyTypes is invalid, each must be Ingress
    /// or Egress (case matters). Two equal entries pass the API server's validation (it
    /// checks the count and each value, not repeats), so they pass here.
    #[test]
    fn policy_types_validate_as_the_api_server_does() {
        assert_eq!(
            isolation("  policyTypes: [Ingress, Ingress]\n"),
            (true, false)
        );
        refused(&[
            (
                "  policyTypes: [Ingress, Egress, Ingress]\n",
                "spec.policyTypes",
                "more than two",
            ),
            (
                "  policyTypes: [ingress]\n",
                "spec.policyTypes[0]",
                "\"ingress\"",
            ),
            (
                "  policyTypes: [Egress, Both]\n",
                "spec.policyTypes[1]",
                "Ingress",
            ),
            (
                "  policyTypes: ['']\n",
                "spec.policyTypes[0]",
                "unsupported",
            ),
        ]);
    }

    /// SetDefaults_NetworkPolicyPort: an absent protocol is TCP. ValidateNetworkPolicyPort:
    /// TCP, UDP and SCTP only, exactly so spelled; an empty string is not absent.
    #[test]
    fn protocol_defaults_to_tcp_and_is_one_of_three() {
        for (text, want) in [
            ("  ingress: [{ports: [{port: 80}]}]\n", Protocol::Tcp),
            (
                "  ingress: [{ports: [{port: 80, protocol: TCP}]}]\n",
                Protocol::Tcp,
            ),
            (
                "  ingress: [{ports: [{port: 53, protocol: UDP}]}]\n",
                Protocol::Udp,
            ),
            ("  ingress: [{ports: [{protocol: SCTP}]}]\n", Protocol::Sctp),
        ] {
            let p = spec(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(p.ingress[0].ports[0].protocol, want, "{text}");
        }
        refused(&[
            (
                "  ingress: [{ports: [{port: 80, protocol: ''}]}]\n",
                "spec.ingress[0].ports[0].protocol",
                "unsupported value \"\"",
            ),
            (
                "  ingress: [{ports: [{port: 80, protocol: tcp}]}]\n",
                "spec.ingress[0].ports[0].protocol",
                "\"tcp\"",
            ),
            (
                "  egress: [{ports: [{protocol: ICMP}]}]\n",
                "spec.egress[0].ports[0].protocol",
                "TCP",
            ),
        ]);
    }

    /// ValidateNetworkPolicyPort: a numeric port is IsValidPortNum (1-65535), a string one
    /// IsValidPortName (IANA_SVC_NAME: at most 15 of a-z, 0-9 and '-', a letter, no '-' at an
    /// end or twice in a row); endPort only with a numeric port, itself 1-65535 and >= port.
    #[test]
    fn ports_validate_as_the_api_server_does() {
        let port = |text: &str| {
            spec(text).unwrap_or_else(|e| panic!("{text}: {e}")).ingress[0].ports[0].clone()
        };
        assert_eq!(
            port("  ingress: [{ports: [{port: 65535}]}]\n").port,
            Some(PortSpec::Number(65535))
        );
        assert_eq!(
            port("  ingress: [{ports: [{port: 1}]}]\n").port,
            Some(PortSpec::Number(1))
        );
        assert_eq!(
            port("  ingress: [{ports: [{port: http}]}]\n").port,
            Some(PortSpec::Name("http".into()))
        );
        assert_eq!(
            port("  ingress: [{ports: [{port: 8-http}]}]\n").port,
            Some(PortSpec::Name("8-http".into()))
        );
        assert_eq!(
            port("  ingress: [{ports: [{port: abcdefghijklmno}]}]\n").port,
            Some(PortSpec::Name("abcdefghijklmno".into()))
        );
        let same = port("  ingress: [{ports: [{port: 80, endPort: 80}]}]\n");
        assert_eq!(
            (same.port, same.end_port),
            (Some(PortSpec::Number(80)), Some(80))
        );
        let range = port("  ingress: [{ports: [{port: 1, endPort: 65535}]}]\n");
        assert_eq!(range.range(), Some((1, 65535)));
        let f = "spec.ingress[0].ports[0].port";
        let e = "spec.ingress[0].ports[0].endPort";
        refused(&[
            (
                "  ingress: [{ports: [{port: 0}]}]\n",
                f,
                "between 1 and 65535",
            ),
            ("  ingress: [{ports: [{port: 65536}]}]\n", f, "65536"),
            ("  ingress: [{ports: [{port: -1}]}]\n", f, "-1"),
            (
                "  ingress: [{ports: [{port: '80'}]}]\n",
                f,
                "at least one letter",
            ),
            ("  ingress: [{ports: [{port: HTTP}]}]\n", f, "\"HTTP\""),
            (
                "  ingress: [{ports: [{port: abcdefghijklmnop}]}]\n",
                f,
                "1-15",
            ),
            ("  ingress: [{ports: [{port: my--port}]}]\n", f, "my--port"),
            ("  ingress: [{ports: [{port: -http}]}]\n", f, "-http"),
            ("  ingress: [{ports: [{port: http-}]}]\n", f, "http-"),
            ("  ingress: [{ports: [{port: ''}]}]\n", f, "\"\""),
            (
                "  ingress: [{ports: [{endPort: 90}]}]\n",
                e,
                "when `port` is not specified",
            ),
            (
                "  ingress: [{ports: [{port: http, endPort: 90}]}]\n",
                e,
                "non-numeric",
            ),
            (
                "  ingress: [{ports: [{port: 90, endPort: 80}]}]\n",
                e,
                "greater than or equal to `port` (90)",
            ),
            (
                "  ingress: [{ports: [{port: 90, endPort: 65536}]}]\n",
                e,
                "between 1 and 65535",
            ),
        ]);
    }

    /// Empty and absent lists mean the same, as on the API server: an empty podSelector
    /// selects every pod of the namespace, `from`/`to` absent or `[]` every peer, `ports`
    /// absent or `[]` every port; `ingress: [{}]` one rule that allows everything.
    #[test]
    fn empty_and_absent_lists_mean_the_same() {
        let absent = spec("  ingress: [{}]\n  egress: [{}]\n").expect("absent");
        let empty = spec("  podSelector: {}\n  ingress: [{from: [], ports: []}]\n  egress: [{to: [], ports: []}]\n")
            .expect("empty");
        assert_eq!(absent, empty);
        assert_eq!(absent.pod_selector, LabelSelector::everything());
        assert_eq!(absent.ingress, vec![PolicyRule::default()]);
        assert_eq!(absent.egress, vec![PolicyRule::default()]);
        let no_rules = spec("  ingress: []\n").expect("no rules");
        assert!(no_rules.ingress.is_empty() && no_rules.ingress_isolation);
        // An empty selector inside a peer is kept: it selects all (of the namespace or cluster).
        let p = spec("  ingress: [{from: [{namespaceSelector: {}}]}]\n").expect("peer");
        assert_eq!(
            p.ingress[0].peers,
            vec![Peer::Pods {
                namespace_selector: Some(LabelSelector::everything()),
                pod_selector: None
            }]
        );
    }

    /// ValidateNetworkPolicyPeer: a peer names at least one of podSelector, namespaceSelector
    /// and ipBlock; ipBlock stands alone.
    #[test]
    fn peers_validate_as_the_api_server_does() {
        let both = spec("  ingress: [{from: [{podSelector: {}, namespaceSelector: {}}]}]\n")
            .expect("both selectors");
        assert_eq!(both.ingress[0].peers.len(), 1);
        refused(&[
            (
                "  ingress: [{from: [{}]}]\n",
                "spec.ingress[0].from[0]",
                "must specify a peer",
            ),
            (
                "  egress: [{to: [{podSelector: {}}, {}]}]\n",
                "spec.egress[0].to[1]",
                "must specify a peer",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}]\n",
                "spec.ingress[0].from[0]",
                "both ipBlock and another peer",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, namespaceSelector: {}}]}]\n",
                "spec.ingress[0].from[0]",
                "both ipBlock and another peer",
            ),
        ]);
    }

    /// ValidateIPBlock: cidr required and a valid CIDR (strict validation: subnet form, no
    /// leading zeros); each except a valid CIDR and a strict subset of cidr.
    #[test]
    fn ip_blocks_validate_as_the_api_server_does() {
        let p = spec("  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16, 10.2.3.4/32]}}]}]\n")
            .expect("valid");
        assert!(
            matches!(&p.ingress[0].peers[0], Peer::IpBlock { except, .. } if except.len() == 2)
        );
        spec("  ingress: [{from: [{ipBlock: {cidr: 0.0.0.0/0, except: [0.0.0.0/1]}}]}]\n")
            .expect("everything but half");
        let c = "spec.ingress[0].from[0].ipBlock.cidr";
        let x = "spec.ingress[0].from[0].ipBlock.except[0]";
        refused(&[
            (
                "  ingress: [{from: [{ipBlock: {cidr: ''}}]}]\n",
                c,
                "required",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.1/8}}]}]\n",
                c,
                "10.0.0.1/8",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/08}}]}]\n",
                c,
                "leading zeros",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: ' 10.0.0.0/8'}}]}]\n",
                c,
                "\" 10.0.0.0/8\"",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0}}]}]\n",
                c,
                "10.0.0.0",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]\n",
                c,
                "10.0.0.0/33",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.0.0.0/8]}}]}]\n",
                x,
                "strictly inside",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [11.0.0.0/16]}}]}]\n",
                x,
                "strictly inside",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.0.0.0/4]}}]}]\n",
                x,
                "10.0.0.0/4",
            ),
            (
                "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.1/16]}}]}]\n",
                x,
                "10.1.0.1/16",
            ),
        ]);
    }

    /// ValidateLabelSelector: In and NotIn need values, Exists and DoesNotExist take none,
    /// no other operator; keys are qualified names, values label values (in matchLabels and
    /// in matchExpressions).
    #[test]
    fn label_selectors_validate_as_the_api_server_does() {
        let p = spec("  podSelector:\n    matchLabels: {example.com/app: web, tier: ''}\n    matchExpressions:\n    - {key: env, operator: NotIn, values: [prod]}\n    - {key: legacy, operator: DoesNotExist}\n    - {key: team, operator: Exists, values: []}\n")
            .expect("valid");
        assert_eq!(p.pod_selector.match_expressions.len(), 3);
        let m = "spec.podSelector.matchExpressions[0]";
        refused(&[
            ("  podSelector: {matchExpressions: [{key: a, operator: In}]}\n", &format!("{m}.values"), "at least one value"),
            ("  podSelector: {matchExpressions: [{key: a, operator: NotIn, values: []}]}\n", &format!("{m}.values"), "at least one value"),
            ("  podSelector: {matchExpressions: [{key: a, operator: Exists, values: [x]}]}\n", &format!("{m}.values"), "takes no values"),
            ("  podSelector: {matchExpressions: [{key: a, operator: DoesNotExist, values: [x]}]}\n", &format!("{m}.values"), "takes no values"),
            ("  podSelector: {matchExpressions: [{key: a, operator: in, values: [x]}]}\n", &format!("{m}.operator"), "\"in\""),
            ("  podSelector: {matchExpressions: [{key: 'a b', operator: Exists}]}\n", &format!("{m}.key"), "a b"),
            ("  podSelector: {matchExpressions: [{key: a, operator: In, values: ['x y']}]}\n", &format!("{m}.values"), "x y"),
            ("  podSelector: {matchLabels: {'Example.com/app': web}}\n", "spec.podSelector.matchLabels", "Example.com"),
            ("  podSelector: {matchLabels: {app: '-web'}}\n", "spec.podSelector.matchLabels[\"app\"]", "-web"),
            ("  ingress: [{from: [{namespaceSelector: {matchLabels: {app: 'a/b'}}}]}]\n",
             "spec.ingress[0].from[0].namespaceSelector.matchLabels[\"app\"]", "a/b"),
        ]);
        let long = "v".repeat(64);
        refused(&[(
            &format!("  podSelector: {{matchLabels: {{app: {long}}}}}\n"),
            "spec.podSelector.matchLabels[\"app\"]",
            &long,
        )]);
    }

    /// The admin API's message gets the same defaulting and validation; numbers too large for
    /// the Kubernetes object are refused with their own value.
    #[test]
    fn admin_api_messages_are_checked_alike() {
        let rule = |ports: Vec<pa::NetworkPolicyPort>| pa::NetworkPolicyRule {
            peers: Vec::new(),
            ports,
        };
        let mut m = pa::NetworkPolicy {
            namespace: "ns".into(),
            name: "web".into(),
            ingress: vec![rule(Vec::new())],
            ..Default::default()
        };
        let p = from_proto(&m).expect("valid");
        assert!(p.ingress_isolation && !p.egress_isolation);
        m.egress = vec![rule(Vec::new())];
        assert!(from_proto(&m).expect("valid").egress_isolation);
        m.ingress = vec![rule(vec![pa::NetworkPolicyPort {
            protocol: String::new(),
            port: Some(pa::network_policy_port::Port::Number(u32::MAX)),
            end_port: None,
        }])];
        let e = from_proto(&m).expect_err("port too large");
        assert_eq!(e.field, "spec.ingress[0].ports[0].port");
        assert!(e.reason.starts_with("4294967295:"), "{e}");
        m.ingress = vec![rule(vec![pa::NetworkPolicyPort {
            protocol: String::new(),
            port: Some(pa::network_policy_port::Port::Number(80)),
            end_port: Some(3_000_000_000),
        }])];
        let e = from_proto(&m).expect_err("endPort too large");
        assert_eq!(e.field, "spec.ingress[0].ports[0].endPort");
        assert!(e.reason.starts_with("3000000000:"), "{e}");
        m.ingress = vec![rule(vec![pa::NetworkPolicyPort {
            protocol: String::new(),
            port: Some(pa::network_policy_port::Port::Number(80)),
            end_port: None,
        }])];
        assert_eq!(
            from_proto(&m).expect("valid").ingress[0].ports[0].protocol,
            Protocol::Tcp
        );
    }
}
