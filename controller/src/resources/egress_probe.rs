//! Egress-IP failover's own liveness signal: the controller pings (ICMP echo) the underlay
//! address of every node that may host egress IPs (`HostSubnet.egressIPs`/`egressCIDRs`), and
//! a node that answers nothing for `--egress-probe-timeout` is offline for egress IPs until it
//! answers again.
//!
//! Why a probe of the node and not the OpenFlow echo or the shim's stream: a switch busy with
//! a large bundle answers echoes late, so the OpenFlow liveness must be generous (seconds to
//! minutes) or it drops working switches; the shim's egress watch ends when the shim restarts,
//! which is not a node loss. The kernel of the node answers an ICMP echo whatever its
//! ovs-vswitchd or shim is doing, over the underlay that the egress traffic's VXLAN crosses.
//!
//! The socket is an unprivileged ICMP socket where `net.ipv4.ping_group_range` allows it, else
//! a raw ICMP socket (CAP_NET_RAW). Without either, the probe is off (logged once) and egress
//! liveness follows the switch connection and the shim's watch alone.

use crate::core::CoreHandle;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Settings of the underlay probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Between two probes of a node (`--egress-probe-interval`); zero: no probe.
    pub interval: Duration,
    /// A node that answered nothing for this long is unreachable (`--egress-probe-timeout`).
    pub timeout: Duration,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(500),
        }
    }
}

/// What the prober knows of one node (I/O-free: time comes in as arguments).
#[derive(Clone, Debug)]
struct Target {
    ip: Ipv4Addr,
    /// The last answer.
    heard: Instant,
    reachable: bool,
    /// Answered at least once since it became a target: only then can silence make it
    /// unreachable (a network that filters ICMP must not take every egress node offline).
    armed: bool,
}

/// Which nodes answer: the prober's state, fed with targets, answers and time.
#[derive(Debug)]
pub struct ProbeBook {
    timeout: Duration,
    targets: BTreeMap<String, Target>,
}

impl ProbeBook {
    /// A book that declares a node unreachable after `timeout` without an answer.
    pub fn new(timeout: Duration) -> Self {
        ProbeBook {
            timeout,
            targets: BTreeMap::new(),
        }
    }

    /// The nodes to probe now. A new node (or one whose address changed) starts reachable
    /// and is judged once it has answered; a node no longer listed is forgotten (and, if it
    /// was unreachable, reported reachable: nothing judges it any more).
    pub fn set_targets(
        &mut self,
        targets: impl IntoIterator<Item = (String, Ipv4Addr)>,
        now: Instant,
    ) -> Vec<(String, bool)> {
        let wanted: BTreeMap<String, Ipv4Addr> = targets.into_iter().collect();
        let mut changes = Vec::new();
        self.targets.retain(|node, t| {
            let keep = wanted.get(node) == Some(&t.ip);
            if !keep && !t.reachable {
                changes.push((node.clone(), true));
            }
            keep
        });
        for (node, ip) in wanted {
            self.targets.entry(node).or_insert(Target {
                ip,
                heard: now,
                reachable: true,
                armed: false,
            });
        }
        changes
    }

    /// Where to send the next round of probes.
    pub fn addresses(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.targets.values().map(|t| t.ip)
    }

    /// `from` answered at `now`; returns the node that became reachable again, if any.
    pub fn answered(&mut self, from: Ipv4Addr, now: Instant) -> Vec<(String, bool)> {
        let mut changes = Vec::new();
        for (node, t) in self.targets.iter_mut().filter(|(_, t)| t.ip == from) {
            t.heard = now;
            t.armed = true;
            if !t.reachable {
                t.reachable = true;
                changes.push((node.clone(), true));
            }
        }
        changes
    }

    /// The nodes that answered once and then not for the timeout become unreachable.
    pub fn judge(&mut self, now: Instant) -> Vec<(String, bool)> {
        let mut changes = Vec::new();
        for (node, t) in &mut self.targets {
            if t.armed && t.reachable && now.saturating_duration_since(t.heard) >= self.timeout {
                t.reachable = false;
                changes.push((node.clone(), false));
            }
        }
        changes
    }
}

