//! Messages as `ovs-ofctl ofp-print` prints them (Open vSwitch 3.1).
//!
//! FLOW_MOD, flow stats replies, GROUP_MOD, group description replies, ERROR and the bundle
//! messages are rendered exactly as Open vSwitch renders them; the others give the same facts
//! in Open vSwitch's headline form (most of them identical too; see the oracle tests).
//!
//! One file on purpose: it is the mirror of Open vSwitch's `ofp-print.c`, one function per
//! message in the same order, checked line by line against `ovs-ofctl ofp-print`; keeping it
//! whole keeps that comparison a side-by-side read.

use super::bundle::BundleCtrlType;
use super::multipart::{MultipartReplyBody, MultipartRequestBody};
use super::switch::Port;
use super::{decode_frame, Message, MessageHeader, HEADER_LEN};
use crate::action::{port, Action};
use crate::error::DecodeError;
use crate::flow::{flow_flags, Bucket, FlowMod, FlowModCommand, Group, GroupModCommand, GroupType};
use crate::instruction::Instruction;
use crate::oxm::Match;
use crate::text::hash_x;
use std::fmt::Write as _;

/// Parse hex text (whitespace, `0x` prefixes and `:`/`-` separators allowed) into bytes.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, DecodeError> {
    let mut digits = Vec::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && matches!(chars.peek(), Some('x') | Some('X')) {
            chars.next();
            continue;
        }
        if c.is_whitespace() || c == ':' || c == '-' {
            continue;
        }
        let d = c.to_digit(16).ok_or_else(|| DecodeError::BadValue {
            context: "hex input",
            detail: format!("'{c}' is not a hex digit"),
        })?;
        digits.push(d as u8);
    }
    if digits.len() % 2 != 0 {
        return Err(DecodeError::BadValue {
            context: "hex input",
            detail: format!("odd number of hex digits ({})", digits.len()),
        });
    }
    Ok(digits.chunks_exact(2).map(|p| (p[0] << 4) | p[1]).collect())
}

/// Decode a stream of one or more messages and render each as `ovs-ofctl ofp-print` does.
pub fn ofp_print(bytes: &[u8]) -> Result<String, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Truncated {
            context: "ofp_header",
            need: HEADER_LEN,
            have: 0,
        });
    }
    let mut out = String::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (header, msg, used) = decode_frame(rest)?;
        out.push_str(&msg.display(header.xid).to_string());
        rest = rest.get(used..).unwrap_or_default();
    }
    Ok(out)
}

/// A message with its xid, displayable as `ovs-ofctl ofp-print` prints it.
pub struct MessageDisplay<'a> {
    msg: &'a Message,
    xid: u32,
}

impl Message {
    /// Display this message (sent with `xid`) as `ovs-ofctl ofp-print` does.
    pub fn display(&self, xid: u32) -> MessageDisplay<'_> {
        MessageDisplay { msg: self, xid }
    }
}

impl std::fmt::Display for MessageDisplay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        render_message(&mut s, self.msg, self.xid);
        f.write_str(&s)
    }
}

/// `hex_dump` as Open vSwitch writes it (`ds_put_hex_dump` with ASCII): 16 bytes a line.
pub fn hex_dump(data: &[u8]) -> String {
    let mut s = String::new();
    for (i, chunk) in data.chunks(16).enumerate() {
        let _ = write!(s, "{:08x}  ", i * 16);
        for j in 0..16 {
            match chunk.get(j) {
                Some(b) => {
                    let sep = if j == 7 { '-' } else { ' ' };
                    let _ = write!(s, "{b:02x}{sep}");
                }
                None => s.push_str("   "),
            }
        }
        s.push('|');
        for j in 0..16 {
            s.push(match chunk.get(j) {
                Some(&b) if (0x20..0x7f).contains(&b) => b as char,
                Some(_) => '.',
                None => ' ',
            });
        }
        s.push_str("|\n");
    }
    s
}

fn version_tag(v: u8) -> String {
    match v {
        0x01 => String::new(),
        0x02 => " (OF1.1)".into(),
        0x03 => " (OF1.2)".into(),
        0x04 => " (OF1.3)".into(),
        0x05 => " (OF1.4)".into(),
        0x06 => " (OF1.5)".into(),
        v => format!(" (OF 0x{v:02x})"),
    }
}

fn headline(s: &mut String, name: &str, version: u8, xid: u32) {
    let _ = write!(s, "{name}{} (xid={xid:#x}):", version_tag(version));
}

/// An OpenFlow 1.1+ port number as Open vSwitch converts (`ofputil_port_from_ofp11`) and then
/// names it: the reserved ports by name, 0xffffff00..0xfffffff7 as their 16-bit equivalent,
/// and the numbers in between (which OVS refuses) as an error.
fn ofp11_port(p: u32) -> Result<String, ()> {
    if p < 0xff00 {
        Ok(p.to_string())
    } else if p >= port::MAX {
        Ok(match p {
            0xffff_ff00..=0xffff_fff7 => (p - 0xffff_0000).to_string(),
            p => port_name(p),
        })
    } else {
        Err(())
    }
}

/// A port number as Open vSwitch names it (`LOCAL`, `CONTROLLER`, `ANY`, or the number).
pub(crate) fn port_name(p: u32) -> String {
    match p {
        port::IN_PORT => "IN_PORT".into(),
        port::TABLE => "TABLE".into(),
        port::NORMAL => "NORMAL".into(),
        port::FLOOD => "FLOOD".into(),
        port::ALL => "ALL".into(),
        port::CONTROLLER => "CONTROLLER".into(),
        port::LOCAL => "LOCAL".into(),
        port::ANY => "ANY".into(),
        p => p.to_string(),
    }
}

