//! `flowmesh-bench soak --minutes N --seed S`: the chaos soak (issue 33). A 3-node lab with CNI
//! pods in several namespaces, NetworkPolicies, an egress IP, an egress firewall rule and
//! multicast; three controller replicas on a real 3-member etcd. A seeded workload writes
//! through the admin API and the CNI plugin while seeded faults hit the control plane and the
//! nodes; probes of real traffic are judged against an independent truth table with the
//! issue's fixed recovery windows. At the end: every acknowledged write is read back, every
//! switch's flows must equal the desired flows within 30 s, and the memory of the processes that
//! lived through the run is compared with the end of the warm-up. History as JSON lines; the
//! last line is `soak: minutes= faults= violations= outages_over_window= max_outage_ms=
//! lost_writes= converge_secs= rss_growth_mib=`.

pub mod cluster;
pub mod faults;
pub mod history;
pub mod judge;
pub mod logs;
pub mod probes;
pub mod sched;
pub mod truth;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::arg_value;
use cluster::{lock, Cluster, NODES};
use history::History;
use judge::FaultSpan;
use truth::{Labels, Mode, Model, Policy};
use workload::{World, CHURN_NS, FIXED_NS};

/// How long the flows of every switch may take to equal the desired flows once faults stop.
pub const CONVERGE_LIMIT: Duration = Duration::from_secs(30);
/// Largest allowed memory growth of a process between the end of the warm-up and the end.
pub const RSS_GROWTH_LIMIT: f64 = 0.10;

struct Opts {
    minutes: f64,
    seed: u64,
    mode: Mode,
    history: PathBuf,
    fault_gap_secs: f64,
    pairs: usize,
    leader_ttl: u64,
    warmup_secs: f64,
    shim_extra: Vec<String>,
    clock_steps: bool,
    etcd_nospace: bool,
    phase: Phase,
    disk_mib: u64,
}

/// Which soak runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Three replicas on etcd under the seeded faults.
    Chaos,
    /// One controller on its embedded store whose disk fills up and is freed again.
    EmbeddedFull,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let minutes: f64 = arg_value(args, "--minutes", 5.0)?;
    let seed: u64 = arg_value(args, "--seed", 1)?;
    let mode = match arg_value::<String>(args, "--mode", "networkpolicy".into())?.as_str() {
        "networkpolicy" => Mode::NetworkPolicy,
        "multitenant" => Mode::Multitenant,
        m => return Err(format!("--mode {m}: networkpolicy or multitenant")),
    };
    let history: String = arg_value(
        args,
        "--history",
        format!("target/soak/soak-seed{seed}-{}.jsonl", std::process::id()),
    )?;
    let shim_extra = match args.iter().position(|a| a == "--shim-args") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--shim-args needs a value")?
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        None => Vec::new(),
    };
    let phase = match arg_value::<String>(args, "--phase", "chaos".into())?.as_str() {
        "chaos" => Phase::Chaos,
        "embedded-full" => Phase::EmbeddedFull,
        p => return Err(format!("--phase {p}: chaos or embedded-full")),
    };
    let etcd_nospace = args.iter().any(|a| a == "--etcd-nospace");
    if phase == Phase::EmbeddedFull && etcd_nospace {
        return Err("--etcd-nospace is for the etcd phase (chaos), not embedded-full".into());
    }
    if minutes.is_nan() || minutes <= 0.0 {
        return Err("--minutes must be positive".into());
    }
    Ok(Opts {
        minutes,
        seed,
        mode,
        history: PathBuf::from(history),
        fault_gap_secs: arg_value(args, "--fault-gap-secs", 12.0)?,
        pairs: arg_value(args, "--pairs", 24)?,
        leader_ttl: arg_value(args, "--leader-ttl", 3)?,
        warmup_secs: arg_value(args, "--warmup-secs", (minutes * 60.0 / 5.0).min(300.0))?,
        shim_extra,
        clock_steps: args.iter().any(|a| a == "--clock-steps"),
        etcd_nospace,
        phase,
        disk_mib: arg_value(args, "--disk-mib", 16)?,
    })
}

