//! The real `flowmeshctl` against the real `flowmesh-controller` (and, where switches matter,
//! real Open vSwitch bridges): pods attached by port name without `--ofport` (CLI and `apply
//! -f`), the registered datapath id of a switch not connected yet, every error with exactly
//! one hint naming the right object, and gRPC reflection (v1 and v1alpha, health listed) asked
//! by a client that is not ours (Python grpcio).

mod support;

use flowmesh_tests::OvsSandbox;
use std::time::Duration;
use support::{ctl, sandbox, wait_synced, Controller};

/// A controller with no switch.
fn bare() -> (tempfile::TempDir, Controller) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctl = Controller::start(&dir.path().join("data"), &[]);
    (dir, ctl)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_by_port_name_looks_the_ofport_up_on_the_switch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Controller::start(&dir.path().join("data"), &[]);
    let sbx = sandbox(&c, &[("node-1", 0xa1, &[("web", 7), ("db", 8)])]);
    let s = c.grpc;
    ctl(
        s,
        &[
            "node",
            "add",
            "node-1",
            "--ip",
            "172.31.0.1",
            "--dpid",
            "0xa1",
        ],
    )
    .ok();
    ctl(
        s,
        &[
            "node",
            "add",
            "node-2",
            "--ip",
            "172.31.0.2",
            "--dpid",
            "0xb2",
        ],
    )
    .ok();
    ctl(s, &["namespace", "create", "blue"]).ok();
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &["node-1"]).await;

    // By name, no --ofport: the ofport comes from the switch's PORT_DESC.
    let web = OvsSandbox::port_name("node-1", "web");
    let ip = ctl(
        s,
        &[
            "pod", "attach", "--node", "node-1", "-n", "blue", "--name", "web", "--port", &web,
        ],
    )
    .ok()
    .trim()
    .to_string();
    assert!(ip.starts_with("10.128."), "{ip}");
    let pods = json(ctl(s, &["get", "pods", "-n", "blue", "-o", "json"]).ok());
    assert_eq!(pods[0]["name"], "web");
    assert_eq!(pods[0]["ofport"], 7, "{pods}");
    // The pod's flows are on the bridge, on ofport 7.
    let flows = sbx.dump_flows("node-1").expect("dump-flows").join("\n");
    assert!(flows.contains("in_port=7"), "{flows}");

    // A port added after the switch connected is known from PORT_STATUS.
    let late = sbx.add_port("node-1", "late", 9).expect("add port");
    let mut found = false;
    for _ in 0..100 {
        let r = ctl(
            s,
            &[
                "pod", "attach", "--node", "node-1", "-n", "blue", "--name", "late", "--port",
                &late, "-o", "json",
            ],
        );
        if r.code == Some(0) {
            assert_eq!(json(&r.stdout)["ofport"], 9, "{}", r.stdout);
            found = true;
            break;
        }
        assert!(r.stderr.contains("not found on the switch"), "{}", r.stderr);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(found, "the port added later was never found by name");

    // A port that is not on the switch: one clear error naming the port and the node.
    let err = ctl(
        s,
        &[
            "pod", "attach", "--node", "node-1", "-n", "blue", "--name", "x", "--port", "nosuch",
        ],
    )
    .fails()
    .to_string();
    assert!(
        err.starts_with("error: attach pod \"blue/x\": port \"nosuch\" not found on the switch of node node-1 (datapath 0x00000000000000a1;"),
        "{err}"
    );
    assert!(
        err.ends_with("(check the port is on the bridge of node-1 (ovs-vsctl list-ports br0) or pass --ofport)\n"),
        "{err}"
    );
    // A registered node whose switch is not connected: names the port, the node and the fix.
    let err = ctl(
        s,
        &[
            "pod", "attach", "--node", "node-2", "-n", "blue", "--name", "y", "--port", "veth-y",
        ],
    )
    .fails()
    .to_string();
    assert_eq!(
        err,
        "error: attach pod \"blue/y\": cannot look up the OpenFlow port of \"veth-y\": the switch of node node-2 (datapath 0x00000000000000b2) is not connected (connect the bridge of node-2 to the controller (ovs-vsctl set-controller br0 tcp:CONTROLLER:6653) and retry, or pass --ofport; see: flowmeshctl get switches)\n"
    );
    // The pod already attached: detach first (one hint).
    let err = ctl(
        s,
        &[
            "pod", "attach", "--node", "node-1", "-n", "blue", "--name", "web", "--port", &web,
        ],
    )
    .fails()
    .to_string();
    assert_eq!(
        err,
        "error: attach pod \"blue/web\": pod blue/web already exists (detach it first with: flowmeshctl pod detach --namespace blue --name web)\n"
    );

    // apply -f: a Pod without flowmesh.io/ofport gets it from the switch too, and a second
    // apply of the same file changes nothing.
    let db = OvsSandbox::port_name("node-1", "db");
    let file = dir.path().join("pods.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: blue\n  name: db\n  annotations:\n    flowmesh.io/ovs-port: {db}\nspec:\n  nodeName: node-1\n"
        ),
    )
    .expect("write manifest");
    let f = file.to_str().expect("utf8");
    assert_eq!(ctl(s, &["apply", "-f", f]).ok(), "pod/blue/db created\n");
    assert_eq!(ctl(s, &["apply", "-f", f]).ok(), "pod/blue/db unchanged\n");
    let pods = json(ctl(s, &["get", "pods", "-n", "blue", "-o", "json"]).ok());
    let db_pod = pods
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "db"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(db_pod["ofport"], 8, "{pods}");
    // apply -f with a port the switch does not have: refused, naming the pod, port and node.
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: blue\n  name: ghost\n  annotations:\n    flowmesh.io/ovs-port: nosuch\nspec:\n  nodeName: node-1\n",
    )
    .expect("write manifest");
    let err = ctl(s, &["apply", "-f", f]).fails().to_string();
    assert!(
        err.contains("pod/blue/ghost: port \"nosuch\" not found on the switch of node node-1"),
        "{err}"
    );
    assert!(
        err.ends_with("(check the port is on the node's bridge (ovs-vsctl list-ports br0) or set the flowmesh.io/ofport annotation)\n"),
        "{err}"
    );
    assert_eq!(err.matches("check the port").count(), 1, "one hint: {err}");
}

