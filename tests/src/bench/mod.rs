//! flowmesh-bench subcommands, one module each; `flowmesh-bench SUBCOMMAND [ARGS]`.

pub mod attach;
pub mod audit;
pub mod churn;
pub mod compute;
pub mod egressfw;
pub mod egressip;
pub mod flows;
pub mod hostile;
pub mod netpol;
pub mod opshape;
pub mod podready;
pub mod push;
pub mod scale;
pub mod soak;
pub mod takeover;

/// `--openflow-max-connections-per-peer` for a controller that `switches` bridges connect to
/// from 127.0.0.1, with room for their reconnects (the default, 32 per address, is for real
/// clusters, where every node connects from its own address).
pub(crate) fn per_peer_flag(switches: u32) -> [String; 2] {
    [
        "--openflow-max-connections-per-peer".to_string(),
        (u64::from(switches) * 2 + 64).to_string(),
    ]
}

/// Waits (up to 20 s) until the controller `who` accepts connections on `grpc`.
pub(crate) async fn wait_listening(grpc: std::net::SocketAddr, who: &str) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(grpc).is_err() {
        if std::time::Instant::now() > deadline {
            return Err(format!("{who} did not start"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Value of `--name N` in `args`, parsed, or `default`.
pub fn arg_value<T: std::str::FromStr>(
    args: &[String],
    name: &str,
    default: T,
) -> Result<T, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name}: cannot parse {v:?}"))
        }
    }
}

/// One counter or gauge from a flowmesh metrics endpoint (`/metrics` at `addr`); 0 when it is
/// absent or the endpoint does not answer.
pub fn scrape_metric(addr: std::net::SocketAddr, name: &str) -> u64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// The controller's `flowmesh_phase_seconds` summary from `/metrics` at `addr`: phase →
/// (sum in seconds, count); empty when the endpoint does not answer.
pub fn scrape_phases(addr: std::net::SocketAddr) -> std::collections::BTreeMap<String, (f64, u64)> {
    use std::io::{Read, Write};
    let mut out = std::collections::BTreeMap::new();
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return out;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    for l in body.lines() {
        let Some(rest) = l.strip_prefix("flowmesh_phase_seconds_") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once("{phase=\"") else {
            continue;
        };
        let Some((phase, value)) = rest.split_once("\"} ") else {
            continue;
        };
        let e: &mut (f64, u64) = out.entry(phase.to_owned()).or_default();
        match kind {
            "sum" => e.0 = value.trim().parse().unwrap_or(0.0),
            "count" => e.1 = value.trim().parse().unwrap_or(0),
            _ => {}
        }
    }
    out
}

/// Register nodes `n0` … `n{switches-1}` (datapath ids `0x1000 + i`, underlay addresses
/// 172.31.x.y), the names the benchmarks give their sandbox bridges.
pub async fn add_bench_nodes(
    admin: &mut proto::admin::admin_client::AdminClient<tonic::transport::Channel>,
    switches: u32,
) -> Result<(), String> {
    for i in 0..switches {
        admin
            .add_node(proto::admin::AddNodeRequest {
                name: format!("n{i}"),
                node_ip: format!("172.31.{}.{}", i / 250, i % 250 + 1),
                dpid: 0x1000 + u64::from(i),
            })
            .await
            .map_err(|e| format!("add node n{i}: {}", e.message()))?;
    }
    Ok(())
}

/// Median of a non-empty list (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Peak resident memory of this process in MiB (VmHWM), if readable.
pub fn peak_rss_mib() -> Option<f64> {
    status_file_mib("/proc/self/status", "VmHWM:")
}

/// A field of /proc/PID/status in MiB (`VmRSS:`, `VmHWM:`), if readable.
pub fn status_mib(pid: u32, field: &str) -> Option<f64> {
    status_file_mib(&format!("/proc/{pid}/status"), field)
}

fn status_file_mib(path: &str, field: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// User + system CPU time of process `pid` so far, seconds, from /proc/PID/stat (None once
/// it is gone).
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // /proc reports clock ticks of USER_HZ, which Linux fixes at 100 for user space.
    Some((utime + stime) / 100.0)
}
