//! Egress IPs with real packets: a `NetnsLab` of 3 nodes (userspace datapath), the real
//! controller (multitenant), a shim per node, pods made by `flowmesh-cni`, and an "outside"
//! host namespace on the underlay running a TCP service and a UDP service that both answer
//! with the source address they see (the UDP one also records every datagram, for probes).
//!
//! * `egress_ips_carry_a_namespaces_outside_traffic`: manual egress IP on node2; pods of `shop`
//!   on nodes 1, 2 and 3 reach the outside host from the egress IP (TCP and UDP), `web` from
//!   its node's address; pod-to-pod and pod-to-"service" (an address on the pod's own host)
//!   unchanged; the outside host cannot open a connection to the egress IP; two egress IPs
//!   share new connections; an egress IP removed behind the shim's back comes back; controller
//!   and shims restarted with unchanged state: no flow mod, no address or nftables change, no
//!   probe lost; clearing the egress IPs releases everything.
//! * `automatic_failover_moves_the_ip_without_leaking`: egressCIDRs on nodes 2 and 3; a pod
//!   probes every 20 ms; node2 is killed (underlay link down, shim and OVS stopped); the gap
//!   until probes come from the egress IP via node3 is printed; no probe ever came from a
//!   node's own address; node2 back: the IP stays on node3, node2 holds nothing.
//! * `manual_failover_then_no_usable_node_drops`: two nodes listed; the one carrying the
//!   probes is killed and the other one's IP takes over; then that one is killed too: probes
//!   stop, none leaks.
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test e2e_egressip --
//! --test-threads 1 --nocapture`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use flowmesh_tests::cni::CniPod;
use flowmesh_tests::e2e::{tcp_probe, CniCluster, ControllerOptions, TcpServer};
use flowmesh_tests::egress::{
    add_outside_host, failover, kill_node, revive_node, udp_source, underlay_addr, wait_for,
    Prober, UdpRecorder,
};

const TCP_PORT: u16 = 8080;
const OUTSIDE_TCP: u16 = 9099;
const OUTSIDE_UDP: u16 = 9100;

struct Lab {
    c: CniCluster,
    out_ns: String,
    out_ip: Ipv4Addr,
    tcp: TcpServer,
    udp: UdpRecorder,
    node_ips: Vec<Ipv4Addr>,
    servers: Vec<TcpServer>,
}

impl Lab {
    fn start() -> Lab {
        // The controller's defaults: a node whose link goes down is found by the egress probe
        // (ICMP to its underlay address, offline after 0.5 s of silence), not by the
        // OpenFlow echo (generous: 5 s + 15 s).
        let opts = ControllerOptions::multitenant();
        let c = CniCluster::start(&opts);
        let (out_ns, out_ip) =
            add_outside_host(&c.lab).unwrap_or_else(|e| c.fail(&format!("outside host: {e}")));
        let tcp = TcpServer::start(&out_ns, out_ip, OUTSIDE_TCP, "outside")
            .unwrap_or_else(|e| c.fail(&format!("outside TCP: {e}")));
        let udp = UdpRecorder::start(&out_ns, out_ip, OUTSIDE_UDP)
            .unwrap_or_else(|e| c.fail(&format!("outside UDP: {e}")));
        let node_ips = (1..=3).map(|i| c.lab.underlay_ip(i)).collect();
        Lab {
            c,
            out_ns,
            out_ip,
            tcp,
            udp,
            node_ips,
            servers: Vec::new(),
        }
    }

    fn eip(&self, last: u8) -> Ipv4Addr {
        underlay_addr(&self.c.lab, last)
    }

    fn pod(&mut self, node: usize, ns: &str, name: &str) -> CniPod {
        let p = self.c.add_cni_pod(node, ns, name);
        let srv = TcpServer::start(&p.ns, p.ip, TCP_PORT, name)
            .unwrap_or_else(|e| self.c.fail(&format!("TCP server {name}: {e}")));
        self.servers.push(srv);
        p
    }

