//! Multi-document YAML manifests (Kubernetes style) parsed into typed objects.
//!
//! Each document is read as its Kubernetes type (k8s-openapi's `Namespace`, `Node`, `Pod`,
//! `NetworkPolicy`) or OpenShift type ([`crate::openshift`]) — the same types the Kubernetes
//! datastore reads from the API server — and then checked.
//!
//! `flowmeshctl apply -f FILE` sends the file's text; the controller parses it with [`parse`] and
//! applies every object in one transaction. This module is pure: it checks shapes, required
//! fields and types, and leaves semantic checks (CIDR overlap, NETID ranges, whether a node
//! exists) to the server. Errors name the document (1-based, counting every `---`-separated
//! document, empty ones included), the kind and name of the object, and what is wrong.
//!
//! Accepted kinds:
//! * `v1 Namespace`, `network.openshift.io/v1 NetNamespace` → [`ManifestObject::Namespace`]
//! * `v1 Node`, `network.openshift.io/v1 HostSubnet` → [`ManifestObject::Node`]
//! * `v1 Pod` → [`ManifestObject::Pod`]
//! * `network.openshift.io/v1 ClusterNetwork` → [`ManifestObject::ClusterNetwork`]
//! * `network.openshift.io/v1 EgressNetworkPolicy` → [`ManifestObject::EgressNetworkPolicy`]
//!   (read with the serde structs of [`crate::egress_firewall`]; errors name the rule's index)
//! * `networking.k8s.io/v1 NetworkPolicy` → [`ManifestObject::NetworkPolicy`] (read as
//!   `k8s_openapi`'s type, then checked field by field, see [`crate::netpol`])
//!
//! `v1 Namespace` and `v1 Pod` keep `metadata.labels`; `v1 Pod` keeps its named container ports
//! (`spec.containers[].ports[]` with a `name`).

use std::fmt;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_yaml::{Mapping, Value};
use topology::model::{ContainerPort, Labels, NetworkPolicy};

use crate::openshift;

/// Annotation carrying a node's datapath id (decimal or `0x` hex).
pub const DATAPATH_ID_ANNOTATION: &str = "flowmesh.io/datapath-id";
/// Annotation carrying a pod's OVS port name.
pub const OVS_PORT_ANNOTATION: &str = "flowmesh.io/ovs-port";
/// Annotation carrying a pod's OpenFlow port number (optional).
pub const OFPORT_ANNOTATION: &str = "flowmesh.io/ofport";

const API_V1: &str = "v1";
const API_OPENSHIFT_NETWORK: &str = "network.openshift.io/v1";
const API_NETWORKING: &str = "networking.k8s.io/v1";

/// One object of a manifest, ready for the server to apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestObject {
    /// Create a namespace (from `Namespace` or `NetNamespace`).
    Namespace(NamespaceSpec),
    /// Add a node (from `Node` or `HostSubnet`).
    Node(NodeSpec),
    /// Attach a pod.
    Pod(PodSpec),
    /// Set the cluster network config.
    ClusterNetwork(ClusterNetworkSpec),
    /// Create or replace a NetworkPolicy (checked, in the model's form).
    NetworkPolicy(NetworkPolicy),
    /// Create or replace a project's EgressNetworkPolicy (checked, in the model's form).
    EgressNetworkPolicy(topology::model::EgressFirewall),
}

impl ManifestObject {
    /// `kind/name` as `flowmeshctl` prints it, e.g. `namespace/foo`, `pod/ns1/web`.
    pub fn describe(&self) -> String {
        match self {
            ManifestObject::Namespace(n) => format!("namespace/{}", n.name),
            ManifestObject::Node(n) => format!("node/{}", n.name),
            ManifestObject::Pod(p) => format!("pod/{}/{}", p.namespace, p.name),
            ManifestObject::ClusterNetwork(c) => format!("clusternetwork/{}", c.name),
            ManifestObject::NetworkPolicy(p) => {
                format!("networkpolicy/{}/{}", p.namespace, p.name)
            }
            ManifestObject::EgressNetworkPolicy(f) => {
                format!("egressnetworkpolicy/{}/{}", f.namespace, f.name)
            }
        }
    }
}

