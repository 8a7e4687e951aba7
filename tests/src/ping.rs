//! A steady ping between namespaces for tests that prove nothing is lost across an event (a
//! restart, a takeover): it runs until stopped, however long the event takes, reports as it
//! goes which request was answered last, and is judged on the sequence numbers it got back.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::egress::wait_for;
use crate::error::{HarnessError, Result};

/// A `ping` running in a namespace until [`SteadyPing::stop`].
pub struct SteadyPing {
    child: Child,
    reader: Option<JoinHandle<BTreeSet<u32>>>,
    last: Arc<AtomicU32>,
    what: String,
}

/// What a stopped [`SteadyPing`] saw.
#[derive(Debug)]
pub struct PingReport {
    /// The highest sequence number answered.
    pub last: u32,
    /// Requests up to `last` that got no answer (the one in flight when stopped is no loss).
    pub missing: Vec<u32>,
}

impl SteadyPing {
    /// Pings `dst` from namespace `ns` every `interval` (ping's `-i`, e.g. "0.02").
    pub fn start(ns: &str, dst: IpAddr, interval: &str) -> Result<Self> {
        let what = format!("ping {dst} from {ns}");
        // `ip netns exec` execs ping: the child's PID is ping's, for SIGINT.
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "ping", "-n", "-i", interval, "-W", "1"])
            .arg(dst.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| HarnessError::Net {
                context: format!("spawn {what}"),
                source,
            })?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| HarnessError::Invalid(format!("{what}: no stdout")))?;
        let last = Arc::new(AtomicU32::new(0));
        let last2 = Arc::clone(&last);
        let reader = std::thread::spawn(move || {
            let mut answered = BTreeSet::new();
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                let seq = line
                    .split("icmp_seq=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok());
                if let Some(seq) = seq {
                    answered.insert(seq);
                    last2.fetch_max(seq, Ordering::Relaxed);
                }
            }
            answered
        });
        Ok(SteadyPing {
            child,
            reader: Some(reader),
            last,
            what,
        })
    }

    /// The highest sequence number answered so far (0: none yet).
    pub fn answered(&self) -> u32 {
        self.last.load(Ordering::Relaxed)
    }

    /// Waits until `n` more requests than now have been answered.
    pub fn wait_more_answered(&self, n: u32, timeout: Duration) -> Result<()> {
        let want = self.answered() + n;
        wait_for(timeout, || (self.answered() >= want).then_some(())).ok_or_else(|| {
            HarnessError::Timeout {
                what: format!("{}: {n} more answers", self.what),
                timeout,
            }
        })
    }

    /// Stops ping (SIGINT) and reports what was answered.
    pub fn stop(mut self) -> PingReport {
        self.interrupt();
        let _ = self.child.wait();
        let answered = self
            .reader
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or_default();
        let last = answered.last().copied().unwrap_or(0);
        PingReport {
            last,
            missing: (1..=last).filter(|s| !answered.contains(s)).collect(),
        }
    }

    fn interrupt(&self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
    }
}

impl Drop for SteadyPing {
    fn drop(&mut self) {
        // Not stopped (a test failed first): end it by its PID and reap it.
        if self.reader.is_some() {
            self.interrupt();
            let _ = self.child.wait();
        }
    }
}
