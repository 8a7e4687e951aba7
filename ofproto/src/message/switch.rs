//! Switch-level message bodies: features, configuration, ports, packet-in/out, flow-removed,
//! table-mod, roles, asynchronous configuration and generic experimenter messages.

use super::{read_str, write_str};
use crate::error::DecodeError;
use crate::oxm::Match;
use crate::wire::{Reader, Writer};

/// OFPT_FEATURES_REPLY body (OpenFlow 1.3.5 §7.3.1).
///
/// ```text
/// struct ofp_switch_features { struct ofp_header header; uint64_t datapath_id;
///     uint32_t n_buffers; uint8_t n_tables; uint8_t auxiliary_id; uint8_t pad[2];
///     uint32_t capabilities; uint32_t reserved; };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchFeatures {
    /// Datapath id (lower 48 bits: a MAC address).
    pub datapath_id: u64,
    /// Packets the switch can buffer.
    pub n_buffers: u32,
    /// Number of flow tables.
    pub n_tables: u8,
    /// Auxiliary connection id (0 = main).
    pub auxiliary_id: u8,
    /// OFPC_* capability bits.
    pub capabilities: u32,
    /// Reserved word (kept).
    pub reserved: u32,
}

impl SwitchFeatures {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_switch_features";
        let f = SwitchFeatures {
            datapath_id: r.u64(ctx)?,
            n_buffers: r.u32(ctx)?,
            n_tables: r.u8(ctx)?,
            auxiliary_id: r.u8(ctx)?,
            capabilities: {
                r.skip(2, ctx)?;
                r.u32(ctx)?
            },
            reserved: r.u32(ctx)?,
        };
        end(r, ctx)?;
        Ok(f)
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u64(self.datapath_id);
        w.put_u32(self.n_buffers);
        w.put_u8(self.n_tables);
        w.put_u8(self.auxiliary_id);
        w.put_zeros(2);
        w.put_u32(self.capabilities);
        w.put_u32(self.reserved);
    }
}

/// Refuse bytes after a fixed-size body.
pub(crate) fn end(r: &Reader<'_>, context: &'static str) -> Result<(), DecodeError> {
    if r.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::BadLength {
            context,
            len: r.position() + r.remaining(),
        })
    }
}

/// OFPT_GET_CONFIG_REPLY / OFPT_SET_CONFIG body (OpenFlow 1.3.5 §7.3.2).
///
/// ```text
/// struct ofp_switch_config { struct ofp_header header; uint16_t flags; uint16_t miss_send_len; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchConfig {
    /// OFPC_FRAG_* flags.
    pub flags: u16,
    /// Bytes of a table-miss packet sent to the controller.
    pub miss_send_len: u16,
}

impl SwitchConfig {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_switch_config";
        let c = SwitchConfig {
            flags: r.u16(ctx)?,
            miss_send_len: r.u16(ctx)?,
        };
        end(r, ctx)?;
        Ok(c)
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u16(self.flags);
        w.put_u16(self.miss_send_len);
    }
}

/// A port description (OpenFlow 1.3.5 §7.2.1), 64 bytes.
///
/// ```text
/// struct ofp_port { uint32_t port_no; uint8_t pad[4]; uint8_t hw_addr[6]; uint8_t pad2[2];
///     char name[16]; uint32_t config; uint32_t state; uint32_t curr; uint32_t advertised;
///     uint32_t supported; uint32_t peer; uint32_t curr_speed; uint32_t max_speed; };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Port number.
    pub port_no: u32,
    /// MAC address.
    pub hw_addr: [u8; 6],
    /// Name (bytes before the first NUL).
    pub name: Vec<u8>,
    /// OFPPC_* config bits.
    pub config: u32,
    /// OFPPS_* state bits.
    pub state: u32,
    /// Current OFPPF_* features.
    pub curr: u32,
    /// Advertised features.
    pub advertised: u32,
    /// Supported features.
    pub supported: u32,
    /// Features advertised by the peer.
    pub peer: u32,
    /// Current bit rate in kbps.
    pub curr_speed: u32,
    /// Max bit rate in kbps.
    pub max_speed: u32,
}

