//! The Kubernetes datastore (`--datastore kubernetes`) against a mock API server that speaks
//! the real HTTP protocol (`flowmesh_tests::kube_api`: list, watch with bookmarks, 410 Gone,
//! 409 Conflict, dropped watches, an API server that goes away) and real Open vSwitch bridges:
//! HostSubnets and NetNamespaces created for Nodes and Namespaces and written back,
//! `oc adm pod-network`'s change-network annotation, a Node deleted, NetworkPolicies added and
//! removed, Warning events, watches dropped and expired, the API server down (switches
//! untouched, then a hitless resync), the same flows as the embedded and etcd datastores,
//! the RBAC rules of `deploy/` against every call made, and the Lease election.

mod support;

use flowmesh_tests::kube_api::{MockApiServer, RequestRecord};
use flowmesh_tests::EtcdCluster;
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{
    bridges_match, ctl, desired, metric, netids, sandbox, sandbox_all, wait_for, wait_synced,
    Controller,
};
use tonic::transport::Channel;

const MODS: &str = "flowmesh_flow_mods_sent_total";
const WAIT: Duration = Duration::from_secs(20);

/// Nodes at 172.31.0.1..3; a bridge's datapath id is its node address as a number, what the
/// controller gives a Node before its shim registers.
const NODES: [support::NodeSpec<'static>; 3] = [
    ("node-a", 0xac1f_0001, &[("p1", 3), ("p2", 4)]),
    ("node-b", 0xac1f_0002, &[("p1", 3)]),
    ("node-c", 0xac1f_0003, &[("p1", 3)]),
];
const NODE_NAMES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// (node, port, namespace, ofport) of the scenario's pods; a pod is named `NODE-PORT`.
const PODS: [support::PodSpec<'static>; 4] = [
    ("node-a", "p1", "ns1", 3),
    ("node-a", "p2", "ns2", 4),
    ("node-b", "p1", "ns1", 3),
    ("node-c", "p1", "ns3", 3),
];

fn node_ip(i: usize) -> String {
    format!("172.31.0.{}", i + 1)
}

fn node_obj(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                    {"type": "Hostname", "address": name}]}})
}

/// A Namespace as the API server stores it (it labels every one with its name).
fn namespace_obj(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}})
}

/// A Pod the scheduler bound to `node`.
fn pod_obj(ns: &str, name: &str, node: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"nodeName": node,
                    "containers": [{"name": "c", "image": "registry.example/app",
                                    "ports": [{"name": "http", "containerPort": 8080}]}]}})
}

/// The cluster's objects before flowmesh runs: Namespaces (with flowmesh's own), Nodes, Pods.
fn seed(api: &MockApiServer) {
    for ns in ["default", "flowmesh", "ns1", "ns2", "ns3"] {
        api.put(namespace_obj(ns));
    }
    for (i, (name, _, _)) in NODES.iter().enumerate() {
        api.put(node_obj(name, &node_ip(i)));
    }
    for (node, port, ns, _) in PODS {
        api.put(pod_obj(
            ns,
            &format!("{node}-{port}"),
            node,
            json!({"app": ns}),
        ));
    }
}

/// The Cluster Network Operator's `Network cluster` objects (config and operator), with one
/// cluster network range (/23 per node) and the services at 172.30.0.0/16.
fn cno_objects(api: &MockApiServer, cidr: &str, mode: &str, vxlan_port: u16, mtu: u32) {
    api.put(
        json!({"apiVersion": "config.openshift.io/v1", "kind": "Network",
                   "metadata": {"name": "cluster"},
                   "spec": {"clusterNetwork": [{"cidr": cidr, "hostPrefix": 23}],
                            "serviceNetwork": ["172.30.0.0/16"]}}),
    );
    api.put(json!({"apiVersion": "operator.openshift.io/v1", "kind": "Network",
                   "metadata": {"name": "cluster"},
                   "spec": {"defaultNetwork": {"type": "OpenShiftSDN",
                            "openshiftSDNConfig": {"mode": mode, "vxlanPort": vxlan_port, "mtu": mtu}}}}));
}

/// A NetworkPolicy letting ns2 reach ns1's `app=ns1` pods on their named port `http`.
fn web_from_ns2() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "web-from-ns2", "namespace": "ns1"},
        "spec": {"podSelector": {"matchLabels": {"app": "ns1"}},
                 "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns2"}}}],
                              "ports": [{"port": "http"}]}]}
    })
}

/// A controller on the Kubernetes datastore of `api`.
fn kube_controller(dir: &Path, api: &MockApiServer, name: &str, extra: &[&str]) -> Controller {
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let kc = kubeconfig.to_string_lossy().into_owned();
    let mut args = vec![
        "--datastore",
        "kubernetes",
        "--kubeconfig",
        &kc,
        "--kube-namespace",
        "flowmesh",
    ];
    args.extend_from_slice(extra);
    Controller::start(&dir.join(name), &args)
}

fn config_file(dir: &Path, mode: &str) -> PathBuf {
    let p = dir.join(format!("cluster-{mode}.yaml"));
    std::fs::write(
        &p,
        format!(
            "clusterNetworks:\n  - cidr: 10.128.0.0/14\n    hostPrefix: 23\n\
             serviceNetwork: 172.30.0.0/16\nmode: {mode}\nvxlanPort: 4789\nmtu: 1450\n"
        ),
    )
    .expect("write config");
    p
}

/// An egress IP held by node-b for ns2, set with `flowmeshctl patch`.
fn manual_egress_ip(c: &Controller) {
    ctl(
        c.grpc,
        &["patch", "hostsubnet", "node-b", "--egress-ips=172.31.0.50"],
    )
    .ok();
    ctl(
        c.grpc,
        &["patch", "netnamespace", "ns2", "--egress-ips=172.31.0.50"],
    )
    .ok();
}

/// Attach the scenario's pods through the admin API, as the nodes' shims do.
async fn attach_pods(admin: &mut AdminClient<Channel>) {
    support::attach_pods(admin, &PODS).await;
}

fn netid_in_api(api: &MockApiServer, name: &str) -> Option<u64> {
    api.get("netnamespaces", None, name)
        .and_then(|o| o["netid"].as_u64())
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o["metadata"]["annotations"][key].as_str()
}

/// A PodAttachment as the controller writes it (here written by the test, as a forger with
/// rights to the cluster-scoped resource would).
fn pod_attachment(ns: &str, pod: &str, uid: &Value, node: &str, ip: &str, ofport: u32) -> Value {
    json!({"apiVersion": "flowmesh.io/v1", "kind": "PodAttachment",
           "metadata": {"name": format!("{ns}.{pod}")},
           "spec": {"namespace": ns, "pod": pod, "podUid": uid, "node": node,
                    "portName": format!("veth-{pod}"), "ofport": ofport, "ip": ip}})
}

/// Put the change-network annotation `oc adm pod-network` writes on a NetNamespace.
fn request_change_network(api: &MockApiServer, name: &str, value: &str) {
    let mut o = api.get("netnamespaces", None, name).expect("netnamespace");
    o["metadata"]["annotations"]["pod.network.openshift.io/multitenant.change-network"] =
        json!(value);
    api.put(o);
}

/// Wait until the request on `name` was handled (annotation gone) and its NETID is `want`.
async fn change_handled(api: &MockApiServer, name: &str, want: impl Fn(u64) -> bool) {
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.get("netnamespaces", None, name).is_some_and(|o| {
                annotation(&o, "pod.network.openshift.io/multitenant.change-network").is_none()
                    && o["netid"].as_u64().is_some_and(&want)
            })
        })
        .await;
    assert!(
        ok,
        "change-network on {name} not carried out: {:?}",
        api.get("netnamespaces", None, name)
    );
}

