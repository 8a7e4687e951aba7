//! The Nicira (Open vSwitch) messages a second, listening OpenFlow connection needs: a
//! controller id of its own (NXT_SET_CONTROLLER_ID), packet-ins in the NXT_PACKET_IN2 format
//! (NXT_SET_PACKET_IN_FORMAT), and NXT_PACKET_IN2 itself, which carries a controller action's
//! `userdata` (OpenFlow 1.3's OFPT_PACKET_IN has no room for it).
//!
//! They travel as OFPT_EXPERIMENTER with experimenter 0x00002320 ([`Experimenter`]); these
//! are the typed views (Open vSwitch `include/openflow/nicira-ext.h`, `lib/ofp-packet.c`):
//!
//! ```text
//! NXT_SET_CONTROLLER_ID (20):     uint8_t zero[6]; ovs_be16 controller_id;
//! NXT_SET_PACKET_IN_FORMAT (16):  ovs_be32 format;      /* NXPIF_NXT_PACKET_IN2 = 2 */
//! NXT_PACKET_IN2 (30):            properties { ovs_be16 type; ovs_be16 len; value; }
//!                                 each padded to 8 bytes (`len` excludes the padding)
//!     NXPINT_PACKET 0 (bytes) FULL_LEN 1 (be32) BUFFER_ID 2 (be32) TABLE_ID 3 (u8)
//!     COOKIE 4 (be64, after 4 pad bytes) REASON 5 (u8) METADATA 6 (OXM fields)
//!     USERDATA 7 (bytes) CONTINUATION 8 (nested)
//! ```

use super::{Experimenter, Message, NX_EXPERIMENTER_ID};
use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

/// Nicira message subtypes used here.
pub mod nxt {
    /// NXT_SET_PACKET_IN_FORMAT.
    pub const SET_PACKET_IN_FORMAT: u32 = 16;
    /// NXT_SET_CONTROLLER_ID.
    pub const SET_CONTROLLER_ID: u32 = 20;
    /// NXT_PACKET_IN2.
    pub const PACKET_IN2: u32 = 30;
}

/// NXPIF_NXT_PACKET_IN2: packet-ins as NXT_PACKET_IN2.
pub const PACKET_IN_FORMAT_NXT_PACKET_IN2: u32 = 2;

/// NXT_SET_CONTROLLER_ID: this connection's controller id; `controller(id=N)` actions send
/// their packets to the connections with id N only.
pub fn set_controller_id(id: u16) -> Message {
    let mut data = vec![0u8; 6];
    data.put_u16(id);
    Message::Experimenter(Experimenter {
        experimenter: NX_EXPERIMENTER_ID,
        exp_type: nxt::SET_CONTROLLER_ID,
        data,
    })
}

/// NXT_SET_PACKET_IN_FORMAT: packet-ins on this connection as NXT_PACKET_IN2 (with userdata).
pub fn set_packet_in_format_nxt2() -> Message {
    let mut data = Vec::new();
    data.put_u32(PACKET_IN_FORMAT_NXT_PACKET_IN2);
    Message::Experimenter(Experimenter {
        experimenter: NX_EXPERIMENTER_ID,
        exp_type: nxt::SET_PACKET_IN_FORMAT,
        data,
    })
}

/// NXPINT_* property types of NXT_PACKET_IN2.
mod nxpint {
    pub const PACKET: u16 = 0;
    pub const FULL_LEN: u16 = 1;
    pub const BUFFER_ID: u16 = 2;
    pub const TABLE_ID: u16 = 3;
    pub const COOKIE: u16 = 4;
    pub const REASON: u16 = 5;
    pub const METADATA: u16 = 6;
    pub const USERDATA: u16 = 7;
    pub const CONTINUATION: u16 = 8;
}

/// An NXT_PACKET_IN2: what a `controller(...)` action sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketIn2 {
    /// The packet (as far as the action's max_len allowed).
    pub packet: Vec<u8>,
    /// The packet's full length, when the packet was truncated.
    pub full_len: Option<u32>,
    /// Buffer id, when buffered.
    pub buffer_id: Option<u32>,
    /// The table of the flow that sent it.
    pub table_id: u8,
    /// The cookie of the flow that sent it.
    pub cookie: u64,
    /// OFPR_* reason (1: a controller action).
    pub reason: u8,
    /// The packet's metadata (registers, tunnel, conntrack, in_port) as raw OXM fields.
    pub metadata: Vec<u8>,
    /// The action's `userdata`.
    pub userdata: Vec<u8>,
    /// Whether the packet carries a continuation (a paused pipeline).
    pub continuation: bool,
}

impl PacketIn2 {
    /// The NXT_PACKET_IN2 in an experimenter message; None when it is another message.
    pub fn from_message(m: &Message) -> Option<Result<PacketIn2, DecodeError>> {
        match m {
            Message::Experimenter(e)
                if e.experimenter == NX_EXPERIMENTER_ID && e.exp_type == nxt::PACKET_IN2 =>
            {
                Some(PacketIn2::decode(&e.data))
            }
            _ => None,
        }
    }

