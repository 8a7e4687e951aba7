//! One reconciler task per switch: it owns the switch's desired FlowSet and what the switch was
//! last known to hold, and makes the second equal the first with one bundle per change.
//!
//! * Every bundle also writes the digest marker (table 253, `topology::pipeline::marker`): a
//!   digest of the desired flows and groups, committed atomically with them.
//! * On connect (and when this replica becomes leader) it reads the marker alone: equal to the
//!   desired digest, the switch holds the desired state and nothing is read or sent. Otherwise
//!   (an Open vSwitch restarted with empty tables, a change made while disconnected) it reads
//!   the switch's flows and groups and sends only the difference.
//! * Desired-state updates that queue up while a bundle is in flight are merged into one
//!   bundle (group commit): the switch commits them together, in arrival order, or none.
//! * An update is acknowledged after the switch's barrier reply. When a merged bundle is
//!   refused, each update is tried again alone, in arrival order, on top of those before it
//!   that the switch took, so each is answered with its own result: one refused change does
//!   not fail the others merged with it.
//! * On every audit tick the switch is re-read whole and drift (flows added, removed or
//!   changed by hand, which the marker cannot see) repaired; audits take turns of their own
//!   at a bounded rate across all switches (`SwitchLink::audit_turn`).
//! * With several replicas ([`crate::ha`]) it first holds this replica's OpenFlow role on the
//!   switch (master with the leader's generation, or slave), and writes only while this
//!   replica leads with a lease surely held; a standby keeps the desired state and answers
//!   an ack once it has read the desired flows back from the switch (the leader programmed
//!   them from the store's watch), so a change made through a standby is answered with the
//!   same guarantee. On becoming leader it re-reads the switch and sends only the difference.

use crate::error::ApiError;
use crate::ha::{Leadership, Standing};
use crate::observe::{Metrics, SwitchStatus};
use crate::switches::link::{LinkError, SwitchLink, SwitchState};
use crate::switches::plan::plan;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use topology::pipeline::marker::{marker_cookie, with_marker, FlowSetDigest};
use topology::FlowSet;

/// An acknowledgement a caller waits for.
pub struct Ack {
    /// Where to send the outcome.
    pub tx: oneshot::Sender<Result<(), ApiError>>,
    /// Fail (rather than succeed later on reconnect) when the switch is not connected.
    pub require_connected: bool,
}

/// Commands to a reconciler.
pub enum ReconcileCmd {
    /// New desired state.
    Desired { flows: FlowSet, ack: Option<Ack> },
    /// A switch connected (conn_id tells reconnects apart).
    Connected {
        conn_id: u64,
        dpid: u64,
        link: Arc<dyn SwitchLink>,
    },
    /// The connection `conn_id` ended.
    Disconnected { conn_id: u64 },
    /// Read the switch's current flows (for dump-flows --installed).
    ReadInstalled {
        reply: oneshot::Sender<Result<FlowSet, ApiError>>,
    },
    /// The desired state (for dump-flows).
    ReadDesired { reply: oneshot::Sender<FlowSet> },
    /// Stop the task; hand the link back (if any) so it can be reassigned.
    Stop {
        reply: oneshot::Sender<Option<ConnectedLink>>,
    },
}

/// The desired-state updates merged into one sync (group commit): the desired state before
/// the first, and each update's desired state with its ack, in arrival order.
#[derive(Default)]
struct Round {
    base: Option<FlowSet>,
    updates: Vec<(FlowSet, Option<Ack>)>,
}

impl Round {
    /// Every ack of the round.
    fn acks(self) -> Vec<Ack> {
        self.updates.into_iter().filter_map(|(_, a)| a).collect()
    }

    /// Whether more than one caller waits on this round's bundle.
    fn grouped(&self) -> bool {
        self.updates.iter().filter(|(_, a)| a.is_some()).count() > 1
    }
}

/// A handle to a running reconciler.
#[derive(Clone)]
pub struct ReconcilerHandle {
    /// Command channel.
    pub tx: mpsc::UnboundedSender<ReconcileCmd>,
    /// Shared status.
    pub status: Arc<SwitchStatus>,
}

/// A connection handed to a reconciler: (conn_id, dpid, link).
pub type ConnectedLink = (u64, u64, Arc<dyn SwitchLink>);

