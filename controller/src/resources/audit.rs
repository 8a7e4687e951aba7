//! Network policy audit logging: `policyAuditConfig` from the configuration file (applied while
//! running), and the namespace annotation `k8s.ovn.org/acl-logging` through the admin API's
//! `AnnotateNamespace` (as `kubectl annotate namespace`). The flows are the pipeline's
//! (`topology::pipeline::audit`); the lines are the node shims'.

use crate::core::{namespace_change, CoreHandle, Effects, Event};
use crate::error::ApiError;
use crate::resources::nodes as ops;
use proto::admin as pa;
use topology::model::audit::{parse_acl_logging, AclLogging, AuditConfig, ACL_LOGGING_ANNOTATION};
use topology::model::NamespaceInfo;
use topology::ModelError;

/// Use `cfg` from now on (validated); true when it changed something. Every node's meter
/// follows a new rate; the shims learn the rest through `WatchAudit`.
pub async fn set_audit_config(core: &CoreHandle, cfg: AuditConfig) -> Result<bool, ApiError> {
    cfg.validate().map_err(ApiError::Invalid)?;
    core.mutate(move |m| {
        if *m.audit_config() == cfg {
            return Ok((false, Effects::default()));
        }
        let text = format!(
            "rateLimit={} maxFileSize={} maxLogFiles={} destination={} syslogFacility={}",
            cfg.rate_limit,
            cfg.max_file_size,
            cfg.max_log_files,
            cfg.destination,
            cfg.syslog_facility
        );
        let affected = m.set_audit_config(cfg).map_err(ApiError::from)?;
        Ok((
            true,
            Effects {
                affected,
                events: vec![Event::now(
                    "AuditConfigChanged",
                    "policyAuditConfig",
                    format!("policyAuditConfig: {text}"),
                )],
                ..Effects::default()
            },
        ))
    })
    .await
}

/// The configuration file (`--config`): the cluster network's fields, and optionally
/// `policyAuditConfig` (OpenShift's fields and defaults). Both validated.
pub fn parse_config_file(
    text: &str,
) -> Result<(topology::ClusterNetworkConfig, Option<AuditConfig>), String> {
    let mut doc: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let audit = match doc
        .as_mapping_mut()
        .and_then(|m| m.remove("policyAuditConfig"))
    {
        None => None,
        Some(v) => {
            let a: AuditConfig =
                serde_yaml::from_value(v).map_err(|e| format!("policyAuditConfig: {e}"))?;
            a.validate()?;
            Some(a)
        }
    };
    let cluster: topology::ClusterNetworkConfig =
        serde_yaml::from_value(doc).map_err(|e| e.to_string())?;
    cluster.validate().map_err(|e| e.to_string())?;
    Ok((cluster, audit))
}

/// How often the configuration file is read again for `policyAuditConfig` changes.
pub const CONFIG_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Re-reads `path` every [`CONFIG_POLL`] and applies a changed `policyAuditConfig` (a
/// ConfigMap mounted as a volume is updated in place by the kubelet). A file that does not
/// parse is reported and changes nothing; a changed cluster network is reported as needing a
/// restart. Runs until the core stops.
pub async fn watch_config_file(core: CoreHandle, path: std::path::PathBuf, mut last: String) {
    let mut tick = tokio::time::interval(CONFIG_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported: Option<String> = None;
    loop {
        tick.tick().await;
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(t) => t,
            Err(e) => {
                let msg = format!("cannot read {}: {e}", path.display());
                if reported.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(error = %msg, "configuration file; keeping the settings in use");
                    reported = Some(msg);
                }
                continue;
            }
        };
        if text == last {
            continue;
        }
        let (cluster, audit) = match parse_config_file(&text) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("{}: {e}", path.display());
                if reported.as_deref() != Some(msg.as_str()) {
                    tracing::error!(error = %msg, "the configuration file changed and is refused; keeping the settings in use");
                    reported = Some(msg);
                }
                continue;
            }
        };
        reported = None;
        let before = parse_config_file(&last).ok();
        last = text;
        if before.as_ref().is_some_and(|(c, _)| *c != cluster) {
            tracing::warn!(file = %path.display(), "the cluster network in the configuration file changed; it is read at start only (restart to apply what may change)");
        }
        match set_audit_config(&core, audit.unwrap_or_default()).await {
            Ok(true) => {
                tracing::info!(file = %path.display(), "policyAuditConfig changed; applied")
            }
            Ok(false) => {}
            Err(e) => tracing::error!(error = %e, "policyAuditConfig not applied"),
        }
    }
}

