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
use std::net::IpAddr;
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

/// `n` hostile peers of `spec(i)` connecting from 127.0.0.`last`.
async fn peers(
    ctl: &Controller,
    last: u8,
    n: u64,
    spec: impl Fn(u64) -> HostileSpec,
) -> Vec<HostilePeer> {
    let from = IpAddr::from([127, 0, 0, last]);
    let mut v = Vec::new();
    for i in 0..n {
        v.push(
            HostilePeer::connect(ctl.openflow, spec(i).from(from))
                .await
                .expect("connect"),
        );
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_switches_stay_synced_and_attaches_succeed_while_hostile_peers_are_connected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctl = Controller::start(
        &dir.path().join("data"),
        &[
            "--openflow-max-connections-per-peer",
            "16",
            "--openflow-max-ports",
            "1000",
            "--openflow-max-multipart-bytes",
            "2000000",
        ],
    );
    let sbx = sandbox(&ctl, &NODES);
    let mut admin = ctl.admin().await;
    support::add_nodes(&mut admin, &NODES).await;
    // Nodes whose switches never connect: peers claim their datapath ids.
    for g in 0..4u64 {
        admin
            .add_node(pa::AddNodeRequest {
                name: format!("ghost-{g}"),
                node_ip: format!("172.31.1.{}", g + 1),
                dpid: 0x100 + g,
            })
            .await
            .expect("add ghost node");
    }
    for ns in ["ns1", "ns2"] {
        admin
            .create_namespace(pa::NameRequest { name: ns.into() })
            .await
            .expect("namespace");
    }
    let real = ["node-a", "node-b", "node-c"];
    wait_synced(&mut admin, &real).await;

    // 48 peers with unclaimed datapath ids that answer no read (more than the 32 sync turns),
    // 40 of them from one address (16 admitted), silent ones, PORT_STATUS floods and endless
    // multipart replies to the reads of the ghost nodes.
    let crowd = peers(&ctl, 2, 40, |i| HostileSpec::handshake(0x9000 + i)).await;
    let mut held = peers(&ctl, 3, 16, |i| HostileSpec::handshake(0x9100 + i)).await;
    held.extend(peers(&ctl, 4, 16, |i| HostileSpec::handshake(0x9200 + i)).await);
    let silent = peers(&ctl, 5, 8, |_| HostileSpec::silent()).await;
    let floods = peers(&ctl, 6, 4, |i| {
        HostileSpec::handshake(0x9300 + i).port_flood(5000)
    })
    .await;
    let bloats = peers(&ctl, 7, 4, |i| {
        HostileSpec::handshake(0x100 + i).multipart_flood(10_000_000)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let closed = |v: &[HostilePeer]| v.iter().filter(|p| p.closed()).count();
        let state = (closed(&floods), closed(&bloats), closed(&crowd));
        if state == (4, 4, 24) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the limits did not close the floods, the bloats and the crowd's surplus (closed: {state:?} of (4, 4, 24))\n{}",
            ctl.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(
        "every admitted unclaimed datapath to be connected",
        Duration::from_secs(30),
        async || {
            switches(&mut admin)
                .await
                .iter()
                .filter(|s| s.unknown && s.connected)
                .count()
                >= 48
        },
    )
    .await;
    assert!(
        crowd
            .iter()
            .filter(|p| !p.closed())
            .all(HostilePeer::handshaken)
            && held.iter().all(|p| p.handshaken() && !p.closed()),
        "the admitted peers stay connected"
    );
    assert!(silent.iter().all(|p| !p.closed()), "handshakes get 10 s");

    // The real switches: attaches succeed promptly and the bridges hold what they should.
    for (i, pod) in [
        ("node-a", "p1", "ns1", 3),
        ("node-a", "p2", "ns2", 4),
        ("node-b", "p1", "ns1", 3),
        ("node-b", "p2", "ns2", 4),
        ("node-c", "p1", "ns1", 3),
    ]
    .iter()
    .enumerate()
    {
        let t0 = Instant::now();
        attach_pods(&mut admin, std::slice::from_ref(pod)).await;
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "attach {i} took {took:?} with hostile peers connected"
        );
    }
    wait_synced(&mut admin, &real).await;
    bridges_match(&sbx, &mut admin, &real).await;
    let log = ctl.log_text();
    for want in [
        "OpenFlow connection refused: too many connections from this address",
        "more than 1000 ports",
        "grew past 2000000 bytes",
    ] {
        assert!(log.contains(want), "the log names {want:?}:\n{log}");
    }
    drop((crowd, held, silent));
}