#[test]
fn get_switches_shows_the_registered_dpid_of_a_switch_not_connected() {
    let (_dir, c) = bare();
    let s = c.grpc;
    ctl(
        s,
        &[
            "node",
            "add",
            "node-1",
            "--ip",
            "172.31.0.1",
            "--dpid",
            "0xa1",
        ],
    )
    .ok();
    let sw = json(ctl(s, &["get", "switches", "-o", "json"]).ok());
    assert_eq!(sw[0]["node"], "node-1", "{sw}");
    assert_eq!(sw[0]["dpid"], "0x00000000000000a1", "{sw}");
    assert_eq!(sw[0]["connected"], false, "{sw}");
    let table = ctl(s, &["get", "switches"]).ok().to_string();
    assert!(
        table.contains("node-1   0x00000000000000a1   false"),
        "{table}"
    );
}

/// Issue 27: an attach refused because the pod's switch is not connected leaves nothing
/// behind: no pod in `get pods -A`, and a retry meets the same refusal, not "already exists".
#[test]
fn a_refused_attach_leaves_nothing_behind() {
    let (_dir, c) = bare();
    let s = c.grpc;
    ctl(
        s,
        &[
            "node",
            "add",
            "node-1",
            "--ip",
            "172.31.0.1",
            "--dpid",
            "0xa1",
        ],
    )
    .ok();
    ctl(s, &["namespace", "create", "foo"]).ok();
    let attach = [
        "pod", "attach", "--node", "node-1", "-n", "foo", "--name", "b", "--port", "veth-b",
        "--ofport", "6",
    ];
    for attempt in 0..2 {
        let err = ctl(s, &attach).fails().to_string();
        assert!(
            err.starts_with("error: attach pod \"foo/b\": the switch of node node-1 is not connected, so nothing was stored"),
            "attempt {attempt}: {err}"
        );
        for all in ["-A", "--all-namespaces"] {
            let pods = json(ctl(s, &["get", "pods", all, "-o", "json"]).ok());
            assert_eq!(pods, serde_json::json!([]), "attempt {attempt}, {all}");
        }
    }
    // -A and -n together is a usage error, as in kubectl.
    assert_eq!(ctl(s, &["get", "pods", "-A", "-n", "foo"]).code, Some(2));
}

