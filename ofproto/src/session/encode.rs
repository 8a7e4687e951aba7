//! Encoding straight into the session's write buffer, without building a message value per
//! message: the ONF BUNDLE_ADD framing around a borrowed message.

use crate::message::{msg_type, Message, OFP_VERSION, ONF_EXPERIMENTER_ID};

/// ONF exp_type of bundle add.
const ONF_ET_BUNDLE_ADD_MESSAGE: u32 = 2301;
/// Bytes of BUNDLE_ADD before the embedded message.
const BUNDLE_ADD_HEADER_LEN: usize = 24;

/// The encoded message did not fit a 16-bit OpenFlow length; nothing was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("message of {0} bytes is longer than OpenFlow's 65,535-byte limit")]
pub struct TooLong(pub usize);

/// Appends `msg` with `xid` to `out`; refuses (and appends nothing) if it exceeds 65,535
/// bytes.
pub fn encode_message(msg: &Message, xid: u32, out: &mut Vec<u8>) -> Result<(), TooLong> {
    let start = out.len();
    msg.encode_into(xid, out);
    check(out, start)
}

/// Appends an ONF BUNDLE_ADD (experimenter 0x4f4e4600, exp_type 2301) with `xid` that carries
/// `msg` encoded with the same xid, as Open vSwitch requires. Byte-identical to encoding
/// `Message::BundleAdd(BundleAdd::new(bundle_id, flags, msg))`, without cloning `msg`.
pub fn encode_bundle_add(
    bundle_id: u32,
    flags: u16,
    msg: &Message,
    xid: u32,
    out: &mut Vec<u8>,
) -> Result<(), TooLong> {
    let start = out.len();
    out.reserve(BUNDLE_ADD_HEADER_LEN + 256);
    out.extend_from_slice(&[OFP_VERSION, msg_type::EXPERIMENTER, 0, 0]);
    out.extend_from_slice(&xid.to_be_bytes());
    out.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
    out.extend_from_slice(&ONF_ET_BUNDLE_ADD_MESSAGE.to_be_bytes());
    out.extend_from_slice(&bundle_id.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&flags.to_be_bytes());
    let inner = out.len();
    msg.encode_into(xid, out);
    if out.len() - inner > usize::from(u16::MAX) {
        let len = out.len() - inner;
        out.truncate(start);
        return Err(TooLong(len));
    }
    check(out, start)
}

/// Patches the header length of the message at `start`, or removes it if too long.
fn check(out: &mut Vec<u8>, start: usize) -> Result<(), TooLong> {
    let len = out.len() - start;
    match u16::try_from(len) {
        Ok(l) => {
            if let Some(dst) = out.get_mut(start + 2..start + 4) {
                dst.copy_from_slice(&l.to_be_bytes());
            }
            Ok(())
        }
        Err(_) => {
            out.truncate(start);
            Err(TooLong(len))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::flow::{Flow, FlowMod};
    use crate::message::{BundleAdd, BundleFlags};
    use crate::oxm::Match;

    #[test]
    fn bundle_add_matches_the_codec_byte_for_byte() {
        let flow = Flow::new(10, 100, Match::new().in_port(3)).apply(vec![Action::output(1)]);
        let msg = Message::FlowMod(FlowMod::add(flow));
        let flags = BundleFlags::ATOMIC | BundleFlags::ORDERED;
        let want = Message::BundleAdd(BundleAdd::new(77, flags, msg.clone())).encode(0x1234);
        let mut out = vec![0xee; 5]; // junk before: only appended bytes count
        encode_bundle_add(77, flags, &msg, 0x1234, &mut out).expect("fits");
        assert_eq!(&out[5..], &want[..]);
    }

    #[test]
    fn too_long_messages_append_nothing() {
        let msg = Message::EchoRequest(vec![0; 70_000]);
        let mut out = vec![1, 2, 3];
        assert_eq!(
            encode_message(&msg, 1, &mut out),
            Err(TooLong(70_008)),
            "refused"
        );
        assert_eq!(out, vec![1, 2, 3]);
        let msg = Message::EchoRequest(vec![0; 65_520]);
        assert!(matches!(
            encode_bundle_add(1, 0, &msg, 1, &mut out),
            Err(TooLong(_))
        ));
        assert_eq!(out, vec![1, 2, 3]);
    }
}