/// Size of `ofp_port`.
pub const PORT_LEN: usize = 64;

impl Port {
    /// The name as text (lossy).
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_port";
        let mut p = r.sub(PORT_LEN, ctx)?;
        let port_no = p.u32(ctx)?;
        p.skip(4, ctx)?;
        let hw_addr = p.array(ctx)?;
        p.skip(2, ctx)?;
        Ok(Port {
            port_no,
            hw_addr,
            name: read_str(&mut p, 16, ctx)?,
            config: p.u32(ctx)?,
            state: p.u32(ctx)?,
            curr: p.u32(ctx)?,
            advertised: p.u32(ctx)?,
            supported: p.u32(ctx)?,
            peer: p.u32(ctx)?,
            curr_speed: p.u32(ctx)?,
            max_speed: p.u32(ctx)?,
        })
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.port_no);
        w.put_zeros(4);
        w.put_slice(&self.hw_addr);
        w.put_zeros(2);
        write_str(w, &self.name, 16);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            w.put_u32(v);
        }
    }
}

/// OFPT_PORT_STATUS body (OpenFlow 1.3.5 §7.4.3).
///
/// ```text
/// struct ofp_port_status { struct ofp_header header; uint8_t reason; uint8_t pad[7];
///     struct ofp_port desc; };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortStatus {
    /// OFPPR_ADD (0), OFPPR_DELETE (1), OFPPR_MODIFY (2).
    pub reason: u8,
    /// The port.
    pub desc: Port,
}

impl PortStatus {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let reason = r.u8("ofp_port_status")?;
        r.skip(7, "ofp_port_status")?;
        let desc = Port::decode(r)?;
        end(r, "ofp_port_status")?;
        Ok(PortStatus { reason, desc })
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u8(self.reason);
        w.put_zeros(7);
        self.desc.encode(w);
    }
}

/// OFPT_PACKET_IN body (OpenFlow 1.3.5 §7.4.1).
///
/// ```text
/// struct ofp_packet_in { struct ofp_header header; uint32_t buffer_id; uint16_t total_len;
///     uint8_t reason; uint8_t table_id; uint64_t cookie; struct ofp_match match;
///     /* uint8_t pad[2]; uint8_t data[0]; */ };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketIn {
    /// Buffer id, or OFP_NO_BUFFER.
    pub buffer_id: u32,
    /// Full length of the frame.
    pub total_len: u16,
    /// OFPR_* reason.
    pub reason: u8,
    /// Table that looked the packet up.
    pub table_id: u8,
    /// Cookie of the flow that sent it.
    pub cookie: u64,
    /// Packet metadata as a match (in_port, tunnel, registers...).
    pub matches: Match,
    /// The (possibly truncated) frame.
    pub data: Vec<u8>,
}

impl PacketIn {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_packet_in";
        let buffer_id = r.u32(ctx)?;
        let total_len = r.u16(ctx)?;
        let reason = r.u8(ctx)?;
        let table_id = r.u8(ctx)?;
        let cookie = r.u64(ctx)?;
        let matches = Match::decode(r)?;
        r.skip(2, ctx)?;
        Ok(PacketIn {
            buffer_id,
            total_len,
            reason,
            table_id,
            cookie,
            matches,
            data: r.rest().to_vec(),
        })
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.buffer_id);
        w.put_u16(self.total_len);
        w.put_u8(self.reason);
        w.put_u8(self.table_id);
        w.put_u64(self.cookie);
        self.matches.encode(w);
        w.put_zeros(2);
        w.put_slice(&self.data);
    }
}

