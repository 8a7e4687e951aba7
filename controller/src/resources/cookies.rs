//! What a flow's cookie says: the feature and the object it was made for (`dump-flows`,
//! `trace`'s policy verdicts).

use topology::pipeline::cookie;
use topology::ClusterModel;

/// Names the object a cookie belongs to, by hashing the model's objects.
pub fn explain_cookie(m: &ClusterModel, c: u64) -> String {
    let parts = cookie::decode(c);
    let feature = match parts.feature {
        0x01 => "base",
        0x02 => "mesh",
        0x03 => "pod",
        0x04 => "isolation",
        0x05 => "networkpolicy",
        0x06 => "egressfirewall",
        0x0f => "version",
        0 => "none",
        _ => "other",
    };
    let object = match parts.kind {
        1 => m
            .nodes()
            .find(|n| cookie::object_hash(&format!("node/{}", n.name)) == parts.object)
            .map(|n| format!("node {}", n.name)),
        2 => m
            .pods()
            .find(|p| {
                cookie::object_hash(&format!("pod/{}/{}", p.key.namespace, p.key.name))
                    == parts.object
            })
            .map(|p| format!("pod {}", p.key)),
        4 => Some(format!("NETID {}", parts.object)),
        5 => m
            .policies()
            .find(|p| {
                cookie::object_hash(&format!("networkpolicy/{}/{}", p.namespace, p.name))
                    == parts.object
            })
            .map(|p| format!("networkpolicy {}/{}", p.namespace, p.name)),
        6 => m
            .egress_firewalls()
            .find(|f| {
                cookie::object_hash(&format!("egressnetworkpolicy/{}/{}", f.namespace, f.name))
                    == parts.object
            })
            .map(|f| format!("egressnetworkpolicy {}/{}", f.namespace, f.name)),
        _ => None,
    };
    match object {
        Some(o) => format!("{feature}: {o}"),
        None => feature.to_string(),
    }
}
