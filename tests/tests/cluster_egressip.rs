//! Egress IP on the real cluster (scripts/kube-up.sh), configured as `oc` writes it: the
//! project's NetNamespace gets `egressIPs`, two nodes' HostSubnets get `egressCIDRs`, so the
//! controller places the IP automatically (it writes the node it chose into that HostSubnet's
//! `egressIPs`) and moves it when that node dies.
//!
//! An outside host (network namespace `fmk-eip-out` on the underlay bridge `br-ul`,
//! 172.31.200.250) runs a TCP service that answers with the source address it sees and records
//! every connection. Pods of project `eip-shop`, one on every node, and one of `eip-web` connect
//! to it every 100 ms (`nc`, the pod's name and a sequence number as the request):
//!
//! * every `eip-shop` pod is seen from the egress IP (172.31.200.100), the `eip-web` pod from
//!   its node's own address;
//! * the node holding the egress IP is stopped as a node dies: its underlay link goes down
//!   (`ip -n fmk-nN link set eth0 down`) and every process of the node (Open vSwitch,
//!   containerd, kubelet, kube-proxy, its controller replica and shim, its pods) is frozen
//!   (cgroup v1 freezer of its cgroup root; SIGSTOP for any process outside it); the egress
//!   nodes are chosen away from the controller leader's node, so this measures egress-IP
//!   failover, not a leader takeover (`cluster_ha.rs`);
//! * the other egress node takes the IP over (its HostSubnet and its `br-phy` address), the
//!   `eip-shop` pods on the surviving nodes are seen from the egress IP again: the failover gap
//!   (from the link going down to their first probe through the new node) is printed;
//! * the stopped node comes back (link up, thawed: a guard does this even when the test fails)
//!   and gives the address up; the IP stays where it moved;
//! * over the whole run, no `eip-shop` probe ever arrived from a node's own address.
//!
//! Everything it made (namespaces, HostSubnet and NetNamespace egress fields, the outside host)
//! is removed at the end, also on failure. The cluster is shared: run it under the cluster lock,
//! `flock /var/tmp/fm-cluster.lock cargo test -p flowmesh-tests --test cluster_egressip --
//! --nocapture`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use flowmesh_tests::cluster::{Cluster, Mode, PodInfo};
use flowmesh_tests::egress::{TcpArrival, TcpRecorder};

const SHOP: &str = "eip-shop";
const WEB: &str = "eip-web";
const OUT_NS: &str = "fmk-eip-out";
const OUT_PORT: u16 = 9099;
const EGRESS_CIDR: &str = "172.31.200.96/28";

fn out_ip() -> Ipv4Addr {
    Ipv4Addr::new(172, 31, 200, 250)
}

fn egress_ip() -> Ipv4Addr {
    Ipv4Addr::new(172, 31, 200, 100)
}

fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The outside host: a namespace with `eth0` on the underlay bridge. Removed when dropped.
struct OutsideHost;

impl OutsideHost {
    fn create(cluster: &Cluster) -> OutsideHost {
        let _ = sh("ip", &["netns", "del", OUT_NS]);
        let ul = cluster.ul_netns.as_str();
        let addr = format!("{}/24", out_ip());
        let steps: [&[&str]; 6] = [
            &["netns", "add", OUT_NS],
            &[
                "link", "add", "eth0", "netns", OUT_NS, "type", "veth", "peer", "name", "eipout",
                "netns", ul,
            ],
            &["-n", ul, "link", "set", "eipout", "master", "br-ul", "up"],
            &["-n", OUT_NS, "addr", "add", &addr, "dev", "eth0"],
            &["-n", OUT_NS, "link", "set", "eth0", "up"],
            &["-n", OUT_NS, "link", "set", "lo", "up"],
        ];
        let host = OutsideHost;
        for args in steps {
            sh("ip", args).unwrap_or_else(|e| panic!("outside host: {e}"));
        }
        // The nodes' userspace datapath cannot complete partial checksums (docs/cluster.md).
        sh(
            "ip",
            &[
                "netns", "exec", OUT_NS, "ethtool", "-K", "eth0", "tx", "off",
            ],
        )
        .unwrap_or_else(|e| panic!("outside host: {e}"));
        host
    }
}

impl Drop for OutsideHost {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair with it.
        if let Err(e) = sh("ip", &["netns", "del", OUT_NS]) {
            eprintln!("cleanup: {e}");
        }
    }
}

/// Takes the test's objects out of the cluster when dropped (also after a failure).
struct Objects<'a> {
    cluster: &'a Cluster,
}

