//! The soak's truth table: which pod may reach which, computed from the objects the soak itself
//! wrote, by its own reading of the rules — Kubernetes NetworkPolicy ingress semantics in
//! `networkpolicy` mode, OpenShift's NETIDs in `multitenant` mode. None of flowmesh's code is
//! used here, so a bug there cannot hide itself (the same stance as `topology/tests/netpol.rs`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Labels of a pod or namespace (also a `matchLabels` selector: every pair must be present).
pub type Labels = BTreeMap<String, String>;

/// `namespace/name` of a pod.
pub type PodKey = (String, String);

/// The cluster mode the soak runs the controller in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// NetworkPolicy enforced; every namespace reaches every other one unless a policy says no.
    NetworkPolicy,
    /// NETID isolation; policies are kept but not enforced.
    Multitenant,
}

impl Mode {
    /// The `mode:` value of the cluster config.
    pub fn config_name(self) -> &'static str {
        match self {
            Mode::NetworkPolicy => "networkpolicy",
            Mode::Multitenant => "multitenant",
        }
    }
}

/// Transport of a probe or a policy port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    /// As Kubernetes spells it.
    pub fn k8s(self) -> &'static str {
        match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        }
    }
}

/// A pod as the soak created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodObj {
    /// Node number (1-based).
    pub node: usize,
    /// Its address (from the CNI result).
    pub ip: Ipv4Addr,
    /// Its labels.
    pub labels: Labels,
}

/// One `from` entry of an ingress rule; `None` selectors are absent.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Peer {
    /// `podSelector.matchLabels`.
    pub pods: Option<Labels>,
    /// `namespaceSelector.matchLabels`.
    pub namespaces: Option<Labels>,
}

/// An ingress rule: from any of `from` (empty: from anywhere) to any of `ports` (empty: all).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IngressRule {
    /// Peers.
    pub from: Vec<Peer>,
    /// (protocol, port) pairs.
    pub ports: Vec<(Proto, u16)>,
}

/// An ingress NetworkPolicy (`policyTypes: [Ingress]`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Policy {
    /// `podSelector.matchLabels` (empty: every pod of the namespace).
    pub selector: Labels,
    /// Rules (none: the selected pods take no ingress at all).
    pub ingress: Vec<IngressRule>,
}

/// The objects at one moment, as the soak wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// Mode.
    pub mode: Mode,
    /// Pods.
    pub pods: BTreeMap<PodKey, PodObj>,
    /// Namespaces and their labels.
    pub namespaces: BTreeMap<String, Labels>,
    /// Multitenant: the isolation group of each namespace (equal groups share a NETID; 0 is
    /// global). Namespaces missing here have a group of their own.
    pub groups: BTreeMap<String, u32>,
    /// NetworkPolicies by (namespace, name).
    pub policies: BTreeMap<(String, String), Policy>,
}

/// Whether `labels` satisfy `sel` (every pair of the selector present with the same value).
pub fn selects(sel: &Labels, labels: &Labels) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Model {
    /// An empty model.
    pub fn new(mode: Mode) -> Self {
        Model {
            mode,
            pods: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            groups: BTreeMap::new(),
            policies: BTreeMap::new(),
        }
    }

    /// May `src` open a connection to `dst` on `proto`/`port`? None when either pod does not
    /// exist in this model.
    pub fn allowed(&self, src: &PodKey, dst: &PodKey, proto: Proto, port: u16) -> Option<bool> {
        let s = self.pods.get(src)?;
        let d = self.pods.get(dst)?;
        Some(match self.mode {
            Mode::Multitenant => {
                let (gs, gd) = (self.group(&src.0), self.group(&dst.0));
                gs == gd || gs == 0 || gd == 0
            }
            Mode::NetworkPolicy => self.policy_allows(src, s, dst, d, proto, port),
        })
    }

    /// The isolation group of a namespace (its own when unset: a value no group uses).
    fn group(&self, ns: &str) -> u64 {
        match self.groups.get(ns) {
            Some(g) => u64::from(*g),
            // Distinct per namespace and never equal to a set group (those are < 2^32).
            None => {
                let mut h: u64 = 1 << 40;
                for b in ns.bytes() {
                    h = h.wrapping_mul(31).wrapping_add(u64::from(b)) | (1 << 40);
                }
                h
            }
        }
    }

    fn policy_allows(
        &self,
        src: &PodKey,
        s: &PodObj,
        dst: &PodKey,
        d: &PodObj,
        proto: Proto,
        port: u16,
    ) -> bool {
        let selecting: Vec<(&String, &Policy)> = self
            .policies
            .iter()
            .filter(|((ns, _), p)| *ns == dst.0 && selects(&p.selector, &d.labels))
            .map(|((ns, _), p)| (ns, p))
            .collect();
        if selecting.is_empty() {
            return true;
        }
        let empty = Labels::new();
        let src_ns_labels = self.namespaces.get(&src.0).unwrap_or(&empty);
        selecting.iter().any(|(pns, p)| {
            p.ingress.iter().any(|r| {
                let port_ok =
                    r.ports.is_empty() || r.ports.iter().any(|&(pp, n)| pp == proto && n == port);
                let from_ok = r.from.is_empty()
                    || r.from
                        .iter()
                        .any(|peer| match (&peer.pods, &peer.namespaces) {
                            (None, None) => false,
                            (Some(ps), None) => src.0 == **pns && selects(ps, &s.labels),
                            (None, Some(ns)) => selects(ns, src_ns_labels),
                            (Some(ps), Some(ns)) => {
                                selects(ns, src_ns_labels) && selects(ps, &s.labels)
                            }
                        });
                port_ok && from_ok
            })
        })
    }
}