/// The reconciler task's state.
pub struct Reconciler {
    status: Arc<SwitchStatus>,
    rx: mpsc::UnboundedReceiver<ReconcileCmd>,
    desired: FlowSet,
    installed: Option<FlowSet>,
    link: Option<ConnectedLink>,
    audit_interval: Duration,
    metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<Option<ConnectedLink>>>,
    lead: Arc<Leadership>,
    /// The connection and standing whose role the switch granted.
    role_held: Option<(u64, Standing)>,
    /// A standby's acks, answered once the switch holds the desired flows (the leader's
    /// work), or with an error at their deadline.
    standby_acks: Vec<(Ack, Instant)>,
    /// The pause before the next read-back for `standby_acks` (grows while they wait).
    standby_check: Duration,
    /// The digest of `desired` (None until needed; kept current from each new desired set's
    /// changes).
    digest: Option<FlowSetDigest>,
    /// The meter features of the connection (by conn_id) as last read; None inside: the switch
    /// has no meters.
    meter_features: Option<(u64, Option<ofproto::MeterFeatures>)>,
    /// Whether the last `sync_with` sent a bundle (it may find nothing to change).
    sent_bundle: bool,
    /// The desired state the switch last took whole (a sync that succeeded): where updates
    /// sent one by one start from, so that a refused update's flows, still part of the desired
    /// states computed after it, are not sent again with the others.
    committed: Option<FlowSet>,
}

/// When a reconciler audits first: between half and the whole of `interval` after it starts,
/// fixed per node. Reconcilers started together (at controller start) would otherwise read
/// every switch back in the same instant, every interval.
fn audit_offset(node: &str, interval: Duration) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut h);
    let frac = (h.finish() % 1024) as u32;
    interval / 2 + interval / 2 / 1024 * frac
}

/// How long a standby waits for the leader to program a change it stored.
const STANDBY_ACK_WAIT: Duration = Duration::from_secs(20);
/// How soon a standby first reads the switch back for waiting acks; the pause doubles up to
/// [`STANDBY_CHECK_MAX`] while they wait (a whole flow table per read).
const STANDBY_CHECK: Duration = Duration::from_millis(10);
/// The longest pause between a standby's read-backs.
const STANDBY_CHECK_MAX: Duration = Duration::from_millis(500);

