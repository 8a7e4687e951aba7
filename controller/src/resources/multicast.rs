//! The admin API's NetNamespace annotations: `AnnotateNetNamespace` (as `kubectl annotate`),
//! and the annotations a NetNamespace shows. flowmesh keeps one annotation, the multicast one
//! ([`MULTICAST_ANNOTATION`]); any other key is refused with the reason, so nothing a user
//! writes is silently dropped.

use crate::core::{namespace_change, CoreHandle, Effects, Event};
use crate::error::ApiError;
use crate::resources::nodes as ops;
use proto::admin as pa;
use std::collections::HashMap;
use topology::model::multicast::{parse_multicast_value, MULTICAST_ANNOTATION};
use topology::model::NamespaceInfo;
use topology::ModelError;

/// The annotations of a NetNamespace as the API shows them.
pub fn annotations(n: &NamespaceInfo) -> HashMap<String, String> {
    let mut m = HashMap::new();
    if n.multicast {
        m.insert(MULTICAST_ANNOTATION.to_string(), "true".to_string());
    }
    m
}

/// What an annotate request asks of the multicast flag: `Some(v)` to set it, `None` to leave
/// it; or why the request is refused. `current`: the flag now.
pub fn multicast_edit(
    name: &str,
    r: &pa::AnnotateRequest,
    current: bool,
) -> Result<Option<bool>, ApiError> {
    let Some(v) = ops::single_annotation("netnamespace", name, MULTICAST_ANNOTATION, "", r)? else {
        return Ok(Some(false));
    };
    let want = parse_multicast_value(v)
        .map_err(|e| ApiError::Invalid(format!("netnamespace {name}: {e}")))?;
    if current && !want && !r.overwrite {
        return Err(ApiError::Invalid(format!(
                "netnamespace {name}: annotation {MULTICAST_ANNOTATION:?} already has a value (true), and --overwrite is false"
            )));
    }
    Ok(Some(want))
}

/// `AnnotateNetNamespace`: returns the NetNamespace after the edit and whether it changed.
pub async fn annotate(
    core: &CoreHandle,
    r: pa::AnnotateRequest,
) -> Result<(NamespaceInfo, bool), ApiError> {
    ops::check_name("netnamespace", &r.name)?;
    core.mutate(move |m| {
        let name = r.name.clone();
        let current = m
            .multicast_annotated(&name)
            .ok_or_else(|| ApiError::from(ModelError::UnknownNamespace(name.clone())))?;
        let want = multicast_edit(&name, &r, current)?;
        let info = |m: &topology::ClusterModel| {
            m.namespace(&name)
                .ok_or_else(|| ApiError::from(ModelError::UnknownNamespace(name.clone())))
        };
        match want {
            Some(v) if v != current => {
                let affected = m.set_multicast(&name, v)?;
                let ev = Event::now(
                    "MulticastChanged",
                    format!("netnamespace/{name}"),
                    format!(
                        "netnamespace {name}: multicast {}",
                        if v { "enabled" } else { "disabled" }
                    ),
                );
                Ok((
                    (info(m)?, true),
                    Effects {
                        affected,
                        changes: vec![namespace_change(m, &name)],
                        require_connected: None,
                        undo: None,
                        events: vec![ev],
                    },
                ))
            }
            _ => Ok(((info(m)?, false), Effects::default())),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(set: &[(&str, &str)], remove: &[&str], overwrite: bool) -> pa::AnnotateRequest {
        pa::AnnotateRequest {
            name: "a".into(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            remove: remove.iter().map(|k| k.to_string()).collect(),
            overwrite,
        }
    }

    #[test]
    fn edits() {
        let k = MULTICAST_ANNOTATION;
        assert_eq!(
            multicast_edit("a", &req(&[(k, "true")], &[], false), false),
            Ok(Some(true))
        );
        assert_eq!(
            multicast_edit("a", &req(&[], &[k], false), true),
            Ok(Some(false))
        );
        assert_eq!(
            multicast_edit("a", &req(&[(k, "false")], &[], true), true),
            Ok(Some(false))
        );
        for (r, cur, why) in [
            (req(&[(k, "false")], &[], false), true, "--overwrite"),
            (req(&[(k, "yes")], &[], false), false, "must be"),
            (
                req(&[("other/x", "1")], &[], false),
                false,
                "not one flowmesh keeps",
            ),
            (
                req(&[], &["other/x"], false),
                false,
                "not one flowmesh keeps",
            ),
            (
                req(&[(k, "true")], &[k], false),
                false,
                "both set and removed",
            ),
            (req(&[], &[], false), false, "no annotations"),
        ] {
            match multicast_edit("a", &r, cur) {
                Err(ApiError::Invalid(m)) => assert!(m.contains(why), "{m}"),
                other => panic!("{r:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_requests_are_refused_naming_the_annotation() {
        let refusal = |r: &pa::AnnotateRequest| match multicast_edit("a", r, false) {
            Err(ApiError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refusal(&req(&[], &[], false)),
            "netnamespace a: no annotations given (KEY=VALUE to set, KEY- to remove)"
        );
        assert_eq!(
            refusal(&req(&[("owner", "me")], &[], false)),
            format!("netnamespace a: annotation \"owner\" is not one flowmesh keeps (it keeps {MULTICAST_ANNOTATION})")
        );
        assert_eq!(
            refusal(&req(
                &[(MULTICAST_ANNOTATION, "true")],
                &[MULTICAST_ANNOTATION],
                false
            )),
            format!("netnamespace a: annotation {MULTICAST_ANNOTATION:?} is both set and removed")
        );
    }
}