fn msg_name(msg: &Message) -> String {
    let n = match msg {
        Message::Hello(_) => "OFPT_HELLO",
        Message::Error(_) => "OFPT_ERROR",
        Message::EchoRequest(_) => "OFPT_ECHO_REQUEST",
        Message::EchoReply(_) => "OFPT_ECHO_REPLY",
        Message::Experimenter(_) => "OFPT_EXPERIMENTER",
        Message::FeaturesRequest => "OFPT_FEATURES_REQUEST",
        Message::FeaturesReply(_) => "OFPT_FEATURES_REPLY",
        Message::GetConfigRequest => "OFPT_GET_CONFIG_REQUEST",
        Message::GetConfigReply(_) => "OFPT_GET_CONFIG_REPLY",
        Message::SetConfig(_) => "OFPT_SET_CONFIG",
        Message::PacketIn(_) => "OFPT_PACKET_IN",
        Message::FlowRemoved(_) => "OFPT_FLOW_REMOVED",
        Message::PortStatus(_) => "OFPT_PORT_STATUS",
        Message::PacketOut(_) => "OFPT_PACKET_OUT",
        Message::FlowMod(_) => "OFPT_FLOW_MOD",
        Message::GroupMod(_) => "OFPT_GROUP_MOD",
        Message::MeterMod(_) => "OFPT_METER_MOD",
        Message::TableMod(_) => "OFPT_TABLE_MOD",
        Message::MultipartRequest(m) => return format!("{} request", mp_name(m.mp_type())),
        Message::MultipartReply(m) => return format!("{} reply", mp_name(m.mp_type())),
        Message::BarrierRequest => "OFPT_BARRIER_REQUEST",
        Message::BarrierReply => "OFPT_BARRIER_REPLY",
        Message::RoleRequest(_) => "OFPT_ROLE_REQUEST",
        Message::RoleReply(_) => "OFPT_ROLE_REPLY",
        Message::GetAsyncRequest => "OFPT_GET_ASYNC_REQUEST",
        Message::GetAsyncReply(_) => "OFPT_GET_ASYNC_REPLY",
        Message::SetAsync(_) => "OFPT_SET_ASYNC",
        Message::BundleControl(_) => "ONFT_BUNDLE_CONTROL",
        Message::BundleAdd(_) => "ONFT_BUNDLE_ADD_MESSAGE",
        Message::Unknown { msg_type, .. } => {
            return match *msg_type {
                16 => "OFPT_PORT_MOD".into(),
                22 => "OFPT_QUEUE_GET_CONFIG_REQUEST".into(),
                23 => "OFPT_QUEUE_GET_CONFIG_REPLY".into(),
                t => format!("OFPT_UNKNOWN_{t}"),
            }
        }
    };
    n.to_string()
}

fn mp_name(t: u16) -> String {
    let n = match t {
        0 => "OFPST_DESC",
        1 => "OFPST_FLOW",
        2 => "OFPST_AGGREGATE",
        3 => "OFPST_TABLE",
        4 => "OFPST_PORT",
        5 => "OFPST_QUEUE",
        6 => "OFPST_GROUP",
        7 => "OFPST_GROUP_DESC",
        8 => "OFPST_GROUP_FEATURES",
        9 => "OFPST_METER",
        10 => "OFPST_METER_CONFIG",
        11 => "OFPST_METER_FEATURES",
        12 => "OFPST_TABLE_FEATURES",
        13 => "OFPST_PORT_DESC",
        t => return format!("OFPST_{t}"),
    };
    n.to_string()
}

/// One message of exactly its length as OVS's `ofp_to_string` prints it: the headline, the
/// body with one trailing space chomped, or, when OVS's decoder refuses it, the error and a
/// hex dump of the message (after whatever part was printed).
fn render_message(s: &mut String, msg: &Message, xid: u32) {
    headline(s, &msg_name(msg), msg.version(), xid);
    let header_len = s.len();
    match render_body(s, msg, xid) {
        Ok(()) => {
            if s.ends_with(' ') {
                s.pop();
            }
        }
        Err(err) => {
            if s.len() > header_len {
                if s.ends_with(' ') {
                    s.pop();
                }
                add_newline(s);
            } else {
                s.push(' ');
            }
            let _ = writeln!(s, "***decode error: {err}***");
            s.push_str(&hex_dump(&msg.encode(xid)));
        }
    }
    add_newline(s);
}

fn add_newline(s: &mut String) {
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
}

