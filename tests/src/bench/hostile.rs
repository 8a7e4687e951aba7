//! `flowmesh-bench hostile`: pod attach latency (admin API call → flows acknowledged by the
//! pod's switch) with and without `--hostile` hostile OpenFlow connections, in the same run
//! against the same controller and switches (`attach`'s cluster: the real
//! `flowmesh-controller`, one dummy-datapath bridge per node). The two conditions alternate
//! over `--rounds` rounds; in each "with" round the hostile peers (`crate::hostile`) connect
//! first (and those that handshake have done so) and stay connected while its attaches run,
//! and are gone before the next "without" round. They run on a runtime (thread) of their own, so their work does not queue behind
//! the measuring client. The mix, from 20 loopback addresses 127.0.0.2.. (the real switches
//! connect from 127.0.0.1):
//! * 60%: complete the handshake with an unclaimed datapath id and answer nothing but echoes
//!   (a read of their table would never finish);
//! * 10%: claim the datapath id of a real node (each one makes the controller send the real
//!   switch an echo and refuse the claim);
//! * 10%: flood 20,000 PORT_STATUS adds after the handshake (past the port limit);
//! * 20%: connect and send nothing (held until the 10 s handshake timeout).
//!
//! The figure is the ratio of the two p99s (`ratio_p99`).

use super::attach::{attach_request, percentile, Cluster};
use super::{arg_value, median};
use crate::hostile::{HostilePeer, HostileSpec};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// The hostile peers of one "with" round, on a runtime of their own.
struct Crowd {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<CrowdReport, String>>>,
}

/// What the crowd saw when it was dismissed.
#[derive(Debug, Default)]
struct CrowdReport {
    connected: usize,
    closed_by_controller: usize,
}