/// The annotations of a namespace as the API shows them.
pub fn annotations(n: &NamespaceInfo) -> std::collections::HashMap<String, String> {
    let mut m = std::collections::HashMap::new();
    if let Some(a) = n.acl_logging {
        m.insert(ACL_LOGGING_ANNOTATION.to_string(), a.to_annotation());
    }
    m
}

/// What an annotate request asks of a namespace's audit logging: `Some(v)` to set it (None
/// inside: off), `None` to leave it; or why it is refused.
pub fn logging_edit(
    name: &str,
    r: &pa::AnnotateRequest,
    current: Option<AclLogging>,
) -> Result<Option<Option<AclLogging>>, ApiError> {
    let Some(v) = ops::single_annotation(
        "namespace",
        name,
        ACL_LOGGING_ANNOTATION,
        " on namespaces",
        r,
    )?
    else {
        return Ok(Some(None));
    };
    let want =
        parse_acl_logging(v).map_err(|e| ApiError::Invalid(format!("namespace {name}: {e}")))?;
    let want = want.any().then_some(want);
    if current.is_some() && want != current && !r.overwrite {
        return Err(ApiError::Invalid(format!(
                "namespace {name}: annotation {ACL_LOGGING_ANNOTATION:?} already has a value ({}), and --overwrite is false",
                current.map(|c| c.to_annotation()).unwrap_or_default()
            )));
    }
    Ok(Some(want))
}

/// `AnnotateNamespace`: returns the namespace after the edit and whether it changed.
pub async fn annotate(
    core: &CoreHandle,
    r: pa::AnnotateRequest,
) -> Result<(NamespaceInfo, bool), ApiError> {
    ops::check_name("namespace", &r.name)?;
    core.mutate(move |m| {
        let name = r.name.clone();
        let info = m
            .namespace(&name)
            .ok_or_else(|| ApiError::from(ModelError::UnknownNamespace(name.clone())))?;
        let current = info.acl_logging;
        match logging_edit(&name, &r, current)? {
            Some(want) if want != current => {
                let affected = m.set_acl_logging(&name, want)?;
                let what = match want {
                    Some(a) => format!("on ({})", a.to_annotation()),
                    None => "off".to_string(),
                };
                let ev = Event::now(
                    "AuditLoggingChanged",
                    format!("namespace/{name}"),
                    format!("namespace {name}: audit logging {what}"),
                );
                let info = m
                    .namespace(&name)
                    .ok_or_else(|| ApiError::from(ModelError::UnknownNamespace(name.clone())))?;
                Ok((
                    (info, true),
                    Effects {
                        affected,
                        changes: vec![namespace_change(m, &name)],
                        require_connected: None,
                        undo: None,
                        events: vec![ev],
                    },
                ))
            }
            _ => Ok(((info, false), Effects::default())),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(set: &[(&str, &str)], remove: &[&str], overwrite: bool) -> pa::AnnotateRequest {
        pa::AnnotateRequest {
            name: "shop".into(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            remove: remove.iter().map(|k| k.to_string()).collect(),
            overwrite,
        }
    }

    #[test]
    fn annotate_requests_are_checked_like_kubectl_annotate() {
        use topology::model::audit::Severity;
        let on = r#"{"deny": "alert", "allow": "notice"}"#;
        let want = AclLogging {
            deny: Some(Severity::Alert),
            allow: Some(Severity::Notice),
        };
        let k = ACL_LOGGING_ANNOTATION;
        assert_eq!(
            logging_edit("shop", &req(&[(k, on)], &[], false), None),
            Ok(Some(Some(want)))
        );
        // A changed value needs --overwrite; the same value does not.
        let other = r#"{"deny": "info"}"#;
        assert!(
            logging_edit("shop", &req(&[(k, other)], &[], false), Some(want))
                .is_err_and(|e| e.to_string().contains("--overwrite"))
        );
        assert!(logging_edit("shop", &req(&[(k, other)], &[], true), Some(want)).is_ok());
        assert_eq!(
            logging_edit("shop", &req(&[(k, on)], &[], false), Some(want)),
            Ok(Some(Some(want)))
        );
        assert_eq!(
            logging_edit("shop", &req(&[], &[k], false), Some(want)),
            Ok(Some(None))
        );
        for bad in [
            req(&[(k, r#"{"deny":"loud"}"#)], &[], false),
            req(&[("team", "x")], &[], false),
            req(&[(k, on)], &[k], false),
            req(&[], &[], false),
        ] {
            assert!(logging_edit("shop", &bad, None).is_err(), "{bad:?}");
        }
        let e = logging_edit(
            "shop",
            &req(&[(k, "{\"deny\":\"loud\"}")], &[], false),
            None,
        )
        .expect_err("bad severity")
        .to_string();
        assert!(e.contains("unknown severity \"loud\""), "{e}");
    }
}
