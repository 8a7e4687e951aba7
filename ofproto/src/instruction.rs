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

// ---- codec ----

use crate::error::ofp_error_type::BAD_INSTRUCTION;
use crate::wire::{Reader, Writer};
use crate::DecodeError;

/// OFPIT_* instruction types (OpenFlow 1.3.5 §7.2.4, `ofp_instruction_type`).
pub mod ofpit {
    /// Setup the next table in the lookup pipeline.
    pub const GOTO_TABLE: u16 = 1;
    /// Setup the metadata field for use later in pipeline.
    pub const WRITE_METADATA: u16 = 2;
    /// Write the action(s) onto the datapath action set.
    pub const WRITE_ACTIONS: u16 = 3;
    /// Applies the action(s) immediately.
    pub const APPLY_ACTIONS: u16 = 4;
    /// Clears all actions from the datapath action set.
    pub const CLEAR_ACTIONS: u16 = 5;
    /// Apply meter (rate limiter).
    pub const METER: u16 = 6;
    /// Experimenter instruction.
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// OFPBIC_* codes (OpenFlow 1.3.5 §7.4.4, `ofp_bad_instruction_code`).
pub mod bad_instruction {
    /// Switch does not support the instruction (also used here for a repeated instruction,
    /// which Open vSwitch rejects too).
    pub const UNSUP_INST: u16 = 1;
    /// Length problem in instructions.
    pub const BAD_LEN: u16 = 7;
}

fn inst_err(code: u16, detail: impl Into<String>) -> DecodeError {
    DecodeError::Rejected {
        context: "instruction",
        err_type: BAD_INSTRUCTION,
        code,
        detail: detail.into(),
    }
}

impl Instruction {
    /// Position in Open vSwitch's canonical instruction order (meter, apply_actions,
    /// clear_actions, write_actions, write_metadata, goto_table; unknown last).
    pub fn canonical_rank(&self) -> u8 {
        match self {
            Instruction::Meter(_) => 0,
            Instruction::ApplyActions(_) => 1,
            Instruction::ClearActions => 2,
            Instruction::WriteActions(_) => 3,
            Instruction::WriteMetadata { .. } => 4,
            Instruction::GotoTable(_) => 5,
            Instruction::Unknown(_) => 6,
        }
    }
}

/// Decode an instruction list that fills the whole reader.
///
/// Every instruction starts with (OpenFlow 1.3.5 §7.2.4):
/// ```text
/// | type:16 | len:16 (multiple of 8, header included) | body |
/// goto_table:     table_id:8 pad[3]                          (8 bytes)
/// write_metadata: pad[4] metadata:64 metadata_mask:64        (24 bytes)
/// write/apply_actions: pad[4] actions[]                      (8 + actions)
/// clear_actions:  pad[4]                                     (8 bytes)
/// meter:          meter_id:32                                (8 bytes)
/// experimenter:   experimenter:32 data[]                     (kept as raw bytes)
/// ```
/// Instructions whose bytes are not their canonical encoding (nonzero padding) are kept as
/// [`Instruction::Unknown`]. A repeated instruction type is rejected, as Open vSwitch does.
pub fn decode_instructions(r: &mut Reader<'_>) -> Result<Vec<Instruction>, DecodeError> {
    let mut out: Vec<Instruction> = Vec::new();
    while !r.is_empty() {
        let at = r.position();
        let head = r
            .peek(4, "instruction header")
            .map_err(|e| inst_err(bad_instruction::BAD_LEN, e.to_string()))?;
        let ty = u16::from_be_bytes([head[0], head[1]]);
        let len = u16::from_be_bytes([head[2], head[3]]) as usize;
        if len < 8 || !len.is_multiple_of(8) || len > r.remaining() {
            return Err(inst_err(
                bad_instruction::BAD_LEN,
                format!(
                    "instruction at offset {at}: length {len} (must be a multiple of 8, >= 8, <= {})",
                    r.remaining()
                ),
            ));
        }
        let raw = r.bytes(len, "instruction")?;
        let mut body = Reader::new(raw);
        body.skip(4, "instruction header")?;
        let exact = |want: usize, what: &str| {
            if len == want {
                Ok(())
            } else {
                Err(inst_err(
                    bad_instruction::BAD_LEN,
                    format!("{what}: length {len}, must be {want}"),
                ))
            }
        };
        let inst = match ty {
            ofpit::GOTO_TABLE => {
                exact(8, "goto_table")?;
                Instruction::GotoTable(body.u8("goto_table table_id")?)
            }
            ofpit::WRITE_METADATA => {
                exact(24, "write_metadata")?;
                body.skip(4, "write_metadata pad")?;
                let value = body.u64("write_metadata metadata")?;
                let mask = body.u64("write_metadata mask")?;
                Instruction::WriteMetadata { value, mask }
            }
            ofpit::WRITE_ACTIONS | ofpit::APPLY_ACTIONS => {
                body.skip(4, "actions instruction pad")?;
                let actions = crate::action::decode_actions(&mut body)?;
                if ty == ofpit::WRITE_ACTIONS {
                    Instruction::WriteActions(actions)
                } else {
                    Instruction::ApplyActions(actions)
                }
            }
            ofpit::CLEAR_ACTIONS => {
                exact(8, "clear_actions")?;
                Instruction::ClearActions
            }
            ofpit::METER => {
                exact(8, "meter")?;
                Instruction::Meter(body.u32("meter id")?)
            }
            _ => Instruction::Unknown(raw.to_vec()),
        };
        let inst = match inst {
            Instruction::Unknown(_) => inst,
            known => {
                let mut again = Vec::with_capacity(len);
                encode_one(&known, &mut again);
                if again == raw {
                    known
                } else {
                    Instruction::Unknown(raw.to_vec())
                }
            }
        };
        if !matches!(inst, Instruction::Unknown(_))
            && out
                .iter()
                .any(|i| i.canonical_rank() == inst.canonical_rank())
        {
            return Err(inst_err(
                bad_instruction::UNSUP_INST,
                format!("instruction type {ty} appears twice"),
            ));
        }
        out.push(inst);
    }
    Ok(out)
}

fn encode_one(i: &Instruction, w: &mut Vec<u8>) {
    let start = w.len();
    let head = |w: &mut Vec<u8>, ty: u16| {
        w.put_u16(ty);
        w.put_u16(0);
    };
    match i {
        Instruction::GotoTable(t) => {
            head(w, ofpit::GOTO_TABLE);
            w.put_u8(*t);
            w.put_zeros(3);
        }
        Instruction::WriteMetadata { value, mask } => {
            head(w, ofpit::WRITE_METADATA);
            w.put_zeros(4);
            w.put_u64(*value);
            w.put_u64(*mask);
        }
        Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
            let ty = if matches!(i, Instruction::WriteActions(_)) {
                ofpit::WRITE_ACTIONS
            } else {
                ofpit::APPLY_ACTIONS
            };
            head(w, ty);
            w.put_zeros(4);
            crate::action::encode_actions(a, w);
        }
        Instruction::ClearActions => {
            head(w, ofpit::CLEAR_ACTIONS);
            w.put_zeros(4);
        }
        Instruction::Meter(m) => {
            head(w, ofpit::METER);
            w.put_u32(*m);
        }
        Instruction::Unknown(b) => {
            w.put_slice(b);
            return;
        }
    }
    let len = w.len() - start;
    w.patch_u16(start + 2, len.min(0xffff) as u16);
}