impl Reconciler {
    /// Start a reconciler for `node` (or an unknown datapath) with its desired state.
    pub fn spawn(
        node: &str,
        unknown: bool,
        desired: FlowSet,
        audit_interval: Duration,
        metrics: Arc<Metrics>,
        lead: &Arc<Leadership>,
    ) -> ReconcilerHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let status = Arc::new(SwitchStatus {
            node: node.to_string(),
            unknown,
            ..Default::default()
        });
        status
            .desired_flows
            .store(desired_count(&desired, unknown), Ordering::Relaxed);
        let r = Reconciler {
            status: status.clone(),
            rx,
            desired,
            installed: None,
            link: None,
            audit_interval,
            metrics,
            stop: None,
            lead: lead.clone(),
            role_held: None,
            standby_acks: Vec::new(),
            standby_check: STANDBY_CHECK,
            digest: None,
            meter_features: None,
            sent_bundle: false,
            committed: None,
        };
        tokio::spawn(r.run());
        ReconcilerHandle { tx, status }
    }

    async fn run(mut self) {
        let start =
            tokio::time::Instant::now() + audit_offset(&self.status.node, self.audit_interval);
        let mut audit = tokio::time::interval_at(start, self.audit_interval);
        audit.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut standing = self.lead.subscribe();
        let mut audit_wait: Option<
            std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        > = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.standby_check), if !self.standby_acks.is_empty() => {
                    self.check_standby_acks().await;
                    self.standby_check = (self.standby_check * 2).min(STANDBY_CHECK_MAX);
                }
                changed = standing.changed() => {
                    if changed.is_err() {
                        continue;
                    }
                    // A new role to hold; a new leader re-reads the switch (hitless: only
                    // differences are sent).
                    self.installed = None;
                    if self.link.is_some() {
                        self.sync(Round::default(), false).await;
                    }
                }
                cmd = self.rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    let mut round = Round::default();
                    let mut dirty = self.handle(cmd, &mut round).await;
                    while let Ok(cmd) = self.rx.try_recv() {
                        dirty |= self.handle(cmd, &mut round).await;
                    }
                    if let Some(reply) = self.stop.take() {
                        self.set_role_status("");
                        let mut acks = round.acks();
                        acks.extend(self.standby_acks.drain(..).map(|(a, _)| a));
                        for a in acks {
                            let _ = a.tx.send(Err(ApiError::Unavailable(format!(
                                "node {} was removed", self.status.node))));
                        }
                        let _ = reply.send(self.link.take());
                        break;
                    }
                    if dirty {
                        self.sync(round, false).await;
                    }
                }
                _ = audit.tick(), if audit_wait.is_none() => {
                    if let Some((_, _, link)) = self.link.clone() {
                        if self.lead.may_program() {
                            // Wait for an audit turn (a bounded rate across all switches)
                            // without holding up the commands.
                            audit_wait = Some(Box::pin(async move { link.audit_turn().await }));
                        }
                    }
                }
                _ = async { if let Some(w) = audit_wait.as_mut() { w.await } }, if audit_wait.is_some() => {
                    audit_wait = None;
                    if self.link.is_some() && self.lead.may_program() {
                        self.installed = None;
                        self.sync(Round::default(), true).await;
                    }
                }
            }
        }
    }

    /// Apply one command; true when a sync should follow.
    async fn handle(&mut self, cmd: ReconcileCmd, round: &mut Round) -> bool {
        match cmd {
            ReconcileCmd::Desired { flows, ack } => {
                self.status.desired_flows.store(
                    desired_count(&flows, self.status.unknown),
                    Ordering::Relaxed,
                );
                // The digest follows the change (only the differing flows are hashed).
                self.digest = self.digest.map(|d| d.after(&self.desired, &flows));
                let before = std::mem::replace(&mut self.desired, flows);
                round.base.get_or_insert(before);
                // Kept per update for a refused merged bundle (a FlowSet shares its runs).
                round.updates.push((self.desired.clone(), ack));
                true
            }
            ReconcileCmd::Connected {
                conn_id,
                dpid,
                link,
            } => {
                tracing::info!(node = %self.status.node, dpid = format!("{dpid:#018x}"), peer = %link.peer(), "switch connected");
                if let Ok(mut p) = self.status.peer.lock() {
                    *p = link.peer();
                }
                self.status.dpid.store(dpid, Ordering::Relaxed);
                self.status.connected.store(true, Ordering::Relaxed);
                self.link = Some((conn_id, dpid, link));
                self.installed = None;
                true
            }
            ReconcileCmd::Disconnected { conn_id } => {
                if self.link.as_ref().is_some_and(|(c, _, _)| *c == conn_id) {
                    tracing::warn!(node = %self.status.node, "switch disconnected");
                    self.link = None;
                    self.role_held = None;
                    self.set_role_status("");
                    self.installed = None;
                    self.status.connected.store(false, Ordering::Relaxed);
                    self.status.synced.store(false, Ordering::Relaxed);
                }
                false
            }
            ReconcileCmd::ReadInstalled { reply } => {
                let r = match &self.link {
                    None => Err(ApiError::Unavailable(format!(
                        "the switch of node {} is not connected",
                        self.status.node
                    ))),
                    Some((_, _, link)) => match read_in_turn(link.as_ref()).await {
                        Ok((f, g, m)) => Ok(FlowSet::new(f, g).with_meters(m)),
                        Err(e) => Err(ApiError::Unavailable(format!(
                            "reading the switch of node {}: {e}",
                            self.status.node
                        ))),
                    },
                };
                let _ = reply.send(r);
                false
            }
            ReconcileCmd::ReadDesired { reply } => {
                let _ = reply.send(self.desired.clone());
                false
            }
            ReconcileCmd::Stop { reply } => {
                self.stop = Some(reply);
                false
            }
        }
    }

    /// Make the switch hold the desired state, then answer the round's acks.
    async fn sync(&mut self, round: Round, audit: bool) {
        let Some((_, _, link)) = self.link.clone() else {
            self.answer_disconnected(round.acks());
            return;
        };
        let conn_id = self.link.as_ref().map(|(c, _, _)| *c).unwrap_or(0);
        let standby = matches!(self.lead.standing(), Standing::Standby { .. });
        if let Err(e) = self.hold_role(conn_id, link.as_ref()).await {
            if standby {
                // A refused slave request (the switch saw a newer generation) changes nothing
                // for a standby: it writes nothing and may still read the switch.
                tracing::debug!(node = %self.status.node, error = %e, "slave role not granted");
                self.park_standby_acks(round.acks());
                return;
            }
            self.status.set_error(&e);
            tracing::warn!(node = %self.status.node, error = %e, "role request refused");
            self.status.synced.store(false, Ordering::Relaxed);
            for a in round.acks() {
                let _ = a.tx.send(Err(ApiError::Unavailable(format!(
                    "switch of node {}: {e}",
                    self.status.node
                ))));
            }
            return;
        }
        if !self.lead.may_program() {
            // A standby (or a leader whose lease lapsed) does not write: the change is stored,
            // and the leader programs it from the store's watch. The acks wait until this
            // replica reads the desired flows back from the switch.
            self.status.synced.store(false, Ordering::Relaxed);
            self.park_standby_acks(round.acks());
            return;
        }
        let started = Instant::now();
        let result = self.sync_with(link.as_ref(), audit).await;
        let refused = matches!(result, Err(LinkError::Refused { .. }));
        self.note_sync(started, &result);
        if result.is_ok() {
            self.committed = Some(self.desired.clone());
        }
        let r = result.map_err(|e| {
            ApiError::Unavailable(format!("switch of node {}: {e}", self.status.node))
        });
        // Acks taken as a standby are answered by this (leader's) sync.
        let standby: Vec<Ack> = self.standby_acks.drain(..).map(|(a, _)| a).collect();
        // (Compared only after a refusal: a whole FlowSet comparison.)
        if refused
            && self.link.is_some()
            && !round.updates.is_empty()
            && (round.grouped() || (self.committed.is_some() && self.committed != round.base))
        {
            // Nothing of the bundle was committed: each update gets its own result (also a
            // lone update whose desired state still holds an earlier, refused update's flows).
            self.metrics.bundle_fallbacks.inc();
            tracing::warn!(node = %self.status.node, updates = round.updates.len(), "a merged bundle was refused; sending its updates one by one");
            self.sync_one_by_one(link.as_ref(), round).await;
            for a in standby {
                let _ = a.tx.send(r.clone());
            }
            return;
        }
        if r.is_ok() && self.sent_bundle {
            let waiting = round.updates.iter().filter(|(_, a)| a.is_some()).count();
            self.metrics.bundle_updates.inc_by(waiting as u64);
        }
        for a in round.acks().into_iter().chain(standby) {
            let _ = a.tx.send(r.clone());
        }
    }

    /// Record a sync's outcome in the switch's status and the metrics.
    fn note_sync(&mut self, started: Instant, result: &Result<(), LinkError>) {
        match result {
            Ok(()) => {
                self.status.synced.store(true, Ordering::Relaxed);
                self.metrics.observe_sync(started.elapsed());
            }
            Err(e) => {
                self.status.synced.store(false, Ordering::Relaxed);
                self.status.set_error(&e.to_string());
                self.metrics.switch_errors.inc();
                tracing::error!(node = %self.status.node, error = %e, "switch sync failed");
                if let LinkError::Disconnected(_) = e {
                    self.link = None;
                    self.status.connected.store(false, Ordering::Relaxed);
                }
                self.installed = None;
            }
        }
    }

    /// A merged bundle was refused (the switch committed none of it): each update is sent
    /// again alone, in arrival order, as its own change (the difference it made to the desired
    /// state before it) on top of what the switch last took and the updates before it that it
    /// took now, and answered with its own result. A later update is thus never committed before an earlier one, and
    /// a refused one is not on the switch (its caller learns why). The desired state is the
    /// latest again afterwards; the switch holds it less the refused updates' changes.
    async fn sync_one_by_one(&mut self, link: &dyn SwitchLink, round: Round) {
        let latest = std::mem::take(&mut self.desired);
        let mut before = round.base.unwrap_or_default();
        let mut taken = self.committed.clone().unwrap_or_else(|| before.clone());
        let mut stop: Option<ApiError> = None;
        for (flows, ack) in round.updates {
            let change = FlowSet::diff(&before, &flows);
            before = flows;
            if let Some(e) = &stop {
                if let Some(a) = ack {
                    let _ = a.tx.send(Err(e.clone()));
                }
                continue;
            }
            let trial = taken.apply(&change);
            self.desired = trial.clone();
            self.digest = None;
            let started = Instant::now();
            let result = self.sync_with(link, false).await;
            let refused = matches!(result, Err(LinkError::Refused { .. }));
            self.note_sync(started, &result);
            let r = result.map_err(|e| {
                ApiError::Unavailable(format!("switch of node {}: {e}", self.status.node))
            });
            match &r {
                Ok(()) => {
                    taken = trial;
                    if ack.is_some() && self.sent_bundle {
                        self.metrics.bundle_updates.inc();
                    }
                }
                // Lost connection, timeout: the rest cannot be tried now.
                Err(e) if !refused => stop = Some(e.clone()),
                Err(_) => {}
            }
            if let Some(a) = ack {
                let _ = a.tx.send(r);
            }
        }
        self.committed = Some(taken);
        self.desired = latest;
        self.digest = None;
    }

    /// Acks while the switch is not connected: one that needs the switch fails, the others
    /// are answered (the change is stored; the switch gets it when it connects).
    fn answer_disconnected(&self, acks: Vec<Ack>) {
        for a in acks {
            let r = if a.require_connected {
                Err(ApiError::Unavailable(format!(
                    "the switch of node {} is not connected",
                    self.status.node
                )))
            } else {
                Ok(())
            };
            let _ = a.tx.send(r);
        }
    }

    /// Keep a standby's acks until the switch holds the desired flows (checked soon, then
    /// less and less often).
    fn park_standby_acks(&mut self, acks: Vec<Ack>) {
        if acks.is_empty() {
            return;
        }
        let deadline = Instant::now() + STANDBY_ACK_WAIT;
        self.standby_check = STANDBY_CHECK;
        self.standby_acks
            .extend(acks.into_iter().map(|a| (a, deadline)));
    }

    /// A standby's acks: answered once the switch holds the desired flows, or at their deadline
    /// with an error (the change is stored; no leader programmed it in time).
    async fn check_standby_acks(&mut self) {
        let Some((_, _, link)) = self.link.clone() else {
            // The change is stored; the switch gets it when it connects to the leader.
            let acks: Vec<Ack> = self.standby_acks.drain(..).map(|(a, _)| a).collect();
            self.answer_disconnected(acks);
            return;
        };
        let holds = match read_in_turn(link.as_ref()).await {
            Ok((f, g, m)) => match self.target_for(link.as_ref()).await {
                Ok((target, _)) => {
                    FlowSet::diff(&FlowSet::new(f, g).with_meters(m), &target).is_empty()
                }
                Err(_) => false,
            },
            Err(_) => false,
        };
        if holds {
            self.status.synced.store(true, Ordering::Relaxed);
            for (a, _) in self.standby_acks.drain(..) {
                let _ = a.tx.send(Ok(()));
            }
            return;
        }
        let now = Instant::now();
        let (late, waiting): (Vec<_>, Vec<_>) = self
            .standby_acks
            .drain(..)
            .partition(|(_, deadline)| *deadline <= now);
        self.standby_acks = waiting;
        for (a, _) in late {
            let _ = a.tx.send(Err(ApiError::Unavailable(format!(
                "the change is stored, but the switch of node {} did not get it within {} s: no leader programmed it (see flowmeshctl get controllers)",
                self.status.node,
                STANDBY_ACK_WAIT.as_secs()
            ))));
        }
    }

    fn set_role_status(&self, role: &str) {
        if let Ok(mut r) = self.status.role.lock() {
            *r = role.to_string();
        }
        let name = if self.status.node.is_empty() {
            format!("{:#018x}", self.status.dpid.load(Ordering::Relaxed))
        } else {
            self.status.node.clone()
        };
        self.lead.set_switch_role(&name, role);
    }

    /// Make the switch grant this replica's current role on connection `conn_id` (once per
    /// connection and standing). A stale generation is refused by the switch: a newer leader
    /// exists, and this replica must not write.
    async fn hold_role(&mut self, conn_id: u64, link: &dyn SwitchLink) -> Result<(), String> {
        let standing = self.lead.standing();
        if self
            .role_held
            .as_ref()
            .is_some_and(|(c, s)| *c == conn_id && *s == standing)
        {
            return Ok(());
        }
        let Some((role, generation)) = standing.role() else {
            self.role_held = Some((conn_id, standing));
            return Ok(());
        };
        match link.set_role(role, generation).await {
            Ok(()) => {
                tracing::info!(node = %self.status.node, role = standing.role_name(), generation, "OpenFlow role granted");
                self.set_role_status(standing.role_name());
                self.role_held = Some((conn_id, standing));
                Ok(())
            }
            Err(e) => {
                self.role_held = None;
                self.set_role_status("");
                Err(format!(
                    "the switch refused role {} with generation {generation}: {e}",
                    standing.role_name()
                ))
            }
        }
    }

    /// Brings the switch to the desired flows. A switch turn (see [`SwitchLink::turn`]) is
    /// taken before the switch is read or a change planned, and held until the bundle is
    /// acknowledged: switches waiting for theirs hold neither a read-back table nor a batch (a
    /// mass reconnect of 1,000 switches otherwise held 1,000 batches at once). A sync that finds
    /// nothing to change takes no turn.
    async fn sync_with(&mut self, link: &dyn SwitchLink, audit: bool) -> Result<(), LinkError> {
        self.sent_bundle = false;
        if self.status.unknown {
            return self.reset_unknown(link).await;
        }
        let (target, digest) = self.target_for(link).await?;
        let mut turn = None;
        let mut t_diff;
        let diff = match self.installed.take() {
            Some(installed) => {
                t_diff = Instant::now();
                let mut diff = FlowSet::diff(&installed, &target);
                if !diff.is_empty() {
                    // Wait for the turn without the diff (it is redone after: the inputs are
                    // ours).
                    drop(diff);
                    turn = Some(link.turn().await);
                    t_diff = Instant::now();
                    diff = FlowSet::diff(&installed, &target);
                }
                if diff.is_empty() {
                    self.status
                        .installed_flows
                        .store(installed.len() as u64, Ordering::Relaxed);
                    self.installed = Some(installed);
                    return Ok(());
                }
                diff
            }
            None => {
                if !audit && self.marker_agrees(link, &digest).await? {
                    // The switch holds what this controller wants: nothing read, nothing sent.
                    self.status.marker_verified.fetch_add(1, Ordering::Relaxed);
                    self.metrics.marker_verified.inc();
                    self.status
                        .installed_flows
                        .store(target.len() as u64, Ordering::Relaxed);
                    self.installed = Some(target);
                    return Ok(());
                }
                turn = Some(link.turn().await);
                self.metrics.full_reads.inc();
                // The read is folded into the diff as it arrives (the switch's time, mostly):
                // the switch's table is never held whole.
                let (diff, read) = link.read_diff(&target).await?;
                self.metrics
                    .read_held_flows
                    .set_max(read.held_at_once as u64);
                t_diff = Instant::now();
                if diff.is_empty() {
                    // It holds exactly the target.
                    self.status
                        .installed_flows
                        .store(target.len() as u64, Ordering::Relaxed);
                    self.installed = Some(target);
                    return Ok(());
                }
                diff
            }
        };
        if audit {
            tracing::warn!(node = %self.status.node, changes = diff.len(), "audit found drift; repairing");
            self.status
                .drift_repairs
                .fetch_add(diff.len() as u64, Ordering::Relaxed);
        }
        tracing::info!(
            node = %self.status.node,
            adds = diff.adds.len(),
            modifies = diff.modifies.len(),
            deletes = diff.deletes.len(),
            group_changes = diff.group_adds.len() + diff.group_modifies.len() + diff.group_deletes.len(),
            meter_changes = diff.meter_adds.len() + diff.meter_modifies.len() + diff.meter_deletes.len(),
            "syncing switch"
        );
        let steps = marker_steps(plan(diff));
        let n = steps.iter().map(Vec::len).sum::<usize>() as u64;
        self.metrics.phase_diff.observe(t_diff.elapsed());
        let t = Instant::now();
        let mut base = 0;
        for step in steps {
            let len = step.len();
            link.apply(step).await.map_err(|e| match e {
                LinkError::Refused {
                    index,
                    change,
                    error,
                } => LinkError::Refused {
                    index: base + index,
                    change,
                    error,
                },
                e => e,
            })?;
            base += len;
        }
        drop(turn);
        let took = t.elapsed();
        self.metrics.phase_switch.observe(took);
        tracing::debug!(node = %self.status.node, changes = n, micros = took.as_micros() as u64, "bundle acknowledged");
        self.status.mods_sent.fetch_add(n, Ordering::Relaxed);
        self.metrics.flow_mods_sent.inc_by(n);
        self.status
            .installed_flows
            .store(target.len() as u64, Ordering::Relaxed);
        self.installed = Some(target);
        self.sent_bundle = true;
        Ok(())
    }

    /// The digest of the desired state (computed whole once, then kept current).
    fn digest_now(&mut self) -> FlowSetDigest {
        *self
            .digest
            .get_or_insert_with(|| FlowSetDigest::of(&self.desired))
    }

    /// What the switch must hold (the desired state as this switch gets it, see
    /// [`Reconciler::effective_desired`], with its digest marker) and that digest. The kept
    /// digest covers the whole desired state; a switch that cannot hold the meters gets a set
    /// without them, whose digest is computed whole (such switches are rare: no meter support).
    async fn target_for(
        &mut self,
        link: &dyn SwitchLink,
    ) -> Result<(FlowSet, FlowSetDigest), LinkError> {
        let want = self.effective_desired(link).await?;
        let digest = if want.meters().len() == self.desired.meters().len() {
            self.digest_now()
        } else {
            FlowSetDigest::of(&want)
        };
        Ok((with_marker(&want, &digest), digest))
    }

    /// True when the switch's marker (one flow of table 253) records `digest`.
    async fn marker_agrees(
        &self,
        link: &dyn SwitchLink,
        digest: &FlowSetDigest,
    ) -> Result<bool, LinkError> {
        let flows = link.read_marker(marker_cookie()).await?;
        let agrees =
            matches!(&flows[..], [m] if FlowSetDigest::from_marker(m).as_ref() == Some(digest));
        tracing::debug!(node = %self.status.node, agrees, markers = flows.len(), "digest marker read");
        Ok(agrees)
    }

    /// What this switch gets: the desired state, or, on a switch that cannot hold its meters,
    /// the desired state without them and without the flows that use them (audit logging is
    /// then off there; the pipeline is otherwise whole). The switch's meter features are read
    /// once per connection.
    async fn effective_desired(&mut self, link: &dyn SwitchLink) -> Result<FlowSet, LinkError> {
        if self.desired.meters().is_empty() {
            self.set_audit_status(String::new());
            return Ok(self.desired.clone());
        }
        let conn_id = self.link.as_ref().map(|(c, _, _)| *c).unwrap_or(0);
        let features = match &self.meter_features {
            Some((c, f)) if *c == conn_id => *f,
            _ => {
                let f = link.meter_features().await?;
                self.meter_features = Some((conn_id, f));
                f
            }
        };
        let refusal = match features {
            None => Some("the switch answers no meter request (it has no meters)".to_string()),
            Some(f) => self.desired.meters().iter().find_map(|m| f.refusal(m)),
        };
        match refusal {
            None => {
                self.set_audit_status("on".into());
                Ok(self.desired.clone())
            }
            Some(why) => {
                let text = format!(
                    "audit logging is off on this switch: {why}; it needs an OpenFlow meter to rate-limit the audit packet-ins (Open vSwitch's userspace datapath, or a kernel datapath with meter support)"
                );
                if self.set_audit_status(format!("off: {why}")) {
                    tracing::error!(node = %self.status.node, "{text}");
                    self.status.set_error(&text);
                }
                Ok(self.desired.without_meters())
            }
        }
    }

    /// Show the audit-logging state of this switch; true when it changed.
    fn set_audit_status(&self, text: String) -> bool {
        match self.status.audit.lock() {
            Ok(mut a) if *a != text => {
                *a = text;
                true
            }
            _ => false,
        }
    }
}