    /// The source the outside host's TCP service reports for a connection from `ns`.
    fn tcp_src(&self, ns: &str) -> Option<Ipv4Addr> {
        let out = SocketAddrV4::new(self.out_ip, OUTSIDE_TCP);
        let r = tcp_probe(ns, out, b"hi", Duration::from_millis(700)).expect("tcp probe")?;
        let text = String::from_utf8_lossy(&r).into_owned();
        let peer = text.split("peer=").nth(1)?.split(':').next()?.to_owned();
        peer.parse().ok()
    }

    /// The source the outside host's UDP service reports for a datagram from `ns`.
    fn udp_src(&self, ns: &str) -> Option<Ipv4Addr> {
        let out = SocketAddrV4::new(self.out_ip, OUTSIDE_UDP);
        let r = udp_source(ns, out, 3, Duration::from_millis(300)).expect("udp probe")?;
        r.strip_prefix("src=")?.split(':').next()?.parse().ok()
    }

    fn leaked_tcp(&self, from: usize) -> Vec<std::net::SocketAddr> {
        self.tcp.peers()[from..]
            .iter()
            .filter(|a| matches!(a.ip(), std::net::IpAddr::V4(v) if self.node_ips.contains(&v)))
            .copied()
            .collect()
    }

    fn node_ns(&self, i: usize) -> String {
        self.c.lab.node(i).expect("node").ns().to_owned()
    }

    /// `nft -a list table ip flowmesh-egress` (rule handles change when anything is rewritten)
    /// and the node's IPv4 addresses.
    fn host_state(&self, i: usize) -> String {
        let ns = self.node_ns(i);
        let nft = self
            .c
            .lab
            .exec_in(
                &ns,
                "nft",
                &["-a", "list", "table", "ip", "flowmesh-egress"],
            )
            .expect("nft");
        let nft2 = self
            .c
            .lab
            .exec_in(&ns, "nft", &["-a", "list", "table", "ip", "flowmesh"])
            .expect("nft");
        let addrs = self
            .c
            .lab
            .run_in(&ns, "ip", &["-4", "-o", "addr", "show"])
            .expect("ip addr");
        format!(
            "{}\n{}\n{addrs}",
            String::from_utf8_lossy(&nft.stdout),
            String::from_utf8_lossy(&nft2.stdout)
        )
    }

