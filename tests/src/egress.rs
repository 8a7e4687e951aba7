//! Egress-IP test helpers on a [`CniCluster`]: an "outside" host namespace on the underlay
//! with a UDP service that records (and answers with) the source address of every datagram,
//! a prober that sends numbered datagrams from a pod at a fixed interval, and killing and
//! reviving a node (underlay link down, shim and ovs-vswitchd stopped; then all back).
//! Used by `tests/tests/e2e_egressip.rs` and `flowmesh-bench egressip`; [`TcpRecorder`] also
//! by `tests/tests/cluster_egressip.rs` (the real cluster's outside host).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::e2e::CniCluster;
use crate::error::{HarnessError, Result};
use crate::netns::NetnsLab;
use crate::tcp::enter_netns;

/// Last octet of the outside host's underlay address.
pub const OUTSIDE_OCTET: u8 = 200;

/// An address on the lab's underlay /24 with last octet `last`.
pub fn underlay_addr(lab: &NetnsLab, last: u8) -> Ipv4Addr {
    let o = lab.controller_ip().octets();
    Ipv4Addr::new(o[0], o[1], o[2], last)
}

/// Creates the outside host: namespace `<lab>-out`, `eth0` on the underlay bridge with
/// `.200/24`. Returns (namespace, address).
pub fn add_outside_host(lab: &NetnsLab) -> Result<(String, Ipv4Addr)> {
    lab.add_underlay_host("out", OUTSIDE_OCTET)
}

/// One datagram as the outside host saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When it arrived.
    pub at: Instant,
    /// Its source address.
    pub src: Ipv4Addr,
    /// The sequence number in its first 8 bytes (big endian; 0 when shorter).
    pub seq: u64,
}

/// A UDP service in a namespace: records every datagram and answers `src=<addr>:<port>`.
#[derive(Debug)]
pub struct UdpRecorder {
    /// Where it listens.
    pub addr: SocketAddrV4,
    seen: Arc<Mutex<Vec<Arrival>>>,
    stop: Arc<AtomicBool>,
}

impl UdpRecorder {
    /// Binds `ip:port` in `ns`; serves on a thread until dropped.
    pub fn start(ns: &str, ip: Ipv4Addr, port: u16) -> Result<Self> {
        let addr = SocketAddrV4::new(ip, port);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let seen2 = Arc::clone(&seen);
        crate::e2e::serve_udp(
            ns,
            addr,
            "udp-recorder".into(),
            Arc::clone(&stop),
            move |s, data, peer| {
                let at = Instant::now();
                let SocketAddr::V4(peer) = peer else { return };
                let seq = data
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or(0);
                seen2
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Arrival {
                        at,
                        src: *peer.ip(),
                        seq,
                    });
                let _ = s.send_to(format!("src={peer}").as_bytes(), peer);
            },
        )?;
        Ok(UdpRecorder { addr, seen, stop })
    }

    /// Everything seen so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for UdpRecorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One TCP connection as the outside host saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpArrival {
    /// When it was accepted.
    pub at: Instant,
    /// Its source address.
    pub src: Ipv4Addr,
    /// What the client sent before closing its side (at most 1 KiB, trimmed).
    pub text: String,
}

/// A TCP service in a namespace: for every connection records when it came, its source
/// address and what the client sent until it shut its side down, then answers `src=<addr>`.
/// Serves on threads until dropped.
#[derive(Debug)]
pub struct TcpRecorder {
    /// Where it listens.
    pub addr: SocketAddrV4,
    seen: Arc<Mutex<Vec<TcpArrival>>>,
    stop: Arc<AtomicBool>,
}

impl TcpRecorder {
    /// Binds `ip:port` in `ns`.
    pub fn start(ns: &str, ip: Ipv4Addr, port: u16) -> Result<Self> {
        let addr = SocketAddrV4::new(ip, port);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
        let ns_owned = ns.to_owned();
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        std::thread::Builder::new()
            .name("tcp-recorder".into())
            .spawn(move || {
                let bound = enter_netns(&ns_owned).and_then(|()| {
                    let l = TcpListener::bind(addr).map_err(|source| HarnessError::Net {
                        context: format!("bind {addr} in {ns_owned}"),
                        source,
                    })?;
                    l.set_nonblocking(true)
                        .map_err(|source| HarnessError::Net {
                            context: "nonblocking listener".into(),
                            source,
                        })?;
                    Ok(l)
                });
                let Some(l) = crate::e2e::report_bound(&tx, bound) else {
                    return;
                };
                while !stop2.load(Ordering::Relaxed) {
                    let (mut s, peer) = match l.accept() {
                        Ok(c) => c,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    };
                    let at = Instant::now();
                    let SocketAddr::V4(peer) = peer else { continue };
                    let seen3 = Arc::clone(&seen2);
                    // One thread per connection: a client that never closes does not hold up
                    // the others (the accepted socket lives in this namespace already).
                    let _ = std::thread::Builder::new()
                        .name("tcp-recorder-conn".into())
                        .spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
                            let mut buf = Vec::new();
                            let _ = (&mut s).take(1024).read_to_end(&mut buf);
                            seen3
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push(TcpArrival {
                                    at,
                                    src: *peer.ip(),
                                    text: String::from_utf8_lossy(&buf).trim().to_string(),
                                });
                            let _ = s.write_all(format!("src={}\n", peer.ip()).as_bytes());
                        });
                }
            })
            .map_err(|source| HarnessError::Net {
                context: "spawn the TCP recorder".into(),
                source,
            })?;
        rx.recv()
            .map_err(|_| HarnessError::Invalid("TCP recorder thread ended".into()))??;
        Ok(TcpRecorder { addr, seen, stop })
    }

    /// Everything seen so far, in the order the connections were read.
    pub fn arrivals(&self) -> Vec<TcpArrival> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TcpRecorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sends a UDP datagram with a sequence number every `interval` from namespace `ns` to `dst`
