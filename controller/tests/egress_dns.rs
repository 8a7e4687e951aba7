//! Egress firewall DNS rules end to end, against a small authoritative DNS server run by the
//! test (UDP on loopback, answers encoded with hickory-proto, records changed at run time), the
//! real controller and a real Open vSwitch bridge: the name's address appears in table 100, a
//! changed A record moves the flow within TTL + 1 s, a failing server keeps the old address
//! (with the error shown), and a controller restart keeps the flows.

mod support;

use flowmesh_tests::dns::DnsServer;
use proto::admin as pa;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};
use support::{sandbox, wait_for, wait_synced, Controller};

async fn listed(
    admin: &mut proto::admin::admin_client::AdminClient<tonic::transport::Channel>,
) -> pa::EgressDnsName {
    let l = admin
        .list_egress_network_policies(pa::ListNetworkPoliciesRequest {
            namespace: "shop".into(),
        })
        .await
        .expect("list")
        .into_inner();
    l.items
        .first()
        .and_then(|p| p.dns_names.first().cloned())
        .expect("one name")
}

/// Whether a firewall flow matches exactly `ip`.
fn has(flows: &[String], ip: &str) -> bool {
    flows
        .iter()
        .any(|l| l.contains(&format!("nw_dst={ip} ")) || l.contains(&format!("nw_dst={ip},")))
}

