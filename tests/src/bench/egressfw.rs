//! `flowmesh-bench egressfw`: the egress firewall at scale.
//!
//! 1. In process (one core): a project with `--rules` CIDR rules (default 8,000, disjoint /24s
//!    and a final `0.0.0.0/0` Deny) and a project with `--dns-names` dnsName rules (default
//!    1,000, two addresses each), pods of both on `--switches` nodes: the time to compute every
//!    node's FlowSet, the table-100 flows, and the FlowSet diff per node when one rule is edited
//!    or one name's addresses change.
//! 2. Real Open vSwitch: the real `flowmesh-controller` and `--switches` dummy-datapath bridges
//!    connected to it; the 8,000-rule policy is applied through the admin API, which answers
//!    only when every switch acknowledged it (barrier): that is `install_secs`. Then one rule is
//!    edited and the controller's own flow-mod counter gives the flow-mods sent per switch.
//!
//! Ends with one line: `rules= compute_secs= install_secs= edit_flow_mods_per_switch=
//! dns_names= ...`.

use super::arg_value;
use super::attach::{controller_bin, free_port, Ctl};
use crate::{BridgeSpec, OvsSandbox};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Instant;
use topology::model::{EgressAction, EgressFirewall, EgressRule, EgressTo, PodAttach};
use topology::{ClusterModel, ClusterNetworkConfig, FlowSet, Ipv4Cidr, Mode, Pipeline};

/// The i-th rule's /24: 11.0.0.0/24, 11.0.1.0/24, ... (disjoint, outside the cluster).
fn rule_cidr(i: u32) -> Ipv4Cidr {
    Ipv4Cidr::new(Ipv4Addr::from(0x0b00_0000u32 + (i << 8)), 24)
}

fn cidr_rules(n: u32) -> Vec<EgressRule> {
    let mut v: Vec<EgressRule> = (0..n.saturating_sub(1))
        .map(|i| EgressRule {
            action: if i % 2 == 0 {
                EgressAction::Allow
            } else {
                EgressAction::Deny
            },
            to: EgressTo::Cidr(rule_cidr(i)),
        })
        .collect();
    v.push(EgressRule {
        action: EgressAction::Deny,
        to: EgressTo::Cidr(Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0)),
    });
    v
}

fn dns_addrs(i: u32, gen: u32) -> BTreeSet<Ipv4Addr> {
    [
        Ipv4Addr::from(0x2800_0000u32 + (i << 8) + 2 * gen + 1),
        Ipv4Addr::from(0x2800_0000u32 + (i << 8) + 2 * gen + 2),
    ]
    .into()
}

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let rules: u32 = arg_value(args, "--rules", 8000)?;
    let dns_names: u32 = arg_value(args, "--dns-names", 1000)?;
    let switches: u32 = arg_value(args, "--switches", 100)?;
    if rules == 0 || switches == 0 {
        return Err("--rules and --switches must be at least 1".into());
    }
    let local = in_process(rules, dns_names, switches)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let ovs = rt.block_on(on_ovs(rules, switches))?;
    println!(
        "rules={rules} switches={switches} compute_secs={:.4} flows_per_switch={} total_fw_flows={} install_secs={:.3} edit_flow_mods_per_switch={:.2} edit_diff_per_switch={} edit_compute_secs={:.4} dns_names={dns_names} dns_compute_secs={:.4} dns_flows={} dns_change_diff_per_switch={}",
        local.compute_secs,
        ovs.fw_flows_per_switch,
        ovs.fw_flows_per_switch * switches as usize,
        ovs.install_secs,
        ovs.edit_mods as f64 / switches as f64,
        local.edit_diff_per_node,
        local.edit_secs,
        local.dns_compute_secs,
        local.dns_flows,
        local.dns_diff_per_node,
    );
    Ok(())
}

struct Local {
    compute_secs: f64,
    edit_secs: f64,
    edit_diff_per_node: usize,
    dns_compute_secs: f64,
    dns_flows: usize,
    dns_diff_per_node: usize,
}

fn model(switches: u32) -> Result<ClusterModel, String> {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().map_err(|e| format!("{e}"))?,
        23,
        "172.30.0.0/16".parse().map_err(|e| format!("{e}"))?,
        Mode::Multitenant,
    );
    let mut m = ClusterModel::new(config).map_err(|e| e.to_string())?;
    for ns in ["default", "fw", "dns"] {
        m.add_namespace(ns).map_err(|e| e.to_string())?;
    }
    for i in 0..switches {
        let node = format!("n{i}");
        m.add_node(
            &node,
            Ipv4Addr::new(172, 31, (i / 250) as u8, (i % 250 + 1) as u8),
            0x1000 + u64::from(i),
        )
        .map_err(|e| e.to_string())?;
        for (k, ns) in ["fw", "dns"].iter().enumerate() {
            m.add_pod(PodAttach {
                namespace: ns,
                name: &format!("p{i}"),
                node: &node,
                port_name: &format!("p{k}"),
                ofport: 3 + k as u32,
            })
            .map_err(|e| e.to_string())?;
        }
    }
    Ok(m)
}

