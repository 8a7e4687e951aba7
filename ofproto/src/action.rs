//! OpenFlow 1.3 actions and the Nicira (NXAST) extension actions, as data.
//!
//! Wire layouts: OpenFlow 1.3.5 §7.2.5 (`ofp_action_*`), nicira-ext.h (`nx_action_*`).
//! Actions flowmesh does not model are kept as [`Action::Unknown`] with their exact bytes.
//!
//! One file on purpose: every action's wire layout, decoder, encoder and `ovs-ofctl` text sit
//! in one `match` per direction over one enum, so adding an action touches one place and the
//! exhaustive matches keep decode, encode and print in step; splitting by vendor would split
//! those matches.

use crate::oxm::{Field, MatchField, OxmHeader};

/// Reserved OpenFlow port numbers (OpenFlow 1.3.5 §7.2.1, `ofp_port_no`).
pub mod port {
    /// Maximum number of physical and logical switch ports.
    pub const MAX: u32 = 0xffff_ff00;
    /// Send the packet out the input port.
    pub const IN_PORT: u32 = 0xffff_fff8;
    /// Submit the packet to the first flow table.
    pub const TABLE: u32 = 0xffff_fff9;
    /// Forward using non-OpenFlow pipeline.
    pub const NORMAL: u32 = 0xffff_fffa;
    /// Flood using non-OpenFlow pipeline.
    pub const FLOOD: u32 = 0xffff_fffb;
    /// All standard ports except input port.
    pub const ALL: u32 = 0xffff_fffc;
    /// Send to controller.
    pub const CONTROLLER: u32 = 0xffff_fffd;
    /// Local openflow "port".
    pub const LOCAL: u32 = 0xffff_fffe;
    /// Wildcard port used only for flow mod (delete) and flow stats requests.
    pub const ANY: u32 = 0xffff_ffff;
}

/// A bit range of a field, as Nicira `move`/`load`/`output:reg` name it (`NXM_NX_REG0[0..15]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldSlice {
    /// The field's wire header.
    pub header: OxmHeader,
    /// Offset of the lowest bit.
    pub ofs: u16,
    /// Number of bits.
    pub n_bits: u16,
}

impl FieldSlice {
    /// The whole of a known field (`NXM_NX_REG0[]`), named by the header Open vSwitch uses in
    /// move/load/output (the NXM one where the field has it).
    pub fn whole(field: Field) -> Self {
        FieldSlice {
            header: field.slice_header(),
            ofs: 0,
            n_bits: field.bits(),
        }
    }

    /// Bits `ofs..ofs+n_bits` of a known field (`NXM_NX_TUN_ID[0..31]` is `range(TunnelId, 0, 32)`).
    pub fn range(field: Field, ofs: u16, n_bits: u16) -> Self {
        FieldSlice {
            header: field.slice_header(),
            ofs,
            n_bits,
        }
    }
}

/// Conntrack `nat` sub-action (part of NXAST_CT, `nx_action_nat`). Every part is kept as it
/// is on the wire (present or absent), so a decoded `nat` re-encodes byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nat {
    /// NX_NAT_F_* flags (src, dst, persistent, hash, random).
    pub flags: u16,
    /// The address range, if any.
    pub addr: Option<NatAddr>,
    /// Port range: the minimum and, when present on the wire, the maximum.
    pub ports: Option<(u16, Option<u16>)>,
}

/// The address range of a `nat`: the minimum and, when present on the wire, the maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NatAddr {
    /// NX_NAT_RANGE_IPV4_MIN (and _MAX).
    V4(std::net::Ipv4Addr, Option<std::net::Ipv4Addr>),
    /// NX_NAT_RANGE_IPV6_MIN (and _MAX).
    V6(std::net::Ipv6Addr, Option<std::net::Ipv6Addr>),
}

/// NX_NAT_RANGE_* bits of `nx_action_nat.range_present`.
mod nat_range {
    pub const IPV4_MIN: u16 = 1 << 0;
    pub const IPV4_MAX: u16 = 1 << 1;
    pub const IPV6_MIN: u16 = 1 << 2;
    pub const IPV6_MAX: u16 = 1 << 3;
    pub const PROTO_MIN: u16 = 1 << 4;
    pub const PROTO_MAX: u16 = 1 << 5;
}

/// `sample(...)`: NXAST_SAMPLE, NXAST_SAMPLE2 (with `sampling_port`) or NXAST_SAMPLE3 (with a
/// direction); `version` names which of the three encodings carries it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sample {
    /// Packets sampled per 65535 (never 0).
    pub probability: u16,
    /// IPFIX collector set.
    pub collector_set_id: u32,
    /// IPFIX observation domain.
    pub obs_domain_id: u32,
    /// IPFIX observation point.
    pub obs_point_id: u32,
    /// Sampling port (0xffff, OFPP_NONE, for none); only NXAST_SAMPLE2/3 carry it.
    pub sampling_port: u16,
    /// 0 default, 1 ingress, 2 egress; only NXAST_SAMPLE3 carries it.
    pub direction: u8,
    /// 1 (NXAST_SAMPLE), 2 (NXAST_SAMPLE2) or 3 (NXAST_SAMPLE3).
    pub version: u8,
}

/// `multipath(fields,basis,algorithm,n_links,arg,dst)` (NXAST_MULTIPATH, `nx_action_multipath`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Multipath {
    /// NX_HASH_FIELDS_* (0 eth_src .. 6 symmetric_l3).
    pub fields: u16,
    /// Hash basis.
    pub basis: u16,
    /// NX_MP_ALG_* (0 modulo_n, 1 hash_threshold, 2 hrw, 3 iter_hash).
    pub algorithm: u16,
    /// Number of links minus one.
    pub max_link: u16,
    /// Algorithm argument.
    pub arg: u32,
    /// Where the link number goes.
    pub dst: FieldSlice,
}

/// `bundle(...)` / `bundle_load(...)` (NXAST_BUNDLE / NXAST_BUNDLE_LOAD, `nx_action_bundle`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bundle {
    /// NX_BD_ALG_* (0 active_backup, 1 hrw).
    pub algorithm: u16,
    /// NX_HASH_FIELDS_*.
    pub fields: u16,
    /// Hash basis.
    pub basis: u16,
    /// `bundle_load`'s destination; None for `bundle` (which outputs).
    pub dst: Option<FieldSlice>,
    /// Member ports (OpenFlow 1.0 numbering).
    pub members: Vec<u16>,
}

/// The Nicira conntrack action (NXAST_CT, `nx_action_conntrack`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ct {
    /// NX_CT_F_COMMIT (1), NX_CT_F_FORCE (2).
    pub flags: u16,
    /// Zone taken from a field slice, or None for an immediate zone.
    pub zone_src: Option<FieldSlice>,
    /// Immediate zone (when `zone_src` is None) .
    pub zone_imm: u16,
    /// Table to recirculate to, or None (0xff on the wire) to continue the pipeline.
    pub recirc_table: Option<u8>,
    /// Application-layer gateway port (0 = none).
    pub alg: u16,
    /// Nested actions (only `nat`, `set_field`/`load` of ct_mark/ct_label are meaningful).
    pub actions: Vec<Action>,
}

/// Flag values of [`Ct::flags`].
pub mod ct_flags {
    /// Commit the connection to the connection tracking table.
    pub const COMMIT: u16 = 1 << 0;
    /// Force: if the connection is in the reply direction, delete it and commit a new one.
    pub const FORCE: u16 = 1 << 1;
}

/// Flag values of [`Nat::flags`] (NX_NAT_F_*).
pub mod nat_flags {
    /// Source NAT.
    pub const SRC: u16 = 1 << 0;
    /// Destination NAT.
    pub const DST: u16 = 1 << 1;
    /// Persistent mapping.
    pub const PERSISTENT: u16 = 1 << 2;
    /// Hash-based port selection.
    pub const PROTO_HASH: u16 = 1 << 3;
    /// Random port selection.
    pub const PROTO_RANDOM: u16 = 1 << 4;
}

/// `learn(...)` (NXAST_LEARN, `nx_action_learn`): a flow template added to `table_id` when a
/// packet executes the action.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Learn {
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub cookie: u64,
    /// NX_LEARN_F_SEND_FLOW_REM (1), NX_LEARN_F_DELETE_LEARNED (2).
    pub flags: u16,
    pub table_id: u8,
    pub fin_idle_timeout: u16,
    pub fin_hard_timeout: u16,
    /// NXAST_LEARN2 only: maximum number of learned flows (0: no limit).
    pub limit: u32,
    /// NXAST_LEARN2 only: the bit set to whether the flow was learned
    /// (NX_LEARN_F_WRITE_RESULT, flag 4, is set exactly when this is).
    pub result_dst: Option<FieldSlice>,
    /// Encoded as NXAST_LEARN2 (forced when `limit` or `result_dst` is set).
    pub learn2: bool,
    pub specs: Vec<LearnSpec>,
}

/// One `learn` flow-mod spec: where `n_bits` bits come from and what they become.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LearnSpec {
    pub src: LearnSrc,
    pub dst: LearnDst,
}

/// The source of a learn spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LearnSrc {
    /// Bits of a field of the packet.
    Field(FieldSlice),
    /// An immediate value of `n_bits` bits (big-endian, 16-bit units as on the wire).
    Immediate { n_bits: u16, value: Vec<u8> },
}

/// The destination of a learn spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LearnDst {
    /// A match field of the learned flow.
    Match(FieldSlice),
    /// A `load` action of the learned flow.
    Load(FieldSlice),
    /// An `output` action of the learned flow (the source is the port).
    Output,
}

impl LearnSpec {
    /// Width of the spec in bits.
    pub fn n_bits(&self) -> u16 {
        match &self.src {
            LearnSrc::Field(sf) => sf.n_bits,
            LearnSrc::Immediate { n_bits, .. } => *n_bits,
        }
    }
}

/// The OpenFlow 1.1 set actions (OFPAT 1-10), deprecated since OpenFlow 1.2 (which uses
/// set_field) but still accepted by Open vSwitch in OpenFlow 1.3 and printed by their own names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LegacySet {
    /// OFPAT_SET_VLAN_VID (1): `set_vlan_vid:N` (12 bits).
    VlanVid(u16),
    /// OFPAT_SET_VLAN_PCP (2): `set_vlan_pcp:N` (3 bits).
    VlanPcp(u8),
    /// OFPAT_SET_DL_SRC (3): `mod_dl_src:MAC`.
    DlSrc([u8; 6]),
    /// OFPAT_SET_DL_DST (4): `mod_dl_dst:MAC`.
    DlDst([u8; 6]),
    /// OFPAT_SET_NW_SRC (5): `mod_nw_src:IP`.
    NwSrc(std::net::Ipv4Addr),
    /// OFPAT_SET_NW_DST (6): `mod_nw_dst:IP`.
    NwDst(std::net::Ipv4Addr),
    /// OFPAT_SET_NW_TOS (7): `mod_nw_tos:N` (the DSCP bits of the TOS byte).
    NwTos(u8),
    /// OFPAT_SET_NW_ECN (8): `mod_nw_ecn:N` (2 bits).
    NwEcn(u8),
    /// OFPAT_SET_TP_SRC (9): `mod_tp_src:N`.
    TpSrc(u16),
    /// OFPAT_SET_TP_DST (10): `mod_tp_dst:N`.
    TpDst(u16),
}

