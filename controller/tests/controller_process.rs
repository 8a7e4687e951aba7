//! flowmesh-controller as a process: SIGTERM with nothing connected exits at once and the log
//! says what shutdown waited for; an open watch stream is closed when `--shutdown-grace` ends;
//! a log written to a pipe holds no colour escapes; `--log-format json` writes JSON lines.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, send_signal};

/// The controller with stderr (and stdout) to a pipe, started and listening.
fn start(dir: &std::path::Path, extra: &[&str]) -> (Child, SocketAddr) {
    let grpc = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--grpc-listen")
        .arg(grpc.to_string())
        .arg("--openflow-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--metrics-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start flowmesh-controller");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(grpc).is_err() {
        assert!(Instant::now() < deadline, "controller did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, grpc)
}

/// SIGTERM, then wait (at most `limit`) for the exit; (exit code, time to exit, stdout+stderr).
fn terminate(mut child: Child, limit: Duration) -> (Option<i32>, Duration, String) {
    let t0 = Instant::now();
    send_signal(child.id(), "TERM");
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flowmesh-controller still running {limit:?} after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = t0.elapsed();
    let mut out = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut out);
    }
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    (status.code(), took, out)
}

#[test]
fn sigterm_with_nothing_connected_exits_at_once_and_says_what_it_waited_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, _) = start(dir.path(), &[]);
    let (code, took, log) = terminate(child, Duration::from_secs(10));
    eprintln!("SIGTERM to exit, nothing connected: {took:?}");
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("termination requested signal=\"SIGTERM\""),
        "{log}"
    );
    assert!(
        log.contains("shutting down: stopped accepting; waiting for the calls in flight to finish waiting_for=gRPC, metrics grace_ms=5000"),
        "{log}"
    );
    assert!(
        log.contains("shutting down: server stopped server=\"gRPC\""),
        "{log}"
    );
    assert!(log.contains("shutdown complete took_ms="), "{log}");
    // Nothing in flight: far below the grace period. (Measured: a few milliseconds.)
    assert!(took < Duration::from_secs(2), "took {took:?}\n{log}");
    // stderr is a pipe: no ANSI colour escapes.
    assert!(
        !log.contains('\x1b'),
        "escape codes in a piped log:\n{log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_watch_stream_is_closed_when_the_grace_period_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, grpc) = start(dir.path(), &["--shutdown-grace", "1"]);
    let mut admin = proto::admin::admin_client::AdminClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    // The answer's headers mean the server is serving the stream.
    let stream = admin
        .watch_events(proto::admin::Empty {})
        .await
        .expect("watch events")
        .into_inner();
    let (code, took, log) =
        tokio::task::spawn_blocking(move || terminate(child, Duration::from_secs(10)))
            .await
            .expect("terminate");
    drop(stream);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("calls still open after the grace period (e.g. a watch stream); closing them server=\"gRPC\" grace_ms=1000"),
        "{log}"
    );
    assert!(took >= Duration::from_millis(900), "took {took:?}");
    assert!(took < Duration::from_secs(4), "took {took:?}\n{log}");
}

#[test]
fn log_format_json_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, _) = start(dir.path(), &["--log-format", "json"]);
    let (code, _, log) = terminate(child, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{log}");
    let mut messages = Vec::new();
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        messages.push(
            v["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    for want in [
        "flowmesh-controller running",
        "termination requested",
        "shutdown complete",
    ] {
        assert!(
            messages.iter().any(|m| m == want),
            "{want:?} not logged:\n{log}"
        );
    }
}
