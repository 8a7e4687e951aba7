//! OXM/NXM match fields and the `Match` they form.
//!
//! Wire layout (OpenFlow 1.3.5 §7.2.3.2, nicira-ext.h): a 32-bit header
//! `class:16 | field:7 | hasmask:1 | length:8`, for the experimenter class (0xffff) followed by a
//! 32-bit experimenter id, then `length` bytes of value (and mask, when hasmask is set, each half
//! the payload).
//!
//! A [`Match`] keeps its fields in wire order with the exact header each arrived with, so a
//! decoded match re-encodes byte for byte. Builders use the header Open vSwitch itself emits for
//! OpenFlow 1.3 (OXM where OF1.3 defines one, NXM otherwise).
//!
//! One file on purpose: the field table, the header codec and `Match`'s decode/encode/print
//! are one exhaustive `match` per direction over [`Field`]; a split would scatter each field's
//! layout across files.

use smallvec::SmallVec;
use std::net::Ipv4Addr;

/// OXM class of the original NXM 0 fields (`NXM_OF_*`).
pub const OXM_CLASS_NXM0: u16 = 0x0000;
/// OXM class of the Nicira extension fields (`NXM_NX_*`).
pub const OXM_CLASS_NXM1: u16 = 0x0001;
/// OXM class of the OpenFlow basic fields (`OXM_OF_*`).
pub const OXM_CLASS_OPENFLOW_BASIC: u16 = 0x8000;
/// OXM class whose header is followed by a 32-bit experimenter id.
pub const OXM_CLASS_EXPERIMENTER: u16 = 0xffff;

/// Field values and masks are at most 16 bytes for every field flowmesh uses; longer (unknown)
/// fields spill to the heap.
pub type FieldBytes = SmallVec<[u8; 16]>;

/// The identity of an OXM/NXM field on the wire, without hasmask and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OxmHeader {
    /// OXM class (0x0000, 0x0001, 0x8000, 0xffff, ...).
    pub class: u16,
    /// 7-bit field number within the class.
    pub field: u8,
    /// Experimenter id, present exactly when `class == OXM_CLASS_EXPERIMENTER`.
    pub experimenter: Option<u32>,
}

impl OxmHeader {
    /// A header of a non-experimenter class.
    pub const fn new(class: u16, field: u8) -> Self {
        OxmHeader {
            class,
            field,
            experimenter: None,
        }
    }

    /// The 32-bit NXM/OXM header word with the given hasmask bit and payload length.
    pub const fn word(&self, has_mask: bool, payload_len: u8) -> u32 {
        ((self.class as u32) << 16)
            | ((self.field as u32 & 0x7f) << 9)
            | ((has_mask as u32) << 8)
            | payload_len as u32
    }

    /// The semantic field this header names, if flowmesh knows it.
    pub fn known(&self) -> Option<Field> {
        Field::from_header(*self)
    }
}

/// Registers Open vSwitch overlays on reg0..reg15 that flowmesh knows only as the fields of
/// move/load/output/check_pkt_larger slices (not as match fields): `xreg0..7`
/// (`OXM_OF_PKT_REG<n>`, class 0x8001, 64 bits) and `xxreg0..3` (`NXM_NX_XXREG<n>`, NXM class 1
/// fields 111..114, 128 bits). Returns (slice name, width in bytes).
pub fn wide_register(h: &OxmHeader) -> Option<(String, usize)> {
    match (h.class, h.field, h.experimenter) {
        (0x8001, n @ 0..=7, None) => Some((format!("OXM_OF_PKT_REG{n}"), 8)),
        (OXM_CLASS_NXM1, n @ 111..=114, None) => Some((format!("NXM_NX_XXREG{}", n - 111), 16)),
        _ => None,
    }
}

/// Every match field flowmesh knows by name. Each maps to one entry of [`FIELDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    InPort,
    InPhyPort,
    Metadata,
    EthDst,
    EthSrc,
    EthType,
    VlanVid,
    VlanPcp,
    IpDscp,
    IpEcn,
    IpProto,
    Ipv4Src,
    Ipv4Dst,
    TcpSrc,
    TcpDst,
    UdpSrc,
    UdpDst,
    SctpSrc,
    SctpDst,
    Icmpv4Type,
    Icmpv4Code,
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    Ipv6Src,
    Ipv6Dst,
    Ipv6Flabel,
    Icmpv6Type,
    Icmpv6Code,
    Ipv6NdTarget,
    Ipv6NdSll,
    Ipv6NdTll,
    MplsLabel,
    MplsTc,
    MplsBos,
    PbbIsid,
    TunnelId,
    Ipv6Exthdr,
    /// Nicira registers reg0..reg15.
    Reg(u8),
    TunIpv4Src,
    TunIpv4Dst,
    PktMark,
    CtState,
    CtZone,
    CtMark,
    CtLabel,
    ConjId,
    IpTtl,
    IpFrag,
    TcpFlags,
    /// `NXM_OF_IN_PORT`: the 16-bit in_port of the original NXM (move/load use it).
    NxmInPort,
    /// `NXM_OF_VLAN_TCI`: the whole 802.1Q TCI.
    VlanTci,
    /// `NXM_OF_IP_TOS`: the DSCP bits in place (`nw_tos`).
    IpTos,
}

/// Static description of a known field.
#[derive(Clone, Copy, Debug)]
pub struct FieldInfo {
    /// The field.
    pub field: Field,
    /// The name `ovs-ofctl` uses in matches and `set_field` (e.g. `reg0`, `tun_id`, `nw_src`).
    pub name: &'static str,
    /// The header Open vSwitch emits for OpenFlow 1.3.
    pub header: OxmHeader,
    /// Other headers that name the same field (e.g. `NXM_NX_TUN_ID` for `tun_id`).
    pub aliases: &'static [OxmHeader],
    /// Value width in bytes.
    pub len: u8,
    /// Whether a mask is allowed.
    pub maskable: bool,
}

const fn b(field: u8) -> OxmHeader {
    OxmHeader::new(OXM_CLASS_OPENFLOW_BASIC, field)
}
const fn nx(field: u8) -> OxmHeader {
    OxmHeader::new(OXM_CLASS_NXM1, field)
}
const fn of0(field: u8) -> OxmHeader {
    OxmHeader::new(OXM_CLASS_NXM0, field)
}

