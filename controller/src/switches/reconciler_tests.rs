//! The reconciler's tests, against switches held in memory.

use super::*;
use crate::switches::link::{LinkFuture, SwitchChange, SwitchState};
use ofproto::meter::meter_flags;
use ofproto::{
    Action, Flow, FlowMod, FlowModCommand, Match, Meter, MeterBand, MeterFeatures, MeterModCommand,
};
use std::sync::Mutex;
use topology::pipeline::marker::is_marker;

/// A switch held in memory: it applies what it is sent and counts the changes.
#[derive(Default)]
struct MemorySwitch {
    state: Mutex<(Vec<Flow>, Vec<Meter>)>,
    sent: Mutex<Vec<SwitchChange>>,
    meters: Option<MeterFeatures>,
    /// The length of each batch applied, in order.
    batches: Mutex<Vec<usize>>,
    /// When set, a batch with a meter change is lost (the connection drops before it).
    lose_meter_batches: std::sync::atomic::AtomicBool,
}

impl SwitchLink for MemorySwitch {
    fn peer(&self) -> String {
        "memory".into()
    }
    fn read_state(&self) -> LinkFuture<'_, Result<SwitchState, LinkError>> {
        let (f, m) = self.state.lock().expect("state").clone();
        Box::pin(async move { Ok((f, Vec::new(), m)) })
    }
    fn meter_features(&self) -> LinkFuture<'_, Result<Option<MeterFeatures>, LinkError>> {
        let f = self.meters;
        Box::pin(async move { Ok(f) })
    }
    fn apply(&self, changes: Vec<SwitchChange>) -> LinkFuture<'_, Result<(), LinkError>> {
        if self.lose_meter_batches.load(Ordering::Relaxed)
            && changes.iter().any(|c| matches!(c, SwitchChange::Meter(_)))
        {
            return Box::pin(async { Err(LinkError::Disconnected("lost".into())) });
        }
        self.batches.lock().expect("batches").push(changes.len());
        let mut st = self.state.lock().expect("state");
        for c in &changes {
            match c {
                SwitchChange::Flow(fm) => {
                    st.0.retain(|f| topology::pipeline::flowset::key_cmp(f, &fm.flow).is_ne());
                    if fm.command == FlowModCommand::Add {
                        st.0.push(fm.flow.clone());
                    }
                }
                SwitchChange::Meter(mm) => {
                    st.1.retain(|m| m.meter_id != mm.meter.meter_id);
                    if mm.command != MeterModCommand::Delete {
                        st.1.push(mm.meter.clone());
                    }
                }
                SwitchChange::Group(_) => {}
            }
        }
        self.sent.lock().expect("sent").extend(changes);
        Box::pin(async { Ok(()) })
    }
    fn ports(&self) -> LinkFuture<'_, Result<Vec<(String, u32)>, LinkError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

fn ovs_meters() -> Option<MeterFeatures> {
    Some(MeterFeatures {
        max_meter: 262_144,
        band_types: 2,
        capabilities: 0xf,
        max_bands: 8,
        max_color: 0,
    })
}

/// A pipeline with one audit flow using meter 1, and a plain flow.
fn desired(rate: u32) -> FlowSet {
    let logged = Flow::new(80, 181, Match::new().in_port(3)).apply(vec![Action::Controller {
        max_len: u16::MAX,
        controller_id: 0xf10e,
        reason: 1,
        userdata: vec![1],
        pause: false,
        meter_id: Some(1),
        extended: false,
    }]);
    let plain = Flow::new(80, 180, Match::new().in_port(3));
    FlowSet::new(vec![logged, plain], Vec::new()).with_meters(vec![Meter {
        meter_id: 1,
        flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
        bands: vec![MeterBand::drop(rate, rate)],
    }])
}

/// Start a reconciler on `switch` with `want`, and wait for its first sync's ack.
async fn synced(switch: Arc<MemorySwitch>, want: FlowSet) -> ReconcilerHandle {
    let h = Reconciler::spawn(
        "node-1",
        false,
        FlowSet::default(),
        Duration::from_secs(3600),
        Arc::new(Metrics::default()),
        &crate::ha::Leadership::alone(),
    );
    h.tx.send(ReconcileCmd::Connected {
        conn_id: 1,
        dpid: 1,
        link: switch,
    })
    .expect("connected");
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Desired {
        flows: want,
        ack: Some(Ack {
            tx,
            require_connected: true,
        }),
    })
    .expect("desired");
    rx.await.expect("answered").expect("synced");
    h
}