/// A namespace to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceSpec {
    /// Namespace name.
    pub name: String,
    /// Requested NETID (NetNamespace `netid`); the server validates it. `None`: allocate.
    pub netid: Option<u32>,
    /// `metadata.labels` of a `v1 Namespace` (the namespace's labels become exactly these);
    /// `None` for a NetNamespace, which leaves labels alone.
    pub labels: Option<Labels>,
    /// NetNamespace `egressIPs` (absent: none); `None` for a `v1 Namespace`, which leaves
    /// egress IPs alone.
    pub egress_ips: Option<Vec<Ipv4Addr>>,
    /// The annotation `netnamespace.network.openshift.io/multicast-enabled` (`true`/`false`);
    /// `None` when absent, which leaves multicast as it is.
    pub multicast: Option<bool>,
}

/// A node to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Node name.
    pub name: String,
    /// Underlay IPv4 address (Node InternalIP, HostSubnet `hostIP`).
    pub node_ip: Ipv4Addr,
    /// Datapath id of the node's bridge (annotation `flowmesh.io/datapath-id`).
    pub dpid: u64,
    /// HostSubnet `subnet` if given; the server allocates and may validate it.
    pub subnet: Option<String>,
    /// HostSubnet `egressIPs` and `egressCIDRs` (absent: none); `None` for a `v1 Node`,
    /// which leaves them alone.
    pub egress: Option<(Vec<Ipv4Addr>, Vec<topology::Ipv4Cidr>)>,
}

/// A pod to attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSpec {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Node the pod runs on (`spec.nodeName`).
    pub node: String,
    /// Host-side OVS port name (annotation `flowmesh.io/ovs-port`).
    pub port_name: String,
    /// OpenFlow port (annotation `flowmesh.io/ofport`); `None`: the server looks it up.
    pub ofport: Option<u32>,
    /// `metadata.labels`.
    pub labels: Labels,
    /// Named container ports of every container (`spec.containers[].ports[]` with a name).
    pub ports: Vec<ContainerPort>,
}

/// The network plugin mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkMode {
    /// `redhat/openshift-ovs-subnet`: one flat network.
    Subnet,
    /// `redhat/openshift-ovs-multitenant`: namespaces isolated by NETID.
    Multitenant,
    /// `redhat/openshift-ovs-networkpolicy`: NetworkPolicy objects decide.
    NetworkPolicy,
}

impl NetworkMode {
    /// The short name used by the admin API (`subnet`, `multitenant`, `networkpolicy`).
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Subnet => "subnet",
            NetworkMode::Multitenant => "multitenant",
            NetworkMode::NetworkPolicy => "networkpolicy",
        }
    }

    /// Parse a short name or an OpenShift plugin name.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "subnet" | "redhat/openshift-ovs-subnet" => Some(NetworkMode::Subnet),
            "multitenant" | "redhat/openshift-ovs-multitenant" => Some(NetworkMode::Multitenant),
            "networkpolicy" | "redhat/openshift-ovs-networkpolicy" => {
                Some(NetworkMode::NetworkPolicy)
            }
            _ => None,
        }
    }
}

/// One cluster network range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNetworkRange {
    /// IPv4 CIDR, unchecked (the server validates it).
    pub cidr: String,
    /// Prefix length of each node's subnet (`hostPrefix`, or 32 − `hostSubnetLength`).
    pub host_prefix: u32,
}

/// The cluster network config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNetworkSpec {
    /// `metadata.name` (OpenShift uses `default`).
    pub name: String,
    /// Ranges, in order.
    pub cluster_networks: Vec<ClusterNetworkRange>,
    /// Service CIDR, if given.
    pub service_network: Option<String>,
    /// Plugin mode, if given (`pluginName` or `mode`).
    pub mode: Option<NetworkMode>,
    /// VXLAN UDP port, if given.
    pub vxlan_port: Option<u16>,
    /// Overlay MTU, if given.
    pub mtu: Option<u32>,
}

/// A parsed object with the (1-based) index of the document it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    /// 1-based document index in the file.
    pub index: usize,
    /// The object.
    pub object: ManifestObject,
}