/// Wait for a Warning event about `name` with `reason` whose note contains `text`.
async fn wait_for_warning(api: &MockApiServer, name: &str, reason: &str, text: &str) {
    let ok = api
        .wait_for_async(WAIT, |a| {
            warnings_about(a, name)
                .iter()
                .any(|(r, n)| r == reason && n.contains(text))
        })
        .await;
    assert!(
        ok,
        "no {reason} event about {name}: {:?}",
        api.list("events.events.k8s.io", None)
    );
}

/// Warning events about `name` (events.k8s.io/v1), as (reason, note).
fn warnings_about(api: &MockApiServer, name: &str) -> Vec<(String, String)> {
    api.list("events.events.k8s.io", None)
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name && e["type"] == "Warning")
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_are_written_back_and_annotations_carried_out() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let c = kube_controller(dir.path(), &api, "c", &[]);
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;

    // A HostSubnet for every Node, a NetNamespace for every Namespace, the ClusterNetwork.
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.list("hostsubnets", None).len() == 3 && a.list("netnamespaces", None).len() == 5
        })
        .await;
    assert!(
        ok,
        "allocations not written back: {:?} {:?}",
        api.list("hostsubnets", None),
        api.list("netnamespaces", None)
    );
    let cn = api
        .get("clusternetworks", None, "default")
        .expect("ClusterNetwork default");
    assert_eq!(cn["clusterNetworks"][0]["CIDR"], "10.128.0.0/14", "{cn}");
    let subnets: BTreeMap<String, String> = admin
        .list_host_subnets(pa::Empty {})
        .await
        .expect("hostsubnets")
        .into_inner()
        .items
        .into_iter()
        .map(|h| (h.node, h.subnet))
        .collect();
    for (i, (name, dpid, _)) in NODES.iter().enumerate() {
        let hs = api.get("hostsubnets", None, name).expect("hostsubnet");
        assert_eq!(hs["hostIP"], node_ip(i), "{hs}");
        assert_eq!(
            hs["subnet"].as_str(),
            subnets.get(*name).map(String::as_str)
        );
        assert_eq!(
            annotation(&hs, "flowmesh.io/datapath-id"),
            Some(format!("{dpid:#018x}").as_str())
        );
    }
    let ids = netids(&mut admin).await;
    for ns in ["ns1", "ns2", "ns3", "flowmesh"] {
        let id = netid_in_api(&api, ns).expect("netid");
        assert!(id >= 10, "{ns}: {id}");
        assert_eq!(Some(&(id as u32)), ids.get(ns));
    }
    assert_eq!(netid_in_api(&api, "default"), Some(0));

    // Pods attached by their shims get their PodAttachment; the bridges get their flows.
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    let p = api.get("pods", Some("ns1"), "node-a-p1").expect("pod");
    let att = api
        .get("podattachments", None, "ns1.node-a-p1")
        .expect("PodAttachment ns1.node-a-p1");
    assert_eq!(att["spec"]["node"], "node-a", "{att}");
    assert_eq!(att["spec"]["podUid"], p["metadata"]["uid"], "{att}");
    assert_eq!(att["spec"]["ofport"], 3, "{att}");
    assert!(
        att["spec"]["ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.12")),
        "{att}"
    );
    assert!(annotation(&p, "flowmesh.io/attachment").is_none(), "{p}");
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;

    // oc adm pod-network join-projects --to=ns1 ns3; isolate-projects ns3; make-projects-global.
    let ns1 = netid_in_api(&api, "ns1").expect("ns1");
    request_change_network(&api, "ns3", "join:ns1");
    change_handled(&api, "ns3", |id| id == ns1).await;
    assert_eq!(netids(&mut admin).await["ns3"], ns1 as u32);
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    request_change_network(&api, "ns3", "isolate");
    change_handled(&api, "ns3", |id| id >= 10 && id != ns1).await;
    request_change_network(&api, "ns2", "global");
    change_handled(&api, "ns2", |id| id == 0).await;
    // A malformed request is removed and reported.
    request_change_network(&api, "ns2", "merge-with:ns1");
    change_handled(&api, "ns2", |id| id == 0).await;
    wait_for_warning(&api, "ns2", "ChangeNetworkRefused", "merge-with:ns1").await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;

    // Egress IPs: manual on a HostSubnet, and placed automatically on a node with egressCIDRs;
    // the automatic assignment is written back to the HostSubnet's egressIPs, as OpenShift does.
    manual_egress_ip(&c);
    ctl(
        c.grpc,
        &[
            "patch",
            "hostsubnet",
            "node-a",
            "--egress-cidrs=172.31.0.0/24",
        ],
    )
    .ok();
    ctl(
        c.grpc,
        &["patch", "netnamespace", "ns1", "--egress-ips=172.31.0.60"],
    )
    .ok();
    let ok = api
        .wait_for_async(WAIT, |a| {
            let hs = |n: &str| a.get("hostsubnets", None, n).unwrap_or_default();
            let nn = |n: &str| a.get("netnamespaces", None, n).unwrap_or_default();
            hs("node-b")["egressIPs"] == json!(["172.31.0.50"])
                && hs("node-a")["egressCIDRs"] == json!(["172.31.0.0/24"])
                && hs("node-a")["egressIPs"] == json!(["172.31.0.60"])
                && nn("ns2")["egressIPs"] == json!(["172.31.0.50"])
                && nn("ns1")["egressIPs"] == json!(["172.31.0.60"])
        })
        .await;
    assert!(
        ok,
        "egress IPs not written back: {:?} {:?}",
        api.list("hostsubnets", None),
        api.list("netnamespaces", None)
    );

    // Nodes and namespaces are the API's: the admin API cannot make one the API lacks.
    let err = ctl(c.grpc, &["namespace", "create", "nowhere"])
        .fails()
        .to_string();
    assert!(err.contains("no Kubernetes Namespace"), "{err}");
    let err = ctl(
        c.grpc,
        &[
            "node",
            "add",
            "ghost",
            "--ip",
            "172.31.0.9",
            "--dpid",
            "0x9",
        ],
    )
    .fails()
    .to_string();
    assert!(err.contains("no Kubernetes Node"), "{err}");
    assert!(api.get("netnamespaces", None, "nowhere").is_none());
    assert!(api.get("hostsubnets", None, "ghost").is_none());

    // A Pod deleted from the API: detached, its flows gone everywhere, its PodAttachment
    // removed by the leader.
    api.delete("pods", Some("ns1"), "node-b-p1");
    assert!(
        api.wait_for_async(WAIT, |a| a
            .get("podattachments", None, "ns1.node-b-p1")
            .is_none())
            .await,
        "the PodAttachment of a deleted Pod stayed"
    );
    wait_for("node-b-p1 detached", WAIT, async || {
        let pods = admin
            .list_pods(pa::Empty {})
            .await
            .expect("pods")
            .into_inner()
            .items;
        !pods.iter().any(|p| p.name == "node-b-p1")
    })
    .await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    assert!(
        !sbx.dump_flows("node-b")
            .expect("dump")
            .iter()
            .any(|l| l.contains("10.128.2.2")),
        "node-b-p1's flows stayed"
    );

    // A Namespace created and deleted: its NetNamespace follows.
    api.put(namespace_obj("ns4"));
    assert!(
        api.wait_for_async(WAIT, |a| netid_in_api(a, "ns4").is_some())
            .await,
        "no NetNamespace for ns4"
    );
    api.delete("namespaces", None, "ns4");
    assert!(
        api.wait_for_async(WAIT, |a| a.get("netnamespaces", None, "ns4").is_none())
            .await,
        "NetNamespace ns4 not released"
    );

    // A Node deleted: its HostSubnet goes, the others lose their tunnel to it.
    let before = desired(&mut admin, "node-a").await;
    assert!(
        before.iter().any(|l| l.contains("172.31.0.3")),
        "{before:#?}"
    );
    api.delete("nodes", None, "node-c");
    assert!(
        api.wait_for_async(WAIT, |a| a.get("hostsubnets", None, "node-c").is_none())
            .await,
        "HostSubnet node-c not released"
    );
    wait_for("node-c gone from the model", WAIT, async || {
        let now = desired(&mut admin, "node-a").await;
        !now.iter().any(|l| l.contains("172.31.0.3"))
    })
    .await;
    bridges_match(&sbx, &mut admin, &["node-a", "node-b"]).await;
}

