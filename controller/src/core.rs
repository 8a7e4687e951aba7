//! The controller core: one task owns the cluster model, the incremental pipeline, the state
//! backend and the per-switch reconcilers. API handlers talk to it through [`CoreHandle`].
//!
//! A mutation runs against the model, is made durable in the backend, recomputes the flows of
//! the nodes it affects, hands them to those nodes' reconcilers and is answered once every
//! connected switch it touched acknowledged the change (barrier reply).

use crate::error::ApiError;
use crate::link::SwitchLink;
use crate::metrics::Metrics;
use crate::reconciler::{Ack, ReconcileCmd, Reconciler, ReconcilerHandle, SwitchStatus};
use crate::state::{Change, CursorsRecord, Record, RecordKey, StateBackend};
use ofproto::{Flow, Match};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use topology::model::{ModelSnapshot, NodeRecord, PodRecord};
use topology::{Affected, ClusterModel, ClusterNetworkConfig, FlowSet, Pipeline};

/// How long a mutation waits for its switches' acknowledgements.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// An event for `WatchEvents` and the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub time_unix_ms: i64,
    /// Event kind (`NodeAdded`, `SwitchConnected`, ...).
    pub kind: String,
    /// The object (`node/a`, `pod/ns/p`, `switch/0x..`).
    pub object: String,
    /// Human text.
    pub message: String,
}

impl Event {
    /// An event stamped now.
    pub fn now(kind: &str, object: impl Into<String>, message: impl Into<String>) -> Self {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Event {
            time_unix_ms: ms,
            kind: kind.into(),
            object: object.into(),
            message: message.into(),
        }
    }
}

/// What a mutation did besides returning its value.
#[derive(Default)]
pub struct Effects {
    /// Nodes whose flows changed.
    pub affected: Affected,
    /// Records to write (durably, before anything is acknowledged).
    pub changes: Vec<Change>,
    /// A node whose switch must be connected and acknowledge (e.g. the node of an attached pod).
    pub require_connected: Option<String>,
    /// Events to publish once acknowledged.
    pub events: Vec<Event>,
}

impl Effects {
    /// Fold another mutation's effects into these (one transaction of several objects). The
    /// other's connection requirement is not carried over: a transaction names at most one.
    pub fn merge(&mut self, other: Effects) {
        self.affected.merge(other.affected);
        self.changes.extend(other.changes);
        self.events.extend(other.events);
    }
}

type Finish = Box<dyn FnOnce(Result<(), ApiError>) + Send>;
type MutateFn = Box<dyn FnOnce(&mut ClusterModel) -> Option<(Effects, Finish)> + Send>;
type ReadFn = Box<dyn FnOnce(&mut Core) + Send>;

/// A batch of records to make durable, and who waits for it.
struct WriteJob {
    changes: Vec<Change>,
    done: oneshot::Sender<Result<(), ApiError>>,
}

/// The store writer: group-commits every job queued while the previous commit ran, so
/// durability costs one sync per batch rather than per change, and runs beside the switch
/// programming instead of before it.
async fn store_writer(
    store: Arc<dyn StateBackend>,
    mut rx: mpsc::UnboundedReceiver<WriteJob>,
    core: mpsc::UnboundedSender<CoreCmd>,
) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        while let Ok(j) = rx.try_recv() {
            jobs.push(j);
        }
        let changes: Vec<Change> = jobs
            .iter()
            .flat_map(|j| j.changes.iter().cloned())
            .collect();
        let st = store.clone();
        let t = std::time::Instant::now();
        let result = tokio::task::spawn_blocking(move || st.apply(&changes))
            .await
            .unwrap_or_else(|e| Err(crate::state::StoreError::Transaction(e.to_string())));
        tracing::debug!(
            jobs = jobs.len(),
            micros = t.elapsed().as_micros() as u64,
            "state stored"
        );
        let r =
            result.map_err(|e| ApiError::Unavailable(format!("the change was not stored: {e}")));
        if r.is_err() {
            // Nothing of this batch was acknowledged; the core reloads what is stored.
            tracing::error!("storing changes failed; reloading state from the store");
            let _ = core.send(CoreCmd::Reload);
        }
        for j in jobs {
            let _ = j.done.send(r.clone());
        }
    }
}