/// One action of an action list.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// OFPAT_OUTPUT: output to a port (`output:N`, `IN_PORT`, `CONTROLLER:max_len`, `LOCAL`).
    Output { port: u32, max_len: u16 },
    /// OFPAT_GROUP: process the packet through a group.
    Group(u32),
    /// OFPAT_SET_FIELD: set a field to a value. An entry with a mask is encoded as
    /// NXAST_REG_LOAD2 (`set_field:VALUE/MASK->FIELD`), which is how OVS carries masked sets.
    SetField(MatchField),
    /// OFPAT_PUSH_VLAN with the given TPID.
    PushVlan(u16),
    /// OFPAT_POP_VLAN.
    PopVlan,
    /// OFPAT_DEC_NW_TTL.
    DecNwTtl,
    /// NXAST_RESUBMIT / NXAST_RESUBMIT_TABLE: `resubmit(port,table)`; port IN_PORT (0xfff8)
    /// means the current in_port; table None means the current table.
    Resubmit { in_port: u16, table: Option<u8> },
    /// NXAST_RESUBMIT (the original, table-less form): `resubmit:PORT`. Open vSwitch emits
    /// NXAST_RESUBMIT_TABLE ([`Action::Resubmit`]) for new flows; this keeps the old encoding.
    ResubmitLegacy { in_port: u16 },
    /// NXAST_REG_MOVE: `move:SRC->DST` (both slices have the same width).
    Move { src: FieldSlice, dst: FieldSlice },
    /// NXAST_REG_LOAD: `load:VALUE->DST`.
    Load { dst: FieldSlice, value: u64 },
    /// NXAST_OUTPUT_REG: `output:SRC` (output to the port held in a field).
    OutputReg { src: FieldSlice, max_len: u16 },
    /// NXAST_CT: `ct(...)`.
    Ct(Ct),
    /// NXAST_CT's nested `nat(...)` (NXAST_NAT).
    Nat(Nat),
    /// NXAST_NOTE: `note:XX.XX...` (bytes as given; the wire pads them).
    Note(Vec<u8>),
    /// NXAST_CONJUNCTION: `conjunction(id,clause/n_clauses)`; `clause` is 1-based in text.
    Conjunction { id: u32, clause: u8, n_clauses: u8 },
    /// NXAST_DEC_TTL: `dec_ttl`. Open vSwitch 3.1 accepts this encoding only in OpenFlow 1.0
    /// (OFPBAC_BAD_VENDOR_TYPE in 1.3); for OpenFlow 1.3 use [`Action::DecNwTtl`], which
    /// prints the same `dec_ttl`.
    DecTtl,
    /// NXAST_CONTROLLER / NXAST_CONTROLLER2: `controller(reason=..,userdata=..)`.
    /// NXAST_CONTROLLER2 is used when `extended` is set or any of userdata, pause and
    /// meter_id asks for it; its properties are written in Open vSwitch's order and only when
    /// not at their defaults (max_len 65535, id 0, reason action).
    Controller {
        max_len: u16,
        controller_id: u16,
        reason: u8,
        userdata: Vec<u8>,
        pause: bool,
        /// NXAC2PT_METER_ID (None: no meter, NX_CTLR_NO_METER).
        meter_id: Option<u32>,
        /// Encode as NXAST_CONTROLLER2 even when NXAST_CONTROLLER could carry it.
        extended: bool,
    },
    /// NXAST_OUTPUT_REG2 carrying a field with a plain NXM/OXM header (Open vSwitch writes
    /// NXAST_OUTPUT_REG for those, another controller may not): prints as `output:SRC`.
    OutputReg2 { src: FieldSlice, max_len: u16 },
    /// NXAST_DEC_TTL_CNT_IDS: `dec_ttl(id,...)`.
    DecTtlIds(Vec<u16>),
    /// OFPAT_SET_QUEUE: `set_queue:N`.
    SetQueue(u32),
    /// NXAST_POP_QUEUE: `pop_queue`.
    PopQueue,
    /// OFPAT_SET_NW_TTL: `mod_nw_ttl:N`.
    SetNwTtl(u8),
    /// OFPAT_SET_MPLS_TTL: `set_mpls_ttl(N)`.
    SetMplsTtl(u8),
    /// OFPAT_DEC_MPLS_TTL: `dec_mpls_ttl`.
    DecMplsTtl,
    /// OFPAT_PUSH_MPLS with the given ethertype: `push_mpls:0x8847`.
    PushMpls(u16),
    /// OFPAT_POP_MPLS with the ethertype that follows: `pop_mpls:0x0800`.
    PopMpls(u16),
    /// NXAST_FIN_TIMEOUT: `fin_timeout(idle_timeout=N,hard_timeout=N)`.
    FinTimeout { idle: u16, hard: u16 },
    /// NXAST_SAMPLE / SAMPLE2 / SAMPLE3: `sample(...)`.
    Sample(Sample),
    /// NXAST_CLONE: `clone(ACTIONS)`.
    Clone(Vec<Action>),
    /// NXAST_EXIT: `exit`.
    Exit,
    /// NXAST_CT_CLEAR: `ct_clear`.
    CtClear,
    /// NXAST_MULTIPATH: `multipath(...)`.
    Multipath(Multipath),
    /// NXAST_BUNDLE / NXAST_BUNDLE_LOAD: `bundle(...)`, `bundle_load(...)`.
    Bundle(Bundle),
    /// NXAST_CHECK_PKT_LARGER: `check_pkt_larger(LEN)->DST` (a one-bit destination).
    CheckPktLarger { pkt_len: u16, dst: FieldSlice },
    /// NXAST_LEARN: `learn(...)`.
    Learn(Learn),
    /// OFPAT_SET_VLAN_VID .. OFPAT_SET_TP_DST (OpenFlow 1.1, deprecated).
    Legacy(LegacySet),
    /// NXAST_SET_TUNNEL (32-bit) / NXAST_SET_TUNNEL64: `set_tunnel:ID`, `set_tunnel64:ID`.
    SetTunnel { tun_id: u64, wide: bool },
    /// NXAST_DECAP: `decap()` (packet_type 0xfffe, "use next protocol") or
    /// `decap(packet_type(ns=N,type=T))`.
    Decap { packet_type: u32 },
    /// Any other action, kept as its exact wire bytes (header included).
    Unknown(Vec<u8>),
}

impl Action {
    /// `output:PORT`.
    pub fn output(port: u32) -> Self {
        Action::Output { port, max_len: 0 }
    }
    /// `set_field:VALUE->FIELD` for a field given as a big-endian integer.
    pub fn set_field_u64(field: Field, value: u64) -> Self {
        let bytes = value.to_be_bytes();
        let n = field.len().min(8);
        Action::SetField(MatchField::exact(field, &bytes[8 - n..]))
    }
    /// `set_field:BYTES->FIELD`.
    pub fn set_field(field: Field, value: &[u8]) -> Self {
        Action::SetField(MatchField::exact(field, value))
    }
    /// `load:VALUE->REGn[]`.
    pub fn load_reg(n: u8, value: u32) -> Self {
        Action::Load {
            dst: FieldSlice::whole(Field::Reg(n & 15)),
            value: value as u64,
        }
    }
    /// `move:SRC->DST`.
    pub fn move_(src: FieldSlice, dst: FieldSlice) -> Self {
        Action::Move { src, dst }
    }
    /// `resubmit(,TABLE)`.
    pub fn resubmit_table(table: u8) -> Self {
        Action::Resubmit {
            in_port: 0xfff8,
            table: Some(table),
        }
    }
}

// ---- codec ----

use crate::error::ofp_error_type::BAD_ACTION;
use crate::wire::{Reader, Writer};
use crate::DecodeError;

