//! OFPT_FLOW_MOD and OFPT_GROUP_MOD bodies (the `FlowMod`/`GroupMod` types live in
//! `crate::flow`), plus the group bucket list shared with the group-description reply.

use crate::action::Action;
use crate::error::DecodeError;
use crate::flow::{
    Bucket, Flow, FlowMod, FlowModCommand, Group, GroupMod, GroupModCommand, GroupType,
};
use crate::instruction::Instruction;
use crate::oxm::Match;
use crate::wire::{Reader, Writer};

/// Decode an action list filling `r` (an empty list needs no action codec).
pub(crate) fn decode_action_list(r: &mut Reader<'_>) -> Result<Vec<Action>, DecodeError> {
    if r.is_empty() {
        return Ok(Vec::new());
    }
    crate::action::decode_actions(r)
}

/// Decode an instruction list filling `r` (an empty list needs no instruction codec).
pub(crate) fn decode_instruction_list(r: &mut Reader<'_>) -> Result<Vec<Instruction>, DecodeError> {
    if r.is_empty() {
        return Ok(Vec::new());
    }
    crate::instruction::decode_instructions(r)
}

impl FlowModCommand {
    /// From the wire value (OFPFC_*).
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => FlowModCommand::Add,
            1 => FlowModCommand::Modify,
            2 => FlowModCommand::ModifyStrict,
            3 => FlowModCommand::Delete,
            4 => FlowModCommand::DeleteStrict,
            o => FlowModCommand::Unknown(o),
        }
    }
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            FlowModCommand::Add => 0,
            FlowModCommand::Modify => 1,
            FlowModCommand::ModifyStrict => 2,
            FlowModCommand::Delete => 3,
            FlowModCommand::DeleteStrict => 4,
            FlowModCommand::Unknown(o) => o,
        }
    }
}

impl GroupModCommand {
    /// From the wire value (OFPGC_*).
    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => GroupModCommand::Add,
            1 => GroupModCommand::Modify,
            2 => GroupModCommand::Delete,
            o => GroupModCommand::Unknown(o),
        }
    }
    /// The wire value.
    pub fn to_u16(self) -> u16 {
        match self {
            GroupModCommand::Add => 0,
            GroupModCommand::Modify => 1,
            GroupModCommand::Delete => 2,
            GroupModCommand::Unknown(o) => o,
        }
    }
}

impl GroupType {
    /// From the wire value (OFPGT_*).
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => GroupType::All,
            1 => GroupType::Select,
            2 => GroupType::Indirect,
            3 => GroupType::FastFailover,
            o => GroupType::Unknown(o),
        }
    }
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            GroupType::All => 0,
            GroupType::Select => 1,
            GroupType::Indirect => 2,
            GroupType::FastFailover => 3,
            GroupType::Unknown(o) => o,
        }
    }
}

/// FLOW_MOD body (OpenFlow 1.3.5 §7.3.4.1).
///
/// ```text
/// struct ofp_flow_mod { struct ofp_header header; uint64_t cookie; uint64_t cookie_mask;
///     uint8_t table_id; uint8_t command; uint16_t idle_timeout; uint16_t hard_timeout;
///     uint16_t priority; uint32_t buffer_id; uint32_t out_port; uint32_t out_group;
///     uint16_t flags; uint8_t pad[2]; struct ofp_match match;
///     /* struct ofp_instruction instructions[0]; */ };
/// ```
pub(crate) fn decode_flow_mod(r: &mut Reader<'_>) -> Result<FlowMod, DecodeError> {
    let ctx = "ofp_flow_mod";
    let cookie = r.u64(ctx)?;
    let cookie_mask = r.u64(ctx)?;
    let table = r.u8(ctx)?;
    let command = FlowModCommand::from_u8(r.u8(ctx)?);
    let idle_timeout = r.u16(ctx)?;
    let hard_timeout = r.u16(ctx)?;
    let priority = r.u16(ctx)?;
    let buffer_id = r.u32(ctx)?;
    let out_port = r.u32(ctx)?;
    let out_group = r.u32(ctx)?;
    let flags = r.u16(ctx)?;
    r.skip(2, ctx)?;
    let matches = Match::decode(r)?;
    let instructions = decode_instruction_list(r)?;
    Ok(FlowMod {
        command,
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
        cookie_mask,
        buffer_id,
        out_port,
        out_group,
    })
}

pub(crate) fn encode_flow_mod(fm: &FlowMod, w: &mut Vec<u8>) {
    let f = &fm.flow;
    w.put_u64(f.cookie);
    w.put_u64(fm.cookie_mask);
    w.put_u8(f.table);
    w.put_u8(fm.command.to_u8());
    w.put_u16(f.idle_timeout);
    w.put_u16(f.hard_timeout);
    w.put_u16(f.priority);
    w.put_u32(fm.buffer_id);
    w.put_u32(fm.out_port);
    w.put_u32(fm.out_group);
    w.put_u16(f.flags);
    w.put_zeros(2);
    f.matches.encode(w);
    crate::instruction::encode_instructions(&f.instructions, w);
}

