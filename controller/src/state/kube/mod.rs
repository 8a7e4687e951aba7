//! The Kubernetes datastore: flowmesh's records kept in the API server's own objects, as
//! OpenShift SDN's master keeps them.
//!
//! | record | where it lives |
//! |---|---|
//! | cluster network config | `network.openshift.io/v1` ClusterNetwork `default` |
//! | node (subnet, datapath) | HostSubnet named after the node (+ annotations [`DPID`], [`POD_IP_CURSOR`]) |
//! | namespace (NETID, labels, multicast) | NetNamespace (netid, multicast annotation) + the Namespace's labels |
//! | pod attachment | `flowmesh.io/v1` PodAttachment `NAMESPACE.POD` (cluster-scoped, written only by flowmesh; its node must be the Pod's `spec.nodeName`) + the Pod's labels and named container ports |
//! | NetworkPolicy | `networking.k8s.io/v1` NetworkPolicy |
//! | EgressNetworkPolicy | `network.openshift.io/v1` EgressNetworkPolicy |
//! | egress IPs | NetNamespace `egressIPs`; HostSubnet `egressIPs` / `egressCIDRs` (with egressCIDRs, `egressIPs` holds the controller's automatic assignments, as in OpenShift) |
//! | allocation cursors, resolved DNS names | ConfigMaps in the controller's namespace, labelled [`RECORD_LABEL`] |
//!
//! Every kind is followed with kube-runtime's watcher (list, then watch from the list's
//! resourceVersion with bookmarks; a relist on 410 Gone; backoff on errors) into one cache of
//! objects, from which the records are derived. A record's revision is the backend's own
//! counter (Kubernetes resourceVersions are opaque and per object): it grows whenever a
//! derived record changes. Writes are optimistic: every update carries the resourceVersion
//! the cache holds; a 409 re-reads the object and retries while the record the writer
//! expected is unchanged, and is a [`StoreError::Conflict`] otherwise.
//!
//! Kubernetes has no transactions across objects: a batch is written object by object, and a
//! batch cut short by an error leaves what was written (the watch then brings the model to
//! what the API server holds). A write that the API server shapes differently from the
//! record (a pod's labels are the Pod's, never the attacher's) comes back as a watched change.

