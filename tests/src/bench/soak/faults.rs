//! The soak's faults, drawn from the seed: kill -9 and SIGSTOP/SIGCONT of the leader and of
//! standbys, an etcd member killed and restarted, a shim killed and restarted, a switch's
//! OpenFlow connection cut, br0 deleted, a node's underlay link down and up, and with
//! `--clock-steps` a replica's wall clock stepped (libfaketime, never the machine's), with
//! `--etcd-nospace` the small etcd member filled past its quota (etcd's NOSPACE alarm) and
//! freed as an operator does. At most two at once, never two on one target, never every
//! replica nor two etcd faults at once.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::Rng;

use super::cluster::{lock, Cluster, ReplicaState, NODES, REPLICAS};
use super::history::History;
use super::judge::FaultSpan;

/// What a fault hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// Replica i killed (restart at the end).
    ReplicaKill(usize),
    /// Replica i stopped (SIGCONT at the end).
    ReplicaStop(usize),
    /// etcd member i killed.
    EtcdKill(usize),
    /// Node n's shim killed.
    ShimKill(usize),
    /// Node n's OpenFlow connections cut (packets to and from the replicas' OpenFlow ports
    /// dropped in the node; let through again at the end).
    SwitchCut(usize),
    /// Node n's br0 deleted (an instant fault: the shim puts it back).
    Br0Delete(usize),
    /// Node n's underlay link down.
    LinkDown(usize),
    /// etcd member i out of space (`--etcd-nospace`): its database filled past its quota until
    /// etcd raises the cluster-wide NOSPACE alarm; at the end the operator's steps free it.
    EtcdNoSpace(usize),
    /// The embedded store's disk filled by a file beside the database (`--phase
    /// embedded-full`); the file removed at the end.
    DiskFull,
    /// Replica i's wall clock stepped by the seconds given (`--clock-steps`; stepped back at
    /// the end). Two instant faults for the judge: the step and the step back.
    ClockStep(usize, i64),
}

/// With `--clock-steps`, the share of fault draws that step a replica's clock.
const CLOCK_STEP_SHARE: f64 = 0.1;

/// With `--etcd-nospace`, the share of fault draws that fill the small etcd member.
const NOSPACE_SHARE: f64 = 0.08;
/// Key prefix of the space-filling writes (outside flowmesh's prefix, as another user of the
/// etcd cluster would write).
const FILLER_PREFIX: &str = "/soak-filler/";
/// Size of one space-filling value (etcd takes requests up to 1.5 MiB).
const FILLER_BYTES: usize = 1 << 20;

/// A fault in progress.
#[derive(Debug, Clone)]
pub struct Active {
    /// Kind (history name).
    pub kind: String,
    /// What it hit.
    pub hit: Hit,
    /// Whether it hit the leader.
    pub leader: bool,
    /// When it began.
    pub start_ms: u64,
    /// When it is to end.
    pub until: Instant,
}

impl Active {
    fn node(&self) -> Option<usize> {
        match self.hit {
            Hit::ShimKill(n) | Hit::SwitchCut(n) | Hit::Br0Delete(n) | Hit::LinkDown(n) => Some(n),
            _ => None,
        }
    }
}

fn signal(pid: Option<u32>, sig: Signal) -> Result<(), String> {
    let pid = pid.ok_or("no PID")?;
    let raw = i32::try_from(pid).map_err(|_| format!("PID {pid}"))?;
    kill(Pid::from_raw(raw), sig).map_err(|e| format!("{sig} {pid}: {e}"))
}

/// The file that fills the embedded store's disk.
const DISK_FILLER: &str = "soak-disk-filler";

/// Whether an error text says that the embedded store's disk is full (or that its database
/// cannot be opened again yet after the error).
pub fn says_disk_full(e: &str) -> bool {
    e.contains("disk of the data directory is full") || e.contains("cannot be opened again yet")
}

/// `--phase embedded-full`: starts the disk-full fault (held `hold`).
pub fn start_disk_full(c: &Cluster, h: &History, hold: Duration) -> Result<Active, String> {
    let start_ms = h.ms();
    fill_disk(c, h)?;
    let a = Active {
        kind: "disk-full".into(),
        hit: Hit::DiskFull,
        leader: false,
        start_ms,
        until: Instant::now() + hold,
    };
    h.log(
        "fault-start",
        serde_json::json!({"kind": a.kind, "hit": format!("{:?}", a.hit), "leader": false, "hold_ms": hold.as_millis() as u64}),
    );
    Ok(a)
}

