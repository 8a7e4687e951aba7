//! The switch session as a pure state machine: handshake, xid allocation, the table of
//! outstanding requests, and echo liveness. No I/O and no clock: every input carries `now`,
//! and every effect comes back as an [`Output`] for the task that owns the socket.
//!
//! Requests own a contiguous range of xids, so that an OFPT_ERROR names the exact message
//! that caused it: a single request owns one xid; a batch of N messages owns N+1 (the
//! messages, then its barrier); a bundle of N messages owns N+4:
//!
//! ```text
//! base        BUNDLE_CONTROL OPEN_REQUEST
//! base+1..=N  BUNDLE_ADD #0..#N-1 (Open vSwitch requires the embedded xid to be the same)
//! base+N+1    BARRIER   "prepare": every add has been validated once its reply arrives
//! base+N+2    BUNDLE_CONTROL COMMIT_REQUEST (or DISCARD_REQUEST after a refused add)
//! base+N+3    BARRIER   the bundle's outcome is final once its reply arrives
//! ```
//! Open vSwitch reports a refused add with the add's xid, both when it is refused at add time
//! (validation) and at commit time (then followed by OFPBFC_MSG_FAILED for the commit). The
//! prepare barrier lets the session discard instead of commit when an add was refused: a
//! commit of a bundle with a refused add would apply the other messages.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::message::{BadRequestCode, BundleFailedCode};
use crate::message::{
    BundleControl, BundleCtrlType, ErrorKind, ErrorMsg, Hello, HelloFailedCode, Message,
    MessageHeader, MultipartReplyBody, MultipartRequest, MultipartRequestBody, Port, PortStatus,
    RoleRequest, SwitchConfig, SwitchFeatures,
};

use super::error::{DisconnectCause, ErrorText};

/// Session timing and handshake options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsmConfig {
    /// Send an echo request after this much silence from the switch.
    pub echo_interval: Duration,
    /// Close the session when an echo request goes unanswered (and nothing else arrives)
    /// for this long while the controller awaits nothing else from the switch. This is a
    /// floor: the timeout adapts to the switch, [`ECHO_TIMEOUT_FACTOR`] times the slowest of
    /// its last [`ECHO_HISTORY`] answers (a loaded switch answers slowly, not never).
    pub echo_timeout: Duration,
    /// How long the switch may stay silent while it works on something the controller sent
    /// and awaits (a bundle, a flow-stats read, a barrier): Open vSwitch answers an echo only
    /// after the messages before it, so a switch committing a large bundle is silent and
    /// alive. No echo timeout applies before this (requests have their own deadlines too).
    pub busy_timeout: Duration,
    /// HELLO through PORT_DESC (and the role reply) must complete within this.
    pub handshake_timeout: Duration,
    /// `miss_send_len` sent in SET_CONFIG.
    pub miss_send_len: u16,
    /// A role to request during the handshake.
    pub role: Option<RoleRequest>,
    /// The most ports a switch may report (PORT_DESC plus PORT_STATUS adds); one more closes
    /// the session, so a peer cannot grow the port table without bound.
    pub max_ports: usize,
    /// The most bytes (OpenFlow messages as received) one multipart reply may take across its
    /// parts; a reply that grows past this closes the session, so a peer cannot make the
    /// reassembly hold unbounded memory.
    pub max_multipart_bytes: usize,
}

/// The adaptive echo timeout is at least this many times the slowest recent echo answer.
pub const ECHO_TIMEOUT_FACTOR: u32 = 4;

/// How many of the latest echo answer times the adaptive timeout remembers.
pub const ECHO_HISTORY: usize = 8;

/// Default [`FsmConfig::max_ports`]: far above any real bridge (OpenFlow port numbers of Open
/// vSwitch end at 0xfeff; a node runs a few hundred pods at most).
pub const DEFAULT_MAX_PORTS: usize = 16_384;

/// Default [`FsmConfig::max_multipart_bytes`]: 256 MiB, over a million flows in one flow
/// statistics reply.
pub const DEFAULT_MAX_MULTIPART_BYTES: usize = 256 << 20;

