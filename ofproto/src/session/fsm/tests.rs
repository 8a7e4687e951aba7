//! Unit tests of the session state machine: scripted switch messages, explicit time.

use super::*;
use crate::flow::{Flow, FlowMod};
use crate::message::{
    BadInstructionCode, HelloElement, MultipartReply, Role, SwitchFeatures, OFP_VERSION,
};
use crate::oxm::Match;

type Fsm = SessionFsm<&'static str>;

fn header(msg: &Message, xid: u32) -> MessageHeader {
    MessageHeader {
        version: msg.version(),
        msg_type: msg.msg_type(),
        length: 8,
        xid,
    }
}

fn feed(fsm: &mut Fsm, msg: Message, xid: u32, now: Instant) -> Vec<Output<&'static str>> {
    let mut out = Vec::new();
    fsm.on_message(&header(&msg, xid), msg, now, &mut out);
    out
}

fn sent(out: &[Output<&'static str>]) -> Vec<(u32, Message)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { xid, message } => Some((*xid, message.clone())),
            _ => None,
        })
        .collect()
}

fn features(dpid: u64) -> Message {
    Message::FeaturesReply(SwitchFeatures {
        datapath_id: dpid,
        n_buffers: 0,
        n_tables: 254,
        auxiliary_id: 0,
        capabilities: 0x4f,
        reserved: 0,
    })
}

fn port(no: u32) -> Port {
    Port {
        port_no: no,
        hw_addr: [0, 1, 2, 3, 4, 5],
        name: format!("p{no}").into_bytes(),
        config: 0,
        state: 0,
        curr: 0,
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 0,
        max_speed: 0,
    }
}

fn error(kind: ErrorKind) -> ErrorMsg {
    ErrorMsg {
        kind,
        data: Vec::new(),
    }
}

