//! Services through the host's kube-proxy, with real packets: a `NetnsLab` of 3 nodes
//! (userspace datapath), the real controller, a shim per node, pods made by `flowmesh-cni`.
//! The test plays kube-proxy: it installs on every node the nat rules kube-proxy's iptables
//! mode writes for a ClusterIP service (`KUBE-SERVICES` → `KUBE-SVC-…` → `KUBE-SEP-…` with
//! `-m statistic --mode random` and `DNAT --to-destination`, plus `KUBE-MARK-MASQ` /
//! `KUBE-POSTROUTING`) with one endpoint on node 1 and one on node 2. Then:
//! * multitenant: TCP from pods of the service's project on all three nodes reaches both
//!   endpoints (local and remote), which see the client pod's own address; a pod of another
//!   project is refused, and reaches the service once its project joins the service's;
//! * networkpolicy: the endpoints' ingress policy is judged on the real client address
//!   (after the host's DNAT): a labelled client is served, another is refused; the clients'
//!   own namespace denies all ingress, and the service's answers still reach them.
//!
//! The nodes run with strict reverse-path filtering (`rp_filter=1`): everything the host
//! receives from tun0 has a source it routes through tun0.
//!
//! Also checks the shim's host firewall rules (`ip flowmesh` input chain: the VXLAN port and
//! tun0, nothing else). With the userspace datapath VXLAN never crosses the host's INPUT
//! hook (OVS sends and receives it on its own `br-phy` tap), so the VXLAN rule's effect is
//! not exercised here, only its presence.
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test e2e_services`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use flowmesh_tests::cni::CniPod;
use flowmesh_tests::e2e::{tcp_probe, CniCluster, ControllerOptions, TcpServer};

const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 10);
const SERVICE_PORT: u16 = 80;
const ENDPOINT_PORT: u16 = 8080;
const CLUSTER_CIDR: &str = "10.128.0.0/14";
/// Connections per client: with two endpoints chosen at random, both are seen unless
/// something is wrong (a miss has probability 2 × 2⁻²⁴).
const CONNECTIONS: usize = 24;

/// The nat rules kube-proxy (iptables mode) writes for ClusterIP `SERVICE_IP:SERVICE_PORT`
/// of `ns/name` with `endpoints` (port `ENDPOINT_PORT`), in `iptables-restore` form.
fn kube_proxy_rules(ns: &str, name: &str, endpoints: &[Ipv4Addr]) -> String {
    let svc = format!("{ns}/{name}:http");
    let svc_chain = "KUBE-SVC-FLOWMESHTEST0001";
    let sep = |i: usize| format!("KUBE-SEP-FLOWMESHTEST{i:04}");
    let mut r = String::from(
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n",
    );
    r += &format!(":{svc_chain} - [0:0]\n");
    for i in 0..endpoints.len() {
        r += &format!(":{} - [0:0]\n", sep(i));
    }
    r += "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
          -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
          -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
          -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n\
          -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
          -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n\
          -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" \
          -j MASQUERADE --random-fully\n";
    r += &format!(
        "-A KUBE-SERVICES -d {SERVICE_IP}/32 -p tcp -m comment --comment \"{svc} cluster IP\" \
         -m tcp --dport {SERVICE_PORT} -j {svc_chain}\n\
         -A {svc_chain} ! -s {CLUSTER_CIDR} -d {SERVICE_IP}/32 -p tcp -m comment --comment \
         \"{svc} cluster IP\" -m tcp --dport {SERVICE_PORT} -j KUBE-MARK-MASQ\n"
    );
    let n = endpoints.len();
    for (i, ep) in endpoints.iter().enumerate() {
        let statistic = if i + 1 < n {
            format!(
                " -m statistic --mode random --probability {:.11}",
                1.0 / (n - i) as f64
            )
        } else {
            String::new()
        };
        r += &format!(
            "-A {svc_chain} -m comment --comment \"{svc} -> {ep}:{ENDPOINT_PORT}\"{statistic} \
             -j {}\n",
            sep(i)
        );
    }
    for (i, ep) in endpoints.iter().enumerate() {
        r += &format!(
            "-A {s} -s {ep}/32 -m comment --comment \"{svc}\" -j KUBE-MARK-MASQ\n\
             -A {s} -p tcp -m comment --comment \"{svc}\" -m tcp -j DNAT --to-destination \
             {ep}:{ENDPOINT_PORT}\n",
            s = sep(i)
        );
    }
    r += "COMMIT\n";
    r
}

/// Installs the rules on every node, as kube-proxy would on each, and turns strict
/// reverse-path filtering on (a hardened host's setting; the shim changes none).
fn install_kube_proxy(c: &CniCluster, rules: &str) {
    let path = c.lab.run_dir().join("kube-proxy.rules");
    std::fs::write(&path, rules).unwrap_or_else(|e| c.fail(&format!("write rules: {e}")));
    for i in 1..=3 {
        let node = c.lab.node(i).unwrap_or_else(|e| c.fail(&format!("{e}")));
        c.lab
            .run_in(
                node.ns(),
                "sysctl",
                &[
                    "-w",
                    "net.ipv4.conf.all.rp_filter=1",
                    "net.ipv4.conf.tun0.rp_filter=1",
                ],
            )
            .unwrap_or_else(|e| c.fail(&format!("rp_filter on node {i}: {e}")));
        c.lab
            .run_in(
                node.ns(),
                "iptables-restore",
                &["--noflush", &path.to_string_lossy()],
            )
            .unwrap_or_else(|e| c.fail(&format!("iptables-restore on node {i}: {e}")));
    }
}

/// One TCP exchange with the service from `client`: the endpoint's answer (`NAME peer=IP:PORT`)
/// or None.
fn call(client: &CniPod, timeout: Duration) -> Option<String> {
    tcp_probe(
        &client.ns,
        SocketAddrV4::new(SERVICE_IP, SERVICE_PORT),
        b"hello",
        timeout,
    )
    .expect("tcp probe")
    .map(|a| String::from_utf8_lossy(&a).into_owned())
    .filter(|a| !a.is_empty())
}

/// `CONNECTIONS` calls from `client`; how many each endpoint answered. Every answer must show
/// the client's own address as the peer (no SNAT on the way).
fn spread(c: &CniCluster, client: &CniPod) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for k in 0..CONNECTIONS {
        let Some(answer) = call(client, Duration::from_secs(3)) else {
            c.fail(&format!(
                "{} (node {}): call {k} to {SERVICE_IP}:{SERVICE_PORT} got no answer; seen {seen:?}\n{}",
                client.ns,
                client.node,
                diagnostics(c)
            ));
        };
        let (name, peer) = answer
            .split_once(" peer=")
            .unwrap_or_else(|| c.fail(&format!("odd answer {answer:?}")));
        assert!(
            peer.starts_with(&format!("{}:", client.ip)),
            "{name} saw peer {peer}, not the client {}",
            client.ip
        );
        *seen.entry(name.to_owned()).or_default() += 1;
    }
    seen
}

/// Whether `client` is refused (two tries, no answer).
fn refused(client: &CniPod) -> bool {
    (0..2).all(|_| call(client, Duration::from_millis(1500)).is_none())
}

/// Waits up to 15 s for `f` to become `want`.
fn settles(c: &CniCluster, want: bool, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while f() != want {
        if t0.elapsed() > Duration::from_secs(15) {
            c.fail(&format!("{what}: still {} after 15 s", !want));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Flow counters of the service flows and the host's conntrack view, for failure messages.
fn diagnostics(c: &CniCluster) -> String {
    let mut out = String::new();
    for i in 1..=3 {
        let Ok(node) = c.lab.node(i) else { continue };
        let flows = node
            .ovs()
            .ofctl(["dump-flows", c.lab.bridge()])
            .unwrap_or_default();
        out += &format!("---- node {i} flows (t0 p>=1000, t31, t60) ----\n");
        for l in flows
            .lines()
            .filter(|l| l.contains("zone=1") || l.contains("table=31,") || l.contains("table=60,"))
        {
            out += l;
            out += "\n";
        }
        let nat = c
            .lab
            .run_in(node.ns(), "iptables", &["-t", "nat", "-L", "-v", "-n"])
            .unwrap_or_default();
        out += &format!("---- node {i} iptables nat ----\n{nat}");
    }
    out
}

/// Two endpoints (node 1, node 2) of namespace `ns` with TCP servers named after them.
fn endpoints(c: &CniCluster, ns: &str) -> (Vec<CniPod>, Vec<TcpServer>) {
    let eps: Vec<CniPod> = [(1, "ep-1"), (2, "ep-2")]
        .into_iter()
        .map(|(node, name)| c.add_cni_pod(node, ns, name))
        .collect();
    let servers = eps
        .iter()
        .zip(["ep-1", "ep-2"])
        .map(|(p, name)| {
            TcpServer::start(&p.ns, p.ip, ENDPOINT_PORT, name)
                .unwrap_or_else(|e| c.fail(&format!("server {name}: {e}")))
        })
        .collect();
    (eps, servers)
}

#[test]
fn cluster_ip_through_kube_proxy_multitenant() {
    let t0 = Instant::now();
    let c = CniCluster::start(&ControllerOptions::multitenant());
    c.ctl(&["namespace", "create", "web"]);
    c.ctl(&["namespace", "create", "other"]);
    let (eps, _servers) = endpoints(&c, "web");
    let clients: Vec<CniPod> = (1..=3)
        .map(|n| c.add_cni_pod(n, "web", &format!("client-{n}")))
        .collect();
    let stranger = c.add_cni_pod(3, "other", "stranger");
    let stranger_local = c.add_cni_pod(1, "other", "stranger-1");
    let ips: Vec<Ipv4Addr> = eps.iter().map(|p| p.ip).collect();
    install_kube_proxy(&c, &kube_proxy_rules("web", "web", &ips));

    // The host firewall chains of the shim: exactly the VXLAN port and tun0.
    let node1 = c.lab.node(1).unwrap_or_else(|e| c.fail(&format!("{e}")));
    let table = c
        .lab
        .run_in(node1.ns(), "nft", &["list", "table", "ip", "flowmesh"])
        .unwrap_or_else(|e| c.fail(&format!("nft: {e}")));
    let chain = |name: &str| -> Vec<String> {
        let start = format!("chain {name} {{");
        table
            .split(&start)
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    };
    assert_eq!(
        chain("input"),
        [
            "type filter hook input priority filter; policy accept;",
            "udp dport 4789 accept",
            "iifname \"tun0\" accept",
        ],
        "{table}"
    );

    // Every client of the project reaches both endpoints, local and remote.
    for client in &clients {
        let seen = spread(&c, client);
        eprintln!("client on node {}: {seen:?}", client.node);
        assert_eq!(
            seen.keys().map(String::as_str).collect::<Vec<_>>(),
            ["ep-1", "ep-2"],
            "client on node {} did not reach both endpoints: {seen:?}",
            client.node
        );
    }
    // Another project's pods are refused, on an endpoint's node and elsewhere ...
    assert!(refused(&stranger), "a pod of another project was served");
    assert!(
        refused(&stranger_local),
        "a pod of another project on an endpoint's node was served"
    );
    // ... until their project joins the service's.
    c.ctl(&["adm", "pod-network", "join-projects", "--to=web", "other"]);
    settles(&c, true, "the joined project reaches the service", || {
        call(&stranger, Duration::from_secs(2)).is_some()
    });
    let seen = spread(&c, &stranger);
    assert_eq!(seen.len(), 2, "joined: {seen:?}");
    eprintln!(
        "e2e_services multitenant: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn cluster_ip_through_kube_proxy_networkpolicy() {
    let t0 = Instant::now();
    let c = CniCluster::start(&ControllerOptions::networkpolicy());
    c.ctl(&["namespace", "create", "web"]);
    c.ctl(&["namespace", "create", "clients"]);
    let (eps, _servers) = endpoints(&c, "web");
    let good: Vec<CniPod> = [1, 3]
        .into_iter()
        .map(|n| {
            let p = c.add_cni_pod(n, "clients", &format!("good-{n}"));
            c.ctl(&["label", "pod", &format!("clients/good-{n}"), "app=good"]);
            p
        })
        .collect();
    let bad = c.add_cni_pod(3, "clients", "bad-3");
    let ips: Vec<Ipv4Addr> = eps.iter().map(|p| p.ip).collect();
    install_kube_proxy(&c, &kube_proxy_rules("web", "web", &ips));

    // The clients accept no connection; the endpoints only from pods labelled app=good.
    c.apply(
        "policies",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny-all\n  \
         namespace: clients\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: from-good\n  \
         namespace: web\nspec:\n  podSelector: {}\n  ingress:\n  - from:\n    \
         - namespaceSelector: {}\n      podSelector:\n        matchLabels:\n          app: good\n",
    );
    settles(&c, false, "policies applied: bad-3 refused", || {
        call(&bad, Duration::from_millis(1500)).is_some()
    });
    for client in &good {
        let seen = spread(&c, client);
        eprintln!("good client on node {}: {seen:?}", client.node);
        assert_eq!(seen.len(), 2, "node {}: {seen:?}", client.node);
    }
    assert!(refused(&bad), "an unlabelled client was served");
    eprintln!(
        "e2e_services networkpolicy: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}