impl Default for FsmConfig {
    fn default() -> Self {
        FsmConfig {
            echo_interval: Duration::from_secs(5),
            echo_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(180),
            handshake_timeout: Duration::from_secs(10),
            miss_send_len: 0xffff,
            role: None,
            max_ports: DEFAULT_MAX_PORTS,
            max_multipart_bytes: DEFAULT_MAX_MULTIPART_BYTES,
        }
    }
}

/// What a ready session knows about its switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchInfo {
    /// Datapath id.
    pub dpid: u64,
    /// The FEATURES_REPLY.
    pub features: SwitchFeatures,
    /// Ports by number, from PORT_DESC and kept up to date by PORT_STATUS.
    pub ports: BTreeMap<u32, Port>,
    /// The role granted during the handshake, if one was requested.
    pub role: Option<RoleRequest>,
}

/// A successful outcome of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// BARRIER_REPLY.
    Barrier,
    /// Every body of a multipart reply, in order (all parts up to the one without MORE).
    Multipart(Vec<MultipartReplyBody>),
    /// ROLE_REPLY.
    Role(RoleRequest),
    /// A bundle control reply.
    BundleControl(BundleControl),
    /// A bundle committed (its closing barrier answered).
    BundleCommitted,
    /// A batch's closing barrier answered and no message was refused.
    BatchDone,
    /// ECHO_REPLY to a liveness probe.
    Echo,
}

/// How a request failed (the task turns these into the public error types).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The switch answered the request with this error.
    Refused(ErrorMsg),
    /// Batch messages refused, by index (the others were applied).
    BatchRefused(Vec<(usize, ErrorMsg)>),
    /// Bundle message `index` was refused; the bundle was discarded.
    BundleRefused {
        /// Index of the refused message.
        index: usize,
        /// The switch's error.
        error: ErrorMsg,
    },
    /// The commit failed without naming a message.
    BundleCommitFailed(ErrorMsg),
    /// The switch refused to open a bundle: it does not do bundles.
    BundleUnsupported(ErrorMsg),
    /// The session ended first.
    Closed(DisconnectCause),
    /// A reply that does not fit the request.
    Unexpected(String),
}

/// An effect for the task to carry out.
#[derive(Debug)]
pub enum Output<R> {
    /// Write this message (after what is already buffered).
    Send {
        /// Its xid.
        xid: u32,
        /// The message.
        message: Message,
    },
    /// The handshake completed.
    Ready(SwitchInfo),
    /// A port was added, deleted or changed (after the handshake).
    PortStatus(PortStatus),
    /// An OFPT_ERROR that answers no outstanding request.
    UnsolicitedError {
        /// The error's xid.
        xid: u32,
        /// The error.
        error: ErrorMsg,
    },
    /// An asynchronous message (packet-in, flow-removed, experimenter, ...).
    Async(Message),
    /// One part of a streamed multipart reply (see [`SessionFsm::begin_stream`]), in order.
    Part {
        /// The request's xid.
        xid: u32,
        /// The part's body.
        body: MultipartReplyBody,
    },
    /// A streamed multipart reply has no more parts (it ended, failed or the session closed);
    /// its [`Output::Complete`] follows.
    StreamEnd {
        /// The request's xid.
        xid: u32,
    },
    /// A request finished.
    Complete {
        /// Whoever waits for it.
        responder: R,
        /// The outcome.
        result: Result<Reply, Failure>,
    },
    /// The session must close; every request has been completed with [`Failure::Closed`].
    Close(DisconnectCause),
}

/// Which messages an outstanding request waits for.
#[derive(Debug)]
enum Kind {
    Barrier,
    Multipart,
    /// A multipart request whose parts go out one by one ([`Output::Part`]).
    MultipartStream,
    Role,
    BundleControl,
    /// A liveness probe's ECHO_REQUEST.
    Echo,
    Batch {
        n: u32,
        refused: Vec<(usize, ErrorMsg)>,
    },
    Bundle(BundleState),
    /// A handshake request (no responder).
    Setup(SetupStep),
}

