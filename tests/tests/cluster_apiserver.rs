//! The Kubernetes datastore against the real API server's faults (scripts/kube-up.sh), where
//! the mock API server of `controller/tests/controller_kube.rs` used to be the only witness:
//!
//! * the API server stopped while etcd's history is compacted past every watch's
//!   resourceVersion, then started again: the datapath forwards meanwhile, the controller sends
//!   no flow-mod, every replica's watches expire (410 Gone) and it lists again, still with no
//!   flow-mod, and a NetworkPolicy applied through the restarted API server takes effect;
//! * the controller's writes racing another writer of the same HostSubnet: the API server
//!   refuses them with 409 Conflict, the controller reads again and retries, every pod gets its
//!   own address and the other writer's annotation survives.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flowmesh_tests::cluster::{Cluster, Mode, PodInfo};

const NS: &str = "cluster-apiserver";
const MODS: &str = "flowmesh_flow_mods_sent_total";
const RELISTS: &str = "flowmesh_kube_relists_total";
const CONFLICTS: &str = "flowmesh_kube_write_conflicts_total";
const POKE: &str = "test.flowmesh.io/poke";

/// The two tests share the namespace, and one stops the API server: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A server on node1 and a client on node2.
fn workload() -> String {
    let mut y = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n");
    for (name, node, args) in [
        ("server", 1, r#"["netexec", "--http-port=8080"]"#),
        ("client", 2, r#"["pause"]"#),
    ] {
        y.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NS}, labels: {{app: apisrv, role: {name}}}}}
spec:
  nodeName: node{node}
  terminationGracePeriodSeconds: 1
  containers:
    - name: agnhost
      image: registry.k8s.io/e2e-test-images/agnhost:2.56
      args: {args}
"#
        ));
    }
    y
}

const DENY: &str = r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-server, namespace: cluster-apiserver}
spec:
  podSelector: {matchLabels: {role: server}}
  policyTypes: [Ingress]
"#;

/// The sum of a counter over the replicas, and how many answered.
fn total(cluster: &Cluster, name: &str) -> (f64, usize) {
    let by = cluster.controller_metric_by_node(name);
    (by.values().sum(), by.len())
}

fn tables(cluster: &Cluster) -> Vec<Vec<String>> {
    (1..=cluster.nodes)
        .map(|i| cluster.switch_tables(i).expect("dump br0"))
        .collect()
}

/// node2's host reaches the server pod on node1 (through node2's br0, the VXLAN tunnel and
/// node1's br0), without the API server: curl from node2's network namespace.
fn node2_reaches(cluster: &Cluster, server: &PodInfo) -> bool {
    cluster
        .node_run(
            2,
            "curl",
            &[
                "-sS",
                "-m",
                "3",
                &format!("http://{}:8080/hostname", server.ip),
            ],
        )
        .map(|o| o.trim() == server.name)
        .unwrap_or(false)
}

