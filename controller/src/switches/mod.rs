//! The OpenFlow side: the session listener, and the adapter that lets a reconciler drive a
//! switch through its [`SwitchHandle`]; [`link`] is the seam between them, [`reconciler`] the
//! task per switch and [`plan`] the order of a bundle's messages.

pub mod link;
pub mod plan;
pub mod reconciler;

use crate::switches::link::{
    LinkError, LinkFuture, ReadCounts, SwitchChange, SwitchLink, SwitchState, SyncTurn,
};
use ofproto::message::FlowStatsRequest;
use ofproto::session::{BundleError, EventStream, RequestError, SessionEvent, SwitchHandle};
use ofproto::{Flow, Message};
use std::sync::Arc;
use std::time::Duration;
use topology::pipeline::{FlowDiff, FlowSet, StreamedDiff};

/// How many switches the controller reads whole (flow stats) or programs (a bundle) at once.
/// After a mass reconnect (every ovs-vswitchd of a rack restarted, a controller restart) every
/// switch wants its full table at the same moment; with all of them in flight each one's
/// bundle advances a sliver at a time, every switch stays silent behind its own bundle for
/// longer than the echo timeout, and sessions are dropped and restarted without end. A few
/// dozen at a time keeps each bundle short while still overlapping network and switch time.
pub const MAX_CONCURRENT_SYNCS: usize = 32;

/// How long a whole-table read may take; a bundle gets this plus a millisecond per change (Open
/// vSwitch takes well under that per flow; 100,000 changes get 160 s). Past that the connection
/// is closed: a switch that answers echoes but not the read would otherwise keep its turn for
/// as long as it stays connected (32 such connections would stall every read and bundle of the
/// controller).
pub const READ_DEADLINE: Duration = Duration::from_secs(60);

/// First come, first served admission of whole-table reads and bundles across every switch
/// session, so a mass reconnect completes in arrival order and no switch starves.
#[derive(Clone, Debug)]
pub struct SyncLimiter(Arc<tokio::sync::Semaphore>);

impl SyncLimiter {
    /// At most `n` (at least 1) reads or bundles at once.
    pub fn new(n: usize) -> Self {
        SyncLimiter(Arc::new(tokio::sync::Semaphore::new(n.max(1))))
    }

    /// Waits for a turn (FIFO); the turn ends when the permit is dropped.
    pub async fn turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.0.clone().acquire_owned().await.ok()
    }

    /// Turns free right now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

impl Default for SyncLimiter {
    fn default() -> Self {
        SyncLimiter::new(MAX_CONCURRENT_SYNCS)
    }
}

/// Default [`AuditPacer`] rate: whole-table audits started per second across all switches.
/// At 1,000 switches of ~3,100 flows every switch is audited within 500 s (about 6,200 flows
/// read per second, against the 3.1 million per 30 s of an unpaced audit).
pub const DEFAULT_AUDIT_RATE: f64 = 2.0;

/// Paces the background audits (whole-table reads of switches whose marker agrees) across
/// every switch: at most one audit starts per `1 / rate` seconds, first come first served,
/// with no burst beyond one.
#[derive(Clone, Debug)]
pub struct AuditPacer(Arc<tokio::sync::Semaphore>);

impl AuditPacer {
    /// A pacer that lets `rate` audits (per second, > 0) start; runs until dropped.
    pub fn start(rate: f64) -> Self {
        let sem = Arc::new(tokio::sync::Semaphore::new(0));
        let weak = Arc::downgrade(&sem);
        let period = Duration::from_secs_f64(1.0 / rate.max(1e-3));
        tokio::spawn(async move {
            let mut t = tokio::time::interval(period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                t.tick().await;
                let Some(s) = weak.upgrade() else { return };
                if s.available_permits() == 0 {
                    s.add_permits(1);
                }
            }
        });
        AuditPacer(sem)
    }