/// The body of a message; Err(OVS error name) where Open vSwitch's decoder refuses what ours
/// accepts (it validates while decoding for print).
fn render_body(s: &mut String, msg: &Message, xid: u32) -> Result<(), &'static str> {
    if let Some(err) = ovs_decode_error(msg) {
        return Err(err);
    }
    match msg {
        Message::Hello(h) => {
            let versions: Vec<String> = h.versions().iter().map(|v| format!("0x{v:02x}")).collect();
            let _ = write!(s, "\n version bitmap: {}\n", versions.join(", "));
        }
        Message::Error(e) => render_error(s, e),
        Message::EchoRequest(d) | Message::EchoReply(d) => {
            let _ = writeln!(s, " {} bytes of payload", d.len());
            s.push_str(&hex_dump(d));
        }
        Message::Experimenter(e) => {
            let _ = writeln!(
                s,
                " experimenter={:#x} exp_type={} ({} bytes of data)",
                e.experimenter,
                e.exp_type,
                e.data.len()
            );
        }
        Message::FeaturesRequest
        | Message::GetConfigRequest
        | Message::BarrierRequest
        | Message::BarrierReply
        | Message::GetAsyncRequest => s.push('\n'),
        Message::FeaturesReply(f) => {
            let _ = write!(
                s,
                " dpid:{:016x}\nn_tables:{}, n_buffers:{}\n",
                f.datapath_id, f.n_tables, f.n_buffers
            );
            if f.auxiliary_id != 0 {
                let _ = writeln!(s, "auxiliary_id:{}", f.auxiliary_id);
            }
            s.push_str("capabilities:");
            let caps = [
                (1, "FLOW_STATS"),
                (2, "TABLE_STATS"),
                (4, "PORT_STATS"),
                (8, "GROUP_STATS"),
                (32, "IP_REASM"),
                (64, "QUEUE_STATS"),
                (256, "PORT_BLOCKED"),
            ];
            for (bit, name) in caps {
                if f.capabilities & bit != 0 {
                    let _ = write!(s, " {name}");
                }
            }
            s.push('\n');
        }
        Message::GetConfigReply(c) | Message::SetConfig(c) => {
            let frags = match c.flags & 3 {
                0 => "normal",
                1 => "drop",
                2 => "reassemble",
                _ => "nx-match",
            };
            let _ = writeln!(s, " frags={frags} miss_send_len={}", c.miss_send_len);
        }
        Message::PacketIn(p) => {
            let reason = match p.reason {
                0 => "no_match",
                1 => "action",
                2 => "invalid_ttl",
                _ => "unknown",
            };
            if p.table_id != 0 {
                let _ = write!(s, " table_id={}", p.table_id);
            }
            let _ = write!(
                s,
                " cookie={:#x} total_len={} {} (via {reason}) data_len={}",
                p.cookie,
                p.total_len,
                p.matches,
                p.data.len()
            );
            if p.buffer_id == crate::flow::NO_BUFFER {
                s.push_str(" (unbuffered)\n");
            } else {
                let _ = writeln!(s, " buffer={:#010x}", p.buffer_id);
            }
        }
        Message::FlowRemoved(r) => {
            let reason = match r.reason {
                0 => "idle".to_string(),
                1 => "hard".to_string(),
                2 => "delete".to_string(),
                3 => "group_delete".to_string(),
                4 => "meter_delete".to_string(),
                5 => "eviction".to_string(),
                n => n.to_string(),
            };
            let _ = write!(
                s,
                " {} reason={reason}",
                match_with_priority(&r.matches, r.priority)
            );
            if r.table_id != crate::flow::TABLE_ALL {
                let _ = write!(s, " table_id={}", r.table_id);
            }
            if r.cookie != 0 {
                let _ = write!(s, " cookie:{:#x}", r.cookie);
            }
            let _ = write!(
                s,
                " duration{}s idle{}",
                duration(r.duration_sec, r.duration_nsec),
                r.idle_timeout
            );
            // OVS prints the hard timeout (new in OF1.2) only when it is in use.
            if r.hard_timeout != 0 {
                let _ = write!(s, " hard{}", r.hard_timeout);
            }
            let _ = writeln!(s, " pkts{} bytes{}", r.packet_count, r.byte_count);
        }
        Message::PortStatus(p) => {
            let reason = match p.reason {
                0 => "ADD",
                1 => "DEL",
                2 => "MOD",
                _ => "UNKNOWN",
            };
            let _ = write!(s, " {reason}:");
            render_port(s, &p.desc);
        }
        Message::PacketOut(p) => {
            let _ = write!(
                s,
                " in_port={} actions={}",
                port_name(p.in_port),
                format_actions(&p.actions)
            );
            if p.buffer_id == crate::flow::NO_BUFFER {
                let _ = writeln!(s, " data_len={}", p.data.len());
            } else {
                let _ = writeln!(s, " buffer={:#010x}", p.buffer_id);
            }
        }
        Message::FlowMod(fm) => render_flow_mod(s, fm),
        Message::GroupMod(gm) => {
            let cmd = match gm.command {
                GroupModCommand::Add => "ADD".to_string(),
                GroupModCommand::Modify => "MOD".to_string(),
                GroupModCommand::Delete => "DEL".to_string(),
                GroupModCommand::Unknown(c) => format!("cmd:{c}"),
            };
            let _ = writeln!(s, "\n {cmd} {}", group_text(&gm.group));
        }
        Message::MeterMod(mm) => {
            use crate::meter::MeterModCommand as C;
            let cmd = match mm.command {
                C::Add => "ADD".to_string(),
                C::Modify => "MOD".to_string(),
                C::Delete => "DEL".to_string(),
                C::Unknown(c) => format!("cmd:{c}"),
            };
            let _ = write!(s, " {cmd} ");
            if mm.command == C::Delete {
                // OVS decodes only the id of a delete.
                let m = crate::meter::Meter {
                    meter_id: mm.meter.meter_id,
                    flags: 0,
                    bands: Vec::new(),
                };
                meter_config_text(s, &m);
            } else {
                meter_config_text(s, &mm.meter);
            }
        }
        Message::TableMod(t) => {
            if t.table_id == crate::flow::TABLE_ALL {
                s.push_str(" table_id: ALL_TABLES");
            } else {
                let _ = write!(s, " table_id={}", t.table_id);
            }
        }
        Message::MultipartRequest(m) => {
            mp_flags(s, m.flags);
            render_mp_request(s, &m.body);
        }
        Message::MultipartReply(m) => {
            mp_flags(s, m.flags);
            render_mp_reply(s, &m.body)?;
        }
        Message::RoleRequest(r) | Message::RoleReply(r) => {
            use super::switch::Role;
            let name = match r.role {
                Role::NoChange => "nochange".to_string(),
                Role::Equal => "equal".to_string(),
                Role::Master => "primary".to_string(),
                Role::Slave => "secondary".to_string(),
                Role::Unknown(v) => format!("unknown({v})"),
            };
            let _ = write!(s, " role={name}");
            if matches!(r.role, Role::Master | Role::Slave) {
                let _ = write!(s, " generation_id={}", r.generation_id);
            }
            s.push('\n');
        }
        Message::GetAsyncReply(a) | Message::SetAsync(a) => render_async(s, a),
        Message::BundleControl(b) => {
            let _ = writeln!(
                s,
                "\n bundle_id={} type={} flags={}",
                hash_x(b.bundle_id.into()),
                b.ctrl_type.name().unwrap_or(""),
                bundle_flags(b.flags)
            );
            let _ = BundleCtrlType::OpenRequest;
        }
        Message::BundleAdd(b) => {
            let _ = writeln!(
                s,
                "\n bundle_id={} flags={}",
                hash_x(b.bundle_id.into()),
                bundle_flags(b.flags)
            );
            // The embedded message is printed as a message of its own (ofp_to_string).
            render_message(s, &b.message, xid);
        }
        Message::Unknown { body, .. } => {
            let _ = writeln!(s, " ({} bytes of body, not decoded)", body.len());
        }
    }
    Ok(())
}

/// What OVS's bundle-add decoder refuses: an embedded xid other than the outer one, and
/// message types that cannot be bundled.
fn bundle_add_refusal(b: &super::BundleAdd) -> Option<&'static str> {
    if b.inner_xid.is_some() {
        return Some("OFPBFC_MSG_BAD_XID");
    }
    match b.message.msg_type() {
        super::msg_type::FLOW_MOD
        | super::msg_type::GROUP_MOD
        | super::msg_type::PORT_MOD
        | super::msg_type::PACKET_OUT => None,
        _ => Some("OFPBFC_MSG_UNSUP"),
    }
}