enum CoreCmd {
    Reload,
    Mutate(MutateFn),
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
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            audit_interval: Duration::from_secs(30),
            liveness_grace: Duration::from_secs(10),
        }
    }
}

/// The core's state (owned by its task).
pub struct Core {
    /// The cluster model.
    pub model: ClusterModel,
    pipeline: Pipeline,
    store: Arc<dyn StateBackend>,
    writer: mpsc::UnboundedSender<WriteJob>,
    reconcilers: HashMap<String, ReconcilerHandle>,
    unknown: HashMap<u64, ReconcilerHandle>,
    connected: HashMap<u64, (u64, Arc<dyn SwitchLink>)>,
    events: broadcast::Sender<Event>,
    metrics: Arc<Metrics>,
    cfg: CoreConfig,
    /// The egress firewall DNS resolver's schedule (written by its task, shown by the API).
    pub dns_schedule: BTreeMap<String, crate::egress_firewall::DnsSchedule>,
    /// NETIDs whose egress is dropped because joined projects' firewalls differ.
    firewall_conflicts: BTreeMap<u32, String>,
}

/// A cloneable handle to the core task.
#[derive(Clone)]
pub struct CoreHandle {
    tx: mpsc::UnboundedSender<CoreCmd>,
    events: broadcast::Sender<Event>,
    /// Controller-wide metrics.
    pub metrics: Arc<Metrics>,
}

/// Build the model from stored records (or from `config` when the store is empty).
pub fn load_model(
    store: &dyn StateBackend,
    config: Option<&ClusterNetworkConfig>,
) -> Result<(ClusterModel, Vec<Change>), ApiError> {
    let records = store
        .load()
        .map_err(|e| ApiError::Unavailable(format!("loading state: {e}")))?;
    let mut snap = ModelSnapshot {
        config: config.cloned().unwrap_or_else(default_config),
        nodes: Vec::new(),
        namespaces: Vec::new(),
        pods: Vec::new(),
        subnet_cursors: Vec::new(),
        netid_cursor: 0,
        policies: Vec::new(),
        egress: Default::default(),
        egress_firewalls: Vec::new(),
        egress_dns: Default::default(),
    };
    let mut stored_config = None;
    let mut cursors = None;
    for r in records {
        match r {
            Record::ClusterNetwork(c) => stored_config = Some(c),
            Record::Node(n) => snap.nodes.push(n),
            Record::Namespace(n) => snap.namespaces.push(n),
            Record::Pod(p) => snap.pods.push(p),
            Record::Cursors(c) => cursors = Some(c),
            Record::NetworkPolicy(p) => snap.policies.push(p),
            Record::EgressIps(e) => snap.egress = e,
            Record::EgressNetworkPolicy(f) => snap.egress_firewalls.push(f),
            Record::EgressDns(d) => {
                snap.egress_dns.insert(d.name, d.addresses);
            }
        }
    }
    let mut changes = Vec::new();
    // A mode change from --config is replayed on the full model below (leaving subnet mode
    // gives every namespace a NETID of its own, which must be stored).
    let mut mode_changed_from = None;
    match (&stored_config, config) {
        (Some(stored), Some(wanted)) if stored != wanted => {
            // A running cluster may only grow its ranges; the model enforces the rules.
            let mut m = ClusterModel::restore(&ModelSnapshot {
                config: stored.clone(),
                ..snap.clone()
            })
            .map_err(|e| ApiError::Internal(format!("stored state is inconsistent: {e}")))?;
            m.update_config(wanted.clone()).map_err(|e| {
                ApiError::FailedPrecondition(format!(
                    "the --config cluster network differs from the stored one and cannot be applied: {e}"
                ))
            })?;
            if stored.mode != wanted.mode {
                mode_changed_from = Some(stored.clone());
            }
            snap.config = wanted.clone();
            changes.push(Change::Put(Record::ClusterNetwork(wanted.clone())));
        }
        (Some(stored), _) => snap.config = stored.clone(),
        (None, _) => changes.push(Change::Put(Record::ClusterNetwork(snap.config.clone()))),
    }
    if let Some(c) = cursors {
        snap.subnet_cursors = c.subnet_cursors;
        snap.netid_cursor = c.netid_cursor;
    } else {
        snap.subnet_cursors = vec![0; snap.config.cluster_networks.len()];
    }
    snap.subnet_cursors
        .resize(snap.config.cluster_networks.len(), 0);
    let inconsistent = |e| ApiError::Internal(format!("stored state is inconsistent: {e}"));
    let mut model = match mode_changed_from {
        None => ClusterModel::restore(&snap).map_err(inconsistent)?,
        Some(old) => {
            let mut m = ClusterModel::restore(&ModelSnapshot {
                config: old,
                ..snap.clone()
            })
            .map_err(inconsistent)?;
            m.update_config(snap.config.clone()).map_err(|e| {
                ApiError::FailedPrecondition(format!(
                    "the --config cluster network differs from the stored one and cannot be applied: {e}"
                ))
            })?;
            changes.extend(m.namespaces().map(|n| Change::Put(Record::Namespace(n))));
            changes.push(cursors_change(&m));
            m
        }
    };
    // The default namespace always exists, with NETID 0.
    if model.namespace("default").is_none() {
        let (info, _) = model.add_namespace("default")?;
        changes.push(Change::Put(Record::Namespace(info)));
        changes.push(cursors_change(&model));
    }
    Ok((model, changes))
}

