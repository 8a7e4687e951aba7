//! `flowmesh-bench audit`: what a flood of denied connection attempts into a namespace with
//! audit logging costs everyone else. A 3-node `NetnsLab` (userspace datapath) with the real
//! controller (networkpolicy mode, `policyAuditConfig.rateLimit` `--rate`, default 20) and
//! shims; `shop/web` on node1 isolated by a policy, `shop` logging both verdicts; `tools/client`
//! on node2 and `tools/other` on node1 (no policy, no logging).
//!
//! Each of `--runs` rounds (default 3) times `--probes` TCP request/response exchanges (default
//! 200, each a new connection: connect, send, the answer) from client to other quietly, then
//! as many as fit (at least `--probes`) while client sends web `--syns` denied SYNs (default
//! 10,000, each its own connection and so its own audit event) at `--flood-rate` per second
//! (default 3000). The figures are the flooded latency over the quiet one in the same round
//! (p50 and p99; min/median/max over the rounds), and the most audit lines node1 wrote in one
//! second (at most `--rate` when the meter works).
//!
//! The controller and shim binaries come from `FLOWMESH_CONTROLLER_BIN_DIR` and
//! `FLOWMESH_SHIM_BIN_DIR` (required, e.g. both `target/release`).
//!
//! Ends with one line: `runs= probes= rate_limit= syns= flood_rate= syns_sent_min=
//! quiet_p50_ms= flood_p50_ms= ratio_p50_min= ratio_p50_median= ratio_p50_max= ratio_p99_min=
//! ratio_p99_median= ratio_p99_max= lines= max_lines_per_s= failed_probes=` (the latencies
//! are medians over the rounds).

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use super::{arg_value, median};
use crate::audit::{max_lines_per_second, syn_flood};
use crate::e2e::{tcp_probe, CniCluster, ControllerOptions};

const PORT: u16 = 8080;

fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// A TCP server on `ip:port` in namespace `ns` that blocks in `accept` (the harness's
/// `TcpServer` polls every 10 ms, which would hide a sub-millisecond exchange under its
/// poll): reads each connection to its end and answers `ok`. Runs until the process exits.
fn blocking_server(ns: &str, ip: std::net::Ipv4Addr, port: u16) -> Result<(), String> {
    use std::io::{Read, Write};
    let l = crate::tcp::in_netns(ns, move || {
        std::net::TcpListener::bind((ip, port)).map_err(|source| crate::HarnessError::Net {
            context: format!("bind {ip}:{port}"),
            source,
        })
    })
    .map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = Vec::new();
            if s.read_to_end(&mut buf).is_ok() {
                let _ = s.write_all(b"ok");
            }
        }
    });
    Ok(())
}

