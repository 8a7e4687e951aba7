//! Runs the real `flowmeshctl` binary against an in-process fake admin API server and checks
//! its output, its exit status and the requests the server received.

mod fake_admin;

use fake_admin::*;
use proto::admin::{self, FlowView};
use std::process::Command;
use std::time::Duration;

#[test]
fn get_netnamespaces_table_sorted_with_aliases() {
    let s = Server::start();
    let out = s.ctl(&["get", "netnamespaces"]).ok().to_string();
    assert_eq!(
        out,
        "NAME      NETID\nblue      11\ndefault   0\nred       12\n"
    );
    assert_eq!(s.ctl(&["get", "netns"]).ok(), out);
    assert_eq!(
        s.ctl(&["get", "netnamespace", "red"]).ok(),
        "NAME   NETID\nred    12\n"
    );
}

#[test]
fn get_pods_json_keys_values_and_namespace_filter() {
    let s = Server::start();
    let v = json(s.ctl(&["get", "pods", "-o", "json"]).ok());
    let items = v.as_array().expect("an array");
    assert_eq!(items.len(), 2);
    // Sorted by namespace/name: blue/web first.
    assert_eq!(
        items[0],
        serde_json::json!({
            "namespace": "blue", "name": "web", "node": "node-1", "ip": "10.128.0.5",
            "mac": "0a:58:0a:80:00:05", "ofport": 5, "netid": 11, "portName": "veth-web"
        })
    );
    assert_eq!(items[1]["namespace"], "red");
    let v = json(s.ctl(&["get", "pod", "-n", "red", "-o", "json"]).ok());
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    assert_eq!(v[0]["ip"], "10.128.2.7");
    let table = s.ctl(&["get", "pods"]).ok().to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "NAMESPACE   NAME   NODE     IP           MAC                 OFPORT   NETID"
    );
    assert_eq!(
        lines[1],
        "blue        web    node-1   10.128.0.5   0a:58:0a:80:00:05   5        11"
    );
}

#[test]
fn get_hostsubnets_yaml_and_table() {
    let s = Server::start();
    let y: serde_yaml::Value =
        serde_yaml::from_str(s.ctl(&["get", "hostsubnets", "-o", "yaml"]).ok()).expect("YAML");
    let items = y.as_sequence().expect("a sequence");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["node"].as_str(), Some("node-1"));
    assert_eq!(items[0]["nodeIP"].as_str(), Some("192.168.1.11"));
    assert_eq!(items[0]["subnet"].as_str(), Some("10.128.0.0/23"));
    assert_eq!(items[0]["dpid"].as_str(), Some("0x00000000000000a1"));
    let t = s.ctl(&["get", "hostsubnet"]).ok().to_string();
    assert_eq!(
        t.lines().collect::<Vec<_>>(),
        vec![
            "NODE     NODE IP        SUBNET          DPID",
            "node-1   192.168.1.11   10.128.0.0/23   0x00000000000000a1",
            "node-2   192.168.1.12   10.128.2.0/23   0x0000000000000002",
        ]
    );
}

#[test]
fn get_controllers_shows_replicas_leader_and_roles() {
    let s = Server::start();
    let t = s.ctl(&["get", "controllers"]).ok().to_string();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines,
        vec![
            "REPLICA     STATE     GENERATION   MASTER   SLAVE   OTHER",
            "c1 (this)   standby   -            0        1       0",
            "c2          leader    77           1        0       0",
        ]
    );
    let w = s
        .ctl(&["get", "controllers", "-o", "wide"])
        .ok()
        .to_string();
    assert!(
        w.contains("node-1=slave") && w.contains("127.0.0.1:7001"),
        "{w}"
    );
    let v = json(s.ctl(&["get", "controller", "c2", "-o", "json"]).ok());
    assert_eq!(v[0]["state"], "leader");
    assert_eq!(v[0]["switches"]["node-1"], "master");
    let e = s.ctl(&["get", "controllers", "c9"]).fails(1).to_string();
    assert!(e.contains("c9"), "{e}");
}

