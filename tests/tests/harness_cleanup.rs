//! Cleanup guarantees: a panicking test leaves no Open vSwitch daemon, spawned process,
//! namespace or run directory behind; the reaper removes leftovers of dead runs.

mod common;

use std::fs;
use std::net::Ipv4Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::process_gone;
use flowmesh_tests::rundir::{list_netns, reap_stale_once, reap_stale_runs_in};
use flowmesh_tests::{BridgeSpec, NetnsLab, OvsSandbox};

#[derive(Default)]
struct Seen {
    pids: Vec<u32>,
    namespaces: Vec<String>,
    dirs: Vec<PathBuf>,
}

#[test]
fn forced_panic_leaves_nothing_behind() {
    let seen = Mutex::new(Seen::default());
    let result = catch_unwind(AssertUnwindSafe(|| {
        let sandbox = OvsSandbox::builder()
            .bridges((0..3).map(|i| BridgeSpec::numbered(i, 1)))
            .start()
            .expect("sandbox");
        let lab = NetnsLab::builder().nodes(1).start().expect("lab");
        let pod = lab
            .add_pod(
                1,
                "pod1",
                "10.244.1.2/24",
                Ipv4Addr::new(10, 244, 1, 1),
                "0a:58:0a:f4:01:02",
                None,
            )
            .expect("pod");
        let shim = lab.add_netns("shim").expect("plain netns");
        lab.add_veth(&shim, "veth-a", lab.node(1).expect("node").ns(), "veth-b")
            .expect("veth");
        lab.spawn_in(&pod.ns, "sleep", &["60"], &[]).expect("spawn");

        let mut s = seen.lock().expect("lock");
        s.pids.extend(sandbox.vswitchd_pid());
        s.pids.extend(sandbox.ovsdb_pid());
        s.pids.extend(lab.pids());
        s.namespaces = lab.namespaces();
        s.dirs = vec![sandbox.run_dir().to_owned(), lab.run_dir().to_owned()];
        // Preconditions, so that the checks below mean something.
        assert_eq!(
            s.pids.len(),
            5,
            "2 sandbox daemons, 2 node daemons, 1 spawned"
        );
        assert!(s.pids.iter().all(|p| !process_gone(*p)));
        let live = list_netns();
        assert_eq!(s.namespaces.len(), 5, "ul, ctl, node, pod, shim");
        assert!(s.namespaces.iter().all(|n| live.contains(n)));
        assert!(s.dirs.iter().all(|d| d.exists()));
        drop(s);
        panic!("forced panic with a sandbox and a lab alive");
    }));
    assert!(result.is_err(), "the closure panicked");

    let s = seen.lock().expect("lock");
    for pid in &s.pids {
        assert!(process_gone(*pid), "pid {pid} survived the panic");
    }
    let live = list_netns();
    for ns in &s.namespaces {
        assert!(!live.contains(ns), "namespace {ns} survived the panic");
    }
    for d in &s.dirs {
        assert!(!d.exists(), "run dir {} survived the panic", d.display());
    }
}

/// Waits up to 5 s for a child to exit; kills it (and fails) if it does not.
fn exited_within(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} was not killed by the reaper");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn reaper_removes_leftovers_of_a_dead_run() {
    // Let this process's start-up reaper finish first, so it cannot race with the set-up below.
    reap_stale_once();
    // An owner PID above pid_max can never be alive.
    let pid_max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    let dead = pid_max + 7;
    // Its own base dir, so this process's start-up reaper cannot race with the set-up.
    let base = PathBuf::from(format!(
        "/tmp/flowmesh-harness-reaptest-{}",
        std::process::id()
    ));
    let _cleanup = RemoveOnDrop(base.clone());
    let id = format!("fmh{dead}-1");
    let dir = base.join(&id);
    fs::create_dir_all(&dir).expect("dir");
    fs::write(dir.join("owner"), format!("{dead} 0\n")).expect("owner");
    let ns = format!("{id}-leftover");
    fs::write(dir.join("netns"), format!("{ns}\n")).expect("netns list");
    let ok = Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .expect("ip netns add");
    assert!(ok.success());
    // A "daemon" whose command line names the run dir, recorded in a pidfile ...
    let mut daemon = Command::new("tail")
        .arg("-f")
        .arg(dir.join("owner"))
        .spawn()
        .expect("tail");
    fs::write(dir.join("ovs-vswitchd.pid"), format!("{}\n", daemon.id())).expect("pidfile");
    // ... and a process left inside the namespace.
    let mut inside = Command::new("ip")
        .args(["netns", "exec", &ns, "sleep", "30"])
        .spawn()
        .expect("sleep in netns");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let out = Command::new("ip")
            .args(["netns", "pids", &ns])
            .output()
            .expect("ip netns pids");
        if String::from_utf8_lossy(&out.stdout).contains(&inside.id().to_string()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let report = reap_stale_runs_in(&base);
    println!("reaper: {report:?}");
    let d = exited_within(&mut daemon, "pidfile daemon");
    let i = exited_within(&mut inside, "process inside the namespace");
    assert!(!d.success() && !i.success(), "both killed: {d} {i}");
    assert!(!list_netns().contains(&ns), "leftover namespace reaped");
    assert!(!dir.exists(), "leftover run dir reaped");
    assert_eq!(report.dirs, vec![dir]);
}

/// Removes the test's private base directory even when an assertion fails.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