/// The bytes every probe carries (and every counted answer echoes back).
const MAGIC: &[u8] = b"flowmesh-egress-probe";
const ICMP_ECHO_REQUEST: u8 = 8;
const ICMP_ECHO_REPLY: u8 = 0;

/// An ICMP echo request (RFC 792): type, code, checksum, identifier, sequence, data.
fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut p = vec![ICMP_ECHO_REQUEST, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(MAGIC);
    let sum = checksum(&p);
    p[2..4].copy_from_slice(&sum.to_be_bytes());
    p
}

/// The Internet checksum (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// True when `packet` (with an IPv4 header from a raw socket, or without one from a ping
/// socket) is an echo reply to one of our probes.
fn is_our_reply(packet: &[u8], raw_id: Option<u16>) -> bool {
    let icmp = match packet.first() {
        Some(b) if b >> 4 == 4 => {
            let ihl = usize::from(b & 0x0f) * 4;
            packet.get(ihl..).unwrap_or(&[])
        }
        _ => packet,
    };
    let (Some(&kind), Some(id), Some(data)) = (icmp.first(), icmp.get(4..6), icmp.get(8..)) else {
        return false;
    };
    kind == ICMP_ECHO_REPLY
        && data.starts_with(MAGIC)
        // A raw socket sees every echo reply of the host; a ping socket only its own.
        && raw_id.is_none_or(|want| id == want.to_be_bytes())
}

/// An ICMP socket: unprivileged ping socket if allowed, else raw. Returns the socket and,
/// for a raw socket, the identifier our probes carry.
fn open_socket() -> std::io::Result<(tokio::net::UdpSocket, Option<u16>)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let (socket, raw_id) = match Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::ICMPV4)) {
        Ok(s) => (s, None),
        Err(_) => {
            let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
            (s, Some(std::process::id() as u16))
        }
    };
    socket.set_nonblocking(true)?;
    // Both kinds take sendto/recvfrom with an IPv4 address, which is all a UDP socket does.
    let std: std::net::UdpSocket = socket.into();
    Ok((tokio::net::UdpSocket::from_std(std)?, raw_id))
}