#[test]
fn get_switches_table_wide_and_json() {
    let s = Server::start();
    let t = s.ctl(&["get", "switches"]).ok().to_string();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines,
        vec![
            "NODE        DPID                 CONNECTED   SYNCED   FLOWS   ERRORS",
            "node-1      0x00000000000000a1   true        true     42      0",
            "node-2      0x0000000000000002   false       false    0       3",
            "<unknown>   0x000000000000dead   true        false    0       0",
        ]
    );
    let w = s.ctl(&["get", "switch", "-o", "wide"]).ok().to_string();
    assert!(
        w.contains("LAST ERROR") && w.contains("OFPBAC_BAD_OUT_PORT") && w.contains("master"),
        "{w}"
    );
    assert!(
        w.contains("AUDIT") && w.contains("off: the switch has no meters"),
        "{w}"
    );
    let v = json(s.ctl(&["get", "sw", "node-2", "-o", "json"]).ok());
    assert_eq!(
        v,
        serde_json::json!([{
            "node": "node-2", "dpid": "0x0000000000000002", "connected": false, "synced": false,
            "flows": 0, "desiredFlows": 40, "errors": 3, "peer": "", "lastError": "OFPBAC_BAD_OUT_PORT",
            "unknown": false, "role": "", "audit": "off: the switch has no meters"
        }])
    );
}

#[test]
fn get_unknown_name_is_not_found() {
    let s = Server::start();
    let r = s.ctl(&["get", "netnamespaces", "green"]);
    let err = r.fails(1);
    assert!(
        err.contains("netnamespace \"green\" not found")
            && err.contains("flowmeshctl get netnamespaces"),
        "{err}"
    );
    assert!(r.stdout.is_empty());
}

#[test]
fn get_clusternetwork_json() {
    let s = Server::start();
    let v = json(s.ctl(&["get", "clusternetwork", "-o", "json"]).ok());
    assert_eq!(v["clusterNetworks"][0]["cidr"], "10.128.0.0/14");
    assert_eq!(v["clusterNetworks"][0]["hostPrefix"], 23);
    assert_eq!(v["mode"], "multitenant");
    let t = s.ctl(&["get", "cn"]).ok().to_string();
    assert!(
        t.contains("10.128.0.0/14") && t.contains("/23") && t.contains("4789"),
        "{t}"
    );
}

#[test]
fn node_add_sends_hex_dpid_and_prints_the_subnet() {
    let s = Server::start();
    let out = s
        .ctl(&[
            "node",
            "add",
            "node-3",
            "--ip",
            "192.168.1.13",
            "--dpid",
            "0x1F",
        ])
        .ok()
        .to_string();
    assert_eq!(
        out,
        "node/node-3 added: subnet 10.128.4.0/23, gateway 10.128.4.1, dpid 0x000000000000001f\n"
    );
    s.ctl(&[
        "node",
        "add",
        "node-4",
        "--ip",
        "192.168.1.14",
        "--dpid",
        "31",
        "-o",
        "json",
    ])
    .ok();
    let got = s.fake.got();
    assert_eq!(
        got,
        vec![
            Got::AddNode(admin::AddNodeRequest {
                name: "node-3".into(),
                node_ip: "192.168.1.13".into(),
                dpid: 31
            }),
            Got::AddNode(admin::AddNodeRequest {
                name: "node-4".into(),
                node_ip: "192.168.1.14".into(),
                dpid: 31
            }),
        ]
    );
}

#[test]
fn usage_errors_exit_2_and_send_nothing() {
    let s = Server::start();
    for args in [
        &["node", "add", "n", "--ip", "1.2.3.4", "--dpid", "0xZZ"][..],
        &["node", "add", "n", "--ip", "1.2.3", "--dpid", "1"],
        &["trace", "--from", "a", "--to", "b/c"],
        &[
            "trace", "--from", "a/b", "--to", "c/d", "--tcp", "80", "--udp", "53",
        ],
        &["dump-flows", "node-1", "--installed", "--diff"],
        &["adm", "pod-network", "join-projects", "a"],
        &["get", "widgets"],
    ] {
        let r = s.ctl(args);
        r.fails(2);
        assert!(r.stderr.contains("error:"), "{args:?}: {}", r.stderr);
    }
    assert_eq!(s.fake.got(), vec![]);
}

