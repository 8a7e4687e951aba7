//! The NetworkPolicy-mode operations of the admin API and `apply -f`: policies, labels of
//! namespaces and pods, pods attached with labels and named ports, and NETID operations on the
//! namespaces a label selector picks. Like [`crate::resources::nodes`], each has a model side (`*_in`) that
//! `apply -f` runs inside its one transaction.

pub mod requests;

use crate::core::{namespace_change, node_change, pod_change, CoreHandle, Effects, Event};
use crate::error::ApiError;
use crate::resources::nodes::{self as ops, NetIdOp, PodRequest};
use crate::state::{Change, Record, RecordKey};
use std::collections::BTreeMap;
use topology::model::{LabelSelector, Labels, NamespaceInfo, NetworkPolicy, PodMeta};
use topology::{ClusterModel, ModelError, PodInfo};

/// What applying a policy did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// It did not exist.
    Created,
    /// It existed and differed.
    Configured,
    /// It existed as given.
    Unchanged,
}

impl Applied {
    /// `created`, `configured` or `unchanged`, as `kubectl apply` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Applied::Created => "created",
            Applied::Configured => "configured",
            Applied::Unchanged => "unchanged",
        }
    }
}

/// Create or replace a policy (already checked field by field).
pub async fn apply_policy(core: &CoreHandle, p: NetworkPolicy) -> Result<Applied, ApiError> {
    core.mutate(move |m| apply_policy_in(m, p)).await
}

/// The model side of [`apply_policy`].
pub fn apply_policy_in(
    m: &mut ClusterModel,
    p: NetworkPolicy,
) -> Result<(Applied, Effects), ApiError> {
    ops::check_name("networkpolicy", &p.name)?;
    let verdict = match m.policy(&p.namespace, &p.name) {
        None => Applied::Created,
        Some(old) if *old == p => return Ok((Applied::Unchanged, Effects::default())),
        Some(_) => Applied::Configured,
    };
    let object = format!("networkpolicy/{}/{}", p.namespace, p.name);
    let affected = m.apply_policy(p.clone())?;
    let ev = Event::now(
        "NetworkPolicyApplied",
        object,
        format!(
            "networkpolicy {}/{} {}",
            p.namespace,
            p.name,
            verdict.as_str()
        ),
    );
    Ok((
        verdict,
        Effects {
            affected,
            changes: vec![Change::Put(Record::NetworkPolicy(p))],
            require_connected: None,
            undo: None,
            events: vec![ev],
        },
    ))
}

