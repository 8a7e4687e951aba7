//! `flowmesh-bench podready`: pod-ready latency on the real cluster (scripts/kube-up.sh,
//! docs/cluster.md). N pods (default 100) are created at once over two nodes (node1, node2,
//! by nodeSelector: the scheduler is in the path); for each one the time from the create to
//! its Ready condition (as a `kubectl get --watch` sees it) and to the first TCP connection
//! its agnhost netexec answers (probed from its node's network namespace as soon as the pod
//! has an address; a pod whose sandbox kubelet makes again gets a new address, which is then
//! the one probed, and the round line counts such pods as `readdressed=`). The same is done,
//! in the same run on the same cluster, with the reference `bridge` + `host-local` CNI
//! plugins (the floor of a CNI that does nothing clever):
//! containerd takes the first configuration of /etc/cni/net.d by name, so
//! `00-ref-bridge.conflist` on node1 and node2 wins over flowmesh's `80-flowmesh.conflist`
//! while it is there; a canary pod on each node shows which one is in effect before a round.
//! Rounds alternate reference and flowmesh. The flowmesh controller replicas' CPU time over the
//! flowmesh rounds and their RSS at the end are read from /proc.
//!
//!   flowmesh-bench podready [--pods N] [--rounds R]
//!
//! Final line: `podready: pods= rounds= pod_ready_p50_ms= pod_ready_p99_ms=
//! first_packet_p50_ms= first_packet_p99_ms= ref_pod_ready_p50_ms= ref_pod_ready_p99_ms=
//! ref_first_packet_p99_ms= ratio_p99= controller_cpu_ms_per_pod= controller_rss_mib=`
//! (medians over the rounds).

use std::collections::BTreeMap;
use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::attach::percentile;
use super::{arg_value, cpu_secs, median, status_mib};
use crate::cluster::{pod_info, Cluster, Mode};
use crate::tcp::enter_netns;

const NS: &str = "podready";
const CANARY_NS: &str = "podready-canary";
const IMAGE: &str = "registry.k8s.io/e2e-test-images/agnhost:2.56";
const PORT: u16 = 8080;
/// The reference rounds' configuration: sorts before flowmesh's 80-flowmesh.conflist.
const REF_CONF: &str = "00-ref-bridge.conflist";
/// The two nodes the pods go to.
const NODES: [usize; 2] = [1, 2];
/// How long one round may take before the bench gives up.
const ROUND_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cni {
    Reference,
    Flowmesh,
}

impl Cni {
    fn name(self) -> &'static str {
        match self {
            Cni::Reference => "bridge+host-local",
            Cni::Flowmesh => "flowmesh",
        }
    }
    /// Whether `ip` is an address this CNI gives (the reference's subnets are 10.250.N.0/24).
    fn owns(self, ip: &str) -> bool {
        ip.starts_with("10.250.") == (self == Cni::Reference)
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The reference CNI configuration of node `i`.
fn ref_conflist(i: usize) -> String {
    format!(
        r#"{{
  "cniVersion": "1.0.0",
  "name": "ref-bridge",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni-ref0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "10.250.{i}.0/24"}}]],
        "dataDir": "/var/lib/cni/ref-bridge"
      }}
    }}
  ]
}}
"#
    )
}

fn conf_path(cluster: &Cluster, i: usize, name: &str) -> PathBuf {
    cluster.dir.join(format!("nodes/node{i}/cni-conf/{name}"))
}

