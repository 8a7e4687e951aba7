//! The task that owns one switch connection: it reads and frames what the switch sends,
//! feeds the state machine, writes what it must, and runs commands from the handles.
//!
//! Writes are pipelined through one bounded buffer: large batches and bundles are encoded
//! lazily, a slice at a time, only while the buffer holds less than the low-water mark, and
//! the buffer is written with as few syscalls as the socket allows. The socket's own
//! backpressure therefore bounds memory, and reads go on while a slow switch drains writes.
//! Commands are only taken from the handles' queue while the write side has room, so a
//! slow switch pushes back on its callers, never on other switches (one task each).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::error::DecodeError;
use crate::message::{BadRequestCode, HEADER_LEN};
use crate::message::{
    BundleControl, BundleCtrlType, ErrorKind, ErrorMsg, Framer, Message, MessageHeader,
};

use super::encode::{encode_bundle_add, encode_message};
use super::error::DisconnectCause;
use super::fsm::{Failure, FsmConfig, Output, SessionFsm};
use super::handle::{
    Command, ConnId, ReplyTx, SessionEvent, SessionStats, StreamPart, StreamSink, SwitchHandle,
};

/// Options of a session task.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Handshake and liveness.
    pub fsm: FsmConfig,
    /// Commands a handle may queue before its calls wait.
    pub command_queue: usize,
    /// Encode more only while fewer bytes than this wait to be written.
    pub write_low_water: usize,
    /// Stop encoding a batch once this many bytes wait to be written.
    pub write_high_water: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            fsm: FsmConfig::default(),
            command_queue: 256,
            write_low_water: 1 << 20,
            write_high_water: 4 << 20,
        }
    }
}

/// Write buffer a session keeps while idle (it grows while a batch or bundle is written).
const WBUF_KEEP: usize = 64 * 1024;

/// Whoever waits for a request; a bundle keeps its messages to fall back to a batch.
#[derive(Debug)]
struct Responder {
    reply: ReplyTx,
    fallback: Option<Arc<Vec<Message>>>,
}

/// Work queued for the write side, in order.
#[derive(Debug)]
enum Job {
    Request {
        message: Message,
        reply: ReplyTx,
    },
    Send {
        message: Message,
    },
    /// A multipart request whose reply parts go to `sink` as they arrive.
    Stream {
        message: Message,
        sink: StreamSink,
        reply: ReplyTx,
    },
    Batch {
        messages: Arc<Vec<Message>>,
        reply: Option<ReplyTx>,
        next: usize,
        base: u32,
    },
    Bundle {
        messages: Arc<Vec<Message>>,
        flags: u16,
        reply: Option<ReplyTx>,
        next: usize,
        base: u32,
    },
}

/// The state a session task owns.
struct Session {
    conn: ConnId,
    peer: String,
    peer_cert: Option<Arc<[u8]>>,
    cfg: SessionConfig,
    fsm: SessionFsm<Responder>,
    events: mpsc::UnboundedSender<SessionEvent>,
    cmd_tx: mpsc::Sender<Command>,
    probe_tx: mpsc::Sender<ReplyTx>,
    closed_tx: watch::Sender<Option<DisconnectCause>>,
    wbuf: Vec<u8>,
    wpos: usize,
    jobs: VecDeque<Job>,
    outputs: Vec<Output<Responder>>,
    /// Outputs not yet carried out because a streamed part ahead of them waits for room in
    /// its consumer's channel: while any wait, nothing more is read from the socket or
    /// decoded, so a slow consumer pushes back on the switch (TCP) instead of piling up parts.
    held: VecDeque<Output<Responder>>,
    /// Where the parts of each streamed multipart reply go, by xid.
    streams: HashMap<u32, StreamSink>,
    close: Option<DisconnectCause>,
    stats: SessionStats,
}

/// Runs a session on an established connection until it ends; reports everything on
/// `events` (the last event is always [`SessionEvent::Disconnected`]).
pub async fn run_session<S>(
    stream: S,
    conn: ConnId,
    peer: String,
    cfg: SessionConfig,
    events: mpsc::UnboundedSender<SessionEvent>,
) -> DisconnectCause
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    run_session_with_cert(stream, conn, peer, None, cfg, events).await
}