/// `n` exchanges from `ns` to `to`: their times in ms, and how many failed.
fn probes(ns: &str, to: SocketAddrV4, n: u32) -> (Vec<f64>, u32) {
    let mut ms = Vec::with_capacity(n as usize);
    let mut failed = 0;
    for _ in 0..n {
        let t = Instant::now();
        match tcp_probe(ns, to, b"hello", Duration::from_secs(3)) {
            Ok(Some(r)) if !r.is_empty() => ms.push(t.elapsed().as_secs_f64() * 1000.0),
            _ => failed += 1,
        }
    }
    (ms, failed)
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let runs: u32 = arg_value(args, "--runs", 3)?;
    let n: u32 = arg_value(args, "--probes", 200)?;
    let rate: u32 = arg_value(args, "--rate", 20)?;
    let flood_rate: u32 = arg_value(args, "--flood-rate", 3000)?;
    let syns: usize = arg_value(args, "--syns", 10_000)?;
    if runs == 0 || n < 10 || rate == 0 || flood_rate == 0 || syns == 0 {
        return Err(
            "--runs, --rate, --syns and --flood-rate must be positive, --probes at least 10".into(),
        );
    }
    for var in ["FLOWMESH_CONTROLLER_BIN_DIR", "FLOWMESH_SHIM_BIN_DIR"] {
        if std::env::var_os(var).is_none() {
            return Err(format!(
                "set {var} to the directory of the binaries to measure (e.g. target/release after \
                 cargo build --release -p controller -p flowmeshctl -p agent-shim)"
            ));
        }
    }
    let mut opts = ControllerOptions::networkpolicy();
    opts.log = "warn".into();
    opts.config_yaml += &format!("policyAuditConfig:\n  rateLimit: {rate}\n");
    let c = CniCluster::start(&opts);
    let ctl = |a: &[&str]| -> Result<String, String> {
        c.ctl
            .ctl(&c.lab, a)
            .map_err(|e| format!("flowmeshctl {a:?}: {e}"))
    };
    let write = |name: &str, yaml: &str| -> Result<String, String> {
        let p = c.lab.run_dir().join(name);
        std::fs::write(&p, yaml).map_err(|e| e.to_string())?;
        Ok(p.display().to_string())
    };
    let ns = write(
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tools\n",
    )?;
    ctl(&["apply", "-f", &ns])?;
    ctl(&[
        "annotate",
        "namespace",
        "shop",
        r#"k8s.ovn.org/acl-logging={"deny": "alert", "allow": "notice"}"#,
    ])?;
    let pod = |node: usize, ns: &str, name: &str| {
        crate::cni::add_pod_via_cni(&c.lab, node, &c.shims[node - 1], ns, name)
            .map_err(|e| format!("pod {ns}/{name}: {e:?}"))
    };
    let web = pod(1, "shop", "web")?;
    let client = pod(2, "tools", "client")?;
    let other = pod(1, "tools", "other")?;
    blocking_server(&other.ns, other.ip, PORT)?;
    let policy = write(
        "policy.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny-all\n  \
         namespace: shop\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
    )?;
    ctl(&["apply", "-f", &policy])?;
    c.wait_all_synced("policy");
    let to = SocketAddrV4::new(other.ip, PORT);
    let (mut r50, mut r99) = (Vec::new(), Vec::new());
    let (mut quiet50, mut flood50) = (Vec::new(), Vec::new());
    let mut failed_total = 0;
    let mut syns_sent = Vec::new();
    for run in 1..=runs {
        let (mut quiet, f1) = probes(&client.ns, to, n);
        // The flood: `--syns` denied connection attempts at `--flood-rate`; the probes run
        // for as long as it lasts (at least `--probes` of them).
        let flooder = {
            let (ns, dst) = (client.ns.clone(), SocketAddrV4::new(web.ip, 9999));
            std::thread::spawn(move || syn_flood(&ns, dst, syns, flood_rate))
        };
        let (mut flooded, mut f2) = (Vec::new(), 0);
        while !flooder.is_finished() || flooded.len() + (f2 as usize) < n as usize {
            let (ms, f) = probes(&client.ns, to, 1);
            flooded.extend(ms);
            f2 += f;
        }
        let report = flooder
            .join()
            .map_err(|_| "flood thread panicked".to_string())?
            .map_err(|e| format!("flood: {e}"))?;
        let sent = report.sent;
        syns_sent.push(sent);
        failed_total += f1 + f2;
        let (q50, q99) = (percentile(&mut quiet, 0.5), percentile(&mut quiet, 0.99));
        let (l50, l99) = (
            percentile(&mut flooded, 0.5),
            percentile(&mut flooded, 0.99),
        );
        println!(
            "run {run}: quiet p50 {q50:.2} ms p99 {q99:.2} ms; during a flood of {sent} SYNs p50 {l50:.2} ms p99 {l99:.2} ms"
        );
        r50.push(l50 / q50);
        r99.push(l99 / q99);
        quiet50.push(q50);
        flood50.push(l50);
    }
    let lines: Vec<String> = std::fs::read_to_string(crate::cni::audit_log_path(&c.lab, 1))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let max_lines = max_lines_per_second(&lines);
    if let Some(l) = lines.last() {
        println!("last audit line on node1: {l}");
    }
    let stat = |v: &[f64]| {
        let s = sorted(v);
        (
            s.first().copied().unwrap_or(f64::NAN),
            median(&s),
            s.last().copied().unwrap_or(f64::NAN),
        )
    };
    let (a0, a1, a2) = stat(&r50);
    let (b0, b1, b2) = stat(&r99);
    println!(
        "runs={runs} probes={n} rate_limit={rate} syns={syns} flood_rate={flood_rate} syns_sent_min={} quiet_p50_ms={:.3} flood_p50_ms={:.3} ratio_p50_min={a0:.3} ratio_p50_median={a1:.3} ratio_p50_max={a2:.3} ratio_p99_min={b0:.3} ratio_p99_median={b1:.3} ratio_p99_max={b2:.3} lines={} max_lines_per_s={max_lines} failed_probes={failed_total}",
        syns_sent.iter().min().copied().unwrap_or(0),
        median(&quiet50),
        median(&flood50),
        lines.len()
    );
    Ok(())
}
