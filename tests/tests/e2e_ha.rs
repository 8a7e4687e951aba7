//! Several controller replicas with real packets: a 3-member etcd cluster and two controller
//! replicas in the lab's controller namespace, three nodes whose shims and bridges know both
//! replicas, pods added through flowmesh-cni. A steady ping and a TCP stream between pods on
//! two nodes lose nothing while the leader is killed (kill -9) and a standby takes over; a
//! pod added right after the takeover (its CNI call balanced over both replicas) gets its
//! network.

use flowmesh_tests::cni::add_pod_via_cni;
use flowmesh_tests::e2e::{ControllerOptions, LabController};
use flowmesh_tests::egress::wait_for;
use flowmesh_tests::ping::SteadyPing;
use flowmesh_tests::{EtcdCluster, NetnsLab};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn leader_index(lab: &NetnsLab, ctls: &[&LabController]) -> Option<usize> {
    for c in ctls.iter().filter(|c| c.pid.is_some()) {
        let Ok(v) = c.ctl_json(lab, &["get", "controllers"]) else {
            continue;
        };
        let Some(leader) = v
            .as_array()
            .and_then(|a| a.iter().find(|r| r["state"] == "leader"))
        else {
            continue;
        };
        let grpc = leader["grpc"].as_str().unwrap_or_default().to_string();
        if let Some(i) = ctls
            .iter()
            .position(|c| c.pid.is_some() && c.grpc.to_string() == grpc)
        {
            return Some(i);
        }
    }
    None
}