use super::DnsRecord;
use super::{
    coalesce, unguarded, Change, CursorsRecord, Guarded, Listing, Record, RecordKey, Revision,
    StateBackend, StoreError, Watch, WatchEvent,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy as K8sPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kinds::flowmesh::{attachment_name, PodAttachment, PodAttachmentSpec};
use kinds::openshift::{
    ClusterNetwork, ClusterNetworkEntry, EgressNetworkPolicy, EgressNetworkPolicyPeer,
    EgressNetworkPolicyRule, EgressNetworkPolicySpec, HostSubnet, NetNamespace,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use topology::model::audit::{parse_acl_logging_lenient, ACL_LOGGING_ANNOTATION};
use topology::model::multicast::{parse_multicast_value, MULTICAST_ANNOTATION};
use topology::model::{
    ContainerPort, EgressSnapshot, HostSubnetEgress, Labels, NamespaceInfo, NodeInfo, PodKey,
    PodRecord,
};
use topology::{ClusterNetworkConfig, Ipv4Cidr, Mode};

mod attachments;
mod store;
mod writes;

pub use attachments::{AttachmentTidy, PodBinding};
pub use store::KubeStore;
pub use writes::client_for;

/// The Pod annotation that held the attachment (node, OVS port, ofport, IP) as JSON before
/// attachments moved into [`PodAttachment`] objects. Anyone who may patch a Pod can write it,
/// so it is ignored (and reported), or imported once with
/// [`KubeConfig::import_attachment_annotations`] (docs/operations.md, "Upgrading").
pub const ATTACHMENT: &str = "flowmesh.io/attachment";
/// The HostSubnet annotation holding the node's datapath id (`0x` and 16 hex digits, as
/// `apply -f` reads it).
pub const DPID: &str = "flowmesh.io/datapath-id";
/// The HostSubnet annotation holding the node's pod-IP allocation cursor.
pub const POD_IP_CURSOR: &str = "flowmesh.io/pod-ip-cursor";
/// The label of flowmesh's own ConfigMaps: `cursors` or `egress-dns`.
pub const RECORD_LABEL: &str = "flowmesh.io/record";
/// The annotation `oc adm pod-network` writes on a NetNamespace to join, isolate or make
/// global (`join:OTHER`, `isolate`, `global`).
pub const CHANGE_NETWORK: &str = "pod.network.openshift.io/multitenant.change-network";
const CURSORS_CONFIGMAP: &str = "flowmesh-cursors";
/// How long one API request of a write may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The name of the OpenShift ClusterNetwork object.
pub const CLUSTER_NETWORK_NAME: &str = "default";

/// The settings of the Kubernetes datastore.
#[derive(Clone, Debug)]
pub struct KubeConfig {
    /// A kubeconfig file (None: in-cluster config, or `$KUBECONFIG` / `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// The namespace of the controller's own objects (ConfigMaps, the leader Lease).
    pub namespace: String,
    /// How long the first complete listing may take.
    pub sync_timeout: Duration,
    /// Take a pod's attachment from its legacy [`ATTACHMENT`] annotation when it has no
    /// PodAttachment, its node is the Pod's `spec.nodeName` and its IP the Pod's
    /// `status.podIP` (both written by the cluster, not by tenants); the leader then writes
    /// the PodAttachment and removes the annotation. For upgrading from the annotations.
    pub import_attachment_annotations: bool,
}

impl Default for KubeConfig {
    fn default() -> Self {
        KubeConfig {
            kubeconfig: None,
            namespace: "flowmesh".into(),
            sync_timeout: Duration::from_secs(60),
            import_attachment_annotations: false,
        }
    }
}

/// The datapath id flowmesh gives a node whose shim has not said otherwise: its IPv4 address
/// (unique, as node addresses are).
pub fn dpid_from_ip(ip: Ipv4Addr) -> u64 {
    u64::from(u32::from(ip))
}

/// What a Pod's legacy [`ATTACHMENT`] annotation holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// The node.
    pub node: String,
    /// The host-side OVS port.
    pub port_name: String,
    /// Its OpenFlow port number.
    pub ofport: u32,
    /// The pod's IP.
    pub ip: Ipv4Addr,
}

/// The kinds followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `v1` Node (read only: the nodes the master gives HostSubnets).
    Node,
    /// `v1` Namespace.
    Namespace,
    /// `v1` Pod.
    Pod,
    /// `network.openshift.io/v1` HostSubnet.
    HostSubnet,
    /// `network.openshift.io/v1` NetNamespace.
    NetNamespace,
    /// `network.openshift.io/v1` ClusterNetwork.
    ClusterNetwork,
    /// `networking.k8s.io/v1` NetworkPolicy.
    NetworkPolicy,
    /// `network.openshift.io/v1` EgressNetworkPolicy.
    EgressNetworkPolicy,
    /// flowmesh's ConfigMaps.
    ConfigMap,
    /// `flowmesh.io/v1` PodAttachment.
    PodAttachment,
}

const KINDS: [Kind; 10] = [
    Kind::Node,
    Kind::Namespace,
    Kind::Pod,
    Kind::HostSubnet,
    Kind::NetNamespace,
    Kind::ClusterNetwork,
    Kind::NetworkPolicy,
    Kind::EgressNetworkPolicy,
    Kind::ConfigMap,
    Kind::PodAttachment,
];

/// A Kubernetes Node as the master needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeView {
    /// resourceVersion.
    pub rv: String,
    /// Its first `InternalIP` (IPv4) address.
    pub ip: Option<Ipv4Addr>,
}

/// A Pod as flowmesh needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    rv: String,
    uid: String,
    labels: Labels,
    ports: Vec<ContainerPort>,
    /// `spec.nodeName` (the scheduler's binding).
    node_name: Option<String>,
    /// `status.podIP` (the kubelet's report).
    pod_ip: Option<String>,
    /// The legacy [`ATTACHMENT`] annotation.
    attachment: Option<String>,
}

/// A Namespace as flowmesh needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct NsView {
    rv: String,
    labels: Labels,
    /// The `k8s.ovn.org/acl-logging` annotation, as written.
    acl_logging: Option<String>,
}

/// Whether a Namespace's annotation says something else than the record's audit logging.
fn acl_differs(v: &NsView, info: &NamespaceInfo) -> bool {
    v.acl_logging
        .as_deref()
        .and_then(|a| parse_acl_logging_lenient(a).0)
        != info.acl_logging
}

/// What flowmesh reads of a Namespace.
fn ns_view(n: &Namespace) -> NsView {
    NsView {
        rv: meta_rv(&n.metadata),
        labels: labels_of(&n.metadata),
        acl_logging: annotation(&n.metadata, ACL_LOGGING_ANNOTATION).map(str::to_string),
    }
}

#[derive(Clone, Debug)]
enum Obj {
    Node(NodeView),
    Namespace(NsView),
    Pod(PodView),
    HostSubnet(Box<HostSubnet>),
    NetNamespace(Box<NetNamespace>),
    ClusterNetwork(Box<ClusterNetwork>),
    NetworkPolicy(Box<K8sPolicy>),
    EgressNetworkPolicy(Box<EgressNetworkPolicy>),
    ConfigMap(Box<ConfigMap>),
    PodAttachment(Box<PodAttachment>),
}