/// Runs the handshake to Ready; returns the state machine and the time it became ready.
fn ready(cfg: FsmConfig) -> (Fsm, Instant) {
    let t0 = Instant::now();
    let mut fsm = Fsm::new(cfg, t0);
    let mut out = Vec::new();
    fsm.start(&mut out);
    assert!(matches!(&sent(&out)[..], [(_, Message::Hello(h))] if h.supports_of13()));
    let out = feed(&mut fsm, Message::Hello(Hello::of13()), 1, t0);
    assert!(matches!(&sent(&out)[..], [(_, Message::FeaturesRequest)]));
    let out = feed(&mut fsm, features(0x42), 2, t0);
    let s = sent(&out);
    assert!(matches!(s[0].1, Message::SetConfig(_)));
    let (pd_xid, _) = s
        .iter()
        .find(|(_, m)| matches!(m, Message::MultipartRequest(_)))
        .cloned()
        .expect("port desc request");
    let role_xid = s
        .iter()
        .find(|(_, m)| matches!(m, Message::RoleRequest(_)))
        .map(|(x, _)| *x);
    let mut more = MultipartReply::new(MultipartReplyBody::PortDesc(vec![port(1)]));
    more.flags = 1;
    let out = feed(&mut fsm, Message::MultipartReply(more), pd_xid, t0);
    assert!(out.is_empty());
    let last = MultipartReply::new(MultipartReplyBody::PortDesc(vec![port(2)]));
    let mut out = feed(&mut fsm, Message::MultipartReply(last), pd_xid, t0);
    if let Some(x) = role_xid {
        assert!(!fsm.is_ready(), "ready before the role reply");
        let role = RoleRequest {
            role: Role::Master,
            generation_id: 7,
        };
        out = feed(&mut fsm, Message::RoleReply(role), x, t0);
    }
    match &out[..] {
        [Output::Ready(info)] => {
            assert_eq!(info.dpid, 0x42);
            assert_eq!(info.ports.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        }
        other => panic!("expected Ready, got {other:?}"),
    }
    assert_eq!(
        fsm.outstanding(),
        0,
        "SET_CONFIG entry is dropped when ready"
    );
    (fsm, t0)
}

#[test]
fn handshake_reaches_ready_with_ports_across_more_parts() {
    let (fsm, _) = ready(FsmConfig::default());
    assert!(fsm.is_ready());
    assert_eq!(fsm.dpid(), Some(0x42));
}

#[test]
fn handshake_with_role_waits_for_role_reply() {
    let cfg = FsmConfig {
        role: Some(RoleRequest {
            role: Role::Master,
            generation_id: 7,
        }),
        ..FsmConfig::default()
    };
    let (fsm, _) = ready(cfg);
    assert!(fsm.is_ready());
}

#[test]
fn hello_without_1_3_gets_hello_failed_and_closes() {
    let t0 = Instant::now();
    let mut fsm = Fsm::new(FsmConfig::default(), t0);
    let hello10 = Hello {
        version: 1,
        elements: vec![HelloElement::VersionBitmap(vec![1 << 1])],
        trailing: Vec::new(),
    };
    let out = feed(&mut fsm, Message::Hello(hello10), 9, t0);
    assert!(matches!(
        &sent(&out)[..],
        [(_, Message::Error(e))] if e.kind == ErrorKind::HelloFailed(HelloFailedCode::Incompatible)
    ));
    assert!(matches!(
        out.last(),
        Some(Output::Close(DisconnectCause::VersionMismatch { offered })) if offered == &vec![1]
    ));
    assert!(fsm.is_closed());
}

#[test]
fn hello_with_bitmap_including_1_3_is_accepted_whatever_its_header() {
    let t0 = Instant::now();
    let mut fsm = Fsm::new(FsmConfig::default(), t0);
    let hello = Hello {
        version: 6,
        elements: vec![HelloElement::VersionBitmap(vec![
            (1 << OFP_VERSION) | (1 << 6),
        ])],
        trailing: Vec::new(),
    };
    let out = feed(&mut fsm, Message::Hello(hello), 9, t0);
    assert!(matches!(&sent(&out)[..], [(_, Message::FeaturesRequest)]));
}

#[test]
fn handshake_times_out() {
    let t0 = Instant::now();
    let cfg = FsmConfig::default();
    let limit = cfg.handshake_timeout;
    let mut fsm = Fsm::new(cfg, t0);
    let mut out = Vec::new();
    fsm.tick(t0 + limit / 2, &mut out);
    assert!(out.is_empty());
    assert_eq!(fsm.next_deadline(), Some(t0 + limit));
    fsm.tick(t0 + limit, &mut out);
    assert!(matches!(
        &out[..],
        [Output::Close(DisconnectCause::HandshakeTimeout(_))]
    ));
}

#[test]
fn echo_on_idle_and_close_within_interval_plus_timeout() {
    let cfg = FsmConfig {
        echo_interval: Duration::from_secs(2),
        echo_timeout: Duration::from_secs(3),
        ..FsmConfig::default()
    };
    let (mut fsm, t0) = ready(cfg);
    let mut out = Vec::new();
    fsm.tick(t0 + Duration::from_millis(1999), &mut out);
    assert!(out.is_empty());
    assert_eq!(fsm.next_deadline(), Some(t0 + Duration::from_secs(2)));
    fsm.tick(t0 + Duration::from_secs(2), &mut out);
    let s = sent(&out);
    assert!(matches!(&s[..], [(_, Message::EchoRequest(_))]));
    let echo_xid = s[0].0;
    // An echo reply restarts the idle clock (a quick answer leaves the timeout at its floor).
    let t1 = t0 + Duration::from_millis(2100);
    assert!(feed(&mut fsm, Message::EchoReply(Vec::new()), echo_xid, t1).is_empty());
    assert_eq!(fsm.next_deadline(), Some(t1 + Duration::from_secs(2)));
    // Silence: echo at t1+2, dead at t1+5 = last heard + interval + timeout.
    out.clear();
    fsm.tick(t1 + Duration::from_secs(2), &mut out);
    assert_eq!(sent(&out).len(), 1);
    out.clear();
    fsm.tick(t1 + Duration::from_millis(4999), &mut out);
    assert!(out.is_empty());
    fsm.tick(t1 + Duration::from_secs(5), &mut out);
    assert!(matches!(
        &out[..],
        [Output::Close(DisconnectCause::EchoTimeout { silent_for })] if *silent_for == Duration::from_secs(5)
    ));
}

#[test]
fn echo_requests_from_the_switch_are_answered_with_its_xid_and_payload() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let out = feed(&mut fsm, Message::EchoRequest(b"ab".to_vec()), 77, t0);
    assert_eq!(sent(&out), vec![(77, Message::EchoReply(b"ab".to_vec()))]);
}

