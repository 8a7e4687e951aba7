//! A tiny raw-bytes OpenFlow 1.3 listener for harness tests: on each switch connection it sends
//! HELLO (v1.3 version bitmap), waits for the switch HELLO, sends FEATURES_REQUEST and records
//! the datapath id of the FEATURES_REPLY. It answers ECHO_REQUEST and keeps the connection open
//! until dropped. Not a controller: only proof that switches reach us.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::tcp::in_netns;

const OFP13: u8 = 4;
const OFPT_HELLO: u8 = 0;
const OFPT_ECHO_REQUEST: u8 = 2;
const OFPT_ECHO_REPLY: u8 = 3;
const OFPT_FEATURES_REQUEST: u8 = 5;
const OFPT_FEATURES_REPLY: u8 = 6;

/// HELLO with one OFPHET_VERSIONBITMAP element announcing only OpenFlow 1.3.
const HELLO: [u8; 16] = [
    OFP13, OFPT_HELLO, 0, 16, 0, 0, 0, 1, // header, xid 1
    0, 1, 0, 8, 0, 0, 0, 0x10, // type 1 (versionbitmap), len 8, bitmap bit 4
];
const FEATURES_REQUEST: [u8; 8] = [OFP13, OFPT_FEATURES_REQUEST, 0, 8, 0, 0, 0, 2];

#[derive(Default)]
struct Shared {
    /// datapath id -> time since bind at which its FEATURES_REPLY arrived.
    dpids: BTreeMap<u64, Duration>,
    connections: usize,
    errors: Vec<String>,
}

/// Listens on 127.0.0.1:<free port> and handshakes with every switch that connects.
pub struct OfHandshakeListener {
    addr: SocketAddr,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OfHandshakeListener {
    /// Binds 127.0.0.1 on a port the kernel picks and starts accepting.
    pub fn bind() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| HarnessError::Net {
            context: "bind 127.0.0.1:0".into(),
            source,
        })?;
        Self::serve_on(listener)
    }

    /// Binds `ip` (port picked by the kernel) inside network namespace `ns`, e.g. a
    /// `NetnsLab`'s controller namespace, and starts accepting.
    pub fn bind_in_netns(ns: &str, ip: IpAddr) -> Result<Self> {
        let listener = in_netns(ns, move || {
            TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|source| HarnessError::Net {
                context: format!("bind {ip}:0"),
                source,
            })
        })?;
        Self::serve_on(listener)
    }

    fn serve_on(listener: TcpListener) -> Result<Self> {
        let net = |context: &str| {
            let context = context.to_owned();
            move |source| HarnessError::Net { context, source }
        };
        let addr = listener.local_addr().map_err(net("local_addr"))?;
        listener
            .set_nonblocking(true)
            .map_err(net("set_nonblocking"))?;
        let shared = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (Arc::clone(&shared), Arc::clone(&stop));
        let t0 = Instant::now();
        let thread = thread::Builder::new()
            .name("of-listener".into())
            .spawn(move || accept_loop(&listener, &s2, &stop2, t0))
            .map_err(net("spawn listener thread"))?;
        Ok(OfHandshakeListener {
            addr,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OVS controller target for this listener, `tcp:127.0.0.1:PORT`.
    pub fn target(&self) -> String {
        format!("tcp:{}", self.addr)
    }

    /// Datapath ids that completed HELLO + FEATURES so far, with the time since bind.
    pub fn handshakes(&self) -> BTreeMap<u64, Duration> {
        lock(&self.shared.0).dpids.clone()
    }

    /// Number of TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        lock(&self.shared.0).connections
    }

    /// Waits until `n` distinct datapath ids completed the handshake; returns them.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<BTreeMap<u64, Duration>> {
        let (m, cv) = &*self.shared;
        let deadline = Instant::now() + timeout;
        let mut g = lock(m);
        while g.dpids.len() < n {
            let now = Instant::now();
            if now >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!(
                        "{n} OpenFlow handshakes (got {}, {} connections, errors {:?})",
                        g.dpids.len(),
                        g.connections,
                        g.errors
                    ),
                    timeout,
                });
            }
            g = match cv.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        Ok(g.dpids.clone())
    }
}

impl Drop for OfHandshakeListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn accept_loop(
    listener: &TcpListener,
    shared: &Arc<(Mutex<Shared>, Condvar)>,
    stop: &Arc<AtomicBool>,
    t0: Instant,
) {
    let mut conns = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                lock(&shared.0).connections += 1;
                let (s, st) = (Arc::clone(shared), Arc::clone(stop));
                conns.push(thread::spawn(move || {
                    if let Err(e) = serve(stream, &s, &st, t0) {
                        if !st.load(Ordering::SeqCst) {
                            lock(&s.0).errors.push(e.to_string());
                        }
                    }
                }));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(e) => {
                lock(&shared.0).errors.push(format!("accept: {e}"));
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
    for c in conns {
        let _ = c.join();
    }
}

/// Reads exactly `buf.len()` bytes, retrying on read timeouts until `stop` is set.
fn read_full(stream: &mut TcpStream, buf: &mut [u8], stop: &AtomicBool) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        if stop.load(Ordering::SeqCst) {
            return Err(ErrorKind::Interrupted.into());
        }
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serve(
    mut stream: TcpStream,
    shared: &(Mutex<Shared>, Condvar),
    stop: &AtomicBool,
    t0: Instant,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    stream.set_nodelay(true)?;
    stream.write_all(&HELLO)?;
    loop {
        let mut hdr = [0u8; 8];
        read_full(&mut stream, &mut hdr, stop)?;
        let [version, kind, l0, l1, x0, x1, x2, x3] = hdr;
        let len = usize::from(u16::from_be_bytes([l0, l1]));
        if len < 8 {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("OpenFlow length {len} < 8"),
            ));
        }
        let mut body = vec![0u8; len - 8];
        read_full(&mut stream, &mut body, stop)?;
        match kind {
            OFPT_HELLO => {
                if version != OFP13 {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        format!("switch HELLO version {version:#x}, want 0x04"),
                    ));
                }
                stream.write_all(&FEATURES_REQUEST)?;
            }
            OFPT_FEATURES_REPLY => {
                let dpid = body
                    .get(..8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| {
                        std::io::Error::new(ErrorKind::InvalidData, "short FEATURES_REPLY")
                    })?;
                let (m, cv) = shared;
                lock(m).dpids.entry(dpid).or_insert_with(|| t0.elapsed());
                cv.notify_all();
            }
            OFPT_ECHO_REQUEST => {
                let mut reply = hdr;
                reply[1] = OFPT_ECHO_REPLY;
                reply[4..8].copy_from_slice(&[x0, x1, x2, x3]);
                stream.write_all(&reply)?;
                stream.write_all(&body)?;
            }
            _ => {}
        }
    }
}