fn fw_flows(sbx: &flowmesh_tests::OvsSandbox) -> Vec<String> {
    sbx.dump_flows("node-1")
        .expect("dump-flows")
        .into_iter()
        .filter(|l| l.contains("table=100") && l.contains("reg0="))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rule_follows_the_a_record_keeps_it_on_failure_and_across_restart() {
    let zone = DnsServer::start(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("dns");
    let dns = zone.addr;
    let ttl = 2u32;
    zone.set("web.example.test", &[Ipv4Addr::new(192, 0, 2, 10)], ttl);
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let dns_arg = dns.to_string();
    let mut ctl = Controller::start(
        &data,
        &[
            "--egress-dns-server",
            &dns_arg,
            "--egress-dns-ttl-floor",
            "1",
        ],
    );
    let sbx = sandbox(&ctl, &[("node-1", 0xa1, &[("veth-a", 3)])]);
    let mut admin = ctl.admin().await;
    admin
        .add_node(pa::AddNodeRequest {
            name: "node-1".into(),
            node_ip: "192.168.1.11".into(),
            dpid: 0xa1,
        })
        .await
        .expect("node");
    admin
        .create_namespace(pa::NameRequest {
            name: "shop".into(),
        })
        .await
        .expect("ns");
    // Attach refuses a pod while its node's switch is still connecting.
    wait_synced(&mut admin, &["node-1"]).await;
    admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-1".into(),
            namespace: "shop".into(),
            name: "web".into(),
            port_name: flowmesh_tests::OvsSandbox::port_name("node-1", "veth-a"),
            ofport: 3,
            ..Default::default()
        })
        .await
        .expect("pod");
    wait_synced(&mut admin, &["node-1"]).await;
    admin
        .apply_egress_network_policy(pa::EgressNetworkPolicy {
            namespace: "shop".into(),
            name: "fw".into(),
            egress: vec![
                pa::EgressNetworkPolicyRule {
                    r#type: "Deny".into(),
                    dns_name: "web.example.test".into(),
                    ..Default::default()
                },
                pa::EgressNetworkPolicyRule {
                    r#type: "Allow".into(),
                    cidr_selector: "0.0.0.0/0".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        })
        .await
        .expect("apply");
    // The name resolves and its /32 reaches the switch.
    wait_for(
        "the first address in table 100",
        Duration::from_secs(10),
        async || has(&fw_flows(&sbx), "192.0.2.10"),
    )
    .await;
    let n = listed(&mut admin).await;
    assert_eq!(n.addresses, vec!["192.0.2.10"]);
    assert!(
        n.next_refresh_unix_ms > 0 && n.last_error.is_empty(),
        "{n:?}"
    );

    // The A record changes: within TTL + 1 s the flow follows.
    zone.set("web.example.test", &[Ipv4Addr::new(192, 0, 2, 20)], ttl);
    let t0 = Instant::now();
    wait_for(
        "the new address in table 100",
        Duration::from_secs(10),
        async || {
            let f = fw_flows(&sbx);
            has(&f, "192.0.2.20") && !has(&f, "192.0.2.10")
        },
    )
    .await;
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_secs(u64::from(ttl) + 1),
        "the flow followed the record after {took:?} (TTL {ttl} s)"
    );
    let flows_before = fw_flows(&sbx);

    // The server goes silent: the lookup fails, the address and its flow stay.
    zone.set_silent(true);
    wait_for("the lookup error", Duration::from_secs(20), async || {
        !listed(&mut admin).await.last_error.is_empty()
    })
    .await;
    let n = listed(&mut admin).await;
    assert_eq!(n.addresses, vec!["192.0.2.20"], "{n:?}");
    assert_eq!(fw_flows(&sbx), flows_before);

    // Restart with the server still silent: the stored addresses give the same flows.
    ctl.kill9();
    ctl.spawn();
    let mut admin = ctl.admin().await;
    wait_synced(&mut admin, &["node-1"]).await;
    assert_eq!(fw_flows(&sbx), flows_before);
    let n = listed(&mut admin).await;
    assert_eq!(n.addresses, vec!["192.0.2.20"]);
}

type Admin = proto::admin::admin_client::AdminClient<tonic::transport::Channel>;

fn deny(name: &str) -> pa::EgressNetworkPolicyRule {
    pa::EgressNetworkPolicyRule {
        r#type: "Deny".into(),
        dns_name: name.into(),
        ..Default::default()
    }
}

fn allow_all() -> pa::EgressNetworkPolicyRule {
    pa::EgressNetworkPolicyRule {
        r#type: "Allow".into(),
        cidr_selector: "0.0.0.0/0".into(),
        ..Default::default()
    }
}

async fn apply(
    admin: &mut Admin,
    ns: &str,
    egress: Vec<pa::EgressNetworkPolicyRule>,
) -> Result<(), tonic::Status> {
    admin
        .apply_egress_network_policy(pa::EgressNetworkPolicy {
            namespace: ns.into(),
            name: "fw".into(),
            egress,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_dead_names_delay_no_other_projects_name() {
    let zone = DnsServer::start(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("dns");
    // Project "slow": 20 names its server answers after 30 s (every lookup times out, 5 s).
    let slow: Vec<String> = (0..20).map(|i| format!("slow-{i}.example.test")).collect();
    for n in &slow {
        zone.set(n, &[Ipv4Addr::new(198, 51, 100, 1)], 1);
        zone.set_delay(n, Duration::from_secs(30));
    }
    zone.set("fast.example.test", &[Ipv4Addr::new(192, 0, 2, 10)], 1);
    let dir = tempfile::tempdir().expect("tmp");
    let dns_arg = zone.addr.to_string();
    let ctl = Controller::start(
        &dir.path().join("data"),
        &[
            "--egress-dns-server",
            &dns_arg,
            "--egress-dns-ttl-floor",
            "1",
        ],
    );
    let sbx = sandbox(&ctl, &[("node-1", 0xa1, &[("veth-a", 3)])]);
    let mut admin = ctl.admin().await;
    admin
        .add_node(pa::AddNodeRequest {
            name: "node-1".into(),
            node_ip: "192.168.1.11".into(),
            dpid: 0xa1,
        })
        .await
        .expect("node");
    for ns in ["slow", "shop"] {
        admin
            .create_namespace(pa::NameRequest { name: ns.into() })
            .await
            .expect("ns");
    }
    wait_synced(&mut admin, &["node-1"]).await;
    admin
        .attach_pod(pa::AttachPodRequest {
            node: "node-1".into(),
            namespace: "shop".into(),
            name: "web".into(),
            port_name: flowmesh_tests::OvsSandbox::port_name("node-1", "veth-a"),
            ofport: 3,
            ..Default::default()
        })
        .await
        .expect("pod");
    apply(
        &mut admin,
        "slow",
        slow.iter().map(|n| deny(n)).chain([allow_all()]).collect(),
    )
    .await
    .expect("slow policy");
    wait_for(
        "the slow names to be asked",
        Duration::from_secs(10),
        async || zone.queries_for("slow-0.example.test") > 0,
    )
    .await;
    // While the slow names are in flight, shop's name resolves at once.
    let t0 = Instant::now();
    apply(
        &mut admin,
        "shop",
        vec![deny("fast.example.test"), allow_all()],
    )
    .await
    .expect("shop policy");
    wait_for(
        "shop's name in table 100",
        Duration::from_secs(10),
        async || has(&fw_flows(&sbx), "192.0.2.10"),
    )
    .await;
    let first = t0.elapsed();
    // And follows its record (TTL 1 s) while the slow names time out and retry: three
    // changes, each made just as the slow names were asked again.
    let mut follows = Vec::new();
    for (i, last) in [20u8, 30, 40].into_iter().enumerate() {
        let asked = zone.queries_for("slow-0.example.test");
        wait_for(
            "the slow names to be asked again",
            Duration::from_secs(20),
            async || zone.queries_for("slow-0.example.test") > asked,
        )
        .await;
        zone.set("fast.example.test", &[Ipv4Addr::new(192, 0, 2, last)], 1);
        let t = Instant::now();
        let ip = format!("192.0.2.{last}");
        wait_for(
            &format!("change {i} in table 100"),
            Duration::from_secs(10),
            async || has(&fw_flows(&sbx), &ip),
        )
        .await;
        follows.push(t.elapsed());
    }
    eprintln!("first address after {first:?}; changes followed after {follows:?}");
    assert!(
        first < Duration::from_secs(3),
        "shop's name waited {first:?} behind the slow names"
    );
    for f in &follows {
        assert!(
            *f < Duration::from_millis(2500),
            "a change took {f:?} with the slow names in flight (TTL 1 s): {follows:?}"
        );
    }
    let shown = admin
        .list_egress_network_policies(pa::ListNetworkPoliciesRequest {
            namespace: "slow".into(),
        })
        .await
        .expect("list")
        .into_inner();
    let errors = shown.items[0]
        .dns_names
        .iter()
        .filter(|n| !n.last_error.is_empty())
        .count();
    assert!(errors > 0, "the slow names show their timeouts: {shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_with_more_names_than_the_project_limit_is_refused_naming_the_rule() {
    let dir = tempfile::tempdir().expect("tmp");
    let ctl = Controller::start(
        &dir.path().join("data"),
        &["--egress-dns-names-per-namespace", "2"],
    );
    let mut admin = ctl.admin().await;
    admin
        .create_namespace(pa::NameRequest {
            name: "shop".into(),
        })
        .await
        .expect("ns");
    let e = apply(
        &mut admin,
        "shop",
        vec![
            deny("a.example.test"),
            deny("b.example.test"),
            deny("a.example.test"),
            deny("c.example.test"),
            allow_all(),
        ],
    )
    .await
    .expect_err("three distinct names");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("egressnetworkpolicy shop/fw")
            && e.message().contains("spec.egress[3].to.dnsName")
            && e.message().contains("at most 2 distinct dnsNames"),
        "{}",
        e.message()
    );
    let listed = admin
        .list_egress_network_policies(pa::ListNetworkPoliciesRequest {
            namespace: "shop".into(),
        })
        .await
        .expect("list")
        .into_inner();
    assert!(listed.items.is_empty(), "nothing was stored: {listed:?}");
    apply(
        &mut admin,
        "shop",
        vec![deny("a.example.test"), deny("b.example.test"), allow_all()],
    )
    .await
    .expect("two names are fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_name_is_stored_no_faster_than_the_write_rate() {
    let zone = DnsServer::start(None, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("dns");
    zone.set("flap.example.test", &[Ipv4Addr::new(192, 0, 2, 1)], 1);
    let dir = tempfile::tempdir().expect("tmp");
    let dns_arg = zone.addr.to_string();
    let ctl = Controller::start(
        &dir.path().join("data"),
        &[
            "--egress-dns-server",
            &dns_arg,
            "--egress-dns-ttl-floor",
            "1",
            "--egress-dns-write-interval",
            "4",
        ],
    );
    let mut admin = ctl.admin().await;
    admin
        .create_namespace(pa::NameRequest {
            name: "shop".into(),
        })
        .await
        .expect("ns");
    let mut events = admin
        .watch_events(pa::Empty {})
        .await
        .expect("watch")
        .into_inner();
    let stored = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = stored.clone();
    let watcher = tokio::spawn(async move {
        while let Ok(Some(e)) = events.message().await {
            if e.kind == "EgressDnsChanged" && e.object == "dnsname/flap.example.test" {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    apply(
        &mut admin,
        "shop",
        vec![deny("flap.example.test"), allow_all()],
    )
    .await
    .expect("policy");
    // A new address every 250 ms for 16 s: every lookup (each second) sees a new answer.
    let t0 = Instant::now();
    let asked = zone.queries_for("flap.example.test");
    let mut last = 1u8;
    while t0.elapsed() < Duration::from_secs(16) {
        last = last.wrapping_add(1).max(2);
        zone.set("flap.example.test", &[Ipv4Addr::new(192, 0, 2, last)], 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let elapsed = t0.elapsed().as_secs();
    let answers = zone.queries_for("flap.example.test") - asked;
    let writes = stored.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{answers} answers in {elapsed} s, {writes} stored");
    // A burst of 3, then one per 4 s (and one in progress).
    assert!(
        writes <= 3 + elapsed / 4 + 1,
        "{writes} stored changes in {elapsed} s"
    );
    assert!(
        answers >= writes + 4,
        "the name changed too rarely to show the limit: {answers} answers, {writes} stored"
    );
    // When the name settles, its last answer is stored within the interval.
    let want = vec![format!("192.0.2.{last}")];
    wait_for(
        "the last answer to be stored",
        Duration::from_secs(10),
        async || {
            admin
                .list_egress_network_policies(pa::ListNetworkPoliciesRequest {
                    namespace: "shop".into(),
                })
                .await
                .ok()
                .and_then(|l| l.into_inner().items.first().cloned())
                .and_then(|p| p.dns_names.first().cloned())
                .is_some_and(|n| n.addresses == want)
        },
    )
    .await;
    watcher.abort();
}
