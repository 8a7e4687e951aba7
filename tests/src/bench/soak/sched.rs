//! What the machine did to the datapath: every node's `ovs-vswitchd` forwards every packet in
//! its main thread (the lab's userspace `netdev` datapath polls its ports there), so a stream
//! stalls whenever that thread does not run. Sampled from the kernel's own accounting
//! (`/proc/PID/task/PID/schedstat`: time on a CPU and time runnable but waiting for one;
//! `stat`: the thread's state, `wchan`: where it sleeps), none of it flowmesh's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::cluster::{lock, Cluster, NODES};
use super::history::History;
use super::judge::Sched;
use super::probes::Recorded;

/// The sampling tick.
const TICK: Duration = Duration::from_millis(50);

/// (on-CPU ns, runnable-waiting ns) of thread `tid` of `pid`.
fn schedstat(pid: u32, tid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The one-letter state of thread `tid` of `pid` (`R`, `S`, `D`, ...).
fn state(pid: u32, tid: u32) -> Option<char> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the state follows the last ')'.
    text.rsplit_once(')')?.1.trim_start().chars().next()
}

fn wchan(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default()
}

struct Node {
    pid: u32,
    last: Option<(u64, u64, u64)>,
    // The current second's figures, logged when it ends.
    second: u64,
    run_ms: u64,
    wait_ms: u64,
    blocked: u64,
    samples: u64,
    wchans: BTreeMap<String, u64>,
}

/// Samples every node's `ovs-vswitchd` main thread every [`TICK`] until `stop`: each interval
/// goes to `rec.sched` for the judge, a summary per node and second to the history
/// (`vswitchd-sched`: on-CPU, runnable-waiting and blocked (state D) time).
pub fn monitor(c: &Cluster, h: &History, rec: &Recorded, stop: &AtomicBool) {
    let mut nodes: Vec<Option<Node>> = (0..NODES).map(|_| None).collect();
    let mut refreshed: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        if refreshed.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            refreshed = Some(Instant::now());
            for (i, slot) in nodes.iter_mut().enumerate() {
                let pid = c.lab.node(i + 1).ok().and_then(|n| n.ovs().vswitchd_pid());
                if slot.as_ref().map(|n| n.pid) != pid {
                    *slot = pid.map(|pid| Node {
                        pid,
                        last: None,
                        second: 0,
                        run_ms: 0,
                        wait_ms: 0,
                        blocked: 0,
                        samples: 0,
                        wchans: BTreeMap::new(),
                    });
                }
            }
        }
        let now_ms = h.ms();
        let mut out = Vec::new();
        for (i, slot) in nodes.iter_mut().enumerate() {
            let Some(n) = slot else { continue };
            let Some((run, wait)) = schedstat(n.pid, n.pid) else {
                continue;
            };
            let st = state(n.pid, n.pid);
            let d = st == Some('D');
            if let Some((t, run0, wait0)) = n.last {
                let s = Sched {
                    node: i + 1,
                    start_ms: t,
                    end_ms: now_ms,
                    run_ms: run.saturating_sub(run0) / 1_000_000,
                    wait_ms: wait.saturating_sub(wait0) / 1_000_000,
                    blocked: d,
                };
                let sec = now_ms / 1000;
                if sec != n.second && n.samples > 0 {
                    h.log(
                        "vswitchd-sched",
                        serde_json::json!({
                            "node": i + 1, "second": n.second, "run_ms": n.run_ms,
                            "wait_ms": n.wait_ms, "blocked_samples": n.blocked,
                            "samples": n.samples, "wchans": n.wchans,
                        }),
                    );
                    n.run_ms = 0;
                    n.wait_ms = 0;
                    n.blocked = 0;
                    n.samples = 0;
                    n.wchans.clear();
                }
                n.second = sec;
                n.run_ms += s.run_ms;
                n.wait_ms += s.wait_ms;
                n.samples += 1;
                if d {
                    n.blocked += 1;
                    *n.wchans.entry(wchan(n.pid, n.pid)).or_default() += 1;
                }
                out.push(s);
            }
            n.last = Some((now_ms, run, wait));
        }
        lock(&rec.sched).extend(out);
        std::thread::sleep(TICK);
    }
}