fn meta_rv(m: &ObjectMeta) -> String {
    m.resource_version.clone().unwrap_or_default()
}

impl Obj {
    fn rv(&self) -> String {
        match self {
            Obj::Node(v) => v.rv.clone(),
            Obj::Namespace(v) => v.rv.clone(),
            Obj::Pod(v) => v.rv.clone(),
            Obj::HostSubnet(o) => meta_rv(&o.metadata),
            Obj::NetNamespace(o) => meta_rv(&o.metadata),
            Obj::ClusterNetwork(o) => meta_rv(&o.metadata),
            Obj::NetworkPolicy(o) => meta_rv(&o.metadata),
            Obj::EgressNetworkPolicy(o) => meta_rv(&o.metadata),
            Obj::ConfigMap(o) => meta_rv(&o.metadata),
            Obj::PodAttachment(o) => meta_rv(&o.metadata),
        }
    }
}

/// An object's identity: kind, namespace ("" for cluster-scoped), name.
type ObjKey = (Kind, String, String);

fn labels_of(m: &ObjectMeta) -> Labels {
    m.labels.clone().unwrap_or_default().into_iter().collect()
}

fn annotation<'a>(m: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    m.annotations.as_ref()?.get(key).map(String::as_str)
}

fn pod_view(p: &Pod) -> PodView {
    let mut ports = Vec::new();
    for c in p.spec.iter().flat_map(|s| s.containers.iter()) {
        for cp in c.ports.iter().flatten() {
            let Some(name) = cp.name.clone().filter(|n| !n.is_empty()) else {
                continue;
            };
            let proto = pa_port(&name, cp.protocol.as_deref(), cp.container_port);
            if let Some(port) = proto {
                ports.push(port);
            }
        }
    }
    PodView {
        rv: meta_rv(&p.metadata),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        labels: labels_of(&p.metadata),
        ports,
        node_name: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        pod_ip: p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        attachment: annotation(&p.metadata, ATTACHMENT).map(str::to_string),
    }
}

/// A named container port in the model's form (None: unusable, e.g. port 0).
fn pa_port(name: &str, protocol: Option<&str>, port: i32) -> Option<ContainerPort> {
    let p = proto::admin::ContainerPort {
        name: name.to_string(),
        protocol: protocol.unwrap_or("TCP").to_string(),
        container_port: u32::try_from(port).ok()?,
    };
    kinds::netpol::container_port(&p, "ports").ok()
}

fn node_view(n: &Node) -> NodeView {
    let ip = n
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse::<Ipv4Addr>().ok());
    NodeView {
        rv: meta_rv(&n.metadata),
        ip,
    }
}

/// What the cache hands out to the master's reactions (`kube_sync`).
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeView>,
    /// Namespace names.
    pub namespaces: BTreeSet<String>,
    /// NetNamespaces carrying the change-network annotation: name → value.
    pub change_network: BTreeMap<String, String>,
    /// Whether every kind has been listed once.
    pub synced: bool,
}

#[derive(Default)]
struct Cache {
    objs: BTreeMap<ObjKey, Obj>,
    synced: BTreeSet<Kind>,
    records: BTreeMap<RecordKey, (Record, Revision)>,
    revision: Revision,
    subscribers: Vec<mpsc::UnboundedSender<WatchEvent>>,
    errors: BTreeMap<Kind, String>,
    /// Bumped on every object change (for the master's reactions).
    changed: Option<tokio::sync::watch::Sender<u64>>,
    /// Objects whose record could not be derived, with the reason (logged once per version).
    refused: HashMap<ObjKey, String>,
    /// [`KubeConfig::import_attachment_annotations`].
    import_annotations: bool,
    /// What the leader's attachment tidying looks at next: Pods and PodAttachments changed
    /// since its last pass, or everything after a fresh listing of either.
    tidy: attachments::TidyQueue,
    /// Relists and write conflicts, for the metrics.
    counters: Arc<crate::observe::metrics::KubeCounters>,
}

