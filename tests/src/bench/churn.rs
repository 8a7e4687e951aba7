//! `flowmesh-bench churn`: sustained pod attach + detach across many switches. Starts the
//! real `flowmesh-controller` and a sandbox of node bridges (as `attach` does), then offers an
//! open-loop stream of operations: pod slot `k` (node `k % switches`, port `p{k / switches}`)
//! is attached, then detached, then attached again, and so on; operation `n` is due at
//! `n / rate` seconds and goes to slot `n % slots`, whether or not earlier ones finished (an
//! operation waits only for the previous operation of its own slot). Latency is measured
//! from the moment the generator issued the operation (including any wait for the previous
//! operation of its slot); how late the generator issued operations against their due time
//! (its timer granularity and CPU starvation) is reported beside it as `lag`.
//!
//! The rate is searched honestly: steps of `--step-secs` at rising offered rates (×1.25 each)
//! until a step's p99 reaches the target (10 ms) or an operation fails; the highest rate
//! whose whole step kept p99 under the target is then run for `--secs` (60) and reported,
//! with the controller's CPU time from /proc/PID/stat (per operation and as cores).

use super::attach::{attach_request, percentile, Cluster};
use super::{arg_value, cpu_secs};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use tonic::transport::Channel;

/// Operations allowed in flight before a step counts as overloaded.
const MAX_IN_FLIGHT: usize = 5_000;

struct Opts {
    switches: u32,
    per_node: u32,
    secs: f64,
    step_secs: f64,
    start_rate: f64,
    max_rate: f64,
    target_ms: f64,
    channels: usize,
    vswitchds: u32,
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let o = Opts {
        switches: arg_value(args, "--switches", 100)?,
        per_node: arg_value(args, "--pods-per-node", 4)?,
        secs: arg_value(args, "--secs", 60.0)?,
        step_secs: arg_value(args, "--step-secs", 5.0)?,
        start_rate: arg_value(args, "--start-rate", 200.0)?,
        max_rate: arg_value(args, "--max-rate", 20_000.0)?,
        target_ms: arg_value(args, "--target-p99-ms", 10.0)?,
        channels: arg_value(args, "--channels", 4)?,
        vswitchds: 0,
    };
    let o = Opts {
        vswitchds: arg_value(args, "--vswitchds", o.switches)?,
        ..o
    };
    if o.switches == 0 || o.per_node == 0 || o.channels == 0 {
        return Err("--switches, --pods-per-node and --channels must be at least 1".into());
    }
    let positive = [o.secs, o.step_secs, o.start_rate, o.max_rate, o.target_ms];
    if positive.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return Err(
            "--secs, --step-secs, --start-rate, --max-rate and --target-p99-ms must be positive"
                .into(),
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run(o))
}

/// What one run at an offered rate measured.
struct Step {
    rate: f64,
    issued: usize,
    failed: usize,
    first_error: Option<String>,
    overloaded: bool,
    lat_ms: Vec<f64>,
    lag_ms: Vec<f64>,
    wall: f64,
    controller_cpu: f64,
    vswitchd_cpu: f64,
}

impl Step {
    fn p(&self, q: f64) -> f64 {
        percentile(&self.lat_ms, q)
    }
    fn passed(&self, target_ms: f64) -> bool {
        self.failed == 0 && !self.overloaded && !self.lat_ms.is_empty() && self.p(0.99) < target_ms
    }
    fn line(&self) -> String {
        format!(
            "offered {:.0} ops/s for {:.1}s: {} ops, {} failed{}, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, generator lag p99 {:.3} ms, controller CPU {:.2} cores",
            self.rate,
            self.wall,
            self.issued,
            self.failed,
            if self.overloaded { ", overloaded" } else { "" },
            self.p(0.5),
            self.p(0.99),
            self.p(1.0),
            percentile(&self.lag_ms, 0.99),
            self.controller_cpu / self.wall.max(1e-9),
        )
    }
}

/// A pod slot: whether its pod is attached; locked for the length of one operation.
type Slot = Arc<Mutex<bool>>;

