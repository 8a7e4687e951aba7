//! flowmesh-shim as a process: a SIGTERM while it waits to register with a controller that does
//! not answer ends it in order (it once took the signal's default action there: status 143,
//! no log line).

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flowmesh_tests::cni::shim_bins;

#[test]
fn a_sigterm_while_registering_exits_in_order() {
    let bins = shim_bins().expect("shim binaries");
    let dir = tempfile::tempdir().expect("tempdir");
    // The controller's node API: listening, its one connection accepted (to know the shim is
    // waiting on it) and never answered.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    silent.set_nonblocking(true).expect("nonblocking");
    let addr = silent.local_addr().expect("addr");
    let socket = dir.path().join("cni.sock");
    let mut child = Command::new(&bins.shim)
        .args(["--node-name", "node-x", "--node-ip", "172.31.0.9"])
        .args(["--controller", &format!("http://{addr}")])
        .arg("--cni-socket")
        .arg(&socket)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start flowmesh-shim");
    let mut stderr = child.stderr.take().expect("stderr");
    // The log is read whole once the process has exited (it writes a few lines at most).
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let _held = loop {
        match silent.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accept: {e}"),
        }
        if let Some(st) = child.try_wait().expect("wait") {
            let log = reader.join().unwrap_or_default();
            panic!("exited ({st}) before it reached the controller; log:\n{log}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = reader.join().unwrap_or_default();
            panic!("never reached the controller; log:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -TERM failed");
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = reader.join().unwrap_or_default();
            panic!("still running 10 s after SIGTERM; log:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let log = reader.join().expect("log");
    assert_eq!(st.code(), Some(0), "{log}");
    assert!(
        log.contains("termination requested while registering: exiting"),
        "{log}"
    );
    assert!(!socket.exists(), "the CNI socket was made: {log}");
}
