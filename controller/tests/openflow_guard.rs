//! The OpenFlow listener against hostile peers (docs/security.md, "The OpenFlow listener"),
//! with the real flowmesh-controller and real Open vSwitch bridges (dummy datapath) beside
//! scripted peers (`flowmesh_tests::hostile`):
//! * a peer claiming the datapath id of a connected switch that answers is refused, and the
//!   real switch keeps its place; one whose switch stopped answering is replaced;
//! * while many hostile peers are connected (silent ones, unclaimed datapath ids whose reads
//!   would hang, PORT_STATUS floods, endless multipart replies, more connections than the
//!   limits allow) the real switches stay in sync and pod attaches succeed.

mod support;

use flowmesh_tests::hostile::{HostilePeer, HostileSpec};
use proto::admin::{self as pa};
use std::time::{Duration, Instant};
use support::{attach_pods, bridges_match, sandbox, wait_for, wait_synced, Controller};

const NODES: [support::NodeSpec<'static>; 3] = [
    ("node-a", 0xa, &[("p1", 3), ("p2", 4), ("p3", 5)]),
    ("node-b", 0xb, &[("p1", 3), ("p2", 4), ("p3", 5)]),
    ("node-c", 0xc, &[("p1", 3)]),
];

async fn switches(
    admin: &mut proto::admin::admin_client::AdminClient<tonic::transport::Channel>,
) -> Vec<pa::Switch> {
    admin
        .list_switches(pa::Empty {})
        .await
        .expect("switches")
        .into_inner()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_claiming_a_connected_switchs_datapath_is_refused_while_the_switch_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctl = Controller::start(&dir.path().join("data"), &[]);
    let sbx = sandbox(&ctl, &NODES[..2]);
    let mut admin = ctl.admin().await;
    support::add_nodes(&mut admin, &NODES[..2]).await;
    admin
        .create_namespace(pa::NameRequest { name: "ns1".into() })
        .await
        .expect("namespace");
    attach_pods(&mut admin, &[("node-a", "p1", "ns1", 3)]).await;
    wait_synced(&mut admin, &["node-a", "node-b"]).await;
    let real_peer = |sw: &[pa::Switch]| {
        sw.iter()
            .find(|s| s.node == "node-a")
            .map(|s| s.peer.clone())
            .unwrap_or_default()
    };
    let before = real_peer(&switches(&mut admin).await);

    // A spoofer completes the handshake with node-a's datapath id.
    let spoof = HostilePeer::connect(ctl.openflow, HostileSpec::handshake(0xa))
        .await
        .expect("connect");
    wait_for(
        "the spoofer to be closed",
        Duration::from_secs(15),
        async || spoof.closed(),
    )
    .await;
    assert!(spoof.handshaken(), "it got as far as the handshake");
    let sw = switches(&mut admin).await;
    assert_eq!(
        real_peer(&sw),
        before,
        "node-a's switch kept its place: {sw:?}"
    );
    assert_ne!(real_peer(&sw), spoof.local_addr().to_string());
    assert!(
        sw.iter()
            .any(|s| s.node == "node-a" && s.connected && s.synced),
        "{sw:?}"
    );
    let log = ctl.log_text();
    assert!(
        log.contains("refusing a second connection for datapath 0x000000000000000a"),
        "{log}"
    );
    // node-a still takes changes.
    attach_pods(&mut admin, &[("node-a", "p2", "ns1", 4)]).await;
    bridges_match(&sbx, &mut admin, &["node-a", "node-b"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_whose_old_connection_went_silent_gets_in_after_the_echo() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Echoes so rare that only the contest can explain a quick replacement.
    let ctl = Controller::start(&dir.path().join("data"), &["--echo-interval", "60"]);
    let mut admin = ctl.admin().await;
    support::add_nodes(&mut admin, &NODES[..1]).await;
    // node-a's "switch" connects and then its host dies without closing the connection.
    let old = HostilePeer::connect(ctl.openflow, HostileSpec::handshake(0xa))
        .await
        .expect("connect");
    wait_for(
        "the old switch to connect",
        Duration::from_secs(15),
        async || {
            switches(&mut admin).await.iter().any(|s| {
                s.node == "node-a" && s.connected && s.peer == old.local_addr().to_string()
            })
        },
    )
    .await;
    old.go_silent();
    // The restarted Open vSwitch connects.
    let t0 = Instant::now();
    let sbx = sandbox(&ctl, &NODES[..1]);
    wait_synced(&mut admin, &["node-a"]).await;
    let took = t0.elapsed();
    assert!(old.closed(), "the silent connection was closed");
    assert!(
        ctl.log_text().contains("did not answer an echo within 1s"),
        "{}",
        ctl.log_text()
    );
    eprintln!("restarted switch synced {took:?} after its bridge was created");
    bridges_match(&sbx, &mut admin, &["node-a"]).await;
}
