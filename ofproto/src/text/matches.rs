//! A match as `ovs-ofctl dump-flows` prints it (`match_format` in Open vSwitch's lib/match.c).
//!
//! Open vSwitch first turns the OXM fields into a flow plus wildcards and then prints that in
//! its own fixed order, which is not wire order:
//! `priority, pkt_mark, conj_id, ct_state, ct_zone, ct_mark, ct_label, <dl_type shorthand>,
//! reg0..reg15, tun_id, tun_src, tun_dst, metadata, in_port, dl_vlan/dl_vlan_pcp/vlan_tci,
//! dl_src, dl_dst, dl_type, {ipv6_src, ipv6_dst, ipv6_label | arp_spa, arp_tpa | nw_src,
//! nw_dst}, nw_proto|arp_op, arp_sha, arp_tha, nw_tos, nw_ecn, nw_ttl, mpls_label, mpls_tc,
//! mpls_bos, nw_frag, {icmp_type, icmp_code[, nd_target, nd_sll, nd_tll] | tp_src, tp_dst},
//! tcp_flags`.
//!
//! * `eth_type` 0x0800 prints as `ip` (or `tcp`/`udp`/`icmp`/`sctp`, which also absorb
//!   `ip_proto`), 0x86dd as `ipv6` (`tcp6`, `udp6`, `icmp6`, `sctp6`), 0x0806 `arp`,
//!   0x8035 `rarp`, 0x8847 `mpls`, 0x8848 `mplsm`; other types as `dl_type=0x....`.
//! * Registers, pkt_mark, ct_mark, tun_id and metadata print as `%#x` (so zero is `0`), with
//!   `/%#x` masks; addresses use CIDR prefixes when the mask is one; ports and most small fields
//!   are decimal, with `0x../0x..` when masked.
//! * Value bits outside a mask are ignored and an all-zero mask drops the field.
//! * Fields Open vSwitch does not know (unknown or experimenter OXMs, in_phy_port, pbb_isid,
//!   ipv6_exthdr) print last, in wire order, in flowmesh's own `OXM(class,field)=0x..` form.

use super::fields::{self, ct_state_bit, tcp_flag_bit};
use super::{
    be_u128, eth_masked, flags, flags_masked, hash_x, ipv4_masked, ipv6_masked, port16, port32,
    put_hex,
};
use crate::oxm::{Field, Match};
use std::collections::BTreeMap;
use std::fmt::Write;

/// OFP_DEFAULT_PRIORITY: not printed.
pub const DEFAULT_PRIORITY: u16 = 0x8000;

/// Effective (value & mask, mask) of each known field, as integers.
struct View {
    fields: BTreeMap<Field, (u128, u128, usize)>,
    /// 802.1Q TCI value and mask, combined from vlan_vid / vlan_pcp / vlan_tci in wire order.
    tci: (u16, u16),
}

impl View {
    fn new(m: &Match) -> View {
        let mut fields = BTreeMap::new();
        let (mut tci_v, mut tci_m) = (0u16, 0u16);
        for f in &m.fields {
            let Some(field) = f.field() else { continue };
            let Some((v, mk)) = f.effective() else {
                continue;
            };
            let (v, mk) = (be_u128(&v), be_u128(&mk));
            match field {
                Field::VlanTci => {
                    tci_v = v as u16;
                    tci_m = mk as u16;
                }
                Field::VlanVid => {
                    let mk = mk as u16 & 0x1fff;
                    tci_v = (tci_v & !0x1fff) | (v as u16 & mk);
                    tci_m = mk | (tci_m & 0xe000);
                }
                Field::VlanPcp => {
                    tci_v = (tci_v & !0xe000) | (((v as u16) & 7) << 13) | 0x1000;
                    tci_m |= 0xf000;
                }
                _ => {}
            }
            fields.insert(field, (v, mk, f.value.len()));
        }
        View {
            fields,
            tci: (tci_v, tci_m),
        }
    }

    fn get(&self, f: Field) -> Option<(u128, u128)> {
        self.fields.get(&f).map(|&(v, m, _)| (v, m))
    }

    fn first(&self, fs: &[Field]) -> Option<(u128, u128)> {
        fs.iter().find_map(|&f| self.get(f))
    }

