//! The controller's side of a session: a cloneable [`SwitchHandle`] whose async methods send
//! typed commands to the session task and await its answer, and the [`SessionEvent`]s the
//! task reports.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::flow::{FlowMod, Group};
use crate::message::{
    BundleControl, BundleCtrlType, BundleFlags, ErrorMsg, FlowStats, FlowStatsRequest, Message,
    MultipartReplyBody, MultipartRequest, MultipartRequestBody, Port, PortStatus, Role,
    RoleRequest,
};

use super::error::{BatchError, BundleError, DisconnectCause, RefusedMessage, RequestError};
use super::fsm::{Failure, Reply, SwitchInfo};

/// Identifies one connection (a switch that reconnects gets a new one).
pub type ConnId = u64;

/// What a session reports.
#[derive(Debug)]
pub enum SessionEvent {
    /// The handshake completed; `handle` drives the switch.
    Ready {
        /// The connection.
        conn: ConnId,
        /// Peer address.
        peer: String,
        /// The end-entity certificate (DER) the switch presented over TLS, verified against
        /// the listener's CA; None on plain TCP.
        peer_cert: Option<std::sync::Arc<[u8]>>,
        /// Datapath id, features, ports, granted role.
        info: SwitchInfo,
        /// True when this datapath id had been connected before (a reconnect).
        reconnect: bool,
        /// The handle.
        handle: SwitchHandle,
    },
    /// A port was added, deleted or modified.
    PortStatus {
        /// The connection.
        conn: ConnId,
        /// Datapath id.
        dpid: u64,
        /// The change.
        status: PortStatus,
    },
    /// The switch sent an OFPT_ERROR that answers no outstanding request.
    SwitchError {
        /// The connection.
        conn: ConnId,
        /// Datapath id, if known.
        dpid: Option<u64>,
        /// The error's xid.
        xid: u32,
        /// The error.
        error: ErrorMsg,
    },
    /// An asynchronous message (packet-in, flow-removed, experimenter).
    Message {
        /// The connection.
        conn: ConnId,
        /// Datapath id.
        dpid: Option<u64>,
        /// The message.
        message: Message,
    },
    /// The connection ended (or never completed its handshake).
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// Peer address.
        peer: String,
        /// Datapath id, if FEATURES_REPLY had arrived.
        dpid: Option<u64>,
        /// Why.
        cause: DisconnectCause,
    },
    /// An active connector could not connect and will retry.
    ConnectFailed {
        /// The target.
        target: String,
        /// The error.
        error: String,
        /// Delay before the next attempt.
        retry_in: std::time::Duration,
    },
}

pub(crate) type ReplyTx = oneshot::Sender<Result<Reply, Failure>>;

/// A command to the session task.
#[derive(Debug)]
pub(crate) enum Command {
    /// A request answered by one reply (barrier, multipart, role, bundle control).
    Request { message: Message, reply: ReplyTx },
    /// A message without a reply (errors come back as [`SessionEvent::SwitchError`]).
    Send { message: Message },
    /// A multipart request whose reply parts go to `sink` one by one as they arrive.
    Stream {
        message: Message,
        sink: StreamSink,
        reply: ReplyTx,
    },
    /// Messages in order, closed by a barrier.
    Batch {
        messages: Arc<Vec<Message>>,
        reply: ReplyTx,
    },
    /// Messages in one atomic bundle.
    Bundle {
        messages: Arc<Vec<Message>>,
        flags: u16,
        reply: ReplyTx,
    },
    /// The current ports.
    Ports {
        reply: oneshot::Sender<BTreeMap<u32, Port>>,
    },
    /// Write-side statistics.
    Stats {
        reply: oneshot::Sender<SessionStats>,
    },
    /// Close the connection.
    Close,
}

/// Write-side statistics of a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Bytes written to the socket.
    pub bytes_written: u64,
    /// Most bytes ever waiting in the write buffer (bounded by the high-water mark plus one
    /// message and a few control messages).
    pub max_buffered: usize,
    /// Messages encoded for batches and bundles.
    pub bulk_messages: u64,
    /// Bytes the write buffer has allocated now (it shrinks back once a large batch or
    /// bundle is written).
    pub buffer_capacity: usize,
}