#[derive(Debug)]
struct BundleState {
    n: u32,
    bundle_id: u32,
    flags: u16,
    open_error: Option<ErrorMsg>,
    /// The first refused add (index, error).
    refused: Option<(usize, ErrorMsg)>,
    commit_error: Option<ErrorMsg>,
    committed: bool,
    /// Past the prepare barrier: commit or discard has been sent.
    decided: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetupStep {
    SetConfig,
    PortDesc,
    Role,
}

#[derive(Debug)]
struct Pending<R> {
    len: u32,
    kind: Kind,
    responder: Option<R>,
    parts: Vec<MultipartReplyBody>,
    /// Bytes of the multipart reply received so far (for [`FsmConfig::max_multipart_bytes`]).
    bytes: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// HELLO sent, waiting for the switch's.
    Hello,
    /// FEATURES_REQUEST sent.
    Features,
    /// SET_CONFIG, PORT_DESC (and role) sent.
    Setup,
    Ready,
    Closed,
}

/// The I/O-free session state machine, generic over whatever waits for a reply (`R`).
#[derive(Debug)]
pub struct SessionFsm<R> {
    cfg: FsmConfig,
    phase: Phase,
    started: Instant,
    next_xid: u32,
    /// Outstanding requests by the first xid of their range.
    pending: BTreeMap<u32, Pending<R>>,
    /// Handshake steps still outstanding.
    setup_left: BTreeSet<u32>,
    features: Option<SwitchFeatures>,
    ports: BTreeMap<u32, Port>,
    role: Option<RoleRequest>,
    last_rx: Instant,
    echo_sent: Option<(u32, Instant)>,
    /// How long the latest echo requests took to be answered (by any message), newest last.
    echo_answers: std::collections::VecDeque<Duration>,
    bundles_supported: bool,
    /// Bundles whose prepare barrier has not been answered.
    undecided_bundles: usize,
}

impl<R> SessionFsm<R> {
    /// A session whose connection was established at `now`.
    pub fn new(cfg: FsmConfig, now: Instant) -> Self {
        SessionFsm {
            cfg,
            phase: Phase::Hello,
            started: now,
            next_xid: 1,
            pending: BTreeMap::new(),
            setup_left: BTreeSet::new(),
            features: None,
            ports: BTreeMap::new(),
            role: None,
            last_rx: now,
            echo_sent: None,
            echo_answers: std::collections::VecDeque::with_capacity(ECHO_HISTORY),
            bundles_supported: true,
            undecided_bundles: 0,
        }
    }

    /// True once the handshake completed (and until the session closes).
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// True once the session has closed.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// The datapath id, once FEATURES_REPLY arrived.
    pub fn dpid(&self) -> Option<u64> {
        self.features.as_ref().map(|f| f.datapath_id)
    }

    /// False once the switch refused to open a bundle; bundles then go as ordered batches.
    pub fn bundles_supported(&self) -> bool {
        self.bundles_supported
    }

    /// Number of outstanding requests (handshake steps included).
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// True while a bundle waits for its prepare barrier: nothing may be written after it
    /// until the commit (or discard) is, or later messages would overtake the commit.
    pub fn bundle_gate_closed(&self) -> bool {
        self.undecided_bundles > 0
    }

    /// The connection is up: say HELLO.
    pub fn start(&mut self, out: &mut Vec<Output<R>>) {
        let xid = self.alloc(1);
        out.push(Output::Send {
            xid,
            message: Message::Hello(Hello::of13()),
        });
    }

    /// Allocates `len` consecutive xids that do not wrap around.
    fn alloc(&mut self, len: u32) -> u32 {
        if self.next_xid.checked_add(len).is_none() {
            self.next_xid = 1;
        }
        let base = self.next_xid;
        self.next_xid += len;
        base
    }

    fn insert(&mut self, len: u32, kind: Kind, responder: Option<R>) -> u32 {
        let base = self.alloc(len);
        self.pending.insert(
            base,
            Pending {
                len,
                kind,
                responder,
                parts: Vec::new(),
                bytes: 0,
            },
        );
        base
    }

