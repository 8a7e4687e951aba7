//! Pods of a real Kubernetes cluster (scripts/kube-up.sh: upstream kube-apiserver, kubelets,
//! containerd, flowmesh installed with `kubectl apply -f deploy/`) get their addresses from
//! flowmesh and talk to each other on one node and across nodes; the probes run with
//! `kubectl exec` inside agnhost pods.

use std::collections::BTreeSet;
use std::time::Duration;

use flowmesh_tests::cluster::{Cluster, Mode, PodInfo};

const NS: &str = "cluster-pods";

fn deployment(replicas: usize) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NS}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector: {{matchLabels: {{app: web}}}}
      containers:
        - name: agnhost
          image: registry.k8s.io/e2e-test-images/agnhost:2.56
          args: ["netexec", "--http-port=8080", "--udp-port=8081"]
          ports: [{{containerPort: 8080}}]
          readinessProbe:
            httpGet: {{path: /healthz, port: 8080}}
            periodSeconds: 1
"#
    )
}

/// `agnhost connect IP:PORT` from inside `from` (exit 0 = TCP connected).
fn connects(cluster: &Cluster, from: &PodInfo, ip: &str, port: u16) -> bool {
    cluster.agnhost_connects(NS, &from.name, ip, port, "5s")
}

#[test]
fn deployment_pods_on_every_node_get_addresses_and_talk() {
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let replicas = 2 * cluster.nodes;
    cluster.apply(&deployment(replicas)).expect("apply");
    let pods = cluster
        .wait_pods_ready(NS, "app=web", replicas, Duration::from_secs(240))
        .expect("pods Ready");

    // Addresses from flowmesh: inside the cluster network, on every node, all different.
    let mut ips: Vec<&str> = pods.iter().map(|p| p.ip.as_str()).collect();
    for ip in &ips {
        let a: std::net::Ipv4Addr = ip.parse().expect("IPv4 pod address");
        assert_eq!(a.octets()[0], 10, "{ip} outside 10.128.0.0/14");
        assert!(
            (128..132).contains(&a.octets()[1]),
            "{ip} outside 10.128.0.0/14"
        );
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), replicas);
    for i in 1..=cluster.nodes {
        let n = cluster.node_name(i);
        assert!(pods.iter().any(|p| p.node == n), "no pod on {n}: {pods:?}");
    }

    // Every pod reaches every other pod, on its own node and across nodes.
    let mut same_node = 0;
    let mut cross_node = 0;
    for from in &pods {
        for to in pods.iter().filter(|p| p.name != from.name) {
            assert!(
                connects(&cluster, from, &to.ip, 8080),
                "{} ({}) cannot reach {} ({}) at {}:8080",
                from.name,
                from.node,
                to.name,
                to.node,
                to.ip
            );
            if from.node == to.node {
                same_node += 1;
            } else {
                cross_node += 1;
            }
        }
    }
    assert!(same_node > 0 && cross_node > 0);

    // And what the server saw is the client's own pod address (no NAT between pods).
    let (a, b) = (
        &pods[0],
        pods.iter()
            .find(|p| p.node != pods[0].node)
            .expect("a pod on another node"),
    );
    let seen = cluster
        .exec(
            NS,
            &a.name,
            &[
                "curl",
                "-s",
                "-m",
                "5",
                &format!("http://{}:8080/clientip", b.ip),
            ],
        )
        .expect("curl /clientip");
    assert_eq!(seen.rsplit_once(':').map(|(ip, _)| ip), Some(a.ip.as_str()));

    cluster
        .kubectl(&["delete", "namespace", NS, "--wait=false"])
        .expect("delete namespace");
}

/// The underlay answers ARP for a node's address from that node's br-phy alone (its hwaddr
/// 0a:00:00:00:c8:0N, which takes VXLAN in), never also from eth0, br-phy's port: a second
/// answer that a peer's Open vSwitch kept as its tunnel neighbour sent VXLAN to a MAC br-phy
/// drops (kube-up turns ARP off on eth0). Asked from the control plane and from every node.
#[test]
fn underlay_arp_is_answered_by_each_nodes_br_phy_alone() {
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let askers: Vec<(String, &str)> = std::iter::once((cluster.cp_netns.clone(), "eth0"))
        .chain((1..=cluster.nodes).map(|i| (cluster.node_netns(i), "br-phy")))
        .collect();
    for (netns, dev) in &askers {
        for (t, ip) in cluster.node_ips.iter().enumerate() {
            let target = t + 1;
            if *netns == cluster.node_netns(target) {
                continue;
            }
            let out = std::process::Command::new("ip")
                .args([
                    "netns", "exec", netns, "arping", "-c", "2", "-w", "5", "-I", dev,
                ])
                .arg(ip.to_string())
                .output()
                .expect("run arping");
            let text = String::from_utf8_lossy(&out.stdout);
            // "42 bytes from 0a:00:00:00:c8:02 (172.31.200.2): index=0 time=..."
            let macs: BTreeSet<&str> = text
                .lines()
                .filter_map(|l| l.split_once(" bytes from ")?.1.split_whitespace().next())
                .collect();
            assert_eq!(
                macs,
                BTreeSet::from([format!("0a:00:00:00:c8:{target:02x}").as_str()]),
                "{netns} asking for node{target}'s {ip}:\n{text}"
            );
        }
    }
}