/// Fills the embedded store's disk with one file beside the database, as another process
/// writing to the same disk would, then checks that a write through flowmesh is refused with
/// the reason (or stored: the database file may have room of its own).
fn fill_disk(c: &Cluster, h: &History) -> Result<(), String> {
    use std::io::Write;
    let dir = c.disk.as_ref().ok_or("no store disk")?;
    let path = dir.join(DISK_FILLER);
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let chunk = vec![0u8; 64 << 10];
    let mut bytes = 0u64;
    let err = loop {
        match f.write_all(&chunk) {
            Ok(()) => bytes += chunk.len() as u64,
            Err(e) => break e,
        }
    };
    drop(f);
    h.log(
        "disk-filled",
        serde_json::json!({"filler_bytes": bytes, "stopped_by": err.to_string(), "used_size_mib": df_mib(dir)}),
    );
    if err.raw_os_error() != Some(28) {
        return Err(format!("filling {}: {err}", path.display()));
    }
    write_while_refused(c, h, "diskfull", says_disk_full)
}

/// Draws and starts one fault that does not clash with `active`; None when none fits now.
pub fn start_one(
    c: &Cluster,
    h: &History,
    rng: &mut StdRng,
    active: &[Active],
) -> Result<Option<Active>, String> {
    let roll = rng.random_range(0..100);
    let hold = |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..hi));
    let node = rng.random_range(1..=NODES);
    let busy_node = active.iter().any(|a| a.node() == Some(node));
    let replica_faults = active
        .iter()
        .filter(|a| matches!(a.hit, Hit::ReplicaKill(_) | Hit::ReplicaStop(_)))
        .count();
    // Drawn only with --clock-steps, so that the seeds of runs without it keep their faults.
    let clock = c.clock_files.is_some()
        && rng.random_bool(CLOCK_STEP_SHARE)
        && !active.iter().any(|a| matches!(a.hit, Hit::ClockStep(..)));
    // Drawn only with --etcd-nospace, after the clock (runs with --clock-steps alone keep theirs).
    let etcd_busy = active
        .iter()
        .any(|a| matches!(a.hit, Hit::EtcdKill(_) | Hit::EtcdNoSpace(_)));
    let nospace =
        !clock && c.nospace_member.is_some() && rng.random_bool(NOSPACE_SHARE) && !etcd_busy;
    let (kind, hit, leader, dur) = if nospace {
        let i = c.nospace_member.unwrap_or(0);
        (
            "etcd-nospace".to_owned(),
            Hit::EtcdNoSpace(i),
            false,
            hold(rng, 2_000, 10_000),
        )
    } else if clock {
        // Within the lab certificates' 5 minutes of back-dating either way.
        let secs = rng.random_range(5..=240_i64) * if rng.random_bool(0.5) { 1 } else { -1 };
        (
            "clock-step".to_owned(),
            Hit::ClockStep(rng.random_range(0..REPLICAS), secs),
            false,
            hold(rng, 2_000, 20_000),
        )
    } else {
        match roll {
            0..=29 => {
                // A replica: the leader half of the time.
                if replica_faults >= REPLICAS - 1 {
                    return Ok(None);
                }
                let want_leader = rng.random_bool(0.5);
                let stop = rng.random_bool(0.5);
                let leader = if want_leader { c.leader() } else { None };
                let up = c.up_replicas(rng.random_range(0..REPLICAS));
                let i = match leader {
                    Some(l) => l,
                    None => {
                        let l = c.leader();
                        match up.into_iter().find(|&i| Some(i) != l) {
                            Some(i) => i,
                            None => return Ok(None),
                        }
                    }
                };
                if lock(&c.replica_state)[i] != ReplicaState::Up {
                    return Ok(None);
                }
                let is_leader = leader == Some(i);
                let who = if is_leader { "leader" } else { "standby" };
                if stop {
                    (
                        format!("{who}-stop"),
                        Hit::ReplicaStop(i),
                        is_leader,
                        hold(rng, 1_000, 6_000),
                    )
                } else {
                    (
                        format!("{who}-kill"),
                        Hit::ReplicaKill(i),
                        is_leader,
                        hold(rng, 1_000, 8_000),
                    )
                }
            }
            30..=41 => {
                if etcd_busy {
                    return Ok(None);
                }
                let i = rng.random_range(0..3);
                (
                    "etcd-kill".into(),
                    Hit::EtcdKill(i),
                    false,
                    hold(rng, 2_000, 10_000),
                )
            }
            42..=55 if !busy_node => (
                "shim-kill".into(),
                Hit::ShimKill(node),
                false,
                hold(rng, 500, 5_000),
            ),
            56..=69 if !busy_node => (
                "switch-cut".into(),
                Hit::SwitchCut(node),
                false,
                hold(rng, 500, 5_000),
            ),
            70..=82 if !busy_node => (
                "br0-delete".into(),
                Hit::Br0Delete(node),
                false,
                Duration::ZERO,
            ),
            83..=99 if !busy_node => (
                "link-down".into(),
                Hit::LinkDown(node),
                false,
                hold(rng, 1_000, 8_000),
            ),
            _ => return Ok(None),
        }
    };
    let start_ms = h.ms();
    match hit {
        Hit::ReplicaKill(i) => {
            lock(&c.replica_state)[i] = ReplicaState::Down;
            let mut r = lock(&c.replicas);
            r[i].kill9(&c.lab);
        }
        Hit::ReplicaStop(i) => {
            lock(&c.replica_state)[i] = ReplicaState::Stopped;
            signal(lock(&c.replicas)[i].pid, Signal::SIGSTOP)?;
        }
        Hit::EtcdKill(i) => lock(&c.etcd).as_mut().ok_or("no etcd")?.kill(i),
        Hit::ShimKill(n) => {
            let pid = c.shim(n).pid;
            c.lab.kill_process(pid);
        }
        Hit::SwitchCut(n) => {
            // A partition between the switch and every replica's OpenFlow port (packets
            // dropped both ways in the node): the connection dies as in a network failure.
            // (Removing br0's controller targets instead would make ovs-vswitchd flush the
            // table by design: a configuration change, not a cut.)
            let ns = c.lab.node(n).map_err(|e| e.to_string())?.ns().to_owned();
            let ports = (0..REPLICAS)
                .map(|i| (crate::e2e::OPENFLOW_PORT + 10 * i as u16).to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let ip = c.lab.controller_ip();
            let script = format!(
                "table ip soak-cut {{\n chain out {{ type filter hook output priority 0; ip daddr {ip} tcp dport {{ {ports} }} drop; }}\n chain in {{ type filter hook input priority 0; ip saddr {ip} tcp sport {{ {ports} }} drop; }}\n}}\n"
            );
            let file = c.lab.run_dir().join(format!("soak-cut-node{n}.nft"));
            std::fs::write(&file, script).map_err(|e| e.to_string())?;
            let f = file.display().to_string();
            c.lab
                .run_in(&ns, "nft", &["-f", &f])
                .map_err(|e| e.to_string())?;
        }
        Hit::Br0Delete(n) => {
            let ovs = c.lab.node(n).map_err(|e| e.to_string())?.ovs();
            ovs.vsctl(["--if-exists", "del-br", "br0"])
                .map_err(|e| e.to_string())?;
        }
        Hit::LinkDown(n) => {
            let ul = c.lab.underlay_ns().to_owned();
            c.lab
                .run_in(&ul, "ip", &["link", "set", &format!("n{n}"), "down"])
                .map_err(|e| e.to_string())?;
        }
        Hit::ClockStep(i, secs) => set_clock_of(c, i, secs)?,
        Hit::EtcdNoSpace(i) => fill_member(c, h, i)?,
        Hit::DiskFull => fill_disk(c, h)?,
    }
    let a = Active {
        kind,
        hit,
        leader,
        start_ms,
        until: Instant::now() + dur,
    };
    h.log(
        "fault-start",
        serde_json::json!({"kind": a.kind, "hit": format!("{:?}", a.hit), "leader": leader, "hold_ms": dur.as_millis() as u64}),
    );
    Ok(Some(a))
}

