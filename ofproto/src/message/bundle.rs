//! The ONF bundle extension as Open vSwitch implements it for OpenFlow 1.3: experimenter
//! messages with experimenter ONF (0x4f4e4600), exp_type 2300 (bundle control) and 2301
//! (bundle add). The bodies are OpenFlow 1.4's (OpenFlow 1.4.1 §7.3.9, OVS openflow-1.4.h
//! `struct ofp14_bundle_ctrl_msg`), behind the 16-byte experimenter header.
//!
//! ```text
//! struct onf_exp_header { struct ofp_header header; uint32_t experimenter; uint32_t exp_type; };
//! bundle control: uint32_t bundle_id; uint16_t type; uint16_t flags; properties[]
//! bundle add:     uint32_t bundle_id; uint16_t pad; uint16_t flags;
//!                 struct ofp_header message (whole message); properties[]
//! ```
//! Open vSwitch requires the embedded message's xid to equal the bundle-add's own
//! (else OFPBFC_MSG_BAD_XID); [`BundleAdd::inner_xid`] None encodes exactly that.

use super::switch::Experimenter;
use super::{Message, MessageHeader, HEADER_LEN, ONF_EXPERIMENTER_ID};
use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

/// ONF exp_type of bundle control.
pub const ONF_ET_BUNDLE_CONTROL: u32 = 2300;
/// ONF exp_type of bundle add.
pub const ONF_ET_BUNDLE_ADD_MESSAGE: u32 = 2301;

/// OFPBCT_* bundle control types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BundleCtrlType {
    /// Open a bundle.
    OpenRequest,
    /// Bundle opened.
    OpenReply,
    /// Close a bundle.
    CloseRequest,
    /// Bundle closed.
    CloseReply,
    /// Commit (apply atomically).
    CommitRequest,
    /// Bundle committed.
    CommitReply,
    /// Discard.
    DiscardRequest,
    /// Bundle discarded.
    DiscardReply,
    /// An unknown type, kept.
    Unknown(u16),
}

impl BundleCtrlType {
    /// From the wire value.
    pub fn from_u16(v: u16) -> Self {
        use BundleCtrlType::*;
        match v {
            0 => OpenRequest,
            1 => OpenReply,
            2 => CloseRequest,
            3 => CloseReply,
            4 => CommitRequest,
            5 => CommitReply,
            6 => DiscardRequest,
            7 => DiscardReply,
            o => Unknown(o),
        }
    }
    /// The wire value.
    pub fn to_u16(self) -> u16 {
        use BundleCtrlType::*;
        match self {
            OpenRequest => 0,
            OpenReply => 1,
            CloseRequest => 2,
            CloseReply => 3,
            CommitRequest => 4,
            CommitReply => 5,
            DiscardRequest => 6,
            DiscardReply => 7,
            Unknown(o) => o,
        }
    }
    /// The name Open vSwitch prints (`COMMIT_REQUEST`).
    pub fn name(self) -> Option<&'static str> {
        use BundleCtrlType::*;
        Some(match self {
            OpenRequest => "OPEN_REQUEST",
            OpenReply => "OPEN_REPLY",
            CloseRequest => "CLOSE_REQUEST",
            CloseReply => "CLOSE_REPLY",
            CommitRequest => "COMMIT_REQUEST",
            CommitReply => "COMMIT_REPLY",
            DiscardRequest => "DISCARD_REQUEST",
            DiscardReply => "DISCARD_REPLY",
            Unknown(_) => return None,
        })
    }
}

/// OFPBF_* bundle flags.
pub struct BundleFlags;

impl BundleFlags {
    /// Execute atomically.
    pub const ATOMIC: u16 = 1 << 0;
    /// Execute in the specified order.
    pub const ORDERED: u16 = 1 << 1;
}

/// Bundle control (open/close/commit/discard and their replies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleControl {
    /// Bundle id.
    pub bundle_id: u32,
    /// Control type.
    pub ctrl_type: BundleCtrlType,
    /// OFPBF_* flags.
    pub flags: u16,
    /// Bundle properties, kept raw.
    pub properties: Vec<u8>,
}

impl BundleControl {
    /// A control message without properties.
    pub fn new(bundle_id: u32, ctrl_type: BundleCtrlType, flags: u16) -> Self {
        BundleControl {
            bundle_id,
            ctrl_type,
            flags,
            properties: Vec::new(),
        }
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(ONF_EXPERIMENTER_ID);
        w.put_u32(ONF_ET_BUNDLE_CONTROL);
        w.put_u32(self.bundle_id);
        w.put_u16(self.ctrl_type.to_u16());
        w.put_u16(self.flags);
        w.put_slice(&self.properties);
    }
}

/// Bundle add: one message to be applied when the bundle commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleAdd {
    /// Bundle id.
    pub bundle_id: u32,
    /// OFPBF_* flags.
    pub flags: u16,
    /// The embedded message's xid, when it differs from the bundle-add's own (Open vSwitch
    /// refuses that); None = the same xid.
    pub inner_xid: Option<u32>,
    /// The embedded message.
    pub message: Box<Message>,
    /// Bytes after the embedded message (properties), kept raw.
    pub properties: Vec<u8>,
}

