//! What the outside world calls or watches: the admin and node gRPC services ([`grpc`]),
//! their authentication and authorization ([`auth`]), what a node may assert
//! ([`node_guard`]), the node's egress-IP watch ([`egress_watch`]) and audit-logging calls
//! ([`audit_watch`]), and the Kubernetes master's reactions to API objects ([`kube_sync`]).
//! Each turns a request into an operation of [`crate::resources`]; nothing below imports it.

pub mod audit_watch;
pub mod auth;
pub mod egress_watch;
pub mod grpc;
pub mod kube_sync;
pub mod node_guard;