fn set_clock_of(c: &Cluster, i: usize, secs: i64) -> Result<(), String> {
    let files = c.clock_files.as_ref().ok_or("no replica clock files")?;
    let f = files
        .get(i)
        .ok_or_else(|| format!("no clock file for replica r{i}"))?;
    super::cluster::set_clock(f, secs)
}

/// Used and total MiB of the filesystem at `dir` (`df`).
fn df_mib(dir: &std::path::Path) -> Option<(u64, u64)> {
    let out = std::process::Command::new("df")
        .args(["-B1M", "--output=used,size"])
        .arg(dir)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.lines().nth(1)?.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The database size (bytes) member `i` reports.
fn db_size(etcd: &crate::EtcdCluster, i: usize) -> Option<u64> {
    let text = etcd
        .etcdctl_at(i, &["endpoint", "status", "-w", "json"], b"")
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    v[0]["Status"]["dbSize"].as_u64()
}

/// Whether etcd has a NOSPACE alarm raised.
fn nospace_raised(etcd: &crate::EtcdCluster) -> Result<bool, String> {
    Ok(etcd.etcdctl(&["alarm", "list"])?.contains("NOSPACE"))
}

/// Whether an error text is etcd's refusal for space, as flowmesh passes it on.
pub fn says_no_space(e: &str) -> bool {
    e.contains("database space exceeded")
}

/// Fills etcd member `i` past its quota with writes outside flowmesh's prefix until etcd
/// raises its NOSPACE alarm, then checks that a write through flowmesh is refused with etcd's
/// reason (it is applied once the alarm is gone: [`free_member`]).
fn fill_member(c: &Cluster, h: &History, i: usize) -> Result<(), String> {
    let t0 = Instant::now();
    let guard = lock(&c.etcd);
    let etcd = guard.as_ref().ok_or("no etcd")?;
    let dir = etcd.small_member().map(|(_, d)| d);
    let before = db_size(etcd, i);
    let value = vec![b'f'; FILLER_BYTES];
    let mut puts = 0u32;
    let mut last = String::new();
    loop {
        if nospace_raised(etcd).unwrap_or(false) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "etcd m{i}: no NOSPACE alarm after {puts} writes of {FILLER_BYTES} bytes in 60 s (last: {last})"
            ));
        }
        let key = format!("{FILLER_PREFIX}{puts}");
        match etcd.etcdctl_at(i, &["put", &key], &value) {
            Ok(_) => puts += 1,
            Err(e) => last = e,
        }
    }
    drop(guard);
    let df = dir.as_deref().and_then(df_mib);
    h.log(
        "etcd-nospace-raised",
        serde_json::json!({"member": i, "puts": puts, "fill_ms": t0.elapsed().as_millis() as u64,
            "db_bytes_before": before, "last_put_error": last, "tmpfs_used_size_mib": df}),
    );
    write_while_refused(c, h, "nospace", says_no_space)
}