/// Experimenter id of the ONF extension fields (`ONFOXM_ET_*`), "ONF\0".
pub const ONF_EXPERIMENTER: u32 = 0x4f4e_4600;
/// Experimenter id of Nicira (`NXOXM_ET_*` fields and NXAST actions).
pub const NX_EXPERIMENTER: u32 = 0x0000_2320;

/// `ONFOXM_ET_TCP_FLAGS`: the header OVS uses for tcp_flags in OpenFlow 1.3.
pub const ONFOXM_ET_TCP_FLAGS: OxmHeader = OxmHeader {
    class: OXM_CLASS_EXPERIMENTER,
    field: 42,
    experimenter: Some(ONF_EXPERIMENTER),
};

macro_rules! fi {
    ($f:expr, $name:expr, $hdr:expr, [$($alias:expr),*], $len:expr, $mask:expr) => {
        FieldInfo { field: $f, name: $name, header: $hdr, aliases: &[$($alias),*], len: $len, maskable: $mask }
    };
}

/// The table of known fields (OpenFlow 1.3.5 §7.2.3.7 Table 12; nicira-ext.h / meta-flow.h;
/// numbers checked against ovs-fields(7) of Open vSwitch 3.1). `name` is Open vSwitch's field
/// name as `set_field` prints it; `header` is what OVS emits in an OpenFlow 1.3 match.
///
/// `in_phy_port`, `pbb_isid` and `ipv6_exthdr` are OpenFlow 1.3 fields that Open vSwitch 3.1
/// does not support (it answers OFPBMC_BAD_FIELD); flowmesh still decodes and re-encodes them.
///
/// An alias must have the same width as its field: `NXM_OF_IN_PORT` (16 bits) is therefore its
/// own field, [`Field::NxmInPort`], not an alias of the 32-bit `OXM_OF_IN_PORT`.
pub static FIELDS: &[FieldInfo] = &[
    fi!(Field::InPort, "in_port_oxm", b(0), [], 4, false),
    fi!(Field::InPhyPort, "in_phy_port", b(1), [], 4, false),
    fi!(Field::Metadata, "metadata", b(2), [], 8, true),
    fi!(Field::EthDst, "eth_dst", b(3), [of0(1)], 6, true),
    fi!(Field::EthSrc, "eth_src", b(4), [of0(2)], 6, true),
    fi!(Field::EthType, "eth_type", b(5), [of0(3)], 2, false),
    fi!(Field::VlanVid, "vlan_vid", b(6), [], 2, true),
    fi!(Field::VlanPcp, "vlan_pcp", b(7), [], 1, false),
    fi!(Field::IpDscp, "ip_dscp", b(8), [], 1, false),
    fi!(Field::IpEcn, "nw_ecn", b(9), [nx(28)], 1, false),
    fi!(Field::IpProto, "nw_proto", b(10), [of0(6)], 1, false),
    fi!(Field::Ipv4Src, "ip_src", b(11), [of0(7)], 4, true),
    fi!(Field::Ipv4Dst, "ip_dst", b(12), [of0(8)], 4, true),
    fi!(Field::TcpSrc, "tcp_src", b(13), [of0(9)], 2, true),
    fi!(Field::TcpDst, "tcp_dst", b(14), [of0(10)], 2, true),
    fi!(Field::UdpSrc, "udp_src", b(15), [of0(11)], 2, true),
    fi!(Field::UdpDst, "udp_dst", b(16), [of0(12)], 2, true),
    fi!(Field::SctpSrc, "sctp_src", b(17), [], 2, true),
    fi!(Field::SctpDst, "sctp_dst", b(18), [], 2, true),
    fi!(Field::Icmpv4Type, "icmp_type", b(19), [of0(13)], 1, false),
    fi!(Field::Icmpv4Code, "icmp_code", b(20), [of0(14)], 1, false),
    fi!(Field::ArpOp, "arp_op", b(21), [of0(15)], 2, false),
    fi!(Field::ArpSpa, "arp_spa", b(22), [of0(16)], 4, true),
    fi!(Field::ArpTpa, "arp_tpa", b(23), [of0(17)], 4, true),
    fi!(Field::ArpSha, "arp_sha", b(24), [nx(17)], 6, true),
    fi!(Field::ArpTha, "arp_tha", b(25), [nx(18)], 6, true),
    fi!(Field::Ipv6Src, "ipv6_src", b(26), [nx(19)], 16, true),
    fi!(Field::Ipv6Dst, "ipv6_dst", b(27), [nx(20)], 16, true),
    fi!(Field::Ipv6Flabel, "ipv6_label", b(28), [nx(27)], 4, true),
    fi!(Field::Icmpv6Type, "icmpv6_type", b(29), [nx(21)], 1, false),
    fi!(Field::Icmpv6Code, "icmpv6_code", b(30), [nx(22)], 1, false),
    fi!(Field::Ipv6NdTarget, "nd_target", b(31), [nx(23)], 16, true),
    fi!(Field::Ipv6NdSll, "nd_sll", b(32), [nx(24)], 6, true),
    fi!(Field::Ipv6NdTll, "nd_tll", b(33), [nx(25)], 6, true),
    fi!(Field::MplsLabel, "mpls_label", b(34), [], 4, false),
    fi!(Field::MplsTc, "mpls_tc", b(35), [], 1, false),
    fi!(Field::MplsBos, "mpls_bos", b(36), [], 1, false),
    fi!(Field::PbbIsid, "pbb_isid", b(37), [], 3, true),
    fi!(Field::TunnelId, "tun_id", b(38), [nx(16)], 8, true),
    fi!(Field::Ipv6Exthdr, "ipv6_exthdr", b(39), [], 2, true),
    fi!(Field::Reg(0), "reg0", nx(0), [], 4, true),
    fi!(Field::Reg(1), "reg1", nx(1), [], 4, true),
    fi!(Field::Reg(2), "reg2", nx(2), [], 4, true),
    fi!(Field::Reg(3), "reg3", nx(3), [], 4, true),
    fi!(Field::Reg(4), "reg4", nx(4), [], 4, true),
    fi!(Field::Reg(5), "reg5", nx(5), [], 4, true),
    fi!(Field::Reg(6), "reg6", nx(6), [], 4, true),
    fi!(Field::Reg(7), "reg7", nx(7), [], 4, true),
    fi!(Field::Reg(8), "reg8", nx(8), [], 4, true),
    fi!(Field::Reg(9), "reg9", nx(9), [], 4, true),
    fi!(Field::Reg(10), "reg10", nx(10), [], 4, true),
    fi!(Field::Reg(11), "reg11", nx(11), [], 4, true),
    fi!(Field::Reg(12), "reg12", nx(12), [], 4, true),
    fi!(Field::Reg(13), "reg13", nx(13), [], 4, true),
    fi!(Field::Reg(14), "reg14", nx(14), [], 4, true),
    fi!(Field::Reg(15), "reg15", nx(15), [], 4, true),
    fi!(Field::IpFrag, "ip_frag", nx(26), [], 1, true),
    fi!(Field::IpTtl, "nw_ttl", nx(29), [], 1, false),
    fi!(Field::TunIpv4Src, "tun_src", nx(31), [], 4, true),
    fi!(Field::TunIpv4Dst, "tun_dst", nx(32), [], 4, true),
    fi!(Field::PktMark, "pkt_mark", nx(33), [], 4, true),
    fi!(
        Field::TcpFlags,
        "tcp_flags",
        ONFOXM_ET_TCP_FLAGS,
        [nx(34)],
        2,
        true
    ),
    fi!(Field::ConjId, "conj_id", nx(37), [], 4, false),
    fi!(Field::CtState, "ct_state", nx(105), [], 4, true),
    fi!(Field::CtZone, "ct_zone", nx(106), [], 2, false),
    fi!(Field::CtMark, "ct_mark", nx(107), [], 4, true),
    fi!(Field::CtLabel, "ct_label", nx(108), [], 16, true),
    fi!(Field::NxmInPort, "in_port", of0(0), [], 2, false),
    fi!(Field::VlanTci, "vlan_tci", of0(4), [], 2, true),
    fi!(Field::IpTos, "nw_tos", of0(5), [], 1, false),
];

