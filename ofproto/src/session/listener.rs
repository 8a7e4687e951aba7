//! Where connections come from: a listener for switches that dial the controller (OVS
//! `tcp:`/`ssl:` controller targets), and a connector that dials a switch's own OpenFlow
//! listener (`ptcp:`/`punix:`, e.g. a bridge's `.mgmt` socket) and redials when it drops.
//!
//! Each accepted or dialed connection runs in its own task ([`super::task::run_session`]);
//! all their events flow into one [`EventStream`]. Dropping the [`Listener`] or
//! [`Connector`] ends every session it started.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{info, warn};

use super::error::DisconnectCause;
use super::handle::{ConnId, SessionEvent};
use super::task::{run_session, run_session_with_cert, SessionConfig};

/// The events of every session of a listener or connector.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<SessionEvent>,
}

impl EventStream {
    /// The next event; None once the listener or connector is gone.
    pub async fn next(&mut self) -> Option<SessionEvent> {
        self.rx.recv().await
    }

    /// The next event if one is already waiting.
    pub fn try_next(&mut self) -> Option<SessionEvent> {
        self.rx.try_recv().ok()
    }
}

/// Forwards session events, marking a Ready of a datapath id seen before as a reconnect.
struct Hub {
    seen: HashSet<u64>,
    out: mpsc::UnboundedSender<SessionEvent>,
}

impl Hub {
    fn forward(&mut self, ev: SessionEvent) {
        let ev = match ev {
            SessionEvent::Ready {
                conn,
                peer,
                peer_cert,
                info,
                handle,
                ..
            } => {
                let reconnect = !self.seen.insert(info.dpid);
                SessionEvent::Ready {
                    conn,
                    peer,
                    peer_cert,
                    info,
                    reconnect,
                    handle,
                }
            }
            SessionEvent::Disconnected {
                conn,
                peer,
                dpid,
                cause,
            } => {
                info!(conn, %peer, dpid = ?dpid, "switch disconnected: {cause}");
                SessionEvent::Disconnected {
                    conn,
                    peer,
                    dpid,
                    cause,
                }
            }
            other => other,
        };
        let _ = self.out.send(ev);
    }
}

/// Accepts switch connections on TCP, or on TLS with mutual authentication.
#[derive(Debug)]
pub struct Listener {
    local_addr: SocketAddr,
    tls: bool,
    task: JoinHandle<()>,
}

impl Listener {
    /// Binds `addr` and starts accepting. With `tls`, every connection must complete a TLS
    /// handshake with a client certificate the configuration accepts.
    pub async fn bind(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        cfg: SessionConfig,
    ) -> std::io::Result<(Listener, EventStream)> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (out, rx) = mpsc::unbounded_channel();
        let is_tls = tls.is_some();
        let task = tokio::spawn(accept_loop(listener, tls, cfg, out));
        Ok((
            Listener {
                local_addr,
                tls: is_tls,
                task,
            },
            EventStream { rx },
        ))
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The Open vSwitch controller target for this listener (`tcp:IP:PORT` / `ssl:IP:PORT`).
    pub fn target(&self) -> String {
        let scheme = if self.tls { "ssl" } else { "tcp" };
        format!(
            "{scheme}:{}:{}",
            self.local_addr.ip(),
            self.local_addr.port()
        )
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    cfg: SessionConfig,
    out: mpsc::UnboundedSender<SessionEvent>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut hub = Hub {
        seen: HashSet::new(),
        out,
    };
    let mut sessions = JoinSet::new();
    let mut next_conn: ConnId = 1;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = next_conn;
                    next_conn += 1;
                    let (cfg, tx, acceptor) = (cfg.clone(), tx.clone(), acceptor.clone());
                    sessions.spawn(serve(stream, peer, conn, acceptor, cfg, tx));
                }
                Err(e) => {
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(ev) = rx.recv() => hub.forward(ev),
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
}

/// One accepted connection: the TLS handshake if any, then the session.
async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    cfg: SessionConfig,
    events: mpsc::UnboundedSender<SessionEvent>,
) {
    let peer_s = peer.to_string();
    match acceptor {
        None => {
            run_session(stream, conn, peer_s, cfg, events).await;
        }
        Some(acceptor) => {
            let limit = cfg.fsm.handshake_timeout;
            let cause = match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let cert = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| std::sync::Arc::<[u8]>::from(c.as_ref()));
                    run_session_with_cert(tls, conn, peer_s, cert, cfg, events).await;
                    return;
                }
                Ok(Err(e)) => DisconnectCause::Tls(e.to_string()),
                Err(_) => DisconnectCause::Tls(format!("TLS handshake took over {limit:?}")),
            };
            warn!(conn, %peer, "TLS handshake failed: {cause}");
            let _ = events.send(SessionEvent::Disconnected {
                conn,
                peer: peer_s,
                dpid: None,
                cause,
            });
        }
    }
}

/// A switch's OpenFlow listener to dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `ptcp:` listener.
    Tcp(SocketAddr),
    /// `punix:` listener (e.g. `<rundir>/<bridge>.mgmt`).
    Unix(PathBuf),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp(a) => write!(f, "tcp:{a}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Redial delays of a [`Connector`]: doubling from `initial` up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(8),
        }
    }
}

/// Dials a switch and keeps a session to it, redialing with backoff.
#[derive(Debug)]
pub struct Connector {
    task: JoinHandle<()>,
}

impl Connector {
    /// Starts dialing `target`.
    pub fn start(target: Target, cfg: SessionConfig, backoff: Backoff) -> (Connector, EventStream) {
        let (out, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(dial_loop(target, cfg, backoff, out));
        (Connector { task }, EventStream { rx })
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn dial_loop(
    target: Target,
    cfg: SessionConfig,
    backoff: Backoff,
    out: mpsc::UnboundedSender<SessionEvent>,
) {
    let mut hub = Hub {
        seen: HashSet::new(),
        out,
    };
    let mut delay = backoff.initial;
    let mut conn: ConnId = 0;
    loop {
        conn += 1;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let started = match &target {
            Target::Tcp(addr) => TcpStream::connect(addr).await.map(|s| {
                let _ = s.set_nodelay(true);
                tokio::spawn(run_session(s, conn, target.to_string(), cfg.clone(), tx))
            }),
            Target::Unix(path) => UnixStream::connect(path)
                .await
                .map(|s| tokio::spawn(run_session(s, conn, target.to_string(), cfg.clone(), tx))),
        };
        match started {
            Ok(session) => {
                // Abort the session with the connector.
                struct AbortOnDrop(JoinHandle<DisconnectCause>);
                impl Drop for AbortOnDrop {
                    fn drop(&mut self) {
                        self.0.abort();
                    }
                }
                let _guard = AbortOnDrop(session);
                let mut was_ready = false;
                while let Some(ev) = rx.recv().await {
                    was_ready |= matches!(ev, SessionEvent::Ready { .. });
                    hub.forward(ev);
                }
                if was_ready {
                    delay = backoff.initial;
                }
            }
            Err(e) => {
                let _ = hub.out.send(SessionEvent::ConnectFailed {
                    target: target.to_string(),
                    error: e.to_string(),
                    retry_in: delay,
                });
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(backoff.max);
    }
}