/// A write through flowmesh while a store fault lasts (a namespace `PREFIX-N`, labelled
/// `soak-nospace: N`): refused with the reason `clear` recognizes, or, if acknowledged,
/// present at the end like every acknowledged write. Applied again when the fault ends
/// ([`write_again`]).
fn write_while_refused(
    c: &Cluster,
    h: &History,
    prefix: &str,
    clear: fn(&str) -> bool,
) -> Result<(), String> {
    let seq = lock(&c.nospace_writes).len() + 1;
    let ns = format!("{prefix}-{seq}");
    let file = c.lab.run_dir().join(format!("soak-{ns}.yaml"));
    let yaml = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    soak-nospace: \"{seq}\"\n"
    );
    std::fs::write(&file, yaml).map_err(|e| format!("{}: {e}", file.display()))?;
    let f = file.display().to_string();
    let outcome = match c.leader() {
        None => Err("no leader answers".to_owned()),
        Some(l) => c.ctl_at(l, 10, &["apply", "-f", &f]),
    };
    h.log(
        "store-full-write",
        serde_json::json!({"namespace": ns, "acknowledged": outcome.is_ok(), "answer": match &outcome { Ok(o) => o.trim(), Err(e) => e.as_str() }}),
    );
    match &outcome {
        Err(e) if !clear(e) && e != "no leader answers" => lock(&c.nospace_errors).push(format!(
            "a write while the store had no space was refused without the reason: {e}"
        )),
        _ => {}
    }
    lock(&c.nospace_writes).push((ns, f, outcome.is_ok()));
    Ok(())
}

