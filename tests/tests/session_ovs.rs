//! The switch session against real Open vSwitch (dummy-datapath sandboxes): handshake at
//! scale, reconnects, errors matched to the flow that caused them, atomic bundles, flow-stats
//! read-back, roles, echo liveness, the active connector and version negotiation.

mod session_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use flowmesh_tests::bench::flows::{normalized, ofctl_text, overlay_flow, overlay_flows};
use flowmesh_tests::{BridgeSpec, OvsSandbox};
use ofproto::flow::flow_flags;
use ofproto::message::{
    BadActionCode, BadInstructionCode, BadRequestCode, ErrorKind, FlowModFailedCode,
    FlowStatsRequest, Message, Role, RoleRequestFailedCode,
};
use ofproto::oxm::eth_type;
use ofproto::session::{
    Backoff, BundleError, Connector, DisconnectCause, FsmConfig, RequestError, SessionConfig,
    SessionEvent, Target,
};
use ofproto::{Action, Flow, FlowMod, Match};
use session_support::{listen, runtime, wait_for, wait_ready};

fn one_bridge(target: &str) -> OvsSandbox {
    OvsSandbox::builder()
        .bridge(BridgeSpec::numbered(0, 2))
        .controller(target)
        .controller_max_backoff_ms(1000)
        .start()
        .expect("sandbox")
}

#[test]
fn hundred_bridges_get_ready_and_all_come_back_after_vswitchd_restart() {
    let rt = runtime();
    let (listener, mut events) = listen(&rt, SessionConfig::default());
    let t0 = Instant::now();
    let mut sbx = OvsSandbox::builder()
        .bridges((0..100u32).map(|i| BridgeSpec::new(format!("br{i}"), u64::from(i) + 1)))
        .controller(listener.target())
        .controller_max_backoff_ms(1000)
        .start()
        .expect("sandbox");
    let all: BTreeSet<u64> = (1..=100).collect();

    let mut ready = BTreeSet::new();
    wait_for(&rt, &mut events, Duration::from_secs(30), |ev| match ev {
        SessionEvent::Ready {
            info, reconnect, ..
        } => {
            assert!(!reconnect, "first connection of {:#x}", info.dpid);
            assert!(
                info.ports.contains_key(&1),
                "PORT_DESC lists the vxlan port"
            );
            ready.insert(info.dpid);
            (ready.len() == 100).then_some(())
        }
        _ => None,
    });
    assert_eq!(ready, all, "every bridge reported ready");
    eprintln!("100 bridges ready {:?} after sandbox start", t0.elapsed());

    sbx.kill_vswitchd();
    let mut gone = BTreeSet::new();
    wait_for(&rt, &mut events, Duration::from_secs(15), |ev| match ev {
        SessionEvent::Disconnected {
            dpid: Some(d),
            cause,
            ..
        } => {
            assert!(
                matches!(cause, DisconnectCause::PeerClosed | DisconnectCause::Io(_)),
                "cause of {d:#x}: {cause}"
            );
            gone.insert(d);
            (gone.len() == 100).then_some(())
        }
        _ => None,
    });
    assert_eq!(gone, all, "every session reported its disconnect");

    let t1 = Instant::now();
    sbx.restart_vswitchd().expect("restart vswitchd");
    let mut back = BTreeSet::new();
    wait_for(&rt, &mut events, Duration::from_secs(30), |ev| match ev {
        SessionEvent::Ready {
            info, reconnect, ..
        } => {
            assert!(reconnect, "{:#x} is a reconnect", info.dpid);
            back.insert(info.dpid);
            (back.len() == 100).then_some(())
        }
        _ => None,
    });
    assert_eq!(back, all, "every bridge came back");
    eprintln!("100 bridges back {:?} after restart", t1.elapsed());
}

