//! Why a session ended, and how a request to a switch can fail.

use std::fmt;
use std::time::Duration;

use crate::message::{ErrorMsg, Message};

/// Why a switch connection ended (or never became ready).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisconnectCause {
    /// The switch closed the connection.
    #[error("the switch closed the connection")]
    PeerClosed,
    /// No message (not even an echo reply) arrived for `silent_for`.
    #[error("echo timeout: nothing heard from the switch for {silent_for:?}")]
    EchoTimeout {
        /// How long the switch had been silent when the session gave up.
        silent_for: Duration,
    },
    /// HELLO, FEATURES and PORT_DESC did not complete in time.
    #[error("handshake did not complete within {0:?}")]
    HandshakeTimeout(Duration),
    /// The switch does not speak OpenFlow 1.3; it was sent HELLO_FAILED.
    #[error(
        "version mismatch: the switch offers OpenFlow wire versions {offered:?}, flowmesh \
         speaks only 1.3 (0x04); enable OpenFlow13 in the bridge's protocols"
    )]
    VersionMismatch {
        /// The wire versions the switch offered in its HELLO.
        offered: Vec<u8>,
    },
    /// The switch refused a handshake step (HELLO, SET_CONFIG, PORT_DESC or the role).
    #[error("the switch refused the handshake: {0}")]
    HandshakeRefused(ErrorText),
    /// A message broke the handshake order or could not be framed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The switch went past one of the session's limits (ports, multipart bytes).
    #[error("over a limit: {0}")]
    OverLimit(String),
    /// A socket error.
    #[error("i/o error: {0}")]
    Io(String),
    /// The TLS handshake failed (e.g. a certificate from an unknown CA).
    #[error("TLS error: {0}")]
    Tls(String),
    /// The controller closed the session (by [`super::SwitchHandle::close`] or shutdown).
    #[error("closed by the controller")]
    LocalClose,
}

/// An OFPT_ERROR shown by its Open vSwitch name (`OFPBRC_IS_SECONDARY`) with its raw value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorText(pub ErrorMsg);

impl fmt::Display for ErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, c, exp) = self.0.kind.to_wire();
        match (self.0.kind.name(), exp) {
            (Some(n), _) => write!(f, "{n} (type {t}, code {c})"),
            (None, Some(e)) => write!(f, "experimenter {e:#010x} error type {c}"),
            (None, None) => write!(f, "error type {t}, code {c}"),
        }
    }
}

/// A short description of a request for error messages: a flow-mod shows its flow in
/// `ovs-ofctl` syntax.
pub fn describe(msg: &Message) -> String {
    match msg {
        Message::FlowMod(fm) => format!("FLOW_MOD {:?} {}", fm.command, fm.flow),
        Message::GroupMod(gm) => format!(
            "GROUP_MOD {:?} group_id={} type={:?}",
            gm.command, gm.group.group_id, gm.group.group_type
        ),
        Message::MeterMod(mm) => format!(
            "METER_MOD {:?} meter={} flags={:#x} bands={:?}",
            mm.command, mm.meter.meter_id, mm.meter.flags, mm.meter.bands
        ),
        Message::RoleRequest(r) => format!(
            "ROLE_REQUEST role={:?} generation_id={}",
            r.role, r.generation_id
        ),
        Message::MultipartRequest(m) => format!("MULTIPART_REQUEST type={}", m.mp_type()),
        Message::BundleControl(b) => {
            format!("BUNDLE_CONTROL {:?} bundle_id={}", b.ctrl_type, b.bundle_id)
        }
        other => format!("message type {}", other.msg_type()),
    }
}

/// A request that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The switch answered the request with an OFPT_ERROR.
    #[error("switch refused {}: {}", describe(request), ErrorText(error.clone()))]
    Refused {
        /// The request the switch refused.
        request: Box<Message>,
        /// The switch's error.
        error: ErrorMsg,
    },
    /// The session ended before the reply arrived.
    #[error("session closed before the reply: {0}")]
    Closed(DisconnectCause),
    /// The switch answered with something that does not fit the request.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

/// One message of a batch (or of a bundle that fell back to a batch) that the switch refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedMessage {
    /// Its position in the batch.
    pub index: usize,
    /// The message.
    pub message: Box<Message>,
    /// The switch's error.
    pub error: ErrorMsg,
}

impl fmt::Display for RefusedMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {}: {}",
            self.index,
            describe(&self.message),
            ErrorText(self.error.clone())
        )
    }
}

/// A batch (messages pipelined in order, closed by a barrier) in which the switch refused
/// some messages; the others were applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// These messages were refused (in order); all others were applied.
    #[error("switch refused {} message(s) of the batch, first {}", .0.len(), .0.first().map(|r| r.to_string()).unwrap_or_default())]
    Refused(Vec<RefusedMessage>),
    /// The session ended before the closing barrier reply: an unknown part was applied.
    #[error("session closed during the batch: {0}")]
    Closed(DisconnectCause),
}

/// A bundle that did not commit. Unless stated, nothing of it was applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The switch refused message `index`; the bundle was discarded.
    #[error("bundle discarded: switch refused message #{index} {}: {}", describe(message), ErrorText(error.clone()))]
    Refused {
        /// Position of the refused message in the bundle.
        index: usize,
        /// The refused message.
        message: Box<Message>,
        /// The switch's error.
        error: ErrorMsg,
    },
    /// The commit failed without naming a message.
    #[error("bundle commit failed: {}", ErrorText(.0.clone()))]
    CommitFailed(ErrorMsg),
    /// The switch does not do bundles; the messages went as an ordered batch (not atomic)
    /// and some were refused.
    #[error("bundles unsupported, sent as ordered batch: {0}")]
    Batch(BatchError),
    /// The session ended before the outcome was known.
    #[error("session closed during the bundle: {0}")]
    Closed(DisconnectCause),
}
