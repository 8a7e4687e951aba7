//! flowmesh-cni executed exactly as a container runtime does, against flowmesh-shim in a
//! `NetnsLab` node and a fake controller node API: wiring, results, idempotent DEL, spec
//! errors that leave nothing behind, and ADD latency over 20 pods.

mod shim_common;

use std::time::Duration;

use flowmesh_tests::cni::{
    invoke_cni, netns_path, start_shim, CniCall, CniOutcome, NodeShim, ShimOptions,
};
use flowmesh_tests::NetnsLab;
use serde_json::{json, Value};
use shim_common::{Call, FakeNodeApi};

fn lab_with_shim() -> (NetnsLab, FakeNodeApi, NodeShim) {
    let lab = NetnsLab::builder()
        .nodes(1)
        .tun0(false)
        .start()
        .expect("lab");
    let fake = FakeNodeApi::start(&lab);
    let shim = start_shim(&lab, 1, &ShimOptions::new(fake.url.clone())).expect("shim");
    (lab, fake, shim)
}

/// Interface names in namespace `ns`.
fn links(lab: &NetnsLab, ns: &str) -> Vec<String> {
    let text = lab
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

fn ports(lab: &NetnsLab) -> Vec<String> {
    let out = lab
        .node(1)
        .expect("node")
        .ovs()
        .vsctl(["list-ports", "br0"])
        .expect("list-ports");
    out.lines().map(str::to_owned).collect()
}

/// Node links and bridge ports: what must be unchanged after a failed ADD.
fn node_wiring(lab: &NetnsLab) -> (Vec<String>, Vec<String>) {
    (links(lab, lab.node(1).expect("node").ns()), ports(lab))
}

fn ok(out: &CniOutcome, what: &str) {
    assert_eq!(
        out.exit_code, 0,
        "{what} failed: {}\nstderr: {}",
        out.raw_stdout, out.stderr
    );
}

fn failed_with(out: &CniOutcome, code: u64, what: &str) {
    assert_ne!(out.exit_code, 0, "{what} should fail: {}", out.raw_stdout);
    assert_eq!(out.error_code(), Some(code), "{what}: {}", out.raw_stdout);
    assert!(out
        .stdout
        .get("msg")
        .and_then(Value::as_str)
        .is_some_and(|m| !m.is_empty()));
    assert!(out.stdout.get("cniVersion").is_some(), "{}", out.raw_stdout);
}

#[test]
fn cni_add_check_del_like_a_runtime() {
    let (lab, fake, shim) = lab_with_shim();
    let node_ns = lab.node(1).expect("node").ns().to_owned();
    // Only root can reach the socket: its directory is 0700 and owned by root.
    let dir = shim.socket.parent().expect("socket dir");
    let meta = std::fs::metadata(dir).expect("socket dir metadata");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!((meta.permissions().mode() & 0o777, meta.uid()), (0o700, 0));

    let mut version = CniCall::new("VERSION", &shim.socket, "", "", "", "");
    version.ifname.clear();
    let out = invoke_cni(&lab, 1, &version).expect("VERSION");
    ok(&out, "VERSION");
    assert_eq!(out.stdout["cniVersion"], "1.0.0");
    let versions = out.stdout["supportedVersions"]
        .as_array()
        .expect("list")
        .clone();
    assert!(versions.contains(&json!("1.0.0")) && versions.contains(&json!("1.1.0")));

    let mut status = version.with_command("STATUS");
    status.config["cniVersion"] = json!("1.1.0");
    let out = invoke_cni(&lab, 1, &status).expect("STATUS");
    ok(&out, "STATUS");
    assert_eq!(out.stdout, Value::Null);

    let pod_ns = lab.add_netns("p1").expect("pod ns");
    let add = CniCall::new("ADD", &shim.socket, "c0ffee01", &pod_ns, "ns1", "web-1");
    let out = invoke_cni(&lab, 1, &add).expect("ADD");
    ok(&out, "ADD");
    println!(
        "ADD result ({:.1} ms): {}",
        out.elapsed.as_secs_f64() * 1e3,
        out.stdout
    );
    let r = &out.stdout;
    assert_eq!(r["cniVersion"], "1.0.0");
    let host = r["interfaces"][0]["name"]
        .as_str()
        .expect("host name")
        .to_owned();
    assert!(host.starts_with("veth") && host.len() <= 15, "{host}");
    assert!(r["interfaces"][0].get("sandbox").is_none());
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(r["interfaces"][1]["mac"], "0a:58:0a:80:01:02");
    assert_eq!(r["interfaces"][1]["sandbox"], netns_path(&pod_ns));
    assert_eq!(
        r["ips"],
        json!([{"interface": 1, "address": "10.128.1.2/24", "gateway": "10.128.1.1"}])
    );
    assert_eq!(
        r["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.128.1.1"}, {"dst": "10.128.0.0/14"}, {"dst": "224.0.0.0/4"}])
    );
    assert_eq!(r["dns"], json!({}));

    // Inside the pod.
    let link = lab
        .run_in(&pod_ns, "ip", &["link", "show", "eth0"])
        .expect("pod link");
    assert!(
        link.contains("mtu 1450") && link.contains("link/ether 0a:58:0a:80:01:02"),
        "{link}"
    );
    assert!(link.contains(",UP") || link.contains("<UP"), "{link}");
    let lo = lab
        .run_in(&pod_ns, "ip", &["link", "show", "lo"])
        .expect("lo");
    assert!(lo.contains("UP"), "{lo}");
    let addr = lab
        .run_in(&pod_ns, "ip", &["-4", "addr", "show", "eth0"])
        .expect("pod addr");
    assert!(addr.contains("inet 10.128.1.2/24"), "{addr}");
    let routes = lab
        .run_in(&pod_ns, "ip", &["route", "show"])
        .expect("pod routes");
    for want in [
        "default via 10.128.1.1 dev eth0",
        "10.128.0.0/14 dev eth0 proto static scope link",
        "224.0.0.0/4 dev eth0 proto static scope link",
    ] {
        assert!(routes.contains(want), "{want} not in\n{routes}");
    }

    // On the node: the host end, on br0 with the pod's external ids and the ofport the
    // controller was told.
    let hl = lab
        .run_in(&node_ns, "ip", &["link", "show", &host])
        .expect("host link");
    assert!(hl.contains("mtu 1450") && hl.contains("UP"), "{hl}");
    assert!(ports(&lab).contains(&host));
    let ovs = lab.node(1).expect("node").ovs();
    let ids = ovs
        .vsctl(["get", "Interface", &host, "external_ids"])
        .expect("ids");
    for want in [
        "flowmesh-pod-name=web-1",
        "flowmesh-pod-namespace=ns1",
        "flowmesh-sandbox=c0ffee01",
        "flowmesh-ifname=eth0",
    ] {
        assert!(ids.contains(want), "{want} not in {ids}");
    }
    let ofport = ovs.ofport(&host).expect("ofport");
    let attach = fake
        .state()
        .calls
        .iter()
        .find_map(|c| match c {
            Call::Attach(a) => Some(a.clone()),
            _ => None,
        })
        .expect("AttachPod called");
    assert_eq!(
        (
            attach.node.as_str(),
            attach.namespace.as_str(),
            attach.name.as_str()
        ),
        ("node1", "ns1", "web-1")
    );
    assert_eq!(
        (
            attach.port_name.as_str(),
            attach.ofport,
            attach.sandbox_id.as_str()
        ),
        (host.as_str(), ofport, "c0ffee01")
    );

    // CHECK with the result as prevResult, as a runtime does.
    let mut check = add.with_command("CHECK");
    check.config["prevResult"] = r.clone();
    ok(&invoke_cni(&lab, 1, &check).expect("CHECK"), "CHECK");
    let mut wrong = check.clone();
    wrong.config["prevResult"]["ips"][0]["address"] = json!("10.128.1.77/24");
    failed_with(
        &invoke_cni(&lab, 1, &wrong).expect("CHECK"),
        104,
        "CHECK with a wrong address",
    );

    // DEL, twice, then for a container that never existed and with the netns gone.
    let del = add.with_command("DEL");
    ok(&invoke_cni(&lab, 1, &del).expect("DEL"), "DEL");
    assert!(!ports(&lab).contains(&host), "port left on br0");
    assert!(!links(&lab, &node_ns).contains(&host), "host veth left");
    assert!(
        !links(&lab, &pod_ns).contains(&"eth0".to_owned()),
        "pod eth0 left"
    );
    assert!(fake.state().pods.is_empty(), "IP not freed");
    ok(&invoke_cni(&lab, 1, &del).expect("DEL again"), "DEL again");
    let mut ghost = CniCall::new("DEL", &shim.socket, "never-seen", "", "ns1", "ghost");
    ghost.netns = "/var/run/netns/does-not-exist".into();
    ok(
        &invoke_cni(&lab, 1, &ghost).expect("DEL unknown"),
        "DEL of an unknown container",
    );
    let detaches = fake
        .state()
        .calls
        .iter()
        .filter(|c| matches!(c, Call::Detach(_)))
        .count();
    assert_eq!(detaches, 3);

    // The address is handed out again to the next pod.
    let add2 = CniCall::new("ADD", &shim.socket, "c0ffee02", &pod_ns, "ns1", "web-2");
    let out = invoke_cni(&lab, 1, &add2).expect("ADD 2");
    ok(&out, "second ADD");
    assert_eq!(out.stdout["ips"][0]["address"], "10.128.1.2/24");
    ok(
        &invoke_cni(&lab, 1, &add2.with_command("DEL")).expect("DEL 2"),
        "DEL 2",
    );
}