/// [`wait_for`] that fails the test with `what` on timeout.
fn wait<T>(what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
    wait_for(limit, f).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Every node's switch granted the master role to `c` (its ROLE_REPLY, `get switches`).
fn master_everywhere(lab: &NetnsLab, c: &LabController) -> bool {
    c.ctl_json(lab, &["get", "switches"]).is_ok_and(|sw| {
        ["node1", "node2", "node3"].iter().all(|n| {
            sw.as_array().is_some_and(|a| {
                a.iter()
                    .any(|s| s["node"] == *n && s["connected"] == true && s["role"] == "master")
            })
        })
    })
}

/// Every node's Open vSwitch drop counters (`coverage/show` lines naming a drop, e.g.
/// `datapath_drop_*`, `drop_action_*`) and the kernel's backlog drops (`/proc/net/softnet_stat`,
/// second column summed over CPUs, shared by every namespace): read before and after the
/// takeover, so that a lost packet says where it was dropped.
fn drop_counters(lab: &NetnsLab) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for n in lab.nodes() {
        let Ok(text) = n.ovs().appctl(["coverage/show"]) else {
            continue;
        };
        for line in text.lines().filter(|l| l.contains("drop")) {
            let name = line.split_whitespace().next().unwrap_or_default();
            if let Some(total) = line
                .rsplit("total:")
                .next()
                .and_then(|t| t.trim().parse::<u64>().ok())
            {
                out.insert(format!("node{}:{name}", n.index()), total);
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/softnet_stat") {
        let dropped = text
            .lines()
            .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
            .sum();
        out.insert("kernel:softnet_dropped".into(), dropped);
    }
    out
}

#[test]
fn pod_traffic_survives_killing_the_leader() {
    let lab = flowmesh_tests::e2e::cni_lab();
    let etcd = EtcdCluster::start_in(3, Some(lab.controller_ns())).expect("etcd in the lab");
    let eps = etcd.endpoints();
    let opts = |id: &str| {
        let mut o = ControllerOptions::multitenant();
        o.extra = [
            "--datastore",
            "etcd",
            "--etcd-endpoints",
            &eps,
            "--replica-id",
            id,
            "--etcd-election-timeout",
            flowmesh_tests::etcd::ELECTION_TIMEOUT_MS,
            "--leader-ttl",
            "3",
        ]
        .map(String::from)
        .to_vec();
        o
    };
    let c0 = LabController::start_replica(&lab, &opts("r0"), 0, None).expect("replica 0");
    let c1 = LabController::start_replica(&lab, &opts("r1"), 1, Some(&c0.pki)).expect("replica 1");
    let mut ctls = [c0, c1];
    let so = LabController::shim_options_all(&[&ctls[0], &ctls[1]]);
    let shims: Vec<_> = (1..=3)
        .map(|i| flowmesh_tests::cni::start_shim(&lab, i, &so).expect("shim"))
        .collect();
    let l = wait("a leader", Duration::from_secs(20), || {
        leader_index(&lab, &[&ctls[0], &ctls[1]])
    });
    ctls[l]
        .wait_synced(&lab, &["node1", "node2", "node3"], Duration::from_secs(30))
        .expect("switches synced");
    ctls[l]
        .ctl(&lab, &["namespace", "create", "shop"])
        .expect("namespace");
    let a = add_pod_via_cni(&lab, 1, &shims[0], "shop", "ha-a").expect("pod a");
    let b = add_pod_via_cni(&lab, 2, &shims[1], "shop", "ha-b").expect("pod b");
    let standby = 1 - l;
    wait(
        "the standby to hold slave roles",
        Duration::from_secs(15),
        || {
            ctls[standby]
                .ctl_json(&lab, &["get", "switches"])
                .ok()
                .filter(|sw| {
                    sw.as_array().is_some_and(|a| {
                        a.iter()
                            .filter(|s| s["connected"] == true)
                            .filter(|s| s["role"] == "slave")
                            .count()
                            == 3
                    })
                })
        },
    );
    assert!(lab.ping(&a.ns, b.ip.into(), 2).expect("ping").received == 2);

    // A TCP stream: an echo server in pod b (bound and listening before the client starts,
    // so no wait for it); pod a sends a line every 20 ms and reads it back, for the whole test.
    let listener = flowmesh_tests::cni::bind_tcp_in_netns(&b.ns, (b.ip, 7007).into())
        .expect("echo server listening in pod b");
    std::thread::spawn(move || {
        let Ok((mut c, _)) = listener.accept() else {
            return;
        };
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = c.read(&mut buf) {
            if c.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let dst: SocketAddr = (b.ip, 7007).into();
    let ns_a = a.ns.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let echoed = Arc::new(AtomicU32::new(0));
    let (stop2, echoed2) = (stop.clone(), echoed.clone());
    let stream = std::thread::spawn(move || {
        flowmesh_tests::tcp::in_netns(&ns_a, move || {
            let mut s = std::net::TcpStream::connect_timeout(&dst, Duration::from_secs(3))
                .map_err(|e| flowmesh_tests::HarnessError::Invalid(format!("connect: {e}")))?;
            // Generous: a stall shows in `worst` and a lost packet in the ping; this bound
            // only ends a stream that broke, and must not trip on a busy machine.
            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let (mut sent, mut worst) = (0u32, Duration::ZERO);
            while !stop2.load(Ordering::Relaxed) {
                let t = Instant::now();
                let line = format!("{sent:08}\n");
                s.write_all(line.as_bytes()).map_err(|e| {
                    flowmesh_tests::HarnessError::Invalid(format!("send {sent}: {e}"))
                })?;
                let mut back = [0u8; 9];
                s.read_exact(&mut back).map_err(|e| {
                    flowmesh_tests::HarnessError::Invalid(format!("echo {sent}: {e}"))
                })?;
                if &back[..] != line.as_bytes() {
                    return Err(flowmesh_tests::HarnessError::Invalid(format!(
                        "echo {sent}: got {:?}",
                        String::from_utf8_lossy(&back)
                    )));
                }
                worst = worst.max(t.elapsed());
                sent += 1;
                echoed2.store(sent, Ordering::Relaxed);
                // Pacing: one round trip every 20 ms keeps the stream alive across the
                // takeover without flooding the userspace datapath.
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok((sent, worst))
        })
    });
    // A steady ping, 20 ms apart, from before the kill until after the takeover, however
    // long that takes.
    let drops_before = drop_counters(&lab);
    let ping_started = Instant::now();
    let ping = SteadyPing::start(&a.ns, b.ip.into(), "0.02").expect("ping");
    // Both run before the kill: the stream has made round trips (so it is connected and
    // echoing) and the ping has been answered.
    let echoes = |n: u32| {
        let want = echoed.load(Ordering::Relaxed) + n;
        wait("the TCP stream to echo", Duration::from_secs(20), || {
            (echoed.load(Ordering::Relaxed) >= want).then_some(())
        });
    };
    echoes(10);
    ping.wait_more_answered(10, Duration::from_secs(20))
        .expect("ping answered before the kill");

    eprintln!("stream and ping running");
    let t0 = Instant::now();
    ctls[l].kill9(&lab);
    let new = 1 - l;
    wait(
        "the standby to be master on every switch",
        Duration::from_secs(10),
        || master_everywhere(&lab, &ctls[new]).then_some(()),
    );
    let took = t0.elapsed();
    // Traffic keeps flowing after the takeover: 10 more of each, then stop both.
    echoes(10);
    ping.wait_more_answered(10, Duration::from_secs(20))
        .expect("ping answered after the takeover");
    let ping = ping.stop();
    stop.store(true, Ordering::Relaxed);
    let (echoed, worst) = stream
        .join()
        .expect("stream thread")
        .unwrap_or_else(|e| panic!("TCP stream broke across the takeover: {e}"));
    eprintln!(
        "takeover {} ms; ping: {} answered in a row; tcp: {echoed} round trips, slowest {} ms",
        took.as_millis(),
        ping.last,
        worst.as_millis()
    );
    if !ping.missing.is_empty() {
        // Where they went: the counters that moved since before the ping, and when each lost
        // request left relative to the kill (ping sends icmp_seq N about (N-1) x 20 ms after
        // its start).
        let after = drop_counters(&lab);
        let moved: Vec<String> = after
            .iter()
            .filter_map(|(k, v)| {
                let d = v - drops_before.get(k).copied().unwrap_or(0).min(*v);
                (d > 0).then(|| format!("{k}+{d}"))
            })
            .collect();
        let kill_ms = t0.duration_since(ping_started).as_millis() as i64;
        let when: Vec<String> = ping
            .missing
            .iter()
            .map(|s| format!("{s}@{:+}ms", (i64::from(*s) - 1) * 20 - kill_ms))
            .collect();
        panic!(
            "pings lost across the takeover: icmp_seq {:?} of 1..={} (sent relative to the kill: {}); drop counters that moved: {}",
            ping.missing,
            ping.last,
            when.join(" "),
            if moved.is_empty() { "none".to_owned() } else { moved.join(" ") }
        );
    }

    // Right after the takeover, a CNI ADD (its node API call balanced over both replicas,
    // one of them dead) gets a working pod.
    let t = Instant::now();
    let c = add_pod_via_cni(&lab, 3, &shims[2], "shop", "ha-c").expect("pod after takeover");
    eprintln!("CNI ADD after the takeover: {} ms", t.elapsed().as_millis());
    assert_eq!(lab.ping(&c.ns, a.ip.into(), 3).expect("ping").received, 3);
    drop(etcd);
}
