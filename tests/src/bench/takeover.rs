//! `flowmesh-bench takeover`: leader failover with several controller replicas. A real 3-member
//! etcd cluster on loopback, `--replicas` controller processes on it (`--leader-ttl` seconds),
//! `--switches` Open vSwitch bridges connected to every replica, pods on each bridge. `--kills`
//! times: the leader is killed with SIGKILL while a writer creates namespaces through a standby;
//! the takeover time runs from the kill until every switch has granted one standby the master
//! role (its ROLE_REPLY, as that replica's `get switches` shows it); the flow-mods the standbys
//! sent meanwhile are counted (a hitless takeover sends none), the bridges' flows compared
//! before and after, and every acknowledged write looked for afterwards. The killed replica is
//! restarted and waits as a standby for the next round.

use super::arg_value;
use super::attach::{controller_bin, free_port};
use crate::{BridgeSpec, EtcdCluster, OvsSandbox};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// What to run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Leader kills.
    pub kills: usize,
    /// Bridges (one node each).
    pub switches: u32,
    /// Controller replicas.
    pub replicas: usize,
    /// `--leader-ttl` of every replica, seconds.
    pub leader_ttl: u32,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Kill → every switch granted a standby master, per kill.
    pub takeovers: Vec<Duration>,
    /// Flow and group mods the standbys sent across all takeovers.
    pub flow_mods_on_takeover: u64,
    /// Kills after which some bridge's flows differed from before.
    pub flows_changed: usize,
    /// Namespaces acknowledged to the writer.
    pub acked_writes: usize,
    /// Acknowledged namespaces missing afterwards.
    pub lost_writes: usize,
}