#[test]
fn multipart_reassembles_parts_until_more_is_clear() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let req = Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::GroupDesc));
    let xid = fsm
        .begin_request(&req, "mp")
        .expect("multipart is a request");
    for i in 0..5 {
        let mut r = MultipartReply::new(MultipartReplyBody::GroupDesc(Vec::new()));
        r.flags = u16::from(i < 4);
        let out = feed(&mut fsm, Message::MultipartReply(r), xid, t0);
        if i < 4 {
            assert!(out.is_empty());
        } else {
            assert!(matches!(
                &out[..],
                [Output::Complete { responder: "mp", result: Ok(Reply::Multipart(p)) }] if p.len() == 5
            ));
        }
    }
    assert_eq!(fsm.outstanding(), 0);
}

#[test]
fn a_streamed_multipart_hands_out_each_part_as_it_arrives() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let req = Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::GroupDesc));
    let xid = fsm.begin_stream(&req, "st").expect("multipart streams");
    for i in 0..3 {
        let mut r = MultipartReply::new(MultipartReplyBody::GroupDesc(Vec::new()));
        r.flags = u16::from(i < 2);
        let out = feed(&mut fsm, Message::MultipartReply(r), xid, t0);
        match (i, &out[..]) {
            (0 | 1, [Output::Part { xid: x, .. }]) => assert_eq!(*x, xid),
            (
                2,
                [Output::Part { xid: a, .. }, Output::StreamEnd { xid: b }, Output::Complete {
                    responder: "st",
                    result: Ok(Reply::Multipart(p)),
                }],
            ) => {
                assert_eq!((*a, *b), (xid, xid));
                assert!(p.is_empty(), "nothing is reassembled");
            }
            _ => panic!("part {i}: {out:?}"),
        }
    }
    assert_eq!(fsm.outstanding(), 0);
    // Only multipart requests stream.
    assert_eq!(fsm.begin_stream(&Message::BarrierRequest, "b"), Err("b"));
}

#[test]
fn a_streamed_multipart_ends_on_a_refusal_and_on_close() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let req = Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::GroupDesc));
    let xid = fsm.begin_stream(&req, "st").expect("stream");
    let refusal = ErrorMsg {
        kind: ErrorKind::BadRequest(BadRequestCode::BadMultipart),
        data: Vec::new(),
    };
    let out = feed(&mut fsm, Message::Error(refusal.clone()), xid, t0);
    assert!(
        matches!(
            &out[..],
            [Output::StreamEnd { xid: x }, Output::Complete { responder: "st", result: Err(Failure::Refused(e)) }]
                if *x == xid && e == &refusal
        ),
        "{out:?}"
    );
    let xid = fsm.begin_stream(&req, "st2").expect("stream");
    let mut out = Vec::new();
    fsm.close(DisconnectCause::PeerClosed, &mut out);
    assert!(
        matches!(
            &out[..],
            [Output::StreamEnd { xid: x }, Output::Complete { responder: "st2", result: Err(Failure::Closed(_)) }, Output::Close(_)]
                if *x == xid
        ),
        "{out:?}"
    );
}

