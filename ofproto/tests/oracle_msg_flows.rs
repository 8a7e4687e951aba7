//! Oracle tests of the messages whose content is flows and groups: FLOW_MOD, flow stats
//! replies, GROUP_MOD, group description replies, PACKET_IN, FLOW_REMOVED and errors that
//! embed flow-mods, with real matches and actions, plus the captures that hold them.
//!
//! Every case is encoded by flowmesh, decoded by `ovs-ofctl ofp-print` (Open vSwitch 3.1) and
//! the two texts must be identical. A case OVS must decode cleanly fails if OVS complains; a
//! case built to be refused by OVS's decoder (e.g. a group DELETE with buckets, which
//! OpenFlow 1.3.5 forbids) must be refused with the named error, and flowmesh must print the
//! same refusal. Run them with `cargo test -p ofproto --test oracle_msg_flows`.

#[path = "oracle_msg_common.rs"]
mod common;

use common::{assert_same_text, capture, ovs_failed, ovs_print, ovs_print_split, strip_log};
use ofproto::action::{port, Action, FieldSlice};
use ofproto::instruction::Instruction;
use ofproto::message::*;
use ofproto::oxm::{Field, Match};
use ofproto::{
    Bucket, Flow, FlowMod, FlowModCommand, Group, GroupMod, GroupModCommand, GroupType, Message,
};
use std::net::Ipv4Addr;

/// Round trip, OVS decodes the bytes without complaint, and the texts are identical.
fn identical(what: &str, msg: &Message, xid: u32) {
    let ovs = compare(what, msg, xid);
    assert!(!ovs_failed(&ovs), "{what}: OVS refused the bytes:\n{ovs}");
}

/// Round trip, OVS's decoder refuses the bytes with `error`, and flowmesh prints the same
/// refusal.
fn refused(what: &str, msg: &Message, xid: u32, error: &str) {
    let ovs = compare(what, msg, xid);
    assert!(
        ovs.contains(&format!("***decode error: {error}***")),
        "{what}: OVS should refuse with {error}:\n{ovs}"
    );
}

