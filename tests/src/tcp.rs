//! Bounded TCP transfers between network namespaces without external tools: a fresh thread
//! enters the namespace with `setns(2)` (only that thread switches) and then uses std::net.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use nix::sched::{setns, CloneFlags};

use crate::error::{HarnessError, Result};

/// Default bound on a whole transfer.
pub const DEFAULT_TCP_TIMEOUT: Duration = Duration::from_secs(20);

/// Result of a transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpTransfer {
    /// Bytes the receiver got.
    pub bytes: u64,
    /// Receiver time from accept to end of stream.
    pub elapsed: Duration,
}

impl TcpTransfer {
    /// Throughput in Mbit/s.
    pub fn mbit_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        self.bytes as f64 * 8.0 / secs / 1e6
    }
}

/// Path of a named network namespace (as made by `ip netns add`).
pub fn netns_path(ns: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(ns)
}

/// Moves the *current thread* into network namespace `ns`. Use only on a thread you spawned
/// for that purpose and that ends afterwards.
pub fn enter_netns(ns: &str) -> Result<()> {
    let path = netns_path(ns);
    let f = File::open(&path).map_err(|source| HarnessError::Io {
        op: "open netns",
        path,
        source,
    })?;
    setns(&f, CloneFlags::CLONE_NEWNET).map_err(|source| HarnessError::Setns {
        ns: ns.to_owned(),
        source,
    })
}

/// Runs `f` on a new thread inside namespace `ns` and returns its result.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let ns = ns.to_owned();
    let name = format!("netns-{ns}");
    thread::Builder::new()
        .name(name)
        .spawn(move || {
            enter_netns(&ns)?;
            f()
        })
        .map_err(|source| HarnessError::Net {
            context: "spawn netns thread".into(),
            source,
        })?
        .join()
        .map_err(|_| HarnessError::Invalid("netns thread panicked".into()))?
}

/// Sends `bytes` bytes over TCP from namespace `from_ns` to `to_ip:port` served in `to_ns`
/// (bounded by [`DEFAULT_TCP_TIMEOUT`]). Returns the receiver's measurement.
pub fn tcp_transfer(
    from_ns: &str,
    to_ns: &str,
    to_ip: IpAddr,
    port: u16,
    bytes: u64,
) -> Result<TcpTransfer> {
    tcp_transfer_with_timeout(from_ns, to_ns, to_ip, port, bytes, DEFAULT_TCP_TIMEOUT)
}

/// [`tcp_transfer`] with an explicit bound on the whole transfer.
pub fn tcp_transfer_with_timeout(
    from_ns: &str,
    to_ns: &str,
    to_ip: IpAddr,
    port: u16,
    bytes: u64,
    timeout: Duration,
) -> Result<TcpTransfer> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::new(to_ip, port);
    let net = |context: String| move |source| HarnessError::Net { context, source };

    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let to = to_ns.to_owned();
    // Set when the sender gave up, so the receiver stops waiting for it.
    let abort = Arc::new(AtomicBool::new(false));
    let abort_rx = Arc::clone(&abort);
    let server = thread::Builder::new()
        .name(format!("tcp-recv-{to}"))
        .spawn(move || -> Result<TcpTransfer> {
            let setup = (|| -> Result<TcpListener> {
                enter_netns(&to)?;
                let l = TcpListener::bind(addr).map_err(net(format!("bind {addr} in {to}")))?;
                l.set_nonblocking(true)
                    .map_err(net("set_nonblocking".into()))?;
                Ok(l)
            })();
            let listener = match setup {
                Ok(l) => {
                    let _ = ready_tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let msg = e.to_string();
                    let _ = ready_tx.send(Err(e));
                    return Err(HarnessError::Invalid(msg));
                }
            };
            let mut stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline || abort_rx.load(Ordering::SeqCst) {
                            return Err(HarnessError::Timeout {
                                what: format!("TCP connection to {addr} in {to}"),
                                timeout,
                            });
                        }
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(net(format!("accept on {addr}"))(e)),
                }
            };
            let start = Instant::now();
            stream
                .set_nonblocking(false)
                .map_err(net("set_blocking".into()))?;
            stream
                .set_read_timeout(Some(Duration::from_millis(200)))
                .map_err(net("set_read_timeout".into()))?;
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0u64;
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => got += n as u64,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(net(format!("read from {addr}"))(e)),
                }
                if Instant::now() >= deadline || abort_rx.load(Ordering::SeqCst) {
                    return Err(HarnessError::Timeout {
                        what: format!("TCP stream to {addr} (received {got} bytes)"),
                        timeout,
                    });
                }
            }
            Ok(TcpTransfer {
                bytes: got,
                elapsed: start.elapsed(),
            })
        })
        .map_err(net("spawn receiver thread".into()))?;

    // Do not connect before the listener exists.
    let ready = ready_rx
        .recv_timeout(timeout)
        .map_err(|_| HarnessError::Timeout {
            what: format!("TCP listener {addr} in {to_ns}"),
            timeout,
        })
        .and_then(|r| r);
    if let Err(e) = ready {
        let _ = server.join();
        return Err(e);
    }

    let from = from_ns.to_owned();
    let sent = in_netns(&from.clone(), move || {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut s = TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1)))
            .map_err(net(format!("connect {addr} from {from}")))?;
        s.set_write_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(net("set_write_timeout".into()))?;
        let chunk = vec![0x5au8; 1 << 16];
        let mut left_bytes = bytes;
        while left_bytes > 0 {
            let n = usize::try_from(left_bytes.min(chunk.len() as u64)).unwrap_or(chunk.len());
            s.write_all(&chunk[..n])
                .map_err(net(format!("write to {addr} from {from}")))?;
            left_bytes -= n as u64;
        }
        s.shutdown(std::net::Shutdown::Write)
            .map_err(net("shutdown".into()))?;
        Ok(bytes)
    });
    if sent.is_err() {
        abort.store(true, Ordering::SeqCst);
    }
    let received = server
        .join()
        .map_err(|_| HarnessError::Invalid("receiver thread panicked".into()))?;
    let sent = sent?;
    let received = received?;
    if received.bytes != sent {
        return Err(HarnessError::Invalid(format!(
            "TCP to {addr}: sent {sent} bytes, received {}",
            received.bytes
        )));
    }
    Ok(received)
}
