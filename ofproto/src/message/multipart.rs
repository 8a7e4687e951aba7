//! OFPT_MULTIPART_REQUEST / OFPT_MULTIPART_REPLY (OpenFlow 1.3.5 §7.3.5).
//!
//! ```text
//! struct ofp_multipart_request { struct ofp_header header; uint16_t type; uint16_t flags;
//!     uint8_t pad[4]; uint8_t body[0]; };
//! struct ofp_multipart_reply   { struct ofp_header header; uint16_t type; uint16_t flags;
//!     uint8_t pad[4]; uint8_t body[0]; };
//! ```
//! Replies larger than one message come as several, all but the last with OFPMPF_REPLY_MORE.

use super::modify::{decode_buckets, decode_instruction_list, encode_buckets};
use super::switch::{end, Port, PORT_LEN};
use super::{read_str, write_str};
use crate::error::DecodeError;
use crate::flow::{Flow, Group, GroupType};
use crate::meter::{Meter, MeterFeatures, MeterStats};
use crate::oxm::Match;
use crate::wire::{Reader, Writer};

/// OFPMP_* multipart types.
pub mod mp_type {
    /// Switch description.
    pub const DESC: u16 = 0;
    /// Individual flow statistics.
    pub const FLOW: u16 = 1;
    /// Aggregate flow statistics.
    pub const AGGREGATE: u16 = 2;
    /// Flow table statistics.
    pub const TABLE: u16 = 3;
    /// Port statistics.
    pub const PORT_STATS: u16 = 4;
    /// Queue statistics.
    pub const QUEUE: u16 = 5;
    /// Group counter statistics.
    pub const GROUP: u16 = 6;
    /// Group description.
    pub const GROUP_DESC: u16 = 7;
    /// Group features.
    pub const GROUP_FEATURES: u16 = 8;
    /// Meter statistics.
    pub const METER: u16 = 9;
    /// Meter configuration.
    pub const METER_CONFIG: u16 = 10;
    /// Meter features.
    pub const METER_FEATURES: u16 = 11;
    /// Port description.
    pub const PORT_DESC: u16 = 13;
}

/// OFPMPF_REQ_MORE / OFPMPF_REPLY_MORE.
pub const MULTIPART_MORE: u16 = 1;

/// Request body of OFPMP_FLOW and OFPMP_AGGREGATE.
///
/// ```text
/// struct ofp_flow_stats_request { uint8_t table_id; uint8_t pad[3]; uint32_t out_port;
///     uint32_t out_group; uint8_t pad2[4]; uint64_t cookie; uint64_t cookie_mask;
///     struct ofp_match match; };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStatsRequest {
    /// Table (OFPTT_ALL for all).
    pub table_id: u8,
    /// Require an output to this port (OFPP_ANY = any).
    pub out_port: u32,
    /// Require a group action to this group (OFPG_ANY = any).
    pub out_group: u32,
    /// Cookie to match (under `cookie_mask`).
    pub cookie: u64,
    /// Cookie mask (0 = any cookie).
    pub cookie_mask: u64,
    /// Match the flows must be covered by.
    pub matches: Match,
}

impl FlowStatsRequest {
    /// All flows of all tables.
    pub fn all() -> Self {
        FlowStatsRequest {
            table_id: crate::flow::TABLE_ALL,
            out_port: crate::action::port::ANY,
            out_group: crate::flow::GROUP_ANY,
            cookie: 0,
            cookie_mask: 0,
            matches: Match::new(),
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_flow_stats_request";
        let table_id = r.u8(ctx)?;
        r.skip(3, ctx)?;
        let out_port = r.u32(ctx)?;
        let out_group = r.u32(ctx)?;
        r.skip(4, ctx)?;
        let f = FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie: r.u64(ctx)?,
            cookie_mask: r.u64(ctx)?,
            matches: Match::decode(r)?,
        };
        end(r, ctx)?;
        Ok(f)
    }
    fn encode(&self, w: &mut Vec<u8>) {
        w.put_u8(self.table_id);
        w.put_zeros(3);
        w.put_u32(self.out_port);
        w.put_u32(self.out_group);
        w.put_zeros(4);
        w.put_u64(self.cookie);
        w.put_u64(self.cookie_mask);
        self.matches.encode(w);
    }
}