/// The flows a node's switch should hold: its pipeline's and the digest marker (an unknown
/// datapath gets no marker).
fn desired_count(desired: &FlowSet, unknown: bool) -> u64 {
    desired.len() as u64 + u64::from(!unknown)
}

/// The batch with its marker change moved: a strict delete of the marker first and its add
/// last. In a bundle the order does not matter (it commits whole); a switch without bundles
/// gets an ordered batch, and a batch cut short (a crash, a lost connection) then leaves no
/// marker at all, so the next connect reads the table instead of trusting a stale digest.
fn marker_last(
    batch: Vec<crate::switches::link::SwitchChange>,
) -> Vec<crate::switches::link::SwitchChange> {
    use crate::switches::link::SwitchChange;
    use ofproto::{FlowMod, FlowModCommand};
    use topology::pipeline::marker::is_marker;
    let (markers, mut rest): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .partition(|c| matches!(c, SwitchChange::Flow(fm) if is_marker(&fm.flow)));
    let (mut adds, deletes): (Vec<_>, Vec<_>) = markers
        .into_iter()
        .partition(|c| matches!(c, SwitchChange::Flow(fm) if fm.command == FlowModCommand::Add));
    let Some(add) = adds.pop() else {
        // The marker is only deleted (a desired set without it: never for a node's switch).
        let mut out = deletes;
        out.extend(rest);
        return out;
    };
    if let SwitchChange::Flow(fm) = &add {
        rest.insert(
            0,
            SwitchChange::Flow(FlowMod::delete_strict(fm.flow.clone())),
        );
    }
    rest.push(add);
    rest
}

