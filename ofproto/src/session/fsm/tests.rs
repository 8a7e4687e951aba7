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
    // An echo reply restarts the idle clock.
    let t1 = t0 + Duration::from_secs(3);
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