/// Encode an instruction list (in the given order).
pub fn encode_instructions(instructions: &[Instruction], w: &mut Vec<u8>) {
    for i in instructions {
        encode_one(i, w);
    }
}

#[cfg(test)]
mod codec_tests {
    use super::*;
    use crate::action::gen::actions as random_actions;
    use crate::oxm::gen::{mutate, Rng};
    use crate::text::instructions::format_instructions;

    fn dec(b: &[u8]) -> Result<Vec<Instruction>, DecodeError> {
        decode_instructions(&mut Reader::new(b))
    }
    fn enc(i: &[Instruction]) -> Vec<u8> {
        let mut w = Vec::new();
        encode_instructions(i, &mut w);
        w
    }

    #[test]
    fn ovs_captured_instructions_round_trip() {
        // apply_actions(load:0x64->NXM_NX_REG0[]) + goto_table:30, from
        // `ovs-ofctl -O OpenFlow13 -mmmmm parse-flow '...actions=load:0x64->NXM_NX_REG0[],goto_table:30'`.
        let b = [
            0x00, 0x04, 0x00, 0x20, 0, 0, 0, 0, 0xff, 0xff, 0x00, 0x18, 0x00, 0x00, 0x23, 0x20,
            0x00, 0x07, 0x00, 0x1f, 0x00, 0x01, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0x64, 0x00, 0x01,
            0x00, 0x08, 0x1e, 0, 0, 0,
        ];
        let i = dec(&b).expect("decodes");
        assert_eq!(
            format_instructions(&i),
            "load:0x64->NXM_NX_REG0[],goto_table:30"
        );
        assert_eq!(enc(&i), b);
    }