#[test]
fn invalid_argument_shows_server_message_and_help_hint() {
    let s = Server::start();
    let err = s
        .ctl(&["node", "add", "n9", "--ip", "1.2.3.4", "--dpid", "0"])
        .fails(1)
        .to_string();
    assert_eq!(
        err,
        "error: add node \"n9\": datapath id 0 is reserved (check the arguments; see: flowmeshctl node add --help)\n"
    );
}

#[test]
fn namespace_create_delete_and_errors() {
    let s = Server::start();
    assert_eq!(
        s.ctl(&["namespace", "create", "green"]).ok(),
        "namespace/green created: netid 13\n"
    );
    let err = s
        .ctl(&["namespace", "create", "green"])
        .fails(1)
        .to_string();
    assert_eq!(
        err,
        "error: create namespace \"green\": namespace \"green\" already exists (it exists already; see it with: flowmeshctl get netnamespaces green)\n"
    );
    assert_eq!(
        s.ctl(&["ns", "delete", "green"]).ok(),
        "namespace/green deleted\n"
    );
    let err = s
        .ctl(&["namespace", "delete", "green"])
        .fails(1)
        .to_string();
    assert!(
        err.starts_with(
            "error: delete namespace \"green\": namespace \"green\" not found (nothing to delete;"
        ),
        "{err}"
    );
    let err = s
        .ctl(&["namespace", "create", "Green"])
        .fails(1)
        .to_string();
    assert!(
        err.contains("must be lower case") && err.contains("namespace create --help"),
        "{err}"
    );
    assert_eq!(
        s.fake.got(),
        vec![
            Got::CreateNamespace("green".into()),
            Got::CreateNamespace("green".into()),
            Got::DeleteNamespace("green".into()),
            Got::DeleteNamespace("green".into()),
            Got::CreateNamespace("Green".into()),
        ]
    );
}

#[test]
fn node_delete_not_found_without_server_message() {
    let s = Server::start();
    assert_eq!(
        s.ctl(&["node", "delete", "node-2"]).ok(),
        "node/node-2 deleted\n"
    );
    let err = s.ctl(&["node", "delete", "node-2"]).fails(1).to_string();
    assert!(
        err.starts_with(
            "error: delete node \"node-2\": node \"node-2\" not found (nothing to delete;"
        ),
        "{err}"
    );
}

#[test]
fn pod_attach_prints_ip_and_sends_fields() {
    let s = Server::start();
    let out = s
        .ctl(&[
            "pod",
            "attach",
            "--node",
            "node-1",
            "--namespace",
            "blue",
            "--name",
            "api",
            "--port",
            "veth77",
            "--ofport",
            "77",
        ])
        .ok()
        .to_string();
    assert_eq!(out, "10.128.0.9\n");
    let v = json(
        s.ctl(&[
            "pod", "attach", "--node", "node-1", "-n", "red", "--name", "cache", "--port",
            "veth78", "-o", "json",
        ])
        .ok(),
    );
    assert_eq!(v["netid"], 12);
    assert_eq!(v["portName"], "veth78");
    assert_eq!(
        s.fake.got(),
        vec![
            Got::Attach(admin::AttachPodRequest {
                node: "node-1".into(),
                namespace: "blue".into(),
                name: "api".into(),
                port_name: "veth77".into(),
                ofport: 77,
                ..Default::default()
            }),
            Got::Attach(admin::AttachPodRequest {
                node: "node-1".into(),
                namespace: "red".into(),
                name: "cache".into(),
                port_name: "veth78".into(),
                ofport: 0,
                ..Default::default()
            }),
        ]
    );
}

