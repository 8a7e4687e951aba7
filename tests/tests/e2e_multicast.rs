//! Multicast end to end with real packets: a `NetnsLab` of 3 nodes (userspace datapath), the
//! real controller in multitenant mode, a shim per node, pods made by `flowmesh-cni`, and in
//! every pod a receiver that joins 239.1.2.3 with an ordinary socket (`IP_ADD_MEMBERSHIP`, so
//! the kernel sends real IGMP reports). Project `red` gets multicast with `flowmeshctl
//! annotate netnamespace`, `blue` (pods on every node) does not.
//!
//! Checked: every datagram of a red sender reaches every red receiver on every node exactly
//! once and no blue receiver; blue's multicast reaches nobody; while node3 has no red pod it
//! gets no VXLAN copy (node1's replication group has one bucket, node3's VXLAN multicast flow
//! counts no packet); a red pod added on node3 receives; a controller restart sends no flow or
//! group mod and leaves the groups as they were; removing the annotation stops delivery.
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test e2e_multicast -- --nocapture`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowmesh_tests::cni::CniPod;
use flowmesh_tests::e2e::{CniCluster, ControllerOptions};
use flowmesh_tests::egress::wait_for;
use flowmesh_tests::tcp::{enter_netns, in_netns};

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const PORT: u16 = 5000;
const ANNOTATION: &str = "netnamespace.network.openshift.io/multicast-enabled";
/// Datagrams per burst.
const BURST: usize = 20;

/// A multicast receiver in a pod: joins GROUP on the pod's address and records every datagram.
struct Receiver {
    got: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    fn start(pod: &CniPod) -> Receiver {
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g2, s2) = (Arc::clone(&got), Arc::clone(&stop));
        let (ns, ip) = (pod.ns.clone(), pod.ip);
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        std::thread::spawn(move || {
            let sock = enter_netns(&ns).map_err(|e| e.to_string()).and_then(|()| {
                let s = std::net::UdpSocket::bind(("0.0.0.0", PORT))
                    .map_err(|e| format!("bind: {e}"))?;
                s.join_multicast_v4(&GROUP, &ip)
                    .map_err(|e| format!("join: {e}"))?;
                s.set_read_timeout(Some(Duration::from_millis(100)))
                    .map_err(|e| e.to_string())?;
                Ok(s)
            });
            let s = match sock {
                Ok(s) => {
                    let _ = tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut buf = [0u8; 1500];
            while !s2.load(Ordering::Relaxed) {
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    let text = String::from_utf8_lossy(buf.get(..n).unwrap_or_default());
                    g2.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(text.into_owned());
                }
            }
        });
        rx.recv()
            .expect("receiver thread")
            .unwrap_or_else(|e| panic!("receiver in {}: {e}", pod.ns));
        Receiver { got, stop }
    }

    /// How many times each datagram with `tag` arrived.
    fn count(&self, tag: &str) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for d in self.got.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if d.starts_with(&format!("{tag}-")) {
                *m.entry(d.clone()).or_insert(0) += 1;
            }
        }
        m
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sends `n` datagrams `TAG-i` to GROUP:PORT from the pod.
fn send(pod: &CniPod, tag: &str, n: usize) {
    let (ip, tag) = (pod.ip, tag.to_owned());
    in_netns(&pod.ns, move || {
        let s = std::net::UdpSocket::bind((ip, 0)).expect("bind sender");
        // No local loopback copy: whatever the sender's own receiver gets came from OVS.
        s.set_multicast_loop_v4(false).expect("IP_MULTICAST_LOOP");
        for i in 0..n {
            s.send_to(
                format!("{tag}-{i}").as_bytes(),
                SocketAddrV4::new(GROUP, PORT),
            )
            .expect("send");
            // Pacing: a burst spread over 100 ms, not queued at once in the userspace
            // datapath's buffers (the test counts copies, not what a burst can overflow).
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    })
    .expect("sender");
}

struct Cluster {
    pods: BTreeMap<String, (CniPod, Receiver)>,
    tags: usize,
    base: CniCluster,
}

impl std::ops::Deref for Cluster {
    type Target = CniCluster;
    fn deref(&self) -> &CniCluster {
        &self.base
    }
}

impl Cluster {
    fn add_pod(&mut self, node: usize, namespace: &str, name: &str) {
        let p = self.add_cni_pod(node, namespace, name);
        let r = Receiver::start(&p);
        self.pods.insert(name.to_owned(), (p, r));
    }

    /// A fresh tag; `name` sends a burst with it; waits for stragglers; the count of each
    /// datagram per receiving pod (pods that got nothing are left out).
    fn burst(&mut self, name: &str) -> (String, BTreeMap<String, BTreeMap<String, usize>>) {
        self.tags += 1;
        let tag = format!("{name}.{}", self.tags);
        send(&self.pods[name].0, &tag, BURST);
        let counts = || -> BTreeMap<String, BTreeMap<String, usize>> {
            self.pods
                .iter()
                .map(|(n, (_, r))| (n.clone(), r.count(&tag)))
                .filter(|(_, c)| !c.is_empty())
                .collect()
        };
        // Every pod that got some of the burst gets all of it (a pod that got only part,
        // e.g. while flows change, is left as it is after the bound)...
        wait_for(Duration::from_secs(5), || {
            counts().values().all(|c| c.len() == BURST).then_some(())
        });
        // ...then a window in which duplicates, or copies to pods that must get none, would
        // show: that nothing more arrives is what is tested, so no condition can end it.
        std::thread::sleep(Duration::from_millis(300));
        (tag.clone(), counts())
    }

    /// Bursts from `name` until `probe` (given who received) holds, at most 10 s.
    fn until(&mut self, what: &str, name: &str, probe: impl Fn(&[String]) -> bool) {
        let t = Instant::now();
        loop {
            let (_, got) = self.burst(name);
            let who: Vec<String> = got.keys().cloned().collect();
            if probe(&who) {
                println!("{what}: after {:?}", t.elapsed());
                return;
            }
            if t.elapsed() > Duration::from_secs(10) {
                self.fail(&format!("{what}: not after 10 s (received by {who:?})"));
            }
        }
    }

    /// `n_packets` of node `i`'s multicast-from-VXLAN flow (t31 p50).
    fn vxlan_multicast_packets(&self, i: usize) -> u64 {
        let node = self.lab.node(i).expect("node");
        let out = node
            .ovs()
            .ofctl([
                "-O",
                "OpenFlow13",
                "dump-flows",
                self.lab.bridge(),
                "table=31,ip,in_port=1,nw_dst=224.0.0.0/4",
            ])
            .expect("dump-flows");
        out.lines()
            .filter_map(|l| l.split("n_packets=").nth(1))
            .filter_map(|t| t.split(',').next()?.parse::<u64>().ok())
            .sum()
    }

    fn groups(&self, i: usize) -> Vec<String> {
        let node = self.lab.node(i).expect("node");
        let text = node
            .ovs()
            .ofctl(["-O", "OpenFlow13", "dump-groups", self.lab.bridge()])
            .expect("dump-groups");
        let mut v: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        v.sort();
        v
    }
}

/// Every receiver in `want` got every datagram of `tag` exactly once; nobody else got any.
fn exactly_once(tag: &str, got: &BTreeMap<String, BTreeMap<String, usize>>, want: &[&str]) {
    let who: Vec<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(who, want, "{tag}: receivers");
    for (pod, counts) in got {
        for i in 0..BURST {
            let d = format!("{tag}-{i}");
            assert_eq!(
                counts.get(&d).copied().unwrap_or(0),
                1,
                "{tag}: {pod} got {d} {} times (all: {counts:?})",
                counts.get(&d).copied().unwrap_or(0)
            );
        }
    }
}

#[test]
fn multicast_between_the_pods_of_a_project_with_real_packets() {
    let mut c = Cluster {
        pods: BTreeMap::new(),
        tags: 0,
        base: CniCluster::start(&ControllerOptions::multitenant()),
    };
    c.ctl(&["namespace", "create", "red"]);
    c.ctl(&["namespace", "create", "blue"]);
    for (node, ns, name) in [
        (1, "red", "red-1a"),
        (1, "red", "red-1b"),
        (2, "red", "red-2"),
        (1, "blue", "blue-1"),
        (2, "blue", "blue-2"),
        (3, "blue", "blue-3"),
    ] {
        c.add_pod(node, ns, name);
    }

    // Nothing without the annotation.
    let (tag, got) = c.burst("red-1a");
    exactly_once(&tag, &got, &[]);

    let on = format!("{ANNOTATION}=true");
    assert_eq!(
        c.ctl(&["annotate", "netnamespace", "red", &on]),
        "netnamespace/red annotated\n"
    );
    let red = c
        .ctl
        .ctl_json(&c.lab, &["get", "netnamespaces", "red"])
        .expect("get");
    assert_eq!(red[0]["annotations"][ANNOTATION], "true", "{red}");
    let netid = red[0]["netid"].as_u64().expect("netid") as u32;
    c.until("multicast reaches red-2 on node2", "red-1a", |who| {
        who.iter().any(|w| w == "red-2")
    });

    // red-1a's datagrams: the other red pod on node1, red-2 across VXLAN; not back to the
    // sender (OVS skips its port), no blue pod.
    let (tag, got) = c.burst("red-1a");
    exactly_once(&tag, &got, &["red-1b", "red-2"]);
    let (tag, got) = c.burst("red-2");
    exactly_once(&tag, &got, &["red-1a", "red-1b"]);
    // blue has no multicast.
    let (tag, got) = c.burst("blue-1");
    exactly_once(&tag, &got, &[]);

    // node3 has no red pod: node1 and node2 replicate to each other only, and node3 saw no
    // multicast over VXLAN.
    let remote_id = format!("group_id={}", 0x0200_0000 + netid);
    let node2_ip = c.lab.underlay_ip(2).to_string();
    let g1 = c.groups(1);
    let remote: Vec<&String> = g1.iter().filter(|g| g.starts_with(&remote_id)).collect();
    assert_eq!(remote.len(), 1, "{g1:?}");
    assert_eq!(remote[0].matches("bucket=").count(), 1, "{}", remote[0]);
    assert!(remote[0].contains(&node2_ip), "{}", remote[0]);
    assert!(
        c.groups(3).is_empty(),
        "node3 has groups: {:?}",
        c.groups(3)
    );
    assert_eq!(
        c.vxlan_multicast_packets(3),
        0,
        "node3 got multicast over VXLAN"
    );
    let on_node2 = c.vxlan_multicast_packets(2);
    assert!(on_node2 >= BURST as u64, "node2 counted {on_node2}");
    println!("node2's VXLAN multicast flow counted {on_node2} packets, node3's 0");

    // A new red pod on node3 joins and receives.
    c.add_pod(3, "red", "red-3");
    c.until("multicast reaches red-3 on node3", "red-1a", |who| {
        who.iter().any(|w| w == "red-3")
    });
    let (tag, got) = c.burst("red-1b");
    exactly_once(&tag, &got, &["red-1a", "red-2", "red-3"]);
    let (tag, got) = c.burst("red-3");
    exactly_once(&tag, &got, &["red-1a", "red-1b", "red-2"]);
    let g1 = c.groups(1);
    let remote: Vec<&String> = g1.iter().filter(|g| g.starts_with(&remote_id)).collect();
    assert_eq!(remote[0].matches("bucket=").count(), 2, "{}", remote[0]);
    assert!(c.vxlan_multicast_packets(3) >= BURST as u64);

    // A restart with unchanged state: no flow or group mod, the groups as they were.
    let before: Vec<Vec<String>> = (1..=3).map(|i| c.groups(i)).collect();
    let base = &mut c.base;
    base.ctl.stop(&base.lab);
    base.ctl
        .spawn(&base.lab)
        .unwrap_or_else(|e| panic!("restart: {e}"));
    c.ctl
        .wait_synced(
            &c.lab,
            &["node1", "node2", "node3"],
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| c.fail(&format!("switches after restart: {e}")));
    // A window after the resync in which a late flow or group mod would be counted: that none
    // is sent is what is tested.
    std::thread::sleep(Duration::from_millis(300));
    let metrics = c.ctl.metrics_text(&c.lab).expect("metrics");
    let mods: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flowmesh_flow_mods_sent_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("flowmesh_flow_mods_sent_total");
    assert_eq!(mods, 0, "the restarted controller sent flow or group mods");
    let after: Vec<Vec<String>> = (1..=3).map(|i| c.groups(i)).collect();
    assert_eq!(before, after, "groups changed across the restart");
    let (tag, got) = c.burst("red-2");
    exactly_once(&tag, &got, &["red-1a", "red-1b", "red-3"]);

    // Removing the annotation stops delivery.
    let off = format!("{ANNOTATION}-");
    assert_eq!(
        c.ctl(&["annotate", "netnamespace", "red", &off]),
        "netnamespace/red annotated\n"
    );
    c.until("multicast stops", "red-1a", |who| who.is_empty());
    let (tag, got) = c.burst("red-3");
    exactly_once(&tag, &got, &[]);
    assert!((1..=3).all(|i| c.groups(i).is_empty()), "groups left");
}
