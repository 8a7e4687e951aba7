//! Errors the controller's APIs return: each names the object and what is wrong with it, and
//! maps to a gRPC status code. What to do about it is the client's to say (`flowmeshctl` adds one
//! hint per error), so a message carries no command hints of its own.

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
    /// The change lost a race with another controller replica writing the same objects;
    /// nothing of it was stored, and retrying succeeds.
    #[error("{0}")]
    Aborted(String),
}

use topology::model::EgressFirewallError;

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        let msg = e.to_string();
        match e {
            // The message names the object; what to do about it is the client's to say
            // (flowmeshctl adds one hint), so it is not said twice.
            ModelError::UnknownNode(n) => ApiError::NotFound(format!("node {n:?} not found")),
            ModelError::UnknownNamespace(n) => {
                ApiError::NotFound(format!("namespace {n:?} not found"))
            }
            ModelError::UnknownPod(p) => ApiError::NotFound(format!("pod {p} not found")),
            ModelError::PodExists(p) => ApiError::AlreadyExists(format!("pod {p} already exists")),
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
            ModelError::EgressFirewall(EgressFirewallError::Unknown { .. }) => ApiError::NotFound(msg),
            ModelError::EgressFirewall(EgressFirewallError::SecondInProject { .. }) => {
                ApiError::AlreadyExists(msg)
            }
            ModelError::EgressFirewall(EgressFirewallError::DefaultProject { .. }) => {
                ApiError::FailedPrecondition(msg)
            }
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
            ApiError::Aborted(m) => tonic::Status::aborted(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::model::PodKey;

    /// The server names the object; the client adds the one hint (issue 20: hints were doubled).
    #[test]
    fn model_errors_carry_no_command_hints() {
        let pod = PodKey {
            namespace: "ns".into(),
            name: "p".into(),
        };
        for (e, want) in [
            (
                ModelError::UnknownNode("n1".into()),
                ApiError::NotFound("node \"n1\" not found".into()),
            ),
            (
                ModelError::UnknownNamespace("foo".into()),
                ApiError::NotFound("namespace \"foo\" not found".into()),
            ),
            (
                ModelError::UnknownPod(pod.clone()),
                ApiError::NotFound("pod ns/p not found".into()),
            ),
            (
                ModelError::PodExists(pod),
                ApiError::AlreadyExists("pod ns/p already exists".into()),
            ),
        ] {
            assert_eq!(ApiError::from(e), want);
        }
    }
}