impl Objects<'_> {
    fn clear(&self) {
        let c = self.cluster;
        let _ = c.kubectl(&[
            "patch",
            "netnamespace",
            SHOP,
            "--type=merge",
            "-p",
            r#"{"egressIPs":null}"#,
        ]);
        for i in 1..=c.nodes {
            let _ = c.kubectl(&[
                "patch",
                "hostsubnet",
                &c.node_name(i),
                "--type=merge",
                "-p",
                r#"{"egressCIDRs":null,"egressIPs":null}"#,
            ]);
        }
    }
}

impl Drop for Objects<'_> {
    fn drop(&mut self) {
        self.clear();
        for ns in [SHOP, WEB] {
            let _ = self
                .cluster
                .kubectl(&["delete", "namespace", ns, "--wait=false"]);
        }
    }
}

/// A node stopped as a dead one is: underlay link down, every process frozen. Brought back by
/// `restore` or when dropped.
struct StoppedNode<'a> {
    cluster: &'a Cluster,
    node: usize,
    freezer: Option<PathBuf>,
    stopped_pids: Vec<i32>,
    restored: bool,
}

/// The PIDs in the cgroup directory `dir` and below it.
fn cgroup_pids(dir: &std::path::Path) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                out.extend(cgroup_pids(&e.path()));
            }
        }
    }
    out
}

impl<'a> StoppedNode<'a> {
    fn stop(cluster: &'a Cluster, node: usize) -> (StoppedNode<'a>, Instant) {
        let ns = cluster.node_netns(node);
        sh("ip", &["-n", &ns, "link", "set", "eth0", "down"])
            .unwrap_or_else(|e| panic!("link down: {e}"));
        let t = Instant::now();
        let mut g = StoppedNode {
            cluster,
            node,
            freezer: None,
            stopped_pids: Vec::new(),
            restored: false,
        };
        // The node's cgroup root, below the one kube-up recorded (docs/cluster.md).
        let base = std::fs::read_to_string(cluster.dir.join("cgroup"))
            .expect("the cluster's cgroup file")
            .trim()
            .trim_start_matches('/')
            .to_string();
        let rel = format!("{base}/{}", cluster.node_name(node));
        let freezer = PathBuf::from("/sys/fs/cgroup/freezer").join(&rel);
        if freezer.join("freezer.state").exists() {
            std::fs::write(freezer.join("freezer.state"), "FROZEN").expect("freeze the node");
            g.freezer = Some(freezer.clone());
            cluster
                .wait_for("node frozen", Duration::from_secs(20), || {
                    let s = std::fs::read_to_string(freezer.join("freezer.state")).ok()?;
                    (s.trim() == "FROZEN").then_some(())
                })
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Whatever of the node lives outside the freezer's subtree is stopped by signal.
        let frozen = g.freezer.as_deref().map(cgroup_pids).unwrap_or_default();
        let all = cgroup_pids(&PathBuf::from("/sys/fs/cgroup/memory").join(&rel));
        assert!(!all.is_empty(), "no process found in node{node}'s cgroup");
        for pid in all.into_iter().filter(|p| !frozen.contains(p)) {
            if nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGSTOP,
            )
            .is_ok()
            {
                g.stopped_pids.push(pid);
            }
        }
        eprintln!(
            "node{node} stopped: link down, {} frozen, {} SIGSTOPped",
            frozen.len(),
            g.stopped_pids.len()
        );
        (g, t)
    }

    fn restore(&mut self) {
        if self.restored {
            return;
        }
        self.restored = true;
        let ns = self.cluster.node_netns(self.node);
        if let Err(e) = sh("ip", &["-n", &ns, "link", "set", "eth0", "up"]) {
            eprintln!("restore node{}: {e}", self.node);
        }
        if let Some(f) = &self.freezer {
            if let Err(e) = std::fs::write(f.join("freezer.state"), "THAWED") {
                eprintln!("restore node{}: thaw: {e}", self.node);
            }
        }
        for pid in self.stopped_pids.drain(..) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
    }
}

impl Drop for StoppedNode<'_> {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Probers: every 100 ms, once `/tmp/go` exists and until `/tmp/stop` does, a TCP connection
/// to the outside host sending `POD SEQ`.
fn workload(nodes: usize, web_node: usize) -> String {
    let script = format!(
        "until [ -e /tmp/go ]; do sleep 0.2; done; i=0; \
         while [ ! -e /tmp/stop ]; do let i=i+1; \
         echo \"$HOSTNAME $i\" | nc -N -w 2 {} {OUT_PORT} >/dev/null 2>&1; sleep 0.1; done; \
         sleep infinity",
        out_ip()
    );
    let pod = |ns: &str, name: &str, node: usize| {
        format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: eip-probe}}}}
