//! The admin API's NetworkPolicy and label calls: messages in, [`crate::resources::network_policy`] calls,
//! messages out.

use crate::core::CoreHandle;
use crate::error::ApiError;
use crate::resources::network_policy::{self as policy_ops, LabelEdit};
use crate::resources::nodes as ops;
use kinds::netpol;
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

/// What a trace says about NetworkPolicy: the policies whose flows the packet went through
/// (`allowed by networkpolicy NS/NAME`), or, for a packet dropped in table 27 (egress) or 80
/// (ingress) in networkpolicy mode, that no policy allowed it. `steps`: (table, cookie) of each
/// step; `dropped_in`: the table of the drop, if the packet was dropped.
pub fn policy_verdict(
    m: &topology::ClusterModel,
    steps: &[(u8, u64)],
    allowed: bool,
    dropped_in: Option<u8>,
) -> Option<String> {
    use topology::pipeline::cookie::{decode, ObjectKind};
    let mut names: Vec<String> = Vec::new();
    for (_, c) in steps {
        if decode(*c).kind != ObjectKind::Policy as u8 {
            continue;
        }
        let name = crate::resources::cookies::explain_cookie(m, *c);
        let name = name
            .strip_prefix("networkpolicy: ")
            .unwrap_or("networkpolicy (deleted since)")
            .to_string();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if allowed && !names.is_empty() {
        return Some(format!("allowed by {}", names.join(", ")));
    }
    match dropped_in {
        Some(t @ (27 | 80)) if m.is_policy_mode() => Some(format!(
            "no NetworkPolicy allows it ({} isolation, table {t})",
            if t == 27 { "egress" } else { "ingress" }
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use topology::model::{LabelSelector, NetworkPolicy};
    use topology::pipeline::cookie;

    #[test]
    fn policy_cookies_name_their_policy() {
        let mut m = topology::ClusterModel::new(crate::state::default_config()).expect("model");
        m.add_namespace("shop").expect("namespace");
        m.apply_policy(NetworkPolicy {
            namespace: "shop".into(),
            name: "allow-web".into(),
            pod_selector: LabelSelector::everything(),
            ingress_isolation: true,
            egress_isolation: false,
            ingress: vec![],
            egress: vec![],
        })
        .expect("policy");
        let c = cookie::policy_cookie("shop", "allow-web");
        assert_eq!(
            crate::resources::cookies::explain_cookie(&m, c),
            "networkpolicy: networkpolicy shop/allow-web"
        );
        // A policy deleted since the flow was made is not named.
        m.delete_policy("shop", "allow-web").expect("delete");
        assert_eq!(
            crate::resources::cookies::explain_cookie(&m, c),
            "networkpolicy"
        );
    }

    #[test]
    fn trace_verdict_names_the_allowing_policy() {
        let mut cfg = crate::state::default_config();
        cfg.mode = topology::Mode::Networkpolicy;
        let mut m = topology::ClusterModel::new(cfg).expect("model");
        m.add_namespace("shop").expect("namespace");
        for name in ["a", "b"] {
            m.apply_policy(NetworkPolicy {
                namespace: "shop".into(),
                name: name.into(),
                pod_selector: LabelSelector::everything(),
                ingress_isolation: true,
                egress_isolation: false,
                ingress: vec![],
                egress: vec![],
            })
            .expect("policy");
        }
        let steps = [
            (0, 0),
            (80, cookie::policy_cookie("shop", "b")),
            (80, cookie::policy_cookie("shop", "b")),
            (70, 0),
        ];
        assert_eq!(
            super::policy_verdict(&m, &steps, true, None).as_deref(),
            Some("allowed by networkpolicy shop/b")
        );
        assert_eq!(
            super::policy_verdict(&m, &[(0, 0), (80, 0)], false, Some(80)).as_deref(),
            Some("no NetworkPolicy allows it (ingress isolation, table 80)")
        );
        assert_eq!(super::policy_verdict(&m, &[(0, 0)], false, Some(21)), None);
    }
}
