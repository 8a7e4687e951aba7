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
