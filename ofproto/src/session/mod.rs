//! The async switch session: one task per switch connection, driven by the controller.
//!
//! * [`fsm`]: the I/O-free state machine (handshake, xid ranges, pending requests, echo
//!   liveness), time passed in as an argument.
//! * [`task`]: the task that owns the socket, frames and decodes what arrives, and writes
//!   through one bounded, lazily filled buffer.
//! * [`handle`]: [`SwitchHandle`] (cloneable; async methods that send typed commands and
//!   await replies) and [`SessionEvent`].
//! * [`listener`]: TCP/TLS [`Listener`] for switches that dial in, and [`Connector`] for
//!   switches that listen (`ptcp:`/`punix:`).
//! * [`tls`]: rustls server configuration with client-certificate verification.
//! * [`encode`]: bundle-add framing written straight into the write buffer.

pub mod encode;
pub mod error;
pub mod fsm;
pub mod handle;
pub mod listener;
pub mod task;
pub mod tls;

pub use error::{
    BatchError, BundleError, DisconnectCause, ErrorText, RefusedMessage, RequestError,
};
pub use fsm::{FsmConfig, SwitchInfo, ECHO_HISTORY, ECHO_TIMEOUT_FACTOR};
pub use handle::{
    ConnId, FlowStatsStream, SessionEvent, SessionStats, StreamGauge, SwitchHandle,
    STREAM_QUEUE_PARTS,
};
pub use listener::{Backoff, Connector, EventStream, Listener, ListenerLimits, Target};
pub use task::{run_session, run_session_with_cert, SessionConfig};
pub use tls::{server_config, server_config_checked, ClientCheck, TlsError, TlsPem};
