//! Kubernetes `networking.k8s.io/v1` NetworkPolicy as the model holds it, its validation
//! (errors name the field), and the model's policy and label operations.

use super::labels::{check_labels, LabelError, LabelSelector, Labels};
use super::*;

/// A transport protocol a policy port or a container port names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP (the default).
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
    /// SCTP.
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// The IP protocol number.
    pub fn ip_proto(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
    /// Parse the Kubernetes spelling (`TCP`, `UDP`, `SCTP`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            _ => return None,
        })
    }
}

/// A pod's named container port (`spec.containers[].ports[]` with a `name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContainerPort {
    /// The port's name (IANA service name syntax).
    pub name: String,
    /// Its protocol.
    pub protocol: Protocol,
    /// The container port number.
    pub port: u16,
}

/// What a pod carries besides its place on the network: labels and named ports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMeta {
    /// `metadata.labels`.
    pub labels: Labels,
    /// Named container ports.
    pub ports: Vec<ContainerPort>,
}

/// The port of a policy port entry: a number or a container port name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PortSpec {
    /// A port number (with `end_port`, the first of a range).
    Number(u16),
    /// A named container port of the destination pod.
    Name(String),
}

/// One entry of a rule's `ports`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PolicyPort {
    /// Protocol (TCP when omitted).
    pub protocol: Protocol,
    /// The port; `None`: every port of the protocol.
    pub port: Option<PortSpec>,
    /// Last port of a range starting at a numeric `port`.
    pub end_port: Option<u16>,
}

/// One peer of a rule (`from` / `to` entry).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Peer {
    /// Pods: `podSelector` (in the policy's namespace), `namespaceSelector` (every pod of the
    /// selected namespaces), or both (the selected pods of the selected namespaces).
    Pods {
        /// `namespaceSelector`.
        namespace_selector: Option<LabelSelector>,
        /// `podSelector`.
        pod_selector: Option<LabelSelector>,
    },
    /// `ipBlock`: a CIDR minus its exceptions.
    IpBlock {
        /// `cidr`.
        cidr: Ipv4Cidr,
        /// `except`.
        except: Vec<Ipv4Cidr>,
    },
}

/// One ingress or egress rule: empty peers means every peer, empty ports every port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PolicyRule {
    /// `from` (ingress) or `to` (egress).
    pub peers: Vec<Peer>,
    /// `ports`.
    pub ports: Vec<PolicyPort>,
}

/// A NetworkPolicy. `ingress_isolation` / `egress_isolation` are its resolved `policyTypes`
/// (when omitted: Ingress always, Egress when it has egress rules).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NetworkPolicy {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.podSelector`: the pods of the namespace it applies to.
    pub pod_selector: LabelSelector,
    /// `policyTypes` contains Ingress.
    pub ingress_isolation: bool,
    /// `policyTypes` contains Egress.
    pub egress_isolation: bool,
    /// `spec.ingress`.
    #[serde(default)]
    pub ingress: Vec<PolicyRule>,
    /// `spec.egress`.
    #[serde(default)]
    pub egress: Vec<PolicyRule>,
}

/// A policy's identity.
pub type PolicyKey = (String, String);

/// Why a policy or a label change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A field is invalid; the message names it.
    #[error("networkpolicy {namespace}/{name}: {detail}")]
    Invalid {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The field and what is wrong with it.
        detail: String,
    },
    /// Labels are invalid.
    #[error(transparent)]
    Labels(#[from] LabelError),
}

/// `name` is an IANA service name: 1–15 lowercase letters, digits and `-`, at least one
/// letter, no leading, trailing or double `-`.
pub fn check_port_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.chars().any(|c| c.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid port name (1-15 lowercase letters, digits and '-', \
             at least one letter)"
        ))
    }
}

impl PolicyPort {
    fn validate(&self, field: &str) -> Result<(), String> {
        match (&self.port, self.end_port) {
            (Some(PortSpec::Number(0)), _) => Err(format!("{field}.port: 0 is not a valid port")),
            (Some(PortSpec::Number(p)), Some(e)) if e < *p => Err(format!(
                "{field}.endPort: {e} is below port {p} (endPort must be >= port)"
            )),
            (Some(PortSpec::Name(_)), Some(_)) | (None, Some(_)) => {
                Err(format!("{field}.endPort: only allowed with a numeric port"))
            }
            (Some(PortSpec::Name(n)), None) => {
                check_port_name(n).map_err(|e| format!("{field}.port: {e}"))
            }
            _ => Ok(()),
        }
    }

