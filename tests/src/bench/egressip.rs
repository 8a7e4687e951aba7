//! `flowmesh-bench egressip`: egress-IP failover with real packets. A 3-node `NetnsLab`
//! (userspace datapath) with the real controller (its defaults, or `--echo-interval SECS`) and shims,
//! an "outside" host on the underlay recording the source of every UDP datagram, namespace
//! `shop` with one egress IP placed automatically (egressCIDRs on nodes 2 and 3) and a pod on
//! node1 sending a numbered datagram every `--probe-interval-ms` (default 20).
//!
//! `--kills` times (default 10): the node holding the IP is killed (underlay link down, then
//! its shim and ovs-vswitchd stopped); the failover time is from the link going down to the
//! first probe that arrives from the egress IP again (through the other node; the probe
//! interval bounds its resolution); then the node is brought back and the switches resynced.
//! A probe seen from a node's own address counts as leaked.
//!
//! The controller and shim binaries come from `FLOWMESH_CONTROLLER_BIN_DIR` and
//! `FLOWMESH_SHIM_BIN_DIR` (required here: the harness's build-on-demand expects a test
//! executable under `target/<profile>/deps/`), e.g. both `target/release`.
//!
//! Ends with one line: `kills= failover_min_ms= failover_p50_ms= failover_max_ms=
//! failover_mean_ms= missed= leaked_probes= echo_interval_s= probe_interval_ms=`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::{arg_value, median};
use crate::e2e::{CniCluster, ControllerOptions};
use crate::egress::{
    add_outside_host, failover, kill_node, revive_node, underlay_addr, wait_for, Prober,
    UdpRecorder,
};

const UDP_PORT: u16 = 9100;

fn placed_on(c: &CniCluster, ip: Ipv4Addr) -> Result<usize, String> {
    let shown = c
        .ctl
        .ctl(&c.lab, &["get", "netnamespaces", "shop"])
        .map_err(|e| e.to_string())?;
    let tag = format!("{ip}@node");
    let at = shown
        .find(&tag)
        .ok_or_else(|| format!("{ip} is not placed: {shown}"))?
        + tag.len();
    shown[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .map_err(|_| format!("cannot read the egress node of {ip}: {shown}"))
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let kills: u32 = arg_value(args, "--kills", 10)?;
    // The controller's own defaults unless given (its egress probe detects a lost node; a
    // controller without one, e.g. a build before issue 34, needs a short echo interval).
    let echo: f64 = arg_value(args, "--echo-interval", 0.0)?;
    let probe_ms: u64 = arg_value(args, "--probe-interval-ms", 20)?;
    if kills == 0 {
        return Err("--kills must be at least 1".into());
    }
    if echo != 0.0 && !(0.05..=60.0).contains(&echo) {
        return Err("--echo-interval is 0.05 to 60 seconds".into());
    }
    if !(1..=1000).contains(&probe_ms) {
        return Err("--probe-interval-ms is 1 to 1000".into());
    }
    for var in ["FLOWMESH_CONTROLLER_BIN_DIR", "FLOWMESH_SHIM_BIN_DIR"] {
        if std::env::var_os(var).is_none() {
            return Err(format!(
                "set {var} to the directory of the binaries to measure (e.g. target/release after \
                 cargo build --release -p controller -p flowmeshctl -p agent-shim)"
            ));
        }
    }
    let mut opts = ControllerOptions::multitenant();
    opts.log = "warn".into();
    if echo != 0.0 {
        opts.extra = vec!["--echo-interval".into(), echo.to_string()];
    }
    let mut c = CniCluster::start(&opts);
    let e = |what: &str| {
        let what = what.to_owned();
        move |err: crate::error::HarnessError| format!("{what}: {err}")
    };
    let ctl = |c: &CniCluster, a: &[&str]| -> Result<String, String> {
        c.ctl
            .ctl(&c.lab, a)
            .map_err(|err| format!("flowmeshctl {a:?}: {err}"))
    };
    ctl(&c, &["namespace", "create", "shop"])?;
    let pod =
        crate::cni::add_pod_via_cni(&c.lab, 1, &c.shims[0], "shop", "shop-1").map_err(e("pod"))?;
    let (out_ns, out_ip) = add_outside_host(&c.lab).map_err(e("outside host"))?;
    let rec = UdpRecorder::start(&out_ns, out_ip, UDP_PORT).map_err(e("recorder"))?;
    let eip = underlay_addr(&c.lab, 100);
    let range = format!("--egress-cidrs={}/24", underlay_addr(&c.lab, 0));
    for n in ["node2", "node3"] {
        ctl(&c, &["patch", "hostsubnet", n, &range])?;
    }
    ctl(
        &c,
        &[
            "patch",
            "netnamespace",
            "shop",
            &format!("--egress-ips={eip}"),
        ],
    )?;
    let node_ips: Vec<Ipv4Addr> = (1..=3).map(|i| c.lab.underlay_ip(i)).collect();
    let _prober = Prober::start(
        &pod.ns,
        SocketAddrV4::new(out_ip, UDP_PORT),
        Duration::from_millis(probe_ms),
    )
    .map_err(e("prober"))?;
    wait_for(Duration::from_secs(15), || {
        rec.arrivals().iter().any(|a| a.src == eip).then_some(())
    })
    .ok_or("probes never arrived from the egress IP")?;
    let mut gaps_ms = Vec::new();
    let mut missed = 0u32;
    for k in 1..=kills {
        std::thread::sleep(Duration::from_millis(500));
        let victim = placed_on(&c, eip)?;
        let t0 = Instant::now();
        let killed = kill_node(&mut c, victim).map_err(e("kill"))?;
        let f = wait_for(Duration::from_secs(15), || {
            let f = failover(&rec.arrivals(), killed, eip, &node_ips);
            f.gap.is_some().then_some(f)
        });
        match f.and_then(|f| f.gap) {
            Some(g) => {
                let ms = g.as_secs_f64() * 1000.0;
                println!("kill {k}: node{victim} down, failover {ms:.0} ms");
                gaps_ms.push(ms);
            }
            None => {
                println!("kill {k}: node{victim} down, no probe from {eip} within 15 s");
                missed += 1;
            }
        }
        revive_node(&mut c, victim).map_err(e("revive"))?;
        c.ctl
            .wait_synced(
                &c.lab,
                &["node1", "node2", "node3"],
                Duration::from_secs(30),
            )
            .map_err(e("resync"))?;
        println!(
            "kill {k}: node{victim} back and synced after {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    let arrivals = rec.arrivals();
    let leaked = arrivals
        .iter()
        .filter(|a| a.seq > 0 && node_ips.contains(&a.src))
        .count();
    let (min, p50, max, mean) = if gaps_ms.is_empty() {
        (0.0, 0.0, 0.0, 0.0)
    } else {
        (
            gaps_ms.iter().copied().fold(f64::INFINITY, f64::min),
            median(&gaps_ms),
            gaps_ms.iter().copied().fold(0.0, f64::max),
            gaps_ms.iter().sum::<f64>() / gaps_ms.len() as f64,
        )
    };
    println!(
        "kills={kills} failover_min_ms={min:.0} failover_p50_ms={p50:.0} failover_max_ms={max:.0} failover_mean_ms={mean:.0} missed={missed} leaked_probes={leaked} probes_seen={} echo_interval_s={} probe_interval_ms={probe_ms}",
        arrivals.len(),
        if echo == 0.0 {
            "default".to_string()
        } else {
            echo.to_string()
        }
    );
    Ok(())
}
