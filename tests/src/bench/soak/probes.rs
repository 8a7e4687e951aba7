//! The soak's probes, none of them flowmesh code: real TCP connections and UDP exchanges
//! between pods' namespaces every round (pairs drawn from the seed, judged later against the
//! truth table), fixed probes (egress firewall, egress-IP source, multicast), and established
//! TCP streams between the `steady` pods that must never stall.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::e2e::{tcp_probe, udp_probe};
use crate::tcp::{enter_netns, in_netns};

use super::cluster::{lock, Cluster, EGRESS_NODE, OUTSIDE_TCP, OUTSIDE_UDP};
use super::history::History;
use super::judge::{Pause, ProbeRec, Sched, Stall, Target};
use super::truth::{PodKey, Proto};
use super::workload::{PodRun, World, TCP_PORT, UDP_PORT};

/// Multicast group and port of the `mc` project's probe.
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 7, 7, 7);
const MC_PORT: u16 = 5007;
/// Port of the established streams' echo servers.
const STREAM_PORT: u16 = 7007;
/// Underlay host numbers of the control stream's ends.
const CONTROL_HOSTS: (u8, u8) = (103, 104);
/// A round trip of an established stream slower than this is a stall (one lost packet's
/// retransmission on a busy machine stays under it).
pub const STALL: Duration = Duration::from_millis(1_000);
/// The pause monitor's tick.
const TICK: Duration = Duration::from_millis(20);
/// A tick this much late is a pause of the bench itself.
pub const PAUSED: Duration = Duration::from_millis(300);
/// Connect / answer deadline of one probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1_500);

/// What the probes recorded.
#[derive(Default)]
pub struct Recorded {
    /// Probe results.
    pub probes: Mutex<Vec<ProbeRec>>,
    /// Stalls of the established streams.
    pub stalls: Mutex<Vec<Stall>>,
    /// Round trips of the established streams.
    pub stream_round_trips: Mutex<u64>,
    /// Times the bench itself was not scheduled (see [`pause_monitor`]).
    pub pauses: Mutex<Vec<Pause>>,
    /// Stalls of the control stream (no Open vSwitch on its path).
    pub control: Mutex<Vec<Stall>>,
    /// Intervals of the nodes' `ovs-vswitchd` main threads (see [`super::sched`]).
    pub sched: Mutex<Vec<Sched>>,
}

/// How the prober draws its rounds.
#[derive(Debug, Clone, Copy)]
pub struct ProbePlan {
    /// Seed of the pairs.
    pub seed: u64,
    /// Pod pairs per round.
    pub pairs: usize,
    /// A round starts at most this often.
    pub every: Duration,
}

struct Job {
    target: Target,
    nodes: Vec<usize>,
    kind: JobKind,
}

enum JobKind {
    Tcp {
        ns: String,
        dst: SocketAddrV4,
    },
    Udp {
        ns: String,
        dst: SocketAddrV4,
    },
    EgressSource {
        ns: String,
    },
    Multicast {
        sender: Arc<PodRun>,
        rx: Arc<McReceiver>,
        tag: String,
    },
}