/// [`run_session`] on a TLS connection whose peer presented `peer_cert` (the DER end-entity
/// certificate, already verified by the TLS layer); the certificate is handed on in
/// [`SessionEvent::Ready`] so that the controller can bind it to the datapath.
pub async fn run_session_with_cert<S>(
    stream: S,
    conn: ConnId,
    peer: String,
    peer_cert: Option<Arc<[u8]>>,
    cfg: SessionConfig,
    events: mpsc::UnboundedSender<SessionEvent>,
) -> DisconnectCause
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (cmd_tx, mut cmd_rx) = mpsc::channel(cfg.command_queue.max(1));
    let (probe_tx, mut probe_rx) = mpsc::channel(4);
    let (closed_tx, _) = watch::channel(None);
    let mut s = Session {
        conn,
        peer,
        peer_cert,
        fsm: SessionFsm::new(cfg.fsm.clone(), Instant::now()),
        cfg,
        events,
        cmd_tx,
        probe_tx,
        closed_tx,
        wbuf: Vec::with_capacity(WBUF_KEEP),
        wpos: 0,
        jobs: VecDeque::new(),
        outputs: Vec::new(),
        held: VecDeque::new(),
        streams: HashMap::new(),
        close: None,
        stats: SessionStats::default(),
    };
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut framer = Framer::new();
    // One OpenFlow message is at most 64 KiB: a read of that size takes a whole one.
    let mut rbuf = vec![0u8; 64 * 1024];
    let mut needs_flush = false;
    s.fsm.start(&mut s.outputs);
    s.apply_outputs();

    while s.close.is_none() {
        s.refill();
        let pending_write = s.wpos < s.wbuf.len();
        let take_commands = s.fsm.is_ready() && s.jobs.is_empty() && !s.write_full();
        let deadline = s
            .fsm
            .next_deadline()
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        // A streamed part waiting for room in its consumer's channel.
        let stalled = s.stalled_sink();
        tokio::select! {
            biased;
            permit = async {
                match &stalled {
                    Some(sink) => sink.tx.clone().reserve_owned().await.ok(),
                    None => std::future::pending().await,
                }
            }, if stalled.is_some() => {
                s.resume(permit);
                if s.held.is_empty() {
                    s.on_bytes(&mut framer);
                }
            },
            r = reader.read(&mut rbuf), if s.held.is_empty() => match r {
                Ok(0) => s.close_with(DisconnectCause::PeerClosed),
                Ok(n) => {
                    framer.push(rbuf.get(..n).unwrap_or_default());
                    // Probes go out even while the switch streams (the read is polled first).
                    while let Ok(reply) = probe_rx.try_recv() {
                        s.fsm.begin_echo(Responder { reply, fallback: None }, &mut s.outputs);
                    }
                    s.on_bytes(&mut framer);
                }
                Err(e) => s.close_with(DisconnectCause::Io(e.to_string())),
            },
            w = write_or_flush(&mut writer, s.wbuf.get(s.wpos..).unwrap_or_default()),
                if pending_write || needs_flush => match w {
                Ok(None) => needs_flush = false,
                Ok(Some(0)) => s.close_with(DisconnectCause::Io("socket accepted no bytes".into())),
                Ok(Some(n)) => {
                    s.stats.bytes_written += n as u64;
                    s.wpos += n;
                    needs_flush = true;
                    if s.wpos == s.wbuf.len() {
                        s.wbuf.clear();
                        s.wpos = 0;
                        // A large bundle grew the buffer to megabytes; an idle session keeps
                        // only a small one (1,000 sessions otherwise hold a bundle's worth
                        // each long after a connect storm).
                        if s.wbuf.capacity() > 4 * WBUF_KEEP {
                            s.wbuf.shrink_to(WBUF_KEEP);
                        }
                    }
                }
                Err(e) => s.close_with(DisconnectCause::Io(e.to_string())),
            },
            _ = tokio::time::sleep_until(deadline) => {
                s.fsm.tick(Instant::now(), &mut s.outputs);
                s.apply_outputs();
            },
            cmd = cmd_rx.recv(), if take_commands => {
                if let Some(cmd) = cmd {
                    s.on_command(cmd);
                }
            },
            // A liveness probe goes out at once, whatever is queued (it changes nothing).
            Some(reply) = probe_rx.recv(), if s.fsm.is_ready() => {
                let responder = Responder { reply, fallback: None };
                s.fsm.begin_echo(responder, &mut s.outputs);
                s.apply_outputs();
            },
        }
    }
    let cause = s.close.clone().unwrap_or(DisconnectCause::LocalClose);
    // Best effort: let a HELLO_FAILED or a last reply reach the switch.
    if s.wpos < s.wbuf.len() {
        let rest = s.wbuf.get(s.wpos..).unwrap_or_default();
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            let _ = writer.write_all(rest).await;
            let _ = writer.flush().await;
        })
        .await;
    }
    let _ = tokio::time::timeout(Duration::from_millis(200), writer.shutdown()).await;
    s.finish(cause.clone());
    cause
}