#[tokio::test]
async fn meters_go_first_and_a_restart_with_nothing_changed_sends_nothing() {
    let switch = Arc::new(MemorySwitch {
        meters: ovs_meters(),
        ..Default::default()
    });
    let h = synced(switch.clone(), desired(20)).await;
    let sent: Vec<SwitchChange> = std::mem::take(&mut *switch.sent.lock().expect("sent"));
    // The marker's delete alone, the meter and the flows, the marker's add alone.
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert_eq!(*switch.batches.lock().expect("batches"), vec![1, 3, 1]);
    assert!(matches!(&sent[1], SwitchChange::Meter(mm) if mm.command == MeterModCommand::Add));
    assert!(matches!(&sent[4], SwitchChange::Flow(fm) if is_marker(&fm.flow)));
    assert_eq!(h.status.audit.lock().expect("audit").as_str(), "on");
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Stop { reply: tx }).expect("stop");
    let _ = rx.await;

    // A restarted controller (a new reconciler) against the same switch: nothing sent.
    let h = synced(switch.clone(), desired(20)).await;
    assert!(switch.sent.lock().expect("sent").is_empty());
    assert_eq!(h.status.mods_sent.load(Ordering::Relaxed), 0);

    // A new rate is one meter modify and the new marker (the old one deleted first).
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Desired {
        flows: desired(50),
        ack: Some(Ack {
            tx,
            require_connected: true,
        }),
    })
    .expect("desired");
    rx.await.expect("answered").expect("synced");
    let sent = switch.sent.lock().expect("sent").clone();
    assert!(
        matches!(&sent[..], [SwitchChange::Flow(del), SwitchChange::Meter(mm), SwitchChange::Flow(add)]
            if mm.command == MeterModCommand::Modify && mm.meter.bands[0].rate == 50
                && del.command == FlowModCommand::DeleteStrict && is_marker(&del.flow)
                && add.command == FlowModCommand::Add && is_marker(&add.flow)),
        "{sent:?}"
    );
}

/// The switch's marker, as a reconnecting controller reads it.
fn marker_of(switch: &MemorySwitch) -> Vec<Flow> {
    let st = switch.state.lock().expect("state");
    st.0.iter().filter(|f| is_marker(f)).cloned().collect()
}

#[tokio::test]
async fn a_changed_meter_is_never_hidden_by_an_agreeing_marker() {
    let switch = Arc::new(MemorySwitch {
        meters: ovs_meters(),
        ..Default::default()
    });
    let h = synced(switch.clone(), desired(20)).await;
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Stop { reply: tx }).expect("stop");
    let _ = rx.await;
    switch.sent.lock().expect("sent").clear();

    // A controller restarted with a new audit rate (the flows are the same): the marker
    // disagrees, the switch is read, and the meter is modified.
    let h = synced(switch.clone(), desired(50)).await;
    assert_eq!(h.status.marker_verified.load(Ordering::Relaxed), 0);
    let meters = switch.state.lock().expect("state").1.clone();
    assert_eq!(meters.len(), 1);
    assert_eq!(meters[0].bands[0].rate, 50, "{meters:?}");
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Stop { reply: tx }).expect("stop");
    let _ = rx.await;

    // A meter change lost half-way (the connection drops when the meter-mod goes out)
    // leaves no marker behind: the stale marker of rate 50 cannot vouch for the switch.
    let h = synced(switch.clone(), desired(50)).await;
    assert_eq!(h.status.marker_verified.load(Ordering::Relaxed), 1);
    switch.lose_meter_batches.store(true, Ordering::Relaxed);
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Desired {
        flows: desired(70),
        ack: Some(Ack {
            tx,
            require_connected: false,
        }),
    })
    .expect("desired");
    let answer = rx.await.expect("answered");
    assert!(answer.is_err(), "the lost batch is not acknowledged");
    assert!(marker_of(&switch).is_empty(), "{:?}", marker_of(&switch));
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Stop { reply: tx }).expect("stop");
    let _ = rx.await;
    // A controller that went back to rate 50 reads the switch (no marker) and finds it
    // holding what it wants; one with rate 70 repairs the meter.
    switch.lose_meter_batches.store(false, Ordering::Relaxed);
    let h = synced(switch.clone(), desired(70)).await;
    assert_eq!(h.status.marker_verified.load(Ordering::Relaxed), 0);
    assert_eq!(switch.state.lock().expect("state").1[0].bands[0].rate, 70);
    assert_eq!(marker_of(&switch).len(), 1);
}