/// How many parts of a streamed reply may wait in the channel between the session task and
/// the consumer; when it is full the task stops reading the socket until the consumer takes
/// one (the switch's TCP window then holds the rest).
pub const STREAM_QUEUE_PARTS: usize = 2;

/// One part of a streamed multipart reply, on its way to the consumer.
#[derive(Debug)]
pub(crate) struct StreamPart(pub(crate) MultipartReplyBody);

impl StreamPart {
    /// Decoded entries in a part (flows of a flow-stats part; 1 for other bodies).
    pub(crate) fn entries_of(body: &MultipartReplyBody) -> usize {
        match body {
            MultipartReplyBody::Flow(v) => v.len(),
            _ => 1,
        }
    }
}

/// Decoded entries of a streamed reply that are held at once: handed to the channel and not
/// yet released by the consumer (the part being folded included).
#[derive(Debug, Default)]
pub struct StreamGauge {
    held: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
    parts: std::sync::atomic::AtomicUsize,
    largest_part: std::sync::atomic::AtomicUsize,
}

impl StreamGauge {
    fn add(&self, n: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        // The session task counts a part just after handing it over, so the consumer may
        // have released it already (on another thread): `held` is then below zero (wrapped)
        // until this add, which brings it back. Wrapping arithmetic, not a panic.
        let now = self.held.fetch_add(n, Relaxed).wrapping_add(n);
        self.peak.fetch_max(now, Relaxed);
        self.parts.fetch_add(1, Relaxed);
        self.largest_part.fetch_max(n, Relaxed);
    }
    fn release(&self, n: usize) {
        self.held.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }
    /// The most decoded entries held at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Parts received so far.
    pub fn parts(&self) -> usize {
        self.parts.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Entries of the largest part received so far.
    pub fn largest_part(&self) -> usize {
        self.largest_part.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Where the session task puts the parts of one streamed reply.
#[derive(Clone, Debug)]
pub(crate) struct StreamSink {
    pub(crate) tx: mpsc::Sender<StreamPart>,
    gauge: Arc<StreamGauge>,
}

impl StreamSink {
    /// A part was handed over through a reserved slot.
    pub(crate) fn note_sent(&self, body: &MultipartReplyBody) {
        self.gauge.add(StreamPart::entries_of(body));
    }
    /// A part of `n` entries was handed over.
    pub(crate) fn note_entries(&self, n: usize) {
        self.gauge.add(n);
    }
}

/// The flows of a flow-stats reply, one reply part at a time as the switch sends them
/// ([`SwitchHandle::flow_stats_stream`]): at most [`STREAM_QUEUE_PARTS`] parts wait besides
/// the one the caller holds, whatever the size of the table.
#[derive(Debug)]
pub struct FlowStatsStream {
    parts: mpsc::Receiver<StreamPart>,
    done: Option<oneshot::Receiver<Result<Reply, Failure>>>,
    gauge: Arc<StreamGauge>,
    /// Entries of the part last returned (released when the next is asked for).
    out: usize,
    request: Message,
    closed: Arc<tokio::sync::watch::Receiver<Option<DisconnectCause>>>,
}

impl FlowStatsStream {
    /// The next part's flows; None once the reply is complete. The part returned before is
    /// taken as released (the caller has folded it). An error ends the stream.
    pub async fn next(&mut self) -> Option<Result<Vec<FlowStats>, RequestError>> {
        self.gauge.release(std::mem::take(&mut self.out));
        match self.parts.recv().await {
            Some(StreamPart(MultipartReplyBody::Flow(v))) => {
                self.out = v.len();
                Some(Ok(v))
            }
            Some(StreamPart(other)) => {
                self.gauge.release(StreamPart::entries_of(&other));
                self.done = None;
                self.parts.close();
                Some(Err(RequestError::Unexpected(format!(
                    "flow stats request answered with {other:?}"
                ))))
            }
            None => {
                let done = self.done.take()?;
                let gone = || {
                    self.closed
                        .borrow()
                        .clone()
                        .unwrap_or(DisconnectCause::LocalClose)
                };
                match done.await {
                    Ok(Ok(_)) => None,
                    Ok(Err(Failure::Refused(error))) => Some(Err(RequestError::Refused {
                        request: Box::new(self.request.clone()),
                        error,
                    })),
                    Ok(Err(Failure::Closed(c))) => Some(Err(RequestError::Closed(c))),
                    Ok(Err(other)) => Some(Err(RequestError::Unexpected(format!("{other:?}")))),
                    Err(_) => Some(Err(RequestError::Closed(gone()))),
                }
            }
        }
    }

    /// Counts of this read so far: the most decoded entries held at once.
    pub fn gauge(&self) -> &StreamGauge {
        &self.gauge
    }
}

/// Drives one switch connection. Cheap to clone; every method is a message to the task that
/// owns the socket, so calls from many places are serialized in the order they arrive.
#[derive(Clone, Debug)]
pub struct SwitchHandle {
    tx: mpsc::Sender<Command>,
    /// Liveness probes: taken by the task even while a bundle or batch occupies its queue.
    probes: mpsc::Sender<ReplyTx>,
    dpid: u64,
    conn: ConnId,
    closed: Arc<tokio::sync::watch::Receiver<Option<DisconnectCause>>>,
}

impl SwitchHandle {
    pub(crate) fn new(
        tx: mpsc::Sender<Command>,
        probes: mpsc::Sender<ReplyTx>,
        dpid: u64,
        conn: ConnId,
        closed: tokio::sync::watch::Receiver<Option<DisconnectCause>>,
    ) -> Self {
        SwitchHandle {
            tx,
            probes,
            dpid,
            conn,
            closed: Arc::new(closed),
        }
    }

    /// The switch's datapath id.
    pub fn dpid(&self) -> u64 {
        self.dpid
    }

    /// The connection this handle drives.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// Why the session ended, once it has.
    pub fn closed_cause(&self) -> Option<DisconnectCause> {
        self.closed.borrow().clone()
    }

    fn gone(&self) -> DisconnectCause {
        self.closed_cause().unwrap_or(DisconnectCause::LocalClose)
    }

    async fn command(&self, cmd: Command) -> Result<(), DisconnectCause> {
        self.tx.send(cmd).await.map_err(|_| self.gone())
    }

    async fn call(
        &self,
        make: impl FnOnce(ReplyTx) -> Command,
    ) -> Result<Result<Reply, Failure>, DisconnectCause> {
        let (tx, rx) = oneshot::channel();
        self.command(make(tx)).await?;
        rx.await.map_err(|_| self.gone())
    }

    /// Sends a request and awaits its single reply.
    async fn request(&self, message: Message) -> Result<Reply, RequestError> {
        let keep = message.clone();
        match self
            .call(|reply| Command::Request { message, reply })
            .await
            .map_err(RequestError::Closed)?
        {
            Ok(r) => Ok(r),
            Err(Failure::Refused(error)) => Err(RequestError::Refused {
                request: Box::new(keep),
                error,
            }),
            Err(Failure::Closed(c)) => Err(RequestError::Closed(c)),
            Err(other) => Err(RequestError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Writes one message without waiting for anything (pipelined). An error for it arrives
    /// as [`SessionEvent::SwitchError`]; use [`SwitchHandle::send_batch`] to have errors
    /// matched.
    pub async fn send(&self, message: Message) -> Result<(), DisconnectCause> {
        self.command(Command::Send { message }).await
    }

    /// Sends an ECHO_REQUEST at once (ahead of any queued batch or bundle) and returns how long
    /// its ECHO_REPLY took, or None when none came within `within` or the session ended: is
    /// the switch on this connection still there?
    pub async fn probe(&self, within: std::time::Duration) -> Option<std::time::Duration> {
        let t0 = std::time::Instant::now();
        let (tx, rx) = oneshot::channel();
        let answered = async {
            self.probes.send(tx).await.ok()?;
            match rx.await {
                Ok(Ok(Reply::Echo)) => Some(()),
                _ => None,
            }
        };
        tokio::time::timeout(within, answered)
            .await
            .ok()
            .flatten()
            .map(|()| t0.elapsed())
    }

    /// Sends a BARRIER_REQUEST and awaits its reply.
    pub async fn barrier(&self) -> Result<(), RequestError> {
        match self.request(Message::BarrierRequest).await? {
            Reply::Barrier => Ok(()),
            other => Err(RequestError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Sends a multipart request; returns every reply body, reassembled across OFPMPF_MORE.
    pub async fn multipart(
        &self,
        body: MultipartRequestBody,
    ) -> Result<Vec<MultipartReplyBody>, RequestError> {
        let req = Message::MultipartRequest(MultipartRequest::new(body));
        match self.request(req).await? {
            Reply::Multipart(parts) => Ok(parts),
            other => Err(RequestError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Reads flows (OFPMP_FLOW) selected by `req`, across all reply parts.
    pub async fn flow_stats(&self, req: FlowStatsRequest) -> Result<Vec<FlowStats>, RequestError> {
        let mut flows = Vec::new();
        for part in self.multipart(MultipartRequestBody::Flow(req)).await? {
            match part {
                MultipartReplyBody::Flow(v) => flows.extend(v),
                other => {
                    return Err(RequestError::Unexpected(format!(
                        "flow stats request answered with {other:?}"
                    )))
                }
            }
        }
        Ok(flows)
    }

    /// Reads flows (OFPMP_FLOW) selected by `req` as a stream of reply parts: nothing is
    /// reassembled, so a reader that folds each part as it comes holds one part of the table
    /// at a time, not the table.
    pub async fn flow_stats_stream(
        &self,
        req: FlowStatsRequest,
    ) -> Result<FlowStatsStream, RequestError> {
        let (tx, parts) = mpsc::channel(STREAM_QUEUE_PARTS);
        let (reply, done) = oneshot::channel();
        let gauge = Arc::new(StreamGauge::default());
        let message =
            Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(req)));
        let request = message.clone();
        self.command(Command::Stream {
            message,
            sink: StreamSink {
                tx,
                gauge: gauge.clone(),
            },
            reply,
        })
        .await
        .map_err(RequestError::Closed)?;
        Ok(FlowStatsStream {
            parts,
            done: Some(done),
            gauge,
            out: 0,
            request,
            closed: self.closed.clone(),
        })
    }

    /// Reads every group (OFPMP_GROUP_DESC).
    pub async fn group_desc(&self) -> Result<Vec<Group>, RequestError> {
        let mut groups = Vec::new();
        for part in self.multipart(MultipartRequestBody::GroupDesc).await? {
            match part {
                MultipartReplyBody::GroupDesc(v) => groups.extend(v),
                other => {
                    return Err(RequestError::Unexpected(format!(
                        "group desc request answered with {other:?}"
                    )))
                }
            }
        }
        Ok(groups)
    }

    /// Reads every meter's configuration (OFPMP_METER_CONFIG).
    pub async fn meter_config(&self) -> Result<Vec<crate::meter::Meter>, RequestError> {
        let mut meters = Vec::new();
        let all = crate::meter::meter_id::ALL;
        for part in self
            .multipart(MultipartRequestBody::MeterConfig(all))
            .await?
        {
            match part {
                MultipartReplyBody::MeterConfig(v) => meters.extend(v),
                other => {
                    return Err(RequestError::Unexpected(format!(
                        "meter config request answered with {other:?}"
                    )))
                }
            }
        }
        Ok(meters)
    }

    /// Reads every meter's statistics (OFPMP_METER).
    pub async fn meter_stats(&self) -> Result<Vec<crate::meter::MeterStats>, RequestError> {
        let mut stats = Vec::new();
        let all = crate::meter::meter_id::ALL;
        for part in self.multipart(MultipartRequestBody::Meter(all)).await? {
            match part {
                MultipartReplyBody::Meter(v) => stats.extend(v),
                other => {
                    return Err(RequestError::Unexpected(format!(
                        "meter stats request answered with {other:?}"
                    )))
                }
            }
        }
        Ok(stats)
    }

    /// Reads the switch's meter features (OFPMP_METER_FEATURES).
    pub async fn meter_features(&self) -> Result<crate::meter::MeterFeatures, RequestError> {
        match self
            .multipart(MultipartRequestBody::MeterFeatures)
            .await?
            .into_iter()
            .next()
        {
            Some(MultipartReplyBody::MeterFeatures(f)) => Ok(f),
            other => Err(RequestError::Unexpected(format!(
                "meter features request answered with {other:?}"
            ))),
        }
    }

    /// Requests a role; returns the switch's ROLE_REPLY. A stale generation id comes back as
    /// [`RequestError::Refused`] with OFPRRFC_STALE.
    pub async fn role_request(
        &self,
        role: Role,
        generation_id: u64,
    ) -> Result<RoleRequest, RequestError> {
        let req = Message::RoleRequest(RoleRequest {
            role,
            generation_id,
        });
        match self.request(req).await? {
            Reply::Role(r) => Ok(r),
            other => Err(RequestError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The current ports (PORT_DESC plus every PORT_STATUS since).
    pub async fn ports(&self) -> Result<BTreeMap<u32, Port>, DisconnectCause> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Ports { reply: tx }).await?;
        rx.await.map_err(|_| self.gone())
    }

    /// Write-side statistics.
    pub async fn stats(&self) -> Result<SessionStats, DisconnectCause> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Stats { reply: tx }).await?;
        rx.await.map_err(|_| self.gone())
    }

    /// Sends one flow-mod followed by a barrier; a refusal names the flow.
    pub async fn flow_mod(&self, fm: FlowMod) -> Result<(), RequestError> {
        match self.send_batch(vec![Message::FlowMod(fm)]).await {
            Ok(()) => Ok(()),
            Err(BatchError::Refused(mut v)) if !v.is_empty() => {
                let r = v.swap_remove(0);
                Err(RequestError::Refused {
                    request: r.message,
                    error: r.error,
                })
            }
            Err(BatchError::Refused(_)) => Err(RequestError::Unexpected("empty refusal".into())),
            Err(BatchError::Closed(c)) => Err(RequestError::Closed(c)),
        }
    }

    /// Sends `messages` in order, pipelined, closed by one barrier; reports every refused
    /// message by index. Not atomic: the others are applied.
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<(), BatchError> {
        let messages = Arc::new(messages);
        let m = messages.clone();
        let res = self
            .call(|reply| Command::Batch { messages: m, reply })
            .await
            .map_err(BatchError::Closed)?;
        match res {
            Ok(_) => Ok(()),
            Err(Failure::BatchRefused(v)) => Err(BatchError::Refused(name_refused(&messages, v))),
            Err(Failure::Closed(c)) => Err(BatchError::Closed(c)),
            Err(other) => Err(BatchError::Closed(DisconnectCause::Protocol(format!(
                "batch: {other:?}"
            )))),
        }
    }

    /// Sends `messages` as one atomic, ordered ONF bundle and waits until the switch has
    /// committed it (barrier reply). If the switch refuses any message, the bundle is
    /// discarded, nothing changes, and the error names the message. A switch that does not
    /// do bundles gets an ordered batch closed by a barrier instead (logged).
    pub async fn send_bundle(&self, messages: Vec<Message>) -> Result<(), BundleError> {
        let messages = Arc::new(messages);
        let m = messages.clone();
        let flags = BundleFlags::ATOMIC | BundleFlags::ORDERED;
        let res = self
            .call(|reply| Command::Bundle {
                messages: m,
                flags,
                reply,
            })
            .await
            .map_err(BundleError::Closed)?;
        match res {
            Ok(_) => Ok(()),
            Err(Failure::BundleRefused { index, error }) => Err(BundleError::Refused {
                index,
                message: Box::new(messages.get(index).cloned().unwrap_or(Message::Unknown {
                    msg_type: 0xff,
                    body: Vec::new(),
                })),
                error,
            }),
            Err(Failure::BundleCommitFailed(e)) | Err(Failure::Refused(e)) => {
                Err(BundleError::CommitFailed(e))
            }
            Err(Failure::BatchRefused(v)) => Err(BundleError::Batch(BatchError::Refused(
                name_refused(&messages, v),
            ))),
            Err(Failure::Closed(c)) => Err(BundleError::Closed(c)),
            Err(other) => Err(BundleError::Closed(DisconnectCause::Protocol(format!(
                "bundle: {other:?}"
            )))),
        }
    }

    /// Low level: sends a bundle control message and awaits its reply.
    pub async fn bundle_control(
        &self,
        bundle_id: u32,
        ctrl_type: BundleCtrlType,
        flags: u16,
    ) -> Result<BundleControl, RequestError> {
        let req = Message::BundleControl(BundleControl::new(bundle_id, ctrl_type, flags));
        match self.request(req).await? {
            Reply::BundleControl(b) => Ok(b),
            other => Err(RequestError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Low level: opens bundle `bundle_id`.
    pub async fn bundle_open(&self, bundle_id: u32, flags: u16) -> Result<(), RequestError> {
        self.bundle_control(bundle_id, BundleCtrlType::OpenRequest, flags)
            .await
            .map(|_| ())
    }

    /// Low level: adds a message to an open bundle, then a barrier: a refusal of this add
    /// comes back here, naming the message.
    pub async fn bundle_add(
        &self,
        bundle_id: u32,
        flags: u16,
        message: Message,
    ) -> Result<(), RequestError> {
        let add = Message::BundleAdd(crate::message::BundleAdd::new(bundle_id, flags, message));
        match self.send_batch(vec![add]).await {
            Ok(()) => Ok(()),
            Err(BatchError::Refused(mut v)) if !v.is_empty() => {
                let r = v.swap_remove(0);
                let request = match *r.message {
                    Message::BundleAdd(a) => a.message,
                    other => Box::new(other),
                };
                Err(RequestError::Refused {
                    request,
                    error: r.error,
                })
            }
            Err(BatchError::Refused(_)) => Err(RequestError::Unexpected("empty refusal".into())),
            Err(BatchError::Closed(c)) => Err(RequestError::Closed(c)),
        }
    }

    /// Low level: commits bundle `bundle_id`.
    pub async fn bundle_commit(&self, bundle_id: u32, flags: u16) -> Result<(), RequestError> {
        self.bundle_control(bundle_id, BundleCtrlType::CommitRequest, flags)
            .await
            .map(|_| ())
    }

    /// Low level: discards bundle `bundle_id`.
    pub async fn bundle_discard(&self, bundle_id: u32, flags: u16) -> Result<(), RequestError> {
        self.bundle_control(bundle_id, BundleCtrlType::DiscardRequest, flags)
            .await
            .map(|_| ())
    }

    /// Closes the connection (the switch will reconnect, as switches do).
    pub async fn close(&self) {
        let _ = self.tx.send(Command::Close).await;
    }
}

fn name_refused(messages: &[Message], v: Vec<(usize, ErrorMsg)>) -> Vec<RefusedMessage> {
    v.into_iter()
        .map(|(index, error)| RefusedMessage {
            index,
            message: Box::new(messages.get(index).cloned().unwrap_or(Message::Unknown {
                msg_type: 0xff,
                body: Vec::new(),
            })),
            error,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The consumer of a streamed reply may release a part before the session task has
    /// counted it (they run on different threads): the gauge must come back to zero, not
    /// overflow (a debug build panicked in the session task, closing the switch's session).
    #[test]
    fn a_part_released_before_it_is_counted_leaves_the_gauge_at_zero() {
        let g = StreamGauge::default();
        g.add(7);
        g.release(7);
        g.release(10);
        g.add(10);
        assert_eq!(g.held.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(g.peak(), 7);
        assert_eq!((g.parts(), g.largest_part()), (2, 10));
    }
}