/// Writes some of `buf` (Some(bytes written)), or flushes when it is empty (None).
async fn write_or_flush<W: AsyncWrite + Unpin>(
    writer: &mut W,
    buf: &[u8],
) -> std::io::Result<Option<usize>> {
    if buf.is_empty() {
        writer.flush().await.map(|_| None)
    } else {
        writer.write(buf).await.map(Some)
    }
}

impl Session {
    fn buffered(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    fn write_full(&self) -> bool {
        self.buffered() >= self.cfg.write_low_water
    }

    fn close_with(&mut self, cause: DisconnectCause) {
        if !self.fsm.is_closed() {
            self.fsm.close(cause, &mut self.outputs);
            // Nothing more will be read: a part still waiting for its consumer is dropped
            // (its request fails with the cause).
            self.streams.clear();
            self.apply_outputs();
        }
    }

    /// The sink of the streamed part at the head of [`Session::held`], if one waits.
    fn stalled_sink(&self) -> Option<StreamSink> {
        match self.held.front() {
            Some(Output::Part { xid, .. }) => self.streams.get(xid).cloned(),
            _ => None,
        }
    }

    /// The consumer of the waiting part has room (`Some`) or is gone (`None`): hand the part
    /// over, then carry out what waited behind it.
    fn resume(&mut self, permit: Option<mpsc::OwnedPermit<StreamPart>>) {
        if let Some(Output::Part { xid, body }) = self.held.pop_front() {
            match (permit, self.streams.get(&xid)) {
                (Some(permit), Some(sink)) => {
                    sink.note_sent(&body);
                    permit.send(StreamPart(body));
                }
                _ => {
                    self.streams.remove(&xid);
                }
            }
        }
        self.apply_outputs();
    }

    fn dpid(&self) -> Option<u64> {
        self.fsm.dpid()
    }

    fn emit(&self, ev: SessionEvent) {
        let _ = self.events.send(ev);
    }

    /// Decode every whole message received so far.
    fn on_bytes(&mut self, framer: &mut Framer) {
        let now = Instant::now();
        loop {
            match framer.next_message() {
                Ok(None) => break,
                Ok(Some((h, Ok(msg)))) => self.fsm.on_message(&h, msg, now, &mut self.outputs),
                Ok(Some((h, Err(e)))) => self.on_undecodable(&h, &e),
                Err(e) => {
                    self.close_with(DisconnectCause::Protocol(format!("framing: {e}")));
                    return;
                }
            }
            let part = matches!(self.outputs.last(), Some(Output::Part { .. }));
            if part || self.outputs.len() > 64 {
                self.apply_outputs();
            }
            if !self.held.is_empty() {
                // A streamed part waits for its consumer: decode no further until it is taken
                // (the rest stays in the framer, and the socket is not read meanwhile).
                return;
            }
        }
        self.apply_outputs();
    }

    fn on_undecodable(&mut self, h: &MessageHeader, e: &DecodeError) {
        warn!(
            conn = self.conn,
            dpid = ?self.dpid(),
            xid = h.xid,
            msg_type = h.msg_type,
            "could not decode a message from the switch: {e}"
        );
        // A request waiting for this xid fails instead of hanging.
        let err = ErrorMsg {
            kind: ErrorKind::BadRequest(BadRequestCode::BadLen),
            data: format!("undecodable reply: {e}").into_bytes(),
        };
        let fake = MessageHeader {
            msg_type: crate::message::msg_type::ERROR,
            ..*h
        };
        if h.msg_type != crate::message::msg_type::ERROR && self.fsm.awaits(h.xid) {
            self.fsm.on_message(
                &fake,
                Message::Error(err),
                Instant::now(),
                &mut self.outputs,
            );
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Request { message, reply } => {
                self.jobs.push_back(Job::Request { message, reply })
            }
            Command::Send { message } => self.jobs.push_back(Job::Send { message }),
            Command::Stream {
                message,
                sink,
                reply,
            } => self.jobs.push_back(Job::Stream {
                message,
                sink,
                reply,
            }),
            Command::Batch { messages, reply } => self.jobs.push_back(Job::Batch {
                messages,
                reply: Some(reply),
                next: 0,
                base: 0,
            }),
            Command::Bundle {
                messages,
                flags,
                reply,
            } => self.jobs.push_back(Job::Bundle {
                messages,
                flags,
                reply: Some(reply),
                next: 0,
                base: 0,
            }),
            Command::Ports { reply } => {
                let _ = reply.send(self.fsm.ports().clone());
            }
            Command::Stats { reply } => {
                let _ = reply.send(SessionStats {
                    buffer_capacity: self.wbuf.capacity(),
                    ..self.stats
                });
            }
            Command::Close => self.close_with(DisconnectCause::LocalClose),
        }
    }

    /// Encode queued jobs while the buffer is below the low-water mark.
    fn refill(&mut self) {
        while self.buffered() < self.cfg.write_low_water {
            let Some(job) = self.jobs.front_mut() else {
                break;
            };
            // A bundle waiting for its prepare barrier holds back later jobs (not itself).
            let started = matches!(
                job,
                Job::Batch { reply: None, .. } | Job::Bundle { reply: None, .. }
            );
            if !started && self.fsm.bundle_gate_closed() {
                break;
            }
            let high = self.cfg.write_high_water;
            let done = match job {
                Job::Request { .. } | Job::Send { .. } | Job::Stream { .. } => {
                    match self.jobs.pop_front() {
                        Some(Job::Request { message, reply }) => self.write_request(message, reply),
                        Some(Job::Stream {
                            message,
                            sink,
                            reply,
                        }) => self.write_stream(message, sink, reply),
                        Some(Job::Send { message }) => {
                            let xid = self.fsm.alloc_xid();
                            if let Err(e) = encode_message(&message, xid, &mut self.wbuf) {
                                warn!(conn = self.conn, "not sent: {e}");
                            }
                        }
                        _ => {}
                    }
                    continue;
                }
                Job::Batch {
                    messages,
                    reply,
                    next,
                    base,
                } => {
                    let n = u32::try_from(messages.len()).unwrap_or(u32::MAX);
                    if let Some(reply) = reply.take() {
                        *base = self.fsm.begin_batch(
                            n,
                            Responder {
                                reply,
                                fallback: None,
                            },
                        );
                    }
                    let base = *base;
                    let mut refused = Vec::new();
                    while *next < messages.len() && self.wbuf.len() - self.wpos < high {
                        let xid = base.wrapping_add(*next as u32);
                        if let Some(m) = messages.get(*next) {
                            if let Err(e) = encode_message(m, xid, &mut self.wbuf) {
                                refused.push((xid, e));
                            }
                        }
                        *next += 1;
                        self.stats.bulk_messages += 1;
                    }
                    let done = *next >= messages.len();
                    if done {
                        let _ = encode_message(
                            &Message::BarrierRequest,
                            base.wrapping_add(n),
                            &mut self.wbuf,
                        );
                    }
                    self.refuse_locally(refused);
                    done
                }
                Job::Bundle {
                    messages,
                    flags,
                    reply,
                    next,
                    base,
                } => {
                    let n = u32::try_from(messages.len()).unwrap_or(u32::MAX);
                    if let Some(reply) = reply.take() {
                        let responder = Responder {
                            reply,
                            fallback: Some(messages.clone()),
                        };
                        if !self.fsm.bundles_supported() {
                            // Known not to do bundles: an ordered batch instead.
                            let fallback = Job::Batch {
                                messages: messages.clone(),
                                reply: Some(responder.reply),
                                next: 0,
                                base: 0,
                            };
                            self.jobs.pop_front();
                            self.jobs.push_front(fallback);
                            continue;
                        }
                        *base = self.fsm.begin_bundle(n, *flags, responder);
                        let open = Message::BundleControl(BundleControl::new(
                            *base,
                            BundleCtrlType::OpenRequest,
                            *flags,
                        ));
                        let _ = encode_message(&open, *base, &mut self.wbuf);
                    }
                    let (base, flags) = (*base, *flags);
                    let mut refused = Vec::new();
                    while *next < messages.len() && self.wbuf.len() - self.wpos < high {
                        let xid = base.wrapping_add(1).wrapping_add(*next as u32);
                        if let Some(m) = messages.get(*next) {
                            if let Err(e) = encode_bundle_add(base, flags, m, xid, &mut self.wbuf) {
                                refused.push((xid, e));
                            }
                        }
                        *next += 1;
                        self.stats.bulk_messages += 1;
                    }
                    let done = *next >= messages.len();
                    if done {
                        let prepare = base.wrapping_add(n).wrapping_add(1);
                        let _ = encode_message(&Message::BarrierRequest, prepare, &mut self.wbuf);
                    }
                    self.refuse_locally(refused);
                    done
                }
            };
            if done {
                self.jobs.pop_front();
            }
        }
        self.note_buffered();
    }

    fn note_buffered(&mut self) {
        self.stats.max_buffered = self.stats.max_buffered.max(self.buffered());
    }

    /// A message that could not be encoded is refused as if the switch had (OFPBRC_BAD_LEN).
    fn refuse_locally(&mut self, refused: Vec<(u32, super::encode::TooLong)>) {
        for (xid, e) in refused {
            warn!(conn = self.conn, xid, "not sent: {e}");
            let h = MessageHeader {
                version: crate::message::OFP_VERSION,
                msg_type: crate::message::msg_type::ERROR,
                length: HEADER_LEN as u16,
                xid,
            };
            let err = ErrorMsg {
                kind: ErrorKind::BadRequest(BadRequestCode::BadLen),
                data: e.to_string().into_bytes(),
            };
            self.fsm
                .on_message(&h, Message::Error(err), Instant::now(), &mut self.outputs);
        }
        self.apply_outputs();
    }

    fn write_request(&mut self, message: Message, reply: ReplyTx) {
        let responder = Responder {
            reply,
            fallback: None,
        };
        match self.fsm.begin_request(&message, responder) {
            Ok(xid) => {
                if let Err(e) = encode_message(&message, xid, &mut self.wbuf) {
                    self.refuse_locally(vec![(xid, e)]);
                }
            }
            Err(r) => {
                let _ = r.reply.send(Err(Failure::Unexpected(format!(
                    "message type {} is not a request with a reply",
                    message.msg_type()
                ))));
            }
        }
    }

    fn write_stream(&mut self, message: Message, sink: StreamSink, reply: ReplyTx) {
        let responder = Responder {
            reply,
            fallback: None,
        };
        match self.fsm.begin_stream(&message, responder) {
            Ok(xid) => {
                self.streams.insert(xid, sink);
                if let Err(e) = encode_message(&message, xid, &mut self.wbuf) {
                    self.refuse_locally(vec![(xid, e)]);
                }
            }
            Err(r) => {
                let _ = r.reply.send(Err(Failure::Unexpected(format!(
                    "message type {} is not a multipart request",
                    message.msg_type()
                ))));
            }
        }
    }

    /// Carry out what the state machine asked for, in order; stops at a streamed part whose
    /// consumer has no room (see [`Session::held`]).
    fn apply_outputs(&mut self) {
        if self.fsm.is_closed() {
            // Nothing more will be read: no part may hold back the outputs of the close.
            self.streams.clear();
        }
        self.held.extend(self.outputs.drain(..));
        while let Some(o) = self.held.pop_front() {
            match o {
                Output::Part { xid, body } => {
                    let Some(sink) = self.streams.get(&xid) else {
                        continue; // its consumer is gone
                    };
                    let n = StreamPart::entries_of(&body);
                    match sink.tx.try_send(StreamPart(body)) {
                        Ok(()) => sink.note_entries(n),
                        Err(mpsc::error::TrySendError::Full(StreamPart(body))) => {
                            self.held.push_front(Output::Part { xid, body });
                            return;
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => {
                            self.streams.remove(&xid);
                        }
                    }
                }
                Output::StreamEnd { xid } => {
                    self.streams.remove(&xid);
                }
                Output::Send { xid, message } => {
                    if let Err(e) = encode_message(&message, xid, &mut self.wbuf) {
                        warn!(conn = self.conn, "not sent: {e}");
                    }
                }
                Output::Ready(info) => {
                    info!(
                        conn = self.conn,
                        peer = %self.peer,
                        dpid = format_args!("{:#018x}", info.dpid),
                        ports = info.ports.len(),
                        "switch ready"
                    );
                    let handle = SwitchHandle::new(
                        self.cmd_tx.clone(),
                        self.probe_tx.clone(),
                        info.dpid,
                        self.conn,
                        self.closed_tx.subscribe(),
                    );
                    self.emit(SessionEvent::Ready {
                        conn: self.conn,
                        peer: self.peer.clone(),
                        peer_cert: self.peer_cert.clone(),
                        info,
                        reconnect: false,
                        handle,
                    });
                }
                Output::PortStatus(status) => self.emit(SessionEvent::PortStatus {
                    conn: self.conn,
                    dpid: self.dpid().unwrap_or_default(),
                    status,
                }),
                Output::UnsolicitedError { xid, error } => {
                    warn!(
                        conn = self.conn,
                        dpid = ?self.dpid(),
                        xid,
                        "switch error: {}",
                        super::error::ErrorText(error.clone())
                    );
                    self.emit(SessionEvent::SwitchError {
                        conn: self.conn,
                        dpid: self.dpid(),
                        xid,
                        error,
                    })
                }
                Output::Async(message) => self.emit(SessionEvent::Message {
                    conn: self.conn,
                    dpid: self.dpid(),
                    message,
                }),
                Output::Complete { responder, result } => self.complete(responder, result),
                Output::Close(cause) => {
                    if let DisconnectCause::VersionMismatch { offered } = &cause {
                        warn!(
                            conn = self.conn,
                            peer = %self.peer,
                            "refusing switch: it offers OpenFlow wire versions {offered:02x?}, \
                             flowmesh speaks only OpenFlow 1.3 (0x04); sent HELLO_FAILED"
                        );
                    }
                    self.close = Some(cause);
                }
            }
        }
    }

    fn complete(&mut self, responder: Responder, result: Result<super::fsm::Reply, Failure>) {
        match (result, responder.fallback) {
            (Err(Failure::BundleUnsupported(e)), Some(messages)) => {
                warn!(
                    conn = self.conn,
                    dpid = ?self.dpid(),
                    "switch refused to open a bundle ({}); sending bundles as ordered \
                     batches closed by a barrier (not atomic) from now on",
                    super::error::ErrorText(e)
                );
                self.jobs.push_front(Job::Batch {
                    messages,
                    reply: Some(responder.reply),
                    next: 0,
                    base: 0,
                });
            }
            (result, _) => {
                let _ = responder.reply.send(result);
            }
        }
    }

    fn finish(&mut self, cause: DisconnectCause) {
        // Requests still queued (never written) fail too.
        for job in self.jobs.drain(..) {
            let reply = match job {
                Job::Request { reply, .. } | Job::Stream { reply, .. } => Some(reply),
                Job::Batch { reply, .. } | Job::Bundle { reply, .. } => reply,
                Job::Send { .. } => None,
            };
            if let Some(r) = reply {
                let _ = r.send(Err(Failure::Closed(cause.clone())));
            }
        }
        self.streams.clear();
        self.held.clear();
        let _ = self.closed_tx.send(Some(cause.clone()));
        debug!(conn = self.conn, dpid = ?self.dpid(), "session ended: {cause}");
        self.emit(SessionEvent::Disconnected {
            conn: self.conn,
            peer: self.peer.clone(),
            dpid: self.dpid(),
            cause,
        });
    }
}
