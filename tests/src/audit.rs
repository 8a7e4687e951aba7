//! Helpers of the audit-logging tests and `flowmesh-bench audit`: a flood of TCP connection
//! attempts from a pod's namespace, the node shims' audit lines, and the bridge's audit meter
//! as Open vSwitch counts it.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::netns::NetnsLab;
use crate::tcp::in_netns;

/// What a flood sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloodReport {
    /// SYNs sent (connects that went out).
    pub sent: usize,
    /// Attempts the kernel refused before sending (counted, not retried).
    pub failed: usize,
    /// How long sending took.
    pub elapsed: Duration,
}

/// `n` TCP connection attempts from namespace `ns` to `dst`, at most `per_second` (0: as fast
/// as the kernel takes them): each a non-blocking connect (one SYN from its own source port),
/// closed at once (a closed attempt sends nothing more).
pub fn syn_flood(ns: &str, dst: SocketAddrV4, n: usize, per_second: u32) -> Result<FloodReport> {
    use nix::errno::Errno;
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    in_netns(ns, move || {
        let addr = SockaddrIn::from(dst);
        let t = Instant::now();
        let (mut sent, mut failed) = (0, 0);
        for i in 0..n {
            if per_second > 0 && i % 50 == 0 {
                let due = Duration::from_secs_f64(i as f64 / f64::from(per_second));
                if let Some(wait) = due.checked_sub(t.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
                None,
            )
            .map_err(|e| HarnessError::Invalid(format!("socket: {e}")))?;
            match connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr) {
                Ok(()) | Err(Errno::EINPROGRESS) => sent += 1,
                Err(_) => failed += 1,
            }
            drop(fd);
        }
        Ok(FloodReport {
            sent,
            failed,
            elapsed: t.elapsed(),
        })
    })
}

/// The value of `key=` in an audit line (`name="..."` unquoted).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!(" {key}=");
    let at = line.find(&pat)? + pat.len();
    let rest = line.get(at..)?;
    if let Some(q) = rest.strip_prefix('"') {
        return q.split('"').next();
    }
    rest.split(' ').next()
}

/// A line's time (`2026-01-02T03:04:05.678Z`), as milliseconds since the epoch.
pub fn line_time_ms(line: &str) -> Option<i64> {
    let ts = line.split(' ').next()?;
    let num = |a: usize, b: usize| -> Option<i64> { ts.get(a..b)?.parse().ok() };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, s, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    // Days since the epoch of a civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + h) * 60 + mi) * 60 + s) * 1000 + ms)
}

/// The most lines whose times fall within one second of each other.
pub fn max_lines_per_second(lines: &[String]) -> usize {
    let mut t: Vec<i64> = lines.iter().filter_map(|l| line_time_ms(l)).collect();
    t.sort_unstable();
    let mut best = 0;
    let mut j = 0;
    for i in 0..t.len() {
        while t[i] - t[j] >= 1000 {
            j += 1;
        }
        best = best.max(i - j + 1);
    }
    best
}

/// The audit meter of node `node`'s bridge as Open vSwitch counts it: (packets that entered
/// the meter, packets its band dropped).
pub fn meter_counts(lab: &NetnsLab, node: usize, meter: u32) -> Result<(u64, u64)> {
    let text = lab
        .node(node)?
        .ovs()
        .ofctl(["-O", "OpenFlow13", "meter-stats", lab.bridge()])?;
    let block = text
        .split(&format!("meter:{meter} "))
        .nth(1)
        .ok_or_else(|| HarnessError::Invalid(format!("no meter {meter} in: {text}")))?;
    let num = |key: &str| -> Option<u64> {
        block
            .split(key)
            .nth(1)?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    match (num("packet_in_count:"), num("0: packet_count:")) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(HarnessError::Invalid(format!("meter stats: {text}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_times_and_windows() {
        assert_eq!(line_time_ms("1970-01-01T00:00:01.500Z x"), Some(1500));
        assert_eq!(
            line_time_ms("2000-02-29T00:00:00.000Z"),
            Some(951_782_400_000)
        );
        let l = |t: &str| format!("{t} node=n");
        let lines = vec![
            l("2026-01-01T00:00:00.000Z"),
            l("2026-01-01T00:00:00.400Z"),
            l("2026-01-01T00:00:00.999Z"),
            l("2026-01-01T00:00:01.000Z"),
            l("2026-01-01T00:00:01.100Z"),
        ];
        assert_eq!(max_lines_per_second(&lines), 4);
        assert_eq!(
            field("t node=a name=\"NP:x:y\" verdict=drop", "name"),
            Some("NP:x:y")
        );
        assert_eq!(field("t node=a verdict=drop", "verdict"), Some("drop"));
    }
}
