//! `flowmeshctl apply -f`: Kubernetes-style YAML objects applied through the same operations
//! as the API calls.

use crate::core::CoreHandle;
use crate::error::ApiError;

/// Apply a multi-document YAML; returns one result line per object.
pub async fn apply_yaml(core: &CoreHandle, yaml: &str) -> Result<Vec<String>, ApiError> {
    let _ = (core, yaml);
    Err(ApiError::Internal(
        "apply is being wired to the manifest parser".into(),
    ))
}