impl BundleAdd {
    /// Add `message` to bundle `bundle_id` with the given flags.
    pub fn new(bundle_id: u32, flags: u16, message: Message) -> Self {
        BundleAdd {
            bundle_id,
            flags,
            inner_xid: None,
            message: Box::new(message),
            properties: Vec::new(),
        }
    }

    pub(crate) fn encode(&self, xid: u32, w: &mut Vec<u8>) {
        w.put_u32(ONF_EXPERIMENTER_ID);
        w.put_u32(ONF_ET_BUNDLE_ADD_MESSAGE);
        w.put_u32(self.bundle_id);
        w.put_u16(0);
        w.put_u16(self.flags);
        self.message.encode_into(self.inner_xid.unwrap_or(xid), w);
        w.put_slice(&self.properties);
    }
}

/// Decode an OFPT_EXPERIMENTER body: ONF bundles typed, everything else kept raw.
pub(crate) fn decode_experimenter(
    header: &MessageHeader,
    r: &mut Reader<'_>,
) -> Result<Message, DecodeError> {
    let experimenter = r.u32("ofp_experimenter_header.experimenter")?;
    let exp_type = r.u32("ofp_experimenter_header.exp_type")?;
    match (experimenter, exp_type) {
        (ONF_EXPERIMENTER_ID, ONF_ET_BUNDLE_CONTROL) => {
            let ctx = "bundle control";
            let bundle_id = r.u32(ctx)?;
            let ctrl_type = BundleCtrlType::from_u16(r.u16(ctx)?);
            let flags = r.u16(ctx)?;
            Ok(Message::BundleControl(BundleControl {
                bundle_id,
                ctrl_type,
                flags,
                properties: r.rest().to_vec(),
            }))
        }
        (ONF_EXPERIMENTER_ID, ONF_ET_BUNDLE_ADD_MESSAGE) => {
            let ctx = "bundle add";
            let bundle_id = r.u32(ctx)?;
            r.skip(2, ctx)?;
            let flags = r.u16(ctx)?;
            let inner = r.rest();
            let inner_header = MessageHeader::parse(inner)?;
            let len = usize::from(inner_header.length);
            if len < HEADER_LEN || len > inner.len() {
                return Err(DecodeError::BadLength {
                    context: "bundle add: embedded message",
                    len,
                });
            }
            let body = r.bytes(len, ctx)?.get(HEADER_LEN..).unwrap_or_default();
            let nested_bundle = inner_header.msg_type == super::msg_type::EXPERIMENTER
                && body.get(..4) == Some(&ONF_EXPERIMENTER_ID.to_be_bytes()[..])
                && matches!(body.get(4..8), Some([0, 0, 0x08, 0xfc | 0xfd]));
            if inner_header.msg_type == super::msg_type::HELLO || nested_bundle {
                // Neither a HELLO nor a bundle message can be bundled (OVS answers
                // OFPBFC_MSG_UNSUP); refusing them also bounds the decoder's recursion.
                return Err(DecodeError::BadValue {
                    context: "bundle add",
                    detail: "embedded message cannot be bundled".into(),
                });
            }
            let message = Message::decode_body(&inner_header, body)?;
            Ok(Message::BundleAdd(BundleAdd {
                bundle_id,
                flags,
                inner_xid: (inner_header.xid != header.xid).then_some(inner_header.xid),
                message: Box::new(message),
                properties: r.rest().to_vec(),
            }))
        }
        _ => Ok(Message::Experimenter(Experimenter {
            experimenter,
            exp_type,
            data: r.rest().to_vec(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode_message;
    use super::*;

    #[test]
    fn bundle_add_round_trips_with_embedded_message() {
        let add = Message::BundleAdd(BundleAdd::new(
            9,
            BundleFlags::ATOMIC | BundleFlags::ORDERED,
            Message::BarrierRequest,
        ));
        let raw = add.encode(0x7d);
        assert_eq!(raw.len(), 16 + 8 + 8);
        assert_eq!(&raw[24..32], &[4, 20, 0, 8, 0, 0, 0, 0x7d]);
        let (back, n) = decode_message(&raw).expect("bundle add");
        assert_eq!((back, n), (add, raw.len()));
    }

    #[test]
    fn embedded_length_beyond_the_outer_message_is_refused() {
        let mut raw = Message::BundleAdd(BundleAdd::new(1, 0, Message::BarrierRequest)).encode(1);
        raw[27] = 9; // inner length 9 > 8 bytes available
        assert!(matches!(
            decode_message(&raw),
            Err(DecodeError::BadLength { .. })
        ));
        raw[27] = 7;
        assert!(matches!(
            decode_message(&raw),
            Err(DecodeError::BadLength { .. })
        ));
    }

    #[test]
    fn other_experimenters_are_kept_raw() {
        let raw = [
            4, 4, 0, 20, 0, 0, 0, 1, 0, 0, 0x23, 0x20, 0, 0, 0, 7, 1, 2, 3, 4,
        ];
        let (m, _) = decode_message(&raw).expect("experimenter");
        assert!(
            matches!(&m, Message::Experimenter(e) if e.exp_type == 7 && e.data == [1, 2, 3, 4])
        );
        assert_eq!(m.encode(1), raw);
    }
}
