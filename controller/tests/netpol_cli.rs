//! NetworkPolicy mode's controller side against the real controller and the real flowmeshctl:
//! `apply -f` with labelled namespaces, labelled pods with named ports and NetworkPolicies;
//! `get networkpolicies`; `label`; `delete networkpolicy`; refused policies that name the field
//! and store nothing; `--selector` for NETID operations; the mode change; and a restart that
//! keeps it all.

mod support;

use proto::admin::{self as pa};
use std::process::{Command, Stdio};
use support::Controller;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "flowmeshctl failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }
    fn fails(&self) -> &str {
        assert_eq!(
            self.code,
            Some(1),
            "expected exit 1\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stderr
    }
}

fn ctl(ctl: &Controller, args: &[&str]) -> Run {
    let out = Command::new(flowmesh_tests::bins::flowmeshctl())
        .arg("--server")
        .arg(format!("http://{}", ctl.grpc))
        .args(args)
        .env_remove("FLOWMESH_SERVER")
        .stdin(Stdio::null())
        .output()
        .expect("run flowmeshctl");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {team: a}
---
apiVersion: v1
kind: Namespace
metadata:
  name: db
  labels: {team: a, tier: data}
---
apiVersion: v1
kind: Namespace
metadata:
  name: ops
  labels: {team: b}
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
  annotations: {flowmesh.io/datapath-id: "0x1"}
status:
  addresses: [{type: InternalIP, address: 192.0.2.1}]
---
apiVersion: v1
kind: Pod
metadata:
  namespace: shop
  name: web
  labels: {app: web}
  annotations: {flowmesh.io/ovs-port: node-1-p1, flowmesh.io/ofport: "3"}
spec:
  nodeName: node-1
  containers:
  - name: web
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  namespace: db
  name: pg
  labels: {app: pg}
  annotations: {flowmesh.io/ovs-port: node-1-p2, flowmesh.io/ofport: "4"}
spec:
  nodeName: node-1
  containers:
  - name: pg
    ports: [{name: pg, containerPort: 5432, protocol: TCP}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: a}}}]
    ports: [{port: http}, {port: 443}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny, namespace: db}
spec:
  podSelector: {}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-shop, namespace: db}
spec:
  podSelector:
    matchExpressions: [{key: app, operator: In, values: [pg]}]
  policyTypes: [Ingress, Egress]
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {team: a}}
      podSelector: {matchLabels: {app: web}}
    - ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}
    ports: [{port: 5432}, {port: 6000, endPort: 6010, protocol: UDP}]
  egress:
  - to: [{ipBlock: {cidr: 192.0.2.0/24}}]
