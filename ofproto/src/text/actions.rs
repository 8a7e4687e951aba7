//! Actions in `ovs-actions(7)` syntax, as `ovs-ofctl` 3.1 prints them (`ofpacts_format`).

use super::fields::{format_value, ovs_bits, slice_name, unknown_header};
use super::{hash_x, hex_dotted, port16, port32};
use crate::action::{port, Action, Ct, FieldSlice, Nat};
use std::fmt::Write;

/// `mf_format_subfield`: `NAME[]` for the whole field, `NAME[i]` for one bit, else
/// `NAME[lo..hi]`.
pub fn format_slice(sf: &FieldSlice) -> String {
    let field = sf.header.known();
    let name = match field {
        Some(f) => slice_name(f),
        None => unknown_header(&sf.header),
    };
    let whole = field.is_some_and(|f| sf.ofs == 0 && sf.n_bits == ovs_bits(f));
    if whole {
        format!("{name}[]")
    } else if sf.n_bits == 1 {
        format!("{name}[{}]", sf.ofs)
    } else {
        format!(
            "{name}[{}..{}]",
            sf.ofs,
            (sf.ofs as u32 + sf.n_bits as u32).saturating_sub(1)
        )
    }
}

/// `ofputil_packet_in_reason_to_string`.
pub fn packet_in_reason(reason: u8) -> String {
    match reason {
        0 => "no_match".into(),
        1 => "action".into(),
        2 => "invalid_ttl".into(),
        3 => "action_set".into(),
        4 => "group".into(),
        5 => "packet_out".into(),
        6 => "explicit_miss".into(),
        7 => "implicit_miss".into(),
        r => r.to_string(),
    }
}

/// One action.
pub fn format_action(a: &Action) -> String {
    let mut s = String::new();
    match a {
        Action::Output { port: p, max_len } => {
            if *p == port::CONTROLLER {
                let _ = write!(s, "CONTROLLER:{max_len}");
            } else if *p < 0xff00 {
                let _ = write!(s, "output:{p}");
            } else {
                s = port32(*p);
            }
        }
        Action::Group(g) => {
            let _ = write!(s, "group:{g}");
        }
        Action::SetField(mf) => {
            let name = match mf.field() {
                Some(f) => {
                    s = format!(
                        "set_field:{}",
                        format_value(f, &mf.value, mf.mask.as_deref())
                    );
                    f.name().to_string()
                }
                None => {
                    s.push_str("set_field:");
                    super::put_hex(&mut s, &mf.value);
                    if let Some(m) = &mf.mask {
                        s.push('/');
                        super::put_hex(&mut s, m);
                    }
                    unknown_header(&mf.header)
                }
            };
            let _ = write!(s, "->{name}");
        }
        Action::PushVlan(t) => {
            let _ = write!(s, "push_vlan:{}", hash_x(*t as u128));
        }
        Action::PopVlan => s.push_str("pop_vlan"),
        Action::DecNwTtl | Action::DecTtl => s.push_str("dec_ttl"),
        Action::Resubmit { in_port, table } => {
            if *in_port != 0xfff8 && table.is_none() {
                let _ = write!(s, "resubmit:{}", port16(*in_port));
            } else {
                s.push_str("resubmit(");
                if *in_port != 0xfff8 {
                    s.push_str(&port16(*in_port));
                }
                s.push(',');
                if let Some(t) = table {
                    let _ = write!(s, "{t}");
                }
                s.push(')');
            }
        }
        Action::ResubmitLegacy { in_port } => {
            return format_action(&Action::Resubmit {
                in_port: *in_port,
                table: None,
            })
        }
        Action::Move { src, dst } => {
            let _ = write!(s, "move:{}->{}", format_slice(src), format_slice(dst));
        }
        Action::Load { dst, value } => {
            let _ = write!(s, "load:{}->{}", hash_x(*value as u128), format_slice(dst));
        }
        Action::OutputReg { src, .. } => {
            let _ = write!(s, "output:{}", format_slice(src));
        }
        Action::Ct(ct) => s = format_ct(ct),
        Action::Nat(nat) => s = format_nat(nat),
        Action::Note(bytes) => {
            let _ = write!(s, "note:{}", hex_dotted(bytes));
        }
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => {
            let _ = write!(s, "conjunction({id},{}/{n_clauses})", *clause as u16 + 1);
        }
        Action::Controller {
            max_len,
            controller_id,
            reason,
            userdata,
            pause,
        } => {
            if *reason == 1 && *controller_id == 0 && userdata.is_empty() && !pause {
                let _ = write!(s, "CONTROLLER:{max_len}");
            } else {
                s.push_str("controller(");
                if *reason != 1 {
                    let _ = write!(s, "reason={},", packet_in_reason(*reason));
                }
                if *max_len != u16::MAX {
                    let _ = write!(s, "max_len={max_len},");
                }
                if *controller_id != 0 {
                    let _ = write!(s, "id={controller_id},");
                }
                if !userdata.is_empty() {
                    let _ = write!(s, "userdata={},", hex_dotted(userdata));
                }
                if *pause {
                    s.push_str("pause,");
                }
                if s.ends_with(',') {
                    s.pop();
                }
                s.push(')');
            }
        }
        Action::Unknown(bytes) => {
            // Open vSwitch rejects actions it does not know; this form is flowmesh's own.
            let _ = write!(s, "unknown_action({})", hex_dotted(bytes));
        }
    }
    s
}