impl Report {
    /// The one `key=value` line.
    pub fn line(&self) -> String {
        let mut t = self.takeovers.clone();
        t.sort();
        let ms = |i: usize| t.get(i).map(|d| d.as_millis()).unwrap_or(0);
        format!(
            "takeover_min_ms={} takeover_p50_ms={} takeover_max_ms={} kills={} flow_mods_on_takeover={} flows_changed={} lost_writes={} acked_writes={}",
            ms(0),
            ms(t.len() / 2),
            ms(t.len().saturating_sub(1)),
            t.len(),
            self.flow_mods_on_takeover,
            self.flows_changed,
            self.lost_writes,
            self.acked_writes
        )
    }
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let s = Settings {
        kills: arg_value(args, "--kills", 10)?,
        switches: arg_value(args, "--switches", 3)?,
        replicas: arg_value(args, "--replicas", 3)?,
        leader_ttl: arg_value(args, "--leader-ttl", 3)?,
    };
    if s.replicas < 2 {
        return Err("--replicas: at least 2 (a leader and a standby)".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let report = rt.block_on(run(&s, |line| println!("{line}")))?;
    println!("{}", report.line());
    Ok(())
}

/// One controller replica, restartable on its ports.
struct Replica {
    id: String,
    args: Vec<String>,
    grpc: SocketAddr,
    of: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let child = Command::new(controller_bin()?)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting flowmesh-controller {}: {e}", self.id))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(self.grpc).is_err() {
            if Instant::now() > deadline {
                return Err(format!("flowmesh-controller {} did not start", self.id));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// SIGKILL (no resignation), reaped.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn admin(&self) -> Result<AdminClient<Channel>, String> {
        AdminClient::connect(format!("http://{}", self.grpc))
            .await
            .map_err(|e| format!("{}: {e}", self.id))
    }

    /// How many switches granted this replica `role` (0 when it does not answer).
    async fn granted(&self, role: &str) -> usize {
        let Ok(mut a) = self.admin().await else {
            return 0;
        };
        let Ok(sw) = a.list_switches(pa::Empty {}).await else {
            return 0;
        };
        sw.into_inner()
            .items
            .iter()
            .filter(|s| !s.unknown && s.connected && s.role == role)
            .count()
    }

    /// A counter of its metrics endpoint (0 when unreachable).
    fn metric(&self, name: &str) -> u64 {
        super::scrape_metric(self.metrics, name)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

const MODS: &str = "flowmesh_flow_mods_sent_total";

async fn until(
    what: &str,
    limit: Duration,
    mut f: impl AsyncFnMut() -> bool,
) -> Result<(), String> {
    let t0 = Instant::now();
    while !f().await {
        if t0.elapsed() > limit {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The replica every switch granted master (None: none, or not every switch yet).
async fn master(rs: &[Replica], switches: usize) -> Option<usize> {
    for (i, r) in rs.iter().enumerate().filter(|(_, r)| r.child.is_some()) {
        if r.granted("master").await == switches {
            return Some(i);
        }
    }
    None
}

/// The elected replica, as `get controllers` through any live one reports it.
async fn elected(rs: &[Replica]) -> Option<usize> {
    for r in rs.iter().filter(|r| r.child.is_some()) {
        let Ok(mut a) = r.admin().await else { continue };
        let Ok(l) = a.get_controllers(pa::Empty {}).await else {
            continue;
        };
        let leader = l.into_inner().leader;
        if let Some(i) = rs.iter().position(|r| r.child.is_some() && r.id == leader) {
            return Some(i);
        }
    }
    None
}

/// Create namespace `name` through `admin`, retrying while the replica cannot take it yet
/// (a conflict with another replica, a store or switch briefly unavailable).
async fn create_ns(admin: &mut AdminClient<Channel>, name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match admin
            .create_namespace(pa::NameRequest { name: name.into() })
            .await
        {
            Ok(_) => return true,
            Err(e)
                if matches!(e.code(), tonic::Code::Aborted | tonic::Code::Unavailable)
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(_) => return false,
        }
    }
}

/// Run the scenario; `say` gets a line per kill.
pub async fn run(s: &Settings, say: impl Fn(String)) -> Result<Report, String> {
    let etcd = EtcdCluster::start(3)?;
    let eps = etcd.endpoints();
    let dir = std::env::temp_dir().join(format!("flowmesh-bench-takeover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut rs = Vec::new();
    for i in 0..s.replicas {
        let id = format!("r{i}");
        let grpc = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let of = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let args: Vec<String> = [
            "--data-dir",
            &dir.join(&id).display().to_string(),
            "--grpc-listen",
            &grpc.to_string(),
            "--openflow-listen",
            &of.to_string(),
            "--metrics-listen",
            &metrics.to_string(),
            "--log",
            "info",
            "--datastore",
            "etcd",
            "--etcd-endpoints",
            &eps,
            "--etcd-prefix",
            "/bench/",
            "--replica-id",
            &id,
            "--etcd-election-timeout",
            crate::etcd::ELECTION_TIMEOUT_MS,
            "--leader-ttl",
            &s.leader_ttl.to_string(),
            "--egress-dns-server",
            "127.0.0.1:9",
        ]
        .map(String::from)
        .to_vec();
        let mut r = Replica {
            log: dir.join(format!("{id}.log")),
            id,
            args,
            grpc,
            of,
            metrics,
            child: None,
        };
        r.spawn()?;
        rs.push(r);
    }
    let mut b = OvsSandbox::builder().controller_max_backoff_ms(1000);
    for r in &rs {
        b = b.controller(format!("tcp:{}", r.of));
    }
    let sbx = b
        .bridges((0..s.switches).map(|i| {
            BridgeSpec::new(format!("n{i}"), 0x1000 + u64::from(i))
                .pod("p0", 3)
                .pod("p1", 4)
        }))
        .start()
        .map_err(|e| e.to_string())?;
    let n = s.switches as usize;
    until("a leader", Duration::from_secs(30), async || {
        elected(&rs).await.is_some()
    })
    .await?;
    let l = elected(&rs).await.ok_or("no leader")?;
    let mut admin = rs[l].admin().await?;
    create_ns(&mut admin, "bench").await;
    super::add_bench_nodes(&mut admin, s.switches).await?;
    for i in 0..s.switches {
        for p in 0..2u32 {
            admin
                .attach_pod(pa::AttachPodRequest {
                    node: format!("n{i}"),
                    namespace: "bench".into(),
                    name: format!("n{i}-p{p}"),
                    port_name: OvsSandbox::port_name(&format!("n{i}"), &format!("p{p}")),
                    ofport: 3 + p,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("attach n{i}-p{p}: {e}"))?;
        }
    }
    let dump = |sbx: &OvsSandbox| -> Result<Vec<Vec<String>>, String> {
        (0..s.switches)
            .map(|i| sbx.dump_flows(&format!("n{i}")).map_err(|e| e.to_string()))
            .collect()
    };
    until(
        "the leader master on every switch",
        Duration::from_secs(30),
        async || master(&rs, n).await.is_some(),
    )
    .await?;
    let mut report = Report::default();
    let mut acked: Vec<String> = Vec::new();
    for k in 0..s.kills {
        // Every live replica in place: the leader master, the others slave, everywhere.
        let l = master(&rs, n).await.ok_or("no leader before the kill")?;
        for (i, r) in rs.iter().enumerate().filter(|(i, _)| *i != l) {
            until(
                &format!("{} slave on every switch", r.id),
                Duration::from_secs(30),
                async || r.granted("slave").await == n,
            )
            .await
            .map_err(|e| format!("replica {i}: {e}"))?;
        }
        let standbys: Vec<usize> = (0..rs.len()).filter(|i| *i != l).collect();
        let mods_before: u64 = standbys.iter().map(|i| rs[*i].metric(MODS)).sum();
        let before = dump(&sbx)?;
        let mut w = rs[standbys[0]].admin().await?;
        let writer = tokio::spawn(async move {
            let mut ok = Vec::new();
            for j in 0..15 {
                let name = format!("w{k}-{j}");
                if create_ns(&mut w, &name).await {
                    ok.push(name);
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            ok
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = Instant::now();
        rs[l].kill9();
        let mut new = None;
        while new.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            new = master(&rs, n).await;
            if t0.elapsed() > Duration::from_secs(15) {
                return Err(format!("kill {k}: no standby became master within 15 s"));
            }
        }
        let took = t0.elapsed();
        let new = new.unwrap_or(l);
        acked.extend(writer.await.map_err(|e| e.to_string())?);
        // Let the new leader finish its resync and the writer's changes settle.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mods_after: u64 = standbys.iter().map(|i| rs[*i].metric(MODS)).sum();
        report.flow_mods_on_takeover += mods_after.saturating_sub(mods_before);
        if dump(&sbx)? != before {
            report.flows_changed += 1;
        }
        report.takeovers.push(took);
        say(format!(
            "kill {k}: {} -> {} master on every switch after {} ms",
            rs[l].id,
            rs[new].id,
            took.as_millis()
        ));
        rs[l].spawn()?;
    }
    let l = master(&rs, n).await.ok_or("no leader at the end")?;
    let mut admin = rs[l].admin().await?;
    let stored: BTreeSet<String> = admin
        .list_net_namespaces(pa::Empty {})
        .await
        .map_err(|e| e.to_string())?
        .into_inner()
        .items
        .into_iter()
        .map(|n| n.name)
        .collect();
    report.acked_writes = acked.len();
    report.lost_writes = acked.iter().filter(|n| !stored.contains(*n)).count();
    drop(rs);
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}