#[test]
fn cni_errors_are_spec_errors_and_leave_nothing_behind() {
    let (lab, mut fake, shim) = lab_with_shim();
    let baseline = node_wiring(&lab);
    let pod_ns = lab.add_netns("p1").expect("pod ns");
    let add = CniCall::new("ADD", &shim.socket, "feed01", &pod_ns, "ns1", "web-1");
    let pod_links = links(&lab, &pod_ns);

    // Unknown netns: error 3, no AttachPod, nothing created.
    let mut bad_ns = add.clone();
    bad_ns.netns = format!("/var/run/netns/{}-nope", lab.id());
    failed_with(
        &invoke_cni(&lab, 1, &bad_ns).expect("ADD"),
        3,
        "ADD into a missing netns",
    );
    assert!(!fake
        .state()
        .calls
        .iter()
        .any(|c| matches!(c, Call::Attach(_))));
    assert_eq!(node_wiring(&lab), baseline);

    // The controller refuses AttachPod: error 103, veth and port rolled back, DetachPod sent.
    fake.state().fail_next_attach = Some(tonic::Status::resource_exhausted("subnet full"));
    let out = invoke_cni(&lab, 1, &add).expect("ADD");
    failed_with(&out, 103, "ADD refused by the controller");
    assert!(out.raw_stdout.contains("subnet full"), "{}", out.raw_stdout);
    assert_eq!(node_wiring(&lab), baseline, "a refused ADD left something");
    assert_eq!(links(&lab, &pod_ns), pod_links);
    assert!(matches!(fake.state().calls.last(), Some(Call::Detach(d)) if d.name == "web-1"));

    // ADD after a failed ADD is clean.
    ok(
        &invoke_cni(&lab, 1, &add).expect("ADD"),
        "ADD after a failed ADD",
    );
    ok(
        &invoke_cni(&lab, 1, &add.with_command("DEL")).expect("DEL"),
        "DEL",
    );
    assert_eq!(node_wiring(&lab), baseline);

    // Bad input: decode failure, bad config, bad version, missing env, missing pod name.
    let mut garbage = add.clone();
    garbage.config = json!("{not json");
    // A JSON string is valid JSON but not an object.
    failed_with(
        &invoke_cni(&lab, 1, &garbage).expect("run"),
        7,
        "non-object config",
    );
    let mut c = add.clone();
    c.config["ipam"] = json!({"type": "host-local"});
    failed_with(&invoke_cni(&lab, 1, &c).expect("run"), 2, "ipam");
    let mut c = add.clone();
    c.config["cniVersion"] = json!("0.1.0");
    failed_with(&invoke_cni(&lab, 1, &c).expect("run"), 1, "old version");
    let mut c = add.clone();
    c.netns.clear();
    failed_with(&invoke_cni(&lab, 1, &c).expect("run"), 4, "no CNI_NETNS");
    let mut c = add.clone();
    c.args.remove("K8S_POD_NAME");
    failed_with(&invoke_cni(&lab, 1, &c).expect("run"), 4, "no pod name");
    assert_eq!(node_wiring(&lab), baseline);

    // Controller down: error 11 (try again later), nothing left.
    fake.stop();
    let out = invoke_cni(&lab, 1, &add).expect("ADD");
    failed_with(&out, 11, "ADD with the controller down");
    println!("controller down: {}", out.raw_stdout);
    assert_eq!(
        node_wiring(&lab),
        baseline,
        "ADD with the controller down left something"
    );
    assert_eq!(links(&lab, &pod_ns), pod_links);

    // Shim down: error 11 for ADD, 50 for STATUS.
    assert!(lab.stop_process(shim.pid).is_some());
    assert!(!shim.socket.exists(), "socket removed on SIGTERM");
    let out = invoke_cni(&lab, 1, &add).expect("ADD");
    failed_with(&out, 11, "ADD with the shim down");
    println!("shim down: {}", out.raw_stdout);
    let mut status = add.with_command("STATUS");
    status.config["cniVersion"] = json!("1.1.0");
    failed_with(
        &invoke_cni(&lab, 1, &status).expect("STATUS"),
        50,
        "STATUS with the shim down",
    );
    assert_eq!(node_wiring(&lab), baseline);
}