spec:
  nodeName: node{node}
  terminationGracePeriodSeconds: 1
  containers:
    - name: agnhost
      image: registry.k8s.io/e2e-test-images/agnhost:2.56
      command: ["bash", "-c", {script:?}]
"#
        )
    };
    let mut y = String::new();
    for ns in [SHOP, WEB] {
        y.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"
        ));
    }
    for i in 1..=nodes {
        y.push_str(&pod(SHOP, &format!("shop-{i}"), i));
    }
    y.push_str(&pod(WEB, "web", web_node));
    y
}

/// The source address the outside host reports for a connection made from `ns/pod` now.
fn seen_from(cluster: &Cluster, ns: &str, pod: &str) -> Option<Ipv4Addr> {
    let cmd = format!("echo check {pod} | nc -N -w 3 {} {OUT_PORT}", out_ip());
    let out = cluster.exec(ns, pod, &["bash", "-c", &cmd]).ok()?;
    out.trim().strip_prefix("src=")?.parse().ok()
}

/// The HostSubnet `egressIPs` of every node.
fn host_subnet_ips(cluster: &Cluster) -> BTreeMap<String, String> {
    (1..=cluster.nodes)
        .map(|i| {
            let n = cluster.node_name(i);
            let ips = cluster
                .kubectl(&["get", "hostsubnet", &n, "-o", "jsonpath={.egressIPs}"])
                .unwrap_or_default();
            (n, ips)
        })
        .collect()
}

/// Whether node `i`'s host holds `ip`.
fn holds(cluster: &Cluster, i: usize, ip: Ipv4Addr) -> bool {
    sh(
        "ip",
        &["-n", &cluster.node_netns(i), "-4", "-o", "addr", "show"],
    )
    .map(|s| s.contains(&format!(" {ip}/32 ")))
    .unwrap_or(false)
}

/// The node the controller placed the egress IP on: its HostSubnet lists it and its host
/// holds the address, and no other node does either.
fn placed(cluster: &Cluster, candidates: &[usize]) -> Option<usize> {
    let hs = host_subnet_ips(cluster);
    let eip = egress_ip().to_string();
    let listed: Vec<usize> = (1..=cluster.nodes)
        .filter(|i| hs[&cluster.node_name(*i)].contains(&eip))
        .collect();
    match listed[..] {
        [n] if candidates.contains(&n) && holds(cluster, n, egress_ip()) => Some(n),
        _ => None,
    }
}

