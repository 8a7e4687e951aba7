//! networkpolicy mode on the real cluster (scripts/kube-up.sh): a NetworkPolicy applied with
//! `kubectl apply` takes effect on pods kubelet started, on one node and across nodes, and
//! deleting it with `kubectl delete` restores what it blocked. The probes are `agnhost
//! connect` run by `kubectl exec` (as the upstream NetworkPolicy suite runs them).

use std::time::Duration;

use flowmesh_tests::cluster::{Cluster, Mode, PodInfo};

const NS: &str = "cluster-netpol";

/// A server pod and two clients (`role=allowed`, `role=other`) on each node.
fn workload(nodes: usize) -> String {
    let mut y = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n");
    for i in 1..=nodes {
        for (name, role, args) in [
            (
                "server",
                "server",
                r#"["netexec", "--http-port=8080", "--udp-port=8081"]"#,
            ),
            ("allowed", "allowed", r#"["pause"]"#),
            ("other", "other", r#"["pause"]"#),
        ] {
            y.push_str(&format!(
                r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}-{i}, namespace: {NS}, labels: {{role: {role}}}}}
spec:
  nodeName: node{i}
  terminationGracePeriodSeconds: 1
  containers:
    - name: agnhost
      image: registry.k8s.io/e2e-test-images/agnhost:2.56
      args: {args}
"#
            ));
        }
    }
    y
}

/// Only `role=allowed` may reach the servers, and only on TCP 8080.
const POLICY: &str = r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: servers-from-allowed, namespace: cluster-netpol}
spec:
  podSelector: {matchLabels: {role: server}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {role: allowed}}}]
      ports: [{protocol: TCP, port: 8080}]
"#;

fn connects(cluster: &Cluster, from: &PodInfo, ip: &str, port: u16) -> bool {
    cluster.agnhost_connects(NS, &from.name, ip, port, "2s")
}

/// Waits until every (client, server) pair's connectivity is `want(client)`.
fn wait_matrix(
    cluster: &Cluster,
    clients: &[PodInfo],
    servers: &[PodInfo],
    what: &str,
    want: impl Fn(&PodInfo) -> bool,
) {
    cluster
        .wait_for(what, Duration::from_secs(120), || {
            let wrong: Vec<String> = clients
                .iter()
                .flat_map(|c| servers.iter().map(move |s| (c, s)))
                .filter(|(c, s)| connects(cluster, c, &s.ip, 8080) != want(c))
                .map(|(c, s)| format!("{} ({}) -> {} ({})", c.name, c.node, s.name, s.node))
                .collect();
            if !wrong.is_empty() {
                eprintln!("{what}: not yet: {wrong:?}");
            }
            wrong.is_empty().then_some(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_policy_applied_with_kubectl_takes_effect_and_its_deletion_restores_access() {
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=60s"]);
    cluster.apply(&workload(cluster.nodes)).expect("apply pods");
    let pods = cluster
        .wait_pods_ready(NS, "role", 3 * cluster.nodes, Duration::from_secs(240))
        .expect("pods Ready");
    let of = |role: &str| -> Vec<PodInfo> {
        pods.iter()
            .filter(|p| p.name.starts_with(&format!("{role}-")))
            .cloned()
            .collect()
    };
    let (servers, mut clients) = (of("server"), of("allowed"));
    clients.extend(of("other"));
    let allowed = |c: &PodInfo| c.name.starts_with("allowed-");

    // No policy: everyone reaches every server.
    wait_matrix(
        &cluster,
        &clients,
        &servers,
        "open before the policy",
        |_| true,
    );

    cluster.apply(POLICY).expect("kubectl apply the policy");
    wait_matrix(&cluster, &clients, &servers, "policy enforced", allowed);
    // The policy allows TCP 8080 only: the servers' UDP port stays closed even to the allowed
    // clients (agnhost connect --protocol=udp gets netexec's answer only when let through).
    let udp = cluster.exec(
        NS,
        &of("allowed")[0].name,
        &[
            "/agnhost",
            "connect",
            &format!("{}:8081", servers[0].ip),
            "--timeout=2s",
            "--protocol=udp",
        ],
    );
    assert!(udp.is_err(), "UDP 8081 let through: {udp:?}");

    cluster
        .kubectl(&["delete", "networkpolicy", "-n", NS, "servers-from-allowed"])
        .expect("kubectl delete the policy");
    wait_matrix(&cluster, &clients, &servers, "open after deletion", |_| {
        true
    });

    cluster
        .kubectl(&["delete", "namespace", NS, "--wait=false"])
        .expect("delete namespace");
}