/// The embedded default cluster network: OpenShift's defaults, multitenant.
pub fn default_config() -> ClusterNetworkConfig {
    ClusterNetworkConfig {
        cluster_networks: vec![topology::ClusterNetworkEntry {
            cidr: topology::Ipv4Cidr::new(std::net::Ipv4Addr::new(10, 128, 0, 0), 14),
            host_prefix: 23,
        }],
        service_network: topology::Ipv4Cidr::new(std::net::Ipv4Addr::new(172, 30, 0, 0), 16),
        mode: topology::Mode::Multitenant,
        vxlan_port: topology::config::DEFAULT_VXLAN_PORT,
        mtu: topology::config::DEFAULT_MTU,
    }
}

/// The record change for the allocation cursors.
pub fn cursors_change(m: &ClusterModel) -> Change {
    Change::Put(Record::Cursors(CursorsRecord {
        subnet_cursors: m.subnet_cursors(),
        netid_cursor: m.netid_cursor(),
    }))
}

/// The record change for a node (Put, or Delete when gone).
pub fn node_change(m: &ClusterModel, name: &str) -> Change {
    match m.node_record(name) {
        Some(r) => Change::Put(Record::Node(NodeRecord { ..r })),
        None => Change::Delete(RecordKey::Node(name.to_string())),
    }
}

/// The record change for a pod (Put, or Delete when gone).
pub fn pod_change(m: &ClusterModel, namespace: &str, name: &str) -> Change {
    match m.pod(namespace, name) {
        Some(p) => Change::Put(Record::Pod(PodRecord { info: p.clone() })),
        None => Change::Delete(RecordKey::Pod(namespace.to_string(), name.to_string())),
    }
}

/// The record change for the egress-IP state (Put, or Delete when empty).
pub fn egress_change(m: &ClusterModel) -> Change {
    let e = m.egress_snapshot();
    if e.is_empty() {
        Change::Delete(RecordKey::EgressIps)
    } else {
        Change::Put(Record::EgressIps(e.clone()))
    }
}

