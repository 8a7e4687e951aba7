//! Services on the real cluster through the real kube-proxy (iptables mode, one per node,
//! scripts/kube-up.sh): a ClusterIP Service reaches every endpoint from pods on every node, and
//! a NodePort Service answers on every node's address from a host outside the pod network (the
//! control plane's namespace on the underlay). This replaces nothing of flowmesh: kube-proxy
//! writes its own rules; flowmesh carries pod traffic to tun0 and back as OpenShift SDN does.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use flowmesh_tests::cluster::{Cluster, Mode};

const NS: &str = "cluster-services";

fn workload(nodes: usize) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NS}}}
spec:
  replicas: {nodes}
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
          args: ["netexec", "--http-port=8080"]
          readinessProbe:
            httpGet: {{path: /healthz, port: 8080}}
            periodSeconds: 1
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: client, namespace: {NS}}}
spec:
  selector: {{matchLabels: {{app: client}}}}
  template:
    metadata: {{labels: {{app: client}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: agnhost
          image: registry.k8s.io/e2e-test-images/agnhost:2.56
          args: ["pause"]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {NS}}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web-np, namespace: {NS}}}
spec:
  type: NodePort
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080, protocol: TCP}}]
"#
    )
}

#[test]
fn cluster_ip_and_node_port_reach_every_endpoint_through_kube_proxy() {
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=60s"]);
    cluster.apply(&workload(cluster.nodes)).expect("apply");
    let web = cluster
        .wait_pods_ready(NS, "app=web", cluster.nodes, Duration::from_secs(240))
        .expect("web pods Ready");
    let clients = cluster
        .wait_pods_ready(NS, "app=client", cluster.nodes, Duration::from_secs(240))
        .expect("client pods Ready");
    let names: BTreeSet<String> = web.iter().map(|p| p.name.clone()).collect();
    let cluster_ip = cluster
        .kubectl(&[
            "get",
            "service",
            "-n",
            NS,
            "web",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .expect("ClusterIP");
    let node_port = cluster
        .kubectl(&[
            "get",
            "service",
            "-n",
            NS,
            "web-np",
            "-o",
            "jsonpath={.spec.ports[0].nodePort}",
        ])
        .expect("nodePort");
    assert!(cluster_ip.starts_with("172.30."), "ClusterIP {cluster_ip}");

    // ClusterIP from a pod on every node: every endpoint answers (netexec's /hostname is the
    // pod's name), including those on other nodes.
    for c in &clients {
        let seen = cluster
            .wait_for(
                &format!(
                    "{} ({}) reaching every endpoint of {cluster_ip}",
                    c.name, c.node
                ),
                Duration::from_secs(120),
                || {
                    let mut seen = BTreeSet::new();
                    for _ in 0..(6 * names.len()) {
                        if let Ok(h) = cluster.exec(
                            NS,
                            &c.name,
                            &[
                                "curl",
                                "-s",
                                "-m",
                                "3",
                                &format!("http://{cluster_ip}/hostname"),
                            ],
                        ) {
                            seen.insert(h.trim().to_string());
                        }
                        if seen == names {
                            break;
                        }
                    }
                    (seen == names).then_some(seen)
                },
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seen, names);
    }

    // NodePort on every node's address, from the control plane's namespace (a host on the
    // underlay, outside the cluster network).
    for ip in &cluster.node_ips {
        let url = format!("http://{ip}:{node_port}/hostname");
        let answer = cluster
            .wait_for(&format!("NodePort {url}"), Duration::from_secs(120), || {
                let out = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &cluster.cp_netns,
                        "curl",
                        "-s",
                        "-m",
                        "3",
                        &url,
                    ])
                    .output()
                    .ok()?;
                let h = String::from_utf8_lossy(&out.stdout).trim().to_string();
                (out.status.success() && names.contains(&h)).then_some(h)
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(names.contains(&answer));
    }

    cluster
        .kubectl(&["delete", "namespace", NS, "--wait=false"])
        .expect("delete namespace");
}