"#;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write manifest");
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_labels_selectors_mode_change_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Controller::start(&dir.path().join("data"), &[]);
    let file = write(dir.path(), "cluster.yaml", MANIFEST);

    // apply -f: every object, labels and named ports kept, policies created.
    let out = ctl(&c, &["apply", "-f", &file]);
    assert_eq!(
        out.ok(),
        "namespace/shop created\nnamespace/db created\nnamespace/ops created\nnode/node-1 created\n\
         pod/shop/web created\npod/db/pg created\nnetworkpolicy/shop/allow-web created\n\
         networkpolicy/db/default-deny created\nnetworkpolicy/db/allow-shop created\n"
    );
    assert!(ctl(&c, &["apply", "-f", &file])
        .ok()
        .lines()
        .all(|l| l.ends_with(" unchanged")));

    // get networkpolicies: oc-style table, -n filter, JSON in Kubernetes' shape.
    let table = ctl(&c, &["get", "networkpolicies"]);
    assert_eq!(
        table.ok(),
        "NAMESPACE   NAME           POD-SELECTOR\n\
         db          allow-shop     app in (pg)\n\
         db          default-deny   <none>\n\
         shop        allow-web      app=web\n"
    );
    let only_shop = ctl(&c, &["get", "netpol", "-n", "shop"]);
    assert_eq!(only_shop.ok().lines().count(), 2, "{}", only_shop.stdout);
    let j = json(ctl(&c, &["get", "networkpolicies", "-n", "db", "-o", "json"]).ok());
    assert_eq!(j.as_array().map(Vec::len), Some(2), "{j}");
    let shop = &j[0];
    assert_eq!(shop["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(shop["kind"], "NetworkPolicy");
    assert_eq!(shop["metadata"]["name"], "allow-shop");
    assert_eq!(
        shop["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    let from = &shop["spec"]["ingress"][0]["from"];
    assert_eq!(from[0]["namespaceSelector"]["matchLabels"]["team"], "a");
    assert_eq!(from[0]["podSelector"]["matchLabels"]["app"], "web");
    assert_eq!(from[1]["ipBlock"]["except"][0], "10.1.0.0/16");
    let ports = &shop["spec"]["ingress"][0]["ports"];
    assert_eq!(
        ports[0],
        serde_json::json!({"protocol": "TCP", "port": 5432})
    );
    assert_eq!(
        ports[1],
        serde_json::json!({"protocol": "UDP", "port": 6000, "endPort": 6010})
    );
    assert_eq!(
        j[1]["spec"]["policyTypes"],
        serde_json::json!(["Ingress"]),
        "default policyTypes of a policy without egress rules"
    );
    let yaml = ctl(&c, &["get", "networkpolicies", "-n", "shop", "-o", "yaml"]);
    assert!(
        yaml.ok().contains("port: http"),
        "named port in YAML:\n{}",
        yaml.stdout
    );
    let one = ctl(&c, &["get", "networkpolicies", "-n", "db", "allow-shop"]);
    assert_eq!(one.ok().lines().count(), 2);
    ctl(&c, &["get", "networkpolicies", "-n", "nowhere"]).fails();

    // Pods and namespaces show labels (wide, JSON) and named ports (JSON).
    let wide = ctl(&c, &["get", "pods", "-o", "wide"]);
    assert!(wide
        .ok()
        .lines()
        .next()
        .is_some_and(|h| h.ends_with("LABELS")));
    assert!(wide.stdout.contains("app=web"), "{}", wide.stdout);
    let pods = json(ctl(&c, &["get", "pods", "-n", "shop", "-o", "json"]).ok());
    assert_eq!(pods[0]["labels"], serde_json::json!({"app": "web"}));
    assert_eq!(
        pods[0]["ports"],
        serde_json::json!([{"name": "http", "protocol": "TCP", "containerPort": 8080}])
    );
    let ns = ctl(&c, &["get", "netnamespaces", "-o", "wide"]);
    assert!(ns.ok().contains("team=a,tier=data"), "{}", ns.stdout);

    // label: add, change only with --overwrite, remove (a missing key is fine).
    assert_eq!(
        ctl(&c, &["label", "pod", "shop/web", "tier=fe"]).ok(),
        "pod/shop/web labeled\n"
    );
    let refused = ctl(&c, &["label", "pod", "shop/web", "app=api"]);
    assert!(
        refused.fails().contains("--overwrite"),
        "{}",
        refused.stderr
    );
    ctl(&c, &["label", "pod", "shop/web", "app=api", "--overwrite"]).ok();
    ctl(&c, &["label", "pod", "shop/web", "tier-", "missing-"]).ok();
    assert_eq!(
        ctl(&c, &["label", "pod", "shop/web", "app=api"]).ok(),
        "pod/shop/web not labeled\n"
    );
    let pods = json(ctl(&c, &["get", "pods", "-n", "shop", "-o", "json"]).ok());
    assert_eq!(pods[0]["labels"], serde_json::json!({"app": "api"}));
    assert_eq!(
        pods[0]["ports"][0]["name"], "http",
        "relabelling keeps named ports"
    );
    let bad = ctl(&c, &["label", "ns", "ops", "bad key=x"]);
    assert!(bad.fails().contains("bad key"), "{}", bad.stderr);
    ctl(&c, &["label", "namespace", "ops", "team=a", "--overwrite"]).ok();
    let nope = ctl(&c, &["label", "pod", "shop/nobody", "a=b"]);
    assert!(nope.fails().contains("not found"), "{}", nope.stderr);

    // Refused policies name the field, and nothing of the file is stored.
    let bad_file = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: newns}\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: bad, namespace: newns}\n\
         spec:\n  ingress:\n  - from:\n    - ipBlock: {cidr: 10.0.0.0/8, except: [\"fd00::/8\"]}\n",
    );
    let e = ctl(&c, &["apply", "-f", &bad_file]);
    assert!(
        e.fails().contains(
            "document 2 (NetworkPolicy \"newns/bad\"): spec.ingress[0].from[0].ipBlock.except[0]: "
        ),
        "{}",
        e.stderr
    );
    let mut admin = c.admin().await;
    let invalid = [
        (
            "spec:\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24]}}]}]\n",
            "spec.ingress[0].from[0].ipBlock.except[0]",
        ),
        (
            "spec:\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0/16}}]}]\n",
            "spec.ingress[0].from[0].ipBlock.cidr",
        ),
        (
            "spec:\n  egress: [{ports: [{port: 0}]}]\n",
            "spec.egress[0].ports[0].port",
        ),
        (
            "spec:\n  egress: [{ports: [{port: 100, endPort: 99}]}]\n",
            "spec.egress[0].ports[0].endPort",
        ),
        (
            "spec:\n  egress: [{ports: [{port: web, endPort: 99}]}]\n",
            "spec.egress[0].ports[0].endPort",
        ),
        (
            "spec:\n  ingress: [{ports: [{port: 80, protocol: ICMP}]}]\n",
            "spec.ingress[0].ports[0].protocol",
        ),
        (
            "spec:\n  podSelector: {matchLabels: {app: 'no spaces'}}\n",
            "spec.podSelector.matchLabels",
        ),
    ];
    for (spec, field) in invalid {
        let yaml = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: newns}}\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: bad, namespace: newns}}\n{spec}"
        );
        let err = admin
            .apply(pa::ApplyRequest { yaml })
            .await
            .expect_err(field);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}: {err:?}");
        assert!(
            err.message()
                .contains(&format!("(NetworkPolicy \"newns/bad\"): {field}")),
            "{field}: {}",
            err.message()
        );
    }
    // Valid documents but a policy the model refuses (its namespace does not exist): the
    // namespace created earlier in the same file is not kept either.
    let yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {name: newns}\n---\n\
                apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: ghost}\nspec: {}\n";
    let err = admin
        .apply(pa::ApplyRequest { yaml: yaml.into() })
        .await
        .expect_err("unknown namespace");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("networkpolicy/ghost/p"),
        "{}",
        err.message()
    );
    let names = ctl(&c, &["get", "netnamespaces"]);
    assert!(!names.ok().contains("newns"), "{}", names.stdout);
    assert_eq!(
        ctl(&c, &["get", "networkpolicies"]).ok().lines().count(),
        4,
        "still the three policies"
    );
    // The structured API checks the same way.
    let err = admin
        .apply_network_policy(pa::NetworkPolicy {
            namespace: "shop".into(),
            name: "api-bad".into(),
            ingress: vec![pa::NetworkPolicyRule {
                peers: vec![],
                ports: vec![pa::NetworkPolicyPort {
                    protocol: "TCP".into(),
                    port: Some(pa::network_policy_port::Port::Number(90)),
                    end_port: Some(80),
                }],
            }],
            ..Default::default()
        })
        .await
        .expect_err("endPort below port");
    assert!(
        err.message().contains("spec.ingress[0].ports[0].endPort"),
        "{}",
        err.message()
    );
    let r = admin
        .apply_network_policy(pa::NetworkPolicy {
            namespace: "ops".into(),
            name: "from-api".into(),
            pod_selector: Some(pa::LabelSelector::default()),
            ..Default::default()
        })
        .await
        .expect("apply via API")
        .into_inner();
    assert_eq!(r.result, "created");

    // delete networkpolicy.
    assert_eq!(
        ctl(&c, &["delete", "networkpolicy", "db/default-deny"]).ok(),
        "networkpolicy/db/default-deny deleted\n"
    );
    let again = ctl(&c, &["delete", "networkpolicy", "db/default-deny"]);
    assert!(
        again.fails().contains("get networkpolicies"),
        "{}",
        again.stderr
    );

    // --selector picks namespaces by label (multitenant mode): shop, db and ops are team=a.
    let joined = ctl(
        &c,
        &[
            "adm",
            "pod-network",
            "join-projects",
            "--to=shop",
            "--selector=team=a",
            "-o",
            "json",
        ],
    );
    let joined = json(joined.ok());
    let names: Vec<&str> = joined
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(names, ["db", "ops"]);
    let nets = json(ctl(&c, &["get", "netnamespaces", "-o", "json"]).ok());
    let netid = |n: &str| {
        nets.as_array()
            .into_iter()
            .flatten()
            .find(|x| x["name"] == n)
            .map(|x| x["netid"].clone())
    };
    assert_eq!(netid("db"), netid("shop"));
    assert_eq!(netid("ops"), netid("shop"));
    let none = ctl(
        &c,
        &[
            "adm",
            "pod-network",
            "isolate-projects",
            "--selector=team=zzz",
        ],
    );
    assert!(
        none.fails().contains("matches no namespace"),
        "{}",
        none.stderr
    );
    let both = ctl(
        &c,
        &[
            "adm",
            "pod-network",
            "isolate-projects",
            "shop",
            "--selector=team=a",
        ],
    );
    assert_eq!(both.code, Some(2), "names and a selector: {}", both.stderr);

    // Mode change multitenant -> networkpolicy: refused while NETIDs are shared ...
    let to_np = write(
        dir.path(),
        "mode.yaml",
        "apiVersion: network.openshift.io/v1\nkind: ClusterNetwork\nmetadata: {name: default}\n\
         clusterNetworks: [{CIDR: 10.128.0.0/14, hostSubnetLength: 9}]\nserviceNetwork: 172.30.0.0/16\n\
         pluginName: redhat/openshift-ovs-networkpolicy\n",
    );
    let shared = ctl(&c, &["apply", "-f", &to_np]);
    assert!(shared.fails().contains("share NETID"), "{}", shared.stderr);
    let cn = json(ctl(&c, &["get", "clusternetwork", "-o", "json"]).ok());
    assert_eq!(cn["mode"], "multitenant");
    // ... and accepted once every namespace has its own.
    ctl(
        &c,
        &[
            "adm",
            "pod-network",
            "isolate-projects",
            "-l",
            "team in (a,b)",
        ],
    )
    .ok();
    assert_eq!(
        ctl(&c, &["apply", "-f", &to_np]).ok(),
        "clusternetwork/default configured\n"
    );
    let cn = json(ctl(&c, &["get", "clusternetwork", "-o", "json"]).ok());
    assert_eq!(cn["mode"], "networkpolicy");
    let refused = ctl(
        &c,
        &["adm", "pod-network", "join-projects", "--to=shop", "db"],
    );
    assert!(
        refused.fails().contains("Networkpolicy"),
        "{}",
        refused.stderr
    );

    // Restart: policies, labels, named ports and the mode are all still there.
    let before_pol = ctl(&c, &["get", "networkpolicies", "-o", "json"])
        .ok()
        .to_string();
    let before_pods = ctl(&c, &["get", "pods", "-o", "json"]).ok().to_string();
    let before_ns = ctl(&c, &["get", "netnamespaces", "-o", "json"])
        .ok()
        .to_string();
    c.kill9();
    c.spawn();
    assert_eq!(
        ctl(&c, &["get", "networkpolicies", "-o", "json"]).ok(),
        before_pol
    );
    assert_eq!(ctl(&c, &["get", "pods", "-o", "json"]).ok(), before_pods);
    assert_eq!(
        ctl(&c, &["get", "netnamespaces", "-o", "json"]).ok(),
        before_ns
    );
    let cn = json(ctl(&c, &["get", "clusternetwork", "-o", "json"]).ok());
    assert_eq!(cn["mode"], "networkpolicy");
    assert!(before_pol.contains("from-api") && before_ns.contains("\"team\": \"a\""));
}

