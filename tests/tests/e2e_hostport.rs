//! HostPort and bandwidth through the shipped CNI chain (`deploy/cni/80-flowmesh.conflist`:
//! flowmesh-cni, then the standard `portmap` and `bandwidth` plugins from Debian's
//! containernetworking-plugins), with real packets (NetnsLab, flowmesh-cni pods on 3 nodes):
//! a host port of a pod on node 2 reaches the pod from a host outside the cluster and from a
//! pod on another node, and stops when the pod is deleted; a pod with a bandwidth limit
//! receives TCP under that limit.

use flowmesh_tests::cni::{invoke_chain, CniCall};
use flowmesh_tests::e2e::{tcp_probe, CniCluster, ControllerOptions, TcpServer};
use serde_json::{json, Value};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const CONFLIST: &str = include_str!("../../deploy/cni/80-flowmesh.conflist");

/// ADD pod `name` of namespace `web` on node `node` through the whole chain with the given
/// runtime capabilities; its network namespace and address.
fn add(c: &CniCluster, node: usize, name: &str, runtime: &Value) -> (String, Ipv4Addr, CniCall) {
    let conflist: Value = serde_json::from_str(CONFLIST).expect("conflist");
    let ns = c.lab.add_netns(name).expect("netns");
    let socket = &c.shims[node - 1].socket;
    let call = CniCall::new("ADD", socket, name, &ns, "web", name);
    let outs = invoke_chain(&c.lab, node, &conflist, socket, &call, runtime).expect("chain");
    assert_eq!(outs.len(), 3, "every plugin ran: {outs:#?}");
    for o in &outs {
        assert_eq!(o.exit_code, 0, "{}\n{}", o.raw_stdout, o.stderr);
    }
    let last = &outs[2].stdout;
    let ip: Ipv4Addr = last["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in the chain's result: {last}"));
    c.lab.tx_offload_off(&ns, "eth0").expect("offload off");
    (ns, ip, call)
}

#[test]
fn host_port_and_bandwidth_through_the_cni_chain() {
    let c = CniCluster::start(&ControllerOptions::multitenant());
    c.ctl(&["namespace", "create", "web"]);
    let (outside_ns, _) = c
        .lab
        .add_underlay_host("outside", 200)
        .expect("outside host");
    let node2 = c.lab.underlay_ip(2);

    let (web_ns, web_ip, web_call) = add(
        &c,
        2,
        "hp-web",
        &json!({"portMappings": [{"hostPort": 30080, "containerPort": 8080, "protocol": "tcp"}]}),
    );
    let _server = TcpServer::start(&web_ns, web_ip, 8080, "hp-web").expect("server in the pod");
    let host_port = SocketAddrV4::new(node2, 30080);
    let t = Duration::from_secs(3);
    let answer = tcp_probe(&outside_ns, host_port, b"hi", t).expect("probe");
    let text = String::from_utf8_lossy(answer.as_deref().unwrap_or_default()).to_string();
    assert!(
        text.starts_with("hp-web"),
        "outside host → {host_port}: {text:?}"
    );
    // From a pod on another node.
    let client = c.add_cni_pod(1, "web", "hp-client");
    let answer = tcp_probe(&client.ns, host_port, b"hi", t).expect("probe");
    let text = String::from_utf8_lossy(answer.as_deref().unwrap_or_default()).to_string();
    assert!(
        text.starts_with("hp-web"),
        "pod on node1 → {host_port}: {text:?}"
    );

    // DEL through the chain (backwards): the host port is gone with the pod.
    let conflist: Value = serde_json::from_str(CONFLIST).expect("conflist");
    let outs = invoke_chain(
        &c.lab,
        2,
        &conflist,
        &c.shims[1].socket,
        &web_call.with_command("DEL"),
        &json!({"portMappings": [{"hostPort": 30080, "containerPort": 8080, "protocol": "tcp"}]}),
    )
    .expect("DEL chain");
    assert!(outs.iter().all(|o| o.exit_code == 0), "{outs:#?}");
    let after = tcp_probe(&outside_ns, host_port, b"hi", Duration::from_secs(1)).expect("probe");
    assert!(
        after.is_none_or(|a| a.is_empty()),
        "the host port still answers after DEL"
    );

    // Bandwidth: a pod limited to 20 Mbit/s in both directions receives TCP under that.
    let limit = 20_000_000u64;
    let (slow_ns, slow_ip, _) = add(
        &c,
        2,
        "bw-slow",
        &json!({"bandwidth": {"ingressRate": limit, "ingressBurst": limit / 8 / 10,
                              "egressRate": limit, "egressBurst": limit / 8 / 10}}),
    );
    let x = flowmesh_tests::tcp_transfer(&client.ns, &slow_ns, slow_ip.into(), 9100, 8 << 20)
        .expect("transfer to the limited pod");
    let fast = c.add_cni_pod(2, "web", "bw-free");
    let y = flowmesh_tests::tcp_transfer(&client.ns, &fast.ns, fast.ip.into(), 9101, 8 << 20)
        .expect("transfer to an unlimited pod");
    eprintln!(
        "limited pod: {:.1} Mbit/s (limit {} Mbit/s); unlimited pod: {:.1} Mbit/s",
        x.mbit_per_s(),
        limit / 1_000_000,
        y.mbit_per_s()
    );
    assert!(
        x.mbit_per_s() <= limit as f64 / 1e6 * 1.15,
        "the limited pod got {:.1} Mbit/s",
        x.mbit_per_s()
    );
}