/// The name OVS gives a message it only has the first bytes of.
fn name_from_bytes(data: &[u8], header: &MessageHeader) -> String {
    let known = match header.msg_type {
        18 | 19 => data.get(8..10).map(|t| {
            let dir = if header.msg_type == 18 {
                "request"
            } else {
                "reply"
            };
            format!("{} {dir}", mp_name(u16::from_be_bytes([t[0], t[1]])))
        }),
        4 => match (data.get(8..12), data.get(12..16)) {
            (Some([0x4f, 0x4e, 0x46, 0]), Some([0, 0, 0x08, 0xfc])) => {
                Some("ONFT_BUNDLE_CONTROL".to_string())
            }
            (Some([0x4f, 0x4e, 0x46, 0]), Some([0, 0, 0x08, 0xfd])) => {
                Some("ONFT_BUNDLE_ADD_MESSAGE".to_string())
            }
            _ => None,
        },
        _ => None,
    };
    known.unwrap_or_else(|| {
        let placeholder = Message::Unknown {
            msg_type: header.msg_type,
            body: Vec::new(),
        };
        match header.msg_type {
            0 => "OFPT_HELLO".into(),
            1 => "OFPT_ERROR".into(),
            2 => "OFPT_ECHO_REQUEST".into(),
            3 => "OFPT_ECHO_REPLY".into(),
            4 => "OFPT_EXPERIMENTER".into(),
            5 => "OFPT_FEATURES_REQUEST".into(),
            6 => "OFPT_FEATURES_REPLY".into(),
            7 => "OFPT_GET_CONFIG_REQUEST".into(),
            8 => "OFPT_GET_CONFIG_REPLY".into(),
            9 => "OFPT_SET_CONFIG".into(),
            10 => "OFPT_PACKET_IN".into(),
            11 => "OFPT_FLOW_REMOVED".into(),
            12 => "OFPT_PORT_STATUS".into(),
            13 => "OFPT_PACKET_OUT".into(),
            14 => "OFPT_FLOW_MOD".into(),
            15 => "OFPT_GROUP_MOD".into(),
            17 => "OFPT_TABLE_MOD".into(),
            20 => "OFPT_BARRIER_REQUEST".into(),
            21 => "OFPT_BARRIER_REPLY".into(),
            24 => "OFPT_ROLE_REQUEST".into(),
            25 => "OFPT_ROLE_REPLY".into(),
            26 => "OFPT_GET_ASYNC_REQUEST".into(),
            27 => "OFPT_GET_ASYNC_REPLY".into(),
            28 => "OFPT_SET_ASYNC".into(),
            _ => msg_name(&placeholder),
        }
    })
}

/// Actions as `ovs-actions(7)` text, `drop` when empty (an empty list needs no action codec).
fn format_actions(actions: &[Action]) -> String {
    if actions.is_empty() {
        "drop".into()
    } else {
        crate::text::actions::format_actions(actions)
    }
}

/// Instructions as OVS prints them after `actions=`, `drop` when empty.
fn format_instructions(instructions: &[Instruction]) -> String {
    if instructions.is_empty() {
        "drop".into()
    } else {
        crate::text::instructions::format_instructions(instructions)
    }
}

fn bundle_flags(flags: u16) -> String {
    if flags == 0 {
        return "0".into();
    }
    let mut parts = Vec::new();
    if flags & 1 != 0 {
        parts.push("atomic".to_string());
    }
    if flags & 2 != 0 {
        parts.push("ordered".to_string());
    }
    if flags & !3 != 0 {
        parts.push(format!("{:#x}", flags & !3));
    }
    parts.join(" ")
}

/// `priority=N,` + match, as OVS's `match_format` writes it (priority omitted when 32768).
fn match_with_priority(m: &Match, priority: u16) -> String {
    let body = m.to_string();
    let mut parts = Vec::new();
    if priority != 0x8000 {
        parts.push(format!("priority={priority}"));
    }
    if !body.is_empty() {
        parts.push(body);
    }
    parts.join(",")
}

/// A duration as OVS's `ofp_print_duration` writes it (without the `s`): no decimals for whole
/// seconds, three for whole milliseconds, otherwise the nanoseconds without trailing zeros.
fn duration(sec: u32, nsec: u32) -> String {
    if nsec == 0 {
        sec.to_string()
    } else if nsec.is_multiple_of(1_000_000) {
        format!("{sec}.{:03}", nsec / 1_000_000)
    } else {
        let frac = format!("{nsec:09}");
        format!("{sec}.{}", frac.trim_end_matches('0'))
    }
}

fn render_flow_mod(s: &mut String, fm: &FlowMod) {
    let f = &fm.flow;
    let cmd = match fm.command {
        FlowModCommand::Add => "ADD".to_string(),
        FlowModCommand::Modify => "MOD".to_string(),
        FlowModCommand::ModifyStrict => "MOD_STRICT".to_string(),
        FlowModCommand::Delete => "DEL".to_string(),
        FlowModCommand::DeleteStrict => "DEL_STRICT".to_string(),
        FlowModCommand::Unknown(c) => format!("cmd:{c}"),
    };
    let _ = write!(s, " {cmd}");
    if f.table != 0 {
        let _ = write!(s, " table:{}", f.table);
    }
    s.push(' ');
    s.push_str(&match_with_priority(&f.matches, f.priority));
    if !s.ends_with(' ') {
        s.push(' ');
    }
    // OpenFlow 1.3 (ofputil_decode_flow_mod): an ADD sets the flow's cookie ("new cookie") and
    // its cookie mask is ignored; every other command selects flows by cookie/cookie_mask and
    // never changes a cookie, so only the masked form can appear.
    if fm.command == FlowModCommand::Add {
        if f.cookie != 0 && f.cookie != u64::MAX {
            let _ = write!(s, "cookie:{:#x} ", f.cookie);
        }
    } else if fm.cookie_mask != 0 {
        let _ = write!(s, "cookie:{:#x}/{:#x} ", f.cookie, fm.cookie_mask);
    }
    if f.idle_timeout != 0 {
        let _ = write!(s, "idle:{} ", f.idle_timeout);
    }
    if f.hard_timeout != 0 {
        let _ = write!(s, "hard:{} ", f.hard_timeout);
    }
    if fm.buffer_id != crate::flow::NO_BUFFER {
        let _ = write!(s, "buf:{:#x} ", fm.buffer_id);
    }
    if fm.out_port != port::ANY {
        let _ = write!(
            s,
            "out_port:{} ",
            ofp11_port(fm.out_port).unwrap_or_default()
        );
    }
    // out_group is decoded (deletes only) but not printed by OVS.
    s.push_str(&flow_flag_words(f.flags));
    let _ = write!(s, "actions={}", format_instructions(&f.instructions));
}

/// Known OFPFF_* bits of OpenFlow 1.3.
const FLOW_FLAGS_OF13: u16 = 0x1f;

/// `ofp_print_flow_flags`: each flag name followed by a space.
fn flow_flag_words(flags: u16) -> String {
    let mut s = String::new();
    for (bit, name) in [
        (flow_flags::SEND_FLOW_REM, "send_flow_rem"),
        (flow_flags::CHECK_OVERLAP, "check_overlap"),
        (flow_flags::RESET_COUNTS, "reset_counts"),
        (flow_flags::NO_PKT_COUNTS, "no_packet_counts"),
        (flow_flags::NO_BYT_COUNTS, "no_byte_counts"),
    ] {
        if flags & bit != 0 {
            s.push_str(name);
            s.push(' ');
        }
    }
    s
}

fn group_type_name(t: GroupType) -> &'static str {
    match t {
        GroupType::All => "all",
        GroupType::Select => "select",
        GroupType::Indirect => "indirect",
        GroupType::FastFailover => "ff",
        GroupType::Unknown(_) => "unknown",
    }
}