    /// Registers a request that is answered by one reply (barrier, multipart, role, bundle
    /// control); returns the xid to send it with. Other messages get [`Failure::Unexpected`].
    pub fn begin_request(&mut self, message: &Message, responder: R) -> Result<u32, R> {
        let kind = match message {
            Message::BarrierRequest => Kind::Barrier,
            Message::MultipartRequest(_) => Kind::Multipart,
            Message::RoleRequest(_) => Kind::Role,
            Message::BundleControl(_) => Kind::BundleControl,
            _ => return Err(responder),
        };
        Ok(self.insert(1, kind, Some(responder)))
    }

    /// Registers a multipart request whose reply is streamed: every part comes out as an
    /// [`Output::Part`] as it arrives (nothing is reassembled), then [`Output::StreamEnd`] and
    /// the completion ([`Reply::Multipart`] with no bodies, or the failure). Other messages
    /// get [`Failure::Unexpected`].
    pub fn begin_stream(&mut self, message: &Message, responder: R) -> Result<u32, R> {
        match message {
            Message::MultipartRequest(_) => {
                Ok(self.insert(1, Kind::MultipartStream, Some(responder)))
            }
            _ => Err(responder),
        }
    }

    /// Sends an ECHO_REQUEST; its ECHO_REPLY, or any other message from the switch, completes
    /// `responder` with [`Reply::Echo`]: a liveness probe. The request is written at once (an
    /// output), not behind queued work.
    pub fn begin_echo(&mut self, responder: R, out: &mut Vec<Output<R>>) {
        if self.phase == Phase::Closed {
            return;
        }
        let xid = self.insert(1, Kind::Echo, Some(responder));
        out.push(Output::Send {
            xid,
            message: Message::EchoRequest(b"flowmesh-probe".to_vec()),
        });
    }

    /// An xid for a message that expects no reply (errors for it are unsolicited).
    pub fn alloc_xid(&mut self) -> u32 {
        self.alloc(1)
    }

    /// Registers an ordered batch of `n` messages closed by a barrier. Returns the first
    /// xid: message i goes with `base + i`, the barrier with `base + n`.
    pub fn begin_batch(&mut self, n: u32, responder: R) -> u32 {
        self.insert(
            n.saturating_add(1),
            Kind::Batch {
                n,
                refused: Vec::new(),
            },
            Some(responder),
        )
    }

    /// Registers a bundle of `n` messages; returns the base xid (see the module doc). The
    /// task writes OPEN (`base`), the adds (`base+1+i`) and the prepare barrier
    /// (`base+n+1`); the state machine sends the commit or the discard itself.
    pub fn begin_bundle(&mut self, n: u32, flags: u16, responder: R) -> u32 {
        let base = self.alloc(n.saturating_add(4));
        self.undecided_bundles += 1;
        self.pending.insert(
            base,
            Pending {
                len: n.saturating_add(4),
                kind: Kind::Bundle(BundleState {
                    n,
                    bundle_id: base,
                    flags,
                    open_error: None,
                    refused: None,
                    commit_error: None,
                    committed: false,
                    decided: false,
                }),
                responder: Some(responder),
                parts: Vec::new(),
                bytes: 0,
            },
        );
        base
    }

    /// True if an outstanding request owns `xid`.
    pub fn awaits(&self, xid: u32) -> bool {
        self.owner(xid).is_some()
    }

    /// The entry whose xid range holds `xid`.
    fn owner(&self, xid: u32) -> Option<u32> {
        let (&base, p) = self.pending.range(..=xid).next_back()?;
        (xid - base < p.len).then_some(base)
    }

