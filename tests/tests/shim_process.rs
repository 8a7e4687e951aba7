//! flowmesh-shim as a process: a SIGTERM while it waits to register with a controller that does
//! not answer ends it in order (it once took the signal's default action there: status 143,
//! no log line).

use std::fs::File;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use flowmesh_tests::cni::shim_bins;
use flowmesh_tests::process::accept_from;
use flowmesh_tests::TrackedProcess;

#[test]
fn a_sigterm_while_registering_exits_in_order() {
    let bins = shim_bins().expect("shim binaries");
    let dir = tempfile::tempdir().expect("tempdir");
    // The controller's node API: listening, its one connection accepted (to know the shim is
    // waiting on it) and never answered.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let socket = dir.path().join("cni.sock");
    let log_path = dir.path().join("shim.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut shim = TrackedProcess::spawn(
        "flowmesh-shim",
        Command::new(&bins.shim)
            .args(["--node-name", "node-x", "--node-ip", "172.31.0.9"])
            .args(["--controller", &format!("http://{addr}")])
            .arg("--cni-socket")
            .arg(&socket)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(File::create(&log_path).expect("log file")),
    )
    .expect("start flowmesh-shim");
    let _held = accept_from(&silent, || shim.try_exited(), Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the node API: {e}; log:\n{}", log()));
    // SIGTERM, and SIGKILL if it is still running 10 s later (its status then says so).
    let st = shim.terminate(Duration::from_secs(10));
    let log = log();
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{st:?}: {log}");
    assert!(
        log.contains("termination requested while registering: exiting"),
        "{log}"
    );
    assert!(!socket.exists(), "the CNI socket was made: {log}");
}