    /// The inclusive port range of a numeric entry; `None` for named ports; `(1, 65535)`
    /// for "every port".
    pub fn range(&self) -> Option<(u16, u16)> {
        match &self.port {
            None => Some((0, u16::MAX)),
            Some(PortSpec::Number(p)) => Some((*p, self.end_port.unwrap_or(*p))),
            Some(PortSpec::Name(_)) => None,
        }
    }
}

impl Peer {
    fn validate(&self, field: &str) -> Result<(), String> {
        match self {
            Peer::Pods {
                namespace_selector,
                pod_selector,
            } => {
                if namespace_selector.is_none() && pod_selector.is_none() {
                    return Err(format!(
                        "{field}: a peer needs podSelector, namespaceSelector or ipBlock"
                    ));
                }
                if let Some(s) = namespace_selector {
                    s.validate(&format!("{field}.namespaceSelector"))
                        .map_err(|e| e.0)?;
                }
                if let Some(s) = pod_selector {
                    s.validate(&format!("{field}.podSelector"))
                        .map_err(|e| e.0)?;
                }
                Ok(())
            }
            Peer::IpBlock { cidr, except } => {
                for (i, e) in except.iter().enumerate() {
                    let inside = cidr.contains(e.network()) && e.prefix() > cidr.prefix();
                    if !inside {
                        return Err(format!(
                            "{field}.ipBlock.except[{i}]: {e} is not strictly inside cidr {cidr}"
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

impl NetworkPolicy {
    /// Check every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let err = |detail: String| PolicyError::Invalid {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            detail,
        };
        if self.name.is_empty() {
            return Err(err("metadata.name: must not be empty".into()));
        }
        self.pod_selector
            .validate("spec.podSelector")
            .map_err(|e| err(e.0))?;
        for (dir, peers_word, rules) in [
            ("ingress", "from", &self.ingress),
            ("egress", "to", &self.egress),
        ] {
            for (i, r) in rules.iter().enumerate() {
                for (j, p) in r.peers.iter().enumerate() {
                    p.validate(&format!("spec.{dir}[{i}].{peers_word}[{j}]"))
                        .map_err(err)?;
                }
                for (j, p) in r.ports.iter().enumerate() {
                    p.validate(&format!("spec.{dir}[{i}].ports[{j}]"))
                        .map_err(err)?;
                }
            }
        }
        Ok(())
    }

    /// Its key.
    pub fn key(&self) -> PolicyKey {
        (self.namespace.clone(), self.name.clone())
    }
}

/// Check a pod's named ports: valid names, no name twice, no port 0.
pub fn check_container_ports(pod: &PodKey, ports: &[ContainerPort]) -> Result<(), LabelError> {
    let mut seen = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        check_port_name(&p.name)
            .map_err(|e| LabelError(format!("pod {pod}: ports[{i}].name: {e}")))?;
        if p.port == 0 {
            return Err(LabelError(format!(
                "pod {pod}: ports[{i}].containerPort: 0 is not a valid port"
            )));
        }
        if !seen.insert(&p.name) {
            return Err(LabelError(format!(
                "pod {pod}: ports[{i}].name: {:?} is used twice",
                p.name
            )));
        }
    }
    Ok(())
}

impl ClusterModel {
    /// Create or replace a NetworkPolicy (its namespace must exist). Affects the nodes whose
    /// pods it selected before or selects now.
    pub fn apply_policy(&mut self, p: NetworkPolicy) -> Result<Affected, ModelError> {
        p.validate()?;
        if !self.namespaces.contains_key(&p.namespace) {
            return Err(ModelError::UnknownNamespace(p.namespace.clone()));
        }
        let key = p.key();
        if self.policies.get(&key) == Some(&p) {
            return Ok(Affected::none());
        }
        let mut a = self.nodes_of_namespace(&p.namespace);
        if !self.is_policy_mode() {
            a = Affected::none();
        }
        self.policies.insert(key, p);
        self.policy_epoch += 1;
        Ok(a)
    }

    /// Delete a NetworkPolicy.
    pub fn delete_policy(&mut self, namespace: &str, name: &str) -> Result<Affected, ModelError> {
        let key = (namespace.to_string(), name.to_string());
        if self.policies.remove(&key).is_none() {
            return Err(ModelError::UnknownPolicy {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        self.policy_epoch += 1;
        if !self.is_policy_mode() {
            return Ok(Affected::none());
        }
        Ok(self.nodes_of_namespace(namespace))
    }

    /// A policy by namespace and name.
    pub fn policy(&self, namespace: &str, name: &str) -> Option<&NetworkPolicy> {
        self.policies
            .get(&(namespace.to_string(), name.to_string()))
    }

    /// Every policy, by namespace and name.
    pub fn policies(&self) -> impl Iterator<Item = &NetworkPolicy> {
        self.policies.values()
    }

    /// The policies of one namespace, by name.
    pub fn policies_in<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a NetworkPolicy> + 'a {
        self.policies
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|(_, p)| p)
    }

    /// Counter bumped whenever a policy, or a label a policy may look at, changes.
    pub fn policy_epoch(&self) -> u64 {
        self.policy_epoch
    }

    /// Whether the cluster runs in networkpolicy mode.
    pub fn is_policy_mode(&self) -> bool {
        self.config.mode == Mode::Networkpolicy
    }

    /// Replace a namespace's labels. Affects the nodes of every policy whose namespace
    /// selectors may see the change (all nodes with selected pods, conservatively).
    pub fn set_namespace_labels(
        &mut self,
        name: &str,
        labels: Labels,
    ) -> Result<Affected, ModelError> {
        check_labels(&format!("namespace {name}"), &labels).map_err(PolicyError::from)?;
        let Some(e) = self.namespaces.get_mut(name) else {
            return Err(ModelError::UnknownNamespace(name.to_string()));
        };
        if e.labels == labels {
            return Ok(Affected::none());
        }
        e.labels = labels;
        self.policy_epoch += 1;
        Ok(self.policy_nodes())
    }

    /// Replace a pod's labels and named ports. Affects its node and the nodes of every
    /// policy that may select it as a peer.
    pub fn set_pod_meta(
        &mut self,
        namespace: &str,
        name: &str,
        meta: PodMeta,
    ) -> Result<Affected, ModelError> {
        let key = PodKey::new(namespace, name);
        check_labels(&format!("pod {key}"), &meta.labels).map_err(PolicyError::from)?;
        check_container_ports(&key, &meta.ports).map_err(PolicyError::from)?;
        let Some(e) = self.pods.get_mut(&key) else {
            return Err(ModelError::UnknownPod(key));
        };
        if e.info.labels == meta.labels && e.info.ports == meta.ports {
            return Ok(Affected::none());
        }
        e.info.labels = meta.labels;
        e.info.ports = meta.ports;
        let node = e.info.node.clone();
        self.policy_epoch += 1;
        Ok(self.pod_policy_nodes(&node))
    }

    /// The nodes a pod's appearance, disappearance or relabel may change: its own node and,
    /// in networkpolicy mode, every node with pods in a namespace that has policies.
    pub(super) fn pod_policy_nodes(&self, node: &str) -> Affected {
        let mut a = Affected::node(node);
        if self.is_policy_mode() && !self.policies.is_empty() {
            a.merge(self.policy_nodes());
        }
        a
    }

    /// Every node hosting a pod of a namespace that has at least one policy.
    fn policy_nodes(&self) -> Affected {
        let mut a = Affected::none();
        if !self.is_policy_mode() {
            return a;
        }
        let mut last: Option<&str> = None;
        for (ns, _) in self.policies.keys() {
            if last == Some(ns.as_str()) {
                continue;
            }
            last = Some(ns);
            a.merge(self.nodes_of_namespace(ns));
        }
        a
    }

    /// A namespace's labels.
    pub fn namespace_labels(&self, name: &str) -> Option<&Labels> {
        self.namespaces.get(name).map(|e| &e.labels)
    }

    /// The pods of a namespace, by name.
    pub fn pods_in<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        let ns = namespace.to_string();
        self.namespaces
            .get(namespace)
            .into_iter()
            .flat_map(|e| e.pods.iter())
            .filter_map(move |p| self.pods.get(&PodKey::new(ns.as_str(), p.as_str())))
            .map(|e| &e.info)
    }

    /// The pods a peer of a policy in `policy_ns` selects (ipBlock peers select none).
    pub fn peer_pods<'a>(&'a self, policy_ns: &'a str, peer: &'a Peer) -> Vec<&'a PodInfo> {
        let Peer::Pods {
            namespace_selector,
            pod_selector,
        } = peer
        else {
            return Vec::new();
        };
        let all = LabelSelector::everything();
        let psel = pod_selector.as_ref().unwrap_or(&all);
        let mut out = Vec::new();
        match namespace_selector {
            None => out.extend(self.pods_in(policy_ns).filter(|p| psel.matches(&p.labels))),
            Some(nsel) => {
                for (ns, e) in &self.namespaces {
                    if nsel.matches(&e.labels) {
                        out.extend(self.pods_in(ns).filter(|p| psel.matches(&p.labels)));
                    }
                }
            }
        }
        out
    }

    /// The namespaces a namespace selector selects.
    pub fn selected_namespaces<'a>(
        &'a self,
        sel: &'a LabelSelector,
    ) -> impl Iterator<Item = NamespaceInfo> + 'a {
        self.namespaces
            .iter()
            .filter(|(_, e)| sel.matches(&e.labels))
            .map(|(n, e)| e.info(n))
    }
}