/// The figures of a run.
#[derive(Debug, Default)]
struct Outcome {
    faults: usize,
    steps: u64,
    verdict: judge::Verdict,
    lost_writes: usize,
    converge_secs: Option<f64>,
    /// flowmesh's controllers and shims: the bound applies to them.
    rss_growth: Growth,
    /// etcd's members, reported apart: see docs/operations.md.
    etcd_rss_growth: Growth,
    /// The switches' ovs-vswitchd, reported apart: see docs/operations.md.
    vswitchd_rss_growth: Growth,
    /// Times the bench itself was not scheduled for 300 ms or more.
    bench_pauses: usize,
    /// Stalls of the control stream (no Open vSwitch on its path).
    control_stalls: usize,
    errors: Vec<String>,
}

/// Entry point of `flowmesh-bench soak`.
pub fn main(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let h = History::create(&o.history)?;
    h.log(
        "start",
        serde_json::json!({"minutes": o.minutes, "seed": o.seed, "mode": o.mode.config_name(), "args": args}),
    );
    eprintln!("soak: history in {}", h.path().display());
    let c = Cluster::start(
        o.mode,
        o.leader_ttl,
        &o.shim_extra,
        o.clock_steps,
        match o.phase {
            Phase::Chaos => cluster::Store::Etcd {
                nospace: o.etcd_nospace,
            },
            Phase::EmbeddedFull => cluster::Store::EmbeddedFull { mib: o.disk_mib },
        },
    )?;
    h.log("cluster-up", serde_json::json!({"lab": c.lab.id()}));
    let out = run(&c, &h, &o);
    // The logs go with the lab: kept beside the history (a replica's panic, a switch's stall).
    let kept = logs::dir_for(h.path());
    match logs::keep(&c, &kept) {
        Ok(n) => eprintln!("soak: {n} logs kept in {}", kept.display()),
        Err(e) => eprintln!("soak: keeping the logs: {e}"),
    }
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            h.log("aborted", serde_json::json!({"error": e}));
            h.flush();
            return Err(format!("{e} (history: {})", h.path().display()));
        }
    };
    let v = &out.verdict;
    let conv = out
        .converge_secs
        .map_or_else(|| "never".to_owned(), |s| format!("{s:.1}"));
    let line = format!(
        "soak: minutes={} faults={} violations={} outages_over_window={} max_outage_ms={} lost_writes={} converge_secs={} rss_growth_mib={:.1}",
        o.minutes, out.faults, v.violations, v.outages_over_window, v.max_outage_ms, out.lost_writes, conv, out.rss_growth.mib
    );
    h.log(
        "verdict",
        serde_json::json!({
            "line": line, "probes": v.probes, "transitional": v.transitional, "steps": out.steps,
            "bench_pauses": out.bench_pauses, "control_stalls": out.control_stalls, "machine_stalls": v.machine_stalls, "machine_failures": v.machine_failures,
            "rss_growth_pct": out.rss_growth.pct, "examples": v.examples, "errors": out.errors,
        }),
    );
    h.flush();
    for e in v.examples.iter().chain(&out.errors) {
        eprintln!("soak: {e}");
    }
    eprintln!(
        "soak: phase={:?} seed={} mode={} probes={} transitional={} bench_pauses={} control_stalls={} machine_stalls={} machine_failures={} steps={} rss_growth_pct={:.1} rss_worst={} etcd_rss_growth_mib={:.1} etcd_rss_growth_pct={:.1} vswitchd_rss_growth_mib={:.1} vswitchd_rss_growth_pct={:.1} vswitchd_rss_worst={} history={}",
        o.phase,
        o.seed,
        o.mode.config_name(),
        v.probes,
        v.transitional,
        out.bench_pauses,
        out.control_stalls,
        v.machine_stalls,
        v.machine_failures,
        out.steps,
        out.rss_growth.pct * 100.0,
        out.rss_growth.worst_or_dash(),
        out.etcd_rss_growth.mib,
        out.etcd_rss_growth.pct * 100.0,
        out.vswitchd_rss_growth.mib,
        out.vswitchd_rss_growth.pct * 100.0,
        out.vswitchd_rss_growth.worst_or_dash(),
        h.path().display()
    );
    println!("{line}");
    let converged = out
        .converge_secs
        .is_some_and(|s| s <= CONVERGE_LIMIT.as_secs_f64());
    if v.violations > 0
        || v.outages_over_window > 0
        || out.lost_writes > 0
        || !converged
        || out.rss_growth.pct > RSS_GROWTH_LIMIT
        || !out.errors.is_empty()
    {
        return Err("the soak found faults in flowmesh (see above and the history)".into());
    }
    Ok(())
}

