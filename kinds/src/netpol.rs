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
    let (ingress_isolation, egress_isolation) = match spec.policy_types.as_deref() {
        None | Some([]) => (true, spec.egress.is_some()),
        Some(types) => {
            let (mut i, mut e) = (false, false);
            for (n, t) in types.iter().enumerate() {
                match t.as_str() {
                    "Ingress" => i = true,
                    "Egress" => e = true,
                    other => {
                        return Err(FieldError::new(
                            format!("spec.policyTypes[{n}]"),
                            format!("{other:?} is neither Ingress nor Egress"),
                        ))
                    }
                }
            }
            (i, e)
        }
    };
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
    if let Some(b) = &p.ip_block {
        if p.pod_selector.is_some() || p.namespace_selector.is_some() {
            return Err(FieldError::new(
                field,
                "ipBlock may not be combined with podSelector or namespaceSelector in one peer",
            ));
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

fn cidr(text: &str, field: &str) -> Result<Ipv4Cidr, FieldError> {
    text.trim()
        .parse::<Ipv4Cidr>()
        .map_err(|e| FieldError::new(field, e.to_string()))
}

fn port(p: &k8s::NetworkPolicyPort, field: &str) -> Result<PolicyPort, FieldError> {
    let protocol = protocol(p.protocol.as_deref(), &format!("{field}.protocol"))?;
    let port = match &p.port {
        None => None,
        Some(IntOrString::Int(n)) => Some(PortSpec::Number(port_number(
            i64::from(*n),
            &format!("{field}.port"),
        )?)),
        Some(IntOrString::String(s)) => Some(PortSpec::Name(s.clone())),
    };
    let end_port = p
        .end_port
        .map(|e| port_number(i64::from(e), &format!("{field}.endPort")))
        .transpose()?;
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
            format!("{n} is not a valid port (1-65535)"),
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
/// Note: a message cannot tell "no egress rules" from "egress: []", so with `policy_types`
/// empty, Egress isolation follows from having egress rules.
pub fn from_proto(p: &pa::NetworkPolicy) -> Result<NetworkPolicy, FieldError> {
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
}