#[tokio::test]
async fn a_switch_without_meters_gets_the_pipeline_without_audit_flows_and_says_why() {
    let switch = Arc::new(MemorySwitch::default()); // answers no meter request
    let h = synced(switch.clone(), desired(20)).await;
    let (flows, meters) = switch.state.lock().expect("state").clone();
    assert!(meters.is_empty());
    let flows: Vec<Flow> = flows.into_iter().filter(|f| !is_marker(f)).collect();
    assert_eq!(flows.len(), 1, "only the flow without a meter: {flows:?}");
    assert_eq!(flows[0].priority, 180);
    // The marker records what this switch got (no meters): a restart finds it agreeing.
    assert_eq!(marker_of(&switch).len(), 1);
    let want = FlowSetDigest::of(&desired(20).without_meters());
    assert_eq!(
        FlowSetDigest::from_marker(&marker_of(&switch)[0]),
        Some(want)
    );
    let audit = h.status.audit.lock().expect("audit").clone();
    assert!(audit.starts_with("off: "), "{audit}");
    let err = h.status.last_error.lock().expect("error").clone();
    assert!(
        err.contains("audit logging is off") && err.contains("meter"),
        "{err}"
    );
    assert!(h.status.synced.load(Ordering::Relaxed));
    // The next sync finds nothing to do and counts no second error.
    let errors = h.status.errors.load(Ordering::Relaxed);
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Desired {
        flows: desired(20),
        ack: Some(Ack {
            tx,
            require_connected: true,
        }),
    })
    .expect("desired");
    rx.await.expect("answered").expect("synced");
    assert_eq!(h.status.errors.load(Ordering::Relaxed), errors);
    // The flow and the marker (its delete first: marker_last).
    assert_eq!(switch.sent.lock().expect("sent").len(), 3);
}

#[test]
fn a_batch_deletes_the_marker_first_and_writes_it_last() {
    let f = |i: u32| SwitchChange::Flow(FlowMod::add(Flow::new(0, 100, Match::new().in_port(i))));
    let marker = FlowSetDigest::default().marker();
    let batch = vec![f(1), SwitchChange::Flow(FlowMod::add(marker.clone())), f(2)];
    let out = marker_last(batch);
    assert_eq!(out.len(), 4);
    assert!(
        matches!(&out[0], SwitchChange::Flow(fm) if fm.command == FlowModCommand::DeleteStrict && is_marker(&fm.flow))
    );
    assert_eq!(out[1], f(1));
    assert_eq!(out[2], f(2));
    assert!(
        matches!(&out[3], SwitchChange::Flow(fm) if fm.command == FlowModCommand::Add && fm.flow == marker)
    );
    // Without a marker change the batch is left as it is.
    assert_eq!(marker_last(vec![f(1), f(2)]), vec![f(1), f(2)]);
}

#[test]
fn audits_are_spread_over_the_second_half_of_the_interval() {
    use super::audit_offset;
    let i = Duration::from_secs(30);
    let offsets: std::collections::BTreeSet<_> = (0..100)
        .map(|n| audit_offset(&format!("node-{n}"), i))
        .collect();
    assert!(
        offsets.iter().all(|o| *o >= i / 2 && *o <= i),
        "{offsets:?}"
    );
    // 100 nodes land on many different instants, not one.
    assert!(offsets.len() > 80, "{}", offsets.len());
    assert_eq!(audit_offset("a", i), audit_offset("a", i));
}