    /// Decode the properties (the bytes after the experimenter header).
    pub fn decode(data: &[u8]) -> Result<PacketIn2, DecodeError> {
        let ctx = "NXT_PACKET_IN2 property";
        let mut r = Reader::new(data);
        let mut p = PacketIn2::default();
        let mut seen_packet = false;
        while !r.is_empty() {
            let t = r.u16(ctx)?;
            let len = usize::from(r.u16(ctx)?);
            if len < 4 {
                return Err(DecodeError::BadLength {
                    context: "NXT_PACKET_IN2 property length",
                    len,
                });
            }
            let mut v = r.sub(len - 4, ctx)?;
            // Properties are padded to 8 bytes; the padding is not part of `len`.
            let pad = (8 - len % 8) % 8;
            r.skip(pad.min(r.remaining()), ctx)?;
            let exact = |v: &Reader<'_>, n: usize| {
                if v.remaining() == n {
                    Ok(())
                } else {
                    Err(DecodeError::BadLength {
                        context: "NXT_PACKET_IN2 property value",
                        len,
                    })
                }
            };
            match t {
                nxpint::PACKET => {
                    p.packet = v.rest().to_vec();
                    seen_packet = true;
                }
                nxpint::FULL_LEN => {
                    exact(&v, 4)?;
                    p.full_len = Some(v.u32(ctx)?);
                }
                nxpint::BUFFER_ID => {
                    exact(&v, 4)?;
                    p.buffer_id = Some(v.u32(ctx)?);
                }
                nxpint::TABLE_ID => {
                    exact(&v, 1)?;
                    p.table_id = v.u8(ctx)?;
                }
                nxpint::COOKIE => {
                    // A 64-bit value sits 8-aligned: 4 pad bytes after the header.
                    match v.remaining() {
                        12 => v.skip(4, ctx)?,
                        8 => {}
                        _ => exact(&v, 12)?,
                    }
                    p.cookie = v.u64(ctx)?;
                }
                nxpint::REASON => {
                    exact(&v, 1)?;
                    p.reason = v.u8(ctx)?;
                }
                nxpint::METADATA => p.metadata = v.rest().to_vec(),
                nxpint::USERDATA => p.userdata = v.rest().to_vec(),
                nxpint::CONTINUATION => p.continuation = true,
                _ => {} // other properties are not needed here
            }
        }
        if !seen_packet {
            return Err(DecodeError::BadValue {
                context: "NXT_PACKET_IN2",
                detail: "no packet property".into(),
            });
        }
        Ok(p)
    }

    /// Encode as the experimenter message's data (what Open vSwitch sends; for tests and
    /// fakes).
    pub fn encode(&self) -> Vec<u8> {
        fn prop(w: &mut Vec<u8>, t: u16, value: &[u8]) {
            w.put_u16(t);
            w.put_u16((4 + value.len()).min(usize::from(u16::MAX)) as u16);
            w.put_slice(value);
            w.put_zeros((8 - (4 + value.len()) % 8) % 8);
        }
        let mut w = Vec::new();
        prop(&mut w, nxpint::PACKET, &self.packet);
        if let Some(n) = self.full_len {
            prop(&mut w, nxpint::FULL_LEN, &n.to_be_bytes());
        }
        if let Some(b) = self.buffer_id {
            prop(&mut w, nxpint::BUFFER_ID, &b.to_be_bytes());
        }
        prop(&mut w, nxpint::TABLE_ID, &[self.table_id]);
        let mut cookie = vec![0u8; 4];
        cookie.extend_from_slice(&self.cookie.to_be_bytes());
        prop(&mut w, nxpint::COOKIE, &cookie);
        prop(&mut w, nxpint::REASON, &[self.reason]);
        if !self.metadata.is_empty() {
            prop(&mut w, nxpint::METADATA, &self.metadata);
        }
        if !self.userdata.is_empty() {
            prop(&mut w, nxpint::USERDATA, &self.userdata);
        }
        w
    }

    /// As an experimenter message.
    pub fn to_message(&self) -> Message {
        Message::Experimenter(Experimenter {
            experimenter: NX_EXPERIMENTER_ID,
            exp_type: nxt::PACKET_IN2,
            data: self.encode(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_in2_round_trips_and_keeps_userdata() {
        let p = PacketIn2 {
            packet: (0..61).collect(),
            full_len: None,
            buffer_id: None,
            table_id: 80,
            cookie: 0x0905_0000_1234_5678,
            reason: 1,
            metadata: vec![0x80, 0, 0, 4, 0, 0, 0, 3],
            userdata: b"\x01verdict".to_vec(),
            continuation: false,
        };
        let m = p.to_message();
        let back = PacketIn2::from_message(&m)
            .expect("a packet-in2")
            .expect("decodes");
        assert_eq!(back, p);
        assert!(PacketIn2::from_message(&set_controller_id(7)).is_none());
    }

    #[test]
    fn bad_properties_are_errors_not_panics() {
        for bad in [
            &[0u8, 0, 0, 2][..],                       // length below the header
            &[0, 0, 0, 40, 1, 2][..],                  // runs past the end
            &[0, 3, 0, 6, 1, 2, 0, 0][..],             // table id of 2 bytes
            &[0, 4, 0, 9, 0, 0, 0, 0, 1, 0, 0, 0][..], // cookie of 5 bytes
            &[0, 7, 0, 5, 1, 0, 0, 0][..],             // userdata but no packet
        ] {
            assert!(PacketIn2::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn controller_id_and_format_bodies() {
        let Message::Experimenter(e) = set_controller_id(0xf10e) else {
            panic!("experimenter")
        };
        assert_eq!(
            (e.exp_type, e.data),
            (20, vec![0, 0, 0, 0, 0, 0, 0xf1, 0x0e])
        );
        let Message::Experimenter(e) = set_packet_in_format_nxt2() else {
            panic!("experimenter")
        };
        assert_eq!((e.exp_type, e.data), (16, vec![0, 0, 0, 2]));
    }
}