#[test]
fn error_is_matched_to_its_request_and_unknown_xids_are_unsolicited() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let xid = fsm
        .begin_request(
            &Message::RoleRequest(RoleRequest {
                role: Role::Master,
                generation_id: 1,
            }),
            "role",
        )
        .expect("role is a request");
    let stale = error(ErrorKind::RoleRequestFailed(
        crate::message::RoleRequestFailedCode::Stale,
    ));
    let out = feed(&mut fsm, Message::Error(stale.clone()), xid, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete { responder: "role", result: Err(Failure::Refused(e)) }] if e == &stale
    ));
    let out = feed(&mut fsm, Message::Error(stale), 999_999, t0);
    assert!(matches!(
        &out[..],
        [Output::UnsolicitedError { xid: 999_999, .. }]
    ));
}

#[test]
fn batch_collects_refused_messages_by_index_until_its_barrier() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let base = fsm.begin_batch(10, "batch");
    let bad = error(ErrorKind::BadInstruction(BadInstructionCode::BadTableId));
    assert!(feed(&mut fsm, Message::Error(bad.clone()), base + 3, t0).is_empty());
    assert!(feed(&mut fsm, Message::Error(bad.clone()), base + 7, t0).is_empty());
    let out = feed(&mut fsm, Message::BarrierReply, base + 10, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete { responder: "batch", result: Err(Failure::BatchRefused(r)) }]
            if r.iter().map(|(i, _)| *i).collect::<Vec<_>>() == vec![3, 7]
    ));
    let base = fsm.begin_batch(2, "ok");
    let out = feed(&mut fsm, Message::BarrierReply, base + 2, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete {
            responder: "ok",
            result: Ok(Reply::BatchDone)
        }]
    ));
}

fn commit_sent(out: &[Output<&'static str>]) -> Option<BundleCtrlType> {
    sent(out).iter().find_map(|(_, m)| match m {
        Message::BundleControl(b) => Some(b.ctrl_type),
        _ => None,
    })
}

#[test]
fn bundle_commits_after_prepare_barrier_and_completes_on_final_barrier() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let n = 1000;
    let base = fsm.begin_bundle(n, 1, "b");
    assert!(fsm.bundle_gate_closed());
    let open_reply = BundleControl::new(base, BundleCtrlType::OpenReply, 1);
    assert!(feed(&mut fsm, Message::BundleControl(open_reply), base, t0).is_empty());
    let out = feed(&mut fsm, Message::BarrierReply, base + n + 1, t0);
    assert_eq!(commit_sent(&out), Some(BundleCtrlType::CommitRequest));
    assert_eq!(
        sent(&out).iter().map(|(x, _)| *x).collect::<Vec<_>>(),
        vec![base + n + 2, base + n + 3]
    );
    assert!(!fsm.bundle_gate_closed());
    let commit_reply = BundleControl::new(base, BundleCtrlType::CommitReply, 1);
    assert!(feed(
        &mut fsm,
        Message::BundleControl(commit_reply),
        base + n + 2,
        t0
    )
    .is_empty());
    let out = feed(&mut fsm, Message::BarrierReply, base + n + 3, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete {
            responder: "b",
            result: Ok(Reply::BundleCommitted)
        }]
    ));
}

#[test]
fn bundle_with_a_refused_add_is_discarded_and_names_the_index() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let n = 1001;
    let base = fsm.begin_bundle(n, 1, "b");
    let bad = error(ErrorKind::BadInstruction(BadInstructionCode::BadTableId));
    assert!(feed(&mut fsm, Message::Error(bad.clone()), base + 1 + 500, t0).is_empty());
    let out = feed(&mut fsm, Message::BarrierReply, base + n + 1, t0);
    assert_eq!(commit_sent(&out), Some(BundleCtrlType::DiscardRequest));
    let out = feed(&mut fsm, Message::BarrierReply, base + n + 3, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete { result: Err(Failure::BundleRefused { index: 500, error }), .. }] if error == &bad
    ));
}