fn lock(m: &Mutex<Cache>) -> std::sync::MutexGuard<'_, Cache> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cache {
    fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<&Obj> {
        self.objs.get(&(kind, ns.to_string(), name.to_string()))
    }

    fn host_subnet(&self, name: &str) -> Option<&HostSubnet> {
        match self.get(Kind::HostSubnet, "", name) {
            Some(Obj::HostSubnet(h)) => Some(h),
            _ => None,
        }
    }

    fn net_namespace(&self, name: &str) -> Option<&NetNamespace> {
        match self.get(Kind::NetNamespace, "", name) {
            Some(Obj::NetNamespace(n)) => Some(n),
            _ => None,
        }
    }

    /// The names of the objects of a namespaced kind in namespace `ns`.
    fn in_namespace<'a>(&'a self, kind: Kind, ns: &'a str) -> impl Iterator<Item = String> + 'a {
        self.objs
            .range((kind, ns.to_string(), String::new())..)
            .take_while(move |(k, _)| k.0 == kind && k.1 == ns)
            .map(|(k, _)| k.2.clone())
    }

    fn of_kind(&self, kind: Kind) -> impl Iterator<Item = (&ObjKey, &Obj)> {
        self.objs
            .range((kind, String::new(), String::new())..)
            .take_while(move |(k, _)| k.0 == kind)
    }

    /// The record keys an object's content feeds.
    fn keys_of(k: &ObjKey, o: &Obj) -> Vec<RecordKey> {
        let (_, ns, name) = k;
        match o {
            Obj::Node(_) => vec![],
            Obj::Namespace(_) => vec![RecordKey::Namespace(name.clone())],
            Obj::Pod(_) => vec![RecordKey::Pod(ns.clone(), name.clone())],
            Obj::HostSubnet(_) => vec![RecordKey::Node(name.clone()), RecordKey::EgressIps],
            Obj::NetNamespace(_) => vec![RecordKey::Namespace(name.clone()), RecordKey::EgressIps],
            Obj::ClusterNetwork(_) => vec![RecordKey::ClusterNetwork],
            Obj::NetworkPolicy(_) => vec![RecordKey::NetworkPolicy(ns.clone(), name.clone())],
            Obj::EgressNetworkPolicy(_) => vec![RecordKey::EgressNetworkPolicy(ns.clone())],
            Obj::ConfigMap(cm) => match cm_record_key(cm) {
                Some(k) => vec![k],
                None => vec![],
            },
            Obj::PodAttachment(a) => {
                vec![RecordKey::Pod(a.spec.namespace.clone(), a.spec.pod.clone())]
            }
        }
    }

    /// The records that wait for namespace `ns`'s NetNamespace (see `derive`): re-derived when
    /// it comes or goes, not on its every change.
    fn waiting_for_netnamespace(&self, ns: &str) -> Vec<RecordKey> {
        let mut keys = vec![RecordKey::EgressNetworkPolicy(ns.to_string())];
        keys.extend(
            self.in_namespace(Kind::Pod, ns)
                .map(|p| RecordKey::Pod(ns.to_string(), p)),
        );
        keys.extend(
            self.in_namespace(Kind::NetworkPolicy, ns)
                .map(|p| RecordKey::NetworkPolicy(ns.to_string(), p)),
        );
        keys
    }

    /// Derive one record from the objects (None: no such record, or its object is refused).
    /// A namespace's pods, policies and egress firewall count only once its NetNamespace
    /// exists: on a cluster flowmesh has just been installed on, they wait for the NETID the
    /// master gives their namespace.
    fn derive(&mut self, key: &RecordKey) -> Option<Record> {
        match key {
            RecordKey::Pod(ns, _)
            | RecordKey::NetworkPolicy(ns, _)
            | RecordKey::EgressNetworkPolicy(ns) => {
                self.net_namespace(ns)?;
            }
            _ => {}
        }
        let (obj, result) = match key {
            RecordKey::ClusterNetwork => {
                let o = match self.get(Kind::ClusterNetwork, "", CLUSTER_NETWORK_NAME)? {
                    Obj::ClusterNetwork(o) => o,
                    _ => return None,
                };
                (
                    (
                        Kind::ClusterNetwork,
                        String::new(),
                        CLUSTER_NETWORK_NAME.into(),
                    ),
                    cluster_network_config(o).map(Record::ClusterNetwork),
                )
            }
            RecordKey::Node(n) => {
                let h = self.host_subnet(n)?;
                (
                    (Kind::HostSubnet, String::new(), n.clone()),
                    node_record(h).map(Record::Node),
                )
            }
            RecordKey::Namespace(n) => {
                let nn = self.net_namespace(n)?;
                let (labels, acl) = match self.get(Kind::Namespace, "", n) {
                    Some(Obj::Namespace(v)) => (v.labels.clone(), v.acl_logging.as_deref()),
                    _ => (Labels::new(), None),
                };
                (
                    (Kind::NetNamespace, String::new(), n.clone()),
                    namespace_info(nn, labels, acl).map(Record::Namespace),
                )
            }
            RecordKey::Pod(ns, n) => {
                let (obj, r) = self.derive_pod(ns, n)?;
                (obj, r.map(Record::Pod))
            }
            RecordKey::NetworkPolicy(ns, n) => {
                let Some(Obj::NetworkPolicy(p)) = self.get(Kind::NetworkPolicy, ns, n) else {
                    return None;
                };
                (
                    (Kind::NetworkPolicy, ns.clone(), n.clone()),
                    kinds::netpol::from_k8s(ns, n, p)
                        .map(Record::NetworkPolicy)
                        .map_err(|e| e.to_string()),
                )
            }
            RecordKey::EgressNetworkPolicy(ns) => {
                // One per project; with several, the first by name counts (OpenShift refuses
                // the others at admission).
                let (k, spec) =
                    self.of_kind(Kind::EgressNetworkPolicy)
                        .find_map(|(k, o)| match o {
                            Obj::EgressNetworkPolicy(f) if &k.1 == ns => {
                                Some((k.clone(), f.spec.clone()))
                            }
                            _ => None,
                        })?;
                let r = kinds::egress_firewall::from_api(ns, &k.2, &spec)
                    .map(Record::EgressNetworkPolicy)
                    .map_err(|e| e.to_string());
                (k, r)
            }
            RecordKey::Cursors => {
                let Some(Obj::ConfigMap(cm)) = self.get(Kind::ConfigMap, "", CURSORS_CONFIGMAP)
                else {
                    return None;
                };
                (
                    (Kind::ConfigMap, String::new(), CURSORS_CONFIGMAP.into()),
                    cursors_record(cm).map(Record::Cursors),
                )
            }
            RecordKey::EgressDns(name) => {
                let cm_name = dns_configmap_name(name);
                let Some(Obj::ConfigMap(cm)) = self.get(Kind::ConfigMap, "", &cm_name) else {
                    return None;
                };
                (
                    (Kind::ConfigMap, String::new(), cm_name),
                    dns_record(cm).map(Record::EgressDns),
                )
            }
            RecordKey::EgressIps => {
                let e = self.egress_snapshot();
                return (!e.is_empty()).then_some(Record::EgressIps(e));
            }
        };
        match result {
            Ok(r) => {
                self.refused.remove(&obj);
                Some(r)
            }
            Err(reason) => {
                self.refuse(obj, reason);
                None
            }
        }
    }

    /// Note an object flowmesh cannot use, and why (logged once per reason; reported as a
    /// Warning event by the leader, counted in the metrics).
    fn refuse(&mut self, obj: ObjKey, reason: String) {
        if self.refused.get(&obj) != Some(&reason) {
            tracing::warn!(object = %format!("{:?} {}/{}", obj.0, obj.1, obj.2), %reason, "kubernetes object refused; flowmesh ignores it until it is fixed");
            self.refused.insert(obj, reason);
        }
    }

    /// The egress-IP state the HostSubnets and NetNamespaces hold. Unparsable addresses are
    /// skipped (and logged).
    fn egress_snapshot(&self) -> EgressSnapshot {
        let mut e = EgressSnapshot::default();
        for (_, o) in self.of_kind(Kind::NetNamespace) {
            let Obj::NetNamespace(n) = o else { continue };
            let ips = parse_list::<Ipv4Addr>(n.egress_ips.as_deref(), "netnamespace egressIPs");
            if !ips.is_empty() {
                e.namespaces.insert(n.netname_or_name(), ips);
            }
        }
        for (k, o) in self.of_kind(Kind::HostSubnet) {
            let Obj::HostSubnet(h) = o else { continue };
            let ips = parse_list::<Ipv4Addr>(h.egress_ips.as_deref(), "hostsubnet egressIPs");
            let cidrs = parse_list::<Ipv4Cidr>(h.egress_cidrs.as_deref(), "hostsubnet egressCIDRs");
            if !cidrs.is_empty() {
                for ip in ips {
                    e.automatic.insert(ip, k.2.clone());
                }
                e.nodes.insert(
                    k.2.clone(),
                    HostSubnetEgress {
                        egress_ips: Vec::new(),
                        egress_cidrs: cidrs,
                    },
                );
            } else if !ips.is_empty() {
                e.nodes.insert(
                    k.2.clone(),
                    HostSubnetEgress {
                        egress_ips: ips,
                        egress_cidrs: Vec::new(),
                    },
                );
            }
        }
        e
    }

    /// Put (Some) or remove (None) an object. Returns the changed records, each with the
    /// new revision; with `emit`, they go to the watchers too. An object already held at the
    /// same resourceVersion changes nothing.
    fn set(&mut self, k: ObjKey, o: Option<Obj>, emit: bool) -> Vec<(RecordKey, Option<Record>)> {
        if let (Some(new), Some(old)) = (&o, self.objs.get(&k)) {
            if new.rv() == old.rv() && !new.rv().is_empty() {
                return Vec::new();
            }
        }
        self.tidy.changed(&k);
        let mut keys: BTreeSet<RecordKey> = BTreeSet::new();
        let old = self.objs.get(&k);
        if let Some(old) = old {
            keys.extend(Self::keys_of(&k, old));
        }
        if let Some(new) = &o {
            keys.extend(Self::keys_of(&k, new));
        }
        if k.0 == Kind::NetNamespace && old.is_some() != o.is_some() {
            keys.extend(self.waiting_for_netnamespace(&k.2));
        }
        match o {
            Some(new) => {
                self.objs.insert(k, new);
            }
            None => {
                self.refused.remove(&k);
                self.objs.remove(&k);
            }
        }
        self.bump_changed();
        self.rederive(keys, emit)
    }

    /// Replace every object of a kind (a fresh listing).
    fn reset(&mut self, kind: Kind, objs: Vec<(ObjKey, Obj)>, emit: bool) {
        self.tidy.relisted(kind);
        let mut keys: BTreeSet<RecordKey> = BTreeSet::new();
        let old: BTreeSet<ObjKey> = self.of_kind(kind).map(|(k, _)| k.clone()).collect();
        for k in &old {
            if let Some(o) = self.objs.remove(k) {
                keys.extend(Self::keys_of(k, &o));
            }
        }
        let mut new = BTreeSet::new();
        for (k, o) in objs {
            keys.extend(Self::keys_of(&k, &o));
            self.objs.insert(k.clone(), o);
            new.insert(k);
        }
        if kind == Kind::NetNamespace {
            for k in old.symmetric_difference(&new) {
                keys.extend(self.waiting_for_netnamespace(&k.2));
            }
        }
        self.synced.insert(kind);
        self.bump_changed();
        self.rederive(keys, emit);
    }

    fn bump_changed(&self) {
        if let Some(c) = &self.changed {
            c.send_modify(|n| *n += 1);
        }
    }

    fn rederive(
        &mut self,
        keys: BTreeSet<RecordKey>,
        emit: bool,
    ) -> Vec<(RecordKey, Option<Record>)> {
        let mut changed = Vec::new();
        for key in keys {
            let now = self.derive(&key);
            let before = self.records.get(&key).map(|(r, _)| r);
            if before == now.as_ref() {
                continue;
            }
            changed.push((key, now));
        }
        if changed.is_empty() {
            return changed;
        }
        self.revision += 1;
        let rev = self.revision;
        for (key, now) in &changed {
            match now {
                Some(r) => {
                    self.records.insert(key.clone(), (r.clone(), rev));
                }
                None => {
                    self.records.remove(key);
                }
            }
        }
        if emit && self.all_synced() {
            let changes = changed
                .iter()
                .map(|(k, r)| match r {
                    Some(r) => Change::Put(r.clone()),
                    None => Change::Delete(k.clone()),
                })
                .collect();
            self.send(WatchEvent::Changes {
                revision: rev,
                changes,
            });
        }
        changed
    }

    fn send(&mut self, ev: WatchEvent) {
        self.subscribers.retain(|s| s.send(ev.clone()).is_ok());
    }

    fn all_synced(&self) -> bool {
        KINDS.iter().all(|k| self.synced.contains(k))
    }

    /// The kinds not listed yet, by name.
    fn unlisted(&self) -> Vec<String> {
        KINDS
            .iter()
            .filter(|k| !self.synced.contains(k))
            .map(|k| format!("{k:?}"))
            .collect()
    }

    /// The kinds whose watch fails, with why.
    fn failing(&self) -> Vec<String> {
        self.errors
            .iter()
            .map(|(k, e)| format!("{k:?}: {e}"))
            .collect()
    }

    fn listing(&self) -> Listing {
        Listing {
            revision: self.revision,
            records: self
                .records
                .values()
                .map(|(r, rev)| (r.clone(), *rev))
                .collect(),
        }
    }

    fn record_revision(&self, key: &RecordKey) -> Revision {
        self.records.get(key).map(|(_, r)| *r).unwrap_or(0)
    }

    fn set_error(&mut self, kind: Kind, e: Option<String>) {
        let was_ok = self.errors.is_empty();
        match e {
            Some(e) => {
                self.errors.insert(kind, e);
            }
            None => {
                self.errors.remove(&kind);
            }
        }
        match (was_ok, self.errors.is_empty()) {
            (true, false) => {
                let detail = self
                    .errors
                    .iter()
                    .map(|(k, e)| format!("{k:?}: {e}"))
                    .collect::<Vec<_>>()
                    .join("; ");
                self.send(WatchEvent::Health { ok: false, detail });
            }
            (false, true) => self.send(WatchEvent::Health {
                ok: true,
                detail: "the Kubernetes API server answers again".into(),
            }),
            _ => {}
        }
    }
}