fn run(c: &Cluster, h: &History, o: &Opts) -> Result<Outcome, String> {
    let world = Mutex::new(World::new(o.mode));
    let mut wl = workload::Workload::new(c, h, &world, o.seed ^ 0x5eed_0001);
    wl.setup()?;
    // Warm-up: every pair answers as the truth table says (the evaluator agrees with the
    // real network before anything is judged).
    warm_up(h, &world)?;
    let rec = probes::Recorded::default();
    let stop_probes = AtomicBool::new(false);
    let stop_work = AtomicBool::new(false);
    let server_stop = Arc::new(AtomicBool::new(false));
    let mut spans: Vec<FaultSpan> = Vec::new();
    let mut errors = Vec::new();
    let mut out = Outcome::default();
    std::thread::scope(|s| -> Result<(), String> {
        s.spawn(|| probes::pause_monitor(h, &rec, &stop_probes));
        s.spawn(|| sched::monitor(c, h, &rec, &stop_probes));
        probes::start_streams(
            s,
            c,
            h,
            &world,
            &rec,
            &stop_probes,
            Arc::clone(&server_stop),
        )?;
        let prober = s.spawn(|| {
            let plan = probes::ProbePlan {
                seed: o.seed ^ 0x5eed_0002,
                pairs: o.pairs,
                every: Duration::from_secs(2),
            };
            probes::prober(c, h, &world, &rec, plan, &stop_probes)
        });
        // The memory baseline is taken once the run has been under faults and writes for
        // the warm-up (caches and allocator arenas filled), not at the quiet start.
        let mut base: Option<BTreeMap<String, (u32, f64)>> = None;
        let warmup = Duration::from_secs_f64(o.warmup_secs);
        let warm_at = Instant::now() + warmup;
        let mut next_rss_sample = warm_at;
        // A process restarted after the warm-up (a fault killed it) is measured from its own
        // warm-up: its baseline is taken once it has lived that long.
        let sample_every = RSS_SAMPLE_EVERY.min(warmup / 4).max(Duration::from_secs(1));
        let mut first_seen: BTreeMap<String, (u32, Instant)> = BTreeMap::new();
        let workload = s.spawn(|| workload::run(wl, &stop_work));
        let mut rng = StdRng::seed_from_u64(o.seed ^ 0x5eed_0003);
        let deadline = Instant::now() + Duration::from_secs_f64(o.minutes * 60.0);
        let mut active: Vec<faults::Active> = Vec::new();
        let gap = |rng: &mut StdRng| {
            Duration::from_secs_f64(o.fault_gap_secs * rng.random_range(0.5..1.5))
        };
        let mut next = Instant::now() + gap(&mut rng);
        while Instant::now() < deadline {
            let now = Instant::now();
            if base.is_none() && now >= warm_at {
                let b = rss_now(c);
                h.log("warm", serde_json::json!({"rss_mib": rss_by_name(&b)}));
                base = Some(b);
                next_rss_sample = now + sample_every;
            } else if let Some(b) = base.as_mut().filter(|_| now >= next_rss_sample) {
                // The memory curve between the baseline and the end, for telling a leak
                // (steady growth) from a step (a new thread's arena, a cache filled once).
                let cur = rss_now(c);
                h.log(
                    "rss-sample",
                    serde_json::json!({"rss_mib": rss_by_name(&cur)}),
                );
                rebaseline(b, &cur, &mut first_seen, now, warmup, |k, v| {
                    h.log(
                        "rss-rebaseline",
                        serde_json::json!({"process": k, "pid": v.0, "rss_mib": v.1}),
                    );
                });
                next_rss_sample = now + sample_every;
            }
            let mut k = 0;
            while k < active.len() {
                if active[k].until <= now {
                    let a = active.remove(k);
                    match faults::end(c, h, &a) {
                        Ok(sp) => spans.extend(sp),
                        Err(e) => {
                            errors.push(format!("ending {}: {e}", a.kind));
                            h.log(
                                "fault-end-failed",
                                serde_json::json!({"kind": a.kind, "error": e}),
                            );
                        }
                    }
                } else {
                    k += 1;
                }
            }
            if o.phase == Phase::EmbeddedFull {
                // One fault only: the store's disk full for 3-15 s, then freed.
                if now >= next && active.is_empty() {
                    let hold = Duration::from_millis(rng.random_range(3_000..15_000));
                    match faults::start_disk_full(c, h, hold) {
                        Ok(a) => {
                            out.faults += 1;
                            active.push(a);
                        }
                        Err(e) => errors.push(format!("starting a fault: {e}")),
                    }
                    next = Instant::now() + gap(&mut rng);
                }
            } else if now >= next && active.len() < 2 {
                match faults::start_one(c, h, &mut rng, &active) {
                    Ok(Some(a)) => {
                        out.faults += 1;
                        active.push(a);
                        next = Instant::now() + gap(&mut rng);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        errors.push(format!("starting a fault: {e}"));
                        next = Instant::now() + gap(&mut rng);
                    }
                }
            }
            if workload.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for a in active.drain(..) {
            match faults::end(c, h, &a) {
                Ok(sp) => spans.extend(sp),
                Err(e) => errors.push(format!("ending {}: {e}", a.kind)),
            }
        }
        let faults_over_ms = h.ms();
        h.log("faults-over", serde_json::json!({}));
        stop_work.store(true, Ordering::Relaxed);
        let (steps, retried, werr) = workload
            .join()
            .map_err(|_| "the workload thread panicked".to_owned())?;
        out.steps = steps;
        if let Some(e) = werr {
            errors.push(format!("workload: {e}"));
        }
        h.log(
            "workload-over",
            serde_json::json!({"steps": steps, "retried": retried}),
        );
        // Convergence: counted from the end of the last fault.
        let conv = converge(c, h, Duration::from_secs(60));
        out.converge_secs =
            conv.map(|t| (h.ms_at(t).saturating_sub(faults_over_ms)) as f64 / 1000.0);
        // A few more probe rounds in the converged state, then stop.
        let more = lock(&rec.probes).len() + 2 * (o.pairs + 6);
        let t = Instant::now();
        while lock(&rec.probes).len() < more && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let end_rss = rss_now(c);
        let base = base.unwrap_or_else(|| {
            errors.push(format!(
                "the run was shorter than the warm-up ({} s): no memory baseline",
                o.warmup_secs
            ));
            end_rss.clone()
        });
        // The bound holds flowmesh's own processes; etcd and Open vSwitch are reported apart
        // (docs/operations.md says why).
        out.rss_growth = rss_growth(&base, &end_rss, |k| {
            !k.starts_with("etcd") && !k.starts_with(VSWITCHD)
        });
        out.etcd_rss_growth = rss_growth(&base, &end_rss, |k| k.starts_with("etcd"));
        out.vswitchd_rss_growth = rss_growth(&base, &end_rss, |k| k.starts_with(VSWITCHD));
        let g = &out.rss_growth;
        h.log("rss", serde_json::json!({"end_mib": rss_by_name(&end_rss), "growth_mib": g.mib, "growth_pct": g.pct * 100.0, "worst": g.worst}));
        stop_probes.store(true, Ordering::Relaxed);
        server_stop.store(true, Ordering::Relaxed);
        match prober.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("prober: {e}")),
            Err(_) => errors.push("the prober thread panicked".into()),
        }
        Ok(())
    })?;
    if o.phase == Phase::EmbeddedFull {
        // A restart loads what the store holds: everything acknowledged must be there.
        restart_alone(c, h, &mut errors);
    }
    let w = lock(&world);
    out.lost_writes = lost_writes(c, h, &w.current, &mut errors);
    let probes = std::mem::take(&mut *lock(&rec.probes));
    let stalls = std::mem::take(&mut *lock(&rec.stalls));
    let pauses = std::mem::take(&mut *lock(&rec.pauses));
    let sched = std::mem::take(&mut *lock(&rec.sched));
    let control = std::mem::take(&mut *lock(&rec.control));
    let machine = judge::Machine {
        pauses: &pauses,
        control: &control,
        sched: &sched,
    };
    out.verdict = judge::judge(
        &w.versions,
        &spans,
        &probes,
        &stalls,
        &machine,
        o.leader_ttl * 1000,
    );
    out.control_stalls = control.len();
    out.bench_pauses = pauses.len();
    errors.extend(lock(&c.nospace_errors).drain(..));
    out.errors = errors;
    Ok(out)
}