#[test]
fn the_api_server_stopped_over_a_compacted_history_and_started_again() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let t0 = Instant::now();
    let _ = cluster.kubectl(&["delete", "networkpolicy", "-n", NS, "--all"]);
    cluster.apply(&workload()).expect("apply the workload");
    let pods = cluster
        .wait_pods_ready(NS, "app=apisrv", 2, Duration::from_secs(300))
        .expect("pods ready");
    let by_name: BTreeMap<&str, &PodInfo> = pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let (server, client) = (by_name["server"], by_name["client"]);
    let connects = || cluster.agnhost_connects(NS, &client.name, &server.ip, 8080, "2s");
    cluster
        .wait_for("client reaches server", Duration::from_secs(120), || {
            connects().then_some(())
        })
        .expect("connects before");
    cluster
        .wait_for("node2 reaches server", Duration::from_secs(60), || {
            node2_reaches(&cluster, server).then_some(())
        })
        .expect("node2 reaches the server pod");

    // Before: every replica answers with the Kubernetes store's counters.
    let (mods0, answered) = total(&cluster, MODS);
    assert_eq!(
        answered, cluster.nodes,
        "a replica's metrics did not answer"
    );
    let relists0 = cluster.controller_metric_by_node(RELISTS);
    assert_eq!(relists0.len(), cluster.nodes, "no {RELISTS}: {relists0:?}");
    // Every replica talks to the API server at its own address (kube-up's ConfigMap
    // flowmesh-apiserver, the Deployment's envFrom), not through the `kubernetes` Service's
    // cluster IP, which kube-proxy drops while the API server restarts (it came back 26 s and
    // 73 s after the server did, and the replicas' relists waited for it).
    let servers = cluster
        .wait_for(
            "one controller process per node, each with its environment",
            Duration::from_secs(60),
            || {
                let s = cluster.controllers_api_server();
                (s.len() == cluster.nodes && s.values().all(|a| !a.is_empty())).then_some(s)
            },
        )
        .expect("controller processes");
    let own = format!("{}:6443", cluster.cp_ip);
    assert!(
        servers.values().all(|a| *a == own),
        "a replica does not use the API server's own address {own}: {servers:?}"
    );
    let tables0 = tables(&cluster);

    // Stop the API server; while it is down, move etcd's history on and compact it, so that
    // no watch can resume from the resourceVersion it had.
    let stopped = cluster
        .stop_daemon("apiserver")
        .expect("stop kube-apiserver");
    let down_at = Instant::now();
    for i in 0..3 {
        cluster
            .etcdctl(&["put", "/flowmesh-test/compaction", &i.to_string()])
            .expect("etcdctl put");
    }
    let status = cluster
        .etcdctl(&["endpoint", "status", "-w", "json"])
        .expect("etcdctl endpoint status");
    let rev = serde_json::from_str::<serde_json::Value>(&status).expect("status json")[0]["Status"]
        ["header"]["revision"]
        .as_i64()
        .expect("revision");
    cluster
        .etcdctl(&["compact", &rev.to_string()])
        .expect("etcdctl compact");
    let _ = cluster.etcdctl(&["del", "/flowmesh-test/compaction"]);
    // The datapath forwards without it, for at least 10 s of the outage.
    let mut probes = 0;
    while down_at.elapsed() < Duration::from_secs(10) || probes < 3 {
        assert!(
            node2_reaches(&cluster, server),
            "node2 lost the server pod while the API server was down (probe {probes})"
        );
        probes += 1;
    }
    assert_eq!(
        tables(&cluster),
        tables0,
        "a switch's flows changed while the API server was down"
    );
    let (mods_down, _) = total(&cluster, MODS);
    assert_eq!(
        mods_down, mods0,
        "flow-mods sent while the API server was down"
    );
    eprintln!(
        "API server down {:.1} s, etcd compacted at revision {rev}, {probes} probes through the datapath answered",
        down_at.elapsed().as_secs_f64()
    );

    cluster
        .start_daemon(&stopped)
        .expect("start kube-apiserver");
    cluster
        .wait_for("kube-apiserver /readyz", Duration::from_secs(180), || {
            cluster.kubectl(&["get", "--raw", "/readyz"]).ok()
        })
        .expect("API server back");
    let back_at = Instant::now();
    // Every replica's watches resumed from a compacted resourceVersion: 410 Gone, a new list.
    let relisted = cluster
        .wait_for(
            "every replica listed again",
            Duration::from_secs(180),
            || {
                let now = cluster.controller_metric_by_node(RELISTS);
                let all = (1..=cluster.nodes).all(|i| {
                    now.get(&i).copied().unwrap_or(0.0) > relists0.get(&i).copied().unwrap_or(0.0)
                });
                all.then_some(now)
            },
        )
        .expect("relists");
    eprintln!(
        "relists {relists0:?} -> {relisted:?}, {:.1} s after /readyz",
        back_at.elapsed().as_secs_f64()
    );
    // The new listings hold what the old ones held: nothing is sent, nothing changes.
    let (mods_back, _) = total(&cluster, MODS);
    assert_eq!(mods_back, mods0, "the relists sent flow-mods");
    assert_eq!(
        tables(&cluster),
        tables0,
        "the relists changed a switch's flows"
    );

    // A change made through the restarted API server takes effect, and its removal too.
    cluster.apply(DENY).expect("apply the policy");
    cluster
        .wait_for(
            "the policy isolates the server",
            Duration::from_secs(120),
            || (!connects()).then_some(()),
        )
        .expect("isolated");
    cluster
        .kubectl(&["delete", "networkpolicy", "-n", NS, "deny-server"])
        .expect("delete the policy");
    cluster
        .wait_for(
            "the server reachable again",
            Duration::from_secs(120),
            || connects().then_some(()),
        )
        .expect("reachable again");
    eprintln!(
        "cluster_apiserver restart: {:.0} s in all",
        t0.elapsed().as_secs_f64()
    );
}

/// Writes PATCHes of an annotation of HostSubnet `node` through the API server as fast as one
/// curl process sends them (one connection), until `stop`; the last value written.
fn poke_hostsubnet(cluster: Cluster, node: String, stop: Arc<AtomicBool>) -> u64 {
    let pki = cluster.dir.join("pki");
    let cfg = cluster.dir.join("poke.curlrc");
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut f = std::fs::File::create(&cfg).expect("curl config");
        for i in 0..50 {
            n += 1;
            if i > 0 {
                // Each request after the first is a new operation with its own options.
                writeln!(f, "next").expect("write curl config");
            }
            writeln!(
                f,
                "url = \"https://127.0.0.1:6443/apis/network.openshift.io/v1/hostsubnets/{node}\"\n\
                 request = \"PATCH\"\n\
                 header = \"Content-Type: application/merge-patch+json\"\n\
                 data = \"{{\\\"metadata\\\":{{\\\"annotations\\\":{{\\\"{POKE}\\\":\\\"{n}\\\"}}}}}}\"\n\
                 cacert = \"{ca}\"\ncert = \"{crt}\"\nkey = \"{key}\"\n\
                 silent\nshow-error\nfail\noutput = \"/dev/null\"",
                ca = pki.join("ca.crt").display(),
                crt = pki.join("admin.crt").display(),
                key = pki.join("admin.key").display(),
            )
            .expect("write curl config");
        }
        drop(f);
        cluster
            .cp_run("curl", &["-K", &cfg.to_string_lossy()])
            .expect("PATCH the HostSubnet");
    }
    n
}