/// A multiply-rotate hasher for the two small static lookup tables below. They are hit for
/// every field of every match and action on the decode and encode paths, where the default
/// SipHash cost about half of a FLOW_MOD decode; the keys are fixed, trusted table entries.
#[derive(Default, Clone, Copy)]
struct TableHasher(u64);

impl std::hash::Hasher for TableHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

type TableMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<TableHasher>>;

fn field_index() -> &'static TableMap<Field, usize> {
    static INDEX: std::sync::OnceLock<TableMap<Field, usize>> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        FIELDS
            .iter()
            .enumerate()
            .map(|(i, f)| (f.field, i))
            .collect()
    })
}

fn header_index() -> &'static TableMap<OxmHeader, Field> {
    static INDEX: std::sync::OnceLock<TableMap<OxmHeader, Field>> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let mut m = TableMap::default();
        for f in FIELDS {
            m.insert(f.header, f.field);
            for a in f.aliases {
                m.insert(*a, f.field);
            }
        }
        m
    })
}

impl Field {
    /// The static description of this field.
    pub fn info(self) -> &'static FieldInfo {
        // FIELDS holds every variant (checked by a unit test), so the fallback is never taken.
        let idx = field_index().get(&self).copied().unwrap_or(0);
        FIELDS.get(idx).unwrap_or(&FIELDS[0])
    }

    /// The semantic field a wire header names, if known (either its OF1.3 header or an alias).
    pub fn from_header(h: OxmHeader) -> Option<Field> {
        header_index().get(&h).copied()
    }

    /// Value width in bytes.
    pub fn len(self) -> usize {
        self.info().len as usize
    }

    /// Always false: every field has a width. (Present for clippy's `len_without_is_empty`.)
    pub fn is_empty(self) -> bool {
        false
    }

    /// Width in bits.
    pub fn bits(self) -> u16 {
        self.info().len as u16 * 8
    }

    /// The header Open vSwitch emits for this field in OpenFlow 1.3.
    pub fn header(self) -> OxmHeader {
        self.info().header
    }

    /// The header Open vSwitch puts in `move`, `load`, `output:REG` and `ct(zone=...)`: the
    /// field's NXM header when it has one (NXM class 0 or 1), else its OXM header.
    pub fn slice_header(self) -> OxmHeader {
        let info = self.info();
        let is_nxm = |h: &OxmHeader| h.class == OXM_CLASS_NXM0 || h.class == OXM_CLASS_NXM1;
        if is_nxm(&info.header) {
            return info.header;
        }
        info.aliases
            .iter()
            .find(|h| is_nxm(h))
            .copied()
            .unwrap_or(info.header)
    }

    /// The `ovs-ofctl` name of the field.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

/// One field of a match: exact header, value, and optional mask (same width as the value).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MatchField {
    /// The wire header (class, field, experimenter).
    pub header: OxmHeader,
    /// Value bytes, network order.
    pub value: FieldBytes,
    /// Mask bytes, when the field is masked.
    pub mask: Option<FieldBytes>,
}

impl MatchField {
    /// An exact match on a known field; `value` must be `field.len()` bytes, network order.
    pub fn exact(field: Field, value: &[u8]) -> Self {
        MatchField {
            header: field.header(),
            value: value.into(),
            mask: None,
        }
    }

    /// A masked match on a known field. An all-ones mask becomes an exact match, as OVS does.
    pub fn masked(field: Field, value: &[u8], mask: &[u8]) -> Self {
        if mask.iter().all(|&m| m == 0xff) {
            return Self::exact(field, value);
        }
        let v: FieldBytes = value.iter().zip(mask).map(|(v, m)| v & m).collect();
        MatchField {
            header: field.header(),
            value: v,
            mask: Some(mask.into()),
        }
    }

    /// The known field this entry matches, if any.
    pub fn field(&self) -> Option<Field> {
        self.header.known()
    }

    /// The value as a big-endian unsigned integer (fields up to 8 bytes).
    pub fn value_u64(&self) -> u64 {
        be_u64(&self.value)
    }

    /// The mask as a big-endian unsigned integer, or all ones for an exact match.
    pub fn mask_u64(&self) -> u64 {
        match &self.mask {
            Some(m) => be_u64(m),
            None => u64::MAX >> (64 - 8 * self.value.len().clamp(1, 8) as u32),
        }
    }
}

fn be_u64(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

/// An OpenFlow match: the OXM fields in wire order.
///
/// Equality is structural (order matters, as on the wire); use [`Match::normalized`] to compare
/// matches that may come back from a switch in another order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Match {
    /// The fields, in wire order.
    pub fields: Vec<MatchField>,
}

