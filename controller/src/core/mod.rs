//! The controller core: one task owns the cluster model, the incremental pipeline, the state
//! backend and the per-switch reconcilers. API handlers talk to it through [`CoreHandle`].
//!
//! A mutation runs against the model, is made durable in the backend, recomputes the flows of
//! the nodes it affects, hands them to those nodes' reconcilers and is answered once every
//! connected switch it touched acknowledged the change (barrier reply).

pub mod changes;
pub mod effects;
mod liveness;
pub mod load;
mod sessions;
pub mod store_sync;
mod writer;

pub use changes::{cursors_change, egress_change, namespace_change, node_change, pod_change};
pub use effects::{Effects, Event, Undo};
pub use load::{load_model, load_model_from};
use writer::{
    dispatcher, lock_slot, revisions, store_writer, Dispatch, SharedRevisions, WriteJob, WriterCmd,
};

use crate::error::ApiError;
use crate::observe::Metrics;
use crate::observe::SwitchStatus;
use crate::state::{Change, StateBackend, WatchEvent};
use crate::switches::link::SwitchLink;
use crate::switches::reconciler::{Ack, ReconcileCmd, Reconciler, ReconcilerHandle};
use ofproto::{Flow, Match};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use topology::{Affected, ClusterModel, FlowSet, Pipeline};

/// How long a mutation waits for its switches' acknowledgements.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// What a mutation's call waits for.
enum Awaited {
    /// The store's write (with a shared store: the write, then the flows sent after it).
    Store,
    /// A switch's acknowledgement that the call does not depend on.
    Switch(String),
    /// The acknowledgement of the switch the change requires.
    RequiredSwitch(String),
}

/// The refusal of a change whose required switch is not connected (nothing was stored).
fn switch_not_connected(node: &str) -> ApiError {
    ApiError::Unavailable(format!(
        "the switch of node {node} is not connected, so nothing was stored"
    ))
}

/// Take back a stored change whose required switch failed it (`failed`), and say so: the
/// error of the call, which then leaves nothing behind — or, if the undo could not run, says
/// that the change is still stored.
async fn take_back(core: Option<CoreHandle>, undo: Undo, failed: ApiError) -> ApiError {
    let Some(core) = core else {
        return ApiError::Unavailable(format!(
            "{failed}; the controller is shutting down, so the change is still stored"
        ));
    };
    match core.mutate(move |m| undo(m).map(|fx| ((), fx))).await {
        Ok(()) => ApiError::Unavailable(format!("{failed}; the change was undone")),
        Err(u) => ApiError::Unavailable(format!(
            "{failed}; undoing the change failed ({u}), so it is still stored"
        )),
    }
}

type Finish = Box<dyn FnOnce(Result<(), ApiError>) + Send>;
type MutateFn = Box<dyn FnOnce(&mut ClusterModel) -> Option<(Effects, Finish)> + Send>;
type ReadFn = Box<dyn FnOnce(&mut Core) + Send>;
type Reject = Box<dyn FnOnce(ApiError) + Send>;

enum CoreCmd {
    Reload,
    /// Ask the store's watch for a fresh listing (after a failed write; with why the store
    /// is unavailable, if it is).
    Relist(Option<String>),
    /// Changes from the store (already admitted by the revision table when `Vec` came from
    /// the writer; otherwise checked here).
    Store(Vec<WatchEvent>),
    /// An event from the store's watch.
    Watched(WatchEvent),
    /// A mutation, and how to refuse it without running it (while the store is re-read).
    Mutate(MutateFn, Option<Reject>),
    Read(ReadFn),
    SwitchUp {
        conn_id: u64,
        dpid: u64,
        link: Arc<dyn SwitchLink>,
    },
    SwitchDown {
        conn_id: u64,
        dpid: u64,
    },
}

/// Settings of the core.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Interval at which every switch is re-read and drift repaired.
    pub audit_interval: Duration,
    /// After start, how long a node's switch has to connect before the node counts as offline
    /// for egress IPs (switches retry with backoff up to 8 s after a controller restart).
    pub liveness_grace: Duration,
    /// How long a node whose shim watched its egress IPs may be without that watch before
    /// the node counts as offline for egress IPs (its switch may still answer).
    pub shim_grace: Duration,
    /// This replica's standing among several (alone by default): only a leader programs
    /// switches and makes the controller's own changes (egress failover, DNS results).
    pub leadership: Arc<crate::ha::Leadership>,
    /// The most distinct dnsNames one project's egress firewall may use (the model refuses
    /// a policy with more).
    pub egress_dns_names_per_namespace: usize,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            audit_interval: Duration::from_secs(300),
            liveness_grace: Duration::from_secs(10),
            shim_grace: Duration::from_secs(5),
            leadership: crate::ha::Leadership::alone(),
            egress_dns_names_per_namespace: topology::model::DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE,
        }
    }
}

