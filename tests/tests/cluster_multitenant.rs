//! multitenant mode on the real cluster (scripts/kube-up.sh --mode multitenant): projects are
//! isolated by NETID across nodes and on one node, and `oc adm pod-network`'s annotation
//! (`pod.network.openshift.io/multitenant.change-network`), written on a NetNamespace with
//! `kubectl annotate` as `oc` writes it, joins, isolates and makes projects global; the
//! controller carries it out and removes it. The probes are `agnhost connect` run by
//! `kubectl exec`.

use std::time::Duration;

use flowmesh_tests::cluster::{Cluster, Mode, PodInfo};

const A: &str = "mt-a";
const B: &str = "mt-b";
const CHANGE: &str = "pod.network.openshift.io/multitenant.change-network";

/// In each project a server on every node and a client on node 1.
fn workload(nodes: usize) -> String {
    let mut y = String::new();
    for ns in [A, B] {
        y.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"
        ));
        let mut pods = vec![("client".to_string(), 1, r#"["pause"]"#)];
        for i in 1..=nodes {
            pods.push((
                format!("server-{i}"),
                i,
                r#"["netexec", "--http-port=8080"]"#,
            ));
        }
        for (name, node, args) in pods {
            y.push_str(&format!(
                r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: mt}}}}
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
    }
    y
}

fn connects(cluster: &Cluster, ns: &str, from: &str, ip: &str) -> bool {
    cluster.agnhost_connects(ns, from, ip, 8080, "2s")
}

/// Waits until A's client reaches A's servers always and B's servers exactly when `b_open`,
/// and B's client reaches A's servers exactly when `b_open` too.
fn wait_reach(cluster: &Cluster, servers: &[(String, PodInfo)], what: &str, b_open: bool) {
    cluster
        .wait_for(what, Duration::from_secs(120), || {
            let mut wrong = Vec::new();
            for client_ns in [A, B] {
                for (ns, s) in servers {
                    let want = ns == client_ns || b_open;
                    if connects(cluster, client_ns, "client", &s.ip) != want {
                        wrong.push(format!(
                            "{client_ns}/client -> {ns}/{} ({}): want {want}",
                            s.name, s.node
                        ));
                    }
                }
            }
            if !wrong.is_empty() {
                eprintln!("{what}: not yet: {wrong:?}");
            }
            wrong.is_empty().then_some(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

fn netid(cluster: &Cluster, ns: &str) -> Option<u64> {
    cluster
        .kubectl(&["get", "netnamespace", ns, "-o", "jsonpath={.netid}"])
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Writes the change-network annotation on `ns`'s NetNamespace and waits until the controller
/// carried it out (the annotation is gone) and `done(netid of A, netid of B)` holds.
fn change(cluster: &Cluster, ns: &str, value: &str, done: impl Fn(u64, u64) -> bool) {
    cluster
        .kubectl(&[
            "annotate",
            "netnamespace",
            ns,
            &format!("{CHANGE}={value}"),
            "--overwrite",
        ])
        .expect("kubectl annotate");
    cluster
        .wait_for(
            &format!("{CHANGE}={value} on {ns} carried out"),
            Duration::from_secs(60),
            || {
                let left = cluster
                    .kubectl(&[
                        "get",
                        "netnamespace",
                        ns,
                        "-o",
                        "jsonpath={.metadata.annotations}",
                    ])
                    .ok()?;
                let (a, b) = (netid(cluster, A)?, netid(cluster, B)?);
                (!left.contains(CHANGE) && done(a, b)).then_some(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn projects_are_isolated_and_pod_network_annotations_join_isolate_and_globalize_them() {
    let cluster = Cluster::ensure(Mode::Multitenant).expect("cluster up");
    for ns in [A, B] {
        let _ = cluster.kubectl(&["delete", "namespace", ns, "--wait=true", "--timeout=60s"]);
    }
    cluster.apply(&workload(cluster.nodes)).expect("apply pods");
    let mut servers = Vec::new();
    for ns in [A, B] {
        let pods = cluster
            .wait_pods_ready(ns, "app=mt", cluster.nodes + 1, Duration::from_secs(240))
            .expect("pods Ready");
        servers.extend(
            pods.into_iter()
                .filter(|p| p.name.starts_with("server-"))
                .map(|p| (ns.to_string(), p)),
        );
    }
    // Each project its own NETID, kept in its NetNamespace.
    let (a0, b0) = cluster
        .wait_for(
            "NetNamespaces of both projects",
            Duration::from_secs(60),
            || Some((netid(&cluster, A)?, netid(&cluster, B)?)),
        )
        .expect("netnamespaces");
    assert!(a0 != 0 && b0 != 0 && a0 != b0, "NETIDs {a0} and {b0}");
    wait_reach(&cluster, &servers, "projects isolated", false);

    // oc adm pod-network join-projects --to=mt-b mt-a
    change(&cluster, A, &format!("join:{B}"), |a, b| a == b);
    wait_reach(&cluster, &servers, "mt-a joined to mt-b", true);

    // oc adm pod-network isolate-projects mt-a
    change(&cluster, A, "isolate", |a, b| a != b && a != 0);
    wait_reach(&cluster, &servers, "mt-a isolated again", false);

    // oc adm pod-network make-projects-global mt-a: everyone reaches it, it reaches everyone.
    change(&cluster, A, "global", |a, _| a == 0);
    wait_reach(&cluster, &servers, "mt-a global", true);

    for ns in [A, B] {
        cluster
            .kubectl(&["delete", "namespace", ns, "--wait=false"])
            .expect("delete namespace");
    }
}
