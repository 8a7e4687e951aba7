//! `flowmesh-bench scale`: many real Open vSwitch bridges (default 1,000) on one
//! `flowmesh-controller`, each bridge a registered node with pods, so each holds a node's full
//! flow table (the tunnel mesh to every other node plus its pods).
//!
//! The bridges are spread over several dummy-datapath ovs-vswitchd processes (`--vswitchds`,
//! default one per 250 bridges: one vswitchd reconfigures 1,000 bridges in tens of seconds,
//! 250 in about two). Every vswitchd's bridges are created in one OVSDB transaction, sent
//! straight to its ovsdb-server (ovs-vsctl's own cost grows with the square of the commands
//! of one call).
//!
//! Phases:
//! 1. set-up: nodes and namespaces registered through the admin API, the bridges pointed at
//!    the controller, pods attached (an attach needs its switch); then the controller is
//!    stopped, the bridges' controllers cleared and the vswitchds restarted (empty tables);
//! 2. connect (measured): a new controller on the same data directory; from the moment every
//!    bridge is told its controller (one OVSDB transaction per vswitchd) until `get switches`
//!    reports every switch connected and synced with its full table; controller CPU per
//!    switch and RSS;
//! 3. reconnect storm (measured, `--storms` times): every ovs-vswitchd is killed (SIGKILL, by
//!    PID) and started again on its database; the bridges come back with empty tables and
//!    reconnect at once; from the kill until every switch is synced again on its new
//!    connection, with each switch's own time, so a starved switch shows.
//!
//! CPU of the controller, the vswitchds and the ovsdb-servers is read from /proc for each
//! phase, to tell where the time goes. The RSS of everything it started is watched; the run
//! stops with an error above `--mem-budget-gib`.

use super::attach::{controller_bin, free_port};
use super::{arg_value, cpu_secs, status_mib};
use crate::process::TrackedProcess;
use crate::OvsSandbox;
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// What to run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Bridges, one node each.
    pub switches: u32,
    /// ovs-vswitchd processes the bridges are spread over.
    pub vswitchds: u32,
    /// Pods per node (a dummy port each).
    pub pods_per_node: u32,
    /// Namespaces the pods are spread over.
    pub namespaces: u32,
    /// Reconnect storms.
    pub storms: u32,
    /// Longest wait of any phase.
    pub timeout: Duration,
    /// Stop when everything started (controller, vswitchds, ovsdb-servers) holds more.
    pub mem_budget_mib: f64,
    /// Pause between two `get switches` while waiting.
    pub poll: Duration,
    /// `--echo-interval` of the controller (None: its default).
    pub echo_interval: Option<f64>,
}

const USAGE: &str = "flowmesh-bench scale [--switches N] [--vswitchds K] [--pods-per-node P] [--namespaces S] [--storms R] [--timeout SECS] [--mem-budget-gib G] [--poll-ms MS] [--echo-interval SECS]";

impl Settings {
    /// From the command line.
    pub fn parse(args: &[String]) -> Result<Settings, String> {
        for a in args.iter().filter(|a| a.starts_with("--")) {
            let known = [
                "--switches",
                "--vswitchds",
                "--pods-per-node",
                "--namespaces",
                "--storms",
                "--timeout",
                "--mem-budget-gib",
                "--poll-ms",
                "--echo-interval",
            ];
            if !known.contains(&a.as_str()) {
                return Err(format!("unknown option {a}; usage: {USAGE}"));
            }
        }
        let switches: u32 = arg_value(args, "--switches", 1000)?;
        let vswitchds: u32 = arg_value(args, "--vswitchds", switches.div_ceil(250).max(1))?;
        let s = Settings {
            switches,
            vswitchds,
            pods_per_node: arg_value(args, "--pods-per-node", 10)?,
            namespaces: arg_value(args, "--namespaces", 100)?,
            storms: arg_value(args, "--storms", 3)?,
            timeout: Duration::from_secs_f64(arg_value(args, "--timeout", 300.0)?),
            mem_budget_mib: arg_value::<f64>(args, "--mem-budget-gib", 10.0)? * 1024.0,
            poll: Duration::from_millis(arg_value(args, "--poll-ms", 100)?),
            echo_interval: match arg_value(args, "--echo-interval", -1.0)? {
                v if v < 0.0 => None,
                v => Some(v),
            },
        };
        if s.switches == 0 || s.switches > 60_000 {
            return Err("--switches: 1 to 60000".into());
        }
        if s.vswitchds == 0 || s.vswitchds > s.switches {
            return Err("--vswitchds: at least 1 and at most --switches".into());
        }
        if s.pods_per_node > 200 {
            return Err("--pods-per-node: at most 200".into());
        }
        if s.namespaces == 0 {
            return Err("--namespaces: at least 1".into());
        }
        if s.timeout.is_zero() || s.mem_budget_mib <= 0.0 || s.poll.is_zero() {
            return Err("--timeout, --mem-budget-gib and --poll-ms must be positive".into());
        }
        Ok(s)
    }
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let s = Settings::parse(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run(&s))
}

// ---------------------------------------------------------------------------------------------
// /proc readings

/// MemAvailable of the machine, GiB.
fn mem_available_gib() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0 / 1024.0)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The processes of the run, by role, for CPU and memory accounting.
#[derive(Clone, Debug, Default)]
struct Pids {
    controller: Option<u32>,
    vswitchd: Vec<u32>,
    ovsdb: Vec<u32>,
}

impl Pids {
    /// The controller and the daemons of the vswitchd run directories `dirs`, from their
    /// pidfiles (so restarted daemons are found without their handles).
    fn of(controller: Option<u32>, dirs: &[PathBuf]) -> Pids {
        let read = |d: &PathBuf, f: &str| -> Option<u32> {
            std::fs::read_to_string(d.join(f)).ok()?.trim().parse().ok()
        };
        Pids {
            controller,
            vswitchd: dirs
                .iter()
                .filter_map(|d| read(d, "ovs-vswitchd.pid"))
                .collect(),
            ovsdb: dirs
                .iter()
                .filter_map(|d| read(d, "ovsdb-server.pid"))
                .collect(),
        }
    }