#[test]
fn pod_attach_missing_namespace_or_node_names_the_fix() {
    let s = Server::start();
    let err = s
        .ctl(&[
            "pod",
            "attach",
            "--node",
            "node-1",
            "--namespace",
            "foo",
            "--name",
            "a",
            "--port",
            "p",
        ])
        .fails(1)
        .to_string();
    assert_eq!(
        err,
        "error: attach pod \"foo/a\": namespace \"foo\" not found (create it with: flowmeshctl namespace create foo)\n"
    );
    let err = s
        .ctl(&[
            "pod",
            "attach",
            "--node",
            "node-9",
            "--namespace",
            "blue",
            "--name",
            "a",
            "--port",
            "p",
        ])
        .fails(1)
        .to_string();
    assert!(
        err.ends_with("(add it with: flowmeshctl node add node-9 --ip IPV4 --dpid DPID)\n"),
        "{err}"
    );
}

#[test]
fn pod_detach() {
    let s = Server::start();
    assert_eq!(
        s.ctl(&["pod", "detach", "--namespace", "blue", "--name", "web"])
            .ok(),
        "pod/blue/web detached\n"
    );
    let err = s
        .ctl(&["pod", "detach", "-n", "blue", "--name", "web"])
        .fails(1)
        .to_string();
    assert!(
        err.contains("pod blue/web not found") && err.contains("get pods -n blue"),
        "{err}"
    );
    assert_eq!(
        s.fake.got()[0],
        Got::Detach(admin::PodRef {
            namespace: "blue".into(),
            name: "web".into()
        })
    );
}

#[test]
fn adm_pod_network_requests_and_output() {
    let s = Server::start();
    let out = s
        .ctl(&[
            "adm",
            "pod-network",
            "join-projects",
            "--to=blue",
            "red",
            "default",
        ])
        .ok()
        .to_string();
    assert_eq!(out, "NAME      NETID\ndefault   11\nred       11\n");
    let v = json(
        s.ctl(&[
            "adm",
            "pod-network",
            "isolate-projects",
            "red",
            "blue",
            "-o",
            "json",
        ])
        .ok(),
    );
    assert_eq!(v[0], serde_json::json!({"name": "red", "netid": 100}));
    s.ctl(&["adm", "pod-network", "make-projects-global", "default"])
        .ok();
    let err = s
        .ctl(&[
            "adm",
            "pod-network",
            "join-projects",
            "--to",
            "blue",
            "nosuch",
        ])
        .fails(1)
        .to_string();
    assert!(
        err.ends_with("namespace \"nosuch\" not found (create it with: flowmeshctl namespace create nosuch)\n"),
        "{err}"
    );
    assert_eq!(
        s.fake.got(),
        vec![
            Got::Join(admin::JoinProjectsRequest {
                to: "blue".into(),
                namespaces: vec!["red".into(), "default".into()],
                ..Default::default()
            }),
            Got::Isolate(vec!["red".into(), "blue".into()]),
            Got::Global(vec!["default".into()]),
            Got::Join(admin::JoinProjectsRequest {
                to: "blue".into(),
                namespaces: vec!["nosuch".into()],
                ..Default::default()
            }),
        ]
    );
}

const MANIFEST: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: green
---
apiVersion: v1
kind: Pod
metadata:
  namespace: green
  name: web
  annotations:
    flowmesh.io/ovs-port: veth-g
spec:
  nodeName: node-1
";

#[test]
fn apply_file_and_stdin_send_the_text() {
    let s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("objects.yaml");
    std::fs::write(&path, MANIFEST).expect("write manifest");
    let p = path.to_str().expect("utf-8 path");
    assert_eq!(
        s.ctl(&["apply", "-f", p]).ok(),
        "namespace/green created\npod/green/web created\n"
    );
    assert_eq!(
        s.ctl_stdin(&["apply", "-f", "-"], MANIFEST).ok(),
        "namespace/green created\npod/green/web created\n"
    );
    assert_eq!(
        s.ctl(&["apply", "-f", p, "--dry-run"]).ok(),
        "namespace/green (dry run)\npod/green/web (dry run)\n"
    );
    assert_eq!(
        s.fake.got(),
        vec![Got::Apply(MANIFEST.into()), Got::Apply(MANIFEST.into())]
    );
}