/// One `bucket=...` of `ofp_print_group`: the weight unless it is the type's default (1 for
/// select, 0 otherwise), the watches unless ANY, then the actions.
fn bucket_text(s: &mut String, b: &Bucket, group_type: GroupType) {
    s.push_str("bucket=");
    let default_weight = u16::from(group_type == GroupType::Select);
    if b.weight != default_weight {
        let _ = write!(s, "weight:{},", b.weight);
    }
    if b.watch_port != port::ANY {
        let _ = write!(
            s,
            "watch_port:{},",
            ofp11_port(b.watch_port).unwrap_or_default()
        );
    }
    if b.watch_group != crate::flow::GROUP_ANY {
        let _ = write!(s, "watch_group:{},", b.watch_group);
    }
    let _ = write!(s, "actions={}", format_actions(&b.actions));
}

/// A group id where OVS names the reserved ones (`ofputil_format_group`).
fn group_id_name(id: u32) -> String {
    match id {
        crate::flow::GROUP_ALL => "ALL".into(),
        crate::flow::GROUP_ANY => "ANY".into(),
        id => id.to_string(),
    }
}

/// `group_id=N,type=T,bucket=...` as `ofp_print_group` writes it (the group id always as a
/// number).
fn group_text(g: &Group) -> String {
    let mut s = format!(
        "group_id={},type={}",
        g.group_id,
        group_type_name(g.group_type)
    );
    for b in &g.buckets {
        s.push(',');
        bucket_text(&mut s, b, g.group_type);
    }
    s
}

impl std::fmt::Display for Group {
    /// The group as one line of `ovs-ofctl -O OpenFlow13 dump-groups` (without the leading
    /// space): `group_id=2,type=select,bucket=weight:10,actions=output:2,bucket=...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&group_text(self))
    }
}

fn render_error(s: &mut String, e: &super::ErrorMsg) {
    match e.kind.name() {
        Some(n) => {
            let _ = writeln!(s, " {n}");
        }
        None => {
            let (t, c, exp) = e.kind.to_wire();
            match exp {
                Some(x) => {
                    let _ = writeln!(s, " ***decode error: vendor {x:#x}, type {c}***");
                }
                None => {
                    let _ = writeln!(s, " ***decode error: type {t}, code {c}***");
                }
            }
        }
    }
    use super::ErrorKind;
    if matches!(e.kind, ErrorKind::HelloFailed(_)) {
        s.push_str(&String::from_utf8_lossy(&e.data));
        s.push('\n');
        return;
    }
    render_bytes(s, &e.data);
}

/// Render bytes that should hold one message (an error's data) as OVS's `ofp_to_string`
/// does: too short, truncated, longer than the header says, refused, or the message.
fn render_bytes(s: &mut String, data: &[u8]) {
    let Ok(header) = MessageHeader::parse(data) else {
        let _ = writeln!(s, "OpenFlow packet too short (only {} bytes):", data.len());
        s.push_str(&hex_dump(data));
        return;
    };
    let len = usize::from(header.length);
    if data.len() < len {
        headline(
            s,
            &name_from_bytes(data, &header),
            header.version,
            header.xid,
        );
        let _ = write!(
            s,
            "\n(***truncated to {} bytes from {}***)\n",
            data.len(),
            len
        );
        s.push_str(&hex_dump(data));
        return;
    }
    if data.len() > len {
        let _ = writeln!(s, "(***only uses {len} bytes out of {}***)", data.len());
        s.push_str(&hex_dump(data));
        return;
    }
    match decode_frame(data) {
        Ok((h, msg, _)) => render_message(s, &msg, h.xid),
        Err(err) => {
            let name = super::ErrorKind::for_decode_error(&err)
                .name()
                .unwrap_or("OFPBRC_BAD_LEN");
            // OVS names the message (ofpraw_decode) unless the type itself is unknown.
            let unnamed = matches!(
                err,
                DecodeError::BadType(_)
                    | DecodeError::BadMultipart(_)
                    | DecodeError::BadExperimenter { .. }
                    | DecodeError::BadVersion(_)
            );
            if !unnamed {
                headline(
                    s,
                    &name_from_bytes(data, &header),
                    header.version,
                    header.xid,
                );
                s.push(' ');
            }
            let _ = writeln!(s, "***decode error: {name}***");
            s.push_str(&hex_dump(data));
        }
    }
}

/// What Open vSwitch's decoder refuses in messages ours accepts (`ofputil_decode_flow_mod`,
/// `ofputil_decode_group_mod`, `ofputil_decode_bundle_add`), checked in OVS's order; None
/// when OVS decodes the message.
fn ovs_decode_error(msg: &Message) -> Option<&'static str> {
    match msg {
        Message::FlowMod(fm) => flow_mod_refusal(fm),
        Message::GroupMod(gm) => group_mod_refusal(gm),
        Message::BundleAdd(b) => bundle_add_refusal(b),
        Message::MeterMod(mm) => meter_mod_refusal(mm),
        Message::MultipartReply(m) => match &m.body {
            MultipartReplyBody::MeterConfig(v) => v.iter().find_map(|m| bands_refusal(&m.bands)),
            _ => None,
        },
        Message::MultipartRequest(m) => match &m.body {
            MultipartRequestBody::Flow(r) | MultipartRequestBody::Aggregate(r)
                if ofp11_port(r.out_port).is_err() =>
            {
                Some("OFPBAC_BAD_OUT_PORT")
            }
            MultipartRequestBody::PortStats(p) if ofp11_port(*p).is_err() => {
                Some("OFPBAC_BAD_OUT_PORT")
            }
            _ => None,
        },
        _ => None,
    }
}

fn flow_mod_refusal(fm: &FlowMod) -> Option<&'static str> {
    let deleting = matches!(
        fm.command,
        FlowModCommand::Delete | FlowModCommand::DeleteStrict
    );
    if fm.flow.table == crate::flow::TABLE_ALL && !deleting {
        return Some("OFPFMFC_BAD_TABLE_ID");
    }
    if ofp11_port(fm.out_port).is_err() {
        return Some("OFPBAC_BAD_OUT_PORT");
    }
    if matches!(fm.command, FlowModCommand::Unknown(_)) {
        return Some("OFPFMFC_BAD_COMMAND");
    }
    if fm.flow.flags & !FLOW_FLAGS_OF13 != 0 {
        return Some("OFPFMFC_BAD_FLAGS");
    }
    None
}