/// Puts the reference configuration in place on the nodes (or takes it away), then waits until
/// a canary pod on each of them gets an address from the CNI wanted.
fn use_cni(cluster: &Cluster, cni: Cni) -> Result<(), String> {
    for i in NODES {
        let path = conf_path(cluster, i, REF_CONF);
        match cni {
            Cni::Reference => {
                let tmp = conf_path(cluster, i, ".00-ref-bridge.conflist.new");
                std::fs::write(&tmp, ref_conflist(i)).map_err(err)?;
                std::fs::rename(&tmp, &path).map_err(err)?;
            }
            Cni::Flowmesh => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
                _ => {}
            },
        }
    }
    let _ = cluster.kubectl(&["create", "namespace", CANARY_NS]);
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let mut y = String::new();
        for i in NODES {
            y.push_str(&pod_yaml(CANARY_NS, &format!("canary-{i}"), i));
        }
        cluster.apply(&y).map_err(err)?;
        let pods = cluster
            .wait_for("canary addresses", Duration::from_secs(180), || {
                let pods = cluster.pods(CANARY_NS, "app=podready").ok()?;
                (pods.len() == NODES.len() && pods.iter().all(|p| !p.ip.is_empty())).then_some(pods)
            })
            .map_err(err)?;
        let wrong: Vec<String> = pods
            .iter()
            .filter(|p| !cni.owns(&p.ip))
            .map(|p| format!("{} on {} has {}", p.name, p.node, p.ip))
            .collect();
        // The canaries go before the round either way (a deletion is the CNI's DEL).
        cluster
            .kubectl(&[
                "delete",
                "pods",
                "-n",
                CANARY_NS,
                "--all",
                "--wait=true",
                "--timeout=120s",
            ])
            .map_err(err)?;
        if wrong.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "containerd did not take the {} configuration: {wrong:?}",
                cni.name()
            ));
        }
        eprintln!(
            "podready: {} not in effect yet ({wrong:?}), again",
            cni.name()
        );
    }
}

fn pod_yaml(ns: &str, name: &str, node: usize) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: podready}}}}
spec:
  nodeSelector: {{kubernetes.io/hostname: node{node}}}
  terminationGracePeriodSeconds: 1
  containers:
    - name: agnhost
      image: {IMAGE}
      args: ["netexec", "--http-port={PORT}"]
"#
    )
}

/// A watch event of one pod, stamped when it arrived.
struct Seen {
    at: Instant,
    name: String,
    node: String,
    ip: String,
    ready: bool,
}