/// The body of a multipart request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultipartRequestBody {
    /// OFPMP_DESC (no body).
    Desc,
    /// OFPMP_FLOW.
    Flow(FlowStatsRequest),
    /// OFPMP_AGGREGATE.
    Aggregate(FlowStatsRequest),
    /// OFPMP_TABLE (no body).
    Table,
    /// OFPMP_PORT_STATS for one port (OFPP_ANY = all).
    PortStats(u32),
    /// OFPMP_GROUP for one group (OFPG_ALL = all).
    Group(u32),
    /// OFPMP_GROUP_DESC (no body).
    GroupDesc,
    /// OFPMP_GROUP_FEATURES (no body).
    GroupFeatures,
    /// OFPMP_METER for one meter (`meter_id::ALL` = all).
    Meter(u32),
    /// OFPMP_METER_CONFIG for one meter (`meter_id::ALL` = all).
    MeterConfig(u32),
    /// OFPMP_METER_FEATURES (no body).
    MeterFeatures,
    /// OFPMP_PORT_DESC (no body).
    PortDesc,
    /// Any other multipart type, kept raw.
    Unknown {
        /// OFPMP_* type.
        mp_type: u16,
        /// The body.
        body: Vec<u8>,
    },
}

/// An OFPT_MULTIPART_REQUEST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipartRequest {
    /// OFPMPF_REQ_* flags.
    pub flags: u16,
    /// The request.
    pub body: MultipartRequestBody,
}

impl MultipartRequest {
    /// A single-part request.
    pub fn new(body: MultipartRequestBody) -> Self {
        MultipartRequest { flags: 0, body }
    }

    /// The OFPMP_* type.
    pub fn mp_type(&self) -> u16 {
        use MultipartRequestBody::*;
        match &self.body {
            Desc => mp_type::DESC,
            Flow(_) => mp_type::FLOW,
            Aggregate(_) => mp_type::AGGREGATE,
            Table => mp_type::TABLE,
            PortStats(_) => mp_type::PORT_STATS,
            Group(_) => mp_type::GROUP,
            GroupDesc => mp_type::GROUP_DESC,
            GroupFeatures => mp_type::GROUP_FEATURES,
            Meter(_) => mp_type::METER,
            MeterConfig(_) => mp_type::METER_CONFIG,
            MeterFeatures => mp_type::METER_FEATURES,
            PortDesc => mp_type::PORT_DESC,
            Unknown { mp_type, .. } => *mp_type,
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_multipart_request";
        let t = r.u16(ctx)?;
        let flags = r.u16(ctx)?;
        r.skip(4, ctx)?;
        let empty = |r: &Reader<'_>, b| end(r, "multipart request without body").map(|_| b);
        let body = match t {
            mp_type::DESC => empty(r, MultipartRequestBody::Desc)?,
            mp_type::FLOW => MultipartRequestBody::Flow(FlowStatsRequest::decode(r)?),
            mp_type::AGGREGATE => MultipartRequestBody::Aggregate(FlowStatsRequest::decode(r)?),
            mp_type::TABLE => empty(r, MultipartRequestBody::Table)?,
            mp_type::PORT_STATS | mp_type::GROUP | mp_type::METER | mp_type::METER_CONFIG => {
                let id = r.u32(ctx)?;
                r.skip(4, ctx)?;
                end(r, ctx)?;
                match t {
                    mp_type::GROUP => MultipartRequestBody::Group(id),
                    mp_type::METER => MultipartRequestBody::Meter(id),
                    mp_type::METER_CONFIG => MultipartRequestBody::MeterConfig(id),
                    _ => MultipartRequestBody::PortStats(id),
                }
            }
            mp_type::METER_FEATURES => empty(r, MultipartRequestBody::MeterFeatures)?,
            mp_type::GROUP_DESC => empty(r, MultipartRequestBody::GroupDesc)?,
            mp_type::GROUP_FEATURES => empty(r, MultipartRequestBody::GroupFeatures)?,
            mp_type::PORT_DESC => empty(r, MultipartRequestBody::PortDesc)?,
            other => MultipartRequestBody::Unknown {
                mp_type: other,
                body: r.rest().to_vec(),
            },
        };
        Ok(MultipartRequest { flags, body })
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u16(self.mp_type());
        w.put_u16(self.flags);
        w.put_zeros(4);
        use MultipartRequestBody::*;
        match &self.body {
            Desc | Table | GroupDesc | GroupFeatures | MeterFeatures | PortDesc => {}
            Flow(f) | Aggregate(f) => f.encode(w),
            PortStats(id) | Group(id) | Meter(id) | MeterConfig(id) => {
                w.put_u32(*id);
                w.put_zeros(4);
            }
            Unknown { body, .. } => w.put_slice(body),
        }
    }
}

/// OFPMP_DESC reply (`struct ofp_desc`: four 256-byte strings and a 32-byte serial number).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desc {
    /// Manufacturer description.
    pub mfr_desc: Vec<u8>,
    /// Hardware description.
    pub hw_desc: Vec<u8>,
    /// Software description.
    pub sw_desc: Vec<u8>,
    /// Serial number.
    pub serial_num: Vec<u8>,
    /// Human readable description of the datapath.
    pub dp_desc: Vec<u8>,
}