/// `ofputil_pull_ofp11_group_mod` + `ofputil_check_group_mod` (OVS 3.1).
fn group_mod_refusal(gm: &crate::flow::GroupMod) -> Option<&'static str> {
    let g = &gm.group;
    if g.buckets.iter().any(|b| ofp11_port(b.watch_port).is_err()) {
        return Some("OFPGMFC_BAD_WATCH");
    }
    // OpenFlow 1.3.5 prescribes an error for a DELETE that carries buckets.
    if gm.command == GroupModCommand::Delete && !g.buckets.is_empty() {
        return Some("OFPGMFC_INVALID_GROUP");
    }
    match g.group_type {
        GroupType::Indirect if gm.command != GroupModCommand::Delete && g.buckets.len() != 1 => {
            return Some("OFPGMFC_INVALID_GROUP")
        }
        GroupType::Unknown(_) => return Some("OFPGMFC_BAD_TYPE"),
        _ => {}
    }
    if matches!(gm.command, GroupModCommand::Unknown(_)) {
        return Some("OFPGMFC_BAD_COMMAND");
    }
    for b in &g.buckets {
        if b.weight != 0 && g.group_type != GroupType::Select {
            return Some("OFPGMFC_INVALID_GROUP");
        }
        let live = b.watch_port != port::ANY || b.watch_group != crate::flow::GROUP_ANY;
        match g.group_type {
            GroupType::All | GroupType::Indirect if live => {
                return Some("OFPGMFC_WATCH_UNSUPPORTED")
            }
            GroupType::FastFailover if !live => return Some("OFPGMFC_INVALID_GROUP"),
            _ => {}
        }
    }
    None
}

/// `ofputil_decode_meter_mod` (OVS 3.1): the command, then (not for a delete) the flags and
/// the bands.
fn meter_mod_refusal(mm: &crate::meter::MeterMod) -> Option<&'static str> {
    use crate::meter::{meter_flags, MeterModCommand as C};
    match mm.command {
        C::Unknown(_) => Some("OFPMMFC_BAD_COMMAND"),
        C::Delete => None,
        C::Add | C::Modify => {
            let f = mm.meter.flags;
            if f & meter_flags::KBPS != 0 && f & meter_flags::PKTPS != 0 {
                return Some("OFPMMFC_BAD_FLAGS");
            }
            bands_refusal(&mm.meter.bands)
        }
    }
}

/// `ofputil_pull_bands`: every band 16 bytes long, of type drop or dscp_remark.
fn bands_refusal(bands: &[crate::meter::MeterBand]) -> Option<&'static str> {
    use crate::meter::BandKind;
    for b in bands {
        match &b.kind {
            BandKind::Drop | BandKind::DscpRemark { .. } => {}
            BandKind::Experimenter { .. } => return Some("OFPMMFC_BAD_BAND"),
            BandKind::Unknown { body, .. } if body.len() != 4 => return Some("OFPBRC_BAD_LEN"),
            BandKind::Unknown { .. } => return Some("OFPMMFC_BAD_BAND"),
        }
    }
    None
}

/// `ofputil_format_meter_id`: a number, or the reserved id's name.
fn meter_id_text(id: u32, sep: char) -> String {
    use crate::meter::meter_id;
    let name = match id {
        id if id <= meter_id::MAX => return format!("meter{sep}{id}"),
        meter_id::SLOWPATH => "slowpath",
        meter_id::CONTROLLER => "controller",
        meter_id::ALL => "all",
        _ => "unknown",
    };
    format!("meter{sep}{name}")
}

/// `ofputil_format_meter_config`: `meter=1 pktps burst stats bands=` and one line per band.
fn meter_config_text(s: &mut String, m: &crate::meter::Meter) {
    use crate::meter::{meter_flags as mf, BandKind};
    let _ = write!(s, "{} ", meter_id_text(m.meter_id, '='));
    for (bit, name) in [
        (mf::KBPS, "kbps"),
        (mf::PKTPS, "pktps"),
        (mf::BURST, "burst"),
        (mf::STATS, "stats"),
    ] {
        if m.flags & bit != 0 {
            let _ = write!(s, "{name} ");
        }
    }
    let rest = m.flags & !(mf::KBPS | mf::PKTPS | mf::BURST | mf::STATS);
    if rest != 0 {
        let _ = write!(s, "flags:{rest:#x} ");
    }
    s.push_str("bands=");
    for b in &m.bands {
        s.push_str("\ntype=");
        match &b.kind {
            BandKind::Drop => s.push_str("drop"),
            BandKind::DscpRemark { .. } => s.push_str("dscp_remark"),
            _ => {
                let _ = write!(s, "{}", b.band_type());
            }
        }
        let _ = write!(s, " rate={}", b.rate);
        if m.flags & mf::BURST != 0 {
            let _ = write!(s, " burst_size={}", b.burst_size);
        }
        if let BandKind::DscpRemark { prec_level } = b.kind {
            let _ = write!(s, " prec_level={prec_level}");
        }
    }
    s.push('\n');
}

