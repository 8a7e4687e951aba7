//! OpenFlow 1.3 instructions (OpenFlow 1.3.5 §7.2.4, `ofp_instruction_*`), as data.

use crate::action::Action;

/// One instruction of a flow.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Instruction {
    /// OFPIT_GOTO_TABLE.
    GotoTable(u8),
    /// OFPIT_WRITE_METADATA.
    WriteMetadata { value: u64, mask: u64 },
    /// OFPIT_WRITE_ACTIONS.
    WriteActions(Vec<Action>),
    /// OFPIT_APPLY_ACTIONS.
    ApplyActions(Vec<Action>),
    /// OFPIT_CLEAR_ACTIONS.
    ClearActions,
    /// OFPIT_METER.
    Meter(u32),
    /// Any other instruction (e.g. experimenter), kept as its exact wire bytes.
    Unknown(Vec<u8>),
}

// ---- codec entry points (bodies filled in by the instruction codec) ----

/// Decode an instruction list that fills the whole reader.
pub fn decode_instructions(
    r: &mut crate::wire::Reader<'_>,
) -> Result<Vec<Instruction>, crate::DecodeError> {
    let _ = r;
    Err(crate::DecodeError::BadInstruction(
        "instruction decoding not implemented yet".into(),
    ))
}

/// Encode an instruction list.
pub fn encode_instructions(instructions: &[Instruction], w: &mut Vec<u8>) {
    let _ = (instructions, w);
}

/// Instructions as `ovs-ofctl` prints them after `actions=` (`set_field:..,goto_table:30`,
/// `drop` when empty).
pub fn format_instructions(instructions: &[Instruction]) -> String {
    format!("{instructions:?}")
}
