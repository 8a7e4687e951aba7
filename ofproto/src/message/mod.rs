//! OpenFlow 1.3 messages: `ofp_header` framing, every message flowmesh speaks, and their text in
//! `ovs-ofctl ofp-print` form.
//!
//! Layout of the folder: this file frames messages and dispatches on the type; each submodule
//! owns one family of bodies (`hello`, `error`, `switch` (features, config, ports, packet-in/out,
//! flow-removed, table-mod, role, async), `modify` (flow-mod, group-mod), `multipart`,
//! `bundle`); `print` renders them as Open vSwitch does.

mod bundle;
mod error;
mod hello;
mod modify;
mod multipart;
pub mod nicira;
mod print;
mod switch;

pub use bundle::{BundleAdd, BundleControl, BundleCtrlType, BundleFlags};
pub use error::{
    BadActionCode, BadInstructionCode, BadMatchCode, BadRequestCode, BundleFailedCode, ErrorKind,
    ErrorMsg, FlowModFailedCode, GroupModFailedCode, HelloFailedCode, MeterModFailedCode,
    PortModFailedCode, QueueOpFailedCode, RoleRequestFailedCode, SwitchConfigFailedCode,
    TableFeaturesFailedCode, TableModFailedCode,
};
pub use hello::{Hello, HelloElement};
pub use multipart::{
    mp_type, AggregateStats, Desc, FlowStats, FlowStatsRequest, GroupFeatures, GroupStats,
    MultipartReply, MultipartReplyBody, MultipartRequest, MultipartRequestBody, PortStats,
    TableStats,
};
pub use print::{hex_dump, ofp_print, parse_hex, MessageDisplay};
pub use switch::{
    AsyncConfig, Experimenter, FlowRemoved, PacketIn, PacketOut, Port, PortStatus, Role,
    RoleRequest, SwitchConfig, SwitchFeatures, TableMod,
};

use crate::error::DecodeError;
use crate::flow::{FlowMod, GroupMod};
use crate::wire::{Reader, Writer};

/// OpenFlow 1.3 wire version.
pub const OFP_VERSION: u8 = 0x04;
/// Size of `ofp_header`.
pub const HEADER_LEN: usize = 8;
/// Experimenter id of the Open Networking Foundation (ONF extensions such as bundles in 1.3).
pub const ONF_EXPERIMENTER_ID: u32 = 0x4f4e_4600;
/// Experimenter id of Nicira (Open vSwitch extensions).
pub const NX_EXPERIMENTER_ID: u32 = 0x0000_2320;