impl Match {
    /// The empty match (all packets).
    pub fn new() -> Self {
        Match::default()
    }

    /// The empty match with room for `n` fields (none of the regrowth of adding them).
    pub fn with_capacity(n: usize) -> Self {
        Match {
            fields: Vec::with_capacity(n),
        }
    }

    /// Append any field entry.
    pub fn with(mut self, f: MatchField) -> Self {
        self.fields.push(f);
        self
    }

    /// Exact match on a known field given as a big-endian integer.
    pub fn with_u64(self, field: Field, value: u64) -> Self {
        let bytes = value.to_be_bytes();
        let n = field.len().min(8);
        self.with(MatchField::exact(field, &bytes[8 - n..]))
    }

    /// Masked match on a known field given as big-endian integers.
    pub fn with_u64_masked(self, field: Field, value: u64, mask: u64) -> Self {
        let (v, m) = (value.to_be_bytes(), mask.to_be_bytes());
        let n = field.len().min(8);
        self.with(MatchField::masked(field, &v[8 - n..], &m[8 - n..]))
    }

    /// The entry for a known field, if present.
    pub fn get(&self, field: Field) -> Option<&MatchField> {
        self.fields.iter().find(|f| f.field() == Some(field))
    }

    /// The fields sorted into a canonical order (by header), for order-insensitive comparison.
    pub fn normalized(&self) -> Match {
        let mut fields = self.fields.clone();
        fields.sort();
        Match { fields }
    }

    // Typed builders for the fields an overlay uses. Each appends one field.

    /// `in_port=PORT`.
    pub fn in_port(self, port: u32) -> Self {
        self.with_u64(Field::InPort, port as u64)
    }
    /// `eth_type=TYPE` (render as `ip`, `arp`, ... when the match allows).
    pub fn eth_type(self, eth_type: u16) -> Self {
        self.with_u64(Field::EthType, eth_type as u64)
    }
    /// `dl_src=MAC`.
    pub fn eth_src(self, mac: [u8; 6]) -> Self {
        self.with(MatchField::exact(Field::EthSrc, &mac))
    }
    /// `dl_dst=MAC`.
    pub fn eth_dst(self, mac: [u8; 6]) -> Self {
        self.with(MatchField::exact(Field::EthDst, &mac))
    }
    /// `nw_proto=PROTO`.
    pub fn ip_proto(self, proto: u8) -> Self {
        self.with_u64(Field::IpProto, proto as u64)
    }
    /// `nw_src=ADDR/PREFIX` (prefix 32 is exact).
    pub fn ipv4_src(self, addr: Ipv4Addr, prefix: u8) -> Self {
        self.with(ipv4_field(Field::Ipv4Src, addr, prefix))
    }
    /// `nw_dst=ADDR/PREFIX` (prefix 32 is exact).
    pub fn ipv4_dst(self, addr: Ipv4Addr, prefix: u8) -> Self {
        self.with(ipv4_field(Field::Ipv4Dst, addr, prefix))
    }
    /// `arp_spa=ADDR/PREFIX`.
    pub fn arp_spa(self, addr: Ipv4Addr, prefix: u8) -> Self {
        self.with(ipv4_field(Field::ArpSpa, addr, prefix))
    }
    /// `arp_tpa=ADDR/PREFIX`.
    pub fn arp_tpa(self, addr: Ipv4Addr, prefix: u8) -> Self {
        self.with(ipv4_field(Field::ArpTpa, addr, prefix))
    }
    /// `arp_sha=MAC/MASK`.
    pub fn arp_sha_masked(self, mac: [u8; 6], mask: [u8; 6]) -> Self {
        self.with(MatchField::masked(Field::ArpSha, &mac, &mask))
    }
    /// `tcp_dst=PORT`.
    pub fn tcp_dst(self, port: u16) -> Self {
        self.with_u64(Field::TcpDst, port as u64)
    }
    /// `udp_dst=PORT`.
    pub fn udp_dst(self, port: u16) -> Self {
        self.with_u64(Field::UdpDst, port as u64)
    }
    /// `regN=VALUE`.
    pub fn reg(self, n: u8, value: u32) -> Self {
        self.with_u64(Field::Reg(n & 15), value as u64)
    }
    /// `tun_id=ID`.
    pub fn tun_id(self, id: u64) -> Self {
        self.with_u64(Field::TunnelId, id)
    }
    /// `tun_src=ADDR`.
    pub fn tun_src(self, addr: Ipv4Addr) -> Self {
        self.with(MatchField::exact(Field::TunIpv4Src, &addr.octets()))
    }
    /// `ct_state=VALUE/MASK` (bits per [`ct_state`]).
    pub fn ct_state(self, value: u32, mask: u32) -> Self {
        self.with_u64_masked(Field::CtState, value as u64, mask as u64)
    }
    /// `conj_id=ID`.
    pub fn conj_id(self, id: u32) -> Self {
        self.with_u64(Field::ConjId, id as u64)
    }
    /// `pkt_mark=MARK`.
    pub fn pkt_mark(self, mark: u32) -> Self {
        self.with_u64(Field::PktMark, mark as u64)
    }
}

/// An IPv4 field matching `addr/prefix` (host bits cleared; /32 exact, /0 still present).
pub fn ipv4_field(field: Field, addr: Ipv4Addr, prefix: u8) -> MatchField {
    let prefix = prefix.min(32);
    let mask: u32 = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    MatchField::masked(field, &addr.octets(), &mask.to_be_bytes())
}

/// Common EtherTypes.
pub mod eth_type {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q.
    pub const VLAN: u16 = 0x8100;
}

/// Common IP protocol numbers.
pub mod ip_proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// `ct_state` bits (ovs-fields(7)).
pub mod ct_state {
    /// new connection.
    pub const NEW: u32 = 0x01;
    /// established.
    pub const EST: u32 = 0x02;
    /// related.
    pub const REL: u32 = 0x04;
    /// reply direction.
    pub const RPL: u32 = 0x08;
    /// invalid.
    pub const INV: u32 = 0x10;
    /// tracked.
    pub const TRK: u32 = 0x20;
    /// source NATed.
    pub const SNAT: u32 = 0x40;
    /// destination NATed.
    pub const DNAT: u32 = 0x80;
}

// ---- codec ----

/// `OFPMT_OXM`, the only match type of OpenFlow 1.3.
pub const OFPMT_OXM: u16 = 1;

