//! The flows of each object, as fragments: a node's own static pipeline, one local pod, one
//! NETID in use, one remote node. Each is a pure function of a small input struct, so a cache
//! can tell exactly when a fragment must be rebuilt.

use super::builder::{FlowBuilder, PipelineError};
use super::cookie::{self, Feature};
use super::priority::Band;
use super::regs::{self, OFPORT_TUN0, OFPORT_VXLAN};
use super::tables::{TableDefault, TableId, TABLES};
use crate::alloc::pod_mac;
use crate::cidr::Ipv4Cidr;
use crate::config::Mode;
use crate::model::{ClusterModel, NodeInfo, PodKey};
use ofproto::oxm::{eth_type::ARP, eth_type::IPV4, ip_proto};
use ofproto::{Action, Flow, Match};
use std::net::Ipv4Addr;

/// Version of the flows this pipeline writes (bumped when static flows change).
pub const PIPELINE_VERSION: u8 = 2;

const MULTICAST: (Ipv4Addr, u8) = (Ipv4Addr::new(224, 0, 0, 0), 4);

/// Everything a node's static flows depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticInputs {
    /// The node itself.
    pub node: NodeInfo,
    /// Cluster ranges.
    pub cluster: Vec<Ipv4Cidr>,
    /// Service range.
    pub service: Ipv4Cidr,
    /// Mode.
    pub mode: Mode,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
}

impl StaticInputs {
    /// The inputs of `node` in `model`.
    pub fn of(model: &ClusterModel, node: &NodeInfo) -> Self {
        let c = model.config();
        StaticInputs {
            node: node.clone(),
            cluster: c.cluster_networks.iter().map(|e| e.cidr).collect(),
            service: c.service_network,
            mode: c.mode,
            vxlan_port: c.vxlan_port,
        }
    }
}

/// Everything one local pod's flows depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInputs {
    /// IP (the MAC derives from it).
    pub ip: Ipv4Addr,
    /// ofport.
    pub ofport: u32,
    /// Effective NETID.
    pub netid: u32,
}

fn ip() -> Match {
    Match::new().eth_type(IPV4)
}
fn arp() -> Match {
    Match::new().eth_type(ARP)
}

