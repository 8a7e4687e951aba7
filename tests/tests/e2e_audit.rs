//! Network policy audit logging end to end with real packets: a `NetnsLab` of 3 nodes
//! (userspace datapath), the real controller in networkpolicy mode with a
//! `policyAuditConfig`, a shim per node, pods made by `flowmesh-cni`, the namespace `shop`
//! annotated with `flowmeshctl annotate namespace shop k8s.ovn.org/acl-logging=...`.
//! Allowed and denied TCP, UDP and ICMP connections between pods on two nodes, ingress and
//! egress, each give exactly one line in the log of the node that decided, with the policy,
//! verdict, severity, addresses, ports and pod names; replies and later packets give none;
//! other namespaces and other nodes log nothing; turning logging off stops the lines. The
//! egress firewall's rules likewise (`EF:shop:INDEX`, to hosts on the underlay).
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test e2e_audit -- --nocapture`.

use std::net::SocketAddrV4;
use std::process::Command;
use std::time::{Duration, Instant};

use flowmesh_tests::cni::{audit_log_path, CniPod};
use flowmesh_tests::e2e::{
    tcp_probe, udp_probe, CniCluster, ControllerOptions, TcpServer, UdpEcho,
};

const TCP_PORT: u16 = 8080;
const UDP_PORT: u16 = 5353;

/// Every line of node `node`'s audit log (none when it does not exist yet).
fn lines(c: &CniCluster, node: usize) -> Vec<String> {
    std::fs::read_to_string(audit_log_path(&c.lab, node))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until node `node`'s log has `n` lines (20 s at most: a bound, the line comes within
/// milliseconds of the packet); returns them.
fn wait_lines(c: &CniCluster, node: usize, n: usize, what: &str) -> Vec<String> {
    let t = Instant::now();
    loop {
        let l = lines(c, node);
        if l.len() >= n {
            return l;
        }
        if t.elapsed() > Duration::from_secs(20) {
            c.fail(&format!(
                "{what}: node{node} has {} audit lines, expected {n}:\n{}\n---- shim log ----\n{}",
                l.len(),
                l.join("\n"),
                flowmesh_tests::cni::log_tail(&c.shims[node - 1].log, 40)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `key=` in an audit line (`name="..."` unquoted).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!(" {key}=");
    let at = line.find(&pat)? + pat.len();
    let rest = &line[at..];
    if let Some(q) = rest.strip_prefix('"') {
        return q.split('"').next();
    }
    rest.split(' ').next()
}

/// A TCP connection attempt with one SYN (and the kernel's own retransmissions within
/// `timeout`): whether the server answered.
fn tcp_once(a: &CniPod, b: &CniPod, port: u16, timeout: Duration) -> bool {
    tcp_probe(&a.ns, SocketAddrV4::new(b.ip, port), b"hello", timeout)
        .expect("tcp probe")
        .is_some_and(|r| !r.is_empty())
}

/// `ping -c 3` from `a` to `b` (one ICMP "connection": one identifier); whether any answer came.
fn ping(a: &CniPod, b: &CniPod) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", &a.ns, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-W", "2",
        ])
        .arg(b.ip.to_string())
        .output()
        .expect("ping")
        .status
        .success()
}

struct Pods {
    web: CniPod,
    client: CniPod,
    ops: CniPod,
    db: CniPod,
    _servers: Vec<TcpServer>,
    _echoes: Vec<UdpEcho>,
}

/// shop/web (node1, app=web) isolated both ways by policy shop/web: ingress TCP 8080 and UDP
/// 5353 from namespaces team=tools, anything from team=ops; egress TCP 8080 to app=db. Logging
/// on for shop. tools/client on node2, ops/ops on node3, shop/db on node3.
fn setup(c: &CniCluster) -> Pods {
    c.apply(
        "namespaces",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels:\n    team: shop\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tools\n  labels:\n    team: tools\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ops\n  labels:\n    team: ops\n",
    );
    let out = c.ctl(&[
        "annotate",
        "namespace",
        "shop",
        r#"k8s.ovn.org/acl-logging={"deny": "alert", "allow": "notice"}"#,
    ]);
    assert!(out.contains("namespace/shop annotated"), "{out}");
    let mut servers = Vec::new();
    let mut echoes = Vec::new();
    let mut pod = |node: usize, ns: &str, name: &str, label: Option<&str>| {
        let p = c.add_cni_pod(node, ns, name);
        servers.push(
            TcpServer::start(&p.ns, p.ip, TCP_PORT, name)
                .unwrap_or_else(|e| c.fail(&format!("TCP server {name}: {e}"))),
        );
        echoes.push(
            UdpEcho::start(&p.ns, p.ip, UDP_PORT, name)
                .unwrap_or_else(|e| c.fail(&format!("UDP server {name}: {e}"))),
        );
        if let Some(l) = label {
            c.ctl(&["label", "pod", &format!("{ns}/{name}"), l]);
        }
        p
    };
    let web = pod(1, "shop", "web", Some("app=web"));
    let client = pod(2, "tools", "client", None);
    let ops = pod(3, "ops", "ops", None);
    let db = pod(3, "shop", "db", Some("app=db"));
    c.apply(
        "policy",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web\n  namespace: shop\n\
         spec:\n  podSelector:\n    matchLabels:\n      app: web\n  policyTypes: [Ingress, Egress]\n\
         \x20 ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels:\n          team: tools\n\
         \x20   ports:\n    - protocol: TCP\n      port: 8080\n    - protocol: UDP\n      port: 5353\n\
         \x20 - from:\n    - namespaceSelector:\n        matchLabels:\n          team: ops\n\
         \x20 egress:\n  - to:\n    - podSelector:\n        matchLabels:\n          app: db\n\
         \x20   ports:\n    - protocol: TCP\n      port: 8080\n",
    );
    c.wait_all_synced("after the policy");
    Pods {
        web,
        client,
        ops,
        db,
        _servers: servers,
        _echoes: echoes,
    }
}

#[test]
fn one_line_per_connection_with_its_policy_and_verdict() {
    let mut opts = ControllerOptions::networkpolicy();
    opts.config_yaml += "policyAuditConfig:\n  rateLimit: 50\n  destination: \"null\"\n";
    let c = CniCluster::start(&opts);
    let p = setup(&c);
    let sw = c.ctl(&["get", "switches", "-o", "wide"]);
    let audit_of = |node: &str| {
        sw.lines()
            .find(|l| l.starts_with(node))
            .map(|l| l.split_whitespace().nth(9).unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert_eq!(audit_of("node1"), "on", "{sw}");
    assert_eq!(audit_of("node2"), "-", "{sw}");

    // (what, traffic, allowed?, verdict, direction, reference, proto, src, dst, dport)
    type Case<'a> = (
        &'a str,
        Box<dyn Fn() -> bool + 'a>,
        bool,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a CniPod,
        &'a CniPod,
        Option<u16>,
    );
    let long = Duration::from_secs(3);
    let short = Duration::from_millis(1500);
    let cases: Vec<Case<'_>> = vec![
        (
            "TCP 8080 from tools (across VXLAN)",
            Box::new(|| tcp_once(&p.client, &p.web, TCP_PORT, long)),
            true,
            "allow",
            "ingress",
            "NP:shop:web",
            "tcp",
            &p.client,
            &p.web,
            Some(TCP_PORT),
        ),
        (
            "TCP 8081 from tools",
            Box::new(|| tcp_once(&p.client, &p.web, TCP_PORT + 1, short)),
            false,
            "drop",
            "ingress",
            "NP:shop:Ingress",
            "tcp",
            &p.client,
            &p.web,
            Some(TCP_PORT + 1),
        ),
        (
            "UDP 5353 from tools",
            Box::new(|| {
                udp_probe(
                    &p.client.ns,
                    SocketAddrV4::new(p.web.ip, UDP_PORT),
                    b"ping",
                    3,
                    Duration::from_millis(500),
                )
                .expect("udp")
                .is_some()
            }),
            true,
            "allow",
            "ingress",
            "NP:shop:web",
            "udp",
            &p.client,
            &p.web,
            Some(UDP_PORT),
        ),
        (
            "UDP 5354 from tools",
            Box::new(|| {
                udp_probe(
                    &p.client.ns,
                    SocketAddrV4::new(p.web.ip, UDP_PORT + 1),
                    b"ping",
                    3,
                    Duration::from_millis(300),
                )
                .expect("udp")
                .is_some()
            }),
            false,
            "drop",
            "ingress",
            "NP:shop:Ingress",
            "udp",
            &p.client,
            &p.web,
            Some(UDP_PORT + 1),
        ),
        (
            "ICMP from ops (allowed on every protocol)",
            Box::new(|| ping(&p.ops, &p.web)),
            true,
            "allow",
            "ingress",
            "NP:shop:web",
            "icmp",
            &p.ops,
            &p.web,
            None,
        ),
        (
            "ICMP from tools",
            Box::new(|| ping(&p.client, &p.web)),
            false,
            "drop",
            "ingress",
            "NP:shop:Ingress",
            "icmp",
            &p.client,
            &p.web,
            None,
        ),
        (
            "web to db TCP 8080 (egress allowed)",
            Box::new(|| tcp_once(&p.web, &p.db, TCP_PORT, long)),
            true,
            "allow",
            "egress",
            "NP:shop:web",
            "tcp",
            &p.web,
            &p.db,
            Some(TCP_PORT),
        ),
        (
            "web to client TCP 8080 (egress denied)",
            Box::new(|| tcp_once(&p.web, &p.client, TCP_PORT, short)),
            false,
            "drop",
            "egress",
            "NP:shop:Egress",
            "tcp",
            &p.web,
            &p.client,
            Some(TCP_PORT),
        ),
    ];
    let pod_name = |q: &CniPod| {
        if q.ip == p.web.ip {
            "shop/web"
        } else if q.ip == p.client.ip {
            "tools/client"
        } else if q.ip == p.ops.ip {
            "ops/ops"
        } else {
            "shop/db"
        }
    };
    for (i, (what, traffic, allowed, verdict, direction, reference, proto, src, dst, dport)) in
        cases.iter().enumerate()
    {
        assert_eq!(
            traffic(),
            *allowed,
            "{what}: the policy's verdict on the wire"
        );
        let l = wait_lines(&c, 1, i + 1, what);
        let line = &l[i];
        println!("{what}: {line}");
        assert_eq!(field(line, "node"), Some("node1"), "{line}");
        assert_eq!(field(line, "name"), Some(*reference), "{line}");
        assert_eq!(field(line, "verdict"), Some(*verdict), "{line}");
        let sev = if *verdict == "allow" {
            "notice"
        } else {
            "alert"
        };
        assert_eq!(field(line, "severity"), Some(sev), "{line}");
        assert_eq!(field(line, "direction"), Some(*direction), "{line}");
        assert_eq!(field(line, "proto"), Some(*proto), "{line}");
        assert_eq!(
            field(line, "src"),
            Some(src.ip.to_string().as_str()),
            "{line}"
        );
        assert_eq!(
            field(line, "dst"),
            Some(dst.ip.to_string().as_str()),
            "{line}"
        );
        assert_eq!(field(line, "src_pod"), Some(pod_name(src)), "{line}");
        assert_eq!(field(line, "dst_pod"), Some(pod_name(dst)), "{line}");
        match dport {
            Some(port) => assert_eq!(field(line, "dport"), Some(port.to_string().as_str())),
            None => assert_eq!(field(line, "icmp_type"), Some("8"), "{line}"),
        }
    }
    // A window in which nothing may be written: retransmissions of the denied attempts, the
    // replies and later packets of the allowed ones, are not lines.
    std::thread::sleep(Duration::from_secs(2));
    let node1 = lines(&c, 1);
    assert_eq!(node1.len(), cases.len(), "{}", node1.join("\n"));
    // The other nodes decided nothing a logging namespace asked for (tools and ops do not
    // log; db is selected by no policy).
    assert!(lines(&c, 2).is_empty(), "node2: {:?}", lines(&c, 2));
    assert!(lines(&c, 3).is_empty(), "node3: {:?}", lines(&c, 3));

    // Logging off: the same traffic, no line; the allowed connection still works.
    c.ctl(&["annotate", "namespace", "shop", "k8s.ovn.org/acl-logging-"]);
    c.wait_all_synced("logging off");
    let sw = c.ctl(&["get", "switches", "-o", "wide"]);
    assert!(
        sw.lines()
            .find(|l| l.starts_with("node1"))
            .is_some_and(|l| l.split_whitespace().nth(9) == Some("-")),
        "{sw}"
    );
    assert!(tcp_once(&p.client, &p.web, TCP_PORT, long));
    assert!(!tcp_once(&p.client, &p.web, TCP_PORT + 1, short));
    std::thread::sleep(Duration::from_secs(1)); // a window in which nothing may be written
    assert_eq!(lines(&c, 1).len(), cases.len());
}

/// Replaces the controller's `policyAuditConfig` in its configuration file (the controller
/// re-reads it while running).
fn set_audit_config(c: &CniCluster, base: &str, audit: &str) {
    let text = format!("{base}policyAuditConfig:\n{audit}");
    std::fs::write(&c.ctl.config, text).unwrap_or_else(|e| c.fail(&format!("write config: {e}")));
}

/// Makes new denied connections (each a line) until `recv` returns a datagram (20 s at most:
/// the controller re-reads its file every 2 s and the shim applies what its stream sends).
fn until_received(
    c: &CniCluster,
    p: &Pods,
    what: &str,
    mut recv: impl FnMut() -> Option<String>,
) -> String {
    let t = Instant::now();
    loop {
        assert!(!tcp_once(
            &p.client,
            &p.web,
            9000,
            Duration::from_millis(200)
        ));
        if let Some(m) = recv() {
            return m;
        }
        if t.elapsed() > Duration::from_secs(20) {
            c.fail(&format!(
                "{what}: no datagram after 20 s\n---- shim log ----\n{}",
                flowmesh_tests::cni::log_tail(&c.shims[0].log, 40)
            ));
        }
    }
}

#[test]
fn every_destination_and_a_configuration_changed_while_running() {
    use std::os::unix::net::UnixDatagram;
    let opts = ControllerOptions::networkpolicy();
    let base = opts.config_yaml.clone();
    let mut first = opts.clone();
    first.config_yaml = format!("{base}policyAuditConfig:\n  rateLimit: 100\n");
    let c = CniCluster::start(&first);
    let controller_pid = c.ctl.pid;
    let p = setup(&c);
    let buf = &mut [0u8; 2048];
    let text = |n: usize, buf: &[u8]| String::from_utf8_lossy(&buf[..n]).into_owned();

    // null (the default): the file only.
    assert!(!tcp_once(
        &p.client,
        &p.web,
        9000,
        Duration::from_millis(200)
    ));
    let l = wait_lines(&c, 1, 1, "null");
    assert_eq!(field(&l[0], "verdict"), Some("drop"));

    // unix:PATH, RFC 5424 with the default facility local0 (16): alert is <129>.
    let dir = c.lab.run_dir().join("audit-destinations");
    std::fs::create_dir_all(&dir).expect("dir");
    let unix_path = dir.join("audit.sock");
    let unix = UnixDatagram::bind(&unix_path).expect("bind unix");
    unix.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    set_audit_config(
        &c,
        &base,
        &format!(
            "  rateLimit: 100\n  destination: unix:{}\n",
            unix_path.display()
        ),
    );
    let m = until_received(&c, &p, "unix:", || {
        unix.recv(buf).ok().map(|n| text(n, buf))
    });
    println!("unix: {m}");
    assert!(
        m.starts_with("<129>1 ") && m.contains(" flowmesh-shim "),
        "{m}"
    );
    assert!(
        m.contains(" audit - ") && m.contains("name=\"NP:shop:Ingress\" verdict=drop"),
        "{m}"
    );
    let file = lines(&c, 1);
    assert!(
        m.ends_with(file.last().expect("a line")),
        "the datagram carries the file's line: {m}\n{file:?}"
    );

    // udp:HOST:PORT, to a listener in node1's namespace, with syslogFacility local3 (19).
    let udp = flowmesh_tests::tcp::in_netns(c.lab.node(1).expect("node1").ns(), || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|source| {
            flowmesh_tests::HarnessError::Net {
                context: "bind udp".into(),
                source,
            }
        })?;
        Ok(s)
    })
    .expect("udp listener in node1");
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let port = udp.local_addr().expect("addr").port();
    set_audit_config(
        &c,
        &base,
        &format!(
            "  rateLimit: 100\n  destination: udp:127.0.0.1:{port}\n  syslogFacility: local3\n"
        ),
    );
    let m = until_received(&c, &p, "udp:", || udp.recv(buf).ok().map(|n| text(n, buf)));
    println!("udp: {m}");
    assert!(m.starts_with("<153>1 "), "{m}");
    assert!(m.contains("verdict=drop"), "{m}");

    // libc: the node's syslog socket, as glibc's syslog() writes it.
    let dev_log = flowmesh_tests::cni::syslog_socket_path(&c.lab, 1);
    let _ = std::fs::remove_file(&dev_log);
    let libc = UnixDatagram::bind(&dev_log).expect("bind the syslog socket");
    libc.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    set_audit_config(&c, &base, "  rateLimit: 100\n  destination: libc\n");
    let m = until_received(&c, &p, "libc", || libc.recv(buf).ok().map(|n| text(n, buf)));
    println!("libc: {m}");
    assert!(
        m.starts_with("<129>") && m.contains(" flowmesh-shim["),
        "{m}"
    );
    assert!(m.contains("]: ") && m.contains("verdict=drop"), "{m}");

    // A refused change (an invalid destination) keeps what is in use.
    set_audit_config(
        &c,
        &base,
        "  rateLimit: 100\n  destination: tcp:1.2.3.4:5\n",
    );
    std::thread::sleep(Duration::from_secs(5)); // two of the controller's re-reads
    assert!(!tcp_once(
        &p.client,
        &p.web,
        9001,
        Duration::from_millis(200)
    ));
    let mut got = None;
    for _ in 0..30 {
        if let Ok(n) = libc.recv(buf) {
            got = Some(text(n, buf));
            break;
        }
    }
    assert!(got.is_some(), "libc still in use after a refused change");
    let log = std::fs::read_to_string(&c.ctl.logs[0]).unwrap_or_default();
    assert!(
        log.contains("the configuration file changed and is refused"),
        "the controller says why"
    );

    // Back to null: nothing more reaches the old destinations.
    set_audit_config(&c, &base, "  rateLimit: 100\n");
    let t = Instant::now();
    let before = lines(&c, 1).len();
    loop {
        // Drain what the libc socket got while the change travelled.
        while libc.recv(buf).is_ok() {}
        assert!(!tcp_once(
            &p.client,
            &p.web,
            9002,
            Duration::from_millis(200)
        ));
        std::thread::sleep(Duration::from_millis(300));
        if libc.recv(buf).is_err() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "libc still used");
    }
    assert!(lines(&c, 1).len() > before, "the file is still written");
    assert_eq!(c.ctl.pid, controller_pid, "applied without a restart");
}

/// A flood of 10,000 denied SYNs (each its own connection): at most `rateLimit` lines in any
/// second, the events not written counted in the lines' `suppressed=`, the bridge's meter
/// passing no more than its rate to the shim, and other namespaces' pod-to-pod traffic
/// flowing throughout.
#[test]
fn a_flood_of_denied_syns_is_rate_limited_and_other_traffic_flows() {
    use flowmesh_tests::audit::{max_lines_per_second, meter_counts, syn_flood};
    const RATE: usize = 10;
    const SYNS: usize = 10_000;
    let mut opts = ControllerOptions::networkpolicy();
    opts.config_yaml += &format!("policyAuditConfig:\n  rateLimit: {RATE}\n");
    let c = CniCluster::start(&opts);
    let p = setup(&c);
    // Another namespace's pods: tools/other on node1 (beside web) serves the client on node2.
    let other = c.add_cni_pod(1, "tools", "other");
    let _srv = TcpServer::start(&other.ns, other.ip, TCP_PORT, "other")
        .unwrap_or_else(|e| c.fail(&format!("TCP server other: {e}")));
    assert!(tcp_once(
        &p.client,
        &other,
        TCP_PORT,
        Duration::from_secs(3)
    ));
    assert!(lines(&c, 1).is_empty(), "tools logs nothing");

    // Probes between the tools pods, every 100 ms, for as long as the flood lasts.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (stop, from, to) = (stop.clone(), p.client.ns.clone(), other.ip);
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = tcp_probe(
                    &from,
                    SocketAddrV4::new(to, TCP_PORT),
                    b"hello",
                    Duration::from_secs(3),
                );
                if r.ok().flatten().is_some_and(|b| !b.is_empty()) {
                    ok += 1;
                } else {
                    failed += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (ok, failed)
        })
    };
    let (meter_in0, meter_drop0) = meter_counts(&c.lab, 1, 1).expect("meter stats");
    let t = Instant::now();
    // 3,000 a second: the flood lasts over three seconds, long enough to judge the line rate
    // over several seconds and to probe other traffic throughout.
    let report =
        syn_flood(&p.client.ns, SocketAddrV4::new(p.web.ip, 9999), SYNS, 3000).expect("flood");
    let flood_secs = t.elapsed().as_secs_f64();
    println!("flood: {report:?}");
    // Let the last of it through the pipeline (and a probe or two after it).
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = prober.join().expect("prober");
    println!("tools → tools during the flood: {ok} answered, {failed} not");
    assert!(
        ok as f64 >= flood_secs * 5.0 && failed == 0,
        "other namespaces' traffic kept flowing"
    );

    // One more denied connection after the flood: its line reports what was suppressed last.
    std::thread::sleep(Duration::from_millis(1100));
    let before = lines(&c, 1).len();
    assert!(!tcp_once(
        &p.client,
        &p.web,
        9998,
        Duration::from_millis(200)
    ));
    let all = wait_lines(&c, 1, before + 1, "the line after the flood");
    let max = max_lines_per_second(&all);
    let suppressed: u64 = all
        .iter()
        .filter_map(|l| flowmesh_tests::audit::field(l, "suppressed"))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    let (meter_in, meter_drop) = meter_counts(&c.lab, 1, 1).expect("meter stats");
    let (entered, dropped) = (meter_in - meter_in0, meter_drop - meter_drop0);
    println!(
        "{} lines, at most {max} in one second; suppressed reported: {suppressed}; meter: {entered} in, {dropped} dropped, over {flood_secs:.1} s",
        all.len()
    );
    assert!(max <= RATE, "{max} lines within one second");
    assert!(all.len() >= RATE, "the flood was logged: {}", all.len());
    assert!(
        all.iter()
            .all(|l| flowmesh_tests::audit::field(l, "name") == Some("NP:shop:Ingress")),
        "only the denied attempts"
    );
    // Every event the meter dropped is reported as suppressed (with the shim's own), and no
    // event is counted twice: lines + suppressed <= what entered the meter (the datapath may
    // lose some of a flood before it). The meter passed the shim no more than its rate (and
    // one burst) per second.
    let written = all.len() as u64;
    assert!(
        entered >= (report.sent / 2) as u64,
        "{entered} of {} SYNs metered",
        report.sent
    );
    assert!(
        suppressed >= dropped && written + suppressed <= entered,
        "{written} lines + {suppressed} suppressed vs {entered} metered, {dropped} dropped\n{}",
        std::fs::read_to_string(&c.shims[0].log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("audit"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let passed = entered - dropped;
    let bound = (RATE as f64 * (flood_secs + 3.0)) as u64 + RATE as u64;
    assert!(
        passed <= bound,
        "the meter passed {passed} packet-ins (bound {bound})"
    );
}

/// `ping -c 3` from `a`'s namespace to `ip`; whether any answer came.
fn ping_ip(a: &CniPod, ip: std::net::Ipv4Addr) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", &a.ns, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-W", "2",
        ])
        .arg(ip.to_string())
        .output()
        .expect("ping")
        .status
        .success()
}

/// The egress firewall of a logging namespace: connections leaving the cluster that a rule
/// allows or denies give one line each on the pod's node, named `EF:NAMESPACE:RULE-INDEX`,
/// with the outside address and no pod name for it; the replies and later packets none.
#[test]
fn egress_firewall_rules_log_one_line_per_connection() {
    let mut opts = ControllerOptions::networkpolicy();
    opts.config_yaml += "policyAuditConfig:\n  rateLimit: 50\n";
    let c = CniCluster::start(&opts);
    let (a_ns, a_ip) = c.lab.add_underlay_host("outa", 101).expect("host A");
    let (b_ns, b_ip) = c.lab.add_underlay_host("outb", 102).expect("host B");
    let _a = TcpServer::start(&a_ns, a_ip, TCP_PORT, "A").expect("server A");
    let _b = TcpServer::start(&b_ns, b_ip, TCP_PORT, "B").expect("server B");
    c.apply(
        "namespaces",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tools\n",
    );
    c.ctl(&[
        "annotate",
        "namespace",
        "shop",
        r#"k8s.ovn.org/acl-logging={"deny": "warning", "allow": "info"}"#,
    ]);
    let api = c.add_cni_pod(2, "shop", "api");
    let tool = c.add_cni_pod(2, "tools", "tool");
    // Rule 0 allows host A, rule 1 denies everything else (host B).
    c.apply(
        "firewall",
        &format!(
            "apiVersion: network.openshift.io/v1\nkind: EgressNetworkPolicy\n\
             metadata:\n  namespace: shop\n  name: default\nspec:\n  egress:\n\
             \x20 - type: Allow\n    to:\n      cidrSelector: {a_ip}/32\n\
             \x20 - type: Deny\n    to:\n      cidrSelector: 0.0.0.0/0\n"
        ),
    );
    c.wait_all_synced("after the firewall");
    let (to_a, to_b) = (
        SocketAddrV4::new(a_ip, TCP_PORT),
        SocketAddrV4::new(b_ip, TCP_PORT),
    );
    let reaches = |p: &CniPod, to: SocketAddrV4, t: Duration| {
        tcp_probe(&p.ns, to, b"hello", t)
            .expect("tcp probe")
            .is_some_and(|r| !r.is_empty())
    };
    // (what, traffic, allowed?, verdict, reference, proto, dst)
    type Case<'a> = (
        &'a str,
        Box<dyn Fn() -> bool + 'a>,
        bool,
        &'a str,
        &'a str,
        &'a str,
        std::net::Ipv4Addr,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "TCP to host A (rule 0 allows)",
            Box::new(|| reaches(&api, to_a, Duration::from_secs(3))),
            true,
            "allow",
            "EF:shop:0",
            "tcp",
            a_ip,
        ),
        (
            "TCP to host B (rule 1 denies)",
            Box::new(|| reaches(&api, to_b, Duration::from_millis(1500))),
            false,
            "drop",
            "EF:shop:1",
            "tcp",
            b_ip,
        ),
        (
            "ICMP to host A (rule 0 allows)",
            Box::new(|| ping_ip(&api, a_ip)),
            true,
            "allow",
            "EF:shop:0",
            "icmp",
            a_ip,
        ),
        (
            "ICMP to host B (rule 1 denies)",
            Box::new(|| ping_ip(&api, b_ip)),
            false,
            "drop",
            "EF:shop:1",
            "icmp",
            b_ip,
        ),
    ];
    for (i, (what, traffic, allowed, verdict, reference, proto, dst)) in cases.iter().enumerate() {
        assert_eq!(traffic(), *allowed, "{what}: the firewall's verdict");
        let l = wait_lines(&c, 2, i + 1, what);
        let line = &l[i];
        println!("{what}: {line}");
        assert_eq!(field(line, "node"), Some("node2"), "{line}");
        assert_eq!(field(line, "name"), Some(*reference), "{line}");
        assert_eq!(field(line, "verdict"), Some(*verdict), "{line}");
        let sev = if *verdict == "allow" {
            "info"
        } else {
            "warning"
        };
        assert_eq!(field(line, "severity"), Some(sev), "{line}");
        assert_eq!(field(line, "direction"), Some("egress"), "{line}");
        assert_eq!(field(line, "proto"), Some(*proto), "{line}");
        assert_eq!(field(line, "src"), Some(api.ip.to_string().as_str()));
        assert_eq!(field(line, "dst"), Some(dst.to_string().as_str()));
        assert_eq!(field(line, "src_pod"), Some("shop/api"), "{line}");
        assert_eq!(field(line, "dst_pod"), None, "an outside address: {line}");
        if *proto == "tcp" {
            assert_eq!(field(line, "dport"), Some(TCP_PORT.to_string().as_str()));
        }
    }
    // tools has no firewall and does not log: it reaches both hosts, unlogged.
    assert!(reaches(&tool, to_a, Duration::from_secs(3)));
    assert!(reaches(&tool, to_b, Duration::from_secs(3)));
    // A window in which nothing may be written: the replies, later packets and
    // retransmissions of the connections above are not lines.
    std::thread::sleep(Duration::from_secs(2));
    let node2 = lines(&c, 2);
    assert_eq!(node2.len(), cases.len(), "{}", node2.join("\n"));
    assert!(lines(&c, 1).is_empty() && lines(&c, 3).is_empty());
}

/// The node's log file with `maxFileSize: 1` (MB) and `maxLogFiles: 2`: floods of denied SYNs
/// (each its own connection and line, the rate limit high enough to let them through) until
/// the file has rotated twice; every file kept is at most 1,000,000 bytes, holds whole lines,
/// and the newest lines are in the current file; nothing beyond `.2` is kept.
#[test]
fn the_log_file_rotates_at_max_file_size() {
    use flowmesh_tests::audit::syn_flood;
    let mut opts = ControllerOptions::networkpolicy();
    opts.config_yaml +=
        "policyAuditConfig:\n  rateLimit: 20000\n  maxFileSize: 1\n  maxLogFiles: 2\n";
    let c = CniCluster::start(&opts);
    let p = setup(&c);
    let file = audit_log_path(&c.lab, 1);
    let rotated = |i: u32| std::path::PathBuf::from(format!("{}.{i}", file.display()));
    let mut sent = 0;
    // About 230 bytes a line: 1 MB is some 4,400 lines. 5,000 SYNs a round, 20 rounds at most.
    for _ in 0..20 {
        if rotated(2).exists() {
            break;
        }
        let r =
            syn_flood(&p.client.ns, SocketAddrV4::new(p.web.ip, 9999), 5000, 5000).expect("flood");
        sent += r.sent;
        // Let the shim write what the meter passed.
        let t = Instant::now();
        let mut last = 0;
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            if now == last || t.elapsed() > Duration::from_secs(10) {
                break;
            }
            last = now;
        }
    }
    assert!(
        rotated(2).exists(),
        "not rotated twice after {sent} SYNs\n---- shim log ----\n{}",
        flowmesh_tests::cni::log_tail(&c.shims[0].log, 40)
    );
    assert!(!rotated(3).exists(), "maxLogFiles 2 keeps .1 and .2 only");
    let mut newest_before = None;
    for path in [rotated(2), rotated(1), file.clone()] {
        let text = std::fs::read_to_string(&path).expect("read");
        let len = text.len();
        println!(
            "{}: {len} bytes, {} lines",
            path.display(),
            text.lines().count()
        );
        assert!(len <= 1_000_000, "{}: {len} bytes", path.display());
        assert!(text.ends_with('\n'), "{}: whole lines", path.display());
        for l in text.lines() {
            assert!(
                field(l, "name") == Some("NP:shop:Ingress") && field(l, "verdict") == Some("drop"),
                "{}: {l}",
                path.display()
            );
        }
        // Older files hold older lines.
        let first = text
            .lines()
            .next()
            .and_then(flowmesh_tests::audit::line_time_ms);
        if let (Some(before), Some(first)) = (newest_before, first) {
            assert!(first >= before, "{}: out of order", path.display());
        }
        newest_before = text
            .lines()
            .last()
            .and_then(flowmesh_tests::audit::line_time_ms);
    }
    // A rotated file was full: the next line would not have fit.
    let one = std::fs::metadata(rotated(1)).expect(".1").len();
    assert!(one > 1_000_000 - 400, ".1 rotated early: {one} bytes");
}