/// `ofp_print_bit_names`: the named bits, then the others as one hex number ("0": none).
fn bit_names(bits: u32, name: impl Fn(u32) -> Option<&'static str>) -> String {
    if bits == 0 {
        return "0".into();
    }
    let mut parts = Vec::new();
    let mut rest = bits;
    for i in 0..32 {
        let bit = 1u32 << i;
        if bits & bit != 0 {
            if let Some(n) = name(bit) {
                parts.push(n.to_string());
                rest &= !bit;
            }
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    parts.join(" ")
}

/// `ofp_print_stats`: the multipart flags (OpenFlow 1.3 allows "more" on requests too).
fn mp_flags(s: &mut String, flags: u16) {
    if flags == 0 {
        return;
    }
    s.push_str(" flags=");
    if flags & 1 != 0 {
        s.push_str("[more]");
    }
    if flags & !1 != 0 {
        let _ = write!(s, "[***unknown flags {:#06x}***]", flags & !1);
    }
}

fn render_mp_request(s: &mut String, body: &MultipartRequestBody) {
    use MultipartRequestBody::*;
    match body {
        Desc | Table | GroupFeatures => s.push('\n'),
        PortDesc => s.push_str(" port=ANY\n"),
        GroupDesc => s.push_str(" group_id=ALL\n"),
        MeterFeatures => s.push('\n'),
        Meter(id) | MeterConfig(id) => {
            let _ = write!(s, " {}", meter_id_text(*id, '='));
        }
        Flow(r) | Aggregate(r) => {
            // ofp_print_flow_stats_request: cookie and out_group are decoded, not printed.
            if r.table_id != crate::flow::TABLE_ALL {
                let _ = write!(s, " table={}", r.table_id);
            }
            if r.out_port != port::ANY {
                let _ = write!(
                    s,
                    " out_port={}",
                    ofp11_port(r.out_port).unwrap_or_default()
                );
            }
            let _ = write!(s, " {}", r.matches);
        }
        PortStats(p) => {
            let _ = writeln!(s, " port_no={}", ofp11_port(*p).unwrap_or_default());
        }
        Group(g) => {
            let _ = writeln!(s, " group_id={}", group_id_name(*g));
        }
        Unknown { body, .. } => {
            let _ = writeln!(s, " ({} bytes of body)", body.len());
        }
    }
}

fn stat(v: u64) -> String {
    if v == u64::MAX {
        "?".into()
    } else {
        v.to_string()
    }
}

fn render_mp_reply(s: &mut String, body: &MultipartReplyBody) -> Result<(), &'static str> {
    use MultipartReplyBody::*;
    match body {
        Desc(d) => {
            let t = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let _ = write!(
                s,
                "\nManufacturer: {}\nHardware: {}\nSoftware: {}\nSerial Num: {}\nDP Description: {}\n",
                t(&d.mfr_desc),
                t(&d.hw_desc),
                t(&d.sw_desc),
                t(&d.serial_num),
                t(&d.dp_desc)
            );
        }
        Flow(v) => {
            // ofp_print_flow_stats_reply: "\n " and ofp_print_flow_stats for each entry that
            // decodes; the first that does not (unknown flags) ends the print with an error.
            for fs in v {
                let f = &fs.flow;
                if f.flags & !FLOW_FLAGS_OF13 != 0 {
                    return Err("OFPFMFC_BAD_FLAGS");
                }
                let _ = write!(
                    s,
                    "\n cookie={:#x}, duration={}s, table={}, n_packets={}, n_bytes={}, ",
                    f.cookie,
                    duration(fs.duration_sec, fs.duration_nsec),
                    f.table,
                    stat(fs.packet_count),
                    stat(fs.byte_count)
                );
                if f.idle_timeout != 0 {
                    let _ = write!(s, "idle_timeout={}, ", f.idle_timeout);
                }
                if f.hard_timeout != 0 {
                    let _ = write!(s, "hard_timeout={}, ", f.hard_timeout);
                }
                s.push_str(&flow_flag_words(f.flags));
                let m = match_with_priority(&f.matches, f.priority);
                s.push_str(&m);
                if !m.is_empty() {
                    s.push(' ');
                }
                let _ = write!(s, "actions={}", format_instructions(&f.instructions));
            }
        }
        Aggregate(a) => {
            let _ = writeln!(
                s,
                " packet_count={} byte_count={} flow_count={}",
                a.packet_count, a.byte_count, a.flow_count
            );
        }
        Table(v) => {
            s.push('\n');
            render_table_stats(s, v);
        }
        PortStats(v) => {
            let _ = writeln!(s, " {} ports", v.len());
            for p in v {
                let c = &p.counters;
                let name = match p.port_no {
                    port::LOCAL => "LOCAL".to_string(),
                    n => format!("{n:>2}"),
                };
                let _ = writeln!(
                    s,
                    "  port {name}: rx pkts={}, bytes={}, drop={}, errs={}, frame={}, over={}, crc={}",
                    stat(c[0]),
                    stat(c[2]),
                    stat(c[4]),
                    stat(c[6]),
                    stat(c[8]),
                    stat(c[9]),
                    stat(c[10])
                );
                let _ = writeln!(
                    s,
                    "           tx pkts={}, bytes={}, drop={}, errs={}, coll={}",
                    stat(c[1]),
                    stat(c[3]),
                    stat(c[5]),
                    stat(c[7]),
                    stat(c[11])
                );
                if p.duration_sec != u32::MAX {
                    let _ = writeln!(
                        s,
                        "           duration={}s",
                        duration(p.duration_sec, p.duration_nsec)
                    );
                }
            }
        }
        Group(v) => {
            for g in v {
                let _ = write!(s, "\n group_id={},", g.group_id);
                if g.duration_sec != u32::MAX {
                    let _ = write!(
                        s,
                        "duration={}s,",
                        duration(g.duration_sec, g.duration_nsec)
                    );
                }
                let _ = write!(
                    s,
                    "ref_count={},packet_count={},byte_count={}",
                    g.ref_count, g.packet_count, g.byte_count
                );
                for (i, (p, b)) in g.bucket_stats.iter().enumerate() {
                    if *p != u64::MAX {
                        let _ = write!(s, ",bucket{i}:packet_count={p},byte_count={b}");
                    }
                }
            }
        }
        GroupDesc(v) => {
            for g in v {
                let _ = write!(s, "\n {}", group_text(g));
            }
        }
        MeterConfig(v) => {
            for m in v {
                s.push('\n');
                meter_config_text(s, m);
            }
        }
        Meter(v) => {
            for m in v {
                let _ = write!(
                    s,
                    "\n{} flow_count:{} packet_in_count:{} byte_in_count:{} duration:{}s bands:\n",
                    meter_id_text(m.meter_id, ':'),
                    m.flow_count,
                    m.packet_in_count,
                    m.byte_in_count,
                    duration(m.duration_sec, m.duration_nsec)
                );
                for (i, (p, b)) in m.band_stats.iter().enumerate() {
                    let _ = writeln!(s, "{i}: packet_count:{p} byte_count:{b}");
                }
            }
        }
        MeterFeatures(f) => {
            let _ = write!(
                s,
                "\nmax_meter:{} max_bands:{} max_color:{}\nband_types: {}\ncapabilities: {}\n",
                f.max_meter,
                f.max_bands,
                f.max_color,
                bit_names(f.band_types, |b| match b {
                    2 => Some("drop"),
                    4 => Some("dscp_remark"),
                    _ => None,
                }),
                bit_names(f.capabilities, |b| match b {
                    1 => Some("kbps"),
                    2 => Some("pktps"),
                    4 => Some("burst"),
                    8 => Some("stats"),
                    _ => None,
                })
            );
        }
        GroupFeatures(g) => {
            let _ = write!(
                s,
                "\n Group table:\n    Types:  {:#x}\n    Capabilities:  {:#x}\n",
                g.types, g.capabilities
            );
            for (i, name) in ["all", "select", "indirect", "fast failover"]
                .iter()
                .enumerate()
            {
                if g.types & (1 << i) != 0 {
                    let _ = write!(
                        s,
                        "    {name} group:\n       max_groups={}\n       actions: {}\n",
                        hash_x(g.max_groups.get(i).copied().unwrap_or(0).into()),
                        group_action_names(g.actions.get(i).copied().unwrap_or(0))
                    );
                }
            }
        }
        PortDesc(v) => {
            s.push('\n');
            // OVS prints ports sorted by number.
            let mut sorted: Vec<&Port> = v.iter().collect();
            sorted.sort_by_key(|p| p.port_no);
            for p in sorted {
                render_port(s, p);
            }
        }
        Unknown { body, .. } => {
            let _ = writeln!(s, " ({} bytes of body)", body.len());
        }
    }
    Ok(())
}

/// OFPAT_* bits of a group-features action bitmap, named and ordered as OVS prints them.
fn group_action_names(bits: u32) -> String {
    const ORDER: &[(u32, &str)] = &[
        (0, "output"),
        (22, "group"),
        (25, "set_field"),
        (18, "strip_vlan"),
        (17, "push_vlan"),
        (23, "mod_nw_ttl"),
        (24, "dec_ttl"),
        (15, "set_mpls_ttl"),
        (16, "dec_mpls_ttl"),
        (19, "push_mpls"),
        (20, "pop_mpls"),
        (21, "set_queue"),
    ];
    let names: Vec<&str> = ORDER
        .iter()
        .filter(|(b, _)| bits & (1 << b) != 0)
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        // ofpact_bitmap_format: no action it knows of.
        return "<none>".into();
    }
    names.join(" ")
}