#[test]
fn refused_flow_mods_name_the_flow_and_failed_bundles_change_nothing() {
    let rt = runtime();
    let (listener, mut events) = listen(&rt, SessionConfig::default());
    let sbx = one_bridge(&listener.target());
    let (h, _) = wait_ready(&rt, &mut events, Duration::from_secs(15));

    // goto_table to a lower table.
    let backwards = Flow::new(10, 100, Match::new().eth_type(eth_type::IPV4)).goto(5);
    let err = rt
        .block_on(h.flow_mod(FlowMod::add(backwards.clone())))
        .expect_err("goto a lower table is refused");
    match &err {
        RequestError::Refused { request, error } => {
            assert_eq!(**request, Message::FlowMod(FlowMod::add(backwards.clone())));
            assert_eq!(
                error.kind,
                ErrorKind::BadInstruction(BadInstructionCode::BadTableId)
            );
        }
        other => panic!("expected a refusal, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("table=10") && text.contains("goto_table:5"),
        "{text}"
    );
    assert!(text.contains("OFPBIC_BAD_TABLE_ID"), "{text}");

    // Output to a group that does not exist.
    let to_group = Flow::new(0, 10, Match::new().in_port(3)).apply(vec![Action::Group(77)]);
    match rt.block_on(h.flow_mod(FlowMod::add(to_group.clone()))) {
        Err(RequestError::Refused { request, error }) => {
            assert_eq!(*request, Message::FlowMod(FlowMod::add(to_group)));
            assert_eq!(error.kind, ErrorKind::BadAction(BadActionCode::BadOutGroup));
        }
        other => panic!("expected OFPBAC_BAD_OUT_GROUP, got {other:?}"),
    }

    // A table that is not empty, so that "unchanged" means something.
    let base: Vec<Flow> = (200_000..200_020).map(overlay_flow).collect();
    let lines: Vec<String> = ofctl_text(&base).lines().map(str::to_owned).collect();
    sbx.add_flows("br0", &lines).expect("baseline flows");
    let before = sbx.dump_flows("br0").expect("dump");
    assert_eq!(before.len(), 20);

    let good = |range: std::ops::Range<u32>| -> Vec<Message> {
        range
            .map(|i| Message::FlowMod(FlowMod::add(overlay_flow(i))))
            .collect()
    };

    // 1,000 good flows and one refused when added (validation).
    let mut msgs = good(0..1000);
    let bad = Message::FlowMod(FlowMod::add(backwards.clone()));
    msgs.insert(500, bad.clone());
    match rt.block_on(h.send_bundle(msgs)) {
        Err(BundleError::Refused {
            index,
            message,
            error,
        }) => {
            assert_eq!(index, 500);
            assert_eq!(*message, bad);
            assert_eq!(
                error.kind,
                ErrorKind::BadInstruction(BadInstructionCode::BadTableId)
            );
        }
        other => panic!("expected the bundle refused at #500, got {other:?}"),
    }
    assert_eq!(
        sbx.dump_flows("br0").expect("dump"),
        before,
        "table unchanged"
    );

    // 1,000 good flows and one refused only at commit: it overlaps an installed flow (same
    // table and priority, a wider match) and asks OFPFF_CHECK_OVERLAP.
    let wider = Flow::new(
        base[0].table,
        base[0].priority,
        Match::new().eth_type(eth_type::IPV4),
    )
    .apply(vec![Action::output(3)]);
    let mut overlapping = FlowMod::add(wider);
    overlapping.flow.flags = flow_flags::CHECK_OVERLAP;
    let mut msgs = good(1000..2000);
    msgs.push(Message::FlowMod(overlapping.clone()));
    match rt.block_on(h.send_bundle(msgs)) {
        Err(BundleError::Refused {
            index,
            message,
            error,
        }) => {
            assert_eq!(index, 1000);
            assert_eq!(*message, Message::FlowMod(overlapping));
            assert_eq!(
                error.kind,
                ErrorKind::FlowModFailed(FlowModFailedCode::Overlap)
            );
        }
        other => panic!("expected the bundle refused at #1000, got {other:?}"),
    }
    assert_eq!(
        sbx.dump_flows("br0").expect("dump"),
        before,
        "table unchanged"
    );

    // The same 1,000 good flows alone commit.
    rt.block_on(h.send_bundle(good(0..1000)))
        .expect("good bundle commits");
    assert_eq!(sbx.dump_flows("br0").expect("dump").len(), 1020);
}

#[test]
fn hundred_thousand_flows_read_back_exactly_by_flow_stats() {
    let rt = runtime();
    let (listener, mut events) = listen(&rt, SessionConfig::default());
    let _sbx = one_bridge(&listener.target());
    let (h, _) = wait_ready(&rt, &mut events, Duration::from_secs(15));
    let flows = overlay_flows(100_000);
    let msgs: Vec<Message> = flows
        .iter()
        .map(|f| Message::FlowMod(FlowMod::add(f.clone())))
        .collect();
    let t = Instant::now();
    rt.block_on(h.send_bundle(msgs)).expect("bundle commits");
    let pushed = t.elapsed();
    let t = Instant::now();
    let stats = rt
        .block_on(h.flow_stats(FlowStatsRequest::all()))
        .expect("flow stats");
    eprintln!(
        "pushed 100k flows in {pushed:?}, read {} back in {:?}",
        stats.len(),
        t.elapsed()
    );
    let got: BTreeSet<Flow> = stats.iter().map(|s| normalized(&s.flow)).collect();
    let want: BTreeSet<Flow> = flows.iter().map(normalized).collect();
    assert_eq!(stats.len(), 100_000, "one reply entry per flow");
    let missing: Vec<_> = want.difference(&got).take(3).collect();
    let extra: Vec<_> = got.difference(&want).take(3).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "read-back differs: missing {missing:?}, unexpected {extra:?}"
    );
}

