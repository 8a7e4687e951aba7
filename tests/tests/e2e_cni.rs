//! End to end with real packets: a `NetnsLab` of 3 nodes (userspace datapath), the real
//! `flowmesh-controller` in the lab's controller namespace on the underlay (multitenant mode),
//! a `flowmesh-shim` per node registered over the node API, and pods created by executing
//! `flowmesh-cni` exactly as a container runtime does. Reachability is checked with ping and
//! TCP; namespaces are changed with `flowmeshctl` run inside the controller namespace.
//!
//! Run (root, Open vSwitch 3.1; about 20 s once the binaries are built):
//! `cargo test -p flowmesh-tests --test e2e_cni -- --nocapture` (prints the CNI ADD latency of
//! 20 pods and the AttachPod share of it).
//!
//! The main test leaves OVS's tunnel neighbour table empty, as on a real underlay: the first
//! packet towards a node not yet resolved is lost while OVS ARPs for it, so a probe that must
//! succeed counts at least one of three echoes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use flowmesh_tests::cni::{
    add_pod_via_cni, invoke_cni, log_tail, start_shim, CniCall, CniOutcome, CniPod, NodeShim,
};
use flowmesh_tests::e2e::{tcp_probe, ControllerOptions, LabController, TcpServer};
use flowmesh_tests::tcp::tcp_transfer;
use flowmesh_tests::NetnsLab;
use serde_json::Value;

/// TCP port every pod serves its name on.
const POD_PORT: u16 = 8080;

/// The lab, its controller, one shim per node, and the pods' TCP servers.
struct Cluster {
    servers: std::sync::Mutex<Vec<TcpServer>>,
    lab: NetnsLab,
    ctl: LabController,
    shims: Vec<NodeShim>,
}

impl Cluster {
    /// `seed_neighbors`: pre-seed OVS's tunnel neighbour tables (else OVS ARPs for each
    /// remote VTEP itself, as on a real underlay, and the first packet to it may be lost).
    fn start(opts: &ControllerOptions, seed_neighbors: bool) -> Cluster {
        let lab = NetnsLab::builder()
            .nodes(3)
            .tun0(false)
            .seed_neighbors(seed_neighbors)
            .start()
            .expect("lab");
        let ctl = LabController::start(&lab, opts).expect("controller");
        // Debug logs: they carry the shim's per-step timings of each ADD.
        let mut so = ctl.shim_options();
        so.env = vec![("RUST_LOG".into(), "debug".into())];
        let shims = (1..=3)
            .map(|i| start_shim(&lab, i, &so).expect("shim"))
            .collect();
        let c = Cluster {
            servers: std::sync::Mutex::new(Vec::new()),
            lab,
            ctl,
            shims,
        };
        c.ctl
            .wait_synced(
                &c.lab,
                &["node1", "node2", "node3"],
                Duration::from_secs(30),
            )
            .unwrap_or_else(|e| c.fail(&format!("switches: {e}")));
        c
    }

    fn shim(&self, node: usize) -> &NodeShim {
        &self.shims[node - 1]
    }

    fn ctl(&self, args: &[&str]) -> String {
        self.ctl
            .ctl(&self.lab, args)
            .unwrap_or_else(|e| self.fail(&format!("flowmeshctl {args:?}: {e}")))
    }

    fn pods(&self) -> Vec<Value> {
        self.ctl
            .ctl_json(&self.lab, &["get", "pods"])
            .unwrap_or_else(|e| self.fail(&format!("get pods: {e}")))
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn pod_names(&self) -> Vec<String> {
        self.pods()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap_or("?"),
                    p["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    fn add_pod(&self, node: usize, namespace: &str, name: &str) -> CniPod {
        let p = add_pod_via_cni(&self.lab, node, self.shim(node), namespace, name)
            .unwrap_or_else(|e| self.fail(&format!("ADD {namespace}/{name} on node {node}: {e}")));
        let srv = TcpServer::start(&p.ns, p.ip, POD_PORT, name)
            .unwrap_or_else(|e| self.fail(&format!("TCP server in {name}: {e}")));
        self.servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(srv);
        p
    }

    /// Panics with the controller's and shims' log tails.
    fn fail(&self, what: &str) -> ! {
        let mut msg = format!(
            "{what}\n---- controller log ----\n{}",
            self.ctl.log_tail(40)
        );
        for s in &self.shims {
            msg.push_str(&format!(
                "\n---- shim node{} log ----\n{}",
                s.node,
                log_tail(&s.log, 15)
            ));
        }
        panic!("{msg}");
    }

    /// Node links and br0 ports of `node`: what a failed ADD must leave unchanged.
    fn wiring(&self, node: usize) -> (Vec<String>, Vec<String>) {
        let n = self.lab.node(node).expect("node");
        let text = self
            .lab
            .run_in(n.ns(), "ip", &["-o", "link", "show"])
            .expect("ip link");
        let mut links: Vec<String> = text
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_owned())
            .collect();
        links.sort();
        let mut ports: Vec<String> = n
            .ovs()
            .vsctl(["list-ports", self.lab.bridge()])
            .expect("list-ports")
            .lines()
            .map(str::to_owned)
            .collect();
        ports.sort();
        (links, ports)
    }
}

/// One expectation: `from` reaches (or not) `to`.
struct Expect<'a> {
    from: &'a CniPod,
    from_name: &'a str,
    to: Ipv4Addr,
    to_name: &'a str,
    reach: bool,
}

