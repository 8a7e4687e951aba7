//! One reconciler task per switch: it owns the switch's desired FlowSet and what the switch was
//! last known to hold, and makes the second equal the first with one bundle per change.
//!
//! * Every bundle also writes the digest marker (table 253, `topology::pipeline::marker`): a
//!   digest of the desired flows and groups, committed atomically with them.
//! * On connect (and when this replica becomes leader) it reads the marker alone: equal to the
//!   desired digest, the switch holds the desired state and nothing is read or sent. Otherwise
//!   (an Open vSwitch restarted with empty tables, a change made while disconnected) it reads
//!   the switch's flows and groups and sends only the difference.
//! * Desired-state updates that queue up while a bundle is in flight are merged into one.
//! * An update is acknowledged after the switch's barrier reply.
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
                        self.sync(Vec::new(), false).await;
                    }
                }
                cmd = self.rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    let mut acks = Vec::new();
                    let mut dirty = self.handle(cmd, &mut acks).await;
                    while let Ok(cmd) = self.rx.try_recv() {
                        dirty |= self.handle(cmd, &mut acks).await;
                    }
                    if let Some(reply) = self.stop.take() {
                        self.set_role_status("");
                        acks.extend(self.standby_acks.drain(..).map(|(a, _)| a));
                        for a in acks {
                            let _ = a.tx.send(Err(ApiError::Unavailable(format!(
                                "node {} was removed", self.status.node))));
                        }
                        let _ = reply.send(self.link.take());
                        break;
                    }
                    if dirty {
                        self.sync(acks, false).await;
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
                        self.sync(Vec::new(), true).await;
                    }
                }
            }
        }
    }

    /// Apply one command; true when a sync should follow.
    async fn handle(&mut self, cmd: ReconcileCmd, acks: &mut Vec<Ack>) -> bool {
        match cmd {
            ReconcileCmd::Desired { flows, ack } => {
                self.status.desired_flows.store(
                    desired_count(&flows, self.status.unknown),
                    Ordering::Relaxed,
                );
                // The digest follows the change (only the differing flows are hashed).
                self.digest = self.digest.map(|d| d.after(&self.desired, &flows));
                self.desired = flows;
                acks.extend(ack);
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

    /// Make the switch hold the desired state, then answer the acks.
    async fn sync(&mut self, acks: Vec<Ack>, audit: bool) {
        let Some((_, _, link)) = self.link.clone() else {
            self.answer_disconnected(acks);
            return;
        };
        let conn_id = self.link.as_ref().map(|(c, _, _)| *c).unwrap_or(0);
        let standby = matches!(self.lead.standing(), Standing::Standby { .. });
        if let Err(e) = self.hold_role(conn_id, link.as_ref()).await {
            if standby {
                // A refused slave request (the switch saw a newer generation) changes nothing
                // for a standby: it writes nothing and may still read the switch.
                tracing::debug!(node = %self.status.node, error = %e, "slave role not granted");
                self.park_standby_acks(acks);
                return;
            }
            self.status.set_error(&e);
            tracing::warn!(node = %self.status.node, error = %e, "role request refused");
            self.status.synced.store(false, Ordering::Relaxed);
            for a in acks {
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
            self.park_standby_acks(acks);
            return;
        }
        let started = Instant::now();
        let result = self.sync_with(link.as_ref(), audit).await;
        match &result {
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
        let r = result.map_err(|e| {
            ApiError::Unavailable(format!("switch of node {}: {e}", self.status.node))
        });
        // Acks taken as a standby are answered by this (leader's) sync.
        let acks: Vec<Ack> = acks
            .into_iter()
            .chain(self.standby_acks.drain(..).map(|(a, _)| a))
            .collect();
        for a in acks {
            let _ = a.tx.send(r.clone());
        }
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
        if self.status.unknown {
            return self.reset_unknown(link).await;
        }
        let (target, digest) = self.target_for(link).await?;
        let mut turn = None;
        let installed = match self.installed.take() {
            Some(i) => i,
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
                let (f, g, m) = link.read_state().await?;
                FlowSet::new(f, g).with_meters(m)
            }
        };
        // The diff phase: not the read-back above, which is the switch's time.
        let mut t_diff = Instant::now();
        let mut diff = FlowSet::diff(&installed, &target);
        if !diff.is_empty() && turn.is_none() {
            // Wait for the turn without the diff (it is redone after: the inputs are ours).
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
mod tests {
    use super::*;
    use crate::switches::link::{LinkFuture, SwitchChange, SwitchState};
    use ofproto::meter::meter_flags;
    use ofproto::{
        Action, Flow, FlowMod, FlowModCommand, Match, Meter, MeterBand, MeterFeatures,
        MeterModCommand,
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
        let f =
            |i: u32| SwitchChange::Flow(FlowMod::add(Flow::new(0, 100, Match::new().in_port(i))));
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
}