#[test]
fn bundle_refused_at_commit_names_the_message() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let base = fsm.begin_bundle(3, 1, "b");
    feed(&mut fsm, Message::BarrierReply, base + 4, t0);
    let bad = error(ErrorKind::FlowModFailed(
        crate::message::FlowModFailedCode::TableFull,
    ));
    let failed = error(ErrorKind::BundleFailed(BundleFailedCode::MsgFailed));
    feed(&mut fsm, Message::Error(bad.clone()), base + 2, t0);
    feed(&mut fsm, Message::Error(failed), base + 5, t0);
    let out = feed(&mut fsm, Message::BarrierReply, base + 6, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete { result: Err(Failure::BundleRefused { index: 1, error }), .. }] if error == &bad
    ));
}

#[test]
fn bundle_open_refused_as_unknown_experimenter_means_unsupported() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let base = fsm.begin_bundle(2, 1, "b");
    let e = error(ErrorKind::BadRequest(BadRequestCode::BadExperimenter));
    for x in base..base + 3 {
        feed(&mut fsm, Message::Error(e.clone()), x, t0);
    }
    let out = feed(&mut fsm, Message::BarrierReply, base + 3, t0);
    assert!(matches!(
        &out[..],
        [Output::Complete {
            result: Err(Failure::BundleUnsupported(_)),
            ..
        }]
    ));
    assert!(!fsm.bundles_supported());
    assert!(sent(&out).is_empty(), "nothing to discard");
}

#[test]
fn close_fails_every_outstanding_request() {
    let (mut fsm, _) = ready(FsmConfig::default());
    fsm.begin_request(&Message::BarrierRequest, "a")
        .expect("barrier is a request");
    fsm.begin_batch(5, "b");
    fsm.begin_bundle(5, 1, "c");
    let mut out = Vec::new();
    fsm.close(DisconnectCause::PeerClosed, &mut out);
    let closed = out
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::Complete {
                    result: Err(Failure::Closed(DisconnectCause::PeerClosed)),
                    ..
                }
            )
        })
        .count();
    assert_eq!(closed, 3);
    assert!(matches!(out.last(), Some(Output::Close(_))));
    assert_eq!(fsm.next_deadline(), None);
}

#[test]
fn port_status_updates_ports_and_is_reported() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    let add = PortStatus {
        reason: 0,
        desc: port(9),
    };
    let out = feed(&mut fsm, Message::PortStatus(add), 0, t0);
    assert!(matches!(&out[..], [Output::PortStatus(p)] if p.desc.port_no == 9));
    assert!(fsm.ports().contains_key(&9));
    let del = PortStatus {
        reason: 1,
        desc: port(1),
    };
    feed(&mut fsm, Message::PortStatus(del), 0, t0);
    assert!(!fsm.ports().contains_key(&1));
}

#[test]
fn non_requests_are_not_registered() {
    let (mut fsm, _) = ready(FsmConfig::default());
    let fm = Message::FlowMod(FlowMod::add(Flow::new(0, 1, Match::new())));
    assert_eq!(fsm.begin_request(&fm, "x"), Err("x"));
}

#[test]
fn xid_ranges_never_wrap() {
    let mut fsm = Fsm::new(FsmConfig::default(), Instant::now());
    fsm.next_xid = u32::MAX - 3;
    let base = fsm.begin_batch(10, "b");
    assert_eq!(base, 1);
    assert_eq!(fsm.owner(11), Some(1));
    assert_eq!(fsm.owner(12), None);
}