trait NetName {
    fn netname_or_name(&self) -> String;
}

impl NetName for NetNamespace {
    fn netname_or_name(&self) -> String {
        if self.netname.is_empty() {
            self.metadata.name.clone().unwrap_or_default()
        } else {
            self.netname.clone()
        }
    }
}

fn parse_list<T: std::str::FromStr>(v: Option<&[String]>, what: &str) -> Vec<T>
where
    T::Err: std::fmt::Display,
{
    let mut out = Vec::new();
    for s in v.unwrap_or_default() {
        match s.parse::<T>() {
            Ok(x) => out.push(x),
            Err(e) => tracing::warn!(value = %s, %e, "{what}: unusable value skipped"),
        }
    }
    out
}

fn node_record(h: &HostSubnet) -> Result<topology::model::NodeRecord, String> {
    let name = h.metadata.name.clone().unwrap_or_default();
    let ip: Ipv4Addr = h
        .host_ip
        .parse()
        .map_err(|e| format!("hostIP {:?}: {e}", h.host_ip))?;
    let subnet: Ipv4Cidr = h
        .subnet
        .parse()
        .map_err(|e| format!("subnet {:?}: {e}", h.subnet))?;
    let dpid = match annotation(&h.metadata, DPID) {
        Some(t) => kinds::manifest::parse_dpid(t).map_err(|e| format!("annotation {DPID}: {e}"))?,
        None => dpid_from_ip(ip),
    };
    let pod_ip_cursor = match annotation(&h.metadata, POD_IP_CURSOR) {
        Some(t) => t
            .parse()
            .map_err(|e| format!("annotation {POD_IP_CURSOR} {t:?}: {e}"))?,
        None => 0,
    };
    Ok(topology::model::NodeRecord {
        info: NodeInfo {
            name,
            ip,
            dpid,
            subnet,
        },
        pod_ip_cursor,
    })
}