/// A switch held in memory that can hold a bundle in flight (until released) and refuses
/// any batch adding a flow of priority [`REFUSED`], as Open vSwitch refuses a bundle whole.
struct GatedSwitch {
    flows: Mutex<Vec<Flow>>,
    /// While set, each apply waits for a permit of `release` (and announces itself on
    /// `entered`).
    hold: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Semaphore,
    release: tokio::sync::Semaphore,
    /// The priorities of the flows each committed batch added (the marker left out, sorted),
    /// in commit order.
    commits: Mutex<Vec<Vec<u16>>>,
}

impl Default for GatedSwitch {
    fn default() -> Self {
        GatedSwitch {
            flows: Mutex::default(),
            hold: Default::default(),
            entered: tokio::sync::Semaphore::new(0),
            release: tokio::sync::Semaphore::new(0),
            commits: Mutex::default(),
        }
    }
}

/// The priority of a flow [`GatedSwitch`] refuses.
const REFUSED: u16 = 999;

impl SwitchLink for GatedSwitch {
    fn peer(&self) -> String {
        "gated".into()
    }
    fn read_state(&self) -> LinkFuture<'_, Result<SwitchState, LinkError>> {
        let f = self.flows.lock().expect("flows").clone();
        Box::pin(async move { Ok((f, Vec::new(), Vec::new())) })
    }
    fn apply(&self, changes: Vec<SwitchChange>) -> LinkFuture<'_, Result<(), LinkError>> {
        Box::pin(async move {
            if self.hold.load(Ordering::SeqCst) {
                self.entered.add_permits(1);
                self.release.acquire().await.expect("open").forget();
            }
            let adds = |c: &SwitchChange| match c {
                SwitchChange::Flow(fm) if fm.command != FlowModCommand::DeleteStrict => {
                    Some(fm.flow.clone())
                }
                _ => None,
            };
            if let Some(i) = changes
                .iter()
                .position(|c| adds(c).is_some_and(|f| f.priority == REFUSED))
            {
                return Err(LinkError::Refused {
                    index: i,
                    change: "priority=999".into(),
                    error: "OFPBMC_BAD_VALUE".into(),
                });
            }
            let mut st = self.flows.lock().expect("flows");
            let mut added = Vec::new();
            for c in &changes {
                if let SwitchChange::Flow(fm) = c {
                    st.retain(|f| topology::pipeline::flowset::key_cmp(f, &fm.flow).is_ne());
                    if fm.command != FlowModCommand::DeleteStrict {
                        st.push(fm.flow.clone());
                        if !is_marker(&fm.flow) {
                            added.push(fm.flow.priority);
                        }
                    }
                }
            }
            // A bundle commits whole: the order inside it says nothing.
            added.sort_unstable();
            self.commits.lock().expect("commits").push(added);
            Ok(())
        })
    }
    fn ports(&self) -> LinkFuture<'_, Result<Vec<(String, u32)>, LinkError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// The flows of priorities `ps` (table 80), as a desired state.
fn with_priorities(ps: &[u16]) -> FlowSet {
    let flows = ps.iter().map(|p| Flow::new(80, *p, Match::new())).collect();
    FlowSet::new(flows, Vec::new())
}

/// A reconciler on a [`GatedSwitch`] synced to priority 100, and its metrics.
async fn gated() -> (Arc<GatedSwitch>, ReconcilerHandle, Arc<Metrics>) {
    let switch = Arc::new(GatedSwitch::default());
    let metrics = Arc::new(Metrics::default());
    let h = Reconciler::spawn(
        "node-1",
        false,
        FlowSet::default(),
        Duration::from_secs(3600),
        metrics.clone(),
        &crate::ha::Leadership::alone(),
    );
    h.tx.send(ReconcileCmd::Connected {
        conn_id: 1,
        dpid: 1,
        link: switch.clone(),
    })
    .expect("connected");
    send(&h, &[100])
        .await
        .await
        .expect("answered")
        .expect("synced");
    switch.commits.lock().expect("commits").clear();
    (switch, h, metrics)
}

/// Send the desired state of priorities `ps`; the receiver of its ack.
async fn send(h: &ReconcilerHandle, ps: &[u16]) -> oneshot::Receiver<Result<(), ApiError>> {
    let (tx, rx) = oneshot::channel();
    h.tx.send(ReconcileCmd::Desired {
        flows: with_priorities(ps),
        ack: Some(Ack {
            tx,
            require_connected: true,
        }),
    })
    .expect("desired");
    rx
}