/// Pings (3 tries; at least one reply counts) and TCP (connect + answer) for every
/// expectation, all at once; panics listing every mismatch.
fn check(c: &Cluster, what: &str, cases: &[Expect<'_>]) {
    let t0 = Instant::now();
    let results: Vec<(bool, bool, String)> = std::thread::scope(|s| {
        let hs: Vec<_> = cases
            .iter()
            .map(|e| {
                let lab = &c.lab;
                s.spawn(move || {
                    let count = if e.reach { 3 } else { 2 };
                    let ping = lab.ping(&e.from.ns, IpAddr::V4(e.to), count).expect("ping");
                    let tcp = tcp_probe(
                        &e.from.ns,
                        SocketAddrV4::new(e.to, POD_PORT),
                        b"hello",
                        Duration::from_millis(if e.reach { 3000 } else { 1000 }),
                    )
                    .expect("tcp probe");
                    let tcp_ok = tcp
                        .as_ref()
                        .is_some_and(|b| String::from_utf8_lossy(b).starts_with(e.to_name));
                    (ping.received > 0, tcp_ok, ping.output)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    });
    let mut bad = Vec::new();
    for (e, (ping, tcp, out)) in cases.iter().zip(&results) {
        if *ping != e.reach || *tcp != e.reach {
            bad.push(format!(
                "{} -> {} ({}): expected {}, ping {}, tcp {}\n{out}",
                e.from_name,
                e.to_name,
                e.to,
                if e.reach { "reach" } else { "blocked" },
                ping,
                tcp
            ));
        }
    }
    println!(
        "{what}: {} probes in {:.1} s",
        cases.len(),
        t0.elapsed().as_secs_f64()
    );
    if !bad.is_empty() {
        c.fail(&format!("{what}:\n{}", bad.join("\n")));
    }
}

/// All ordered pairs of `pods` with the expectation `reach(a, b)`.
fn matrix<'a>(
    pods: &'a [(&'a str, &'a CniPod)],
    reach: impl Fn(&str, &str) -> bool,
) -> Vec<Expect<'a>> {
    let mut v = Vec::new();
    for (an, a) in pods {
        for (bn, b) in pods {
            if an != bn {
                v.push(Expect {
                    from: a,
                    from_name: an,
                    to: b.ip,
                    to_name: bn,
                    reach: reach(an, bn),
                });
            }
        }
    }
    v
}

/// The pod's Kubernetes namespace from its test name (`red-a` -> `red`).
fn ns_of(name: &str) -> &str {
    name.split('-').next().unwrap_or(name)
}

#[test]
fn e2e_multitenant_isolation_gateway_nat_and_del() {
    let t_start = Instant::now();
    let c = Cluster::start(&ControllerOptions::multitenant(), false);
    println!("cluster up in {:.1} s", t_start.elapsed().as_secs_f64());
    // Each shim registered its node with the node's underlay address and datapath id.
    let hs = c
        .ctl
        .ctl_json(&c.lab, &["get", "hostsubnets"])
        .unwrap_or_else(|e| c.fail(&format!("get hostsubnets: {e}")));
    for i in 1..=3usize {
        let ip = c.lab.underlay_ip(i).to_string();
        let dpid = format!("0x{i:016x}");
        assert!(
            hs.as_array()
                .is_some_and(|a| a.iter().any(|h| h["node"] == format!("node{i}")
                    && h["nodeIP"] == ip.as_str()
                    && h["dpid"] == dpid.as_str())),
            "node{i} ({ip}, {dpid}) not registered: {hs}"
        );
    }
    for ns in ["red", "blue", "shared"] {
        c.ctl(&["namespace", "create", ns]);
    }

    // red on nodes 1, 1, 2; blue on 2, 3; shared on 3.
    let red_a = c.add_pod(1, "red", "red-a");
    let red_b = c.add_pod(1, "red", "red-b");
    let red_c = c.add_pod(2, "red", "red-c");
    let blue_a = c.add_pod(2, "blue", "blue-a");
    let blue_b = c.add_pod(3, "blue", "blue-b");
    let shared_a = c.add_pod(3, "shared", "shared-a");
    let pods = [
        ("red-a", &red_a),
        ("red-b", &red_b),
        ("red-c", &red_c),
        ("blue-a", &blue_a),
        ("blue-b", &blue_b),
        ("shared-a", &shared_a),
    ];
    let listed = c.pod_names();
    for (n, _) in &pods {
        assert!(
            listed.contains(&format!("{}/{n}", ns_of(n))),
            "{n} not in get pods: {listed:?}"
        );
    }

    // Same namespace reaches (same node and across nodes); different namespaces do not.
    check(
        &c,
        "isolated namespaces",
        &matrix(&pods, |a, b| ns_of(a) == ns_of(b)),
    );

    // The controller's simulator agrees with the packets.
    for (from, to, allowed) in [
        ("red/red-a", "red/red-c", true),
        ("red/red-a", "blue/blue-a", false),
        ("blue/blue-a", "red/red-c", false),
    ] {
        let t = c
            .ctl
            .ctl_json(
                &c.lab,
                &["trace", "--from", from, "--to", to, "--tcp", "8080"],
            )
            .unwrap_or_else(|e| c.fail(&format!("trace {from} -> {to}: {e}")));
        assert_eq!(t["allowed"], allowed, "trace {from} -> {to}: {t}");
    }

    // Full-size packets cross the tunnel: a 1450-byte IP packet with DF set (the overlay MTU
    // plus VXLAN overhead fits the 1500-byte underlay), and a bulk TCP transfer.
    let big = c
        .lab
        .exec_in(
            &red_a.ns,
            "ping",
            &[
                "-n",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "1",
                "-M",
                "do",
                "-s",
                "1422",
                &red_c.ip.to_string(),
            ],
        )
        .expect("ping");
    let big_out = String::from_utf8_lossy(&big.stdout);
    assert!(
        big.status.success() && !big_out.contains(" 0 received"),
        "1450-byte DF ping red-a -> red-c:\n{big_out}{}",
        String::from_utf8_lossy(&big.stderr)
    );
    let bulk = tcp_transfer(&red_a.ns, &red_c.ns, IpAddr::V4(red_c.ip), 9100, 4 << 20)
        .unwrap_or_else(|e| c.fail(&format!("TCP bulk red-a -> red-c: {e}")));
    println!(
        "TCP red-a -> red-c across nodes: {} bytes, {:.0} Mbit/s",
        bulk.bytes,
        bulk.mbit_per_s()
    );

    // A global namespace reaches and is reached by all.
    c.ctl(&["adm", "pod-network", "make-projects-global", "shared"]);
    check(
        &c,
        "shared made global",
        &matrix(&pods, |a, b| {
            ns_of(a) == ns_of(b) || ns_of(a) == "shared" || ns_of(b) == "shared"
        }),
    );

    // join-projects: blue takes red's NETID; isolate-projects separates them again.
    c.ctl(&["adm", "pod-network", "join-projects", "--to=red", "blue"]);
    check(&c, "blue joined to red", &matrix(&pods, |_, _| true));
    c.ctl(&["adm", "pod-network", "isolate-projects", "blue"]);
    check(
        &c,
        "blue isolated again",
        &matrix(&pods, |a, b| {
            ns_of(a) == ns_of(b) || ns_of(a) == "shared" || ns_of(b) == "shared"
        }),
    );

    // Each pod reaches its node's gateway (tun0), by ping and by TCP to a listener on the host
    // that sees the pod's own address (no NAT inside the cluster network).
    for (name, p) in [("red-a", &red_a), ("red-c", &red_c), ("blue-b", &blue_b)] {
        let gw: Ipv4Addr = p.result["ips"][0]["gateway"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .expect("gateway in the result");
        let node_ns = c.lab.node(p.node).expect("node").ns().to_owned();
        let ping = c.lab.ping(&p.ns, IpAddr::V4(gw), 3).expect("ping gw");
        if ping.received == 0 {
            c.fail(&format!(
                "{name} cannot ping its gateway {gw}:\n{}",
                ping.output
            ));
        }
        let srv = TcpServer::start(&node_ns, gw, 9000, "host").expect("host server");
        let got = tcp_probe(&p.ns, srv.addr, b"hi", Duration::from_secs(3)).expect("tcp gw");
        let text = got.map(|b| String::from_utf8_lossy(&b).into_owned());
        if !text
            .as_deref()
            .is_some_and(|t| t.starts_with(&format!("host peer={}:", p.ip)))
        {
            c.fail(&format!("TCP {name} -> gateway {gw}: {text:?}"));
        }
    }

    // The node's host reaches its local pods and, over the tunnel, remote pods (NETID 0); a
    // pod reaches its node's own (underlay) address.
    for (node, name, p) in [
        (1, "red-a", &red_a),
        (1, "red-c", &red_c),
        (3, "blue-a", &blue_a),
    ] {
        let node_ns = c.lab.node(node).expect("node").ns().to_owned();
        let ping = c.lab.ping(&node_ns, IpAddr::V4(p.ip), 3).expect("ping");
        if ping.received == 0 {
            c.fail(&format!(
                "node{node} host cannot ping {name}:\n{}",
                ping.output
            ));
        }
    }
    let ping = c
        .lab
        .ping(&red_c.ns, IpAddr::V4(c.lab.underlay_ip(red_c.node)), 3)
        .expect("ping");
    if ping.received == 0 {
        c.fail(&format!(
            "red-c cannot ping its node's address:\n{}",
            ping.output
        ));
    }

    // A host outside the cluster (on the underlay, no route to the pod network) sees pod
    // traffic coming from the pod's node address.
    let outside = c.lab.add_netns("ext").expect("ext ns");
    c.lab
        .add_veth(&outside, "eth0", c.lab.underlay_ns(), "ext")
        .expect("veth");
    c.lab
        .run_in(
            c.lab.underlay_ns(),
            "ip",
            &["link", "set", "ext", "master", "br-ul", "up"],
        )
        .expect("attach ext");
    let ext_ip = Ipv4Addr::new(172, 31, c.lab.controller_ip().octets()[2], 200);
    c.lab
        .run_in(
            &outside,
            "ip",
            &["addr", "add", &format!("{ext_ip}/24"), "dev", "eth0"],
        )
        .expect("ext addr");
    c.lab
        .run_in(&outside, "ip", &["link", "set", "eth0", "up"])
        .expect("ext up");
    c.lab.tx_offload_off(&outside, "eth0").expect("ext offload");
    let ext = TcpServer::start(&outside, ext_ip, 8000, "ext").expect("ext server");
    for (name, p) in [
        ("red-a", &red_a),
        ("blue-a", &blue_a),
        ("shared-a", &shared_a),
    ] {
        let ping = c.lab.ping(&p.ns, IpAddr::V4(ext_ip), 3).expect("ping ext");
        if ping.received == 0 {
            c.fail(&format!(
                "{name} cannot ping the outside host:\n{}",
                ping.output
            ));
        }
        let got = tcp_probe(&p.ns, ext.addr, b"hi", Duration::from_secs(3)).expect("tcp ext");
        let node_ip = c.lab.underlay_ip(p.node);
        let text = got.map(|b| String::from_utf8_lossy(&b).into_owned());
        if !text
            .as_deref()
            .is_some_and(|t| t.starts_with(&format!("ext peer={node_ip}:")))
        {
            c.fail(&format!(
                "TCP {name} -> outside host: answer {text:?}, want it to see node {node_ip}; peers {:?}",
                ext.peers()
            ));
        }
    }
    assert!(ext.peers().iter().all(|a| match a.ip() {
        IpAddr::V4(ip) => (1..=3).any(|i| c.lab.underlay_ip(i) == ip),
        IpAddr::V6(_) => false,
    }));

    // CNI DEL: the address stops answering, leaves `get pods`, and goes to the next pod.
    let del = invoke_cni(&c.lab, 1, &red_b.call.with_command("DEL")).expect("DEL");
    assert_eq!(del.exit_code, 0, "DEL red-b: {}", del.raw_stdout);
    assert!(!c.pod_names().contains(&"red/red-b".to_owned()));
    let gone = c
        .lab
        .ping(&red_a.ns, IpAddr::V4(red_b.ip), 2)
        .expect("ping");
    assert_eq!(
        gone.received, 0,
        "deleted pod still answers:\n{}",
        gone.output
    );
    let red_d = c.add_pod(1, "red", "red-d");
    assert_eq!(red_d.ip, red_b.ip, "the freed address goes to the next pod");
    check(
        &c,
        "new pod on the freed address",
        &[
            Expect {
                from: &red_a,
                from_name: "red-a",
                to: red_d.ip,
                to_name: "red-d",
                reach: true,
            },
            Expect {
                from: &red_c,
                from_name: "red-c",
                to: red_d.ip,
                to_name: "red-d",
                reach: true,
            },
            Expect {
                from: &blue_a,
                from_name: "blue-a",
                to: red_d.ip,
                to_name: "red-d",
                reach: false,
            },
        ],
    );
    // What the controller wants is what the switches hold.
    for node in ["node1", "node2", "node3"] {
        let diff = c.ctl(&["dump-flows", node, "--diff"]);
        assert!(
            diff.trim().is_empty(),
            "{node}: desired vs installed differ:\n{diff}"
        );
    }
    let m = metrics(&c);
    assert_eq!(metric(&m, "flowmesh_switch_errors_total"), Some(0.0), "{m}");

    // Controller restart: pods keep talking while it is down (the switches keep their flows),
    // and reconnecting with nothing changed sends no flow mods at all.
    let mut c = c;
    c.ctl.stop(&c.lab);
    check(
        &c,
        "controller down",
        &[Expect {
            from: &red_a,
            from_name: "red-a",
            to: red_c.ip,
            to_name: "red-c",
            reach: true,
        }],
    );
    c.ctl.spawn(&c.lab).expect("controller restart");
    c.ctl
        .wait_synced(
            &c.lab,
            &["node1", "node2", "node3"],
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| c.fail(&format!("switches after restart: {e}")));
    let m = metrics(&c);
    assert_eq!(
        metric(&m, "flowmesh_flow_mods_sent_total"),
        Some(0.0),
        "{m}"
    );
    check(
        &c,
        "after controller restart",
        &[
            Expect {
                from: &red_a,
                from_name: "red-a",
                to: red_c.ip,
                to_name: "red-c",
                reach: true,
            },
            Expect {
                from: &blue_a,
                from_name: "blue-a",
                to: red_c.ip,
                to_name: "red-c",
                reach: false,
            },
        ],
    );
    println!(
        "e2e_multitenant_isolation_gateway_nat_and_del: {:.1} s",
        t_start.elapsed().as_secs_f64()
    );
}

/// The controller's /metrics text (fetched inside the controller namespace).
fn metrics(c: &Cluster) -> String {
    c.ctl
        .metrics_text(&c.lab)
        .unwrap_or_else(|e| c.fail(&format!("GET /metrics: {e}")))
}

/// The value of an unlabelled metric.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Interface names in a pod namespace.
fn pod_links(c: &Cluster, ns: &str) -> Vec<String> {
    let text = c
        .lab
        .run_in(ns, "ip", &["-o", "link", "show"])
        .expect("ip link");
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect();
    v.sort();
    v
}

/// The text without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(ch) = it.next() {
        if ch == '\u{1b}' {
            for c in it.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

fn failed_with(c: &Cluster, out: &CniOutcome, code: u64, what: &str) {
    if out.exit_code == 0 || out.error_code() != Some(code) {
        c.fail(&format!(
            "{what}: want error {code}, got exit {} {}\nstderr: {}",
            out.exit_code, out.raw_stdout, out.stderr
        ));
    }
    assert!(
        out.stdout
            .get("msg")
            .and_then(Value::as_str)
            .is_some_and(|m| !m.is_empty()),
        "{what}: {}",
        out.raw_stdout
    );
    assert!(
        out.stdout.get("cniVersion").is_some(),
        "{what}: {}",
        out.raw_stdout
    );
}

#[test]
fn e2e_cni_add_latency_and_errors() {
    let t_start = Instant::now();
    // A non-default VXLAN port: the shim configures vxlan0 with it and the datapath uses it.
    let mut opts = ControllerOptions::multitenant();
    opts.config_yaml = opts
        .config_yaml
        .replace("vxlanPort: 4789", "vxlanPort: 4790");
    let mut c = Cluster::start(&opts, true);
    c.ctl(&["namespace", "create", "bench"]);

    // ADD latency (exec -> result; the controller answers after the switch acknowledged the
    // pod's flows), 20 pods spread over the 3 nodes.
    let baseline: BTreeMap<usize, _> = (1..=3).map(|i| (i, c.wiring(i))).collect();
    let mut pods = Vec::new();
    for i in 0..20 {
        let node = 1 + i % 3;
        pods.push(c.add_pod(node, "bench", &format!("b{i}")));
    }
    let mut times: Vec<Duration> = pods.iter().map(|p| p.add_time).collect();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "CNI ADD latency, 20 pods, real controller (exec -> result): min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        ms(times[0]),
        ms((times[9] + times[10]) / 2),
        ms(times[18]),
        ms(times[19])
    );
    // The AttachPod share (the controller allocates, stores, pushes the flows and waits for
    // the switch's barrier reply), from the shim's timings: "attached" minus "veth on bridge".
    let mut attach: Vec<f64> = Vec::new();
    for s in &c.shims {
        let text = strip_ansi(&std::fs::read_to_string(&s.log).unwrap_or_default());
        let ms_of = |l: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("ms=")?.parse::<f64>().ok())
        };
        let mut bridged = None;
        for l in text.lines() {
            if l.contains("veth on bridge") {
                bridged = ms_of(l);
            } else if l.contains(" attached") {
                if let (Some(a), Some(b)) = (ms_of(l), bridged.take()) {
                    attach.push(a - b);
                }
            }
        }
    }
    attach.sort_by(f64::total_cmp);
    assert_eq!(attach.len(), 20, "shim timings of 20 ADDs");
    println!(
        "  of which AttachPod (controller: allocate, store, bundle + barrier): min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        attach[0],
        (attach[9] + attach[10]) / 2.0,
        attach[18],
        attach[19]
    );
    let listed = c.pods();
    assert_eq!(listed.len(), 20);
    let mut ips: Vec<&str> = listed.iter().filter_map(|p| p["ip"].as_str()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 20, "duplicate addresses: {listed:?}");
    // The flows really are there when ADD returns: the newest pod answers at once.
    let (first, last) = (&pods[0], &pods[19]);
    let ping = c.lab.ping(&first.ns, IpAddr::V4(last.ip), 3).expect("ping");
    assert!(ping.received > 0, "b0 -> b19:\n{}", ping.output);
    assert_ne!(first.node, last.node);
    let n1 = c.lab.node(first.node).expect("node").ovs();
    let dst_port = n1
        .vsctl(["get", "Interface", "vxlan0", "options:dst_port"])
        .expect("dst_port");
    assert_eq!(dst_port.trim().trim_matches('"'), "4790");
    let dp = n1.appctl(["dpctl/dump-flows"]).expect("dpctl");
    assert!(
        dp.contains("dst=4790") && !dp.contains("dst=4789"),
        "VXLAN not on UDP 4790 in the datapath:\n{dp}"
    );
    // The DEL of an earlier sandbox of the same pod name (kubelet tearing down a sandbox of a
    // pod that was made again, as the real cluster's podready bench did: a StatefulSet's pods
    // do the same) succeeds and leaves the pod's current attachment alone: its flows stay and
    // it still answers.
    let mut earlier = last.call.with_command("DEL");
    earlier.container_id = "an-earlier-sandbox".into();
    let out = invoke_cni(&c.lab, last.node, &earlier).expect("DEL of an earlier sandbox");
    assert_eq!(
        out.exit_code, 0,
        "DEL of an earlier sandbox: {}",
        out.raw_stdout
    );
    assert_eq!(
        c.pods().len(),
        20,
        "a DEL of another sandbox detached the pod"
    );
    let ping = c.lab.ping(&first.ns, IpAddr::V4(last.ip), 3).expect("ping");
    assert!(
        ping.received > 0,
        "b0 -> b19 after the DEL of b19's earlier sandbox:\n{}",
        ping.output
    );
    for p in &pods {
        let out = invoke_cni(&c.lab, p.node, &p.call.with_command("DEL")).expect("DEL");
        assert_eq!(out.exit_code, 0, "DEL: {}", out.raw_stdout);
    }
    assert!(c.pods().is_empty());
    for i in 1..=3 {
        assert_eq!(c.wiring(i), baseline[&i], "node {i} after DEL of every pod");
    }

    // Unknown netns: spec error 3, nothing configured, nothing held by the controller.
    let pod_ns = c.lab.add_netns("err1").expect("ns");
    let add = CniCall::new("ADD", &c.shim(1).socket, "err1", &pod_ns, "bench", "err1");
    let mut bad = add.clone();
    bad.netns = format!("/var/run/netns/{}-nope", c.lab.id());
    failed_with(
        &c,
        &invoke_cni(&c.lab, 1, &bad).expect("ADD"),
        3,
        "ADD into a missing netns",
    );
    assert_eq!(c.wiring(1), baseline[&1]);
    assert!(c.pods().is_empty());

    // A namespace the controller does not know: refused (103), rolled back.
    let unknown = CniCall::new("ADD", &c.shim(1).socket, "err1", &pod_ns, "nosuch", "err1");
    let out = invoke_cni(&c.lab, 1, &unknown).expect("ADD");
    failed_with(&c, &out, 103, "ADD in an unknown namespace");
    assert_eq!(pod_links(&c, &pod_ns), vec!["lo".to_owned()]);
    assert!(out.raw_stdout.contains("nosuch"), "{}", out.raw_stdout);
    assert_eq!(c.wiring(1), baseline[&1]);
    assert!(c.pods().is_empty());

    // Shim down: 11, nothing configured; a restarted shim (re-registering) serves again.
    let shim3 = c.shim(3).clone();
    let add3 = CniCall::new(
        "ADD",
        &shim3.socket,
        "err3",
        &c.lab.add_netns("err3").expect("ns"),
        "bench",
        "err3",
    );
    assert!(c.lab.stop_process(shim3.pid).is_some());
    failed_with(
        &c,
        &invoke_cni(&c.lab, 3, &add3).expect("ADD"),
        11,
        "ADD with the shim down",
    );
    assert_eq!(c.wiring(3), baseline[&3]);
    assert!(c.pods().is_empty());
    c.shims[2] = start_shim(&c.lab, 3, &c.ctl.shim_options()).expect("shim restart");
    let out = invoke_cni(&c.lab, 3, &add3).expect("ADD");
    assert_eq!(
        out.exit_code, 0,
        "ADD after the shim restarted: {}",
        out.raw_stdout
    );

    // Controller down: ADD answers 11 and configures nothing; DEL answers 11 (the runtime
    // retries) after cleaning up the node. After a restart the controller holds no address
    // for the failed ADD, still holds the pod whose DEL it missed until the retried DEL, and
    // an ADD works again.
    c.ctl.stop(&c.lab);
    let out = invoke_cni(&c.lab, 1, &add).expect("ADD");
    failed_with(&c, &out, 11, "ADD with the controller down");
    assert_eq!(c.wiring(1), baseline[&1]);
    assert_eq!(pod_links(&c, &pod_ns), vec!["lo".to_owned()]);
    let del3 = add3.with_command("DEL");
    failed_with(
        &c,
        &invoke_cni(&c.lab, 3, &del3).expect("DEL"),
        11,
        "DEL with the controller down",
    );
    assert_eq!(c.wiring(3), baseline[&3], "DEL cleans the node anyway");
    c.ctl.spawn(&c.lab).expect("controller restart");
    assert_eq!(c.pod_names(), vec!["bench/err3".to_owned()]);
    let out = invoke_cni(&c.lab, 3, &del3).expect("DEL");
    assert_eq!(out.exit_code, 0, "retried DEL: {}", out.raw_stdout);
    assert!(c.pods().is_empty(), "IP still held after the retried DEL");
    c.ctl
        .wait_synced(
            &c.lab,
            &["node1", "node2", "node3"],
            Duration::from_secs(30),
        )
        .expect("switches back");
    let out = invoke_cni(&c.lab, 1, &add).expect("ADD");
    assert_eq!(
        out.exit_code, 0,
        "ADD after the controller restarted: {}",
        out.raw_stdout
    );
    println!(
        "e2e_cni_add_latency_and_errors: {:.1} s",
        t_start.elapsed().as_secs_f64()
    );
}