/// A mode for NetworkPolicies: a policy added to the API shows as flows in tables 27/80 on
/// the bridges and goes with its object; an invalid one is refused with a Warning event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policies_follow_their_objects_and_bad_ones_are_reported() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let cfg = config_file(dir.path(), "networkpolicy");
    let cfg = cfg.to_string_lossy().into_owned();
    let c = kube_controller(dir.path(), &api, "c", &["--config", &cfg]);
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    let without = sbx.dump_flows("node-a").expect("dump");

    api.put(web_from_ns2());
    let table80 = |flows: &[String]| -> Vec<String> {
        flows
            .iter()
            .filter(|l| l.contains("table=80"))
            .cloned()
            .collect()
    };
    // The named port resolved from the Pod's spec, the peer namespace from its label.
    let ns2 = netid_in_api(&api, "ns2").expect("ns2");
    wait_for("policy flows in table 80", WAIT, async || {
        let t = table80(&desired(&mut admin, "node-a").await);
        t.iter()
            .any(|l| l.contains("tcp,tp_dst=8080 actions=conjunction"))
            && t.iter()
                .any(|l| l.contains(&format!("reg0={ns2:#x} actions=conjunction")))
    })
    .await;
    assert_ne!(
        table80(&desired(&mut admin, "node-a").await),
        table80(&without)
    );
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    let listed = admin
        .list_network_policies(pa::ListNetworkPoliciesRequest::default())
        .await
        .expect("list")
        .into_inner()
        .items;
    assert_eq!(listed.len(), 1, "{listed:?}");

    api.delete("networkpolicies", Some("ns1"), "web-from-ns2");
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    assert_eq!(sbx.dump_flows("node-a").expect("dump"), without);

    api.put(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "broken", "namespace": "ns1"},
        "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}
    }));
    wait_for_warning(&api, "broken", "Refused", "10.0.0.0/33").await;
    assert_eq!(sbx.dump_flows("node-a").expect("dump"), without);
    // In this mode a change-network request is refused and removed.
    request_change_network(&api, "ns3", "join:ns1");
    change_handled(&api, "ns3", |id| id >= 10).await;
    assert_ne!(netid_in_api(&api, "ns3"), netid_in_api(&api, "ns1"));
}

/// Watches dropped mid-stream and expired (410 Gone after a compaction) resume; with the API
/// server unreachable the switches keep their flows and writes fail clearly; when it is back
/// the controller catches up with no flow-mod beyond the change made meanwhile, and a
/// controller restart sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_faults_and_an_unreachable_api_server_leave_the_switches_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    api.set_bookmark_interval(Duration::from_millis(300));
    seed(&api);
    let mut c = kube_controller(dir.path(), &api, "c", &[]);
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;

    api.drop_watches();
    api.put(namespace_obj("after-drop"));
    assert!(
        api.wait_for_async(WAIT, |a| netid_in_api(a, "after-drop").is_some())
            .await,
        "a dropped watch did not resume"
    );
    api.compact();
    api.expire_watches();
    api.put(namespace_obj("after-expiry"));
    assert!(
        api.wait_for_async(WAIT, |a| netid_in_api(a, "after-expiry").is_some())
            .await,
        "an expired watch did not relist"
    );
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;

    // The API server goes away.
    let mods = metric(&c, MODS);
    let flows: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    api.set_down(true);
    let r = ctl(c.grpc, &["label", "namespace", "ns1", "team=blue"]);
    let err = r.fails();
    assert!(err.contains("Kubernetes API server"), "{err}");
    // A window with the API away in which a flow-mod would be counted: that none is sent
    // is what is tested.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        metric(&c, MODS),
        mods,
        "flow-mods sent while the API was away"
    );
    let now: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(
        now, flows,
        "the switches' flows changed while the API was away"
    );
    // Reads still answer from the model.
    assert_eq!(netids(&mut admin).await.len(), 7);

    // Back, with a pod relabelled and a namespace made meanwhile (by others).
    api.set_down(false);
    api.put(namespace_obj("while-down"));
    assert!(
        api.wait_for_async(WAIT, |a| netid_in_api(a, "while-down").is_some())
            .await,
        "no catch-up after the API server came back"
    );
    ctl(c.grpc, &["label", "namespace", "ns1", "team=blue"]).ok();
    let ns1 = api.get("namespaces", None, "ns1").expect("ns1");
    assert_eq!(ns1["metadata"]["labels"]["team"], "blue", "{ns1}");
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    // Namespaces without pods and a namespace label change no flow in multitenant mode.
    assert_eq!(metric(&c, MODS), mods, "flow-mods after the API came back");

    // A controller restart against the same API and switches: nothing sent.
    c.kill9();
    c.spawn();
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    // A window after the resync in which a late flow-mod would be counted (what is tested).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metric(&c, MODS), 0, "a restart sent flow-mods");
}

/// The embedded default, a real etcd cluster and the Kubernetes API hold the same scenario
/// (nodes, namespaces, pods, a join) and give byte-identical flows on real bridges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_etcd_and_kubernetes_datastores_give_identical_flows() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = EtcdCluster::start(1).expect("etcd");
    let eps = etcd.endpoints();
    let mut flows: Vec<(&str, Vec<Vec<String>>)> = Vec::new();
    for store in ["embedded", "etcd", "kubernetes"] {
        let api = MockApiServer::start_for_controller();
        let c = match store {
            "kubernetes" => {
                seed(&api);
                kube_controller(dir.path(), &api, store, &[])
            }
            "etcd" => Controller::start(
                &dir.path().join(store),
                &["--datastore", "etcd", "--etcd-endpoints", &eps],
            ),
            _ => Controller::start(&dir.path().join(store), &[]),
        };
        let sbx = sandbox(&c, &NODES);
        let mut admin = c.admin().await;
        if store == "kubernetes" {
            assert!(
                api.wait_for_async(WAIT, |a| a.list("netnamespaces", None).len() == 5)
                    .await
            );
        } else {
            // What the master does with the Kubernetes objects, through the admin API.
            for (i, (name, dpid, _)) in NODES.iter().enumerate() {
                admin
                    .add_node(pa::AddNodeRequest {
                        name: name.to_string(),
                        node_ip: node_ip(i),
                        dpid: *dpid,
                    })
                    .await
                    .expect("add node");
            }
            for ns in ["flowmesh", "ns1", "ns2", "ns3"] {
                admin
                    .create_namespace(pa::NameRequest { name: ns.into() })
                    .await
                    .expect("namespace");
            }
        }
        wait_synced(&mut admin, &NODE_NAMES).await;
        attach_pods(&mut admin).await;
        if store == "kubernetes" {
            request_change_network(&api, "ns3", "join:ns1");
            let ns1 = netid_in_api(&api, "ns1").expect("ns1");
            change_handled(&api, "ns3", |id| id == ns1).await;
        } else {
            admin
                .join_projects(pa::JoinProjectsRequest {
                    namespaces: vec!["ns3".into()],
                    to: "ns1".into(),
                    ..Default::default()
                })
                .await
                .expect("join");
        }
        bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
        let per_node: Vec<Vec<String>> = NODE_NAMES
            .iter()
            .map(|n| sbx.dump_flows(n).expect("dump"))
            .collect();
        assert!(per_node.iter().all(|f| f.len() > 10), "{per_node:?}");
        flows.push((store, per_node));
    }
    assert_eq!(flows[0].1, flows[1].1, "embedded and etcd differ");
    assert_eq!(flows[0].1, flows[2].1, "embedded and kubernetes differ");
}

