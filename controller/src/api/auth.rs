//! Who is calling, and what they may do: client-certificate identities of the gRPC APIs and of
//! switches, and the per-service/per-method authorization layer. What a node may assert within
//! the node API is `node_guard.rs`.
//!
//! Identities come from the subject of the verified client certificate (docs/security.md):
//!
//! | subject                                   | identity                   |
//! |-------------------------------------------|----------------------------|
//! | `CN=system:node:NAME, O=system:nodes`     | node NAME (node API, its switch) |
//! | `O=flowmesh:admin` (any CN)               | admin: every admin RPC     |
//! | `O=flowmesh:read-only` (any CN)           | read-only: Get/List/Dump/Trace/Watch |
//! | anything else                             | authenticated, no role: health only |

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;

pub use crate::identity::{identity_of, switch_node_of, Identity};
pub use proto::identity::{ADMIN_GROUP, NODES_GROUP, NODE_CN_PREFIX, READ_ONLY_GROUP};

/// Admin RPCs a read-only caller may use (everything else is a change and needs admin).
/// An allowlist: an RPC added later is refused to read-only callers until listed here.
pub const READ_ONLY_METHODS: &[&str] = &[
    "GetClusterNetwork",
    "ListHostSubnets",
    "ListNetNamespaces",
    "ListPods",
    "ListSwitches",
    "GetControllers",
    "DumpFlows",
    "Trace",
    "WatchEvents",
    "ListNetworkPolicies",
    "ListEgressNetworkPolicies",
];

const ADMIN_SERVICE: &str = "flowmesh.admin.v1.Admin";
const NODE_SERVICE: &str = "flowmesh.node.v1.NodeApi";

/// The authenticated caller of a request, put into the request's extensions by [`Authz`]
/// (absent when the listener is plaintext on loopback: no authentication there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(pub Identity);

/// Whether `who` may call the gRPC method at `path` (`/package.Service/Method`).
pub fn authorize(path: &str, who: &Identity) -> Result<(), Status> {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or("");
    let method = parts.next().unwrap_or("");
    let deny = |why: String| Err(Status::permission_denied(why));
    match service {
        NODE_SERVICE => match who {
            Identity::Node(_) => Ok(()),
            other => deny(format!(
                "{other} may not use the node API: it takes only node certificates \
                 (CN=system:node:NAME, O=system:nodes)"
            )),
        },
        ADMIN_SERVICE => match who {
            Identity::Admin(_) => Ok(()),
            Identity::ReadOnly(_) if READ_ONLY_METHODS.contains(&method) => Ok(()),
            Identity::ReadOnly(u) => deny(format!(
                "read-only admin {u:?} may not call {method}: it changes state \
                 (needs a certificate with O={ADMIN_GROUP})"
            )),
            other => deny(format!(
                "{other} may not use the admin API: it takes certificates with \
                 O={ADMIN_GROUP} or O={READ_ONLY_GROUP}"
            )),
        },
        // Health and reflection reveal nothing beyond the API shape: any client certificate
        // of the cluster CA.
        "grpc.health.v1.Health"
        | "grpc.reflection.v1.ServerReflection"
        | "grpc.reflection.v1alpha.ServerReflection" => Ok(()),
        other => deny(format!("unknown service {other:?}")),
    }
}

/// A tower layer over the gRPC router: with `enforce`, every request must come over TLS with
/// a verified client certificate whose identity may call the method ([`authorize`]); the
/// caller goes into the request extensions as [`Caller`]. Without `enforce` (plaintext on
/// loopback) requests pass unchanged.
#[derive(Clone, Copy, Debug)]
pub struct AuthzLayer {
    /// Whether to authenticate and authorize.
    pub enforce: bool,
}

impl<S> tower::Layer<S> for AuthzLayer {
    type Service = Authz<S>;
    fn layer(&self, inner: S) -> Authz<S> {
        Authz {
            inner,
            enforce: self.enforce,
        }
    }
}

