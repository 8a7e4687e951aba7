//! Actions in `ovs-actions(7)` syntax, as `ovs-ofctl` 3.1 prints them (`ofpacts_format`).

use super::fields::{format_value, ovs_bits, slice_name, unknown_header};
use super::{hash_x, hex_dotted, port16, port32};
use crate::action::{
    port, Action, Bundle, Ct, FieldSlice, Learn, LearnDst, LearnSrc, LegacySet, Multipath, Nat,
    NatAddr, Sample,
};
use std::fmt::Write;

/// `mf_format_subfield`: `NAME[]` for the whole field, `NAME[i]` for one bit, else
/// `NAME[lo..hi]`.
pub fn format_slice(sf: &FieldSlice) -> String {
    let (name, bits) = match sf.header.known() {
        Some(f) => (slice_name(f), Some(ovs_bits(f))),
        None => match crate::oxm::wide_register(&sf.header) {
            Some((name, len)) => (name, Some(len as u16 * 8)),
            None => (unknown_header(&sf.header), None),
        },
    };
    let whole = bits.is_some_and(|b| sf.ofs == 0 && sf.n_bits == b);
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
        Action::OutputReg { src, .. } | Action::OutputReg2 { src, .. } => {
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
            meter_id,
            ..
        } => {
            // NX_CTLR_NO_METER (all ones) is "no meter".
            let meter = meter_id.filter(|m| *m != u32::MAX);
            if *reason == 1
                && *controller_id == 0
                && userdata.is_empty()
                && !pause
                && meter.is_none()
            {
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
                if let Some(m) = meter {
                    let _ = write!(s, "meter_id={m},");
                }
                if s.ends_with(',') {
                    s.pop();
                }
                s.push(')');
            }
        }
        Action::DecTtlIds(ids) => {
            let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            let _ = write!(s, "dec_ttl({})", ids.join(","));
        }
        Action::SetQueue(q) => {
            let _ = write!(s, "set_queue:{q}");
        }
        Action::PopQueue => s.push_str("pop_queue"),
        Action::SetNwTtl(t) => {
            let _ = write!(s, "mod_nw_ttl:{t}");
        }
        Action::SetMplsTtl(t) => {
            let _ = write!(s, "set_mpls_ttl({t})");
        }
        Action::DecMplsTtl => s.push_str("dec_mpls_ttl"),
        Action::PushMpls(e) => {
            let _ = write!(s, "push_mpls:0x{e:04x}");
        }
        Action::PopMpls(e) => {
            let _ = write!(s, "pop_mpls:0x{e:04x}");
        }
        Action::FinTimeout { idle, hard } => {
            s.push_str("fin_timeout(");
            if *idle != 0 {
                let _ = write!(s, "idle_timeout={idle},");
            }
            if *hard != 0 {
                let _ = write!(s, "hard_timeout={hard},");
            }
            if s.ends_with(',') {
                s.pop();
            }
            s.push(')');
        }
        Action::Sample(sm) => s = format_sample(sm),
        Action::Clone(actions) => {
            let _ = write!(s, "clone({})", format_actions(actions));
        }
        Action::Exit => s.push_str("exit"),
        Action::CtClear => s.push_str("ct_clear"),
        Action::Multipath(mp) => s = format_multipath(mp),
        Action::Bundle(b) => s = format_bundle(b),
        Action::CheckPktLarger { pkt_len, dst } => {
            let _ = write!(s, "check_pkt_larger({pkt_len})->{}", format_slice(dst));
        }
        Action::Learn(l) => s = format_learn(l),
        Action::Legacy(set) => {
            let _ = match set {
                LegacySet::VlanVid(v) => write!(s, "set_vlan_vid:{v}"),
                LegacySet::VlanPcp(v) => write!(s, "set_vlan_pcp:{v}"),
                LegacySet::DlSrc(m) => write!(s, "mod_dl_src:{}", super::eth(m)),
                LegacySet::DlDst(m) => write!(s, "mod_dl_dst:{}", super::eth(m)),
                LegacySet::NwSrc(a) => write!(s, "mod_nw_src:{a}"),
                LegacySet::NwDst(a) => write!(s, "mod_nw_dst:{a}"),
                LegacySet::NwTos(v) => write!(s, "mod_nw_tos:{v}"),
                LegacySet::NwEcn(v) => write!(s, "mod_nw_ecn:{v}"),
                LegacySet::TpSrc(v) => write!(s, "mod_tp_src:{v}"),
                LegacySet::TpDst(v) => write!(s, "mod_tp_dst:{v}"),
            };
        }
        Action::SetTunnel { tun_id, wide } => {
            // format_SET_TUNNEL: `%#x`, so zero is `0`.
            let w = if *wide || *tun_id > u32::MAX as u64 {
                "64"
            } else {
                ""
            };
            let _ = write!(s, "set_tunnel{w}:{}", hash_x(*tun_id as u128));
        }
        Action::Decap { packet_type } => {
            // PT_USE_NEXT_PROTO (namespace 0, type 0xfffe) is the default.
            if *packet_type == 0xfffe {
                s.push_str("decap()");
            } else {
                let _ = write!(
                    s,
                    "decap(packet_type(ns={},type={}))",
                    packet_type >> 16,
                    hash_x((packet_type & 0xffff) as u128)
                );
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
        let (pmin, pmax) = match nat.ports {
            Some((min, max)) => (min, max.unwrap_or(0)),
            None => (0, 0),
        };
        if let Some(addr) = nat.addr {
            s.push('=');
            match addr {
                NatAddr::V4(min, max) => {
                    let _ = write!(s, "{min}");
                    if let Some(max) = max.filter(|m| !m.is_unspecified() && *m != min) {
                        let _ = write!(s, "-{max}");
                    }
                }
                NatAddr::V6(min, max) => {
                    // ipv6_format_addr_bracket: brackets when a port follows.
                    let bracket = |a| {
                        if pmin != 0 {
                            format!("[{}]", super::ipv6(a))
                        } else {
                            super::ipv6(a)
                        }
                    };
                    s.push_str(&bracket(min));
                    if let Some(max) = max.filter(|m| !m.is_unspecified() && *m != min) {
                        s.push('-');
                        s.push_str(&bracket(max));
                    }
                }
            }
            if pmin != 0 {
                let _ = write!(s, ":{pmin}");
                if pmax != 0 && pmax != pmin {
                    let _ = write!(s, "-{pmax}");
                }
            }
            // The flags print only with an address range.
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
        }
        s.push(')');
    }
    s
}

/// `learn_format`.
fn format_learn(l: &Learn) -> String {
    let mut s = format!("learn(table={}", l.table_id);
    if l.idle_timeout != 0 {
        let _ = write!(s, ",idle_timeout={}", l.idle_timeout);
    }
    if l.hard_timeout != 0 {
        let _ = write!(s, ",hard_timeout={}", l.hard_timeout);
    }
    if l.fin_idle_timeout != 0 {
        let _ = write!(s, ",fin_idle_timeout={}", l.fin_idle_timeout);
    }
    if l.fin_hard_timeout != 0 {
        let _ = write!(s, ",fin_hard_timeout={}", l.fin_hard_timeout);
    }
    if l.priority != 0x8000 {
        let _ = write!(s, ",priority={}", l.priority);
    }
    if l.flags & 1 != 0 {
        s.push_str(",send_flow_rem");
    }
    if l.flags & 2 != 0 {
        s.push_str(",delete_learned");
    }
    if l.cookie != 0 {
        let _ = write!(s, ",cookie={}", hash_x(l.cookie as u128));
    }
    if l.limit != 0 {
        let _ = write!(s, ",limit={}", l.limit);
    }
    if let Some(dst) = &l.result_dst {
        let _ = write!(s, ",result_dst={}", format_slice(dst));
    }
    let same_field = |a: &FieldSlice, b: &FieldSlice| match (a.header.known(), b.header.known()) {
        (Some(x), Some(y)) => x == y,
        _ => a.header == b.header,
    };
    for spec in &l.specs {
        s.push(',');
        match (&spec.src, &spec.dst) {
            (LearnSrc::Immediate { value, .. }, LearnDst::Match(dst)) => {
                let field = dst.header.known();
                match field.filter(|f| dst.ofs == 0 && dst.n_bits == ovs_bits(*f)) {
                    Some(f) => {
                        // The immediate's low bits, as a value of the field's width.
                        let n = f.len();
                        let mut v = vec![0u8; n];
                        let take = n.min(value.len());
                        v[n - take..].copy_from_slice(&value[value.len() - take..]);
                        let _ = write!(s, "{}={}", f.name(), format_value(f, &v, None));
                    }
                    None => {
                        let _ = write!(s, "{}=", format_slice(dst));
                        super::put_hex(&mut s, value);
                    }
                }
            }
            (LearnSrc::Field(src), LearnDst::Match(dst)) => {
                s.push_str(&format_slice(dst));
                if !same_field(src, dst) || src.ofs != dst.ofs {
                    let _ = write!(s, "={}", format_slice(src));
                }
            }
            (LearnSrc::Immediate { value, .. }, LearnDst::Load(dst)) => {
                s.push_str("load:");
                super::put_hex(&mut s, value);
                let _ = write!(s, "->{}", format_slice(dst));
            }
            (LearnSrc::Field(src), LearnDst::Load(dst)) => {
                let _ = write!(s, "load:{}->{}", format_slice(src), format_slice(dst));
            }
            (LearnSrc::Field(src), LearnDst::Output) => {
                let _ = write!(s, "output:{}", format_slice(src));
            }
            (LearnSrc::Immediate { .. }, LearnDst::Output) => {}
        }
    }
    s.push(')');
    s
}

/// `flow_hash_fields_to_str` (NX_HASH_FIELDS_*).
fn hash_fields(f: u16) -> String {
    match f {
        0 => "eth_src".into(),
        1 => "symmetric_l4".into(),
        2 => "symmetric_l3l4".into(),
        3 => "symmetric_l3l4+udp".into(),
        4 => "nw_src".into(),
        5 => "nw_dst".into(),
        6 => "symmetric_l3".into(),
        n => format!("<unknown {n}>"),
    }
}

/// `format_SAMPLE`.
fn format_sample(sm: &Sample) -> String {
    let mut s = format!(
        "sample(probability={},collector_set_id={},obs_domain_id={},obs_point_id={}",
        sm.probability, sm.collector_set_id, sm.obs_domain_id, sm.obs_point_id
    );
    if sm.sampling_port != 0xffff {
        let _ = write!(s, ",sampling_port={}", port16(sm.sampling_port));
    }
    match sm.direction {
        1 => s.push_str(",ingress"),
        2 => s.push_str(",egress"),
        _ => {}
    }
    s.push(')');
    s
}

/// `multipath_format`.
fn format_multipath(mp: &Multipath) -> String {
    let alg = match mp.algorithm {
        0 => "modulo_n".to_string(),
        1 => "hash_threshold".into(),
        2 => "hrw".into(),
        3 => "iter_hash".into(),
        n => format!("<unknown {n}>"),
    };
    format!(
        "multipath({},{},{alg},{},{},{})",
        hash_fields(mp.fields),
        mp.basis,
        mp.max_link as u32 + 1,
        mp.arg,
        format_slice(&mp.dst)
    )
}

/// `bundle_format`.
fn format_bundle(b: &Bundle) -> String {
    let alg = match b.algorithm {
        0 => "active_backup".to_string(),
        1 => "hrw".into(),
        n => format!("<unknown {n}>"),
    };
    let mut s = format!(
        "{}({},{},{alg},ofport,",
        if b.dst.is_some() {
            "bundle_load"
        } else {
            "bundle"
        },
        hash_fields(b.fields),
        b.basis
    );
    if let Some(dst) = &b.dst {
        let _ = write!(s, "{},", format_slice(dst));
    }
    let members: Vec<String> = b.members.iter().map(|p| port16(*p)).collect();
    let _ = write!(s, "members:{})", members.join(","));
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
