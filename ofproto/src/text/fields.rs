//! Per-field facts Open vSwitch's text syntax needs (ovs-fields(7)): the name a field slice is
//! printed with (`NXM_NX_REG0[0..15]`), the field's width in bits, and how its values print.

use super::{be_u128, eth_masked, ipv4_masked, ipv6_masked, port16, port32, put_hex};
use crate::oxm::{Field, OxmHeader};

/// How a field's value is written (`enum mf_string` in meta-flow.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFormat {
    /// Decimal integer (masks in hex).
    Decimal,
    /// `0x..` hexadecimal.
    Hex,
    /// Ethernet address.
    Ethernet,
    /// IPv4 address.
    Ipv4,
    /// IPv6 address.
    Ipv6,
    /// 16-bit OpenFlow 1.0 port (names for reserved ports).
    Port16,
    /// 32-bit OpenFlow 1.1+ port.
    Port32,
    /// `ct_state` flags.
    CtState,
    /// TCP flags.
    TcpFlags,
    /// `ip_frag` keywords.
    Frag,
}

/// How values of `field` print.
pub fn value_format(field: Field) -> ValueFormat {
    use Field::*;
    match field {
        InPort => ValueFormat::Port32,
        NxmInPort => ValueFormat::Port16,
        EthDst | EthSrc | ArpSha | ArpTha | Ipv6NdSll | Ipv6NdTll => ValueFormat::Ethernet,
        Ipv4Src | Ipv4Dst | ArpSpa | ArpTpa | TunIpv4Src | TunIpv4Dst => ValueFormat::Ipv4,
        Ipv6Src | Ipv6Dst | Ipv6NdTarget => ValueFormat::Ipv6,
        Metadata | EthType | VlanTci | Ipv6Flabel | TunnelId | Reg(_) | PktMark | CtZone
        | CtMark | CtLabel | PbbIsid | Ipv6Exthdr | InPhyPort => ValueFormat::Hex,
        CtState => ValueFormat::CtState,
        TcpFlags => ValueFormat::TcpFlags,
        IpFrag => ValueFormat::Frag,
        VlanVid | VlanPcp | IpDscp | IpEcn | IpProto | TcpSrc | TcpDst | UdpSrc | UdpDst
        | SctpSrc | SctpDst | Icmpv4Type | Icmpv4Code | ArpOp | Icmpv6Type | Icmpv6Code
        | MplsLabel | MplsTc | MplsBos | ConjId | IpTtl | IpTos => ValueFormat::Decimal,
    }
}

/// Width in bits as Open vSwitch counts it (`mf_field.n_bits`), which for some fields is less
/// than the wire width (tcp_flags 12, vlan_vid 13, ip_dscp 6, ...).
pub fn ovs_bits(field: Field) -> u16 {
    use Field::*;
    match field {
        VlanVid => 13,
        VlanPcp | MplsTc => 3,
        IpDscp => 6,
        IpEcn | IpFrag => 2,
        MplsBos => 1,
        MplsLabel | Ipv6Flabel => 20,
        TcpFlags => 12,
        PbbIsid => 24,
        Ipv6Exthdr => 9,
        ArpOp => 16,
        CtState => 32,
        f => f.bits(),
    }
}

/// The name a field slice prints with: the field's NXM name if it has one, else its OXM name
/// (`mf_format_subfield`).
pub fn slice_name(field: Field) -> String {
    use Field::*;
    let s = match field {
        InPort => "OXM_OF_IN_PORT",
        InPhyPort => "OXM_OF_IN_PHY_PORT",
        Metadata => "OXM_OF_METADATA",
        EthDst => "NXM_OF_ETH_DST",
        EthSrc => "NXM_OF_ETH_SRC",
        EthType => "NXM_OF_ETH_TYPE",
        VlanVid => "OXM_OF_VLAN_VID",
        VlanPcp => "OXM_OF_VLAN_PCP",
        IpDscp => "OXM_OF_IP_DSCP",
        IpEcn => "NXM_NX_IP_ECN",
        IpProto => "NXM_OF_IP_PROTO",
        Ipv4Src => "NXM_OF_IP_SRC",
        Ipv4Dst => "NXM_OF_IP_DST",
        TcpSrc => "NXM_OF_TCP_SRC",
        TcpDst => "NXM_OF_TCP_DST",
        UdpSrc => "NXM_OF_UDP_SRC",
        UdpDst => "NXM_OF_UDP_DST",
        SctpSrc => "OXM_OF_SCTP_SRC",
        SctpDst => "OXM_OF_SCTP_DST",
        Icmpv4Type => "NXM_OF_ICMP_TYPE",
        Icmpv4Code => "NXM_OF_ICMP_CODE",
        ArpOp => "NXM_OF_ARP_OP",
        ArpSpa => "NXM_OF_ARP_SPA",
        ArpTpa => "NXM_OF_ARP_TPA",
        ArpSha => "NXM_NX_ARP_SHA",
        ArpTha => "NXM_NX_ARP_THA",
        Ipv6Src => "NXM_NX_IPV6_SRC",
        Ipv6Dst => "NXM_NX_IPV6_DST",
        Ipv6Flabel => "NXM_NX_IPV6_LABEL",
        Icmpv6Type => "NXM_NX_ICMPV6_TYPE",
        Icmpv6Code => "NXM_NX_ICMPV6_CODE",
        Ipv6NdTarget => "NXM_NX_ND_TARGET",
        Ipv6NdSll => "NXM_NX_ND_SLL",
        Ipv6NdTll => "NXM_NX_ND_TLL",
        MplsLabel => "OXM_OF_MPLS_LABEL",
        MplsTc => "OXM_OF_MPLS_TC",
        MplsBos => "OXM_OF_MPLS_BOS",
        PbbIsid => "OXM_OF_PBB_ISID",
        TunnelId => "NXM_NX_TUN_ID",
        Ipv6Exthdr => "OXM_OF_IPV6_EXTHDR",
        Reg(n) => return format!("NXM_NX_REG{n}"),
        TunIpv4Src => "NXM_NX_TUN_IPV4_SRC",
        TunIpv4Dst => "NXM_NX_TUN_IPV4_DST",
        PktMark => "NXM_NX_PKT_MARK",
        CtState => "NXM_NX_CT_STATE",
        CtZone => "NXM_NX_CT_ZONE",
        CtMark => "NXM_NX_CT_MARK",
        CtLabel => "NXM_NX_CT_LABEL",
        ConjId => "NXM_NX_CONJ_ID",
        IpTtl => "NXM_NX_IP_TTL",
        IpFrag => "NXM_NX_IP_FRAG",
        TcpFlags => "NXM_NX_TCP_FLAGS",
        NxmInPort => "NXM_OF_IN_PORT",
        VlanTci => "NXM_OF_VLAN_TCI",
        IpTos => "NXM_OF_IP_TOS",
    };
    s.to_string()
}