/// Probe rounds until `stop`: `pairs` pod pairs drawn from the seed plus the fixed probes, all
/// at once on a few threads, a round starting every `every` at most.
pub fn prober(
    c: &Cluster,
    h: &History,
    world: &Mutex<World>,
    rec: &Recorded,
    plan: ProbePlan,
    stop: &AtomicBool,
) -> Result<(), String> {
    let ProbePlan { seed, pairs, every } = plan;
    let mut rng = StdRng::seed_from_u64(seed);
    let pod = |k: &str| -> Result<Arc<PodRun>, String> {
        let key = match k.split_once('/') {
            Some((a, b)) => (a.to_owned(), b.to_owned()),
            None => return Err(format!("bad pod key {k}")),
        };
        lock(world)
            .pods
            .get(&key)
            .cloned()
            .ok_or_else(|| format!("fixed pod {k} missing"))
    };
    let mc_rx = Arc::new(McReceiver::start(&*pod("mc/mc-3")?)?);
    let mc_outsider = Arc::new(McReceiver::start(&*pod("steady/steady-3")?)?);
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        round += 1;
        let (keys, runs): (Vec<PodKey>, Vec<Arc<PodRun>>) = {
            let w = lock(world);
            w.pods
                .iter()
                .map(|(k, r)| (k.clone(), Arc::clone(r)))
                .unzip()
        };
        let mut jobs = Vec::new();
        for _ in 0..pairs.min(keys.len() * keys.len().saturating_sub(1)) {
            let i = rng.random_range(0..keys.len());
            let mut j = rng.random_range(0..keys.len() - 1);
            if j >= i {
                j += 1;
            }
            let proto = if rng.random_bool(0.5) {
                Proto::Tcp
            } else {
                Proto::Udp
            };
            let (port, kind) = match proto {
                Proto::Tcp => (
                    TCP_PORT,
                    JobKind::Tcp {
                        ns: runs[i].netns.clone(),
                        dst: SocketAddrV4::new(runs[j].ip, TCP_PORT),
                    },
                ),
                Proto::Udp => (
                    UDP_PORT,
                    JobKind::Udp {
                        ns: runs[i].netns.clone(),
                        dst: SocketAddrV4::new(runs[j].ip, UDP_PORT),
                    },
                ),
            };
            jobs.push(Job {
                target: Target::Pod {
                    src: keys[i].clone(),
                    dst: keys[j].clone(),
                    proto,
                    port,
                },
                nodes: vec![runs[i].node, runs[j].node],
                kind,
            });
        }
        let fw = pod("fw/fw-2")?;
        let steady1 = pod("steady/steady-1")?;
        let egress = pod("egress/egress-1")?;
        let mc1 = pod("mc/mc-1")?;
        let (a, b) = (
            SocketAddrV4::new(c.outside_a, OUTSIDE_TCP),
            SocketAddrV4::new(c.outside_b, OUTSIDE_TCP),
        );
        for (name, from, dst, allowed) in [
            ("fw/fw-2 -> outside B (egress firewall Deny)", &fw, b, false),
            ("fw/fw-2 -> outside A", &fw, a, true),
            ("steady/steady-1 -> outside B", &steady1, b, true),
        ] {
            jobs.push(Job {
                target: Target::Fixed {
                    name: name.into(),
                    allowed,
                },
                nodes: vec![from.node],
                kind: JobKind::Tcp {
                    ns: from.netns.clone(),
                    dst,
                },
            });
        }
        jobs.push(Job {
            target: Target::Fixed {
                name: "egress/egress-1 -> outside A from the egress IP".into(),
                allowed: true,
            },
            nodes: vec![egress.node, EGRESS_NODE],
            kind: JobKind::EgressSource {
                ns: egress.netns.clone(),
            },
        });
        jobs.push(Job {
            target: Target::Fixed {
                name: "multicast mc/mc-1 -> mc/mc-3".into(),
                allowed: true,
            },
            nodes: vec![1, 3],
            kind: JobKind::Multicast {
                sender: Arc::clone(&mc1),
                rx: Arc::clone(&mc_rx),
                tag: format!("r{round}"),
            },
        });
        jobs.push(Job {
            target: Target::Fixed {
                name: "multicast mc/mc-1 -> steady/steady-3 (another project)".into(),
                allowed: false,
            },
            nodes: vec![1, 3],
            kind: JobKind::Multicast {
                sender: mc1,
                rx: Arc::clone(&mc_outsider),
                tag: format!("o{round}"),
            },
        });
        let results = run_jobs(c, h, jobs, 6);
        for r in &results {
            h.log(
                "probe",
                serde_json::json!({
                    "target": format!("{:?}", r.target),
                    "nodes": r.nodes,
                    "start_ms": r.start_ms,
                    "end_ms": r.end_ms,
                    "ok": r.ok,
                    "wrong_source": r.wrong_source,
                }),
            );
        }
        lock(&rec.probes).extend(results);
        while t0.elapsed() < every && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

fn run_jobs(c: &Cluster, h: &History, jobs: Vec<Job>, threads: usize) -> Vec<ProbeRec> {
    let queue = Mutex::new(jobs);
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some(job) = lock(&queue).pop() else {
                    return;
                };
                let start_ms = h.ms();
                let (ok, wrong_source) = run_job(c, &job.kind);
                lock(&out).push(ProbeRec {
                    target: job.target,
                    nodes: job.nodes,
                    start_ms,
                    end_ms: h.ms(),
                    ok,
                    wrong_source,
                });
            });
        }
    });
    out.into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// (answered, answered from a wrong source address).
