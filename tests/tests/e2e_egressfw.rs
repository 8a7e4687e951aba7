//! The egress firewall with real packets: a `NetnsLab` of 3 nodes (userspace datapath), the real
//! controller (multitenant), a shim per node, pods made by `flowmesh-cni`, two outside hosts on
//! the underlay running TCP servers, and an authoritative DNS server in its own namespace that
//! the controller resolves the firewall's `dnsName` rules with (TTL 2 s).
//!
//! Checked: an outside host allowed by name and one denied by CIDR, then — after the test
//! changes the name's A record — the path follows the new address within TTL + 1 s; a host
//! denied by name with everything else allowed; a namespace without a firewall reaches both
//! hosts all along; traffic inside the cluster is never subject to the firewall; with an egress
//! IP on a node without pods of the project, that node holds the project's table 100 and the
//! traffic leaving from the egress IP obeys it; deleting the firewall opens everything again.
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test e2e_egressfw -- --nocapture`.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use flowmesh_tests::dns::DnsServer;
use flowmesh_tests::e2e::{tcp_probe, CniCluster, ControllerOptions, TcpServer};

const PORT: u16 = 9099;
const TTL: u32 = 2;
const NAME: &str = "partner.example.test";

/// Whether a TCP connection from `ns` to `dst` is answered.
fn reaches(ns: &str, dst: SocketAddrV4) -> bool {
    tcp_probe(ns, dst, b"hello", Duration::from_millis(500))
        .expect("tcp probe")
        .is_some_and(|r| !r.is_empty())
}

/// Waits until `probe` answers `want` (at most `limit`); how long it took.
fn settles(want: bool, what: &str, limit: Duration, probe: impl Fn() -> bool) -> Duration {
    let t = Instant::now();
    loop {
        if probe() == want {
            println!("{what}: after {:?}", t.elapsed());
            return t.elapsed();
        }
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn firewall(rules: &[(&str, &str, &str)]) -> String {
    let mut y = String::from(
        "apiVersion: network.openshift.io/v1\nkind: EgressNetworkPolicy\n\
         metadata:\n  namespace: shop\n  name: default\nspec:\n  egress:\n",
    );
    for (ty, key, value) in rules {
        y.push_str(&format!("  - type: {ty}\n    to:\n      {key}: {value}\n"));
    }
    y
}

#[test]
fn cidr_and_dns_rules_filter_real_traffic_and_follow_the_a_record() {
    let mut dns_slot = None;
    let c = CniCluster::start_with(|lab| {
        let (ns, ip) = lab.add_underlay_host("dns", 53).expect("DNS host");
        let dns = DnsServer::start(Some(&ns), SocketAddrV4::new(ip, 53)).expect("DNS server");
        let mut o = ControllerOptions::multitenant();
        o.extra = vec![
            "--egress-dns-server".into(),
            dns.addr.to_string(),
            "--egress-dns-ttl-floor".into(),
            "1".into(),
        ];
        dns_slot = Some(dns);
        o
    });
    let dns = dns_slot.expect("DNS server started");
    let (a_ns, a_ip) = c.lab.add_underlay_host("outa", 101).expect("host A");
    let (b_ns, b_ip) = c.lab.add_underlay_host("outb", 102).expect("host B");
    let _a_srv = TcpServer::start(&a_ns, a_ip, PORT, "A").expect("server A");
    let _b_srv = TcpServer::start(&b_ns, b_ip, PORT, "B").expect("server B");
    let (a, b) = (SocketAddrV4::new(a_ip, PORT), SocketAddrV4::new(b_ip, PORT));
    dns.set(NAME, &[a_ip], TTL);

    c.ctl(&["namespace", "create", "shop"]);
    c.ctl(&["namespace", "create", "web"]);
    let shop1 = c.add_cni_pod(1, "shop", "shop-1");
    let shop3 = c.add_cni_pod(3, "shop", "shop-3");
    let web1 = c.add_cni_pod(1, "web", "web-1");
    let _shop3_srv = TcpServer::start(&shop3.ns, shop3.ip, PORT, "shop-3").expect("shop-3");
    let shop3_addr = SocketAddrV4::new(shop3.ip, PORT);
    let limit = Duration::from_secs(10);

    // No firewall: both outside hosts are reachable.
    settles(true, "shop-1 reaches A", limit, || reaches(&shop1.ns, a));
    assert!(reaches(&shop1.ns, b), "shop-1 reaches B without a firewall");

    // Allow the name (→ A), deny B by CIDR, deny the rest.
    c.apply(
        "fw1",
        &firewall(&[
            ("Allow", "dnsName", NAME),
            ("Deny", "cidrSelector", &format!("{b_ip}/32")),
            ("Deny", "cidrSelector", "0.0.0.0/0"),
        ]),
    );
    settles(false, "B denied by CIDR", limit, || reaches(&shop1.ns, b));
    // The name's addresses join the flows once the controller resolved it (until then the
    // rule matches nothing and A falls to the final deny).
    settles(true, "A allowed by name", limit, || reaches(&shop1.ns, a));
    assert!(reaches(&shop3.ns, a), "A allowed by name from node 3");
    assert!(!reaches(&shop3.ns, b), "B denied by CIDR from node 3");
    // Inside the cluster nothing is filtered; other namespaces are not either.
    assert!(reaches(&shop1.ns, shop3_addr), "pod to pod across nodes");
    assert!(
        reaches(&web1.ns, a) && reaches(&web1.ns, b),
        "web has no firewall"
    );

    // The A record moves to B: within TTL + 1 s, B is allowed by name and A falls to the
    // final deny.
    let queries = dns.queries();
    dns.set(NAME, &[b_ip], TTL);
    let t0 = Instant::now();
    settles(true, "B allowed by name after the change", limit, || {
        reaches(&shop1.ns, b)
    });
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_secs(u64::from(TTL) + 1),
        "the path followed the record after {took:?} (TTL {TTL} s)"
    );
    assert!(
        dns.queries() > queries,
        "the controller asked the test's server"
    );
    settles(false, "A denied after the change", limit, || {
        reaches(&shop1.ns, a)
    });
    let yaml = c.ctl(&["get", "egressnetworkpolicies", "-n", "shop", "-o", "yaml"]);
    assert!(
        yaml.contains(&b_ip.to_string()),
        "get shows the new address:\n{yaml}"
    );

    // Deny by name, allow the rest.
    c.apply(
        "fw2",
        &firewall(&[
            ("Deny", "dnsName", NAME),
            ("Allow", "cidrSelector", "0.0.0.0/0"),
        ]),
    );
    settles(false, "B denied by name", limit, || reaches(&shop1.ns, b));
    settles(true, "A allowed by the final rule", limit, || {
        reaches(&shop1.ns, a)
    });
    assert!(reaches(&shop1.ns, shop3_addr), "pod to pod across nodes");

    // With an egress IP on node2 (which has no `shop` pod), shop's outside traffic crosses
    // node2's table 100 too: node2 holds shop's firewall, B stays denied by name, A is
    // reached from the egress IP.
    let eip = std::net::Ipv4Addr::from(u32::from(a_ip) & 0xffff_ff00 | 150);
    c.ctl(&[
        "patch",
        "hostsubnet",
        "node2",
        &format!("--egress-ips={eip}"),
    ]);
    c.ctl(&[
        "patch",
        "netnamespace",
        "shop",
        &format!("--egress-ips={eip}"),
    ]);
    let v = c
        .ctl
        .ctl_json(&c.lab, &["get", "netnamespaces", "shop"])
        .expect("get netnamespaces");
    let netid = v
        .get(0)
        .unwrap_or(&v)
        .get("netid")
        .and_then(serde_json::Value::as_u64)
        .expect("shop's NETID");
    let node2_fw = || {
        let flows = c.ctl(&["dump-flows", "node2", "--installed"]);
        flows
            .lines()
            .filter(|l| {
                l.contains("table=100")
                    && l.split([',', ' ']).any(|t| t == format!("reg0={netid:#x}"))
            })
            .count()
    };
    settles(true, "node2 holds shop's firewall", limit, || {
        node2_fw() >= 2
    });
    let from_eip = || {
        tcp_probe(&shop1.ns, a, b"hello", Duration::from_millis(500))
            .expect("tcp probe")
            .is_some_and(|r| String::from_utf8_lossy(&r).contains(&format!("peer={eip}:")))
    };
    settles(true, "A reached from the egress IP", limit, from_eip);
    assert!(
        !reaches(&shop1.ns, b),
        "B denied by name on the egress path"
    );
    assert!(
        !reaches(&shop3.ns, b),
        "B denied by name on the egress path from node 3"
    );
    c.ctl(&["patch", "netnamespace", "shop", "--egress-ips="]);
    c.ctl(&["patch", "hostsubnet", "node2", "--egress-ips="]);

    // Deleting the firewall opens everything again.
    c.ctl(&["delete", "egressnetworkpolicy", "shop/default"]);
    settles(true, "B reachable without a firewall", limit, || {
        reaches(&shop1.ns, b)
    });
    assert!(reaches(&shop1.ns, a));
    assert!(reaches(&web1.ns, a) && reaches(&web1.ns, b));
    drop(dns);
}
