//! Controller HA on the real cluster (scripts/kube-up.sh): the controller Deployment's three
//! replicas elect a leader on the Lease `flowmesh/flowmesh-controller` (holder: the replica's
//! pod name). While a UDP stream runs between two pods on different nodes (the sender numbers
//! every datagram, 50 a second; the receiver keeps them all), the test deletes the leader's pod
//! with `kubectl delete pod`:
//!
//! * a standby takes the Lease over (its holder changes; the takeover time is printed) and every
//!   switch grants the new leader the master role (each node's `ovs-vsctl list controller`);
//! * the stream loses nothing: every number the sender sent arrived;
//! * the new leader sends no flow-mod: its `flowmesh_flow_mods_sent_total` (and the other
//!   standby's) is unchanged, and every node's `br0` holds the same flows and groups as before
//!   (`ovs-ofctl dump-flows --no-stats`, `dump-groups`, read inside the node's network and
//!   mount namespaces);
//! * the Deployment makes a replacement pod and is back to 3 Ready replicas, still without a
//!   flow-mod or a changed flow.
//!
//! The cluster is shared: run it under the cluster lock,
//! `flock /var/tmp/fm-cluster.lock cargo test -p flowmesh-tests --test cluster_ha --
//! --nocapture`.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use flowmesh_tests::cluster::{metric_value, parse_pods, Cluster, Mode, PodInfo};

const NS: &str = "ha-stream";
const CONTROLLERS: &str = "app.kubernetes.io/name=flowmesh-controller";
const MODS: &str = "flowmesh_flow_mods_sent_total";
const PORT: u16 = 9000;

/// A receiver on `rx_node` keeping every datagram on UDP 9000, and a sender on `tx_node` that,
/// once `/tmp/go` holds the receiver's address, sends `1`, `2`, ... every 20 ms from one socket
/// until `/tmp/stop` exists, then writes the last number to `/tmp/sent`.
fn workload(rx_node: &str, tx_node: &str) -> String {
    let rx = format!("sleep infinity | nc -u -l {PORT} > /tmp/recv");
    let tx = format!(
        "until [ -s /tmp/go ]; do sleep 0.2; done; dst=`cat /tmp/go`; \
         exec 3>/dev/udp/$dst/{PORT}; i=0; \
         while [ ! -e /tmp/stop ]; do let i=i+1; echo $i >&3; sleep 0.02; done; \
         echo $i > /tmp/sent; sleep infinity"
    );
    let pod = |name: &str, node: &str, script: &str| {
        format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NS}, labels: {{app: ha-stream}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
    - name: agnhost
      image: registry.k8s.io/e2e-test-images/agnhost:2.56
      command: ["bash", "-c", {script:?}]
"#
        )
    };
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n{}{}",
        pod("receiver", rx_node, &rx),
        pod("sender", tx_node, &tx)
    )
}