    /// Waits for the next audit turn.
    pub async fn turn(&self) {
        if let Ok(p) = self.0.acquire().await {
            p.forget();
        }
    }
}

/// A switch session as a [`SwitchLink`].
pub struct SessionLink {
    handle: SwitchHandle,
    peer: String,
    /// Shared by every session of the listener.
    limiter: SyncLimiter,
    /// Shared by every session of the listener.
    audits: AuditPacer,
    /// How long a whole-table read may take ([`READ_DEADLINE`]).
    read_deadline: Duration,
    /// With OpenFlow TLS: the node the switch's certificate names (None: it names no node).
    /// Without TLS: no binding.
    cert_node: Option<Option<String>>,
}

fn request_error(e: RequestError) -> LinkError {
    match e {
        RequestError::Closed(c) => LinkError::Disconnected(c.to_string()),
        other => LinkError::Other(other.to_string()),
    }
}

impl SessionLink {
    /// The switch did not finish `what` within `deadline`: the connection is closed (an
    /// unfinished bundle dies with it; the switch reconnects and is read afresh).
    async fn stalled(&self, what: &str, deadline: Duration) -> LinkError {
        tracing::warn!(peer = %self.peer, what, ?deadline, "switch did not finish in time; closing its connection");
        self.handle.close().await;
        LinkError::Disconnected(format!(
            "no answer to {what} within {deadline:?}; connection closed"
        ))
    }
}

impl SwitchLink for SessionLink {
    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn may_serve(&self, node: &str) -> bool {
        match &self.cert_node {
            None => true,
            Some(named) => named.as_deref() == Some(node),
        }
    }

