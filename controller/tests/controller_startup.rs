//! flowmesh-controller refuses bad input at start-up with a clear message and a non-zero exit:
//! a malformed or invalid config, a busy port, an unwritable data dir, a missing or broken
//! kubeconfig.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
        .args(args)
        .output()
        .expect("run flowmesh-controller");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A listen address for a run that must fail for another reason: port 0, so no other test's
/// listener can make it fail with "cannot listen" instead.
fn port() -> String {
    "127.0.0.1:0".to_string()
}

#[test]
fn bad_configs_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf8");
    let cases = [
        ("clusterNetworks: [", "--config"),
        (
            "clusterNetworks:\n  - cidr: 10.128.0.0/14\n    hostPrefix: 23\nserviceNetwork: 10.128.0.0/16\nmode: multitenant\n",
            "overlap",
        ),
        (
            "clusterNetworks:\n  - cidr: 10.128.0.0/14\n    hostPrefix: 12\nserviceNetwork: 172.30.0.0/16\nmode: multitenant\n",
            "hostPrefix",
        ),
        (
            "clusterNetworks:\n  - cidr: 10.128.0.0/33\n    hostPrefix: 23\nserviceNetwork: 172.30.0.0/16\nmode: multitenant\n",
            "--config",
        ),
    ];
    for (yaml, expect) in cases {
        let cfg = dir.path().join("cluster.yaml");
        std::fs::write(&cfg, yaml).expect("write config");
        let (code, err) = run(&[
            "--config",
            cfg.to_str().expect("utf8"),
            "--data-dir",
            data,
            "--grpc-listen",
            &port(),
            "--openflow-listen",
            &port(),
            "--metrics-listen",
            &port(),
        ]);
        assert_ne!(code, 0, "{yaml}");
        assert!(
            err.to_lowercase().contains(&expect.to_lowercase()),
            "config {yaml:?}: {err}"
        );
    }
    let (code, err) = run(&["--config", "/nonexistent/cluster.yaml", "--data-dir", data]);
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot read --config /nonexistent/cluster.yaml"),
        "{err}"
    );
}

#[test]
fn a_busy_port_and_an_unwritable_data_dir_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy_addr = busy.local_addr().expect("addr").to_string();
    let data = dir.path().join("data");
    let (code, err) = run(&[
        "--data-dir",
        data.to_str().expect("utf8"),
        "--grpc-listen",
        &busy_addr,
        "--openflow-listen",
        &port(),
        "--metrics-listen",
        &port(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot listen on gRPC") && err.contains("--grpc-listen"),
        "{err}"
    );
    let (code, err) = run(&[
        "--data-dir",
        "/proc/flowmesh",
        "--grpc-listen",
        &port(),
        "--openflow-listen",
        &port(),
        "--metrics-listen",
        &port(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("data directory /proc/flowmesh"), "{err}");
}

#[test]
fn a_missing_or_broken_kubeconfig_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.kubeconfig");
    std::fs::write(&broken, "apiVersion: v1\nkind: Config\nclusters: []\n").expect("write");
    let broken = broken.to_str().expect("utf8");
    for (args, want) in [
        (
            vec![
                "--datastore",
                "kubernetes",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
            ],
            "--kubeconfig /nonexistent/kubeconfig",
        ),
        (
            vec!["--datastore", "kubernetes", "--kubeconfig", broken],
            "current context",
        ),
        (
            vec!["--kubeconfig", broken],
            "--kubeconfig needs --datastore kubernetes",
        ),
    ] {
        let (g, o) = (port(), port());
        let mut all = args.clone();
        all.extend(["--grpc-listen", &g, "--openflow-listen", &o]);
        all.extend(["--metrics-listen", "127.0.0.1:0"]);
        let (code, err) = run(&all);
        assert_ne!(code, 0, "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Starts the controller with `args` in a network namespace of its own (`unshare -n`, its
/// loopback up): whatever it binds, no other host or test reaches it. Returns the start-up
/// line (`flowmesh-controller: gRPC on ...`) and kills the process.
fn start_isolated(args: &[&str]) -> Result<String, String> {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut cmd = Command::new("unshare");
    cmd.args(["-n", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_flowmesh-controller"))
        .arg("--data-dir")
        .arg(&data)
        .args(["--metrics-listen", "127.0.0.1:0", "--log", "warn"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("unshare -n flowmesh-controller");
    let stderr = child.stderr.take().expect("stderr");
    let mut seen = String::new();
    let mut started = None;
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("flowmesh-controller: gRPC on ") {
            started = Some(line);
            break;
        }
    }
    // The process exec'd by sh under unshare is our child's PID.
    let _ = child.kill();
    let _ = child.wait();
    started.ok_or(seen)
}

#[test]
fn plaintext_openflow_off_loopback_is_refused_unless_insecure_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for addr in ["0.0.0.0:0", "192.0.2.1:6653"] {
        let (code, err) = run(&[
            "--data-dir",
            data.to_str().expect("utf8"),
            "--grpc-listen",
            &port(),
            "--metrics-listen",
            &port(),
            "--openflow-listen",
            addr,
        ]);
        assert_ne!(code, 0, "{addr}: started");
        assert!(
            err.contains(&format!(
                "refusing to serve OpenFlow in plaintext on {addr}, which is not a loopback address"
            )) && err.contains("--openflow-tls-cert")
                && err.contains("--openflow-insecure"),
            "{addr}: {err}"
        );
    }
    // With the explicit flag it starts (in a namespace of its own: reachable by nobody).
    let line = start_isolated(&[
        "--grpc-listen",
        "127.0.0.1:0",
        "--openflow-listen",
        "0.0.0.0:0",
        "--openflow-insecure",
    ])
    .unwrap_or_else(|log| panic!("did not start with --openflow-insecure:\n{log}"));
    assert!(line.contains("OpenFlow on 0.0.0.0:"), "{line}");
}

#[test]
fn the_default_openflow_listener_is_loopback() {
    let out = Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
        .arg("--help")
        .output()
        .expect("--help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[default: 127.0.0.1:6653]"), "{help}");
    assert!(help.contains("--openflow-insecure"), "{help}");
    // Started without --openflow-listen (alone in its namespace, so 6653 is free).
    let line = start_isolated(&["--grpc-listen", "127.0.0.1:0"])
        .unwrap_or_else(|log| panic!("did not start:\n{log}"));
    assert!(line.contains("OpenFlow on 127.0.0.1:6653"), "{line}");
}

#[test]
fn openflow_limits_of_zero_are_refused() {
    for flag in [
        "--openflow-max-connections",
        "--openflow-max-connections-per-peer",
        "--openflow-max-ports",
        "--openflow-max-multipart-bytes",
    ] {
        let (code, err) = run(&[flag, "0", "--grpc-listen", &port()]);
        assert_ne!(code, 0, "{flag} 0 started");
        assert!(err.contains(&format!("{flag} 0: give at least 1")), "{err}");
    }
}
