//! From a logging flow's packet-in to an audit line, without I/O: the packet's headers, the
//! flow's userdata, the line's text, and the two filters between them (a connection's repeats
//! are counted, not written again; at most `rateLimit` lines per second, the rest counted as
//! suppressed). Time is an argument.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// First word of a logging flow's userdata (`topology::pipeline::audit`'s format).
pub const USERDATA_MAGIC: &str = "flowmesh-audit/1";

/// What a logging flow's userdata says: `flowmesh-audit/1 VERDICT DIRECTION SEVERITY REF`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// `allow` or `drop`.
    pub verdict: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `alert`, `warning`, `notice`, `info` or `debug`.
    pub severity: String,
    /// `NP:NS:POLICY`, `NP:NS:Ingress`, `NP:NS:Egress`.
    pub reference: String,
}

impl Tag {
    /// Reads the userdata; None when it is not the audit format (or names unknown values).
    pub fn parse(userdata: &[u8]) -> Option<Tag> {
        let s = std::str::from_utf8(userdata).ok()?;
        let mut it = s.splitn(5, ' ');
        if it.next()? != USERDATA_MAGIC {
            return None;
        }
        let verdict = it.next()?;
        let direction = it.next()?;
        let severity = it.next()?;
        let reference = it.next()?;
        let ok = matches!(verdict, "allow" | "drop")
            && matches!(direction, "ingress" | "egress")
            && matches!(severity, "alert" | "warning" | "notice" | "info" | "debug")
            && !reference.is_empty()
            && reference
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
        ok.then(|| Tag {
            verdict: verdict.into(),
            direction: direction.into(),
            severity: severity.into(),
            reference: reference.into(),
        })
    }

    /// The syslog severity code (RFC 5424).
    pub fn syslog_severity(&self) -> u8 {
        match self.severity.as_str() {
            "alert" => 1,
            "warning" => 4,
            "notice" => 5,
            "info" => 6,
            _ => 7,
        }
    }
}

/// A connection as its first packet shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow5 {
    /// IP protocol.
    pub proto: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// TCP/UDP/SCTP source port; ICMP: the echo identifier (0 for other types).
    pub sport: u16,
    /// TCP/UDP/SCTP destination port; ICMP: type << 8 | code.
    pub dport: u16,
}

impl Flow5 {
    /// Reads an Ethernet frame (with up to two VLAN tags) carrying IPv4; None for anything
    /// else or a truncated header.
    pub fn parse(frame: &[u8]) -> Option<Flow5> {
        let mut off = 12;
        let mut ethertype = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
        off += 2;
        for _ in 0..2 {
            if ethertype == 0x8100 || ethertype == 0x88a8 {
                ethertype = u16::from_be_bytes([*frame.get(off + 2)?, *frame.get(off + 3)?]);
                off += 4;
            }
        }
        if ethertype != 0x0800 {
            return None;
        }
        let ip = frame.get(off..)?;
        let vihl = *ip.first()?;
        if vihl >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(vihl & 0x0f) * 4;
        if ihl < 20 {
            return None;
        }
        let proto = *ip.get(9)?;
        let addr = |at: usize| -> Option<Ipv4Addr> {
            let b = ip.get(at..at + 4)?;
            Some(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
        };
        let (src, dst) = (addr(12)?, addr(16)?);
        // A fragment other than the first carries no L4 header.
        let frag_off = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff;
        let l4 = if frag_off == 0 { ip.get(ihl..) } else { None };
        let u16_at = |b: &[u8], at: usize| -> Option<u16> {
            Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
        };
        let (sport, dport) = match (proto, l4) {
            (6 | 17 | 132, Some(l4)) => (u16_at(l4, 0)?, u16_at(l4, 2)?),
            (1, Some(l4)) => {
                let (t, c) = (*l4.first()?, *l4.get(1)?);
                // Echo request/reply: the identifier tells one ping from another.
                let id = if t == 8 || t == 0 { u16_at(l4, 4)? } else { 0 };
                (id, u16::from(t) << 8 | u16::from(c))
            }
            _ => (0, 0),
        };
        Some(Flow5 {
            proto,
            src,
            dst,
            sport,
            dport,
        })
    }

    /// `tcp`, `udp`, `sctp`, `icmp`, or the number.
    pub fn proto_name(&self) -> String {
        match self.proto {
            1 => "icmp".into(),
            6 => "tcp".into(),
            17 => "udp".into(),
            132 => "sctp".into(),
            p => p.to_string(),
        }
    }
}

/// One audit event: what was decided about which connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// The logging flow's tag.
    pub tag: Tag,
    /// The connection.
    pub flow: Flow5,
}