    /// The earliest instant at which [`SessionFsm::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Closed => None,
            Phase::Ready => Some(match self.echo_sent {
                Some((_, sent)) => sent + self.liveness_timeout(),
                None => self.last_rx + self.cfg.echo_interval,
            }),
            _ => Some(self.started + self.cfg.handshake_timeout),
        }
    }

    /// True while the controller awaits an answer from the switch to something other than a
    /// liveness probe (handshake steps have their own timeout).
    pub fn is_busy(&self) -> bool {
        self.pending
            .values()
            .any(|p| p.responder.is_some() && !matches!(p.kind, Kind::Echo))
    }

    /// How long an unanswered echo is tolerated now: [`FsmConfig::busy_timeout`] while the
    /// switch works on a request; otherwise the configured echo timeout or, if longer,
    /// [`ECHO_TIMEOUT_FACTOR`] times the slowest recent answer (at most the busy timeout).
    pub fn liveness_timeout(&self) -> Duration {
        let busy = self.cfg.busy_timeout.max(self.cfg.echo_timeout);
        if self.is_busy() {
            return busy;
        }
        let slowest = self.echo_answers.iter().max().copied().unwrap_or_default();
        self.cfg
            .echo_timeout
            .max(slowest.saturating_mul(ECHO_TIMEOUT_FACTOR))
            .min(busy)
    }

    /// Time passes: send an echo after `echo_interval` of silence, give up after a further
    /// [`SessionFsm::liveness_timeout`] without any message, and bound the handshake.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Output<R>>) {
        match self.phase {
            Phase::Closed => {}
            Phase::Ready => {
                if let Some((_, sent)) = self.echo_sent {
                    if now >= sent + self.liveness_timeout() {
                        let silent_for = now.saturating_duration_since(self.last_rx);
                        self.close(DisconnectCause::EchoTimeout { silent_for }, out);
                    }
                } else if now >= self.last_rx + self.cfg.echo_interval {
                    let xid = self.alloc(1);
                    self.echo_sent = Some((xid, now));
                    out.push(Output::Send {
                        xid,
                        message: Message::EchoRequest(Vec::new()),
                    });
                }
            }
            _ => {
                if now >= self.started + self.cfg.handshake_timeout {
                    let t = self.cfg.handshake_timeout;
                    self.close(DisconnectCause::HandshakeTimeout(t), out);
                }
            }
        }
    }

    /// Ends the session: every outstanding request fails with `cause`.
    pub fn close(&mut self, cause: DisconnectCause, out: &mut Vec<Output<R>>) {
        if self.phase == Phase::Closed {
            return;
        }
        self.phase = Phase::Closed;
        self.undecided_bundles = 0;
        for (xid, p) in std::mem::take(&mut self.pending) {
            if matches!(p.kind, Kind::MultipartStream) {
                out.push(Output::StreamEnd { xid });
            }
            if let Some(responder) = p.responder {
                out.push(Output::Complete {
                    responder,
                    result: Err(Failure::Closed(cause.clone())),
                });
            }
        }
        out.push(Output::Close(cause));
    }

    /// A message arrived at `now`. `msg` is the decoded message or why it did not decode.
    pub fn on_message(
        &mut self,
        header: &MessageHeader,
        msg: Message,
        now: Instant,
        out: &mut Vec<Output<R>>,
    ) {
        if self.phase == Phase::Closed {
            return;
        }
        self.last_rx = now;
        if let Some((_, sent)) = self.echo_sent.take() {
            // Any message answers the echo: how long it took is what this switch needs now.
            if self.echo_answers.len() == ECHO_HISTORY {
                self.echo_answers.pop_front();
            }
            self.echo_answers
                .push_back(now.saturating_duration_since(sent));
        }
        // Any message proves the switch alive: liveness probes are answered by it (a switch
        // streaming a large reply may answer an echo only after the reply).
        let probes: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(p.kind, Kind::Echo))
            .map(|(x, _)| *x)
            .collect();
        for x in probes {
            self.complete(x, Ok(Reply::Echo), out);
        }
        let xid = header.xid;
        match msg {
            Message::EchoRequest(data) => out.push(Output::Send {
                xid,
                message: Message::EchoReply(data),
            }),
            Message::EchoReply(_) => {}
            Message::Hello(h) => self.on_hello(&h, out),
            Message::Error(e) => self.on_error(xid, e, out),
            Message::FeaturesReply(f) if self.phase == Phase::Features => self.on_features(f, out),
            Message::PortStatus(ps) => self.on_port_status(ps, out),
            Message::BarrierReply => self.on_barrier(xid, out),
            Message::MultipartReply(m) => {
                let more = m.more();
                self.on_multipart(xid, m.body, more, usize::from(header.length), out)
            }
            Message::RoleReply(r) => self.on_role(xid, r, out),
            Message::BundleControl(b) => self.on_bundle_control(xid, b, out),
            Message::GetConfigReply(_) | Message::FeaturesReply(_) => {}
            other @ (Message::PacketIn(_)
            | Message::FlowRemoved(_)
            | Message::Experimenter(_)
            | Message::GetAsyncReply(_)
            | Message::Unknown { .. }) => out.push(Output::Async(other)),
            other => {
                let t = other.msg_type();
                self.close(
                    DisconnectCause::Protocol(format!(
                        "a switch does not send message type {t} (xid {xid:#x})"
                    )),
                    out,
                );
            }
        }
    }

    fn on_hello(&mut self, hello: &Hello, out: &mut Vec<Output<R>>) {
        if self.phase != Phase::Hello {
            return;
        }
        if !hello.supports_of13() {
            let offered = hello.versions();
            let text =
                format!("flowmesh speaks only OpenFlow 1.3 (0x04); you offered {offered:02x?}");
            out.push(Output::Send {
                xid: 0,
                message: Message::Error(ErrorMsg {
                    kind: ErrorKind::HelloFailed(HelloFailedCode::Incompatible),
                    data: text.into_bytes(),
                }),
            });
            self.close(DisconnectCause::VersionMismatch { offered }, out);
            return;
        }
        self.phase = Phase::Features;
        let xid = self.alloc(1);
        out.push(Output::Send {
            xid,
            message: Message::FeaturesRequest,
        });
    }

    fn on_features(&mut self, f: SwitchFeatures, out: &mut Vec<Output<R>>) {
        self.features = Some(f);
        self.phase = Phase::Setup;
        let cfg = SwitchConfig {
            flags: 0,
            miss_send_len: self.cfg.miss_send_len,
        };
        let xid = self.insert(1, Kind::Setup(SetupStep::SetConfig), None);
        out.push(Output::Send {
            xid,
            message: Message::SetConfig(cfg),
        });
        let xid = self.insert(1, Kind::Setup(SetupStep::PortDesc), None);
        self.setup_left.insert(xid);
        out.push(Output::Send {
            xid,
            message: Message::MultipartRequest(MultipartRequest::new(
                MultipartRequestBody::PortDesc,
            )),
        });
        if let Some(role) = self.cfg.role {
            let xid = self.insert(1, Kind::Setup(SetupStep::Role), None);
            self.setup_left.insert(xid);
            out.push(Output::Send {
                xid,
                message: Message::RoleRequest(role),
            });
        }
    }

    fn setup_done(&mut self, xid: u32, out: &mut Vec<Output<R>>) {
        self.pending.remove(&xid);
        self.setup_left.remove(&xid);
        if self.phase == Phase::Setup && self.setup_left.is_empty() {
            // SET_CONFIG has no reply; its entry only catches an error for it.
            self.pending
                .retain(|_, p| !matches!(p.kind, Kind::Setup(SetupStep::SetConfig)));
            self.phase = Phase::Ready;
            if let Some(features) = self.features.clone() {
                out.push(Output::Ready(SwitchInfo {
                    dpid: features.datapath_id,
                    features,
                    ports: self.ports.clone(),
                    role: self.role,
                }));
            }
        }
    }

    /// Adds or replaces a port; false (and the session closed) when it would be one port more
    /// than [`FsmConfig::max_ports`].
    fn add_port(&mut self, port: Port, out: &mut Vec<Output<R>>) -> bool {
        if !self.ports.contains_key(&port.port_no) && self.ports.len() >= self.cfg.max_ports {
            let max = self.cfg.max_ports;
            self.close(
                DisconnectCause::OverLimit(format!(
                    "the switch reports more than {max} ports (the session's port limit)"
                )),
                out,
            );
            return false;
        }
        self.ports.insert(port.port_no, port);
        true
    }

    fn on_port_status(&mut self, ps: PortStatus, out: &mut Vec<Output<R>>) {
        const OFPPR_DELETE: u8 = 1;
        if ps.reason == OFPPR_DELETE {
            self.ports.remove(&ps.desc.port_no);
        } else if !self.add_port(ps.desc.clone(), out) {
            return;
        }
        if self.phase == Phase::Ready {
            out.push(Output::PortStatus(ps));
        }
    }

    /// The current ports (PORT_DESC plus every PORT_STATUS since).
    pub fn ports(&self) -> &BTreeMap<u32, Port> {
        &self.ports
    }

    fn complete(&mut self, base: u32, result: Result<Reply, Failure>, out: &mut Vec<Output<R>>) {
        if let Some(p) = self.pending.remove(&base) {
            if matches!(&p.kind, Kind::Bundle(b) if !b.decided) {
                self.undecided_bundles = self.undecided_bundles.saturating_sub(1);
            }
            if matches!(p.kind, Kind::MultipartStream) {
                out.push(Output::StreamEnd { xid: base });
            }
            if let Some(responder) = p.responder {
                out.push(Output::Complete { responder, result });
            }
        }
    }

    fn on_error(&mut self, xid: u32, e: ErrorMsg, out: &mut Vec<Output<R>>) {
        if let ErrorKind::HelloFailed(_) = e.kind {
            if self.phase == Phase::Hello {
                self.close(DisconnectCause::HandshakeRefused(ErrorText(e)), out);
                return;
            }
        }
        let Some(base) = self.owner(xid) else {
            out.push(Output::UnsolicitedError { xid, error: e });
            return;
        };
        let offset = xid - base;
        let Some(p) = self.pending.get_mut(&base) else {
            return;
        };
        match &mut p.kind {
            Kind::Setup(_) => {
                self.close(DisconnectCause::HandshakeRefused(ErrorText(e)), out);
            }
            Kind::Barrier
            | Kind::Multipart
            | Kind::MultipartStream
            | Kind::Role
            | Kind::BundleControl
            | Kind::Echo => self.complete(base, Err(Failure::Refused(e)), out),
            Kind::Batch { n, refused } => {
                if offset < *n {
                    refused.push((offset as usize, e));
                } else {
                    // The barrier itself was refused: the batch's outcome is unknown.
                    self.complete(base, Err(Failure::Refused(e)), out);
                }
            }
            Kind::Bundle(b) => {
                let n = b.n;
                if offset == 0 {
                    b.open_error = Some(e);
                } else if offset <= n {
                    if b.refused.is_none() {
                        b.refused = Some(((offset - 1) as usize, e));
                    }
                } else if offset == n + 2 {
                    b.commit_error = Some(e);
                } else {
                    // A barrier was refused: nothing sensible can follow.
                    self.complete(base, Err(Failure::Refused(e)), out);
                }
            }
        }
    }

    fn on_barrier(&mut self, xid: u32, out: &mut Vec<Output<R>>) {
        let Some(base) = self.owner(xid) else {
            return;
        };
        let offset = xid - base;
        let Some(p) = self.pending.get_mut(&base) else {
            return;
        };
        match &mut p.kind {
            Kind::Barrier => self.complete(base, Ok(Reply::Barrier), out),
            Kind::Batch { n, refused } if offset == *n => {
                let refused = std::mem::take(refused);
                let result = if refused.is_empty() {
                    Ok(Reply::BatchDone)
                } else {
                    Err(Failure::BatchRefused(refused))
                };
                self.complete(base, result, out);
            }
            Kind::Bundle(b) if offset == b.n + 1 => {
                // Prepare barrier: every add has been seen by the switch.
                b.decided = true;
                self.undecided_bundles = self.undecided_bundles.saturating_sub(1);
                let (bundle_id, flags) = (b.bundle_id, b.flags);
                let commit = b.open_error.is_none() && b.refused.is_none();
                let ctrl = if commit {
                    BundleCtrlType::CommitRequest
                } else {
                    BundleCtrlType::DiscardRequest
                };
                if b.open_error.is_some() && unsupported(b.open_error.as_ref()) {
                    // No bundle exists: nothing to discard.
                    let e = b.open_error.take().unwrap_or_else(|| ErrorMsg {
                        kind: ErrorKind::BadRequest(BadRequestCode::BadExperimenter),
                        data: Vec::new(),
                    });
                    self.bundles_supported = false;
                    self.complete(base, Err(Failure::BundleUnsupported(e)), out);
                    return;
                }
                out.push(Output::Send {
                    xid: base + b.n + 2,
                    message: Message::BundleControl(BundleControl::new(bundle_id, ctrl, flags)),
                });
                out.push(Output::Send {
                    xid: base + b.n + 3,
                    message: Message::BarrierRequest,
                });
            }
            Kind::Bundle(b) if offset == b.n + 3 => {
                let result = if let Some(e) = b.open_error.take() {
                    Err(Failure::BundleCommitFailed(e))
                } else if let Some((index, error)) = b.refused.take() {
                    Err(Failure::BundleRefused { index, error })
                } else if let Some(e) = b.commit_error.take() {
                    Err(Failure::BundleCommitFailed(e))
                } else if b.committed {
                    Ok(Reply::BundleCommitted)
                } else {
                    Err(Failure::Unexpected(
                        "bundle: barrier answered but no COMMIT_REPLY".into(),
                    ))
                };
                self.complete(base, result, out);
            }
            _ => {}
        }
    }

    fn on_multipart(
        &mut self,
        xid: u32,
        body: MultipartReplyBody,
        more: bool,
        len: usize,
        out: &mut Vec<Output<R>>,
    ) {
        let Some(p) = self.pending.get_mut(&xid) else {
            return;
        };
        p.bytes = p.bytes.saturating_add(len);
        if p.bytes > self.cfg.max_multipart_bytes {
            let max = self.cfg.max_multipart_bytes;
            self.close(
                DisconnectCause::OverLimit(format!(
                    "a multipart reply of the switch grew past {max} bytes (the session's \
                     reassembly limit)"
                )),
                out,
            );
            return;
        }
        match &mut p.kind {
            Kind::Multipart => {
                p.parts.push(body);
                if !more {
                    let parts = std::mem::take(&mut p.parts);
                    self.complete(xid, Ok(Reply::Multipart(parts)), out);
                }
            }
            Kind::MultipartStream => {
                out.push(Output::Part { xid, body });
                if !more {
                    self.complete(xid, Ok(Reply::Multipart(Vec::new())), out);
                }
            }
            Kind::Setup(SetupStep::PortDesc) => {
                if let MultipartReplyBody::PortDesc(ports) = body {
                    for port in ports {
                        if !self.add_port(port, out) {
                            return;
                        }
                    }
                }
                if !more {
                    self.setup_done(xid, out);
                }
            }
            _ => {}
        }
    }

    fn on_role(&mut self, xid: u32, r: RoleRequest, out: &mut Vec<Output<R>>) {
        match self.pending.get(&xid).map(|p| &p.kind) {
            Some(Kind::Role) => self.complete(xid, Ok(Reply::Role(r)), out),
            Some(Kind::Setup(SetupStep::Role)) => {
                self.role = Some(r);
                self.setup_done(xid, out);
            }
            _ => {}
        }
    }

    fn on_bundle_control(&mut self, xid: u32, b: BundleControl, out: &mut Vec<Output<R>>) {
        let Some(base) = self.owner(xid) else {
            return;
        };
        let offset = xid - base;
        let Some(p) = self.pending.get_mut(&base) else {
            return;
        };
        match &mut p.kind {
            Kind::BundleControl => self.complete(base, Ok(Reply::BundleControl(b)), out),
            Kind::Bundle(s) if offset == s.n + 2 => {
                s.committed = b.ctrl_type == BundleCtrlType::CommitReply;
            }
            _ => {}
        }
    }
}

/// True for the errors a switch gives when it does not implement ONF bundles at all.
fn unsupported(e: Option<&ErrorMsg>) -> bool {
    matches!(
        e.map(|e| e.kind),
        Some(
            ErrorKind::BadRequest(
                BadRequestCode::BadExperimenter
                    | BadRequestCode::BadExpType
                    | BadRequestCode::BadType
            ) | ErrorKind::BundleFailed(BundleFailedCode::Eperm)
        )
    )
}

#[cfg(test)]
mod tests;
