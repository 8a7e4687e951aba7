//! The Kubernetes datastore: flowmesh's records kept in the API server's own objects, as
//! OpenShift SDN's master keeps them.
//!
//! | record | where it lives |
//! |---|---|
//! | cluster network config | `network.openshift.io/v1` ClusterNetwork `default` |
//! | node (subnet, datapath) | HostSubnet named after the node (+ annotations [`DPID`], [`POD_IP_CURSOR`]) |
//! | namespace (NETID, labels, multicast) | NetNamespace (netid, multicast annotation) + the Namespace's labels |
//! | pod attachment | the Pod: its annotation [`ATTACHMENT`], its labels and named container ports |
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

use super::{
    coalesce, unguarded, Change, CursorsRecord, Guarded, Listing, Record, RecordKey, Revision,
    StateBackend, StoreError, Watch, WatchEvent,
};
use crate::egress_firewall::DnsRecord;
use crate::openshift::{
    ClusterNetwork, ClusterNetworkEntry, EgressNetworkPolicy, EgressNetworkPolicyPeer,
    EgressNetworkPolicyRule, EgressNetworkPolicySpec, HostSubnet, NetNamespace,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy as K8sPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
use topology::model::multicast::{parse_multicast_value, MULTICAST_ANNOTATION};
use topology::model::{
    ContainerPort, EgressSnapshot, HostSubnetEgress, Labels, NamespaceInfo, NodeInfo, PodKey,
    PodRecord,
};
use topology::{ClusterNetworkConfig, Ipv4Cidr, Mode};

/// The Pod annotation holding the attachment (node, OVS port, ofport, IP) as JSON.
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
}

impl Default for KubeConfig {
    fn default() -> Self {
        KubeConfig {
            kubeconfig: None,
            namespace: "flowmesh".into(),
            sync_timeout: Duration::from_secs(60),
        }
    }
}

/// The datapath id flowmesh gives a node whose shim has not said otherwise: its IPv4 address
/// (unique, as node addresses are).
pub fn dpid_from_ip(ip: Ipv4Addr) -> u64 {
    u64::from(u32::from(ip))
}

/// What a Pod's [`ATTACHMENT`] annotation holds.
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
}

const KINDS: [Kind; 9] = [
    Kind::Node,
    Kind::Namespace,
    Kind::Pod,
    Kind::HostSubnet,
    Kind::NetNamespace,
    Kind::ClusterNetwork,
    Kind::NetworkPolicy,
    Kind::EgressNetworkPolicy,
    Kind::ConfigMap,
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
    labels: Labels,
    ports: Vec<ContainerPort>,
    attachment: Option<String>,
}

/// A Namespace as flowmesh needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct NsView {
    rv: String,
    labels: Labels,
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
        labels: labels_of(&p.metadata),
        ports,
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
    crate::netpol::container_port(&p, "ports").ok()
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
                let labels = match self.get(Kind::Namespace, "", n) {
                    Some(Obj::Namespace(v)) => v.labels.clone(),
                    _ => Labels::new(),
                };
                (
                    (Kind::NetNamespace, String::new(), n.clone()),
                    namespace_info(nn, labels).map(Record::Namespace),
                )
            }
            RecordKey::Pod(ns, n) => {
                let Some(Obj::Pod(v)) = self.get(Kind::Pod, ns, n) else {
                    return None;
                };
                let text = v.attachment.as_deref()?;
                (
                    (Kind::Pod, ns.clone(), n.clone()),
                    pod_record(ns, n, v, text).map(Record::Pod),
                )
            }
            RecordKey::NetworkPolicy(ns, n) => {
                let Some(Obj::NetworkPolicy(p)) = self.get(Kind::NetworkPolicy, ns, n) else {
                    return None;
                };
                (
                    (Kind::NetworkPolicy, ns.clone(), n.clone()),
                    crate::netpol::from_k8s(ns, n, p)
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
                let r = crate::egress_firewall::from_api(ns, &k.2, &spec)
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
                let seen = self.refused.get(&obj) == Some(&reason);
                if !seen {
                    tracing::warn!(object = %format!("{:?} {}/{}", obj.0, obj.1, obj.2), %reason, "kubernetes object refused; flowmesh ignores it until it is fixed");
                    self.refused.insert(obj, reason);
                }
                None
            }
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
        Some(t) => crate::manifest::parse_dpid(t).map_err(|e| format!("annotation {DPID}: {e}"))?,
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

fn namespace_info(nn: &NetNamespace, labels: Labels) -> Result<NamespaceInfo, String> {
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
    })
}