/// OFPT_* message type numbers (OpenFlow 1.3.5 §7.1, `ofp_type`).
pub mod msg_type {
    /// Symmetric: HELLO.
    pub const HELLO: u8 = 0;
    /// Symmetric: ERROR.
    pub const ERROR: u8 = 1;
    /// Symmetric: ECHO_REQUEST.
    pub const ECHO_REQUEST: u8 = 2;
    /// Symmetric: ECHO_REPLY.
    pub const ECHO_REPLY: u8 = 3;
    /// Symmetric: EXPERIMENTER.
    pub const EXPERIMENTER: u8 = 4;
    /// Controller/switch: FEATURES_REQUEST.
    pub const FEATURES_REQUEST: u8 = 5;
    /// Controller/switch: FEATURES_REPLY.
    pub const FEATURES_REPLY: u8 = 6;
    /// Controller/switch: GET_CONFIG_REQUEST.
    pub const GET_CONFIG_REQUEST: u8 = 7;
    /// Controller/switch: GET_CONFIG_REPLY.
    pub const GET_CONFIG_REPLY: u8 = 8;
    /// Controller/switch: SET_CONFIG.
    pub const SET_CONFIG: u8 = 9;
    /// Async: PACKET_IN.
    pub const PACKET_IN: u8 = 10;
    /// Async: FLOW_REMOVED.
    pub const FLOW_REMOVED: u8 = 11;
    /// Async: PORT_STATUS.
    pub const PORT_STATUS: u8 = 12;
    /// Controller command: PACKET_OUT.
    pub const PACKET_OUT: u8 = 13;
    /// Controller command: FLOW_MOD.
    pub const FLOW_MOD: u8 = 14;
    /// Controller command: GROUP_MOD.
    pub const GROUP_MOD: u8 = 15;
    /// Controller command: PORT_MOD.
    pub const PORT_MOD: u8 = 16;
    /// Controller command: TABLE_MOD.
    pub const TABLE_MOD: u8 = 17;
    /// Multipart: MULTIPART_REQUEST.
    pub const MULTIPART_REQUEST: u8 = 18;
    /// Multipart: MULTIPART_REPLY.
    pub const MULTIPART_REPLY: u8 = 19;
    /// Barrier: BARRIER_REQUEST.
    pub const BARRIER_REQUEST: u8 = 20;
    /// Barrier: BARRIER_REPLY.
    pub const BARRIER_REPLY: u8 = 21;
    /// Queue: QUEUE_GET_CONFIG_REQUEST.
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 22;
    /// Queue: QUEUE_GET_CONFIG_REPLY.
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 23;
    /// Role: ROLE_REQUEST.
    pub const ROLE_REQUEST: u8 = 24;
    /// Role: ROLE_REPLY.
    pub const ROLE_REPLY: u8 = 25;
    /// Async config: GET_ASYNC_REQUEST.
    pub const GET_ASYNC_REQUEST: u8 = 26;
    /// Async config: GET_ASYNC_REPLY.
    pub const GET_ASYNC_REPLY: u8 = 27;
    /// Async config: SET_ASYNC.
    pub const SET_ASYNC: u8 = 28;
    /// Meters: METER_MOD (the last OpenFlow 1.3 type).
    pub const METER_MOD: u8 = 29;
}

/// The `ofp_header` every message starts with (OpenFlow 1.3.5 §7.1).
///
/// ```text
/// struct ofp_header { uint8_t version; uint8_t type; uint16_t length; uint32_t xid; };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageHeader {
    /// Wire version (0x04 for OpenFlow 1.3).
    pub version: u8,
    /// OFPT_* type.
    pub msg_type: u8,
    /// Total length of the message, header included.
    pub length: u16,
    /// Transaction id.
    pub xid: u32,
}

impl MessageHeader {
    /// Parse the 8-byte header at the start of `buf` (checks only that 8 bytes exist).
    pub fn parse(buf: &[u8]) -> Result<MessageHeader, DecodeError> {
        let mut r = Reader::new(buf);
        Ok(MessageHeader {
            version: r.u8("ofp_header.version")?,
            msg_type: r.u8("ofp_header.type")?,
            length: r.u16("ofp_header.length")?,
            xid: r.u32("ofp_header.xid")?,
        })
    }
}

