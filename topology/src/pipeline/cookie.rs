//! Cookie layout: the one place that says how a flow's cookie names its provenance.
//!
//! ```text
//!  63      56 55      48 47             32 31                              0
//! +----------+----------+-----------------+---------------------------------+
//! | feature  |  kind    |   reserved (0)  |  object id (hash or NETID)      |
//! +----------+----------+-----------------+---------------------------------+
//! ```
//!
//! * feature: which part of the pipeline made the flow ([`Feature`]).
//! * kind: what kind of object it serves ([`ObjectKind`]).
//! * object id: the first 4 bytes of SHA-256 of the object's name (`node/NAME`,
//!   `pod/NAMESPACE/NAME`, `namespace/NAME`, `networkpolicy/NAMESPACE/NAME`, `egressnetworkpolicy/NAMESPACE/NAME`), or the NETID itself for NETID flows.
//!
//! All flows of pod `ns/p`: `ovs-ofctl dump-flows br0 --cookie=0x0302000012345678/0xffff0000ffffffff`
//! where `0x12345678` is [`object_hash`]`("pod/ns/p")`; every flow about an object, whatever
//! the feature: `--cookie=0x12345678/0xffffffff`.

use sha2::{Digest, Sha256};

/// Mask of the feature byte.
pub const FEATURE_MASK: u64 = 0xff00_0000_0000_0000;
/// Mask of the object kind byte.
pub const KIND_MASK: u64 = 0x00ff_0000_0000_0000;
/// Mask of the object id.
pub const OBJECT_MASK: u64 = 0x0000_0000_ffff_ffff;

/// The feature that made a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Feature {
    /// The node's own static pipeline (classifier, routing, defaults).
    Base = 0x01,
    /// VXLAN mesh: flows for a remote node (tables 10, 50, 90).
    Mesh = 0x02,
    /// A local pod (tables 20, 25, 40, 70).
    Pod = 0x03,
    /// NETID isolation (table 80).
    Isolation = 0x04,
    /// NetworkPolicy (tables 27, 30, 80).
    NetworkPolicy = 0x05,
    /// Egress firewall (table 100).
    EgressFirewall = 0x06,
    /// Egress IP (reserved).
    EgressIp = 0x07,
    /// Multicast (reserved).
    Multicast = 0x08,
    /// Audit logging of NetworkPolicy verdicts (tables 27, 80): the logging twin of a verdict
    /// flow, with the verdict flow's kind and object.
    Audit = 0x09,
    /// The pipeline version marker (table 253).
    Version = 0x0f,
}

/// The kind of object a flow serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ObjectKind {
    /// No particular object.
    None = 0x00,
    /// A node.
    Node = 0x01,
    /// A pod.
    Pod = 0x02,
    /// A namespace.
    Namespace = 0x03,
    /// A NETID (the object id is the NETID).
    NetId = 0x04,
    /// A NetworkPolicy (`networkpolicy/NAMESPACE/NAME`).
    Policy = 0x05,
    /// An EgressNetworkPolicy (`egressnetworkpolicy/NAMESPACE/NAME`).
    EgressFirewall = 0x06,
}

/// The first 4 bytes of SHA-256 of `name`, big-endian.
pub fn object_hash(name: &str) -> u32 {
    let d = Sha256::digest(name.as_bytes());
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// A cookie from its parts.
pub fn cookie(feature: Feature, kind: ObjectKind, object: u32) -> u64 {
    ((feature as u64) << 56) | ((kind as u64) << 48) | object as u64
}

/// The cookie of a node's flows for `feature`.
pub fn node_cookie(feature: Feature, node: &str) -> u64 {
    cookie(
        feature,
        ObjectKind::Node,
        object_hash(&format!("node/{node}")),
    )
}

/// The cookie of a pod's flows.
pub fn pod_cookie(namespace: &str, name: &str) -> u64 {
    cookie(
        Feature::Pod,
        ObjectKind::Pod,
        object_hash(&format!("pod/{namespace}/{name}")),
    )
}

/// The cookie of a NetworkPolicy's flows.
pub fn policy_cookie(namespace: &str, name: &str) -> u64 {
    cookie(
        Feature::NetworkPolicy,
        ObjectKind::Policy,
        object_hash(&format!("networkpolicy/{namespace}/{name}")),
    )
}

/// The cookie of a NETID's isolation flows.
pub fn netid_cookie(netid: u32) -> u64 {
    cookie(Feature::Isolation, ObjectKind::NetId, netid)
}

/// `(value, mask)` selecting every flow of one object of one kind, any feature.
pub fn object_filter(kind: ObjectKind, object: u32) -> (u64, u64) {
    (
        ((kind as u64) << 48) | object as u64,
        KIND_MASK | OBJECT_MASK,
    )
}

/// A cookie split into its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieParts {
    /// Feature byte.
    pub feature: u8,
    /// Kind byte.
    pub kind: u8,
    /// Object id.
    pub object: u32,
}

/// Split a cookie.
pub fn decode(c: u64) -> CookieParts {
    CookieParts {
        feature: (c >> 56) as u8,
        kind: (c >> 48) as u8,
        object: c as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let c = pod_cookie("ns", "p");
        let p = decode(c);
        assert_eq!(p.feature, Feature::Pod as u8);
        assert_eq!(p.kind, ObjectKind::Pod as u8);
        assert_eq!(p.object, object_hash("pod/ns/p"));
        let (v, m) = object_filter(ObjectKind::Pod, p.object);
        assert_eq!(c & m, v);
        assert_eq!(netid_cookie(0x123456), 0x0404_0000_0012_3456);
        assert_ne!(object_hash("pod/ns/p"), object_hash("pod/ns/q"));
    }
}
