//! RBAC and NodeRestriction as the real API server enforces them (scripts/kube-up.sh runs
//! kube-apiserver with `--authorization-mode=Node,RBAC` and the NodeRestriction admission
//! plugin; flowmesh is installed from `deploy/`).
//!
//! * The controller's service account holds exactly the rights `deploy/kubernetes/10-rbac.yaml`
//!   grants, as the API server decides them (SubjectAccessReviews):
//!   every granted verb is allowed, every other verb on the same resources and a list of
//!   resources it must never touch are refused, and the replicas, which did all their work
//!   on this cluster with these rights, logged no refusal. The node shim's account has none.
//! * A node's own credentials (`system:node:node1`) cannot change another node's Node or delete
//!   its pods, and cannot read or write flowmesh's PodAttachments nor the OpenShift network
//!   objects, while the same credentials may change their own Node (the refusals are about
//!   whose object it is, not a broken kubeconfig).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flowmesh_tests::cluster::{Cluster, Mode};

const NS: &str = "cluster-rbac";
const CONTROLLER_SA: &str = "system:serviceaccount:flowmesh:flowmesh-controller";
const NODE_SA: &str = "system:serviceaccount:flowmesh:flowmesh-node";
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

fn repo_file(path: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `kind/name` of a role → its grants: (API group, resource) → verbs.
type Grants = BTreeMap<(String, String), BTreeSet<String>>;

/// The grants of the controller's ClusterRole and Role in deploy/kubernetes/10-rbac.yaml.
fn controller_grants() -> (Grants, Grants) {
    let text = repo_file("deploy/kubernetes/10-rbac.yaml");
    let (mut cluster, mut namespaced) = (Grants::new(), Grants::new());
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).expect("10-rbac.yaml");
        let kind = v["kind"].as_str().unwrap_or_default();
        if v["metadata"]["name"].as_str() != Some("flowmesh-controller") {
            continue;
        }
        let into = match kind {
            "ClusterRole" => &mut cluster,
            "Role" => &mut namespaced,
            _ => continue,
        };
        let strings = |v: &serde_yaml::Value| -> Vec<String> {
            v.as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        for rule in v["rules"].as_sequence().expect("rules") {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    into.entry((group.clone(), resource))
                        .or_default()
                        .extend(strings(&rule["verbs"]));
                }
            }
        }
    }
    assert!(
        !cluster.is_empty() && !namespaced.is_empty(),
        "the controller's ClusterRole and Role in 10-rbac.yaml"
    );
    (cluster, namespaced)
}

/// The API server's answer to a SubjectAccessReview for `user` (a service account, with its
/// groups): may it VERB group/resource[/subresource] in `ns`? Asked by group and resource
/// directly (no discovery), so rules for APIs this cluster does not serve (OpenShift's
/// config.openshift.io) are checked too.
fn can_i(cluster: &Cluster, user: &str, verb: &str, group: &str, resource: &str, ns: &str) -> bool {
    let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let sa_ns = user.split(':').nth(2).unwrap_or_default();
    let review = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{sa_ns}"), "system:authenticated"],
            "resourceAttributes": {
                "namespace": ns, "verb": verb, "group": group,
                "resource": resource, "subresource": sub,
            },
        },
    });
    let out = cluster
        .kubectl_output(
            &["create", "-f", "-", "-o", "json"],
            Some(&review.to_string()),
        )
        .expect("kubectl create subjectaccessreview");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "SubjectAccessReview {verb} {group}/{resource} for {user}: {e} ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    });
    answer["status"]["allowed"].as_bool() == Some(true)
}

