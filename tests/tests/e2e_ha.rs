//! Several controller replicas with real packets: a 3-member etcd cluster and two controller
//! replicas in the lab's controller namespace, three nodes whose shims and bridges know both
//! replicas, pods added through flowmesh-cni. A steady ping and a TCP stream between pods on
//! two nodes lose nothing while the leader is killed (kill -9) and a standby takes over; a
//! pod added right after the takeover (its CNI call balanced over both replicas) gets its
//! network.

use flowmesh_tests::cni::add_pod_via_cni;
use flowmesh_tests::e2e::{ControllerOptions, LabController};
use flowmesh_tests::{EtcdCluster, NetnsLab};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
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

fn wait<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
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
            "2",
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

    // A TCP stream: a server in pod b echoes; pod a sends a line every 20 ms and reads it
    // back, for the whole test.
    let mut server = Command::new("ip")
        .args(["netns", "exec", &b.ns, "python3", "-c"])
        .arg(
            "import socket\n\
             s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('0.0.0.0', 7007)); s.listen(1)\n\
             c,_=s.accept()\n\
             while True:\n  d=c.recv(4096)\n  if not d: break\n  c.sendall(d)\n",
        )
        .spawn()
        .expect("tcp echo server");
    std::thread::sleep(Duration::from_millis(300));
    let dst: SocketAddr = (b.ip, 7007).into();
    let ns_a = a.ns.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let stream = std::thread::spawn(move || {
        flowmesh_tests::tcp::in_netns(&ns_a, move || {
            let mut s = std::net::TcpStream::connect_timeout(&dst, Duration::from_secs(3))
                .map_err(|e| flowmesh_tests::HarnessError::Invalid(format!("connect: {e}")))?;
            s.set_read_timeout(Some(Duration::from_millis(500))).ok();
            let (mut sent, mut worst) = (0u32, Duration::ZERO);
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
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
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok((sent, worst))
        })
    });
    // A steady ping, 20 ms apart, across the kill.
    let ping = Command::new("ip")
        .args([
            "netns", "exec", &a.ns, "ping", "-n", "-q", "-i", "0.02", "-c", "200", "-W", "1",
        ])
        .arg(b.ip.to_string())
        .output();
    let ping = std::thread::spawn(move || ping);
    std::thread::sleep(Duration::from_millis(1000));

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
    let out = ping.join().expect("ping thread").expect("ping");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (echoed, worst) = stream
        .join()
        .expect("stream thread")
        .unwrap_or_else(|e| panic!("TCP stream broke across the takeover: {e}"));
    // The echo server we started, ended by its PID.
    let _ = server.kill();
    let _ = server.wait();
    eprintln!(
        "takeover {} ms; ping: {}; tcp: {echoed} round trips, slowest {} ms",
        took.as_millis(),
        text.lines()
            .find(|l| l.contains("transmitted"))
            .unwrap_or(&text),
        worst.as_millis()
    );
    assert!(
        text.contains("200 packets transmitted, 200 received"),
        "pings lost across the takeover: {text}"
    );
    assert!(echoed > 50, "the TCP stream barely ran: {echoed}");

    // Right after the takeover, a CNI ADD (its node API call balanced over both replicas,
    // one of them dead) gets a working pod.
    let t = Instant::now();
    let c = add_pod_via_cni(&lab, 3, &shims[2], "shop", "ha-c").expect("pod after takeover");
    eprintln!("CNI ADD after the takeover: {} ms", t.elapsed().as_millis());
    assert_eq!(lab.ping(&c.ns, a.ip.into(), 3).expect("ping").received, 3);
    drop(etcd);
}
