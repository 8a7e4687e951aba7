//! Instruction lists as `ovs-ofctl` prints them: Open vSwitch turns instructions into one
//! action list in a fixed order (meter, apply_actions, clear_actions, write_actions,
//! write_metadata, goto_table) whatever the wire order, prints apply_actions inline, and prints
//! `drop` when nothing is left.

use super::actions::format_actions;
use super::hash_x;
use crate::instruction::Instruction;

/// The list as Open vSwitch prints it after `actions=`.
pub fn format_instructions(instructions: &[Instruction]) -> String {
    let mut sorted: Vec<&Instruction> = instructions.iter().collect();
    sorted.sort_by_key(|i| i.canonical_rank());
    let mut parts: Vec<String> = Vec::new();
    for i in sorted {
        match i {
            Instruction::Meter(m) => parts.push(format!("meter:{m}")),
            Instruction::ApplyActions(a) => {
                if !a.is_empty() {
                    parts.push(format_actions(a));
                }
            }
            Instruction::ClearActions => parts.push("clear_actions".into()),
            Instruction::WriteActions(a) => {
                parts.push(format!("write_actions({})", format_actions(a)));
            }
            Instruction::WriteMetadata { value, mask } => {
                let mut s = format!("write_metadata:{}", hash_x(*value as u128));
                if *mask != u64::MAX {
                    s.push('/');
                    s.push_str(&hash_x(*mask as u128));
                }
                parts.push(s);
            }
            Instruction::GotoTable(t) => parts.push(format!("goto_table:{t}")),
            Instruction::Unknown(b) => {
                // Open vSwitch rejects unknown instructions; this form is flowmesh's own.
                parts.push(format!("unknown_instruction({})", super::hex_dotted(b)))
            }
        }
    }
    if parts.is_empty() {
        "drop".into()
    } else {
        parts.join(",")
    }
}

impl std::fmt::Display for Instruction {
    /// One instruction as `ovs-ofctl` prints it (`goto_table:30`, `write_actions(output:1)`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_instructions(std::slice::from_ref(self)))
    }
}
