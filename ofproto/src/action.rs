//! OpenFlow 1.3 actions and the Nicira (NXAST) extension actions, as data.
//!
//! Wire layouts: OpenFlow 1.3.5 §7.2.5 (`ofp_action_*`), nicira-ext.h (`nx_action_*`).
//! Actions flowmesh does not model are kept as [`Action::Unknown`] with their exact bytes.

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

/// Conntrack `nat` sub-action (part of NXAST_CT, `nx_action_nat`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nat {
    /// NX_NAT_F_* flags (src, dst, persistent, hash, random).
    pub flags: u16,
    /// Address range (min, max); `max == min` for a single address.
    pub ipv4_range: Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)>,
    /// Port range (min, max).
    pub port_range: Option<(u16, u16)>,
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
    Controller {
        max_len: u16,
        controller_id: u16,
        reason: u8,
        userdata: Vec<u8>,
        pause: bool,
    },
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
    /// Push a new VLAN tag.
    pub const PUSH_VLAN: u16 = 17;
    /// Pop the outer VLAN tag.
    pub const POP_VLAN: u16 = 18;
    /// Apply group.
    pub const GROUP: u16 = 22;
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
    /// `move`.
    pub const REG_MOVE: u16 = 6;
    /// `load`.
    pub const REG_LOAD: u16 = 7;
    /// `note`.
    pub const NOTE: u16 = 8;
    /// `resubmit(port,table)`.
    pub const RESUBMIT_TABLE: u16 = 14;
    /// `output:SRC[]`.
    pub const OUTPUT_REG: u16 = 15;
    /// `dec_ttl`.
    pub const DEC_TTL: u16 = 18;
    /// `controller(...)`.
    pub const CONTROLLER: u16 = 20;
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
    if let Some(f) = sf.header.known() {
        if sf.ofs as u32 + sf.n_bits as u32 > f.bits() as u32 {
            return Err(act_err(
                bad_action::BAD_ARGUMENT,
                format!(
                    "{what}: bits {}..{} outside the {}-bit field {}",
                    sf.ofs,
                    sf.ofs as u32 + sf.n_bits as u32,
                    f.bits(),
                    f.name()
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
    let len = h.known().map_or(0, |f| f.len());
    h.encode(false, len, w);
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
            Action::OutputReg { src, max_len }
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
        nxast::NAT => {
            r.skip(2, "nat pad")?;
            let flags = r.u16("nat flags")?;
            let present = r.u16("nat range_present")?;
            if present & !0x33 != 0 {
                // IPv6 ranges or unknown bits: not modelled, keep the bytes.
                return Ok(Action::Unknown(raw.to_vec()));
            }
            let v4min = (present & 0x01 != 0)
                .then(|| r.u32("nat ipv4 min"))
                .transpose()?;
            let v4max = (present & 0x02 != 0)
                .then(|| r.u32("nat ipv4 max"))
                .transpose()?;
            let pmin = (present & 0x10 != 0)
                .then(|| r.u16("nat proto min"))
                .transpose()?;
            let pmax = (present & 0x20 != 0)
                .then(|| r.u16("nat proto max"))
                .transpose()?;
            let ipv4_range = match (v4min, v4max) {
                (Some(a), Some(b)) => Some((a.into(), b.into())),
                (Some(a), None) => Some((a.into(), a.into())),
                (None, None) => None,
                (None, Some(_)) => return Ok(Action::Unknown(raw.to_vec())),
            };
            let port_range = match (pmin, pmax) {
                (Some(a), Some(b)) => Some((a, b)),
                (Some(a), None) => Some((a, a)),
                (None, None) => None,
                (None, Some(_)) => return Ok(Action::Unknown(raw.to_vec())),
            };
            Action::Nat(Nat {
                flags,
                ipv4_range,
                port_range,
            })
        }
        _ => Action::Unknown(raw.to_vec()),
    })
}

/// NXAC2PT_* property types of NXAST_CONTROLLER2.
mod nxac2pt {
    pub const MAX_LEN: u16 = 0;
    pub const CONTROLLER_ID: u16 = 1;
    pub const REASON: u16 = 2;
    pub const USERDATA: u16 = 3;
    pub const PAUSE: u16 = 4;
}

/// OFPR_ACTION: the default packet-in reason of a controller action.
const OFPR_ACTION: u8 = 1;

fn decode_controller2(r: &mut Reader<'_>) -> Result<Action, DecodeError> {
    r.skip(6, "controller2 pad")?;
    let (mut max_len, mut controller_id, mut reason) = (u16::MAX, 0u16, OFPR_ACTION);
    let (mut userdata, mut pause) = (Vec::new(), false);
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
            nx_start(w, nxast::NAT);
            w.put_zeros(2);
            w.put_u16(nat.flags);
            let mut present = 0u16;
            if let Some((a, b)) = nat.ipv4_range {
                present |= 0x01 | if a != b { 0x02 } else { 0 };
            }
            if let Some((a, b)) = nat.port_range {
                present |= 0x10 | if a != b { 0x20 } else { 0 };
            }
            w.put_u16(present);
            if let Some((a, b)) = nat.ipv4_range {
                w.put_slice(&a.octets());
                if a != b {
                    w.put_slice(&b.octets());
                }
            }
            if let Some((a, b)) = nat.port_range {
                w.put_u16(a);
                if a != b {
                    w.put_u16(b);
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
        } => {
            if userdata.is_empty() && !pause {
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
                if *max_len != u16::MAX {
                    prop(w, nxac2pt::MAX_LEN, &max_len.to_be_bytes());
                }
                if *controller_id != 0 {
                    prop(w, nxac2pt::CONTROLLER_ID, &controller_id.to_be_bytes());
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
            }
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
        match rng.below(20) {
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
            12 => Action::Nat(Nat {
                flags: rng.next() as u16,
                ipv4_range: rng
                    .coin()
                    .then(|| ((rng.next() as u32).into(), (rng.next() as u32).into())),
                port_range: rng.coin().then(|| (rng.next() as u16, rng.next() as u16)),
            }),
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
                Action::Controller {
                    max_len: rng.next() as u16,
                    controller_id: rng.next() as u16,
                    reason: rng.next() as u8,
                    userdata: ud,
                    pause: rng.coin(),
                }
            }
            16 => {
                // An OpenFlow action flowmesh does not model (copy_ttl_out .. set_queue).
                let ty = 11 + rng.below(11) as u16;
                let ty = if ty == ofpat::PUSH_VLAN || ty == ofpat::POP_VLAN {
                    21
                } else {
                    ty
                };
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
            _ => Action::Output {
                port: rng.below(64) as u32,
                max_len: 0,
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