/// (verb, API group, resource) a ClusterRole or Role of `deploy/kubernetes/10-rbac.yaml`
/// grants.
fn granted() -> BTreeSet<(String, String, String)> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
    use serde::Deserialize;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/10-rbac.yaml");
    let text = std::fs::read_to_string(path).expect("read rbac");
    let mut rules: Vec<PolicyRule> = Vec::new();
    for de in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_yaml::Value::deserialize(de).expect("yaml");
        match doc.get("kind").and_then(|k| k.as_str()) {
            Some("ClusterRole") => rules.extend(
                serde_yaml::from_value::<ClusterRole>(doc)
                    .expect("ClusterRole")
                    .rules
                    .unwrap_or_default(),
            ),
            Some("Role") => rules.extend(
                serde_yaml::from_value::<Role>(doc)
                    .expect("Role")
                    .rules
                    .unwrap_or_default(),
            ),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((v.clone(), g.clone(), res.clone()));
                }
            }
        }
    }
    out
}

fn used(reqs: &[RequestRecord]) -> BTreeSet<(String, String, String)> {
    reqs.iter()
        .map(|r| (r.verb.clone(), r.group.clone(), r.resource.clone()))
        .collect()
}

/// A scenario that makes the controller use every call it has (conflicts injected for the
/// re-reads, a DNS name resolved and dropped for the DNS ConfigMaps, two replicas for the
/// Lease): the RBAC rules in deploy/ grant each call, and nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_rbac_grants_exactly_the_calls_the_controller_makes() {
    use flowmesh_tests::dns::DnsServer;
    use std::net::SocketAddrV4;
    let zone = DnsServer::start(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("dns");
    zone.set("api.example.test", &[Ipv4Addr::new(192, 0, 2, 10)], 60);
    let dns = zone.addr.to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    // The Cluster Network Operator's objects, as OpenShift has them.
    cno_objects(&api, "10.128.0.0/14", "Multitenant", 4789, 1450);
    // A PodAttachment placing node-a-p1 on another node than its Pod's: refused, and
    // replaced (update) when node-a attaches the pod.
    let uid = api.get("pods", Some("ns1"), "node-a-p1").expect("pod")["metadata"]["uid"].clone();
    api.put(pod_attachment(
        "ns1",
        "node-a-p1",
        &uid,
        "node-b",
        "10.128.2.9",
        3,
    ));
    let c = kube_controller(
        dir.path(),
        &api,
        "c",
        &["--egress-dns-server", &dns, "--replica-id", "r1"],
    );
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    // Every write kind once with a conflict first: the 409 makes the controller re-read.
    for (verb, res) in [
        ("create", "podattachments"),
        ("patch", "pods"),
        ("patch", "namespaces"),
        ("update", "netnamespaces"),
        ("update", "hostsubnets"),
        ("create", "networkpolicies.networking.k8s.io"),
        ("create", "egressnetworkpolicies"),
        ("update", "clusternetworks"),
        ("create", "configmaps"),
    ] {
        api.fail_next(verb, res, 409, 1);
    }
    attach_pods(&mut admin).await;
    ctl(c.grpc, &["label", "namespace", "ns1", "team=blue"]).ok();
    ctl(c.grpc, &["label", "pod", "ns1/node-a-p1", "tier=web"]).ok();
    ctl(
        c.grpc,
        &["adm", "pod-network", "join-projects", "--to=ns1", "ns3"],
    )
    .ok();
    manual_egress_ip(&c);
    let manifests = dir.path().join("objects.yaml");
    std::fs::write(
        &manifests,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: p\n  namespace: ns1\n\
         spec:\n  podSelector: {}\n---\n\
         apiVersion: network.openshift.io/v1\nkind: EgressNetworkPolicy\nmetadata:\n  name: fw\n  namespace: ns2\n\
         spec:\n  egress:\n  - type: Deny\n    to:\n      dnsName: api.example.test\n\
         ---\napiVersion: network.openshift.io/v1\nkind: ClusterNetwork\nmetadata:\n  name: default\n\
         clusterNetworks:\n- CIDR: 10.128.0.0/14\n  hostSubnetLength: 9\n\
         serviceNetwork: 172.30.0.0/16\npluginName: redhat/openshift-ovs-multitenant\nmtu: 1400\n",
    )
    .expect("write");
    let path = manifests.to_string_lossy().into_owned();
    ctl(c.grpc, &["apply", "-f", &path]).ok();
    // Replaced (update), then removed (delete), with the DNS record's ConfigMap.
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.list("configmaps", Some("flowmesh"))
                .iter()
                .any(|cm| cm["data"]["name"] == "api.example.test")
        })
        .await;
    assert!(ok, "no DNS ConfigMap: {:?}", api.list("configmaps", None));
    std::fs::write(
        &manifests,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: p\n  namespace: ns1\n\
         spec:\n  podSelector: {}\n  policyTypes: [Ingress, Egress]\n---\n\
         apiVersion: network.openshift.io/v1\nkind: EgressNetworkPolicy\nmetadata:\n  name: fw\n  namespace: ns2\n\
         spec:\n  egress:\n  - type: Deny\n    to:\n      cidrSelector: 192.0.2.0/24\n",
    )
    .expect("write");
    ctl(c.grpc, &["apply", "-f", &path]).ok();
    ctl(c.grpc, &["delete", "networkpolicy", "ns1/p"]).ok();
    ctl(c.grpc, &["delete", "egressnetworkpolicy", "ns2/fw"]).ok();
    let ok = api
        .wait_for_async(WAIT, |a| {
            !a.list("configmaps", Some("flowmesh"))
                .iter()
                .any(|cm| cm["data"]["name"] == "api.example.test")
        })
        .await;
    assert!(ok, "the DNS ConfigMap stayed");
    // Namespace and Node deleted; a refused request reported twice (a series: patch).
    api.delete("namespaces", None, "ns3");
    api.delete("nodes", None, "node-c");
    for _ in 0..2 {
        request_change_network(&api, "ns2", "bogus");
        change_handled(&api, "ns2", |_| true).await;
    }
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.get("hostsubnets", None, "node-c").is_none()
                && a.get("netnamespaces", None, "ns3").is_none()
                && a.requests()
                    .iter()
                    .any(|r| r.verb == "patch" && r.resource == "events")
        })
        .await;
    assert!(ok, "deletes or event series missing");
    ctl(c.grpc, &["get", "controllers"]).ok();
    // A second replica: it creates nothing but reads the Lease; the first one's shutdown
    // updates it (resign).
    let c2 = kube_controller(dir.path(), &api, "c2", &["--replica-id", "r2"]);
    // A second of a standby's life, whose calls join the RBAC check below (nothing the mock
    // records tells this replica's calls from the leader's, so there is no event to wait on).
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(c2);
    drop(sbx);
    // SIGTERM: the leader resigns (updates the Lease) on its way out.
    let mut c = c;
    let mut child = c.child.take().expect("running");
    support::send_signal(child.id(), "TERM");
    let deadline = Instant::now() + WAIT;
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reqs = api.requests();
    let used = used(&reqs);
    let granted = granted();
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "calls the RBAC rules do not grant: {missing:?}"
    );
    let unused: Vec<_> = granted.difference(&used).collect();
    assert!(unused.is_empty(), "granted but never called: {unused:?}");
}