impl Crowd {
    /// Connects `n` peers to `openflow` (spoofers claim datapath ids of `real_dpids`) and
    /// returns once every one of them is connected.
    fn start(openflow: SocketAddr, n: u32, real_dpids: Vec<u64>) -> Result<Crowd, String> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("hostile-crowd".into())
            .spawn(move || -> Result<CrowdReport, String> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                rt.block_on(async move {
                    let mut peers = Vec::new();
                    for i in 0..n {
                        let spec = match i % 10 {
                            0..=5 => HostileSpec::handshake(0xbad0_0000 + u64::from(i)),
                            6 => HostileSpec::handshake(
                                real_dpids
                                    .get(i as usize % real_dpids.len().max(1))
                                    .copied()
                                    .unwrap_or(1),
                            ),
                            7 => HostileSpec::handshake(0xbad1_0000 + u64::from(i))
                                .port_flood(20_000),
                            _ => HostileSpec::silent(),
                        };
                        let from = IpAddr::from([127, 0, 0, 2 + (i % 20) as u8]);
                        match HostilePeer::connect(openflow, spec.from(from)).await {
                            Ok(p) => peers.push(p),
                            Err(e) => {
                                let _ = ready_tx.send(Err(format!("hostile peer {i}: {e}")));
                                return Err(e.to_string());
                            }
                        }
                    }
                    // Settled: every peer that handshakes has done so (or been closed).
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while !peers
                        .iter()
                        .enumerate()
                        .all(|(i, p)| i % 10 >= 8 || p.handshaken() || p.closed())
                    {
                        if Instant::now() > deadline {
                            let _ = ready_tx.send(Err(
                                "hostile peers did not complete their handshakes within 30 s"
                                    .into(),
                            ));
                            return Err("handshakes".into());
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let _ = ready_tx.send(Ok(()));
                    let _ = stopped.await;
                    Ok(CrowdReport {
                        connected: peers.len(),
                        closed_by_controller: peers.iter().filter(|p| p.closed()).count(),
                    })
                })
            })
            .map_err(|e| e.to_string())?;
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|e| format!("hostile peers did not connect: {e}"))??;
        Ok(Crowd {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Closes every peer's connection.
    fn dismiss(mut self) -> Result<CrowdReport, String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the hostile crowd's thread panicked".into()),
            None => Ok(CrowdReport::default()),
        }
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits (up to 60 s) until exactly `n` unclaimed datapaths are connected.
async fn wait_unknown(c: &mut Cluster, n: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = c
            .admin
            .list_switches(proto::admin::Empty {})
            .await
            .map_err(|e| e.to_string())?
            .into_inner()
            .items
            .iter()
            .filter(|s| s.unknown && s.connected)
            .count();
        if now == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{now} unclaimed datapaths connected after 60 s, expected {n}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let switches: u32 = arg_value(args, "--switches", 20)?;
    let hostile: u32 = arg_value(args, "--hostile", 500)?;
    let attaches: u32 = arg_value(args, "--attaches", 400)?;
    let rounds: u32 = arg_value(args, "--rounds", 4)?;
    if switches == 0 || attaches == 0 || rounds == 0 {
        return Err("--switches, --attaches and --rounds must be at least 1".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run(switches, hostile, attaches, rounds))
}

async fn run(switches: u32, hostile: u32, attaches: u32, rounds: u32) -> Result<(), String> {
    // Every attach of both conditions gets a pod port of its own.
    let per_round = attaches.div_ceil(rounds);
    let per_node = (2 * per_round * rounds).div_ceil(switches);
    let mut c = Cluster::start("hostile", switches, per_node, 1).await?;
    let openflow = c.openflow;
    let real: Vec<u64> = (0..switches).map(|i| 0x1000 + u64::from(i)).collect();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut slot = 0u32;
    let mut reports = Vec::new();
    for _ in 0..rounds {
        for hostile_round in [false, true] {
            let crowd = match hostile_round {
                true => Some(Crowd::start(openflow, hostile, real.clone())?),
                false => None,
            };
            // The controller has taken in the crowd (or seen it go): its unclaimed datapaths
            // are listed, so the round measures connected peers, not their arrival.
            let unknown = if hostile_round { hostile * 6 / 10 } else { 0 };
            wait_unknown(&mut c, unknown as usize).await?;
            for _ in 0..per_round {
                let (i, p) = (slot % switches, slot / switches);
                slot += 1;
                let t = Instant::now();
                c.admin
                    .attach_pod(attach_request(i, p))
                    .await
                    .map_err(|e| format!("attach n{i}/p{p}: {}", e.message()))?;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if hostile_round {
                    with.push(ms);
                } else {
                    without.push(ms);
                }
            }
            if let Some(crowd) = crowd {
                reports.push(crowd.dismiss()?);
            }
        }
    }
    // The real switches are still all connected and in sync.
    let sw = c
        .admin
        .list_switches(proto::admin::Empty {})
        .await
        .map_err(|e| e.to_string())?
        .into_inner()
        .items;
    let synced = sw
        .iter()
        .filter(|s| !s.unknown && s.connected && s.synced)
        .count();
    if synced != switches as usize {
        return Err(format!(
            "only {synced} of {switches} real switches are connected and in sync afterwards"
        ));
    }
    let p99_without = percentile(&without, 0.99);
    let p99_with = percentile(&with, 0.99);
    let closed: usize = reports.iter().map(|r| r.closed_by_controller).sum();
    let connected: usize = reports.iter().map(|r| r.connected).sum();
    println!(
        "{switches} real switches; {rounds} rounds of {per_round} attaches without and with {hostile} hostile connections"
    );
    println!(
        "without: p50 {:.3} ms, p99 {p99_without:.3} ms; with: p50 {:.3} ms, p99 {p99_with:.3} ms",
        median(&without),
        median(&with)
    );
    println!(
        "hostile connections made {connected}, closed by the controller while the round ran {closed} (port floods, refused spoofers, handshake timeouts)"
    );
    println!(
        "switches={switches} hostile={hostile} attaches_each={} p50_without_ms={:.3} p50_with_ms={:.3} p99_without_ms={p99_without:.3} p99_with_ms={p99_with:.3} ratio_p99={:.2}",
        without.len(),
        median(&without),
        median(&with),
        p99_with / p99_without.max(1e-9)
    );
    Ok(())
}