/// The node's own static flows: classifier, routing, the fixed rules and every default.
pub fn static_flows(s: &StaticInputs) -> Result<Vec<Flow>, PipelineError> {
    use ofproto::oxm::ct_state::{RPL, TRK};
    use TableId as T;
    let ck = cookie::node_cookie(Feature::Base, &s.node.name);
    let fb = |t, b| FlowBuilder::new(t, b, ck);
    let local = s.node.subnet;
    let (lnet, lpre) = (local.network(), local.prefix());
    let gw = s.node.gateway();
    let mut v = Vec::with_capacity(48);

    // t0: VXLAN in.
    for c in &s.cluster {
        let (cn, cp) = (c.network(), c.prefix());
        for m in [
            arp()
                .in_port(OFPORT_VXLAN)
                .arp_spa(cn, cp)
                .arp_tpa(lnet, lpre),
            ip().in_port(OFPORT_VXLAN).ipv4_src(cn, cp),
            ip().in_port(OFPORT_VXLAN).ipv4_dst(cn, cp),
        ] {
            v.push(
                fb(T::Classifier, Band::General)
                    .matching(m)
                    .action(regs::tun_id_to_src_netid())
                    .goto(T::VxlanIn)
                    .build()?,
            );
        }
        // t0: tun0 in. A pod's packet the host DNATed (kube-proxy) comes back from tun0 with
        // the pod's own source: commit it in the service zone, marked, so that its replies
        // go back to the host (t31), whichever node the endpoint is on.
        v.push(
            fb(T::Classifier, Band::ServiceCommit)
                .matching(
                    ip().in_port(OFPORT_TUN0)
                        .ipv4_src(lnet, lpre)
                        .ipv4_dst(cn, cp)
                        .ct_state(0, TRK),
                )
                .action(regs::ct_commit_host_dnat(T::Classifier.number()))
                .build()?,
        );
        v.push(
            fb(T::Classifier, Band::Override)
                .matching(
                    ip().in_port(OFPORT_TUN0)
                        .ipv4_src(lnet, lpre)
                        .ipv4_dst(cn, cp),
                )
                .goto(T::ServiceReturn)
                .build()?,
        );
        v.push(
            fb(T::Classifier, Band::General)
                .matching(arp().in_port(OFPORT_TUN0).arp_spa(gw, 32).arp_tpa(cn, cp))
                .goto(T::CtCommit)
                .build()?,
        );
        // t31: cluster ranges.
        v.push(
            fb(T::Routing, Band::PerObject)
                .matching(arp().arp_tpa(cn, cp))
                .goto(T::ArpRemote)
                .build()?,
        );
        v.push(
            fb(T::Routing, Band::PerObject)
                .matching(ip().ipv4_dst(cn, cp))
                .goto(T::RemotePod)
                .build()?,
        );
    }
    v.push(
        fb(T::Classifier, Band::PortGuard)
            .matching(Match::new().in_port(OFPORT_VXLAN))
            .build()?,
    );
    // t0: whatever goes to a local pod is looked up in the service zone first: a reply of a
    // connection the host DNATed (t0 p1200 above, on this node) is sent back to the host in
    // t31.
    v.push(
        fb(T::Classifier, Band::ServiceConntrack)
            .matching(ip().ipv4_dst(lnet, lpre).ct_state(0, TRK))
            .action(regs::ct_service_lookup(T::Classifier.number()))
            .build()?,
    );
    v.push(
        fb(T::Classifier, Band::HostSource)
            .matching(ip().in_port(OFPORT_TUN0).ipv4_src(gw, 32))
            .goto(T::CtCommit)
            .build()?,
    );
    v.push(
        fb(T::Classifier, Band::MulticastBlock)
            .matching(ip().in_port(OFPORT_TUN0).ipv4_dst(MULTICAST.0, MULTICAST.1))
            .build()?,
    );
    v.push(
        fb(T::Classifier, Band::General)
            .matching(ip().in_port(OFPORT_TUN0))
            .goto(T::CtCommit)
            .build()?,
    );
    v.push(
        fb(T::Classifier, Band::PortGuard)
            .matching(Match::new().in_port(OFPORT_TUN0))
            .build()?,
    );
    // t0: pods.
    for m in [arp(), ip()] {
        v.push(
            fb(T::Classifier, Band::PerObject)
                .matching(m)
                .goto(T::PodIn)
                .build()?,
        );
    }
    // t20: no VXLAN injection from pods.
    v.push(
        fb(T::PodIn, Band::Override)
            .matching(ip().ip_proto(ip_proto::UDP).udp_dst(s.vxlan_port))
            .build()?,
    );
    if s.mode == Mode::Networkpolicy {
        v.extend(policy_static_flows(s, ck)?);
    } else {
        // t27: no egress policy outside networkpolicy mode.
        v.push(
            fb(T::PolicyEgress, Band::Bypass)
                .goto(T::CtCommit)
                .build()?,
        );
    }
    // t31: gateway, local subnet, services, multicast.
    v.push(
        fb(T::Routing, Band::ServiceReply)
            .matching(
                ip().ct_state(RPL | TRK, RPL | TRK)
                    .with_u64(ofproto::Field::CtZone, regs::CT_ZONE_SERVICE.into())
                    .with_u64(ofproto::Field::CtMark, regs::CT_MARK_HOST_DNAT.into()),
            )
            // The host takes only frames to tun0's own MAC (`0a:58:` + the gateway's bytes).
            .actions([
                Action::set_field(ofproto::Field::EthDst, &pod_mac(gw)),
                Action::output(OFPORT_TUN0),
            ])
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::Override)
            .matching(arp().arp_tpa(gw, 32))
            .action(Action::output(OFPORT_TUN0))
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::Override)
            .matching(ip().ipv4_dst(gw, 32))
            .action(Action::output(OFPORT_TUN0))
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::General)
            .matching(arp().arp_tpa(lnet, lpre))
            .goto(T::ArpLocal)
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::General)
            .matching(ip().ipv4_dst(lnet, lpre))
            .goto(T::LocalPod)
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::PerObject)
            .matching(ip().ipv4_dst(s.service.network(), s.service.prefix()))
            .goto(T::Services)
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::MulticastTunnel)
            .matching(
                ip().in_port(OFPORT_VXLAN)
                    .ipv4_dst(MULTICAST.0, MULTICAST.1),
            )
            .goto(T::MulticastDeliver)
            .build()?,
    );
    v.push(
        fb(T::Routing, Band::MulticastLocal)
            .matching(ip().ipv4_dst(MULTICAST.0, MULTICAST.1))
            .goto(T::MulticastFilter)
            .build()?,
    );
    // t80: the host always reaches its local pods (committed in networkpolicy mode, so that
    // the pod's replies pass its egress policy); mode-specific global rules.
    let host_to_pod = fb(T::Isolation, Band::Override).matching(ip().ipv4_src(gw, 32));
    v.push(if s.mode == Mode::Networkpolicy {
        host_to_pod
            .actions([regs::ct_commit(), regs::output_dst_port()])
            .build()?
    } else {
        host_to_pod.action(regs::output_dst_port()).build()?
    });
    match s.mode {
        Mode::Multitenant => {
            for r in [regs::REG_SRC_NETID, regs::REG_DST_NETID] {
                v.push(
                    fb(T::Isolation, Band::General)
                        .matching(Match::new().reg(r, 0))
                        .action(regs::output_dst_port())
                        .build()?,
                );
            }
        }
        Mode::Subnet => {
            v.push(
                fb(T::Isolation, Band::General)
                    .action(regs::output_dst_port())
                    .build()?,
            );
        }
        Mode::Networkpolicy => {} // policy_static_flows
    }
    // t99: DNS to the node's own IP goes straight to the host.
    for (proto, m) in [
        (ip_proto::TCP, ip().ip_proto(ip_proto::TCP).tcp_dst(53)),
        (ip_proto::UDP, ip().ip_proto(ip_proto::UDP).udp_dst(53)),
    ] {
        let _ = proto;
        v.push(
            fb(T::DnsToNode, Band::General)
                .matching(m.ipv4_dst(s.node.ip, 32))
                .action(Action::output(OFPORT_TUN0))
                .build()?,
        );
    }
    // Every table's explicit default.
    for t in TABLES {
        v.extend(default_flows(
            t.id,
            t.default,
            t.default_priority,
            s.mode,
            ck,
        )?);
    }
    v.sort_by(super::flowset::key_cmp);
    Ok(v)
}

