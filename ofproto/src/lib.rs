//! ofproto: the OpenFlow 1.3 wire codec (with the Open vSwitch Nicira and ONF extensions) and
//! the async switch session. Knows nothing of clusters.

pub mod action;
pub mod error;
pub mod flow;
pub mod instruction;
pub mod message;
pub mod meter;
pub mod oxm;
pub mod session;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
pub mod wire;

pub use action::{Action, FieldSlice};
pub use error::DecodeError;
pub use flow::{
    Bucket, Flow, FlowMod, FlowModCommand, Group, GroupMod, GroupModCommand, GroupType,
};
pub use instruction::Instruction;
pub use message::{
    decode_frame, decode_message, ofp_print, parse_hex, Framer, Message, MessageHeader,
};
pub use meter::{BandKind, Meter, MeterBand, MeterFeatures, MeterMod, MeterModCommand, MeterStats};
pub use oxm::{Field, Match, MatchField, OxmHeader};