fn lease_holder(api: &MockApiServer) -> Option<String> {
    api.get("leases", Some("flowmesh"), "flowmesh-controller")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

/// Two replicas on one API server: one holds the Lease and is OpenFlow master, the other is
/// slave; the leader hangs (SIGSTOP: it stops renewing); the standby takes the Lease within
/// the lease duration of the last renewal and becomes master on every real bridge without a
/// single flow-mod; the old leader, resumed, steps down to slave and sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_the_lease_and_the_switches_hitlessly() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let ttl = 2;
    let ttl_arg = ttl.to_string();
    let cs = [
        kube_controller(
            dir.path(),
            &api,
            "r1",
            &["--replica-id", "r1", "--leader-ttl", &ttl_arg],
        ),
        kube_controller(
            dir.path(),
            &api,
            "r2",
            &["--replica-id", "r2", "--leader-ttl", &ttl_arg],
        ),
    ];
    let sbx = sandbox_all(&[&cs[0], &cs[1]], &NODES);
    assert!(
        api.wait_for_async(WAIT, |a| lease_holder(a).is_some())
            .await,
        "nobody took the Lease"
    );
    let l = usize::from(lease_holder(&api).as_deref() == Some("r2"));
    let (leader, standby) = (&cs[l], &cs[1 - l]);
    let mut admin = leader.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    wait_for("the leader to be master", WAIT, async || {
        support::granted_everywhere(leader, &NODE_NAMES, "master").await
            && support::granted_everywhere(standby, &NODE_NAMES, "slave").await
    })
    .await;
    let listed = ctl(standby.grpc, &["get", "controllers"]).ok().to_string();
    assert!(listed.contains(&format!("r{}", l + 1)), "{listed}");
    let mods = metric(standby, MODS);
    let old_mods = metric(leader, MODS);
    assert!(old_mods > 0, "the leader programmed nothing");
    let flows: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();

    let pid = leader.child.as_ref().expect("leader").id();
    support::send_signal(pid, "STOP");
    let stopped = Instant::now();
    let want = format!("r{}", 2 - l);
    assert!(
        api.wait_for_async(WAIT, |a| lease_holder(a).as_deref() == Some(want.as_str()))
            .await,
        "the standby never took the Lease"
    );
    let took = stopped.elapsed();
    wait_for("the new leader to be master", WAIT, async || {
        support::granted_everywhere(standby, &NODE_NAMES, "master").await
    })
    .await;
    let master = stopped.elapsed();
    eprintln!("lease taken {took:?} after SIGSTOP, master everywhere after {master:?}");
    // The last renewal was at most a third of the lease before the stop.
    assert!(
        took < Duration::from_secs(ttl) * 2,
        "takeover took {took:?} with a {ttl} s lease"
    );
    assert_eq!(metric(standby, MODS), mods, "the takeover sent flow-mods");
    let now: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(now, flows, "the takeover changed flows");
    wait_for("OVS to show the new master", WAIT, async || {
        support::master_everywhere(&sbx, &NODE_NAMES, &standby.target())
    })
    .await;

    // The old leader wakes up: fenced by the switches' generation and its lapsed Lease.
    support::send_signal(pid, "CONT");
    wait_for("the old leader to be slave", WAIT, async || {
        support::granted_everywhere(leader, &NODE_NAMES, "slave").await
    })
    .await;
    assert_eq!(
        metric(leader, MODS),
        old_mods,
        "the deposed leader sent flow-mods"
    );
    assert_eq!(lease_holder(&api).as_deref(), Some(want.as_str()));
    let mut admin = standby.admin().await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
}

/// A standby whose watches are failing (in back-off after an error, still holding what it saw
/// before) does not take a free Lease: leading from that view would program every switch from
/// the past (the real cluster's `cluster_ha` lost its stream pods' flows for 20 s to a new
/// leader whose Pod watch was still backing off after an API server restart). It takes the
/// Lease once its watch lists again, and changes nothing on the switches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_whose_watches_fail_takes_the_lease_only_once_it_sees_the_present() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let ttl_arg = "2";
    let mut cs = [
        kube_controller(
            dir.path(),
            &api,
            "r1",
            &["--replica-id", "r1", "--leader-ttl", ttl_arg],
        ),
        kube_controller(
            dir.path(),
            &api,
            "r2",
            &["--replica-id", "r2", "--leader-ttl", ttl_arg],
        ),
    ];
    let sbx = sandbox_all(&[&cs[0], &cs[1]], &NODES);
    assert!(
        api.wait_for_async(WAIT, |a| lease_holder(a).is_some())
            .await,
        "nobody took the Lease"
    );
    let old = lease_holder(&api).expect("holder");
    let l = usize::from(old == "r2");
    {
        let mut admin = cs[l].admin().await;
        wait_synced(&mut admin, &NODE_NAMES).await;
        attach_pods(&mut admin).await;
        bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    }
    let flows: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();

    // The leader dies; the standby's Pod watch fails from now on.
    cs[l].kill9();
    api.fail_next("list", "pods", 500, u32::MAX);
    api.fail_next("watch", "pods", 500, u32::MAX);
    api.clear_requests();
    api.drop_watches();
    let standby = &cs[1 - l];
    assert!(
        api.wait_for_async(WAIT, |a| a
            .requests()
            .iter()
            .any(|r| r.resource == "pods" && (r.verb == "list" || r.verb == "watch")))
            .await,
        "the standby did not watch Pods again"
    );
    // Enough election rounds for the dead leader's Lease to expire several times over (a
    // round is at least a third of the 2 s lease apart; the Lease is taken 2 s after the
    // standby last saw it change): the standby leaves it alone.
    api.clear_requests();
    let lease_reads = |a: &MockApiServer| {
        a.requests()
            .iter()
            .filter(|r| {
                r.verb == "get"
                    && r.resource == "leases"
                    && r.name.as_deref() == Some("flowmesh-controller")
            })
            .count()
    };
    assert!(
        api.wait_for_async(WAIT, |a| lease_reads(a) >= 9).await,
        "the standby stopped reading the Lease"
    );
    assert_eq!(
        lease_holder(&api).as_deref(),
        Some(old.as_str()),
        "the standby took the Lease with a failing Pod watch"
    );
    let ready = support::http_get(standby.metrics, "/readyz").await;
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("the store is unavailable"),
        "{ready}"
    );

    // The watch lists again: the standby leads, without a change to any switch.
    api.clear_failures();
    let want = format!("r{}", 2 - l);
    assert!(
        api.wait_for_async(WAIT, |a| lease_holder(a).as_deref() == Some(want.as_str()))
            .await,
        "the standby never took the Lease once its watch was back"
    );
    wait_for("the new leader to be master", WAIT, async || {
        support::granted_everywhere(standby, &NODE_NAMES, "master").await
    })
    .await;
    let mut admin = standby.admin().await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    support::wait_ready(standby, "the new leader ready", WAIT).await;
    let now: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(now, flows, "the takeover changed flows");
}

/// One watched object that does not decode (here a PodAttachment whose ofport is a string: the
/// mock applies no schema, a real API server one looser than the type) is left out; the watch
/// goes on and the replica stays ready (a watch started over for it would list the same object
/// again and fail for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_does_not_decode_leaves_the_watch_and_readiness_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let c = kube_controller(dir.path(), &api, "c", &[]);
    let _sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    support::wait_ready(&c, "the controller ready", WAIT).await;
    let mut junk = pod_attachment(
        "ns1",
        "junk",
        &json!("uid-junk"),
        "node-a",
        "10.128.0.99",
        9,
    );
    junk["spec"]["ofport"] = json!("nine");
    api.put(junk);
    wait_for("the undecodable object reported", WAIT, async || {
        c.log_text().contains("a watched object does not decode")
    })
    .await;
    let ready = support::http_get(c.metrics, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    support::attach_pods(&mut admin, &PODS[..1]).await;
    assert!(
        pod_names(&mut admin).await.contains("ns1/node-a-p1"),
        "the attach after the junk"
    );
}

