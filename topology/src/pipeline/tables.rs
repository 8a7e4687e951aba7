//! The pipeline's tables, declared once as data: number, name, what each may match, set and
//! jump to, and its explicit default. Numbering follows OpenShift SDN (DESIGN §4).

use ofproto::Field;

/// A table of the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TableId {
    /// Classify by in_port: VXLAN in, tun0 in, pod in.
    Classifier = 0,
    /// VXLAN source check: tun_src must be a known node.
    VxlanIn = 10,
    /// Pod anti-spoofing; load the pod's NETID into reg0.
    PodIn = 20,
    /// Service traffic returning from the host: restore reg0.
    ServiceReturn = 25,
    /// NetworkPolicy egress (bypassed in subnet and multitenant modes).
    PolicyEgress = 27,
    /// Conntrack commit (networkpolicy mode); pass-through otherwise.
    CtCommit = 30,
    /// Routing.
    Routing = 31,
    /// ARP to local pods.
    ArpLocal = 40,
    /// ARP to remote subnets.
    ArpRemote = 50,
    /// Services (to the host's kube-proxy).
    Services = 60,
    /// Local pod delivery: reg1 = destination NETID, reg2 = ofport.
    LocalPod = 70,
    /// Ingress isolation; output:reg2.
    Isolation = 80,
    /// Remote pod delivery over VXLAN.
    RemotePod = 90,
    /// DNS-to-node exception.
    DnsToNode = 99,
    /// Egress firewall.
    EgressFirewall = 100,
    /// Egress IP steering.
    EgressIp = 101,
    /// Multicast from local pods, filter.
    MulticastFilter = 110,
    /// Multicast head-end replication over VXLAN.
    MulticastReplicate = 111,
    /// Multicast delivery to local pods.
    MulticastDeliver = 120,
    /// Pipeline version marker.
    Version = 253,
}

impl TableId {
    /// The table number.
    pub fn number(self) -> u8 {
        self as u8
    }
    /// Its declaration.
    pub fn spec(self) -> &'static TableSpec {
        TABLES.iter().find(|t| t.id == self).unwrap_or(&TABLES[0])
    }
    /// The table with this number, if it is part of the pipeline.
    pub fn from_number(n: u8) -> Option<TableId> {
        TABLES.iter().find(|t| t.id as u8 == n).map(|t| t.id)
    }
}

/// What a table does with packets no other flow matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableDefault {
    /// Drop.
    Drop,
    /// Continue in another table.
    Goto(TableId),
    /// Output to a port (tun0).
    Output(u32),
    /// Only the version note (table 253).
    Note,
    /// `ip` → goto, `arp` → drop (table 31).
    IpGotoElseDrop(TableId),
}

/// One table's declaration.
#[derive(Debug)]
pub struct TableSpec {
    /// Which table.
    pub id: TableId,
    /// Short name for documents and `flowmeshctl`.
    pub name: &'static str,
    /// Fields its flows may match.
    pub matches: &'static [Field],
    /// Fields its flows may write (set_field, move, load destinations).
    pub sets: &'static [Field],
    /// Tables its flows may jump to (goto_table, resubmit).
    pub gotos: &'static [TableId],
    /// Its default.
    pub default: TableDefault,
    /// Priority of the default flow.
    pub default_priority: u16,
}

use Field::*;
use TableId as T;

const IP4: &[Field] = &[EthType, Ipv4Src, Ipv4Dst];
const TUNNEL_SETS: &[Field] = &[TunnelId, TunIpv4Dst];