/// The service of [`AuthzLayer`].
#[derive(Clone, Debug)]
pub struct Authz<S> {
    inner: S,
    enforce: bool,
}

fn caller_of<B>(req: &http::Request<B>) -> Result<Identity, Status> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let certs = req
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(|i| i.peer_certs())
        .ok_or_else(|| Status::unauthenticated("a client certificate is required"))?;
    let leaf = certs
        .first()
        .ok_or_else(|| Status::unauthenticated("a client certificate is required"))?;
    identity_of(leaf.as_ref()).map_err(Status::unauthenticated)
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> tower::Service<http::Request<B>> for Authz<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Send,
    S::Future: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if !self.enforce {
            return Box::pin(self.inner.call(req));
        }
        let path = req.uri().path().to_string();
        let verdict = caller_of(&req).and_then(|who| authorize(&path, &who).map(|()| who));
        match verdict {
            Ok(who) => {
                tracing::debug!(caller = %who, %path, "authorized");
                req.extensions_mut().insert(Caller(who));
                Box::pin(self.inner.call(req))
            }
            Err(status) => {
                tracing::warn!(%path, code = ?status.code(), reason = status.message(), "gRPC call refused");
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn cert(cn: &str, orgs: &[&str]) -> Vec<u8> {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        let key = KeyPair::generate().expect("key");
        p.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn identities_from_subjects() {
        assert_eq!(
            identity_of(&cert("system:node:node1", &[NODES_GROUP])),
            Ok(Identity::Node("node1".into()))
        );
        // The node prefix without the group, or the group without the prefix, is no node.
        assert!(matches!(
            identity_of(&cert("system:node:node1", &[])),
            Ok(Identity::NoRole(_))
        ));
        assert!(matches!(
            identity_of(&cert("node1", &[NODES_GROUP])),
            Ok(Identity::NoRole(_))
        ));
        assert_eq!(
            identity_of(&cert("alice", &[ADMIN_GROUP])),
            Ok(Identity::Admin("alice".into()))
        );
        assert_eq!(
            identity_of(&cert("bob", &[READ_ONLY_GROUP])),
            Ok(Identity::ReadOnly("bob".into()))
        );
        assert!(identity_of(b"not a certificate").is_err());
        assert_eq!(
            switch_node_of(&cert("system:node:n2", &[NODES_GROUP])),
            Some("n2".into())
        );
        assert_eq!(switch_node_of(&cert("alice", &[ADMIN_GROUP])), None);
    }

    #[test]
    fn method_rules() {
        let node = Identity::Node("n1".into());
        let admin = Identity::Admin("a".into());
        let ro = Identity::ReadOnly("r".into());
        let none = Identity::NoRole("CN=x".into());
        let reg = "/flowmesh.node.v1.NodeApi/RegisterNode";
        assert!(authorize(reg, &node).is_ok());
        for who in [&admin, &ro, &none] {
            assert_eq!(
                authorize(reg, who).map_err(|s| s.code()),
                Err(tonic::Code::PermissionDenied)
            );
        }
        let list = "/flowmesh.admin.v1.Admin/ListPods";
        let add = "/flowmesh.admin.v1.Admin/AddNode";
        assert!(authorize(list, &admin).is_ok());
        assert!(authorize(add, &admin).is_ok());
        assert!(authorize(list, &ro).is_ok());
        assert!(authorize(add, &ro).is_err());
        assert!(authorize(list, &node).is_err());
        assert!(authorize(list, &none).is_err());
        assert!(authorize("/grpc.health.v1.Health/Check", &none).is_ok());
        assert!(authorize("/other.Service/X", &admin).is_err());
    }

    /// Every admin RPC a read-only caller may use reads only: its name says so.
    #[test]
    fn read_only_methods_only_read() {
        for m in READ_ONLY_METHODS {
            assert!(
                ["Get", "List", "Dump", "Trace", "Watch"]
                    .iter()
                    .any(|p| m.starts_with(p)),
                "{m}"
            );
        }
    }
}
