//! The admin API's NetworkPolicy and label calls: messages in, [`crate::policy_ops`] calls,
//! messages out.

use crate::core::CoreHandle;
use crate::error::ApiError;
use crate::netpol;
use crate::ops;
use crate::policy_ops::{self, LabelEdit};
use proto::admin as pa;

/// `ApplyNetworkPolicy`: check the message like `apply -f` checks a document, then create or
/// replace the policy.
pub async fn apply(
    core: &CoreHandle,
    p: pa::NetworkPolicy,
) -> Result<pa::ApplyNetworkPolicyReply, ApiError> {
    ops::check_name("namespace", &p.namespace)?;
    ops::check_name("networkpolicy", &p.name)?;
    let policy = netpol::from_proto(&p)
        .map_err(|e| ApiError::Invalid(format!("networkpolicy {}/{}: {e}", p.namespace, p.name)))?;
    let result = policy_ops::apply_policy(core, policy.clone()).await?;
    Ok(pa::ApplyNetworkPolicyReply {
        result: result.as_str().to_string(),
        policy: Some(netpol::to_proto(&policy)),
    })
}

/// `ListNetworkPolicies`: all, or one namespace's (an unknown namespace is NotFound).
pub async fn list(core: &CoreHandle, namespace: String) -> Result<pa::NetworkPolicyList, ApiError> {
    let items = core
        .read(move |c| {
            if namespace.is_empty() {
                return Ok(c.model.policies().map(netpol::to_proto).collect());
            }
            if c.model.namespace(&namespace).is_none() {
                return Err(ApiError::from(topology::ModelError::UnknownNamespace(
                    namespace,
                )));
            }
            Ok(c.model
                .policies_in(&namespace)
                .map(netpol::to_proto)
                .collect())
        })
        .await??;
    Ok(pa::NetworkPolicyList { items })
}

/// `LabelPod` (`pod` true) or `LabelNamespace`.
pub async fn label(
    core: &CoreHandle,
    r: pa::LabelRequest,
    pod: bool,
) -> Result<pa::LabelReply, ApiError> {
    let edit = LabelEdit {
        set: r.set.into_iter().collect(),
        remove: r.remove,
        overwrite: r.overwrite,
    };
    let (labels, changed) = if pod {
        policy_ops::label_pod(core, r.namespace, r.name, edit).await?
    } else {
        if !r.namespace.is_empty() {
            return Err(ApiError::Invalid(
                "LabelNamespace takes the namespace in name; leave namespace empty".into(),
            ));
        }
        policy_ops::label_namespace(core, r.name, edit).await?
    };
    Ok(pa::LabelReply {
        labels: labels.into_iter().collect(),
        changed,
    })
}