/// Probes the egress nodes until the core stops, reporting each change of reachability to
/// the core ([`crate::core::Core::node_reachable`]).
pub async fn run(core: CoreHandle, cfg: ProbeConfig) {
    if cfg.interval.is_zero() {
        return;
    }
    let (socket, raw_id) = match open_socket() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open an ICMP socket (set net.ipv4.ping_group_range or grant CAP_NET_RAW): egress IPs fail over on the switch's echo timeout and the shim's watch only");
            return;
        }
    };
    let mut book = ProbeBook::new(cfg.timeout);
    let mut tick = tokio::time::interval(cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq: u16 = 0;
    let mut buf = vec![0u8; 2048];
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Ok(targets) = core.read(|c| c.egress_probe_targets()).await else {
                    return;
                };
                let now = Instant::now();
                let mut changes = book.set_targets(targets, now);
                // Answers already received count before anyone is judged (a prober that
                // was itself delayed must not blame the nodes).
                while let Ok((n, from)) = socket.try_recv_from(&mut buf) {
                    if let SocketAddr::V4(a) = from {
                        if is_our_reply(&buf[..n], raw_id) {
                            changes.extend(book.answered(*a.ip(), now));
                        }
                    }
                }
                changes.extend(book.judge(now));
                seq = seq.wrapping_add(1);
                let probe = echo_request(raw_id.unwrap_or(0), seq);
                for ip in book.addresses().collect::<Vec<_>>() {
                    if let Err(e) = socket.try_send_to(&probe, SocketAddr::from((ip, 0))) {
                        tracing::debug!(%ip, error = %e, "egress probe not sent");
                    }
                }
                for (node, reachable) in changes {
                    if core.read(move |c| c.node_reachable(&node, reachable)).await.is_err() {
                        return;
                    }
                }
            }
            r = socket.recv_from(&mut buf) => {
                if let Ok((n, SocketAddr::V4(from))) = r {
                    if is_our_reply(&buf[..n], raw_id) {
                        for (node, reachable) in book.answered(*from.ip(), Instant::now()) {
                            if core.read(move |c| c.node_reachable(&node, reachable)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

    #[test]
    fn a_node_silent_for_the_timeout_is_unreachable_until_it_answers() {
        let t0 = Instant::now();
        let mut book = ProbeBook::new(Duration::from_millis(500));
        let targets = vec![("a".to_string(), A), ("b".to_string(), B)];
        assert!(book.set_targets(targets.clone(), t0).is_empty());
        let ms = |m| t0 + Duration::from_millis(m);
        assert!(book.answered(A, ms(100)).is_empty());
        assert!(book.answered(B, ms(200)).is_empty());
        assert!(book.judge(ms(599)).is_empty());
        // a answered last at 100 ms: unreachable at 600 ms; b at 700 ms.
        assert_eq!(book.judge(ms(600)), vec![("a".to_string(), false)]);
        assert!(book.judge(ms(699)).is_empty());
        assert_eq!(book.judge(ms(700)), vec![("b".to_string(), false)]);
        assert!(book.judge(ms(900)).is_empty(), "reported once");
        // Setting the same targets again changes nothing.
        assert!(book.set_targets(targets, ms(900)).is_empty());
        assert!(book.judge(ms(901)).is_empty());
        assert_eq!(book.answered(B, ms(1000)), vec![("b".to_string(), true)]);
        assert!(book.answered(B, ms(1001)).is_empty());
        // A node that is no longer an egress node is forgotten, and no longer held offline.
        assert_eq!(
            book.set_targets(vec![("b".to_string(), B)], ms(1100)),
            vec![("a".to_string(), true)]
        );
        assert_eq!(book.addresses().collect::<Vec<_>>(), vec![B]);
    }

    #[test]
    fn a_node_that_never_answered_is_never_judged() {
        // ICMP filtered on the way: no answer ever; the node stays as its switch and shim say.
        let t0 = Instant::now();
        let mut book = ProbeBook::new(Duration::from_millis(500));
        book.set_targets(vec![("a".to_string(), A)], t0);
        assert!(book.judge(t0 + Duration::from_secs(3600)).is_empty());
        // A new address is a new target: armed again only by an answer from it.
        book.answered(A, t0 + Duration::from_secs(1));
        book.set_targets(vec![("a".to_string(), B)], t0 + Duration::from_secs(2));
        assert!(book.judge(t0 + Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn only_echo_replies_to_our_probes_count() {
        let req = echo_request(7, 1);
        assert_eq!(checksum(&req), 0, "a packet with its checksum sums to zero");
        let mut reply = req.clone();
        reply[0] = ICMP_ECHO_REPLY;
        assert!(is_our_reply(&reply, None));
        assert!(is_our_reply(&reply, Some(7)));
        assert!(
            !is_our_reply(&reply, Some(8)),
            "another prober's identifier"
        );
        assert!(!is_our_reply(&req, None), "a request is no answer");
        // With the IPv4 header a raw socket delivers.
        let mut with_ip = vec![0x45u8];
        with_ip.extend_from_slice(&[0; 19]);
        with_ip.extend_from_slice(&reply);
        assert!(is_our_reply(&with_ip, Some(7)));
        // Someone else's ping, truncated packets, garbage.
        let mut other = reply.clone();
        other.truncate(8);
        other.extend_from_slice(b"abcdefgh");
        assert!(!is_our_reply(&other, None));
        for n in 0..reply.len() {
            let _ = is_our_reply(&reply[..n], Some(7));
        }
        assert!(!is_our_reply(&[0x4f], None));
    }
}
