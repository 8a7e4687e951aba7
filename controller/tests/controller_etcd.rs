//! The etcd datastore against a real 3-member etcd cluster on loopback and real Open vSwitch
//! bridges: two controller replicas share one store (a change written through one appears in
//! the other's model and flows), concurrent conflicting writes lose nothing, a lost quorum
//! refuses writes clearly while the switches keep their flows, the controllers recover by
//! themselves, and the embedded and etcd datastores give identical flows for one scenario.

mod support;

use flowmesh_tests::{EtcdCluster, OvsSandbox};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use support::{ctl, desired, leader_of, sandbox, sandbox_all, wait_for, wait_synced, Controller};
use tonic::transport::Channel;

const NODES: [support::NodeSpec<'static>; 3] = [
    ("node-a", 0xa, &[("p1", 3), ("p2", 4)]),
    ("node-b", 0xb, &[("p1", 3)]),
    ("node-c", 0xc, &[("p1", 3)]),
];

fn etcd_args<'a>(cluster: &'a str, prefix: &'a str) -> Vec<&'a str> {
    vec![
        "--datastore",
        "etcd",
        "--etcd-endpoints",
        cluster,
        "--etcd-prefix",
        prefix,
        "--etcd-election-timeout",
        flowmesh_tests::etcd::ELECTION_TIMEOUT_MS,
        // The shortest lease these members allow: a lost lease would show within the test's
        // windows.
        "--leader-ttl",
        "3",
    ]
}

/// Retry a call refused because a switch is still connecting, or because another replica
/// won a race (ABORTED: nothing was stored, retrying is safe). Counts the aborted attempts.
macro_rules! retrying {
    ($aborted:expr, $call:expr) => {{
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match $call.await {
                Err(e) if e.code() == tonic::Code::Aborted && Instant::now() < deadline => {
                    $aborted += 1;
                }
                Err(e) if e.code() == tonic::Code::Unavailable && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                r => break r,
            }
        }
    }};
}

async fn populate(admin: &mut AdminClient<Channel>) {
    let mut aborted = 0;
    for (i, (name, dpid, _)) in NODES.iter().enumerate() {
        retrying!(
            aborted,
            admin.add_node(pa::AddNodeRequest {
                name: name.to_string(),
                node_ip: format!("172.31.0.{}", i + 1),
                dpid: *dpid,
            })
        )
        .expect("add node");
    }
    for ns in ["ns1", "ns2", "ns3"] {
        retrying!(
            aborted,
            admin.create_namespace(pa::NameRequest { name: ns.into() })
        )
        .expect("create namespace");
    }
    for (node, port, ns, ofport) in [
        ("node-a", "p1", "ns1", 3),
        ("node-a", "p2", "ns2", 4),
        ("node-b", "p1", "ns1", 3),
        ("node-c", "p1", "ns3", 3),
    ] {
        retrying!(
            aborted,
            admin.attach_pod(pa::AttachPodRequest {
                node: node.into(),
                namespace: ns.into(),
                name: format!("{node}-{port}"),
                port_name: OvsSandbox::port_name(node, port),
                ofport,
                ..Default::default()
            })
        )
        .expect("attach pod");
    }
    retrying!(
        aborted,
        admin.join_projects(pa::JoinProjectsRequest {
            namespaces: vec!["ns3".into()],
            to: "ns1".into(),
            ..Default::default()
        })
    )
    .expect("join");
    eprintln!("populate: {aborted} conflicts retried");
}

async fn assert_bridges_match(sbx: &OvsSandbox, admin: &mut AdminClient<Channel>) {
    let nodes: Vec<&str> = NODES.iter().map(|(n, _, _)| *n).collect();
    support::bridges_match(sbx, admin, &nodes).await;
}