/// A controller started in subnet mode, restarted with `--config` in networkpolicy mode: every
/// namespace gets a NETID of its own, stored, so a further restart keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_mode_change_from_subnet_gives_and_stores_netids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = |mode: &str| {
        let p = dir.path().join(format!("{mode}.yaml"));
        std::fs::write(
            &p,
            format!(
                "clusterNetworks:\n  - cidr: 10.128.0.0/14\n    hostPrefix: 23\nserviceNetwork: 172.30.0.0/16\nmode: {mode}\n"
            ),
        )
        .expect("write config");
        p.display().to_string()
    };
    let subnet = cfg("subnet");
    let np = cfg("networkpolicy");
    let mut c = Controller::start(&dir.path().join("data"), &["--config", &subnet]);
    for ns in ["a", "b"] {
        ctl(&c, &["namespace", "create", ns]).ok();
    }
    let netids = |c: &Controller| -> Vec<(String, u64)> {
        let j = json(ctl(c, &["get", "netnamespaces", "-o", "json"]).ok());
        j.as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                (
                    n["name"].as_str().unwrap_or_default().to_string(),
                    n["netid"].as_u64().unwrap_or(u64::MAX),
                )
            })
            .collect()
    };
    assert!(
        netids(&c).iter().all(|(_, id)| *id == 0),
        "{:?}",
        netids(&c)
    );
    c.kill9();
    c.extra = vec!["--config".into(), np];
    c.spawn();
    let after = netids(&c);
    let a = after.iter().find(|(n, _)| n == "a").map(|x| x.1);
    let b = after.iter().find(|(n, _)| n == "b").map(|x| x.1);
    assert!(
        a.is_some_and(|v| v != 0) && b.is_some_and(|v| v != 0) && a != b,
        "{after:?}"
    );
    let mode = json(ctl(&c, &["get", "clusternetwork", "-o", "json"]).ok());
    assert_eq!(mode["mode"], "networkpolicy");
    c.kill9();
    c.spawn();
    assert_eq!(netids(&c), after, "the new NETIDs were stored");
}