/// Every error path that carries a hint, against the real controller: exactly the expected
/// line, so a hint is never doubled (server and client) and names the right object.
#[test]
fn every_error_has_one_hint_naming_the_right_object() {
    let (dir, c) = bare();
    let s = c.grpc;
    ctl(
        s,
        &[
            "node",
            "add",
            "node-1",
            "--ip",
            "192.168.1.11",
            "--dpid",
            "0xa1",
        ],
    )
    .ok();
    ctl(s, &["namespace", "create", "blue"]).ok();
    let manifest = dir.path().join("m.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: green\n  name: web\n  annotations:\n    flowmesh.io/ovs-port: veth-g\n    flowmesh.io/ofport: \"3\"\nspec:\n  nodeName: node-1\n",
    )
    .expect("write manifest");
    let m = manifest.to_str().expect("utf8");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["pod", "attach", "--node", "node-1", "-n", "foo", "--name", "a", "--port", "veth-a"],
            "error: attach pod \"foo/a\": namespace \"foo\" not found (create it with: flowmeshctl namespace create foo)".into(),
        ),
        (
            vec!["pod", "attach", "--node", "node-1", "-n", "foo", "--name", "a", "--port", "veth-a", "--ofport", "3"],
            "error: attach pod \"foo/a\": namespace \"foo\" not found (create it with: flowmeshctl namespace create foo)".into(),
        ),
        (
            vec!["pod", "attach", "--node", "node-9", "-n", "blue", "--name", "a", "--port", "veth-a"],
            "error: attach pod \"blue/a\": node \"node-9\" not found (add it with: flowmeshctl node add node-9 --ip IPV4 --dpid DPID)".into(),
        ),
        (
            vec!["pod", "attach", "--node", "node-9", "-n", "blue", "--name", "a", "--port", "veth-a", "--ofport", "3"],
            "error: attach pod \"blue/a\": node \"node-9\" not found (add it with: flowmeshctl node add node-9 --ip IPV4 --dpid DPID)".into(),
        ),
        (
            vec!["pod", "attach", "--node", "node-1", "-n", "blue", "--name", "a", "--port", "veth-a", "--ofport", "3"],
            "error: attach pod \"blue/a\": the switch of node node-1 is not connected, so nothing was stored (a pod's flows must reach its switch: is flowmesh-shim running on node-1, its bridge connected to the controller? see: flowmeshctl get switches)".into(),
        ),
        (
            vec!["pod", "detach", "-n", "blue", "--name", "nosuch"],
            "error: detach pod \"blue/nosuch\": pod blue/nosuch not found (nothing to detach; list pods with: flowmeshctl get pods -n blue)".into(),
        ),
        (
            vec!["adm", "pod-network", "join-projects", "--to=blue", "nosuch"],
            "error: join namespaces blue, nosuch: namespace \"nosuch\" not found (create it with: flowmeshctl namespace create nosuch)".into(),
        ),
        (
            vec!["adm", "pod-network", "join-projects", "--to=nosuch", "blue"],
            "error: join namespaces nosuch, blue: namespace \"nosuch\" not found (create it with: flowmeshctl namespace create nosuch)".into(),
        ),
        (
            vec!["adm", "pod-network", "isolate-projects", "nosuch"],
            "error: isolate namespaces nosuch: namespace \"nosuch\" not found (create it with: flowmeshctl namespace create nosuch)".into(),
        ),
        (
            vec!["namespace", "delete", "nosuch"],
            "error: delete namespace \"nosuch\": namespace \"nosuch\" not found (nothing to delete; \"nosuch\" is not a namespace; list them with: flowmeshctl get netnamespaces)".into(),
        ),
        (
            vec!["namespace", "create", "blue"],
            "error: create namespace \"blue\": namespace \"blue\" already exists (it exists already; see it with: flowmeshctl get netnamespaces blue)".into(),
        ),
        (
            vec!["namespace", "delete", "default"],
            "error: delete namespace \"default\": the default namespace cannot be deleted (the current state does not allow this; resolve what the message names and retry)".into(),
        ),
        (
            vec!["node", "delete", "nosuch"],
            "error: delete node \"nosuch\": node \"nosuch\" not found (nothing to delete; \"nosuch\" is not a node; list them with: flowmeshctl get hostsubnets)".into(),
        ),
        (
            vec!["node", "add", "node-2", "--ip", "192.168.1.11", "--dpid", "0xb2"],
            "error: add node \"node-2\": node node-2: IP 192.168.1.11 is already used by node node-1 (it belongs to node node-1; see it with: flowmeshctl get hostsubnets node-1; choose another for node-2, or delete node-1 first with: flowmeshctl node delete node-1)".into(),
        ),
        (
            vec!["node", "add", "node-2", "--ip", "192.168.1.12", "--dpid", "0xa1"],
            "error: add node \"node-2\": node node-2: datapath id 0x00000000000000a1 is already registered by node node-1 (it belongs to node node-1; see it with: flowmeshctl get hostsubnets node-1; choose another for node-2, or delete node-1 first with: flowmeshctl node delete node-1)".into(),
        ),
        (
            vec!["node", "add", "Node-2", "--ip", "192.168.1.12", "--dpid", "0xb2"],
            "error: add node \"Node-2\": node name \"Node-2\" is invalid: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (check the arguments; see: flowmeshctl node add --help)".into(),
        ),
        (
            vec!["dump-flows", "nosuch"],
            "error: dump flows of node \"nosuch\": node \"nosuch\" not found (add it with: flowmeshctl node add nosuch --ip IPV4 --dpid DPID; list nodes with: flowmeshctl get hostsubnets)".into(),
        ),
        (
            vec!["dump-flows", "node-1", "--installed"],
            "error: dump flows of node \"node-1\": the switch of node node-1 is not connected (the switch of node \"node-1\" may be disconnected or not synced yet; see: flowmeshctl get switches)".into(),
        ),
        (
            vec!["trace", "--from", "blue/nosuch", "--to", "10.128.0.1"],
            "error: trace packet: pod blue/nosuch not found (list pods with: flowmeshctl get pods)".into(),
        ),
        (
            vec!["apply", "-f", m],
            format!("error: apply {m}: pod/green/web: namespace \"green\" not found (create it with: flowmeshctl namespace create green, or add a Namespace document to the file)"),
        ),
    ];
    let mut wrong = Vec::new();
    for (args, want) in &cases {
        let r = ctl(s, args);
        let got = r.stderr.trim_end();
        if r.code != Some(1) || got != want {
            wrong.push(format!(
                "flowmeshctl {}\n  exit {:?}\n  got:  {got}\n  want: {want}",
                args.join(" "),
                r.code
            ));
        }
        for phrase in [
            "with: flowmeshctl node add",
            "create it with",
            "detach it first",
        ] {
            assert!(got.matches(phrase).count() <= 1, "hint twice: {got}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Reflection asked by Python's grpcio (Debian python3-grpcio, a C-core HTTP/2 client) with
/// the requests of both versions written by hand: each lists every service, health included,
/// and answers the health service's file.
#[test]
fn reflection_answers_v1_and_v1alpha_to_python_grpcio() {
    let (_dir, c) = bare();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/reflection.py");
    for version in ["v1alpha", "v1"] {
        let out = std::process::Command::new("/usr/bin/python3")
            .arg(script)
            .arg(c.grpc.to_string())
            .arg(version)
            .output()
            .expect("run /usr/bin/python3 (install it with: bash scripts/deps.sh)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "reflection {version} failed (python3-grpcio comes with: bash scripts/deps.sh)\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let services: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("service "))
            .collect();
        for want in [
            "flowmesh.admin.v1.Admin",
            "flowmesh.node.v1.NodeApi",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ] {
            assert!(
                services.contains(&want),
                "{version}: {want} not listed: {stdout}"
            );
        }
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("file grpc.health.v1.Health ") && l.contains("Check")),
            "{version}: no descriptor for the health service: {stdout}"
        );
    }
}
