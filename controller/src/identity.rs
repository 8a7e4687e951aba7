//! Who a verified certificate names (docs/security.md): a node (`CN=system:node:NAME,
//! O=system:nodes`), an admin, a read-only caller, or nobody in particular. Used by the API's
//! authorization and by the switch listener (a switch's certificate names its node).

use proto::identity::{ADMIN_GROUP, NODES_GROUP, NODE_CN_PREFIX, READ_ONLY_GROUP};

/// An authenticated caller, from its certificate's subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A node (`CN=system:node:NAME, O=system:nodes`).
    Node(String),
    /// An administrator (`O=flowmesh:admin`), by common name.
    Admin(String),
    /// A read-only administrator (`O=flowmesh:read-only`), by common name.
    ReadOnly(String),
    /// A certificate of the cluster CA with none of the above (its subject, for messages).
    NoRole(String),
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Node(n) => write!(f, "node {n}"),
            Identity::Admin(u) => write!(f, "admin {u:?}"),
            Identity::ReadOnly(u) => write!(f, "read-only admin {u:?}"),
            Identity::NoRole(s) => write!(f, "{s:?} (no flowmesh role)"),
        }
    }
}

/// The identity a DER certificate's subject carries (the certificate is assumed verified).
pub fn identity_of(der: &[u8]) -> Result<Identity, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("unreadable client certificate: {e}"))?;
    let subject = cert.subject();
    let cn: Vec<&str> = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect();
    let orgs: Vec<&str> = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .collect();
    let cn0 = cn.first().copied().unwrap_or("");
    if orgs.contains(&NODES_GROUP) {
        if let [only] = cn.as_slice() {
            if let Some(name) = only.strip_prefix(NODE_CN_PREFIX) {
                if !name.is_empty() {
                    return Ok(Identity::Node(name.to_string()));
                }
            }
        }
    }
    if orgs.contains(&ADMIN_GROUP) {
        return Ok(Identity::Admin(cn0.to_string()));
    }
    if orgs.contains(&READ_ONLY_GROUP) {
        return Ok(Identity::ReadOnly(cn0.to_string()));
    }
    Ok(Identity::NoRole(subject.to_string()))
}

/// The node a switch certificate names (`CN=system:node:NAME, O=system:nodes`), if any.
pub fn switch_node_of(der: &[u8]) -> Option<String> {
    match identity_of(der) {
        Ok(Identity::Node(n)) => Some(n),
        _ => None,
    }
}