/// The batch as the steps it goes out in ([`marker_last`] first). A batch that changes the
/// marker and a meter is cut in three: the marker's delete alone, the changes, the marker's
/// add alone. Meter-mods cannot be bundled (they go just before and after the bundle), so
/// this way no meter changes while the switch holds a marker (a connection lost half-way
/// leaves no marker, and the next connect reads the switch whole).
fn marker_steps(
    batch: Vec<crate::switches::link::SwitchChange>,
) -> Vec<Vec<crate::switches::link::SwitchChange>> {
    use crate::switches::link::SwitchChange;
    use ofproto::FlowModCommand;
    use topology::pipeline::marker::is_marker;
    let mut batch = marker_last(batch);
    let meters = batch.iter().any(|c| matches!(c, SwitchChange::Meter(_)));
    let first_is_marker_delete = matches!(batch.first(), Some(SwitchChange::Flow(fm))
        if fm.command == FlowModCommand::DeleteStrict && is_marker(&fm.flow));
    let last_is_marker_add = matches!(batch.last(), Some(SwitchChange::Flow(fm))
        if fm.command == FlowModCommand::Add && is_marker(&fm.flow));
    if !meters || !first_is_marker_delete || !last_is_marker_add || batch.len() < 3 {
        return vec![batch];
    }
    let add = batch.split_off(batch.len() - 1);
    let middle = batch.split_off(1);
    vec![batch, middle, add]
}