/// One flow of an OFPMP_FLOW reply: the flow plus its statistics.
///
/// ```text
/// struct ofp_flow_stats { uint16_t length; uint8_t table_id; uint8_t pad;
///     uint32_t duration_sec; uint32_t duration_nsec; uint16_t priority;
///     uint16_t idle_timeout; uint16_t hard_timeout; uint16_t flags; uint8_t pad2[4];
///     uint64_t cookie; uint64_t packet_count; uint64_t byte_count; struct ofp_match match;
///     /* struct ofp_instruction instructions[0]; */ };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStats {
    /// The flow (table, priority, cookie, timeouts, flags, match, instructions).
    pub flow: Flow,
    /// Time installed, seconds.
    pub duration_sec: u32,
    /// Time installed, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// Packets matched.
    pub packet_count: u64,
    /// Bytes matched.
    pub byte_count: u64,
}

/// Size of `ofp_flow_stats` before the match.
const FLOW_STATS_HEADER_LEN: usize = 48;

impl FlowStats {
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_flow_stats";
        let len = usize::from(r.u16(ctx)?);
        if len < FLOW_STATS_HEADER_LEN + 8 {
            return Err(DecodeError::BadLength {
                context: "ofp_flow_stats.length",
                len,
            });
        }
        let mut e = r.sub(len - 2, ctx)?;
        let table = e.u8(ctx)?;
        e.skip(1, ctx)?;
        let duration_sec = e.u32(ctx)?;
        let duration_nsec = e.u32(ctx)?;
        let priority = e.u16(ctx)?;
        let idle_timeout = e.u16(ctx)?;
        let hard_timeout = e.u16(ctx)?;
        let flags = e.u16(ctx)?;
        e.skip(4, ctx)?;
        let cookie = e.u64(ctx)?;
        let packet_count = e.u64(ctx)?;
        let byte_count = e.u64(ctx)?;
        let matches = Match::decode(&mut e)?;
        let instructions = decode_instruction_list(&mut e)?;
        Ok(FlowStats {
            flow: Flow {
                table,
                priority,
                cookie,
                idle_timeout,
                hard_timeout,
                flags,
                matches,
                instructions,
            },
            duration_sec,
            duration_nsec,
            packet_count,
            byte_count,
        })
    }
    fn encode(&self, w: &mut Vec<u8>) {
        let start = w.len();
        let f = &self.flow;
        w.put_u16(0);
        w.put_u8(f.table);
        w.put_u8(0);
        w.put_u32(self.duration_sec);
        w.put_u32(self.duration_nsec);
        w.put_u16(f.priority);
        w.put_u16(f.idle_timeout);
        w.put_u16(f.hard_timeout);
        w.put_u16(f.flags);
        w.put_zeros(4);
        w.put_u64(f.cookie);
        w.put_u64(self.packet_count);
        w.put_u64(self.byte_count);
        f.matches.encode(w);
        crate::instruction::encode_instructions(&f.instructions, w);
        patch_len(w, start);
    }
}

fn patch_len(w: &mut Vec<u8>, start: usize) {
    let len = (w.len() - start).min(usize::from(u16::MAX)) as u16;
    w.patch_u16(start, len);
}

/// OFPMP_AGGREGATE reply.
///
/// ```text
/// struct ofp_aggregate_stats_reply { uint64_t packet_count; uint64_t byte_count;
///     uint32_t flow_count; uint8_t pad[4]; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggregateStats {
    /// Packets matched.
    pub packet_count: u64,
    /// Bytes matched.
    pub byte_count: u64,
    /// Number of flows.
    pub flow_count: u32,
}

/// One table of an OFPMP_TABLE reply.
///
/// ```text
/// struct ofp_table_stats { uint8_t table_id; uint8_t pad[3]; uint32_t active_count;
///     uint64_t lookup_count; uint64_t matched_count; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableStats {
    /// Table id.
    pub table_id: u8,
    /// Active entries.
    pub active_count: u32,
    /// Packets looked up.
    pub lookup_count: u64,
    /// Packets that hit.
    pub matched_count: u64,
}