    #[test]
    fn length_rules() {
        let code = |b: &[u8]| dec(b).err().map(|e| e.ofp_error());
        let bad_len = Some((BAD_INSTRUCTION, bad_instruction::BAD_LEN));
        assert_eq!(code(&[0, 1, 0, 0]), bad_len);
        assert_eq!(code(&[0, 1, 0, 4, 5, 0, 0, 0]), bad_len);
        assert_eq!(code(&[0, 1, 0, 16, 5, 0, 0, 0]), bad_len);
        assert_eq!(code(&[0, 1]), bad_len);
        assert_eq!(code(&[0, 2, 0, 8, 0, 0, 0, 0]), bad_len); // write_metadata is 24
        assert_eq!(
            code(&[0, 1, 0, 16, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            bad_len
        );
        assert_eq!(dec(&[]), Ok(vec![]));
    }

    #[test]
    fn duplicates_are_rejected_and_unknowns_kept() {
        let dup = [0, 1, 0, 8, 5, 0, 0, 0, 0, 1, 0, 8, 6, 0, 0, 0];
        assert_eq!(
            dec(&dup).err().map(|e| e.ofp_error()),
            Some((BAD_INSTRUCTION, bad_instruction::UNSUP_INST))
        );
        // an experimenter instruction, an unknown type, goto_table with a nonzero pad
        let b = [
            0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20, 1, 2, 3, 4, 5, 6, 7, 8, 0, 7, 0, 8, 9, 9, 9, 9, 0,
            1, 0, 8, 5, 0, 0, 1,
        ];
        let i = dec(&b).expect("decodes");
        assert!(i.iter().all(|x| matches!(x, Instruction::Unknown(_))));
        assert_eq!(enc(&i), b);
    }

    #[test]
    fn text_uses_ovs_canonical_order() {
        let i = vec![
            Instruction::GotoTable(9),
            Instruction::WriteMetadata {
                value: 0,
                mask: u64::MAX,
            },
            Instruction::WriteActions(vec![]),
            Instruction::ClearActions,
            Instruction::ApplyActions(vec![crate::Action::output(1)]),
            Instruction::Meter(1),
        ];
        assert_eq!(
            format_instructions(&i),
            "meter:1,output:1,clear_actions,write_actions(drop),write_metadata:0,goto_table:9"
        );
        assert_eq!(format_instructions(&[]), "drop");
    }

    fn random_instructions(rng: &mut Rng) -> Vec<Instruction> {
        let mut out = Vec::new();
        for _ in 0..rng.below(6) {
            let i = match rng.below(8) {
                0 => Instruction::GotoTable(rng.next() as u8),
                1 => Instruction::WriteMetadata {
                    value: rng.next(),
                    mask: rng.next(),
                },
                2 => Instruction::WriteActions(random_actions(rng)),
                3 => Instruction::ApplyActions(random_actions(rng)),
                4 => Instruction::ClearActions,
                5 => Instruction::Meter(rng.next() as u32),
                _ => {
                    let len = 8 * (1 + rng.below(3) as usize);
                    let mut b = vec![0xff, 0xff];
                    b.extend((len as u16).to_be_bytes());
                    b.extend(rng.bytes(len - 4));
                    Instruction::Unknown(b)
                }
            };
            let dup = !matches!(i, Instruction::Unknown(_))
                && out
                    .iter()
                    .any(|o: &Instruction| o.canonical_rank() == i.canonical_rank());
            if !dup {
                out.push(i);
            }
        }
        out
    }

    /// ≥100,000 generated instruction lists round-trip and ≥100,000 random or mutated inputs
    /// never panic; anything that decodes re-encodes to exactly the input bytes.
    #[test]
    fn property_round_trip_and_no_panic() {
        let mut rng = Rng(0x5eed_0003);
        for _ in 0..100_000 {
            let list = random_instructions(&mut rng);
            let bytes = enc(&list);
            assert_eq!(dec(&bytes).as_ref(), Ok(&list), "{bytes:02x?}");
            let mut bad = bytes;
            mutate(&mut rng, &mut bad);
            if let Ok(i) = dec(&bad) {
                assert_eq!(enc(&i), bad);
                let _ = format_instructions(&i);
            }
        }
        for _ in 0..20_000 {
            let n = 8 * rng.below(8) as usize;
            let mut b = rng.bytes(n);
            if n >= 8 && rng.coin() {
                b[0..4].copy_from_slice(&[0, 1 + rng.below(6) as u8, 0, n as u8]);
            }
            if let Ok(i) = dec(&b) {
                assert_eq!(enc(&i), b);
            }
        }
    }
}