/// Networkpolicy mode's fixed flows: conntrack in table 0, established connections pass
/// tables 27 and 80, pods no policy isolates are open, and new connections leaving the node
/// are committed in table 30 (those to local pods are committed in table 80, after ingress).
fn policy_static_flows(s: &StaticInputs, ck: u64) -> Result<Vec<Flow>, PipelineError> {
    use ofproto::oxm::ct_state::{EST, NEW, REL, RPL, TRK};
    use TableId as T;
    let fb = |t, b| FlowBuilder::new(t, b, ck);
    let (lnet, lpre) = (s.node.subnet.network(), s.node.subnet.prefix());
    let (snet, spre) = (s.service.network(), s.service.prefix());
    let mut v = vec![
        fb(T::Classifier, Band::Conntrack)
            .matching(ip().ct_state(0, TRK))
            .action(regs::ct_recirc(T::Classifier.number()))
            .build()?,
        // After the service zone's lookup (packets to the local subnet): the original
        // direction goes on to the default zone's; a reply keeps the service zone's state
        // (`+est`: t27 and t80 let it pass), so the host's un-DNATed answer to a pod is a
        // reply of the pod's connection to the service IP (committed in t60).
        fb(T::Classifier, Band::ServiceZoneHandoff)
            .matching(
                ip().ct_state(TRK, TRK | RPL)
                    .with_u64(ofproto::Field::CtZone, regs::CT_ZONE_SERVICE.into()),
            )
            .action(regs::ct_recirc(T::Classifier.number()))
            .build()?,
        // t60: a pod's connection to a service IP, committed in the service zone: the host's
        // un-DNATed replies to it pass the pod's ingress policy as replies (t0 p1050).
        fb(T::Services, Band::Override)
            .matching(ip())
            .actions([regs::ct_commit_service(), Action::output(OFPORT_TUN0)])
            .build()?,
        // t27: services are judged after the host's DNAT, when they come back through t25.
        fb(T::PolicyEgress, Band::Override)
            .matching(ip().ipv4_dst(snet, spre))
            .goto(T::CtCommit)
            .build()?,
        fb(T::PolicyEgress, Band::PolicyOpen)
            .matching(ip())
            .goto(T::CtCommit)
            .build()?,
        fb(T::CtCommit, Band::Override)
            .matching(ip().ipv4_dst(lnet, lpre))
            .goto(T::Routing)
            .build()?,
        fb(T::CtCommit, Band::Override)
            .matching(ip().ipv4_dst(snet, spre))
            .goto(T::Routing)
            .build()?,
        fb(T::CtCommit, Band::General)
            .matching(ip().ct_state(NEW | TRK, NEW | TRK))
            .action(regs::ct_commit())
            .goto(T::Routing)
            .build()?,
        fb(T::Isolation, Band::PolicyOpen)
            .matching(ip())
            .actions([regs::ct_commit(), regs::output_dst_port()])
            .build()?,
    ];
    for st in [EST, REL] {
        v.push(
            fb(T::PolicyEgress, Band::Established)
                .matching(ip().ct_state(st, st))
                .goto(T::CtCommit)
                .build()?,
        );
        v.push(
            fb(T::Isolation, Band::Established)
                .matching(ip().ct_state(st, st))
                .action(regs::output_dst_port())
                .build()?,
        );
    }
    Ok(v)
}