fn closed_over_limit(out: &[Output<&'static str>]) -> Option<String> {
    out.iter().find_map(|o| match o {
        Output::Close(DisconnectCause::OverLimit(why)) => Some(why.clone()),
        _ => None,
    })
}

#[test]
fn port_status_adds_past_the_port_limit_close_the_session() {
    let cfg = FsmConfig {
        max_ports: 5,
        ..FsmConfig::default()
    };
    // The handshake reported ports 1 and 2.
    let (mut fsm, t0) = ready(cfg);
    let add = |no| {
        Message::PortStatus(PortStatus {
            reason: 0,
            desc: port(no),
        })
    };
    for no in 3..=5 {
        let out = feed(&mut fsm, add(no), 0, t0);
        assert!(matches!(&out[..], [Output::PortStatus(_)]), "{out:?}");
    }
    // A change of a known port, or a delete and a re-add, is no growth.
    let out = feed(&mut fsm, add(5), 0, t0);
    assert!(matches!(&out[..], [Output::PortStatus(_)]), "{out:?}");
    let del = Message::PortStatus(PortStatus {
        reason: 1,
        desc: port(5),
    });
    feed(&mut fsm, del, 0, t0);
    feed(&mut fsm, add(6), 0, t0);
    assert!(fsm.is_ready());
    assert_eq!(fsm.ports().len(), 5);
    let out = feed(&mut fsm, add(7), 0, t0);
    let why = closed_over_limit(&out).expect("closed over the limit");
    assert!(why.contains("more than 5 ports"), "{why}");
    assert!(fsm.is_closed());
    assert_eq!(fsm.ports().len(), 5, "the table did not grow");
}

#[test]
fn a_port_description_past_the_port_limit_fails_the_handshake() {
    let cfg = FsmConfig {
        max_ports: 1,
        ..FsmConfig::default()
    };
    let t0 = Instant::now();
    let mut fsm = Fsm::new(cfg, t0);
    let mut out = Vec::new();
    fsm.start(&mut out);
    feed(&mut fsm, Message::Hello(Hello::of13()), 1, t0);
    let s = sent(&feed(&mut fsm, features(1), 2, t0));
    let (pd_xid, _) = s
        .iter()
        .find(|(_, m)| matches!(m, Message::MultipartRequest(_)))
        .cloned()
        .expect("port desc request");
    let reply = MultipartReply::new(MultipartReplyBody::PortDesc(vec![port(1), port(2)]));
    let out = feed(&mut fsm, Message::MultipartReply(reply), pd_xid, t0);
    assert!(closed_over_limit(&out).is_some(), "{out:?}");
    assert!(!out.iter().any(|o| matches!(o, Output::Ready(_))));
}

#[test]
fn a_multipart_reply_past_the_byte_limit_closes_the_session() {
    let cfg = FsmConfig {
        max_multipart_bytes: 100_000,
        ..FsmConfig::default()
    };
    let (mut fsm, t0) = ready(cfg);
    let req = Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(
        crate::message::FlowStatsRequest::all(),
    )));
    let xid = fsm.begin_request(&req, "read").expect("a request");
    let part = || {
        let stats = crate::message::FlowStats {
            flow: Flow::new(0, 0, Match::new()),
            duration_sec: 0,
            duration_nsec: 0,
            packet_count: 0,
            byte_count: 0,
        };
        let mut m = MultipartReply::new(MultipartReplyBody::Flow(vec![stats; 500]));
        m.flags = 1;
        Message::MultipartReply(m)
    };
    let len = part().encode(xid).len();
    assert!(len > 20_000 && len < 65_536, "{len}");
    let mut fed = 0;
    loop {
        let msg = part();
        let h = MessageHeader {
            length: len as u16,
            ..header(&msg, xid)
        };
        let mut out = Vec::new();
        fsm.on_message(&h, msg, t0, &mut out);
        fed += len;
        if let Some(why) = closed_over_limit(&out) {
            assert!(fed > 100_000 && fed <= 100_000 + len, "{fed}");
            assert!(why.contains("100000 bytes"), "{why}");
            assert!(
                out.iter().any(|o| matches!(
                    o,
                    Output::Complete {
                        responder: "read",
                        result: Err(Failure::Closed(DisconnectCause::OverLimit(_)))
                    }
                )),
                "{out:?}"
            );
            break;
        }
        assert!(fed < 200_000, "never closed");
    }
}