#[test]
fn apply_errors() {
    let s = Server::start();
    // Checked locally: nothing is sent.
    let bad = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n";
    let err = s.ctl_stdin(&["apply", "-f", "-"], bad).fails(1).to_string();
    assert!(
        err.starts_with("error: apply <stdin>: document 2 (Deployment \"web\"): unsupported kind"),
        "{err}"
    );
    let err = s
        .ctl(&["apply", "-f", "/nonexistent/flowmesh.yaml"])
        .fails(1)
        .to_string();
    assert!(
        err.starts_with("error: apply /nonexistent/flowmesh.yaml: cannot read the file:"),
        "{err}"
    );
    assert_eq!(s.fake.got(), vec![]);
    // Refused by the server.
    let taken =
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nnetname: taken\nnetid: 5\n";
    let err = s
        .ctl_stdin(&["apply", "-f", "-"], taken)
        .fails(1)
        .to_string();
    assert_eq!(
        err,
        "error: apply <stdin>: document 1 (Namespace \"taken\"): netid 5 is in use by namespace \"red\" (fix the manifest and apply it again)\n"
    );
}

#[test]
fn dump_flows_views() {
    let s = Server::start();
    assert_eq!(
        s.ctl(&["dump-flows", "node-1"]).ok(),
        " cookie=0x0, table=0, priority=100,ip actions=goto_table:20\n cookie=0x0, table=0, priority=0 actions=drop\n"
    );
    assert_eq!(
        s.ctl(&["dump-flows", "node-1", "--installed"])
            .ok()
            .lines()
            .count(),
        1
    );
    assert!(s
        .ctl(&["dump-flows", "node-1", "--diff"])
        .ok()
        .starts_with("+ cookie"));
    assert_eq!(
        s.fake.got(),
        vec![
            Got::DumpFlows("node-1".into(), FlowView::Desired as i32),
            Got::DumpFlows("node-1".into(), FlowView::Installed as i32),
            Got::DumpFlows("node-1".into(), FlowView::Diff as i32),
        ]
    );
    // A server-side Unavailable is not "cannot reach the controller".
    let err = s
        .ctl(&["dump-flows", "node-2", "--installed"])
        .fails(1)
        .to_string();
    assert!(
        err.starts_with(
            "error: dump flows of node \"node-2\": the switch of node-2 is not connected ("
        ) && err.contains("flowmeshctl get switches")
            && !err.contains("cannot reach"),
        "{err}"
    );
    let err = s.ctl(&["dump-flows", "node-9"]).fails(1).to_string();
    assert!(
        err.contains("node \"node-9\" not found (add it with:"),
        "{err}"
    );
}

