//! Egress IPs through the real controller, the real flowmeshctl and real Open vSwitch bridges:
//! `patch hostsubnet` / `patch netnamespace` (manual, then automatic), what `get` shows,
//! refused requests that change nothing, `apply -f` with the `network.openshift.io/v1`
//! fields, failover when an egress node's switch goes away (measured, and the IP stays where
//! it moved when the node comes back), and a controller restart that sends no flow-mod.

mod support;

use std::time::{Duration, Instant};
use support::{ctl, sandbox, wait_for, wait_synced, Controller};

const NODES: [(&str, &str, u64); 3] = [
    ("node-a", "192.168.1.11", 0xa1),
    ("node-b", "192.168.1.12", 0xb2),
    ("node-c", "192.168.1.13", 0xc3),
];

fn group_line(sbx: &flowmesh_tests::OvsSandbox, node: &str, netid: u32) -> Option<String> {
    sbx.dump_groups(node)
        .expect("dump-groups")
        .into_iter()
        .find(|g| g.starts_with(&format!("group_id={netid},")))
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

async fn mods_sent(ctl: &Controller) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(ctl.metrics)
        .await
        .expect("connect metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).await.expect("read");
    text.lines()
        .find_map(|l| l.strip_prefix("flowmesh_flow_mods_sent_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("flowmesh_flow_mods_sent_total")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_ips_through_the_cli_with_failover_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Controller::start(&dir.path().join("data"), &["--echo-interval", "0.25"]);
    let g = c.grpc;
    let sbx = sandbox(
        &c,
        &[
            ("node-a", 0xa1, &[]),
            ("node-b", 0xb2, &[]),
            ("node-c", 0xc3, &[]),
        ],
    );
    for (n, ip, dpid) in NODES {
        ctl(
            g,
            &[
                "node",
                "add",
                n,
                "--ip",
                ip,
                "--dpid",
                &format!("{dpid:#x}"),
            ],
        )
        .ok();
    }
    ctl(g, &["namespace", "create", "shop"]).ok();
    let netid: u32 = ctl(g, &["get", "netnamespaces", "shop", "-o", "json"])
        .ok()
        .parse::<serde_json::Value>()
        .ok()
        .and_then(|v| v[0]["netid"].as_u64())
        .expect("netid") as u32;
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &["node-a", "node-b", "node-c"]).await;

    // Manual: node-b hosts 192.168.1.100, shop uses it.
    assert_eq!(
        ctl(
            g,
            &[
                "patch",
                "hostsubnet",
                "node-b",
                "--egress-ips=192.168.1.100"
            ]
        )
        .ok(),
        "hostsubnet/node-b patched\n"
    );
    assert_eq!(
        ctl(
            g,
            &[
                "patch",
                "netnamespace",
                "shop",
                "--egress-ips=192.168.1.100"
            ]
        )
        .ok(),
        "netnamespace/shop patched\n"
    );
    let a = group_line(&sbx, "node-a", netid).expect("node-a has shop's group");
    assert!(
        a.contains("type=select") && a.contains("192.168.1.12"),
        "{a}"
    );
    let b = group_line(&sbx, "node-b", netid).expect("node-b has shop's group");
    assert!(b.contains("pkt_mark") && b.contains("output:2"), "{b}");
    let out = ctl(g, &["get", "netnamespaces"]).ok().to_string();
    assert!(
        out.contains("EGRESS IPS") && out.contains("192.168.1.100@node-b"),
        "{out}"
    );
    let out = ctl(g, &["get", "hostsubnets", "node-b"]).ok().to_string();
    assert!(
        out.contains("EGRESS IPS") && out.contains("192.168.1.100"),
        "{out}"
    );
    // Nodes without egress settings print as before.
    let out = ctl(g, &["get", "hostsubnets", "node-a"]).ok().to_string();
    assert!(!out.contains("EGRESS"), "{out}");

    // Refusals name the problem and change nothing.
    for (args, want) in [
        (
            vec!["patch", "netnamespace", "shop", "--egress-ips=10.128.0.5"],
            "cluster network",
        ),
        (
            vec!["patch", "netnamespace", "shop", "--egress-ips=192.168.1.11"],
            "node node-a",
        ),
        (
            vec![
                "patch",
                "hostsubnet",
                "node-c",
                "--egress-ips=192.168.1.100",
            ],
            "hostsubnet/node-b",
        ),
        (
            vec!["patch", "netnamespace", "shop", "--egress-ips=1.2.3"],
            "not an IPv4 address",
        ),
        (
            vec![
                "patch",
                "netnamespace",
                "nosuch",
                "--egress-ips=192.168.1.7",
            ],
            "not found",
        ),
        (vec!["patch", "hostsubnet", "node-c"], "--egress-cidrs"),
    ] {
        let e = ctl(g, &args).fails().to_string();
        assert!(e.contains(want), "{args:?}: {e}");
    }
    assert!(group_line(&sbx, "node-a", netid).is_some_and(|l| l.contains("192.168.1.12")));

    // Automatic: node-b and node-c may host from 192.168.1.0/24; node-b (fewest, then name).
    ctl(
        g,
        &[
            "patch",
            "hostsubnet",
            "node-b",
            "--egress-ips=",
            "--egress-cidrs=192.168.1.0/24",
        ],
    )
    .ok();
    ctl(
        g,
        &[
            "patch",
            "hostsubnet",
            "node-c",
            "--egress-cidrs=192.168.1.0/24",
        ],
    )
    .ok();
    let v = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok());
    let st = &v[0]["egressIpStatus"][0];
    assert_eq!(
        (
            st["node"].as_str(),
            st["automatic"].as_bool(),
            st["usable"].as_bool()
        ),
        (Some("node-b"), Some(true), Some(true)),
        "{v}"
    );

    // Failover: node-b's switch goes away; the IP moves to node-c on every switch.
    let t0 = Instant::now();
    sbx.vsctl(&["del-controller", "node-b"])
        .expect("del-controller");
    let deadline = t0 + Duration::from_secs(10);
    loop {
        if group_line(&sbx, "node-a", netid).is_some_and(|l| l.contains("192.168.1.13")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no failover: {:?}",
            group_line(&sbx, "node-a", netid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let failover = t0.elapsed();
    println!(
        "failover after the switch disconnected: {} ms",
        failover.as_millis()
    );
    assert!(failover < Duration::from_secs(2), "{failover:?}");
    let v = json(ctl(g, &["get", "hostsubnets", "node-b", "-o", "json"]).ok());
    assert_eq!(v[0]["offline"].as_bool(), Some(true), "{v}");
    let c_groups = group_line(&sbx, "node-c", netid).expect("node-c group");
    assert!(
        c_groups.contains("pkt_mark"),
        "node-c now SNATs: {c_groups}"
    );
    // node-b back: the IP stays on node-c (a healthy node keeps its IPs).
    sbx.vsctl(&["set-controller", "node-b", &c.target()])
        .expect("set-controller");
    wait_synced(&mut admin, &["node-b"]).await;
    let v = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok());
    assert_eq!(
        v[0]["egressIpStatus"][0]["node"].as_str(),
        Some("node-c"),
        "{v}"
    );
    let b = group_line(&sbx, "node-b", netid).expect("node-b group");
    assert!(
        b.contains("192.168.1.13"),
        "node-b tunnels to node-c now: {b}"
    );

    // Ten more failovers, alternating between node-b and node-c: the time from the switch's
    // disconnect to node-a's bridge holding the group that points at the other node.
    let mut times: Vec<u128> = Vec::new();
    for _ in 0..10 {
        let v = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok());
        let (from, to, to_ip) = match v[0]["egressIpStatus"][0]["node"].as_str() {
            Some("node-b") => ("node-b", "node-c", "192.168.1.13"),
            Some("node-c") => ("node-c", "node-b", "192.168.1.12"),
            other => panic!("shop's IP on {other:?}"),
        };
        let t0 = Instant::now();
        sbx.vsctl(&["del-controller", from])
            .expect("del-controller");
        loop {
            if group_line(&sbx, "node-a", netid).is_some_and(|l| l.contains(to_ip)) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no failover to {to}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        times.push(t0.elapsed().as_millis());
        sbx.vsctl(&["set-controller", from, &c.target()])
            .expect("set-controller");
        wait_synced(&mut admin, &[from]).await;
    }
    times.sort();
    println!(
        "controller failover (switch disconnect -> other bridges reprogrammed): kills={} failover_min_ms={} failover_p50_ms={} failover_max_ms={}",
        times.len(),
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert!(times.iter().all(|t| *t < 2000), "{times:?}");

    // apply -f: a second namespace with an egress IP from the ranges.
    let manifest = dir.path().join("egress.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nmetadata: {name: node-a, annotations: {flowmesh.io/datapath-id: '0xa1'}}\nhost: node-a\nhostIP: 192.168.1.11\negressCIDRs: [192.168.1.0/24]\n---\napiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: db}\nnetname: db\negressIPs: [192.168.1.101]\n",
    )
    .expect("manifest");
    let out = ctl(g, &["apply", "-f", manifest.to_str().expect("path")])
        .ok()
        .to_string();
    assert!(
        out.contains("namespace/db created") && out.contains("node/node-a configured"),
        "{out}"
    );
    let v = json(ctl(g, &["get", "netnamespaces", "db", "-o", "json"]).ok());
    assert_eq!(
        v[0]["egressIpStatus"][0]["node"].as_str(),
        Some("node-a"),
        "db's IP goes to the node with no egress IP yet: {v}"
    );
    let again = ctl(g, &["apply", "-f", manifest.to_str().expect("path")])
        .ok()
        .to_string();
    assert!(
        again.contains("namespace/db unchanged") && again.contains("node/node-a unchanged"),
        "{again}"
    );

    // Restart with unchanged state: no flow-mod, same groups, same placements.
    let shop_node = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok())[0]
        ["egressIpStatus"][0]["node"]
        .clone();
    let before: Vec<Vec<String>> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|n| sbx.dump_groups(n).expect("groups"))
        .collect();
    c.kill9();
    c.spawn();
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &["node-a", "node-b", "node-c"]).await;
    wait_for("a settled audit", Duration::from_secs(2), async || true).await;
    assert_eq!(
        mods_sent(&c).await,
        0,
        "a restart with unchanged state sends nothing"
    );
    let after: Vec<Vec<String>> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|n| sbx.dump_groups(n).expect("groups"))
        .collect();
    assert_eq!(before, after);
    let v = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok());
    assert_eq!(v[0]["egressIpStatus"][0]["node"], shop_node, "{v}");
}