fn labels_yaml(l: &Labels, indent: usize) -> String {
    if l.is_empty() {
        return " {}\n".into();
    }
    let pad = " ".repeat(indent);
    let mut y = String::from("\n");
    for (k, v) in l {
        y.push_str(&format!("{pad}{k}: \"{v}\"\n"));
    }
    y
}

impl Policy {
    /// The policy as a `networking.k8s.io/v1` document.
    pub fn to_yaml(&self, ns: &str, name: &str) -> String {
        let mut y = format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  namespace: {ns}\n  name: {name}\nspec:\n  policyTypes: [Ingress]\n  podSelector:\n    matchLabels:{}",
            labels_yaml(&self.selector, 6)
        );
        if self.ingress.is_empty() {
            y.push_str("  ingress: []\n");
            return y;
        }
        y.push_str("  ingress:\n");
        for r in &self.ingress {
            y.push_str("  - from:");
            if r.from.is_empty() {
                y.push_str(" []\n");
            } else {
                y.push('\n');
                for p in &r.from {
                    let mut first = true;
                    for (key, sel) in [
                        ("podSelector", &p.pods),
                        ("namespaceSelector", &p.namespaces),
                    ] {
                        let Some(sel) = sel else { continue };
                        let lead = if first { "    - " } else { "      " };
                        first = false;
                        y.push_str(&format!(
                            "{lead}{key}:\n        matchLabels:{}",
                            labels_yaml(sel, 10)
                        ));
                    }
                }
            }
            y.push_str("    ports:");
            if r.ports.is_empty() {
                y.push_str(" []\n");
            } else {
                y.push('\n');
                for (proto, port) in &r.ports {
                    y.push_str(&format!(
                        "    - protocol: {}\n      port: {port}\n",
                        proto.k8s()
                    ));
                }
            }
        }
        y
    }

    /// Reads the policy back from the `spec` of a Kubernetes NetworkPolicy as JSON (what
    /// `flowmeshctl get networkpolicies -o json` prints); None when it is not of the shape
    /// the soak writes.
    pub fn from_k8s_spec(spec: &serde_json::Value) -> Option<Policy> {
        fn labels(v: &serde_json::Value) -> Option<Labels> {
            if v.is_null() {
                return Some(Labels::new());
            }
            let m = &v["matchLabels"];
            if m.is_null() {
                return Some(Labels::new());
            }
            m.as_object()?
                .iter()
                .map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        }
        let selector = labels(&spec["podSelector"])?;
        let mut ingress = Vec::new();
        for r in spec["ingress"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let mut from = Vec::new();
            for p in r["from"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let get = |k: &str| -> Option<Option<Labels>> {
                    if p[k].is_null() {
                        Some(None)
                    } else {
                        labels(&p[k]).map(Some)
                    }
                };
                from.push(Peer {
                    pods: get("podSelector")?,
                    namespaces: get("namespaceSelector")?,
                });
            }
            let mut ports = Vec::new();
            for p in r["ports"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let proto = match p["protocol"].as_str().unwrap_or("TCP") {
                    "TCP" => Proto::Tcp,
                    "UDP" => Proto::Udp,
                    _ => return None,
                };
                let port = u16::try_from(p["port"].as_u64()?).ok()?;
                ports.push((proto, port));
            }
            ingress.push(IngressRule { from, ports });
        }
        Some(Policy { selector, ingress })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn key(ns: &str, n: &str) -> PodKey {
        (ns.into(), n.into())
    }

    fn model(mode: Mode) -> Model {
        let mut m = Model::new(mode);
        m.namespaces.insert("a".into(), l(&[("team", "x")]));
        m.namespaces.insert("b".into(), l(&[("team", "y")]));
        for (i, (ns, n, app)) in [("a", "web", "web"), ("a", "db", "db"), ("b", "cli", "cli")]
            .into_iter()
            .enumerate()
        {
            m.pods.insert(
                key(ns, n),
                PodObj {
                    node: i + 1,
                    ip: Ipv4Addr::new(10, 128, 0, 2 + i as u8),
                    labels: l(&[("app", app)]),
                },
            );
        }
        m
    }

    #[test]
    fn no_policy_allows_everything_and_a_deny_all_isolates_only_the_selected() {
        let mut m = model(Mode::NetworkPolicy);
        assert_eq!(
            m.allowed(&key("b", "cli"), &key("a", "web"), Proto::Tcp, 8080),
            Some(true)
        );
        m.policies.insert(
            ("a".into(), "deny".into()),
            Policy {
                selector: l(&[("app", "web")]),
                ingress: vec![],
            },
        );
        assert_eq!(
            m.allowed(&key("b", "cli"), &key("a", "web"), Proto::Tcp, 8080),
            Some(false)
        );
        assert_eq!(
            m.allowed(&key("a", "db"), &key("a", "web"), Proto::Tcp, 8080),
            Some(false)
        );
        assert_eq!(
            m.allowed(&key("b", "cli"), &key("a", "db"), Proto::Tcp, 8080),
            Some(true)
        );
        assert_eq!(
            m.allowed(&key("b", "gone"), &key("a", "db"), Proto::Tcp, 8080),
            None
        );
    }

    #[test]
    fn peers_ports_and_their_union() {
        let mut m = model(Mode::NetworkPolicy);
        m.policies.insert(
            ("a".into(), "p".into()),
            Policy {
                selector: Labels::new(),
                ingress: vec![IngressRule {
                    from: vec![Peer {
                        pods: None,
                        namespaces: Some(l(&[("team", "y")])),
                    }],
                    ports: vec![(Proto::Udp, 8081)],
                }],
            },
        );
        let (cli, web, db) = (key("b", "cli"), key("a", "web"), key("a", "db"));
        assert_eq!(m.allowed(&cli, &web, Proto::Udp, 8081), Some(true));
        assert_eq!(m.allowed(&cli, &web, Proto::Tcp, 8080), Some(false));
        assert_eq!(m.allowed(&db, &web, Proto::Udp, 8081), Some(false));
        // A pod selector alone means the policy's own namespace.
        m.policies.insert(
            ("a".into(), "q".into()),
            Policy {
                selector: l(&[("app", "web")]),
                ingress: vec![IngressRule {
                    from: vec![Peer {
                        pods: Some(l(&[("app", "db")])),
                        namespaces: None,
                    }],
                    ports: vec![],
                }],
            },
        );
        assert_eq!(m.allowed(&db, &web, Proto::Tcp, 8080), Some(true));
        assert_eq!(m.allowed(&cli, &web, Proto::Tcp, 8080), Some(false));
        // Both selectors: pods so labelled in namespaces so labelled.
        m.policies.insert(
            ("a".into(), "q".into()),
            Policy {
                selector: l(&[("app", "web")]),
                ingress: vec![IngressRule {
                    from: vec![Peer {
                        pods: Some(l(&[("app", "cli")])),
                        namespaces: Some(l(&[("team", "y")])),
                    }],
                    ports: vec![(Proto::Tcp, 8080)],
                }],
            },
        );
        assert_eq!(m.allowed(&cli, &web, Proto::Tcp, 8080), Some(true));
        assert_eq!(m.allowed(&db, &web, Proto::Tcp, 8080), Some(false));
    }

    #[test]
    fn multitenant_groups() {
        let mut m = model(Mode::Multitenant);
        let (cli, web, db) = (key("b", "cli"), key("a", "web"), key("a", "db"));
        assert_eq!(m.allowed(&db, &web, Proto::Tcp, 1), Some(true));
        assert_eq!(m.allowed(&cli, &web, Proto::Tcp, 1), Some(false));
        m.groups.insert("a".into(), 7);
        m.groups.insert("b".into(), 7);
        assert_eq!(m.allowed(&cli, &web, Proto::Tcp, 1), Some(true));
        m.groups.insert("b".into(), 8);
        assert_eq!(m.allowed(&cli, &web, Proto::Tcp, 1), Some(false));
        m.groups.insert("b".into(), 0);
        assert_eq!(m.allowed(&web, &cli, Proto::Tcp, 1), Some(true));
    }

    #[test]
    fn yaml_reads_back_as_the_same_policy() {
        let p = Policy {
            selector: l(&[("app", "web")]),
            ingress: vec![
                IngressRule {
                    from: vec![
                        Peer {
                            pods: Some(l(&[("app", "db")])),
                            namespaces: Some(l(&[("team", "y")])),
                        },
                        Peer {
                            pods: None,
                            namespaces: Some(Labels::new()),
                        },
                    ],
                    ports: vec![(Proto::Tcp, 8080), (Proto::Udp, 8081)],
                },
                IngressRule {
                    from: vec![],
                    ports: vec![],
                },
            ],
        };
        let y = p.to_yaml("a", "p");
        let v: serde_json::Value = serde_yaml::from_str(&y).expect("yaml");
        assert_eq!(Policy::from_k8s_spec(&v["spec"]), Some(p), "{y}");
        let none = Policy {
            selector: Labels::new(),
            ingress: vec![],
        };
        let v: serde_json::Value = serde_yaml::from_str(&none.to_yaml("a", "n")).expect("yaml");
        assert_eq!(Policy::from_k8s_spec(&v["spec"]), Some(none));
    }
}
