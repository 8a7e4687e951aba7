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

/// Refuses a node stream for an empty or unregistered node name (`call` names the RPC).
async fn require_registered(
    core: &crate::core::CoreHandle,
    node: &str,
    call: &str,
) -> Result<(), tonic::Status> {
    if node.is_empty() {
        return Err(tonic::Status::invalid_argument(format!(
            "{call}: node name is empty"
        )));
    }
    let name = node.to_owned();
    let known = core.read(move |c| c.model.node(&name).is_some()).await?;
    if !known {
        return Err(
            crate::error::ApiError::NotFound(format!("node {node:?} is not registered")).into(),
        );
    }
    Ok(())
}