#[test]
fn master_flow_mods_apply_slave_ones_and_stale_generations_are_refused() {
    let rt = runtime();
    let (la, mut ea) = listen(&rt, SessionConfig::default());
    let (lb, mut eb) = listen(&rt, SessionConfig::default());
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::numbered(0, 2))
        .start()
        .expect("sandbox");
    sbx.vsctl(&["set-controller", "br0", &la.target(), &lb.target()])
        .expect("two controllers");
    let (a, _) = wait_ready(&rt, &mut ea, Duration::from_secs(15));
    let (b, _) = wait_ready(&rt, &mut eb, Duration::from_secs(15));

    let r = rt
        .block_on(a.role_request(Role::Master, 10))
        .expect("master");
    assert_eq!((r.role, r.generation_id), (Role::Master, 10));
    let r = rt.block_on(b.role_request(Role::Slave, 10)).expect("slave");
    assert_eq!(r.role, Role::Slave);

    let f1 = overlay_flow(1);
    rt.block_on(a.flow_mod(FlowMod::add(f1)))
        .expect("master's flow-mod applies");
    let f2 = overlay_flow(2);
    match rt.block_on(b.flow_mod(FlowMod::add(f2.clone()))) {
        Err(RequestError::Refused { request, error }) => {
            assert_eq!(*request, Message::FlowMod(FlowMod::add(f2)));
            assert_eq!(error.kind, ErrorKind::BadRequest(BadRequestCode::IsSlave));
        }
        other => panic!("expected OFPBRC_IS_SLAVE, got {other:?}"),
    }
    let dump = sbx.dump_flows("br0").expect("dump");
    assert_eq!(dump.len(), 1, "only the master's flow: {dump:?}");
    assert!(dump[0].contains("table=10"), "{dump:?}");

    // An older generation id cannot take over.
    match rt.block_on(b.role_request(Role::Master, 9)) {
        Err(RequestError::Refused { error, .. }) => assert_eq!(
            error.kind,
            ErrorKind::RoleRequestFailed(RoleRequestFailedCode::Stale)
        ),
        other => panic!("expected OFPRRFC_STALE, got {other:?}"),
    }
    // A newer one can; the old master becomes a slave.
    rt.block_on(b.role_request(Role::Master, 11))
        .expect("newer generation takes over");
    match rt.block_on(a.flow_mod(FlowMod::add(overlay_flow(3)))) {
        Err(RequestError::Refused { error, .. }) => {
            assert_eq!(error.kind, ErrorKind::BadRequest(BadRequestCode::IsSlave))
        }
        other => panic!("expected the demoted master refused, got {other:?}"),
    }
}

/// Continues a SIGSTOP'd process on drop (also when the test fails).
struct Continue(nix::unistd::Pid);