/// OFPBMC_* codes (OpenFlow 1.3.5 §7.4.4, `ofp_bad_match_code`).
pub mod bad_match {
    /// Unsupported match type.
    pub const BAD_TYPE: u16 = 0;
    /// Length problem in match.
    pub const BAD_LEN: u16 = 1;
    /// Unsupported field in the match (OVS also uses it for a length that does not fit the field).
    pub const BAD_FIELD: u16 = 6;
    /// Value bits set where the mask wildcards them.
    pub const BAD_WILDCARDS: u16 = 5;
    /// Unsupported value in a match field.
    pub const BAD_VALUE: u16 = 7;
    /// Unsupported mask.
    pub const BAD_MASK: u16 = 8;
    /// A field appears more than once.
    pub const DUP_FIELD: u16 = 10;
}

fn match_err(code: u16, detail: String) -> crate::DecodeError {
    crate::DecodeError::Rejected {
        context: "match",
        err_type: crate::error::ofp_error_type::BAD_MATCH,
        code,
        detail,
    }
}

impl OxmHeader {
    /// Bytes the header occupies on the wire (4, or 8 with an experimenter id).
    pub fn wire_len(&self) -> usize {
        if self.experimenter.is_some() {
            8
        } else {
            4
        }
    }

    /// Read an OXM header (with its experimenter id, if any); returns the header, the hasmask
    /// bit and the payload length (value plus mask, experimenter id excluded).
    ///
    /// Layout (OpenFlow 1.3.5 §7.2.3.2, `OXM_HEADER`; experimenter OXM §7.2.3.9):
    /// ```text
    /// | class:16 | field:7 | hasmask:1 | length:8 | [experimenter:32 if class == 0xffff]
    /// ```
    /// For the experimenter class, `length` counts the 4-byte experimenter id too.
    pub fn decode(
        r: &mut crate::wire::Reader<'_>,
    ) -> Result<(OxmHeader, bool, usize), crate::DecodeError> {
        let word = r.u32("oxm header")?;
        let class = (word >> 16) as u16;
        let field = ((word >> 9) & 0x7f) as u8;
        let has_mask = word & 0x100 != 0;
        let mut len = (word & 0xff) as usize;
        let experimenter = if class == OXM_CLASS_EXPERIMENTER {
            if len < 4 {
                return Err(match_err(
                    bad_match::BAD_LEN,
                    format!("experimenter OXM {word:#010x} with length {len} < 4"),
                ));
            }
            len -= 4;
            Some(r.u32("oxm experimenter id")?)
        } else {
            None
        };
        Ok((
            OxmHeader {
                class,
                field,
                experimenter,
            },
            has_mask,
            len,
        ))
    }

    /// Write the header for a payload of `payload_len` bytes (value plus mask).
    pub fn encode(&self, has_mask: bool, payload_len: usize, w: &mut Vec<u8>) {
        use crate::wire::Writer;
        let total = payload_len + if self.experimenter.is_some() { 4 } else { 0 };
        w.put_u32(self.word(has_mask, total.min(255) as u8));
        if let Some(e) = self.experimenter {
            w.put_u32(e);
        }
    }
}

impl MatchField {
    /// Decode one OXM TLV, validating it as Open vSwitch does for known fields: the payload is
    /// the field width (twice that with a mask), a mask on a non-maskable field is all-ones or
    /// all-zeros, no value bit is set outside the mask (OFPBMC_BAD_WILDCARDS), and a few fields
    /// have range checks (OFPBMC_BAD_VALUE). Unknown fields are kept as they are.
    pub fn decode(r: &mut crate::wire::Reader<'_>) -> Result<MatchField, crate::DecodeError> {
        let (header, has_mask, len) = OxmHeader::decode(r)?;
        let payload = r.bytes(len, "oxm payload")?;
        let (value, mask) = if has_mask {
            if len % 2 != 0 {
                return Err(match_err(
                    bad_match::BAD_LEN,
                    format!("masked OXM {header:?} with odd payload length {len}"),
                ));
            }
            let (v, m) = payload.split_at(len / 2);
            (FieldBytes::from_slice(v), Some(FieldBytes::from_slice(m)))
        } else {
            (FieldBytes::from_slice(payload), None)
        };
        let mf = MatchField {
            header,
            value,
            mask,
        };
        if let Some(field) = header.known() {
            mf.validate(field)?;
        }
        Ok(mf)
    }

    fn validate(&self, field: Field) -> Result<(), crate::DecodeError> {
        let info = field.info();
        let name = info.name;
        if self.value.len() != usize::from(info.len) {
            return Err(match_err(
                bad_match::BAD_FIELD,
                format!(
                    "{name}: {} value bytes, the field has {}",
                    self.value.len(),
                    info.len
                ),
            ));
        }
        if let Some(mask) = &self.mask {
            let trivial = mask.iter().all(|&b| b == 0) || mask.iter().all(|&b| b == 0xff);
            if !info.maskable && !trivial {
                return Err(match_err(
                    bad_match::BAD_MASK,
                    format!("{name} cannot be masked"),
                ));
            }
            if self.value.iter().zip(mask).any(|(v, m)| v & !m != 0) {
                return Err(match_err(
                    bad_match::BAD_WILDCARDS,
                    format!("{name}: 1-bits in the value for bits wildcarded by the mask"),
                ));
            }
        }
        let v = self.value_u64();
        let limit: Option<u64> = match field {
            Field::VlanVid => Some(0x1fff),
            Field::VlanPcp | Field::MplsTc => Some(7),
            Field::IpDscp => Some(0x3f),
            Field::IpEcn => Some(3),
            Field::MplsBos => Some(1),
            Field::Ipv6Flabel | Field::MplsLabel => Some(0xf_ffff),
            Field::CtState => Some(0xff),
            Field::IpFrag => Some(3),
            Field::TcpFlags => Some(0x0fff),
            Field::ArpOp => Some(0xff),
            _ => None,
        };
        let bad_tos = field == Field::IpTos && v & 3 != 0;
        if limit.is_some_and(|l| v > l) || bad_tos {
            return Err(match_err(
                bad_match::BAD_VALUE,
                format!("{name}: value {v:#x} out of range"),
            ));
        }
        Ok(())
    }

