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