fn pod_record(ns: &str, name: &str, v: &PodView, text: &str) -> Result<PodRecord, String> {
    let a: Attachment =
        serde_json::from_str(text).map_err(|e| format!("annotation {ATTACHMENT}: {e}"))?;
    Ok(PodRecord {
        info: topology::PodInfo {
            key: PodKey {
                namespace: ns.to_string(),
                name: name.to_string(),
            },
            node: a.node,
            port_name: a.port_name,
            ofport: a.ofport,
            ip: a.ip,
            labels: v.labels.clone(),
            ports: v.ports.clone(),
        },
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
    let objs = crate::manifest::parse(&v.to_string()).map_err(|e| e.to_string())?;
    match objs.into_iter().next() {
        Some(crate::manifest::ManifestObject::ClusterNetwork(spec)) => {
            crate::apply::to_config(&spec, &crate::core::default_config())
                .map_err(|e| e.to_string())
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

/// One write of an object.
#[allow(clippy::large_enum_variant)] // short-lived, one per object write
enum Write {
    HostSubnet(Op<HostSubnet>),
    NetNamespace(Op<NetNamespace>),
    Namespace(Op<Namespace>),
    Pod(Op<Pod>),
    NetworkPolicy(Op<K8sPolicy>),
    EgressNetworkPolicy(Op<EgressNetworkPolicy>),
    ConfigMap(Op<ConfigMap>),
    ClusterNetwork(Op<ClusterNetwork>),
}

enum Op<T> {
    Create(T),
    Replace(T),
    /// A JSON merge patch carrying the resourceVersion it expects.
    Merge(String, String, serde_json::Value),
    /// Delete by namespace and name (absent is fine).
    Delete(String, String),
}

/// The Kubernetes datastore.
pub struct KubeStore {
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    cfg: KubeConfig,
    cache: Arc<Mutex<Cache>>,
    changed: tokio::sync::watch::Receiver<u64>,
    fence: crate::ha::Fence,
}

impl Drop for KubeStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Why a write failed.
enum WriteError {
    Conflict(String),
    Other(StoreError),
}

fn api_error(what: &str, e: kube::Error) -> WriteError {
    match &e {
        kube::Error::Api(s) if s.code == 409 => {
            WriteError::Conflict(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 404 => WriteError::Other(StoreError::Transaction(
            format!("{what}: not found in the Kubernetes API ({})", s.message),
        )),
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => WriteError::Other(
            StoreError::Transaction(format!("{what}: the API server refused it: {}", s.message)),
        ),
        _ => WriteError::Other(StoreError::Unavailable(format!(
            "Kubernetes API server: {what}: {e}"
        ))),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl KubeStore {
    /// Connect and start following every kind (the first listing shows in [`StateBackend::list`]).
    pub fn connect(cfg: KubeConfig) -> Result<Self, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kube")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("kubernetes client runtime: {e}")))?;
        let path = cfg.kubeconfig.clone();
        let client = rt.block_on(async move { client_for(path.as_deref()).await })?;
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let cache = Arc::new(Mutex::new(Cache {
            changed: Some(tx),
            ..Default::default()
        }));
        let store = KubeStore {
            rt: Some(rt),
            client,
            cfg,
            cache,
            changed,
            fence: crate::ha::Fence::default(),
        };
        store.start_watches()?;
        Ok(store)
    }

    /// The client (for the leader election and the master's reactions).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The namespace of the controller's own objects.
    pub fn namespace(&self) -> &str {
        &self.cfg.namespace
    }

    /// The fence the leader election sets while this replica leads.
    pub fn fence(&self) -> crate::ha::Fence {
        self.fence.clone()
    }

    /// Nodes, Namespaces and pending change-network requests, as the cache holds them now.
    pub fn cluster_objects(&self) -> ClusterObjects {
        let c = lock(&self.cache);
        let mut out = ClusterObjects {
            synced: c.all_synced(),
            ..Default::default()
        };
        for (k, o) in &c.objs {
            match o {
                Obj::Node(v) => {
                    out.nodes.insert(k.2.clone(), v.clone());
                }
                Obj::Namespace(_) => {
                    out.namespaces.insert(k.2.clone());
                }
                Obj::NetNamespace(n) => {
                    if let Some(v) = annotation(&n.metadata, CHANGE_NETWORK) {
                        out.change_network.insert(k.2.clone(), v.to_string());
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The objects flowmesh refuses (an invalid NetworkPolicy, an unparsable HostSubnet, ...):
    /// a reference to each and why.
    pub fn refusals(&self) -> Vec<(k8s_openapi::api::core::v1::ObjectReference, String)> {
        let c = lock(&self.cache);
        c.refused
            .iter()
            .map(|((kind, ns, name), why)| {
                let (api_version, k) = match kind {
                    Kind::Node => ("v1", "Node"),
                    Kind::Namespace => ("v1", "Namespace"),
                    Kind::Pod => ("v1", "Pod"),
                    Kind::HostSubnet => ("network.openshift.io/v1", "HostSubnet"),
                    Kind::NetNamespace => ("network.openshift.io/v1", "NetNamespace"),
                    Kind::ClusterNetwork => ("network.openshift.io/v1", "ClusterNetwork"),
                    Kind::NetworkPolicy => ("networking.k8s.io/v1", "NetworkPolicy"),
                    Kind::EgressNetworkPolicy => ("network.openshift.io/v1", "EgressNetworkPolicy"),
                    Kind::ConfigMap => ("v1", "ConfigMap"),
                };
                let ns = match (kind, ns.is_empty()) {
                    (Kind::ConfigMap, _) => Some(self.cfg.namespace.clone()),
                    (_, true) => None,
                    (_, false) => Some(ns.clone()),
                };
                (
                    k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some(api_version.into()),
                        kind: Some(k.into()),
                        namespace: ns,
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    why.clone(),
                )
            })
            .collect()
    }

    /// Wakes up whenever an object changed.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.clone()
    }

    /// Run one API request `f` on the store's runtime and wait for it, at most
    /// [`REQUEST_TIMEOUT`] (a hung API server must not hold the core up).
    fn block<F>(&self, f: F) -> Result<F::Output, StoreError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let bounded = tokio::time::timeout(REQUEST_TIMEOUT, f);
        super::run_on(self.rt.as_ref(), "kubernetes client", bounded)?.map_err(|_| {
            StoreError::Unavailable(format!(
                "Kubernetes API server: no answer within {} s",
                REQUEST_TIMEOUT.as_secs()
            ))
        })
    }

    fn start_watches(&self) -> Result<(), StoreError> {
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("kubernetes client stopped".into()))?;
        let c = self.client.clone();
        let cache = self.cache.clone();
        let ns = self.cfg.namespace.clone();
        let cfg = watcher::Config::default();
        rt.spawn(follow(
            Api::<Node>::all(c.clone()),
            cfg.clone(),
            Kind::Node,
            cache.clone(),
            |n: Node| {
                Some((
                    (Kind::Node, String::new(), n.name_any()),
                    Obj::Node(node_view(&n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<Namespace>::all(c.clone()),
            cfg.clone(),
            Kind::Namespace,
            cache.clone(),
            |n: Namespace| {
                Some((
                    (Kind::Namespace, String::new(), n.name_any()),
                    Obj::Namespace(NsView {
                        rv: meta_rv(&n.metadata),
                        labels: labels_of(&n.metadata),
                    }),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<Pod>::all(c.clone()),
            cfg.clone(),
            Kind::Pod,
            cache.clone(),
            |p: Pod| {
                let ns = p.namespace().unwrap_or_default();
                Some(((Kind::Pod, ns, p.name_any()), Obj::Pod(pod_view(&p))))
            },
        ));
        rt.spawn(follow(
            Api::<HostSubnet>::all(c.clone()),
            cfg.clone(),
            Kind::HostSubnet,
            cache.clone(),
            |h: HostSubnet| {
                let name = h.metadata.name.clone()?;
                Some((
                    (Kind::HostSubnet, String::new(), name),
                    Obj::HostSubnet(Box::new(h)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<NetNamespace>::all(c.clone()),
            cfg.clone(),
            Kind::NetNamespace,
            cache.clone(),
            |n: NetNamespace| {
                let name = n.metadata.name.clone()?;
                Some((
                    (Kind::NetNamespace, String::new(), name),
                    Obj::NetNamespace(Box::new(n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<ClusterNetwork>::all(c.clone()),
            cfg.clone(),
            Kind::ClusterNetwork,
            cache.clone(),
            |n: ClusterNetwork| {
                let name = n.metadata.name.clone()?;
                Some((
                    (Kind::ClusterNetwork, String::new(), name),
                    Obj::ClusterNetwork(Box::new(n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<K8sPolicy>::all(c.clone()),
            cfg.clone(),
            Kind::NetworkPolicy,
            cache.clone(),
            |p: K8sPolicy| {
                let ns = p.namespace().unwrap_or_default();
                Some((
                    (Kind::NetworkPolicy, ns, p.name_any()),
                    Obj::NetworkPolicy(Box::new(p)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<EgressNetworkPolicy>::all(c.clone()),
            cfg.clone(),
            Kind::EgressNetworkPolicy,
            cache.clone(),
            |p: EgressNetworkPolicy| {
                let ns = p.namespace().unwrap_or_default();
                Some((
                    (Kind::EgressNetworkPolicy, ns, p.name_any()),
                    Obj::EgressNetworkPolicy(Box::new(p)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<ConfigMap>::namespaced(c, &ns),
            cfg.labels(RECORD_LABEL),
            Kind::ConfigMap,
            cache,
            |m: ConfigMap| {
                Some((
                    (Kind::ConfigMap, String::new(), m.name_any()),
                    Obj::ConfigMap(Box::new(m)),
                ))
            },
        ));
        Ok(())
    }

    /// Wait until every kind has been listed once.
    fn wait_synced(&self) -> Result<(), StoreError> {
        let deadline = Instant::now() + self.cfg.sync_timeout;
        loop {
            {
                let c = lock(&self.cache);
                if c.all_synced() {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    let missing: Vec<String> = KINDS
                        .iter()
                        .filter(|k| !c.synced.contains(k))
                        .map(|k| format!("{k:?}"))
                        .collect();
                    let errors: Vec<String> = c
                        .errors
                        .iter()
                        .map(|(k, e)| format!("{k:?}: {e}"))
                        .collect();
                    return Err(StoreError::Unavailable(format!(
                        "Kubernetes API server: could not list {} within {:?}{}",
                        missing.join(", "),
                        self.cfg.sync_timeout,
                        if errors.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", errors.join("; "))
                        }
                    )));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The object writes that store one change, planned from the cache (empty: the objects
    /// already say it).
    fn plan(&self, c: &mut Cache, change: &Change) -> Result<Vec<Write>, StoreError> {
        // Nothing to write when the objects already say it.
        let key = change.key();
        let now = c.derive(&key);
        match change {
            Change::Put(r) if now.as_ref() == Some(r) => return Ok(vec![]),
            Change::Delete(_) if now.is_none() && key != RecordKey::EgressIps => return Ok(vec![]),
            _ => {}
        }
        let ns = self.cfg.namespace.clone();
        let mut out = Vec::new();
        match change {
            Change::Put(Record::ClusterNetwork(cfg)) => {
                let mut o = cluster_network_object(cfg);
                match c.get(Kind::ClusterNetwork, "", CLUSTER_NETWORK_NAME) {
                    Some(Obj::ClusterNetwork(cur)) => {
                        o.metadata = cur.metadata.clone();
                        out.push(Write::ClusterNetwork(Op::Replace(o)));
                    }
                    _ => out.push(Write::ClusterNetwork(Op::Create(o))),
                }
            }
            Change::Put(Record::Node(n)) => {
                // Nodes are the API's: a HostSubnet is made for a Node, not for a name.
                if c.host_subnet(&n.info.name).is_none()
                    && c.get(Kind::Node, "", &n.info.name).is_none()
                {
                    return Err(StoreError::Transaction(format!(
                        "node {}: there is no Kubernetes Node of that name; with the kubernetes datastore nodes come from the API server (their HostSubnets are made for them)",
                        n.info.name
                    )));
                }
                out.push(host_subnet_write(c, n))
            }
            Change::Delete(RecordKey::Node(n)) => {
                out.push(Write::HostSubnet(Op::Delete(String::new(), n.clone())));
            }
            Change::Put(Record::Namespace(info)) => {
                if c.net_namespace(&info.name).is_none()
                    && info.name != "default"
                    && c.get(Kind::Namespace, "", &info.name).is_none()
                {
                    return Err(StoreError::Transaction(format!(
                        "namespace {0}: there is no Kubernetes Namespace of that name; with the kubernetes datastore namespaces come from the API server (kubectl create namespace {0})",
                        info.name
                    )));
                }
                let (mut nn, exists) = match c.net_namespace(&info.name) {
                    Some(n) => (n.clone(), true),
                    None => (
                        NetNamespace {
                            metadata: ObjectMeta {
                                name: Some(info.name.clone()),
                                ..Default::default()
                            },
                            ..Default::default()
                        },
                        false,
                    ),
                };
                let before = nn.clone();
                nn.netname = info.name.clone();
                nn.netid = Some(info.netid);
                let a = nn.metadata.annotations.get_or_insert_with(Default::default);
                if info.multicast {
                    a.insert(MULTICAST_ANNOTATION.into(), "true".into());
                } else {
                    a.remove(MULTICAST_ANNOTATION);
                }
                if nn
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.is_empty())
                {
                    nn.metadata.annotations =
                        before.metadata.annotations.clone().filter(|a| a.is_empty());
                }
                if !exists {
                    out.push(Write::NetNamespace(Op::Create(nn)));
                } else if nn != before {
                    out.push(Write::NetNamespace(Op::Replace(nn)));
                }
                // Labels live on the Namespace: a new NetNamespace takes them from there (as
                // a first attachment takes a Pod's), only an existing one's are edited.
                let cur = match c.get(Kind::Namespace, "", &info.name) {
                    Some(Obj::Namespace(v)) => Some(v.clone()),
                    _ => None,
                };
                match cur {
                    Some(_) if !exists => {}
                    Some(v) if v.labels != info.labels => {
                        out.push(Write::Namespace(Op::Merge(
                            String::new(),
                            info.name.clone(),
                            labels_patch(&v.rv, &v.labels, &info.labels, None),
                        )));
                    }
                    None if !info.labels.is_empty() => {
                        return Err(StoreError::Transaction(format!(
                            "namespace {}: there is no Kubernetes Namespace to hold its labels",
                            info.name
                        )))
                    }
                    _ => {}
                }
            }
            Change::Delete(RecordKey::Namespace(n)) => {
                out.push(Write::NetNamespace(Op::Delete(String::new(), n.clone())));
            }
            Change::Put(Record::Pod(p)) => {
                let (pns, pname) = (&p.info.key.namespace, &p.info.key.name);
                let Some(Obj::Pod(v)) = c.get(Kind::Pod, pns, pname) else {
                    return Err(StoreError::Transaction(format!(
                        "pod {pns}/{pname} is not in the Kubernetes API: flowmesh attaches only pods the API server has"
                    )));
                };
                let a = Attachment {
                    node: p.info.node.clone(),
                    port_name: p.info.port_name.clone(),
                    ofport: p.info.ofport,
                    ip: p.info.ip,
                };
                let text = serde_json::to_string(&a)
                    .map_err(|e| StoreError::Transaction(e.to_string()))?;
                // The Pod's labels are the API's: a first attachment takes them from there,
                // and only an attached pod's labels are edited through flowmesh.
                let to = if v.attachment.is_some() {
                    p.info.labels.clone()
                } else {
                    v.labels.clone()
                };
                out.push(Write::Pod(Op::Merge(
                    pns.clone(),
                    pname.clone(),
                    labels_patch(&v.rv, &v.labels, &to, Some(serde_json::Value::String(text))),
                )));
            }
            Change::Delete(RecordKey::Pod(pns, pname)) => {
                if let Some(Obj::Pod(v)) = c.get(Kind::Pod, pns, pname) {
                    if v.attachment.is_some() {
                        out.push(Write::Pod(Op::Merge(
                            pns.clone(),
                            pname.clone(),
                            serde_json::json!({"metadata": {
                                "resourceVersion": v.rv,
                                "annotations": {ATTACHMENT: null}}}),
                        )));
                    }
                }
            }
            Change::Put(Record::NetworkPolicy(p)) => {
                let mut o = crate::netpol::to_k8s(p);
                match c.get(Kind::NetworkPolicy, &p.namespace, &p.name) {
                    Some(Obj::NetworkPolicy(cur)) => {
                        o.metadata = cur.metadata.clone();
                        out.push(Write::NetworkPolicy(Op::Replace(o)));
                    }
                    _ => {
                        o.metadata = ObjectMeta {
                            name: Some(p.name.clone()),
                            namespace: Some(p.namespace.clone()),
                            ..Default::default()
                        };
                        out.push(Write::NetworkPolicy(Op::Create(o)));
                    }
                }
            }
            Change::Delete(RecordKey::NetworkPolicy(pns, pname)) => {
                out.push(Write::NetworkPolicy(Op::Delete(pns.clone(), pname.clone())));
            }
            Change::Put(Record::EgressNetworkPolicy(f)) => {
                let spec = firewall_spec(f);
                let existing: Vec<(String, EgressNetworkPolicy)> = c
                    .of_kind(Kind::EgressNetworkPolicy)
                    .filter(|(k, _)| k.1 == f.namespace)
                    .filter_map(|(k, o)| match o {
                        Obj::EgressNetworkPolicy(p) => Some((k.2.clone(), (**p).clone())),
                        _ => None,
                    })
                    .collect();
                let mut same = None;
                for (name, o) in existing {
                    if name == f.name {
                        same = Some(o);
                    } else {
                        out.push(Write::EgressNetworkPolicy(Op::Delete(
                            f.namespace.clone(),
                            name,
                        )));
                    }
                }
                match same {
                    Some(mut o) => {
                        o.spec = spec;
                        out.push(Write::EgressNetworkPolicy(Op::Replace(o)));
                    }
                    None => {
                        let mut o = EgressNetworkPolicy::new(&f.name, spec);
                        o.metadata.namespace = Some(f.namespace.clone());
                        out.push(Write::EgressNetworkPolicy(Op::Create(o)));
                    }
                }
            }
            Change::Delete(RecordKey::EgressNetworkPolicy(pns)) => {
                for (k, _) in c.of_kind(Kind::EgressNetworkPolicy) {
                    if &k.1 == pns {
                        out.push(Write::EgressNetworkPolicy(Op::Delete(
                            pns.clone(),
                            k.2.clone(),
                        )));
                    }
                }
            }
            Change::Put(Record::Cursors(cur)) => {
                let text = serde_json::to_string(cur)
                    .map_err(|e| StoreError::Transaction(e.to_string()))?;
                out.push(configmap_write(
                    c,
                    &ns,
                    CURSORS_CONFIGMAP,
                    "cursors",
                    [("cursors".to_string(), text)].into(),
                ));
            }
            Change::Delete(RecordKey::Cursors) | Change::Delete(RecordKey::ClusterNetwork) => {}
            Change::Put(Record::EgressDns(d)) => {
                let addrs = serde_json::to_string(&d.addresses)
                    .map_err(|e| StoreError::Transaction(e.to_string()))?;
                out.push(configmap_write(
                    c,
                    &ns,
                    &dns_configmap_name(&d.name),
                    "egress-dns",
                    [
                        ("name".to_string(), d.name.clone()),
                        ("addresses".to_string(), addrs),
                    ]
                    .into(),
                ));
            }
            Change::Delete(RecordKey::EgressDns(name)) => {
                out.push(Write::ConfigMap(Op::Delete(
                    ns.clone(),
                    dns_configmap_name(name),
                )));
            }
            Change::Put(Record::EgressIps(e)) => egress_writes(c, e, &mut out),
            Change::Delete(RecordKey::EgressIps) => {
                egress_writes(c, &EgressSnapshot::default(), &mut out)
            }
        }
        Ok(out)
    }
}

/// The HostSubnet write that stores a node record (its allocation, datapath id and pod-IP
/// cursor), keeping what else the object holds.
fn host_subnet_write(c: &Cache, n: &topology::model::NodeRecord) -> Write {
    let (mut h, exists) = match c.host_subnet(&n.info.name) {
        Some(h) => (h.clone(), true),
        None => (
            HostSubnet {
                metadata: ObjectMeta {
                    name: Some(n.info.name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
            false,
        ),
    };
    h.host = n.info.name.clone();
    h.host_ip = n.info.ip.to_string();
    h.subnet = n.info.subnet.to_string();
    let a = h.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(DPID.into(), format!("{:#018x}", n.info.dpid));
    a.insert(POD_IP_CURSOR.into(), n.pod_ip_cursor.to_string());
    Write::HostSubnet(if exists {
        Op::Replace(h)
    } else {
        Op::Create(h)
    })
}

/// A merge patch of labels from `from` to `to` (and the attachment annotation, if given),
/// expecting resourceVersion `rv`.
fn labels_patch(
    rv: &str,
    from: &Labels,
    to: &Labels,
    attachment: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    for (k, v) in to {
        if from.get(k) != Some(v) {
            labels.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    for k in from.keys() {
        if !to.contains_key(k) {
            labels.insert(k.clone(), serde_json::Value::Null);
        }
    }
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), rv.into());
    if !labels.is_empty() {
        meta.insert("labels".into(), labels.into());
    }
    if let Some(a) = attachment {
        meta.insert("annotations".into(), serde_json::json!({ ATTACHMENT: a }));
    }
    serde_json::json!({ "metadata": meta })
}

fn configmap_write(
    c: &Cache,
    ns: &str,
    name: &str,
    kind: &str,
    data: BTreeMap<String, String>,
) -> Write {
    match c.get(Kind::ConfigMap, "", name) {
        Some(Obj::ConfigMap(cur)) => {
            let mut o = (**cur).clone();
            o.data = Some(data);
            Write::ConfigMap(Op::Replace(o))
        }
        _ => Write::ConfigMap(Op::Create(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                labels: Some([(RECORD_LABEL.to_string(), kind.to_string())].into()),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        })),
    }
}

/// Write an egress-IP state into the HostSubnets and NetNamespaces that differ from it.
fn egress_writes(c: &Cache, e: &EgressSnapshot, out: &mut Vec<Write>) {
    for (k, o) in c.of_kind(Kind::HostSubnet) {
        let Obj::HostSubnet(h) = o else { continue };
        let want = e.nodes.get(&k.2).cloned().unwrap_or_default();
        let (ips, cidrs): (Vec<String>, Vec<String>) = if want.egress_cidrs.is_empty() {
            (
                want.egress_ips.iter().map(ToString::to_string).collect(),
                Vec::new(),
            )
        } else {
            (
                e.automatic
                    .iter()
                    .filter(|(_, n)| **n == k.2)
                    .map(|(ip, _)| ip.to_string())
                    .collect(),
                want.egress_cidrs.iter().map(ToString::to_string).collect(),
            )
        };
        let ips = (!ips.is_empty()).then_some(ips);
        let cidrs = (!cidrs.is_empty()).then_some(cidrs);
        if h.egress_ips != ips || h.egress_cidrs != cidrs {
            let mut n = (**h).clone();
            n.egress_ips = ips;
            n.egress_cidrs = cidrs;
            out.push(Write::HostSubnet(Op::Replace(n)));
        }
    }
    for (k, o) in c.of_kind(Kind::NetNamespace) {
        let Obj::NetNamespace(nn) = o else { continue };
        let want: Option<Vec<String>> = e
            .namespaces
            .get(&k.2)
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().map(ToString::to_string).collect());
        if nn.egress_ips != want {
            let mut n = (**nn).clone();
            n.egress_ips = want;
            out.push(Write::NetNamespace(Op::Replace(n)));
        }
    }
}

/// A kube client from a kubeconfig file, or inferred (in-cluster, `$KUBECONFIG`).
pub async fn client_for(path: Option<&std::path::Path>) -> Result<Client, StoreError> {
    let config = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                StoreError::Unavailable(format!("--kubeconfig {}: {e}", p.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!("--kubeconfig {}: {e}", p.display()))
                })?
        }
        None => kube::Config::infer().await.map_err(|e| {
            StoreError::Unavailable(format!(
                "no Kubernetes configuration (not in a pod and no kubeconfig; give --kubeconfig): {e}"
            ))
        })?,
    };
    let mut config = config;
    config.connect_timeout = Some(Duration::from_secs(5));
    Client::try_from(config).map_err(|e| StoreError::Unavailable(format!("Kubernetes client: {e}")))
}

/// Follow one kind into the cache until the runtime stops.
async fn follow<K, F>(
    api: Api<K>,
    cfg: watcher::Config,
    kind: Kind,
    cache: Arc<Mutex<Cache>>,
    to_obj: F,
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    F: Fn(K) -> Option<(ObjKey, Obj)>,
{
    use kube::runtime::WatchStreamExt;
    let mut stream = watcher(api, cfg).default_backoff().boxed();
    let mut init: Option<Vec<(ObjKey, Obj)>> = None;
    while let Some(ev) = stream.next().await {
        let mut c = lock(&cache);
        match ev {
            Ok(e) => {
                if c.errors.contains_key(&kind) {
                    c.set_error(kind, None);
                }
                match e {
                    watcher::Event::Init => init = Some(Vec::new()),
                    watcher::Event::InitApply(o) => {
                        if let Some(x) = to_obj(o) {
                            init.get_or_insert_with(Vec::new).push(x);
                        }
                    }
                    watcher::Event::InitDone => {
                        let objs = init.take().unwrap_or_default();
                        c.reset(kind, objs, true);
                    }
                    watcher::Event::Apply(o) => {
                        if let Some((k, x)) = to_obj(o) {
                            c.set(k, Some(x), true);
                        }
                    }
                    watcher::Event::Delete(o) => {
                        if let Some((k, _)) = to_obj(o) {
                            c.set(k, None, true);
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(?kind, error = %e, "kubernetes watch");
                c.set_error(kind, Some(e.to_string()));
            }
        }
    }
}

/// Carry out one object write; the object as stored after it (None: deleted or absent).
async fn execute(client: Client, w: Write) -> Result<Option<(ObjKey, Obj)>, (String, kube::Error)> {
    async fn run<K>(
        api_for: impl Fn(&str) -> Api<K>,
        op: Op<K>,
    ) -> Result<Option<K>, (String, kube::Error)>
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Serialize,
        K::DynamicType: Default,
    {
        let pp = PostParams::default();
        let what = |ns: &str, name: &str| {
            let kind = K::kind(&Default::default()).to_string();
            if ns.is_empty() {
                format!("{kind} {name}")
            } else {
                format!("{kind} {ns}/{name}")
            }
        };
        match op {
            Op::Create(o) => {
                let ns = o.meta().namespace.clone().unwrap_or_default();
                let name = o.meta().name.clone().unwrap_or_default();
                api_for(&ns)
                    .create(&pp, &o)
                    .await
                    .map(Some)
                    .map_err(|e| (format!("create {}", what(&ns, &name)), e))
            }
            Op::Replace(o) => {
                let ns = o.meta().namespace.clone().unwrap_or_default();
                let name = o.meta().name.clone().unwrap_or_default();
                api_for(&ns)
                    .replace(&name, &pp, &o)
                    .await
                    .map(Some)
                    .map_err(|e| (format!("update {}", what(&ns, &name)), e))
            }
            Op::Merge(ns, name, patch) => api_for(&ns)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(Some)
                .map_err(|e| (format!("patch {}", what(&ns, &name)), e)),
            Op::Delete(ns, name) => {
                match api_for(&ns).delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(None),
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err((format!("delete {}", what(&ns, &name)), e)),
                }
            }
        }
    }
    let c = client;
    let cluster = |k: Kind, name: Option<String>| name.map(|n| (k, String::new(), n));
    Ok(match w {
        Write::HostSubnet(op) => run(|_| Api::<HostSubnet>::all(c.clone()), op)
            .await?
            .and_then(|h| {
                cluster(Kind::HostSubnet, h.metadata.name.clone())
                    .map(|k| (k, Obj::HostSubnet(Box::new(h))))
            }),
        Write::NetNamespace(op) => run(|_| Api::<NetNamespace>::all(c.clone()), op)
            .await?
            .and_then(|h| {
                cluster(Kind::NetNamespace, h.metadata.name.clone())
                    .map(|k| (k, Obj::NetNamespace(Box::new(h))))
            }),
        Write::ClusterNetwork(op) => run(|_| Api::<ClusterNetwork>::all(c.clone()), op)
            .await?
            .and_then(|h| {
                cluster(Kind::ClusterNetwork, h.metadata.name.clone())
                    .map(|k| (k, Obj::ClusterNetwork(Box::new(h))))
            }),
        Write::Namespace(op) => run(|_| Api::<Namespace>::all(c.clone()), op)
            .await?
            .map(|n| {
                (
                    (Kind::Namespace, String::new(), n.name_any()),
                    Obj::Namespace(NsView {
                        rv: meta_rv(&n.metadata),
                        labels: labels_of(&n.metadata),
                    }),
                )
            }),
        Write::Pod(op) => run(|ns| Api::<Pod>::namespaced(c.clone(), ns), op)
            .await?
            .map(|p| {
                (
                    (Kind::Pod, p.namespace().unwrap_or_default(), p.name_any()),
                    Obj::Pod(pod_view(&p)),
                )
            }),
        Write::NetworkPolicy(op) => run(|ns| Api::<K8sPolicy>::namespaced(c.clone(), ns), op)
            .await?
            .map(|p| {
                (
                    (
                        Kind::NetworkPolicy,
                        p.namespace().unwrap_or_default(),
                        p.name_any(),
                    ),
                    Obj::NetworkPolicy(Box::new(p)),
                )
            }),
        Write::EgressNetworkPolicy(op) => run(
            |ns| Api::<EgressNetworkPolicy>::namespaced(c.clone(), ns),
            op,
        )
        .await?
        .map(|p| {
            (
                (
                    Kind::EgressNetworkPolicy,
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                ),
                Obj::EgressNetworkPolicy(Box::new(p)),
            )
        }),
        Write::ConfigMap(op) => run(|ns| Api::<ConfigMap>::namespaced(c.clone(), ns), op)
            .await?
            .map(|m| {
                (
                    (Kind::ConfigMap, String::new(), m.name_any()),
                    Obj::ConfigMap(Box::new(m)),
                )
            }),
    })
}

impl Write {
    /// The object it writes (to re-read after a conflict, and to drop after a delete).
    fn target(&self, own_ns: &str) -> ObjKey {
        fn of<T: kube::Resource>(op: &Op<T>) -> (String, String) {
            match op {
                Op::Create(o) | Op::Replace(o) => (
                    o.meta().namespace.clone().unwrap_or_default(),
                    o.meta().name.clone().unwrap_or_default(),
                ),
                Op::Merge(ns, n, _) | Op::Delete(ns, n) => (ns.clone(), n.clone()),
            }
        }
        let (kind, (ns, name)) = match self {
            Write::HostSubnet(op) => (Kind::HostSubnet, of(op)),
            Write::NetNamespace(op) => (Kind::NetNamespace, of(op)),
            Write::Namespace(op) => (Kind::Namespace, of(op)),
            Write::Pod(op) => (Kind::Pod, of(op)),
            Write::NetworkPolicy(op) => (Kind::NetworkPolicy, of(op)),
            Write::EgressNetworkPolicy(op) => (Kind::EgressNetworkPolicy, of(op)),
            Write::ConfigMap(op) => (Kind::ConfigMap, of(op)),
            Write::ClusterNetwork(op) => (Kind::ClusterNetwork, of(op)),
        };
        // flowmesh's ConfigMaps are keyed without their (fixed) namespace.
        let ns = if kind == Kind::ConfigMap && ns == own_ns {
            String::new()
        } else {
            ns
        };
        (kind, ns, name)
    }

    fn is_delete(&self) -> bool {
        matches!(
            self,
            Write::HostSubnet(Op::Delete(..))
                | Write::NetNamespace(Op::Delete(..))
                | Write::Namespace(Op::Delete(..))
                | Write::Pod(Op::Delete(..))
                | Write::NetworkPolicy(Op::Delete(..))
                | Write::EgressNetworkPolicy(Op::Delete(..))
                | Write::ConfigMap(Op::Delete(..))
                | Write::ClusterNetwork(Op::Delete(..))
        )
    }
}

/// Read one object afresh (after a conflict).
async fn reread(client: Client, own_ns: String, k: ObjKey) -> Result<Option<Obj>, kube::Error> {
    let (kind, ns, name) = k;
    let ns = if kind == Kind::ConfigMap { own_ns } else { ns };
    Ok(match kind {
        Kind::HostSubnet => Api::<HostSubnet>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::HostSubnet(Box::new(o))),
        Kind::NetNamespace => Api::<NetNamespace>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::NetNamespace(Box::new(o))),
        Kind::ClusterNetwork => Api::<ClusterNetwork>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::ClusterNetwork(Box::new(o))),
        Kind::Namespace => Api::<Namespace>::all(client)
            .get_opt(&name)
            .await?
            .map(|n| {
                Obj::Namespace(NsView {
                    rv: meta_rv(&n.metadata),
                    labels: labels_of(&n.metadata),
                })
            }),
        Kind::Node => Api::<Node>::all(client)
            .get_opt(&name)
            .await?
            .map(|n| Obj::Node(node_view(&n))),
        Kind::Pod => Api::<Pod>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|p| Obj::Pod(pod_view(&p))),
        Kind::NetworkPolicy => Api::<K8sPolicy>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|o| Obj::NetworkPolicy(Box::new(o))),
        Kind::EgressNetworkPolicy => Api::<EgressNetworkPolicy>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|o| Obj::EgressNetworkPolicy(Box::new(o))),
        Kind::ConfigMap => Api::<ConfigMap>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|o| Obj::ConfigMap(Box::new(o))),
    })
}

impl KubeStore {
    /// Write one change (retrying a conflict with an unrelated writer); the records it changed.
    fn write_change(
        &self,
        g: &Guarded,
        written: &mut BTreeSet<RecordKey>,
    ) -> Result<(), StoreError> {
        let key = g.change.key();
        for _attempt in 0..5 {
            let writes = {
                let mut c = lock(&self.cache);
                if g.expected >= 0 && c.record_revision(&key) != g.expected {
                    return Err(StoreError::Conflict {
                        key: key.as_string(),
                        expected: g.expected,
                        found: c.record_revision(&key),
                    });
                }
                self.plan(&mut c, &g.change)?
            };
            let mut conflict = None;
            for w in writes {
                let target = w.target(&self.cfg.namespace);
                let delete = w.is_delete();
                let before = lock(&self.cache).objs.get(&target).map(Obj::rv);
                match self.block(execute(self.client.clone(), w))? {
                    Ok(after) => {
                        let mut c = lock(&self.cache);
                        // The watch may have brought a newer version meanwhile: keep it.
                        let now = c.objs.get(&target).map(Obj::rv);
                        if now == before {
                            let changed = match after {
                                Some((k, o)) => c.set(k, Some(o), false),
                                None if delete => c.set(target, None, false),
                                None => Vec::new(),
                            };
                            written.extend(changed.into_iter().map(|(k, _)| k));
                        }
                    }
                    Err((what, e)) => match api_error(&what, e) {
                        WriteError::Conflict(m) => {
                            conflict = Some((target, m));
                            break;
                        }
                        WriteError::Other(e) => return Err(e),
                    },
                }
            }
            let Some((target, message)) = conflict else {
                return Ok(());
            };
            // Someone else changed the object: read it again; the record the writer meant to
            // change decides (the loop's check) whether to try again.
            tracing::debug!(%message, "kubernetes write conflict; re-reading");
            let fresh = self
                .block(reread(
                    self.client.clone(),
                    self.cfg.namespace.clone(),
                    target.clone(),
                ))?
                .map_err(|e| StoreError::Unavailable(format!("Kubernetes API server: {e}")))?;
            lock(&self.cache).set(target, fresh, true);
        }
        Err(StoreError::Conflict {
            key: key.as_string(),
            expected: g.expected,
            found: lock(&self.cache).record_revision(&key),
        })
    }
}

impl StateBackend for KubeStore {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn load(&self) -> Result<Vec<Record>, StoreError> {
        Ok(self.list()?.records.into_iter().map(|(r, _)| r).collect())
    }

    fn list(&self) -> Result<Listing, StoreError> {
        self.wait_synced()?;
        Ok(lock(&self.cache).listing())
    }

    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        self.apply_guarded(&unguarded(changes)).map(|_| ())
    }

    fn apply_guarded(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        self.wait_synced()?;
        let batch = coalesce(changes);
        let mut written = BTreeSet::new();
        for (_, g) in &batch {
            self.write_change(g, &mut written)?;
        }
        // As in a transaction, every record of the batch gets the batch's revision.
        let mut c = lock(&self.cache);
        c.revision += 1;
        let rev = c.revision;
        let keys: BTreeSet<RecordKey> = batch.iter().map(|(k, _)| k.clone()).collect();
        for k in &keys {
            if let Some(e) = c.records.get_mut(k) {
                e.1 = rev;
            }
        }
        // Records the API server holds differently from what was written (a pod's labels
        // are the Pod's), and records the writes changed besides, come back as a watched
        // change, newer than the write.
        let mut differ = Vec::new();
        for (k, g) in &batch {
            let held = c.records.get(k).map(|(r, _)| r.clone());
            let meant = match &g.change {
                Change::Put(r) => Some(r.clone()),
                Change::Delete(_) => None,
            };
            if held != meant {
                differ.push((k.clone(), held));
            }
        }
        for k in written.difference(&keys) {
            differ.push((k.clone(), c.records.get(k).map(|(r, _)| r.clone())));
        }
        if !differ.is_empty() {
            c.revision += 1;
            let r = c.revision;
            let mut changes = Vec::new();
            for (k, held) in differ {
                if let Some(e) = c.records.get_mut(&k) {
                    e.1 = r;
                }
                changes.push(match held {
                    Some(rec) => Change::Put(rec),
                    None => Change::Delete(k),
                });
            }
            c.send(WatchEvent::Changes {
                revision: r,
                changes,
            });
        }
        Ok(rev)
    }

    fn apply_guarded_leader(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        if self.fence.current().is_none() {
            return Err(StoreError::NotLeader(
                "this replica does not lead: the controller's own changes are the leader's".into(),
            ));
        }
        self.apply_guarded(changes)
    }

    fn watch(&self, from: Revision) -> Option<Watch> {
        let (tx, events) = mpsc::unbounded_channel();
        let (relist, mut relist_rx) = mpsc::unbounded_channel::<()>();
        {
            let mut c = lock(&self.cache);
            if c.revision > from {
                let _ = tx.send(WatchEvent::Relisted(c.listing()));
            }
            c.subscribers.push(tx.clone());
        }
        let cache = self.cache.clone();
        self.rt.as_ref()?.spawn(async move {
            while relist_rx.recv().await.is_some() {
                let l = lock(&cache).listing();
                if tx.send(WatchEvent::Relisted(l)).is_err() {
                    break;
                }
            }
        });
        Some(Watch { events, relist })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut cfg = crate::core::default_config();
        cfg.mode = Mode::Networkpolicy;
        cfg.vxlan_port = 4790;
        let o = cluster_network_object(&cfg);
        assert_eq!(cluster_network_config(&o).expect("parses"), cfg);
    }

    #[test]
    fn a_node_record_round_trips_through_its_host_subnet() {
        let n = topology::model::NodeRecord {
            info: NodeInfo {
                name: "node-a".into(),
                ip: Ipv4Addr::new(172, 31, 0, 1),
                dpid: 0xac1f_0001,
                subnet: "10.128.2.0/23".parse().expect("cidr"),
            },
            pod_ip_cursor: 7,
        };
        let Write::HostSubnet(Op::Create(h)) = host_subnet_write(&Cache::default(), &n) else {
            panic!("expected a HostSubnet create");
        };
        assert_eq!(node_record(&h), Ok(n));
    }

    #[test]
    fn labels_patch_sets_changed_and_removes_dropped() {
        let from: Labels = [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        let to: Labels = [("a".into(), "1".into()), ("c".into(), "3".into())].into();
        let p = labels_patch("7", &from, &to, None);
        assert_eq!(
            p,
            serde_json::json!({"metadata": {"resourceVersion": "7", "labels": {"b": null, "c": "3"}}})
        );
    }
}