/// OFPAT_* action types (OpenFlow 1.3.5 §7.2.5, `ofp_action_type`).
pub mod ofpat {
    /// Output to switch port.
    pub const OUTPUT: u16 = 0;
    /// Set MPLS TTL.
    pub const SET_MPLS_TTL: u16 = 15;
    /// Decrement MPLS TTL.
    pub const DEC_MPLS_TTL: u16 = 16;
    /// Push a new VLAN tag.
    pub const PUSH_VLAN: u16 = 17;
    /// Pop the outer VLAN tag.
    pub const POP_VLAN: u16 = 18;
    /// Push a new MPLS tag.
    pub const PUSH_MPLS: u16 = 19;
    /// Pop the outer MPLS tag.
    pub const POP_MPLS: u16 = 20;
    /// Set queue id when outputting to a port.
    pub const SET_QUEUE: u16 = 21;
    /// Apply group.
    pub const GROUP: u16 = 22;
    /// Set IP TTL.
    pub const SET_NW_TTL: u16 = 23;
    /// Decrement IP TTL.
    pub const DEC_NW_TTL: u16 = 24;
    /// Set a header field using OXM TLV format.
    pub const SET_FIELD: u16 = 25;
    /// Experimenter action.
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// NXAST_* Nicira action subtypes (nicira-ext.h, ofp-actions.c).
pub mod nxast {
    /// `resubmit:PORT` (no table).
    pub const RESUBMIT: u16 = 1;
    /// `set_tunnel:ID` (32 bits).
    pub const SET_TUNNEL: u16 = 2;
    /// `pop_queue`.
    pub const POP_QUEUE: u16 = 5;
    /// `set_tunnel64:ID`.
    pub const SET_TUNNEL64: u16 = 9;
    /// `move`.
    pub const REG_MOVE: u16 = 6;
    /// `load`.
    pub const REG_LOAD: u16 = 7;
    /// `note`.
    pub const NOTE: u16 = 8;
    /// `multipath(...)`.
    pub const MULTIPATH: u16 = 10;
    /// `bundle(...)`.
    pub const BUNDLE: u16 = 12;
    /// `bundle_load(...)`.
    pub const BUNDLE_LOAD: u16 = 13;
    /// `resubmit(port,table)`.
    pub const RESUBMIT_TABLE: u16 = 14;
    /// `output:SRC[]`.
    pub const OUTPUT_REG: u16 = 15;
    /// `exit`.
    pub const EXIT: u16 = 17;
    /// `learn(...)`.
    pub const LEARN: u16 = 16;
    /// `learn(...,limit=..,result_dst=..)`.
    pub const LEARN2: u16 = 45;
    /// `dec_ttl`.
    pub const DEC_TTL: u16 = 18;
    /// `fin_timeout(...)`.
    pub const FIN_TIMEOUT: u16 = 19;
    /// `controller(...)`.
    pub const CONTROLLER: u16 = 20;
    /// `dec_ttl(ids)`.
    pub const DEC_TTL_CNT_IDS: u16 = 21;
    /// `sample(...)`.
    pub const SAMPLE: u16 = 29;
    /// `output:SRC[]` with an experimenter-class source.
    pub const OUTPUT_REG2: u16 = 32;
    /// `set_field:V/M->F` (OXM TLV with mask).
    pub const REG_LOAD2: u16 = 33;
    /// `conjunction(id,k/n)`.
    pub const CONJUNCTION: u16 = 34;
    /// `ct(...)`.
    pub const CT: u16 = 35;
    /// `nat(...)` inside `ct`.
    pub const NAT: u16 = 36;
    /// `controller(...)` with properties (userdata, pause).
    pub const CONTROLLER2: u16 = 37;
    /// `sample(...,sampling_port=N)`.
    pub const SAMPLE2: u16 = 38;
    /// `sample(...,ingress|egress)`.
    pub const SAMPLE3: u16 = 41;
    /// `clone(...)`.
    pub const CLONE: u16 = 42;
    /// `ct_clear`.
    pub const CT_CLEAR: u16 = 43;
    /// `decap(...)`.
    pub const DECAP: u16 = 47;
    /// `check_pkt_larger(N)->DST`.
    pub const CHECK_PKT_LARGER: u16 = 49;
}

/// OFPBAC_* codes (OpenFlow 1.3.5 §7.4.4, `ofp_bad_action_code`).
pub mod bad_action {
    /// Unknown or unsupported action type.
    pub const BAD_TYPE: u16 = 0;
    /// Length problem in actions.
    pub const BAD_LEN: u16 = 1;
    /// Bad action argument.
    pub const BAD_ARGUMENT: u16 = 5;
    /// Too many actions (here: `ct` nested too deeply).
    pub const TOO_MANY: u16 = 7;
}

/// NX_CT_RECIRC_NONE: `ct` without `table=`.
const CT_RECIRC_NONE: u8 = 0xff;
/// Deepest `ct(exec(ct(...)))` nesting accepted (OVS allows none; a bound keeps recursion safe).
const MAX_NESTING: usize = 4;

fn act_err(code: u16, detail: impl Into<String>) -> DecodeError {
    DecodeError::Rejected {
        context: "action",
        err_type: BAD_ACTION,
        code,
        detail: detail.into(),
    }
}

/// Pack a slice's offset and width as NXM `ofs_nbits` (`ofs << 6 | (n_bits - 1)`).
fn ofs_nbits(ofs: u16, n_bits: u16) -> u16 {
    (ofs << 6) | (n_bits.saturating_sub(1) & 0x3f)
}

fn slice_from_ofs_nbits(header: OxmHeader, v: u16) -> FieldSlice {
    FieldSlice {
        header,
        ofs: v >> 6,
        n_bits: (v & 0x3f) + 1,
    }
}

/// Check that a slice lies inside its field (when the field is known).
fn check_slice(sf: &FieldSlice, what: &str) -> Result<(), DecodeError> {
    if sf.n_bits == 0 {
        return Err(act_err(
            bad_action::BAD_ARGUMENT,
            format!("{what}: zero-width slice"),
        ));
    }
    let width = match sf.header.known() {
        Some(f) => Some((f.bits() as u32, f.name().to_string())),
        None => crate::oxm::wide_register(&sf.header).map(|(n, len)| (len as u32 * 8, n)),
    };
    if let Some((bits, name)) = width {
        if sf.ofs as u32 + sf.n_bits as u32 > bits {
            return Err(act_err(
                bad_action::BAD_ARGUMENT,
                format!(
                    "{what}: bits {}..{} outside the {}-bit field {}",
                    sf.ofs,
                    sf.ofs as u32 + sf.n_bits as u32,
                    bits,
                    name
                ),
            ));
        }
    }
    Ok(())
}

/// Read an NXM/OXM header as move/output_reg carry it (4 bytes, 8 for the experimenter class).
fn pull_nx_header(r: &mut Reader<'_>) -> Result<OxmHeader, DecodeError> {
    let (h, _mask, _len) =
        OxmHeader::decode(r).map_err(|e| act_err(bad_action::BAD_LEN, e.to_string()))?;
    Ok(h)
}

/// Write a bare field header (hasmask 0, length = the field's width when known).
fn put_nx_header(h: &OxmHeader, w: &mut Vec<u8>) {
    let len = match h.known() {
        Some(f) => f.len(),
        None => crate::oxm::wide_register(h).map_or(0, |(_, len)| len),
    };
    h.encode(false, len, w);
}

/// Write the 32-bit form of a field header (load, multipath, bundle_load).
fn put_header32(h: &OxmHeader, w: &mut Vec<u8>) {
    put_nx_header(h, w);
    w.truncate(w.len() - (nx_header_len(h) - 4));
}

fn nx_header_len(h: &OxmHeader) -> usize {
    h.wire_len()
}

/// Decode an action list that fills the whole reader.
///
/// Every action starts with `ofp_action_header` (OpenFlow 1.3.5 §7.2.5):
/// ```text
/// | type:16 | len:16 (multiple of 8, >= 8, header included) | body ... |
/// ```
/// Known actions whose bytes are not the canonical encoding of their decoded value (nonzero
/// padding, an unusual but legal variant) are kept as [`Action::Unknown`] so that re-encoding
/// always reproduces the input exactly.
pub fn decode_actions(r: &mut Reader<'_>) -> Result<Vec<Action>, DecodeError> {
    decode_actions_nested(r, 0)
}

fn decode_actions_nested(r: &mut Reader<'_>, depth: usize) -> Result<Vec<Action>, DecodeError> {
    let mut out = Vec::new();
    // One scratch buffer for the canonical-encoding check of every action of the list.
    let mut again = Vec::new();
    while !r.is_empty() {
        let at = r.position();
        let head = r
            .peek(4, "action header")
            .map_err(|e| act_err(bad_action::BAD_LEN, e.to_string()))?;
        let len = u16::from_be_bytes([head[2], head[3]]) as usize;
        if len < 8 || !len.is_multiple_of(8) || len > r.remaining() {
            return Err(act_err(
                bad_action::BAD_LEN,
                format!(
                    "action at offset {at}: length {len} (must be a multiple of 8, >= 8, <= {})",
                    r.remaining()
                ),
            ));
        }
        let raw = r.bytes(len, "action")?;
        let action = decode_one(raw, depth)?;
        let canonical = match &action {
            Action::Unknown(_) => true,
            a => {
                again.clear();
                encode_one(a, &mut again);
                again == raw
            }
        };
        out.push(if canonical {
            action
        } else {
            Action::Unknown(raw.to_vec())
        });
    }
    Ok(out)
}

fn bad_len(what: &str, len: usize) -> DecodeError {
    act_err(bad_action::BAD_LEN, format!("{what}: bad length {len}"))
}

fn decode_one(raw: &[u8], depth: usize) -> Result<Action, DecodeError> {
    let mut r = Reader::new(raw);
    let ty = r.u16("action type")?;
    let len = r.u16("action len")? as usize;
    let exact = |want: usize, what: &str| {
        if len == want {
            Ok(())
        } else {
            Err(bad_len(what, len))
        }
    };
    Ok(match ty {
        // ofp_action_output (§7.2.5.1): port:32 max_len:16 pad[6]; 16 bytes.
        ofpat::OUTPUT => {
            exact(16, "output")?;
            let port = r.u32("output port")?;
            let max_len = r.u16("output max_len")?;
            Action::Output { port, max_len }
        }
        // ofp_action_group (§7.2.5.5): group_id:32; 8 bytes.
        ofpat::GROUP => {
            exact(8, "group")?;
            Action::Group(r.u32("group id")?)
        }
        // ofp_action_push (§7.2.5.8): ethertype:16 pad[2]; 8 bytes.
        ofpat::PUSH_VLAN => {
            exact(8, "push_vlan")?;
            Action::PushVlan(r.u16("push_vlan ethertype")?)
        }
        // ofp_action_generic (§7.2.5.10): pad[4]; 8 bytes.
        ofpat::POP_VLAN => {
            exact(8, "pop_vlan")?;
            Action::PopVlan
        }
        ofpat::DEC_NW_TTL => {
            exact(8, "dec_nw_ttl")?;
            Action::DecNwTtl
        }
        // The OpenFlow 1.1 set actions (openflow-1.1.h): 8 bytes, 16 for the MAC ones.
        1..=10 => decode_legacy(ty, len, &mut r)?,
        // ofp_action_set_queue (§7.2.5.3): queue_id:32; 8 bytes.
        ofpat::SET_QUEUE => {
            exact(8, "set_queue")?;
            Action::SetQueue(r.u32("set_queue queue_id")?)
        }
        // ofp_action_nw_ttl / ofp_action_mpls_ttl (§7.2.5.4): ttl:8 pad[3]; 8 bytes.
        ofpat::SET_NW_TTL => {
            exact(8, "set_nw_ttl")?;
            Action::SetNwTtl(r.u8("set_nw_ttl ttl")?)
        }
        ofpat::SET_MPLS_TTL => {
            exact(8, "set_mpls_ttl")?;
            Action::SetMplsTtl(r.u8("set_mpls_ttl ttl")?)
        }
        ofpat::DEC_MPLS_TTL => {
            exact(8, "dec_mpls_ttl")?;
            Action::DecMplsTtl
        }
        // ofp_action_push / ofp_action_pop_mpls (§7.2.5.8, §7.2.5.9): ethertype:16 pad[2].
        ofpat::PUSH_MPLS => {
            exact(8, "push_mpls")?;
            let ethertype = r.u16("push_mpls ethertype")?;
            if ethertype != 0x8847 && ethertype != 0x8848 {
                return Err(act_err(
                    bad_action::BAD_ARGUMENT,
                    format!("push_mpls: ethertype {ethertype:#06x} is not MPLS"),
                ));
            }
            Action::PushMpls(ethertype)
        }
        ofpat::POP_MPLS => {
            exact(8, "pop_mpls")?;
            Action::PopMpls(r.u16("pop_mpls ethertype")?)
        }
        // ofp_action_set_field (§7.2.5.7): one OXM TLV (no mask) then zero pad to 8.
        ofpat::SET_FIELD => {
            let mf = MatchField::decode(&mut r)?;
            if mf.mask.is_some() {
                return Err(act_err(
                    bad_action::BAD_ARGUMENT,
                    "set_field: OFPAT_SET_FIELD must not carry a mask in OpenFlow 1.3",
                ));
            }
            Action::SetField(mf)
        }
        ofpat::EXPERIMENTER => {
            if len < 16 {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let experimenter = r.u32("experimenter id")?;
            if experimenter != crate::oxm::NX_EXPERIMENTER {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let subtype = r.u16("nicira subtype")?;
            decode_nicira(subtype, len, &mut r, raw, depth)?
        }
        _ => Action::Unknown(raw.to_vec()),
    })
}

fn decode_nicira(
    subtype: u16,
    len: usize,
    r: &mut Reader<'_>,
    raw: &[u8],
    depth: usize,
) -> Result<Action, DecodeError> {
    let exact = |want: usize, what: &str| {
        if len == want {
            Ok(())
        } else {
            Err(bad_len(what, len))
        }
    };
    // Every Nicira action: type:16=0xffff len:16 vendor:32=0x2320 subtype:16, then the body
    // (nicira-ext.h / ofp-actions.c `nx_action_*`).
    Ok(match subtype {
        // nx_action_resubmit: in_port:16 table:8 pad[3]; 16 bytes.
        nxast::RESUBMIT => {
            exact(16, "resubmit")?;
            Action::ResubmitLegacy {
                in_port: r.u16("resubmit in_port")?,
            }
        }
        nxast::RESUBMIT_TABLE => {
            exact(16, "resubmit_table")?;
            let in_port = r.u16("resubmit in_port")?;
            let table = r.u8("resubmit table")?;
            Action::Resubmit {
                in_port,
                table: (table != 0xff).then_some(table),
            }
        }
        // nx_action_reg_move: n_bits:16 src_ofs:16 dst_ofs:16 src:hdr dst:hdr, zero pad.
        nxast::REG_MOVE => {
            if len < 24 {
                return Err(bad_len("move", len));
            }
            let n_bits = r.u16("move n_bits")?;
            let src_ofs = r.u16("move src_ofs")?;
            let dst_ofs = r.u16("move dst_ofs")?;
            let src = pull_nx_header(r)?;
            let dst = pull_nx_header(r)?;
            let src = FieldSlice {
                header: src,
                ofs: src_ofs,
                n_bits,
            };
            let dst = FieldSlice {
                header: dst,
                ofs: dst_ofs,
                n_bits,
            };
            check_slice(&src, "move source")?;
            check_slice(&dst, "move destination")?;
            Action::Move { src, dst }
        }
        // nx_action_reg_load: ofs_nbits:16 dst:32 value:64; 24 bytes.
        nxast::REG_LOAD => {
            exact(24, "load")?;
            let on = r.u16("load ofs_nbits")?;
            let h = r.u32("load dst")?;
            let value = r.u64("load value")?;
            let header = OxmHeader::new((h >> 16) as u16, ((h >> 9) & 0x7f) as u8);
            let dst = slice_from_ofs_nbits(header, on);
            check_slice(&dst, "load destination")?;
            if dst.n_bits < 64 && value >> dst.n_bits != 0 {
                return Err(act_err(
                    bad_action::BAD_ARGUMENT,
                    format!("load: value {value:#x} does not fit in {} bits", dst.n_bits),
                ));
            }
            Action::Load { dst, value }
        }
        // nx_action_reg_load2: one OXM TLV (mask allowed), zero pad to 8.
        nxast::REG_LOAD2 => Action::SetField(MatchField::decode(r)?),
        // nx_action_note: note[len - 10].
        nxast::NOTE => Action::Note(r.rest().to_vec()),
        // nx_action_output_reg: ofs_nbits:16 src:32 max_len:16 zero[6]; 24 bytes.
        nxast::OUTPUT_REG => {
            exact(24, "output_reg")?;
            let on = r.u16("output_reg ofs_nbits")?;
            let h = r.u32("output_reg src")?;
            let max_len = r.u16("output_reg max_len")?;
            let header = OxmHeader::new((h >> 16) as u16, ((h >> 9) & 0x7f) as u8);
            let src = slice_from_ofs_nbits(header, on);
            check_slice(&src, "output_reg source")?;
            Action::OutputReg { src, max_len }
        }
        // nx_action_output_reg2: ofs_nbits:16 max_len:16 src:hdr, zero pad; >= 24 bytes.
        nxast::OUTPUT_REG2 => {
            if len < 24 {
                return Err(bad_len("output_reg2", len));
            }
            let on = r.u16("output_reg2 ofs_nbits")?;
            let max_len = r.u16("output_reg2 max_len")?;
            let header = pull_nx_header(r)?;
            let src = slice_from_ofs_nbits(header, on);
            check_slice(&src, "output_reg2 source")?;
            if header.experimenter.is_some() {
                Action::OutputReg { src, max_len }
            } else {
                Action::OutputReg2 { src, max_len }
            }
        }
        // nx_action_header: pad[6]; 16 bytes.
        nxast::DEC_TTL => {
            exact(16, "dec_ttl")?;
            Action::DecTtl
        }
        // nx_action_controller: max_len:16 controller_id:16 reason:8 zero:8; 16 bytes.
        nxast::CONTROLLER => {
            exact(16, "controller")?;
            let max_len = r.u16("controller max_len")?;
            let controller_id = r.u16("controller id")?;
            let reason = r.u8("controller reason")?;
            Action::Controller {
                max_len,
                controller_id,
                reason,
                userdata: Vec::new(),
                pause: false,
                meter_id: None,
                extended: false,
            }
        }
        // nx_action_controller2: pad[6], then properties (type:16 len:16 body, padded to 8).
        nxast::CONTROLLER2 => decode_controller2(r)?,
        // nx_action_conjunction: clause:8 n_clauses:8 id:32; 16 bytes.
        nxast::CONJUNCTION => {
            exact(16, "conjunction")?;
            let clause = r.u8("conjunction clause")?;
            let n_clauses = r.u8("conjunction n_clauses")?;
            let id = r.u32("conjunction id")?;
            if n_clauses < 2 || clause >= n_clauses {
                return Err(act_err(
                    bad_action::BAD_ARGUMENT,
                    format!("conjunction: clause {clause} of {n_clauses}"),
                ));
            }
            Action::Conjunction {
                id,
                clause,
                n_clauses,
            }
        }
        // nx_action_conntrack: flags:16 zone_src:32 zone_ofs_nbits|zone_imm:16 recirc_table:8
        // pad[3] alg:16, then nested actions; >= 24 bytes.
        nxast::CT => {
            if len < 24 {
                return Err(bad_len("ct", len));
            }
            if depth >= MAX_NESTING {
                return Err(act_err(bad_action::TOO_MANY, "ct nested too deeply"));
            }
            let flags = r.u16("ct flags")?;
            let zone_src = r.u32("ct zone_src")?;
            let zone = r.u16("ct zone")?;
            let table = r.u8("ct recirc_table")?;
            r.skip(3, "ct pad")?;
            let alg = r.u16("ct alg")?;
            let (zone_src, zone_imm) = if zone_src == 0 {
                (None, zone)
            } else {
                let h = OxmHeader::new((zone_src >> 16) as u16, ((zone_src >> 9) & 0x7f) as u8);
                let sf = slice_from_ofs_nbits(h, zone);
                check_slice(&sf, "ct zone")?;
                (Some(sf), 0)
            };
            let actions = decode_actions_nested(r, depth + 1)?;
            Action::Ct(Ct {
                flags,
                zone_src,
                zone_imm,
                recirc_table: (table != CT_RECIRC_NONE).then_some(table),
                alg,
                actions,
            })
        }
        // nx_action_nat: pad[2] flags:16 range_present:16, then the present range fields in
        // order ipv4_min:32 ipv4_max:32 ipv6_min:128 ipv6_max:128 proto_min:16 proto_max:16,
        // zero pad to 8.
        nxast::NAT => decode_nat(r, raw)?,
        // nx_action_cnt_ids: n_controllers:16 zeros[4], then n_controllers ids of 16 bits,
        // zero pad to 8.
        nxast::DEC_TTL_CNT_IDS => {
            let n = r.u16("dec_ttl n_controllers")? as usize;
            if r.bytes(4, "dec_ttl zeros")? != [0u8; 4] {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            if n * 2 > r.remaining() {
                return Err(bad_len("dec_ttl(ids)", len));
            }
            let ids = (0..n)
                .map(|_| r.u16("dec_ttl id"))
                .collect::<Result<Vec<_>, _>>()?;
            Action::DecTtlIds(ids)
        }
        nxast::LEARN | nxast::LEARN2 => decode_learn(subtype == nxast::LEARN2, len, r, raw)?,
        // nx_action_set_tunnel: pad[2] tun_id:32; 16 bytes.
        nxast::SET_TUNNEL => {
            exact(16, "set_tunnel")?;
            r.skip(2, "set_tunnel pad")?;
            Action::SetTunnel {
                tun_id: r.u32("set_tunnel tun_id")? as u64,
                wide: false,
            }
        }
        // nx_action_set_tunnel64: pad[6] tun_id:64; 24 bytes.
        nxast::SET_TUNNEL64 => {
            exact(24, "set_tunnel64")?;
            r.skip(6, "set_tunnel64 pad")?;
            Action::SetTunnel {
                tun_id: r.u64("set_tunnel64 tun_id")?,
                wide: true,
            }
        }
        // nx_action_header: pad[6]; 16 bytes.
        nxast::POP_QUEUE => {
            exact(16, "pop_queue")?;
            Action::PopQueue
        }
        nxast::EXIT => {
            exact(16, "exit")?;
            Action::Exit
        }
        nxast::CT_CLEAR => {
            exact(16, "ct_clear")?;
            Action::CtClear
        }
        // nx_action_fin_timeout: idle:16 hard:16 pad[2]; 16 bytes.
        nxast::FIN_TIMEOUT => {
            exact(16, "fin_timeout")?;
            Action::FinTimeout {
                idle: r.u16("fin_timeout idle")?,
                hard: r.u16("fin_timeout hard")?,
            }
        }
        // nx_action_sample: probability:16 collector_set_id:32 obs_domain_id:32
        // obs_point_id:32; 24 bytes. nx_action_sample2 adds sampling_port:16 direction:8
        // zeros[5]; 32 bytes (NXAST_SAMPLE2 ignores the direction byte, NXAST_SAMPLE3 reads it).
        nxast::SAMPLE | nxast::SAMPLE2 | nxast::SAMPLE3 => {
            let version = match subtype {
                nxast::SAMPLE => 1,
                nxast::SAMPLE2 => 2,
                _ => 3,
            };
            exact(if version == 1 { 24 } else { 32 }, "sample")?;
            let probability = r.u16("sample probability")?;
            let collector_set_id = r.u32("sample collector_set_id")?;
            let obs_domain_id = r.u32("sample obs_domain_id")?;
            let obs_point_id = r.u32("sample obs_point_id")?;
            let (sampling_port, direction) = if version == 1 {
                (0xffff, 0)
            } else {
                let port = r.u16("sample sampling_port")?;
                let dir = r.u8("sample direction")?;
                (port, if version == 3 { dir } else { 0 })
            };
            if probability == 0 {
                return Err(act_err(bad_action::BAD_ARGUMENT, "sample: probability 0"));
            }
            if direction > 2 {
                return Err(act_err(
                    bad_action::BAD_ARGUMENT,
                    format!("sample: direction {direction}"),
                ));
            }
            Action::Sample(Sample {
                probability,
                collector_set_id,
                obs_domain_id,
                obs_point_id,
                sampling_port,
                direction,
                version,
            })
        }
        // ext_action_header (pad[6]), then the nested actions.
        nxast::CLONE => {
            if depth >= MAX_NESTING {
                return Err(act_err(bad_action::TOO_MANY, "clone nested too deeply"));
            }
            r.skip(6, "clone pad")?;
            let mut nested = Reader::new(r.rest());
            Action::Clone(decode_actions_nested(&mut nested, depth + 1)?)
        }
        // nx_action_multipath: fields:16 basis:16 pad:16 algorithm:16 max_link:16 arg:32
        // pad:16 ofs_nbits:16 dst:32; 32 bytes.
        nxast::MULTIPATH => {
            exact(32, "multipath")?;
            let fields = r.u16("multipath fields")?;
            let basis = r.u16("multipath basis")?;
            r.skip(2, "multipath pad")?;
            let algorithm = r.u16("multipath algorithm")?;
            let max_link = r.u16("multipath max_link")?;
            let arg = r.u32("multipath arg")?;
            r.skip(2, "multipath pad")?;
            let on = r.u16("multipath ofs_nbits")?;
            let h = r.u32("multipath dst")?;
            if fields > 6 || algorithm > 3 {
                // Open vSwitch refuses these; keep the bytes.
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let dst = slice_from_ofs_nbits(header32(h), on);
            check_slice(&dst, "multipath destination")?;
            Action::Multipath(Multipath {
                fields,
                basis,
                algorithm,
                max_link,
                arg,
                dst,
            })
        }
        // nx_action_bundle: algorithm:16 fields:16 basis:16 slave_type:32 n_slaves:16
        // ofs_nbits:16 dst:32 zero[4], then n_slaves ports of 16 bits, zero pad to 8.
        nxast::BUNDLE | nxast::BUNDLE_LOAD => {
            if len < 32 {
                return Err(bad_len("bundle", len));
            }
            let algorithm = r.u16("bundle algorithm")?;
            let fields = r.u16("bundle fields")?;
            let basis = r.u16("bundle basis")?;
            let member_type = r.u32("bundle slave_type")?;
            let n = r.u16("bundle n_slaves")? as usize;
            let on = r.u16("bundle ofs_nbits")?;
            let h = r.u32("bundle dst")?;
            r.skip(4, "bundle zero")?;
            if n * 2 > r.remaining() {
                return Err(bad_len("bundle", len));
            }
            let members = (0..n)
                .map(|_| r.u16("bundle member"))
                .collect::<Result<Vec<_>, _>>()?;
            if fields > 6 || algorithm > 1 || member_type != NXM_OF_IN_PORT_HEADER {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let dst = if subtype == nxast::BUNDLE_LOAD {
                let sf = slice_from_ofs_nbits(header32(h), on);
                check_slice(&sf, "bundle_load destination")?;
                Some(sf)
            } else {
                None
            };
            Action::Bundle(Bundle {
                algorithm,
                fields,
                basis,
                dst,
                members,
            })
        }
        // nx_action_check_pkt_larger: pkt_len:16 offset:16, then the one-bit destination's
        // field header, zero pad to 8.
        nxast::CHECK_PKT_LARGER => {
            let pkt_len = r.u16("check_pkt_larger pkt_len")?;
            let ofs = r.u16("check_pkt_larger offset")?;
            let header = pull_nx_header(r)?;
            let dst = FieldSlice {
                header,
                ofs,
                n_bits: 1,
            };
            check_slice(&dst, "check_pkt_larger destination")?;
            Action::CheckPktLarger { pkt_len, dst }
        }
        // nx_action_decap: pad:16 new_pkt_type:32; 16 bytes.
        nxast::DECAP => {
            exact(16, "decap")?;
            r.skip(2, "decap pad")?;
            Action::Decap {
                packet_type: r.u32("decap new_pkt_type")?,
            }
        }
        _ => Action::Unknown(raw.to_vec()),
    })
}

/// nx_action_learn: idle_timeout:16 hard_timeout:16 priority:16 cookie:64 flags:16
/// table_id:8 pad:8 fin_idle_timeout:16 fin_hard_timeout:16 (32 bytes with the header), then
/// specs, each `header:16` (src_type bit 13, dst_type bits 11-12, n_bits bits 0-9), the source
/// (field header:32 ofs:16, or the immediate in 16-bit units) and the destination (field
/// header:32 ofs:16 for match and load, nothing for output), then zeros to the action's end.
/// Specs naming a field flowmesh does not know keep the whole action as bytes.
fn decode_learn(
    learn2: bool,
    len: usize,
    r: &mut Reader<'_>,
    raw: &[u8],
) -> Result<Action, DecodeError> {
    if len < if learn2 { 40 } else { 32 } {
        return Err(bad_len("learn", len));
    }
    let bad = |what: String| Err(act_err(bad_action::BAD_ARGUMENT, format!("learn: {what}")));
    let idle_timeout = r.u16("learn idle_timeout")?;
    let hard_timeout = r.u16("learn hard_timeout")?;
    let priority = r.u16("learn priority")?;
    let cookie = r.u64("learn cookie")?;
    let flags = r.u16("learn flags")?;
    let table_id = r.u8("learn table_id")?;
    r.skip(1, "learn pad")?;
    let fin_idle_timeout = r.u16("learn fin_idle_timeout")?;
    let fin_hard_timeout = r.u16("learn fin_hard_timeout")?;
    // NX_LEARN_F_WRITE_RESULT (4) exists only in NXAST_LEARN2.
    if flags & !(if learn2 { 7 } else { 3 }) != 0 {
        return bad(format!("flags {flags:#x}"));
    }
    if table_id == 0xff {
        return bad("table 255".into());
    }
    let known = |h: &OxmHeader| h.known().is_some() || crate::oxm::wide_register(h).is_some();
    // nx_action_learn2: limit:32 result_dst_ofs:16 pad[2], then the result field's header
    // when NX_LEARN_F_WRITE_RESULT is set.
    let (mut limit, mut result_dst) = (0, None);
    if learn2 {
        limit = r.u32("learn2 limit")?;
        let ofs = r.u16("learn2 result_dst_ofs")?;
        r.skip(2, "learn2 pad")?;
        if flags & 4 != 0 {
            let h = header32(r.u32("learn2 result_dst")?);
            if !known(&h) {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let sf = FieldSlice {
                header: h,
                ofs,
                n_bits: 1,
            };
            check_slice(&sf, "learn result_dst")?;
            result_dst = Some(sf);
        }
    }
    let mut specs = Vec::new();
    while r.remaining() >= 2 {
        let header = r.u16("learn spec header")?;
        if header == 0 {
            break;
        }
        let n_bits = header & 0x3ff;
        let src_imm = header & 0x2000 != 0;
        let dst_type = (header >> 11) & 3;
        if dst_type == 3 || (dst_type == 2 && src_imm) || header & 0xc000 != 0 || n_bits == 0 {
            return bad(format!("spec header {header:#06x}"));
        }
        let src = if src_imm {
            let n = (n_bits as usize).div_ceil(16) * 2;
            LearnSrc::Immediate {
                n_bits,
                value: r.bytes(n, "learn immediate")?.to_vec(),
            }
        } else {
            let h = header32(r.u32("learn src")?);
            let ofs = r.u16("learn src ofs")?;
            if !known(&h) {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let sf = FieldSlice {
                header: h,
                ofs,
                n_bits,
            };
            check_slice(&sf, "learn source")?;
            LearnSrc::Field(sf)
        };
        let dst = if dst_type == 2 {
            LearnDst::Output
        } else {
            let h = header32(r.u32("learn dst")?);
            let ofs = r.u16("learn dst ofs")?;
            if !known(&h) {
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let sf = FieldSlice {
                header: h,
                ofs,
                n_bits,
            };
            check_slice(&sf, "learn destination")?;
            if dst_type == 0 {
                LearnDst::Match(sf)
            } else {
                LearnDst::Load(sf)
            }
        };
        specs.push(LearnSpec { src, dst });
    }
    if r.rest().iter().any(|&b| b != 0) {
        return bad("nonzero bytes after the last spec".into());
    }
    Ok(Action::Learn(Learn {
        idle_timeout,
        hard_timeout,
        priority,
        cookie,
        flags,
        table_id,
        fin_idle_timeout,
        fin_hard_timeout,
        limit,
        result_dst,
        learn2,
        specs,
    }))
}

/// The OpenFlow 1.1 set actions, with Open vSwitch's argument checks (OFPBAC_BAD_ARGUMENT for
/// bits outside the field).
fn decode_legacy(ty: u16, len: usize, r: &mut Reader<'_>) -> Result<Action, DecodeError> {
    let want = if ty == 3 || ty == 4 { 16 } else { 8 };
    if len != want {
        return Err(bad_len("set action", len));
    }
    let check = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(act_err(bad_action::BAD_ARGUMENT, what.to_string()))
        }
    };
    let mut mac = || -> Result<[u8; 6], DecodeError> {
        let mut m = [0u8; 6];
        m.copy_from_slice(r.bytes(6, "set_dl mac")?);
        Ok(m)
    };
    let set = match ty {
        1 => {
            let v = r.u16("set_vlan_vid")?;
            check(v <= 0xfff, "set_vlan_vid: more than 12 bits")?;
            LegacySet::VlanVid(v)
        }
        2 => {
            let v = r.u8("set_vlan_pcp")?;
            check(v <= 7, "set_vlan_pcp: more than 3 bits")?;
            LegacySet::VlanPcp(v)
        }
        3 => LegacySet::DlSrc(mac()?),
        4 => LegacySet::DlDst(mac()?),
        5 => LegacySet::NwSrc(r.u32("set_nw_src")?.into()),
        6 => LegacySet::NwDst(r.u32("set_nw_dst")?.into()),
        7 => {
            let v = r.u8("set_nw_tos")?;
            check(v & 0x03 == 0, "set_nw_tos: ECN bits set")?;
            LegacySet::NwTos(v)
        }
        8 => {
            let v = r.u8("set_nw_ecn")?;
            check(v <= 3, "set_nw_ecn: more than 2 bits")?;
            LegacySet::NwEcn(v)
        }
        9 => LegacySet::TpSrc(r.u16("set_tp_src")?),
        _ => LegacySet::TpDst(r.u16("set_tp_dst")?),
    };
    Ok(Action::Legacy(set))
}

/// The NXM header of `in_port` (NXM_OF_IN_PORT), the only member type of `bundle`.
const NXM_OF_IN_PORT_HEADER: u32 = 0x0000_0002;

/// A 32-bit NXM header as load/multipath/bundle carry it (class, field; hasmask and length
/// are implied by the field).
fn header32(h: u32) -> OxmHeader {
    OxmHeader::new((h >> 16) as u16, ((h >> 9) & 0x7f) as u8)
}

/// nx_action_nat: pad[2] flags:16 range_present:16, then the present range fields in order
/// ipv4_min:32 ipv4_max:32 ipv6_min:128 ipv6_max:128 proto_min:16 proto_max:16, zero pad to 8.
/// As in Open vSwitch, a maximum without its minimum is refused.
fn decode_nat(r: &mut Reader<'_>, raw: &[u8]) -> Result<Action, DecodeError> {
    use nat_range::*;
    r.skip(2, "nat pad")?;
    let flags = r.u16("nat flags")?;
    let present = r.u16("nat range_present")?;
    let v4 = present & (IPV4_MIN | IPV4_MAX) != 0;
    let v6 = present & (IPV6_MIN | IPV6_MAX) != 0;
    if present & !0x3f != 0 {
        // Unknown range bits: not a `nat` Open vSwitch writes.
        return Ok(Action::Unknown(raw.to_vec()));
    }
    let bad = |what: &str| Err(act_err(bad_action::BAD_ARGUMENT, format!("nat: {what}")));
    // decode_NXAST_RAW_NAT's checks, in its order.
    if flags & !0x1f != 0
        || (flags & nat_flags::SRC != 0 && flags & nat_flags::DST != 0)
        || (flags & nat_flags::PROTO_HASH != 0 && flags & nat_flags::PROTO_RANDOM != 0)
    {
        return bad(&format!("flags {flags:#x}"));
    }
    if present & IPV4_MIN != 0 && v6 {
        return bad("both IPv4 and IPv6 ranges");
    }
    let need = |bit: u16, what: &str| {
        if present & bit == 0 {
            Err(act_err(
                bad_action::BAD_ARGUMENT,
                format!("nat: {what} maximum without a minimum"),
            ))
        } else {
            Ok(())
        }
    };
    let mut addr = None;
    if v4 {
        need(IPV4_MIN, "IPv4")?;
        let min = r.u32("nat ipv4 min")?;
        let max = (present & IPV4_MAX != 0)
            .then(|| r.u32("nat ipv4 max"))
            .transpose()?;
        if min == 0 || max.is_some_and(|m| m < min) {
            return bad("IPv4 range");
        }
        addr = Some(NatAddr::V4(min.into(), max.map(Into::into)));
    }
    if v6 {
        need(IPV6_MIN, "IPv6")?;
        let mut ip6 = |what| -> Result<std::net::Ipv6Addr, DecodeError> {
            let b = r.bytes(16, what)?;
            let mut o = [0u8; 16];
            o.copy_from_slice(b);
            Ok(o.into())
        };
        let min = ip6("nat ipv6 min")?;
        let max = if present & IPV6_MAX != 0 {
            Some(ip6("nat ipv6 max")?)
        } else {
            None
        };
        if min.is_unspecified() || max.is_some_and(|m| m < min) {
            return bad("IPv6 range");
        }
        addr = Some(NatAddr::V6(min, max));
    }
    let mut ports = None;
    if present & (PROTO_MIN | PROTO_MAX) != 0 {
        need(PROTO_MIN, "port")?;
        if addr.is_none() {
            return bad("port range without an address range");
        }
        let min = r.u16("nat proto min")?;
        let max = (present & PROTO_MAX != 0)
            .then(|| r.u16("nat proto max"))
            .transpose()?;
        if min == 0 || max.is_some_and(|m| m < min) {
            return bad("port range");
        }
        ports = Some((min, max));
    }
    Ok(Action::Nat(Nat { flags, addr, ports }))
}

/// NXAC2PT_* property types of NXAST_CONTROLLER2.
mod nxac2pt {
    pub const MAX_LEN: u16 = 0;
    pub const CONTROLLER_ID: u16 = 1;
    pub const REASON: u16 = 2;
    pub const USERDATA: u16 = 3;
    pub const PAUSE: u16 = 4;
    pub const METER_ID: u16 = 5;
}

/// OFPR_ACTION: the default packet-in reason of a controller action.
const OFPR_ACTION: u8 = 1;

fn decode_controller2(r: &mut Reader<'_>) -> Result<Action, DecodeError> {
    r.skip(6, "controller2 pad")?;
    let (mut max_len, mut controller_id, mut reason) = (u16::MAX, 0u16, OFPR_ACTION);
    let (mut userdata, mut pause, mut meter_id) = (Vec::new(), false, None);
    while !r.is_empty() {
        let ty = r.u16("controller2 property type")?;
        let plen = r.u16("controller2 property length")? as usize;
        if plen < 4 {
            return Err(bad_len("controller2 property", plen));
        }
        let mut body = r
            .sub(plen - 4, "controller2 property")
            .map_err(|e| act_err(bad_action::BAD_LEN, e.to_string()))?;
        r.skip((8 - plen % 8) % 8, "controller2 property padding")
            .map_err(|e| act_err(bad_action::BAD_LEN, e.to_string()))?;
        match ty {
            nxac2pt::MAX_LEN => max_len = body.u16("max_len")?,
            nxac2pt::CONTROLLER_ID => controller_id = body.u16("controller_id")?,
            nxac2pt::REASON => reason = body.u8("reason")?,
            nxac2pt::USERDATA => userdata = body.rest().to_vec(),
            nxac2pt::PAUSE => pause = true,
            nxac2pt::METER_ID => meter_id = Some(body.u32("meter_id")?),
            _ => {
                return Err(act_err(
                    bad_action::BAD_ARGUMENT,
                    format!("controller2: unsupported property {ty}"),
                ))
            }
        }
    }
    Ok(Action::Controller {
        max_len,
        controller_id,
        reason,
        userdata,
        pause,
        meter_id,
        extended: true,
    })
}

/// Encode an action list.
pub fn encode_actions(actions: &[Action], w: &mut Vec<u8>) {
    for a in actions {
        encode_one(a, w);
    }
}

/// Start a Nicira action: returns the offset of its header (for the length patch).
fn nx_start(w: &mut Vec<u8>, subtype: u16) -> usize {
    let start = w.len();
    w.put_u16(ofpat::EXPERIMENTER);
    w.put_u16(0);
    w.put_u32(crate::oxm::NX_EXPERIMENTER);
    w.put_u16(subtype);
    start
}

/// Pad an action to a multiple of 8 and write its length.
fn finish(w: &mut Vec<u8>, start: usize) {
    w.pad_to_8(start);
    let len = w.len() - start;
    w.patch_u16(start + 2, len.min(0xffff) as u16);
}

fn encode_one(a: &Action, w: &mut Vec<u8>) {
    let start = w.len();
    match a {
        Action::Output { port, max_len } => {
            w.put_u16(ofpat::OUTPUT);
            w.put_u16(16);
            w.put_u32(*port);
            w.put_u16(*max_len);
            w.put_zeros(6);
        }
        Action::Group(g) => {
            w.put_u16(ofpat::GROUP);
            w.put_u16(8);
            w.put_u32(*g);
        }
        Action::SetField(mf) if mf.mask.is_none() => {
            w.put_u16(ofpat::SET_FIELD);
            w.put_u16(0);
            mf.encode(w);
            finish(w, start);
        }
        Action::SetField(mf) => {
            nx_start(w, nxast::REG_LOAD2);
            mf.encode(w);
            finish(w, start);
        }
        Action::PushVlan(t) => {
            w.put_u16(ofpat::PUSH_VLAN);
            w.put_u16(8);
            w.put_u16(*t);
            w.put_zeros(2);
        }
        Action::PopVlan | Action::DecNwTtl => {
            let ty = if matches!(a, Action::PopVlan) {
                ofpat::POP_VLAN
            } else {
                ofpat::DEC_NW_TTL
            };
            w.put_u16(ty);
            w.put_u16(8);
            w.put_zeros(4);
        }
        Action::Resubmit { in_port, table } => {
            nx_start(w, nxast::RESUBMIT_TABLE);
            w.put_u16(*in_port);
            w.put_u8(table.unwrap_or(0xff));
            finish(w, start);
        }
        Action::ResubmitLegacy { in_port } => {
            nx_start(w, nxast::RESUBMIT);
            w.put_u16(*in_port);
            finish(w, start);
        }
        Action::Move { src, dst } => {
            nx_start(w, nxast::REG_MOVE);
            w.put_u16(src.n_bits);
            w.put_u16(src.ofs);
            w.put_u16(dst.ofs);
            put_nx_header(&src.header, w);
            put_nx_header(&dst.header, w);
            finish(w, start);
        }
        Action::Load { dst, value } => {
            nx_start(w, nxast::REG_LOAD);
            w.put_u16(ofs_nbits(dst.ofs, dst.n_bits));
            put_nx_header(&dst.header, w);
            w.truncate(w.len() - (nx_header_len(&dst.header) - 4));
            w.put_u64(*value);
            finish(w, start);
        }
        Action::OutputReg { src, max_len } if src.header.experimenter.is_none() => {
            nx_start(w, nxast::OUTPUT_REG);
            w.put_u16(ofs_nbits(src.ofs, src.n_bits));
            put_nx_header(&src.header, w);
            w.put_u16(*max_len);
            finish(w, start);
        }
        Action::OutputReg { src, max_len } => {
            nx_start(w, nxast::OUTPUT_REG2);
            w.put_u16(ofs_nbits(src.ofs, src.n_bits));
            w.put_u16(*max_len);
            put_nx_header(&src.header, w);
            finish(w, start);
        }
        Action::Ct(ct) => {
            nx_start(w, nxast::CT);
            w.put_u16(ct.flags);
            match &ct.zone_src {
                Some(sf) => {
                    put_nx_header(&sf.header, w);
                    w.truncate(w.len() - (nx_header_len(&sf.header) - 4));
                    w.put_u16(ofs_nbits(sf.ofs, sf.n_bits));
                }
                None => {
                    w.put_u32(0);
                    w.put_u16(ct.zone_imm);
                }
            }
            w.put_u8(ct.recirc_table.unwrap_or(CT_RECIRC_NONE));
            w.put_zeros(3);
            w.put_u16(ct.alg);
            encode_actions(&ct.actions, w);
            finish(w, start);
        }
        Action::Nat(nat) => {
            use nat_range::*;
            nx_start(w, nxast::NAT);
            w.put_zeros(2);
            w.put_u16(nat.flags);
            let mut present = 0u16;
            match nat.addr {
                Some(NatAddr::V4(_, max)) => {
                    present |= IPV4_MIN | if max.is_some() { IPV4_MAX } else { 0 }
                }
                Some(NatAddr::V6(_, max)) => {
                    present |= IPV6_MIN | if max.is_some() { IPV6_MAX } else { 0 }
                }
                None => {}
            }
            if let Some((_, max)) = nat.ports {
                present |= PROTO_MIN | if max.is_some() { PROTO_MAX } else { 0 };
            }
            w.put_u16(present);
            match nat.addr {
                Some(NatAddr::V4(min, max)) => {
                    w.put_slice(&min.octets());
                    if let Some(max) = max {
                        w.put_slice(&max.octets());
                    }
                }
                Some(NatAddr::V6(min, max)) => {
                    w.put_slice(&min.octets());
                    if let Some(max) = max {
                        w.put_slice(&max.octets());
                    }
                }
                None => {}
            }
            if let Some((min, max)) = nat.ports {
                w.put_u16(min);
                if let Some(max) = max {
                    w.put_u16(max);
                }
            }
            finish(w, start);
        }
        Action::Note(bytes) => {
            nx_start(w, nxast::NOTE);
            w.put_slice(bytes);
            // nx_action_note is at least 16 bytes (6 note bytes).
            if bytes.len() < 6 {
                w.put_zeros(6 - bytes.len());
            }
            finish(w, start);
        }
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => {
            nx_start(w, nxast::CONJUNCTION);
            w.put_u8(*clause);
            w.put_u8(*n_clauses);
            w.put_u32(*id);
            finish(w, start);
        }
        Action::DecTtl => {
            nx_start(w, nxast::DEC_TTL);
            finish(w, start);
        }
        Action::Controller {
            max_len,
            controller_id,
            reason,
            userdata,
            pause,
            meter_id,
            extended,
        } => {
            if !extended && userdata.is_empty() && !pause && meter_id.is_none() {
                nx_start(w, nxast::CONTROLLER);
                w.put_u16(*max_len);
                w.put_u16(*controller_id);
                w.put_u8(*reason);
                w.put_u8(0);
            } else {
                nx_start(w, nxast::CONTROLLER2);
                w.put_zeros(6);
                let prop = |w: &mut Vec<u8>, ty: u16, body: &[u8]| {
                    let s = w.len();
                    w.put_u16(ty);
                    w.put_u16((4 + body.len()).min(0xffff) as u16);
                    w.put_slice(body);
                    w.pad_to_8(s);
                };
                // ofpprop_put_u16: a 16-bit value and 2 bytes of padding, inside the length.
                let u16_prop = |v: u16| {
                    let [a, b] = v.to_be_bytes();
                    [a, b, 0, 0]
                };
                if *max_len != u16::MAX {
                    prop(w, nxac2pt::MAX_LEN, &u16_prop(*max_len));
                }
                if *controller_id != 0 {
                    prop(w, nxac2pt::CONTROLLER_ID, &u16_prop(*controller_id));
                }
                if *reason != OFPR_ACTION {
                    prop(w, nxac2pt::REASON, &[*reason]);
                }
                if !userdata.is_empty() {
                    prop(w, nxac2pt::USERDATA, userdata);
                }
                if *pause {
                    prop(w, nxac2pt::PAUSE, &[]);
                }
                if let Some(m) = meter_id {
                    prop(w, nxac2pt::METER_ID, &m.to_be_bytes());
                }
            }
            finish(w, start);
        }
        Action::OutputReg2 { src, max_len } => {
            nx_start(w, nxast::OUTPUT_REG2);
            w.put_u16(ofs_nbits(src.ofs, src.n_bits));
            w.put_u16(*max_len);
            put_nx_header(&src.header, w);
            finish(w, start);
        }
        Action::DecTtlIds(ids) => {
            nx_start(w, nxast::DEC_TTL_CNT_IDS);
            w.put_u16(ids.len().min(0xffff) as u16);
            w.put_zeros(4);
            for id in ids {
                w.put_u16(*id);
            }
            finish(w, start);
        }
        Action::SetQueue(q) => {
            w.put_u16(ofpat::SET_QUEUE);
            w.put_u16(8);
            w.put_u32(*q);
        }
        Action::SetNwTtl(t) | Action::SetMplsTtl(t) => {
            w.put_u16(if matches!(a, Action::SetNwTtl(_)) {
                ofpat::SET_NW_TTL
            } else {
                ofpat::SET_MPLS_TTL
            });
            w.put_u16(8);
            w.put_u8(*t);
            w.put_zeros(3);
        }
        Action::DecMplsTtl => {
            w.put_u16(ofpat::DEC_MPLS_TTL);
            w.put_u16(8);
            w.put_zeros(4);
        }
        Action::PushMpls(e) | Action::PopMpls(e) => {
            w.put_u16(if matches!(a, Action::PushMpls(_)) {
                ofpat::PUSH_MPLS
            } else {
                ofpat::POP_MPLS
            });
            w.put_u16(8);
            w.put_u16(*e);
            w.put_zeros(2);
        }
        Action::PopQueue | Action::Exit | Action::CtClear => {
            nx_start(
                w,
                match a {
                    Action::PopQueue => nxast::POP_QUEUE,
                    Action::Exit => nxast::EXIT,
                    _ => nxast::CT_CLEAR,
                },
            );
            finish(w, start);
        }
        Action::FinTimeout { idle, hard } => {
            nx_start(w, nxast::FIN_TIMEOUT);
            w.put_u16(*idle);
            w.put_u16(*hard);
            finish(w, start);
        }
        Action::Sample(sm) => {
            nx_start(
                w,
                match sm.version {
                    1 => nxast::SAMPLE,
                    2 => nxast::SAMPLE2,
                    _ => nxast::SAMPLE3,
                },
            );
            w.put_u16(sm.probability);
            w.put_u32(sm.collector_set_id);
            w.put_u32(sm.obs_domain_id);
            w.put_u32(sm.obs_point_id);
            if sm.version != 1 {
                w.put_u16(sm.sampling_port);
                w.put_u8(if sm.version == 3 { sm.direction } else { 0 });
            }
            finish(w, start);
        }
        Action::Clone(actions) => {
            nx_start(w, nxast::CLONE);
            w.put_zeros(6);
            encode_actions(actions, w);
            finish(w, start);
        }
        Action::Multipath(mp) => {
            nx_start(w, nxast::MULTIPATH);
            w.put_u16(mp.fields);
            w.put_u16(mp.basis);
            w.put_zeros(2);
            w.put_u16(mp.algorithm);
            w.put_u16(mp.max_link);
            w.put_u32(mp.arg);
            w.put_zeros(2);
            w.put_u16(ofs_nbits(mp.dst.ofs, mp.dst.n_bits));
            put_header32(&mp.dst.header, w);
            finish(w, start);
        }
        Action::Bundle(b) => {
            nx_start(
                w,
                if b.dst.is_some() {
                    nxast::BUNDLE_LOAD
                } else {
                    nxast::BUNDLE
                },
            );
            w.put_u16(b.algorithm);
            w.put_u16(b.fields);
            w.put_u16(b.basis);
            w.put_u32(NXM_OF_IN_PORT_HEADER);
            w.put_u16(b.members.len().min(0xffff) as u16);
            match &b.dst {
                Some(sf) => {
                    w.put_u16(ofs_nbits(sf.ofs, sf.n_bits));
                    put_header32(&sf.header, w);
                }
                None => w.put_zeros(6),
            }
            w.put_zeros(4);
            for m in &b.members {
                w.put_u16(*m);
            }
            finish(w, start);
        }
        Action::CheckPktLarger { pkt_len, dst } => {
            nx_start(w, nxast::CHECK_PKT_LARGER);
            w.put_u16(*pkt_len);
            w.put_u16(dst.ofs);
            put_nx_header(&dst.header, w);
            finish(w, start);
        }
        Action::Learn(l) => {
            let learn2 = l.learn2 || l.limit != 0 || l.result_dst.is_some();
            nx_start(w, if learn2 { nxast::LEARN2 } else { nxast::LEARN });
            w.put_u16(l.idle_timeout);
            w.put_u16(l.hard_timeout);
            w.put_u16(l.priority);
            w.put_u64(l.cookie);
            let write_result = if l.result_dst.is_some() { 4 } else { 0 };
            w.put_u16(l.flags & !4 | write_result);
            w.put_u8(l.table_id);
            w.put_u8(0);
            w.put_u16(l.fin_idle_timeout);
            w.put_u16(l.fin_hard_timeout);
            if learn2 {
                w.put_u32(l.limit);
                w.put_u16(l.result_dst.map_or(0, |sf| sf.ofs));
                w.put_u16(0);
                if let Some(sf) = &l.result_dst {
                    put_header32(&sf.header, w);
                }
            }
            for spec in &l.specs {
                let src_bit = if matches!(spec.src, LearnSrc::Immediate { .. }) {
                    0x2000
                } else {
                    0
                };
                let dst_bits = match spec.dst {
                    LearnDst::Match(_) => 0,
                    LearnDst::Load(_) => 1 << 11,
                    LearnDst::Output => 2 << 11,
                };
                w.put_u16(src_bit | dst_bits | (spec.n_bits() & 0x3ff));
                match &spec.src {
                    LearnSrc::Field(sf) => {
                        put_header32(&sf.header, w);
                        w.put_u16(sf.ofs);
                    }
                    LearnSrc::Immediate { value, .. } => w.put_slice(value),
                }
                if let LearnDst::Match(sf) | LearnDst::Load(sf) = &spec.dst {
                    put_header32(&sf.header, w);
                    w.put_u16(sf.ofs);
                }
            }
            finish(w, start);
        }
        Action::Legacy(set) => {
            let (ty, body): (u16, Vec<u8>) = match set {
                LegacySet::VlanVid(v) => (1, v.to_be_bytes().to_vec()),
                LegacySet::VlanPcp(v) => (2, vec![*v]),
                LegacySet::DlSrc(m) => (3, m.to_vec()),
                LegacySet::DlDst(m) => (4, m.to_vec()),
                LegacySet::NwSrc(a) => (5, a.octets().to_vec()),
                LegacySet::NwDst(a) => (6, a.octets().to_vec()),
                LegacySet::NwTos(v) => (7, vec![*v]),
                LegacySet::NwEcn(v) => (8, vec![*v]),
                LegacySet::TpSrc(v) => (9, v.to_be_bytes().to_vec()),
                LegacySet::TpDst(v) => (10, v.to_be_bytes().to_vec()),
            };
            w.put_u16(ty);
            w.put_u16(0);
            w.put_slice(&body);
            if ty == 3 || ty == 4 {
                w.put_zeros(6);
            }
            finish(w, start);
        }
        Action::SetTunnel { tun_id, wide } => {
            if *wide {
                nx_start(w, nxast::SET_TUNNEL64);
                w.put_zeros(6);
                w.put_u64(*tun_id);
            } else {
                nx_start(w, nxast::SET_TUNNEL);
                w.put_zeros(2);
                w.put_u32(*tun_id as u32);
            }
            finish(w, start);
        }
        Action::Decap { packet_type } => {
            nx_start(w, nxast::DECAP);
            w.put_zeros(2);
            w.put_u32(*packet_type);
            finish(w, start);
        }
        Action::Unknown(bytes) => w.put_slice(bytes),
    }
}

/// Seeded generators of valid, canonically encoded actions (for the property tests).
#[cfg(test)]
pub(crate) mod gen {
    use super::*;
    use crate::oxm::gen::{known_field, Rng};
    use crate::oxm::FIELDS;

    fn field(rng: &mut Rng) -> Field {
        FIELDS[rng.below(FIELDS.len() as u64) as usize].field
    }

    fn slice(rng: &mut Rng, max_bits: u16) -> FieldSlice {
        let f = field(rng);
        let bits = f.bits().min(max_bits);
        let n_bits = 1 + rng.below(bits as u64) as u16;
        let ofs = rng.below((f.bits() - n_bits) as u64 + 1) as u16;
        FieldSlice {
            header: f.slice_header(),
            ofs,
            n_bits,
        }
    }

    /// One random action; `depth` bounds `ct` nesting.
    pub fn action(rng: &mut Rng, depth: usize) -> Action {
        match rng.below(21) {
            0 => Action::Output {
                port: rng.next() as u32,
                max_len: rng.next() as u16,
            },
            1 => Action::Group(rng.next() as u32),
            2 | 3 => {
                let f = field(rng);
                let masked = rng.coin();
                Action::SetField(known_field(rng, f, masked))
            }
            4 => Action::PushVlan(rng.next() as u16),
            5 => [Action::PopVlan, Action::DecNwTtl, Action::DecTtl][rng.below(3) as usize].clone(),
            6 => Action::Resubmit {
                in_port: rng.next() as u16,
                table: rng.coin().then(|| rng.below(255) as u8),
            },
            7 => Action::ResubmitLegacy {
                in_port: rng.next() as u16,
            },
            8 => {
                let src = slice(rng, 64);
                let mut dst = slice(rng, 64);
                let n = src.n_bits.min(dst.n_bits);
                let mut src = src;
                src.n_bits = n;
                dst.n_bits = n;
                Action::Move { src, dst }
            }
            9 => {
                let dst = slice(rng, 64);
                let v = rng.next();
                let value = if dst.n_bits >= 64 {
                    v
                } else {
                    v & ((1u64 << dst.n_bits) - 1)
                };
                Action::Load { dst, value }
            }
            10 => Action::OutputReg {
                src: slice(rng, 64),
                max_len: rng.next() as u16,
            },
            11 if depth < 2 => {
                let zone_src = rng.coin().then(|| slice(rng, 16));
                let n = rng.below(3);
                Action::Ct(Ct {
                    flags: rng.next() as u16,
                    zone_imm: if zone_src.is_some() {
                        0
                    } else {
                        rng.next() as u16
                    },
                    zone_src,
                    recirc_table: rng.coin().then(|| rng.below(255) as u8),
                    alg: rng.next() as u16,
                    actions: (0..n).map(|_| action(rng, depth + 1)).collect(),
                })
            }
            12 => {
                let mut flags = [nat_flags::SRC, nat_flags::DST, 0][rng.below(3) as usize];
                if rng.coin() {
                    flags |= nat_flags::PERSISTENT;
                }
                flags |= [0, nat_flags::PROTO_HASH, nat_flags::PROTO_RANDOM][rng.below(3) as usize];
                let addr = match rng.below(3) {
                    0 => None,
                    1 => {
                        let a = 1 + rng.below(u32::MAX as u64 - 1) as u32;
                        let b = rng.coin().then(|| a.saturating_add(rng.below(1000) as u32));
                        Some(NatAddr::V4(a.into(), b.map(Into::into)))
                    }
                    _ => {
                        let a = (rng.next() as u128) << 64 | rng.next() as u128 | 1;
                        let b = rng.coin().then(|| a.saturating_add(rng.next() as u128));
                        Some(NatAddr::V6(a.into(), b.map(Into::into)))
                    }
                };
                let ports = addr.and(rng.coin().then(|| {
                    let a = 1 + rng.below(65535) as u16;
                    (
                        a,
                        rng.coin().then(|| a.saturating_add(rng.below(100) as u16)),
                    )
                }));
                Action::Nat(Nat { flags, addr, ports })
            }
            13 => {
                let n = 6 + 8 * rng.below(3) as usize;
                Action::Note(rng.bytes(n))
            }
            14 => {
                let n_clauses = 2 + rng.below(30) as u8;
                Action::Conjunction {
                    id: rng.next() as u32,
                    clause: rng.below(n_clauses as u64) as u8,
                    n_clauses,
                }
            }
            15 => {
                let ud = if rng.coin() {
                    let n = rng.below(20) as usize;
                    rng.bytes(n)
                } else {
                    Vec::new()
                };
                let pause = rng.coin();
                let meter_id = rng.coin().then(|| rng.next() as u32);
                let extended = !ud.is_empty() || pause || meter_id.is_some() || rng.below(4) == 0;
                Action::Controller {
                    max_len: rng.next() as u16,
                    controller_id: rng.next() as u16,
                    reason: rng.next() as u8,
                    userdata: ud,
                    pause,
                    meter_id,
                    extended,
                }
            }
            16 => {
                // An OpenFlow action flowmesh does not model (copy_ttl_out, copy_ttl_in,
                // push_pbb, pop_pbb).
                let ty = [11u16, 12, 26, 27][rng.below(4) as usize];
                let len = 8 * (1 + rng.below(3) as usize);
                let mut b = vec![0u8; len];
                b[0..2].copy_from_slice(&ty.to_be_bytes());
                b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                b[4..].copy_from_slice(&rng.bytes(len - 4));
                Action::Unknown(b)
            }
            17 => {
                // An experimenter action of another vendor.
                let len = 16 + 8 * rng.below(3) as usize;
                let mut b = vec![0xff, 0xff];
                b.extend((len as u16).to_be_bytes());
                b.extend(0x00c0_ffeeu32.to_be_bytes());
                b.extend(rng.bytes(len - 8));
                Action::Unknown(b)
            }
            18 => extended_action(rng, depth),
            _ => Action::Output {
                port: rng.below(64) as u32,
                max_len: 0,
            },
        }
    }

    /// One of the actions added for issue 19 (everything `ovs-ofctl` names that flowmesh
    /// once kept as bytes).
    fn extended_action(rng: &mut Rng, depth: usize) -> Action {
        let slice_ok = |rng: &mut Rng, bits: u16| {
            // Only NXM-class fields: these actions carry a 32-bit header.
            loop {
                let sf = slice(rng, bits);
                if sf.header.experimenter.is_none() {
                    return sf;
                }
            }
        };
        match rng.below(20) {
            0 => {
                let src = slice(rng, 64);
                if src.header.experimenter.is_some() {
                    Action::OutputReg {
                        src,
                        max_len: rng.next() as u16,
                    }
                } else {
                    Action::OutputReg2 {
                        src,
                        max_len: rng.next() as u16,
                    }
                }
            }
            1 => {
                let n = rng.below(7) as usize;
                Action::DecTtlIds((0..n).map(|_| rng.next() as u16).collect())
            }
            2 => Action::SetQueue(rng.next() as u32),
            3 => [
                Action::PopQueue,
                Action::Exit,
                Action::CtClear,
                Action::DecMplsTtl,
            ][rng.below(4) as usize]
                .clone(),
            4 => Action::SetNwTtl(rng.next() as u8),
            5 => Action::SetMplsTtl(rng.next() as u8),
            6 => Action::PushMpls([0x8847, 0x8848][rng.below(2) as usize]),
            7 => Action::PopMpls(rng.next() as u16),
            8 => Action::FinTimeout {
                idle: rng.next() as u16,
                hard: rng.next() as u16,
            },
            9 => {
                let version = 1 + rng.below(3) as u8;
                Action::Sample(Sample {
                    probability: 1 + rng.below(65535) as u16,
                    collector_set_id: rng.next() as u32,
                    obs_domain_id: rng.next() as u32,
                    obs_point_id: rng.next() as u32,
                    sampling_port: if version == 1 {
                        0xffff
                    } else {
                        rng.next() as u16
                    },
                    direction: if version == 3 { rng.below(3) as u8 } else { 0 },
                    version,
                })
            }
            10 if depth < 2 => {
                let n = rng.below(3);
                Action::Clone((0..n).map(|_| action(rng, depth + 1)).collect())
            }
            11 => Action::Multipath(Multipath {
                fields: rng.below(7) as u16,
                basis: rng.next() as u16,
                algorithm: rng.below(4) as u16,
                max_link: rng.next() as u16,
                arg: rng.next() as u32,
                dst: slice_ok(rng, 64),
            }),
            12 => {
                let n = rng.below(5) as usize;
                Action::Bundle(Bundle {
                    algorithm: rng.below(2) as u16,
                    fields: rng.below(7) as u16,
                    basis: rng.next() as u16,
                    dst: rng.coin().then(|| slice_ok(rng, 64)),
                    members: (0..n).map(|_| rng.next() as u16).collect(),
                })
            }
            13 => {
                let mut dst = slice(rng, 1);
                dst.n_bits = 1;
                Action::CheckPktLarger {
                    pkt_len: rng.next() as u16,
                    dst,
                }
            }
            14 => Action::Decap {
                packet_type: rng.next() as u32,
            },
            15 => Action::Legacy(match rng.below(10) {
                0 => LegacySet::VlanVid(rng.below(0x1000) as u16),
                1 => LegacySet::VlanPcp(rng.below(8) as u8),
                2 => LegacySet::DlSrc([rng.next() as u8; 6]),
                3 => LegacySet::DlDst([rng.next() as u8, 0, 1, 2, 3, rng.next() as u8]),
                4 => LegacySet::NwSrc((rng.next() as u32).into()),
                5 => LegacySet::NwDst((rng.next() as u32).into()),
                6 => LegacySet::NwTos(rng.next() as u8 & 0xfc),
                7 => LegacySet::NwEcn(rng.below(4) as u8),
                8 => LegacySet::TpSrc(rng.next() as u16),
                _ => LegacySet::TpDst(rng.next() as u16),
            }),
            17 => {
                let n = rng.below(4) as usize;
                let specs = (0..n)
                    .map(|_| {
                        let dst_sf = slice_ok(rng, 64);
                        let n_bits = dst_sf.n_bits;
                        let src = if rng.coin() {
                            let mut src = slice_ok(rng, 64);
                            while src.n_bits < n_bits {
                                src = slice_ok(rng, 64);
                            }
                            src.n_bits = n_bits;
                            LearnSrc::Field(src)
                        } else {
                            let bytes = (n_bits as usize).div_ceil(16) * 2;
                            LearnSrc::Immediate {
                                n_bits,
                                value: rng.bytes(bytes),
                            }
                        };
                        let dst = match (rng.below(3), &src) {
                            (0, LearnSrc::Field(_)) => LearnDst::Output,
                            (1, _) => LearnDst::Load(dst_sf),
                            _ => LearnDst::Match(dst_sf),
                        };
                        LearnSpec { src, dst }
                    })
                    .collect();
                let limit = if rng.coin() { rng.next() as u32 } else { 0 };
                let result_dst = rng.coin().then(|| {
                    let mut sf = slice_ok(rng, 1);
                    sf.n_bits = 1;
                    sf
                });
                Action::Learn(Learn {
                    idle_timeout: rng.next() as u16,
                    hard_timeout: rng.next() as u16,
                    priority: rng.next() as u16,
                    cookie: rng.next(),
                    flags: rng.below(4) as u16 | if result_dst.is_some() { 4 } else { 0 },
                    table_id: rng.below(255) as u8,
                    fin_idle_timeout: rng.next() as u16,
                    fin_hard_timeout: rng.next() as u16,
                    limit,
                    learn2: limit != 0 || result_dst.is_some() || rng.coin(),
                    result_dst,
                    specs,
                })
            }
            16 => {
                let wide = rng.coin();
                Action::SetTunnel {
                    tun_id: if wide {
                        rng.next()
                    } else {
                        rng.next() as u32 as u64
                    },
                    wide,
                }
            }
            _ => Action::Controller {
                max_len: rng.next() as u16,
                controller_id: rng.next() as u16,
                reason: rng.next() as u8,
                userdata: Vec::new(),
                pause: false,
                meter_id: rng.coin().then(|| rng.next() as u32),
                extended: true,
            },
        }
    }

    /// A random action list.
    pub fn actions(rng: &mut Rng) -> Vec<Action> {
        let n = rng.below(6);
        (0..n).map(|_| action(rng, 0)).collect()
    }
}

#[cfg(test)]
mod codec_tests {
    use super::gen::actions as random_actions;
    use super::*;
    use crate::oxm::gen::{mutate, Rng};
    use crate::text::actions::format_actions;

    fn dec(b: &[u8]) -> Result<Vec<Action>, DecodeError> {
        decode_actions(&mut Reader::new(b))
    }
    fn enc(a: &[Action]) -> Vec<u8> {
        let mut w = Vec::new();
        encode_actions(a, &mut w);
        w
    }
    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
            .collect()
    }

    #[test]
    fn ovs_captured_actions_round_trip() {
        // `ip,actions=ct(commit,table=31,zone=5,nat(src=10.0.0.1-10.0.0.5:100-200,persistent,
        // random))` from `ovs-ofctl -O OpenFlow13 -mmmmm parse-flow`.
        let b = hex(concat!(
            "ffff003800002320002300010000000000051f0000000000",
            "ffff0020000023200024000000150033",
            "0a0000010a000005006400c800000000"
        ));
        let a = dec(&b).expect("decodes");
        assert_eq!(
            format_actions(&a),
            "ct(commit,table=31,zone=5,nat(src=10.0.0.1-10.0.0.5:100-200,persistent,random))"
        );
        assert_eq!(enc(&a), b);
        // output:NXM_NX_REG2[], resubmit(,30), controller(reason=no_match,userdata=01.02)
        let b = hex(concat!(
            "ffff001800002320000f001f00010404ffff000000000000",
            "ffff001000002320000efff81e000000",
            "ffff002000002320002500000000000000020005000000000003000601020000"
        ));
        let a = dec(&b).expect("decodes");
        assert_eq!(
            format_actions(&a),
            "output:NXM_NX_REG2[],resubmit(,30),controller(reason=no_match,userdata=01.02)"
        );
        assert_eq!(enc(&a), b);
    }

    #[test]
    fn length_rules() {
        let code = |b: &[u8]| dec(b).err().map(|e| e.ofp_error());
        let bad_len = Some((BAD_ACTION, bad_action::BAD_LEN));
        assert_eq!(code(&[0, 0, 0, 0]), bad_len); // length 0
        assert_eq!(code(&[0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0]), bad_len); // not a multiple of 8
        assert_eq!(code(&[0, 0, 0, 16, 0, 0, 0, 1]), bad_len); // longer than the list
        assert_eq!(code(&[0, 0]), bad_len); // truncated header
        assert_eq!(code(&[0, 0, 0, 8, 0, 0, 0, 1]), bad_len); // output must be 16
        assert_eq!(code(&hex("ffff0010000023200007000000000000")), bad_len); // load must be 24
        assert_eq!(dec(&[]), Ok(vec![]));
    }

    #[test]
    fn bad_arguments_are_rejected() {
        let code = |b: &[u8]| dec(b).err().map(|e| e.ofp_error());
        // load:0x100->NXM_NX_REG0[0..7]: value does not fit
        let b = hex("ffff0018000023200007000700010004 0000000000000100");
        assert_eq!(code(&b), Some((BAD_ACTION, bad_action::BAD_ARGUMENT)));
        // move to bits 30..33 of a 32-bit register
        let b = hex("ffff00180000232000060004 0000001e 00010004 00010204");
        assert_eq!(code(&b), Some((BAD_ACTION, bad_action::BAD_ARGUMENT)));
        // conjunction clause 2 of 2 (0-based on the wire)
        let b = hex("ffff0010000023200022020200000001");
        assert_eq!(code(&b), Some((BAD_ACTION, bad_action::BAD_ARGUMENT)));
    }

    #[test]
    fn unknown_and_non_canonical_actions_are_kept_as_bytes() {
        // copy_ttl_out, an unknown vendor, an unknown Nicira subtype, and an output with a
        // nonzero pad byte.
        let b = hex(concat!(
            "000b000800000000",
            "ffff001000c0ffee0001020304050607",
            "ffff0010000023200063000000000000",
            "0000001000000001ffff000000000001"
        ));
        let a = dec(&b).expect("decodes");
        assert_eq!(a.len(), 4);
        assert!(a.iter().all(|x| matches!(x, Action::Unknown(_))), "{a:?}");
        assert_eq!(enc(&a), b);
    }

    #[test]
    fn ct_nesting_is_bounded() {
        let mut a = Action::DecNwTtl;
        for _ in 0..8 {
            a = Action::Ct(Ct {
                actions: vec![a],
                ..Ct::default()
            });
        }
        let e = dec(&enc(&[a])).err().map(|e| e.ofp_error());
        assert_eq!(e, Some((BAD_ACTION, bad_action::TOO_MANY)));
    }

    #[test]
    fn encode_appends_after_existing_bytes() {
        let list = vec![Action::load_reg(0, 5), Action::output(2)];
        let mut w = vec![0xee; 3];
        encode_actions(&list, &mut w);
        assert_eq!(&w[..3], &[0xee; 3]);
        assert_eq!(dec(&w[3..]), Ok(list));
    }

    /// ≥100,000 generated action lists round-trip and ≥100,000 random or mutated inputs never
    /// panic; anything that decodes re-encodes to exactly the input bytes.
    #[test]
    fn property_round_trip_and_no_panic() {
        let mut rng = Rng(0x5eed_0002);
        for _ in 0..100_000 {
            let list = random_actions(&mut rng);
            let bytes = enc(&list);
            assert_eq!(dec(&bytes).as_ref(), Ok(&list), "{bytes:02x?}");
            let mut bad = bytes;
            mutate(&mut rng, &mut bad);
            if let Ok(a) = dec(&bad) {
                assert_eq!(enc(&a), bad);
                let _ = format_actions(&a);
            }
        }
        for _ in 0..20_000 {
            let n = 8 * rng.below(8) as usize;
            let mut b = rng.bytes(n);
            if n >= 16 && rng.coin() {
                b[0..4].copy_from_slice(&[0xff, 0xff, 0, n as u8]);
                b[4..8].copy_from_slice(&[0, 0, 0x23, 0x20]);
            }
            if let Ok(a) = dec(&b) {
                assert_eq!(enc(&a), b);
            }
        }
    }
}