/// `kubectl get pods --watch` of the round's namespace; events go to `tx` as they arrive.
fn watch(cluster: &Cluster, tx: mpsc::Sender<Seen>) -> Result<Child, String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &cluster.cp_netns])
        .arg(cluster.upstream_bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args([
            "get",
            "pods",
            "-n",
            NS,
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("kubectl get --watch: {e}"))?;
    let out = child.stdout.take().ok_or("kubectl's stdout")?;
    std::thread::spawn(move || {
        let events = serde_json::Deserializer::from_reader(BufReader::new(out))
            .into_iter::<serde_json::Value>();
        for ev in events {
            let Ok(ev) = ev else { break };
            let p = pod_info(&ev["object"]);
            let seen = Seen {
                at: Instant::now(),
                name: p.name,
                node: p.node,
                ip: p.ip,
                ready: p.ready,
            };
            if tx.send(seen).is_err() {
                break;
            }
        }
    });
    Ok(child)
}

/// Who is probed at which address: pod name → its latest address.
type Probed = Arc<Mutex<BTreeMap<String, String>>>;

/// Connects to `ip:PORT` from node `netns` until the pod answers there; sends the time it did.
/// Stops when the pod got another address meanwhile (a sandbox made again by kubelet).
fn probe(netns: String, name: String, ip: String, current: Probed, tx: mpsc::Sender<Answer>) {
    std::thread::spawn(move || {
        if enter_netns(&netns).is_err() {
            return;
        }
        let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
            return;
        };
        let addr = SocketAddr::new(addr, PORT);
        let deadline = Instant::now() + ROUND_LIMIT;
        while Instant::now() < deadline {
            let still = lock(&current).get(&name) == Some(&ip);
            if !still {
                return;
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                let _ = tx.send((name, ip, Instant::now()));
                return;
            }
            // A refused or unreachable address answers at once: try again shortly.
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

/// A pod's answer: its name, the address that answered, when.
type Answer = (String, String, Instant);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One round: milliseconds from the create to Ready and to the first answer, per pod, and how
/// many pods got a second address (their sandbox made again).
fn round(cluster: &Cluster, pods: usize) -> Result<(Vec<f64>, Vec<f64>, usize), String> {
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=300s"]);
    cluster.kubectl(&["create", "namespace", NS]).map_err(err)?;
    let (tx, rx) = mpsc::channel();
    let mut watcher = KillOnDrop(watch(cluster, tx)?);
    // A sentinel pod on node3 (outside the measured nodes): once the watch shows it, the watch
    // is live and no event of the round can be missed.
    cluster.apply(&pod_yaml(NS, "sentinel", 3)).map_err(err)?;
    let limit = Instant::now() + Duration::from_secs(120);
    loop {
        let left = limit.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(s) if s.name == "sentinel" => break,
            Ok(_) => {}
            Err(_) => return Err("the watch did not show the sentinel pod".into()),
        }
    }

    let mut y = String::new();
    for k in 0..pods {
        y.push_str(&pod_yaml(NS, &format!("p{k}"), NODES[k % NODES.len()]));
    }
    let t0 = Instant::now();
    let out = cluster
        .kubectl_output(&["create", "-f", "-"], Some(&y))
        .map_err(err)?;
    if !out.status.success() {
        return Err(format!(
            "kubectl create: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }

    let (ptx, prx) = mpsc::channel::<Answer>();
    let probed: Probed = Arc::default();
    let mut nodes: BTreeMap<String, String> = BTreeMap::new();
    let mut readdressed = 0;
    let mut ready: BTreeMap<String, Instant> = BTreeMap::new();
    let mut answered: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = t0 + ROUND_LIMIT;
    while ready.len() < pods || answered.len() < pods {
        if Instant::now() > deadline {
            let now = lock(&probed);
            let silent: Vec<String> = now
                .iter()
                .filter(|(name, _)| !answered.contains_key(*name))
                .take(10)
                .map(|(name, ip)| {
                    let node = nodes.get(name).map_or("?", String::as_str);
                    format!("{name} {ip} on {node}")
                })
                .collect();
            return Err(format!(
                "after {} s: {} of {pods} pods Ready, {} answered ({readdressed} got a second address); not answering: {silent:?}",
                ROUND_LIMIT.as_secs(),
                ready.len(),
                answered.len()
            ));
        }
        while let Ok((name, ip, at)) = prx.try_recv() {
            if lock(&probed).get(&name) == Some(&ip) {
                answered.entry(name).or_insert(at);
            }
        }
        let Ok(s) = rx.recv_timeout(Duration::from_millis(20)) else {
            continue;
        };
        if std::env::var_os("FLOWMESH_BENCH_DEBUG").is_some() {
            eprintln!("event {} {} {} ready={}", s.name, s.node, s.ip, s.ready);
        }
        if !s.name.starts_with('p') {
            continue;
        }
        let before = lock(&probed).get(&s.name).cloned();
        if !s.ip.is_empty() && before.as_deref() != Some(s.ip.as_str()) {
            let i: usize = s
                .node
                .trim_start_matches("node")
                .parse()
                .map_err(|_| format!("pod {} on node {:?}", s.name, s.node))?;
            if let Some(old) = before {
                readdressed += 1;
                eprintln!("podready: {} moved from {old} to {}", s.name, s.ip);
            }
            lock(&probed).insert(s.name.clone(), s.ip.clone());
            nodes.insert(s.name.clone(), s.node.clone());
            probe(
                cluster.node_netns(i),
                s.name.clone(),
                s.ip.clone(),
                probed.clone(),
                ptx.clone(),
            );
        }
        if s.ready {
            ready.entry(s.name).or_insert(s.at);
        }
    }
    watcher.stop();
    let ms = |m: &BTreeMap<String, Instant>| -> Vec<f64> {
        m.values()
            .map(|at| at.duration_since(t0).as_secs_f64() * 1e3)
            .collect()
    };
    let result = (ms(&ready), ms(&answered), readdressed);
    cluster
        .kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=300s"])
        .map_err(err)?;
    Ok(result)
}

struct KillOnDrop(Child);

impl KillOnDrop {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.stop();
    }
}

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_secs(*p)).sum()
}

/// `flowmesh-bench podready [--pods N] [--rounds R]`.
pub fn main(args: &[String]) -> Result<(), String> {
    let pods: usize = arg_value(args, "--pods", 100)?;
    let rounds: usize = arg_value(args, "--rounds", 1)?;
    if pods == 0 || rounds == 0 {
        return Err("--pods and --rounds must be at least 1".into());
    }
    let cluster = Cluster::ensure(Mode::NetworkPolicy).map_err(err)?;
    let pids = cluster.controller_pids();
    if pids.is_empty() {
        return Err("no flowmesh-controller process of the cluster found".into());
    }
    let mut fm: Vec<(f64, f64, f64, f64)> = Vec::new();
    let mut reference: Vec<(f64, f64, f64, f64)> = Vec::new();
    let mut cpu = 0.0;
    let stats = |(r, a): (Vec<f64>, Vec<f64>)| {
        (
            percentile(&r, 0.5),
            percentile(&r, 0.99),
            percentile(&a, 0.5),
            percentile(&a, 0.99),
        )
    };
    let outcome = (|| -> Result<(), String> {
        for n in 1..=rounds {
            for cni in [Cni::Reference, Cni::Flowmesh] {
                use_cni(&cluster, cni)?;
                let cpu0 = cpu_of(&pids);
                let (r, a, readdressed) = round(&cluster, pods)?;
                let s = stats((r, a));
                if cni == Cni::Flowmesh {
                    cpu += cpu_of(&pids) - cpu0;
                    fm.push(s);
                } else {
                    reference.push(s);
                }
                println!(
                    "round {n} {}: pods={pods} ready_p50_ms={:.0} ready_p99_ms={:.0} first_packet_p50_ms={:.0} first_packet_p99_ms={:.0} readdressed={readdressed} load={}",
                    cni.name(),
                    s.0,
                    s.1,
                    s.2,
                    s.3,
                    std::fs::read_to_string("/proc/loadavg")
                        .unwrap_or_default()
                        .split_whitespace()
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
        }
        Ok(())
    })();
    // Whatever happened, the nodes go back to flowmesh's configuration.
    let restored = use_cni(&cluster, Cni::Flowmesh);
    outcome?;
    restored?;
    let _ = cluster.kubectl(&["delete", "namespace", CANARY_NS, "--wait=false"]);
    let med = |v: &[(f64, f64, f64, f64)], f: fn(&(f64, f64, f64, f64)) -> f64| {
        median(&v.iter().map(f).collect::<Vec<_>>())
    };
    let rss = pids
        .iter()
        .filter_map(|p| status_mib(*p, "VmRSS:"))
        .fold(0.0, f64::max);
    let p99 = med(&fm, |s| s.1);
    let ref_p99 = med(&reference, |s| s.1);
    println!(
        "podready: pods={pods} rounds={rounds} pod_ready_p50_ms={:.0} pod_ready_p99_ms={p99:.0} first_packet_p50_ms={:.0} first_packet_p99_ms={:.0} ref_pod_ready_p50_ms={:.0} ref_pod_ready_p99_ms={ref_p99:.0} ref_first_packet_p99_ms={:.0} ratio_p99={:.2} controller_cpu_ms_per_pod={:.2} controller_rss_mib={rss:.0}",
        med(&fm, |s| s.0),
        med(&fm, |s| s.2),
        med(&fm, |s| s.3),
        med(&reference, |s| s.0),
        med(&reference, |s| s.3),
        p99 / ref_p99.max(1.0),
        cpu * 1e3 / (pods * rounds) as f64,
    );
    Ok(())
}
