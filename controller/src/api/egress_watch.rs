//! The node API's `WatchEgress`: the stream through which a node's shim learns the egress IPs
//! its node hosts. The full list is sent at once, again whenever an event may have changed it
//! (only when it did), and every [`KEEPALIVE`] even when nothing changed, so the shim can tell
//! a silent controller from a quiet one.

use std::net::Ipv4Addr;
use std::pin::Pin;
use std::time::Duration;

use proto::node::{self as pn};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::Stream;
use tonic::{Response, Status};
use topology::model::egress_mark;
use topology::pipeline::egress_ip::egress_src_mac;

use crate::core::CoreHandle;
use crate::error::ApiError;

/// The interval at which an unchanged list is repeated.
pub const KEEPALIVE: Duration = Duration::from_secs(1);

/// The stream type of `WatchEgress`.
pub type AssignmentStream =
    Pin<Box<dyn Stream<Item = Result<pn::EgressAssignments, Status>> + Send>>;

/// One assignment as the API carries it.
pub fn assignment(ip: Ipv4Addr, netid: u32) -> pn::EgressAssignment {
    pn::EgressAssignment {
        ip: ip.to_string(),
        netid,
        mac: egress_src_mac(netid)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        mark: egress_mark(netid),
    }
}

/// The usable egress IPs `node` hosts now, sorted by IP.
async fn hosted(core: &CoreHandle, node: &str) -> Result<Vec<pn::EgressAssignment>, ApiError> {
    let node = node.to_owned();
    core.read(move |c| {
        let plan = c.model.egress_plan();
        let mut v: Vec<(Ipv4Addr, u32)> = plan.hosted_on(&node).map(|(n, ip)| (ip, n)).collect();
        v.sort();
        v.into_iter().map(|(ip, n)| assignment(ip, n)).collect()
    })
    .await
}

/// Starts the stream for `node` (which must be registered).
pub async fn watch(core: &CoreHandle, node: String) -> Result<Response<AssignmentStream>, Status> {
    super::require_registered(core, &node, "WatchEgress").await?;
    // Only the leader judges whether a shim watches (standbys know nothing of each other's
    // streams): a standby sends the shim on, and a deposed leader ends its streams below.
    if let Some(leader) = core.read(|c| c.standby_of()).await? {
        return Err(standby_refusal(&leader));
    }
    // Subscribe before the first read, so no change between the two is missed.
    let mut events = core.subscribe();
    let (tx, rx) = mpsc::channel::<Result<pn::EgressAssignments, Status>>(4);
    let core = core.clone();
    let opened = node.clone();
    core.read(move |c| c.shim_stream(&opened, true)).await?;
    tokio::spawn(async move {
        stream_assignments(&core, &node, &tx, &mut events).await;
        // The shim is gone (or the stream failed): after the grace, unless it watches again,
        // its node is offline for egress IPs.
        let closed = node.clone();
        if let Ok(Some((epoch, grace))) = core.read(move |c| c.shim_stream(&closed, false)).await {
            tokio::time::sleep(grace).await;
            let _ = core.read(move |c| c.shim_grace_over(&node, epoch)).await;
        }
    });
    Ok(Response::new(Box::pin(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    )))
}

/// Why a standby does not serve `WatchEgress` (UNAVAILABLE: the shim tries another replica).
fn standby_refusal(leader: &str) -> Status {
    // Marked as a standby's refusal (proto::standby): the shim moves on to another replica.
    proto::standby::refusal(
        leader,
        format!(
            "this replica is a standby (leader {leader}): a node watches its egress IPs at the leader"
        ),
    )
}

/// Sends `node`'s list until the stream closes (or this replica is a standby).
async fn stream_assignments(
    core: &CoreHandle,
    node: &str,
    tx: &mpsc::Sender<Result<pn::EgressAssignments, Status>>,
    events: &mut broadcast::Receiver<crate::core::Event>,
) {
    let mut last: Option<Vec<pn::EgressAssignment>> = None;
    let mut tick = tokio::time::interval(KEEPALIVE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut due = true;
    loop {
        if let Ok(Some(leader)) = core.read(|c| c.standby_of()).await {
            let _ = tx.send(Err(standby_refusal(&leader))).await;
            return;
        }
        let list = match hosted(core, node).await {
            Ok(l) => l,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        if due || last.as_ref() != Some(&list) {
            let msg = pn::EgressAssignments {
                node: node.to_owned(),
                assignments: list.clone(),
                keepalive_ms: KEEPALIVE.as_millis() as u32,
            };
            if tx.send(Ok(msg)).await.is_err() {
                return;
            }
            last = Some(list);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_carry_mac_and_mark() {
        let a = assignment(Ipv4Addr::new(192, 168, 0, 100), 0x00c0_ffee);
        assert_eq!(a.ip, "192.168.0.100");
        assert_eq!(a.mac, "0a:59:00:c0:ff:ee");
        assert_eq!(a.mark, egress_mark(0x00c0_ffee));
    }
}
