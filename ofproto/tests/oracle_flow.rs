//! Oracle tests: flowmesh encodes every match field, action and instruction it models, Open
//! vSwitch's own decoder (`ovs-ofctl ofp-parse`, one run per batch) reads the bytes, and its
//! text must equal flowmesh's. Fails (does not skip) when ovs-ofctl is missing.

mod oracle_flow_common;

use ofproto::action::{ct_flags, nat_flags, port, Ct, Nat, NatAddr};
use ofproto::oxm::{ipv4_field, FieldBytes, OxmHeader};
use ofproto::{Action, Field, FieldSlice, Flow, Instruction, Match, MatchField};
use oracle_flow_common::{flow_mod_add, ofp_parse_batch, parse_flow_mod};
use std::net::{Ipv4Addr, Ipv6Addr};

fn ex(f: Field, v: u128) -> MatchField {
    let b = v.to_be_bytes();
    MatchField::exact(f, &b[16 - f.len()..])
}
fn mk(f: Field, v: u128, m: u128) -> MatchField {
    let (b, mb) = (v.to_be_bytes(), m.to_be_bytes());
    let n = f.len();
    MatchField {
        header: f.header(),
        value: FieldBytes::from_slice(&b[16 - n..]),
        mask: Some(FieldBytes::from_slice(&mb[16 - n..])),
    }
}
fn with_header(mut f: MatchField, h: OxmHeader) -> MatchField {
    f.header = h;
    f
}
fn m(fields: Vec<MatchField>) -> Match {
    Match { fields }
}
fn ip() -> Vec<MatchField> {
    vec![ex(Field::EthType, 0x0800)]
}
fn ip6() -> Vec<MatchField> {
    vec![ex(Field::EthType, 0x86dd)]
}
fn arp() -> Vec<MatchField> {
    vec![ex(Field::EthType, 0x0806)]
}
fn proto(eth: u16, p: u8) -> Vec<MatchField> {
    vec![
        ex(Field::EthType, eth as u128),
        ex(Field::IpProto, p as u128),
    ]
}
fn plus(mut a: Vec<MatchField>, b: Vec<MatchField>) -> Vec<MatchField> {
    a.extend(b);
    a
}
fn v4(s: &str) -> u128 {
    u32::from(s.parse::<Ipv4Addr>().expect("ipv4")) as u128
}
fn v6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().expect("ipv6"))
}
fn mac(s: &str) -> u128 {
    s.split(':').fold(0u128, |a, x| {
        (a << 8) | u8::from_str_radix(x, 16).expect("mac") as u128
    })
}

