//! Helpers shared by the flow-codec oracle tests: running `ovs-ofctl`, and a minimal test-only
//! OFPT_FLOW_MOD framing (the real message layer lives in `ofproto::message`).

#![allow(dead_code)]

use ofproto::wire::{Reader, Writer};
use ofproto::{Flow, Match};
use std::io::Write as _;
use std::process::{Command, Stdio};

/// Run `ovs-ofctl ARGS` with optional stdin; panics (does not skip) when ovs-ofctl is missing.
pub fn ovs_ofctl(args: &[&str], stdin: Option<&str>) -> (String, String) {
    let mut cmd = Command::new("ovs-ofctl");
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot run ovs-ofctl ({e}): the flow oracle tests need Open vSwitch 3.1's ovs-ofctl \
             on PATH (apt-get install openvswitch-switch)"
        ),
    };
    if let (Some(input), Some(mut si)) = (stdin, child.stdin.take()) {
        si.write_all(input.as_bytes())
            .expect("write ovs-ofctl stdin");
    }
    let out = child.wait_with_output().expect("wait for ovs-ofctl");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// True when ovs-ofctl output shows that it could not decode something (it exits 0 anyway).
pub fn ovs_complains(text: &str) -> bool {
    text.contains("decode error")
        || text.contains("truncated")
        || text.contains("trailing")
        || text.contains("|WARN|")
        || text.contains("|ERR|")
}

/// OFPT_FLOW_MOD (OpenFlow 1.3.5 §7.3.4.1), 48-byte fixed part then match and instructions:
/// header(8) cookie(8) cookie_mask(8) table_id(1) command(1) idle(2) hard(2) priority(2)
/// buffer_id(4) out_port(4) out_group(4) flags(2) pad(2).
pub fn flow_mod_add(flow: &Flow, xid: u32) -> Vec<u8> {
    let mut w = Vec::new();
    w.put_u8(4);
    w.put_u8(14);
    w.put_u16(0);
    w.put_u32(xid);
    w.put_u64(flow.cookie);
    w.put_u64(0);
    w.put_u8(flow.table);
    w.put_u8(0);
    w.put_u16(flow.idle_timeout);
    w.put_u16(flow.hard_timeout);
    w.put_u16(flow.priority);
    w.put_u32(0xffff_ffff);
    w.put_u32(0xffff_ffff);
    w.put_u32(0xffff_ffff);
    w.put_u16(flow.flags);
    w.put_u16(0);
    flow.matches.encode(&mut w);
    ofproto::instruction::encode_instructions(&flow.instructions, &mut w);
    let len = w.len() as u16;
    w.patch_u16(2, len);
    w
}

/// Decode an OFPT_FLOW_MOD into a Flow with this crate's match and instruction codecs.
pub fn parse_flow_mod(bytes: &[u8]) -> Result<Flow, ofproto::DecodeError> {
    let mut r = Reader::new(bytes);
    r.skip(8, "header")?;
    let cookie = r.u64("cookie")?;
    r.skip(8, "cookie_mask")?;
    let table = r.u8("table")?;
    r.skip(1, "command")?;
    let idle_timeout = r.u16("idle")?;
    let hard_timeout = r.u16("hard")?;
    let priority = r.u16("priority")?;
    r.skip(12, "buffer/out_port/out_group")?;
    let flags = r.u16("flags")?;
    r.skip(2, "pad")?;
    let matches = Match::decode(&mut r)?;
    let instructions = ofproto::instruction::decode_instructions(&mut r)?;
    Ok(Flow {
        table,
        priority,
        cookie,
        idle_timeout,
        hard_timeout,
        flags,
        matches,
        instructions,
    })
}

/// Hex without separators.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parse hex (whitespace ignored).
pub fn from_hex(s: &str) -> Vec<u8> {
    let clean: Vec<u8> = s.bytes().filter(|c| c.is_ascii_hexdigit()).collect();
    clean
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex"))
        .collect()
}

/// Decode many messages with one `ovs-ofctl ofp-parse` run; returns each message's text
/// (keyed by xid = index + 1). Panics with the culprit if OVS complains about any of them.
pub fn ofp_parse_batch(msgs: &[Vec<u8>], labels: &[String]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("flowmesh-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("batch-{}.bin", labels.len()));
    std::fs::write(&path, msgs.concat()).expect("write batch");
    let (out, err) = ovs_ofctl(&["ofp-parse", path.to_str().expect("utf8 path")], None);
    let _ = std::fs::remove_file(&path);
    let mut texts = vec![String::new(); msgs.len()];
    let mut cur: Option<usize> = None;
    for line in out.lines() {
        if let Some(pos) = line.find("(xid=0x") {
            let rest = &line[pos + 7..];
            let end = rest.find(')').unwrap_or(rest.len());
            let xid = usize::from_str_radix(&rest[..end], 16).unwrap_or(0);
            cur = xid.checked_sub(1).filter(|&i| i < msgs.len());
        }
        if let Some(i) = cur {
            if !texts[i].is_empty() {
                texts[i].push('\n');
            }
            texts[i].push_str(line);
        }
    }
    let mut bad = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        if t.is_empty() || ovs_complains(t) {
            bad.push(format!("[{}] {}\n{}", i, labels[i], t));
        }
    }
    if !err.trim().is_empty() && bad.is_empty() {
        // A warning we could not attribute: decode one by one to find it.
        for (i, m) in msgs.iter().enumerate() {
            let (o, e) = ovs_ofctl(&["ofp-print", &to_hex(m)], None);
            if ovs_complains(&o) || ovs_complains(&e) {
                bad.push(format!("[{}] {}\n{o}{e}", i, labels[i]));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "Open vSwitch could not decode {} of {} messages:\n{}\nstderr:\n{err}",
        bad.len(),
        msgs.len(),
        bad.join("\n")
    );
    texts
}