/// What a failed wait leaves to look at: the egress objects, the nodes' addresses, the
/// controller's events and its replicas' egress log lines.
fn dump(cluster: &Cluster) -> String {
    let mut out = String::new();
    let mut add = |what: &str, text: String| {
        out.push_str(&format!("--- {what}\n{}\n", text.trim_end()));
    };
    let yaml = |args: &[&str]| cluster.kubectl(args).unwrap_or_else(|e| e.to_string());
    add(
        "hostsubnets",
        yaml(&[
            "get",
            "hostsubnets",
            "-o",
            "custom-columns=NAME:.metadata.name,IPS:.egressIPs,CIDRS:.egressCIDRs",
        ]),
    );
    add(
        "netnamespace",
        yaml(&["get", "netnamespace", SHOP, "-o", "yaml"]),
    );
    for i in 1..=cluster.nodes {
        add(
            &format!("node{i} addresses"),
            sh(
                "ip",
                &["-n", &cluster.node_netns(i), "-4", "-o", "addr", "show"],
            )
            .unwrap_or_else(|e| e),
        );
    }
    let events = yaml(&["get", "events", "-A", "-o", "wide"]);
    add(
        "events (egress, shim, offline)",
        events
            .lines()
            .filter(|l| {
                let l = l.to_lowercase();
                l.contains("egress") || l.contains("shim") || l.contains("offline")
            })
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let replicas = cluster
        .pods("flowmesh", "app.kubernetes.io/name=flowmesh-controller")
        .unwrap_or_default();
    for r in replicas {
        let logs = yaml(&["logs", "-n", "flowmesh", &r.name, "--tail=2000"]);
        let lines: Vec<&str> = logs
            .lines()
            .filter(|l| {
                let l = l.to_lowercase();
                l.contains("egress") || l.contains("offline") || l.contains("leader")
            })
            .collect();
        add(
            &format!("{} ({}) log, egress lines", r.name, r.node),
            lines[lines.len().saturating_sub(40)..].join("\n"),
        );
    }
    out
}

fn probe_name(a: &TcpArrival) -> &str {
    a.text.split_whitespace().next().unwrap_or_default()
}

fn touch_all(cluster: &Cluster, pods: &[(String, PodInfo)], file: &str) {
    for (ns, p) in pods {
        cluster
            .exec(ns, &p.name, &["touch", file])
            .unwrap_or_else(|e| panic!("touch {file} in {ns}/{}: {e}", p.name));
    }
}

#[test]
fn egress_ip_fails_over_from_a_stopped_node_without_leaking_node_addresses() {
    let t_start = Instant::now();
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    for ns in [SHOP, WEB] {
        let _ = cluster.kubectl(&["delete", "namespace", ns, "--wait=true", "--timeout=90s"]);
    }
    let objects = Objects { cluster: &cluster };
    objects.clear();
    let outside = OutsideHost::create(&cluster);
    let recorder = TcpRecorder::start(OUT_NS, out_ip(), OUT_PORT).expect("outside TCP service");

    // The egress nodes: the two that do not run the controller leader.
    let leader = cluster
        .wait_for("a controller leader", Duration::from_secs(60), || {
            cluster.controller_leader().ok().flatten()
        })
        .expect("leader");
    let leader_node = cluster
        .kubectl(&[
            "get",
            "pod",
            "-n",
            "flowmesh",
            &leader,
            "-o",
            "jsonpath={.spec.nodeName}",
        ])
        .ok()
        .and_then(|n| cluster.node_index(n.trim()))
        .expect("the leader's node");
    let egress_nodes: Vec<usize> = (1..=cluster.nodes).filter(|i| *i != leader_node).collect();
    eprintln!("leader {leader} on node{leader_node}; egress nodes {egress_nodes:?}");

    cluster
        .apply(&workload(cluster.nodes, leader_node))
        .expect("apply the probers");
    let mut pods: Vec<(String, PodInfo)> = Vec::new();
    for (ns, n) in [(SHOP, cluster.nodes), (WEB, 1)] {
        let ready = cluster
            .wait_pods_ready(ns, "app=eip-probe", n, Duration::from_secs(240))
            .expect("probers Ready");
        pods.extend(ready.into_iter().map(|p| (ns.to_string(), p)));
    }
    let node_of = |name: &str| -> usize {
        let p = &pods.iter().find(|(_, p)| p.name == name).expect("pod").1;
        cluster.node_index(&p.node).expect("node")
    };

    // As oc does it: the project's egress IP, and the range two nodes may host it from.
    cluster
        .wait_for(
            &format!("NetNamespace {SHOP}"),
            Duration::from_secs(60),
            || cluster.kubectl(&["get", "netnamespace", SHOP]).ok(),
        )
        .expect("netnamespace");
    for i in &egress_nodes {
        cluster
            .kubectl(&[
                "patch",
                "hostsubnet",
                &cluster.node_name(*i),
                "--type=merge",
                "-p",
                &format!(r#"{{"egressCIDRs":["{EGRESS_CIDR}"]}}"#),
            ])
            .expect("patch hostsubnet");
    }
    cluster
        .kubectl(&[
            "patch",
            "netnamespace",
            SHOP,
            "--type=merge",
            "-p",
            &format!(r#"{{"egressIPs":["{}"]}}"#, egress_ip()),
        ])
        .expect("patch netnamespace");
    let holder = cluster
        .wait_for(
            "the egress IP placed on an egress node",
            Duration::from_secs(60),
            || placed(&cluster, &egress_nodes),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", dump(&cluster)));
    let standby = *egress_nodes.iter().find(|i| **i != holder).expect("other");
    eprintln!("{} placed on node{holder}", egress_ip());

    // The outside host sees the egress IP from every eip-shop pod, and eip-web's node address.
    for (ns, p) in &pods {
        let want = if ns == SHOP {
            egress_ip()
        } else {
            cluster.node_ips[node_of(&p.name) - 1]
        };
        let got = cluster
            .wait_for(
                &format!("{ns}/{} ({}) seen from {want}", p.name, p.node),
                Duration::from_secs(60),
                || seen_from(&cluster, ns, &p.name).filter(|s| *s == want),
            )
            .unwrap_or_else(|e| {
                let last = seen_from(&cluster, ns, &p.name);
                panic!("{e}; last seen from {last:?}\n{}", dump(&cluster))
            });
        assert_eq!(got, want);
    }
    touch_all(&cluster, &pods, "/tmp/go");
    let probes_after = |t: Instant, name: &str| {
        recorder
            .arrivals()
            .iter()
            .filter(|a| a.at > t && probe_name(a) == name)
            .count()
    };
    let t_go = Instant::now();
    cluster
        .wait_for("probes from every pod", Duration::from_secs(60), || {
            pods.iter()
                .all(|(_, p)| probes_after(t_go, &p.name) >= 5)
                .then_some(())
        })
        .expect("probes arrive");

    // The holder dies.
    let (mut stopped, t_stop) = StoppedNode::stop(&cluster, holder);
    let new_holder = cluster
        .wait_for(
            &format!("the egress IP moved off node{holder}"),
            Duration::from_secs(90),
            || placed(&cluster, &[standby]),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", dump(&cluster)));
    let moved_after = t_stop.elapsed();
    assert_eq!(new_holder, standby);
    let surviving: Vec<String> = pods
        .iter()
        .filter(|(ns, p)| ns == SHOP && node_of(&p.name) != holder)
        .map(|(_, p)| p.name.clone())
        .collect();
    cluster
        .wait_for(
            "eip-shop pods on the surviving nodes seen again",
            Duration::from_secs(60),
            || {
                surviving
                    .iter()
                    .all(|n| probes_after(t_stop, n) >= 5)
                    .then_some(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", dump(&cluster)));
    let arrivals = recorder.arrivals();
    let mut times: Vec<Instant> = arrivals
        .iter()
        .filter(|a| surviving.iter().any(|n| n == probe_name(a)))
        .map(|a| a.at)
        .collect();
    times.sort();
    let first_after = times
        .iter()
        .find(|t| **t > t_stop)
        .map(|t| *t - t_stop)
        .expect("a probe after the stop");
    let last_before = times
        .iter()
        .rev()
        .find(|t| **t <= t_stop)
        .map(|t| t_stop - *t)
        .unwrap_or_default();
    println!(
        "failover gap: {:.2} s from node{holder}'s link down to the first eip-shop probe through \
         node{standby} ({:.2} s of silence before it counted from the last probe before the stop); \
         HostSubnet and address on node{standby} after {:.2} s",
        first_after.as_secs_f64(),
        (first_after + last_before).as_secs_f64(),
        moved_after.as_secs_f64()
    );

    // The dead node comes back: it gives the address up, the IP stays where it moved.
    stopped.restore();
    let t_back = Instant::now();
    cluster
        .wait_for(
            &format!("node{holder} back without the egress IP"),
            Duration::from_secs(120),
            || {
                (!holds(&cluster, holder, egress_ip())
                    && placed(&cluster, &[standby]) == Some(standby))
                .then_some(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", dump(&cluster)));
    let back_pod = format!("shop-{holder}");
    cluster
        .wait_for(
            &format!("{back_pod} (on the node that came back) seen again"),
            Duration::from_secs(120),
            || (probes_after(t_back, &back_pod) >= 3).then_some(()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    touch_all(&cluster, &pods, "/tmp/stop");

    // No eip-shop probe from a node address, ever; eip-web from its node's.
    let web_ip = cluster.node_ips[node_of("web") - 1];
    let mut by_src: BTreeMap<(String, Ipv4Addr), usize> = BTreeMap::new();
    for a in recorder.arrivals() {
        let name = probe_name(&a).to_string();
        let name = if name == "check" {
            a.text
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        } else {
            name
        };
        *by_src.entry((name, a.src)).or_default() += 1;
    }
    println!("probes by pod and source: {by_src:?}");
    for ((name, src), n) in &by_src {
        let want = if name == "web" { web_ip } else { egress_ip() };
        assert_eq!(*src, want, "{n} probe(s) of {name} seen from {src}");
    }

    // Every holder announced the address with a gratuitous ARP (what moves the outside host's
    // neighbour entry at once, instead of when it expires): no shim's arping failed.
    let shims = cluster
        .kubectl(&[
            "get",
            "pods",
            "-n",
            "flowmesh",
            "-l",
            "app.kubernetes.io/name=flowmesh-node",
            "-o",
            "name",
        ])
        .expect("the shim pods");
    for pod in shims.split_whitespace() {
        let logs = cluster
            .kubectl(&["logs", "-n", "flowmesh", pod, "-c", "shim"])
            .unwrap_or_else(|e| panic!("logs of {pod}: {e}"));
        let failed: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("arping failed") || l.contains("cannot run arping"))
            .collect();
        assert!(failed.is_empty(), "{pod}: {failed:?}");
    }

    // Cleared: nobody holds the IP any more.
    objects.clear();
    cluster
        .wait_for("the egress IP released", Duration::from_secs(60), || {
            (1..=cluster.nodes)
                .all(|i| !holds(&cluster, i, egress_ip()))
                .then_some(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    drop(recorder);
    drop(outside);
    drop(objects);
    println!(
        "cluster_egressip: {:.0} s in all",
        t_start.elapsed().as_secs_f64()
    );
}