    /// Encode as one OXM TLV with this entry's exact header.
    pub fn encode(&self, w: &mut Vec<u8>) {
        use crate::wire::Writer;
        let mask = self.mask.as_deref().unwrap_or(&[]);
        self.header
            .encode(self.mask.is_some(), self.value.len() + mask.len(), w);
        w.put_slice(&self.value);
        w.put_slice(mask);
    }

    /// Value and mask with the value cleared outside the mask; `None` when the mask is all
    /// zeros (the field matches anything, as if absent).
    pub fn effective(&self) -> Option<(FieldBytes, FieldBytes)> {
        match &self.mask {
            None => Some((
                self.value.clone(),
                self.value.iter().map(|_| 0xff).collect(),
            )),
            Some(m) if m.iter().all(|&b| b == 0) => None,
            Some(m) => Some((
                self.value.iter().zip(m).map(|(v, m)| v & m).collect(),
                m.clone(),
            )),
        }
    }
}

impl Match {
    /// Decode an `ofp_match` (type OFPMT_OXM, length, OXM fields, zero padding to 8 bytes),
    /// consuming the padding too.
    ///
    /// Layout (OpenFlow 1.3.5 §7.2.3.1, `struct ofp_match`, 4 + N bytes, padded to 8):
    /// ```text
    /// | type:16 = OFPMT_OXM (1) | length:16 (header + OXMs, padding excluded) |
    /// | oxm_fields[length - 4] | pad to a multiple of 8 |
    /// ```
    /// Fields keep their wire order and exact headers; unknown and experimenter fields are
    /// kept. A known field appearing twice is rejected (OFPBMC_DUP_FIELD), as OVS does.
    /// Padding bytes are skipped, not checked (OVS does not check them either).
    pub fn decode(r: &mut crate::wire::Reader<'_>) -> Result<Match, crate::DecodeError> {
        let ty = r.u16("ofp_match type")?;
        let len = r.u16("ofp_match length")? as usize;
        if ty != OFPMT_OXM {
            return Err(match_err(
                bad_match::BAD_TYPE,
                format!("match type {ty} (only OFPMT_OXM = 1 is OpenFlow 1.3)"),
            ));
        }
        if len < 4 {
            return Err(match_err(
                bad_match::BAD_LEN,
                format!("ofp_match length {len} < 4"),
            ));
        }
        let mut body = r
            .sub(len - 4, "ofp_match fields")
            .map_err(|e| match_err(bad_match::BAD_LEN, e.to_string()))?;
        r.skip((8 - len % 8) % 8, "ofp_match padding")
            .map_err(|e| match_err(bad_match::BAD_LEN, e.to_string()))?;
        let mut fields: Vec<MatchField> = Vec::new();
        // The known fields seen so far (one table lookup per field).
        let mut seen: SmallVec<[Field; 8]> = SmallVec::new();
        while !body.is_empty() {
            let f = MatchField::decode(&mut body).map_err(|e| match e {
                crate::DecodeError::Truncated { .. } => {
                    match_err(bad_match::BAD_LEN, e.to_string())
                }
                other => other,
            })?;
            if let Some(k) = f.field() {
                if seen.contains(&k) {
                    return Err(match_err(
                        bad_match::DUP_FIELD,
                        format!("{} appears twice", k.name()),
                    ));
                }
                seen.push(k);
            }
            fields.push(f);
        }
        Ok(Match { fields })
    }

    /// Encode as an `ofp_match` including its padding to 8 bytes.
    pub fn encode(&self, w: &mut Vec<u8>) {
        use crate::wire::Writer;
        let start = w.len();
        w.put_u16(OFPMT_OXM);
        w.put_u16(0);
        for f in &self.fields {
            f.encode(w);
        }
        let len = w.len() - start;
        w.patch_u16(start + 2, len.min(0xffff) as u16);
        w.pad_to_8(start);
    }

    /// Bytes `encode` writes (padding included).
    pub fn encoded_len(&self) -> usize {
        let raw: usize = 4 + self
            .fields
            .iter()
            .map(|f| f.header.wire_len() + f.value.len() + f.mask.as_ref().map_or(0, |m| m.len()))
            .sum::<usize>();
        raw.div_ceil(8) * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_variant_is_in_the_table() {
        let mut all = vec![
            Field::InPort,
            Field::InPhyPort,
            Field::Metadata,
            Field::EthDst,
            Field::EthSrc,
            Field::EthType,
            Field::VlanVid,
            Field::VlanPcp,
            Field::IpDscp,
            Field::IpEcn,
            Field::IpProto,
            Field::Ipv4Src,
            Field::Ipv4Dst,
            Field::TcpSrc,
            Field::TcpDst,
            Field::UdpSrc,
            Field::UdpDst,
            Field::SctpSrc,
            Field::SctpDst,
            Field::Icmpv4Type,
            Field::Icmpv4Code,
            Field::ArpOp,
            Field::ArpSpa,
            Field::ArpTpa,
            Field::ArpSha,
            Field::ArpTha,
            Field::Ipv6Src,
            Field::Ipv6Dst,
            Field::Ipv6Flabel,
            Field::Icmpv6Type,
            Field::Icmpv6Code,
            Field::Ipv6NdTarget,
            Field::Ipv6NdSll,
            Field::Ipv6NdTll,
            Field::MplsLabel,
            Field::MplsTc,
            Field::MplsBos,
            Field::PbbIsid,
            Field::TunnelId,
            Field::Ipv6Exthdr,
            Field::TunIpv4Src,
            Field::TunIpv4Dst,
            Field::PktMark,
            Field::CtState,
            Field::CtZone,
            Field::CtMark,
            Field::CtLabel,
            Field::ConjId,
            Field::IpTtl,
            Field::IpFrag,
            Field::TcpFlags,
            Field::NxmInPort,
            Field::VlanTci,
            Field::IpTos,
        ];
        all.extend((0..16).map(Field::Reg));
        for f in all {
            assert_eq!(f.info().field, f, "{f:?} missing from FIELDS");
            assert_eq!(Field::from_header(f.header()), Some(f));
        }
    }

    #[test]
    fn masked_all_ones_is_exact_and_value_is_cleared() {
        let m = ipv4_field(Field::Ipv4Dst, Ipv4Addr::new(10, 128, 3, 7), 32);
        assert!(m.mask.is_none());
        let m = ipv4_field(Field::Ipv4Dst, Ipv4Addr::new(10, 128, 3, 7), 23);
        assert_eq!(&m.value[..], &[10, 128, 2, 0]);
        assert_eq!(m.mask.as_deref().unwrap_or(&[]), &[255, 255, 254, 0]);
    }
}

/// Seeded generators for the property/fuzz tests of the match, action and instruction codecs.
#[cfg(test)]
pub(crate) mod gen {
    use super::*;