/// What is wrong with a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The YAML itself does not parse.
    Yaml(String),
    /// The document is not a mapping.
    NotAnObject,
    /// `apiVersion` or `kind` is missing.
    MissingTypeInfo(&'static str),
    /// The apiVersion/kind pair is not one flowmesh applies.
    UnknownKind {
        /// The document's `apiVersion`.
        api_version: String,
        /// The document's `kind`.
        kind: String,
    },
    /// A required field is missing.
    Missing {
        /// Field path, e.g. `spec.nodeName`.
        field: String,
        /// What it is / how to fill it.
        hint: &'static str,
    },
    /// A field has the wrong YAML type.
    WrongType {
        /// Field path.
        field: String,
        /// The expected type.
        expected: &'static str,
    },
    /// A field is refused; the reason says why (no value repeated).
    Field {
        /// Field path, e.g. `spec.ingress[0].ports[1].endPort`.
        field: String,
        /// Why it is refused.
        reason: String,
    },
    /// A field's value is not acceptable.
    Invalid {
        /// Field path.
        field: String,
        /// The value as written.
        value: String,
        /// Why it is refused.
        reason: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Yaml(detail) => write!(f, "invalid YAML: {detail}"),
            Problem::NotAnObject => write!(f, "not an object (expected a mapping with apiVersion and kind)"),
            Problem::MissingTypeInfo(field) => write!(f, "{field} is missing"),
            Problem::UnknownKind { api_version, kind } => write!(
                f,
                "unsupported kind {kind:?} (apiVersion {api_version:?}); flowmesh applies v1 Namespace, Node and Pod, network.openshift.io/v1 NetNamespace, HostSubnet, ClusterNetwork and EgressNetworkPolicy, and networking.k8s.io/v1 NetworkPolicy"
            ),
            Problem::Field { field, reason } => write!(f, "{field}: {reason}"),
            Problem::Missing { field, hint } => write!(f, "{field} is required ({hint})"),
            Problem::WrongType { field, expected } => write!(f, "{field} must be {expected}"),
            Problem::Invalid { field, value, reason } => {
                write!(f, "{field}: invalid value {value:?}: {reason}")
            }
        }
    }
}

/// A manifest error: which document, which object, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    /// 1-based document index.
    pub index: usize,
    /// The document's kind, when known.
    pub kind: Option<String>,
    /// The object's name (`ns/name` for pods), when known.
    pub name: Option<String>,
    /// What is wrong (boxed to keep `Result`s small).
    pub problem: Box<Problem>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.index)?;
        match (&self.kind, &self.name) {
            (Some(k), Some(n)) => write!(f, " ({k} {n:?})")?,
            (Some(k), None) => write!(f, " ({k})")?,
            (None, Some(n)) => write!(f, " ({n:?})")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.problem)
    }
}

/// Parse a dpid written in decimal or as `0x` hex (e.g. `42`, `0x2a`, `0x000000000000002a`).
pub fn parse_dpid(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.len() <= 16 => u64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => t.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| {
        format!("{text:?} is not a datapath id (write it in decimal or as 0x hex, at most 64 bits, e.g. 0x1a2b)")
    })
}

/// Parse a multi-document manifest into objects, in document order. Empty documents are skipped.
pub fn parse(text: &str) -> Result<Vec<ManifestObject>, ManifestError> {
    Ok(parse_documents(text)?
        .into_iter()
        .map(|d| d.object)
        .collect())
}

/// Like [`parse`], keeping each object's document index (for the server's own messages).
pub fn parse_documents(text: &str) -> Result<Vec<Document>, ManifestError> {
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value = Value::deserialize(de).map_err(|e| ManifestError {
            index,
            kind: None,
            name: None,
            problem: Box::new(Problem::Yaml(e.to_string())),
        })?;
        if value.is_null() {
            continue;
        }
        let object = parse_document(index, &value)?;
        out.push(Document { index, object });
    }
    Ok(out)
}

/// Parse one non-empty document.
fn parse_document(index: usize, value: &Value) -> Result<ManifestObject, ManifestError> {
    let Some(map) = value.as_mapping() else {
        return Err(ManifestError {
            index,
            kind: None,
            name: None,
            problem: Box::new(Problem::NotAnObject),
        });
    };
    let doc = Doc {
        index,
        kind: None,
        name: None,
        root: map,
    };
    let api_version = doc
        .opt_str("apiVersion")?
        .ok_or_else(|| doc.err(Problem::MissingTypeInfo("apiVersion")))?;
    let kind = doc
        .opt_str("kind")?
        .ok_or_else(|| doc.err(Problem::MissingTypeInfo("kind")))?;
    let name = doc.opt_str("metadata.name")?;
    let doc = Doc {
        kind: Some(&kind),
        name: name.as_deref(),
        ..doc
    };
    match (api_version.as_str(), kind.as_str()) {
        (API_V1, "Namespace") => parse_namespace(&doc, value),
        (API_OPENSHIFT_NETWORK, "NetNamespace") => parse_netnamespace(&doc, value),
        (API_V1, "Node") => parse_node(&doc, value),
        (API_OPENSHIFT_NETWORK, "HostSubnet") => parse_hostsubnet(&doc, value),
        (API_V1, "Pod") => parse_pod(&doc, value),
        (API_OPENSHIFT_NETWORK, "ClusterNetwork") => parse_cluster_network(&doc, value),
        (API_NETWORKING, "NetworkPolicy") => parse_network_policy(&doc, value),
        (API_OPENSHIFT_NETWORK, "EgressNetworkPolicy") => parse_egress_network_policy(&doc, value),
        _ => Err(doc.err(Problem::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })),
    }
}