/// One OpenFlow 1.3 message (without its xid, which travels beside it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// OFPT_HELLO (any version: its header version is kept in the body).
    Hello(Hello),
    /// OFPT_ERROR.
    Error(ErrorMsg),
    /// OFPT_ECHO_REQUEST with its payload.
    EchoRequest(Vec<u8>),
    /// OFPT_ECHO_REPLY with its payload.
    EchoReply(Vec<u8>),
    /// OFPT_EXPERIMENTER not otherwise modelled, kept raw.
    Experimenter(Experimenter),
    /// OFPT_FEATURES_REQUEST.
    FeaturesRequest,
    /// OFPT_FEATURES_REPLY.
    FeaturesReply(SwitchFeatures),
    /// OFPT_GET_CONFIG_REQUEST.
    GetConfigRequest,
    /// OFPT_GET_CONFIG_REPLY.
    GetConfigReply(SwitchConfig),
    /// OFPT_SET_CONFIG.
    SetConfig(SwitchConfig),
    /// OFPT_PACKET_IN.
    PacketIn(PacketIn),
    /// OFPT_FLOW_REMOVED.
    FlowRemoved(FlowRemoved),
    /// OFPT_PORT_STATUS.
    PortStatus(PortStatus),
    /// OFPT_PACKET_OUT.
    PacketOut(PacketOut),
    /// OFPT_FLOW_MOD.
    FlowMod(FlowMod),
    /// OFPT_GROUP_MOD.
    GroupMod(GroupMod),
    /// OFPT_METER_MOD.
    MeterMod(crate::meter::MeterMod),
    /// OFPT_TABLE_MOD.
    TableMod(TableMod),
    /// OFPT_MULTIPART_REQUEST.
    MultipartRequest(MultipartRequest),
    /// OFPT_MULTIPART_REPLY.
    MultipartReply(MultipartReply),
    /// OFPT_BARRIER_REQUEST.
    BarrierRequest,
    /// OFPT_BARRIER_REPLY.
    BarrierReply,
    /// OFPT_ROLE_REQUEST.
    RoleRequest(RoleRequest),
    /// OFPT_ROLE_REPLY.
    RoleReply(RoleRequest),
    /// OFPT_GET_ASYNC_REQUEST.
    GetAsyncRequest,
    /// OFPT_GET_ASYNC_REPLY.
    GetAsyncReply(AsyncConfig),
    /// OFPT_SET_ASYNC.
    SetAsync(AsyncConfig),
    /// ONF bundle control (experimenter ONF, exp_type 2300).
    BundleControl(BundleControl),
    /// ONF bundle add (experimenter ONF, exp_type 2301).
    BundleAdd(BundleAdd),
    /// An OpenFlow 1.3 message type flowmesh does not model (PORT_MOD, queue config), kept
    /// as its exact body.
    Unknown {
        /// OFPT_* type.
        msg_type: u8,
        /// The bytes after the header.
        body: Vec<u8>,
    },
}

impl Message {
    /// The OFPT_* type this message is sent as.
    pub fn msg_type(&self) -> u8 {
        use msg_type::*;
        match self {
            Message::Hello(_) => HELLO,
            Message::Error(_) => ERROR,
            Message::EchoRequest(_) => ECHO_REQUEST,
            Message::EchoReply(_) => ECHO_REPLY,
            Message::Experimenter(_) | Message::BundleControl(_) | Message::BundleAdd(_) => {
                EXPERIMENTER
            }
            Message::FeaturesRequest => FEATURES_REQUEST,
            Message::FeaturesReply(_) => FEATURES_REPLY,
            Message::GetConfigRequest => GET_CONFIG_REQUEST,
            Message::GetConfigReply(_) => GET_CONFIG_REPLY,
            Message::SetConfig(_) => SET_CONFIG,
            Message::PacketIn(_) => PACKET_IN,
            Message::FlowRemoved(_) => FLOW_REMOVED,
            Message::PortStatus(_) => PORT_STATUS,
            Message::PacketOut(_) => PACKET_OUT,
            Message::FlowMod(_) => FLOW_MOD,
            Message::GroupMod(_) => GROUP_MOD,
            Message::MeterMod(_) => METER_MOD,
            Message::TableMod(_) => TABLE_MOD,
            Message::MultipartRequest(_) => MULTIPART_REQUEST,
            Message::MultipartReply(_) => MULTIPART_REPLY,
            Message::BarrierRequest => BARRIER_REQUEST,
            Message::BarrierReply => BARRIER_REPLY,
            Message::RoleRequest(_) => ROLE_REQUEST,
            Message::RoleReply(_) => ROLE_REPLY,
            Message::GetAsyncRequest => GET_ASYNC_REQUEST,
            Message::GetAsyncReply(_) => GET_ASYNC_REPLY,
            Message::SetAsync(_) => SET_ASYNC,
            Message::Unknown { msg_type, .. } => *msg_type,
        }
    }

    /// The wire version of this message (0x04, except for a HELLO that carries another).
    pub fn version(&self) -> u8 {
        match self {
            Message::Hello(h) => h.version,
            _ => OFP_VERSION,
        }
    }

    /// Encode with the given xid.
    ///
    /// A message whose encoding exceeds 65,535 bytes cannot be framed; its length field is
    /// then wrong. Use [`Message::try_encode`] where that can happen (e.g. huge replies).
    pub fn encode(&self, xid: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(xid, &mut out);
        out
    }