/// `namespace/name` of the pods at either end, where they are pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ends {
    /// The source's pod.
    pub src_pod: Option<String>,
    /// The destination's pod.
    pub dst_pod: Option<String>,
}

/// UTC time as RFC 3339 with milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The audit line (no newline):
/// `TIME node=N name="REF" verdict=V severity=S direction=D proto=P src=A [sport=N] dst=B
/// [dport=N | icmp_type=T icmp_code=C] [src_pod=NS/NAME] [dst_pod=NS/NAME] [suppressed=N]`.
pub fn line(time: SystemTime, node: &str, e: &Event, ends: &Ends, suppressed: u64) -> String {
    let f = &e.flow;
    let mut s = format!(
        "{} node={node} name=\"{}\" verdict={} severity={} direction={} proto={} src={}",
        rfc3339(time),
        e.tag.reference,
        e.tag.verdict,
        e.tag.severity,
        e.tag.direction,
        f.proto_name(),
        f.src
    );
    match f.proto {
        6 | 17 | 132 => {
            s += &format!(" sport={} dst={} dport={}", f.sport, f.dst, f.dport);
        }
        1 => {
            s += &format!(
                " dst={} icmp_type={} icmp_code={}",
                f.dst,
                f.dport >> 8,
                f.dport & 0xff
            );
            if f.sport != 0 {
                s += &format!(" icmp_id={}", f.sport);
            }
        }
        _ => s += &format!(" dst={}", f.dst),
    }
    if let Some(p) = &ends.src_pod {
        s += &format!(" src_pod={p}");
    }
    if let Some(p) = &ends.dst_pod {
        s += &format!(" dst_pod={p}");
    }
    if suppressed > 0 {
        s += &format!(" suppressed={suppressed}");
    }
    s
}

/// How long a connection's repeats (a refused client's retransmitted SYNs, further datagrams
/// of a refused UDP exchange, the pings of one `ping`) are counted instead of written: each
/// repeat extends it.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(30);
/// Connections remembered for [`REPEAT_WINDOW`] at most (the oldest are forgotten first).
pub const REPEAT_MEMORY: usize = 16_384;

/// The window of the rate limit: a second and a millisecond, so that the lines' own
/// millisecond time stamps (taken with the wall clock as they are admitted) never show more
/// than `rate` in a second either.
pub const RATE_WINDOW: Duration = Duration::from_millis(1001);

/// The filters between packet-ins and lines: one line per connection, and at most `rate` lines
/// in any second (a sliding window of the last `rate` lines' times, [`RATE_WINDOW`]); what the
/// second drops is counted and reported with the next line written.
#[derive(Debug)]
pub struct Gate {
    rate: u32,
    /// When the last (at most `rate`) lines were written, oldest first.
    written: VecDeque<Instant>,
    seen: HashMap<Event, Instant>,
    order: VecDeque<(Instant, Event)>,
    suppressed: u64,
    repeats: u64,
}

/// What the gate decided about an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write it, reporting this many suppressed before it.
    Write { suppressed: u64 },
    /// A repeat of a connection logged less than [`REPEAT_WINDOW`] ago.
    Repeat,
    /// Over the rate limit: counted as suppressed.
    Suppressed,
}

impl Gate {
    /// A gate for `rate` lines per second.
    pub fn new(rate: u32) -> Self {
        Gate {
            rate: rate.max(1),
            written: VecDeque::new(),
            seen: HashMap::new(),
            order: VecDeque::new(),
            suppressed: 0,
            repeats: 0,
        }
    }

    /// A new rate.
    pub fn set_rate(&mut self, rate: u32) {
        self.rate = rate.max(1);
        while self.written.len() > self.rate as usize {
            self.written.pop_front();
        }
    }