    /// `nft list table ip flowmesh-egress` on node `i`.
    fn egress_table(&self, i: usize) -> String {
        let ns = self.node_ns(i);
        let out = self
            .c
            .lab
            .exec_in(&ns, "nft", &["list", "table", "ip", "flowmesh-egress"])
            .expect("nft");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn holds(&self, i: usize, ip: Ipv4Addr) -> bool {
        let ns = self.node_ns(i);
        self.c
            .lab
            .run_in(&ns, "ip", &["-4", "-o", "addr", "show"])
            .expect("ip addr")
            .contains(&format!(" {ip}/32 "))
    }

    /// The node `ip` is placed on, as `get netnamespaces` shows it (`IP@NODE`).
    fn placed_on(&self, ns: &str, ip: Ipv4Addr) -> Option<String> {
        let shown = self.c.ctl(&["get", "netnamespaces", ns]);
        let tag = format!("{ip}@");
        let at = shown.find(&tag)? + tag.len();
        let node: String = shown[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        Some(node)
    }
}

fn settle<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    let v = wait_for(Duration::from_secs(10), f).unwrap_or_else(|| panic!("{what}: never"));
    println!("{what}: after {:?}", t.elapsed());
    v
}

fn metric(c: &CniCluster, name: &str) -> Option<f64> {
    let m = c.ctl.metrics_text(&c.lab).ok()?;
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn egress_ips_carry_a_namespaces_outside_traffic() {
    let mut l = Lab::start();
    l.c.ctl(&["namespace", "create", "shop"]);
    l.c.ctl(&["namespace", "create", "web"]);
    let shop: Vec<CniPod> = (1..=3)
        .map(|i| l.pod(i, "shop", &format!("shop-{i}")))
        .collect();
    let web1 = l.pod(1, "web", "web-1");
    let node1 = l.c.lab.underlay_ip(1);

    // Without egress IPs: the outside host sees node1's address.
    let src = settle("shop-1 reaches the outside host", || l.tcp_src(&shop[0].ns));
    assert_eq!(src, node1);

    // shop gets an egress IP hosted by node2.
    let eip1 = l.eip(100);
    l.c.ctl(&[
        "patch",
        "hostsubnet",
        "node2",
        &format!("--egress-ips={eip1}"),
    ]);
    l.c.ctl(&[
        "patch",
        "netnamespace",
        "shop",
        &format!("--egress-ips={eip1}"),
    ]);
    let shown = l.c.ctl(&["get", "netnamespaces", "shop"]);
    assert!(shown.contains(&format!("{eip1}@node2")), "{shown}");
    settle("shop-1 leaves from the egress IP", || {
        (l.tcp_src(&shop[0].ns) == Some(eip1)).then_some(())
    });
    assert!(l.holds(2, eip1), "node2 holds {eip1}");
    // Removed behind the shim's back: the next reconcile puts it back.
    let n2ns = l.node_ns(2);
    l.c.lab
        .run_in(
            &n2ns,
            "ip",
            &["addr", "del", &format!("{eip1}/32"), "dev", "br-phy"],
        )
        .expect("remove the egress IP");
    assert!(!l.holds(2, eip1));
    settle("node2's shim re-adds the egress IP", || {
        l.holds(2, eip1).then_some(())
    });
    for p in &shop {
        for _ in 0..3 {
            assert_eq!(l.tcp_src(&p.ns), Some(eip1), "{} over TCP", p.ns);
        }
        assert_eq!(l.udp_src(&p.ns), Some(eip1), "{} over UDP", p.ns);
    }
    // web leaves from its own node; shop's pod-to-pod traffic is unchanged.
    assert_eq!(l.tcp_src(&web1.ns), Some(node1), "web-1");
    assert_eq!(l.udp_src(&web1.ns), Some(node1), "web-1 over UDP");
    let to_shop3 = tcp_probe(
        &shop[0].ns,
        SocketAddrV4::new(shop[2].ip, TCP_PORT),
        b"x",
        Duration::from_secs(2),
    )
    .expect("probe")
    .map(|r| String::from_utf8_lossy(&r).into_owned())
    .unwrap_or_default();
    assert!(
        to_shop3.contains(&format!("peer={}:", shop[0].ip)),
        "shop-1 reaches shop-3 from its own address: {to_shop3:?}"
    );
    // Service traffic goes to the pod's own host (kube-proxy's place) with the pod's address:
    // a "service" address held by node1's host answers.
    let svc = Ipv4Addr::new(172, 30, 0, 10);
    let n1 = l.node_ns(1);
    l.c.lab
        .run_in(
            &n1,
            "ip",
            &["addr", "add", &format!("{svc}/32"), "dev", "lo"],
        )
        .expect("service address");
    let svc_srv = TcpServer::start(&n1, svc, 80, "svc").expect("service server");
    let via_svc = tcp_probe(
        &shop[0].ns,
        SocketAddrV4::new(svc, 80),
        b"x",
        Duration::from_secs(2),
    )
    .expect("probe")
    .map(|r| String::from_utf8_lossy(&r).into_owned())
    .unwrap_or_default();
    assert!(
        via_svc.contains(&format!("peer={}:", shop[0].ip)),
        "shop-1 reaches the service on its host unchanged: {via_svc:?}"
    );
    drop(svc_srv);

    // The outside host cannot open a connection to the egress IP (a listener there exists),
    // while the node's own address still accepts.
    let n2 = l.node_ns(2);
    let on_eip = TcpServer::start(&n2, eip1, 7000, "on-eip").expect("listener on the egress IP");
    let on_node = TcpServer::start(&n2, l.c.lab.underlay_ip(2), 7000, "on-node").expect("listener");
    let inbound = |dst: Ipv4Addr| {
        tcp_probe(
            &l.out_ns,
            SocketAddrV4::new(dst, 7000),
            b"x",
            Duration::from_millis(700),
        )
        .expect("probe")
        .is_some()
    };
    assert!(
        inbound(l.c.lab.underlay_ip(2)),
        "node2's own address accepts"
    );
    assert!(
        !inbound(eip1),
        "a new inbound connection to the egress IP is rejected"
    );
    assert!(on_eip.peers().is_empty());
    drop((on_eip, on_node));

    // Two egress IPs (node2 and node3) share new connections.
    let eip2 = l.eip(101);
    l.c.ctl(&[
        "patch",
        "hostsubnet",
        "node3",
        &format!("--egress-ips={eip2}"),
    ]);
    l.c.ctl(&[
        "patch",
        "netnamespace",
        "shop",
        &format!("--egress-ips={eip1},{eip2}"),
    ]);
    settle("node3 holds the second egress IP", || {
        l.holds(3, eip2).then_some(())
    });
    let seen_tcp = l.tcp.peers().len();
    let mut srcs = std::collections::BTreeMap::new();
    let t0 = Instant::now();
    while srcs.len() < 2 && t0.elapsed() < Duration::from_secs(20) {
        let s = l.tcp_src(&shop[0].ns);
        *srcs.entry(s).or_insert(0u32) += 1;
    }
    println!("sources of shop-1's connections: {srcs:?}");
    assert!(
        srcs.contains_key(&Some(eip1)) && srcs.contains_key(&Some(eip2)),
        "{srcs:?}"
    );
    assert!(
        srcs.keys().all(|k| *k == Some(eip1) || *k == Some(eip2)),
        "only egress IPs: {srcs:?}"
    );
    assert_eq!(
        l.leaked_tcp(seen_tcp),
        vec![],
        "shop connections from node addresses"
    );

    // Controller and shims restarted with unchanged state, while shop-1 probes.
    let out = SocketAddrV4::new(l.out_ip, OUTSIDE_UDP);
    let prober = Prober::start(&shop[0].ns, out, Duration::from_millis(20)).expect("prober");
    settle("probes arrive", || {
        l.udp
            .arrivals()
            .iter()
            .any(|a| a.seq > 0 && (a.src == eip1 || a.src == eip2))
            .then_some(())
    });
    let first_seq = prober.sent();
    let before: Vec<String> = (1..=3).map(|i| l.host_state(i)).collect();
    l.c.ctl.stop(&l.c.lab);
    for i in 1..=3 {
        let pid = l.c.shims[i - 1].pid;
        l.c.lab.stop_process(pid);
    }
    l.c.ctl.spawn(&l.c.lab).expect("controller restart");
    let so = l.c.ctl.shim_options();
    for i in 1..=3 {
        l.c.shims[i - 1] = flowmesh_tests::cni::start_shim(&l.c.lab, i, &so).expect("shim restart");
    }
    l.c.wait_all_synced("switches after restart");
    // A window past the shims' first reconcile with a list from the controller, in which a
    // reconcile that changed something would show: an unchanged reconcile logs nothing, so
    // there is no event to wait on, and that nothing changes is what is tested.
    std::thread::sleep(Duration::from_secs(3));
    let last_seq = prober.sent();
    // The last probe counted has arrived (a lost one never does; the check below says which).
    wait_for(Duration::from_secs(10), || {
        l.udp
            .arrivals()
            .iter()
            .any(|a| a.seq >= last_seq)
            .then_some(())
    });
    drop(prober);
    assert_eq!(
        metric(&l.c, "flowmesh_flow_mods_sent_total"),
        Some(0.0),
        "no flow mod"
    );
    for i in 1..=3 {
        assert_eq!(
            l.host_state(i),
            before[i - 1],
            "node{i}: addresses or nftables changed"
        );
    }
    let got: std::collections::BTreeSet<u64> = l
        .udp
        .arrivals()
        .iter()
        .filter(|a| a.seq >= first_seq && a.seq <= last_seq)
        .map(|a| a.seq)
        .collect();
    let lost: Vec<u64> = (first_seq..=last_seq)
        .filter(|s| !got.contains(s))
        .collect();
    println!(
        "restart: probes {first_seq}..={last_seq}, lost {}",
        lost.len()
    );
    assert!(lost.is_empty(), "probes lost across the restart: {lost:?}");
    assert!(
        l.udp
            .arrivals()
            .iter()
            .all(|a| a.seq == 0 || !l.node_ips.contains(&a.src)),
        "a probe came from a node address"
    );

    // Cleared: back to the node's address, and the egress nodes hold nothing.
    l.c.ctl(&["patch", "netnamespace", "shop", "--egress-ips="]);
    settle("shop-1 leaves from node1 again", || {
        (l.tcp_src(&shop[0].ns) == Some(node1)).then_some(())
    });
    // The shim removes the address and then rewrites its nftables table: wait for both.
    settle("node2 and node3 released their egress IPs", || {
        (!l.holds(2, eip1)
            && !l.holds(3, eip2)
            && [2, 3]
                .iter()
                .all(|i| !l.egress_table(*i).contains("elements")))
        .then_some(())
    });
    for i in [2, 3] {
        let s = l.egress_table(i);
        assert!(
            !s.contains("elements"),
            "node{i} egress set not empty:\n{s}"
        );
        assert!(!s.contains("snat to"), "node{i} still SNATs:\n{s}");
    }
}

#[test]
fn automatic_failover_moves_the_ip_without_leaking() {
    let mut l = Lab::start();
    l.c.ctl(&["namespace", "create", "shop"]);
    let shop1 = l.pod(1, "shop", "shop-1");
    let eip = l.eip(100);
    let range = format!("--egress-cidrs={}/24", l.eip(0));
    for n in ["node2", "node3"] {
        l.c.ctl(&["patch", "hostsubnet", n, &range]);
    }
    l.c.ctl(&[
        "patch",
        "netnamespace",
        "shop",
        &format!("--egress-ips={eip}"),
    ]);
    assert_eq!(l.placed_on("shop", eip).as_deref(), Some("node2"));
    let out = SocketAddrV4::new(l.out_ip, OUTSIDE_UDP);
    let prober = Prober::start(&shop1.ns, out, Duration::from_millis(20)).expect("prober");
    settle("probes arrive from the egress IP", || {
        l.udp.arrivals().iter().any(|a| a.src == eip).then_some(())
    });
    // Half a second of probes through node2 before it dies: the baseline the failover's gap
    // is measured against (a window by design, not a wait for something).
    std::thread::sleep(Duration::from_millis(500));

    let killed = kill_node(&mut l.c, 2).expect("kill node2");
    settle("probes arrive again", || {
        let f = failover(&l.udp.arrivals(), killed, eip, &l.node_ips);
        f.gap.map(|_| ())
    });
    // A window after the failover in which a probe leaking from a node's own address would
    // be seen: that none does is what is tested.
    std::thread::sleep(Duration::from_millis(500));
    let f = failover(&l.udp.arrivals(), killed, eip, &l.node_ips);
    println!(
        "automatic failover: gap {:?}, {} probes from {eip} since, {} leaked",
        f.gap, f.after, f.leaked
    );
    assert_eq!(f.leaked, 0, "probes from a node's own address");
    assert_eq!(l.placed_on("shop", eip).as_deref(), Some("node3"));
    assert!(l.holds(3, eip), "node3 holds {eip}");
    // The outside host learnt the new holder from the gratuitous ARP: answers come back.
    let mac3 = l.c.lab.node(3).expect("node3").phy_mac().to_owned();
    let neigh = || {
        l.c.lab
            .run_in(&l.out_ns, "ip", &["neigh", "show", &eip.to_string()])
            .expect("ip neigh")
    };
    let learnt = wait_for(Duration::from_secs(5), || {
        neigh().contains(&mac3).then_some(())
    });
    assert!(
        learnt.is_some(),
        "the outside host's ARP entry for {eip} is not node3's ({mac3}): {}\n---- node3 shim ----\n{}",
        neigh(),
        flowmesh_tests::cni::log_tail(&l.c.shims[2].log, 20)
    );
    assert_eq!(l.tcp_src(&shop1.ns), Some(eip), "TCP through node3");

    // node2 back: the IP stays on node3; node2's shim releases what its table still lists.
    revive_node(&mut l.c, 2).expect("revive node2");
    l.c.wait_all_synced("switches");
    let released = wait_for(Duration::from_secs(10), || {
        let s = l.egress_table(2);
        (!s.is_empty() && !s.contains("elements") && !l.holds(2, eip)).then_some(())
    });
    assert!(
        released.is_some(),
        "node2 still holds egress state:\n{}\n---- shim log ----\n{}",
        l.egress_table(2),
        flowmesh_tests::cni::log_tail(&l.c.shims[1].log, 30)
    );
    // A window in which the revived node2 could take the IP back: that it stays on node3
    // is what is tested.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(l.placed_on("shop", eip).as_deref(), Some("node3"));
    let n = l.udp.arrivals().len();
    let more = wait_for(Duration::from_secs(10), || {
        (l.udp.arrivals().len() >= n + 10).then_some(())
    });
    let recent = l.udp.arrivals();
    assert!(
        more.is_some(),
        "probes still arrive: {} since",
        recent.len() - n
    );
    assert!(
        recent[n..].iter().all(|a| a.src == eip),
        "{:?}",
        &recent[n..]
    );
    drop(prober);
    assert!(
        l.udp
            .arrivals()
            .iter()
            .all(|a| a.seq == 0 || !l.node_ips.contains(&a.src)),
        "a probe came from a node address"
    );

    // node3 taken out of the cluster (its shim stopped, then `flowmesh-shim --uninstall`):
    // the egress IP it held goes with it, not just the table that recorded it.
    l.c.lab.stop_process(l.c.shims[2].pid);
    let removed = flowmesh_tests::cni::shim_uninstall(&l.c.lab, 3, &l.c.ctl.shim_options())
        .expect("uninstall node3");
    println!("uninstall node3: {removed:?}");
    assert!(removed.contains(&format!("egress IP {eip}")), "{removed:?}");
    assert!(
        !l.holds(3, eip),
        "node3 still holds {eip} after --uninstall"
    );
}

#[test]
fn manual_failover_then_no_usable_node_drops() {
    let mut l = Lab::start();
    l.c.ctl(&["namespace", "create", "shop"]);
    let shop1 = l.pod(1, "shop", "shop-1");
    let (eip2, eip3) = (l.eip(102), l.eip(103));
    l.c.ctl(&[
        "patch",
        "hostsubnet",
        "node2",
        &format!("--egress-ips={eip2}"),
    ]);
    l.c.ctl(&[
        "patch",
        "hostsubnet",
        "node3",
        &format!("--egress-ips={eip3}"),
    ]);
    l.c.ctl(&[
        "patch",
        "netnamespace",
        "shop",
        &format!("--egress-ips={eip2},{eip3}"),
    ]);
    let out = SocketAddrV4::new(l.out_ip, OUTSIDE_UDP);
    let prober = Prober::start(&shop1.ns, out, Duration::from_millis(20)).expect("prober");
    let carrier = settle("probes arrive from an egress IP", || {
        l.udp
            .arrivals()
            .iter()
            .rev()
            .find(|a| a.src == eip2 || a.src == eip3)
            .map(|a| a.src)
    });
    // A baseline of probes through the first carrier before it dies (a window by design).
    std::thread::sleep(Duration::from_millis(300));
    let (first, other, other_ip) = if carrier == eip2 {
        (2, 3, eip3)
    } else {
        (3, 2, eip2)
    };
    let killed = kill_node(&mut l.c, first).expect("kill");
    settle("the other egress node takes over", || {
        failover(&l.udp.arrivals(), killed, other_ip, &l.node_ips).gap
    });
    let f = failover(&l.udp.arrivals(), killed, other_ip, &l.node_ips);
    println!(
        "manual failover node{first} -> node{other}: gap {:?}",
        f.gap
    );
    assert_eq!(f.leaked, 0);

    // No usable node left: probes stop and none leaks.
    let killed = kill_node(&mut l.c, other).expect("kill the second");
    // A window in which nothing may arrive 1.5 s after the kill: what is tested.
    std::thread::sleep(Duration::from_secs(3));
    let late: Vec<_> = l
        .udp
        .arrivals()
        .into_iter()
        .filter(|a| a.at > killed + Duration::from_millis(1500))
        .collect();
    drop(prober);
    assert!(
        late.is_empty(),
        "probes still arrive with no usable egress node: {late:?}"
    );
    assert!(
        l.udp
            .arrivals()
            .iter()
            .all(|a| a.seq == 0 || !l.node_ips.contains(&a.src)),
        "a probe came from a node address"
    );
    let shown = l.c.ctl(&["get", "netnamespaces", "shop"]);
    println!("{shown}");
}