fn parse_namespace(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let o: Namespace = doc.typed(value)?;
    let name = doc.req(
        "metadata.name",
        o.metadata.name.clone(),
        "the namespace name",
    )?;
    doc.check_name("metadata.name", &name)?;
    Ok(ManifestObject::Namespace(NamespaceSpec {
        name,
        netid: None,
        labels: Some(doc.labels(&o.metadata)?),
        egress_ips: None,
        multicast: doc.multicast_annotation(&o.metadata)?,
    }))
}

fn parse_netnamespace(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let o: openshift::NetNamespace = doc.typed(value)?;
    let name = doc.name_or_field(&o.metadata, "netname", &o.netname, "the namespace name")?;
    let egress_ips = doc.ipv4_list("egressIPs", o.egress_ips.as_deref())?;
    Ok(ManifestObject::Namespace(NamespaceSpec {
        name,
        netid: o.netid,
        labels: None,
        egress_ips: Some(egress_ips),
        multicast: doc.multicast_annotation(&o.metadata)?,
    }))
}

fn parse_node(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let o: Node = doc.typed(value)?;
    let name = doc.req("metadata.name", o.metadata.name.clone(), "the node name")?;
    doc.check_name("metadata.name", &name)?;
    let internal = o
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"));
    let Some(internal) = internal else {
        return Err(doc.err(Problem::Missing {
            field: "status.addresses[type=InternalIP]".into(),
            hint: "the node's underlay IPv4 address, as {type: InternalIP, address: A.B.C.D}",
        }));
    };
    let node_ip = doc.ipv4(
        "status.addresses[type=InternalIP].address",
        &internal.address,
    )?;
    Ok(ManifestObject::Node(NodeSpec {
        name,
        node_ip,
        dpid: doc.dpid_annotation(&o.metadata)?,
        subnet: None,
        egress: None,
    }))
}