fn run_job(c: &Cluster, kind: &JobKind) -> (bool, bool) {
    match kind {
        JobKind::Tcp { ns, dst } => {
            let r = tcp_probe(ns, *dst, b"soak", PROBE_TIMEOUT);
            (matches!(r, Ok(Some(ref b)) if !b.is_empty()), false)
        }
        JobKind::Udp { ns, dst } => {
            let r = udp_probe(ns, *dst, b"soak", 3, PROBE_TIMEOUT / 3);
            (matches!(r, Ok(Some(_))), false)
        }
        JobKind::EgressSource { ns } => {
            let dst = SocketAddrV4::new(c.outside_a, OUTSIDE_UDP);
            match crate::egress::udp_source(ns, dst, 3, PROBE_TIMEOUT / 3) {
                Ok(Some(text)) => {
                    let src: Option<Ipv4Addr> = text
                        .strip_prefix("src=")
                        .and_then(|s| s.split(':').next())
                        .and_then(|s| s.parse().ok());
                    (true, src != Some(c.egress_ip))
                }
                _ => (false, false),
            }
        }
        JobKind::Multicast { sender, rx, tag } => {
            let (ip, ns, tag2) = (sender.ip, sender.netns.clone(), tag.clone());
            let sent = in_netns(&ns, move || {
                let io = |e: std::io::Error| {
                    crate::HarnessError::Invalid(format!("multicast send: {e}"))
                };
                let s = UdpSocket::bind((ip, 0)).map_err(io)?;
                s.set_multicast_loop_v4(false).map_err(io)?;
                for i in 0..3 {
                    s.send_to(
                        format!("{tag2}-{i}").as_bytes(),
                        SocketAddrV4::new(GROUP, MC_PORT),
                    )
                    .map_err(io)?;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(())
            });
            if sent.is_err() {
                return (false, false);
            }
            let t0 = Instant::now();
            while t0.elapsed() < PROBE_TIMEOUT {
                if rx.seen(tag) {
                    return (true, false);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (rx.seen(tag), false)
        }
    }
}

/// A multicast receiver in a pod: joins the group on the pod's address, records datagrams.
pub struct McReceiver {
    got: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl McReceiver {
    fn start(pod: &PodRun) -> Result<Self, String> {
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g2, s2) = (Arc::clone(&got), Arc::clone(&stop));
        let (ns, ip) = (pod.netns.clone(), pod.ip);
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        std::thread::spawn(move || {
            let sock = enter_netns(&ns).map_err(|e| e.to_string()).and_then(|()| {
                let s = UdpSocket::bind(("0.0.0.0", MC_PORT)).map_err(|e| format!("bind: {e}"))?;
                s.join_multicast_v4(&GROUP, &ip)
                    .map_err(|e| format!("join: {e}"))?;
                s.set_read_timeout(Some(Duration::from_millis(100)))
                    .map_err(|e| e.to_string())?;
                Ok(s)
            });
            let s = match sock {
                Ok(s) => {
                    let _ = tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut buf = [0u8; 1500];
            while !s2.load(Ordering::Relaxed) {
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    let text =
                        String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned();
                    lock(&g2).push(text);
                }
            }
        });
        rx.recv()
            .map_err(|_| "multicast receiver thread ended".to_owned())??;
        Ok(McReceiver { got, stop })
    }

    fn seen(&self, tag: &str) -> bool {
        let prefix = format!("{tag}-");
        lock(&self.got).iter().any(|d| d.starts_with(&prefix))
    }
}

impl Drop for McReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts an echo server on `ip` in namespace `netns` (every connection echoed on its own
/// thread).
fn echo_server(netns: &str, ip: Ipv4Addr, stop: Arc<AtomicBool>) -> Result<(), String> {
    let l = crate::cni::bind_tcp_in_netns(netns, (ip, STREAM_PORT).into())
        .map_err(|e| e.to_string())?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let stop = Arc::clone(&stop);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 4096];
                        while !stop.load(Ordering::Relaxed) {
                            match s.read(&mut buf) {
                                Ok(0) => return,
                                Ok(n) => {
                                    if s.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        ErrorKind::WouldBlock | ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => return,
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    Ok(())
}

/// Starts the established streams between the `steady` pods (1→2, 2→3, 3→1): a line every
/// 100 ms echoed back; a round trip over [`STALL`] or a broken connection is recorded as a
/// [`Stall`] from the last good round trip to the next one. And the control stream, the same
/// between two hosts of the lab's underlay, a Linux bridge: no Open vSwitch and nothing of
/// flowmesh on its path, so when it stalls the machine (its kernel, or the bench's own threads)
/// did not move packets. Returns once every stream has made a round trip.
pub fn start_streams<'s>(
    scope: &'s std::thread::Scope<'s, '_>,
    c: &Cluster,
    h: &'s History,
    world: &Mutex<World>,
    rec: &'s Recorded,
    stop: &'s AtomicBool,
    server_stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let get = |n: &str| -> Result<Arc<PodRun>, String> {
        lock(world)
            .pods
            .get(&("steady".to_owned(), n.to_owned()))
            .cloned()
            .ok_or_else(|| format!("steady pod {n} missing"))
    };
    let pods = [get("steady-1")?, get("steady-2")?, get("steady-3")?];
    for p in &pods {
        echo_server(&p.netns, p.ip, Arc::clone(&server_stop))?;
    }
    let (ctl_a, _) = c
        .lab
        .add_underlay_host("ctla", CONTROL_HOSTS.0)
        .map_err(|e| format!("control host A: {e}"))?;
    let (ctl_b, ctl_b_ip) = c
        .lab
        .add_underlay_host("ctlb", CONTROL_HOSTS.1)
        .map_err(|e| format!("control host B: {e}"))?;
    echo_server(&ctl_b, ctl_b_ip, Arc::clone(&server_stop))?;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut ends = Vec::new();
    for (i, j) in [(0usize, 1usize), (1, 2), (2, 0)] {
        ends.push(StreamEnds {
            name: format!("steady-{}->steady-{}", i + 1, j + 1),
            netns: pods[i].netns.clone(),
            dst: SocketAddrV4::new(pods[j].ip, STREAM_PORT),
            nodes: vec![pods[i].node, pods[j].node],
            control: false,
        });
    }
    ends.push(StreamEnds {
        name: "control ctla->ctlb".into(),
        netns: ctl_a,
        dst: SocketAddrV4::new(ctl_b_ip, STREAM_PORT),
        nodes: Vec::new(),
        control: true,
    });
    let n = ends.len();
    for e in ends {
        let tx = tx.clone();
        scope.spawn(move || stream(h, rec, stop, &e, tx));
    }
    drop(tx);
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(60)).map_err(|_| {
            "an established stream did not make its first round trip in 60 s".to_owned()
        })?;
    }
    Ok(())
}

/// The two ends of a stream.
struct StreamEnds {
    name: String,
    /// Namespace of the client.
    netns: String,
    /// The echo server.
    dst: SocketAddrV4,
    /// Nodes on its path (none for the control stream).
    nodes: Vec<usize>,
    /// The control stream: its stalls go to [`Recorded::control`].
    control: bool,
}

fn stream(
    h: &History,
    rec: &Recorded,
    stop: &AtomicBool,
    ends: &StreamEnds,
    ready: std::sync::mpsc::Sender<()>,
) {
    let dst = SocketAddr::V4(ends.dst);
    let (name, nodes) = (ends.name.as_str(), ends.nodes.clone());
    let ns = ends.netns.clone();
    let (event, sink) = if ends.control {
        ("control-stall", &rec.control)
    } else {
        ("stall", &rec.stalls)
    };
    let mut last_good = h.ms();
    let mut stalled: Option<u64> = None;
    let mut seq = 0u64;
    let mut first = Some(ready);
    let connect = || -> Option<TcpStream> {
        let ns = ns.clone();
        in_netns(&ns, move || {
            Ok(TcpStream::connect_timeout(&dst, Duration::from_secs(1)).ok())
        })
        .ok()
        .flatten()
    };
    let mut conn: Option<TcpStream> = None;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = connect();
            if let Some(s) = &conn {
                let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
                let _ = s.set_nodelay(true);
            } else {
                stalled.get_or_insert(last_good);
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        }
        let Some(s) = conn.as_mut() else { continue };
        seq += 1;
        let line = format!("{:08}\n", seq % 100_000_000);
        let mut broken = s.write_all(line.as_bytes()).is_err();
        let mut got = Vec::new();
        let sent = Instant::now();
        while !broken && got.len() < line.len() && !stop.load(Ordering::Relaxed) {
            let mut buf = [0u8; 64];
            match s.read(&mut buf[..line.len() - got.len()]) {
                Ok(0) => broken = true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if sent.elapsed() > STALL && stalled.is_none() {
                        stalled = Some(last_good);
                    }
                }
                Err(_) => broken = true,
            }
        }
        if broken || (got != line.as_bytes() && !stop.load(Ordering::Relaxed)) {
            h.log("stream-broken", serde_json::json!({"stream": name}));
            stalled.get_or_insert(last_good);
            conn = None;
            continue;
        }
        if got.len() < line.len() {
            break;
        }
        let now = h.ms();
        if let Some(since) = stalled.take() {
            let st = Stall {
                name: name.to_owned(),
                nodes: nodes.clone(),
                start_ms: since,
                end_ms: now,
            };
            h.log(
                event,
                serde_json::json!({"stream": name, "start_ms": since, "end_ms": now}),
            );
            lock(sink).push(st);
        }
        last_good = now;
        *lock(&rec.stream_round_trips) += 1;
        if let Some(tx) = first.take() {
            let _ = tx.send(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some(since) = stalled {
        let now = h.ms();
        lock(sink).push(Stall {
            name: name.to_owned(),
            nodes,
            start_ms: since,
            end_ms: now,
        });
    }
}

/// Records the times the bench process itself was not running (a thread sleeping [`TICK`]
/// woke [`PAUSED`] or more late: the machine's CPUs were taken by others). A stream's
/// thread paused with it sees a round trip "take" the pause: that is the prober's own
/// stall, not the network's, and the judge tells the two apart with these records.
pub fn pause_monitor(h: &History, rec: &Recorded, stop: &AtomicBool) {
    let mut last = Instant::now();
    let mut last_ms = h.ms();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        let (now, now_ms) = (Instant::now(), h.ms());
        if now.duration_since(last).saturating_sub(TICK) >= PAUSED {
            h.log(
                "bench-paused",
                serde_json::json!({"start_ms": last_ms, "end_ms": now_ms}),
            );
            lock(&rec.pauses).push(Pause {
                start_ms: last_ms,
                end_ms: now_ms,
            });
        }
        last = now;
        last_ms = now_ms;
    }
}