impl Drop for Continue {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

#[test]
fn echo_timeout_detects_a_stopped_vswitchd() {
    let rt = runtime();
    let (interval, timeout) = (Duration::from_millis(300), Duration::from_millis(400));
    let cfg = SessionConfig {
        fsm: FsmConfig {
            echo_interval: interval,
            echo_timeout: timeout,
            ..FsmConfig::default()
        },
        ..SessionConfig::default()
    };
    let (listener, mut events) = listen(&rt, cfg);
    let sbx = one_bridge(&listener.target());
    let (h, _) = wait_ready(&rt, &mut events, Duration::from_secs(15));
    // Idle echoes keep a live switch connected: a window of three echo intervals in which
    // the session must not drop (what is tested, so no condition can end it).
    std::thread::sleep(interval * 3);
    rt.block_on(h.barrier())
        .expect("still connected after idle");

    let pid = nix::unistd::Pid::from_raw(
        i32::try_from(sbx.vswitchd_pid().expect("vswitchd runs")).expect("pid"),
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP vswitchd");
    let _cont = Continue(pid);
    let t = Instant::now();
    let cause = wait_for(&rt, &mut events, Duration::from_secs(5), |ev| match ev {
        SessionEvent::Disconnected { cause, .. } => Some(cause),
        _ => None,
    })
    .expect("the stopped switch is declared dead");
    let took = t.elapsed();
    assert!(
        matches!(cause, DisconnectCause::EchoTimeout { .. }),
        "cause: {cause}"
    );
    // The timeout adapts to the switch (at most ECHO_TIMEOUT_FACTOR times its slowest recent
    // echo answer, which on a loaded machine can exceed the configured floor).
    assert!(
        took <= interval
            + timeout * ofproto::session::ECHO_TIMEOUT_FACTOR
            + Duration::from_millis(300),
        "detected after {took:?}"
    );
    assert!(matches!(
        rt.block_on(h.barrier()),
        Err(RequestError::Closed(DisconnectCause::EchoTimeout { .. }))
    ));
}

#[test]
fn a_switch_busy_with_a_huge_bundle_and_read_is_not_dropped_by_a_tight_echo() {
    let rt = runtime();
    // Echo after 50 ms of silence, dead 100 ms later: far less than Open vSwitch needs to
    // take 200,000 flows in one bundle or to dump them, during which it says nothing.
    let (interval, timeout) = (Duration::from_millis(50), Duration::from_millis(100));
    let cfg = SessionConfig {
        fsm: FsmConfig {
            echo_interval: interval,
            echo_timeout: timeout,
            ..FsmConfig::default()
        },
        ..SessionConfig::default()
    };
    let (listener, mut events) = listen(&rt, cfg);
    let sbx = one_bridge(&listener.target());
    let (h, _) = wait_ready(&rt, &mut events, Duration::from_secs(15));
    let n = 200_000;
    let messages: Vec<Message> = overlay_flows(n)
        .into_iter()
        .map(|f| Message::FlowMod(FlowMod::add(f)))
        .collect();
    let t = Instant::now();
    rt.block_on(h.send_bundle(messages))
        .expect("the bundle commits on the busy switch");
    let bundle_took = t.elapsed();
    let t = Instant::now();
    let read = rt
        .block_on(h.flow_stats(FlowStatsRequest::all()))
        .expect("the whole table is read back");
    let read_took = t.elapsed();
    assert_eq!(read.len(), n as usize);
    eprintln!("bundle of {n} flows: {bundle_took:?}; read back: {read_took:?}");
    // The test means something only if the switch was busy longer than a silent switch may
    // be when the controller awaits nothing.
    assert!(
        bundle_took > interval + timeout * ofproto::session::ECHO_TIMEOUT_FACTOR,
        "the bundle took only {bundle_took:?}"
    );
    assert!(h.closed_cause().is_none(), "{:?}", h.closed_cause());
    // No session ended meanwhile, and the switch is still there.
    rt.block_on(h.barrier()).expect("still connected");
    let dropped = wait_for(&rt, &mut events, Duration::from_millis(1), |ev| match ev {
        SessionEvent::Disconnected { cause, .. } => Some(cause),
        _ => None,
    });
    assert!(dropped.is_none(), "dropped: {dropped:?}");
    assert_eq!(sbx.dump_flows("br0").expect("dump").len(), n as usize);
}

#[test]
fn connector_dials_a_bridge_management_socket_and_reports_port_changes() {
    let rt = runtime();
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::new("br0", 0x2a))
        .start()
        .expect("sandbox");
    let target = Target::Unix(sbx.ovs().mgmt_socket("br0"));
    let _guard = rt.enter();
    let (_connector, mut events) =
        Connector::start(target, SessionConfig::default(), Backoff::default());
    let (h, info) = wait_ready(&rt, &mut events, Duration::from_secs(15));
    assert_eq!(info.dpid, 0x2a);
    rt.block_on(h.flow_mod(FlowMod::add(overlay_flow(4))))
        .expect("flow-mod over the management socket");
    assert_eq!(sbx.dump_flows("br0").expect("dump").len(), 1);

    // Port changes arrive as events and update the session's port map.
    sbx.add_port("br0", "pod9", 9).expect("add port");
    let status = wait_for(&rt, &mut events, Duration::from_secs(10), |ev| match ev {
        SessionEvent::PortStatus { dpid, status, .. } if status.desc.port_no == 9 => {
            assert_eq!(dpid, 0x2a);
            Some(status)
        }
        _ => None,
    })
    .expect("PORT_STATUS for the new port");
    assert_eq!(status.reason, 0, "OFPPR_ADD");
    assert_eq!(status.desc.name_str(), "br0-pod9");
    let ports = rt.block_on(h.ports()).expect("ports");
    assert!(ports.contains_key(&9), "{:?}", ports.keys());
    sbx.del_port("br0", "pod9").expect("del port");
    wait_for(&rt, &mut events, Duration::from_secs(10), |ev| match ev {
        SessionEvent::PortStatus { status, .. } if status.reason == 1 => Some(()),
        _ => None,
    })
    .expect("PORT_STATUS delete");
}

#[test]
fn a_switch_without_openflow_1_3_gets_hello_failed() {
    let rt = runtime();
    let (listener, mut events) = listen(&rt, SessionConfig::default());
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::new("br0", 1))
        .start()
        .expect("sandbox");
    sbx.vsctl(&[
        "set",
        "bridge",
        "br0",
        "protocols=OpenFlow10",
        "--",
        "set-controller",
        "br0",
        &listener.target(),
    ])
    .expect("OpenFlow 1.0 only");
    let cause = wait_for(&rt, &mut events, Duration::from_secs(15), |ev| match ev {
        SessionEvent::Disconnected { cause, .. } => Some(cause),
        SessionEvent::Ready { .. } => panic!("an OpenFlow 1.0 switch must not become ready"),
        _ => None,
    })
    .expect("refused");
    assert_eq!(
        cause,
        DisconnectCause::VersionMismatch { offered: vec![1] },
        "{cause}"
    );
}

