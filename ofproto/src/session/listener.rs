//! Where connections come from: a listener for switches that dial the controller (OVS
//! `tcp:`/`ssl:` controller targets), and a connector that dials a switch's own OpenFlow
//! listener (`ptcp:`/`punix:`, e.g. a bridge's `.mgmt` socket) and redials when it drops.
//!
//! Each accepted or dialed connection runs in its own task ([`super::task::run_session`]);
//! all their events flow into one [`EventStream`]. Dropping the [`Listener`] or
//! [`Connector`] ends every session it started.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
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

/// How many connections a [`Listener`] holds at once, so that connecting peers cannot exhaust
/// the controller (file descriptors, tasks, memory). A connection over a limit is closed as
/// soon as it is accepted, before a byte is read (counted and logged, at most once a second).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections in all (TLS handshakes and OpenFlow handshakes included).
    pub max_connections: usize,
    /// Connections from one peer IP address.
    pub max_per_peer: usize,
}

/// Default [`ListenerLimits::max_connections`]: twice the nodes of the largest Kubernetes
/// cluster (5,000), each with one bridge.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Default [`ListenerLimits::max_per_peer`]: a node has one bridge connecting to each
/// controller; this leaves room for a few nodes behind one address (NAT) and for the quick
/// reconnects of a restarting switch whose old connection is not yet closed.
pub const DEFAULT_MAX_PER_PEER: usize = 32;

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_peer: DEFAULT_MAX_PER_PEER,
        }
    }
}

impl ListenerLimits {
    /// No limit (what [`Listener::bind`] uses: test rigs and tools that connect hundreds of
    /// bridges from one address).
    pub const UNLIMITED: ListenerLimits = ListenerLimits {
        max_connections: usize::MAX,
        max_per_peer: usize::MAX,
    };
}

/// Live connections, in all and per peer address, against the limits.
#[derive(Debug, Default)]
struct Admission {
    limits: ListenerLimits,
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    /// Refused since the last log line, and when that was.
    refused: u64,
    refused_total: u64,
    last_log: Option<std::time::Instant>,
}

