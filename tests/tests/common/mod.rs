//! Shared pieces of the harness smoke tests: a hand-written VXLAN pipeline for `NetnsLab`
//! (like the lab's netns-e2e.sh) and process checks.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use flowmesh_tests::{NetnsLab, Pod};

/// Gateway MAC answered by the ARP-responder flow.
pub const GW_MAC: &str = "0a:58:00:00:00:01";
/// VNI used by the hand-written flows.
pub const VNI: u32 = 100;
/// Pod ofport on every node (tun0 takes 2 when enabled).
pub const POD_OFPORT: u32 = 3;

/// MAC of the pod on node `n`.
pub fn pod_mac(n: usize) -> String {
    format!("0a:58:0a:f4:{n:02x}:02")
}

/// The pod's address on node `n`: 10.244.n.2.
pub fn pod_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, u8::try_from(n).expect("small node number"), 2)
}

/// Flows for node `n` of a `k`-node lab: ARP responder for 10.244.n.1, tunnel in (VNI 100),
/// pod in, remote /24s out over VXLAN to their node's underlay IP, local delivery.
pub fn node_flows(lab: &NetnsLab, n: usize, k: usize) -> Vec<String> {
    let mac = pod_mac(n);
    let mut f = vec![
        format!(
            "table=0,priority=300,arp,arp_op=1,arp_tpa=10.244.{n}.1 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:{GW_MAC}->eth_src,set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:{GW_MAC}->arp_sha,move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:10.244.{n}.1->arp_spa,IN_PORT"
        ),
        format!("table=0,priority=200,in_port=1,tun_id={VNI} actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG1[],goto_table:20"),
        format!("table=0,priority=100,in_port={POD_OFPORT},dl_src={mac} actions=set_field:0x2->reg0,goto_table:10"),
        "table=0,priority=0 actions=drop".to_owned(),
        format!("table=10,priority=100,ip,nw_dst=10.244.{n}.0/24 actions=goto_table:20"),
        format!(
            "table=20,priority=100,ip,nw_dst={} actions=set_field:{GW_MAC}->eth_src,set_field:{mac}->eth_dst,dec_ttl,output:{POD_OFPORT}",
            pod_ip(n)
        ),
    ];
    for m in (1..=k).filter(|m| *m != n) {
        f.push(format!(
            "table=10,priority=100,ip,nw_dst=10.244.{m}.0/24 actions=set_field:{VNI}->tun_id,set_field:{}->tun_dst,output:1",
            lab.underlay_ip(m)
        ));
    }
    f
}

/// Starts a `k`-node lab (tun0 on), one pod per node at [`POD_OFPORT`], flows installed.
pub fn lab_with_pods(k: usize) -> (NetnsLab, Vec<Pod>) {
    let lab = NetnsLab::builder()
        .nodes(k)
        .tun0(true)
        .start()
        .expect("lab starts");
    let mut pods = Vec::new();
    for n in 1..=k {
        let gw = Ipv4Addr::new(10, 244, u8::try_from(n).expect("small"), 1);
        let pod = lab
            .add_pod(
                n,
                "pod1",
                &format!("{}/24", pod_ip(n)),
                gw,
                &pod_mac(n),
                Some(POD_OFPORT),
            )
            .expect("pod added");
        lab.node(n)
            .expect("node")
            .ovs()
            .add_flows(lab.bridge(), &node_flows(&lab, n, k))
            .expect("flows accepted");
        pods.push(pod);
    }
    (lab, pods)
}

/// True if `pid` no longer names a process of ours: /proc/PID is gone, or it is a different,
/// live process that is not our child (PID reuse).
pub fn process_gone(pid: u32) -> bool {
    match flowmesh_tests::process::proc_stat(pid) {
        None => true,
        Some((state, _, ppid)) => {
            let ours = ppid == std::process::id();
            let cmd = flowmesh_tests::process::proc_cmdline(pid).unwrap_or_default();
            !(ours || state == 'Z' || cmd.contains("ovs") || cmd.contains("ovsdb"))
        }
    }
}