    fn set_role(
        &self,
        role: ofproto::message::Role,
        generation: u64,
    ) -> LinkFuture<'_, Result<(), LinkError>> {
        Box::pin(async move {
            match self.handle.role_request(role, generation).await {
                Ok(_) => Ok(()),
                Err(RequestError::Closed(c)) => Err(LinkError::Disconnected(c.to_string())),
                Err(e) => Err(LinkError::Other(e.to_string())),
            }
        })
    }

    fn turn(&self) -> LinkFuture<'_, Option<SyncTurn>> {
        Box::pin(self.limiter.turn())
    }

    fn audit_turn(&self) -> LinkFuture<'_, ()> {
        Box::pin(self.audits.turn())
    }

    fn probe(&self, within: Duration) -> LinkFuture<'_, bool> {
        Box::pin(async move { self.handle.probe(within).await.is_some() })
    }

    fn close(&self) -> LinkFuture<'_, ()> {
        Box::pin(self.handle.close())
    }

    fn is_closed(&self) -> bool {
        self.handle.closed_cause().is_some()
    }

    fn read_state(&self) -> LinkFuture<'_, Result<SwitchState, LinkError>> {
        Box::pin(async move {
            let read = async {
                let flows = self
                    .handle
                    .flow_stats(FlowStatsRequest::all())
                    .await
                    .map_err(request_error)?;
                let groups = self.handle.group_desc().await.map_err(request_error)?;
                let meters = match self.handle.meter_config().await {
                    Ok(m) => m,
                    // A switch without meters refuses the request: it holds none.
                    Err(RequestError::Refused { .. }) => Vec::new(),
                    Err(e) => return Err(request_error(e)),
                };
                Ok((flows.into_iter().map(|s| s.flow).collect(), groups, meters))
            };
            match tokio::time::timeout(self.read_deadline, read).await {
                Ok(r) => r,
                Err(_) => Err(self
                    .stalled("the whole-table read", self.read_deadline)
                    .await),
            }
        })
    }

    fn read_diff<'a>(
        &'a self,
        desired: &'a FlowSet,
    ) -> LinkFuture<'a, Result<(FlowDiff, ReadCounts), LinkError>> {
        Box::pin(async move {
            let read = async {
                // The flows come part by part and each part is folded into the diff and
                // dropped: at most a few parts of the table are decoded at once.
                let mut diff = StreamedDiff::new(desired);
                let mut stream = self
                    .handle
                    .flow_stats_stream(FlowStatsRequest::all())
                    .await
                    .map_err(request_error)?;
                while let Some(part) = stream.next().await {
                    diff.fold(part.map_err(request_error)?.into_iter().map(|s| s.flow));
                }
                let counts = ReadCounts {
                    flows: diff.flows_read(),
                    held_at_once: stream.gauge().peak(),
                };
                let groups = self.handle.group_desc().await.map_err(request_error)?;
                let meters = match self.handle.meter_config().await {
                    Ok(m) => m,
                    // A switch without meters refuses the request: it holds none.
                    Err(RequestError::Refused { .. }) => Vec::new(),
                    Err(e) => return Err(request_error(e)),
                };
                Ok((diff.finish(groups, meters), counts))
            };
            match tokio::time::timeout(self.read_deadline, read).await {
                Ok(r) => r,
                Err(_) => Err(self
                    .stalled("the whole-table read", self.read_deadline)
                    .await),
            }
        })
    }

    fn read_marker(&self, cookie: u64) -> LinkFuture<'_, Result<Vec<Flow>, LinkError>> {
        Box::pin(async move {
            let req = FlowStatsRequest {
                table_id: topology::pipeline::marker::MARKER_TABLE,
                cookie,
                cookie_mask: u64::MAX,
                ..FlowStatsRequest::all()
            };
            match tokio::time::timeout(self.read_deadline, self.handle.flow_stats(req)).await {
                Ok(r) => Ok(r
                    .map_err(request_error)?
                    .into_iter()
                    .map(|s| s.flow)
                    .collect()),
                Err(_) => Err(self.stalled("the marker read", self.read_deadline).await),
            }
        })
    }

    fn meter_features(&self) -> LinkFuture<'_, Result<Option<ofproto::MeterFeatures>, LinkError>> {
        Box::pin(async move {
            match self.handle.meter_features().await {
                Ok(f) => Ok(Some(f)),
                Err(RequestError::Refused { .. }) => Ok(None),
                Err(e) => Err(request_error(e)),
            }
        })
    }

    fn ports(&self) -> LinkFuture<'_, Result<Vec<(String, u32)>, LinkError>> {
        Box::pin(async move {
            let ports = self
                .handle
                .ports()
                .await
                .map_err(|c| LinkError::Disconnected(c.to_string()))?;
            Ok(ports
                .values()
                .map(|p| (String::from_utf8_lossy(&p.name).into_owned(), p.port_no))
                .collect())
        })
    }

    fn apply(&self, changes: Vec<SwitchChange>) -> LinkFuture<'_, Result<(), LinkError>> {
        Box::pin(async move {
            // Meters cannot be bundled: the leading ones (adds, modifies) go first as a batch,
            // the trailing ones (deletes) after the bundle.
            let lead = changes
                .iter()
                .take_while(|c| matches!(c, SwitchChange::Meter(_)))
                .count();
            let mut rest = changes;
            let mut body = rest.split_off(lead);
            let before = rest;
            let trail = body
                .iter()
                .rev()
                .take_while(|c| matches!(c, SwitchChange::Meter(_)))
                .count();
            let after = body.split_off(body.len() - trail);
            self.send_meters(before, 0).await?;
            let messages: Vec<Message> = body
                .into_iter()
                .map(|c| match c {
                    SwitchChange::Flow(fm) => Message::FlowMod(fm),
                    SwitchChange::Group(gm) => Message::GroupMod(gm),
                    SwitchChange::Meter(mm) => Message::MeterMod(mm),
                })
                .collect();
            let n = messages.len();
            if n > 0 {
                self.send_bundle(messages, lead).await?;
            }
            self.send_meters(after, lead + n).await
        })
    }
}

