//! NetworkPolicy end to end with real packets: a `NetnsLab` of 3 nodes (userspace datapath),
//! the real controller in networkpolicy mode, a shim per node, pods made by `flowmesh-cni`,
//! labels and policies set with `flowmeshctl` (`label`, `apply -f`). TCP and UDP between pods
//! on one node and across VXLAN, ingress and egress policies, replies of allowed connections,
//! default deny then allow-from-namespace, a relabel that closes and reopens a path, and
//! pod → outside host (the controller's namespace on the underlay) allowed and denied by an
//! egress ipBlock.
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test e2e_netpol -- --nocapture`.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use flowmesh_tests::cni::CniPod;
use flowmesh_tests::e2e::{
    tcp_probe, udp_probe, CniCluster, ControllerOptions, TcpServer, UdpEcho,
};

const TCP_PORT: u16 = 8080;
const UDP_PORT: u16 = 5353;
const OUTSIDE_PORT: u16 = 9099;

struct Cluster {
    servers: Vec<TcpServer>,
    echoes: Vec<UdpEcho>,
    base: CniCluster,
}

impl std::ops::Deref for Cluster {
    type Target = CniCluster;
    fn deref(&self) -> &CniCluster {
        &self.base
    }
}

impl Cluster {
    fn start() -> Cluster {
        Cluster {
            servers: Vec::new(),
            echoes: Vec::new(),
            base: CniCluster::start(&ControllerOptions::networkpolicy()),
        }
    }

    fn add_pod(&mut self, node: usize, namespace: &str, name: &str, labels: &[&str]) -> CniPod {
        let p = self.add_cni_pod(node, namespace, name);
        let srv = TcpServer::start(&p.ns, p.ip, TCP_PORT, name)
            .unwrap_or_else(|e| self.fail(&format!("TCP server {name}: {e}")));
        let echo = UdpEcho::start(&p.ns, p.ip, UDP_PORT, name)
            .unwrap_or_else(|e| self.fail(&format!("UDP server {name}: {e}")));
        self.servers.push(srv);
        self.echoes.push(echo);
        if !labels.is_empty() {
            let target = format!("{namespace}/{name}");
            let mut args = vec!["label", "pod", target.as_str()];
            args.extend_from_slice(labels);
            self.ctl(&args);
        }
        p
    }
}

/// Whether a TCP exchange (request and the server's reply) from `a` to `b` succeeds.
fn tcp(a: &CniPod, b: &CniPod) -> bool {
    // Two tries: the first packet to a freshly learned destination may be lost in the lab.
    (0..2).any(|_| {
        tcp_probe(
            &a.ns,
            SocketAddrV4::new(b.ip, TCP_PORT),
            b"hello",
            Duration::from_millis(700),
        )
        .expect("tcp probe")
        .is_some_and(|r| !r.is_empty())
    })
}

fn udp(a: &CniPod, b: &CniPod) -> bool {
    udp_probe(
        &a.ns,
        SocketAddrV4::new(b.ip, UDP_PORT),
        b"ping",
        3,
        Duration::from_millis(300),
    )
    .expect("udp probe")
    .is_some()
}

/// Waits until `probe` answers `want` (a switch applies a change to packets of flows it has
/// cached in its datapath only once its revalidators ran, shortly after the barrier), at most
/// 15 s; prints how long the change took to show.
fn settles(want: bool, what: &str, probe: impl Fn() -> bool) {
    let t = Instant::now();
    loop {
        if probe() == want {
            println!("{what}: after {:?}", t.elapsed());
            return;
        }
        // A bound, not a wait: a change shows in well under a second on a quiet machine.
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "{what}: not after 15 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn networkpolicy_with_real_packets() {
    let mut c = Cluster::start();
    c.apply(
        "namespaces",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels:\n    team: shop\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tools\n  labels:\n    team: tools\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n",
    );
    let web1 = c.add_pod(1, "shop", "web-1", &["app=web"]);
    let web2 = c.add_pod(2, "shop", "web-2", &["app=web"]);
    let ci1 = c.add_pod(2, "tools", "ci-1", &["app=ci"]);
    let ci2 = c.add_pod(3, "tools", "ci-2", &["app=ci"]);
    let x1 = c.add_pod(1, "other", "x-1", &[]);

    // No policy: everything is open.
    for (a, b) in [
        (&ci1, &web1),
        (&ci1, &web2),
        (&x1, &web1),
        (&web1, &x1),
        (&ci2, &x1),
    ] {
        assert!(tcp(a, b), "open: {} -> {}", a.ns, b.ns);
    }
    assert!(udp(&x1, &web2), "open UDP");

    // Default deny for ingress in shop.
    c.apply(
        "deny",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: default-deny\n  \
         namespace: shop\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
    );
    for (a, b) in [(&ci1, &web1), (&ci1, &web2), (&x1, &web1), (&ci2, &web2)] {
        settles(
            false,
            &format!("default deny: {} -> {}", a.ns, b.ns),
            || tcp(a, b),
        );
    }
    settles(false, "default deny: UDP passed", || udp(&x1, &web2));
    // shop's egress is not isolated, and the replies of its connections come back in.
    settles(
        true,
        "web-1 -> x-1 (reply must pass the ingress deny)",
        || tcp(&web1, &x1),
    );
    settles(true, "web-2 -> ci-2 across nodes", || tcp(&web2, &ci2));
    settles(true, "web-1 -> ci-1 UDP reply", || udp(&web1, &ci1));

    // Allow from namespaces labelled team=tools to app=web on TCP 8080 and UDP 5353.
    c.apply(
        "allow",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web-from-tools\n  \
         namespace: shop\nspec:\n  podSelector:\n    matchLabels:\n      app: web\n  ingress:\n  \
         - from:\n    - namespaceSelector:\n        matchLabels:\n          team: tools\n    \
         ports:\n    - protocol: TCP\n      port: 8080\n    - protocol: UDP\n      port: 5353\n",
    );
    settles(true, "same node, allowed", || tcp(&ci1, &web2));
    settles(true, "across nodes, allowed", || tcp(&ci1, &web1));
    settles(true, "across nodes, allowed", || tcp(&ci2, &web2));
    settles(true, "UDP allowed", || udp(&ci2, &web1));
    settles(false, "other namespace still denied (same node)", || {
        tcp(&x1, &web1)
    });
    settles(false, "other namespace UDP still denied", || {
        udp(&x1, &web2)
    });

    // A relabel closes the path to web-2 and reopens it.
    c.ctl(&["label", "pod", "shop/web-2", "app=db", "--overwrite"]);
    settles(false, "web-2 relabelled app=db: closed", || {
        tcp(&ci1, &web2)
    });
    settles(true, "web-1 still open", || tcp(&ci1, &web1));
    c.ctl(&["label", "pod", "shop/web-2", "app=web", "--overwrite"]);
    settles(true, "web-2 labelled app=web again: open", || {
        tcp(&ci1, &web2)
    });

    // Egress: tools may reach only shop's web pods on 8080, and the outside host by ipBlock.
    let outside = c.lab.controller_ip();
    let outside_srv = TcpServer::start(c.lab.controller_ns(), outside, OUTSIDE_PORT, "outside")
        .expect("outside server");
    let out_probe = |p: &CniPod| {
        (0..2).any(|_| {
            tcp_probe(
                &p.ns,
                SocketAddrV4::new(outside, OUTSIDE_PORT),
                b"hi",
                Duration::from_millis(700),
            )
            .expect("probe")
            .is_some_and(|r| !r.is_empty())
        })
    };
    settles(true, "outside reachable before egress policy", || {
        out_probe(&ci1)
    });
    // Egress confined to the cluster network: the outside host is denied, pods are not.
    c.apply(
        "egress-cluster",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: egress\n  \
         namespace: tools\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  \
         - to:\n    - ipBlock:\n        cidr: 10.128.0.0/14\n",
    );
    settles(
        false,
        "egress to the outside host denied (not in the ipBlock)",
        || out_probe(&ci2),
    );
    settles(
        true,
        "egress inside the cluster allowed by the ipBlock",
        || tcp(&ci2, &x1),
    );
    // Egress to shop's web pods on 8080 and to the outside host only.
    c.apply(
        "egress",
        &format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: egress\n  \
             namespace: tools\nspec:\n  podSelector: {{}}\n  policyTypes: [Egress]\n  egress:\n  \
             - to:\n    - namespaceSelector:\n        matchLabels:\n          team: shop\n      \
             podSelector:\n        matchLabels:\n          app: web\n    ports:\n    - port: 8080\n  \
             - to:\n    - ipBlock:\n        cidr: {outside}/32\n"
        ),
    );
    settles(true, "egress to web allowed", || tcp(&ci1, &web1));
    settles(false, "egress to other denied", || tcp(&ci1, &x1));
    settles(false, "egress UDP to web denied (only TCP 8080)", || {
        udp(&ci2, &web1)
    });
    settles(
        true,
        "egress to the outside host allowed by the ipBlock",
        || out_probe(&ci2),
    );
    assert!(
        !outside_srv.peers().is_empty(),
        "the outside host saw the allowed connections"
    );
    c.ctl(&["delete", "networkpolicy", "tools/egress"]);
    settles(true, "no egress policy: open again", || tcp(&ci1, &x1));
    drop(c);
}