    /// Encode with the given xid, refusing messages longer than 65,535 bytes.
    pub fn try_encode(&self, xid: u32) -> Result<Vec<u8>, DecodeError> {
        let out = self.encode(xid);
        if out.len() > usize::from(u16::MAX) {
            return Err(DecodeError::BadLength {
                context: "message too long to frame",
                len: out.len(),
            });
        }
        Ok(out)
    }

    /// Append the encoding (with the given xid) to `out`.
    pub fn encode_into(&self, xid: u32, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u8(self.version());
        out.put_u8(self.msg_type());
        out.put_u16(0);
        out.put_u32(xid);
        self.encode_body(xid, out);
        let len = (out.len() - start).min(usize::from(u16::MAX)) as u16;
        out.patch_u16(start + 2, len);
    }

    fn encode_body(&self, xid: u32, w: &mut Vec<u8>) {
        match self {
            Message::Hello(h) => h.encode(w),
            Message::Error(e) => e.encode(w),
            Message::EchoRequest(d) | Message::EchoReply(d) => w.put_slice(d),
            Message::Experimenter(e) => e.encode(w),
            Message::FeaturesRequest
            | Message::GetConfigRequest
            | Message::BarrierRequest
            | Message::BarrierReply
            | Message::GetAsyncRequest => {}
            Message::FeaturesReply(f) => f.encode(w),
            Message::GetConfigReply(c) | Message::SetConfig(c) => c.encode(w),
            Message::PacketIn(p) => p.encode(w),
            Message::FlowRemoved(f) => f.encode(w),
            Message::PortStatus(p) => p.encode(w),
            Message::PacketOut(p) => p.encode(w),
            Message::FlowMod(f) => modify::encode_flow_mod(f, w),
            Message::GroupMod(g) => modify::encode_group_mod(g, w),
            Message::MeterMod(mm) => mm.encode(w),
            Message::TableMod(t) => t.encode(w),
            Message::MultipartRequest(m) => m.encode(w),
            Message::MultipartReply(m) => m.encode(w),
            Message::RoleRequest(r) | Message::RoleReply(r) => r.encode(w),
            Message::GetAsyncReply(a) | Message::SetAsync(a) => a.encode(w),
            Message::BundleControl(b) => b.encode(w),
            Message::BundleAdd(b) => b.encode(xid, w),
            Message::Unknown { body, .. } => w.put_slice(body),
        }
    }