/// Size of `ofp_bucket` before its actions.
const BUCKET_HEADER_LEN: usize = 16;

/// A list of buckets filling `r` (OpenFlow 1.3.5 §7.3.4.2).
///
/// ```text
/// struct ofp_bucket { uint16_t len; uint16_t weight; uint32_t watch_port;
///     uint32_t watch_group; uint8_t pad[4]; struct ofp_action_header actions[0]; };
/// ```
pub(crate) fn decode_buckets(r: &mut Reader<'_>) -> Result<Vec<Bucket>, DecodeError> {
    let mut buckets = Vec::new();
    while !r.is_empty() {
        let len = usize::from(u16::from_be_bytes(r.array::<2>("ofp_bucket.len")?));
        if len < BUCKET_HEADER_LEN || len % 8 != 0 {
            return Err(DecodeError::BadLength {
                context: "ofp_bucket.len",
                len,
            });
        }
        let mut b = r.sub(len - 2, "ofp_bucket")?;
        let weight = b.u16("ofp_bucket")?;
        let watch_port = b.u32("ofp_bucket")?;
        let watch_group = b.u32("ofp_bucket")?;
        b.skip(4, "ofp_bucket")?;
        let actions = decode_action_list(&mut b)?;
        buckets.push(Bucket {
            weight,
            watch_port,
            watch_group,
            actions,
        });
    }
    Ok(buckets)
}

pub(crate) fn encode_buckets(buckets: &[Bucket], w: &mut Vec<u8>) {
    for b in buckets {
        let start = w.len();
        w.put_u16(0);
        w.put_u16(b.weight);
        w.put_u32(b.watch_port);
        w.put_u32(b.watch_group);
        w.put_zeros(4);
        crate::action::encode_actions(&b.actions, w);
        let len = (w.len() - start).min(usize::from(u16::MAX)) as u16;
        w.patch_u16(start, len);
    }
}

/// GROUP_MOD body (OpenFlow 1.3.5 §7.3.4.2).
///
/// ```text
/// struct ofp_group_mod { struct ofp_header header; uint16_t command; uint8_t type;
///     uint8_t pad; uint32_t group_id; struct ofp_bucket buckets[0]; };
/// ```
pub(crate) fn decode_group_mod(r: &mut Reader<'_>) -> Result<GroupMod, DecodeError> {
    let ctx = "ofp_group_mod";
    let command = GroupModCommand::from_u16(r.u16(ctx)?);
    let group_type = GroupType::from_u8(r.u8(ctx)?);
    r.skip(1, ctx)?;
    let group_id = r.u32(ctx)?;
    let buckets = decode_buckets(r)?;
    Ok(GroupMod {
        command,
        group: Group {
            group_id,
            group_type,
            buckets,
        },
    })
}

pub(crate) fn encode_group_mod(gm: &GroupMod, w: &mut Vec<u8>) {
    w.put_u16(gm.command.to_u16());
    w.put_u8(gm.group.group_type.to_u8());
    w.put_u8(0);
    w.put_u32(gm.group.group_id);
    encode_buckets(&gm.group.buckets, w);
}

#[cfg(test)]
mod tests {
    use super::super::{decode_message, Message};
    use super::*;

    fn group_mod_bytes(bucket_len: u16) -> Vec<u8> {
        let mut raw = vec![4, 15, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 5];
        raw.extend_from_slice(&bucket_len.to_be_bytes());
        raw.extend_from_slice(&[0, 10, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let n = raw.len() as u16;
        raw[2..4].copy_from_slice(&n.to_be_bytes());
        raw
    }

    #[test]
    fn group_mod_with_empty_buckets_round_trips() {
        let raw = group_mod_bytes(16);
        let (m, _) = decode_message(&raw).expect("group mod");
        let Message::GroupMod(gm) = &m else { panic!() };
        assert_eq!(gm.group.group_type, GroupType::Select);
        assert_eq!(gm.group.buckets.len(), 1);
        assert_eq!(gm.group.buckets[0].weight, 10);
        assert_eq!(gm.group.buckets[0].watch_port, 2);
        assert_eq!(m.encode(1), raw);
    }

    #[test]
    fn bucket_lengths_are_checked() {
        for bad in [0u16, 8, 15, 24, 17] {
            let raw = group_mod_bytes(bad);
            assert!(decode_message(&raw).is_err(), "bucket len {bad}");
        }
    }
}