fn parse_hostsubnet(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let o: openshift::HostSubnet = doc.typed(value)?;
    let name = doc.name_or_field(&o.metadata, "host", &o.host, "the node name")?;
    let ip_text = doc.req(
        "hostIP",
        Some(o.host_ip.clone()),
        "the node's underlay IPv4 address",
    )?;
    let node_ip = doc.ipv4("hostIP", &ip_text)?;
    let egress_ips = doc.ipv4_list("egressIPs", o.egress_ips.as_deref())?;
    let egress_cidrs = o
        .egress_cidrs
        .iter()
        .flatten()
        .map(|t| {
            t.trim().parse::<topology::Ipv4Cidr>().map_err(|e| {
                doc.err(Problem::Invalid {
                    field: "egressCIDRs".into(),
                    value: t.clone(),
                    reason: format!("not an IPv4 CIDR ({e})"),
                })
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ManifestObject::Node(NodeSpec {
        name,
        node_ip,
        dpid: doc.dpid_annotation(&o.metadata)?,
        subnet: Some(o.subnet).filter(|s| !s.is_empty()),
        egress: Some((egress_ips, egress_cidrs)),
    }))
}

fn parse_pod(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let namespace = doc.req(
        "metadata.namespace",
        doc.opt_str("metadata.namespace")?,
        "the pod's namespace",
    )?;
    doc.check_name("metadata.namespace", &namespace)?;
    let name = doc.req(
        "metadata.name",
        doc.opt_str("metadata.name")?,
        "the pod name",
    )?;
    doc.check_name("metadata.name", &name)?;
    let full_name = format!("{namespace}/{name}");
    let doc = Doc {
        name: Some(&full_name),
        ..*doc
    };
    let o: Pod = doc.typed(value)?;
    let node = doc.req(
        "spec.nodeName",
        o.spec.as_ref().and_then(|s| s.node_name.clone()),
        "the node the pod runs on",
    )?;
    let port_name = match annotation(&o.metadata, OVS_PORT_ANNOTATION) {
        Some(p) if !p.is_empty() => p.to_owned(),
        _ => {
            return Err(doc.err(Problem::Missing {
                field: format!("metadata.annotations[{OVS_PORT_ANNOTATION}]"),
                hint: "the pod's OVS port name on the node's bridge, e.g. veth1234",
            }))
        }
    };
    let field = format!("metadata.annotations[{OFPORT_ANNOTATION}]");
    let ofport = match annotation(&o.metadata, OFPORT_ANNOTATION) {
        None => None,
        Some(t) => match t.trim().parse::<u32>() {
            Ok(n) if (1..=0xffff_ff00).contains(&n) => Some(n),
            _ => {
                return Err(doc.err(Problem::Invalid {
                    field,
                    value: t.to_owned(),
                    reason: "an OpenFlow port is a number from 1 to 4294967040".into(),
                }))
            }
        },
    };
    Ok(ManifestObject::Pod(PodSpec {
        namespace,
        name,
        node,
        port_name,
        ofport,
        labels: doc.labels(&o.metadata)?,
        ports: doc.container_ports(o.spec.as_ref())?,
    }))
}

fn parse_network_policy(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let namespace = doc.req(
        "metadata.namespace",
        doc.opt_str("metadata.namespace")?,
        "the policy's namespace",
    )?;
    doc.check_name("metadata.namespace", &namespace)?;
    let name = doc.req(
        "metadata.name",
        doc.opt_str("metadata.name")?,
        "the policy name",
    )?;
    doc.check_name("metadata.name", &name)?;
    let full_name = format!("{namespace}/{name}");
    let doc = Doc {
        name: Some(&full_name),
        ..*doc
    };
    let np: k8s_openapi::api::networking::v1::NetworkPolicy = serde_yaml::from_value(value.clone())
        .map_err(|e| {
            doc.err(Problem::Field {
                field: "spec".into(),
                reason: format!("not a NetworkPolicy: {e}"),
            })
        })?;
    let p = crate::netpol::from_k8s(&namespace, &name, &np).map_err(|e| {
        doc.err(Problem::Field {
            field: e.field,
            reason: e.reason,
        })
    })?;
    Ok(ManifestObject::NetworkPolicy(p))
}

fn parse_egress_network_policy(
    doc: &Doc<'_>,
    value: &Value,
) -> Result<ManifestObject, ManifestError> {
    let namespace = doc.req(
        "metadata.namespace",
        doc.opt_str("metadata.namespace")?,
        "the project's namespace",
    )?;
    doc.check_name("metadata.namespace", &namespace)?;
    let name = doc.req(
        "metadata.name",
        doc.opt_str("metadata.name")?,
        "the policy name",
    )?;
    doc.check_name("metadata.name", &name)?;
    let full_name = format!("{namespace}/{name}");
    let doc = Doc {
        name: Some(&full_name),
        ..*doc
    };
    let obj: openshift::EgressNetworkPolicy =
        serde_yaml::from_value(value.clone()).map_err(|e| {
            doc.err(Problem::Field {
                field: "spec".into(),
                reason: format!("not an EgressNetworkPolicy: {e}"),
            })
        })?;
    let f = crate::egress_firewall::from_api(&namespace, &name, &obj.spec).map_err(|e| {
        doc.err(Problem::Field {
            field: e.field,
            reason: e.reason,
        })
    })?;
    Ok(ManifestObject::EgressNetworkPolicy(f))
}

fn parse_cluster_network(doc: &Doc<'_>, value: &Value) -> Result<ManifestObject, ManifestError> {
    let o: openshift::ClusterNetwork = doc.typed(value)?;
    let name = o
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let mut cluster_networks = Vec::new();
    match &o.cluster_networks {
        None => {
            // OpenShift 3.x legacy single-range fields.
            if let Some(cidr) = o.network.clone() {
                let host_prefix =
                    doc.host_prefix("hostsubnetlength", o.hostsubnetlength, "hostPrefix", None)?;
                cluster_networks.push(ClusterNetworkRange { cidr, host_prefix });
            }
        }
        Some(items) => {
            for (i, item) in items.iter().enumerate() {
                let base = format!("clusterNetworks[{i}]");
                if item.cidr.is_empty() {
                    return Err(doc.err(Problem::Missing {
                        field: format!("{base}.CIDR"),
                        hint: "the range, e.g. 10.128.0.0/14",
                    }));
                }
                let host_prefix = doc.host_prefix(
                    &format!("{base}.hostSubnetLength"),
                    item.host_subnet_length,
                    &format!("{base}.hostPrefix"),
                    item.host_prefix,
                )?;
                cluster_networks.push(ClusterNetworkRange {
                    cidr: item.cidr.clone(),
                    host_prefix,
                });
            }
        }
    }
    if cluster_networks.is_empty() {
        return Err(doc.err(Problem::Missing {
            field: "clusterNetworks".into(),
            hint: "at least one {CIDR, hostSubnetLength} range",
        }));
    }
    let parse_mode = |field: &str, text: String| {
        NetworkMode::parse(&text).ok_or_else(|| {
            doc.err(Problem::Invalid {
                field: field.to_string(),
                value: text,
                reason: "expected redhat/openshift-ovs-subnet, redhat/openshift-ovs-multitenant or redhat/openshift-ovs-networkpolicy (or mode: subnet|multitenant|networkpolicy)".into(),
            })
        })
    };
    let mode = match (o.plugin_name.clone(), o.mode.clone()) {
        (None, None) => None,
        (Some(p), None) => Some(parse_mode("pluginName", p)?),
        (None, Some(m)) => Some(parse_mode("mode", m)?),
        (Some(p), Some(m)) => {
            let a = parse_mode("pluginName", p)?;
            let b = parse_mode("mode", m.clone())?;
            if a != b {
                return Err(doc.err(Problem::Invalid {
                    field: "mode".into(),
                    value: m,
                    reason: format!("disagrees with pluginName ({}); give one", a.as_str()),
                }));
            }
            Some(a)
        }
    };
    let vxlan_port = match o.vxlan_port {
        None => None,
        Some(p) => Some(u16::try_from(p).ok().filter(|p| *p != 0).ok_or_else(|| {
            doc.err(Problem::Invalid {
                field: "vxlanPort".into(),
                value: p.to_string(),
                reason: "a UDP port is 1 to 65535".into(),
            })
        })?),
    };
    Ok(ManifestObject::ClusterNetwork(ClusterNetworkSpec {
        name,
        cluster_networks,
        service_network: o.service_network,
        mode,
        vxlan_port,
        mtu: o.mtu,
    }))
}

/// An annotation's value, if set.
fn annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// One document being read, with what is known about it for error messages.
#[derive(Clone, Copy)]
struct Doc<'a> {
    index: usize,
    kind: Option<&'a str>,
    name: Option<&'a str>,
    root: &'a Mapping,
}

// `Doc` borrows kind/name; these constructors keep the call sites short.
impl Doc<'_> {
    fn err(&self, problem: Problem) -> ManifestError {
        ManifestError {
            index: self.index,
            kind: self.kind.map(str::to_string),
            name: self.name.map(str::to_string),
            problem: Box::new(problem),
        }
    }

    /// The document as its Kubernetes/OpenShift type; a type error names its field.
    fn typed<T: serde::de::DeserializeOwned>(&self, value: &Value) -> Result<T, ManifestError> {
        serde_path_to_error::deserialize(value.clone()).map_err(|e| {
            let path = e.path().to_string();
            let mut reason = e.into_inner().to_string();
            // Annotation and label keys contain dots: name them as `metadata.labels[KEY]`.
            let field = ["metadata.annotations", "metadata.labels"]
                .iter()
                .find_map(|m| {
                    let key = path.strip_prefix(m)?.strip_prefix('.')?;
                    reason.push_str(" (values are strings: quote numbers and booleans)");
                    Some(format!("{m}[{key}]"))
                })
                .unwrap_or(path);
            self.err(Problem::Field {
                field: if field == "." {
                    self.kind.unwrap_or("document").to_string()
                } else {
                    field
                },
                reason,
            })
        })
    }

    /// A top-level string (apiVersion, kind, metadata.name/namespace) read before the type is
    /// known.
    fn opt_str(&self, path: &str) -> Result<Option<String>, ManifestError> {
        let mut parts = path.split('.');
        let mut cur = parts.next().and_then(|p| self.root.get(p));
        for p in parts {
            cur = cur.and_then(Value::as_mapping).and_then(|m| m.get(p));
        }
        match cur {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.err(Problem::WrongType {
                field: path.to_string(),
                expected: "a string",
            })),
        }
    }

    /// `value` when present and non-empty, else a Missing error.
    fn req(
        &self,
        field: &str,
        value: Option<String>,
        hint: &'static str,
    ) -> Result<String, ManifestError> {
        match value {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(self.err(Problem::Missing {
                field: field.to_string(),
                hint,
            })),
        }
    }

    /// The name of an OpenShift object that repeats it in a field (`netname`, `host`): either
    /// may be given; both must agree.
    fn name_or_field(
        &self,
        meta: &ObjectMeta,
        field: &str,
        value: &str,
        hint: &'static str,
    ) -> Result<String, ManifestError> {
        let name = match (meta.name.as_deref().filter(|n| !n.is_empty()), value) {
            (Some(m), v) if !v.is_empty() && m != v => {
                return Err(self.err(Problem::Invalid {
                    field: field.into(),
                    value: v.to_owned(),
                    reason: format!("must equal metadata.name {m:?}"),
                }))
            }
            (_, v) if !v.is_empty() => v.to_owned(),
            (Some(m), _) => m.to_owned(),
            (None, _) => {
                return Err(self.err(Problem::Missing {
                    field: field.into(),
                    hint,
                }))
            }
        };
        self.check_name(field, &name)?;
        Ok(name)
    }

    /// `metadata.labels`, keys and values checked (absent: none).
    fn labels(&self, meta: &ObjectMeta) -> Result<Labels, ManifestError> {
        let labels: Labels = meta
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        crate::netpol::check_label_map(&labels, "metadata.labels").map_err(|e| {
            self.err(Problem::Field {
                field: e.field,
                reason: e.reason,
            })
        })?;
        Ok(labels)
    }

    /// The named ports of every container (`spec.containers[].ports[]` with a name).
    fn container_ports(
        &self,
        spec: Option<&k8s_openapi::api::core::v1::PodSpec>,
    ) -> Result<Vec<ContainerPort>, ManifestError> {
        let mut out = Vec::new();
        for (i, c) in spec
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            for (j, p) in c.ports.iter().flatten().enumerate() {
                let Some(name) = p.name.clone() else {
                    continue;
                };
                let field = |f: &str| format!("spec.containers[{i}].ports[{j}].{f}");
                let bad = |f: &str, reason: String| {
                    self.err(Problem::Field {
                        field: field(f),
                        reason,
                    })
                };
                topology::model::policy::check_port_name(&name).map_err(|r| bad("name", r))?;
                let port = u16::try_from(p.container_port)
                    .ok()
                    .filter(|n| *n != 0)
                    .ok_or_else(|| {
                        bad("containerPort", "must be a port number (1-65535)".into())
                    })?;
                let protocol = crate::netpol::protocol(p.protocol.as_deref(), &field("protocol"))
                    .map_err(|e| bad("protocol", e.reason))?;
                if out.iter().any(|c: &ContainerPort| c.name == name) {
                    return Err(bad("name", format!("port name {name:?} is used twice")));
                }
                out.push(ContainerPort {
                    name,
                    protocol,
                    port,
                });
            }
        }
        Ok(out)
    }

    /// The multicast annotation of a Namespace or NetNamespace, if present.
    fn multicast_annotation(&self, meta: &ObjectMeta) -> Result<Option<bool>, ManifestError> {
        use topology::model::multicast::{parse_multicast_value, MULTICAST_ANNOTATION};
        match annotation(meta, MULTICAST_ANNOTATION) {
            None => Ok(None),
            Some(v) => parse_multicast_value(v).map(Some).map_err(|_| {
                self.err(Problem::Invalid {
                    field: format!("metadata.annotations[{MULTICAST_ANNOTATION}]"),
                    value: v.to_owned(),
                    reason: "must be \"true\" or \"false\"".into(),
                })
            }),
        }
    }

    fn dpid_annotation(&self, meta: &ObjectMeta) -> Result<u64, ManifestError> {
        let field = format!("metadata.annotations[{DATAPATH_ID_ANNOTATION}]");
        match annotation(meta, DATAPATH_ID_ANNOTATION) {
            None => Err(self.err(Problem::Missing {
                field,
                hint: "the datapath id of the node's bridge, decimal or 0x hex, e.g. \"0x1\"",
            })),
            Some(t) => parse_dpid(t).map_err(|reason| {
                self.err(Problem::Invalid {
                    field,
                    value: t.to_owned(),
                    reason,
                })
            }),
        }
    }

    fn ipv4(&self, field: &str, text: &str) -> Result<Ipv4Addr, ManifestError> {
        text.trim().parse().map_err(|_| {
            self.err(Problem::Invalid {
                field: field.to_string(),
                value: text.to_string(),
                reason: "not an IPv4 address".into(),
            })
        })
    }

    fn ipv4_list(
        &self,
        field: &str,
        list: Option<&[String]>,
    ) -> Result<Vec<Ipv4Addr>, ManifestError> {
        list.unwrap_or_default()
            .iter()
            .map(|t| self.ipv4(field, t))
            .collect()
    }

    /// Object names follow Kubernetes DNS labels loosely: non-empty, no `/`, no whitespace.
    fn check_name(&self, field: &str, name: &str) -> Result<(), ManifestError> {
        if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
            return Err(self.err(Problem::Invalid {
                field: field.to_string(),
                value: name.to_string(),
                reason: "a name must be non-empty, without '/' or spaces".into(),
            }));
        }
        Ok(())
    }

    /// The subnet prefix length from `hostSubnetLength` (host bits) or `hostPrefix`.
    fn host_prefix(
        &self,
        hsl_field: &str,
        hsl: Option<u32>,
        prefix_field: &str,
        prefix: Option<u32>,
    ) -> Result<u32, ManifestError> {
        let bad = |field: &str, v: u32, reason: &str| {
            self.err(Problem::Invalid {
                field: field.to_string(),
                value: v.to_string(),
                reason: reason.to_string(),
            })
        };
        let from_hsl = match hsl {
            None => None,
            Some(v) if (1..=31).contains(&v) => Some(32 - v),
            Some(v) => return Err(bad(hsl_field, v, "host bits must be 1 to 31")),
        };
        let from_prefix = match prefix {
            None => None,
            Some(v) if (1..=31).contains(&v) => Some(v),
            Some(v) => return Err(bad(prefix_field, v, "a prefix length must be 1 to 31")),
        };
        match (from_hsl, from_prefix) {
            (Some(a), Some(b)) if a != b => Err(bad(
                prefix_field,
                b,
                &format!("disagrees with {hsl_field} (which means /{a}); give one"),
            )),
            (Some(a), _) | (None, Some(a)) => Ok(a),
            (None, None) => Err(self.err(Problem::Missing {
                field: hsl_field.to_string(),
                hint: "host bits per node subnet, e.g. 9 for /23 (or hostPrefix: 23)",
            })),
        }
    }
}