/// Every table of the pipeline, in number order.
pub static TABLES: &[TableSpec] = &[
    TableSpec {
        id: T::Classifier,
        name: "classifier",
        matches: &[
            InPort, EthType, Ipv4Src, Ipv4Dst, ArpSpa, ArpTpa, CtState, CtZone,
        ],
        // ct_mark: written inside the service zone's `ct(commit,exec(...))`.
        sets: &[Reg(0), CtMark],
        gotos: &[T::VxlanIn, T::PodIn, T::ServiceReturn, T::CtCommit],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::VxlanIn,
        name: "vxlan-source-check",
        matches: &[TunIpv4Src],
        sets: &[],
        gotos: &[T::CtCommit],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::PodIn,
        name: "pod-anti-spoofing",
        matches: &[
            InPort, EthSrc, EthType, Ipv4Src, ArpSpa, ArpSha, IpProto, UdpDst,
        ],
        sets: &[Reg(0)],
        gotos: &[T::PolicyEgress, T::CtCommit],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::ServiceReturn,
        name: "service-return",
        matches: IP4,
        sets: &[Reg(0)],
        gotos: &[T::PolicyEgress],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::PolicyEgress,
        name: "policy-egress",
        matches: &[
            EthType,
            Ipv4Src,
            Ipv4Dst,
            Reg(0),
            IpProto,
            TcpDst,
            UdpDst,
            SctpDst,
            CtState,
            ConjId,
        ],
        sets: &[],
        gotos: &[T::CtCommit],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::CtCommit,
        name: "conntrack-commit",
        matches: &[EthType, Ipv4Src, Ipv4Dst, CtState],
        sets: &[],
        gotos: &[T::Routing],
        default: TableDefault::Goto(T::Routing),
        default_priority: 0,
    },
    TableSpec {
        id: T::Routing,
        name: "routing",
        matches: &[InPort, EthType, Ipv4Dst, ArpTpa, CtState, CtZone, CtMark],
        // eth_dst: service replies go to the host addressed to tun0's MAC.
        sets: &[EthDst],
        gotos: &[
            T::ArpLocal,
            T::ArpRemote,
            T::Services,
            T::LocalPod,
            T::RemotePod,
            T::DnsToNode,
            T::MulticastFilter,
            T::MulticastDeliver,
        ],
        default: TableDefault::IpGotoElseDrop(T::DnsToNode),
        default_priority: 0,
    },
    TableSpec {
        id: T::ArpLocal,
        name: "arp-local",
        matches: &[EthType, ArpTpa],
        sets: &[],
        gotos: &[],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::ArpRemote,
        name: "arp-remote",
        matches: &[EthType, ArpTpa],
        sets: TUNNEL_SETS,
        gotos: &[],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::Services,
        name: "services",
        matches: &[EthType, Ipv4Dst, IpProto, TcpDst, UdpDst],
        sets: &[],
        gotos: &[],
        default: TableDefault::Output(2),
        default_priority: 200,
    },
    TableSpec {
        id: T::LocalPod,
        name: "local-pod",
        matches: IP4,
        sets: &[Reg(1), Reg(2)],
        gotos: &[T::Isolation],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::Isolation,
        name: "ingress-isolation",
        matches: &[
            EthType,
            Ipv4Src,
            Ipv4Dst,
            Reg(0),
            Reg(1),
            IpProto,
            TcpDst,
            UdpDst,
            SctpDst,
            CtState,
            ConjId,
        ],
        sets: &[],
        gotos: &[],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::RemotePod,
        name: "remote-pod",
        matches: IP4,
        sets: TUNNEL_SETS,
        gotos: &[],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::DnsToNode,
        name: "dns-to-node",
        matches: &[EthType, Ipv4Dst, IpProto, TcpDst, UdpDst],
        sets: &[],
        gotos: &[T::EgressFirewall],
        default: TableDefault::Goto(T::EgressFirewall),
        default_priority: 0,
    },
    TableSpec {
        id: T::EgressFirewall,
        name: "egress-firewall",
        matches: &[EthType, Ipv4Dst, Reg(0), CtState, TunIpv4Src],
        sets: &[],
        gotos: &[T::EgressIp],
        default: TableDefault::Goto(T::EgressIp),
        default_priority: 0,
    },
    TableSpec {
        id: T::EgressIp,
        name: "egress-ip",
        matches: &[InPort, EthType, Reg(0), CtState],
        sets: &[TunnelId, TunIpv4Dst, EthDst, PktMark],
        gotos: &[],
        default: TableDefault::Output(2),
        default_priority: 0,
    },
    TableSpec {
        id: T::MulticastFilter,
        name: "multicast-filter",
        matches: &[Reg(0)],
        sets: &[],
        gotos: &[T::MulticastReplicate],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::MulticastReplicate,
        name: "multicast-replicate",
        matches: &[Reg(0)],
        // The tunnel fields are written by the NETID's replication group, not by flows.
        sets: &[],
        gotos: &[T::MulticastDeliver],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::MulticastDeliver,
        name: "multicast-deliver",
        matches: &[Reg(0)],
        sets: &[],
        gotos: &[],
        default: TableDefault::Drop,
        default_priority: 0,
    },
    TableSpec {
        id: T::Version,
        name: "version",
        matches: &[],
        sets: &[],
        gotos: &[],
        default: TableDefault::Note,
        default_priority: 0,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_matches_design() {
        let nums: Vec<u8> = TABLES.iter().map(|t| t.id.number()).collect();
        assert_eq!(
            nums,
            [0, 10, 20, 25, 27, 30, 31, 40, 50, 60, 70, 80, 90, 99, 100, 101, 110, 111, 120, 253]
        );
        for t in TABLES {
            assert_eq!(t.id.spec().id, t.id);
            assert_eq!(TableId::from_number(t.id.number()), Some(t.id));
            for g in t.gotos {
                assert!(
                    g.number() > t.id.number(),
                    "{:?} jumps backwards to {g:?}",
                    t.id
                );
            }
        }
    }
}