/// The core's state (owned by its task).
pub struct Core {
    /// The cluster model.
    pub model: ClusterModel,
    pipeline: Pipeline,
    store: Arc<dyn StateBackend>,
    writer: mpsc::UnboundedSender<WriterCmd>,
    revs: SharedRevisions,
    /// Asks the store's watch to relist (None: the store has no watch).
    relist: Option<mpsc::UnboundedSender<()>>,
    /// With a watched (shared) store: flows wait for their store write here.
    dispatch: Option<mpsc::UnboundedSender<Dispatch>>,
    /// A failed write asked for a relist that has not arrived yet.
    resyncing: bool,
    /// Internal mutations held back while resyncing.
    after_resync: Vec<(MutateFn, Option<Reject>)>,
    /// The store's health as its watch last reported it (true without a watch).
    pub store_ok: bool,
    /// What the store's watch last said about its health.
    pub store_detail: String,
    reconcilers: HashMap<String, ReconcilerHandle>,
    unknown: HashMap<u64, ReconcilerHandle>,
    connected: HashMap<u64, (u64, Arc<dyn SwitchLink>)>,
    /// Connections held back because another connection holds their datapath id (the echo
    /// contest of `sessions.rs`), or refused by it and not yet gone.
    contested: std::collections::HashSet<u64>,
    /// The core's own command channel (weak: the core ends when every handle is gone).
    me: mpsc::WeakUnboundedSender<CoreCmd>,
    events: broadcast::Sender<Event>,
    metrics: Arc<Metrics>,
    cfg: CoreConfig,
    /// The egress firewall DNS resolver's schedule (written by its task, shown by the API).
    pub dns_schedule: BTreeMap<String, kinds::egress_firewall::DnsSchedule>,
    /// NETIDs whose egress is dropped because joined projects' firewalls differ.
    firewall_conflicts: BTreeMap<u32, String>,
    /// Nodes whose shim has watched its egress IPs (`WatchEgress`) since this start.
    shims: HashMap<String, ShimWatch>,
    /// Egress nodes whose underlay address stopped answering the egress probe
    /// (`resources::egress_probe`): offline for egress IPs until they answer again.
    unreachable: std::collections::HashSet<String>,
    /// When the core started (the liveness grace counts from here).
    started: std::time::Instant,
    /// Stored records left out of the model because they do not fit it (at load, or as a
    /// watched change): key → why. A later change of the key that fits clears it.
    refused: BTreeMap<String, String>,
    /// The egress-IP state last seen from the store (`None` until a watched change carried
    /// one): the placements the model made on applying it are written back by the leader.
    stored_egress: Option<topology::model::EgressSnapshot>,
}

/// A node shim's egress watch, as the core sees it.
#[derive(Debug, Default)]
struct ShimWatch {
    /// Streams open now.
    streams: u32,
    /// Bumped on every open and close: a grace check is stale once it moved.
    epoch: u64,
    /// No stream for longer than the grace: the node is offline for egress IPs.
    lost: bool,
}

/// A cloneable handle to the core task.
#[derive(Clone)]
pub struct CoreHandle {
    tx: mpsc::UnboundedSender<CoreCmd>,
    events: broadcast::Sender<Event>,
    /// Controller-wide metrics.
    pub metrics: Arc<Metrics>,
    /// Whether the store is shared and watched (fixed for the core's life): objects may then
    /// appear in the model that no call to this replica made.
    watched: bool,
}

/// Move a switch from one reconciler to another without both writing to it at once: the old
/// one finishes any bundle in flight and stops, then the new one gets the link (and reads the
/// switch afresh). `from: None` hands the link over at once.
fn handoff(
    from: Option<ReconcilerHandle>,
    to: Option<ReconcilerHandle>,
    link: Option<(u64, u64, Arc<dyn SwitchLink>)>,
) {
    tokio::spawn(async move {
        if let Some(old) = from {
            let (tx, rx) = oneshot::channel();
            if old.tx.send(ReconcileCmd::Stop { reply: tx }).is_ok() {
                let _ = rx.await;
            }
        }
        if let (Some(to), Some((conn_id, dpid, link))) = (to, link) {
            let _ = to.tx.send(ReconcileCmd::Connected {
                conn_id,
                dpid,
                link,
            });
        }
    });
}

/// The FlowSet of a datapath no node claims: one drop-everything flow.
pub fn unknown_datapath_flows() -> FlowSet {
    FlowSet::new(vec![Flow::new(0, 0, Match::new())], Vec::new())
}

impl Core {
    /// Whether the store is shared and watched (etcd, Kubernetes): objects may then appear
    /// in the model that no call to this replica made (a Namespace created by kubectl).
    pub fn store_is_watched(&self) -> bool {
        self.relist.is_some()
    }

    /// Start the core task on a loaded model (the store is listed again for its revisions).
    pub fn spawn(
        model: ClusterModel,
        store: Arc<dyn StateBackend>,
        cfg: CoreConfig,
        metrics: Arc<Metrics>,
    ) -> Result<CoreHandle, ApiError> {
        let listing = store
            .list()
            .map_err(|e| ApiError::Unavailable(format!("loading state: {e}")))?;
        Self::spawn_watched(model, store, Some(listing), cfg, metrics)
    }

