//! NodeRestriction with the embedded and etcd datastores, through real mTLS node
//! certificates (`flowmeshctl certs lab`) and real Open vSwitch bridges: a node's first
//! registration pins its IP and datapath id (another node's are refused, later changes are
//! the admin's), a node asserts no labels or named ports, never attaches or detaches a pod
//! stored on another node, and with `--nodes-preregistered` registers only after an admin
//! added it. (The Kubernetes datastore's rules are tested in `controller_kube.rs`.)

mod support;

use flowmesh_tests::{EtcdCluster, OvsSandbox};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use proto::node::node_api_client::NodeApiClient;
use std::path::Path;
use support::{sandbox, wait_synced, Controller};
use tonic::transport::Channel;
use tonic::Code;

const NODES: [support::NodeSpec<'static>; 2] =
    [("node-a", 0xa, &[("p1", 3)]), ("node-b", 0xb, &[("p1", 3)])];

fn register(name: &str, ip: &str, dpid: u64) -> proto::node::RegisterNodeRequest {
    proto::node::RegisterNodeRequest {
        name: name.into(),
        node_ip: ip.into(),
        dpid,
    }
}

fn attach(node: &str, pod: &str) -> proto::node::AttachPodRequest {
    proto::node::AttachPodRequest {
        node: node.into(),
        namespace: "ns1".into(),
        name: pod.into(),
        port_name: OvsSandbox::port_name(node, "p1"),
        ofport: 3,
        ..Default::default()
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, why: &str) {
    let e = r.expect_err(&format!("expected a refusal ({why})"));
    assert_eq!(e.code(), code, "{e:?}");
    assert!(
        e.message().contains(why),
        "{why:?} not in {:?}",
        e.message()
    );
}

async fn node_client(c: &Controller, pki: &Path, n: &str) -> NodeApiClient<Channel> {
    NodeApiClient::new(support::tls_channel(c.grpc, pki, &format!("node-{n}")).await)
}

async fn pods(admin: &mut AdminClient<Channel>) -> Vec<(String, String, String)> {
    admin
        .list_pods(pa::Empty {})
        .await
        .expect("pods")
        .into_inner()
        .items
        .into_iter()
        .map(|p| (p.name, p.node, format!("{:?}", p.labels)))
        .collect()
}

/// The scenario on a controller of any datastore but Kubernetes.
async fn scenario(c: &mut Controller, pki: &Path) {
    let sbx = sandbox(c, &NODES);
    let mut admin = AdminClient::new(support::tls_channel(c.grpc, pki, "admin-admin").await);
    admin
        .create_namespace(pa::NameRequest { name: "ns1".into() })
        .await
        .expect("namespace");
    let mut a = node_client(c, pki, "node-a").await;
    let mut b = node_client(c, pki, "node-b").await;

    // First registrations pin; another node's IP or datapath id is refused.
    a.register_node(register("node-a", "172.31.0.1", 0xa))
        .await
        .expect("node-a registers");
    refused(
        b.register_node(register("node-b", "172.31.0.1", 0xb)).await,
        Code::AlreadyExists,
        "node-a",
    );
    refused(
        b.register_node(register("node-b", "172.31.0.2", 0xa)).await,
        Code::AlreadyExists,
        "node-a",
    );
    b.register_node(register("node-b", "172.31.0.2", 0xb))
        .await
        .expect("node-b registers");
    // Re-registering the same is fine; changing the pinned IP or datapath id is the admin's.
    a.register_node(register("node-a", "172.31.0.1", 0xa))
        .await
        .expect("node-a re-registers");
    for (ip, dpid) in [("172.31.0.9", 0xa), ("172.31.0.1", 0xc)] {
        refused(
            a.register_node(register("node-a", ip, dpid)).await,
            Code::PermissionDenied,
            "which only an admin changes",
        );
    }
    wait_synced(&mut admin, &["node-a", "node-b"]).await;

    // A node asserts no labels or named ports.
    let mut labelled = attach("node-a", "web");
    labelled.labels = [("role".to_string(), "db".to_string())].into();
    refused(
        a.attach_pod(labelled).await,
        Code::PermissionDenied,
        "labels",
    );
    let mut ported = attach("node-a", "web");
    ported.ports = vec![proto::node::ContainerPort {
        name: "http".into(),
        protocol: "TCP".into(),
        container_port: 80,
    }];
    refused(
        a.attach_pod(ported).await,
        Code::PermissionDenied,
        "named ports",
    );
    assert!(pods(&mut admin).await.is_empty());

    // A pod stored on node-a is node-a's alone.
    a.attach_pod(attach("node-a", "web"))
        .await
        .expect("node-a attaches web");
    refused(
        b.attach_pod(attach("node-b", "web")).await,
        Code::PermissionDenied,
        "it runs on node node-a",
    );
    refused(
        b.detach_pod(proto::node::DetachPodRequest {
            node: "node-b".into(),
            namespace: "ns1".into(),
            name: "web".into(),
            port_name: String::new(),
        })
        .await,
        Code::PermissionDenied,
        "it runs on node node-a",
    );
    assert_eq!(
        pods(&mut admin).await,
        [("web".to_string(), "node-a".to_string(), "{}".to_string())]
    );
    let hosts = admin
        .list_host_subnets(pa::Empty {})
        .await
        .expect("hostsubnets")
        .into_inner()
        .items;
    let mut pinned: Vec<(String, String, u64)> = hosts
        .into_iter()
        .map(|h| (h.node, h.node_ip, h.dpid))
        .collect();
    pinned.sort();
    assert_eq!(
        pinned,
        [
            ("node-a".to_string(), "172.31.0.1".to_string(), 0xa),
            ("node-b".to_string(), "172.31.0.2".to_string(), 0xb)
        ]
    );

    // With --nodes-preregistered only nodes an admin added register, as the admin added them.
    c.kill9();
    c.extra.push("--nodes-preregistered".into());
    c.spawn();
    let mut admin = AdminClient::new(support::tls_channel(c.grpc, pki, "admin-admin").await);
    let mut nc = node_client(c, pki, "node-c").await;
    refused(
        nc.register_node(register("node-c", "172.31.0.3", 0xc))
            .await,
        Code::PermissionDenied,
        "no admin added it",
    );
    admin
        .add_node(pa::AddNodeRequest {
            name: "node-c".into(),
            node_ip: "172.31.0.3".into(),
            dpid: 0xc,
        })
        .await
        .expect("admin adds node-c");
    refused(
        nc.register_node(register("node-c", "172.31.0.3", 0xd))
            .await,
        Code::PermissionDenied,
        "which only an admin changes",
    );
    nc.register_node(register("node-c", "172.31.0.3", 0xc))
        .await
        .expect("node-c registers as the admin added it");
    // The nodes registered before keep registering.
    node_client(c, pki, "node-a")
        .await
        .register_node(register("node-a", "172.31.0.1", 0xa))
        .await
        .expect("node-a re-registers");
    drop(sbx);
}

fn tls_controller(dir: &Path, name: &str, extra: &[&str]) -> (Controller, std::path::PathBuf) {
    let pki = support::lab_pki(&dir.join("pki"), &["node-a", "node-b", "node-c"]);
    let mut args = support::grpc_tls_args(&pki);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Controller::start(&dir.join(name), &args), pki)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_node_certificates_are_pinned_and_restricted() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut c, pki) = tls_controller(dir.path(), "embedded", &[]);
    scenario(&mut c, &pki).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_node_certificates_are_pinned_and_restricted() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = EtcdCluster::start(1).expect("etcd");
    let eps = etcd.endpoints();
    let (mut c, pki) = tls_controller(
        dir.path(),
        "etcd",
        &["--datastore", "etcd", "--etcd-endpoints", &eps],
    );
    scenario(&mut c, &pki).await;
}