#[test]
fn an_echo_probe_is_sent_at_once_and_completed_by_its_reply() {
    let (mut fsm, t0) = ready(FsmConfig::default());
    // A batch in flight does not hold the probe back.
    let _ = fsm.begin_batch(3, "batch");
    let mut out = Vec::new();
    fsm.begin_echo("probe", &mut out);
    let s = sent(&out);
    let [(xid, Message::EchoRequest(_))] = &s[..] else {
        panic!("{s:?}")
    };
    let out = feed(&mut fsm, Message::EchoReply(Vec::new()), *xid, t0);
    assert!(
        matches!(
            &out[..],
            [Output::Complete {
                responder: "probe",
                result: Ok(Reply::Echo)
            }]
        ),
        "{out:?}"
    );
    // Any message from the switch answers a probe too (a switch busy streaming a reply is
    // alive), and a probe is answered once.
    let mut out = Vec::new();
    fsm.begin_echo("second", &mut out);
    let mut more = MultipartReply::new(MultipartReplyBody::PortDesc(vec![port(9)]));
    more.flags = 1;
    let out = feed(&mut fsm, Message::MultipartReply(more), 0xdead, t0);
    assert!(
        matches!(
            &out[..],
            [Output::Complete {
                responder: "second",
                result: Ok(Reply::Echo)
            }]
        ),
        "{out:?}"
    );
    let out = feed(&mut fsm, Message::EchoReply(Vec::new()), *xid + 1, t0);
    assert!(out.is_empty(), "{out:?}");
    // Closed: a probe is never answered (its responder is dropped).
    let mut out = Vec::new();
    fsm.close(DisconnectCause::LocalClose, &mut out);
    let mut out = Vec::new();
    fsm.begin_echo("late", &mut out);
    assert!(out.is_empty());
}

/// A Ready session with a 2 s echo interval, 3 s echo timeout and 60 s busy timeout.
fn ready_2_3_60() -> (Fsm, Instant) {
    ready(FsmConfig {
        echo_interval: Duration::from_secs(2),
        echo_timeout: Duration::from_secs(3),
        busy_timeout: Duration::from_secs(60),
        ..FsmConfig::default()
    })
}

fn echo_timed_out(out: &[Output<&'static str>]) -> bool {
    out.iter()
        .any(|o| matches!(o, Output::Close(DisconnectCause::EchoTimeout { .. })))
}

#[test]
fn a_switch_silent_behind_an_outstanding_bundle_is_alive_until_the_busy_timeout() {
    let (mut fsm, t0) = ready_2_3_60();
    let base = fsm.begin_bundle(100_000, 1, "bundle");
    assert!(fsm.is_busy());
    let mut out = Vec::new();
    fsm.tick(t0 + Duration::from_secs(2), &mut out);
    assert!(matches!(&sent(&out)[..], [(_, Message::EchoRequest(_))]));
    let sent_at = t0 + Duration::from_secs(2);
    // Far past interval + echo timeout: still working on the bundle, still alive.
    out.clear();
    fsm.tick(t0 + Duration::from_secs(30), &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(fsm.next_deadline(), Some(sent_at + Duration::from_secs(60)));
    // The bundle's prepare barrier arrives: the switch spoke, the idle clock restarts.
    let t1 = t0 + Duration::from_secs(40);
    let out = feed(&mut fsm, Message::BarrierReply, base + 100_001, t1);
    assert_eq!(commit_sent(&out), Some(BundleCtrlType::CommitRequest));
    // A silent switch is still dropped: after the busy timeout while it holds the bundle.
    let mut out = Vec::new();
    fsm.tick(t1 + Duration::from_secs(2), &mut out);
    assert_eq!(sent(&out).len(), 1);
    out.clear();
    fsm.tick(t1 + Duration::from_secs(61), &mut out);
    assert!(!echo_timed_out(&out), "{out:?}");
    fsm.tick(t1 + Duration::from_secs(62), &mut out);
    assert!(echo_timed_out(&out), "{out:?}");
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Complete {
            responder: "bundle",
            result: Err(Failure::Closed(_))
        }
    )));
}