#[test]
fn trace_verdict_first_and_deciding_step() {
    let s = Server::start();
    let out = s
        .ctl(&[
            "trace", "--from", "blue/web", "--to", "red/db", "--tcp", "5432",
        ])
        .ok()
        .to_string();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "verdict: BLOCKED: dropped on node-2 (netid 11 may not reach netid 12)"
    );
    let header = lines
        .iter()
        .position(|l| l.contains("PRIORITY"))
        .expect("header");
    assert!(lines[header].contains("NODE") && lines[header].contains("COOKIE"));
    let steps = &lines[header + 1..header + 4];
    assert!(steps[0].starts_with("  ") && steps[0].contains("node-1"));
    assert!(steps[1].contains(" 0x100000002 ") && steps[1].ends_with("# from VXLAN"));
    assert!(steps[2].starts_with("=>") && steps[2].contains("priority=0 actions=drop"));
    assert!(out.contains("decided by table 80 on node-2"));
    s.ctl(&[
        "trace",
        "--from",
        "blue/web",
        "--to",
        "172.30.0.10",
        "--udp",
        "53",
    ])
    .ok();
    s.ctl(&["trace", "--from", "blue/web", "--to", "red/db"])
        .ok();
    let traces: Vec<admin::TraceRequest> = s
        .fake
        .got()
        .into_iter()
        .filter_map(|g| match g {
            Got::Trace(t) => Some(t),
            _ => None,
        })
        .collect();
    let summary: Vec<(&str, &str, &str, u32)> = traces
        .iter()
        .map(|t| {
            (
                t.from.as_str(),
                t.to.as_str(),
                t.protocol.as_str(),
                t.dst_port,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("blue/web", "red/db", "tcp", 5432),
            ("blue/web", "172.30.0.10", "udp", 53),
            ("blue/web", "red/db", "icmp", 0),
        ]
    );
    let v = json(
        s.ctl(&[
            "trace", "--from", "blue/web", "--to", "red/db", "-o", "json",
        ])
        .ok(),
    );
    assert_eq!(v["allowed"], false);
    assert_eq!(v["steps"][2]["deciding"], true);
    assert_eq!(v["steps"][2]["cookie"], "0x50");
    let err = s
        .ctl(&["trace", "--from", "nope/x", "--to", "red/db"])
        .fails(1)
        .to_string();
    assert!(
        err.contains("pod nope/x not found (list pods with: flowmeshctl get pods)"),
        "{err}"
    );
}

#[test]
fn events_print_one_line_each() {
    let s = Server::start();
    let out = s.ctl(&["get", "events"]).ok().to_string();
    assert_eq!(
        out,
        "2024-02-29T12:34:56.789Z  NamespaceCreated  namespace/blue  netid 11\n2024-02-29T12:34:57.000Z  PodAttached  pod/blue/web  10.128.0.5 on node-1\n"
    );
    // The fake's stream ends, so --watch ends too.
    let out = s.ctl(&["events", "--watch", "-o", "json"]).ok().to_string();
    let lines: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["object"], "pod/blue/web");
    assert_eq!(lines[1]["timeUnixMs"], 1_709_210_097_000_i64);
}

#[test]
fn timeout_names_the_operation() {
    let s = Server::start();
    let started = std::time::Instant::now();
    let err = s
        .ctl(&[
            "--timeout",
            "300ms",
            "pod",
            "attach",
            "--node",
            "node-1",
            "-n",
            "blue",
            "--name",
            "slow",
            "--port",
            "p",
        ])
        .fails(1)
        .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "did not time out"
    );
    assert!(
        err.starts_with(
            "error: attach pod \"blue/slow\": no answer from the controller within 300ms"
        ),
        "{err}"
    );
}

#[test]
fn unreachable_server() {
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let r = ctl(&["--server", &url, "get", "pods"], None);
    let err = r.fails(1);
    assert!(
        err.starts_with(&format!(
            "error: cannot reach flowmesh-controller at {url}: "
        )),
        "{err}"
    );
    assert!(
        err.contains("(is it running? set --server or FLOWMESH_SERVER)"),
        "{err}"
    );
    // FLOWMESH_SERVER is honoured, and host:port gets http://.
    let out = Command::new(env!("CARGO_BIN_EXE_flowmeshctl"))
        .args(["namespace", "create", "x"])
        .env("FLOWMESH_SERVER", format!("127.0.0.1:{port}"))
        .output()
        .expect("run flowmeshctl");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&url));
}

#[test]
fn flowmesh_server_env_reaches_the_fake() {
    let s = Server::start();
    let out = Command::new(env!("CARGO_BIN_EXE_flowmeshctl"))
        .args(["get", "netns", "red", "-o", "json"])
        .env("FLOWMESH_SERVER", &s.url)
        .output()
        .expect("run flowmeshctl");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json(&String::from_utf8_lossy(&out.stdout)),
        serde_json::json!([{"name": "red", "netid": 12}])
    );
}