    /// Start the core task on a model loaded from `listing` (its revisions guard the writes),
    /// and follow the store's watch from the listing's revision: changes other replicas write
    /// are applied to the model and pushed to the switches they affect.
    pub fn spawn_watched(
        model: ClusterModel,
        store: Arc<dyn StateBackend>,
        listing: Option<crate::state::Listing>,
        cfg: CoreConfig,
        metrics: Arc<Metrics>,
    ) -> Result<CoreHandle, ApiError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(1024);
        let (writer, writer_rx) = mpsc::unbounded_channel();
        let revs: SharedRevisions = Arc::default();
        let watch = match &listing {
            Some(l) => {
                revisions(&revs).relisted(l);
                store.watch(l.revision)
            }
            None => None,
        };
        let relist = match watch {
            Some(w) => {
                let mut events_rx = w.events;
                let to_core = tx.clone();
                tokio::spawn(async move {
                    while let Some(e) = events_rx.recv().await {
                        if to_core.send(CoreCmd::Watched(e)).is_err() {
                            break;
                        }
                    }
                });
                Some(w.relist)
            }
            None => None,
        };
        {
            let (store, core_tx, revs, watched, metrics) = (
                store.clone(),
                tx.clone(),
                revs.clone(),
                relist.is_some(),
                metrics.clone(),
            );
            // The backends' blocking calls may use the runtime (timers, their clients), as
            // they did from the blocking pool: the thread runs inside its context.
            let rt = tokio::runtime::Handle::current();
            std::thread::Builder::new()
                .name("flowmesh-store".into())
                .spawn(move || {
                    let _rt = rt.enter();
                    store_writer(store, writer_rx, core_tx, revs, watched, metrics)
                })
                .map_err(|e| ApiError::Internal(format!("starting the store writer: {e}")))?;
        }
        let dispatch = relist.as_ref().map(|_| {
            let (dtx, drx) = mpsc::unbounded_channel();
            tokio::spawn(dispatcher(drx));
            dtx
        });
        let mut core = Core {
            model,
            pipeline: Pipeline::new(),
            store,
            writer,
            revs,
            relist,
            dispatch,
            resyncing: false,
            after_resync: Vec::new(),
            store_ok: true,
            store_detail: String::new(),
            reconcilers: HashMap::new(),
            unknown: HashMap::new(),
            connected: HashMap::new(),
            contested: std::collections::HashSet::new(),
            me: tx.downgrade(),
            events: events.clone(),
            metrics: metrics.clone(),
            cfg,
            dns_schedule: BTreeMap::new(),
            firewall_conflicts: BTreeMap::new(),
            shims: HashMap::new(),
            unreachable: std::collections::HashSet::new(),
            started: std::time::Instant::now(),
            refused: BTreeMap::new(),
            stored_egress: listing.as_ref().map(stored_egress_of),
        };
        core.model
            .set_egress_dns_name_limit(core.cfg.egress_dns_names_per_namespace);
        core.firewall_conflicts = core.model.egress_firewall_conflicts();
        let all = core
            .pipeline
            .recompute(&core.model, &Affected::all())
            .map_err(|e| ApiError::Internal(format!("computing flows: {e}")))?;
        for (node, flows) in all {
            let h = Reconciler::spawn(
                &node,
                false,
                flows,
                core.cfg.audit_interval,
                metrics.clone(),
                &core.cfg.leadership,
            );
            core.reconcilers.insert(node, h);
        }
        let grace = core.cfg.liveness_grace;
        let tx_grace = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx_grace.send(CoreCmd::Read(Box::new(|c: &mut Core| {
                c.mark_unconnected_offline()
            })));
        });
        let mut standing = core.cfg.leadership.subscribe();
        let tx_standing = tx.clone();
        tokio::spawn(async move {
            let mut last = standing.borrow_and_update().clone();
            while standing.changed().await.is_ok() {
                let s = standing.borrow_and_update().clone();
                // A wake-up with the same standing (a lease renewed after a lapse, for the
                // reconcilers) is no new standing for the core.
                if s == last {
                    continue;
                }
                last = s.clone();
                let sent = tx_standing.send(CoreCmd::Read(Box::new(move |c: &mut Core| {
                    c.standing_changed(s)
                })));
                if sent.is_err() {
                    break;
                }
            }
        });
        let watched = core.store_is_watched();
        tokio::spawn(core.run(rx));
        Ok(CoreHandle {
            tx,
            events,
            metrics,
            watched,
        })
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<CoreCmd>) {
        while let Some(cmd) = rx.recv().await {
            match cmd {
                CoreCmd::Reload => self.reload(),
                CoreCmd::Relist(down) => match self.relist.clone() {
                    Some(r) => {
                        // Until the listing is back the model may hold the failed change:
                        // mutations are refused (see `mutate`).
                        self.resyncing = true;
                        if let Some(why) = down {
                            // A refused write is reported like a lost stream (an event, once
                            // per outage): etcd out of space keeps its stream healthy, so
                            // the write's error is all there is to tell.
                            if self.store_ok {
                                self.publish(Event::now(
                                    "StoreUnavailable",
                                    format!("store/{}", self.store.name()),
                                    why.clone(),
                                ));
                            }
                            self.store_ok = false;
                            self.store_detail = why.clone();
                            revisions(&self.revs).store_down = Some(why);
                            self.refuse_waiting();
                        }
                        let _ = r.send(());
                    }
                    None => self.reload(),
                },
                CoreCmd::Store(evs) => {
                    for e in evs {
                        self.store_event(e, true);
                    }
                }
                CoreCmd::Watched(e) => self.store_event(e, false),
                CoreCmd::Mutate(f, reject) => self.mutate_or_refuse(f, reject),
                CoreCmd::Read(f) => f(&mut self),
                CoreCmd::SwitchUp {
                    conn_id,
                    dpid,
                    link,
                } => self.switch_up(conn_id, dpid, link),
                CoreCmd::SwitchDown { conn_id, dpid } => self.switch_down(conn_id, dpid),
            }
        }
    }

    /// Why the store cannot be relied on now, if it cannot: it reported itself unavailable,
    /// or this replica's view of it is not current ([`StateBackend::view_problem`]).
    pub fn store_problem(&self) -> Option<String> {
        if !self.store_ok {
            return Some(self.store_detail.clone());
        }
        self.store.view_problem()
    }

    /// The stored records left out of the model (key → why): at load, because they did not
    /// fit, and watched changes the model refused since.
    pub fn refused_records(&self) -> &BTreeMap<String, String> {
        &self.refused
    }

    /// Replace the records left out of the model (after a load).
    pub(crate) fn set_refused(&mut self, skipped: Vec<load::Skipped>) {
        self.refused = skipped.into_iter().map(|s| (s.key, s.reason)).collect();
        self.count_refused();
    }

    fn count_refused(&self) {
        self.metrics
            .stored_records_refused
            .set(self.refused.len() as u64);
    }

    /// Rebuild the model from the store (after a failed write) and resync every switch.
    fn reload(&mut self) {
        let loaded = self
            .store
            .list()
            .map_err(|e| ApiError::Unavailable(format!("loading state: {e}")))
            .and_then(|l| {
                let records = l.records.iter().map(|(r, _)| r.clone()).collect();
                load_model_from(records, None).map(|m| (m, l))
            });
        match loaded {
            Ok((l, listing)) => {
                revisions(&self.revs).relisted(&listing);
                self.stored_egress = Some(stored_egress_of(&listing));
                self.model = l.model;
                self.model
                    .set_egress_dns_name_limit(self.cfg.egress_dns_names_per_namespace);
                self.set_refused(l.skipped);
                self.pipeline = Pipeline::new();
                if let Ok(all) = self.pipeline.recompute(&self.model, &Affected::all()) {
                    self.retire_removed_nodes();
                    for (node, fs) in all {
                        let h = self.reconciler_for(&node);
                        let _ = h.tx.send(ReconcileCmd::Desired {
                            flows: fs,
                            ack: None,
                        });
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "reloading state failed"),
        }
    }

    /// A change of the store: apply it to the model like a local mutation (only the nodes it
    /// affects are recomputed) and push the flows. `admitted`: already checked against the
    /// revision table.
    fn store_event(&mut self, e: WatchEvent, admitted: bool) {
        match e {
            WatchEvent::Changes { revision, changes } => {
                let mut todo: Vec<Change> = if admitted {
                    changes
                } else {
                    let mut r = revisions(&self.revs);
                    changes
                        .into_iter()
                        .filter(|c| r.admit(revision, c))
                        .collect()
                };
                if todo.is_empty() {
                    return;
                }
                crate::core::store_sync::order(&mut todo);
                tracing::debug!(
                    revision,
                    changes = todo.len(),
                    "store changes from another writer"
                );
                self.apply_store_changes(&todo);
            }
            WatchEvent::Relisted(listing) => {
                let todo = crate::core::store_sync::relist_changes(&self.model, &listing);
                tracing::info!(
                    revision = listing.revision,
                    records = listing.records.len(),
                    differences = todo.len(),
                    "store relisted"
                );
                revisions(&self.revs).relisted(&listing);
                if self.resyncing {
                    // After a failed write the flows of the mutations built on it were held
                    // back, and one whose outcome was unknown may have been committed after
                    // all: every node's flows are recomputed (the reconcilers send only what
                    // differs from the switches).
                    self.apply_store_changes_affecting(&todo, Affected::all());
                } else {
                    self.apply_store_changes(&todo);
                }
                self.resyncing = false;
                // Writes queued before this point were built on the model before the relist:
                // the writer refuses them; what comes after is accepted again.
                let _ = self.writer.send(WriterCmd::Resynced);
                for (f, reject) in std::mem::take(&mut self.after_resync) {
                    // The controller's own changes held back are the leader's: a replica
                    // deposed meanwhile drops them (the new leader decides afresh).
                    if reject.is_none() && !self.cfg.leadership.leads() {
                        continue;
                    }
                    self.mutate(f, reject.is_none());
                }
                if !self.store_ok {
                    self.publish(Event::now(
                        "StoreAvailable",
                        format!("store/{}", self.store.name()),
                        "the store is reachable again",
                    ));
                }
                self.store_ok = true;
                self.store_detail.clear();
                revisions(&self.revs).store_down = None;
            }
            WatchEvent::Health { ok, detail } => {
                if ok != self.store_ok {
                    self.publish(Event::now(
                        if ok {
                            "StoreAvailable"
                        } else {
                            "StoreUnavailable"
                        },
                        format!("store/{}", self.store.name()),
                        detail.clone(),
                    ));
                }
                revisions(&self.revs).store_down = if ok { None } else { Some(detail.clone()) };
                self.store_ok = ok;
                self.store_detail = detail;
                if !ok {
                    self.refuse_waiting();
                }
            }
        }
    }

    fn apply_store_changes(&mut self, changes: &[Change]) {
        self.apply_store_changes_affecting(changes, Affected::none());
    }

    fn apply_store_changes_affecting(&mut self, changes: &[Change], mut affected: Affected) {
        let mut egress_seen = false;
        for c in changes {
            match crate::core::store_sync::apply_change(&mut self.model, c) {
                Ok(a) => {
                    if self.refused.remove(&c.key().as_string()).is_some() {
                        self.count_refused();
                    }
                    match c {
                        Change::Put(crate::state::Record::EgressIps(e)) => {
                            self.stored_egress = Some(e.clone());
                            egress_seen = true;
                        }
                        Change::Delete(crate::state::RecordKey::EgressIps) => {
                            self.stored_egress = Some(Default::default());
                            egress_seen = true;
                        }
                        _ => {}
                    }
                    affected.merge(a)
                }
                Err(e) => {
                    self.refused.insert(c.key().as_string(), e.to_string());
                    self.count_refused();
                    tracing::error!(
                        key = %c.key().as_string(),
                        error = %e,
                        "a stored change does not fit the model; it is left out"
                    );
                    self.publish(Event::now(
                        "StoredChangeRefused",
                        c.key().as_string(),
                        e.to_string(),
                    ));
                }
            }
        }
        self.firewall_conflicts = self.model.egress_firewall_conflicts();
        if egress_seen {
            self.persist_egress_placements();
        }
        if affected.is_empty() {
            return;
        }
        match self.pipeline.recompute(&self.model, &affected) {
            Ok(flows) => {
                self.retire_removed_nodes();
                let mut sends = Vec::new();
                for (node, fs) in flows {
                    let h = self.reconciler_for(&node);
                    sends.push((h, fs, None));
                }
                match &self.dispatch {
                    Some(q) => {
                        let _ = q.send(Dispatch {
                            write: None,
                            sends,
                            result: None,
                        });
                    }
                    None => {
                        for (h, flows, ack) in sends {
                            let _ = h.tx.send(ReconcileCmd::Desired { flows, ack });
                        }
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "computing flows after a store change"),
        }
    }

    fn publish(&self, e: Event) {
        tracing::info!(kind = %e.kind, object = %e.object, "{}", e.message);
        let _ = self.events.send(e);
    }

    /// Run a mutation, or refuse it while the store is re-read after a failed write (the
    /// model may still hold that change). Internal mutations (no `reject`) wait for the
    /// relist.
    fn mutate_or_refuse(&mut self, f: MutateFn, reject: Option<Reject>) {
        if reject.is_none() && !self.cfg.leadership.leads() {
            // The controller's own changes (egress failover) are the leader's: a standby's
            // view of liveness is its own, and the leader's decisions reach it by the watch.
            return;
        }
        if self.resyncing {
            match reject {
                // The store is reachable: the listing is a moment away; run it after.
                Some(r) if !self.store_ok => r(self.store_unavailable()),
                r => self.after_resync.push((f, r)),
            }
            return;
        }
        let leader_only = reject.is_none();
        self.mutate(f, leader_only);
    }

    fn store_unavailable(&self) -> ApiError {
        ApiError::Unavailable(format!(
            "the change was not stored: the store is unavailable ({}); switches keep their flows; retry when it is back",
            self.store_detail
        ))
    }

    /// The store went down while mutations waited for a relist: refuse the API's ones.
    fn refuse_waiting(&mut self) {
        let waiting = std::mem::take(&mut self.after_resync);
        for (f, r) in waiting {
            match r {
                Some(r) => r(self.store_unavailable()),
                None => self.after_resync.push((f, None)),
            }
        }
    }

    /// Run a mutation; `leader_only` for the controller's own changes (stored only under this
    /// replica's leadership).
    fn mutate(&mut self, f: MutateFn, leader_only: bool) {
        let t_compute = std::time::Instant::now();
        let Some((mut effects, finish)) = f(&mut self.model) else {
            return;
        };
        // A change that needs a switch which is not connected is taken back before anything
        // is stored or sent.
        if let Some(node) = effects.require_connected.clone() {
            if !self.switch_serves(&node) {
                if let Some(undo) = effects.undo.take() {
                    match undo(&mut self.model) {
                        Ok(_) => {
                            finish(Err(switch_not_connected(&node)));
                            return;
                        }
                        // Cannot happen (nothing ran in between); store the change as made.
                        Err(e) => tracing::error!(error = %e, "undoing a refused change"),
                    }
                }
            }
        }
        let conflicts = self.model.egress_firewall_conflicts();
        for (netid, reason) in &conflicts {
            if self.firewall_conflicts.get(netid) != Some(reason) {
                effects.events.push(Event::now(
                    "EgressFirewallConflict",
                    format!("netid/{netid}"),
                    format!("error: {reason}"),
                ));
            }
        }
        self.firewall_conflicts = conflicts;
        // Durability and switch programming run side by side; the call is answered when both
        // are done.
        let mut waits: Vec<(Awaited, oneshot::Receiver<Result<(), ApiError>>)> = Vec::new();
        // With a shared store, flows go out only once the change is stored (in the order the
        // mutations ran): a write refused by the store (conflict, no quorum) leaves the
        // switches untouched.
        let shared = self.dispatch.is_some();
        let mut held: Option<Dispatch> = None;
        if !effects.changes.is_empty() {
            let (tx, rx) = oneshot::channel();
            revisions(&self.revs).begin(effects.changes.iter().map(|c| c.key()));
            let _ = self.writer.send(WriterCmd::Write(WriteJob {
                changes: effects.changes,
                done: tx,
                leader_only,
            }));
            if shared {
                let (rtx, rrx) = oneshot::channel();
                held = Some(Dispatch {
                    write: Some(rx),
                    sends: Vec::new(),
                    result: Some(rtx),
                });
                waits.push((Awaited::Store, rrx));
            } else {
                waits.push((Awaited::Store, rx));
            }
        } else if shared {
            held = Some(Dispatch {
                write: None,
                sends: Vec::new(),
                result: None,
            });
        }
        let flows = match self.pipeline.recompute(&self.model, &effects.affected) {
            Ok(f) => f,
            Err(e) => {
                finish(Err(ApiError::Internal(format!("computing flows: {e}"))));
                return;
            }
        };
        self.metrics.phase_compute.observe(t_compute.elapsed());
        self.retire_removed_nodes();
        for (node, fs) in flows {
            let h = self.reconciler_for(&node);
            let (tx, rx) = oneshot::channel();
            let require = effects.require_connected.as_deref() == Some(node.as_str());
            let ack = Some(Ack {
                tx,
                require_connected: require,
            });
            match held.as_mut() {
                Some(d) => d.sends.push((h, fs, ack)),
                None => {
                    let _ = h.tx.send(ReconcileCmd::Desired { flows: fs, ack });
                }
            }
            waits.push((
                if require {
                    Awaited::RequiredSwitch(node)
                } else {
                    Awaited::Switch(node)
                },
                rx,
            ));
        }
        if let (Some(d), Some(q)) = (held, &self.dispatch) {
            let _ = q.send(d);
        }
        if let Some(n) = &effects.require_connected {
            if !self.reconcilers.contains_key(n) {
                finish(Err(ApiError::NotFound(format!("node {n:?} not found"))));
                return;
            }
        }
        let events = self.events.clone();
        let metrics = self.metrics.clone();
        let evs = effects.events;
        let undo = effects.undo;
        let handle = self.handle();
        tokio::spawn(async move {
            let mut result = Ok(());
            let mut pending = Vec::new();
            for (what, rx) in waits {
                let e = match tokio::time::timeout(ACK_TIMEOUT, rx).await {
                    Ok(Ok(Ok(()))) => continue,
                    Ok(Ok(Err(e))) => e,
                    Ok(Err(_)) => ApiError::Unavailable("a switch reconciler stopped".into()),
                    Err(_) => ApiError::Unavailable(match &what {
                        Awaited::Store => format!(
                            "the change was not confirmed within {}s",
                            ACK_TIMEOUT.as_secs()
                        ),
                        Awaited::Switch(n) | Awaited::RequiredSwitch(n) => format!(
                            "the switch of node {n} did not acknowledge within {}s",
                            ACK_TIMEOUT.as_secs()
                        ),
                    }),
                };
                match what {
                    Awaited::Store if shared => {
                        // The store refused the change: its flows were never sent.
                        result = Err(e);
                        break;
                    }
                    // The store failed the write: the core relists what is stored.
                    Awaited::Store => result = Err(e),
                    // The change is stored; the switch gets it when it connects or answers
                    // (reconnect resync, audit): the call succeeds.
                    Awaited::Switch(node) => pending.push((node, e)),
                    Awaited::RequiredSwitch(_) => {
                        result = Err(match undo {
                            Some(undo) => take_back(handle, undo, e).await,
                            None => e,
                        });
                        break;
                    }
                }
            }
            if result.is_ok() {
                metrics.api_mutations.inc();
                for e in evs {
                    tracing::info!(kind = %e.kind, object = %e.object, "{}", e.message);
                    let _ = events.send(e);
                }
                for (node, e) in pending {
                    let e = Event::now(
                        "FlowsPending",
                        format!("node/{node}"),
                        format!("the change is stored; the flows of node {node} wait for its switch ({e})"),
                    );
                    tracing::warn!(kind = %e.kind, object = %e.object, "{}", e.message);
                    let _ = events.send(e);
                }
            }
            finish(result);
        });
    }

    /// A handle on this core (for work a mutation's task sends back to it); None once the
    /// controller is shutting down.
    fn handle(&self) -> Option<CoreHandle> {
        Some(CoreHandle {
            tx: self.me.upgrade()?,
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            watched: self.store_is_watched(),
        })
    }

    /// Whether the switch of `node` is connected and may serve it.
    fn switch_serves(&self, node: &str) -> bool {
        self.model
            .node(node)
            .and_then(|n| self.connected.get(&n.dpid))
            .is_some_and(|(_, l)| l.may_serve(node))
    }

    /// The reconciler of a node, started (with an empty desired set) if it does not exist yet,
    /// and given the node's switch if that is already connected as an unknown datapath.
    fn reconciler_for(&mut self, node: &str) -> ReconcilerHandle {
        if let Some(h) = self.reconcilers.get(node) {
            return h.clone();
        }
        let h = Reconciler::spawn(
            node,
            false,
            FlowSet::default(),
            self.cfg.audit_interval,
            self.metrics.clone(),
            &self.cfg.leadership,
        );
        self.reconcilers.insert(node.to_string(), h.clone());
        // A switch whose certificate names another node stays an unknown datapath.
        if let Some(dpid) = self
            .model
            .node(node)
            .map(|n| n.dpid)
            .filter(|d| self.connected.get(d).is_none_or(|(_, l)| l.may_serve(node)))
        {
            let old = self.unknown.remove(&dpid);
            let link = self
                .connected
                .get(&dpid)
                .map(|(c, l)| (*c, dpid, l.clone()));
            if old.is_some() || link.is_some() {
                handoff(old, Some(h.clone()), link);
            }
        }
        h
    }

    /// Stop reconcilers of nodes no longer in the model; their switches become unknown.
    fn retire_removed_nodes(&mut self) {
        let gone: Vec<String> = self
            .reconcilers
            .keys()
            .filter(|n| self.model.node(n).is_none())
            .cloned()
            .collect();
        for n in gone {
            if let Some(h) = self.reconcilers.remove(&n) {
                let dpid = h.status.dpid.load(std::sync::atomic::Ordering::Relaxed);
                match self.connected.get(&dpid).cloned() {
                    Some((conn_id, link)) => self.start_unknown(Some(h), conn_id, dpid, link),
                    None => handoff(Some(h), None, None),
                }
            }
            self.pipeline.forget_node(&n);
        }
    }

    /// Give a switch no node claims to an unknown-datapath reconciler, after `previous` (the
    /// reconciler that had it) stopped.
    fn start_unknown(
        &mut self,
        previous: Option<ReconcilerHandle>,
        conn_id: u64,
        dpid: u64,
        link: Arc<dyn SwitchLink>,
    ) {
        let h = Reconciler::spawn(
            "",
            true,
            unknown_datapath_flows(),
            self.cfg.audit_interval,
            self.metrics.clone(),
            &self.cfg.leadership,
        );
        handoff(previous, Some(h.clone()), Some((conn_id, dpid, link)));
        self.unknown.insert(dpid, h);
        self.publish(Event::now(
            "UnknownDatapath",
            format!("switch/{dpid:#018x}"),
            format!("datapath {dpid:#018x} belongs to no node: it gets only a default drop"),
        ));
    }

    /// Whether this replica does the leader's work (alone, or elected).
    pub fn leads(&self) -> bool {
        self.cfg.leadership.leads()
    }

    /// This replica's standing.
    pub fn leadership(&self) -> Arc<crate::ha::Leadership> {
        self.cfg.leadership.clone()
    }

    /// This replica's id among several (None: it has no replicas).
    pub fn replica_id(&self) -> Option<String> {
        self.cfg.leadership.id()
    }

    /// The datastore's name (`embedded`, `etcd`).
    pub fn store_name(&self) -> &'static str {
        self.store.name()
    }

    /// Every switch's status: nodes first (by name), then unknown datapaths.
    pub fn switch_statuses(&self) -> Vec<Arc<SwitchStatus>> {
        let mut v: Vec<(String, Arc<SwitchStatus>)> = self
            .reconcilers
            .iter()
            .map(|(n, h)| (n.clone(), h.status.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<Arc<SwitchStatus>> = v.into_iter().map(|(_, s)| s).collect();
        let mut u: Vec<(u64, Arc<SwitchStatus>)> = self
            .unknown
            .iter()
            .map(|(d, h)| (*d, h.status.clone()))
            .collect();
        u.sort_by_key(|x| x.0);
        out.extend(u.into_iter().map(|(_, s)| s));
        out
    }

    /// The connection of a datapath, if its switch is connected (whether or not a node claims
    /// it).
    pub fn datapath_link(&self, dpid: u64) -> Option<Arc<dyn SwitchLink>> {
        self.connected.get(&dpid).map(|(_, l)| l.clone())
    }

    /// The reconciler handle of a node.
    pub fn reconciler(&self, node: &str) -> Option<ReconcilerHandle> {
        self.reconcilers.get(node).cloned()
    }

    /// Desired FlowSets of every node (for traces).
    pub fn all_flowsets(&mut self) -> Result<BTreeMap<String, FlowSet>, ApiError> {
        self.pipeline
            .recompute(&self.model, &Affected::all())
            .map_err(|e| ApiError::Internal(format!("computing flows: {e}")))
    }

    /// The desired FlowSet of one node.
    pub fn node_flowset(&mut self, node: &str) -> Result<FlowSet, ApiError> {
        if self.model.node(node).is_none() {
            return Err(ApiError::from(topology::ModelError::UnknownNode(
                node.to_string(),
            )));
        }
        self.pipeline
            .node_flows(&self.model, node)
            .map_err(|e| ApiError::Internal(format!("computing flows: {e}")))
    }
}

impl CoreHandle {
    /// Whether the store is shared and watched (etcd, Kubernetes), as
    /// [`Core::store_is_watched`] says, without a call to the core.
    pub fn store_is_watched(&self) -> bool {
        self.watched
    }

    /// Run a mutation: `f` changes the model and says what it did; the call returns once the
    /// change is stored and acknowledged by the switches it touched.
    pub async fn mutate<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ClusterModel) -> Result<(T, Effects), ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel::<Result<T, ApiError>>();
        let slot = Arc::new(std::sync::Mutex::new(Some(tx)));
        let slot2 = slot.clone();
        let cmd: MutateFn = Box::new(move |model: &mut ClusterModel| {
            let tx = lock_slot(&slot).take()?;
            match f(model) {
                Err(e) => {
                    let _ = tx.send(Err(e));
                    None
                }
                Ok((value, effects)) => {
                    let finish: Finish = Box::new(move |r: Result<(), ApiError>| {
                        let _ = tx.send(r.map(|()| value));
                    });
                    Some((effects, finish))
                }
            }
        });
        let reject: Reject = Box::new(move |e: ApiError| {
            if let Some(t) = lock_slot(&slot2).take() {
                let _ = t.send(Err(e));
            }
        });
        self.tx
            .send(CoreCmd::Mutate(cmd, Some(reject)))
            .map_err(|_| ApiError::Unavailable("the controller is shutting down".into()))?;
        rx.await
            .map_err(|_| ApiError::Internal("the controller core stopped".into()))?
    }

    /// Run a read against the core's state.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Core) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        let cmd: ReadFn = Box::new(move |core: &mut Core| {
            let _ = tx.send(f(core));
        });
        self.tx
            .send(CoreCmd::Read(cmd))
            .map_err(|_| ApiError::Unavailable("the controller is shutting down".into()))?;
        rx.await
            .map_err(|_| ApiError::Internal("the controller core stopped".into()))
    }

    /// A switch finished its handshake.
    pub fn switch_up(&self, conn_id: u64, dpid: u64, link: Arc<dyn SwitchLink>) {
        let _ = self.tx.send(CoreCmd::SwitchUp {
            conn_id,
            dpid,
            link,
        });
    }

    /// A switch connection ended.
    pub fn switch_down(&self, conn_id: u64, dpid: u64) {
        let _ = self.tx.send(CoreCmd::SwitchDown { conn_id, dpid });
    }

    /// Subscribe to events.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

impl crate::switches::SwitchSink for CoreHandle {
    fn switch_up(&self, conn_id: u64, dpid: u64, link: Arc<dyn SwitchLink>) {
        CoreHandle::switch_up(self, conn_id, dpid, link);
    }
    fn switch_down(&self, conn_id: u64, dpid: u64) {
        CoreHandle::switch_down(self, conn_id, dpid);
    }
    fn switch_error(&self) {
        self.metrics.switch_errors.inc();
    }
}

/// The egress IPs record of a listing (none stored: empty), as the store holds it: what
/// [`Core::persist_egress_placements`] compares the model's placements with, so placements made
/// on objects written while no controller ran are written back when a leader starts.
fn stored_egress_of(listing: &crate::state::Listing) -> topology::model::EgressSnapshot {
    listing
        .records
        .iter()
        .find_map(|(r, _)| match r {
            crate::state::Record::EgressIps(e) => Some(e.clone()),
            _ => None,
        })
        .unwrap_or_default()
}