/// What flowmesh cannot do is told as a Warning event on the object: a Node with no subnet
/// left in the cluster network, and an egress IP inside the cluster network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_range_and_a_bad_egress_request_are_reported_as_events() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    // The Cluster Network Operator's objects decide the cluster network (over --config's
    // default): room for two node subnets only.
    cno_objects(&api, "10.128.0.0/22", "NetworkPolicy", 4790, 1400);
    let c = kube_controller(dir.path(), &api, "c", &[]);
    let cn = ctl(c.grpc, &["get", "clusternetwork"]).ok().to_string();
    for want in ["10.128.0.0/22", "/23", "networkpolicy", "4790", "1400"] {
        assert!(cn.contains(want), "{want} not in {cn}");
    }
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.list("hostsubnets", None).len() == 2
                && warnings_about(a, "node-c")
                    .iter()
                    .any(|(r, _)| r == "SubnetAllocationFailed")
        })
        .await;
    assert!(
        ok,
        "no SubnetAllocationFailed event: {:?} {:?}",
        api.list("hostsubnets", None),
        api.list("events.events.k8s.io", None)
    );
    // Reported once, not on every retry: a window of several retries in which a second
    // event would show (what is tested).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let n = warnings_about(&api, "node-c").len();
    assert_eq!(n, 1, "{:?}", api.list("events.events.k8s.io", None));

    let mut o = api.get("netnamespaces", None, "ns1").expect("ns1");
    o["egressIPs"] = json!(["10.128.0.9"]);
    api.put(o);
    wait_for_warning(&api, "ns1", "Refused", "10.128.0.9").await;
    let mut admin = c.admin().await;
    let ns1 = admin
        .list_net_namespaces(pa::Empty {})
        .await
        .expect("list")
        .into_inner()
        .items
        .into_iter()
        .find(|n| n.name == "ns1")
        .expect("ns1");
    assert!(ns1.egress_ips.is_empty(), "{ns1:?}");
}

/// Egress IPs written on the objects themselves, as `oc patch` does (`egressCIDRs` on two
/// HostSubnets, `egressIPs` on a NetNamespace), not through flowmesh's API: the controller
/// places the IP and writes its choice into that HostSubnet's `egressIPs`, as OpenShift's master
/// does, and only there; the requests written by hand stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_ips_written_on_the_objects_are_placed_and_the_placement_written_back() {
    egress_ips_written_on_the_objects(false).await;
}

/// The same requests written while no controller runs: the leader that starts places the IP
/// and writes the placement back (the stored egress IPs are compared with the model's at
/// start-up, not only on a watched change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_ips_written_while_no_controller_runs_are_placed_when_one_starts() {
    egress_ips_written_on_the_objects(true).await;
}

async fn egress_ips_written_on_the_objects(while_stopped: bool) {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let mut c = kube_controller(dir.path(), &api, "c", &[]);
    let _sbx = sandbox(&c, &NODES);
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.list("hostsubnets", None).len() == 3 && a.get("netnamespaces", None, "ns1").is_some()
        })
        .await;
    assert!(ok, "no HostSubnets: {:?}", api.list("hostsubnets", None));
    if while_stopped {
        c.kill9();
    }
    for n in ["node-a", "node-b"] {
        let mut hs = api.get("hostsubnets", None, n).expect("hostsubnet");
        hs["egressCIDRs"] = json!(["172.31.0.96/28"]);
        api.put(hs);
    }
    let mut nn = api.get("netnamespaces", None, "ns1").expect("ns1");
    nn["egressIPs"] = json!(["172.31.0.100"]);
    api.put(nn);
    if while_stopped {
        c.spawn();
    }
    let placed = |a: &MockApiServer| -> Vec<String> {
        ["node-a", "node-b", "node-c"]
            .iter()
            .filter(|n| {
                a.get("hostsubnets", None, n).unwrap_or_default()["egressIPs"]
                    == json!(["172.31.0.100"])
            })
            .map(|n| n.to_string())
            .collect()
    };
    let ok = api
        .wait_for_async(WAIT, |a| {
            let p = placed(a);
            p.len() == 1 && p[0] != "node-c"
        })
        .await;
    assert!(
        ok,
        "the placement was not written back: {:?}",
        api.list("hostsubnets", None)
    );
    for n in ["node-a", "node-b"] {
        let hs = api.get("hostsubnets", None, n).expect("hostsubnet");
        assert_eq!(hs["egressCIDRs"], json!(["172.31.0.96/28"]), "{hs}");
    }
    let nn = api.get("netnamespaces", None, "ns1").expect("ns1");
    assert_eq!(nn["egressIPs"], json!(["172.31.0.100"]), "{nn}");
    let shown = ctl(c.grpc, &["get", "netnamespaces", "ns1"])
        .ok()
        .to_string();
    let node = placed(&api).remove(0);
    assert!(
        shown.contains(&format!("172.31.0.100@{node}")),
        "the API shows another placement: {shown}"
    );
}

/// flowmesh installed on a cluster that already has NetworkPolicies and an egress firewall: they
/// wait for their namespaces' NETIDs (the controller starts; nothing is "inconsistent"), then
/// take effect, and pods attached afterwards get the labels and named ports of their objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_on_a_cluster_that_already_has_policies() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    api.put(
        json!({"apiVersion": "network.openshift.io/v1", "kind": "EgressNetworkPolicy",
                   "metadata": {"name": "fw", "namespace": "ns2"},
                   "spec": {"egress": [{"type": "Deny", "to": {"cidrSelector": "192.0.2.0/24"}}]}}),
    );
    api.put(web_from_ns2());
    let cfg = config_file(dir.path(), "networkpolicy");
    let cfg = cfg.to_string_lossy().into_owned();
    let c = kube_controller(dir.path(), &api, "c", &["--config", &cfg]);
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    let t = desired(&mut admin, "node-a").await;
    assert!(
        t.iter()
            .any(|l| l.contains("table=80") && l.contains("tp_dst=8080")),
        "{t:#?}"
    );
    assert!(
        t.iter()
            .any(|l| l.contains("table=100") && l.contains("192.0.2.0/24")),
        "{t:#?}"
    );
}

/// The legacy attachment annotation a tenant can write on its own Pod.
fn forge_annotation(api: &MockApiServer, ns: &str, pod: &str, node: &str, ip: &str, ofport: u32) {
    let mut p = api.get("pods", Some(ns), pod).expect("pod");
    p["metadata"]["annotations"]["flowmesh.io/attachment"] = json!(format!(
        r#"{{"node":"{node}","portName":"veth-forged","ofport":{ofport},"ip":"{ip}"}}"#
    ));
    api.put(p);
}

async fn pod_names(admin: &mut AdminClient<Channel>) -> BTreeSet<String> {
    admin
        .list_pods(pa::Empty {})
        .await
        .expect("pods")
        .into_inner()
        .items
        .into_iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect()
}