/// `format_CT`.
fn format_ct(ct: &Ct) -> String {
    let mut s = String::from("ct(");
    if ct.flags & crate::action::ct_flags::COMMIT != 0 {
        s.push_str("commit,");
    }
    if ct.flags & crate::action::ct_flags::FORCE != 0 {
        s.push_str("force,");
    }
    if let Some(t) = ct.recirc_table {
        let _ = write!(s, "table={t},");
    }
    if let Some(sf) = &ct.zone_src {
        let _ = write!(s, "zone={},", format_slice(sf));
    } else if ct.zone_imm != 0 {
        let _ = write!(s, "zone={},", ct.zone_imm);
    }
    let mut rest: &[Action] = &ct.actions;
    if let Some((Action::Nat(nat), tail)) = rest.split_first() {
        s.push_str(&format_nat(nat));
        s.push(',');
        rest = tail;
    }
    if !rest.is_empty() {
        let _ = write!(s, "exec({}),", format_actions(rest));
    }
    match ct.alg {
        0 => {}
        21 => s.push_str("alg=ftp,"),
        69 => s.push_str("alg=tftp,"),
        p => {
            let _ = write!(s, "alg={p},");
        }
    }
    if s.ends_with(',') {
        s.pop();
    }
    s.push(')');
    s
}

/// `format_NAT`.
fn format_nat(nat: &Nat) -> String {
    use crate::action::nat_flags::*;
    let mut s = String::from("nat");
    if nat.flags & (SRC | DST) != 0 {
        s.push('(');
        s.push_str(if nat.flags & SRC != 0 { "src" } else { "dst" });
        if let Some((min, max)) = nat.ipv4_range {
            let _ = write!(s, "={min}");
            if max != min && !max.is_unspecified() {
                let _ = write!(s, "-{max}");
            }
            if let Some((pmin, pmax)) = nat.port_range {
                if pmin != 0 {
                    let _ = write!(s, ":{pmin}");
                    if pmax != 0 && pmax != pmin {
                        let _ = write!(s, "-{pmax}");
                    }
                }
            }
        }
        s.push(',');
        if nat.flags & PERSISTENT != 0 {
            s.push_str("persistent,");
        }
        if nat.flags & PROTO_HASH != 0 {
            s.push_str("hash,");
        }
        if nat.flags & PROTO_RANDOM != 0 {
            s.push_str("random,");
        }
        s.pop();
        s.push(')');
    }
    s
}

/// An action list, comma separated; `drop` when empty.
pub fn format_actions(actions: &[Action]) -> String {
    if actions.is_empty() {
        return "drop".into();
    }
    actions
        .iter()
        .map(format_action)
        .collect::<Vec<_>>()
        .join(",")
}

impl std::fmt::Display for Action {
    /// The action in `ovs-actions(7)` syntax, as `ovs-ofctl` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_action(self))
    }
}
