//! Scripted hostile OpenFlow peers for tests and `flowmesh-bench`: TCP connections to a
//! controller that misbehave the ways an attacker who reaches the OpenFlow port can. Each
//! peer is one tokio task; dropping the [`HostilePeer`] closes its connection.
//!
//! * [`HostileSpec::silent`]: connects and sends nothing (held until the controller's
//!   handshake timeout);
//! * [`HostileSpec::handshake`]: completes the OpenFlow handshake with a chosen datapath id
//!   (an unclaimed one, or a real node's: a spoofer), answers echoes so it is never timed
//!   out, and answers nothing else — reads, barriers and bundles hang — optionally after
//!   flooding PORT_STATUS adds or while feeding every multipart request endless MORE parts.
//!
//! A peer can connect from any loopback address (`127.0.0.2`, ...), so that a test can tell
//! per-address limits apart from the real switches' 127.0.0.1.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ofproto::message::{
    mp_type, msg_type, FlowStats, Framer, Hello, Message, MultipartReply, MultipartReplyBody, Port,
    PortStatus, SwitchFeatures,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

/// How a hostile peer behaves.
#[derive(Clone, Debug, Default)]
pub struct HostileSpec {
    /// Complete the OpenFlow handshake with this datapath id (None: send nothing at all).
    pub dpid: Option<u64>,
    /// PORT_STATUS adds (distinct port numbers) sent right after the handshake.
    pub port_status_adds: u32,
    /// Feed every multipart request after the handshake parts with MORE set, never the last
    /// one, up to this many bytes in all (0: leave them unanswered).
    pub multipart_bytes: usize,
    /// The local address to connect from (None: the kernel's choice).
    pub from: Option<IpAddr>,
}

impl HostileSpec {
    /// Connects and sends nothing.
    pub fn silent() -> Self {
        HostileSpec::default()
    }

    /// Completes the handshake as `dpid`, then answers only echoes.
    pub fn handshake(dpid: u64) -> Self {
        HostileSpec {
            dpid: Some(dpid),
            ..Default::default()
        }
    }

    /// Connects from `ip` (e.g. 127.0.0.2).
    pub fn from(mut self, ip: IpAddr) -> Self {
        self.from = Some(ip);
        self
    }

    /// Floods `n` PORT_STATUS adds after the handshake.
    pub fn port_flood(mut self, n: u32) -> Self {
        self.port_status_adds = n;
        self
    }

    /// Answers multipart requests with endless MORE parts, `bytes` in all.
    pub fn multipart_flood(mut self, bytes: usize) -> Self {
        self.multipart_bytes = bytes;
        self
    }
}

/// What a peer saw, shared with its task.
#[derive(Debug, Default)]
struct PeerState {
    answer_echo: AtomicBool,
    ready: AtomicBool,
    closed: AtomicBool,
    echoes: AtomicU64,
    sent: AtomicU64,
}