/// Updates 2–4 queue while update 1's bundle is in flight (each adds one flow to the one
/// before): they are merged into the next bundle. Returns the four acks' receivers.
async fn queue_behind_a_bundle(
    switch: &GatedSwitch,
    h: &ReconcilerHandle,
    third: u16,
) -> Vec<oneshot::Receiver<Result<(), ApiError>>> {
    switch.hold.store(true, Ordering::SeqCst);
    let mut acks = vec![send(h, &[100, 101]).await];
    switch.entered.acquire().await.expect("open").forget();
    acks.push(send(h, &[100, 101, 102]).await);
    acks.push(send(h, &[100, 101, 102, third]).await);
    acks.push(send(h, &[100, 101, 102, third, 104]).await);
    // The reconciler waits inside update 1's bundle: 2–4 are queued when it is let go.
    switch.hold.store(false, Ordering::SeqCst);
    switch.release.add_permits(1);
    acks
}

/// Group commit: what arrives while a bundle is in flight goes out as one bundle, after it,
/// and every caller is answered once its own flows are committed.
#[tokio::test]
async fn updates_queued_behind_a_bundle_go_out_together_in_order() {
    let (switch, h, metrics) = gated().await;
    let acks = queue_behind_a_bundle(&switch, &h, 103).await;
    for a in acks {
        a.await.expect("answered").expect("committed");
    }
    assert_eq!(
        *switch.commits.lock().expect("commits"),
        vec![vec![101], vec![102, 103, 104]]
    );
    assert_eq!(metrics.bundle_updates.get(), 1 + 1 + 3);
    assert_eq!(metrics.bundle_fallbacks.get(), 0);
    // Nothing changed: a resync sends nothing.
    send(&h, &[100, 101, 102, 103, 104])
        .await
        .await
        .expect("answered")
        .expect("synced");
    assert_eq!(switch.commits.lock().expect("commits").len(), 2);
}

/// A merged bundle the switch refuses fails only the update that caused it: the others are
/// sent again one by one, in order (a later one never before an earlier one), each answered
/// with its own result; the refused one's flow never reaches the switch.
#[tokio::test]
async fn a_refused_merged_bundle_answers_each_update_with_its_own_result() {
    let (switch, h, metrics) = gated().await;
    let acks = queue_behind_a_bundle(&switch, &h, REFUSED).await;
    let mut results = Vec::new();
    for a in acks {
        results.push(a.await.expect("answered"));
    }
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    let refused = results[2].as_ref().expect_err("the refused update fails");
    assert!(refused.to_string().contains("refused"), "{refused}");
    assert!(results[3].is_ok(), "{results:?}");
    // Update 1 alone, the merged 2–4 refused whole (nothing committed), then 2 and 4 alone.
    assert_eq!(
        *switch.commits.lock().expect("commits"),
        vec![vec![101], vec![102], vec![104]]
    );
    let mut held: Vec<u16> = switch
        .flows
        .lock()
        .expect("flows")
        .iter()
        .filter(|f| !is_marker(f))
        .map(|f| f.priority)
        .collect();
    held.sort_unstable();
    assert_eq!(held, vec![100, 101, 102, 104]);
    assert_eq!(metrics.bundle_fallbacks.get(), 1);
}

/// An update whose desired state still holds an earlier update's refused flow (computed before
/// that refusal was taken back) is sent as its own change on top of what the switch last took:
/// it succeeds, and the refused flow is not sent with it.
#[tokio::test]
async fn a_lone_update_after_a_refused_one_is_sent_without_its_flows() {
    let (switch, h, metrics) = gated().await;
    let refused = send(&h, &[100, REFUSED]).await.await.expect("answered");
    assert!(refused.is_err(), "{refused:?}");
    send(&h, &[100, REFUSED, 102])
        .await
        .await
        .expect("answered")
        .expect("its own change is taken");
    assert_eq!(*switch.commits.lock().expect("commits"), vec![vec![102]]);
    assert_eq!(metrics.bundle_fallbacks.get(), 1);
}