/// The numbers the receiver has got so far.
fn received(cluster: &Cluster) -> BTreeSet<u64> {
    cluster
        .exec(NS, "receiver", &["cat", "/tmp/recv"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Every node's switch tables (flows without counters, groups).
fn tables(cluster: &Cluster) -> Vec<Vec<String>> {
    (1..=cluster.nodes)
        .map(|i| {
            cluster
                .switch_tables(i)
                .unwrap_or_else(|e| panic!("node{i}'s tables: {e}"))
        })
        .collect()
}

/// The flow-mods the replica on `ip` (its node's address) has sent.
fn mods_of(cluster: &Cluster, ip: Ipv4Addr) -> f64 {
    let text = cluster
        .controller_metrics(ip)
        .unwrap_or_else(|e| panic!("metrics of the replica on {ip}: {e}"));
    metric_value(&text, MODS).unwrap_or_else(|| panic!("no {MODS} on {ip}"))
}

fn node_ip_of(cluster: &Cluster, p: &PodInfo) -> Ipv4Addr {
    let i = cluster.node_index(&p.node).expect("a cluster node");
    cluster.node_ips[i - 1]
}

/// The OpenFlow target a replica on `ip` is (the ConfigMap's `openflow-targets`).
fn target(ip: Ipv4Addr) -> String {
    format!("ssl:{ip}:6653")
}

/// Whether every switch reports the replica on `ip` as its master.
fn master_everywhere(cluster: &Cluster, ip: Ipv4Addr) -> bool {
    (1..=cluster.nodes).all(|i| {
        cluster
            .switch_roles(i)
            .map(|r| {
                r.iter()
                    .any(|(t, role)| *t == target(ip) && role == "master")
            })
            .unwrap_or(false)
    })
}

fn diff(before: &[String], after: &[String]) -> String {
    let b: BTreeSet<&String> = before.iter().collect();
    let a: BTreeSet<&String> = after.iter().collect();
    let mut out = String::new();
    for l in b.difference(&a) {
        out.push_str(&format!("- {l}\n"));
    }
    for l in a.difference(&b) {
        out.push_str(&format!("+ {l}\n"));
    }
    out
}

#[test]
fn deleting_the_leader_pod_hands_over_without_a_flow_mod_or_a_lost_packet() {
    let t_start = Instant::now();
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=90s"]);
    // A settled Deployment: exactly its 3 pods, all Ready — no replacement still Pending or
    // starting, no old pod still Terminating (an earlier test may have left one; such a pod
    // could take the Lease without being counted as a standby here).
    let replicas = cluster
        .wait_for(
            "exactly 3 controller pods, all Ready",
            Duration::from_secs(240),
            || {
                // Finished pods (an evicted one stays listed as Failed) do not count.
                let out = cluster
                    .kubectl(&[
                        "get",
                        "pods",
                        "-n",
                        "flowmesh",
                        "-l",
                        CONTROLLERS,
                        "--field-selector",
                        "status.phase!=Failed,status.phase!=Succeeded",
                        "-o",
                        "json",
                    ])
                    .ok()?;
                let pods = parse_pods(&out).ok()?;
                (pods.len() == 3 && pods.iter().all(|p| p.ready)).then_some(pods)
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let leader = cluster
        .wait_for("a controller leader", Duration::from_secs(60), || {
            cluster.controller_leader().ok().flatten()
        })
        .expect("leader");
    let old = replicas
        .iter()
        .find(|p| p.name == leader)
        .unwrap_or_else(|| panic!("the Lease holder {leader} is not a Ready replica"))
        .clone();
    let old_ip = node_ip_of(&cluster, &old);
    cluster
        .wait_for(
            "the leader master on every switch",
            Duration::from_secs(60),
            || master_everywhere(&cluster, old_ip).then_some(()),
        )
        .expect("master");
    let standbys: Vec<PodInfo> = replicas
        .iter()
        .filter(|p| p.name != leader)
        .cloned()
        .collect();
    eprintln!("leader {} on {}", old.name, old.node);

    // The stream: received on the leader's node, sent from another one.
    let tx_node = standbys[0].node.clone();
    cluster
        .apply(&workload(&old.node, &tx_node))
        .expect("apply the stream pods");
    let pods = cluster
        .wait_pods_ready(NS, "app=ha-stream", 2, Duration::from_secs(240))
        .expect("stream pods Ready");
    let rx = pods
        .iter()
        .find(|p| p.name == "receiver")
        .expect("receiver")
        .clone();
    cluster
        .exec(
            NS,
            "sender",
            &["bash", "-c", &format!("echo {} > /tmp/go", rx.ip)],
        )
        .expect("start the stream");
    cluster
        .wait_for("the stream flowing", Duration::from_secs(60), || {
            (received(&cluster).len() >= 50).then_some(())
        })
        .unwrap_or_else(|e| panic!("{e}"));

    // Nothing else changes the switches across the takeover: an earlier test's namespaces,
    // deleted without waiting, are gone (their pods' CNI DELs would change the tables through
    // whichever replica leads at the time).
    cluster
        .wait_for(
            "nothing in the cluster being deleted",
            Duration::from_secs(300),
            || cluster.terminating().ok().filter(Vec::is_empty).map(|_| ()),
        )
        .unwrap_or_else(|e| panic!("{e}: {:?}", cluster.terminating()));
    // Before: the switches' tables, read while the leader sent nothing (its count the same
    // before and after the read), and every standby's flow-mod count.
    let tables_before = cluster
        .wait_for(
            "tables read while the leader is quiet",
            Duration::from_secs(60),
            || {
                let m0 = mods_of(&cluster, old_ip);
                let t = tables(&cluster);
                (mods_of(&cluster, old_ip) == m0).then_some(t)
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let mods_before: Vec<f64> = standbys
        .iter()
        .map(|p| mods_of(&cluster, node_ip_of(&cluster, p)))
        .collect();

    let t_delete = Instant::now();
    cluster
        .kubectl(&["delete", "pod", "-n", "flowmesh", &leader, "--wait=false"])
        .expect("kubectl delete pod");
    let new_leader = cluster
        .wait_for("a new Lease holder", Duration::from_secs(60), || {
            cluster
                .controller_leader()
                .ok()
                .flatten()
                .filter(|h| *h != leader)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let lease_after = t_delete.elapsed();
    // A standby, or the Deployment's replacement for the deleted pod: a new replica whose
    // first election round finds the Lease free (the deleted leader resigns on SIGTERM) may
    // win it too. Either way the takeover must be hitless.
    let new = match standbys.iter().find(|p| p.name == new_leader) {
        Some(p) => p.clone(),
        None => cluster
            .wait_for(
                "the new holder among the replicas",
                Duration::from_secs(60),
                || {
                    let pods = cluster.pods("flowmesh", CONTROLLERS).ok()?;
                    pods.into_iter()
                        .find(|p| p.name == new_leader && !p.node.is_empty())
                },
            )
            .unwrap_or_else(|e| panic!("{e}")),
    };
    let replacement_leads = !standbys.iter().any(|p| p.name == new_leader);
    let new_ip = node_ip_of(&cluster, &new);
    cluster
        .wait_for(
            "the new leader master on every switch",
            Duration::from_secs(60),
            || master_everywhere(&cluster, new_ip).then_some(()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let master_after = t_delete.elapsed();
    println!(
        "takeover: Lease held by {new_leader} ({}, {}) {:.2} s after kubectl delete pod {leader}, \
         master on every switch after {:.2} s",
        new.node,
        if replacement_leads {
            "the Deployment's replacement"
        } else {
            "a standby"
        },
        lease_after.as_secs_f64(),
        master_after.as_secs_f64()
    );

    // The Deployment replaces the deleted pod; the stream runs through all of it.
    cluster
        .wait_for(
            "3 controller replicas Ready again",
            Duration::from_secs(240),
            || {
                let pods = cluster.pods("flowmesh", CONTROLLERS).ok()?;
                let ready: Vec<&PodInfo> = pods.iter().filter(|p| p.ready).collect();
                (ready.len() == 3 && ready.iter().all(|p| p.name != leader)).then_some(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let replaced_after = t_delete.elapsed();
    cluster
        .kubectl(&[
            "rollout",
            "status",
            "-n",
            "flowmesh",
            "deployment/flowmesh-controller",
            "--timeout=120s",
        ])
        .expect("the Deployment available");
    println!(
        "replacement: 3 replicas Ready {:.1} s after the delete",
        replaced_after.as_secs_f64()
    );

    // The stream stops; every number sent arrived.
    cluster
        .exec(NS, "sender", &["touch", "/tmp/stop"])
        .expect("stop the stream");
    let sent: u64 = cluster
        .wait_for("the sender's count", Duration::from_secs(30), || {
            cluster
                .exec(NS, "sender", &["cat", "/tmp/sent"])
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .expect("sent");
    let got = cluster
        .wait_for("the last datagram", Duration::from_secs(30), || {
            let got = received(&cluster);
            got.contains(&sent).then_some(got)
        })
        .unwrap_or_else(|_| received(&cluster));
    let lost: Vec<u64> = (1..=sent).filter(|s| !got.contains(s)).collect();
    println!(
        "stream: {sent} datagrams over {:.1} s, {} lost",
        t_delete.elapsed().as_secs_f64(),
        lost.len()
    );
    assert!(lost.is_empty(), "datagrams lost: {lost:?}");

    // No flow-mod from the new leader (nor the other standby), no flow or group changed.
    for (p, before) in standbys.iter().zip(&mods_before) {
        let now = mods_of(&cluster, node_ip_of(&cluster, p));
        assert_eq!(
            now, *before,
            "{} ({}) sent flow-mods across the takeover",
            p.name, p.node
        );
    }
    if replacement_leads {
        assert_eq!(
            mods_of(&cluster, new_ip),
            0.0,
            "the replacement {} ({}) took the Lease and sent flow-mods",
            new.name,
            new.node
        );
    }
    let tables_after = tables(&cluster);
    for (i, (b, a)) in tables_before.iter().zip(&tables_after).enumerate() {
        assert!(
            b == a,
            "node{}'s br0 changed across the takeover:\n{}being deleted now: {:?}",
            i + 1,
            diff(b, a),
            cluster.terminating()
        );
    }
    println!(
        "switch tables unchanged: {} flows and groups on {} nodes",
        tables_before.iter().map(Vec::len).sum::<usize>(),
        cluster.nodes
    );

    cluster
        .kubectl(&["delete", "namespace", NS, "--wait=false"])
        .expect("delete namespace");
    println!(
        "cluster_ha: {:.0} s in all",
        t_start.elapsed().as_secs_f64()
    );
}