    /// Decode the body of a message whose header has been parsed; `body` is exactly the bytes
    /// after the header.
    pub fn decode_body(header: &MessageHeader, body: &[u8]) -> Result<Message, DecodeError> {
        use msg_type::*;
        if header.version != OFP_VERSION && header.msg_type != HELLO {
            return Err(DecodeError::BadVersion(header.version));
        }
        let mut r = Reader::new(body);
        let msg = match header.msg_type {
            HELLO => Message::Hello(Hello::decode(header.version, &mut r)?),
            ERROR => Message::Error(ErrorMsg::decode(&mut r)?),
            ECHO_REQUEST => Message::EchoRequest(body.to_vec()),
            ECHO_REPLY => Message::EchoReply(body.to_vec()),
            EXPERIMENTER => bundle::decode_experimenter(header, &mut r)?,
            FEATURES_REQUEST => empty(&r, Message::FeaturesRequest)?,
            FEATURES_REPLY => Message::FeaturesReply(SwitchFeatures::decode(&mut r)?),
            GET_CONFIG_REQUEST => empty(&r, Message::GetConfigRequest)?,
            GET_CONFIG_REPLY => Message::GetConfigReply(SwitchConfig::decode(&mut r)?),
            SET_CONFIG => Message::SetConfig(SwitchConfig::decode(&mut r)?),
            PACKET_IN => Message::PacketIn(PacketIn::decode(&mut r)?),
            FLOW_REMOVED => Message::FlowRemoved(FlowRemoved::decode(&mut r)?),
            PORT_STATUS => Message::PortStatus(PortStatus::decode(&mut r)?),
            PACKET_OUT => Message::PacketOut(PacketOut::decode(&mut r)?),
            FLOW_MOD => Message::FlowMod(modify::decode_flow_mod(&mut r)?),
            GROUP_MOD => Message::GroupMod(modify::decode_group_mod(&mut r)?),
            TABLE_MOD => Message::TableMod(TableMod::decode(&mut r)?),
            MULTIPART_REQUEST => Message::MultipartRequest(MultipartRequest::decode(&mut r)?),
            MULTIPART_REPLY => Message::MultipartReply(MultipartReply::decode(&mut r)?),
            BARRIER_REQUEST => empty(&r, Message::BarrierRequest)?,
            BARRIER_REPLY => empty(&r, Message::BarrierReply)?,
            ROLE_REQUEST => Message::RoleRequest(RoleRequest::decode(&mut r)?),
            ROLE_REPLY => Message::RoleReply(RoleRequest::decode(&mut r)?),
            GET_ASYNC_REQUEST => empty(&r, Message::GetAsyncRequest)?,
            GET_ASYNC_REPLY => Message::GetAsyncReply(AsyncConfig::decode(&mut r)?),
            SET_ASYNC => Message::SetAsync(AsyncConfig::decode(&mut r)?),
            METER_MOD => Message::MeterMod(crate::meter::MeterMod::decode(&mut r)?),
            PORT_MOD | QUEUE_GET_CONFIG_REQUEST | QUEUE_GET_CONFIG_REPLY => Message::Unknown {
                msg_type: header.msg_type,
                body: body.to_vec(),
            },
            other => return Err(DecodeError::BadType(other)),
        };
        Ok(msg)
    }
}

/// Messages with no body must have none.
fn empty(r: &Reader<'_>, msg: Message) -> Result<Message, DecodeError> {
    if !r.is_empty() {
        return Err(DecodeError::BadLength {
            context: "body of a message that has none",
            len: HEADER_LEN + r.remaining(),
        });
    }
    Ok(msg)
}

/// The length of the first message in `buf`, or None if `buf` does not hold all of it yet.
///
/// A header whose length is below 8 can never be framed: that is an error, and the stream
/// cannot continue.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let header = MessageHeader::parse(buf)?;
    let len = usize::from(header.length);
    if len < HEADER_LEN {
        return Err(DecodeError::BadLength {
            context: "ofp_header.length",
            len,
        });
    }
    Ok((buf.len() >= len).then_some(len))
}

/// Decode the first message of `buf` with its header; returns it and the bytes it used.
pub fn decode_frame(buf: &[u8]) -> Result<(MessageHeader, Message, usize), DecodeError> {
    let header = MessageHeader::parse(buf)?;
    let len = match frame_len(buf)? {
        Some(len) => len,
        None => {
            return Err(DecodeError::Truncated {
                context: "message",
                need: usize::from(header.length),
                have: buf.len(),
            })
        }
    };
    let body = buf.get(HEADER_LEN..len).unwrap_or_default();
    let msg = Message::decode_body(&header, body)?;
    Ok((header, msg, len))
}

/// Decode the first message of `buf`; returns it and the number of bytes it used.
pub fn decode_message(buf: &[u8]) -> Result<(Message, usize), DecodeError> {
    decode_frame(buf).map(|(_, msg, len)| (msg, len))
}

/// Splits a byte stream (e.g. a TCP connection) into whole messages.
///
/// Feed it bytes as they arrive with [`Framer::push`]; [`Framer::next_frame`] hands out each
/// complete message's bytes, and None while the next message is still partial.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    start: usize,
}

impl Framer {
    /// An empty framer.
    pub fn new() -> Self {
        Framer::default()
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that do not yet form a whole message.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next complete message's bytes (header included), None if more input is needed.
    /// An error (a header length below 8) means the stream is unrecoverable.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, DecodeError> {
        let rest = self.buf.get(self.start..).unwrap_or_default();
        match frame_len(rest)? {
            None => Ok(None),
            Some(len) => {
                let s = self.start;
                self.start += len;
                Ok(self.buf.get(s..s + len))
            }
        }
    }

