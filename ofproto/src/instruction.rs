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