    /// Events the switch's meter dropped before they reached the shim: reported as suppressed
    /// with the next line.
    pub fn add_suppressed(&mut self, n: u64) {
        self.suppressed += n;
    }

    /// Repeats seen so far (not written).
    pub fn repeats(&self) -> u64 {
        self.repeats
    }

    /// Suppressed events not yet reported in a line.
    pub fn pending_suppressed(&self) -> u64 {
        self.suppressed
    }

    /// Decide about `e` at `now`.
    pub fn admit(&mut self, e: &Event, now: Instant) -> Decision {
        while let Some((t, old)) = self.order.front() {
            if now.duration_since(*t) < REPEAT_WINDOW && self.order.len() <= REPEAT_MEMORY {
                break;
            }
            if self.seen.get(old) == Some(t) {
                self.seen.remove(old);
            }
            self.order.pop_front();
        }
        if let Some(t) = self.seen.get_mut(e) {
            *t = now;
            self.order.push_back((now, e.clone()));
            self.repeats += 1;
            return Decision::Repeat;
        }
        if self.written.len() >= self.rate as usize {
            let full = self
                .written
                .front()
                .is_some_and(|t| now.duration_since(*t) < RATE_WINDOW);
            if full {
                self.suppressed += 1;
                return Decision::Suppressed;
            }
            self.written.pop_front();
        }
        self.written.push_back(now);
        self.seen.insert(e.clone(), now);
        self.order.push_back((now, e.clone()));
        let suppressed = std::mem::take(&mut self.suppressed);
        Decision::Write { suppressed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + L4 frame.
    pub(crate) fn frame(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
        let mut f = vec![
            0x0a, 0x58, 10, 128, 0, 2, 0x0a, 0x58, 10, 128, 2, 3, 0x08, 0x00,
        ];
        f.extend_from_slice(&[0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(l4);
        f
    }

    fn tag() -> Tag {
        Tag::parse(b"flowmesh-audit/1 allow ingress notice NP:shop:web").expect("tag")
    }

    #[test]
    fn tags_parse_and_refuse_what_is_not_theirs() {
        let t = tag();
        assert_eq!(
            (
                t.verdict.as_str(),
                t.direction.as_str(),
                t.reference.as_str()
            ),
            ("allow", "ingress", "NP:shop:web")
        );
        assert_eq!(t.syslog_severity(), 5);
        for bad in [
            &b"flowmesh-audit/1 allow ingress notice"[..],
            b"flowmesh-audit/1 permit ingress notice NP:a:b",
            b"flowmesh-audit/1 allow ingress notice NP:a\"b",
            b"flowmesh-audit/1 allow ingress notice NP:a b",
            b"other 1 2 3 4",
            b"\xff",
        ] {
            assert_eq!(Tag::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn headers_give_the_connection() {
        let tcp = frame(
            6,
            [10, 128, 2, 3],
            [10, 128, 0, 2],
            &[0xa8, 0x48, 0, 80, 0, 0],
        );
        let f = Flow5::parse(&tcp).expect("tcp");
        assert_eq!(
            (f.proto, f.src, f.dst, f.sport, f.dport),
            (
                6,
                Ipv4Addr::new(10, 128, 2, 3),
                Ipv4Addr::new(10, 128, 0, 2),
                43080,
                80
            )
        );
        let ping = frame(
            1,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            &[8, 0, 0, 0, 0x12, 0x34, 0, 1],
        );
        let p = Flow5::parse(&ping).expect("icmp");
        assert_eq!((p.sport, p.dport), (0x1234, 8 << 8));
        // Truncated, not IPv4, IPv6, a bad IHL: None, never a panic.
        assert_eq!(Flow5::parse(&tcp[..20]), None);
        let mut arp = tcp.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(Flow5::parse(&arp), None);
        let mut short_ihl = tcp.clone();
        short_ihl[14] = 0x42;
        assert_eq!(Flow5::parse(&short_ihl), None);
        for n in 0..tcp.len() {
            let _ = Flow5::parse(&tcp[..n]);
        }
        // A VLAN tag is skipped.
        let mut tagged = tcp[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0, 5]);
        tagged.extend_from_slice(&tcp[12..]);
        assert_eq!(Flow5::parse(&tagged), Some(f));
    }

    #[test]
    fn the_line_names_everything() {
        let tcp = frame(
            6,
            [10, 128, 2, 3],
            [10, 128, 0, 2],
            &[0xa8, 0x48, 0, 80, 0, 0],
        );
        let e = Event {
            tag: tag(),
            flow: Flow5::parse(&tcp).expect("tcp"),
        };
        let ends = Ends {
            src_pod: Some("tools/client".into()),
            dst_pod: Some("shop/web".into()),
        };
        let t = UNIX_EPOCH + Duration::from_millis(1_764_203_131_123);
        assert_eq!(
            line(t, "worker-1", &e, &ends, 3),
            "2025-11-27T00:25:31.123Z node=worker-1 name=\"NP:shop:web\" verdict=allow severity=notice direction=ingress proto=tcp src=10.128.2.3 sport=43080 dst=10.128.0.2 dport=80 src_pod=tools/client dst_pod=shop/web suppressed=3"
        );
        let ping = frame(
            1,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            &[8, 0, 0, 0, 0x12, 0x34, 0, 1],
        );
        let e = Event {
            tag: tag(),
            flow: Flow5::parse(&ping).expect("icmp"),
        };
        assert!(line(UNIX_EPOCH, "n", &e, &Ends::default(), 0).ends_with(
            "proto=icmp src=10.0.0.1 dst=10.0.0.2 icmp_type=8 icmp_code=0 icmp_id=4660"
        ));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    fn event(sport: u16) -> Event {
        let tcp = frame(
            6,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            &[(sport >> 8) as u8, sport as u8, 0, 22, 0, 0],
        );
        Event {
            tag: tag(),
            flow: Flow5::parse(&tcp).expect("tcp"),
        }
    }

    #[test]
    fn repeats_are_counted_and_the_rate_is_kept() {
        let t0 = Instant::now();
        let mut g = Gate::new(5);
        assert_eq!(g.admit(&event(1), t0), Decision::Write { suppressed: 0 });
        // The retransmitted SYN: the same connection.
        assert_eq!(
            g.admit(&event(1), t0 + Duration::from_millis(300)),
            Decision::Repeat
        );
        assert_eq!(g.repeats(), 1);
        // 20 new connections in one instant: 4 more lines in this second, 16 suppressed.
        let at = t0 + Duration::from_millis(500);
        let written = (2..22)
            .filter(|p| matches!(g.admit(&event(*p), at), Decision::Write { .. }))
            .count();
        assert_eq!(written, 4);
        assert_eq!(g.pending_suppressed(), 16);
        // A second after the first line there is room for one; it reports the 16 (and the
        // switch meter's 100).
        g.add_suppressed(100);
        assert_eq!(
            g.admit(&event(30), t0 + Duration::from_millis(999)),
            Decision::Suppressed
        );
        assert_eq!(
            g.admit(&event(31), t0 + Duration::from_secs(1)),
            Decision::Suppressed
        );
        assert_eq!(
            g.admit(&event(32), t0 + RATE_WINDOW),
            Decision::Write { suppressed: 118 }
        );
        // Over any second, at most `rate` lines.
        let mut g = Gate::new(5);
        let mut lines = Vec::new();
        for i in 0..10_000u32 {
            let now = t0 + Duration::from_micros(u64::from(i) * 300);
            if let Decision::Write { .. } = g.admit(&event(i as u16), now) {
                lines.push(now);
            }
        }
        for (i, t) in lines.iter().enumerate() {
            let in_window = lines[i..]
                .iter()
                .take_while(|u| u.duration_since(*t) < Duration::from_secs(1))
                .count();
            assert!(in_window <= 5, "{in_window} lines within a second");
        }
        // After the window, the connection is new again.
        let mut g = Gate::new(5);
        g.admit(&event(1), t0);
        assert!(matches!(
            g.admit(&event(1), t0 + REPEAT_WINDOW + Duration::from_secs(1)),
            Decision::Write { .. }
        ));
    }
}