/// The shim's `WatchEgress` stream is a liveness signal of its own: a node whose shim stops
/// watching (its switch still connected) loses its automatic egress IP after `--shim-grace`,
/// and is usable again once its shim watches again. Nodes whose shim never watched are
/// judged by their switch alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_that_stops_watching_loses_its_egress_ips() {
    use proto::node::{node_api_client::NodeApiClient, WatchEgressRequest};
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Controller::start(&dir.path().join("data"), &["--shim-grace", "1"]);
    let g = c.grpc;
    let sbx = sandbox(
        &c,
        &[
            ("node-a", 0xa1, &[]),
            ("node-b", 0xb2, &[]),
            ("node-c", 0xc3, &[]),
        ],
    );
    for (n, ip, dpid) in NODES {
        ctl(
            g,
            &[
                "node",
                "add",
                n,
                "--ip",
                ip,
                "--dpid",
                &format!("{dpid:#x}"),
            ],
        )
        .ok();
    }
    let mut admin = c.admin().await;
    wait_synced(&mut admin, &["node-a", "node-b", "node-c"]).await;
    ctl(g, &["namespace", "create", "shop"]).ok();
    for n in ["node-b", "node-c"] {
        ctl(
            g,
            &["patch", "hostsubnet", n, "--egress-cidrs=192.168.1.0/24"],
        )
        .ok();
    }
    ctl(
        g,
        &[
            "patch",
            "netnamespace",
            "shop",
            "--egress-ips=192.168.1.100",
        ],
    )
    .ok();
    let holder = || {
        let v = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok());
        v[0]["egressIpStatus"][0]["node"]
            .as_str()
            .map(str::to_owned)
    };
    assert_eq!(holder().as_deref(), Some("node-b"));

    // node-b's shim watches, then goes away; its switch stays connected.
    let mut node_api = NodeApiClient::connect(format!("http://{g}"))
        .await
        .expect("node API");
    let mut stream = node_api
        .watch_egress(WatchEgressRequest {
            node: "node-b".into(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = stream.message().await.expect("first list").expect("a list");
    assert_eq!(first.assignments.len(), 1, "{first:?}");
    assert_eq!(first.assignments[0].ip, "192.168.1.100");
    // While it watches, nothing moves (longer than the grace).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(holder().as_deref(), Some("node-b"));
    drop(stream);
    drop(node_api);
    let t0 = Instant::now();
    wait_for(
        "the IP moves to node-c",
        Duration::from_secs(10),
        async || holder().as_deref() == Some("node-c"),
    )
    .await;
    println!(
        "moved {} ms after the shim's stream closed",
        t0.elapsed().as_millis()
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    let v = json(ctl(g, &["get", "hostsubnets", "node-b", "-o", "json"]).ok());
    assert_eq!(v[0]["offline"].as_bool(), Some(true), "{v}");
    let sw = admin
        .list_switches(proto::admin::Empty {})
        .await
        .expect("switches")
        .into_inner()
        .items;
    assert!(
        sw.iter().any(|s| s.node == "node-b" && s.connected),
        "node-b's switch is still connected: {sw:?}"
    );
    // Every switch follows: node-a tunnels shop's outside traffic to node-c.
    let netid = json(ctl(g, &["get", "netnamespaces", "shop", "-o", "json"]).ok())[0]["netid"]
        .as_u64()
        .expect("netid") as u32;
    wait_for(
        "node-a's group points at node-c",
        Duration::from_secs(5),
        async || group_line(&sbx, "node-a", netid).is_some_and(|l| l.contains("192.168.1.13")),
    )
    .await;

    // The shim watches again: node-b is online (the IP stays on node-c, a healthy node).
    let mut node_api = NodeApiClient::connect(format!("http://{g}"))
        .await
        .expect("node API");
    let mut stream = node_api
        .watch_egress(WatchEgressRequest {
            node: "node-b".into(),
        })
        .await
        .expect("watch")
        .into_inner();
    let _ = stream.message().await.expect("list");
    wait_for("node-b online again", Duration::from_secs(5), async || {
        let v = json(ctl(g, &["get", "hostsubnets", "node-b", "-o", "json"]).ok());
        v[0]["offline"].as_bool() != Some(true)
    })
    .await;
    assert_eq!(holder().as_deref(), Some("node-c"));
}