    fn value(&self, fs: &[Field]) -> u128 {
        self.first(fs).map_or(0, |(v, _)| v)
    }
}

fn u32_masked(s: &mut String, name: &str, vm: Option<(u128, u128)>, full: u128) {
    if let Some((v, m)) = vm {
        let _ = write!(s, "{name}={}", hash_x(v));
        if m != full {
            let _ = write!(s, "/{}", hash_x(m));
        }
        s.push(',');
    }
}

fn be16_masked(s: &mut String, name: &str, vm: Option<(u128, u128)>) {
    if let Some((v, m)) = vm {
        if m == 0xffff {
            let _ = write!(s, "{name}={v},");
        } else {
            let _ = write!(s, "{name}={v:#x}/{m:#x},");
        }
    }
}

fn ip_netmask(s: &mut String, name: &str, vm: Option<(u128, u128)>) {
    if let Some((v, m)) = vm {
        let _ = write!(s, "{name}={},", ipv4_masked(v as u32, m as u32));
    }
}

fn ipv6_netmask(s: &mut String, name: &str, vm: Option<(u128, u128)>) {
    if let Some((v, m)) = vm {
        let _ = write!(s, "{name}={},", ipv6_masked(v, m));
    }
}

fn eth_field(s: &mut String, name: &str, vm: Option<(u128, u128)>) {
    if let Some((v, m)) = vm {
        let vb = v.to_be_bytes();
        let mb = m.to_be_bytes();
        let _ = write!(s, "{name}={},", eth_masked(&vb[10..], &mb[10..]));
    }
}

