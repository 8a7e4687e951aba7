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

impl PolicyRule {
    /// Whether one of its ports is a container port name.
    pub fn has_named_ports(&self) -> bool {
        self.ports
            .iter()
            .any(|p| matches!(p.port, Some(PortSpec::Name(_))))
    }
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

    fn peers(&self) -> impl Iterator<Item = &Peer> {
        self.ingress
            .iter()
            .chain(self.egress.iter())
            .flat_map(|r| r.peers.iter())
    }

    /// The namespace selectors of its peers.
    pub fn namespace_selectors(&self) -> impl Iterator<Item = &LabelSelector> {
        self.peers().filter_map(|p| match p {
            Peer::Pods {
                namespace_selector: Some(s),
                ..
            } => Some(s),
            _ => None,
        })
    }

    /// Which peers (of every rule, ingress then egress, in order) select `pod` (whose
    /// namespace has `ns_labels`). Compared before and after a change, it tells whether any
    /// rule's peer set changed.
    pub fn peer_selection(&self, pod: &PodInfo, ns_labels: &Labels) -> Vec<bool> {
        self.peers()
            .map(|peer| match peer {
                Peer::IpBlock { .. } => false,
                Peer::Pods {
                    namespace_selector,
                    pod_selector,
                } => {
                    let ns_ok = match namespace_selector {
                        None => pod.key.namespace == self.namespace,
                        Some(s) => s.matches(ns_labels),
                    };
                    ns_ok && pod_selector.as_ref().is_none_or(|s| s.matches(&pod.labels))
                }
            })
            .collect()
    }

    /// Whether a rule names ports by name.
    pub fn has_named_ports(&self) -> bool {
        self.ingress
            .iter()
            .chain(self.egress.iter())
            .any(PolicyRule::has_named_ports)
    }

    /// Whether its flows depend on every pod of the cluster: egress rules with named ports
    /// and ipBlock peers or no peers resolve the ports on whatever pods the block covers.
    pub fn looks_at_every_pod(&self) -> bool {
        self.egress.iter().any(|r| {
            r.has_named_ports()
                && (r.peers.is_empty() || r.peers.iter().any(|p| matches!(p, Peer::IpBlock { .. })))
        })
    }
}

/// Which policies may select a namespace's pods as peers, by one `matchLabels` pair of each
/// namespace selector (a namespace a selector matches has that pair); policies with a selector
/// without `matchLabels`, or whose flows look at every pod, are always candidates.
#[derive(Clone, Debug, Default)]
pub(super) struct PolicyIndex {
    pub(super) by_ns_label: std::collections::HashMap<(String, String), BTreeSet<PolicyKey>>,
    pub(super) unindexed: BTreeSet<PolicyKey>,
}

impl PolicyIndex {
    pub(super) fn insert(&mut self, p: &NetworkPolicy) {
        let key = p.key();
        if p.looks_at_every_pod() {
            self.unindexed.insert(key.clone());
        }
        for s in p.namespace_selectors() {
            match s.match_labels.iter().next() {
                Some((k, v)) => {
                    self.by_ns_label
                        .entry((k.clone(), v.clone()))
                        .or_default()
                        .insert(key.clone());
                }
                None => {
                    self.unindexed.insert(key.clone());
                }
            }
        }
    }

    pub(super) fn remove(&mut self, key: &PolicyKey) {
        self.unindexed.remove(key);
        self.by_ns_label.retain(|_, set| {
            set.remove(key);
            !set.is_empty()
        });
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
        if self.policies.get(&key).map(|e| &e.policy) == Some(&p) {
            return Ok(Affected::none());
        }
        let mut a = self.nodes_of_namespace(&p.namespace);
        if !self.is_policy_mode() {
            a = Affected::none();
        }
        self.policy_index.remove(&key);
        self.policy_index.insert(&p);
        self.policy_epoch += 1;
        self.stamp_namespace_policies(&key.0);
        let stamp = self.policy_epoch;
        self.policies
            .insert(key, StampedPolicy { policy: p, stamp });
        Ok(a)
    }

    /// Delete a NetworkPolicy.
    pub fn delete_policy(&mut self, namespace: &str, name: &str) -> Result<Affected, ModelError> {
        let key = (namespace.to_string(), name.to_string());
        self.policy_index.remove(&key);
        if self.policies.remove(&key).is_none() {
            return Err(ModelError::UnknownPolicy {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        self.policy_epoch += 1;
        self.stamp_namespace_policies(namespace);
        if !self.is_policy_mode() {
            return Ok(Affected::none());
        }
        Ok(self.nodes_of_namespace(namespace))
    }

    /// A policy by namespace and name.
    pub fn policy(&self, namespace: &str, name: &str) -> Option<&NetworkPolicy> {
        self.policies
            .get(&(namespace.to_string(), name.to_string()))
            .map(|e| &e.policy)
    }

    /// Every policy, by namespace and name.
    pub fn policies(&self) -> impl Iterator<Item = &NetworkPolicy> {
        self.policies.values().map(|e| &e.policy)
    }

    /// The policies of one namespace, by name, each with its stamp (see [`Self::policy_stamp`]).
    pub fn policies_in_stamped<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a NetworkPolicy, u64)> + 'a {
        self.policies
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|(_, e)| (&e.policy, e.stamp))
    }