/// Restarts the one controller of the embedded phase (SIGTERM, start on the same data
/// directory) and waits until it holds every switch again.
fn restart_alone(c: &Cluster, h: &History, errors: &mut Vec<String>) {
    let t0 = Instant::now();
    {
        let mut r = lock(&c.replicas);
        r[0].stop(&c.lab);
        if let Err(e) = r[0].spawn(&c.lab) {
            errors.push(format!("restarting the controller: {e}"));
            return;
        }
    }
    while !c.synced_everywhere(0) {
        if t0.elapsed() > Duration::from_secs(60) {
            errors.push("the restarted controller did not sync every switch within 60 s".into());
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    h.log(
        "restarted",
        serde_json::json!({"secs": t0.elapsed().as_secs_f64()}),
    );
}

/// Probes every pair until all answer as the truth table says (60 s at most).
fn warm_up(h: &History, world: &Mutex<World>) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let (model, pods) = {
            let w = lock(world);
            (w.current.clone(), w.pods.clone())
        };
        let mut wrong = Vec::new();
        for (sk, s) in &pods {
            for (dk, d) in &pods {
                if sk == dk {
                    continue;
                }
                let want = model.allowed(sk, dk, truth::Proto::Tcp, workload::TCP_PORT);
                let got = crate::e2e::tcp_probe(
                    &s.netns,
                    std::net::SocketAddrV4::new(d.ip, workload::TCP_PORT),
                    b"warm",
                    Duration::from_millis(800),
                )
                .is_ok_and(|r| r.is_some_and(|b| !b.is_empty()));
                if want != Some(got) {
                    wrong.push(format!(
                        "{}/{} -> {}/{}: want {want:?}, got {got}",
                        sk.0, sk.1, dk.0, dk.1
                    ));
                }
            }
        }
        if wrong.is_empty() {
            h.log(
                "warm-up",
                serde_json::json!({"secs": t0.elapsed().as_secs_f64()}),
            );
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "warm-up: the network never matched the truth table: {wrong:?}"
            ));
        }
    }
}