impl SessionLink {
    /// Meter-mods in order, closed by a barrier; a refusal names the meter (`base`: the index
    /// of the first in the whole batch).
    async fn send_meters(&self, meters: Vec<SwitchChange>, base: usize) -> Result<(), LinkError> {
        if meters.is_empty() {
            return Ok(());
        }
        let messages: Vec<Message> = meters
            .into_iter()
            .filter_map(|c| match c {
                SwitchChange::Meter(mm) => Some(Message::MeterMod(mm)),
                _ => None,
            })
            .collect();
        match self.handle.send_batch(messages).await {
            Ok(()) => Ok(()),
            Err(ofproto::session::BatchError::Closed(c)) => {
                Err(LinkError::Disconnected(c.to_string()))
            }
            Err(ofproto::session::BatchError::Refused(v)) => {
                let first = v.into_iter().next();
                Err(match first {
                    Some(r) => LinkError::Refused {
                        index: base + r.index,
                        change: ofproto::session::error::describe(&r.message),
                        error: ofproto::session::error::ErrorText(r.error).to_string(),
                    },
                    None => LinkError::Other("meter-mods refused".into()),
                })
            }
        }
    }

    /// The flow and group changes as one bundle (`base`: the index of the first in the
    /// whole batch).
    async fn send_bundle(&self, messages: Vec<Message>, base: usize) -> Result<(), LinkError> {
        let deadline = self.read_deadline + Duration::from_millis(messages.len() as u64);
        let sent = match tokio::time::timeout(deadline, self.handle.send_bundle(messages)).await {
            Ok(r) => r,
            Err(_) => return Err(self.stalled("the bundle", deadline).await),
        };
        match sent {
            Ok(()) => Ok(()),
            Err(BundleError::Closed(c)) => Err(LinkError::Disconnected(c.to_string())),
            Err(BundleError::Refused {
                index,
                message,
                error,
            }) => Err(LinkError::Refused {
                index: base + index,
                change: ofproto::session::error::describe(&message),
                error: ofproto::session::error::ErrorText(error).to_string(),
            }),
            Err(other) => Err(LinkError::Other(other.to_string())),
        }
    }
}

/// Who receives the switches the listener accepts (the core, through its handle): the
/// listener sits below the core and knows it only through this.
pub trait SwitchSink {
    /// A switch is ready: its link, by connection and datapath id.
    fn switch_up(&self, conn_id: u64, dpid: u64, link: Arc<dyn SwitchLink>);
    /// A switch's session ended.
    fn switch_down(&self, conn_id: u64, dpid: u64);
    /// A switch reported an error (counted).
    fn switch_error(&self);
}

