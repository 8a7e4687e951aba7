//! Messages captured from a real Open vSwitch 3.1 sandbox (tests/data/msg, see its README)
//! decode, re-encode byte for byte, and print as `ovs-ofctl ofp-print` prints them.
//!
//! Captures whose content needs the match/action/instruction codec (flow stats, group
//! description, packet-in, flow-removed, errors embedding flow-mods) are checked in
//! `oracle_msg_flows.rs`.

#[path = "oracle_msg_common.rs"]
mod common;

use common::{assert_same_text, capture, capture_names, ovs_print, strip_log};
use ofproto::message::{ErrorKind, MultipartReplyBody};
use ofproto::Message;

/// Captures that need the match/action codec; checked after merging, in oracle_msg_flows.rs.
pub const NEEDS_FLOW_CODEC: &[&str] = &[
    "flow_stats_reply",
    "group_desc_reply",
    "packet_in",
    "flow_removed",
    "error_bad_flow_mod",
    "bundle_error",
    "bundle_commit_failed",
    "bundle_error_bad_xid",
];

#[test]
fn captured_messages_round_trip_and_print_like_ovs() {
    let names = capture_names();
    assert!(names.len() >= 20, "captures missing: {names:?}");
    let mut checked = 0;
    for name in names
        .iter()
        .filter(|n| !NEEDS_FLOW_CODEC.contains(&n.as_str()))
    {
        for (i, raw) in capture(name).iter().enumerate() {
            let what = format!("{name}[{i}]");
            let (hdr, msg, used) =
                ofproto::decode_frame(raw).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(used, raw.len(), "{what}: length");
            assert_eq!(&msg.encode(hdr.xid), raw, "{what}: re-encoding differs");
            let ours = ofproto::ofp_print(raw).unwrap_or_else(|e| panic!("{what}: {e}"));
            let theirs = strip_log(&ovs_print(raw));
            if name == "table_stats_reply" {
                // Same facts; OVS's "ditto" summarising is followed but not guaranteed
                // byte-identical.
                assert_eq!(ours.lines().next(), theirs.lines().next(), "{what}");
            } else {
                assert_same_text(&what, &ours, &theirs);
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "only {checked} captured messages checked");
}

#[test]
fn captured_replies_carry_the_expected_facts() {
    let (_, m, _) = ofproto::decode_frame(&capture("features_reply")[0]).expect("features");
    let Message::FeaturesReply(f) = m else {
        panic!("not a features reply")
    };
    assert_eq!((f.datapath_id, f.n_tables), (0xa1, 254));

    let (_, m, _) = ofproto::decode_frame(&capture("port_desc_reply")[0]).expect("port desc");
    let Message::MultipartReply(r) = m else {
        panic!()
    };
    let MultipartReplyBody::PortDesc(ports) = r.body else {
        panic!()
    };
    let names: Vec<String> = ports.iter().map(|p| p.name_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["br0", "p2", "p3", "p4", "p5"]);

    let (_, m, _) = ofproto::decode_frame(&capture("role_reply")[0]).expect("role");
    assert!(
        matches!(m, Message::RoleReply(r) if r.role == ofproto::message::Role::Master && r.generation_id == 1)
    );

    let (_, m, _) =
        ofproto::decode_frame(&capture("bundle_error_bad_id")[0]).expect("bundle error");
    let Message::Error(e) = m else { panic!() };
    assert_eq!(
        e.kind,
        ErrorKind::BundleFailed(ofproto::message::BundleFailedCode::BadId)
    );

    let (_, m, _) = ofproto::decode_frame(&capture("error_bad_group_mod")[0]).expect("group err");
    let Message::Error(e) = m else { panic!() };
    assert_eq!(
        e.kind,
        ErrorKind::GroupModFailed(ofproto::message::GroupModFailedCode::GroupExists)
    );

    // The 2,000-flow dump came in several parts: all but the last flagged MORE.
    let parts = capture("flow_stats_reply");
    assert!(parts.len() >= 2);
    for (i, raw) in parts.iter().enumerate() {
        let more = u16::from_be_bytes([raw[10], raw[11]]) & 1 == 1;
        assert_eq!(more, i + 1 < parts.len(), "part {i}");
    }
}

#[test]
fn a_captured_stream_frames_at_any_split() {
    let mut stream = Vec::new();
    for name in [
        "hello",
        "features_reply",
        "port_desc_reply",
        "barrier_reply",
        "table_stats_reply",
    ] {
        for m in capture(name) {
            stream.extend_from_slice(&m);
        }
    }
    for chunk in [1usize, 7, 64, 1500] {
        let mut framer = ofproto::Framer::new();
        let mut n = 0;
        for piece in stream.chunks(chunk) {
            framer.push(piece);
            while let Some((_, msg)) = framer.next_message().expect("framing") {
                msg.expect("decodes");
                n += 1;
            }
        }
        assert_eq!((n, framer.pending()), (6, 0), "chunk size {chunk}");
    }
}
