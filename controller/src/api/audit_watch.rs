//! The node API's audit-logging calls: `WatchAudit`, the stream through which a node's shim
//! learns `policyAuditConfig` (sent at once, again when it changes, and every [`KEEPALIVE`]),
//! and `LookupPods`, which names the pods behind the addresses of an audit line.

use std::net::Ipv4Addr;
use std::pin::Pin;
use std::time::Duration;

use proto::node::{self as pn};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::Stream;
use tonic::{Response, Status};
use topology::pipeline::audit::{AUDIT_CONTROLLER_ID, AUDIT_METER_ID};

use crate::core::CoreHandle;
use crate::error::ApiError;

/// The interval at which unchanged settings are repeated.
pub const KEEPALIVE: Duration = Duration::from_secs(5);

/// The most addresses one `LookupPods` may ask about.
pub const MAX_LOOKUP: usize = 256;

/// The stream type of `WatchAudit`.
pub type SettingsStream = Pin<Box<dyn Stream<Item = Result<pn::AuditSettings, Status>> + Send>>;

/// The settings as the API carries them.
pub fn settings(node: &str, cfg: &topology::model::audit::AuditConfig) -> pn::AuditSettings {
    pn::AuditSettings {
        node: node.to_owned(),
        rate_limit: cfg.rate_limit,
        max_file_size_mb: cfg.max_file_size,
        max_log_files: cfg.max_log_files,
        destination: cfg.destination.clone(),
        syslog_facility: cfg.syslog_facility.clone(),
        syslog_facility_code: u32::from(cfg.facility_code().unwrap_or(16)),
        controller_id: u32::from(AUDIT_CONTROLLER_ID),
        meter_id: AUDIT_METER_ID,
        keepalive_ms: KEEPALIVE.as_millis() as u32,
    }
}

async fn current(core: &CoreHandle, node: &str) -> Result<pn::AuditSettings, ApiError> {
    let node = node.to_owned();
    core.read(move |c| settings(&node, c.model.audit_config()))
        .await
}

/// Starts the stream for `node` (which must be registered).
pub async fn watch(core: &CoreHandle, node: String) -> Result<Response<SettingsStream>, Status> {
    super::require_registered(core, &node, "WatchAudit").await?;
    let mut events = core.subscribe();
    let (tx, rx) = mpsc::channel::<Result<pn::AuditSettings, Status>>(4);
    let core = core.clone();
    tokio::spawn(async move { stream_settings(&core, &node, &tx, &mut events).await });
    Ok(Response::new(Box::pin(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    )))
}

async fn stream_settings(
    core: &CoreHandle,
    node: &str,
    tx: &mpsc::Sender<Result<pn::AuditSettings, Status>>,
    events: &mut broadcast::Receiver<crate::core::Event>,
) {
    let mut last: Option<pn::AuditSettings> = None;
    let mut tick = tokio::time::interval(KEEPALIVE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut due = true;
    loop {
        let s = match current(core, node).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        if due || last.as_ref() != Some(&s) {
            if tx.send(Ok(s.clone())).await.is_err() {
                return;
            }
            last = Some(s);
        }
        due = false;
        tokio::select! {
            _ = tx.closed() => return,
            r = events.recv() => {
                if let Err(broadcast::error::RecvError::Closed) = r {
                    return;
                }
            }
            _ = tick.tick() => due = true,
        }
    }
}

/// `LookupPods`: the pods at `ips` (found by the node whose subnet holds each address).
pub async fn lookup(core: &CoreHandle, ips: Vec<String>) -> Result<pn::LookupPodsReply, Status> {
    if ips.len() > MAX_LOOKUP {
        return Err(Status::invalid_argument(format!(
            "LookupPods: {} addresses; ask for at most {MAX_LOOKUP} at a time",
            ips.len()
        )));
    }
    let mut addrs = Vec::with_capacity(ips.len());
    for ip in &ips {
        let a: Ipv4Addr = ip.parse().map_err(|_| {
            Status::invalid_argument(format!("LookupPods: {ip:?} is no IPv4 address"))
        })?;
        addrs.push(a);
    }
    let pods = core
        .read(move |c| {
            let m = &c.model;
            addrs
                .iter()
                .filter_map(|ip| {
                    let node = m.nodes().find(|n| n.subnet.contains(*ip))?;
                    let p = m.pods_on_node(&node.name).find(|p| p.ip == *ip)?;
                    Some(pn::PodAddress {
                        ip: ip.to_string(),
                        namespace: p.key.namespace.clone(),
                        name: p.key.name.clone(),
                    })
                })
                .collect()
        })
        .await?;
    Ok(pn::LookupPodsReply { pods })
}