/// A namespace's record: its NETID and multicast from the NetNamespace, its labels and audit
/// logging from the Namespace (the annotation read as OVN-Kubernetes reads it: what is valid
/// is used; a value that is not JSON turns logging off).
fn namespace_info(
    nn: &NetNamespace,
    labels: Labels,
    acl: Option<&str>,
) -> Result<NamespaceInfo, String> {
    let netid = nn
        .netid
        .ok_or_else(|| "netid is not set (flowmesh allocates it)".to_string())?;
    let multicast = match annotation(&nn.metadata, MULTICAST_ANNOTATION) {
        Some(v) => parse_multicast_value(v).unwrap_or(false),
        None => false,
    };
    Ok(NamespaceInfo {
        name: nn.netname_or_name(),
        netid,
        labels,
        multicast,
        acl_logging: acl.and_then(|v| parse_acl_logging_lenient(v).0),
    })
}

fn cursors_record(cm: &ConfigMap) -> Result<CursorsRecord, String> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("cursors"))
        .ok_or("no data.cursors")?;
    serde_json::from_str(text).map_err(|e| format!("data.cursors: {e}"))
}

fn dns_record(cm: &ConfigMap) -> Result<DnsRecord, String> {
    let data = cm.data.as_ref().ok_or("no data")?;
    let name = data.get("name").ok_or("no data.name")?;
    let addresses: Vec<Ipv4Addr> =
        serde_json::from_str(data.get("addresses").map(String::as_str).unwrap_or("[]"))
            .map_err(|e| format!("data.addresses: {e}"))?;
    Ok(DnsRecord {
        name: name.clone(),
        addresses,
    })
}