    /// A small deterministic PRNG (splitmix64).
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        pub fn below(&mut self, n: u64) -> u64 {
            if n == 0 {
                0
            } else {
                self.next() % n
            }
        }
        pub fn coin(&mut self) -> bool {
            self.next() & 1 == 1
        }
        pub fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    /// Clamp a random value into the range Open vSwitch accepts for the field.
    fn fix_value(field: Field, v: &mut [u8]) {
        let limit: Option<u128> = match field {
            Field::VlanVid => Some(0x1fff),
            Field::VlanPcp | Field::MplsTc => Some(7),
            Field::IpDscp => Some(0x3f),
            Field::IpEcn | Field::IpFrag => Some(3),
            Field::MplsBos => Some(1),
            Field::Ipv6Flabel | Field::MplsLabel => Some(0xf_ffff),
            Field::CtState | Field::ArpOp => Some(0xff),
            Field::TcpFlags => Some(0x0fff),
            _ => None,
        };
        if let Some(l) = limit {
            let x = v.iter().fold(0u128, |a, &b| (a << 8) | b as u128) & l;
            let n = v.len();
            v.copy_from_slice(&x.to_be_bytes()[16 - n..]);
        }
        if field == Field::IpTos {
            if let Some(b) = v.last_mut() {
                *b &= 0xfc;
            }
        }
    }

    /// A random valid entry for a known field (with a mask when `masked` and maskable).
    pub fn known_field(rng: &mut Rng, field: Field, allow_mask: bool) -> MatchField {
        let info = field.info();
        let mut value = rng.bytes(field.len());
        fix_value(field, &mut value);
        let headers: Vec<OxmHeader> = std::iter::once(info.header)
            .chain(info.aliases.iter().copied())
            .collect();
        let header = headers[rng.below(headers.len() as u64) as usize];
        let mask = if allow_mask && info.maskable && rng.coin() {
            let m = rng.bytes(field.len());
            for (v, m) in value.iter_mut().zip(&m) {
                *v &= m;
            }
            Some(FieldBytes::from_vec(m))
        } else {
            None
        };
        MatchField {
            header,
            value: FieldBytes::from_vec(value),
            mask,
        }
    }

    /// A random valid match: distinct known fields plus, sometimes, unknown ones.
    pub fn random_match(rng: &mut Rng) -> Match {
        let mut fields = Vec::new();
        let mut used = Vec::new();
        for _ in 0..rng.below(7) {
            if rng.below(5) == 0 {
                let len = rng.below(12) as usize * 2;
                let masked = rng.coin() && len > 0;
                let header = if rng.coin() {
                    OxmHeader {
                        class: OXM_CLASS_EXPERIMENTER,
                        field: rng.below(128) as u8,
                        experimenter: Some(0x00de_ad00),
                    }
                } else {
                    OxmHeader::new(0x0100 + rng.below(0x7000) as u16, rng.below(128) as u8)
                };
                let (v, m) = if masked {
                    (
                        rng.bytes(len / 2),
                        Some(FieldBytes::from_vec(rng.bytes(len / 2))),
                    )
                } else {
                    (rng.bytes(len), None)
                };
                fields.push(MatchField {
                    header,
                    value: FieldBytes::from_vec(v),
                    mask: m,
                });
                continue;
            }
            let f = FIELDS[rng.below(FIELDS.len() as u64) as usize].field;
            if used.contains(&f) {
                continue;
            }
            used.push(f);
            fields.push(known_field(rng, f, true));
        }
        Match { fields }
    }