fn compare(what: &str, msg: &Message, xid: u32) -> String {
    let bytes = msg.encode(xid);
    let (back, used) = ofproto::decode_message(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(used, bytes.len(), "{what}");
    assert_eq!(&back, msg, "{what}: round trip");
    let ours = ofproto::ofp_print(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (text, log) = ovs_print_split(&bytes);
    assert_same_text(what, &ours, &text);
    text + &log
}

/// The realistic overlay flow of the benchmark: table 20, ip, reg1, nw_dst -> move tun_id to
/// reg2, set eth_src, dec_ttl, output.
pub fn overlay_flow() -> Flow {
    Flow::new(
        20,
        100,
        Match::new()
            .in_port(3)
            .eth_type(0x0800)
            .reg(1, 0x64)
            .ipv4_dst(Ipv4Addr::new(10, 244, 0, 2), 32),
    )
    .cookie(0x3000)
    .apply(vec![
        Action::move_(
            FieldSlice::range(Field::TunnelId, 0, 32),
            FieldSlice::whole(Field::Reg(2)),
        ),
        Action::set_field(Field::EthSrc, &[0x0a, 0x58, 0, 0, 0, 1]),
        Action::set_field_u64(Field::Reg(3), 7),
        Action::DecNwTtl,
        Action::output(2),
    ])
}

fn fm(command: FlowModCommand, flow: Flow) -> FlowMod {
    let mut m = FlowMod::add(flow);
    m.command = command;
    m
}

#[test]
fn flow_mods_match_ovs() {
    let f = overlay_flow();
    // Every command with the same flow: only ADD prints the (new) cookie.
    for (i, cmd) in [
        FlowModCommand::Add,
        FlowModCommand::Modify,
        FlowModCommand::ModifyStrict,
        FlowModCommand::Delete,
        FlowModCommand::DeleteStrict,
    ]
    .into_iter()
    .enumerate()
    {
        identical(
            &format!("flow mod {cmd:?}"),
            &Message::FlowMod(fm(cmd, f.clone())),
            1 + i as u32,
        );
    }
    // Modifies and deletes selecting by cookie/cookie_mask.
    for (i, cmd) in [
        FlowModCommand::Modify,
        FlowModCommand::ModifyStrict,
        FlowModCommand::Delete,
        FlowModCommand::DeleteStrict,
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = fm(cmd, f.clone().cookie(0x3000_0000_0000_0042));
        m.cookie_mask = 0xffff_0000_0000_00ff;
        identical(
            &format!("flow mod {cmd:?} by cookie mask"),
            &Message::FlowMod(m),
            0x10 + i as u32,
        );
    }
    // An ADD's cookie mask is ignored by OVS (new cookie only).
    let mut add_masked = FlowMod::add(f.clone());
    add_masked.cookie_mask = 0xff;
    identical(
        "flow mod add with cookie mask",
        &Message::FlowMod(add_masked),
        0x20,
    );
    // A delete in every table by cookie mask, output port and output group.
    let mut del = fm(
        FlowModCommand::Delete,
        Flow::new(ofproto::flow::TABLE_ALL, 0x8000, Match::new()).cookie(0x1000),
    );
    del.cookie_mask = 0xffff;
    del.out_port = 2;
    del.out_group = 7;
    identical(
        "flow mod delete by cookie and out_port",
        &Message::FlowMod(del),
        0x21,
    );
    let mut del_strict = fm(
        FlowModCommand::DeleteStrict,
        Flow::new(
            40,
            7,
            Match::new()
                .eth_type(0x0806)
                .arp_tpa(Ipv4Addr::new(10, 0, 0, 1), 32),
        ),
    );
    del_strict.out_port = port::LOCAL;
    del_strict.out_group = 3;
    identical(
        "flow mod delete strict out_port LOCAL",
        &Message::FlowMod(del_strict),
        0x22,
    );
    let mut del_ctrl = fm(FlowModCommand::Delete, Flow::new(3, 0, Match::new()));
    del_ctrl.out_port = port::CONTROLLER;
    identical(
        "flow mod delete out_port CONTROLLER",
        &Message::FlowMod(del_ctrl),
        0x23,
    );
    // Timeouts, every flag, a buffer id.
    let mut timed = FlowMod::add(
        Flow::new(0, 5, Match::new().in_port(port::LOCAL))
            .cookie(u64::MAX - 1)
            .goto(10),
    );
    timed.flow.idle_timeout = 10;
    timed.flow.hard_timeout = 20;
    timed.flow.flags = 0x1f;
    identical(
        "flow mod with timeouts and flags",
        &Message::FlowMod(timed),
        5,
    );
    let mut rem = FlowMod::add(overlay_flow());
    rem.flow.flags = ofproto::flow::flow_flags::SEND_FLOW_REM;
    rem.flow.idle_timeout = 300;
    rem.buffer_id = 0x1234;
    identical("flow mod send_flow_rem + buffer", &Message::FlowMod(rem), 6);
    let mut modt = fm(FlowModCommand::ModifyStrict, overlay_flow());
    modt.flow.hard_timeout = 65535;
    modt.flow.flags =
        ofproto::flow::flow_flags::RESET_COUNTS | ofproto::flow::flow_flags::CHECK_OVERLAP;
    identical(
        "flow mod modify strict with flags",
        &Message::FlowMod(modt),
        7,
    );
    // Defaults: priority 32768, empty match, no instructions, cookie all-ones (not printed).
    identical(
        "flow mod catch-all drop",
        &Message::FlowMod(FlowMod::add(
            Flow::new(0, 0x8000, Match::new()).cookie(u64::MAX),
        )),
        8,
    );
    let mut meta = Flow::new(1, 0, Match::new().with_u64(Field::Metadata, 9));
    meta.instructions = vec![
        Instruction::Meter(1),
        Instruction::ApplyActions(vec![Action::output(port::IN_PORT)]),
        Instruction::ClearActions,
        Instruction::WriteActions(vec![Action::Group(4)]),
        Instruction::WriteMetadata {
            value: 0x10,
            mask: 0xff,
        },
        Instruction::GotoTable(2),
    ];
    identical(
        "flow mod all instructions",
        &Message::FlowMod(FlowMod::add(meta)),
        9,
    );

    // What OVS's decoder refuses, flowmesh prints the same way.
    let mut all_tables = FlowMod::add(overlay_flow());
    all_tables.flow.table = ofproto::flow::TABLE_ALL;
    refused(
        "flow mod add to table ALL",
        &Message::FlowMod(all_tables),
        0x30,
        "OFPFMFC_BAD_TABLE_ID",
    );
    let mut bad_flags = FlowMod::add(overlay_flow());
    bad_flags.flow.flags = 0x40;
    refused(
        "flow mod unknown flag",
        &Message::FlowMod(bad_flags),
        0x31,
        "OFPFMFC_BAD_FLAGS",
    );
    let mut bad_port = fm(FlowModCommand::Delete, overlay_flow());
    bad_port.out_port = 0x1_0000;
    refused(
        "flow mod out_port beyond OVS's range",
        &Message::FlowMod(bad_port),
        0x32,
        "OFPBAC_BAD_OUT_PORT",
    );
    refused(
        "flow mod unknown command",
        &Message::FlowMod(fm(FlowModCommand::Unknown(9), overlay_flow())),
        0x33,
        "OFPFMFC_BAD_COMMAND",
    );
}

fn test_groups() -> Vec<Group> {
    vec![
        Group {
            group_id: 1,
            group_type: GroupType::All,
            buckets: vec![
                Bucket::new(vec![Action::output(2)]),
                Bucket::new(vec![Action::output(3)]),
            ],
        },
        Group {
            group_id: 2,
            group_type: GroupType::Select,
            buckets: vec![
                Bucket {
                    weight: 10,
                    ..Bucket::new(vec![Action::output(2)])
                },
                Bucket {
                    weight: 20,
                    ..Bucket::new(vec![
                        Action::set_field(Field::EthDst, &[0x0a, 0x58, 0x0a, 0xf4, 0, 5]),
                        Action::output(3),
                    ])
                },
                // Weight 1 is the select default (not printed); weight 0 is printed.
                Bucket {
                    weight: 1,
                    ..Bucket::new(vec![Action::output(4)])
                },
                Bucket {
                    weight: 0,
                    ..Bucket::new(vec![Action::output(5)])
                },
            ],
        },
        Group {
            group_id: 3,
            group_type: GroupType::Indirect,
            buckets: vec![Bucket::new(vec![
                Action::set_field_u64(Field::TunnelId, 100),
                Action::output(1),
            ])],
        },
        Group {
            group_id: 4,
            group_type: GroupType::FastFailover,
            buckets: vec![
                Bucket {
                    watch_port: 2,
                    ..Bucket::new(vec![Action::output(2)])
                },
                Bucket {
                    watch_port: 3,
                    watch_group: 1,
                    ..Bucket::new(vec![Action::output(3)])
                },
                Bucket {
                    watch_group: 3,
                    ..Bucket::new(vec![Action::Group(3)])
                },
                Bucket {
                    watch_port: port::LOCAL,
                    ..Bucket::new(vec![Action::output(port::LOCAL)])
                },
            ],
        },
        Group {
            group_id: 0xffff_ff00,
            group_type: GroupType::All,
            buckets: vec![],
        },
        Group {
            group_id: 5,
            group_type: GroupType::Select,
            buckets: vec![Bucket {
                weight: 65535,
                ..Bucket::new(vec![])
            }],
        },
    ]
}

#[test]
fn group_mods_and_group_desc_match_ovs() {
    let groups = test_groups();
    for (i, g) in groups.iter().enumerate() {
        for cmd in [GroupModCommand::Add, GroupModCommand::Modify] {
            identical(
                &format!("group mod {cmd:?} {}", g.group_id),
                &Message::GroupMod(GroupMod {
                    command: cmd,
                    group: g.clone(),
                }),
                0x70 + i as u32,
            );
        }
        // OpenFlow 1.3.5: a DELETE names the group only (no buckets).
        identical(
            &format!("group mod delete {}", g.group_id),
            &Message::GroupMod(GroupMod {
                command: GroupModCommand::Delete,
                group: Group {
                    buckets: vec![],
                    ..g.clone()
                },
            }),
            0x80 + i as u32,
        );
    }
    identical(
        "group mod delete ALL",
        &Message::GroupMod(GroupMod {
            command: GroupModCommand::Delete,
            group: Group {
                group_id: ofproto::flow::GROUP_ALL,
                group_type: GroupType::All,
                buckets: vec![],
            },
        }),
        0x8f,
    );
    let reply = MultipartReply::new(MultipartReplyBody::GroupDesc(groups.clone()));
    identical("group desc reply", &Message::MultipartReply(reply), 0x71);
    let empty = MultipartReply::new(MultipartReplyBody::GroupDesc(vec![]));
    identical(
        "empty group desc reply",
        &Message::MultipartReply(empty),
        0x72,
    );

    // The group mods OVS's decoder refuses (ofputil_check_group_mod), refused alike.
    let bad = |what: &str, command: GroupModCommand, group: Group, error: &str| {
        refused(
            what,
            &Message::GroupMod(GroupMod { command, group }),
            0x90,
            error,
        );
    };
    bad(
        "group delete with buckets",
        GroupModCommand::Delete,
        groups[2].clone(),
        "OFPGMFC_INVALID_GROUP",
    );
    bad(
        "weight in an all group",
        GroupModCommand::Add,
        Group {
            group_id: 9,
            group_type: GroupType::All,
            buckets: vec![Bucket {
                weight: 3,
                ..Bucket::new(vec![Action::output(1)])
            }],
        },
        "OFPGMFC_INVALID_GROUP",
    );
    bad(
        "fast failover without watch",
        GroupModCommand::Add,
        Group {
            group_id: 9,
            group_type: GroupType::FastFailover,
            buckets: vec![Bucket::new(vec![Action::output(1)])],
        },
        "OFPGMFC_INVALID_GROUP",
    );
    bad(
        "watch in an indirect group",
        GroupModCommand::Modify,
        Group {
            group_id: 9,
            group_type: GroupType::Indirect,
            buckets: vec![Bucket {
                watch_port: 1,
                ..Bucket::new(vec![Action::output(1)])
            }],
        },
        "OFPGMFC_WATCH_UNSUPPORTED",
    );
    bad(
        "indirect group with two buckets",
        GroupModCommand::Add,
        Group {
            group_id: 9,
            group_type: GroupType::Indirect,
            buckets: vec![
                Bucket::new(vec![Action::output(1)]),
                Bucket::new(vec![Action::output(2)]),
            ],
        },
        "OFPGMFC_INVALID_GROUP",
    );
    bad(
        "watch port beyond OVS's range",
        GroupModCommand::Add,
        Group {
            group_id: 9,
            group_type: GroupType::FastFailover,
            buckets: vec![Bucket {
                watch_port: 0x12_3456,
                ..Bucket::new(vec![Action::output(1)])
            }],
        },
        "OFPGMFC_BAD_WATCH",
    );
}

#[test]
fn group_stats_reply_matches_ovs() {
    let stats = vec![
        GroupStats {
            group_id: 1,
            ref_count: 3,
            packet_count: 100,
            byte_count: 6400,
            duration_sec: 12,
            duration_nsec: 5_000_000,
            bucket_stats: vec![(60, 3840), (40, 2560)],
        },
        GroupStats {
            group_id: 2,
            ref_count: 0,
            packet_count: 0,
            byte_count: 0,
            duration_sec: u32::MAX,
            duration_nsec: 0,
            bucket_stats: vec![(u64::MAX, u64::MAX), (1, 2)],
        },
    ];
    let reply = MultipartReply::new(MultipartReplyBody::Group(stats));
    identical("group stats reply", &Message::MultipartReply(reply), 0x73);
}

#[test]
fn flow_stats_reply_matches_ovs() {
    // Durations as OVS prints them: whole seconds, milliseconds, and finer fractions.
    let nsecs = [0, 14_000_000, 123_456_789, 100, 999_000_000, 500_000_001];
    let entries = (0..40u32)
        .map(|i| FlowStats {
            flow: {
                let mut f = overlay_flow().cookie(0x3000 + u64::from(i));
                f.priority = 100 + i as u16;
                if i % 3 == 0 {
                    f.idle_timeout = 30;
                }
                if i % 4 == 1 {
                    f.hard_timeout = 600;
                }
                if i % 5 == 2 {
                    f.flags = ofproto::flow::flow_flags::SEND_FLOW_REM;
                }
                if i % 7 == 3 {
                    f.flags = 0x1f;
                }
                if i == 5 {
                    f = Flow::new(0, 0x8000, Match::new());
                }
                f
            },
            duration_sec: i * 1000,
            duration_nsec: nsecs[i as usize % nsecs.len()],
            // All-ones counters mean "unknown" (`?`).
            packet_count: if i == 8 { u64::MAX } else { u64::from(i) * 3 },
            byte_count: if i == 9 { u64::MAX } else { u64::from(i) * 180 },
        })
        .collect();
    let reply = MultipartReply {
        flags: 1,
        body: MultipartReplyBody::Flow(entries),
    };
    identical("flow stats reply", &Message::MultipartReply(reply), 0x6f);
    let empty = MultipartReply::new(MultipartReplyBody::Flow(vec![]));
    identical(
        "empty flow stats reply",
        &Message::MultipartReply(empty),
        0x6f,
    );
    let req = MultipartRequest::new(MultipartRequestBody::Flow(FlowStatsRequest::all()));
    identical("flow stats request", &Message::MultipartRequest(req), 0x6e);
    let mut narrow = FlowStatsRequest::all();
    narrow.table_id = 20;
    narrow.out_port = 3;
    narrow.out_group = 2;
    narrow.cookie = 0x3000;
    narrow.cookie_mask = 0xf000;
    narrow.matches = Match::new().eth_type(0x0800).reg(1, 0x64);
    identical(
        "flow stats request with table, out_port, cookie, match",
        &Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(
            narrow.clone(),
        ))),
        0x6d,
    );
    let mut more = MultipartRequest::new(MultipartRequestBody::Flow(narrow));
    more.flags = 1;
    identical(
        "flow stats request flags more",
        &Message::MultipartRequest(more),
        0x6c,
    );
    let mut agg = FlowStatsRequest::all();
    agg.table_id = 20;
    agg.matches = Match::new().eth_type(0x0800);
    identical(
        "aggregate request",
        &Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Aggregate(agg))),
        0x6e,
    );
    let mut bad = FlowStatsRequest::all();
    bad.out_port = 0xff00;
    refused(
        "flow stats request out_port beyond OVS's range",
        &Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(bad))),
        0x6b,
        "OFPBAC_BAD_OUT_PORT",
    );
}

