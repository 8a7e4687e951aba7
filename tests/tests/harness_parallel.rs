//! Two harness instances built at the same time (threads of one process) do not collide.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Barrier;
use std::thread;

use common::lab_with_pods;
use flowmesh_tests::{BridgeSpec, OvsSandbox};

struct Seen {
    sandbox_dir: PathBuf,
    lab_dir: PathBuf,
    namespaces: Vec<String>,
    flows: Vec<String>,
}

fn instance(k: u16, barrier: &Barrier) -> Seen {
    barrier.wait();
    // Same bridge names, same pod addresses in both instances: only isolation keeps them apart.
    let sandbox = OvsSandbox::builder()
        .bridges((0..3).map(|i| BridgeSpec::numbered(i, 1)))
        .start()
        .expect("sandbox");
    sandbox
        .add_flows("br0", &[format!("priority={k},ip actions=output:3")])
        .expect("flow");
    let (lab, pods) = lab_with_pods(2);
    let st = lab
        .ping(&pods[0].ns, IpAddr::V4(pods[1].ip), 3)
        .expect("ping");
    assert!(st.received >= 1, "instance {k}:\n{}", st.output);
    Seen {
        sandbox_dir: sandbox.run_dir().to_owned(),
        lab_dir: lab.run_dir().to_owned(),
        namespaces: lab.namespaces(),
        flows: sandbox.dump_flows("br0").expect("dump"),
    }
}

#[test]
fn two_instances_at_once_do_not_collide() {
    let barrier = Barrier::new(2);
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| instance(11, &barrier));
        let b = s.spawn(|| instance(22, &barrier));
        (a.join().expect("instance a"), b.join().expect("instance b"))
    });
    assert_ne!(a.sandbox_dir, b.sandbox_dir);
    assert_ne!(a.lab_dir, b.lab_dir);
    let na: BTreeSet<_> = a.namespaces.iter().collect();
    let nb: BTreeSet<_> = b.namespaces.iter().collect();
    assert!(na.is_disjoint(&nb), "{na:?} vs {nb:?}");
    assert_eq!(a.flows, vec!["priority=11,ip actions=output:3".to_owned()]);
    assert_eq!(b.flows, vec!["priority=22,ip actions=output:3".to_owned()]);
}