fn cm_record_key(cm: &ConfigMap) -> Option<RecordKey> {
    let kind = cm.metadata.labels.as_ref()?.get(RECORD_LABEL)?;
    match kind.as_str() {
        "cursors" => Some(RecordKey::Cursors),
        "egress-dns" => {
            let name = cm.data.as_ref()?.get("name")?;
            // Only the ConfigMap named for the DNS name holds its record.
            (cm.metadata.name.as_deref() == Some(dns_configmap_name(name).as_str()))
                .then(|| RecordKey::EgressDns(name.clone()))
        }
        _ => None,
    }
}

/// The ConfigMap that holds a DNS name's addresses (FNV-1a of the name: DNS names may be
/// longer than an object name may be, or have upper case).
pub fn dns_configmap_name(name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("flowmesh-dns-{h:016x}")
}

/// The cluster network config an OpenShift ClusterNetwork object describes.
pub fn cluster_network_config(o: &ClusterNetwork) -> Result<ClusterNetworkConfig, String> {
    let mut o = o.clone();
    o.metadata = ObjectMeta {
        name: o.metadata.name.clone(),
        ..Default::default()
    };
    let mut v = serde_json::to_value(&o).map_err(|e| e.to_string())?;
    // A watched object may come without them (kube hands list items that way).
    v["apiVersion"] = "network.openshift.io/v1".into();
    v["kind"] = "ClusterNetwork".into();
    let objs = kinds::manifest::parse(&v.to_string()).map_err(|e| e.to_string())?;
    match objs.into_iter().next() {
        Some(kinds::manifest::ManifestObject::ClusterNetwork(spec)) => {
            kinds::manifest::to_config(&spec, &crate::state::default_config())
        }
        _ => Err("not a ClusterNetwork".into()),
    }
}