async fn all_desired(admin: &mut AdminClient<Channel>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (node, _, _) in NODES {
        out.push(desired(admin, node).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_etcd_and_concurrent_writes_lose_nothing() {
    let cluster = EtcdCluster::start(3).expect("etcd cluster");
    let eps = cluster.endpoints();
    let dir = tempfile::tempdir().expect("tempdir");
    let c1 = Controller::start(&dir.path().join("c1"), &etcd_args(&eps, "/t/"));
    let c2 = Controller::start(&dir.path().join("c2"), &etcd_args(&eps, "/t/"));
    // Every bridge connects to both replicas: the elected one is master and programs it.
    let sbx = sandbox_all(&[&c1, &c2], &NODES);
    let mut a1 = c1.admin().await;
    let mut a2 = c2.admin().await;
    populate(&mut a1).await;
    let mut lead = [&c1, &c2][leader_of(&[&c1, &c2]).await].admin().await;
    wait_synced(&mut lead, &["node-a", "node-b", "node-c"]).await;
    assert_bridges_match(&sbx, &mut a1).await;

    // Everything written through c1 is in c2's model: `flowmeshctl get` shows it, and c2
    // computes the same flows for every node.
    let want = all_desired(&mut a1).await;
    wait_for(
        "c2 to compute c1's flows",
        Duration::from_secs(15),
        async || all_desired(&mut a2).await == want,
    )
    .await;
    let got = ctl(c2.grpc, &["get", "netnamespaces"]);
    let out = got.ok();
    assert!(out.contains("ns1") && out.contains("ns3"), "{out}");
    let pods = ctl(c2.grpc, &["get", "pods"]);
    assert!(pods.ok().contains("node-c-p1"), "{}", pods.stdout);

    // A change through c2 reaches c1's model and c1's switches.
    let mut aborted = 0;
    retrying!(
        aborted,
        a2.isolate_projects(pa::ProjectsRequest {
            namespaces: vec!["ns3".into()],
            ..Default::default()
        })
    )
    .expect("isolate through c2");
    assert_eq!(aborted, 0, "nothing else wrote ns3");
    wait_for(
        "c1 to see ns3 isolated",
        Duration::from_secs(15),
        async || {
            let n = support::netids(&mut a1).await;
            n.get("ns3") != n.get("ns1")
        },
    )
    .await;
    assert_bridges_match(&sbx, &mut a1).await;

    // Both replicas create namespaces at once: every creation writes the NETID cursor, so
    // they conflict; a conflict is ABORTED (nothing stored) and retried. Nothing is lost and
    // no NETID is handed out twice.
    let mut tasks = Vec::new();
    for (r, admin) in [(1, a1.clone()), (2, a2.clone())] {
        tasks.push(tokio::spawn(async move {
            let mut admin = admin;
            let mut aborted = 0u32;
            for i in 0..12 {
                retrying!(
                    aborted,
                    admin.create_namespace(pa::NameRequest {
                        name: format!("race-{r}-{i}"),
                    })
                )
                .expect("create namespace");
            }
            aborted
        }));
    }
    let mut conflicts = 0;
    for t in tasks {
        conflicts += t.await.expect("task");
    }
    // Each replica learns the other's last creations through its watch: wait until both
    // hold all 24 and agree (a snapshot of one could still lack the other's latest).
    wait_for(
        "both replicas to hold every namespace",
        Duration::from_secs(15),
        async || {
            let n1 = support::netids(&mut a1).await;
            n1.keys().filter(|k| k.starts_with("race-")).count() == 24
                && support::netids(&mut a2).await == n1
        },
    )
    .await;
    let n1 = support::netids(&mut a1).await;
    let racers: BTreeMap<&String, &u32> =
        n1.iter().filter(|(k, _)| k.starts_with("race-")).collect();
    assert_eq!(racers.len(), 24, "{n1:?}");
    let ids: BTreeSet<&u32> = racers.values().copied().collect();
    assert_eq!(ids.len(), 24, "a NETID was handed out twice: {racers:?}");
    // Every record is in etcd too.
    let keys = cluster
        .etcdctl(&["get", "/t/namespace/race-", "--prefix", "--keys-only"])
        .expect("etcdctl");
    assert_eq!(keys.lines().filter(|l| !l.is_empty()).count(), 24, "{keys}");
    eprintln!("concurrent creations: 24 stored, {conflicts} conflicts retried");
    assert_bridges_match(&sbx, &mut a1).await;
    let want = all_desired(&mut a1).await;
    wait_for(
        "equal flows on both replicas",
        Duration::from_secs(15),
        async || all_desired(&mut a2).await == want,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_quorum_refuses_writes_keeps_flows_and_recovers_by_itself() {
    let mut cluster = EtcdCluster::start(3).expect("etcd cluster");
    let eps = cluster.endpoints();
    let dir = tempfile::tempdir().expect("tempdir");
    let c1 = Controller::start(&dir.path().join("c1"), &etcd_args(&eps, "/q/"));
    let sbx = sandbox(&c1, &NODES);
    let mut a1 = c1.admin().await;
    populate(&mut a1).await;
    wait_synced(&mut a1, &["node-a", "node-b", "node-c"]).await;
    assert_bridges_match(&sbx, &mut a1).await;

    // One member gone: writes go on, and the controller keeps its leadership (the same
    // generation: no re-election, no role change on the switches). The worst member to lose:
    // etcd's raft leader (no renewal is confirmed until the others elect a new one), which is
    // also the first endpoint, the one the controller's requests and lease keep-alive go to.
    cluster
        .move_leader(0, Duration::from_secs(20))
        .expect("member 0 leads");
    let generation = |v: pa::ControllerList| (v.leader, v.generation);
    let before_kill = generation(
        a1.get_controllers(pa::Empty {})
            .await
            .expect("controllers")
            .into_inner(),
    );
    assert!(!before_kill.0.is_empty(), "{before_kill:?}");
    cluster.kill(0);
    let mut aborted = 0;
    retrying!(
        aborted,
        a1.create_namespace(pa::NameRequest {
            name: "after-one".into()
        })
    )
    .expect("write with one member down");
    assert_eq!(aborted, 0, "one replica has nothing to conflict with");
    // Longer than the lease TTL (3 s): a lease that was not renewed meanwhile is gone by then
    // and a new generation elected.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after_kill = generation(
        a1.get_controllers(pa::Empty {})
            .await
            .expect("controllers")
            .into_inner(),
    );
    assert_eq!(
        before_kill,
        after_kill,
        "one etcd member down cost the leadership\n{}",
        c1.log_text()
    );

    // Two gone: no quorum. Writes are refused with a clear error; the switches keep
    // exactly their flows and stay connected.
    let before: Vec<Vec<String>> = NODES
        .iter()
        .map(|(n, _, _)| sbx.dump_flows(n).expect("dump"))
        .collect();
    cluster.kill(1);
    let t = Instant::now();
    let err = a1
        .attach_pod(pa::AttachPodRequest {
            node: "node-b".into(),
            namespace: "ns2".into(),
            name: "no-quorum".into(),
            port_name: "veth-nq".into(),
            ofport: 9,
            ..Default::default()
        })
        .await
        .expect_err("a write without quorum must fail");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("etcd") && err.message().contains("quorum"),
        "{}",
        err.message()
    );
    eprintln!(
        "write without quorum refused after {} ms: {}",
        t.elapsed().as_millis(),
        err.message()
    );
    let again = a1
        .create_namespace(pa::NameRequest {
            name: "no-quorum".into(),
        })
        .await
        .expect_err("still no quorum");
    assert_eq!(again.code(), tonic::Code::Unavailable, "{again:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during: Vec<Vec<String>> = NODES
        .iter()
        .map(|(n, _, _)| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(
        before, during,
        "switch flows changed while etcd had no quorum"
    );
    let sw = a1
        .list_switches(pa::Empty {})
        .await
        .expect("reads still work")
        .into_inner()
        .items;
    assert!(sw.iter().all(|s| s.connected), "{sw:?}");
    let ns = support::netids(&mut a1).await;
    assert!(!ns.contains_key("no-quorum"), "{ns:?}");
    assert!(
        again.message().contains("unavailable") || again.message().contains("quorum"),
        "{}",
        again.message()
    );

    // Quorum back: the same controller accepts writes again, nothing restarted.
    cluster.restart(0).expect("restart m0");
    cluster.restart(1).expect("restart m1");
    cluster
        .wait_writable(Duration::from_secs(30))
        .expect("quorum back");
    let t = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match a1
            .attach_pod(pa::AttachPodRequest {
                node: "node-b".into(),
                namespace: "ns2".into(),
                name: "after-quorum".into(),
                port_name: "veth-aq".into(),
                ofport: 10,
                ..Default::default()
            })
            .await
        {
            Ok(_) => break,
            // An earlier attempt was stored though its answer was an error (its outcome was
            // unknown, or the replica had not re-won the election to program it).
            Err(e) if e.code() == tonic::Code::AlreadyExists => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the controller did not recover: {e:?}\n{}",
                    c1.log_text()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    eprintln!(
        "writes accepted again {} ms after quorum returned",
        t.elapsed().as_millis()
    );
    let ns = support::netids(&mut a1).await;
    assert!(ns.contains_key("after-one"), "{ns:?}");
    // The write refused on a timeout had an unknown outcome: whatever etcd decided, the model
    // follows etcd, and the switches follow the model.
    let stored = cluster
        .etcdctl(&["get", "/q/pod/ns2/no-quorum", "--keys-only"])
        .expect("etcdctl");
    let pods = a1
        .list_pods(pa::Empty {})
        .await
        .expect("pods")
        .into_inner()
        .items;
    assert_eq!(
        stored.trim().is_empty(),
        !pods.iter().any(|p| p.name == "no-quorum"),
        "model and etcd disagree on the write with an unknown outcome: {stored:?} {pods:?}"
    );
    assert_bridges_match(&sbx, &mut a1).await;
}

/// Writes 256 KiB values under `/filler/` through member `m` until etcd raises its NOSPACE
/// alarm; how many were accepted. (Values of 1 MiB, beside three other tests' etcd clusters
/// on 2 cores, once had none accepted in 60 s, the errors unrecorded; most likely large raft
/// entries delayed heartbeats past this harness's 250 ms election timeout. The last errors
/// are in the message now.)
fn fill_until_nospace(cluster: &EtcdCluster, m: usize) -> usize {
    let value = vec![b'f'; 256 << 10];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut puts = 0;
    let (mut put_err, mut alarm_err) = (None, None);
    loop {
        match cluster.etcdctl(&["alarm", "list"]) {
            Ok(alarms) if alarms.contains("NOSPACE") => return puts,
            Ok(_) => {}
            Err(e) => alarm_err = Some(e),
        }
        if Instant::now() >= deadline {
            let log = cluster.log_text(m);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "no NOSPACE alarm after {puts} puts; last put error: {put_err:?}; last alarm \
                 list error: {alarm_err:?}; member {m}'s log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        match cluster.etcdctl_at(m, &["put", &format!("/filler/{puts}")], &value) {
            Ok(_) => puts += 1,
            Err(e) => put_err = Some(e),
        }
    }
}

/// etcd's documented recovery from NOSPACE, as an operator runs it: delete what filled the
/// space, compact to the current revision, defragment, disarm.
fn free_nospace(cluster: &EtcdCluster, m: usize) {
    cluster
        .etcdctl(&["del", "--prefix", "/filler/"])
        .expect("delete the filler");
    let status = cluster
        .etcdctl_at(m, &["endpoint", "status", "-w", "json"], b"")
        .expect("status");
    let v: serde_json::Value = serde_json::from_str(status.trim()).expect("status json");
    let rev = v[0]["Status"]["header"]["revision"]
        .as_u64()
        .expect("revision")
        .to_string();
    cluster
        .etcdctl(&["compact", &rev, "--physical"])
        .expect("compact");
    cluster.etcdctl_at(m, &["defrag"], b"").expect("defragment");
    cluster.etcdctl(&["alarm", "disarm"]).expect("disarm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_out_of_space_refuses_writes_with_the_reason_reports_it_and_recovers_after_disarm() {
    // Member 2's data directory is a tmpfs of its own and its backend quota is small: filling
    // it raises etcd's cluster-wide NOSPACE alarm (etcd refuses every write until disarmed).
    let small = flowmesh_tests::etcd::SmallMember {
        member: 2,
        tmpfs_mib: 192,
        quota_bytes: 8 << 20,
    };
    let cluster = EtcdCluster::start_with(3, None, Some(small)).expect("etcd cluster");
    let eps = cluster.endpoints();
    let dir = tempfile::tempdir().expect("tempdir");
    let c1 = Controller::start(&dir.path().join("c1"), &etcd_args(&eps, "/s/"));
    let sbx = sandbox(&c1, &NODES);
    let mut a1 = c1.admin().await;
    populate(&mut a1).await;
    wait_synced(&mut a1, &["node-a", "node-b", "node-c"]).await;
    assert_bridges_match(&sbx, &mut a1).await;
    let mut aborted = 0;
    retrying!(
        aborted,
        a1.create_namespace(pa::NameRequest {
            name: "before-nospace".into()
        })
    )
    .expect("write before the alarm");
    assert_eq!(aborted, 0, "one replica has nothing to conflict with");
    let mut events = a1
        .watch_events(pa::Empty {})
        .await
        .expect("watch events")
        .into_inner();
    let before: Vec<Vec<String>> = NODES
        .iter()
        .map(|(n, _, _)| sbx.dump_flows(n).expect("dump"))
        .collect();

    let puts = tokio::task::block_in_place(|| fill_until_nospace(&cluster, 2));
    eprintln!("NOSPACE after {puts} puts of 256 KiB");
    // Refused with etcd's reason and what frees it; never acknowledged.
    for name in ["during-1", "during-2"] {
        let err = a1
            .create_namespace(pa::NameRequest { name: name.into() })
            .await
            .expect_err("a write during the NOSPACE alarm must be refused");
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        let m = err.message();
        assert!(
            m.contains("database space exceeded") && m.contains("etcd is out of space"),
            "{m}"
        );
        assert!(!m.contains("quorum or is unreachable"), "{m}");
    }
    // Reported as an event with the reason (the watch stream itself stays healthy).
    let reported = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(e)) = events.message().await {
            if e.kind == "StoreUnavailable" && e.message.contains("out of space") {
                return Some(e);
            }
        }
        None
    })
    .await;
    assert!(
        matches!(reported, Ok(Some(_))),
        "no StoreUnavailable event naming the lack of space: {reported:?}\n{}",
        c1.log_text()
    );
    // Reads go on, the switches keep their flows and stay connected.
    let sw = a1
        .list_switches(pa::Empty {})
        .await
        .expect("reads still work")
        .into_inner()
        .items;
    assert!(sw.iter().all(|s| s.connected), "{sw:?}");
    let during: Vec<Vec<String>> = NODES
        .iter()
        .map(|(n, _, _)| sbx.dump_flows(n).expect("dump"))
        .collect();
    assert_eq!(
        before, during,
        "switch flows changed during the NOSPACE alarm"
    );
    // The refused change is not stored, and the model follows etcd once it has re-read it
    // (until then the controller refuses writes).
    let stored = cluster
        .etcdctl(&["get", "/s/", "--prefix", "--keys-only"])
        .expect("etcdctl");
    assert!(!stored.contains("during-"), "{stored}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ns = support::netids(&mut a1).await;
        if !ns.contains_key("during-1") && !ns.contains_key("during-2") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the model keeps a refused change: {ns:?}\n{}",
            c1.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        c1.log_text().contains("database space exceeded"),
        "the log does not name the reason\n{}",
        c1.log_text()
    );

    // The operator frees space and disarms: the same controller takes writes again by itself.
    tokio::task::block_in_place(|| free_nospace(&cluster, 2));
    let freed = Instant::now();
    let deadline = freed + Duration::from_secs(30);
    loop {
        match a1
            .create_namespace(pa::NameRequest {
                name: "during-1".into(),
            })
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the controller did not take writes again: {e:?}\n{}",
                    c1.log_text()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!(
        "writes accepted again {} ms after the alarm was disarmed",
        freed.elapsed().as_millis()
    );
    let ns = support::netids(&mut a1).await;
    assert!(
        ns.contains_key("before-nospace") && ns.contains_key("during-1"),
        "{ns:?}"
    );
    assert!(!ns.contains_key("during-2"), "{ns:?}");
    let stored = cluster
        .etcdctl(&["get", "/s/", "--prefix", "--keys-only"])
        .expect("etcdctl");
    assert!(
        stored.contains("before-nospace") && stored.contains("during-1"),
        "{stored}"
    );
    assert_bridges_match(&sbx, &mut a1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_and_etcd_datastores_give_identical_flows() {
    let cluster = EtcdCluster::start(3).expect("etcd cluster");
    let eps = cluster.endpoints();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut flows = Vec::new();
    for (name, extra) in [
        ("embedded", Vec::new()),
        ("etcd", etcd_args(&eps, "/same/")),
    ] {
        let c = Controller::start(&dir.path().join(name), &extra);
        let sbx = sandbox(&c, &NODES);
        let mut admin = c.admin().await;
        populate(&mut admin).await;
        wait_synced(&mut admin, &["node-a", "node-b", "node-c"]).await;
        assert_bridges_match(&sbx, &mut admin).await;
        let per_node: Vec<Vec<String>> = NODES
            .iter()
            .map(|(n, _, _)| sbx.dump_flows(n).expect("dump"))
            .collect();
        assert!(per_node.iter().all(|f| f.len() > 10), "{per_node:?}");
        flows.push(per_node);
    }
    assert_eq!(
        flows[0], flows[1],
        "the embedded and etcd datastores gave different flows"
    );
}

/// The backend itself: guarded transactions name the key that moved, the watch reports every
/// writer's transactions with their revisions, and a watch from a compacted revision relists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_backend_guards_writes_watches_and_relists_after_compaction() {
    use controller::state::etcd::{EtcdConfig, EtcdStore};
    use controller::state::{Change, Guarded, Record, RecordKey, StateBackend, WatchEvent};
    use topology::model::NamespaceInfo;

    let cluster = EtcdCluster::start(3).expect("etcd cluster");
    let mut cfg = EtcdConfig::new(&cluster.endpoints()).expect("config");
    cfg.prefix = "/b/".into();
    let ns = |name: &str, netid| {
        Record::Namespace(NamespaceInfo {
            name: name.into(),
            netid,
            labels: Default::default(),
            multicast: false,
            acl_logging: None,
        })
    };
    let put = |r: Record, expected| Guarded {
        change: Change::Put(r),
        expected,
    };
    let (a, b) = tokio::task::spawn_blocking(move || {
        let a = EtcdStore::connect(cfg.clone()).expect("connect a");
        let b = EtcdStore::connect(cfg).expect("connect b");
        (a, b)
    })
    .await
    .expect("connect");
    let start = a.list().expect("list").revision;
    let mut watch = b.watch(start).expect("etcd has a watch");

    let r1 = a
        .apply_guarded(&[put(ns("x", 10), 0), put(ns("y", 11), 0)])
        .expect("create");
    // b saw nothing of a's write: its stale expectation conflicts and writes nothing.
    let err = b
        .apply_guarded(&[put(ns("z", 12), 0), put(ns("x", 20), 0)])
        .expect_err("stale");
    let text = err.to_string();
    assert!(
        text.contains("conflict") && text.contains("/b/namespace/x"),
        "{text}"
    );
    let r2 = b.apply_guarded(&[put(ns("x", 20), r1)]).expect("current");
    assert!(r2 > r1);
    let l = a.list().expect("list");
    assert_eq!(
        l.records,
        vec![(ns("x", 20), r2), (ns("y", 11), r1)],
        "z must not exist"
    );

    // The watch saw both transactions, a's and b's, in order, with their revisions.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), watch.events.recv())
            .await
            .expect("watch event")
            .expect("open")
        {
            WatchEvent::Changes { revision, changes } => seen.push((revision, changes)),
            WatchEvent::Health { .. } => {}
            WatchEvent::Relisted(l) => panic!("unexpected relist {l:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            (r1, vec![Change::Put(ns("x", 10)), Change::Put(ns("y", 11))]),
            (r2, vec![Change::Put(ns("x", 20))]),
        ]
    );
    // A delete arrives as a delete of the record key.
    let r3 = a
        .apply_guarded(&[Guarded {
            change: Change::Delete(RecordKey::Namespace("y".into())),
            expected: r1,
        }])
        .expect("delete");
    loop {
        if let WatchEvent::Changes { revision, changes } =
            tokio::time::timeout(Duration::from_secs(10), watch.events.recv())
                .await
                .expect("watch event")
                .expect("open")
        {
            assert_eq!(revision, r3);
            assert_eq!(
                changes,
                vec![Change::Delete(RecordKey::Namespace("y".into()))]
            );
            break;
        }
    }

    // Compact past `start`: a watch from there cannot go on and relists instead.
    cluster
        .etcdctl(&["compact", &r3.to_string()])
        .expect("compact");
    let mut late = b.watch(start).expect("watch");
    loop {
        match tokio::time::timeout(Duration::from_secs(10), late.events.recv())
            .await
            .expect("watch event")
            .expect("open")
        {
            WatchEvent::Relisted(l) => {
                assert!(l.revision >= r3);
                assert_eq!(l.records, vec![(ns("x", 20), r2)]);
                break;
            }
            WatchEvent::Health { .. } => {}
            WatchEvent::Changes { revision, .. } => {
                panic!("changes at {revision} from a compacted revision")
            }
        }
    }
    // Asking for a relist works too.
    late.relist.send(()).expect("relist");
    loop {
        if let WatchEvent::Relisted(l) =
            tokio::time::timeout(Duration::from_secs(10), late.events.recv())
                .await
                .expect("watch event")
                .expect("open")
        {
            assert_eq!(l.records, vec![(ns("x", 20), r2)]);
            break;
        }
    }
    tokio::task::spawn_blocking(move || drop((a, b)))
        .await
        .expect("drop");
}

/// Bad datastore flags stop the controller at once with a message naming the flag.
#[test]
fn bad_datastore_flags_are_refused_clearly() {
    for (args, want) in [
        (vec!["--datastore", "etcd"], "--etcd-endpoints"),
        (
            vec!["--datastore", "etcd", "--etcd-endpoints", "127.0.0.1:2379"],
            "http:// or https://",
        ),
        (
            vec!["--etcd-endpoints", "http://127.0.0.1:2379"],
            "--datastore etcd",
        ),
        (
            vec![
                "--datastore",
                "etcd",
                "--etcd-endpoints",
                "http://127.0.0.1:2379",
                "--etcd-prefix",
                "flowmesh",
            ],
            "must start with /",
        ),
        // Losing etcd's raft leader (default election timeout 1 s) would cost a 3 s lease.
        (
            vec![
                "--datastore",
                "etcd",
                "--etcd-endpoints",
                "http://127.0.0.1:2379",
                "--leader-ttl",
                "3",
            ],
            "Give at least 5",
        ),
        (
            vec![
                "--datastore",
                "etcd",
                "--etcd-endpoints",
                "http://127.0.0.1:2379",
                "--etcd-election-timeout",
                "250",
                "--leader-ttl",
                "1",
            ],
            "Give at least 3",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
            .args(&args)
            .args([
                "--grpc-listen",
                "127.0.0.1:0",
                "--openflow-listen",
                "127.0.0.1:0",
            ])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run flowmesh-controller");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// A pod's attach that reaches a replica before the replica's watch brought the pod's
/// namespace (kubelet starts the sandbox right after the Namespace and Pod are created) waits
/// for the namespace instead of failing with "unknown namespace".
#[tokio::test]
async fn an_attach_waits_for_a_namespace_another_replica_is_creating() {
    use controller::core::{load_model, Core, CoreConfig};
    use controller::error::ApiError;
    use controller::observe::Metrics;
    use controller::resources::nodes::{self as ops, PodRequest};
    use controller::state::etcd::{EtcdConfig, EtcdStore};
    use controller::state::{default_config, StateBackend};
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    let cluster = EtcdCluster::start(3).expect("etcd cluster");
    let mut cfg = EtcdConfig::new(&cluster.endpoints()).expect("config");
    cfg.prefix = "/late-ns/".into();
    let (a, b) = tokio::task::spawn_blocking(move || {
        let a = EtcdStore::connect(cfg.clone()).expect("connect a");
        let b = EtcdStore::connect(cfg).expect("connect b");
        (Arc::new(a), Arc::new(b))
    })
    .await
    .expect("connect");
    let core = |store: Arc<EtcdStore>| {
        let l = load_model(store.as_ref(), Some(&default_config())).expect("load the store");
        let (model, changes) = (l.model, l.changes);
        store.apply(&changes).expect("initial records");
        Core::spawn(
            model,
            store,
            CoreConfig::default(),
            Arc::new(Metrics::default()),
        )
        .expect("core")
    };
    let core_a = tokio::task::spawn_blocking({
        let a = a.clone();
        move || core(a)
    })
    .await
    .expect("core a");
    let core_b = tokio::task::spawn_blocking(move || core(b))
        .await
        .expect("core b");
    ops::add_node(
        &core_a,
        "node-1".into(),
        Ipv4Addr::new(192, 168, 1, 11),
        0xa1,
    )
    .await
    .expect("add node");
    wait_for("replica b sees node-1", Duration::from_secs(20), || async {
        core_b
            .read(|c| c.model.node("node-1").is_some())
            .await
            .unwrap_or(false)
    })
    .await;

    // The attach reaches replica b before anything created the namespace.
    let attach = tokio::spawn({
        let core_b = core_b.clone();
        async move {
            ops::attach_pod(
                &core_b,
                PodRequest {
                    node: "node-1".into(),
                    namespace: "late".into(),
                    name: "p".into(),
                    port_name: "veth-p".into(),
                    ofport: 5,
                },
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ops::create_namespace(&core_a, "late".into())
        .await
        .expect("create the namespace on replica a");
    // No switch is connected here: the attach gets as far as the switch, past the namespace.
    let e = attach
        .await
        .expect("join")
        .expect_err("no switch connected");
    assert_eq!(
        e,
        ApiError::Unavailable(
            "the switch of node node-1 is not connected, so nothing was stored".into()
        )
    );
}

/// The store writer's fallback for a grouped write that fails (issue 34): etcd, started with
/// small limits (`--max-txn-ops 2`, `--max-request-bytes 4096`), refuses a transaction that
/// groups several namespace creations (two keys each, the cursors shared) but takes each alone;
/// and it refuses one namespace's label edit of more than 4 KiB even alone. These are etcd's own
/// refusals of real requests, nothing simulated. Every creation must then be stored and
/// acknowledged one by one; a refused edit grouped with creations fails alone with etcd's
/// reason (not as an outage); no call is acknowledged unless its record is in etcd, and none
/// that failed left its record there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_write_etcd_refuses_is_written_one_by_one_and_a_refused_change_fails_alone() {
    use controller::core::{load_model, Core, CoreConfig, CoreHandle};
    use controller::error::ApiError;
    use controller::observe::Metrics;
    use controller::resources::network_policy::{label_namespace, LabelEdit};
    use controller::resources::nodes as ops;
    use controller::state::etcd::{EtcdConfig, EtcdStore};
    use controller::state::{default_config, Record, StateBackend};
    use std::sync::Arc;

    let cluster =
        EtcdCluster::start_with_flags(1, &["--max-txn-ops", "2", "--max-request-bytes", "4096"])
            .expect("etcd cluster");
    let mut cfg = EtcdConfig::new(&cluster.endpoints()).expect("config");
    cfg.prefix = "/group-fallback/".into();
    let store =
        tokio::task::spawn_blocking(move || Arc::new(EtcdStore::connect(cfg).expect("connect")))
            .await
            .expect("connect");
    let metrics = Arc::new(Metrics::default());
    let core: CoreHandle = tokio::task::spawn_blocking({
        let store = store.clone();
        let metrics = metrics.clone();
        move || {
            let l = load_model(store.as_ref(), Some(&default_config())).expect("load the store");
            for c in &l.changes {
                // One record per transaction: these limits allow no more.
                store
                    .apply(std::slice::from_ref(c))
                    .expect("initial record");
            }
            Core::spawn(l.model, store, CoreConfig::default(), metrics).expect("core")
        }
    })
    .await
    .expect("core");
    let stored_namespaces = |store: Arc<EtcdStore>| async move {
        tokio::task::spawn_blocking(move || store.load().expect("list etcd"))
            .await
            .expect("list")
            .into_iter()
            .filter_map(|r| match r {
                Record::Namespace(n) => Some(n),
                _ => None,
            })
            .collect::<Vec<_>>()
    };

    // 1. Concurrent creations: whenever they were grouped, etcd refused the group, and each
    //    was written alone. Rounds until that happened (the writer groups what queues while
    //    etcd commits, which a loaded machine may not give every time).
    let mut created = BTreeMap::new();
    for round in 0..20 {
        let calls: Vec<_> = (0..24)
            .map(|i| {
                let core = core.clone();
                let name = format!("r{round}-{i}");
                tokio::spawn(
                    async move { (name.clone(), ops::create_namespace(&core, name).await) },
                )
            })
            .collect();
        for c in calls {
            let (name, r) = c.await.expect("join");
            let info = r.unwrap_or_else(|e| panic!("creating {name}: {e} (a grouped write refused by etcd must be written one by one)"));
            created.insert(name, info.netid);
        }
        if metrics.store_group_fallbacks.get() > 0 {
            break;
        }
    }
    assert!(
        metrics.store_group_fallbacks.get() > 0,
        "no grouped write was refused in 20 rounds of 24 concurrent creations: nothing tested"
    );
    let stored: BTreeMap<String, u32> = stored_namespaces(store.clone())
        .await
        .into_iter()
        .map(|n| (n.name, n.netid))
        .collect();
    for (name, netid) in &created {
        assert_eq!(
            stored.get(name),
            Some(netid),
            "acknowledged namespace {name} in etcd"
        );
    }
    let netids: BTreeSet<u32> = created.values().copied().collect();
    assert_eq!(
        netids.len(),
        created.len(),
        "every namespace has its own NETID"
    );

    // 2. A change etcd refuses even alone, sent with concurrent creations: it fails with
    //    etcd's reason; the others are stored, or refused for retry (ABORTED) and not stored.
    let big: BTreeMap<String, String> = (0..80)
        .map(|i| {
            (
                format!("label-{i:02}"),
                format!("{i:02}-{}", "v".repeat(56)),
            )
        })
        .collect();
    let before = metrics.store_group_fallbacks.get();
    let mut grouped = false;
    for round in 0..20 {
        let mut calls = Vec::new();
        for i in 0..12 {
            let c = core.clone();
            let name = format!("s{round}-{i}");
            calls.push(tokio::spawn(async move {
                (
                    name.clone(),
                    ops::create_namespace(&c, name).await.map(|_| ()),
                )
            }));
            if i == 5 {
                let core = core.clone();
                let set = big.clone();
                calls.push(tokio::spawn(async move {
                    let edit = LabelEdit {
                        set,
                        remove: Vec::new(),
                        overwrite: true,
                    };
                    (
                        "big".to_string(),
                        label_namespace(&core, "r0-0".into(), edit)
                            .await
                            .map(|_| ()),
                    )
                }));
            }
        }
        let mut retry = Vec::new();
        let mut answered = BTreeMap::new();
        for c in calls {
            let (name, r) = c.await.expect("join");
            match (&*name, r) {
                ("big", Err(ApiError::FailedPrecondition(m))) => {
                    assert!(
                        m.contains("max-request-bytes"),
                        "the refusal names etcd's limit: {m}"
                    )
                }
                ("big", r) => panic!("an edit etcd refuses got {r:?}"),
                (_, Ok(())) => {
                    answered.insert(name, true);
                }
                (_, Err(ApiError::Aborted(_))) => {
                    answered.insert(name.clone(), false);
                    retry.push(name);
                }
                (_, Err(e)) => panic!("creating {name} beside a refused edit: {e}"),
            }
        }
        let stored: BTreeSet<String> = stored_namespaces(store.clone())
            .await
            .into_iter()
            .map(|n| n.name)
            .collect();
        for (name, ok) in &answered {
            assert_eq!(
                stored.contains(name),
                *ok,
                "namespace {name}: acknowledged {ok}, in etcd {}",
                stored.contains(name)
            );
        }
        // The store was never reported down, and the refused labels leave the model once
        // the core re-read the store.
        let ok = core.read(|c| c.store_ok).await.expect("read");
        assert!(ok, "a refused change is no store outage");
        wait_for(
            "the refused labels taken back",
            Duration::from_secs(20),
            || async {
                core.read(|c| c.model.namespace_labels("r0-0").map(|l| l.len()))
                    .await
                    .ok()
                    == Some(Some(0))
            },
        )
        .await;
        // Those refused for retry go through once the core re-read the store.
        for name in retry {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match ops::create_namespace(&core, name.clone()).await {
                    Ok(_) => break,
                    Err(ApiError::Aborted(_)) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    Err(e) => panic!("retrying {name}: {e}"),
                }
            }
        }
        if metrics.store_group_fallbacks.get() > before {
            grouped = true;
            break;
        }
    }
    assert!(
        grouped,
        "the refused edit was never grouped with a creation: nothing tested"
    );
    // What etcd holds is what the model holds.
    let stored: BTreeSet<String> = stored_namespaces(store.clone())
        .await
        .into_iter()
        .map(|n| n.name)
        .collect();
    let model: BTreeSet<String> = core
        .read(|c| c.model.namespaces().map(|n| n.name).collect())
        .await
        .expect("read");
    assert_eq!(stored, model);
}