/// One port of an OFPMP_PORT_STATS reply (`struct ofp_port_stats`, 112 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortStats {
    /// Port number.
    pub port_no: u32,
    /// rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped, rx_errors,
    /// tx_errors, rx_frame_err, rx_over_err, rx_crc_err, collisions (all-ones = unavailable).
    pub counters: [u64; 12],
    /// Time alive, seconds.
    pub duration_sec: u32,
    /// Time alive, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
}

const PORT_STATS_LEN: usize = 112;

/// One group of an OFPMP_GROUP reply.
///
/// ```text
/// struct ofp_group_stats { uint16_t length; uint8_t pad[2]; uint32_t group_id;
///     uint32_t ref_count; uint8_t pad2[4]; uint64_t packet_count; uint64_t byte_count;
///     uint32_t duration_sec; uint32_t duration_nsec;
///     struct ofp_bucket_counter bucket_stats[0]; };  /* {packet_count, byte_count} */
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStats {
    /// Group id.
    pub group_id: u32,
    /// Flows or groups forwarding to it.
    pub ref_count: u32,
    /// Packets processed.
    pub packet_count: u64,
    /// Bytes processed.
    pub byte_count: u64,
    /// Time alive, seconds.
    pub duration_sec: u32,
    /// Time alive, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// (packet_count, byte_count) per bucket.
    pub bucket_stats: Vec<(u64, u64)>,
}

const GROUP_STATS_HEADER_LEN: usize = 40;

/// OFPMP_GROUP_FEATURES reply.
///
/// ```text
/// struct ofp_group_features { uint32_t types; uint32_t capabilities;
///     uint32_t max_groups[4]; uint32_t actions[4]; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupFeatures {
    /// Bitmap of supported OFPGT_* types.
    pub types: u32,
    /// OFPGFC_* capability bits.
    pub capabilities: u32,
    /// Maximum groups per type.
    pub max_groups: [u32; 4],
    /// Bitmaps of OFPAT_* actions supported per type.
    pub actions: [u32; 4],
}

/// The body of a multipart reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultipartReplyBody {
    /// OFPMP_DESC.
    Desc(Desc),
    /// OFPMP_FLOW.
    Flow(Vec<FlowStats>),
    /// OFPMP_AGGREGATE.
    Aggregate(AggregateStats),
    /// OFPMP_TABLE.
    Table(Vec<TableStats>),
    /// OFPMP_PORT_STATS.
    PortStats(Vec<PortStats>),
    /// OFPMP_GROUP.
    Group(Vec<GroupStats>),
    /// OFPMP_GROUP_DESC.
    GroupDesc(Vec<Group>),
    /// OFPMP_GROUP_FEATURES.
    GroupFeatures(GroupFeatures),
    /// OFPMP_METER.
    Meter(Vec<MeterStats>),
    /// OFPMP_METER_CONFIG.
    MeterConfig(Vec<Meter>),
    /// OFPMP_METER_FEATURES.
    MeterFeatures(MeterFeatures),
    /// OFPMP_PORT_DESC.
    PortDesc(Vec<Port>),
    /// Any other multipart type, kept raw.
    Unknown {
        /// OFPMP_* type.
        mp_type: u16,
        /// The body.
        body: Vec<u8>,
    },
}

/// An OFPT_MULTIPART_REPLY.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipartReply {
    /// OFPMPF_REPLY_* flags.
    pub flags: u16,
    /// The reply.
    pub body: MultipartReplyBody,
}

impl MultipartReply {
    /// A reply that is the last (or only) part.
    pub fn new(body: MultipartReplyBody) -> Self {
        MultipartReply { flags: 0, body }
    }

    /// True when more parts of this reply follow (OFPMPF_REPLY_MORE).
    pub fn more(&self) -> bool {
        self.flags & MULTIPART_MORE != 0
    }