/// A running hostile peer; its connection closes when it is dropped.
#[derive(Debug)]
pub struct HostilePeer {
    state: Arc<PeerState>,
    local: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for HostilePeer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostilePeer {
    /// Connects to `controller` and starts misbehaving as `spec` says.
    pub async fn connect(controller: SocketAddr, spec: HostileSpec) -> std::io::Result<Self> {
        let stream = match spec.from {
            None => TcpStream::connect(controller).await?,
            Some(ip) => {
                let sock = if ip.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                sock.bind(SocketAddr::new(ip, 0))?;
                sock.connect(controller).await?
            }
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr()?;
        let state = Arc::new(PeerState {
            answer_echo: AtomicBool::new(true),
            ..Default::default()
        });
        let task = tokio::spawn(run(stream, spec, state.clone()));
        Ok(HostilePeer { state, local, task })
    }

    /// The address this peer connects from.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// True once the controller sent PORT_DESC (the handshake is as good as done).
    pub fn handshaken(&self) -> bool {
        self.state.ready.load(Ordering::Relaxed)
    }

    /// True once the controller closed the connection.
    pub fn closed(&self) -> bool {
        self.state.closed.load(Ordering::Relaxed)
    }

    /// Echo requests seen from the controller.
    pub fn echoes(&self) -> u64 {
        self.state.echoes.load(Ordering::Relaxed)
    }

    /// Messages this peer sent (replies and floods).
    pub fn sent(&self) -> u64 {
        self.state.sent.load(Ordering::Relaxed)
    }

    /// Stop answering echoes, keeping the connection open: a switch whose host died without
    /// closing its TCP connection.
    pub fn go_silent(&self) {
        self.state.answer_echo.store(false, Ordering::Relaxed);
    }
}

fn port(no: u32) -> Port {
    let mut name = format!("evil{no}").into_bytes();
    name.truncate(15);
    Port {
        port_no: no,
        hw_addr: [0x02, 0, 0, (no >> 16) as u8, (no >> 8) as u8, no as u8],
        name,
        config: 0,
        state: 0,
        curr: 0,
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 0,
        max_speed: 0,
    }
}

/// One MORE part of a flow statistics reply, about 60 KB.
fn bloat_part() -> MultipartReply {
    let flow = FlowStats {
        flow: ofproto::Flow::new(0, 0, ofproto::Match::new()),
        duration_sec: 0,
        duration_nsec: 0,
        packet_count: 0,
        byte_count: 0,
    };
    MultipartReply {
        flags: 1, // OFPMPF_REPLY_MORE
        body: MultipartReplyBody::Flow(vec![flow; 1000]),
    }
}

async fn run(mut stream: TcpStream, spec: HostileSpec, state: Arc<PeerState>) {
    let Some(dpid) = spec.dpid else {
        // Silent: hold the connection until the controller closes it.
        let mut buf = [0u8; 4096];
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        state.closed.store(true, Ordering::Relaxed);
        return;
    };
    let mut out = Vec::new();
    Message::Hello(Hello::of13()).encode_into(1, &mut out);
    let mut framer = Framer::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut multipart_left = spec.multipart_bytes;
    loop {
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        framer.push(buf.get(..n).unwrap_or_default());
        let mut port_desc = false;
        while let Ok(Some(frame)) = framer.next_frame() {
            let t = frame.get(1).copied().unwrap_or_default();
            let xid = frame
                .get(4..8)
                .map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]));
            let mp = frame
                .get(8..10)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .filter(|_| t == msg_type::MULTIPART_REQUEST);
            let reply = match (t, mp) {
                (msg_type::FEATURES_REQUEST, _) => Some(Message::FeaturesReply(SwitchFeatures {
                    datapath_id: dpid,
                    n_buffers: 0,
                    n_tables: 254,
                    auxiliary_id: 0,
                    capabilities: 0,
                    reserved: 0,
                })),
                (msg_type::MULTIPART_REQUEST, Some(mp_type::PORT_DESC)) => {
                    port_desc = true;
                    Some(Message::MultipartReply(MultipartReply::new(
                        MultipartReplyBody::PortDesc(Vec::new()),
                    )))
                }
                (msg_type::MULTIPART_REQUEST, Some(_)) if multipart_left > 0 => {
                    // Parts until the budget is spent; never the last one.
                    while multipart_left > 0 {
                        let before = out.len();
                        Message::MultipartReply(bloat_part()).encode_into(xid, &mut out);
                        multipart_left = multipart_left.saturating_sub(out.len() - before);
                        state.sent.fetch_add(1, Ordering::Relaxed);
                        if out.len() > 256 * 1024 {
                            if stream.write_all(&out).await.is_err() {
                                break;
                            }
                            out.clear();
                        }
                    }
                    None
                }
                (msg_type::ECHO_REQUEST, _) => {
                    state.echoes.fetch_add(1, Ordering::Relaxed);
                    state
                        .answer_echo
                        .load(Ordering::Relaxed)
                        .then(|| Message::EchoReply(frame.get(8..).unwrap_or_default().to_vec()))
                }
                _ => None,
            };
            if let Some(r) = reply {
                r.encode_into(xid, &mut out);
                state.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        if port_desc {
            state.ready.store(true, Ordering::Relaxed);
            for no in 0..spec.port_status_adds {
                Message::PortStatus(PortStatus {
                    reason: 0,
                    desc: port(no + 100),
                })
                .encode_into(0, &mut out);
                state.sent.fetch_add(1, Ordering::Relaxed);
                if out.len() > 256 * 1024 {
                    if stream.write_all(&out).await.is_err() {
                        break;
                    }
                    out.clear();
                }
            }
        }
    }
    state.closed.store(true, Ordering::Relaxed);
}