#[test]
fn the_controller_has_exactly_the_rights_of_deploy_and_the_node_account_none() {
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let (cluster_grants, ns_grants) = controller_grants();
    let mut wrong = Vec::new();
    for (grants, namespaces) in [
        (&cluster_grants, &["flowmesh", "default"][..]),
        (&ns_grants, &["flowmesh"][..]),
    ] {
        for ((group, r), verbs) in grants {
            for verb in VERBS {
                for ns in namespaces {
                    let want = verbs.contains(verb);
                    if can_i(&cluster, CONTROLLER_SA, verb, group, r, ns) != want {
                        wrong.push(format!("{verb} {group}/{r} in {ns}: want {want}"));
                    }
                }
            }
        }
    }
    // The Role's rights stop at flowmesh's namespace.
    for ((group, r), verbs) in &ns_grants {
        for verb in verbs {
            if can_i(&cluster, CONTROLLER_SA, verb, group, r, "default") {
                wrong.push(format!(
                    "{verb} {group}/{r} in default: want false (Role of flowmesh)"
                ));
            }
        }
    }
    // What it never needs: secrets (its TLS Secret is mounted by kubelet), node changes, RBAC
    // itself, workloads.
    for (verb, group, r) in [
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("patch", "", "nodes"),
        ("delete", "", "nodes"),
        ("create", "", "pods"),
        ("delete", "", "pods"),
        ("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
        ("patch", "apps", "daemonsets"),
        ("create", "", "serviceaccounts/token"),
    ] {
        if can_i(&cluster, CONTROLLER_SA, verb, group, r, "flowmesh") {
            wrong.push(format!("{verb} {group}/{r}: want false"));
        }
    }
    // The node shim talks only to the controller: its account may do nothing.
    for (verb, group, r) in [
        ("get", "", "pods"),
        ("list", "", "nodes"),
        ("get", "flowmesh.io", "podattachments"),
        ("get", "", "configmaps"),
        ("get", "", "secrets"),
    ] {
        if can_i(&cluster, NODE_SA, verb, group, r, "flowmesh") {
            wrong.push(format!("flowmesh-node: {verb} {group}/{r}: want false"));
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC differs from 10-rbac.yaml: {wrong:#?}"
    );

    // The replicas did all their work on this cluster with these rights: no refusal logged.
    let logs = cluster
        .kubectl(&[
            "logs",
            "-n",
            "flowmesh",
            "-l",
            "app.kubernetes.io/name=flowmesh-controller",
            "--tail=-1",
            "--prefix",
        ])
        .expect("controller logs");
    assert!(
        logs.lines().count() > 3,
        "the controller replicas' logs: {logs}"
    );
    let refused: Vec<&str> = logs
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
        .collect();
    assert!(
        refused.is_empty(),
        "refusals in the controller's logs: {refused:#?}"
    );
}

/// A pause pod bound to `node`.
fn pod(name: &str, node: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NS}, labels: {{app: rbac-probe}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
    - name: pause
      image: registry.k8s.io/pause:3.10.1
"#
    )
}

/// Runs kubectl with node 1's credentials; `Err(stderr)` when refused.
fn as_node1(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let out = cluster
        .kubectl_as(&cluster.node_kubeconfig(1), args, stdin)
        .expect("kubectl as node1");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn assert_forbidden(what: &str, r: Result<String, String>) {
    match r {
        Ok(out) => panic!("{what}: allowed with node1's credentials: {out}"),
        Err(e) => assert!(
            e.to_ascii_lowercase().contains("forbidden"),
            "{what}: refused, but not by authorization or admission: {e}"
        ),
    }
}

#[test]
fn a_nodes_credentials_cannot_change_another_nodes_objects_nor_flowmeshs() {
    let cluster = Cluster::ensure(Mode::NetworkPolicy).expect("cluster up");
    let _ = cluster.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=60s"]);
    let mut y = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n");
    y.push_str(&pod("on-node2", "node2"));
    cluster.apply(&y).expect("apply");
    let pods = cluster
        .wait_pods_ready(NS, "app=rbac-probe", 1, Duration::from_secs(180))
        .expect("pod on node2 Ready");
    assert_eq!(pods[0].node, "node2");

    // Its own Node: allowed (the credentials work), another node's: refused by NodeRestriction.
    as_node1(
        &cluster,
        &[
            "label",
            "node",
            "node1",
            "flowmesh-test.example/probe=1",
            "--overwrite",
        ],
        None,
    )
    .expect("node1 labels its own Node");
    as_node1(
        &cluster,
        &["label", "node", "node1", "flowmesh-test.example/probe-"],
        None,
    )
    .expect("node1 removes its own label");
    assert_forbidden(
        "label node2",
        as_node1(
            &cluster,
            &["label", "node", "node2", "flowmesh-test.example/probe=1"],
            None,
        ),
    );
    assert_forbidden(
        "delete a pod bound to node2",
        as_node1(
            &cluster,
            &["delete", "pod", "-n", NS, "on-node2", "--wait=false"],
            None,
        ),
    );
    let still = cluster.pods(NS, "app=rbac-probe").expect("pods");
    assert!(
        still.iter().any(|p| p.name == "on-node2"),
        "the pod is still there: {still:?}"
    );

    // flowmesh's attachments: not readable, and no node may forge one (the pod's record is
    // there, written by the controller).
    let attachments = cluster
        .wait_for("the pod's PodAttachment", Duration::from_secs(60), || {
            let out = cluster
                .kubectl(&["get", "podattachments.flowmesh.io", "-o", "name"])
                .ok()?;
            let names: Vec<String> = out.lines().map(str::to_string).collect();
            (!names.is_empty()).then_some(names)
        })
        .expect("attachments");
    assert_forbidden(
        "list PodAttachments",
        as_node1(&cluster, &["get", "podattachments.flowmesh.io"], None),
    );
    assert_forbidden(
        "patch a PodAttachment",
        as_node1(
            &cluster,
            &[
                "patch",
                &attachments[0],
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"forged":"1"}}}"#,
            ],
            None,
        ),
    );
    assert_forbidden(
        "create a PodAttachment",
        as_node1(
            &cluster,
            &["create", "-f", "-"],
            Some("apiVersion: flowmesh.io/v1\nkind: PodAttachment\nmetadata: {name: forged}\n"),
        ),
    );
    // The OpenShift network objects flowmesh keeps: read and written by the controller only.
    for r in [
        "hostsubnets.network.openshift.io",
        "netnamespaces.network.openshift.io",
        "clusternetworks.network.openshift.io",
    ] {
        assert_forbidden(&format!("list {r}"), as_node1(&cluster, &["get", r], None));
    }
    assert_forbidden(
        "create a NetNamespace",
        as_node1(
            &cluster,
            &["create", "-f", "-"],
            Some("apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: forged}\nnetname: forged\nnetid: 1\n"),
        ),
    );

    cluster
        .kubectl(&["delete", "namespace", NS, "--wait=false"])
        .expect("delete namespace");
}