    fn all(&self) -> impl Iterator<Item = u32> + '_ {
        self.controller
            .iter()
            .chain(&self.vswitchd)
            .chain(&self.ovsdb)
            .copied()
    }

    fn cpu(&self) -> CpuSample {
        let sum = |v: &[u32]| v.iter().filter_map(|p| cpu_secs(*p)).sum::<f64>();
        CpuSample {
            at: Instant::now(),
            controller: self.controller.and_then(cpu_secs).unwrap_or(0.0),
            vswitchd: sum(&self.vswitchd),
            ovsdb: sum(&self.ovsdb),
        }
    }

    fn rss_mib(&self) -> f64 {
        self.all().filter_map(|p| status_mib(p, "VmRSS:")).sum()
    }

    fn vswitchd_rss_mib(&self) -> f64 {
        self.vswitchd
            .iter()
            .filter_map(|p| status_mib(*p, "VmRSS:"))
            .sum()
    }
}

#[derive(Clone, Copy, Debug)]
struct CpuSample {
    at: Instant,
    controller: f64,
    vswitchd: f64,
    ovsdb: f64,
}

/// CPU used in a phase (seconds) and its wall time.
#[derive(Clone, Copy, Debug, Default)]
struct CpuUse {
    wall: f64,
    controller: f64,
    vswitchd: f64,
    ovsdb: f64,
}

impl CpuUse {
    /// From `before` to `after`; processes started in between (new PIDs) count from zero,
    /// so `fresh` says whether the vswitchd PIDs changed.
    fn between(before: &CpuSample, after: &CpuSample, fresh_vswitchd: bool) -> CpuUse {
        CpuUse {
            wall: after.at.duration_since(before.at).as_secs_f64(),
            controller: after.controller - before.controller,
            vswitchd: if fresh_vswitchd {
                after.vswitchd
            } else {
                after.vswitchd - before.vswitchd
            },
            ovsdb: after.ovsdb - before.ovsdb,
        }
    }

    fn describe(&self) -> String {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .unwrap_or(1.0);
        let idle = (self.wall * cores - self.controller - self.vswitchd - self.ovsdb).max(0.0);
        format!(
            "wall {:.2} s; CPU: controller {:.2} s ({:.0}% of one core), ovs-vswitchd {:.2} s ({:.0}%), ovsdb-server {:.2} s; {:.2} core-seconds of {:.0} cores not used by these (other load or waiting)",
            self.wall,
            self.controller,
            100.0 * self.controller / self.wall.max(1e-9),
            self.vswitchd,
            100.0 * self.vswitchd / self.wall.max(1e-9),
            self.ovsdb,
            idle,
            cores
        )
    }
}

/// Peak memory of everything the run started, checked against the budget.
struct MemWatch {
    budget_mib: f64,
    peak_mib: f64,
}

