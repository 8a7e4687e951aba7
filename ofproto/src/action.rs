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
    /// The whole of a known field (`NXM_NX_REG0[]`).
    pub fn whole(field: Field) -> Self {
        FieldSlice {
            header: field.header(),
            ofs: 0,
            n_bits: field.bits(),
        }
    }

    /// Bits `ofs..ofs+n_bits` of a known field (`NXM_NX_TUN_ID[0..31]` is `range(TunnelId, 0, 32)`).
    pub fn range(field: Field, ofs: u16, n_bits: u16) -> Self {
        FieldSlice {
            header: field.header(),
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
    /// OFPAT_SET_FIELD: set a field to a value (the entry carries no mask).
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
    /// NXAST_DEC_TTL: `dec_ttl`.
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

// ---- codec entry points (bodies filled in by the action codec) ----

/// Decode an action list that fills the whole reader.
pub fn decode_actions(r: &mut crate::wire::Reader<'_>) -> Result<Vec<Action>, crate::DecodeError> {
    let _ = r;
    Err(crate::DecodeError::BadAction(
        "action decoding not implemented yet".into(),
    ))
}

/// Encode an action list.
pub fn encode_actions(actions: &[Action], w: &mut Vec<u8>) {
    let _ = (actions, w);
}

/// An action list in `ovs-actions(7)` syntax (`move:...,output:2`), `drop` when empty.
pub fn format_actions(actions: &[Action]) -> String {
    format!("{actions:?}")
}