    /// The next complete message, decoded with its header; None if more input is needed.
    /// The outer error is a framing error; the inner one a message that could not be decoded
    /// (the stream can go on).
    #[allow(clippy::type_complexity)]
    pub fn next_message(
        &mut self,
    ) -> Result<Option<(MessageHeader, Result<Message, DecodeError>)>, DecodeError> {
        match self.next_frame()? {
            None => Ok(None),
            Some(frame) => {
                let header = MessageHeader::parse(frame)?;
                let body = frame.get(HEADER_LEN..).unwrap_or_default();
                Ok(Some((header, Message::decode_body(&header, body))))
            }
        }
    }
}

/// Read a fixed-width NUL-padded string field, keeping the bytes before the first NUL.
pub(crate) fn read_str(
    r: &mut Reader<'_>,
    n: usize,
    ctx: &'static str,
) -> Result<Vec<u8>, DecodeError> {
    let b = r.bytes(n, ctx)?;
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    Ok(b.get(..end).unwrap_or_default().to_vec())
}

/// Write a fixed-width NUL-padded string field (truncated to the width).
pub(crate) fn write_str(w: &mut Vec<u8>, s: &[u8], n: usize) {
    let s = s.get(..s.len().min(n)).unwrap_or_default();
    w.put_slice(s);
    w.put_zeros(n - s.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framer_waits_for_whole_messages() {
        let a = Message::EchoRequest(b"abc".to_vec()).encode(7);
        let b = Message::BarrierRequest.encode(8);
        let stream: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        let mut f = Framer::new();
        f.push(&stream[..5]);
        assert_eq!(f.next_frame().ok(), Some(None));
        f.push(&stream[5..12]);
        assert_eq!(f.next_frame().ok().flatten(), Some(&a[..]));
        assert_eq!(f.next_frame().ok(), Some(None));
        f.push(&stream[12..]);
        let (h, m) = f.next_message().ok().flatten().expect("barrier");
        assert_eq!((h.xid, m), (8, Ok(Message::BarrierRequest)));
        assert_eq!(f.pending(), 0);
    }

    #[test]
    fn header_length_below_8_is_a_framing_error() {
        let mut f = Framer::new();
        f.push(&[4, 2, 0, 7, 0, 0, 0, 1]);
        assert!(matches!(
            f.next_frame(),
            Err(DecodeError::BadLength { len: 7, .. })
        ));
    }

    #[test]
    fn length_beyond_buffer_is_truncated() {
        let buf = [4, 20, 0, 9, 0, 0, 0, 1];
        assert!(matches!(
            decode_message(&buf),
            Err(DecodeError::Truncated { need: 9, .. })
        ));
    }

    #[test]
    fn other_versions_are_refused_except_hello() {
        let buf = [1, 20, 0, 8, 0, 0, 0, 1];
        assert_eq!(decode_message(&buf), Err(DecodeError::BadVersion(1)));
        let hello = [1, 0, 0, 8, 0, 0, 0, 1];
        let (m, n) = decode_message(&hello).expect("hello 1.0");
        assert_eq!(n, 8);
        assert_eq!(m.version(), 1);
        assert_eq!(m.encode(1), hello);
    }

    #[test]
    fn types_beyond_of13_are_bad_type_and_unmodelled_are_kept() {
        let buf = [4, 30, 0, 8, 0, 0, 0, 1];
        assert_eq!(decode_message(&buf), Err(DecodeError::BadType(30)));
        assert_eq!(DecodeError::BadType(30).ofp_error(), (1, 1));
        let port_mod = [4, 16, 0, 10, 0, 0, 0, 1, 0xaa, 0xbb];
        let (m, _) = decode_message(&port_mod).expect("port mod");
        assert_eq!(m.encode(1), port_mod);
    }

    #[test]
    fn bodyless_messages_refuse_a_body() {
        let buf = [4, 20, 0, 9, 0, 0, 0, 1, 0];
        assert!(matches!(
            decode_message(&buf),
            Err(DecodeError::BadLength { .. })
        ));
    }
}