async fn run(o: Opts) -> Result<(), String> {
    let c = Cluster::start("churn", o.switches, o.per_node, o.vswitchds).await?;
    let mut clients = Vec::new();
    for _ in 0..o.channels {
        clients.push(
            AdminClient::connect(format!("http://{}", c.grpc))
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let slots: Vec<Slot> = (0..o.switches * o.per_node)
        .map(|_| Arc::new(Mutex::new(false)))
        .collect();
    let vswitchd = c.vswitchd_pids();
    println!(
        "sandbox: {} bridges in {} ovs-vswitchd in {:.2}s; all switches synced after {:.2}s; {} pod slots",
        o.switches,
        c.sbx.len(),
        c.sandbox_s,
        c.setup_s,
        slots.len()
    );

    // Warm-up (not judged): a second at the starting rate.
    let warm = step(&o, &c, &clients, &slots, &vswitchd, o.start_rate, 1.0).await;
    println!("warm-up: {}", warm.line());

    let mut best: Option<f64> = None;
    let mut failed_at: Option<f64> = None;
    let mut rate = o.start_rate;
    let mut first_p99 = None;
    while rate <= o.max_rate {
        let s = step(&o, &c, &clients, &slots, &vswitchd, rate, o.step_secs).await;
        println!("step: {}", s.line());
        first_p99.get_or_insert(s.p(0.99));
        if let Some(e) = &s.first_error {
            println!("  first error: {e}");
        }
        if !s.passed(o.target_ms) {
            failed_at = Some(rate);
            break;
        }
        best = Some(rate);
        rate *= 1.25;
    }
    // One refinement between the last passing rate and the first failing one.
    if let (Some(b), Some(f)) = (best, failed_at) {
        let mid = (b + f) / 2.0;
        let s = step(&o, &c, &clients, &slots, &vswitchd, mid, o.step_secs).await;
        println!("refine: {}", s.line());
        if s.passed(o.target_ms) {
            best = Some(mid);
        }
    }
    let Some(mut rate) = best else {
        // Not even the first rate held: say so, with that step's figures.
        let p99 = first_p99.unwrap_or(f64::NAN);
        println!(
            "not even {:.0} ops/s kept p99 under {} ms",
            o.start_rate, o.target_ms
        );
        println!(
            "switches={} vswitchds={} slots={} held=false target_ops_per_s=2000 meets_target=false churn_ops_per_s=0 churn_p99_ms={p99:.3}",
            o.switches,
            c.sbx.len(),
            slots.len(),
        );
        return Ok(());
    };
    // The final run at the rate found; while it does not hold for the whole run (a single
    // stall of a loaded machine in a short step can let a rate pass that a long run does not
    // hold), again at 0.8× the rate, down to the starting rate: the rate reported is one a
    // whole final run held, or `held=false` at the last one tried.
    let mut grouping = Grouping::read(c.metrics);
    let mut final_run = step(&o, &c, &clients, &slots, &vswitchd, rate, o.secs).await;
    println!("final: {}", final_run.line());
    let mut factor = 1.0;
    while !final_run.passed(o.target_ms) && rate * 0.8 >= o.start_rate {
        rate *= 0.8;
        factor *= 0.8;
        grouping = Grouping::read(c.metrics);
        final_run = step(&o, &c, &clients, &slots, &vswitchd, rate, o.secs).await;
        println!("final at {factor:.2}x: {}", final_run.line());
    }
    let (per_bundle, per_commit) = grouping.since(c.metrics);
    let f = &final_run;
    let done = f.lat_ms.len().max(1) as f64;
    let (bundles_op, mods_op, commits_op) = grouping.per_op(c.metrics, done);
    let cpu_ms_per_op = f.controller_cpu * 1e3 / done;
    let cores = f.controller_cpu / f.wall.max(1e-9);
    let ovs_cores = f.vswitchd_cpu / f.wall.max(1e-9);
    let ovs_ms_per_op = f.vswitchd_cpu * 1e3 / done;
    let held = f.passed(o.target_ms);
    println!(
        "controller CPU: {:.2} s over {:.1} s = {cores:.2} cores, {cpu_ms_per_op:.3} ms per operation; ovs-vswitchd {ovs_cores:.2} cores, {ovs_ms_per_op:.3} ms per operation",
        f.controller_cpu, f.wall
    );
    println!(
        "grouping (final run): {per_bundle} operations per bundle, {per_commit} per durable store commit"
    );
    println!(
        "per operation (final run): {bundles_op:.2} bundles, {mods_op:.2} flow/group mods, {commits_op:.2} durable store commits"
    );
    println!(
        "switches={} vswitchds={} slots={} secs={:.0} ops={} failed={} churn_p50_ms={:.3} controller_cpu_cores={cores:.2} controller_cpu_ms_per_op={cpu_ms_per_op:.3} vswitchd_cpu_cores={ovs_cores:.2} vswitchd_cpu_ms_per_op={ovs_ms_per_op:.3} ops_per_bundle={per_bundle} ops_per_store_commit={per_commit} held={held} target_ops_per_s=2000 meets_target={} churn_ops_per_s={:.0} churn_p99_ms={:.3}",
        o.switches,
        c.sbx.len(),
        slots.len(),
        f.wall,
        f.issued,
        f.failed,
        f.p(0.5),
        held && rate >= 2000.0,
        rate,
        f.p(0.99),
    );
    Ok(())
}

/// Offer `rate` operations per second for `secs`, then wait for the last to finish.
async fn step(
    o: &Opts,
    c: &Cluster,
    clients: &[AdminClient<Channel>],
    slots: &[Slot],
    vswitchd: &[u32],
    rate: f64,
    secs: f64,
) -> Step {
    let n_ops = (rate * secs).round().max(1.0) as usize;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let cpu0 = cpu_secs(c.controller_pid).unwrap_or(0.0);
    let ovs_cpu = || vswitchd.iter().filter_map(|p| cpu_secs(*p)).sum::<f64>();
    let ovs0 = ovs_cpu();
    let t0 = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(n_ops);
    let mut overloaded = false;
    let mut lag_ms = Vec::with_capacity(n_ops);
    for n in 0..n_ops {
        let due = t0 + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(due).await;
        if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            overloaded = true;
            break;
        }
        let k = n % slots.len();
        let slot = slots[k].clone();
        let (i, p) = (k as u32 % o.switches, k as u32 / o.switches);
        let mut client = clients[n % clients.len()].clone();
        let flight = in_flight.clone();
        flight.fetch_add(1, Ordering::Relaxed);
        let issued = Instant::now();
        lag_ms.push(
            issued
                .saturating_duration_since(due.into_std())
                .as_secs_f64()
                * 1e3,
        );
        tasks.push(tokio::spawn(async move {
            let mut attached = slot.lock().await;
            let r = if *attached {
                let req = attach_request(i, p);
                client
                    .detach_pod(pa::PodRef {
                        namespace: req.namespace,
                        name: req.name,
                    })
                    .await
                    .map(|_| ())
            } else {
                client.attach_pod(attach_request(i, p)).await.map(|_| ())
            };
            let done = Instant::now();
            if r.is_ok() {
                *attached = !*attached;
            }
            drop(attached);
            flight.fetch_sub(1, Ordering::Relaxed);
            let lat = done.saturating_duration_since(issued);
            (
                lat.as_secs_f64() * 1e3,
                r.err().map(|e| e.message().to_owned()),
            )
        }));
    }
    let issued = tasks.len();
    let mut lat_ms = Vec::with_capacity(issued);
    let mut failed = 0;
    let mut first_error = None;
    for t in tasks {
        match t.await {
            Ok((ms, None)) => lat_ms.push(ms),
            Ok((_, Some(e))) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    Step {
        rate,
        issued,
        failed,
        first_error,
        overloaded,
        lat_ms,
        lag_ms,
        wall,
        controller_cpu: cpu_secs(c.controller_pid).unwrap_or(0.0) - cpu0,
        vswitchd_cpu: ovs_cpu() - ovs0,
    }
}

/// The controller's grouping counters: bundles and the updates they answered, store commits
/// and the changes they made durable.
struct Grouping {
    bundles: f64,
    updates: f64,
    commits: f64,
    jobs: f64,
    mods: f64,
}

impl Grouping {
    fn read(addr: std::net::SocketAddr) -> Grouping {
        let phases = super::scrape_phases(addr);
        let count = |p: &str| phases.get(p).map_or(0.0, |(_, c)| *c as f64);
        Grouping {
            bundles: count("switch"),
            updates: super::attach::counter(addr, "flowmesh_switch_bundle_updates_total"),
            commits: count("store"),
            jobs: super::attach::counter(addr, "flowmesh_store_jobs_total"),
            mods: super::attach::counter(addr, "flowmesh_flow_mods_sent_total"),
        }
    }

    /// Per operation since `self`: bundles, flow and group mods, durable store commits.
    fn per_op(&self, addr: std::net::SocketAddr, ops: f64) -> (f64, f64, f64) {
        let now = Grouping::read(addr);
        let ops = ops.max(1.0);
        (
            (now.bundles - self.bundles) / ops,
            (now.mods - self.mods) / ops,
            (now.commits - self.commits) / ops,
        )
    }

    /// Updates per bundle and changes per store commit since `self` ("n/a" from a build
    /// without the counters).
    fn since(&self, addr: std::net::SocketAddr) -> (String, String) {
        let now = Grouping::read(addr);
        let ratio = |n: f64, d: f64| {
            if n > 0.0 && d > 0.0 {
                format!("{:.2}", n / d)
            } else {
                "n/a".to_string()
            }
        };
        (
            ratio(now.updates - self.updates, now.bundles - self.bundles),
            ratio(now.jobs - self.jobs, now.commits - self.commits),
        )
    }
}