fn all(p: &mut Pipeline, m: &ClusterModel) -> Result<BTreeMap<String, FlowSet>, String> {
    p.recompute(m, &topology::Affected::all())
        .map_err(|e| e.to_string())
}

fn in_process(rules: u32, dns_names: u32, switches: u32) -> Result<Local, String> {
    let mut m = model(switches)?;
    let mut p = Pipeline::new();
    let before = all(&mut p, &m)?;
    let fw = EgressFirewall {
        namespace: "fw".into(),
        name: "fw".into(),
        rules: cidr_rules(rules),
    };
    let t = Instant::now();
    m.apply_egress_firewall(fw.clone())
        .map_err(|e| e.to_string())?;
    let with_fw = all(&mut p, &m)?;
    let compute_secs = t.elapsed().as_secs_f64();
    let n0 = &with_fw["n0"];
    if n0.table(100).count() < rules as usize {
        return Err(format!(
            "expected {rules} table-100 flows, got {}",
            n0.table(100).count()
        ));
    }
    let _ = before;
    // Edit one rule in the middle.
    let mut edited = fw.clone();
    edited.rules[(rules / 2) as usize].to =
        EgressTo::Cidr("192.0.2.0/24".parse().map_err(|e| format!("{e}"))?);
    let t = Instant::now();
    m.apply_egress_firewall(edited).map_err(|e| e.to_string())?;
    let after = all(&mut p, &m)?;
    let edit_secs = t.elapsed().as_secs_f64();
    let edit_diff_per_node = FlowSet::diff(&with_fw["n0"], &after["n0"]).len();
    // DNS names.
    let dns_rules: Vec<EgressRule> = (0..dns_names)
        .map(|i| EgressRule {
            action: EgressAction::Allow,
            to: EgressTo::DnsName(format!("host{i}.bench.example")),
        })
        .collect();
    m.apply_egress_firewall(EgressFirewall {
        namespace: "dns".into(),
        name: "fw".into(),
        rules: dns_rules,
    })
    .map_err(|e| e.to_string())?;
    let t = Instant::now();
    for i in 0..dns_names {
        m.set_egress_dns_addresses(&format!("host{i}.bench.example"), dns_addrs(i, 0));
    }
    let dns_before = all(&mut p, &m)?;
    let dns_compute_secs = t.elapsed().as_secs_f64();
    let dns_netid = m.effective_netid("dns");
    let dns_flows = dns_before["n0"]
        .table(100)
        .filter(|f| f.to_string().contains(&format!("reg0={dns_netid:#x}")))
        .count();
    if dns_names > 0 {
        m.set_egress_dns_addresses("host0.bench.example", dns_addrs(0, 1));
    }
    let dns_after = all(&mut p, &m)?;
    let dns_diff_per_node = FlowSet::diff(&dns_before["n0"], &dns_after["n0"]).len();
    println!(
        "in process: {rules} rules on {switches} nodes computed in {compute_secs:.4}s; one edit recomputed in {edit_secs:.4}s, diff {edit_diff_per_node} per node; {dns_names} DNS names ({dns_flows} flows) in {dns_compute_secs:.4}s, one name's change: diff {dns_diff_per_node} per node"
    );
    Ok(Local {
        compute_secs,
        edit_secs,
        edit_diff_per_node,
        dns_compute_secs,
        dns_flows,
        dns_diff_per_node,
    })
}

struct Ovs {
    install_secs: f64,
    fw_flows_per_switch: usize,
    edit_mods: u64,
}