#[test]
fn flow_removed_matches_ovs() {
    for (i, (reason, table_id, cookie, hard, nsec)) in [
        (0u8, 20u8, 0x3000u64, 0u16, 0u32),
        (1, 0, 0, 60, 1_000_000),
        (2, 255, 7, 0, 123),
        (3, 4, 1, 5, 999_999_999),
        (4, 4, 1, 5, 0),
        (5, 4, 1, 5, 0),
        (9, 4, 1, 5, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let fr = FlowRemoved {
            cookie,
            priority: if i == 1 { 0x8000 } else { 100 },
            reason,
            table_id,
            duration_sec: 42,
            duration_nsec: nsec,
            idle_timeout: 10,
            hard_timeout: hard,
            packet_count: 9,
            byte_count: 900,
            matches: overlay_flow().matches,
        };
        identical(
            &format!("flow removed {i}"),
            &Message::FlowRemoved(fr),
            i as u32,
        );
    }
}

#[test]
fn errors_and_bundles_embedding_flow_and_group_mods_match_ovs() {
    let fm = Message::FlowMod(FlowMod::add(overlay_flow())).encode(0x74);
    let e = Message::Error(ErrorMsg {
        kind: ErrorKind::FlowModFailed(FlowModFailedCode::Overlap),
        data: fm.clone(),
    });
    identical("error with flow mod", &e, 0x74);
    // Switches echo at least 64 bytes of the request: a truncated flow mod.
    let e = Message::Error(ErrorMsg {
        kind: ErrorKind::BadAction(BadActionCode::from_u16(4)),
        data: fm[..64].to_vec(),
    });
    let ovs = compare("error with truncated flow mod", &e, 0x74);
    assert!(
        ovs.contains("(***truncated to 64 bytes from 176***)"),
        "{ovs}"
    );
    // Data longer than the message it starts with.
    let mut long = fm.clone();
    long.extend_from_slice(&[0, 0, 0, 0]);
    let e = Message::Error(ErrorMsg {
        kind: ErrorKind::FlowModFailed(FlowModFailedCode::Eperm),
        data: long,
    });
    let ovs = compare("error with data beyond the flow mod", &e, 0x74);
    assert!(
        ovs.contains("(***only uses 176 bytes out of 180***)"),
        "{ovs}"
    );
    // Data that is no message OVS (or flowmesh) can decode: an unknown type, and a flow mod
    // whose output action has a bad length.
    let mut unknown = fm[..16].to_vec();
    unknown[1] = 0x63;
    unknown[2..4].copy_from_slice(&16u16.to_be_bytes());
    let mut bad_action = fm.clone();
    let at = bad_action.len() - 16;
    assert_eq!(
        bad_action[at..at + 2],
        [0, 0],
        "output action of the overlay flow"
    );
    bad_action[at + 3] = 24;
    for (what, data) in [("unknown type", unknown), ("bad action length", bad_action)] {
        let e = Message::Error(ErrorMsg {
            kind: ErrorKind::BadRequest(BadRequestCode::from_u16(1)),
            data,
        });
        let ovs = compare(&format!("error with {what}"), &e, 0x74);
        assert!(ovs.contains("***decode error: "), "{ovs}");
    }
    let gm = Message::GroupMod(GroupMod {
        command: GroupModCommand::Add,
        group: test_groups()[3].clone(),
    })
    .encode(0x75);
    let e = Message::Error(ErrorMsg {
        kind: ErrorKind::GroupModFailed(GroupModFailedCode::from_u16(0)),
        data: gm,
    });
    identical("error with group mod", &e, 0x75);
    let mut del = FlowMod::add(Flow::new(0, 0, Match::new()).cookie(0x10));
    del.command = FlowModCommand::Delete;
    del.cookie_mask = 0xff;
    let del_bytes = Message::FlowMod(del.clone()).encode(0x76);
    let e = Message::Error(ErrorMsg {
        kind: ErrorKind::BadRequest(BadRequestCode::from_u16(1)),
        data: del_bytes,
    });
    identical("error with flow delete", &e, 0x76);
    // An error carrying a request OVS itself would refuse.
    let bad = Message::GroupMod(GroupMod {
        command: GroupModCommand::Delete,
        group: test_groups()[0].clone(),
    })
    .encode(0x77);
    let e = Message::Error(ErrorMsg {
        kind: ErrorKind::GroupModFailed(GroupModFailedCode::from_u16(1)),
        data: bad,
    });
    refused(
        "error with a refused group mod",
        &e,
        0x77,
        "OFPGMFC_INVALID_GROUP",
    );

    // Bundles: control messages and adds embedding flow mods and group mods.
    for (i, (t, flags)) in [
        (BundleCtrlType::OpenRequest, BundleFlags::ATOMIC),
        (BundleCtrlType::OpenReply, 0),
        (BundleCtrlType::CloseRequest, 0),
        (
            BundleCtrlType::CommitRequest,
            BundleFlags::ATOMIC | BundleFlags::ORDERED,
        ),
        (BundleCtrlType::CommitReply, BundleFlags::ORDERED),
        (BundleCtrlType::DiscardRequest, 0),
    ]
    .into_iter()
    .enumerate()
    {
        identical(
            &format!("bundle control {t:?}"),
            &Message::BundleControl(BundleControl::new(5, t, flags)),
            0x80 + i as u32,
        );
    }
    let adds = [
        Message::FlowMod(FlowMod::add(overlay_flow())),
        Message::FlowMod(del),
        Message::GroupMod(GroupMod {
            command: GroupModCommand::Add,
            group: test_groups()[1].clone(),
        }),
        Message::GroupMod(GroupMod {
            command: GroupModCommand::Delete,
            group: Group {
                group_id: 2,
                group_type: GroupType::Select,
                buckets: vec![],
            },
        }),
    ];
    for (i, m) in adds.into_iter().enumerate() {
        identical(
            &format!("bundle add {i}"),
            &Message::BundleAdd(BundleAdd::new(
                5,
                BundleFlags::ATOMIC | BundleFlags::ORDERED,
                m,
            )),
            0x90 + i as u32,
        );
    }
    // A bundle add whose embedded group mod OVS refuses: the refusal shows inside.
    let inner_bad = Message::GroupMod(GroupMod {
        command: GroupModCommand::Add,
        group: Group {
            group_id: 9,
            group_type: GroupType::All,
            buckets: vec![Bucket {
                weight: 2,
                ..Bucket::new(vec![Action::output(1)])
            }],
        },
    });
    refused(
        "bundle add of a refused group mod",
        &Message::BundleAdd(BundleAdd::new(5, 0, inner_bad)),
        0x9f,
        "OFPGMFC_INVALID_GROUP",
    );
}

/// The captures that hold matches and actions: decode, re-encode byte for byte, same text.
#[test]
fn flow_captures_round_trip_and_print_like_ovs() {
    for name in [
        "flow_stats_reply",
        "group_desc_reply",
        "packet_in",
        "flow_removed",
        "error_bad_flow_mod",
        "bundle_error",
        "bundle_commit_failed",
        "bundle_error_bad_xid",
    ] {
        for (i, raw) in capture(name).iter().enumerate() {
            let what = format!("{name}[{i}]");
            let (hdr, msg, _) =
                ofproto::decode_frame(raw).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(&msg.encode(hdr.xid), raw, "{what}: re-encoding differs");
            let ours = ofproto::ofp_print(raw).unwrap_or_else(|e| panic!("{what}: {e}"));
            let theirs = strip_log(&ovs_print(raw));
            if name == "packet_in" {
                // OVS also dissects the packet; flowmesh gives the headline facts.
                assert_eq!(ours.lines().next(), theirs.lines().next(), "{what}");
            } else {
                assert_same_text(&what, &ours, &theirs);
            }
        }
    }
    // The 2,000 flows of the capture all come back.
    let n: usize = capture("flow_stats_reply")
        .iter()
        .map(|raw| match ofproto::decode_message(raw) {
            Ok((Message::MultipartReply(r), _)) => match r.body {
                MultipartReplyBody::Flow(v) => v.len(),
                _ => 0,
            },
            _ => 0,
        })
        .sum();
    assert_eq!(n, 2001);
}

/// Zero in the hex fields of flow messages prints as OVS prints it (`cookie=0x0` in packet-ins
/// and flow stats, `cookie:0x0/0xff` in a flow mod, `buf:0x0`).
#[test]
fn zero_hex_fields_of_flow_messages_match_ovs() {
    let mut del = FlowMod::add(Flow::new(0, 0, Match::new()));
    del.command = FlowModCommand::Delete;
    del.cookie_mask = 0xff;
    identical("flow delete cookie 0/0xff", &Message::FlowMod(del), 0);
    let mut add = FlowMod::add(overlay_flow().cookie(0));
    add.buffer_id = 0;
    identical("flow add buffer 0", &Message::FlowMod(add), 0);
    let pin = PacketIn {
        buffer_id: 0,
        total_len: 0,
        reason: 0,
        table_id: 0,
        cookie: 0,
        matches: Match::new().in_port(1),
        data: vec![],
    };
    // OVS also dissects the packet; the headline carries the cookie.
    let bytes = Message::PacketIn(pin).encode(0);
    let ours = ofproto::ofp_print(&bytes).expect("packet in prints");
    let theirs = strip_log(&ovs_print(&bytes));
    assert_eq!(
        ours.lines().next(),
        theirs.lines().next(),
        "packet in, cookie 0"
    );
    assert!(theirs.contains(" cookie=0x0 "), "{theirs}");
    let stats = FlowStats {
        flow: Flow::new(0, 0, Match::new()),
        duration_sec: 0,
        duration_nsec: 0,
        packet_count: 0,
        byte_count: 0,
    };
    let reply = MultipartReply::new(MultipartReplyBody::Flow(vec![stats]));
    identical("flow stats, cookie 0", &Message::MultipartReply(reply), 0);
}
