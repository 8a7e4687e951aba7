//! flowmesh's own API objects (`flowmesh.io/v1`), for the Kubernetes datastore: data only the
//! controller writes. [`PodAttachment`] (cluster-scoped) holds where a pod is plugged in —
//! node, OVS port, OpenFlow port, IP — so that no tenant can write it: a tenant's rights are
//! namespaced, and only flowmesh's controller is granted this cluster-scoped resource
//! (`deploy/kubernetes/10-rbac.yaml`). [`crds`] builds the CustomResourceDefinition (checked in
//! as `deploy/kubernetes/05-crds.yaml`; a test keeps the file equal to what the types generate).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The API group.
pub const GROUP: &str = "flowmesh.io";

/// Where one pod is attached, written by the controller when the pod's node plugs it in.
/// Named `NAMESPACE.POD` (see `attachment_name`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "flowmesh.io",
    version = "v1",
    kind = "PodAttachment",
    plural = "podattachments",
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.namespace"}"#,
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.pod"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"IP","type":"string","jsonPath":".spec.ip"}"#,
    printcolumn = r#"{"name":"OFPort","type":"integer","jsonPath":".spec.ofport"}"#,
    crates(kube_core = "::kube_core")
)]
#[serde(rename_all = "camelCase")]
pub struct PodAttachmentSpec {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The Pod object's uid when it was attached: a Pod deleted and created again under the
    /// same name is another pod, which this attachment does not describe.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_uid: String,
    /// The node (must equal the Pod's `spec.nodeName`).
    pub node: String,
    /// The host-side OVS port.
    pub port_name: String,
    /// Its OpenFlow port number.
    pub ofport: u32,
    /// The pod's IPv4 address.
    pub ip: String,
}

/// The longest object name Kubernetes accepts (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The name of pod `namespace/pod`'s [`PodAttachment`]: `NAMESPACE.POD` (a namespace name has
/// no dot, so the first dot separates them). When that is longer than an object name may be,
/// the pod part is shortened and the SHA-256 of the full pair appended, so distinct pods never
/// share a name by accident or by choice.
pub fn attachment_name(namespace: &str, pod: &str) -> String {
    let full = format!("{namespace}.{pod}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let digest = sha2::Sha256::digest(full.as_bytes());
    let hash = hex::encode(&digest[..16]);
    // NAMESPACE "." PREFIX "-" HASH, within MAX_NAME; names are ASCII.
    let keep = MAX_NAME - namespace.len() - 2 - hash.len();
    let prefix = pod[..keep.min(pod.len())].trim_end_matches(['-', '.']);
    format!("{namespace}.{prefix}-{hash}")
}

/// The CustomResourceDefinitions of flowmesh's own kinds.
pub fn crds() -> Vec<apiext::CustomResourceDefinition> {
    use kube_core::CustomResourceExt;
    // Without `namespaced`, the derive declares the kind cluster-scoped.
    vec![PodAttachment::crd()]
}

/// [`crds`] as one multi-document YAML file (what `deploy/kubernetes/05-crds.yaml` holds).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::from(
        "# flowmesh's own kinds (every cluster, OpenShift too). Generated from kinds/src/flowmesh.rs\n\
         # by `flowmesh-controller --print-flowmesh-crds`; controller/tests/deploy.rs checks that\n\
         # this file equals what the types generate.\n",
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

    #[test]
    fn attachment_names_are_object_names_and_distinct() {
        assert_eq!(attachment_name("ns1", "web-0"), "ns1.web-0");
        let long_a = "a".repeat(253);
        let mut long_b = "a".repeat(252);
        long_b.push('b');
        let ns = "n".repeat(63);
        let (a, b) = (attachment_name(&ns, &long_a), attachment_name(&ns, &long_b));
        assert_ne!(a, b);
        for n in [&a, &b] {
            assert!(n.len() <= MAX_NAME, "{n}");
            assert!(n.starts_with(&format!("{ns}.")), "{n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
                "{n}"
            );
        }
        // A pod whose name ends in separators where it is cut still gives a valid name.
        let dashes = format!("{}{}", "x".repeat(150), "-".repeat(120));
        let n = attachment_name(&ns, &dashes);
        assert!(n.len() <= MAX_NAME && !n.contains("-."), "{n}");
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_its_columns() {
        let crds = crds();
        assert_eq!(crds.len(), 1);
        let c = &crds[0];
        assert_eq!(
            c.metadata.name.as_deref(),
            Some("podattachments.flowmesh.io")
        );
        assert_eq!(c.spec.scope, "Cluster");
        let v = &c.spec.versions[0];
        let props = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .and_then(|p| p.get("spec"))
            .and_then(|s| s.properties.as_ref())
            .expect("spec properties");
        for f in [
            "namespace",
            "pod",
            "podUid",
            "node",
            "portName",
            "ofport",
            "ip",
        ] {
            assert!(props.contains_key(f), "{f}: {props:?}");
        }
        assert_eq!(v.additional_printer_columns.as_ref().map(Vec::len), Some(5));
    }
}