/// Normalized flows and groups the switch of node `n` holds, and those the leader wants.
fn flows_of(c: &Cluster, n: usize) -> Result<(Vec<String>, Vec<String>), String> {
    let ovs = c.lab.node(n).map_err(|e| e.to_string())?.ovs();
    let mut have = ovs.dump_flows("br0").map_err(|e| e.to_string())?;
    have.extend(ovs.dump_groups("br0").map_err(|e| e.to_string())?);
    have.sort();
    let node = format!("node{n}");
    let l = c.leader().ok_or("no leader")?;
    let text = c.ctl_at(l, 10, &["dump-flows", &node])?;
    let mut want: Vec<String> = text
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    want.sort();
    Ok((have, want))
}

/// Waits until every switch holds exactly the desired flows; when it first did.
fn converge(c: &Cluster, h: &History, limit: Duration) -> Option<Instant> {
    let t0 = Instant::now();
    let mut last = String::new();
    loop {
        let mut all = true;
        let mut counts = Vec::new();
        for n in 1..=NODES {
            match flows_of(c, n) {
                Ok((have, want)) if have == want => counts.push(have.len()),
                Ok((have, want)) => {
                    all = false;
                    let extra: Vec<&String> =
                        have.iter().filter(|f| !want.contains(f)).take(5).collect();
                    let missing: Vec<&String> =
                        want.iter().filter(|f| !have.contains(f)).take(5).collect();
                    last = format!(
                        "node{n}: {} held, {} desired; extra {extra:?}; missing {missing:?}",
                        have.len(),
                        want.len()
                    );
                }
                Err(e) => {
                    all = false;
                    last = format!("node{n}: {e}");
                }
            }
        }
        if all {
            h.log(
                "converged",
                serde_json::json!({"secs": t0.elapsed().as_secs_f64(), "flows_and_groups": counts}),
            );
            return Some(Instant::now());
        }
        if t0.elapsed() > limit {
            h.log("not-converged", serde_json::json!({"last": last}));
            eprintln!("soak: flows did not converge: {last}");
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// (name → (PID, VmRSS MiB)) of the watched processes.
fn rss_now(c: &Cluster) -> BTreeMap<String, (u32, f64)> {
    c.watched_pids()
        .into_iter()
        .filter_map(|(n, pid)| Some((n, (pid, super::status_mib(pid, "VmRSS:")?))))
        .collect()
}

/// Gives every process in `cur` whose PID is not its baseline's (it was restarted) a new
/// baseline once it has been seen with that PID for `warmup`; `first_seen` remembers when
/// each name was first seen with its current PID. `log` hears of each new baseline.
fn rebaseline(
    base: &mut BTreeMap<String, (u32, f64)>,
    cur: &BTreeMap<String, (u32, f64)>,
    first_seen: &mut BTreeMap<String, (u32, Instant)>,
    now: Instant,
    warmup: Duration,
    mut log: impl FnMut(&str, &(u32, f64)),
) {
    for (k, v) in cur {
        if base.get(k).is_some_and(|b| b.0 == v.0) {
            continue;
        }
        match first_seen.get(k) {
            Some((pid, since)) if *pid == v.0 => {
                if now.duration_since(*since) >= warmup {
                    base.insert(k.clone(), *v);
                    log(k, v);
                }
            }
            _ => {
                first_seen.insert(k.clone(), (v.0, now));
            }
        }
    }
}

/// name → VmRSS MiB, for the history.
fn rss_by_name(m: &BTreeMap<String, (u32, f64)>) -> BTreeMap<String, f64> {
    m.iter().map(|(k, v)| (k.clone(), v.1)).collect()
}

/// The watched name prefix of the switches' Open vSwitch daemons.
const VSWITCHD: &str = "ovs-vswitchd";

/// How often the history records every watched process's RSS after the baseline.
const RSS_SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// RSS growth of a group of processes between their baselines and the end.
#[derive(Debug, Default, PartialEq)]
struct Growth {
    /// Largest growth, MiB.
    mib: f64,
    /// Largest relative growth (a fraction).
    pct: f64,
    /// The process that grew the most relative to its baseline (`name:before->after` in MiB;
    /// empty if none was alive at both points).
    worst: String,
}

impl Growth {
    fn worst_or_dash(&self) -> &str {
        if self.worst.is_empty() {
            "-"
        } else {
            &self.worst
        }
    }
}

/// The growth of the processes `which` names that were alive (same PID) at both points.
fn rss_growth(
    a: &BTreeMap<String, (u32, f64)>,
    b: &BTreeMap<String, (u32, f64)>,
    which: impl Fn(&str) -> bool,
) -> Growth {
    let mut g = Growth::default();
    let mut worst_rel = f64::MIN;
    for (k, (pid, before)) in a.iter().filter(|(k, _)| which(k)) {
        if let Some((pid2, after)) = b.get(k) {
            if pid == pid2 && *before > 0.0 {
                let rel = (after - before) / before;
                g.mib = g.mib.max(after - before);
                g.pct = g.pct.max(rel);
                if rel > worst_rel {
                    worst_rel = rel;
                    g.worst = format!("{k}:{before:.1}->{after:.1}");
                }
            }
        }
    }
    g
}

/// Reads the objects back and counts acknowledged writes that are not there.
fn lost_writes(c: &Cluster, h: &History, want: &Model, errors: &mut Vec<String>) -> usize {
    let Some(l) = c.leader().or_else(|| c.up_replicas(0).first().copied()) else {
        errors.push("no replica answers for the read-back".into());
        return 0;
    };
    let get = |args: &[&str]| -> Result<serde_json::Value, String> {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-o", "json"]);
        let text = c.ctl_at(l, 20, &all)?;
        serde_json::from_str(text.trim()).map_err(|e| format!("{args:?}: {e}"))
    };
    let mut lost = Vec::new();
    let managed = |ns: &str| CHURN_NS.contains(&ns) || FIXED_NS.contains(&ns);
    match get(&["get", "pods", "-A"]).or_else(|_| get(&["get", "pods"])) {
        Ok(v) => {
            let mut seen = BTreeMap::new();
            for p in v.as_array().map(Vec::as_slice).unwrap_or_default() {
                let ns = p["namespace"].as_str().unwrap_or_default().to_owned();
                let name = p["name"].as_str().unwrap_or_default().to_owned();
                let labels: Labels = p["labels"]
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                            .collect()
                    })
                    .unwrap_or_default();
                seen.insert((ns, name), labels);
            }
            for (k, p) in &want.pods {
                match seen.get(k) {
                    None => lost.push(format!("pod {}/{} missing", k.0, k.1)),
                    Some(l) if *l != p.labels => lost.push(format!(
                        "pod {}/{} labels {l:?}, wrote {:?}",
                        k.0, k.1, p.labels
                    )),
                    Some(_) => {}
                }
            }
            for k in seen.keys() {
                if managed(&k.0) && !want.pods.contains_key(k) {
                    lost.push(format!("pod {}/{} deleted but present", k.0, k.1));
                }
            }
        }
        Err(e) => errors.push(format!("read back pods: {e}")),
    }
    match get(&["get", "networkpolicies", "-A"]).or_else(|_| get(&["get", "networkpolicies"])) {
        Ok(v) => {
            let mut seen = BTreeMap::new();
            for p in v.as_array().map(Vec::as_slice).unwrap_or_default() {
                let ns = p["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                seen.insert((ns, name), Policy::from_k8s_spec(&p["spec"]));
            }
            for (k, pol) in &want.policies {
                match seen.get(k) {
                    None => lost.push(format!("policy {}/{} missing", k.0, k.1)),
                    Some(got) if got.as_ref() != Some(pol) => {
                        lost.push(format!("policy {}/{}: {got:?}, wrote {pol:?}", k.0, k.1))
                    }
                    Some(_) => {}
                }
            }
            for k in seen.keys() {
                if !want.policies.contains_key(k) {
                    lost.push(format!("policy {}/{} deleted but present", k.0, k.1));
                }
            }
        }
        Err(e) => errors.push(format!("read back policies: {e}")),
    }
    match get(&["get", "netnamespaces"]) {
        Ok(v) => {
            let mut netids: BTreeMap<String, u64> = BTreeMap::new();
            for n in v.as_array().map(Vec::as_slice).unwrap_or_default() {
                let name = n["name"].as_str().unwrap_or_default().to_owned();
                let labels: Labels = n["labels"]
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(w) = want.namespaces.get(&name) {
                    if *w != labels {
                        lost.push(format!("namespace {name} labels {labels:?}, wrote {w:?}"));
                    }
                }
                netids.insert(name, n["netid"].as_u64().unwrap_or(u64::MAX));
            }
            for ns in want.namespaces.keys() {
                if !netids.contains_key(ns) {
                    lost.push(format!("namespace {ns} missing"));
                }
            }
            if want.mode == Mode::Multitenant {
                let g = |ns: &str| want.groups.get(ns).copied();
                for a in CHURN_NS {
                    for b in CHURN_NS {
                        let same_want = match (g(a), g(b)) {
                            (Some(x), Some(y)) => x == y,
                            _ => a == b,
                        };
                        let same_have = netids.get(a) == netids.get(b);
                        if a < b && same_want != same_have {
                            lost.push(format!(
                                "namespaces {a} and {b}: NETIDs {:?}/{:?}, groups {:?}/{:?}",
                                netids.get(a),
                                netids.get(b),
                                g(a),
                                g(b)
                            ));
                        }
                    }
                    if (g(a) == Some(0)) != (netids.get(a) == Some(&0)) {
                        lost.push(format!(
                            "namespace {a}: NETID {:?}, group {:?}",
                            netids.get(a),
                            g(a)
                        ));
                    }
                }
            }
        }
        Err(e) => errors.push(format!("read back netnamespaces: {e}")),
    }
    // The writes made during etcd's NOSPACE alarm, once acknowledged.
    let nospace: Vec<(String, String, bool)> = lock(&c.nospace_writes).clone();
    if nospace.iter().any(|w| w.2) {
        match get(&["get", "netnamespaces"]) {
            Ok(v) => {
                for (ns, _, acked) in nospace.iter().filter(|w| w.2) {
                    let seq = ns.rsplit('-').next().unwrap_or_default();
                    let label = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|n| n["name"] == ns.as_str())
                        .map(|n| n["labels"]["soak-nospace"].clone());
                    match label {
                        None => {
                            lost.push(format!("namespace {ns} (acknowledged: {acked}) missing"))
                        }
                        Some(l) if l != seq => lost.push(format!(
                            "namespace {ns}: label soak-nospace={l}, wrote {seq}"
                        )),
                        Some(_) => {}
                    }
                }
            }
            Err(e) => errors.push(format!("read back namespaces: {e}")),
        }
    }
    h.log("read-back", serde_json::json!({"lost": lost}));
    lost.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(v: &[(&str, u32, f64)]) -> BTreeMap<String, (u32, f64)> {
        v.iter()
            .map(|(k, pid, mib)| ((*k).to_owned(), (*pid, *mib)))
            .collect()
    }

    #[test]
    fn rss_growth_names_the_worst_process_and_skips_restarted_and_unwatched_ones() {
        let base = at(&[
            ("controller-r0", 10, 40.0),
            ("shim-node1", 11, 14.0),
            ("shim-node2", 12, 10.0),
            ("ovs-vswitchd-node1", 13, 24.0),
        ]);
        let end = at(&[
            ("controller-r0", 10, 44.0),
            ("shim-node1", 11, 15.0),
            // Restarted (another PID): its figure is not growth.
            ("shim-node2", 99, 30.0),
            ("ovs-vswitchd-node1", 13, 27.0),
        ]);
        let g = rss_growth(&base, &end, |k| !k.starts_with(VSWITCHD));
        assert!((g.mib - 4.0).abs() < 1e-9, "{g:?}");
        assert!((g.pct - 0.1).abs() < 1e-9, "{g:?}");
        assert_eq!(g.worst, "controller-r0:40.0->44.0");
        let g = rss_growth(&base, &end, |k| k.starts_with(VSWITCHD));
        assert!((g.mib - 3.0).abs() < 1e-9 && (g.pct - 0.125).abs() < 1e-9);
        assert_eq!(g.worst, "ovs-vswitchd-node1:24.0->27.0");
        let g = rss_growth(&base, &end, |k| k.starts_with("etcd"));
        assert_eq!(g, Growth::default());
        assert_eq!(g.worst_or_dash(), "-");
    }

    #[test]
    fn a_restarted_process_gets_a_baseline_one_warm_up_after_it_was_first_seen() {
        let t0 = Instant::now();
        let warmup = Duration::from_secs(60);
        let mut base = at(&[("shim-node1", 11, 14.0), ("controller-r0", 10, 40.0)]);
        let mut seen = BTreeMap::new();
        let mut logged = Vec::new();
        // (seconds since t0, the shim's PID and RSS then, the shim's baseline after the step)
        let steps = [
            // Restarted (PID 21): first seen at 15 s, not yet a baseline.
            (15, 21, 9.0, (11, 14.0)),
            (45, 21, 12.0, (11, 14.0)),
            // Restarted again before its warm-up was over (PID 22): the clock starts again.
            (70, 22, 9.5, (11, 14.0)),
            (120, 22, 13.0, (11, 14.0)),
            // One warm-up after PID 22 was first seen: its own baseline.
            (130, 22, 13.5, (22, 13.5)),
        ];
        for (secs, pid, mib, want) in steps {
            let cur = at(&[("shim-node1", pid, mib), ("controller-r0", 10, 42.0)]);
            rebaseline(
                &mut base,
                &cur,
                &mut seen,
                t0 + Duration::from_secs(secs),
                warmup,
                |k, v| logged.push(format!("{k}:{}:{}", v.0, v.1)),
            );
            assert_eq!(base["shim-node1"], want, "after {secs} s");
        }
        // The unrestarted controller keeps the run's baseline.
        assert_eq!(base["controller-r0"], (10, 40.0));
        assert_eq!(logged, vec!["shim-node1:22:13.5".to_owned()]);
        let g = rss_growth(&base, &at(&[("shim-node1", 22, 14.0)]), |_| true);
        assert!((g.pct - 0.5 / 13.5).abs() < 1e-9, "{g:?}");
        assert_eq!(g.worst, "shim-node1:13.5->14.0");
    }
}