/// The operator's steps for etcd's NOSPACE alarm (etcd's documented recovery): delete what
/// filled the space, compact to the current revision, defragment the member, disarm.
fn free_member(c: &Cluster, h: &History, i: usize) -> Result<(), String> {
    let guard = lock(&c.etcd);
    let etcd = guard.as_ref().ok_or("no etcd")?;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(30);
    // Each step again until it works (a member may be electing a leader a moment).
    let step = |args: &[&str], at: Option<usize>| -> Result<String, String> {
        loop {
            let r = match at {
                Some(m) => etcd.etcdctl_at(m, args, b""),
                None => etcd.etcdctl(args),
            };
            match r {
                Ok(out) => return Ok(out),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("etcdctl {}: {e}", args.join(" ")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    };
    step(&["del", "--prefix", FILLER_PREFIX], None)?;
    let status = step(&["endpoint", "status", "-w", "json"], Some(i))?;
    let v: serde_json::Value =
        serde_json::from_str(status.trim()).map_err(|e| format!("endpoint status: {e}"))?;
    let rev = v[0]["Status"]["header"]["revision"]
        .as_u64()
        .ok_or_else(|| format!("endpoint status without a revision: {status}"))?;
    let rev = rev.to_string();
    // Compacted already (by an earlier fault at the same revision) is fine.
    if let Err(e) = step(&["compact", &rev, "--physical"], None) {
        if !e.contains("compacted") {
            return Err(e);
        }
    }
    step(&["defrag"], Some(i))?;
    step(&["alarm", "disarm"], None)?;
    let after = db_size(etcd, i);
    drop(guard);
    h.log(
        "etcd-nospace-freed",
        serde_json::json!({"member": i, "compacted_to": rev, "db_bytes_after": after, "ms": t0.elapsed().as_millis() as u64}),
    );
    Ok(())
}

/// Once the space is back: the write refused meanwhile is applied within 2 s of the fault's
/// end (the control plane is back), retried until acknowledged.
fn write_again(c: &Cluster, h: &History, end: Instant) {
    let Some((ns, file, _)) = lock(&c.nospace_writes).last().cloned() else {
        return;
    };
    let mut last = String::new();
    while end.elapsed() < Duration::from_secs(30) {
        for i in c.up_replicas(0) {
            match c.ctl_at(i, 5, &["apply", "-f", &file]) {
                Ok(_) => {
                    let ms = end.elapsed().as_millis() as u64;
                    h.log(
                        "store-full-write-again",
                        serde_json::json!({"namespace": ns, "ms_after_end": ms}),
                    );
                    if let Some(w) = lock(&c.nospace_writes).iter_mut().find(|w| w.0 == ns) {
                        w.2 = true;
                    }
                    if ms > 2_000 {
                        lock(&c.nospace_errors).push(format!(
                            "the write {ns} refused while the store had no space was acknowledged {ms} ms after the fault ended (window 2000 ms)"
                        ));
                    }
                    return;
                }
                Err(e) => last = format!("r{i}: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    lock(&c.nospace_errors).push(format!(
        "the write {ns} refused while the store had no space was not acknowledged within 30 s of the fault's end: {last}"
    ));
}

/// Ends fault `a` (restarts, SIGCONT, link up, OpenFlow let through, clock back); its spans.
pub fn end(c: &Cluster, h: &History, a: &Active) -> Result<Vec<FaultSpan>, String> {
    match a.hit {
        Hit::ReplicaKill(i) => {
            let mut r = lock(&c.replicas);
            r[i].spawn(&c.lab)
                .map_err(|e| format!("restart replica r{i}: {e}"))?;
            drop(r);
            lock(&c.replica_state)[i] = ReplicaState::Up;
        }
        Hit::ReplicaStop(i) => {
            signal(lock(&c.replicas)[i].pid, Signal::SIGCONT)?;
            lock(&c.replica_state)[i] = ReplicaState::Up;
        }
        Hit::EtcdKill(i) => lock(&c.etcd)
            .as_mut()
            .ok_or("no etcd")?
            .restart(i)
            .map_err(|e| format!("restart etcd m{i}: {e}"))?,
        Hit::ShimKill(n) => {
            let s = crate::cni::start_shim(&c.lab, n, &c.shim_opts)
                .map_err(|e| format!("restart shim {n}: {e}"))?;
            lock(&c.shims)[n - 1] = s;
        }
        Hit::SwitchCut(n) => {
            let ns = c.lab.node(n).map_err(|e| e.to_string())?.ns().to_owned();
            c.lab
                .run_in(&ns, "nft", &["delete", "table", "ip", "soak-cut"])
                .map_err(|e| e.to_string())?;
        }
        Hit::Br0Delete(_) => {}
        Hit::ClockStep(i, _) => set_clock_of(c, i, 0)?,
        Hit::EtcdNoSpace(i) => free_member(c, h, i)?,
        Hit::DiskFull => {
            let dir = c.disk.as_ref().ok_or("no store disk")?;
            let f = dir.join(DISK_FILLER);
            std::fs::remove_file(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        Hit::LinkDown(n) => {
            let ul = c.lab.underlay_ns().to_owned();
            c.lab
                .run_in(&ul, "ip", &["link", "set", &format!("n{n}"), "up"])
                .map_err(|e| e.to_string())?;
            c.lab.seed_tunnel_neighbors().map_err(|e| e.to_string())?;
        }
    }
    let end_ms = h.ms();
    let ended = Instant::now();
    h.log(
        "fault-end",
        serde_json::json!({"kind": a.kind, "hit": format!("{:?}", a.hit), "start_ms": a.start_ms, "end_ms": end_ms}),
    );
    if matches!(a.hit, Hit::EtcdNoSpace(_) | Hit::DiskFull) {
        write_again(c, h, ended);
    }
    Ok(spans_of(a, end_ms))
}

/// The judge's spans of fault `a` that ended at `end_ms`: br0's deletion is instant (the shim
/// puts it back), and a clock step is two instant faults, the step and the step back (the time
/// in between is a replica running on another clock, which must change nothing).
fn spans_of(a: &Active, end_ms: u64) -> Vec<FaultSpan> {
    let instant = matches!(a.hit, Hit::Br0Delete(_) | Hit::ClockStep(..));
    let span = FaultSpan {
        kind: a.kind.clone(),
        node: a.node(),
        start_ms: a.start_ms,
        end_ms: if instant { a.start_ms } else { end_ms },
        leader: a.leader,
    };
    if matches!(a.hit, Hit::ClockStep(..)) {
        let back = FaultSpan {
            start_ms: end_ms,
            end_ms,
            ..span.clone()
        };
        return vec![span, back];
    }
    vec![span]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn active(hit: Hit) -> Active {
        Active {
            kind: "k".into(),
            hit,
            leader: false,
            start_ms: 1_000,
            until: Instant::now(),
        }
    }

    #[test]
    fn clock_steps_and_br0_deletions_are_instant_for_the_judge() {
        let at = |v: Vec<FaultSpan>| -> Vec<(u64, u64)> {
            v.iter().map(|s| (s.start_ms, s.end_ms)).collect()
        };
        assert_eq!(
            at(spans_of(&active(Hit::LinkDown(2)), 5_000)),
            [(1_000, 5_000)]
        );
        assert_eq!(
            at(spans_of(&active(Hit::Br0Delete(2)), 5_000)),
            [(1_000, 1_000)]
        );
        let step = spans_of(&active(Hit::ClockStep(1, -90)), 9_000);
        assert_eq!(at(step.clone()), [(1_000, 1_000), (9_000, 9_000)]);
        // A replica's clock is the control plane's: every probe, no node.
        assert!(step.iter().all(|s| s.node.is_none() && !s.leader));
    }

    #[test]
    fn a_store_without_space_is_a_control_plane_span_until_it_is_freed() {
        for hit in [Hit::EtcdNoSpace(2), Hit::DiskFull] {
            let sp = spans_of(&active(hit), 7_000);
            assert_eq!(sp.len(), 1, "{hit:?}");
            assert_eq!((sp[0].start_ms, sp[0].end_ms), (1_000, 7_000), "{hit:?}");
            assert!(sp[0].node.is_none() && !sp[0].leader, "{hit:?}");
        }
    }

    #[test]
    fn refusals_for_space_are_recognized_by_their_reason_only() {
        assert!(says_no_space(
            "the store did not confirm the change: etcd x: etcdserver: mvcc: database space exceeded (ResourceExhausted): etcd is out of space"
        ));
        assert!(!says_no_space(
            "etcd x: no leader (etcd unreachable, or the cluster has no quorum)"
        ));
        assert!(says_disk_full(
            "the change was not stored: embedded database transaction failed: /d/flowmesh.redb: I/O error: No space left on device (os error 28): the disk of the data directory is full: free space there"
        ));
        assert!(!says_disk_full(
            "embedded database transaction failed: Previous I/O error occurred. Please close and re-open the database."
        ));
    }
}