/// The cluster network config a ClusterNetwork object asks for: its fields over `current`'s,
/// validated (the error says which field is wrong).
pub fn to_config(
    c: &ClusterNetworkSpec,
    current: &topology::ClusterNetworkConfig,
) -> Result<topology::ClusterNetworkConfig, String> {
    let mut ranges = Vec::new();
    for r in &c.cluster_networks {
        let cidr: topology::Ipv4Cidr = r
            .cidr
            .parse()
            .map_err(|e| format!("clusterNetworks cidr {:?}: {e}", r.cidr))?;
        let host_prefix = u8::try_from(r.host_prefix)
            .map_err(|_| format!("hostPrefix {} is out of range", r.host_prefix))?;
        ranges.push(topology::ClusterNetworkEntry { cidr, host_prefix });
    }
    let service_network = match &c.service_network {
        Some(s) => s
            .parse()
            .map_err(|e| format!("serviceNetwork {s:?}: {e}"))?,
        None => current.service_network,
    };
    let cfg = topology::ClusterNetworkConfig {
        cluster_networks: if ranges.is_empty() {
            current.cluster_networks.clone()
        } else {
            ranges
        },
        service_network,
        mode: match c.mode {
            Some(NetworkMode::Subnet) => topology::Mode::Subnet,
            Some(NetworkMode::Multitenant) => topology::Mode::Multitenant,
            Some(NetworkMode::NetworkPolicy) => topology::Mode::Networkpolicy,
            None => current.mode,
        },
        vxlan_port: c.vxlan_port.unwrap_or(current.vxlan_port),
        mtu: c.mtu.unwrap_or(current.mtu),
    };
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

#[cfg(test)]
mod tests;