fn default_flows(
    t: TableId,
    d: TableDefault,
    prio: u16,
    mode: Mode,
    ck: u64,
) -> Result<Vec<Flow>, PipelineError> {
    let band = if prio == Band::General.value() {
        Band::General
    } else {
        Band::Default
    };
    let b = FlowBuilder::new(t, band, ck);
    Ok(match d {
        TableDefault::Drop => vec![b.build()?],
        TableDefault::Goto(to) => vec![b.goto(to).build()?],
        TableDefault::Output(p) => vec![b.action(Action::output(p)).build()?],
        TableDefault::IpGotoElseDrop(to) => vec![
            b.clone().matching(ip()).goto(to).build()?,
            b.matching(arp()).build()?,
        ],
        TableDefault::Note => {
            let vck = cookie::cookie(Feature::Version, cookie::ObjectKind::None, 0);
            vec![FlowBuilder::new(t, Band::Default, vck)
                .action(Action::Note(vec![
                    mode.plugin_id(),
                    PIPELINE_VERSION,
                    0,
                    0,
                    0,
                    0,
                ]))
                .build()?]
        }
    })
}

/// The flows of one local pod: anti-spoofing (IP and ARP), service return, ARP and IP delivery.
pub fn pod_flows(key: &PodKey, p: &PodInputs) -> Result<[Flow; 5], PipelineError> {
    pod_flows_with_cookie(cookie::pod_cookie(&key.namespace, &key.name), p)
}

/// [`pod_flows`] with the pod's cookie (`cookie::pod_cookie` of its key) already computed.
pub fn pod_flows_with_cookie(ck: u64, p: &PodInputs) -> Result<[Flow; 5], PipelineError> {
    use TableId as T;
    let fb = |t, b| FlowBuilder::new(t, b, ck);
    let mac = pod_mac(p.ip);
    // Room for exactly the flow's fields: `build` keeps the allocation as it is (these are
    // five flows per pod, rebuilt with every node's local flows).
    let ip = |fields| Match::with_capacity(fields).eth_type(IPV4);
    let arp = |fields| Match::with_capacity(fields).eth_type(ARP);
    Ok([
        fb(T::PodIn, Band::PerObject)
            .matching(
                arp(5)
                    .in_port(p.ofport)
                    .eth_src(mac)
                    .arp_spa(p.ip, 32)
                    .arp_sha_masked(mac, [0xff; 6]),
            )
            .action(regs::set_src_netid(p.netid))
            .goto(T::CtCommit)
            .build()?,
        fb(T::PodIn, Band::PerObject)
            .matching(ip(4).in_port(p.ofport).eth_src(mac).ipv4_src(p.ip, 32))
            .action(regs::set_src_netid(p.netid))
            .goto(T::PolicyEgress)
            .build()?,
        fb(T::ServiceReturn, Band::PerObject)
            .matching(ip(2).ipv4_src(p.ip, 32))
            .action(regs::set_src_netid(p.netid))
            .goto(T::PolicyEgress)
            .build()?,
        fb(T::ArpLocal, Band::PerObject)
            .matching(arp(2).arp_tpa(p.ip, 32))
            .action(Action::output(p.ofport))
            .build()?,
        fb(T::LocalPod, Band::PerObject)
            .matching(ip(2).ipv4_dst(p.ip, 32))
            .actions([regs::set_dst_netid(p.netid), regs::set_dst_port(p.ofport)])
            .goto(T::Isolation)
            .build()?,
    ])
}

/// Multitenant: pods of NETID `netid` reach local pods of the same NETID.
pub fn netid_flow(netid: u32) -> Result<Flow, PipelineError> {
    FlowBuilder::new(
        TableId::Isolation,
        Band::PerObject,
        cookie::netid_cookie(netid),
    )
    .matching(
        Match::new()
            .reg(regs::REG_SRC_NETID, netid)
            .reg(regs::REG_DST_NETID, netid),
    )
    .action(regs::output_dst_port())
    .build()
}

/// The flows every other node holds for `remote`: VXLAN source check, tunnelled ARP and IP.
pub fn remote_node_flows(remote: &NodeInfo) -> Result<[Flow; 3], PipelineError> {
    use TableId as T;
    let ck = cookie::node_cookie(Feature::Mesh, &remote.name);
    let (n, p) = (remote.subnet.network(), remote.subnet.prefix());
    Ok([
        FlowBuilder::new(T::VxlanIn, Band::PerObject, ck)
            .matching(Match::new().tun_src(remote.ip))
            .goto(T::CtCommit)
            .build()?,
        FlowBuilder::new(T::ArpRemote, Band::PerObject, ck)
            .matching(arp().arp_tpa(n, p))
            .actions(regs::to_tunnel(remote.ip))
            .build()?,
        FlowBuilder::new(T::RemotePod, Band::PerObject, ck)
            .matching(ip().ipv4_dst(n, p))
            .actions(regs::to_tunnel(remote.ip))
            .build()?,
    ])
}
