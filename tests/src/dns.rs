//! A small authoritative DNS server for tests: UDP, A records only, answers encoded with
//! hickory-proto, records (and the server's silence) changed while it runs, and names that are
//! answered late (each late answer waits on a thread of its own, so it holds up no other
//! answer). It serves on a background thread, optionally inside a network namespace, until
//! dropped.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};

use crate::error::{HarnessError, Result};

/// What the server answers: name (lowercase, no trailing dot) → (addresses, TTL); `silent`
/// drops every query (a dead server).
#[derive(Debug, Default)]
struct Zone {
    records: HashMap<String, (Vec<Ipv4Addr>, u32)>,
    /// Names answered only after this long.
    delays: HashMap<String, Duration>,
    silent: bool,
    queries: u64,
    /// Queries per name.
    asked: HashMap<String, u64>,
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct DnsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    stop: Arc<AtomicBool>,
}

impl DnsServer {
    /// Binds UDP `addr` (port 0: any free port) — inside network namespace `ns` when given —
    /// and serves on a background thread.
    pub fn start(ns: Option<&str>, addr: SocketAddrV4) -> Result<DnsServer> {
        let zone = Arc::new(Mutex::new(Zone::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<SocketAddr>>();
        let (zone2, stop2, ns2) = (Arc::clone(&zone), Arc::clone(&stop), ns.map(str::to_owned));
        std::thread::Builder::new()
            .name("dns-server".into())
            .spawn(move || {
                let bound = ns2
                    .as_deref()
                    .map_or(Ok(()), crate::tcp::enter_netns)
                    .and_then(|()| bind(addr));
                match bound {
                    Ok((sock, local)) => {
                        let _ = tx.send(Ok(local));
                        serve(&sock, &zone2, &stop2);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| HarnessError::Net {
                context: "spawn the DNS server".into(),
                source,
            })?;
        let addr = rx
            .recv()
            .map_err(|_| HarnessError::Invalid("DNS server thread ended".into()))??;
        Ok(DnsServer { addr, zone, stop })
    }

    /// Sets `name`'s A records (an empty list answers with no address) and their TTL.
    pub fn set(&self, name: &str, addrs: &[Ipv4Addr], ttl: u32) {
        self.zone()
            .records
            .insert(name.to_lowercase(), (addrs.to_vec(), ttl));
    }

    /// Answers queries for `name` only after `delay` (zero: at once again).
    pub fn set_delay(&self, name: &str, delay: Duration) {
        let mut z = self.zone();
        if delay.is_zero() {
            z.delays.remove(&name.to_lowercase());
        } else {
            z.delays.insert(name.to_lowercase(), delay);
        }
    }

    /// Queries received for `name` so far.
    pub fn queries_for(&self, name: &str) -> u64 {
        self.zone()
            .asked
            .get(&name.to_lowercase())
            .copied()
            .unwrap_or(0)
    }

    /// Makes the server drop every query (`true`) or answer again (`false`).
    pub fn set_silent(&self, silent: bool) {
        self.zone().silent = silent;
    }

    /// Queries received so far (answered or not).
    pub fn queries(&self) -> u64 {
        self.zone().queries
    }

    fn zone(&self) -> std::sync::MutexGuard<'_, Zone> {
        self.zone.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn bind(addr: SocketAddrV4) -> Result<(UdpSocket, SocketAddr)> {
    let io = |source| HarnessError::Net {
        context: format!("bind DNS server on UDP {addr}"),
        source,
    };
    let sock = UdpSocket::bind(addr).map_err(io)?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io)?;
    let local = sock.local_addr().map_err(io)?;
    Ok((sock, local))
}

fn serve(sock: &UdpSocket, zone: &Mutex<Zone>, stop: &AtomicBool) {
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let Some((bytes, delay)) = buf.get(..n).and_then(|q| answer(q, zone)) else {
            continue;
        };
        if delay.is_zero() {
            let _ = sock.send_to(&bytes, from);
        } else if let Ok(late) = sock.try_clone() {
            let _ = std::thread::Builder::new()
                .name("dns-late-answer".into())
                .spawn(move || {
                    std::thread::sleep(delay);
                    let _ = late.send_to(&bytes, from);
                });
        }
    }
}

/// The encoded answer to query `q` and how long to hold it back, or `None` (undecodable
/// query, or the server is silent).
fn answer(q: &[u8], zone: &Mutex<Zone>) -> Option<(Vec<u8>, Duration)> {
    let q = Message::from_vec(q).ok()?;
    let mut z = zone.lock().unwrap_or_else(PoisonError::into_inner);
    z.queries += 1;
    if z.silent {
        return None;
    }
    let mut r = Message::new();
    r.set_id(q.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_authoritative(true)
        .set_recursion_desired(q.recursion_desired());
    let mut code = ResponseCode::NoError;
    let mut delay = Duration::ZERO;
    for query in q.queries() {
        r.add_query(query.clone());
        let name = query.name().to_ascii().trim_end_matches('.').to_lowercase();
        *z.asked.entry(name.clone()).or_default() += 1;
        delay = delay.max(z.delays.get(&name).copied().unwrap_or_default());
        match z.records.get(&name) {
            Some((addrs, ttl)) if query.query_type() == RecordType::A => {
                for a in addrs {
                    r.add_answer(Record::from_rdata(
                        query.name().clone(),
                        *ttl,
                        RData::A(A(*a)),
                    ));
                }
            }
            Some(_) => {}
            None => code = ResponseCode::NXDomain,
        }
    }
    r.set_response_code(code);
    r.to_vec().ok().map(|b| (b, delay))
}