#[test]
fn reads_and_barriers_the_controller_awaits_also_hold_off_the_echo_timeout() {
    for what in ["read", "barrier", "batch"] {
        let (mut fsm, t0) = ready_2_3_60();
        match what {
            "read" => {
                let req = Message::MultipartRequest(MultipartRequest::new(
                    MultipartRequestBody::GroupDesc,
                ));
                fsm.begin_request(&req, "r").expect("a request");
            }
            "barrier" => {
                fsm.begin_request(&Message::BarrierRequest, "r")
                    .expect("a request");
            }
            _ => {
                fsm.begin_batch(10, "r");
            }
        }
        let mut out = Vec::new();
        fsm.tick(t0 + Duration::from_secs(2), &mut out);
        fsm.tick(t0 + Duration::from_secs(20), &mut out);
        assert!(!echo_timed_out(&out), "{what}: {out:?}");
    }
}

#[test]
fn an_idle_switch_is_dropped_at_the_echo_timeout_and_probes_do_not_count_as_work() {
    let (mut fsm, t0) = ready_2_3_60();
    // A takeover probe outstanding is not work the switch does for the controller.
    let mut out = Vec::new();
    fsm.begin_echo("probe", &mut out);
    assert!(!fsm.is_busy());
    out.clear();
    fsm.tick(t0 + Duration::from_secs(2), &mut out);
    assert_eq!(sent(&out).len(), 1);
    out.clear();
    fsm.tick(t0 + Duration::from_millis(4999), &mut out);
    assert!(out.is_empty(), "{out:?}");
    fsm.tick(t0 + Duration::from_secs(5), &mut out);
    assert!(echo_timed_out(&out), "{out:?}");
}

#[test]
fn the_echo_timeout_adapts_to_the_slowest_recent_answers() {
    let (mut fsm, t0) = ready_2_3_60();
    let mut now = t0;
    // A loaded switch answers each echo after 2.5 s.
    for _ in 0..3 {
        let mut out = Vec::new();
        now += Duration::from_secs(2);
        fsm.tick(now, &mut out);
        let s = sent(&out);
        let [(xid, Message::EchoRequest(_))] = &s[..] else {
            panic!("{s:?}")
        };
        now += Duration::from_millis(2500);
        let out = feed(&mut fsm, Message::EchoReply(Vec::new()), *xid, now);
        assert!(out.is_empty(), "{out:?}");
    }
    assert_eq!(
        fsm.liveness_timeout(),
        Duration::from_millis(2500) * ECHO_TIMEOUT_FACTOR
    );
    // Silent: the echo goes at +2 s; the fixed 3 s timeout would drop it at +5 s.
    let mut out = Vec::new();
    fsm.tick(now + Duration::from_secs(2), &mut out);
    out.clear();
    fsm.tick(now + Duration::from_secs(11), &mut out);
    assert!(out.is_empty(), "{out:?}");
    fsm.tick(now + Duration::from_secs(12), &mut out);
    assert!(echo_timed_out(&out), "{out:?}");
    // Never past the busy timeout, however slow the answers were.
    let (mut fsm, t0) = ready_2_3_60();
    let mut out = Vec::new();
    fsm.tick(t0 + Duration::from_secs(2), &mut out);
    let xid = sent(&out)[0].0;
    feed(
        &mut fsm,
        Message::EchoReply(Vec::new()),
        xid,
        t0 + Duration::from_secs(50),
    );
    assert_eq!(fsm.liveness_timeout(), Duration::from_secs(60));
}