    /// How many policies there are.
    pub fn policy_count(&self) -> usize {
        self.policies.len()
    }

    /// The policies of one namespace, by name.
    pub fn policies_in<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a NetworkPolicy> + 'a {
        self.policies
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|(_, e)| &e.policy)
    }

    /// Counter bumped whenever a policy, or a label a policy may look at, changes.
    pub fn policy_epoch(&self) -> u64 {
        self.policy_epoch
    }

    /// The `policy_epoch` at which this policy's spec, or anything its peers select, last
    /// changed; together with [`Self::policy_reset_epoch`] it tells a cache whether what it
    /// derived from the policy is still current.
    pub fn policy_stamp(&self, key: &PolicyKey) -> u64 {
        self.policies.get(key).map_or(0, |e| e.stamp)
    }

    /// Counter bumped by changes that may affect any policy (NETIDs, namespaces coming and
    /// going, the config): everything derived from policies is stale.
    pub fn policy_reset_epoch(&self) -> u64 {
        self.policy_reset_epoch
    }

    pub(super) fn touch_policies(&mut self, keys: impl IntoIterator<Item = PolicyKey>) {
        for k in keys {
            self.stamp_namespace_policies(&k.0);
            if let Some(e) = self.policies.get_mut(&k) {
                e.stamp = self.policy_epoch;
            }
        }
    }

    /// Record that a policy of `namespace` came, went or was stamped (see
    /// [`Self::namespace_policies_stamp`]).
    fn stamp_namespace_policies(&mut self, namespace: &str) {
        if let Some(e) = self.namespaces.get_mut(namespace) {
            e.policies_stamp = self.policy_epoch;
        }
    }

    /// The `policy_epoch` at which a policy of `namespace` last came, went or was stamped: while
    /// it (and [`Self::policy_reset_epoch`]) is unchanged, so are the namespace's policies and
    /// their stamps ([`Self::policies_in_stamped`]), and a cache need not look at them.
    pub fn namespace_policies_stamp(&self, namespace: &str) -> u64 {
        self.namespaces
            .get(namespace)
            .map_or(0, |e| e.policies_stamp)
    }

    /// Counter bumped whenever a namespace comes, goes or is relabelled (what namespace
    /// selectors select).
    pub fn namespace_epoch(&self) -> u64 {
        self.namespace_epoch
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
        let old = e.labels.clone();
        self.replace_namespace_labels(name, labels);
        self.policy_epoch += 1;
        self.namespace_epoch += 1;
        let new = self
            .namespaces
            .get(name)
            .map(|e| e.labels.clone())
            .unwrap_or_default();
        // Policies whose namespace selectors see this namespace differently now.
        let mut a = Affected::none();
        if !self.is_policy_mode() {
            return Ok(a);
        }
        let touched: Vec<PolicyKey> = self
            .candidate_policies(name, &old, &new)
            .filter(|p| {
                p.namespace_selectors()
                    .any(|s| s.matches(&old) != s.matches(&new))
            })
            .map(|p| p.key())
            .collect();
        a.merge(self.nodes_of_namespaces(touched.iter().map(|k| k.0.as_str())));
        self.touch_policies(touched);
        Ok(a)
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
        let Some(e) = self.pods.get(&key) else {
            return Err(ModelError::UnknownPod(key));
        };
        if e.info.labels == meta.labels && e.info.ports == meta.ports {
            return Ok(Affected::none());
        }
        let before = e.info.clone();
        let after = self
            .pods
            .update(&key, |e| {
                e.info.labels = meta.labels;
                e.info.ports = meta.ports;
                e.info.clone()
            })
            .ok_or_else(|| ModelError::UnknownPod(key.clone()))?;
        self.policy_epoch += 1;
        Ok(self.pod_policy_change(Some(&before), Some(&after)))
    }

    /// Record a pod's appearance (`before` None), disappearance (`after` None) or change: the
    /// policies it concerns are stamped, and the nodes it may change are returned.
    pub(super) fn pod_policy_change(
        &mut self,
        before: Option<&PodInfo>,
        after: Option<&PodInfo>,
    ) -> Affected {
        let (a, touched) = self.pod_policy_nodes(before, after);
        self.touch_policies(touched);
        a
    }

    /// The nodes a pod's appearance (`before` None), disappearance (`after` None) or change
    /// may change: its own node and, in networkpolicy mode, the nodes of every policy for
    /// which the pod's standing as a peer changes (or whose flows look at every pod); and
    /// those policies.
    fn pod_policy_nodes(
        &self,
        before: Option<&PodInfo>,
        after: Option<&PodInfo>,
    ) -> (Affected, Vec<PolicyKey>) {
        let mut touched = Vec::new();
        let mut a = Affected::none();
        for p in [before, after].into_iter().flatten() {
            a.nodes.insert(p.node.clone());
        }
        let Some(pod) = after.or(before) else {
            return (a, touched);
        };
        if !self.is_policy_mode() || self.policies.is_empty() {
            return (a, touched);
        }
        let ns_labels = self
            .namespaces
            .get(&pod.key.namespace)
            .map(|e| e.labels.clone())
            .unwrap_or_default();
        let ports_changed = before.map(|b| &b.ports) != after.map(|a| &a.ports);
        for p in self.candidate_policies(&pod.key.namespace, &ns_labels, &ns_labels) {
            let was = before.map(|b| p.peer_selection(b, &ns_labels));
            let is = after.map(|x| p.peer_selection(x, &ns_labels));
            let selected = |v: &Option<Vec<bool>>| v.as_ref().is_some_and(|v| v.contains(&true));
            let named = ports_changed && (selected(&was) || selected(&is)) && p.has_named_ports();
            let changed = match (&was, &is) {
                (Some(a), Some(b)) => a != b,
                _ => selected(&was) || selected(&is),
            };
            if changed || named || p.looks_at_every_pod() {
                touched.push(p.key());
            }
        }
        a.merge(self.nodes_of_namespaces(touched.iter().map(|k| k.0.as_str())));
        (a, touched)
    }

    /// The policies that may select pods of namespace `ns` (labels `old` or `new`) as peers:
    /// those of `ns` itself, those with a namespace selector that could match either label
    /// set, and those whose flows look at every pod.
    pub(super) fn candidate_policies<'a>(
        &'a self,
        ns: &'a str,
        old: &Labels,
        new: &Labels,
    ) -> impl Iterator<Item = &'a NetworkPolicy> + 'a {
        let mut keys: BTreeSet<&PolicyKey> = self.policy_index.unindexed.iter().collect();
        for (k, v) in old.iter().chain(new.iter()) {
            if let Some(set) = self.policy_index.by_ns_label.get(&(k.clone(), v.clone())) {
                keys.extend(set.iter());
            }
        }
        let own = self.policies_in(ns);
        keys.into_iter()
            .filter_map(|k| self.policies.get(k).map(|e| &e.policy))
            .chain(own)
    }

    /// A namespace's labels.
    pub fn namespace_labels(&self, name: &str) -> Option<&Labels> {
        self.namespaces.get(name).map(|e| &e.labels)
    }

    /// The pods of a namespace, by name.
    pub fn pods_in<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        // Pods are ordered by (namespace, name): one range, no lookups.
        let ns = namespace.to_string();
        self.pods
            .starting_at(&PodKey::new(namespace, ""))
            .take_while(move |e| e.info.key.namespace == ns)
            .map(|e| &e.info)
    }

    /// Set a namespace's labels and keep the label index current.
    pub(super) fn replace_namespace_labels(&mut self, name: &str, labels: Labels) {
        let Some(e) = self.namespaces.get_mut(name) else {
            return;
        };
        let old = std::mem::replace(&mut e.labels, labels.clone());
        for kv in old {
            if let Some(set) = self.ns_by_label.get_mut(&kv) {
                set.remove(name);
                if set.is_empty() {
                    self.ns_by_label.remove(&kv);
                }
            }
        }
        for kv in labels {
            self.ns_by_label
                .entry(kv)
                .or_default()
                .insert(name.to_string());
        }
    }

    /// The namespaces a namespace selector selects. A selector with `matchLabels` looks only
    /// at the namespaces that carry the rarest of its labels.
    pub fn selected_namespaces<'a>(
        &'a self,
        sel: &'a LabelSelector,
    ) -> Box<dyn Iterator<Item = NamespaceInfo> + 'a> {
        let rarest = sel
            .match_labels
            .iter()
            .map(|(k, v)| {
                self.ns_by_label
                    .get(&(k.clone(), v.clone()))
                    .map_or(0, BTreeSet::len)
            })
            .enumerate()
            .min_by_key(|(_, n)| *n);
        match rarest {
            Some((i, _)) => {
                let (k, v) = sel
                    .match_labels
                    .iter()
                    .nth(i)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .unwrap_or_default();
                Box::new(
                    self.ns_by_label
                        .get(&(k, v))
                        .into_iter()
                        .flatten()
                        .filter_map(|n| self.namespaces.get_key_value(n.as_str()))
                        .filter(|(_, e)| sel.matches(&e.labels))
                        .map(|(n, e)| e.info(n)),
                )
            }
            None => Box::new(
                self.namespaces
                    .iter()
                    .filter(|(_, e)| sel.matches(&e.labels))
                    .map(|(n, e)| e.info(n)),
            ),
        }
    }
}