/// OFPT_PACKET_OUT body (OpenFlow 1.3.5 §7.3.7).
///
/// ```text
/// struct ofp_packet_out { struct ofp_header header; uint32_t buffer_id; uint32_t in_port;
///     uint16_t actions_len; uint8_t pad[6]; struct ofp_action_header actions[0];
///     /* uint8_t data[0]; */ };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOut {
    /// Buffer id, or OFP_NO_BUFFER (then `data` holds the frame).
    pub buffer_id: u32,
    /// Ingress port for the pipeline (or OFPP_CONTROLLER).
    pub in_port: u32,
    /// Actions to apply.
    pub actions: Vec<crate::action::Action>,
    /// The frame.
    pub data: Vec<u8>,
}

impl PacketOut {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_packet_out";
        let buffer_id = r.u32(ctx)?;
        let in_port = r.u32(ctx)?;
        let actions_len = usize::from(r.u16(ctx)?);
        r.skip(6, ctx)?;
        let mut a = r.sub(actions_len, "ofp_packet_out.actions")?;
        let actions = super::modify::decode_action_list(&mut a)?;
        Ok(PacketOut {
            buffer_id,
            in_port,
            actions,
            data: r.rest().to_vec(),
        })
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.buffer_id);
        w.put_u32(self.in_port);
        let len_at = w.len();
        w.put_u16(0);
        w.put_zeros(6);
        let start = w.len();
        crate::action::encode_actions(&self.actions, w);
        let n = (w.len() - start).min(usize::from(u16::MAX)) as u16;
        w.patch_u16(len_at, n);
        w.put_slice(&self.data);
    }
}

/// OFPT_FLOW_REMOVED body (OpenFlow 1.3.5 §7.4.2).
///
/// ```text
/// struct ofp_flow_removed { struct ofp_header header; uint64_t cookie; uint16_t priority;
///     uint8_t reason; uint8_t table_id; uint32_t duration_sec; uint32_t duration_nsec;
///     uint16_t idle_timeout; uint16_t hard_timeout; uint64_t packet_count;
///     uint64_t byte_count; struct ofp_match match; };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRemoved {
    /// Cookie of the removed flow.
    pub cookie: u64,
    /// Its priority.
    pub priority: u16,
    /// OFPRR_* reason (idle timeout, hard timeout, delete, group delete).
    pub reason: u8,
    /// Its table.
    pub table_id: u8,
    /// Time alive, seconds part.
    pub duration_sec: u32,
    /// Time alive, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// Its idle timeout.
    pub idle_timeout: u16,
    /// Its hard timeout.
    pub hard_timeout: u16,
    /// Packets it matched.
    pub packet_count: u64,
    /// Bytes it matched.
    pub byte_count: u64,
    /// Its match.
    pub matches: Match,
}

impl FlowRemoved {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_flow_removed";
        let f = FlowRemoved {
            cookie: r.u64(ctx)?,
            priority: r.u16(ctx)?,
            reason: r.u8(ctx)?,
            table_id: r.u8(ctx)?,
            duration_sec: r.u32(ctx)?,
            duration_nsec: r.u32(ctx)?,
            idle_timeout: r.u16(ctx)?,
            hard_timeout: r.u16(ctx)?,
            packet_count: r.u64(ctx)?,
            byte_count: r.u64(ctx)?,
            matches: Match::decode(r)?,
        };
        end(r, ctx)?;
        Ok(f)
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u64(self.cookie);
        w.put_u16(self.priority);
        w.put_u8(self.reason);
        w.put_u8(self.table_id);
        w.put_u32(self.duration_sec);
        w.put_u32(self.duration_nsec);
        w.put_u16(self.idle_timeout);
        w.put_u16(self.hard_timeout);
        w.put_u64(self.packet_count);
        w.put_u64(self.byte_count);
        self.matches.encode(w);
    }
}

/// OFPT_TABLE_MOD body (OpenFlow 1.3.5 §7.3.3).
///
/// ```text
/// struct ofp_table_mod { struct ofp_header header; uint8_t table_id; uint8_t pad[3];
///     uint32_t config; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableMod {
    /// Table id (OFPTT_ALL = all).
    pub table_id: u8,
    /// OFPTC_* config bits (deprecated in 1.3, kept).
    pub config: u32,
}