#[test]
fn cni_add_latency_20_pods_and_concurrent_requests() {
    let (lab, fake, shim) = lab_with_shim();
    let baseline = node_wiring(&lab);
    let mut calls = Vec::new();
    let mut times: Vec<Duration> = Vec::new();
    for i in 0..20 {
        let ns = lab.add_netns(&format!("p{i}")).expect("pod ns");
        let call = CniCall::new(
            "ADD",
            &shim.socket,
            &format!("cafe{i:04}"),
            &ns,
            "ns1",
            &format!("pod-{i}"),
        );
        let out = invoke_cni(&lab, 1, &call).expect("ADD");
        ok(&out, "ADD");
        times.push(out.elapsed);
        calls.push(call);
    }
    let mut sorted = times.clone();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    println!(
        "CNI ADD latency over 20 pods (exec -> result, fake node API): min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms, mean {:.1} ms",
        ms(sorted[0]),
        ms(sorted[10]),
        ms(sorted[18]),
        ms(sorted[19]),
        mean
    );
    let ips = fake.state().pod_ips();
    assert_eq!(ips.len(), 20);
    let mut distinct: Vec<_> = ips.values().collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 20, "duplicate addresses");
    assert_eq!(ports(&lab).len(), baseline.1.len() + 20);

    // GC keeps the first 10 attachments and removes the other 10.
    let mut gc = calls[0].with_command("GC");
    gc.config["cniVersion"] = json!("1.1.0");
    gc.config["cni.dev/valid-attachments"] = calls[..10]
        .iter()
        .map(|c| json!({"containerID": c.container_id, "ifname": c.ifname}))
        .collect();
    ok(&invoke_cni(&lab, 1, &gc).expect("GC"), "GC");
    assert_eq!(fake.state().pods.len(), 10);
    assert_eq!(ports(&lab).len(), baseline.1.len() + 10);
    let kept: Vec<String> = (0..10).map(|i| format!("pod-{i}")).collect();
    assert!(fake.state().pods.keys().all(|(_, n)| kept.contains(n)));

    // Concurrent DELs (all at once), then concurrent ADDs of the same pods, then DELs.
    let run_all = |cmd: &str| {
        std::thread::scope(|s| {
            let hs: Vec<_> = calls
                .iter()
                .map(|c| {
                    let c = c.with_command(cmd);
                    let lab = &lab;
                    s.spawn(move || invoke_cni(lab, 1, &c).expect("invoke"))
                })
                .collect();
            for h in hs {
                let out = h.join().expect("thread");
                ok(&out, cmd);
            }
        })
    };
    run_all("DEL");
    assert_eq!(node_wiring(&lab), baseline);
    assert!(fake.state().pods.is_empty());
    run_all("ADD");
    assert_eq!(fake.state().pods.len(), 20);
    assert_eq!(ports(&lab).len(), baseline.1.len() + 20);
    run_all("DEL");
    assert_eq!(node_wiring(&lab), baseline);
}