    /// The OFPMP_* type.
    pub fn mp_type(&self) -> u16 {
        use MultipartReplyBody::*;
        match &self.body {
            Desc(_) => mp_type::DESC,
            Flow(_) => mp_type::FLOW,
            Aggregate(_) => mp_type::AGGREGATE,
            Table(_) => mp_type::TABLE,
            PortStats(_) => mp_type::PORT_STATS,
            Group(_) => mp_type::GROUP,
            GroupDesc(_) => mp_type::GROUP_DESC,
            GroupFeatures(_) => mp_type::GROUP_FEATURES,
            Meter(_) => mp_type::METER,
            MeterConfig(_) => mp_type::METER_CONFIG,
            MeterFeatures(_) => mp_type::METER_FEATURES,
            PortDesc(_) => mp_type::PORT_DESC,
            Unknown { mp_type, .. } => *mp_type,
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_multipart_reply";
        let t = r.u16(ctx)?;
        let flags = r.u16(ctx)?;
        r.skip(4, ctx)?;
        let body = match t {
            mp_type::DESC => {
                let c = "ofp_desc";
                let d = Desc {
                    mfr_desc: read_str(r, 256, c)?,
                    hw_desc: read_str(r, 256, c)?,
                    sw_desc: read_str(r, 256, c)?,
                    serial_num: read_str(r, 32, c)?,
                    dp_desc: read_str(r, 256, c)?,
                };
                end(r, c)?;
                MultipartReplyBody::Desc(d)
            }
            mp_type::FLOW => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    v.push(FlowStats::decode(r)?);
                }
                MultipartReplyBody::Flow(v)
            }
            mp_type::AGGREGATE => {
                let c = "ofp_aggregate_stats_reply";
                let a = AggregateStats {
                    packet_count: r.u64(c)?,
                    byte_count: r.u64(c)?,
                    flow_count: r.u32(c)?,
                };
                r.skip(4, c)?;
                end(r, c)?;
                MultipartReplyBody::Aggregate(a)
            }
            mp_type::TABLE => {
                let c = "ofp_table_stats";
                let mut v = Vec::new();
                while !r.is_empty() {
                    let table_id = r.u8(c)?;
                    r.skip(3, c)?;
                    v.push(TableStats {
                        table_id,
                        active_count: r.u32(c)?,
                        lookup_count: r.u64(c)?,
                        matched_count: r.u64(c)?,
                    });
                }
                MultipartReplyBody::Table(v)
            }
            mp_type::PORT_STATS => {
                let c = "ofp_port_stats";
                let mut v = Vec::new();
                while !r.is_empty() {
                    let mut e = r.sub(PORT_STATS_LEN, c)?;
                    let port_no = e.u32(c)?;
                    e.skip(4, c)?;
                    let mut counters = [0u64; 12];
                    for x in counters.iter_mut() {
                        *x = e.u64(c)?;
                    }
                    v.push(PortStats {
                        port_no,
                        counters,
                        duration_sec: e.u32(c)?,
                        duration_nsec: e.u32(c)?,
                    });
                }
                MultipartReplyBody::PortStats(v)
            }
            mp_type::GROUP => {
                let c = "ofp_group_stats";
                let mut v = Vec::new();
                while !r.is_empty() {
                    let len = usize::from(r.u16(c)?);
                    if len < GROUP_STATS_HEADER_LEN
                        || !(len - GROUP_STATS_HEADER_LEN).is_multiple_of(16)
                    {
                        return Err(DecodeError::BadLength {
                            context: "ofp_group_stats.length",
                            len,
                        });
                    }
                    let mut e = r.sub(len - 2, c)?;
                    e.skip(2, c)?;
                    let group_id = e.u32(c)?;
                    let ref_count = e.u32(c)?;
                    e.skip(4, c)?;
                    let packet_count = e.u64(c)?;
                    let byte_count = e.u64(c)?;
                    let duration_sec = e.u32(c)?;
                    let duration_nsec = e.u32(c)?;
                    let mut bucket_stats = Vec::new();
                    while !e.is_empty() {
                        bucket_stats.push((e.u64(c)?, e.u64(c)?));
                    }
                    v.push(GroupStats {
                        group_id,
                        ref_count,
                        packet_count,
                        byte_count,
                        duration_sec,
                        duration_nsec,
                        bucket_stats,
                    });
                }
                MultipartReplyBody::Group(v)
            }
            mp_type::GROUP_DESC => {
                let c = "ofp_group_desc";
                let mut v = Vec::new();
                while !r.is_empty() {
                    let len = usize::from(r.u16(c)?);
                    if len < 8 {
                        return Err(DecodeError::BadLength {
                            context: "ofp_group_desc.length",
                            len,
                        });
                    }
                    let mut e = r.sub(len - 2, c)?;
                    let group_type = GroupType::from_u8(e.u8(c)?);
                    e.skip(1, c)?;
                    let group_id = e.u32(c)?;
                    let buckets = decode_buckets(&mut e)?;
                    v.push(Group {
                        group_id,
                        group_type,
                        buckets,
                    });
                }
                MultipartReplyBody::GroupDesc(v)
            }
            mp_type::GROUP_FEATURES => {
                let c = "ofp_group_features";
                let g = GroupFeatures {
                    types: r.u32(c)?,
                    capabilities: r.u32(c)?,
                    max_groups: [r.u32(c)?, r.u32(c)?, r.u32(c)?, r.u32(c)?],
                    actions: [r.u32(c)?, r.u32(c)?, r.u32(c)?, r.u32(c)?],
                };
                end(r, c)?;
                MultipartReplyBody::GroupFeatures(g)
            }
            mp_type::METER => MultipartReplyBody::Meter(MeterStats::decode_all(r)?),
            mp_type::METER_CONFIG => {
                MultipartReplyBody::MeterConfig(crate::meter::decode_meter_configs(r)?)
            }
            mp_type::METER_FEATURES => {
                let f = MeterFeatures::decode(r)?;
                end(r, "ofp_meter_features")?;
                MultipartReplyBody::MeterFeatures(f)
            }
            mp_type::PORT_DESC => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    if r.remaining() < PORT_LEN {
                        return Err(DecodeError::BadLength {
                            context: "port description: not a whole ofp_port",
                            len: r.remaining(),
                        });
                    }
                    v.push(Port::decode(r)?);
                }
                MultipartReplyBody::PortDesc(v)
            }
            other => MultipartReplyBody::Unknown {
                mp_type: other,
                body: r.rest().to_vec(),
            },
        };
        Ok(MultipartReply { flags, body })
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u16(self.mp_type());
        w.put_u16(self.flags);
        w.put_zeros(4);
        use MultipartReplyBody::*;
        match &self.body {
            Desc(d) => {
                write_str(w, &d.mfr_desc, 256);
                write_str(w, &d.hw_desc, 256);
                write_str(w, &d.sw_desc, 256);
                write_str(w, &d.serial_num, 32);
                write_str(w, &d.dp_desc, 256);
            }
            Flow(v) => v.iter().for_each(|f| f.encode(w)),
            Aggregate(a) => {
                w.put_u64(a.packet_count);
                w.put_u64(a.byte_count);
                w.put_u32(a.flow_count);
                w.put_zeros(4);
            }
            Table(v) => {
                for t in v {
                    w.put_u8(t.table_id);
                    w.put_zeros(3);
                    w.put_u32(t.active_count);
                    w.put_u64(t.lookup_count);
                    w.put_u64(t.matched_count);
                }
            }
            PortStats(v) => {
                for p in v {
                    w.put_u32(p.port_no);
                    w.put_zeros(4);
                    p.counters.iter().for_each(|c| w.put_u64(*c));
                    w.put_u32(p.duration_sec);
                    w.put_u32(p.duration_nsec);
                }
            }
            Group(v) => {
                for g in v {
                    let start = w.len();
                    w.put_u16(0);
                    w.put_zeros(2);
                    w.put_u32(g.group_id);
                    w.put_u32(g.ref_count);
                    w.put_zeros(4);
                    w.put_u64(g.packet_count);
                    w.put_u64(g.byte_count);
                    w.put_u32(g.duration_sec);
                    w.put_u32(g.duration_nsec);
                    for (p, b) in &g.bucket_stats {
                        w.put_u64(*p);
                        w.put_u64(*b);
                    }
                    patch_len(w, start);
                }
            }
            GroupDesc(v) => {
                for g in v {
                    let start = w.len();
                    w.put_u16(0);
                    w.put_u8(g.group_type.to_u8());
                    w.put_u8(0);
                    w.put_u32(g.group_id);
                    encode_buckets(&g.buckets, w);
                    patch_len(w, start);
                }
            }
            GroupFeatures(g) => {
                w.put_u32(g.types);
                w.put_u32(g.capabilities);
                g.max_groups.iter().for_each(|x| w.put_u32(*x));
                g.actions.iter().for_each(|x| w.put_u32(*x));
            }
            Meter(v) => v.iter().for_each(|m| m.encode(w)),
            MeterConfig(v) => crate::meter::encode_meter_configs(v, w),
            MeterFeatures(f) => f.encode(w),
            PortDesc(v) => v.iter().for_each(|p| p.encode(w)),
            Unknown { body, .. } => w.put_slice(body),
        }
    }
}