/// AttachPod (admin and node API) carries labels and named ports to a real switch's pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_pod_carries_labels_and_named_ports() {
    use flowmesh_tests::OvsSandbox;
    use std::collections::HashMap;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Controller::start(&dir.path().join("data"), &[]);
    let sbx = support::sandbox(&c, &[("node-a", 0xa, &[("p1", 3), ("p2", 4)])]);
    let mut admin = c.admin().await;
    admin
        .add_node(pa::AddNodeRequest {
            name: "node-a".into(),
            node_ip: "172.31.0.1".into(),
            dpid: 0xa,
        })
        .await
        .expect("add node");
    admin
        .create_namespace(pa::NameRequest { name: "ns1".into() })
        .await
        .expect("namespace");
    support::wait_synced(&mut admin, &["node-a"]).await;

    // Invalid labels or ports are refused before anything is attached.
    let bad = admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "web".into(),
            port_name: OvsSandbox::port_name("node-a", "p1"),
            ofport: 3,
            labels: HashMap::from([("bad key".to_string(), "x".to_string())]),
            ports: vec![],
        })
        .await
        .expect_err("bad label key");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    let bad = admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "web".into(),
            port_name: OvsSandbox::port_name("node-a", "p1"),
            ofport: 3,
            labels: HashMap::new(),
            ports: vec![pa::ContainerPort {
                name: "http".into(),
                protocol: "ICMP".into(),
                container_port: 80,
            }],
        })
        .await
        .expect_err("bad protocol");
    assert!(
        bad.message().contains("ports[0].protocol"),
        "{}",
        bad.message()
    );
    let listed = admin
        .list_pods(pa::Empty {})
        .await
        .expect("pods")
        .into_inner();
    assert!(listed.items.is_empty(), "{listed:?}");

    let pod = admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "web".into(),
            port_name: OvsSandbox::port_name("node-a", "p1"),
            ofport: 3,
            labels: HashMap::from([("app".to_string(), "web".to_string())]),
            ports: vec![pa::ContainerPort {
                name: "http".into(),
                protocol: String::new(),
                container_port: 8080,
            }],
        })
        .await
        .expect("attach with labels")
        .into_inner();
    assert_eq!(pod.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(pod.ports[0].protocol, "TCP");

    let mut node =
        proto::node::node_api_client::NodeApiClient::connect(format!("http://{}", c.grpc))
            .await
            .expect("node API");
    node.attach_pod(proto::node::AttachPodRequest {
        node: "node-a".into(),
        namespace: "ns1".into(),
        name: "db".into(),
        port_name: OvsSandbox::port_name("node-a", "p2"),
        ofport: 4,
        sandbox_id: "x".into(),
        labels: HashMap::from([("app".to_string(), "db".to_string())]),
        ports: vec![proto::node::ContainerPort {
            name: "pg".into(),
            protocol: "TCP".into(),
            container_port: 5432,
        }],
    })
    .await
    .expect("node API attach with labels");
    let j = json(ctl(&c, &["get", "pods", "-n", "ns1", "-o", "json"]).ok());
    assert_eq!(j[0]["name"], "db");
    assert_eq!(j[0]["labels"], serde_json::json!({"app": "db"}));
    assert_eq!(j[0]["ports"][0]["containerPort"], 5432);
    assert_eq!(j[1]["labels"], serde_json::json!({"app": "web"}));
    drop(sbx);
}
