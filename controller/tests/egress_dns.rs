//! Egress firewall DNS rules end to end, against a small authoritative DNS server run by the
//! test (UDP on loopback, answers encoded with hickory-proto, records changed at run time), the
//! real controller and a real Open vSwitch bridge: the name's address appears in table 100, a
//! changed A record moves the flow within TTL + 1 s, a failing server keeps the old address
//! (with the error shown), and a controller restart keeps the flows.

mod support;

use hickory_resolver::proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_resolver::proto::rr::rdata::A;
use hickory_resolver::proto::rr::{RData, Record, RecordType};
use proto::admin as pa;
use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{sandbox, wait_for, wait_synced, Controller};

/// What the test server answers: name (lowercase, no trailing dot) → (addresses, TTL);
/// `silent` drops every query (a dead server).
#[derive(Default)]
struct Zone {
    records: HashMap<String, (Vec<Ipv4Addr>, u32)>,
    silent: bool,
}

fn serve(sock: UdpSocket, zone: Arc<Mutex<Zone>>) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            return;
        };
        let Ok(q) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        let z = zone.lock().expect("zone");
        if z.silent {
            continue;
        }
        let mut r = Message::new();
        r.set_id(q.id())
            .set_message_type(MessageType::Response)
            .set_op_code(OpCode::Query)
            .set_authoritative(true)
            .set_recursion_desired(q.recursion_desired());
        let mut code = ResponseCode::NoError;
        for query in q.queries() {
            r.add_query(query.clone());
            let name = query.name().to_ascii().trim_end_matches('.').to_lowercase();
            match z.records.get(&name) {
                Some((addrs, ttl)) if query.query_type() == RecordType::A => {
                    for a in addrs {
                        r.add_answer(Record::from_rdata(
                            query.name().clone(),
                            *ttl,
                            RData::A(A(*a)),
                        ));
                    }
                }
                Some(_) => {}
                None => code = ResponseCode::NXDomain,
            }
        }
        r.set_response_code(code);
        if let Ok(bytes) = r.to_vec() {
            let _ = sock.send_to(&bytes, from);
        }
    }
}

fn set(zone: &Arc<Mutex<Zone>>, name: &str, addrs: &[Ipv4Addr], ttl: u32) {
    zone.lock()
        .expect("zone")
        .records
        .insert(name.into(), (addrs.to_vec(), ttl));
}

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
    let sock = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let dns = sock.local_addr().expect("addr");
    let zone = Arc::new(Mutex::new(Zone::default()));
    let ttl = 2u32;
    set(
        &zone,
        "web.example.test",
        &[Ipv4Addr::new(192, 0, 2, 10)],
        ttl,
    );
    {
        let z = zone.clone();
        std::thread::spawn(move || serve(sock, z));
    }
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
    set(
        &zone,
        "web.example.test",
        &[Ipv4Addr::new(192, 0, 2, 20)],
        ttl,
    );
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
    zone.lock().expect("zone").silent = true;
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
