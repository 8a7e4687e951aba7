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