/// Tenants cannot forge a pod's attachment: the Pod annotation anyone who may patch the Pod
/// can write is ignored and reported (a Warning event, a metric), also on an attached pod; an
/// attachment must be on the Pod's `spec.nodeName` (a PodAttachment naming another node is
/// refused and reported; an attach on another node is refused); a stored attachment the
/// model cannot hold is left out and reported; and the controller restarts with all of them
/// present (it used to refuse inconsistent state at start), without a flow-mod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_bad_attachments_are_ignored_reported_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let mut c = kube_controller(dir.path(), &api, "c", &[]);
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    let attached = pod_names(&mut admin).await;
    assert_eq!(attached.len(), PODS.len(), "{attached:?}");
    let flows: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();

    // A tenant's own pod, scheduled on node-b and not yet plugged in, claims an address and
    // the port OVS hands out next; and the tenant rewrites an attached pod's annotation.
    api.put(pod_obj("ns2", "tenant", "node-b", json!({"app": "ns2"})));
    forge_annotation(&api, "ns2", "tenant", "node-b", "10.128.2.50", 4);
    forge_annotation(&api, "ns1", "node-a-p1", "node-a", "10.128.0.77", 9);
    for pod in ["tenant", "node-a-p1"] {
        wait_for_warning(&api, pod, "Refused", "flowmesh.io/attachment is ignored").await;
    }
    wait_for("the refusals counted", WAIT, async || {
        metric(&c, "flowmesh_kube_objects_refused") == 2
    })
    .await;
    assert_eq!(pod_names(&mut admin).await, attached);
    let p = admin
        .list_pods(pa::Empty {})
        .await
        .expect("pods")
        .into_inner()
        .items
        .into_iter()
        .find(|p| p.name == "node-a-p1")
        .expect("node-a-p1");
    assert_eq!(p.ofport, 3, "{p:?}");

    // A PodAttachment naming another node than the Pod's spec.nodeName (as only someone
    // with rights to flowmesh's cluster-scoped resource could write): refused, reported.
    api.put(pod_obj("ns3", "misplaced", "node-c", json!({})));
    let uid = api.get("pods", Some("ns3"), "misplaced").expect("pod")["metadata"]["uid"].clone();
    api.put(pod_attachment(
        "ns3",
        "misplaced",
        &uid,
        "node-a",
        "10.128.0.40",
        7,
    ));
    wait_for_warning(&api, "ns3.misplaced", "Refused", "bound to node \"node-c\"").await;

    // A Pod this replica's watch has not brought yet (kubelet runs CNI ADD as soon as the Pod
    // is bound; at load 20 the watch lagged): the store asks the API server before refusing.
    api.hold_watches(true);
    api.put(pod_obj("ns1", "fresh", "node-a", json!({})));
    let fresh = admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "fresh".into(),
            port_name: "veth-fresh".into(),
            ofport: 9,
            ..Default::default()
        })
        .await;
    api.hold_watches(false);
    let fresh = fresh.expect("attach of a Pod the watch has not shown yet");
    assert!(!fresh.into_inner().ip.is_empty());
    assert!(api.get("podattachments", None, "ns1.fresh").is_some());
    admin
        .detach_pod(pa::PodRef {
            namespace: "ns1".into(),
            name: "fresh".into(),
        })
        .await
        .expect("detach");
    assert!(api.get("podattachments", None, "ns1.fresh").is_none());

    // And an attach on another node than the Pod's is refused: nothing is stored.
    api.put(pod_obj("ns1", "late", "node-b", json!({})));
    let err = admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "late".into(),
            port_name: "veth-late".into(),
            ofport: 8,
            ..Default::default()
        })
        .await
        .expect_err("attach on the wrong node");
    assert!(err.message().contains("spec.nodeName"), "{err:?}");
    assert!(api.get("podattachments", None, "ns1.late").is_none());

    // A stored attachment that fits no model (an address outside its node's subnet, as a
    // bug or a hand edit could leave): left out and reported.
    api.put(pod_obj("ns1", "outside", "node-a", json!({})));
    let uid = api.get("pods", Some("ns1"), "outside").expect("pod")["metadata"]["uid"].clone();
    api.put(pod_attachment(
        "ns1",
        "outside",
        &uid,
        "node-a",
        "10.200.0.5",
        6,
    ));
    wait_for_warning(&api, "outside", "Refused", "10.200.0.5").await;
    wait_for("the left-out record counted", WAIT, async || {
        metric(&c, "flowmesh_stored_records_refused") == 1
    })
    .await;
    assert_eq!(pod_names(&mut admin).await, attached);
    let now: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(now, flows, "forged or bad attachments changed flows");

    // A restart with all of them stored: it starts, reports them again, and sends nothing.
    c.kill9();
    c.spawn();
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    assert_eq!(pod_names(&mut admin).await, attached);
    wait_for("the refusals counted after the restart", WAIT, async || {
        metric(&c, "flowmesh_stored_records_refused") == 1
            && metric(&c, "flowmesh_kube_objects_refused") == 3
    })
    .await;
    assert!(
        c.log_text().contains("left out"),
        "the restart did not log the record it left out"
    );
    // A window after the resync in which a late flow-mod would be counted (what is tested).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metric(&c, MODS), 0, "a restart sent flow-mods");
}

/// What a version that kept attachments in Pod annotations left: each PodAttachment turned
/// into its Pod's annotation (and the kubelet's status.podIP), no PodAttachments.
fn as_legacy_annotations(api: &MockApiServer) {
    for a in api.list("podattachments", None) {
        let s = &a["spec"];
        let ns = s["namespace"].as_str().unwrap_or_default();
        let pod = s["pod"].as_str().unwrap_or_default();
        let mut p = api.get("pods", Some(ns), pod).expect("pod");
        let text = json!({"node": s["node"], "portName": s["portName"],
                          "ofport": s["ofport"], "ip": s["ip"]});
        p["metadata"]["annotations"]["flowmesh.io/attachment"] = json!(text.to_string());
        p["status"]["podIP"] = s["ip"].clone();
        api.put(p);
        let name = a["metadata"]["name"].as_str().unwrap_or_default();
        api.delete("podattachments", None, name);
    }
}

/// Upgrading from the annotations: with `--import-attachment-annotations` every pod whose
/// annotation's node and IP are what the cluster says (spec.nodeName, status.podIP) keeps its
/// attachment across the upgrade without a flow-mod, gets a PodAttachment and loses the
/// annotation; a tenant's annotation whose IP is not its Pod's is not imported. Without the
/// flag the annotations are ignored: the pods are detached and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_annotations_are_imported_only_when_asked_and_confirmed() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let mut c = kube_controller(dir.path(), &api, "c", &[]);
    let sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    attach_pods(&mut admin).await;
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    let attached = pod_names(&mut admin).await;
    let flows: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    c.kill9();
    as_legacy_annotations(&api);
    assert!(api.list("podattachments", None).is_empty());
    // A tenant's pod with an annotation the kubelet's status contradicts.
    let mut forger = pod_obj("ns2", "forger", "node-b", json!({}));
    forger["status"]["podIP"] = json!("10.128.2.61");
    api.put(forger);
    forge_annotation(&api, "ns2", "forger", "node-b", "10.128.2.60", 5);

    c.extra.push("--import-attachment-annotations".into());
    c.spawn();
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    let ok = api
        .wait_for_async(WAIT, |a| {
            a.list("podattachments", None).len() == PODS.len()
                && a.list("pods", None).iter().all(|p| {
                    (p["metadata"]["name"] == "forger")
                        == annotation(p, "flowmesh.io/attachment").is_some()
                })
        })
        .await;
    assert!(
        ok,
        "not imported: {:?} {:?}",
        api.list("podattachments", None),
        api.list("pods", None)
    );
    wait_for_warning(&api, "forger", "Refused", "status.podIP").await;
    assert_eq!(pod_names(&mut admin).await, attached);
    bridges_match(&sbx, &mut admin, &NODE_NAMES).await;
    let now: Vec<Vec<String>> = NODE_NAMES
        .iter()
        .map(|n| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(now, flows, "the import changed flows");
    // A window after the resync in which a late flow-mod would be counted (what is tested).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metric(&c, MODS), 0, "the import sent flow-mods");

    // Without the flag: the annotations are ignored and reported, the pods detached.
    c.kill9();
    as_legacy_annotations(&api);
    c.extra.pop();
    c.spawn();
    let mut admin = c.admin().await;
    wait_for_warning(
        &api,
        "node-a-p1",
        "Refused",
        "flowmesh.io/attachment is ignored",
    )
    .await;
    assert!(pod_names(&mut admin).await.is_empty());
    assert!(api.list("podattachments", None).is_empty());
}

fn register(name: &str, ip: &str, dpid: u64) -> proto::node::RegisterNodeRequest {
    proto::node::RegisterNodeRequest {
        name: name.into(),
        node_ip: ip.into(),
        dpid,
    }
}

