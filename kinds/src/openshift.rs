//! OpenShift's `network.openshift.io/v1` API objects as Rust types: ClusterNetwork, HostSubnet,
//! NetNamespace (top-level fields, no `spec`, as OpenShift defines them) and
//! EgressNetworkPolicy (`spec`, through kube's `CustomResource` derive). They implement
//! `k8s_openapi::Resource` and `Metadata`, so kube's `Api<T>` reads and writes them, and
//! `flowmeshctl apply -f` reads the same types. [`crds`] builds their CustomResourceDefinitions
//! (checked in as `deploy/crds.yaml`; a test keeps the file equal to what the types generate).
//!
//! Field names and meanings follow OpenShift's `openshift/api` `network/v1` types. Where flowmesh
//! accepts more (a flowmesh extension, noted on the field), it is only ever read from a
//! manifest, never written to the API server.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "network.openshift.io";
/// The API version.
pub const VERSION: &str = "v1";
/// `apiVersion` of every object here.
pub const API_VERSION: &str = "network.openshift.io/v1";

fn api_version() -> String {
    API_VERSION.to_owned()
}

/// Writes `apiVersion`, [`API_VERSION`] when the field was left empty (a `Default` object): the
/// real API server refuses an object without it ("Object 'Kind' is missing").
fn serialize_api_version<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if v.is_empty() { API_VERSION } else { v })
}

/// Implements `k8s_openapi::Resource` and `Metadata` for an object with top-level fields.
macro_rules! top_level_resource {
    ($ty:ident, $kind:literal, $plural:literal) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = API_VERSION;
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = VERSION;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::ClusterResourceScope;
        }

        impl k8s_openapi::ListableResource for $ty {
            const LIST_KIND: &'static str = concat!($kind, "List");
        }

        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl $ty {
            /// The kind, for `#[serde(default)]`.
            fn default_kind() -> String {
                $kind.to_owned()
            }

            /// Writes `kind`, the type's own when the field was left empty (see
            /// `serialize_api_version`).
            fn serialize_kind<S: serde::Serializer>(k: &str, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(if k.is_empty() { $kind } else { k })
            }

            /// The kind.
            pub const KIND: &'static str = $kind;
            /// The resource's plural (its URL path segment).
            pub const PLURAL: &'static str = $plural;
        }
    };
}

/// `ClusterNetwork` (cluster-scoped, OpenShift names it `default`): the cluster's pod and
/// service networks and the plugin mode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// `network.openshift.io/v1`.
    #[serde(default = "api_version", serialize_with = "serialize_api_version")]
    #[schemars(skip)]
    pub api_version: String,
    /// `ClusterNetwork`.
    #[serde(
        default = "ClusterNetwork::default_kind",
        serialize_with = "ClusterNetwork::serialize_kind"
    )]
    #[schemars(skip)]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,
    /// Legacy single range (OpenShift 3.x); `clusterNetworks` replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Legacy host bits per node subnet, with `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostsubnetlength: Option<u32>,
    /// The service network CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_network: Option<String>,
    /// `redhat/openshift-ovs-subnet`, `-multitenant` or `-networkpolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_name: Option<String>,
    /// The pod network ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_networks: Option<Vec<ClusterNetworkEntry>>,
    /// VXLAN UDP port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vxlan_port: Option<u32>,
    /// Overlay MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// flowmesh extension: the mode by its short name (`subnet`, `multitenant`,
    /// `networkpolicy`), instead of `pluginName`. Read from manifests only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub mode: Option<String>,
}
top_level_resource!(ClusterNetwork, "ClusterNetwork", "clusternetworks");

/// One `clusterNetworks[]` range.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterNetworkEntry {
    /// The range (`cidr` is read too).
    #[serde(rename = "CIDR", alias = "cidr", default)]
    pub cidr: String,
    /// Host bits per node subnet (9 gives /23 nodes in a /14).
    #[serde(
        rename = "hostSubnetLength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub host_subnet_length: Option<u32>,
    /// flowmesh extension: the node subnets' prefix length, instead of `hostSubnetLength`.
    /// Read from manifests only.
    #[serde(
        rename = "hostPrefix",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(skip)]
    pub host_prefix: Option<u32>,
}

/// `HostSubnet` (cluster-scoped, one per node, named after it): the node's pod subnet and
/// egress-IP settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostSubnet {
    /// `network.openshift.io/v1`.
    #[serde(default = "api_version", serialize_with = "serialize_api_version")]
    #[schemars(skip)]
    pub api_version: String,
    /// `HostSubnet`.
    #[serde(
        default = "HostSubnet::default_kind",
        serialize_with = "HostSubnet::serialize_kind"
    )]
    #[schemars(skip)]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,
    /// The node's name.
    #[serde(default)]
    pub host: String,
    /// The node's underlay IPv4 address.
    #[serde(rename = "hostIP", default)]
    pub host_ip: String,
    /// The node's pod subnet (CIDR); empty: allocate.
    #[serde(default)]
    pub subnet: String,
    /// Egress IPs this node hosts (manual), in failover order.
    #[serde(rename = "egressIPs", default, skip_serializing_if = "Option::is_none")]
    pub egress_ips: Option<Vec<String>>,
    /// Ranges this node may host egress IPs from (automatic).
    #[serde(
        rename = "egressCIDRs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub egress_cidrs: Option<Vec<String>>,
}
top_level_resource!(HostSubnet, "HostSubnet", "hostsubnets");