fn render_table_stats(s: &mut String, v: &[super::TableStats]) {
    let mut i = 0;
    while i < v.len() {
        let t = &v[i];
        let _ = write!(
            s,
            "  table {}:\n    active={}, lookup={}, matched={}\n\n",
            t.table_id, t.active_count, t.lookup_count, t.matched_count
        );
        // Following tables with identical counters are summarised, as OVS does.
        let same = |u: &super::TableStats| {
            (u.active_count, u.lookup_count, u.matched_count)
                == (t.active_count, t.lookup_count, t.matched_count)
        };
        let mut j = i + 1;
        while j < v.len() && same(&v[j]) {
            j += 1;
        }
        if j > i + 2 {
            let _ = write!(
                s,
                "  tables {}...{}: ditto\n\n",
                v[i + 1].table_id,
                v[j - 1].table_id
            );
            i = j;
        } else {
            i += 1;
        }
    }
    if s.ends_with("\n\n") {
        s.pop();
    }
}

fn render_port(s: &mut String, p: &Port) {
    let _ = writeln!(
        s,
        " {}({}): addr:{}",
        port_name(p.port_no),
        p.name_str(),
        p.hw_addr
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    );
    let words = |bits: u32, names: &[(u32, &str)]| -> String {
        if bits == 0 {
            return "0".into();
        }
        let mut out: Vec<String> = names
            .iter()
            .filter(|(b, _)| bits & b != 0)
            .map(|(_, n)| n.to_string())
            .collect();
        let known: u32 = names.iter().map(|(b, _)| b).fold(0, |a, b| a | b);
        if bits & !known != 0 {
            out.push(format!("{:#x}", bits & !known));
        }
        out.join(" ")
    };
    let _ = writeln!(
        s,
        "     config:     {}",
        words(
            p.config,
            &[
                (1, "PORT_DOWN"),
                (4, "NO_RECV"),
                (32, "NO_FWD"),
                (64, "NO_PACKET_IN")
            ]
        )
    );
    let _ = writeln!(
        s,
        "     state:      {}",
        words(p.state, &[(1, "LINK_DOWN"), (2, "BLOCKED"), (4, "LIVE")])
    );
    let features: &[(u32, &str)] = &[
        (1, "10MB-HD"),
        (2, "10MB-FD"),
        (4, "100MB-HD"),
        (8, "100MB-FD"),
        (16, "1GB-HD"),
        (32, "1GB-FD"),
        (64, "10GB-FD"),
        (128, "40GB-FD"),
        (256, "100GB-FD"),
        (512, "1TB-FD"),
        (1024, "OTHER"),
        (2048, "COPPER"),
        (4096, "FIBER"),
        (8192, "AUTO_NEG"),
        (16384, "AUTO_PAUSE"),
        (32768, "AUTO_PAUSE_ASYM"),
    ];
    for (label, v) in [
        ("current:   ", p.curr),
        ("advertised:", p.advertised),
        ("supported: ", p.supported),
        ("peer:      ", p.peer),
    ] {
        if v != 0 {
            let _ = writeln!(s, "     {label} {}", words(v, features));
        }
    }
    let _ = writeln!(
        s,
        "     speed: {} Mbps now, {} Mbps max",
        p.curr_speed / 1000,
        p.max_speed / 1000
    );
}

fn render_async(s: &mut String, a: &super::AsyncConfig) {
    s.push('\n');
    for (i, role) in ["primary", "secondary"].iter().enumerate() {
        let _ = writeln!(s, " {role}:");
        let line = |mask: u32, names: &[&str]| -> String {
            let w: Vec<&str> = names
                .iter()
                .enumerate()
                .filter(|(b, _)| mask & (1 << b) != 0)
                .map(|(_, n)| *n)
                .collect();
            if w.is_empty() {
                "(off)".into()
            } else {
                w.join(" ")
            }
        };
        let pi = a.packet_in_mask.get(i).copied().unwrap_or(0);
        let ps = a.port_status_mask.get(i).copied().unwrap_or(0);
        let fr = a.flow_removed_mask.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "       PACKET_IN: {}",
            line(pi, &["no_match", "action", "invalid_ttl"])
        );
        let _ = writeln!(
            s,
            "     PORT_STATUS: {}",
            line(ps, &["add", "delete", "modify"])
        );
        let _ = writeln!(
            s,
            "    FLOW_REMOVED: {}",
            line(fr, &["idle", "hard", "delete", "group_delete"])
        );
        s.push_str("     ROLE_STATUS: (off)\n    TABLE_STATUS: (off)\n  REQUESTFORWARD: (off)\n");
        if i == 0 {
            s.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_parsing_accepts_whitespace_and_refuses_garbage() {
        assert_eq!(
            parse_hex("04 14\n00 08 0x00000001").ok(),
            Some(vec![4, 0x14, 0, 8, 0, 0, 0, 1])
        );
        assert!(parse_hex("0g").is_err());
        assert!(parse_hex("041").is_err());
    }

    #[test]
    fn hex_dump_matches_ovs_layout() {
        let d = hex_dump(b"flowmesh");
        assert_eq!(
            d,
            "00000000  66 6c 6f 77 6d 65 73 68-                        |flowmesh        |\n"
        );
    }

    #[test]
    fn barrier_prints_like_ovs() {
        let s = ofp_print(&[4, 21, 0, 8, 0, 0, 0, 0x84]).expect("print");
        assert_eq!(s, "OFPT_BARRIER_REPLY (OF1.3) (xid=0x84):\n");
        assert!(ofp_print(&[]).is_err());
    }
}