impl TableMod {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let table_id = r.u8("ofp_table_mod")?;
        r.skip(3, "ofp_table_mod")?;
        let config = r.u32("ofp_table_mod")?;
        end(r, "ofp_table_mod")?;
        Ok(TableMod { table_id, config })
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u8(self.table_id);
        w.put_zeros(3);
        w.put_u32(self.config);
    }
}

/// OFPCR_ROLE_* controller roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Don't change the current role.
    NoChange,
    /// Full access, at least one.
    Equal,
    /// Full access, at most one.
    Master,
    /// Read-only access.
    Slave,
    /// A role value the spec does not define, kept.
    Unknown(u32),
}

impl Role {
    /// From the wire value.
    pub fn from_u32(v: u32) -> Role {
        match v {
            0 => Role::NoChange,
            1 => Role::Equal,
            2 => Role::Master,
            3 => Role::Slave,
            other => Role::Unknown(other),
        }
    }
    /// The wire value.
    pub fn to_u32(self) -> u32 {
        match self {
            Role::NoChange => 0,
            Role::Equal => 1,
            Role::Master => 2,
            Role::Slave => 3,
            Role::Unknown(v) => v,
        }
    }
}

/// OFPT_ROLE_REQUEST / OFPT_ROLE_REPLY body (OpenFlow 1.3.5 §7.3.9).
///
/// ```text
/// struct ofp_role_request { struct ofp_header header; uint32_t role; uint8_t pad[4];
///     uint64_t generation_id; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleRequest {
    /// The role.
    pub role: Role,
    /// Master election generation id (ignored for NOCHANGE/EQUAL).
    pub generation_id: u64,
}

impl RoleRequest {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let role = Role::from_u32(r.u32("ofp_role_request")?);
        r.skip(4, "ofp_role_request")?;
        let generation_id = r.u64("ofp_role_request")?;
        end(r, "ofp_role_request")?;
        Ok(RoleRequest {
            role,
            generation_id,
        })
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.role.to_u32());
        w.put_zeros(4);
        w.put_u64(self.generation_id);
    }
}

/// OFPT_GET_ASYNC_REPLY / OFPT_SET_ASYNC body (OpenFlow 1.3.5 §7.3.10). Index 0 of each mask
/// applies in the master/equal role, index 1 in the slave role.
///
/// ```text
/// struct ofp_async_config { struct ofp_header header; uint32_t packet_in_mask[2];
///     uint32_t port_status_mask[2]; uint32_t flow_removed_mask[2]; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncConfig {
    /// Bitmasks of OFPR_* packet-in reasons.
    pub packet_in_mask: [u32; 2],
    /// Bitmasks of OFPPR_* port-status reasons.
    pub port_status_mask: [u32; 2],
    /// Bitmasks of OFPRR_* flow-removed reasons.
    pub flow_removed_mask: [u32; 2],
}

impl AsyncConfig {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_async_config";
        let a = AsyncConfig {
            packet_in_mask: [r.u32(ctx)?, r.u32(ctx)?],
            port_status_mask: [r.u32(ctx)?, r.u32(ctx)?],
            flow_removed_mask: [r.u32(ctx)?, r.u32(ctx)?],
        };
        end(r, ctx)?;
        Ok(a)
    }
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        for m in [
            self.packet_in_mask,
            self.port_status_mask,
            self.flow_removed_mask,
        ] {
            w.put_u32(m[0]);
            w.put_u32(m[1]);
        }
    }
}

/// A generic OFPT_EXPERIMENTER message, kept raw (OpenFlow 1.3.5 §7.5.4).
///
/// ```text
/// struct ofp_experimenter_header { struct ofp_header header; uint32_t experimenter;
///     uint32_t exp_type; /* data follows */ };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Experimenter {
    /// Experimenter id.
    pub experimenter: u32,
    /// Experimenter-defined type.
    pub exp_type: u32,
    /// The rest.
    pub data: Vec<u8>,
}

impl Experimenter {
    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.experimenter);
        w.put_u32(self.exp_type);
        w.put_slice(&self.data);
    }
}