fn attach(
    node: &str,
    ns: &str,
    pod: &str,
    port: &str,
    ofport: u32,
) -> proto::node::AttachPodRequest {
    proto::node::AttachPodRequest {
        node: node.into(),
        namespace: ns.into(),
        name: pod.into(),
        port_name: flowmesh_tests::OvsSandbox::port_name(node, port),
        ofport,
        ..Default::default()
    }
}

/// Asserts that `r` was refused for permission, with `why` in its message.
fn denied<T: std::fmt::Debug>(r: Result<T, tonic::Status>, why: &str) {
    let e = r.expect_err(&format!("expected a refusal ({why})"));
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains(why),
        "{why:?} not in {:?}",
        e.message()
    );
}

/// NodeRestriction with the Kubernetes datastore, through real mTLS node certificates
/// (`flowmeshctl certs lab`): a node registers only with its Node's InternalIP and its
/// pinned datapath id (its address as a number, or what an admin set), attaches only Pods
/// bound to it (`spec.nodeName`), asserts no labels, and detaches no other node's pod; a Pod
/// the watch has not brought yet is looked up on the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificates_act_only_as_their_node_and_for_pods_bound_to_it() {
    use proto::node::node_api_client::NodeApiClient;
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let pki = support::lab_pki(&dir.path().join("pki"), &NODE_NAMES);
    let tls = support::grpc_tls_args(&pki);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let c = kube_controller(dir.path(), &api, "c", &tls);
    let sbx = sandbox(&c, &NODES);
    let mut admin = AdminClient::new(support::tls_channel(c.grpc, &pki, "admin-admin").await);
    wait_synced(&mut admin, &NODE_NAMES).await;
    let node = async |n: &str| {
        NodeApiClient::new(support::tls_channel(c.grpc, &pki, &format!("node-{n}")).await)
    };
    let (mut a, mut b, mut cc) = (
        node("node-a").await,
        node("node-b").await,
        node("node-c").await,
    );

    // Registration: its own Node's InternalIP and the pinned datapath id only.
    a.register_node(register("node-a", "172.31.0.1", 0xac1f_0001))
        .await
        .expect("node-a registers as its Node says");
    denied(
        a.register_node(register("node-a", "172.31.0.2", 0xac1f_0002))
            .await,
        "InternalIP is 172.31.0.1",
    );
    denied(
        a.register_node(register("node-a", "172.31.0.9", 0xac1f_0001))
            .await,
        "InternalIP is 172.31.0.1",
    );
    denied(
        a.register_node(register("node-a", "172.31.0.1", 0xac1f_0002))
            .await,
        "pinned to 0x00000000ac1f0001",
    );
    denied(
        a.register_node(register("node-b", "172.31.0.2", 0xac1f_0002))
            .await,
        "register node \"node-b\"",
    );
    // An admin sets node-c's datapath id: that is the pinned one from then on.
    admin
        .add_node(pa::AddNodeRequest {
            name: "node-c".into(),
            node_ip: "172.31.0.3".into(),
            dpid: 0xc0ffee,
        })
        .await
        .expect("admin sets node-c's datapath id");
    denied(
        cc.register_node(register("node-c", "172.31.0.3", 0xac1f_0003))
            .await,
        "pinned to 0x0000000000c0ffee",
    );
    cc.register_node(register("node-c", "172.31.0.3", 0xc0ffee))
        .await
        .expect("node-c registers with the admin's datapath id");
    let hosts = admin
        .list_host_subnets(pa::Empty {})
        .await
        .expect("hostsubnets")
        .into_inner()
        .items;
    let of = |n: &str| {
        hosts
            .iter()
            .find(|h| h.node == n)
            .map(|h| (h.node_ip.clone(), h.dpid))
    };
    assert_eq!(of("node-a"), Some(("172.31.0.1".into(), 0xac1f_0001)));
    assert_eq!(of("node-b"), Some(("172.31.0.2".into(), 0xac1f_0002)));

    // Pods: only those bound to the caller, without asserted labels.
    a.attach_pod(attach("node-a", "ns1", "node-a-p1", "p1", 3))
        .await
        .expect("node-a attaches its own pod");
    denied(
        a.attach_pod(attach("node-a", "ns1", "node-b-p1", "p2", 4))
            .await,
        "bound to node node-b",
    );
    api.put(json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "pending", "namespace": "ns1"}, "spec": {}}));
    denied(
        a.attach_pod(attach("node-a", "ns1", "pending", "p2", 4))
            .await,
        "bound to no node",
    );
    denied(
        a.attach_pod(attach("node-a", "ns1", "nowhere", "p2", 4))
            .await,
        "no such Pod",
    );
    let mut labelled = attach("node-a", "ns2", "node-a-p2", "p2", 4);
    labelled.labels = [("role".to_string(), "db".to_string())].into();
    denied(a.attach_pod(labelled).await, "labels");
    // node-b's pod, attached by node-b, cannot be detached by node-a.
    b.attach_pod(attach("node-b", "ns1", "node-b-p1", "p1", 3))
        .await
        .expect("node-b attaches its own pod");
    denied(
        a.detach_pod(proto::node::DetachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "node-b-p1".into(),
            port_name: String::new(),
        })
        .await,
        "it runs on node node-b",
    );
    // A Pod bound to node-a that the watch may not have brought yet: attached all the same.
    api.put(pod_obj("ns2", "fresh", "node-a", json!({"app": "ns2"})));
    a.attach_pod(attach("node-a", "ns2", "fresh", "p2", 4))
        .await
        .expect("node-a attaches a Pod just bound to it");

    let names = pod_names(&mut admin).await;
    let want: BTreeSet<String> = ["ns1/node-a-p1", "ns1/node-b-p1", "ns2/fresh"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, want);
    let mut attachments: Vec<String> = api
        .list("podattachments", None)
        .iter()
        .filter_map(|a| a["metadata"]["name"].as_str().map(String::from))
        .collect();
    attachments.sort();
    assert_eq!(attachments, ["ns1.node-a-p1", "ns1.node-b-p1", "ns2.fresh"]);
    bridges_match(&sbx, &mut admin, &["node-a", "node-b"]).await;
}

/// A change the Kubernetes store refuses for what the API server holds (here a Pod it does not
/// have) is answered as a refusal (FAILED_PRECONDITION, saying why), not as a store outage
/// (UNAVAILABLE, "embedded database transaction failed", the next changes refused as "the store
/// is unavailable"): the change right after it goes through at once, without a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_change_is_not_a_store_outage() {
    let dir = tempfile::tempdir().expect("tmp");
    let api = MockApiServer::start_for_controller();
    seed(&api);
    let c = kube_controller(dir.path(), &api, "c", &[]);
    let _sbx = sandbox(&c, &NODES);
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &NODE_NAMES).await;
    support::attach_pods(&mut admin, &PODS[..1]).await;
    let ghost = admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-a".into(),
            namespace: "ns1".into(),
            name: "ghost".into(),
            port_name: flowmesh_tests::OvsSandbox::port_name("node-a", "p9"),
            ofport: 9,
            ..Default::default()
        })
        .await
        .expect_err("a Pod the API server does not have is refused");
    assert_eq!(ghost.code(), tonic::Code::FailedPrecondition, "{ghost:?}");
    assert!(
        ghost
            .message()
            .contains("ns1/ghost is not in the Kubernetes API")
            && !ghost.message().contains("embedded database"),
        "{:?}",
        ghost.message()
    );
    let (node, port, ns, ofport) = PODS[1];
    admin
        .attach_pod(pa::AttachPodRequest {
            node: node.into(),
            namespace: ns.into(),
            name: format!("{node}-{port}"),
            port_name: flowmesh_tests::OvsSandbox::port_name(node, port),
            ofport,
            ..Default::default()
        })
        .await
        .expect("the next attach is not refused for the one before it");
    let names = pod_names(&mut admin).await;
    assert!(
        names.contains("ns2/node-a-p2") && !names.contains("ns1/ghost"),
        "{names:?}"
    );
}