/// The record change for a namespace (Put, or Delete when gone).
pub fn namespace_change(m: &ClusterModel, name: &str) -> Change {
    match m.namespace(name) {
        Some(n) => Change::Put(Record::Namespace(n)),
        None => Change::Delete(RecordKey::Namespace(name.to_string())),
    }
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
    /// Start the core task on a loaded model.
    pub fn spawn(
        model: ClusterModel,
        store: Arc<dyn StateBackend>,
        cfg: CoreConfig,
        metrics: Arc<Metrics>,
    ) -> Result<CoreHandle, ApiError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(1024);
        let (writer, writer_rx) = mpsc::unbounded_channel();
        tokio::spawn(store_writer(store.clone(), writer_rx, tx.clone()));
        let mut core = Core {
            model,
            pipeline: Pipeline::new(),
            store,
            writer,
            reconcilers: HashMap::new(),
            unknown: HashMap::new(),
            connected: HashMap::new(),
            events: events.clone(),
            metrics: metrics.clone(),
            cfg,
            dns_schedule: BTreeMap::new(),
            firewall_conflicts: BTreeMap::new(),
        };
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
        tokio::spawn(core.run(rx));
        Ok(CoreHandle {
            tx,
            events,
            metrics,
        })
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<CoreCmd>) {
        while let Some(cmd) = rx.recv().await {
            match cmd {
                CoreCmd::Reload => self.reload(),
                CoreCmd::Mutate(f) => self.mutate(f),
                CoreCmd::Read(f) => f(&mut self),
                CoreCmd::SwitchUp {
                    conn_id,
                    dpid,
                    link,
                } => self.switch_up(conn_id, dpid, link).await,
                CoreCmd::SwitchDown { conn_id, dpid } => self.switch_down(conn_id, dpid),
            }
        }
    }

    /// Rebuild the model from the store (after a failed write) and resync every switch.
    fn reload(&mut self) {
        match load_model(self.store.as_ref(), None) {
            Ok((m, _)) => {
                self.model = m;
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

    fn publish(&self, e: Event) {
        tracing::info!(kind = %e.kind, object = %e.object, "{}", e.message);
        let _ = self.events.send(e);
    }

    fn mutate(&mut self, f: MutateFn) {
        let Some((mut effects, finish)) = f(&mut self.model) else {
            return;
        };
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
        let mut waits = Vec::new();
        if !effects.changes.is_empty() {
            let (tx, rx) = oneshot::channel();
            let _ = self.writer.send(WriteJob {
                changes: effects.changes,
                done: tx,
            });
            waits.push(rx);
        }
        let flows = match self.pipeline.recompute(&self.model, &effects.affected) {
            Ok(f) => f,
            Err(e) => {
                finish(Err(ApiError::Internal(format!("computing flows: {e}"))));
                return;
            }
        };
        self.retire_removed_nodes();
        for (node, fs) in flows {
            let h = self.reconciler_for(&node);
            let (tx, rx) = oneshot::channel();
            let require = effects.require_connected.as_deref() == Some(node.as_str());
            let _ = h.tx.send(ReconcileCmd::Desired {
                flows: fs,
                ack: Some(Ack {
                    tx,
                    require_connected: require,
                }),
            });
            waits.push(rx);
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
        tokio::spawn(async move {
            let mut result = Ok(());
            for rx in waits {
                match tokio::time::timeout(ACK_TIMEOUT, rx).await {
                    Ok(Ok(Ok(()))) => {}
                    Ok(Ok(Err(e))) => result = Err(e),
                    Ok(Err(_)) => {
                        result = Err(ApiError::Unavailable("a switch reconciler stopped".into()))
                    }
                    Err(_) => {
                        result = Err(ApiError::Unavailable(format!(
                            "switches did not acknowledge within {}s",
                            ACK_TIMEOUT.as_secs()
                        )))
                    }
                }
            }
            if result.is_ok() {
                metrics.api_mutations.inc();
                for e in evs {
                    tracing::info!(kind = %e.kind, object = %e.object, "{}", e.message);
                    let _ = events.send(e);
                }
            }
            finish(result);
        });
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
        );
        handoff(previous, Some(h.clone()), Some((conn_id, dpid, link)));
        self.unknown.insert(dpid, h);
        self.publish(Event::now(
            "UnknownDatapath",
            format!("switch/{dpid:#018x}"),
            format!("datapath {dpid:#018x} belongs to no node: it gets only a default drop"),
        ));
    }

    async fn switch_up(&mut self, conn_id: u64, dpid: u64, link: Arc<dyn SwitchLink>) {
        let peer = link.peer();
        self.connected.insert(dpid, (conn_id, link.clone()));
        match self
            .model
            .node_by_dpid(dpid)
            .map(|n| n.name.clone())
            .filter(|n| link.may_serve(n))
        {
            Some(node) => {
                let h = self.reconciler_for(&node);
                let _ = h.tx.send(ReconcileCmd::Connected {
                    conn_id,
                    dpid,
                    link,
                });
                self.node_liveness(&node, true);
                self.publish(Event::now(
                    "SwitchConnected",
                    format!("node/{node}"),
                    format!("switch {dpid:#018x} of node {node} connected from {peer}"),
                ));
            }
            None => {
                let old = self.unknown.remove(&dpid);
                self.start_unknown(old, conn_id, dpid, link);
            }
        }
    }

    fn switch_down(&mut self, conn_id: u64, dpid: u64) {
        if self
            .connected
            .get(&dpid)
            .is_some_and(|(c, _)| *c == conn_id)
        {
            self.connected.remove(&dpid);
        }
        for h in self.reconcilers.values().chain(self.unknown.values()) {
            let _ = h.tx.send(ReconcileCmd::Disconnected { conn_id });
        }
        if let Some(h) = self.unknown.get(&dpid) {
            if !self.connected.contains_key(&dpid) {
                let (tx, _rx) = oneshot::channel();
                let _ = h.tx.send(ReconcileCmd::Stop { reply: tx });
                self.unknown.remove(&dpid);
            }
        }
        if !self.connected.contains_key(&dpid) {
            if let Some(node) = self.model.node_by_dpid(dpid).map(|n| n.name.clone()) {
                self.node_liveness(&node, false);
            }
        }
        self.publish(Event::now(
            "SwitchDisconnected",
            format!("switch/{dpid:#018x}"),
            format!("switch {dpid:#018x} disconnected"),
        ));
    }

    /// Egress IPs follow switch liveness: a node whose switch is disconnected is offline (its
    /// automatic egress IPs move to other nodes, its manual ones drop out of the groups) and
    /// online again once its switch is back. Affected switches are reprogrammed at once.
    fn node_liveness(&mut self, node: &str, online: bool) {
        let node = node.to_string();
        self.mutate(Box::new(move |m: &mut ClusterModel| {
            let affected = m.set_node_online(&node, online);
            if affected.is_empty() {
                return None;
            }
            let ev = Event::now(
                if online {
                    "EgressNodeOnline"
                } else {
                    "EgressNodeOffline"
                },
                format!("node/{node}"),
                if online {
                    format!("node {node} is back: its egress IPs are usable again")
                } else {
                    format!("node {node}'s switch is gone: its egress IPs moved or dropped out")
                },
            );
            tracing::info!(%node, online, "egress IPs follow node liveness");
            let finish: Finish = Box::new(move |r: Result<(), ApiError>| {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "egress failover not acknowledged by every switch");
                }
            });
            Some((
                Effects {
                    affected,
                    changes: vec![egress_change(m)],
                    require_connected: None,
                    events: vec![ev],
                },
                finish,
            ))
        }));
    }

    /// At the end of the start-up grace: nodes whose switch never connected are offline.
    fn mark_unconnected_offline(&mut self) {
        let connected: std::collections::BTreeSet<u64> = self.connected.keys().copied().collect();
        let down: Vec<String> = self
            .model
            .nodes()
            .filter(|n| !connected.contains(&n.dpid))
            .map(|n| n.name.clone())
            .collect();
        for n in down {
            self.node_liveness(&n, false);
        }
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
    /// Run a mutation: `f` changes the model and says what it did; the call returns once the
    /// change is stored and acknowledged by the switches it touched.
    pub async fn mutate<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ClusterModel) -> Result<(T, Effects), ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel::<Result<T, ApiError>>();
        let cmd: MutateFn = Box::new(move |model: &mut ClusterModel| match f(model) {
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
        });
        self.tx
            .send(CoreCmd::Mutate(cmd))
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