/// `NetNamespace` (cluster-scoped, one per namespace, named after it): the namespace's NETID
/// and requested egress IPs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetNamespace {
    /// `network.openshift.io/v1`.
    #[serde(default = "api_version", serialize_with = "serialize_api_version")]
    #[schemars(skip)]
    pub api_version: String,
    /// `NetNamespace`.
    #[serde(
        default = "NetNamespace::default_kind",
        serialize_with = "NetNamespace::serialize_kind"
    )]
    #[schemars(skip)]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,
    /// The namespace's name.
    #[serde(default)]
    pub netname: String,
    /// The NETID (VNID); absent in a manifest: allocate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netid: Option<u32>,
    /// Egress IPs the namespace's outside traffic leaves from.
    #[serde(rename = "egressIPs", default, skip_serializing_if = "Option::is_none")]
    pub egress_ips: Option<Vec<String>>,
}
top_level_resource!(NetNamespace, "NetNamespace", "netnamespaces");

/// `EgressNetworkPolicy` `spec` (namespaced, at most one per project).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "network.openshift.io",
    version = "v1",
    kind = "EgressNetworkPolicy",
    plural = "egressnetworkpolicies",
    namespaced,
    crates(kube_core = "::kube_core")
)]
pub struct EgressNetworkPolicySpec {
    /// The rules, in order; the first match decides.
    #[serde(default)]
    pub egress: Vec<EgressNetworkPolicyRule>,
}

/// One rule of an EgressNetworkPolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EgressNetworkPolicyRule {
    /// `Allow` or `Deny`.
    #[serde(rename = "type", default)]
    pub rule_type: String,
    /// The destination.
    #[serde(default)]
    pub to: EgressNetworkPolicyPeer,
}

/// A rule's destination: exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressNetworkPolicyPeer {
    /// An IPv4 CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_selector: Option<String>,
    /// A DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
}

/// The schema settings kube's `CustomResource` derive uses (structural, inlined).
fn schema_of<T: JsonSchema>() -> apiext::JSONSchemaProps {
    let generate = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .into_generator();
    let mut v = serde_json::to_value(generate.into_root_schema_for::<T>()).unwrap_or_default();
    // Root objects: apiVersion, kind and metadata as kube's derive declares them.
    if let Some(props) = v.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
        props.insert("kind".into(), serde_json::json!({"type": "string"}));
        props.insert("metadata".into(), serde_json::json!({"type": "object"}));
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("title");
        o.remove("description");
    }
    serde_json::from_value(v).unwrap_or_default()
}

fn top_level_crd<T: JsonSchema + k8s_openapi::Resource>(
    singular: &str,
) -> apiext::CustomResourceDefinition {
    apiext::CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{GROUP}", T::URL_PATH_SEGMENT)),
            ..Default::default()
        },
        spec: apiext::CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: apiext::CustomResourceDefinitionNames {
                kind: T::KIND.into(),
                plural: T::URL_PATH_SEGMENT.into(),
                singular: Some(singular.into()),
                ..Default::default()
            },
            scope: "Cluster".into(),
            versions: vec![apiext::CustomResourceDefinitionVersion {
                name: VERSION.into(),
                schema: Some(apiext::CustomResourceValidation {
                    open_api_v3_schema: Some(schema_of::<T>()),
                }),
                served: true,
                storage: true,
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The CustomResourceDefinitions of the four kinds, in a fixed order.
pub fn crds() -> Vec<apiext::CustomResourceDefinition> {
    use kube_core::CustomResourceExt;
    vec![
        top_level_crd::<ClusterNetwork>("clusternetwork"),
        top_level_crd::<HostSubnet>("hostsubnet"),
        top_level_crd::<NetNamespace>("netnamespace"),
        EgressNetworkPolicy::crd(),
    ]
}

/// [`crds`] as one multi-document YAML file (what `deploy/crds.yaml` holds).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::from(
        "# Generated from kinds/src/openshift.rs by `flowmesh-controller --print-crds`;\n\
         # controller/tests/deploy.rs checks that this file equals what the types generate.\n",
    );
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the real API server (issue 29): a `Default`-built object was sent with
    /// `"apiVersion":"","kind":""` and refused ("Object 'Kind' is missing").
    #[test]
    fn default_objects_serialize_their_type() {
        for (v, kind) in [
            (
                serde_json::to_value(ClusterNetwork::default()),
                "ClusterNetwork",
            ),
            (serde_json::to_value(HostSubnet::default()), "HostSubnet"),
            (
                serde_json::to_value(NetNamespace::default()),
                "NetNamespace",
            ),
        ] {
            let v = v.expect("serializes");
            assert_eq!(v["apiVersion"], API_VERSION, "{kind}");
            assert_eq!(v["kind"], kind);
        }
        // A set value is written as it is.
        let h = HostSubnet {
            kind: "HostSubnet".into(),
            api_version: "network.openshift.io/v1".into(),
            ..Default::default()
        };
        let back: HostSubnet =
            serde_json::from_value(serde_json::to_value(&h).expect("to json")).expect("from json");
        assert_eq!(back, h);
    }
}