fn match_cases() -> Vec<(&'static str, Match)> {
    use Field::*;
    let mut c: Vec<(&'static str, Match)> = vec![
        ("empty", m(vec![])),
        ("in_port", m(vec![ex(InPort, 5)])),
        ("in_port LOCAL", m(vec![ex(InPort, port::LOCAL as u128)])),
        (
            "in_port CONTROLLER",
            m(vec![ex(InPort, port::CONTROLLER as u128)]),
        ),
        ("NXM in_port", m(vec![ex(NxmInPort, 7)])),
        ("eth_dst", m(vec![ex(EthDst, mac("0a:58:0a:80:00:05"))])),
        ("eth_src", m(vec![ex(EthSrc, mac("0a:58:0a:80:00:06"))])),
        (
            "eth_dst masked",
            m(vec![mk(
                EthDst,
                mac("01:00:00:00:00:00"),
                mac("01:00:00:00:00:00"),
            )]),
        ),
        (
            "eth_src masked",
            m(vec![mk(
                EthSrc,
                mac("0a:58:00:00:00:00"),
                mac("ff:ff:00:00:00:00"),
            )]),
        ),
        ("eth_type other", m(vec![ex(EthType, 0x88cc)])),
        (
            "eth_type NXM",
            m(vec![with_header(ex(EthType, 0x0800), OxmHeader::new(0, 3))]),
        ),
        ("ip", m(ip())),
        ("ipv6", m(ip6())),
        ("arp", m(arp())),
        ("rarp", m(vec![ex(EthType, 0x8035)])),
        ("mpls", m(vec![ex(EthType, 0x8847)])),
        ("vlan_vid", m(vec![ex(VlanVid, 0x1005)])),
        ("vlan_vid none", m(vec![ex(VlanVid, 0)])),
        ("vlan_vid present", m(vec![mk(VlanVid, 0x1000, 0x1000)])),
        ("vlan_vid+pcp", m(vec![ex(VlanVid, 0x1064), ex(VlanPcp, 3)])),
        ("vlan_tci NXM", m(vec![mk(VlanTci, 0x1000, 0x1fff)])),
        ("vlan_tci NXM exact", m(vec![ex(VlanTci, 0x3005)])),
        ("ip_dscp", m(plus(ip(), vec![ex(IpDscp, 3)]))),
        ("ip_ecn", m(plus(ip(), vec![ex(IpEcn, 1)]))),
        ("ip_tos NXM", m(plus(ip(), vec![ex(IpTos, 0x28)]))),
        ("ip_proto gre", m(proto(0x0800, 47))),
        ("tcp", m(proto(0x0800, 6))),
        ("udp", m(proto(0x0800, 17))),
        ("icmp", m(proto(0x0800, 1))),
        ("sctp", m(proto(0x0800, 132))),
        ("igmp", m(proto(0x0800, 2))),
        ("tcp6", m(proto(0x86dd, 6))),
        ("udp6", m(proto(0x86dd, 17))),
        ("icmp6", m(proto(0x86dd, 58))),
        ("ipv6 proto", m(proto(0x86dd, 47))),
        ("nw_src", m(plus(ip(), vec![ex(Ipv4Src, v4("10.128.0.5"))]))),
        (
            "nw_dst cidr",
            m(plus(
                ip(),
                vec![ipv4_field(Ipv4Dst, Ipv4Addr::new(10, 128, 0, 0), 14)],
            )),
        ),
        (
            "nw_dst multicast",
            m(plus(
                ip(),
                vec![ipv4_field(Ipv4Dst, Ipv4Addr::new(224, 0, 0, 0), 4)],
            )),
        ),
        (
            "nw_src odd mask",
            m(plus(
                ip(),
                vec![mk(Ipv4Src, v4("10.0.0.1"), v4("255.0.255.255"))],
            )),
        ),
        (
            "nw src+dst NXM",
            m(plus(
                ip(),
                vec![
                    with_header(ex(Ipv4Src, v4("1.2.3.4")), OxmHeader::new(0, 7)),
                    with_header(ex(Ipv4Dst, v4("5.6.7.8")), OxmHeader::new(0, 8)),
                ],
            )),
        ),
        (
            "tcp ports",
            m(plus(
                proto(0x0800, 6),
                vec![ex(TcpSrc, 1234), ex(TcpDst, 80)],
            )),
        ),
        (
            "tcp port masked",
            m(plus(proto(0x0800, 6), vec![mk(TcpDst, 0x1000, 0xf000)])),
        ),
        (
            "udp ports",
            m(plus(
                proto(0x0800, 17),
                vec![ex(UdpSrc, 53), ex(UdpDst, 4789)],
            )),
        ),
        (
            "sctp ports",
            m(plus(
                proto(0x0800, 132),
                vec![ex(SctpSrc, 1), ex(SctpDst, 2)],
            )),
        ),
        (
            "icmp type/code",
            m(plus(
                proto(0x0800, 1),
                vec![ex(Icmpv4Type, 8), ex(Icmpv4Code, 0)],
            )),
        ),
        ("arp_op", m(plus(arp(), vec![ex(ArpOp, 1)]))),
        (
            "arp spa/tpa",
            m(plus(
                arp(),
                vec![
                    ex(ArpSpa, v4("10.128.0.1")),
                    ipv4_field(ArpTpa, Ipv4Addr::new(10, 128, 0, 0), 23),
                ],
            )),
        ),
        (
            "arp sha/tha",
            m(plus(
                arp(),
                vec![
                    ex(ArpSha, mac("0a:58:0a:80:00:05")),
                    ex(ArpTha, mac("00:00:00:00:00:00")),
                ],
            )),
        ),
        (
            "arp sha masked",
            m(plus(
                arp(),
                vec![
                    ex(InPort, 5),
                    ex(ArpSpa, v4("10.128.0.5")),
                    mk(ArpSha, mac("00:00:0a:80:00:05"), mac("00:00:ff:ff:ff:ff")),
                ],
            )),
        ),
        (
            "arp NXM sha",
            m(plus(
                arp(),
                vec![with_header(
                    ex(ArpSha, mac("0a:00:00:00:00:01")),
                    OxmHeader::new(1, 17),
                )],
            )),
        ),
        (
            "ipv6 src/dst",
            m(plus(
                ip6(),
                vec![
                    ex(Ipv6Src, v6("fd00::1")),
                    mk(Ipv6Dst, v6("fd00:10::"), v6("ffff:ffff::")),
                ],
            )),
        ),
        (
            "ipv6 mapped",
            m(plus(
                ip6(),
                vec![ex(Ipv6Src, v6("::ffff:1.2.3.4")), ex(Ipv6Dst, v6("::1"))],
            )),
        ),
        (
            "ipv6 odd mask",
            m(plus(
                ip6(),
                vec![mk(Ipv6Src, v6("fd00::1"), v6("ffff::ffff"))],
            )),
        ),
        ("ipv6_label", m(plus(ip6(), vec![ex(Ipv6Flabel, 0x12345)]))),
        (
            "ipv6_label masked",
            m(plus(ip6(), vec![mk(Ipv6Flabel, 0x100, 0xf00)])),
        ),
        (
            "icmpv6",
            m(plus(
                proto(0x86dd, 58),
                vec![ex(Icmpv6Type, 128), ex(Icmpv6Code, 0)],
            )),
        ),
        (
            "nd_target+sll",
            m(plus(
                proto(0x86dd, 58),
                vec![
                    ex(Icmpv6Type, 135),
                    ex(Icmpv6Code, 0),
                    ex(Ipv6NdTarget, v6("fd00::5")),
                    ex(Ipv6NdSll, mac("0a:00:00:00:00:07")),
                ],
            )),
        ),
        (
            "nd_tll",
            m(plus(
                proto(0x86dd, 58),
                vec![
                    ex(Icmpv6Type, 136),
                    ex(Icmpv6Code, 0),
                    ex(Ipv6NdTll, mac("0a:00:00:00:00:08")),
                ],
            )),
        ),
        (
            "mpls fields",
            m(vec![
                ex(EthType, 0x8847),
                ex(MplsLabel, 1000),
                ex(MplsTc, 5),
                ex(MplsBos, 1),
            ]),
        ),
        ("tun_id", m(vec![ex(TunnelId, 0x64)])),
        ("tun_id zero", m(vec![ex(TunnelId, 0)])),
        ("tun_id masked", m(vec![mk(TunnelId, 0x64, 0xffff_ffff)])),
        (
            "tun_id NXM",
            m(vec![with_header(ex(TunnelId, 0x5), OxmHeader::new(1, 16))]),
        ),
        (
            "tun_src/dst",
            m(vec![
                ex(TunIpv4Src, v4("172.31.0.2")),
                mk(TunIpv4Dst, v4("172.31.0.0"), v4("255.255.255.0")),
            ]),
        ),
        ("pkt_mark", m(vec![ex(PktMark, 0x1234)])),
        ("pkt_mark zero", m(vec![ex(PktMark, 0)])),
        ("pkt_mark masked", m(vec![mk(PktMark, 0x10, 0xf0)])),
        ("ct_state -trk", m(plus(ip(), vec![mk(CtState, 0, 0x20)]))),
        (
            "ct_state +trk-rpl",
            m(plus(ip(), vec![mk(CtState, 0x20, 0x28)])),
        ),
        ("ct_state +est+trk", m(vec![mk(CtState, 0x22, 0x22)])),
        ("ct_state exact", m(vec![ex(CtState, 0x21)])),
        ("ct_state zero", m(vec![ex(CtState, 0)])),
        ("ct_state all", m(vec![mk(CtState, 0xc5, 0xff)])),
        ("ct_zone", m(vec![ex(CtZone, 20)])),
        ("ct_mark", m(vec![ex(CtMark, 0x3)])),
        ("ct_mark masked", m(vec![mk(CtMark, 0x3, 0xf)])),
        ("ct_label", m(vec![ex(CtLabel, 0x1)])),
        ("ct_label masked", m(vec![mk(CtLabel, 1 << 100, 1 << 100)])),
        ("conj_id", m(vec![ex(ConjId, 7)])),
        ("metadata", m(vec![ex(Metadata, 0x5)])),
        ("metadata zero", m(vec![ex(Metadata, 0)])),
        ("metadata masked", m(vec![mk(Metadata, 0x100, 0xff00)])),
        ("nw_ttl", m(plus(ip(), vec![ex(IpTtl, 5)]))),
        ("ip_frag first", m(plus(ip(), vec![ex(IpFrag, 1)]))),
        ("ip_frag no", m(plus(ip(), vec![ex(IpFrag, 0)]))),
        ("ip_frag later", m(plus(ip(), vec![ex(IpFrag, 3)]))),
        ("ip_frag yes", m(plus(ip(), vec![mk(IpFrag, 1, 1)]))),
        ("ip_frag not_later", m(plus(ip(), vec![mk(IpFrag, 0, 2)]))),
        (
            "tcp_flags",
            m(plus(proto(0x0800, 6), vec![mk(TcpFlags, 0x002, 0x012)])),
        ),
        (
            "tcp_flags exact",
            m(plus(proto(0x0800, 6), vec![ex(TcpFlags, 0x012)])),
        ),
        (
            "tcp_flags NXM",
            m(plus(
                proto(0x0800, 6),
                vec![with_header(
                    mk(TcpFlags, 0x001, 0x001),
                    OxmHeader::new(1, 34),
                )],
            )),
        ),
        (
            "openshift t0",
            m(plus(
                vec![ex(InPort, 1)],
                plus(
                    arp(),
                    vec![
                        ipv4_field(ArpSpa, Ipv4Addr::new(10, 128, 0, 0), 14),
                        ipv4_field(ArpTpa, Ipv4Addr::new(10, 128, 2, 0), 23),
                    ],
                ),
            )),
        ),
        (
            "overlay mix",
            m(plus(
                ip(),
                vec![
                    ex(Reg(1), 0x64),
                    ex(TunnelId, 0x64),
                    ex(InPort, 3),
                    ex(Ipv4Dst, v4("10.244.0.2")),
                    mk(CtState, 0x20, 0x28),
                    ex(PktMark, 1),
                    ex(ConjId, 9),
                    ex(CtZone, 3),
                    ex(CtMark, 1),
                    ex(Metadata, 2),
                    ex(EthSrc, mac("0a:58:00:00:00:01")),
                ],
            )),
        ),
    ];
    let regs: Vec<(&'static str, Match)> = (0..16u8)
        .map(|n| {
            let f = if n % 2 == 0 {
                ex(Field::Reg(n), n as u128 * 0x1111)
            } else {
                mk(Field::Reg(n), 0x10, 0xf0)
            };
            ("reg", m(vec![f]))
        })
        .collect();
    c.extend(regs);
    c.push(("reg0 zero", m(vec![ex(Field::Reg(0), 0)])));
    c
}

fn expect_line(xid: usize, flow: &Flow) -> String {
    let mtext = ofproto::text::matches::format_match(&flow.matches, Some(flow.priority));
    let sep = if mtext.is_empty() { "" } else { " " };
    format!(
        "OFPT_FLOW_MOD (OF1.3) (xid={xid:#x}): ADD {mtext}{sep}actions={}",
        ofproto::text::instructions::format_instructions(&flow.instructions)
    )
}

/// Encode each flow, check our own decode round-trips, have OVS decode the batch, and compare
/// its text with ours.
fn check_against_ovs(cases: Vec<(String, Flow)>) -> usize {
    let mut msgs = Vec::new();
    let mut labels = Vec::new();
    for (i, (label, flow)) in cases.iter().enumerate() {
        let bytes = flow_mod_add(flow, i as u32 + 1);
        let back = parse_flow_mod(&bytes).unwrap_or_else(|e| panic!("{label}: own decode: {e}"));
        assert_eq!(&back, flow, "{label}: decode(encode(x)) != x");
        msgs.push(bytes);
        labels.push(label.clone());
    }
    let texts = ofp_parse_batch(&msgs, &labels);
    let mut diffs = Vec::new();
    for (i, (label, flow)) in cases.iter().enumerate() {
        let ours = expect_line(i + 1, flow);
        if std::env::var_os("FLOWMESH_ORACLE_SHOW").is_some() {
            eprintln!("{}", texts[i]);
        }
        if texts[i] != ours {
            diffs.push(format!("[{label}]\n  ovs:  {}\n  ours: {ours}", texts[i]));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} text differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    cases.len()
}

#[test]
fn every_match_field_decodes_in_ovs_with_identical_text() {
    let cases = match_cases()
        .into_iter()
        .map(|(l, mm)| (l.to_string(), Flow::new(0, 0x8000, mm)))
        .collect();
    let n = check_against_ovs(cases);
    assert!(n > 100);
}

fn sl(f: Field, ofs: u16, n: u16) -> FieldSlice {
    FieldSlice::range(f, ofs, n)
}

fn action_cases() -> Vec<(&'static str, Match, Vec<Action>)> {
    use Field::*;
    let ipm = || m(ip());
    let ct = |flags: u16, table: Option<u8>, zone: u16, actions: Vec<Action>| {
        Action::Ct(Ct {
            flags,
            zone_src: None,
            zone_imm: zone,
            recirc_table: table,
            alg: 0,
            actions,
        })
    };
    let nat = |flags: u16, r: Option<(&str, &str)>, p: Option<(u16, u16)>| {
        Action::Nat(Nat {
            flags,
            addr: r.map(|(a, b)| {
                let (a, b): (Ipv4Addr, Ipv4Addr) = (a.parse().expect("ip"), b.parse().expect("ip"));
                NatAddr::V4(a, (a != b).then_some(b))
            }),
            ports: p.map(|(a, b)| (a, (a != b).then_some(b))),
        })
    };
    let ctrl = |max_len: u16, id: u16, reason: u8, ud: &[u8], pause: bool| Action::Controller {
        max_len,
        controller_id: id,
        reason,
        userdata: ud.to_vec(),
        pause,
        meter_id: None,
        extended: pause || !ud.is_empty(),
    };
    vec![
        ("drop", m(vec![]), vec![]),
        (
            "output",
            m(vec![]),
            vec![Action::output(1), Action::output(65000)],
        ),
        (
            "reserved ports",
            m(vec![]),
            vec![
                Action::output(port::IN_PORT),
                Action::Output {
                    port: port::CONTROLLER,
                    max_len: 0xffff,
                },
                Action::Output {
                    port: port::CONTROLLER,
                    max_len: 100,
                },
                Action::output(port::LOCAL),
                Action::output(port::NORMAL),
                Action::output(port::FLOOD),
                Action::output(port::ALL),
            ],
        ),
        ("group", m(vec![]), vec![Action::Group(5)]),
        (
            "push/pop vlan",
            m(vec![]),
            vec![Action::PushVlan(0x8100), Action::PopVlan],
        ),
        ("dec_nw_ttl", ipm(), vec![Action::DecNwTtl]),
        // NXAST_DEC_TTL ([`Action::DecTtl`]) is OpenFlow 1.0-only in OVS 3.1, which answers
        // OFPBAC_BAD_VENDOR_TYPE for it in OpenFlow 1.3; `dec_ttl` there is OFPAT_DEC_NW_TTL.
        (
            "set_field tun",
            ipm(),
            vec![
                Action::set_field_u64(TunnelId, 0x64),
                Action::set_field(TunIpv4Dst, &[172, 31, 0, 3]),
                Action::set_field(TunIpv4Src, &[172, 31, 0, 1]),
            ],
        ),
        (
            "set_field eth/ip",
            ipm(),
            vec![
                Action::set_field(EthSrc, &[0x0a, 0x58, 0, 0, 0, 1]),
                Action::set_field(EthDst, &[0x0a, 0x58, 0, 0, 0, 2]),
                Action::set_field(Ipv4Src, &[10, 0, 0, 1]),
                Action::set_field(Ipv4Dst, &[10, 0, 0, 2]),
                Action::set_field_u64(IpDscp, 5),
                Action::set_field_u64(IpEcn, 1),
                Action::set_field_u64(IpTtl, 3),
            ],
        ),
        (
            "set_field regs",
            m(vec![]),
            (0..16u8)
                .map(|n| Action::set_field_u64(Reg(n), n as u64 * 3))
                .collect(),
        ),
        (
            "set_field marks",
            m(vec![]),
            vec![
                Action::set_field_u64(PktMark, 7),
                Action::set_field_u64(Metadata, 0),
                Action::set_field_u64(Metadata, 0xff00),
            ],
        ),
        (
            "set_field arp",
            m(arp()),
            vec![
                Action::set_field(ArpSpa, &[10, 0, 0, 1]),
                Action::set_field(ArpTpa, &[10, 0, 0, 2]),
                Action::set_field(ArpSha, &[0, 0, 0, 0, 0, 1]),
                Action::set_field(ArpTha, &[0, 0, 0, 0, 0, 2]),
                Action::set_field_u64(ArpOp, 2),
            ],
        ),
        (
            "set_field tcp",
            m(proto(0x0800, 6)),
            vec![
                Action::set_field_u64(TcpSrc, 81),
                Action::set_field_u64(TcpDst, 80),
            ],
        ),
        (
            "set_field udp",
            m(proto(0x0800, 17)),
            vec![
                Action::set_field_u64(UdpSrc, 53),
                Action::set_field_u64(UdpDst, 4789),
            ],
        ),
        (
            "set_field vlan",
            m(vec![ex(VlanVid, 0x1005)]),
            vec![
                Action::set_field_u64(VlanVid, 0x1006),
                Action::set_field_u64(VlanPcp, 3),
            ],
        ),
        (
            "set_field ipv6",
            m(ip6()),
            vec![
                Action::set_field(Ipv6Src, &v6("fd00::1").to_be_bytes()),
                Action::set_field_u64(Ipv6Flabel, 0x1234),
            ],
        ),
        // `set_field:N->in_port_oxm` (OXM_OF_IN_PORT): OVS 3.1 encodes it but its own decoder
        // answers OFPBAC_BAD_SET_ARGUMENT, so only the NXM in_port is checked here.
        (
            "set_field nxm in_port",
            m(vec![]),
            vec![Action::set_field_u64(NxmInPort, 4)],
        ),
        (
            "set_field nxm tos",
            ipm(),
            vec![Action::set_field_u64(IpTos, 0x28)],
        ),
        (
            "set_field tci",
            m(vec![ex(VlanVid, 0x1005)]),
            vec![Action::set_field_u64(VlanTci, 0x1006)],
        ),
        (
            "set_field icmp",
            m(proto(0x0800, 1)),
            vec![
                Action::set_field_u64(Icmpv4Type, 8),
                Action::set_field_u64(Icmpv4Code, 1),
            ],
        ),
        (
            "set_field icmp6",
            m(proto(0x86dd, 58)),
            vec![
                Action::set_field_u64(Icmpv6Type, 128),
                Action::set_field_u64(Icmpv6Code, 0),
            ],
        ),
        (
            "set_field mpls",
            m(vec![ex(EthType, 0x8847)]),
            vec![
                Action::set_field_u64(MplsLabel, 100),
                Action::set_field_u64(MplsTc, 2),
            ],
        ), // mpls_bos is read-only
        (
            "set_field masked (reg_load2)",
            m(vec![]),
            vec![
                Action::SetField(mk(Reg(3), 0x5, 0x5)),
                Action::SetField(mk(PktMark, 0x100, 0xff00)),
            ],
        ),
        (
            "resubmit",
            m(vec![]),
            vec![
                Action::resubmit_table(30),
                Action::Resubmit {
                    in_port: 3,
                    table: Some(4),
                },
                Action::Resubmit {
                    in_port: 3,
                    table: None,
                },
                Action::Resubmit {
                    in_port: 0xfffe,
                    table: Some(2),
                },
                Action::ResubmitLegacy { in_port: 7 },
            ],
        ),
        (
            "move",
            m(vec![]),
            vec![
                Action::move_(sl(TunnelId, 0, 32), FieldSlice::whole(Reg(0))),
                Action::move_(FieldSlice::whole(Reg(0)), sl(TunnelId, 0, 32)),
                Action::move_(FieldSlice::whole(NxmInPort), sl(Reg(1), 0, 16)),
                Action::move_(FieldSlice::whole(EthSrc), FieldSlice::whole(EthDst)),
                Action::move_(sl(Reg(1), 8, 1), sl(Reg(2), 3, 1)),
                Action::move_(FieldSlice::whole(Metadata), FieldSlice::whole(TunnelId)),
                Action::move_(FieldSlice::whole(PktMark), FieldSlice::whole(Reg(5))),
            ],
        ),
        (
            "move ip",
            ipm(),
            vec![
                Action::move_(FieldSlice::whole(Ipv4Src), FieldSlice::whole(Reg(3))),
                Action::move_(FieldSlice::whole(Reg(3)), FieldSlice::whole(Ipv4Dst)),
            ],
        ),
        (
            "load",
            m(vec![]),
            vec![
                Action::load_reg(0, 0x64),
                Action::load_reg(1, 0),
                Action::Load {
                    dst: sl(Reg(3), 4, 4),
                    value: 5,
                },
                Action::Load {
                    dst: FieldSlice::whole(TunnelId),
                    value: 1,
                },
                Action::Load {
                    dst: sl(Reg(0), 5, 1),
                    value: 1,
                },
                Action::Load {
                    dst: FieldSlice::whole(EthDst),
                    value: 0x0a58_0000_0001,
                },
            ],
        ),
        (
            "output_reg",
            m(vec![]),
            vec![
                Action::OutputReg {
                    src: FieldSlice::whole(Reg(2)),
                    max_len: 0xffff,
                },
                Action::OutputReg {
                    src: sl(Reg(2), 0, 16),
                    max_len: 0xffff,
                },
            ],
        ),
        ("ct basic", ipm(), vec![ct(0, Some(0), 0, vec![])]),
        (
            "ct commit table",
            ipm(),
            vec![ct(ct_flags::COMMIT, Some(31), 0, vec![])],
        ),
        (
            "ct commit zone",
            ipm(),
            vec![ct(ct_flags::COMMIT, None, 5, vec![])],
        ),
        (
            "ct force",
            ipm(),
            vec![ct(ct_flags::COMMIT | ct_flags::FORCE, Some(3), 0, vec![])],
        ),
        (
            "ct zone reg",
            ipm(),
            vec![Action::Ct(Ct {
                flags: 0,
                zone_src: Some(sl(Reg(4), 0, 16)),
                zone_imm: 0,
                recirc_table: Some(10),
                alg: 0,
                actions: vec![],
            })],
        ),
        (
            "ct nat",
            ipm(),
            vec![ct(0, Some(70), 0, vec![nat(0, None, None)])],
        ),
        (
            "ct nat src",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                Some(31),
                0,
                vec![nat(nat_flags::SRC, Some(("10.0.0.1", "10.0.0.1")), None)],
            )],
        ),
        (
            "ct nat dst port",
            m(proto(0x0800, 6)),
            vec![ct(
                ct_flags::COMMIT,
                None,
                0,
                vec![nat(
                    nat_flags::DST,
                    Some(("10.1.1.1", "10.1.1.1")),
                    Some((80, 80)),
                )],
            )],
        ),
        (
            "ct nat range flags",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                Some(31),
                5,
                vec![nat(
                    nat_flags::SRC | nat_flags::PERSISTENT | nat_flags::PROTO_RANDOM,
                    Some(("10.0.0.1", "10.0.0.5")),
                    Some((100, 200)),
                )],
            )],
        ),
        (
            "ct nat hash",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                None,
                0,
                vec![nat(
                    nat_flags::SRC | nat_flags::PROTO_HASH,
                    Some(("10.0.0.1", "10.0.0.1")),
                    Some((5, 5)),
                )],
            )],
        ),
        (
            "ct nat src no addr",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                None,
                0,
                vec![nat(nat_flags::SRC, None, None)],
            )],
        ),
        (
            "ct exec",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                None,
                0,
                vec![Action::set_field_u64(CtMark, 1)],
            )],
        ),
        (
            "ct exec label",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                None,
                0,
                vec![Action::set_field(CtLabel, &1u128.to_be_bytes())],
            )],
        ),
        (
            "ct nat+exec",
            ipm(),
            vec![ct(
                ct_flags::COMMIT,
                Some(2),
                0,
                vec![
                    nat(nat_flags::SRC, Some(("1.1.1.1", "1.1.1.1")), None),
                    Action::Load {
                        dst: FieldSlice::whole(CtMark),
                        value: 3,
                    },
                ],
            )],
        ),
        (
            "ct alg ftp",
            m(proto(0x0800, 6)),
            vec![Action::Ct(Ct {
                flags: ct_flags::COMMIT,
                zone_src: None,
                zone_imm: 0,
                recirc_table: None,
                alg: 21,
                actions: vec![],
            })],
        ),
        (
            "ct alg tftp",
            m(proto(0x0800, 17)),
            vec![Action::Ct(Ct {
                flags: ct_flags::COMMIT,
                zone_src: None,
                zone_imm: 0,
                recirc_table: None,
                alg: 69,
                actions: vec![],
            })],
        ),
        (
            "note",
            m(vec![]),
            vec![
                Action::Note(vec![1, 2, 3, 4, 5, 6]),
                Action::Note(vec![
                    0x50, 0x50, 0x2e, 0x56, 0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                ]),
            ],
        ),
        (
            "conjunction",
            m(vec![]),
            vec![
                Action::Conjunction {
                    id: 1,
                    clause: 0,
                    n_clauses: 2,
                },
                Action::Conjunction {
                    id: 0xdead,
                    clause: 2,
                    n_clauses: 3,
                },
            ],
        ),
        (
            "controller",
            m(vec![]),
            vec![
                ctrl(0xffff, 0, 0, &[], false),
                ctrl(0xffff, 0, 1, &[1, 2], false),
                ctrl(0xffff, 0, 1, &[], true),
                ctrl(0xffff, 3, 1, &[], false),
                ctrl(100, 2, 2, &[], false),
                ctrl(128, 0, 1, &[], false),
                ctrl(0xffff, 0, 0, &[0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4], true),
                ctrl(200, 9, 3, &[7], false),
                ctrl(0xffff, 0, 4, &[], false),
                ctrl(0xffff, 0, 5, &[], false),
            ],
        ),
        (
            "openshift t20 pod",
            m(plus(vec![ex(InPort, 5)], ip())),
            vec![Action::load_reg(0, 0x64)],
        ),
        (
            "openshift vxlan out",
            ipm(),
            vec![
                Action::move_(FieldSlice::whole(Reg(0)), sl(TunnelId, 0, 32)),
                Action::set_field(TunIpv4Dst, &[172, 17, 0, 3]),
                Action::output(1),
            ],
        ),
        (
            "lab t20",
            m(plus(
                ip(),
                vec![ex(Reg(1), 100), ex(Ipv4Dst, v4("10.244.0.2"))],
            )),
            vec![
                Action::move_(sl(TunnelId, 0, 32), FieldSlice::whole(Reg(2))),
                Action::set_field(EthSrc, &[0x0a, 0x58, 0, 0, 0, 1]),
                Action::DecNwTtl,
                Action::output(2),
            ],
        ),
    ]
}