fn flow_mods_sent(metrics: SocketAddr) -> Result<u64, String> {
    let mut s = std::net::TcpStream::connect(metrics).map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    body.lines()
        .find_map(|l| l.strip_prefix("flowmesh_flow_mods_sent_total "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no flowmesh_flow_mods_sent_total in /metrics".into())
}

fn to_proto(f: &EgressFirewall) -> pa::EgressNetworkPolicy {
    pa::EgressNetworkPolicy {
        namespace: f.namespace.clone(),
        name: f.name.clone(),
        egress: f
            .rules
            .iter()
            .map(|r| pa::EgressNetworkPolicyRule {
                r#type: r.action.as_str().into(),
                cidr_selector: match &r.to {
                    EgressTo::Cidr(c) => c.to_string(),
                    EgressTo::DnsName(_) => String::new(),
                },
                dns_name: match &r.to {
                    EgressTo::DnsName(n) => n.clone(),
                    EgressTo::Cidr(_) => String::new(),
                },
            })
            .collect(),
        ..Default::default()
    }
}

async fn on_ovs(rules: u32, switches: u32) -> Result<Ovs, String> {
    let data = std::env::temp_dir().join(format!("flowmesh-bench-egressfw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let grpc = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let of = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let log_path = data.with_extension("log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let child = Command::new(controller_bin()?)
        .arg("--data-dir")
        .arg(&data)
        .args(["--grpc-listen", &grpc.to_string()])
        .args(["--openflow-listen", &of.to_string()])
        .args(super::per_peer_flag(switches))
        .args(["--metrics-listen", &metrics.to_string(), "--log", "warn"])
        // One ovs-vswitchd serves every bridge: while it absorbs 8,000 flows per bridge it
        // answers echoes late; the default 2 s would drop switches mid-install.
        .args(["--echo-interval", "15"])
        // No DNS names in this project; keep the resolver off the machine's own servers.
        .args(["--egress-dns-server", "127.0.0.1:9"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting flowmesh-controller: {e}"))?;
    let _ctl = Ctl(child);
    super::wait_listening(grpc, "flowmesh-controller").await?;
    let sbx = OvsSandbox::builder()
        .bridges(
            (0..switches)
                .map(|i| BridgeSpec::new(format!("n{i}"), 0x1000 + u64::from(i)).pod("p0", 3)),
        )
        .controller(format!("tcp:{of}"))
        .controller_max_backoff_ms(1000)
        .start()
        .map_err(|e| e.to_string())?;
    let mut admin = AdminClient::connect(format!("http://{grpc}"))
        .await
        .map_err(|e| e.to_string())?;
    super::add_bench_nodes(&mut admin, switches).await?;
    admin
        .create_namespace(pa::NameRequest { name: "fw".into() })
        .await
        .map_err(|e| format!("create namespace: {}", e.message()))?;
    for i in 0..switches {
        admin
            .attach_pod(pa::AttachPodRequest {
                node: format!("n{i}"),
                namespace: "fw".into(),
                name: format!("p{i}"),
                port_name: OvsSandbox::port_name(&format!("n{i}"), "p0"),
                ofport: 3,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("attach: {}", e.message()))?;
    }
    let fw = EgressFirewall {
        namespace: "fw".into(),
        name: "fw".into(),
        rules: cidr_rules(rules),
    };
    let t = Instant::now();
    admin
        .apply_egress_network_policy(to_proto(&fw))
        .await
        .map_err(|e| format!("apply: {}", e.message()))?;
    let install_secs = t.elapsed().as_secs_f64();
    let last = format!("n{}", switches - 1);
    let fw_flows_per_switch = sbx
        .dump_flows(&last)
        .map_err(|e| e.to_string())?
        .iter()
        .filter(|l| l.contains("table=100") && l.contains("reg0="))
        .count();
    if fw_flows_per_switch < rules as usize {
        return Err(format!(
            "{last} holds {fw_flows_per_switch} firewall flows, expected {rules}"
        ));
    }
    let mut edited = fw.clone();
    edited.rules[(rules / 2) as usize].to =
        EgressTo::Cidr("192.0.2.0/24".parse().map_err(|e| format!("{e}"))?);
    let before = flow_mods_sent(metrics)?;
    admin
        .apply_egress_network_policy(to_proto(&edited))
        .await
        .map_err(|e| format!("edit: {}", e.message()))?;
    let edit_mods = flow_mods_sent(metrics)? - before;
    let on_switch = sbx.dump_flows(&last).map_err(|e| e.to_string())?;
    if !on_switch.iter().any(|l| l.contains("nw_dst=192.0.2.0/24")) {
        return Err(format!("{last}: the edited rule's flow is not there"));
    }
    println!(
        "real OVS: {rules} rules ({fw_flows_per_switch} flows per switch) on {switches} switches installed (barrier acknowledged) in {install_secs:.3}s; one rule edited: {edit_mods} flow-mods in total"
    );
    drop(sbx);
    let _ = std::fs::remove_dir_all(&data);
    Ok(Ovs {
        install_secs,
        fw_flows_per_switch,
        edit_mods,
    })
}