/// Writes `msgs` (with their xids) in one write on a raw OpenFlow 1.3 connection to `br0`'s
/// management socket and returns every reply up to the barrier reply with `last_xid`.
fn raw_pipelined(sbx: &OvsSandbox, msgs: &[(u32, Message)], last_xid: u32) -> Vec<(u32, Message)> {
    use ofproto::message::{Framer, Hello};
    use std::io::{Read, Write};
    let path = sbx.run_dir().join("br0.mgmt");
    let mut s = std::os::unix::net::UnixStream::connect(&path).expect("connect to br0.mgmt");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut out = Message::Hello(Hello::of13()).encode(1);
    for (xid, m) in msgs {
        out.extend(m.encode(*xid));
    }
    s.write_all(&out).expect("write");
    let mut framer = Framer::new();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = s.read(&mut buf).expect("read a reply");
        assert!(n > 0, "OVS closed the connection; replies so far: {got:?}");
        framer.push(&buf[..n]);
        while let Some((h, m)) = framer.next_message().expect("framing") {
            let m = m.expect("decodable reply");
            let done = h.xid == last_xid && m == Message::BarrierReply;
            got.push((h.xid, m));
            if done {
                return got;
            }
        }
    }
}

/// Why the session keeps its "prepare" barrier between the adds and the commit: Open vSwitch
/// refuses an add at add time (validation) by dropping it from the bundle, and a COMMIT
/// that follows in the same write then commits the other adds: writing OPEN, the adds and
/// COMMIT together (one round trip) would not be atomic. If a future OVS fails such a
/// commit, this test fails, and the session could pipeline the commit.
#[test]
fn ovs_commits_the_rest_of_a_bundle_whose_add_was_refused_when_the_commit_is_pipelined() {
    use ofproto::message::{BundleAdd, BundleControl, BundleCtrlType, BundleFlags};
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::numbered(0, 2))
        .start()
        .expect("sandbox");
    let before = sbx.dump_flows("br0").expect("dump");
    let flags = BundleFlags::ATOMIC | BundleFlags::ORDERED;
    let good_a = overlay_flow(1);
    let good_b = overlay_flow(2);
    let bad = Flow::new(10, 100, Match::new().eth_type(eth_type::IPV4)).goto(5);
    let add = |f: &Flow| {
        Message::BundleAdd(BundleAdd::new(
            7,
            flags,
            Message::FlowMod(FlowMod::add(f.clone())),
        ))
    };
    let msgs = vec![
        (
            10,
            Message::BundleControl(BundleControl::new(7, BundleCtrlType::OpenRequest, flags)),
        ),
        (11, add(&good_a)),
        (12, add(&bad)),
        (13, add(&good_b)),
        (
            14,
            Message::BundleControl(BundleControl::new(7, BundleCtrlType::CommitRequest, flags)),
        ),
        (15, Message::BarrierRequest),
    ];
    let replies = raw_pipelined(&sbx, &msgs, 15);
    let refused: Vec<_> = replies
        .iter()
        .filter_map(|(x, m)| match m {
            Message::Error(e) => Some((*x, e.kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        vec![(
            12,
            ErrorKind::BadInstruction(BadInstructionCode::BadTableId)
        )],
        "only the bad add is refused: {replies:?}"
    );
    let committed = replies.iter().any(|(x, m)| {
        *x == 14
            && matches!(m, Message::BundleControl(b) if b.ctrl_type == BundleCtrlType::CommitReply)
    });
    assert!(
        committed,
        "OVS answers the commit with COMMIT_REPLY: {replies:?}"
    );
    let after = sbx.dump_flows("br0").expect("dump");
    assert_eq!(
        after.len(),
        before.len() + 2,
        "the two good adds were committed without the refused one: {after:?}"
    );
}

/// The attach-sized case of the session's atomic bundle: a few flows that fit in one write
/// and one read on the switch, one of them refused at add time and one only at commit time;
/// the caller gets the error naming the message, and the table is unchanged.
#[test]
fn a_small_bundle_with_a_refused_message_reaches_the_caller_and_changes_nothing() {
    let rt = runtime();
    let (listener, mut events) = listen(&rt, SessionConfig::default());
    let sbx = one_bridge(&listener.target());
    let (h, _) = wait_ready(&rt, &mut events, Duration::from_secs(15));
    let base: Vec<String> = ofctl_text(&[overlay_flow(300_000)])
        .lines()
        .map(str::to_owned)
        .collect();
    sbx.add_flows("br0", &base).expect("baseline flow");
    let before = sbx.dump_flows("br0").expect("dump");

    let bad = Message::FlowMod(FlowMod::add(
        Flow::new(10, 100, Match::new().eth_type(eth_type::IPV4)).goto(5),
    ));
    let mut msgs: Vec<Message> = (0..4)
        .map(|i| Message::FlowMod(FlowMod::add(overlay_flow(i))))
        .collect();
    msgs.insert(2, bad.clone());
    match rt.block_on(h.send_bundle(msgs)) {
        Err(BundleError::Refused { index, message, .. }) => {
            assert_eq!(index, 2);
            assert_eq!(*message, bad);
        }
        other => panic!("expected the bundle refused at #2, got {other:?}"),
    }
    assert_eq!(
        sbx.dump_flows("br0").expect("dump"),
        before,
        "table unchanged"
    );

    let installed = overlay_flow(300_000);
    let mut overlapping = FlowMod::add(
        Flow::new(
            installed.table,
            installed.priority,
            Match::new().eth_type(eth_type::IPV4),
        )
        .apply(vec![Action::output(3)]),
    );
    overlapping.flow.flags = flow_flags::CHECK_OVERLAP;
    let mut msgs: Vec<Message> = (10..14)
        .map(|i| Message::FlowMod(FlowMod::add(overlay_flow(i))))
        .collect();
    msgs.push(Message::FlowMod(overlapping));
    match rt.block_on(h.send_bundle(msgs)) {
        Err(BundleError::Refused { index, error, .. }) => {
            assert_eq!(index, 4);
            assert_eq!(
                error.kind,
                ErrorKind::FlowModFailed(FlowModFailedCode::Overlap)
            );
        }
        other => panic!("expected the bundle refused at #4, got {other:?}"),
    }
    assert_eq!(
        sbx.dump_flows("br0").expect("dump"),
        before,
        "table unchanged"
    );
}

/// A bundle's success is answered only once OVS applied it: another connection (ovs-ofctl)
/// sees every flow the moment `send_bundle` returns, for each of many small bundles.
#[test]
fn a_bundle_is_acknowledged_only_after_ovs_applied_it() {
    let rt = runtime();
    let (listener, mut events) = listen(&rt, SessionConfig::default());
    let sbx = one_bridge(&listener.target());
    let (h, _) = wait_ready(&rt, &mut events, Duration::from_secs(15));
    let before = sbx.dump_flows("br0").expect("dump").len();
    for round in 0..20u32 {
        let msgs: Vec<Message> = (0..5)
            .map(|i| Message::FlowMod(FlowMod::add(overlay_flow(round * 5 + i))))
            .collect();
        rt.block_on(h.send_bundle(msgs)).expect("bundle commits");
        let now = sbx.dump_flows("br0").expect("dump").len();
        assert_eq!(
            now,
            before + 5 * (round as usize + 1),
            "round {round}: every flow visible once acknowledged"
        );
    }
}

/// Meters on real Open vSwitch: features, an add read back exactly (METER_CONFIG), and a
/// second connection on the bridge's management socket with a controller id of its own,
/// asking for NXT_PACKET_IN2: a `controller(id=7,userdata=..,meter_id=1)` flow's packets reach
/// it (with the userdata and cookie) and never the id-0 connection, at most as many as the
/// meter lets through; the meter's statistics account for every packet.
#[test]
fn meters_are_read_back_and_controller_id_packet_ins_reach_only_their_connection() {
    use ofproto::message::nicira::{self, PacketIn2};
    use ofproto::meter::{meter_flags as mf, MeterBand};
    use ofproto::{Meter, MeterMod};
    let rt = runtime();
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::new("br0", 0x2a).pod("p1", 3))
        .start()
        .expect("sandbox");
    let _guard = rt.enter();
    let sock = sbx.ovs().mgmt_socket("br0");
    let (_main_conn, mut main_events) = Connector::start(
        Target::Unix(sock.clone()),
        SessionConfig::default(),
        Backoff::default(),
    );
    let (main, _) = wait_ready(&rt, &mut main_events, Duration::from_secs(15));
    let (_audit_conn, mut audit_events) = Connector::start(
        Target::Unix(sock),
        SessionConfig::default(),
        Backoff::default(),
    );
    let (audit, _) = wait_ready(&rt, &mut audit_events, Duration::from_secs(15));
    rt.block_on(audit.send_batch(vec![
        nicira::set_controller_id(7),
        nicira::set_packet_in_format_nxt2(),
    ]))
    .expect("controller id and packet-in format accepted");

    let features = rt.block_on(main.meter_features()).expect("meter features");
    assert!(features.max_meter > 0, "{features:?}");
    let meter = Meter {
        meter_id: 1,
        flags: mf::PKTPS | mf::BURST | mf::STATS,
        bands: vec![MeterBand::drop(5, 5)],
    };
    assert_eq!(features.refusal(&meter), None);
    rt.block_on(main.send_batch(vec![Message::MeterMod(MeterMod::add(meter.clone()))]))
        .expect("meter add");
    assert_eq!(
        rt.block_on(main.meter_config()).expect("meter config"),
        vec![meter.clone()]
    );
    let dumped = sbx
        .ofctl(&["-O", "OpenFlow13", "dump-meters", "br0"])
        .expect("dump-meters");
    assert!(
        dumped.contains("meter=1 pktps burst stats bands=\ntype=drop rate=5 burst_size=5"),
        "{dumped}"
    );

    let mut flow = Flow::new(0, 10, Match::new().in_port(3)).cookie(0x0905_0000_0000_0001);
    flow = flow.apply(vec![Action::Controller {
        max_len: u16::MAX,
        controller_id: 7,
        reason: 1,
        userdata: vec![1, 2, 3],
        pause: false,
        meter_id: Some(1),
        extended: false,
    }]);
    rt.block_on(main.flow_mod(FlowMod::add(flow)))
        .expect("controller flow");

    // 40 frames in one call: the datapath sees them within a millisecond or so, far faster
    // than 5 per second.
    let frame = "eth(src=0a:58:0a:80:00:03,dst=0a:58:0a:80:00:01),eth_type(0x0800),ipv4(src=10.128.0.3,dst=10.128.0.1,proto=17,tos=0,ttl=64,frag=no),udp(src=1000,dst=2000)";
    let mut args = vec![
        "netdev-dummy/receive".to_string(),
        OvsSandbox::port_name("br0", "p1"),
    ];
    args.extend(std::iter::repeat_n(frame.to_string(), 40));
    sbx.ovs().appctl(&args).expect("inject");

    let first = wait_for(
        &rt,
        &mut audit_events,
        Duration::from_secs(10),
        |ev| match ev {
            SessionEvent::Message { message, .. } => PacketIn2::from_message(&message),
            _ => None,
        },
    )
    .expect("a packet-in on the connection with controller id 7")
    .expect("NXT_PACKET_IN2 decodes");
    assert_eq!(first.userdata, vec![1, 2, 3]);
    assert_eq!(
        (first.table_id, first.cookie, first.reason),
        (0, 0x0905_0000_0000_0001, 1)
    );
    assert_eq!(
        first.packet.get(12..14),
        Some(&[0x08, 0x00][..]),
        "the frame itself"
    );

    // The meter saw all 40; what its band did not drop went to the controller id 7.
    let stats = rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = main.meter_stats().await.expect("meter stats");
            if s.first().is_some_and(|m| m.packet_in_count >= 40)
                || tokio::time::Instant::now() > deadline
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let m = stats.first().expect("meter 1 stats");
    assert_eq!((m.meter_id, m.packet_in_count), (1, 40), "{stats:?}");
    let dropped = m.band_stats.first().map(|b| b.0).unwrap_or(0);
    let passed = 40 - dropped;
    assert!(
        dropped >= 20,
        "the band dropped most of the burst: {stats:?}"
    );
    // Exactly `passed` packet-ins arrive at id 7 (one is already here), none at id 0.
    let mut more = 1;
    while more < passed {
        wait_for(
            &rt,
            &mut audit_events,
            Duration::from_secs(10),
            |ev| match ev {
                SessionEvent::Message { message, .. } => {
                    PacketIn2::from_message(&message).map(|_| ())
                }
                _ => None,
            },
        )
        .expect("every packet the meter passed reaches id 7");
        more += 1;
    }
    // A barrier on each connection after the packets were metered: anything that was sent
    // to a connection has been written to it before its barrier reply.
    rt.block_on(audit.barrier()).expect("barrier");
    rt.block_on(main.barrier()).expect("barrier");
    while let Some(ev) = main_events.try_next() {
        assert!(
            !matches!(ev, SessionEvent::Message { .. }),
            "the id-0 connection got {ev:?}"
        );
    }
    while let Some(ev) = audit_events.try_next() {
        assert!(
            !matches!(ev, SessionEvent::Message { .. }),
            "more packet-ins than the meter passed: {ev:?}"
        );
    }
}