impl Admission {
    /// Counts a new connection from `ip` in, or says which limit refuses it.
    fn admit(&mut self, ip: IpAddr) -> Result<(), &'static str> {
        let limits = self.limits;
        let here = self.per_peer.get(&ip).copied().unwrap_or(0);
        if self.total >= limits.max_connections {
            return Err("connections in all");
        }
        if here >= limits.max_per_peer {
            return Err("connections from this address");
        }
        self.total += 1;
        *self.per_peer.entry(ip).or_default() += 1;
        Ok(())
    }

    /// A connection from `ip` ended.
    fn release(&mut self, ip: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_peer.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_peer.remove(&ip);
            }
        }
    }

    /// Logs a refusal, at most once a second (with how many were refused since).
    fn refused(&mut self, peer: SocketAddr, limit: &'static str) {
        self.refused += 1;
        self.refused_total += 1;
        let now = std::time::Instant::now();
        if self
            .last_log
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        let l = self.limits;
        warn!(
            %peer,
            refused = self.refused,
            refused_total = self.refused_total,
            max_connections = l.max_connections,
            max_per_peer = l.max_per_peer,
            "OpenFlow connection refused: too many {limit}"
        );
        self.refused = 0;
        self.last_log = Some(now);
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
    /// Binds `addr` and starts accepting, without connection limits. With `tls`, every
    /// connection must complete a TLS handshake with a client certificate the configuration
    /// accepts.
    pub async fn bind(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        cfg: SessionConfig,
    ) -> std::io::Result<(Listener, EventStream)> {
        Self::bind_with_limits(addr, tls, cfg, ListenerLimits::UNLIMITED).await
    }

    /// [`Listener::bind`] holding at most `limits` connections at once (a network-facing
    /// controller: [`ListenerLimits::default`]).
    pub async fn bind_with_limits(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        cfg: SessionConfig,
        limits: ListenerLimits,
    ) -> std::io::Result<(Listener, EventStream)> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (out, rx) = mpsc::unbounded_channel();
        let is_tls = tls.is_some();
        let admission = Admission {
            limits,
            ..Default::default()
        };
        let task = tokio::spawn(accept_loop(listener, tls, cfg, admission, out));
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
    mut admission: Admission,
    out: mpsc::UnboundedSender<SessionEvent>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut hub = Hub {
        seen: HashSet::new(),
        out,
    };
    let mut sessions = JoinSet::new();
    // The peer address of every session task, to count it out when it ends.
    let mut peers: HashMap<tokio::task::Id, IpAddr> = HashMap::new();
    let mut next_conn: ConnId = 1;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if let Err(limit) = admission.admit(peer.ip()) {
                        // Closed before a byte is read: nothing of it is kept.
                        drop(stream);
                        admission.refused(peer, limit);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let conn = next_conn;
                    next_conn += 1;
                    let (cfg, tx, acceptor) = (cfg.clone(), tx.clone(), acceptor.clone());
                    let task = sessions.spawn(serve(stream, peer, conn, acceptor, cfg, tx));
                    peers.insert(task.id(), peer.ip());
                }
                Err(e) => {
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(ev) = rx.recv() => hub.forward(ev),
            Some(done) = sessions.join_next_with_id(), if !sessions.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                if let Some(ip) = peers.remove(&id) {
                    admission.release(ip);
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpSocket;

    /// Connects from `from` and says whether the listener admitted the connection: an
    /// admitted one is greeted with HELLO, a refused one closed before a byte.
    async fn connect(to: SocketAddr, from: [u8; 4]) -> (bool, TcpStream) {
        let sock = TcpSocket::new_v4().expect("socket");
        sock.bind(SocketAddr::from((from, 0))).expect("bind");
        let mut s = sock.connect(to).await.expect("connect");
        let mut b = [0u8; 8];
        let admitted = tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut b))
            .await
            .expect("an answer within 10 s")
            .is_ok();
        (admitted, s)
    }

    #[tokio::test]
    async fn connections_past_the_per_peer_and_total_limits_are_closed_at_once() {
        let limits = ListenerLimits {
            max_connections: 3,
            max_per_peer: 2,
        };
        let (l, _events) = Listener::bind_with_limits(
            "127.0.0.1:0".parse().expect("addr"),
            None,
            SessionConfig::default(),
            limits,
        )
        .await
        .expect("bind");
        let to = l.local_addr();
        let (a1, s1) = connect(to, [127, 0, 0, 1]).await;
        let (a2, _s2) = connect(to, [127, 0, 0, 1]).await;
        let (a3, _s3) = connect(to, [127, 0, 0, 1]).await;
        assert_eq!((a1, a2, a3), (true, true, false), "two per address");
        let (b1, _t1) = connect(to, [127, 0, 0, 2]).await;
        assert!(b1, "another address has its own count");
        let (c1, _u1) = connect(to, [127, 0, 0, 3]).await;
        assert!(!c1, "three in all");
        // A connection that ends frees its place.
        drop(s1);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if connect(to, [127, 0, 0, 1]).await.0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never admitted again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn admission_counts_per_address_and_in_all() {
        let mut a = Admission {
            limits: ListenerLimits {
                max_connections: 10,
                max_per_peer: 1,
            },
            ..Default::default()
        };
        let ip: IpAddr = [10, 0, 0, 1].into();
        assert!(a.admit(ip).is_ok());
        assert_eq!(a.admit(ip), Err("connections from this address"));
        a.release(ip);
        assert!(a.per_peer.is_empty());
        assert!(a.admit(ip).is_ok());
        a.release(ip);
        a.release(ip);
        assert_eq!(a.total, 0, "never below zero");
    }
}