/// Hand every session event to the core: ready switches become links of their node's
/// reconciler, disconnects end them; the links' reads and bundles take turns through one
/// [`SyncLimiter`], their audits through one [`AuditPacer`] of `audit_rate` per second. Runs
/// until the listener stops.
pub async fn forward_events(core: impl SwitchSink, mut events: EventStream, audit_rate: f64) {
    let limiter = SyncLimiter::default();
    let audits = AuditPacer::start(audit_rate);
    // Connections handed to the core: only their end is news to it (a peer that never
    // completed a handshake, e.g. one of many hostile connections, is not).
    let mut ready = std::collections::HashSet::new();
    while let Some(ev) = events.next().await {
        match ev {
            SessionEvent::Ready {
                conn,
                peer,
                peer_cert,
                info,
                handle,
                ..
            } => {
                let cert_node = peer_cert.map(|der| crate::identity::switch_node_of(&der));
                if let Some(named) = &cert_node {
                    tracing::info!(
                        %peer,
                        dpid = format!("{:#018x}", info.dpid),
                        cert_node = named.as_deref().unwrap_or("(none)"),
                        "switch authenticated; it may drive only the datapath of the node its certificate names (CN=system:node:NAME)"
                    );
                }
                let link = Arc::new(SessionLink {
                    handle,
                    peer,
                    limiter: limiter.clone(),
                    audits: audits.clone(),
                    read_deadline: READ_DEADLINE,
                    cert_node,
                });
                ready.insert(conn);
                core.switch_up(conn, info.dpid, link);
            }
            SessionEvent::Disconnected {
                conn,
                peer,
                dpid,
                cause,
            } => {
                if !ready.remove(&conn) {
                    tracing::debug!(%peer, dpid = dpid.map(|d| format!("{d:#018x}")), %cause, "switch session ended before its handshake completed");
                    continue;
                }
                tracing::warn!(%peer, dpid = dpid.map(|d| format!("{d:#018x}")), %cause, "switch session ended");
                if let Some(d) = dpid {
                    core.switch_down(conn, d);
                }
            }
            SessionEvent::SwitchError {
                dpid, xid, error, ..
            } => {
                core.switch_error();
                tracing::error!(dpid = dpid.map(|d| format!("{d:#018x}")), xid, error = %ofproto::session::error::ErrorText(error), "switch error");
            }
            SessionEvent::PortStatus { dpid, status, .. } => {
                tracing::debug!(dpid = format!("{dpid:#018x}"), ?status, "port status");
            }
            SessionEvent::Message { .. } | SessionEvent::ConnectFailed { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_are_bounded_and_first_come_first_served() {
        let l = SyncLimiter::new(2);
        let a = l.turn().await;
        let b = l.turn().await;
        assert_eq!(l.available(), 0);
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for i in 0..3 {
            let (l, order) = (l.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let t = l.turn().await;
                order.lock().map(|mut o| o.push(i)).ok();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                drop(t);
            }));
            // Queue them in this order.
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(
            order.lock().map(|o| o.is_empty()).unwrap_or(false),
            "no turn while both are held"
        );
        drop(a);
        drop(b);
        for w in waiting {
            w.await.ok();
        }
        assert_eq!(*order.lock().expect("lock"), vec![0, 1, 2]);
        assert_eq!(l.available(), 2);
        assert_eq!(SyncLimiter::new(0).available(), 1);
    }

    #[tokio::test]
    async fn a_switch_that_refuses_meter_requests_has_no_meters() {
        let fake = ofproto::testing::FakeSwitch::default();
        let (handle, _rx, _switch) = fake
            .connect(ofproto::session::SessionConfig::default(), 64 * 1024)
            .await;
        let link = SessionLink {
            handle,
            peer: "fake".into(),
            limiter: SyncLimiter::new(1),
            audits: AuditPacer::start(1.0),
            read_deadline: READ_DEADLINE,
            cert_node: None,
        };
        assert_eq!(link.meter_features().await, Ok(None));
    }

    #[tokio::test]
    async fn a_read_past_its_deadline_closes_the_connection_and_frees_the_turn() {
        let silent = ofproto::testing::FakeSwitch {
            dpid: 9,
            silent_on_flow_stats: true,
            ..Default::default()
        };
        let (handle, mut rx, _switch) = silent
            .connect(ofproto::session::SessionConfig::default(), 64 * 1024)
            .await;
        let limiter = SyncLimiter::new(1);
        let link = SessionLink {
            handle,
            peer: "fake".into(),
            limiter: limiter.clone(),
            audits: AuditPacer::start(1.0),
            read_deadline: Duration::from_millis(200),
            cert_node: None,
        };
        let turn = link.turn().await;
        assert_eq!(limiter.available(), 0);
        let t0 = std::time::Instant::now();
        let err = link.read_state().await.expect_err("no flow stats answer");
        assert!(t0.elapsed() >= Duration::from_millis(200));
        assert!(
            matches!(&err, LinkError::Disconnected(m) if m.contains("no answer to the whole-table read within 200ms")),
            "{err}"
        );
        drop(turn);
        assert_eq!(limiter.available(), 1, "the turn is free again");
        // The connection is closed: the session ends.
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match rx.recv().await {
                    Some(SessionEvent::Disconnected { .. }) | None => return,
                    Some(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the stalled switch's session was not closed"
        );
    }
}
