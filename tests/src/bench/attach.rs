//! `flowmesh-bench attach`: pod attach → flows acknowledged (barrier reply) latency with many
//! switches connected. Starts the real `flowmesh-controller` binary (found beside this one)
//! and a dummy-datapath OVS sandbox with one bridge per node, attaches pods one after the
//! other through the admin API (the call returns only after the pod's switch acknowledged its
//! flows) and reports p50/p99. The reference, measured in the same run, is a read-only API
//! call (ListNetNamespaces) on the same connection: the RPC cost without any switch work.
//!
//! It also prints the p99 of an `fdatasync` of 4 KiB in the directory that holds the
//! controller's store (what one durable commit costs this disk at least), and, with
//! `--concurrency 1,2,4,8,16` (the default), attaches further pods from that many callers at
//! once: the store writer commits the changes that arrived during one commit together, so the
//! mean store time per attach falls as the changes per commit (the batch) grow.

use super::{arg_value, median};
use crate::{BridgeSpec, OvsSandbox};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(super) struct Ctl(pub(super) Child);

impl Drop for Ctl {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(super) fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

pub(super) fn controller_bin() -> Result<PathBuf, String> {
    // FLOWMESH_CONTROLLER_BIN_DIR, else beside this executable, else one directory up (a test
    // binary in target/*/deps).
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("no directory of flowmesh-bench")?;
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("FLOWMESH_CONTROLLER_BIN_DIR") {
        candidates.push(PathBuf::from(d).join("flowmesh-controller"));
    }
    candidates.push(dir.join("flowmesh-controller"));
    if let Some(up) = dir.parent() {
        candidates.push(up.join("flowmesh-controller"));
    }
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .ok_or_else(|| {
            format!(
            "{} not found: build it first (cargo build --release -p controller -p flowmesh-tests)",
            dir.join("flowmesh-controller").display()
        )
        })
}

pub(super) fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// A running controller with a sandbox of node bridges, every node registered and every switch
/// synced; shared by `attach` and `churn`.
pub(super) struct Cluster {
    /// The sandboxes (one ovs-vswitchd each); bridge `n{i}` is in `sbx[i / per_sandbox]`.
    pub(super) sbx: Vec<OvsSandbox>,
    per_sandbox: u32,
    pub(super) admin: AdminClient<tonic::transport::Channel>,
    pub(super) grpc: SocketAddr,
    /// The controller's OpenFlow listener.
    pub(super) openflow: SocketAddr,
    pub(super) metrics: SocketAddr,
    pub(super) controller_pid: u32,
    pub(super) sandbox_s: f64,
    pub(super) setup_s: f64,
    // Fields drop in order: the switches go first, then the controller, then its data.
    _ctl: Ctl,
    _data: DataDir,
}

/// A directory removed when dropped.
struct DataDir(PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Cluster {
    /// Starts the controller (log level from FLOWMESH_BENCH_LOG, default warn) and `switches`
    /// bridges `n0…` with `per_node` pod ports `p0…` each (ofports 3…) spread over
    /// `vswitchds` OVS instances (1: all bridges in one ovs-vswitchd; `switches`: one
    /// ovs-vswitchd per node, as deployed), registers the nodes and 10 namespaces
    /// `ns0…ns9`, and waits until every switch is connected and synced.
    pub(super) async fn start(
        name: &str,
        switches: u32,
        per_node: u32,
        vswitchds: u32,
    ) -> Result<Cluster, String> {
        if vswitchds == 0 || vswitchds > switches {
            return Err(format!(
                "--vswitchds must be between 1 and the number of switches ({switches})"
            ));
        }
        let data =
            std::env::temp_dir().join(format!("flowmesh-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let grpc = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let of = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let log_path = data.with_extension("log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        println!("controller log: {}", log_path.display());
        let child = Command::new(controller_bin()?)
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--grpc-listen",
                &grpc.to_string(),
                "--openflow-listen",
                &of.to_string(),
            ])
            .args(super::per_peer_flag(switches))
            .args(["--metrics-listen", &metrics.to_string(), "--log"])
            .arg(std::env::var("FLOWMESH_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting flowmesh-controller: {e}"))?;
        let controller_pid = child.id();
        let ctl = Ctl(child);
        super::wait_listening(grpc, "flowmesh-controller").await?;

        let t0 = Instant::now();
        let per_sandbox = switches.div_ceil(vswitchds);
        let mut sbx = Vec::new();
        for first in (0..switches).step_by(per_sandbox as usize) {
            let last = (first + per_sandbox).min(switches);
            sbx.push(
                OvsSandbox::builder()
                    .bridges((first..last).map(|i| {
                        let mut b = BridgeSpec::new(format!("n{i}"), 0x1000 + u64::from(i));
                        for p in 0..per_node {
                            b = b.pod(format!("p{p}"), 3 + p);
                        }
                        b
                    }))
                    .controller(format!("tcp:{of}"))
                    .controller_max_backoff_ms(1000)
                    .start()
                    .map_err(|e| e.to_string())?,
            );
        }
        let sandbox_s = t0.elapsed().as_secs_f64();

        let mut admin = AdminClient::connect(format!("http://{grpc}"))
            .await
            .map_err(|e| e.to_string())?;
        super::add_bench_nodes(&mut admin, switches).await?;
        for ns in 0..10 {
            admin
                .create_namespace(pa::NameRequest {
                    name: format!("ns{ns}"),
                })
                .await
                .map_err(|e| format!("create namespace: {}", e.message()))?;
        }
        // Every switch connected and in sync before measuring.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sw = admin
                .list_switches(pa::Empty {})
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .items;
            if sw
                .iter()
                .filter(|s| s.connected && s.synced && !s.unknown)
                .count()
                == switches as usize
            {
                break;
            }
            if Instant::now() > deadline {
                return Err("switches did not all connect and sync".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let setup_s = t0.elapsed().as_secs_f64();
        Ok(Cluster {
            sbx,
            per_sandbox,
            admin,
            grpc,
            openflow: of,
            metrics,
            controller_pid,
            sandbox_s,
            setup_s,
            _ctl: ctl,
            _data: DataDir(data),
        })
    }
}

impl Cluster {
    /// The sandbox that holds bridge `n{i}`.
    pub(super) fn sandbox_of(&self, i: u32) -> Option<&OvsSandbox> {
        self.sbx.get((i / self.per_sandbox.max(1)) as usize)
    }

    /// The pids of every ovs-vswitchd.
    pub(super) fn vswitchd_pids(&self) -> Vec<u32> {
        self.sbx.iter().filter_map(|s| s.vswitchd_pid()).collect()
    }
}

/// The request that attaches pod `p` of node `i` (port `p{p}`, namespace `ns{(i+p)%10}`).
pub(super) fn attach_request(i: u32, p: u32) -> pa::AttachPodRequest {
    pa::AttachPodRequest {
        node: format!("n{i}"),
        namespace: format!("ns{}", (i + p) % 10),
        name: format!("pod-{i}-{p}"),
        port_name: OvsSandbox::port_name(&format!("n{i}"), &format!("p{p}")),
        ofport: 3 + p,
        ..Default::default()
    }
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let switches: u32 = arg_value(args, "--switches", 100)?;
    let per_node: u32 = arg_value(args, "--pods-per-node", 5)?;
    let vswitchds: u32 = arg_value(args, "--vswitchds", switches)?;
    if switches == 0 || per_node == 0 {
        return Err("--switches and --pods-per-node must be at least 1".into());
    }
    let concurrency: String = arg_value(args, "--concurrency", "1,2,4,8,16".to_string())?;
    let concurrency = concurrency
        .split(',')
        .filter(|c| !c.is_empty())
        .map(|c| match c.trim().parse::<u32>() {
            Ok(k) if (1..=256).contains(&k) => Ok(k),
            _ => Err(format!(
                "--concurrency: {c:?} is not a number of callers from 1 to 256"
            )),
        })
        .collect::<Result<Vec<u32>, String>>()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run(switches, per_node, vswitchds, &concurrency))
}

/// The p50 and p99 (ms) of `fdatasync` after a 4 KiB write, 200 times, in `dir`.
fn fsync_probe(dir: &std::path::Path) -> Result<(f64, f64), String> {
    use std::io::Write;
    let path = dir.join(format!("flowmesh-bench-fsync-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).map_err(|e| format!("fsync probe: {e}"))?;
    let block = [0x5au8; 4096];
    let mut t = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        f.write_all(&block)
            .and_then(|()| f.sync_data())
            .map_err(|e| format!("fsync probe: {e}"))?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let _ = std::fs::remove_file(&path);
    Ok((percentile(&t, 0.5), percentile(&t, 0.99)))
}

/// A counter of the controller's `/metrics` (0 when absent: a build without it).
pub(super) fn counter(addr: std::net::SocketAddr, name: &str) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0.0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Attach `count` more pods per round from `k` callers at once (pods `p{first}…` of every
/// node); per round: attaches, store commits, changes per commit and store time per attach.
async fn concurrent_rounds(
    c: &Cluster,
    switches: u32,
    mut first: u32,
    rounds: &[u32],
) -> Result<String, String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let mut keys = String::new();
    println!("concurrent attaches (store: durable commits; batch: attaches per commit):");
    for &k in rounds {
        let per_round = (switches * 2).max(200);
        let next = Arc::new(AtomicU32::new(0));
        let before = super::scrape_phases(c.metrics);
        let jobs0 = counter(c.metrics, "flowmesh_store_jobs_total");
        let t = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..k {
            let mut admin = c.admin.clone();
            let next = next.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= per_round {
                        return Ok::<_, String>(lat);
                    }
                    let t = Instant::now();
                    admin
                        .attach_pod(attach_request(n % switches, first + n / switches))
                        .await
                        .map_err(|e| format!("attach: {}", e.message()))?;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }));
        }
        let mut lat = Vec::new();
        for task in tasks {
            lat.extend(task.await.map_err(|e| e.to_string())??);
        }
        let wall = t.elapsed().as_secs_f64();
        first += per_round.div_ceil(switches);
        let after = super::scrape_phases(c.metrics);
        let jobs = counter(c.metrics, "flowmesh_store_jobs_total") - jobs0;
        let (s0, c0) = before.get("store").copied().unwrap_or_default();
        let (s1, c1) = after.get("store").copied().unwrap_or_default();
        let commits = c1.saturating_sub(c0);
        let n = lat.len() as f64;
        let store_per_attach = (s1 - s0) * 1e3 / n.max(1.0);
        let batch = if jobs > 0.0 && commits > 0 {
            format!("{:.2}", jobs / commits as f64)
        } else {
            "n/a".to_string()
        };
        println!(
            "  {k:>3} callers: {} attaches in {wall:.2}s ({:.0}/s), p50 {:.3} ms, p99 {:.3} ms; {commits} store commits, batch {batch}, store {store_per_attach:.3} ms per attach",
            lat.len(),
            n / wall.max(1e-9),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
        );
        keys.push_str(&format!(
            " c{k}_batch={batch} c{k}_store_ms_per_attach={store_per_attach:.3}"
        ));
    }
    Ok(keys)
}

async fn run(switches: u32, per_node: u32, vswitchds: u32, rounds: &[u32]) -> Result<(), String> {
    let (fsync_p50, fsync_p99) = fsync_probe(&std::env::temp_dir())?;
    let mut c = Cluster::start("attach", switches, per_node, vswitchds).await?;
    let mut noop = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        c.admin
            .get_cluster_network(pa::Empty {})
            .await
            .map_err(|e| e.to_string())?;
        noop.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let before = super::scrape_phases(c.metrics);
    let mut lat = Vec::new();
    for p in 0..per_node {
        for i in 0..switches {
            let t = Instant::now();
            c.admin
                .attach_pod(attach_request(i, p))
                .await
                .map_err(|e| format!("attach: {}", e.message()))?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let after = super::scrape_phases(c.metrics);
    // The last pod's flows really are on its switch.
    let last = format!("n{}", switches - 1);
    let flows = c
        .sandbox_of(switches - 1)
        .ok_or("no sandbox of the last node")?
        .dump_flows(&last)
        .map_err(|e| e.to_string())?;
    let pods_flows = flows.iter().filter(|l| l.contains("cookie=0x302")).count();
    if pods_flows == 0 {
        return Err(format!("no pod flows on {last}"));
    }
    let (p50, p99, max) = (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0),
    );
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    let noop50 = median(&noop);
    println!(
        "sandbox: {switches} bridges in {} ovs-vswitchd in {:.2}s; nodes registered and all switches synced after {:.2}s",
        c.sbx.len(), c.sandbox_s, c.setup_s
    );
    println!("reference: read-only RPC p50 {noop50:.3} ms");
    println!(
        "disk: fdatasync of 4 KiB in {}: p50 {fsync_p50:.3} ms, p99 {fsync_p99:.3} ms (before the cluster started)",
        std::env::temp_dir().display()
    );
    println!("attach -> barrier acknowledged, {} pods: p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms, mean {mean:.3} ms", lat.len());
    let n = lat.len() as f64;
    let mut shares = String::new();
    println!("where an attach's time goes (controller metrics, mean per attach; store runs beside compute+diff+switch):");
    for phase in ["compute", "store", "diff", "switch"] {
        let (s0, c0) = before.get(phase).copied().unwrap_or_default();
        let (s1, c1) = after.get(phase).copied().unwrap_or_default();
        let per_attach = (s1 - s0) * 1e3 / n;
        let share = per_attach / mean.max(1e-9);
        println!(
            "  {phase:<8} {per_attach:.3} ms ({:.0}% of the mean attach), {} occurrences",
            share * 100.0,
            c1.saturating_sub(c0)
        );
        shares.push_str(&format!(
            " {phase}_ms={per_attach:.3} {phase}_share={share:.2}"
        ));
    }
    let concurrent = concurrent_rounds(&c, switches, per_node, rounds).await?;
    println!(
        "switches={switches} vswitchds={} pods={} attach_p50_ms={p50:.3} attach_max_ms={max:.3} noop_rpc_p50_ms={noop50:.3} ratio_p50_vs_noop={:.2}{shares} fsync_p99_ms={fsync_p99:.3}{concurrent} target_p99_ms=1.5 meets_target={} attach_p99_ms={p99:.3}",
        c.sbx.len(),
        lat.len(),
        p50 / noop50.max(1e-9),
        p99 < 1.5
    );
    Ok(())
}