/// Delete a policy (an unknown one is NotFound).
pub async fn delete_policy(
    core: &CoreHandle,
    namespace: String,
    name: String,
) -> Result<(), ApiError> {
    core.mutate(move |m| {
        let affected = m.delete_policy(&namespace, &name)?;
        let ev = Event::now(
            "NetworkPolicyDeleted",
            format!("networkpolicy/{namespace}/{name}"),
            format!("networkpolicy {namespace}/{name} deleted"),
        );
        Ok((
            (),
            Effects {
                affected,
                changes: vec![Change::Delete(RecordKey::NetworkPolicy(namespace, name))],
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// A `kubectl label` edit: keys to set, keys to remove, and whether existing values may change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelEdit {
    /// `k=v`.
    pub set: BTreeMap<String, String>,
    /// `k-`.
    pub remove: Vec<String>,
    /// `--overwrite`.
    pub overwrite: bool,
}

impl LabelEdit {
    /// The labels after the edit, or why it is refused (`what` names the object).
    pub fn apply_to(&self, what: &str, current: &Labels) -> Result<Labels, ApiError> {
        if self.set.is_empty() && self.remove.is_empty() {
            return Err(ApiError::Invalid(format!(
                "{what}: no labels given (KEY=VALUE to set, KEY- to remove)"
            )));
        }
        if let Some(k) = self.remove.iter().find(|k| self.set.contains_key(*k)) {
            return Err(ApiError::Invalid(format!(
                "{what}: label {k:?} is both set and removed"
            )));
        }
        let mut out = current.clone();
        for (k, v) in &self.set {
            match current.get(k) {
                Some(old) if old != v && !self.overwrite => {
                    return Err(ApiError::Invalid(format!(
                        "{what}: label {k:?} already has a value ({old}), and --overwrite is false"
                    )))
                }
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        for k in &self.remove {
            out.remove(k);
        }
        Ok(out)
    }
}

/// Edit a namespace's labels; returns the labels after the edit and whether they changed.
pub async fn label_namespace(
    core: &CoreHandle,
    name: String,
    edit: LabelEdit,
) -> Result<(Labels, bool), ApiError> {
    core.mutate(move |m| {
        let current = m
            .namespace_labels(&name)
            .cloned()
            .ok_or_else(|| ApiError::from(ModelError::UnknownNamespace(name.clone())))?;
        let next = edit.apply_to(&format!("namespace {name}"), &current)?;
        if next == current {
            return Ok(((next, false), Effects::default()));
        }
        let affected = m.set_namespace_labels(&name, next.clone())?;
        let ev = Event::now(
            "LabelsChanged",
            format!("namespace/{name}"),
            format!("namespace {name} labels: {}", show(&next)),
        );
        Ok((
            (next, true),
            Effects {
                affected,
                changes: vec![namespace_change(m, &name)],
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// Edit a pod's labels; returns the labels after the edit and whether they changed.
pub async fn label_pod(
    core: &CoreHandle,
    namespace: String,
    name: String,
    edit: LabelEdit,
) -> Result<(Labels, bool), ApiError> {
    core.mutate(move |m| {
        let pod = m
            .pod(&namespace, &name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("pod {namespace}/{name} not found")))?;
        let next = edit.apply_to(&format!("pod {namespace}/{name}"), &pod.labels)?;
        if next == pod.labels {
            return Ok(((next, false), Effects::default()));
        }
        let affected = m.set_pod_meta(
            &namespace,
            &name,
            PodMeta {
                labels: next.clone(),
                ports: pod.ports.clone(),
            },
        )?;
        let ev = Event::now(
            "LabelsChanged",
            format!("pod/{namespace}/{name}"),
            format!("pod {namespace}/{name} labels: {}", show(&next)),
        );
        Ok((
            (next, true),
            Effects {
                affected,
                changes: vec![pod_change(m, &namespace, &name)],
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// `k=v,k2=v2` (or `<none>`).
pub fn show(labels: &Labels) -> String {
    if labels.is_empty() {
        return "<none>".into();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Attach a pod with its labels and named ports; returns once its switch acknowledged.
pub async fn attach_pod_with(
    core: &CoreHandle,
    pod: PodRequest,
    meta: PodMeta,
) -> Result<PodInfo, ApiError> {
    attach_pod_then(core, pod, meta, |_, p| p.clone()).await
}

/// [`attach_pod_with`], answering with `view` of the model right after the attach, taken in
/// the same turn of the core (an answer that needs more of the model than the pod costs no
/// second call to the core).
pub async fn attach_pod_then<T: Send + 'static>(
    core: &CoreHandle,
    mut pod: PodRequest,
    meta: PodMeta,
    view: impl FnOnce(&ClusterModel, &PodInfo) -> T + Send + 'static,
) -> Result<T, ApiError> {
    ops::resolve_pod_ofport(core, &mut pod).await?;
    core.mutate(move |m| {
        let (info, fx) = attach_pod_with_in(m, &pod, meta)?;
        Ok((view(m, &info), fx))
    })
    .await
}

/// The model side of [`attach_pod_with`] (of [`ops::attach_pod_in`] with metadata).
pub fn attach_pod_with_in(
    m: &mut ClusterModel,
    pod: &PodRequest,
    meta: PodMeta,
) -> Result<(PodInfo, Effects), ApiError> {
    if meta == PodMeta::default() {
        return ops::attach_pod_in(m, pod);
    }
    // Metadata is checked before anything changes; then the plain attach, then the metadata.
    let key = topology::PodKey::new(pod.namespace.as_str(), pod.name.as_str());
    topology::model::labels::check_labels(&format!("pod {key}"), &meta.labels)
        .map_err(|e| ApiError::Invalid(e.0))?;
    topology::model::policy::check_container_ports(&key, &meta.ports)
        .map_err(|e| ApiError::Invalid(e.0))?;
    let (_, mut fx) = ops::attach_pod_in(m, pod)?;
    fx.affected
        .merge(m.set_pod_meta(&pod.namespace, &pod.name, meta)?);
    fx.changes = vec![
        pod_change(m, &pod.namespace, &pod.name),
        node_change(m, &pod.node),
    ];
    let info = m
        .pod(&pod.namespace, &pod.name)
        .cloned()
        .ok_or_else(|| ApiError::Internal(format!("pod {key} vanished while attaching")))?;
    Ok((info, fx))
}

/// The namespaces a `kubectl -l` style selector picks; none is an error.
pub fn select_namespaces(m: &ClusterModel, selector: &str) -> Result<Vec<String>, ApiError> {
    let sel = LabelSelector::parse(selector).map_err(|e| ApiError::Invalid(e.0))?;
    let names: Vec<String> = m.selected_namespaces(&sel).map(|n| n.name).collect();
    if names.is_empty() {
        return Err(ApiError::NotFound(format!(
            "selector {selector:?} matches no namespace's labels"
        )));
    }
    Ok(names)
}

/// Join, isolate or make global the namespaces `selector` picks (resolved and changed in one
/// step, so a namespace labelled meanwhile is not missed half-way).
pub async fn netid_op_by_selector(
    core: &CoreHandle,
    op: NetIdOp,
    selector: String,
) -> Result<Vec<NamespaceInfo>, ApiError> {
    if selector.trim().is_empty() {
        return Err(ApiError::Invalid(
            "the selector is empty; name namespaces or give a selector such as team=a".into(),
        ));
    }
    core.mutate(move |m| {
        let mut names = select_namespaces(m, &selector)?;
        if let NetIdOp::Join { to } = &op {
            names.retain(|n| n != to);
            if names.is_empty() {
                return Err(ApiError::Invalid(format!(
                    "selector {selector:?} matches only {to:?}, the namespace to join"
                )));
            }
        }
        ops::netid_op_in(m, &op, &names)
    })
    .await
}

/// After a cluster network config change: the records of every namespace (a mode change out
/// of subnet gives each namespace a NETID of its own).
pub fn all_namespace_changes(m: &ClusterModel) -> Vec<Change> {
    m.namespaces()
        .map(|n| Change::Put(Record::Namespace(n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kubectl_label_semantics() {
        let cur = labels(&[("app", "web"), ("tier", "fe")]);
        let set = |k: &str, v: &str, overwrite| LabelEdit {
            set: labels(&[(k, v)]),
            remove: vec![],
            overwrite,
        };
        assert_eq!(
            set("env", "prod", false).apply_to("pod a/b", &cur),
            Ok(labels(&[("app", "web"), ("env", "prod"), ("tier", "fe")]))
        );
        let e = set("app", "db", false)
            .apply_to("pod a/b", &cur)
            .expect_err("needs overwrite");
        assert!(e.to_string().contains("--overwrite"), "{e}");
        assert_eq!(
            set("app", "db", true).apply_to("pod a/b", &cur),
            Ok(labels(&[("app", "db"), ("tier", "fe")]))
        );
        assert_eq!(
            set("app", "web", false).apply_to("pod a/b", &cur),
            Ok(cur.clone())
        );
        let rm = LabelEdit {
            set: BTreeMap::new(),
            remove: vec!["tier".into(), "missing".into()],
            overwrite: false,
        };
        assert_eq!(rm.apply_to("pod a/b", &cur), Ok(labels(&[("app", "web")])));
        assert!(LabelEdit::default().apply_to("pod a/b", &cur).is_err());
    }
}
