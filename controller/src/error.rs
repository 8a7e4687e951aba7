//! Errors the controller's APIs return: each names the object and says what to do, and maps to
//! a gRPC status code.

use topology::ModelError;

/// An API-level error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The object already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// The request is malformed or refused by validation.
    #[error("{0}")]
    Invalid(String),
    /// The request is valid but refused in the current state (mode, reserved values, ...).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A range is exhausted.
    #[error("{0}")]
    Exhausted(String),
    /// A switch or the store is unavailable; retrying later may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        let msg = e.to_string();
        match e {
            ModelError::UnknownNode(n) => ApiError::NotFound(format!(
                "node {n:?} not found (add it with: flowmeshctl node add {n} --ip IP --dpid DPID)"
            )),
            ModelError::UnknownNamespace(n) => ApiError::NotFound(format!(
                "namespace {n:?} not found (create it with: flowmeshctl namespace create {n})"
            )),
            ModelError::UnknownPod(p) => ApiError::NotFound(format!("pod {p} not found")),
            ModelError::PodExists(p) => ApiError::AlreadyExists(format!(
                "pod {p} already exists (detach it first: flowmeshctl pod detach --namespace {} --name {})",
                p.namespace, p.name
            )),
            ModelError::Alloc { .. } => ApiError::Exhausted(msg),
            ModelError::ModeRefuses { .. }
            | ModelError::DefaultNamespace(_)
            | ModelError::SharedNetId { .. } => ApiError::FailedPrecondition(msg),
            ModelError::UnknownPolicy { namespace, name } => ApiError::NotFound(format!(
                "networkpolicy {namespace}/{name} not found (list them with: flowmeshctl get networkpolicies -n {namespace})"
            )),
            ModelError::NodeIpInUse { .. }
            | ModelError::DatapathInUse { .. }
            | ModelError::OfportInUse { .. } => ApiError::AlreadyExists(msg),
            _ => ApiError::Invalid(msg),
        }
    }
}

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::NotFound(m) => tonic::Status::not_found(m),
            ApiError::AlreadyExists(m) => tonic::Status::already_exists(m),
            ApiError::Invalid(m) => tonic::Status::invalid_argument(m),
            ApiError::FailedPrecondition(m) => tonic::Status::failed_precondition(m),
            ApiError::Exhausted(m) => tonic::Status::resource_exhausted(m),
            ApiError::Unavailable(m) => tonic::Status::unavailable(m),
            ApiError::Internal(m) => tonic::Status::internal(m),
        }
    }
}