/// A header flowmesh does not know, printed as `OXM(class,field[,experimenter])`. (Open vSwitch
/// would reject such a field; this form is flowmesh's own.)
pub fn unknown_header(h: &OxmHeader) -> String {
    match h.experimenter {
        Some(e) => format!("OXM({:#06x},{},{e:#010x})", h.class, h.field),
        None => format!("OXM({:#06x},{})", h.class, h.field),
    }
}

/// `ct_state` bit names.
pub fn ct_state_bit(bit: u32) -> Option<&'static str> {
    Some(match bit {
        0x01 => "new",
        0x02 => "est",
        0x04 => "rel",
        0x08 => "rpl",
        0x10 => "inv",
        0x20 => "trk",
        0x40 => "snat",
        0x80 => "dnat",
        _ => return None,
    })
}

/// TCP flag bit names (`packet_tcp_flag_to_string`).
pub fn tcp_flag_bit(bit: u32) -> Option<&'static str> {
    Some(match bit {
        0x001 => "fin",
        0x002 => "syn",
        0x004 => "rst",
        0x008 => "psh",
        0x010 => "ack",
        0x020 => "urg",
        0x040 => "ece",
        0x080 => "cwr",
        0x100 => "ns",
        0x200 => "[200]",
        0x400 => "[400]",
        0x800 => "[800]",
        _ => return None,
    })
}

/// `mf_format`: a value (and optional mask) of `field` as `set_field` writes it.
pub fn format_value(field: Field, value: &[u8], mask: Option<&[u8]>) -> String {
    let mut mask = mask;
    if let Some(m) = mask {
        if m.iter().all(|&b| b == 0) {
            return "ANY".into();
        }
        if m.iter().all(|&b| b == 0xff) {
            mask = None;
        }
    }
    let v = be_u128(value);
    let mut s = String::new();
    match value_format(field) {
        ValueFormat::Port32 if mask.is_none() => s = port32(v as u32),
        ValueFormat::Port16 if mask.is_none() => s = port16(v as u16),
        ValueFormat::Ethernet => s = eth_masked(value, mask.unwrap_or(&[0xff; 6])),
        ValueFormat::Ipv4 => {
            s = ipv4_masked(v as u32, mask.map_or(u32::MAX, |m| be_u128(m) as u32))
        }
        ValueFormat::Ipv6 => s = ipv6_masked(v, mask.map_or(u128::MAX, be_u128)),
        ValueFormat::CtState => {
            let m = mask.map_or(u32::MAX, |m| be_u128(m) as u32);
            s = super::flags_masked(ct_state_bit, v as u32, m, u32::MAX);
        }
        ValueFormat::TcpFlags => {
            let m = mask.map_or(0xffff, |m| be_u128(m) as u32);
            s = super::flags_masked(tcp_flag_bit, v as u32, m, 0xffff);
        }
        ValueFormat::Frag => {
            let m = mask.map_or(0xff, |m| be_u128(m) as u8);
            s = frag(v as u8, m).to_string();
        }
        ValueFormat::Hex | ValueFormat::Port16 | ValueFormat::Port32 => {
            put_hex(&mut s, value);
            if let Some(m) = mask {
                s.push('/');
                put_hex(&mut s, m);
            }
        }
        ValueFormat::Decimal => {
            s = v.to_string();
            if let Some(m) = mask {
                s.push('/');
                put_hex(&mut s, m);
            }
        }
    }
    s
}

/// `ip_frag` keyword for a value/mask (`mf_format_frag_string`).
pub fn frag(value: u8, mask: u8) -> &'static str {
    let (v, m) = (value & 3, mask & 3);
    match (m, v) {
        (0, _) => "<error>",
        (3, 0) => "no",
        (3, 1) => "first",
        (3, 3) => "later",
        (1, 0) => "no",
        (1, _) => "yes",
        (2, 0) => "not_later",
        (2, _) => "later",
        _ => "<error>",
    }
}