/// (one socket, so one 5-tuple: one connection) until dropped.
#[derive(Debug)]
pub struct Prober {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<u64>>,
}

impl Prober {
    /// Starts probing.
    pub fn start(ns: &str, dst: SocketAddrV4, interval: Duration) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(0u64));
        let (stop2, sent2) = (Arc::clone(&stop), Arc::clone(&sent));
        let ns_owned = ns.to_owned();
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        std::thread::Builder::new()
            .name("udp-prober".into())
            .spawn(move || {
                let bound = enter_netns(&ns_owned).and_then(|()| {
                    UdpSocket::bind("0.0.0.0:0").map_err(|source| HarnessError::Net {
                        context: format!("bind a UDP socket in {ns_owned}"),
                        source,
                    })
                });
                let Some(s) = crate::e2e::report_bound(&tx, bound) else {
                    return;
                };
                let mut seq = 1u64;
                let mut next = Instant::now();
                while !stop2.load(Ordering::Relaxed) {
                    // Errors (no route while a node is down) are what the test measures.
                    let _ = s.send_to(&seq.to_be_bytes(), dst);
                    *sent2.lock().unwrap_or_else(PoisonError::into_inner) = seq;
                    seq += 1;
                    next += interval;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
            })
            .map_err(|source| HarnessError::Net {
                context: "spawn the UDP prober".into(),
                source,
            })?;
        rx.recv()
            .map_err(|_| HarnessError::Invalid("UDP prober thread ended".into()))??;
        Ok(Prober { stop, sent })
    }

    /// The last sequence number sent.
    pub fn sent(&self) -> u64 {
        *self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One UDP request from `ns` to `dst`: the source address the service reports (None: no
/// answer within `wait`, `tries` times).
pub fn udp_source(
    ns: &str,
    dst: SocketAddrV4,
    tries: usize,
    wait: Duration,
) -> Result<Option<String>> {
    let r = crate::e2e::udp_probe(ns, dst, b"who", tries, wait)?;
    Ok(r.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// The underlay-side veth of node `i` (on the lab's underlay bridge).
fn underlay_port(i: usize) -> String {
    format!("n{i}")
}

/// Kills node `i`: its underlay link goes down first (so nothing it sends afterwards, not even
/// a TCP FIN, reaches anyone), then its shim and its ovs-vswitchd are stopped. Returns the
/// instant the link went down.
pub fn kill_node(c: &mut CniCluster, i: usize) -> Result<Instant> {
    let ul = c.lab.underlay_ns().to_owned();
    c.lab
        .run_in(&ul, "ip", &["link", "set", &underlay_port(i), "down"])?;
    let t = Instant::now();
    let pid = c.shims[i - 1].pid;
    c.lab.stop_process(pid);
    c.lab.node_mut(i)?.ovs_mut().kill_vswitchd();
    Ok(t)
}

/// Brings node `i` back: ovs-vswitchd restarted on its database (its taps, br-phy among them,
/// come back empty, so the node address is put back), the underlay link up, tunnel neighbours
/// seeded again, and a new shim (which waits for the controller's list before it releases any
/// egress IP it still finds).
pub fn revive_node(c: &mut CniCluster, i: usize) -> Result<()> {
    c.lab.node_mut(i)?.ovs_mut().start_vswitchd()?;
    let ns = c.lab.node(i)?.ns().to_owned();
    let ip = c.lab.underlay_ip(i);
    let have = c
        .lab
        .run_in(&ns, "ip", &["-4", "addr", "show", "dev", "br-phy"])?;
    if !have.contains(&format!("{ip}/")) {
        c.lab.run_in(
            &ns,
            "ip",
            &["addr", "add", &format!("{ip}/24"), "dev", "br-phy"],
        )?;
    }
    c.lab.run_in(&ns, "ip", &["link", "set", "br-phy", "up"])?;
    let ul = c.lab.underlay_ns().to_owned();
    c.lab
        .run_in(&ul, "ip", &["link", "set", &underlay_port(i), "up"])?;
    c.lab.seed_tunnel_neighbors()?;
    let so = c.ctl.shim_options();
    c.shims[i - 1] = crate::cni::start_shim(&c.lab, i, &so)?;
    Ok(())
}

/// What a failover looked like at the outside host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// From the kill to the first probe from `egress_ip` after it (None: none arrived).
    pub gap: Option<Duration>,
    /// Probes (over the whole record) from one of the node addresses.
    pub leaked: usize,
    /// Probes from the egress IP after the kill.
    pub after: usize,
}

/// Judges `arrivals` around a kill at `killed`: the first probe from `egress_ip` sent after
/// the last one that arrived before the kill.
pub fn failover(
    arrivals: &[Arrival],
    killed: Instant,
    egress_ip: Ipv4Addr,
    node_ips: &[Ipv4Addr],
) -> Failover {
    let last_before = arrivals
        .iter()
        .filter(|a| a.at <= killed)
        .map(|a| a.seq)
        .max()
        .unwrap_or(0);
    let after: Vec<&Arrival> = arrivals
        .iter()
        .filter(|a| a.at > killed && a.seq > last_before && a.src == egress_ip)
        .collect();
    Failover {
        gap: after.iter().map(|a| a.at - killed).min(),
        leaked: arrivals
            .iter()
            .filter(|a| node_ips.contains(&a.src))
            .count(),
        after: after.len(),
    }
}

/// Polls `f` every 50 ms until it returns Some, at most `timeout`.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t0.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