/// Format `m` as Open vSwitch does, starting with `priority=N,` when a priority other than the
/// default 32768 is given. No trailing comma; empty for the match-all.
pub fn format_match(m: &Match, priority: Option<u16>) -> String {
    use Field::*;
    let w = View::new(m);
    let mut s = String::new();
    if let Some(p) = priority {
        if p != DEFAULT_PRIORITY {
            let _ = write!(s, "priority={p},");
        }
    }
    u32_masked(&mut s, "pkt_mark", w.get(PktMark), 0xffff_ffff);
    if let Some((v, _)) = w.get(ConjId) {
        let _ = write!(s, "conj_id={v},");
    }
    if let Some((v, m)) = w.get(CtState) {
        let (v, m) = (v as u32 & 0xff, m as u32 & 0xff);
        if m == 0xff {
            let _ = write!(s, "ct_state={},", flags(ct_state_bit, v, '|'));
        } else if m != 0 {
            let _ = write!(s, "ct_state={},", flags_masked(ct_state_bit, v, m, 0xff));
        }
    }
    be16_masked(&mut s, "ct_zone", w.get(CtZone));
    u32_masked(&mut s, "ct_mark", w.get(CtMark), 0xffff_ffff);
    if let Some((v, m)) = w.get(CtLabel) {
        s.push_str("ct_label=");
        put_hex(&mut s, &v.to_be_bytes());
        if m != u128::MAX {
            s.push('/');
            put_hex(&mut s, &m.to_be_bytes());
        }
        s.push(',');
    }

    let dl_type = w.get(EthType).map(|(v, _)| v as u16);
    let nw_proto = w.first(&[IpProto, ArpOp]);
    let proto_v = nw_proto.map_or(0, |(v, _)| v as u8);
    let mut skip_type = false;
    let mut skip_proto = false;
    if let Some(t) = dl_type {
        skip_type = true;
        let proto_name = |v6: bool| -> Option<&'static str> {
            nw_proto?;
            Some(match (proto_v, v6) {
                (1, false) => "icmp",
                (6, false) => "tcp",
                (17, false) => "udp",
                (132, false) => "sctp",
                (58, true) => "icmp6",
                (6, true) => "tcp6",
                (17, true) => "udp6",
                (132, true) => "sctp6",
                _ => return None,
            })
        };
        match t {
            0x0800 | 0x86dd => {
                let v6 = t == 0x86dd;
                match proto_name(v6) {
                    Some(n) => {
                        skip_proto = true;
                        s.push_str(n);
                    }
                    None => s.push_str(if v6 { "ipv6" } else { "ip" }),
                }
                s.push(',');
            }
            0x0806 => s.push_str("arp,"),
            0x8035 => s.push_str("rarp,"),
            0x8847 => s.push_str("mpls,"),
            0x8848 => s.push_str("mplsm,"),
            _ => skip_type = false,
        }
    }
    for n in 0..16u8 {
        u32_masked(&mut s, &format!("reg{n}"), w.get(Reg(n)), 0xffff_ffff);
    }
    u32_masked(&mut s, "tun_id", w.get(TunnelId), u64::MAX as u128);
    ip_netmask(&mut s, "tun_src", w.get(TunIpv4Src));
    ip_netmask(&mut s, "tun_dst", w.get(TunIpv4Dst));
    u32_masked(&mut s, "metadata", w.get(Metadata), u64::MAX as u128);
    if let Some((v, _)) = w.get(InPort) {
        let _ = write!(s, "in_port={},", port32(v as u32));
    } else if let Some((v, _)) = w.get(NxmInPort) {
        let _ = write!(s, "in_port={},", port16(v as u16));
    }
    let (tv, tm) = w.tci;
    if tm != 0 {
        let vid_mask = tm & 0x0fff;
        let pcp_mask = tm & 0xe000;
        let cfi = tm & 0x1000 != 0;
        if cfi
            && tv & 0x1000 != 0
            && (vid_mask == 0 || vid_mask == 0x0fff)
            && (pcp_mask == 0 || pcp_mask == 0xe000)
            && (vid_mask != 0 || pcp_mask != 0)
        {
            if vid_mask != 0 {
                let _ = write!(s, "dl_vlan={},", tv & 0x0fff);
            }
            if pcp_mask != 0 {
                let _ = write!(s, "dl_vlan_pcp={},", tv >> 13);
            }
        } else if tm == 0xffff {
            let _ = write!(s, "vlan_tci=0x{tv:04x},");
        } else {
            let _ = write!(s, "vlan_tci=0x{tv:04x}/0x{tm:04x},");
        }
    }
    eth_field(&mut s, "dl_src", w.get(EthSrc));
    eth_field(&mut s, "dl_dst", w.get(EthDst));
    if !skip_type {
        if let Some(t) = dl_type {
            let _ = write!(s, "dl_type=0x{t:04x},");
        }
    }
    let t = dl_type.unwrap_or(0);
    let is_arp = t == 0x0806 || t == 0x8035;
    if t == 0x86dd {
        ipv6_netmask(&mut s, "ipv6_src", w.get(Ipv6Src));
        ipv6_netmask(&mut s, "ipv6_dst", w.get(Ipv6Dst));
        if let Some((v, m)) = w.get(Ipv6Flabel) {
            if m == 0xffff_ffff {
                let _ = write!(s, "ipv6_label=0x{v:05x},");
            } else {
                let _ = write!(s, "ipv6_label=0x{v:05x}/0x{m:05x},");
            }
        }
    } else if is_arp {
        ip_netmask(&mut s, "arp_spa", w.first(&[ArpSpa, Ipv4Src]));
        ip_netmask(&mut s, "arp_tpa", w.first(&[ArpTpa, Ipv4Dst]));
    } else {
        ip_netmask(&mut s, "nw_src", w.first(&[Ipv4Src, ArpSpa]));
        ip_netmask(&mut s, "nw_dst", w.first(&[Ipv4Dst, ArpTpa]));
    }
    if !skip_proto && nw_proto.is_some() {
        let name = if is_arp { "arp_op" } else { "nw_proto" };
        let _ = write!(s, "{name}={},", proto_v);
    }
    if is_arp {
        eth_field(&mut s, "arp_sha", w.first(&[ArpSha, Ipv6NdSll]));
        eth_field(&mut s, "arp_tha", w.first(&[ArpTha, Ipv6NdTll]));
    }
    let tos = w
        .get(IpDscp)
        .map(|(v, m)| ((v << 2) as u8, (m << 2) as u8))
        .or(w.get(IpTos).map(|(v, m)| (v as u8, m as u8)));
    if let Some((v, m)) = tos {
        if m & 0xfc != 0 {
            let _ = write!(s, "nw_tos={},", v & 0xfc);
        }
    }
    if let Some((v, m)) = w.get(IpEcn) {
        if m & 3 != 0 {
            let _ = write!(s, "nw_ecn={},", v & 3);
        }
    }
    if let Some((v, _)) = w.get(IpTtl) {
        let _ = write!(s, "nw_ttl={v},");
    }
    if let Some((v, _)) = w.get(MplsLabel) {
        let _ = write!(s, "mpls_label={v},");
    }
    if let Some((v, _)) = w.get(MplsTc) {
        let _ = write!(s, "mpls_tc={v},");
    }
    if let Some((v, _)) = w.get(MplsBos) {
        let _ = write!(s, "mpls_bos={v},");
    }
    if let Some((v, m)) = w.get(IpFrag) {
        let (v, m) = (v as u8, m as u8 & 3);
        let word = match m {
            3 => match v & 3 {
                0 => Some("no"),
                1 => Some("first"),
                3 => Some("later"),
                _ => Some("<error>"),
            },
            1 => Some(if v & 1 != 0 { "yes" } else { "no" }),
            2 => Some(if v & 2 != 0 { "later" } else { "not_later" }),
            _ => None,
        };
        if let Some(word) = word {
            let _ = write!(s, "nw_frag={word},");
        }
    }
    let tp_src = w
        .first(&[TcpSrc, UdpSrc, SctpSrc, Icmpv4Type, Icmpv6Type])
        .map(widen16);
    let tp_dst = w
        .first(&[TcpDst, UdpDst, SctpDst, Icmpv4Code, Icmpv6Code])
        .map(widen16);
    let proto_flow = w.value(&[IpProto, ArpOp]) as u8;
    if t == 0x0800 && proto_flow == 1 {
        be16_masked(&mut s, "icmp_type", tp_src);
        be16_masked(&mut s, "icmp_code", tp_dst);
    } else if t == 0x0800 && proto_flow == 2 {
        be16_masked(&mut s, "igmp_type", tp_src);
        be16_masked(&mut s, "igmp_code", tp_dst);
    } else if t == 0x86dd && proto_flow == 58 {
        be16_masked(&mut s, "icmp_type", tp_src);
        be16_masked(&mut s, "icmp_code", tp_dst);
        ipv6_netmask(&mut s, "nd_target", w.get(Ipv6NdTarget));
        eth_field(&mut s, "nd_sll", w.first(&[Ipv6NdSll, ArpSha]));
        eth_field(&mut s, "nd_tll", w.first(&[Ipv6NdTll, ArpTha]));
    } else {
        be16_masked(&mut s, "tp_src", tp_src);
        be16_masked(&mut s, "tp_dst", tp_dst);
    }
    if (t == 0x0800 || t == 0x86dd) && proto_flow == 6 {
        if let Some((v, m)) = w.get(TcpFlags) {
            let m = m as u32 & 0x0fff;
            if m != 0 {
                let _ = write!(
                    s,
                    "tcp_flags={},",
                    flags_masked(tcp_flag_bit, v as u32, m, 0x0fff)
                );
            }
        }
    }
    for f in &m.fields {
        let unknown = match f.field() {
            None => true,
            Some(k) => matches!(k, InPhyPort | PbbIsid | Ipv6Exthdr),
        };
        if !unknown {
            continue;
        }
        let name = match f.field() {
            Some(k) => k.name().to_string(),
            None => fields::unknown_header(&f.header),
        };
        s.push_str(&name);
        s.push('=');
        put_hex(&mut s, &f.value);
        if let Some(mk) = &f.mask {
            s.push('/');
            put_hex(&mut s, mk);
        }
        s.push(',');
    }
    if s.ends_with(',') {
        s.pop();
    }
    s
}

/// 8-bit ICMP type/code fields occupy tp_src/tp_dst with a full 16-bit mask in OVS.
fn widen16((v, m): (u128, u128)) -> (u128, u128) {
    if m == 0xff {
        (v, 0xffff)
    } else {
        (v, m)
    }
}

impl std::fmt::Display for Match {
    /// The match in `ovs-ofctl dump-flows` syntax (e.g. `ip,reg1=0x64,nw_dst=10.244.0.2`), empty
    /// for the match-all (see the module doc for the rules).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_match(self, None))
    }
}