impl Reconciler {
    /// A datapath no node claims gets its default drop without being read and without a
    /// turn: one bundle deletes every flow and group it may hold and adds the drop. Reading
    /// (and taking one of the turns every real switch waits for) would let any peer that
    /// connects with an unclaimed datapath id, e.g. hundreds of hostile connections, delay
    /// the syncs of the real switches; three messages are cheap on every (re)connect, leadership
    /// change and audit.
    async fn reset_unknown(&mut self, link: &dyn SwitchLink) -> Result<(), LinkError> {
        let batch = unknown_reset(&self.desired);
        let n = batch.len() as u64;
        link.apply(batch).await?;
        self.status.mods_sent.fetch_add(n, Ordering::Relaxed);
        self.metrics.flow_mods_sent.inc_by(n);
        self.status
            .installed_flows
            .store(self.desired.len() as u64, Ordering::Relaxed);
        self.installed = Some(self.desired.clone());
        Ok(())
    }
}

/// The bundle that leaves a switch holding exactly `desired`, whatever it held: every flow
/// (all tables) and every group deleted, then `desired`'s groups and flows added.
fn unknown_reset(desired: &FlowSet) -> Vec<crate::switches::link::SwitchChange> {
    use crate::switches::link::SwitchChange;
    use ofproto::{FlowMod, FlowModCommand, GroupMod, GroupModCommand};
    let mut out = vec![
        SwitchChange::Flow(FlowMod {
            command: FlowModCommand::Delete,
            ..FlowMod::add(ofproto::Flow::new(
                ofproto::flow::TABLE_ALL,
                0,
                ofproto::Match::new(),
            ))
        }),
        SwitchChange::Group(GroupMod {
            command: GroupModCommand::Delete,
            group: ofproto::Group {
                group_id: ofproto::flow::GROUP_ALL,
                group_type: ofproto::GroupType::All,
                buckets: Vec::new(),
            },
        }),
    ];
    out.extend(desired.groups().iter().map(|g| {
        SwitchChange::Group(GroupMod {
            command: GroupModCommand::Add,
            group: g.clone(),
        })
    }));
    out.extend(
        desired
            .iter()
            .map(|f| SwitchChange::Flow(FlowMod::add(f.clone()))),
    );
    out
}

/// Reads the switch's whole table in a turn of its own (a read that leads to no bundle: a
/// dump, a standby's check).
async fn read_in_turn(link: &dyn SwitchLink) -> Result<SwitchState, LinkError> {
    let _turn = link.turn().await;
    link.read_state().await
}

#[cfg(test)]
#[path = "reconciler_tests.rs"]
mod tests;