    /// Random damage to an encoding: bit flips, byte overwrites, truncation, insertion.
    pub fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
        for _ in 0..=rng.below(4) {
            match rng.below(6) {
                0 | 1 if !bytes.is_empty() => {
                    let i = rng.below(bytes.len() as u64) as usize;
                    bytes[i] ^= 1 << rng.below(8);
                }
                2 if !bytes.is_empty() => {
                    let i = rng.below(bytes.len() as u64) as usize;
                    bytes[i] = rng.next() as u8;
                }
                3 if !bytes.is_empty() => {
                    let n = rng.below(bytes.len() as u64) as usize;
                    bytes.truncate(n);
                }
                4 => {
                    let i = rng.below(bytes.len() as u64 + 1) as usize;
                    let k = rng.below(9) as usize;
                    let extra = rng.bytes(k);
                    bytes.splice(i..i, extra);
                }
                _ => {
                    // Corrupt a 16-bit length-like word at an even offset.
                    if bytes.len() >= 4 {
                        let i = (rng.below(bytes.len() as u64 / 2) as usize) * 2;
                        if i + 1 < bytes.len() {
                            let v = rng.below(64) as u16 * 4;
                            bytes[i..i + 2].copy_from_slice(&v.to_be_bytes());
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod codec_tests {
    use super::gen::{mutate, random_match, Rng};
    use super::*;
    use crate::wire::Reader;

    fn enc(m: &Match) -> Vec<u8> {
        let mut w = Vec::new();
        m.encode(&mut w);
        w
    }

    fn code(r: Result<Match, crate::DecodeError>) -> Option<(u16, u16)> {
        r.err().map(|e| e.ofp_error())
    }

    fn dec(b: &[u8]) -> Result<Match, crate::DecodeError> {
        Match::decode(&mut Reader::new(b))
    }

    #[test]
    fn ovs_captured_match_round_trips() {
        // `ovs-ofctl -O OpenFlow13 parse-flow 'table=20,priority=100,in_port=5,arp,
        // nw_src=10.128.0.5,arp_sha=00:00:0a:80:00:05/00:00:ff:ff:ff:ff,...'`, match part.
        let bytes = [
            0x00, 0x01, 0x00, 0x2a, 0x80, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x05, 0x80, 0x00,
            0x0a, 0x02, 0x08, 0x06, 0x80, 0x00, 0x2c, 0x04, 0x0a, 0x80, 0x00, 0x05, 0x80, 0x00,
            0x31, 0x0c, 0x00, 0x00, 0x0a, 0x80, 0x00, 0x05, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let m = dec(&bytes).expect("decodes");
        assert_eq!(enc(&m), bytes);
        assert_eq!(
            m.to_string(),
            "arp,in_port=5,arp_spa=10.128.0.5,arp_sha=00:00:0a:80:00:05/00:00:ff:ff:ff:ff"
        );
    }

    #[test]
    fn length_rules() {
        use bad_match::*;
        // type must be OXM
        assert_eq!(code(dec(&[0, 0, 0, 4, 0, 0, 0, 0])), Some((4, BAD_TYPE)));
        // length below the 4-byte header
        assert_eq!(code(dec(&[0, 1, 0, 3, 0, 0, 0, 0])), Some((4, BAD_LEN)));
        // padding missing
        assert_eq!(code(dec(&[0, 1, 0, 4])), Some((4, BAD_LEN)));
        // OXM longer than the match
        assert_eq!(
            code(dec(&[0, 1, 0, 8, 0x80, 0, 0x0a, 0x02, 0, 0, 0, 0])),
            Some((4, BAD_LEN))
        );
        // width that does not fit the field (eth_type with 1 byte)
        assert_eq!(
            code(dec(&[
                0, 1, 0, 9, 0x80, 0, 0x0a, 0x01, 8, 0, 0, 0, 0, 0, 0, 0
            ])),
            Some((4, BAD_FIELD))
        );
        // odd masked payload on an unknown field
        assert_eq!(
            code(dec(&[
                0, 1, 0, 9, 0x12, 0, 0x01, 0x01, 8, 0, 0, 0, 0, 0, 0, 0
            ])),
            Some((4, BAD_LEN))
        );
        // experimenter OXM shorter than its experimenter id
        assert_eq!(
            code(dec(&[0, 1, 0, 8, 0xff, 0xff, 0x00, 0x02, 0, 0, 0, 0])),
            Some((4, BAD_LEN))
        );
    }

    #[test]
    fn masks_values_and_duplicates_are_checked_like_ovs() {
        use bad_match::*;
        let reg0 = |v: u32, m: u32| {
            let mut b = vec![0, 1, 0, 0x10, 0x00, 0x01, 0x01, 0x08];
            b.extend(v.to_be_bytes());
            b.extend(m.to_be_bytes());
            b.extend([0; 4]);
            b
        };
        assert!(dec(&reg0(0x0f, 0xff)).is_ok());
        assert_eq!(code(dec(&reg0(0xff, 0x0f))), Some((4, BAD_WILDCARDS)));
        // ct_state beyond the 8 defined bits
        let ct = [
            0, 1, 0, 0x0c, 0x00, 0x01, 0xd2, 0x04, 0, 0, 1, 0, 0, 0, 0, 0,
        ];
        assert_eq!(code(dec(&ct)), Some((4, BAD_VALUE)));
        // masked non-maskable field (eth_type) with a partial mask
        let et = [
            0, 1, 0, 0x0c, 0x80, 0x00, 0x0b, 0x04, 0x08, 0x00, 0xff, 0x00, 0, 0, 0, 0,
        ];
        assert_eq!(code(dec(&et)), Some((4, BAD_MASK)));
        // the same field twice, once through its NXM alias
        let dup = [
            0, 1, 0, 0x10, 0x80, 0x00, 0x0a, 0x02, 0x08, 0x00, 0x00, 0x00, 0x06, 0x02, 0x08, 0x00,
        ];
        assert_eq!(code(dec(&dup)), Some((4, DUP_FIELD)));
    }

    #[test]
    fn experimenter_and_unknown_fields_are_kept_exactly() {
        let bytes = [
            0x00, 0x01, 0x00, 0x1f, // ofp_match, length 31
            0xff, 0xff, 0x55, 0x08, 0x4f, 0x4e, 0x46, 0x00, 0x00, 0x02, 0x00,
            0x12, // tcp_flags
            0x7e, 0x00, 0x02, 0x03, 0xaa, 0xbb, 0xcc, // unknown class 0x7e00
            0xff, 0xff, 0x04, 0x04, 0xde, 0xad, 0xbe, 0xef, // unknown experimenter, no value
            0x00, // padding to 32
        ];
        let m = dec(&bytes).expect("decodes");
        assert_eq!(m.fields.len(), 3);
        assert_eq!(m.fields[0].field(), Some(Field::TcpFlags));
        assert_eq!(m.fields[1].field(), None);
        assert_eq!(m.fields[2].header.experimenter, Some(0xdead_beef));
        assert_eq!(enc(&m), bytes);
    }

    #[test]
    fn encode_appends_after_existing_bytes() {
        let m = Match::new().eth_type(eth_type::IPV4).reg(1, 0x64);
        let mut w = vec![0xee; 5];
        m.encode(&mut w);
        assert_eq!(&w[..5], &[0xee; 5]);
        assert_eq!((w.len() - 5) % 8, 0);
        assert_eq!(w.len() - 5, m.encoded_len());
        assert_eq!(Match::decode(&mut Reader::new(&w[5..])), Ok(m));
    }

    /// ≥100,000 generated matches round-trip, and ≥100,000 random or mutated inputs never
    /// panic; whatever decodes re-encodes to the bytes it came from (padding aside).
    #[test]
    fn property_round_trip_and_no_panic() {
        let mut rng = Rng(0x5eed_0001);
        for _ in 0..100_000 {
            let m = random_match(&mut rng);
            let bytes = enc(&m);
            assert_eq!(dec(&bytes).as_ref(), Ok(&m), "{bytes:02x?}");
            let mut bad = bytes;
            mutate(&mut rng, &mut bad);
            check_no_panic(&bad);
        }
        for _ in 0..20_000 {
            let n = rng.below(64) as usize;
            let mut b = rng.bytes(n);
            if b.len() >= 4 && rng.coin() {
                b[0..2].copy_from_slice(&[0, 1]);
                let l = b.len() as u16 - rng.below(4) as u16;
                b[2..4].copy_from_slice(&l.to_be_bytes());
            }
            check_no_panic(&b);
        }
    }

    fn check_no_panic(b: &[u8]) {
        let mut r = Reader::new(b);
        if let Ok(m) = Match::decode(&mut r) {
            let used = r.position();
            let again = enc(&m);
            let len = u16::from_be_bytes([b[2], b[3]]) as usize;
            assert_eq!(again.len(), used);
            assert_eq!(&again[..len], &b[..len], "{b:02x?}");
        }
    }
}