impl MemWatch {
    fn check(&mut self, pids: &Pids) -> Result<(), String> {
        let now = pids.rss_mib();
        self.peak_mib = self.peak_mib.max(now);
        if now > self.budget_mib {
            return Err(format!(
                "memory budget exceeded: the controller, ovs-vswitchd and ovsdb-server processes hold {now:.0} MiB (budget {:.0} MiB, --mem-budget-gib)",
                self.budget_mib
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// OVSDB: one transaction per vswitchd, straight to ovsdb-server

/// Runs one OVSDB `transact` of `ops` on the Open_vSwitch database at `sock`; an error names
/// the first failed operation.
pub fn ovsdb_transact(sock: &Path, ops: Vec<Value>) -> Result<Vec<Value>, String> {
    let ctx = |e: std::io::Error| format!("ovsdb {}: {e}", sock.display());
    let mut s = UnixStream::connect(sock).map_err(ctx)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(ctx)?;
    let mut params = vec![json!("Open_vSwitch")];
    params.extend(ops);
    let req = json!({"method": "transact", "params": params, "id": 1});
    let bytes = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
    s.write_all(&bytes).map_err(ctx)?;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        // Whole messages at the front of the buffer.
        let mut consumed = 0;
        let mut reply = None;
        {
            let mut it = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
            loop {
                match it.next() {
                    Some(Ok(v)) => {
                        consumed = it.byte_offset();
                        if v.get("id") == Some(&json!(1)) && v.get("result").is_some() {
                            reply = Some(v);
                            break;
                        }
                        if v.get("method") == Some(&json!("echo")) {
                            let id = v.get("id").cloned().unwrap_or(Value::Null);
                            let params = v.get("params").cloned().unwrap_or(json!([]));
                            let r = json!({"id": id, "result": params, "error": null});
                            let b = serde_json::to_vec(&r).map_err(|e| e.to_string())?;
                            s.write_all(&b).map_err(ctx)?;
                        }
                    }
                    Some(Err(e)) if e.is_eof() => break,
                    Some(Err(e)) => return Err(format!("ovsdb reply: {e}")),
                    None => break,
                }
            }
        }
        if let Some(v) = reply {
            if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
                return Err(format!("ovsdb transaction failed: {err}"));
            }
            let results = v
                .get("result")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if let Some((i, r)) = results
                .iter()
                .enumerate()
                .find(|(_, r)| r.get("error").is_some())
            {
                return Err(format!("ovsdb transaction failed at operation {i}: {r}"));
            }
            return Ok(results);
        }
        buf.drain(..consumed);
        let n = s.read(&mut chunk).map_err(ctx)?;
        if n == 0 {
            return Err(format!("ovsdb {} closed the connection", sock.display()));
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

fn ovs_map(pairs: &[(&str, String)]) -> Value {
    json!([
        "map",
        pairs.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

fn node_name(i: u32) -> String {
    format!("n{i}")
}

fn node_ip(i: u32) -> String {
    format!("172.31.{}.{}", i / 250, i % 250 + 1)
}

/// The OVSDB operations creating bridges `range` (one node each) with their vxlan0, tun0 and
/// pod ports, as the harness's sandbox bridges are, without a controller.
fn bridge_ops(range: std::ops::Range<u32>, pods: u32) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut bridges = Vec::new();
    for i in range {
        let br = node_name(i);
        let mut ports = Vec::new();
        let mut port = |local: Option<&str>, iface: Value| {
            let name = match local {
                Some(l) => OvsSandbox::port_name(&br, l),
                None => br.clone(),
            };
            let tag = format!("{}_{}", br, local.unwrap_or("local"));
            let mut row = iface;
            row["name"] = json!(name);
            ops.push(json!({"op": "insert", "table": "Interface", "row": row, "uuid-name": format!("i_{tag}")}));
            ops.push(json!({"op": "insert", "table": "Port", "row": {"name": name, "interfaces": ["named-uuid", format!("i_{tag}")]}, "uuid-name": format!("p_{tag}")}));
            ports.push(json!(["named-uuid", format!("p_{tag}")]));
        };
        port(None, json!({"type": "internal"}));
        port(
            Some("vxlan0"),
            json!({"type": "vxlan", "ofport_request": crate::sandbox::VXLAN_OFPORT,
                   "options": ovs_map(&[("remote_ip", "flow".into()), ("key", "flow".into()), ("local_ip", node_ip(i))])}),
        );
        port(
            Some("tun0"),
            json!({"type": "internal", "ofport_request": crate::sandbox::TUN0_OFPORT}),
        );
        for p in 0..pods {
            port(
                Some(&format!("p{p}")),
                json!({"type": "dummy", "ofport_request": 3 + p}),
            );
        }
        let other = ovs_map(&[
            ("datapath-id", format!("{:016x}", dpid(i))),
            ("disable-in-band", "true".into()),
        ]);
        ops.push(
            json!({"op": "insert", "table": "Bridge", "uuid-name": format!("b_{br}"), "row": {
            "name": br, "datapath_type": "dummy", "protocols": "OpenFlow13", "fail_mode": "secure",
            "other_config": other, "ports": ["set", ports]}}),
        );
        bridges.push(json!(["named-uuid", format!("b_{br}")]));
    }
    ops.push(json!({"op": "mutate", "table": "Open_vSwitch", "where": [],
        "mutations": [["bridges", "insert", ["set", bridges]]]}));
    ops
}

/// The OVSDB operations pointing bridges `range` at `target` (OVS's default backoff and
/// inactivity probe, as `ovs-vsctl set-controller` leaves them), or clearing their controller.
fn controller_ops(range: std::ops::Range<u32>, target: Option<&str>) -> Vec<Value> {
    let mut ops = Vec::new();
    for i in range {
        let br = node_name(i);
        let ctl = match target {
            Some(t) => {
                ops.push(json!({"op": "insert", "table": "Controller", "uuid-name": format!("c_{br}"), "row": {"target": t}}));
                json!(["named-uuid", format!("c_{br}")])
            }
            None => json!(["set", []]),
        };
        ops.push(json!({"op": "update", "table": "Bridge", "where": [["name", "==", br]], "row": {"controller": ctl}}));
    }
    ops
}

fn dpid(i: u32) -> u64 {
    0x1000 + u64::from(i)
}

/// The bridges of vswitchd `k` of `of`: a contiguous share.
fn share(switches: u32, of: u32, k: u32) -> std::ops::Range<u32> {
    let lo = (u64::from(switches) * u64::from(k) / u64::from(of)) as u32;
    let hi = (u64::from(switches) * u64::from(k + 1) / u64::from(of)) as u32;
    lo..hi
}

fn db_sock(sbx: &OvsSandbox) -> PathBuf {
    sbx.run_dir().join("db.sock")
}

/// Makes ovs-vsctl wait (up to 5 minutes: a loaded machine) until vswitchd applied the
/// database: a change it must acknowledge.
fn vswitchd_caught_up(sbx: &OvsSandbox, tag: &str) -> Result<(), String> {
    let dir = sbx.run_dir();
    let mut cmd = Command::new("ovs-vsctl");
    for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"] {
        cmd.env(var, dir);
    }
    let out = cmd
        .arg(format!("--db=unix:{}", db_sock(sbx).display()))
        .arg("--timeout=300")
        .args(["set", "Open_vSwitch", "."])
        .arg(format!("external_ids:flowmesh-scale={tag}"))
        .output()
        .map_err(|e| format!("ovs-vsctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ovs-vsctl set Open_vSwitch in {}: {} {}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// What Open vSwitch says of its controller connections that are not up (at most 5 of them,
/// and how many there are): for a switch the controller never saw come back.
fn unconnected(sbx: &[OvsSandbox]) -> String {
    let select = json!({"op": "select", "table": "Controller",
        "where": [["is_connected", "==", false]], "columns": ["target", "status"]});
    let mut rows = Vec::new();
    for sb in sbx {
        match ovsdb_transact(&db_sock(sb), vec![select.clone()]) {
            Ok(r) => rows.extend(
                r.first()
                    .and_then(|r| r.get("rows"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            ),
            Err(e) => return format!("not read: {e}"),
        }
    }
    let shown: Vec<String> = rows.iter().take(5).map(Value::to_string).collect();
    format!("{} controller connections down {shown:?}", rows.len())
}

/// Points every bridge of every vswitchd at `target` (or clears it): one transaction each.
fn set_controllers(sbx: &[OvsSandbox], switches: u32, target: Option<&str>) -> Result<(), String> {
    let k = sbx.len() as u32;
    for (j, s) in sbx.iter().enumerate() {
        ovsdb_transact(
            &db_sock(s),
            controller_ops(share(switches, k, j as u32), target),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The controller

struct Controller {
    proc: TrackedProcess,
    grpc: SocketAddr,
    metrics: SocketAddr,
}

/// A counter of the controller's `/metrics` (0 when absent, e.g. a build without it).
fn metric(addr: SocketAddr, name: &str) -> f64 {
    metrics_text(addr)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The controller's metrics page (empty when it cannot be read).
fn metrics_text(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// The cluster network of the run: OpenShift's default /14 of /23 node subnets holds only 512
/// nodes, so one 10.0.0.0/8 range of /24 subnets (65,536 nodes of up to 254 pods).
const CLUSTER_CONFIG: &str = "clusterNetworks:\n  - cidr: 10.0.0.0/8\n    hostPrefix: 24\nserviceNetwork: 172.30.0.0/16\nmode: multitenant\n";

fn start_controller(
    data: &Path,
    log: &Path,
    of: SocketAddr,
    s: &Settings,
) -> Result<(Controller, f64), String> {
    let config = data.with_extension("yaml");
    std::fs::write(&config, CLUSTER_CONFIG).map_err(|e| format!("{}: {e}", config.display()))?;
    let grpc = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let t0 = Instant::now();
    let mut cmd = Command::new(controller_bin()?);
    cmd.arg("--data-dir")
        .arg(data)
        .arg("--config")
        .arg(&config)
        .args(
            s.echo_interval
                .iter()
                .flat_map(|e| ["--echo-interval".to_string(), e.to_string()]),
        )
        .args(["--grpc-listen", &grpc.to_string()])
        .args(["--openflow-listen", &of.to_string()])
        .args(super::per_peer_flag(s.switches))
        .args(["--metrics-listen", &metrics.to_string()])
        .arg("--log")
        .arg(std::env::var("FLOWMESH_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .stderr(logf);
    let mut proc =
        TrackedProcess::spawn("flowmesh-controller", &mut cmd).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(grpc).is_err() {
        if let Some(st) = proc.try_exited() {
            return Err(format!(
                "flowmesh-controller exited ({st}) at start; see {}",
                log.display()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "flowmesh-controller did not answer within 60 s; see {}",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((
        Controller {
            proc,
            grpc,
            metrics,
        },
        t0.elapsed().as_secs_f64(),
    ))
}

async fn admin_of(c: &Controller) -> Result<AdminClient<Channel>, String> {
    admin_at(c.grpc).await
}

async fn admin_at(grpc: SocketAddr) -> Result<AdminClient<Channel>, String> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("admin API: {e}"))?;
    Ok(AdminClient::new(ch).max_decoding_message_size(64 << 20))
}

/// `get switches`, reconnecting after a transport error (the controller's HTTP/2 keepalive
/// closes a connection whose ping is answered late on a loaded machine); the reconnects are
/// counted and reported.
async fn list_switches(
    admin: &mut AdminClient<Channel>,
    grpc: SocketAddr,
    reconnects: &mut u32,
) -> Result<Vec<pa::Switch>, String> {
    let mut tries = 0;
    loop {
        match admin.list_switches(pa::Empty {}).await {
            Ok(r) => return Ok(r.into_inner().items),
            Err(e)
                if tries < 20
                    && matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown) =>
            {
                tries += 1;
                *reconnects += 1;
                println!("  (get switches failed: {e}; reconnecting)");
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Ok(a) = admin_at(grpc).await {
                    *admin = a;
                }
            }
            Err(e) => return Err(format!("get switches: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting for the switches

/// Per switch, when (seconds from the phase's start) it was first seen connected on a new
/// connection and then synced.
#[derive(Clone, Debug, Default)]
struct SyncTimes {
    connected: HashMap<String, f64>,
    synced: HashMap<String, f64>,
    /// Desired flows per switch, as the controller reported them when synced.
    flows: HashMap<String, u64>,
    /// Peers when synced.
    peers: HashMap<String, String>,
}

impl SyncTimes {
    fn all_synced_secs(&self) -> f64 {
        self.synced.values().copied().fold(0.0, f64::max)
    }

    fn first_synced_secs(&self) -> f64 {
        self.synced.values().copied().fold(f64::INFINITY, f64::min)
    }

    /// Each switch's own time from its (new) connection to synced.
    fn own(&self) -> Vec<f64> {
        self.synced
            .iter()
            .map(|(n, s)| s - self.connected.get(n).copied().unwrap_or(*s))
            .collect()
    }

    fn slowest(&self) -> Option<(String, f64)> {
        self.synced
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(n, s)| (n.clone(), *s))
    }
}

/// Whether a connected switch is on a connection opened in this phase: it was seen
/// disconnected since the phase began, or its peer address is not the one before (none given:
/// every connection is new).
fn on_new_connection(
    node: &str,
    peer: &str,
    seen_down: &HashSet<String>,
    old_peers: Option<&HashMap<String, String>>,
) -> bool {
    seen_down.contains(node)
        || old_peers.is_none_or(|o| o.get(node).map(String::as_str) != Some(peer))
}

/// Polls `get switches` until every node's switch is connected and synced with as many flows
/// as desired, on a connection other than the one in `old_peers` (when given): one with another
/// peer address, or any connection once the switch was seen disconnected in this phase (a new
/// connection can reuse its predecessor's source port on loopback).
#[allow(clippy::too_many_arguments)]
async fn wait_synced(
    admin: &mut AdminClient<Channel>,
    grpc: SocketAddr,
    reconnects: &mut u32,
    nodes: u32,
    since: Instant,
    old_peers: Option<&HashMap<String, String>>,
    s: &Settings,
    pids: &dyn Fn() -> Pids,
    mem: &mut MemWatch,
) -> Result<SyncTimes, String> {
    let mut t = SyncTimes::default();
    let mut seen_down: HashSet<String> = HashSet::new();
    let mut last_report = Instant::now();
    loop {
        mem.check(&pids())?;
        let items = list_switches(admin, grpc, reconnects).await?;
        let now = since.elapsed().as_secs_f64();
        for sw in items.iter().filter(|sw| !sw.unknown && !sw.node.is_empty()) {
            if !sw.connected {
                seen_down.insert(sw.node.clone());
                continue;
            }
            if !on_new_connection(&sw.node, &sw.peer, &seen_down, old_peers) {
                continue;
            }
            t.connected.entry(sw.node.clone()).or_insert(now);
            if sw.synced
                && sw.flows == sw.desired_flows
                && sw.desired_flows > 0
                && !t.synced.contains_key(&sw.node)
            {
                t.synced.insert(sw.node.clone(), now);
                t.flows.insert(sw.node.clone(), sw.desired_flows);
                t.peers.insert(sw.node.clone(), sw.peer.clone());
            }
        }
        if t.synced.len() >= nodes as usize {
            return Ok(t);
        }
        if since.elapsed() > s.timeout {
            let unknown = items.iter().filter(|sw| sw.unknown).count();
            let errs: Vec<String> = items
                .iter()
                .filter(|sw| !sw.last_error.is_empty())
                .take(3)
                .map(|sw| format!("{}: {}", sw.node, sw.last_error))
                .collect();
            // The switches still missing, as the controller sees them: whether they are
            // connected at all, on which connection (against the one before the phase), and
            // how far their table got.
            let missing: Vec<String> = items
                .iter()
                .filter(|sw| !sw.unknown && !sw.node.is_empty() && !t.synced.contains_key(&sw.node))
                .take(5)
                .map(|sw| {
                    format!(
                        "{} connected={} synced={} flows={}/{} peer={} before={} error={:?}",
                        sw.node,
                        sw.connected,
                        sw.synced,
                        sw.flows,
                        sw.desired_flows,
                        sw.peer,
                        old_peers
                            .and_then(|o| o.get(&sw.node))
                            .map_or("-", String::as_str),
                        sw.last_error
                    )
                })
                .collect();
            return Err(format!(
                "after {:.0} s only {} of {nodes} switches synced ({} connected, {unknown} unknown datapaths); errors: {errs:?}; not synced: {missing:?}",
                s.timeout.as_secs_f64(),
                t.synced.len(),
                t.connected.len()
            ));
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            last_report = Instant::now();
            println!(
                "  … {:.1} s: {} connected, {} synced (load {})",
                now,
                t.connected.len(),
                t.synced.len(),
                loadavg()
            );
        }
        tokio::time::sleep(s.poll).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The run

/// What one storm measured.
#[derive(Clone, Debug)]
struct Storm {
    all_synced: f64,
    vswitchd_ready: f64,
    first_synced: f64,
    own_p50: f64,
    own_max: f64,
    synced_p50: f64,
    spread: f64,
    slowest: String,
    cpu: CpuUse,
}

/// Run the scenario.
pub async fn run(s: &Settings) -> Result<(), String> {
    let n = s.switches;
    let k = s.vswitchds;
    println!(
        "scale: {n} switches on {k} ovs-vswitchd, {} pods per node over {} namespaces, {} storms; load {}; MemAvailable {:.1} GiB",
        s.pods_per_node,
        s.namespaces,
        s.storms,
        loadavg(),
        mem_available_gib().unwrap_or(0.0)
    );
    let mut mem = MemWatch {
        budget_mib: s.mem_budget_mib,
        peak_mib: 0.0,
    };
    let data = std::env::temp_dir().join(format!("flowmesh-bench-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let log = data.with_extension("log");
    let _ = std::fs::remove_file(&log);
    println!("controller log: {}", log.display());

    // The vswitchds, each with its share of the bridges (created in parallel).
    let t0 = Instant::now();
    let mut sbx: Vec<OvsSandbox> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..k)
            .map(|j| {
                scope.spawn(move || -> Result<OvsSandbox, String> {
                    let sb = OvsSandbox::builder().start().map_err(|e| e.to_string())?;
                    ovsdb_transact(&db_sock(&sb), bridge_ops(share(n, k, j), s.pods_per_node))?;
                    vswitchd_caught_up(&sb, "created")?;
                    Ok(sb)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("sandbox thread panicked".into()))
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    let dirs: Vec<PathBuf> = sbx.iter().map(|b| b.run_dir().to_owned()).collect();
    println!(
        "{n} bridges on {k} ovs-vswitchd in {:.1} s ({:.0} MiB)",
        t0.elapsed().as_secs_f64(),
        Pids::of(None, &dirs).vswitchd_rss_mib()
    );

    let res = measure(s, &mut sbx, &dirs, &data, &log, &mut mem).await;
    if res.is_err() {
        // Keep what explains a failure: the vswitchds' logs beside the controller's.
        for (j, d) in dirs.iter().enumerate() {
            let to = data.with_extension(format!("ovs{j}.log"));
            if std::fs::copy(d.join("ovs-vswitchd.log"), &to).is_ok() {
                println!("ovs-vswitchd log kept: {}", to.display());
            }
        }
    }
    drop(sbx);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_file(data.with_extension("yaml"));
    res
}

/// The phases after the vswitchds are up.
async fn measure(
    s: &Settings,
    sbx: &mut Vec<OvsSandbox>,
    dirs: &[PathBuf],
    data: &Path,
    log: &Path,
    mem: &mut MemWatch,
) -> Result<(), String> {
    let (n, k) = (s.switches, s.vswitchds);
    let (data, log) = (data.to_owned(), log.to_owned());
    // Set-up: nodes, namespaces, a first connect, pods.
    let of = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let target = format!("tcp:{of}");
    let (ctl, _) = start_controller(&data, &log, of, s)?;
    let mut admin = admin_of(&ctl).await?;
    let t0 = Instant::now();
    super::add_bench_nodes(&mut admin, n).await?;
    for ns in 0..s.namespaces {
        admin
            .create_namespace(pa::NameRequest {
                name: format!("ns{ns}"),
            })
            .await
            .map_err(|e| format!("create namespace: {}", e.message()))?;
    }
    println!(
        "{n} nodes and {} namespaces registered in {:.1} s",
        s.namespaces,
        t0.elapsed().as_secs_f64()
    );
    let t0 = Instant::now();
    set_controllers(sbx, n, Some(&target))?;
    let ctl_pid = Some(ctl.proc.pid());
    let mut reconnects = 0;
    let warm = wait_synced(
        &mut admin,
        ctl.grpc,
        &mut reconnects,
        n,
        t0,
        None,
        s,
        &|| Pids::of(ctl_pid, dirs),
        mem,
    )
    .await?;
    println!(
        "set-up: {n} switches synced without pods in {:.2} s",
        warm.all_synced_secs()
    );
    let t0 = Instant::now();
    attach_pods(&admin, s).await?;
    println!(
        "set-up: {} pods attached (each acknowledged by its switch) in {:.1} s",
        n * s.pods_per_node,
        t0.elapsed().as_secs_f64()
    );
    let mut ctl = ctl;
    ctl.proc.terminate(Duration::from_secs(10));
    drop(admin);
    set_controllers(sbx, n, None)?;
    restart_all(sbx, 0)?;

    // Phase 2: connect (a fresh controller, bridges with empty tables told their controller).
    let (ctl, ctl_start) = start_controller(&data, &log, of, s)?;
    let mut admin = admin_of(&ctl).await?;
    let ctl_pid = ctl.proc.pid();
    let pids = Pids::of(Some(ctl_pid), dirs);
    let before = pids.cpu();
    let t0 = Instant::now();
    set_controllers(sbx, n, Some(&target))?;
    let told = t0.elapsed().as_secs_f64();
    let conn = wait_synced(
        &mut admin,
        ctl.grpc,
        &mut reconnects,
        n,
        t0,
        None,
        s,
        &|| Pids::of(Some(ctl_pid), dirs),
        mem,
    )
    .await?;
    let cpu_connect = CpuUse::between(&before, &pids.cpu(), false);
    let synced_secs = conn.all_synced_secs();
    let mut flows: Vec<f64> = conn.flows.values().map(|f| *f as f64).collect();
    flows.sort_by(f64::total_cmp);
    let flows_med = super::attach::percentile(&flows, 0.5);
    let total_flows: f64 = flows.iter().sum();
    let rss = status_mib(ctl_pid, "VmRSS:").unwrap_or(0.0);
    let hwm = status_mib(ctl_pid, "VmHWM:").unwrap_or(0.0);
    let ovs_rss = pids.vswitchd_rss_mib();
    let own = conn.own();
    println!(
        "connect: controller up in {ctl_start:.2} s; {n} bridges told their controller in {told:.2} s; all {n} switches synced after {synced_secs:.2} s (first {:.2} s, p50 {:.2} s); each switch's own connect→synced p50 {:.2} s max {:.2} s; {:.0} flows per switch (min {:.0}, max {:.0}), {:.0} in all",
        conn.first_synced_secs(),
        super::attach::percentile(&conn.synced.values().copied().collect::<Vec<_>>(), 0.5),
        super::attach::percentile(&own, 0.5),
        super::attach::percentile(&own, 1.0),
        flows_med,
        super::attach::percentile(&flows, 0.0),
        super::attach::percentile(&flows, 1.0),
        total_flows
    );
    println!("connect: {}", cpu_connect.describe());
    println!(
        "connect: controller RSS {rss:.0} MiB (peak {hwm:.0} MiB), {:.1} KiB per switch; CPU {:.2} ms per switch; ovs-vswitchd RSS {ovs_rss:.0} MiB in all",
        rss * 1024.0 / f64::from(n),
        cpu_connect.controller * 1e3 / f64::from(n)
    );

    // Phase 3: reconnect storms.
    let mut storms = Vec::new();
    let mut last_peers = conn.peers.clone();
    for r in 0..s.storms {
        let before = Pids::of(Some(ctl_pid), dirs).cpu();
        let t0 = Instant::now();
        let moved = std::mem::take(sbx);
        let restart = tokio::task::spawn_blocking(move || {
            let mut moved = moved;
            let r = restart_all(&mut moved, r + 1);
            (moved, r)
        });
        // Poll while the vswitchds come back.
        let peers = last_peers.clone();
        let pids_now = || Pids::of(Some(ctl_pid), dirs);
        let wait = wait_synced(
            &mut admin,
            ctl.grpc,
            &mut reconnects,
            n,
            t0,
            Some(&peers),
            s,
            &pids_now,
            mem,
        );
        let (times, joined) = tokio::join!(wait, restart);
        let (moved, restarted) = joined.map_err(|e| format!("restart thread: {e}"))?;
        *sbx = moved;
        let ready = restarted?;
        let times = times.map_err(|e| format!("{e}; Open vSwitch: {}", unconnected(sbx)))?;
        let after = Pids::of(Some(ctl_pid), dirs).cpu();
        let cpu = CpuUse::between(&before, &after, true);
        mem.check(&Pids::of(Some(ctl_pid), dirs))?;
        let own = times.own();
        let synced: Vec<f64> = times.synced.values().copied().collect();
        let (slowest, all) = times.slowest().unwrap_or_default();
        let st = Storm {
            all_synced: all,
            vswitchd_ready: ready,
            first_synced: times.first_synced_secs(),
            own_p50: super::attach::percentile(&own, 0.5),
            own_max: super::attach::percentile(&own, 1.0),
            synced_p50: super::attach::percentile(&synced, 0.5),
            spread: all - times.first_synced_secs(),
            slowest,
            cpu,
        };
        println!(
            "storm {}: kill → every vswitchd restarted and configured {:.2} s; first switch synced {:.2} s, p50 {:.2} s, all {:.2} s (slowest {}; spread first→last {:.2} s); each switch's own reconnect→synced p50 {:.2} s, max {:.2} s",
            r + 1,
            st.vswitchd_ready,
            st.first_synced,
            st.synced_p50,
            st.all_synced,
            st.slowest,
            st.spread,
            st.own_p50,
            st.own_max
        );
        println!("storm {}: {}", r + 1, st.cpu.describe());
        last_peers = times.peers.clone();
        storms.push(st);
    }

    // Memory after the connect and the storms, on the controller that went through them: its
    // RSS once it stops falling (an allocator may give freed memory back a while after the
    // storm), against the live state (what the allocator says the program holds: jemalloc's
    // stats.allocated; other allocators report none).
    let after = settle_rss(ctl_pid).await;
    let storm_hwm = status_mib(ctl_pid, "VmHWM:").unwrap_or(0.0);
    let live = allocator_stats(ctl.metrics);
    println!(
        "after the storm: controller RSS {:.0} MiB when all were synced, {:.0} MiB settled after {:.1} s (min {:.0} MiB; peak since its start {storm_hwm:.0} MiB); allocator {}; live state {}; load {}",
        after.at_synced,
        after.settled,
        after.settle_secs,
        after.min,
        live.allocator,
        live.describe(),
        loadavg()
    );

    // Phase 4: verify storm. The controller restarts with nothing changed (a restart or a
    // failover): from its start until every switch is synced again on a new connection, and
    // how many flow-mods it sent (must be none) and whole tables it read. Every session the new
    // process lists is a new connection, whatever its peer address: the switch's side of the
    // old one closed at once (the controller closed first), so its source port may come back
    // (two of 1,000 switches did in one run, and the phase waited for them for ever).
    let mut ctl = ctl;
    ctl.proc.terminate(Duration::from_secs(10));
    drop(admin);
    let t0 = Instant::now();
    let (ctl, _) = start_controller(&data, &log, of, s)?;
    let mut admin = admin_of(&ctl).await?;
    let ctl_pid = ctl.proc.pid();
    let before = Pids::of(Some(ctl_pid), dirs).cpu();
    let verify = wait_synced(
        &mut admin,
        ctl.grpc,
        &mut reconnects,
        n,
        t0,
        None,
        s,
        &|| Pids::of(Some(ctl_pid), dirs),
        mem,
    )
    .await?;
    let verify_secs = verify.all_synced_secs();
    let verify_cpu = CpuUse::between(&before, &Pids::of(Some(ctl_pid), dirs).cpu(), false);
    let verify_mods = metric(ctl.metrics, "flowmesh_flow_mods_sent_total");
    let verify_reads = metric(ctl.metrics, "flowmesh_switch_full_reads_total");
    let verify_marked = metric(ctl.metrics, "flowmesh_switch_marker_verified_total");
    println!(
        "verify storm: controller restarted with nothing changed; all {n} switches synced {verify_secs:.2} s after its start (first {:.2} s); flow-mods sent {verify_mods:.0}; whole-table reads {verify_reads:.0}; verified by marker {verify_marked:.0}; {}",
        verify.first_synced_secs(),
        verify_cpu.describe()
    );

    // The switches really hold what the controller says: a sample of bridges read back.
    verify_sample(sbx, s, &mut admin).await?;
    let pids = Pids::of(Some(ctl_pid), dirs);
    mem.check(&pids)?;
    let rss_end = status_mib(ctl.proc.pid(), "VmRSS:").unwrap_or(0.0);
    let hwm_end = status_mib(ctl.proc.pid(), "VmHWM:").unwrap_or(0.0);
    let ovs_rss_end = pids.vswitchd_rss_mib();
    println!(
        "after the storms: controller RSS {rss_end:.0} MiB (peak {hwm_end:.0} MiB); ovs-vswitchd {ovs_rss_end:.0} MiB; everything started {:.0} MiB (peak {:.0} MiB); load {}",
        pids.rss_mib(),
        mem.peak_mib,
        loadavg()
    );

    let worst = |f: fn(&Storm) -> f64| storms.iter().map(f).fold(0.0, f64::max);
    let resync: Vec<f64> = storms.iter().map(|st| st.all_synced).collect();
    let storm_ok = !storms.is_empty() && worst(|st| st.all_synced) <= 30.0;
    drop(admin);
    drop(ctl);
    println!(
        "switches={n} vswitchds={k} pods={} flows_per_switch={flows_med:.0} synced_secs={synced_secs:.2} ctl_start_secs={ctl_start:.2} cpu_ms_per_switch={:.2} connect_ctl_cpu_secs={:.2} connect_ovs_cpu_secs={:.2} rss_mib={rss:.0} rss_peak_mib={:.0} rss_kib_per_switch={:.1} vswitchd_rss_mib={ovs_rss:.0} storms={} storm_resync_secs={:.2} storm_resync_median_secs={:.2} storm_vswitchd_ready_secs={:.2} storm_slowest_own_secs={:.2} storm_spread_secs={:.2} storm_ctl_cpu_secs={:.2} storm_within_30s={storm_ok} verify_storm_secs={verify_secs:.2} verify_flow_mods={verify_mods:.0} verify_full_reads={verify_reads:.0} verify_ctl_cpu_secs={:.2} allocator={} rss_after_storm_mib={:.0} rss_storm_peak_mib={storm_hwm:.0} rss_at_storm_synced_mib={:.0} rss_settle_secs={:.1} live_mib={} rss_over_live={} load={}",
        n * s.pods_per_node,
        cpu_connect.controller * 1e3 / f64::from(n),
        cpu_connect.controller,
        cpu_connect.vswitchd,
        hwm.max(hwm_end),
        rss * 1024.0 / f64::from(n),
        storms.len(),
        worst(|st| st.all_synced),
        super::median(&resync),
        worst(|st| st.vswitchd_ready),
        worst(|st| st.own_max),
        worst(|st| st.spread),
        super::median(&storms.iter().map(|st| st.cpu.controller).collect::<Vec<_>>()),
        verify_cpu.controller,
        live.allocator,
        after.settled,
        after.at_synced,
        after.settle_secs,
        live.live_mib()
            .map_or_else(|| "unknown".to_string(), |v| format!("{v:.0}")),
        live.live_mib()
            .filter(|v| *v > 0.0)
            .map_or_else(|| "unknown".to_string(), |v| format!("{:.2}", after.settled / v)),
        loadavg().replace(' ', "/")
    );
    Ok(())
}

/// The controller's RSS after a storm.
#[derive(Clone, Copy, Debug, Default)]
struct Settled {
    /// When every switch was synced again.
    at_synced: f64,
    /// Once it stopped falling.
    settled: f64,
    /// The least seen.
    min: f64,
    /// How long it took to stop falling.
    settle_secs: f64,
}

/// Samples the RSS of `pid` until it stops falling: no new low by more than 1 MiB for 3 s
/// (an allocator purging with a decay gives memory back over seconds), at most 60 s.
async fn settle_rss(pid: u32) -> Settled {
    let t0 = Instant::now();
    let rss = || status_mib(pid, "VmRSS:").unwrap_or(0.0);
    let first = rss();
    let (mut min, mut low_at) = (first, Instant::now());
    let mut last = first;
    while low_at.elapsed() < Duration::from_secs(3) && t0.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        last = rss();
        if last < min - 1.0 {
            (min, low_at) = (last, Instant::now());
        }
        min = min.min(last);
    }
    Settled {
        at_synced: first,
        settled: last,
        min,
        settle_secs: low_at.saturating_duration_since(t0).as_secs_f64(),
    }
}

/// What the controller's allocator reports in its metrics.
#[derive(Clone, Debug, Default)]
struct AllocatorStats {
    /// `flowmesh_allocator_info`'s label (`unknown` for a build without it).
    allocator: String,
    /// `flowmesh_allocator_allocated_bytes` (jemalloc builds only).
    allocated: Option<f64>,
    /// `flowmesh_allocator_resident_bytes`.
    resident: Option<f64>,
    /// `flowmesh_allocator_retained_bytes`.
    retained: Option<f64>,
}

impl AllocatorStats {
    fn live_mib(&self) -> Option<f64> {
        self.allocated.map(|b| b / 1048576.0)
    }
    fn describe(&self) -> String {
        match (self.allocated, self.resident, self.retained) {
            (Some(a), Some(r), Some(k)) => format!(
                "{:.0} MiB allocated (jemalloc stats.allocated), {:.0} MiB resident in the allocator, {:.0} MiB retained (not resident)",
                a / 1048576.0,
                r / 1048576.0,
                k / 1048576.0
            ),
            _ => "unknown (this allocator reports no statistics)".to_string(),
        }
    }
}

fn allocator_stats(addr: SocketAddr) -> AllocatorStats {
    let text = metrics_text(addr);
    let value = |name: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let allocator = text
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("flowmesh_allocator_info{allocator=\"")?;
            Some(rest.split('"').next()?.to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    AllocatorStats {
        allocator,
        allocated: value("flowmesh_allocator_allocated_bytes"),
        resident: value("flowmesh_allocator_resident_bytes"),
        retained: value("flowmesh_allocator_retained_bytes"),
    }
}

/// Attaches `pods_per_node` pods to every node, a few calls in flight at once.
async fn attach_pods(admin: &AdminClient<Channel>, s: &Settings) -> Result<(), String> {
    let mut jobs = tokio::task::JoinSet::new();
    let mut todo = (0..s.pods_per_node).flat_map(|p| (0..s.switches).map(move |i| (i, p)));
    let mut next = || todo.next();
    let mut in_flight = 0;
    loop {
        while in_flight < 16 {
            let Some((i, p)) = next() else { break };
            let mut a = admin.clone();
            let ns = (i + p) % s.namespaces;
            jobs.spawn(async move {
                a.attach_pod(pa::AttachPodRequest {
                    node: node_name(i),
                    namespace: format!("ns{ns}"),
                    name: format!("pod-{i}-{p}"),
                    port_name: OvsSandbox::port_name(&node_name(i), &format!("p{p}")),
                    ofport: 3 + p,
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(|e| format!("attach pod-{i}-{p}: {}", e.message()))
            });
            in_flight += 1;
        }
        match jobs.join_next().await {
            None => return Ok(()),
            Some(r) => {
                in_flight -= 1;
                r.map_err(|e| e.to_string())??;
            }
        }
    }
}

/// Kills every vswitchd (SIGKILL, by PID: a crash, the flows are gone) and starts it again on
/// its database, all in parallel. Returns the seconds until the last one has applied its
/// configuration (its bridges exist and dial their controller).
fn restart_all(sbx: &mut [OvsSandbox], round: u32) -> Result<f64, String> {
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        let hs: Vec<_> = sbx
            .iter_mut()
            .map(|sb| {
                scope.spawn(move || -> Result<(), String> {
                    sb.kill_vswitchd();
                    sb.start_vswitchd().map_err(|e| e.to_string())?;
                    vswitchd_caught_up(sb, &format!("restart-{round}"))
                })
            })
            .collect();
        for h in hs {
            h.join()
                .unwrap_or_else(|_| Err("restart thread panicked".into()))?;
        }
        Ok::<(), String>(())
    })?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Reads back a few bridges (the first and last of every vswitchd) and compares their flow
/// count with what the controller says it desires.
async fn verify_sample(
    sbx: &[OvsSandbox],
    s: &Settings,
    admin: &mut AdminClient<Channel>,
) -> Result<(), String> {
    let items = admin
        .list_switches(pa::Empty {})
        .await
        .map_err(|e| format!("get switches: {}", e.message()))?
        .into_inner()
        .items;
    let desired: HashMap<String, u64> = items
        .iter()
        .map(|sw| (sw.node.clone(), sw.desired_flows))
        .collect();
    let k = sbx.len() as u32;
    let mut checked = 0;
    for (j, sb) in sbx.iter().enumerate() {
        let r = share(s.switches, k, j as u32);
        for i in [r.start, r.end - 1] {
            let br = node_name(i);
            let got = sb.dump_flows(&br).map_err(|e| e.to_string())?.len() as u64;
            let want = desired.get(&br).copied().unwrap_or(0);
            if got != want {
                return Err(format!(
                    "bridge {br} holds {got} flows, the controller desires {want}"
                ));
            }
            checked += 1;
        }
    }
    println!("verified: {checked} bridges read back with ovs-ofctl hold exactly the desired number of flows");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_bridge_once() {
        for (n, k) in [(1000, 4), (7, 3), (5, 5), (1, 1)] {
            let mut all = Vec::new();
            for j in 0..k {
                all.extend(share(n, k, j));
            }
            assert_eq!(all, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_switch_back_on_its_old_source_port_is_on_a_new_connection_once_seen_down() {
        let old: HashMap<String, String> =
            [("n1".to_string(), "127.0.0.1:52704".to_string())].into();
        let mut down = HashSet::new();
        // Still the connection from before the phase.
        assert!(!on_new_connection(
            "n1",
            "127.0.0.1:52704",
            &down,
            Some(&old)
        ));
        // Another port: new.
        assert!(on_new_connection(
            "n1",
            "127.0.0.1:40000",
            &down,
            Some(&old)
        ));
        // The same port after the switch was seen disconnected: new (loopback reuses ports).
        down.insert("n1".to_string());
        assert!(on_new_connection(
            "n1",
            "127.0.0.1:52704",
            &down,
            Some(&old)
        ));
        // A new controller process: every connection is new.
        assert!(on_new_connection(
            "n2",
            "127.0.0.1:52704",
            &HashSet::new(),
            None
        ));
    }

    #[test]
    fn options_are_checked() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Settings::parse(&a(&["--switches", "0"])).is_err());
        assert!(Settings::parse(&a(&["--vswitchds", "5", "--switches", "3"])).is_err());
        assert!(Settings::parse(&a(&["--bogus"])).is_err());
        let s = Settings::parse(&a(&["--switches", "1000"])).expect("valid");
        assert_eq!(s.vswitchds, 4);
        let s = Settings::parse(&a(&["--switches", "100"])).expect("valid");
        assert_eq!(s.vswitchds, 1);
    }

    #[test]
    fn ops_name_every_row_once() {
        let ops = bridge_ops(0..2, 2);
        // Per bridge: 5 ports (local, vxlan0, tun0, 2 pods) × (interface + port) + bridge.
        assert_eq!(ops.len(), 2 * 11 + 1);
        let c = controller_ops(0..2, Some("tcp:127.0.0.1:1"));
        assert_eq!(c.len(), 4);
        assert_eq!(controller_ops(0..2, None).len(), 2);
    }
}