fn deployment(replicas: usize) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: racer, namespace: {NS}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: racer}}}}
  template:
    metadata: {{labels: {{app: racer}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: node1}}
      terminationGracePeriodSeconds: 1
      containers:
        - name: agnhost
          image: registry.k8s.io/e2e-test-images/agnhost:2.56
          args: ["pause"]
"#
    )
}

#[test]
fn writes_racing_another_writer_meet_conflicts_and_lose_nothing() {
    const PODS: usize = 8;
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let t0 = Instant::now();
    cluster
        .apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
        ))
        .expect("namespace");
    let subnet = cluster
        .kubectl(&["get", "hostsubnet", "node1", "-o", "jsonpath={.subnet}"])
        .expect("node1's HostSubnet");
    let (net, prefix) = subnet.trim().split_once('/').expect("a CIDR");
    let net: Ipv4Addr = net.parse().expect("subnet address");
    let prefix: u32 = prefix.parse().expect("prefix");
    let in_subnet = |ip: Ipv4Addr| {
        let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
        u32::from(ip) & mask == u32::from(net) & mask
    };
    let (conflicts0, _) = total(&cluster, CONFLICTS);
    let mut rounds = 0;
    // Pods made on node1 while another writer changes node1's HostSubnet many times a second:
    // the controller's writes of that HostSubnet (its address cursor) meet 409 Conflict. A
    // round that happened to meet none is run again (at most three).
    let (pods, last_poke) = loop {
        rounds += 1;
        cluster.apply(&deployment(0)).expect("scale to 0");
        cluster
            .wait_for("racer pods gone", Duration::from_secs(120), || {
                cluster
                    .pods(NS, "app=racer")
                    .ok()
                    .filter(|p| p.is_empty())
                    .map(|_| ())
            })
            .expect("scaled down");
        let stop = Arc::new(AtomicBool::new(false));
        let poker = {
            let (c, s) = (cluster.clone(), stop.clone());
            std::thread::spawn(move || poke_hostsubnet(c, "node1".into(), s))
        };
        cluster.apply(&deployment(PODS)).expect("scale up");
        let ready = cluster.wait_pods_ready(NS, "app=racer", PODS, Duration::from_secs(300));
        stop.store(true, Ordering::Relaxed);
        let last_poke = poker.join().expect("poker");
        let pods = ready.expect("racer pods ready");
        let (conflicts, _) = total(&cluster, CONFLICTS);
        eprintln!(
            "round {rounds}: {PODS} pods Ready, {last_poke} PATCHes of node1's HostSubnet, conflicts {conflicts0} -> {conflicts}"
        );
        if conflicts > conflicts0 || rounds == 3 {
            break (pods, last_poke);
        }
    };
    let (conflicts, _) = total(&cluster, CONFLICTS);
    assert!(
        conflicts > conflicts0,
        "no write met a 409 Conflict in {rounds} rounds: the race was not shown"
    );
    // Every pod has its own address, in node1's subnet.
    let ips: Vec<Ipv4Addr> = pods.iter().map(|p| p.ip.parse().expect("pod IP")).collect();
    let distinct: BTreeSet<Ipv4Addr> = ips.iter().copied().collect();
    assert_eq!(distinct.len(), PODS, "two pods share an address: {pods:?}");
    assert!(
        ips.iter().all(|ip| in_subnet(*ip)),
        "{ips:?} not in {subnet}"
    );
    // The other writer's annotation is there with its last value: the controller's retried
    // writes did not put back what it had read before.
    let poke = cluster
        .kubectl(&[
            "get",
            "hostsubnet",
            "node1",
            "-o",
            "jsonpath={.metadata.annotations.test\\.flowmesh\\.io/poke}",
        ])
        .expect("read the annotation");
    assert_eq!(
        poke.trim(),
        last_poke.to_string(),
        "the other writer's annotation was lost"
    );
    // Every pod is attached where the controller records it.
    let attached = cluster
        .kubectl(&["get", "podattachments", "-o", "json"])
        .expect("podattachments");
    for p in &pods {
        assert!(
            attached.contains(&p.ip),
            "no PodAttachment with {} ({})",
            p.ip,
            p.name
        );
    }
    cluster.apply(&deployment(0)).expect("scale to 0");
    eprintln!(
        "cluster_apiserver conflicts: {} s in all",
        t0.elapsed().as_secs()
    );
}