/// The ClusterNetwork object of a config (fields as OpenShift's master writes them).
pub fn cluster_network_object(c: &ClusterNetworkConfig) -> ClusterNetwork {
    let entries: Vec<ClusterNetworkEntry> = c
        .cluster_networks
        .iter()
        .map(|e| ClusterNetworkEntry {
            cidr: e.cidr.to_string(),
            host_subnet_length: Some(32u32.saturating_sub(u32::from(e.host_prefix))),
            host_prefix: None,
        })
        .collect();
    ClusterNetwork {
        metadata: ObjectMeta {
            name: Some(CLUSTER_NETWORK_NAME.into()),
            ..Default::default()
        },
        network: entries.first().map(|e| e.cidr.clone()),
        hostsubnetlength: entries.first().and_then(|e| e.host_subnet_length),
        service_network: Some(c.service_network.to_string()),
        plugin_name: Some(
            match c.mode {
                Mode::Subnet => "redhat/openshift-ovs-subnet",
                Mode::Multitenant => "redhat/openshift-ovs-multitenant",
                Mode::Networkpolicy => "redhat/openshift-ovs-networkpolicy",
            }
            .into(),
        ),
        cluster_networks: Some(entries),
        vxlan_port: Some(u32::from(c.vxlan_port)),
        mtu: Some(c.mtu),
        ..Default::default()
    }
}

fn firewall_spec(f: &topology::model::EgressFirewall) -> EgressNetworkPolicySpec {
    use topology::model::EgressTo;
    EgressNetworkPolicySpec {
        egress: f
            .rules
            .iter()
            .map(|r| EgressNetworkPolicyRule {
                rule_type: r.action.as_str().to_string(),
                to: match &r.to {
                    EgressTo::Cidr(c) => EgressNetworkPolicyPeer {
                        cidr_selector: Some(c.to_string()),
                        dns_name: None,
                    },
                    EgressTo::DnsName(n) => EgressNetworkPolicyPeer {
                        cidr_selector: None,
                        dns_name: Some(n.clone()),
                    },
                },
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_records_are_written_before_what_was_allocated_from_them() {
        let g = |k: RecordKey| Guarded {
            change: Change::Delete(k),
            expected: 3,
        };
        // An attach's batch as the core builds it: the pod, then its node (the IP cursor).
        let batch = vec![
            (
                RecordKey::Pod("ns".into(), "a".into()),
                g(RecordKey::Pod("ns".into(), "a".into())),
            ),
            (
                RecordKey::Namespace("ns".into()),
                g(RecordKey::Namespace("ns".into())),
            ),
            (
                RecordKey::Node("node1".into()),
                g(RecordKey::Node("node1".into())),
            ),
            (
                RecordKey::Pod("ns".into(), "b".into()),
                g(RecordKey::Pod("ns".into(), "b".into())),
            ),
            (RecordKey::Cursors, g(RecordKey::Cursors)),
        ];
        let order: Vec<String> = store::allocations_first(batch)
            .into_iter()
            .map(|(k, _)| k.as_string())
            .collect();
        assert_eq!(
            order,
            [
                "node/node1",
                "cursors/default",
                "pod/ns/a",
                "namespace/ns",
                "pod/ns/b"
            ]
        );
    }

    #[test]
    fn dns_configmap_names_are_valid_object_names() {
        let n = dns_configmap_name("Www.Example.COM");
        assert!(n.starts_with("flowmesh-dns-"));
        assert_eq!(n.len(), "flowmesh-dns-".len() + 16);
        assert!(n
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        assert_ne!(n, dns_configmap_name("www.example.com"));
    }

    #[test]
    fn cluster_network_round_trips_through_its_object() {
        let mut cfg = crate::state::default_config();
        cfg.mode = Mode::Networkpolicy;
        cfg.vxlan_port = 4790;
        let o = cluster_network_object(&cfg);
        assert_eq!(cluster_network_config(&o).expect("parses"), cfg);
    }
}