#[test]
fn every_action_decodes_in_ovs_with_identical_text() {
    let cases: Vec<(String, Flow)> = action_cases()
        .into_iter()
        .map(|(l, mm, a)| (l.to_string(), Flow::new(0, 0x8000, mm).apply(a)))
        .collect();
    let n = check_against_ovs(cases);
    assert!(n >= 40);
}

#[test]
fn every_instruction_decodes_in_ovs_with_identical_text() {
    use Instruction::*;
    let out = |p| vec![Action::output(p)];
    let cases: Vec<(&str, Vec<Instruction>)> = vec![
        ("goto", vec![GotoTable(5)]),
        (
            "write_metadata masked",
            vec![WriteMetadata {
                value: 0x5,
                mask: 0xff,
            }],
        ),
        (
            "write_metadata full",
            vec![WriteMetadata {
                value: 0x5,
                mask: u64::MAX,
            }],
        ),
        (
            "write_metadata zero",
            vec![WriteMetadata {
                value: 0,
                mask: 0xffff_0000,
            }],
        ),
        ("write_actions", vec![WriteActions(out(3))]),
        ("write_actions empty", vec![WriteActions(vec![])]),
        ("apply empty", vec![ApplyActions(vec![])]),
        ("clear", vec![ClearActions]),
        ("meter", vec![Meter(3)]),
        (
            "apply+goto",
            vec![ApplyActions(vec![Action::load_reg(0, 1)]), GotoTable(10)],
        ),
        (
            "all canonical",
            vec![
                Meter(1),
                ApplyActions(out(1)),
                ClearActions,
                WriteActions(vec![Action::Group(2), Action::output(4)]),
                WriteMetadata {
                    value: 0x10,
                    mask: 0xf0,
                },
                GotoTable(9),
            ],
        ),
        (
            "all reversed",
            vec![
                GotoTable(9),
                WriteMetadata {
                    value: 0x10,
                    mask: 0xf0,
                },
                WriteActions(out(4)),
                ClearActions,
                ApplyActions(out(1)),
                Meter(1),
            ],
        ),
    ];
    let flows = cases
        .into_iter()
        .map(|(l, i)| {
            let mut f = Flow::new(0, 0x8000, m(ip()));
            f.instructions = i;
            (l.to_string(), f)
        })
        .collect();
    check_against_ovs(flows);
}

#[test]
fn flow_header_fields_print_like_ovs_flow_mod() {
    // cookie/table/priority/timeouts travel in the FLOW_MOD; check that our encoding of them
    // round-trips and that OVS accepts them (their ofp-print form belongs to the message layer).
    let mut f = Flow::new(20, 100, m(ip())).cookie(0x4466_b9eb).goto(30);
    f.idle_timeout = 10;
    f.hard_timeout = 20;
    f.flags = 1;
    let bytes = flow_mod_add(&f, 1);
    let texts = ofp_parse_batch(&[bytes], &["header".to_string()]);
    assert!(texts[0].contains("ADD table:20 priority=100,ip cookie:0x4466b9eb idle:10 hard:20 send_flow_rem actions=goto_table:30"), "{}", texts[0]);
}
