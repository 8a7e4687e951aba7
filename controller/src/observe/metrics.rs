//! Prometheus metrics in the text exposition format (version 0.0.4), rendered by hand from
//! atomics: controller-wide counters here, per-switch gauges from each switch's status.

use super::switch_status::SwitchStatus;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Add one.
    pub fn inc(&self) {
        self.inc_by(1);
    }
    /// Add `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Set it.
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Raise it to `v` if `v` is larger (a high-water mark).
    pub fn set_max(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
    }
}

/// What the Kubernetes datastore counts (shared by the store, which counts, and [`Metrics`],
/// which renders them; absent on the other datastores).
#[derive(Debug, Default)]
pub struct KubeCounters {
    /// Fresh listings of a kind after its first one: its watch expired (410 Gone, e.g. after
    /// etcd compacted the revision it resumed from) or failed, and the kind was listed again.
    pub relists: Counter,
    /// Writes the API server refused with 409 Conflict (another writer changed the object);
    /// each is read again and retried or left for the next pass.
    pub write_conflicts: Counter,
}

/// Sync latency bucket bounds, seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A running total of time spent in one phase of a change (count and sum, no buckets).
#[derive(Debug, Default)]
pub struct PhaseTime {
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl PhaseTime {
    /// Record one occurrence that took `d`.
    pub fn observe(&self, d: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Controller-wide metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Flow and group mods sent to switches.
    pub flow_mods_sent: Counter,
    /// Errors from switches (refused changes, failed reads, disconnects mid-sync).
    pub switch_errors: Counter,
    /// Acknowledged API mutations.
    pub api_mutations: Counter,
    /// Syncs settled by the digest marker alone (one flow read, nothing sent).
    pub marker_verified: Counter,
    /// Whole-table reads of a switch (connect without an agreeing marker, audits, dumps).
    pub full_reads: Counter,
    /// The most decoded flow entries one whole-table read of a switch held in memory at once
    /// (since start): a reply part or two when reads are streamed, a whole table otherwise.
    pub read_held_flows: Gauge,
    /// Merged bundles a switch refused, whose updates were then sent one by one.
    pub bundle_fallbacks: Counter,
    /// Desired-state updates with a caller waiting that went out in a bundle (over
    /// `phase_switch`'s count: updates per bundle).
    pub bundle_updates: Counter,
    /// Changes (one per mutation) made durable by the store writer (over `phase_store`'s
    /// count: changes per durable commit).
    pub store_jobs: Counter,
    /// Grouped store writes that failed for what they held, whose changes were then written
    /// one by one.
    pub store_group_fallbacks: Counter,
    /// Core: the model change and the flows recomputed for it (one per API mutation).
    pub phase_compute: PhaseTime,
    /// Store writer: one durable commit (one per group of changes written together).
    pub phase_store: PhaseTime,
    /// Reconciler: diff of installed and desired flows and the plan of the change.
    pub phase_diff: PhaseTime,
    /// Reconciler: the bundle written to the switch until its acknowledgement.
    pub phase_switch: PhaseTime,
    /// Stored records left out of the model because they do not fit it.
    pub stored_records_refused: Gauge,
    /// Kubernetes objects the Kubernetes datastore refuses (set by the leader's reactions).
    pub kube_objects_refused: Gauge,
    /// The Kubernetes datastore's counters (None on the other datastores).
    pub kube: Option<Arc<KubeCounters>>,
    sync_buckets: [AtomicU64; BUCKETS.len()],
    sync_count: AtomicU64,
    sync_sum_us: AtomicU64,
}

impl Metrics {
    /// Record one successful sync's latency.
    pub fn observe_sync(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.sync_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sync_count.fetch_add(1, Ordering::Relaxed);
        self.sync_sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// The exposition text, with per-switch gauges from `switches`.
    pub fn render(&self, switches: &[Arc<SwitchStatus>]) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# HELP flowmesh_flow_mods_sent_total Flow and group mods sent to switches."
        );
        let _ = writeln!(o, "# TYPE flowmesh_flow_mods_sent_total counter");
        let _ = writeln!(
            o,
            "flowmesh_flow_mods_sent_total {}",
            self.flow_mods_sent.get()
        );
        let _ = writeln!(
            o,
            "# HELP flowmesh_switch_marker_verified_total Switch syncs settled by the digest marker of table 253 alone."
        );
        let _ = writeln!(o, "# TYPE flowmesh_switch_marker_verified_total counter");
        let _ = writeln!(
            o,
            "flowmesh_switch_marker_verified_total {}",
            self.marker_verified.get()
        );
        let _ = writeln!(
            o,
            "# HELP flowmesh_switch_full_reads_total Whole-table reads of switches (flows and groups)."
        );
        let _ = writeln!(o, "# TYPE flowmesh_switch_full_reads_total counter");
        let _ = writeln!(
            o,
            "flowmesh_switch_full_reads_total {}",
            self.full_reads.get()
        );
        render_allocator(&mut o);
        let _ = writeln!(
            o,
            "# HELP flowmesh_switch_read_held_flows_max The most decoded flow entries one whole-table read of a switch held in memory at once, since start."
        );
        let _ = writeln!(o, "# TYPE flowmesh_switch_read_held_flows_max gauge");
        let _ = writeln!(
            o,
            "flowmesh_switch_read_held_flows_max {}",
            self.read_held_flows.get()
        );
        for (name, help, c) in [
            (
                "flowmesh_switch_bundle_fallbacks_total",
                "Merged bundles (updates that queued while a bundle was in flight) a switch refused; their updates were then sent one by one.",
                &self.bundle_fallbacks,
            ),
            (
                "flowmesh_switch_bundle_updates_total",
                "Updates with a caller waiting that went out in a bundle; over flowmesh_phase_seconds_count{phase=\"switch\"}: updates per bundle.",
                &self.bundle_updates,
            ),
            (
                "flowmesh_store_jobs_total",
                "Changes (one per mutation) made durable; over flowmesh_phase_seconds_count{phase=\"store\"}: changes per durable commit.",
                &self.store_jobs,
            ),
            (
                "flowmesh_store_group_fallbacks_total",
                "Grouped store writes that failed for what they held (a conflict, a change or a transaction the store refused); their changes were then written one by one, each with its own result.",
                &self.store_group_fallbacks,
            ),
        ] {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} counter");
            let _ = writeln!(o, "{name} {}", c.get());
        }
        let _ = writeln!(
            o,
            "# HELP flowmesh_switch_errors_total Errors reported by or about switches."
        );
        let _ = writeln!(o, "# TYPE flowmesh_switch_errors_total counter");
        let _ = writeln!(
            o,
            "flowmesh_switch_errors_total {}",
            self.switch_errors.get()
        );
        let _ = writeln!(
            o,
            "# HELP flowmesh_api_mutations_total Acknowledged API changes."
        );
        let _ = writeln!(o, "# TYPE flowmesh_api_mutations_total counter");
        let _ = writeln!(
            o,
            "flowmesh_api_mutations_total {}",
            self.api_mutations.get()
        );
        for (name, help, g) in [
            (
                "flowmesh_stored_records_refused",
                "Stored records left out of the model because they do not fit it (logged; with Kubernetes also Warning events).",
                &self.stored_records_refused,
            ),
            (
                "flowmesh_kube_objects_refused",
                "Kubernetes objects flowmesh refuses: invalid, or a pod attachment that is forged or does not match its Pod (Warning events name them).",
                &self.kube_objects_refused,
            ),
        ] {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} gauge");
            let _ = writeln!(o, "{name} {}", g.get());
        }
        if let Some(k) = &self.kube {
            for (name, help, c) in [
                (
                    "flowmesh_kube_relists_total",
                    "Fresh listings of a Kubernetes kind after its first one (its watch expired with 410 Gone or failed).",
                    &k.relists,
                ),
                (
                    "flowmesh_kube_write_conflicts_total",
                    "Kubernetes writes refused with 409 Conflict (another writer changed the object); read again and retried.",
                    &k.write_conflicts,
                ),
            ] {
                let _ = writeln!(o, "# HELP {name} {help}");
                let _ = writeln!(o, "# TYPE {name} counter");
                let _ = writeln!(o, "{name} {}", c.get());
            }
        }
        let _ = writeln!(o, "# HELP flowmesh_sync_latency_seconds Diff, bundle and barrier round trip of one switch sync.");
        let _ = writeln!(o, "# TYPE flowmesh_sync_latency_seconds histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                o,
                "flowmesh_sync_latency_seconds_bucket{{le=\"{b}\"}} {}",
                self.sync_buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.sync_count.load(Ordering::Relaxed);
        let _ = writeln!(
            o,
            "flowmesh_sync_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            o,
            "flowmesh_sync_latency_seconds_sum {}",
            self.sync_sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(o, "flowmesh_sync_latency_seconds_count {count}");
        let _ = writeln!(
            o,
            "# HELP flowmesh_phase_seconds Time spent per phase of a change: compute (model change and flow recompute), store (durable commit), diff (reconciler diff and plan), switch (bundle until acknowledged)."
        );
        let _ = writeln!(o, "# TYPE flowmesh_phase_seconds summary");
        for (phase, t) in [
            ("compute", &self.phase_compute),
            ("store", &self.phase_store),
            ("diff", &self.phase_diff),
            ("switch", &self.phase_switch),
        ] {
            let _ = writeln!(
                o,
                "flowmesh_phase_seconds_sum{{phase=\"{phase}\"}} {}",
                t.sum_us.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                o,
                "flowmesh_phase_seconds_count{{phase=\"{phase}\"}} {}",
                t.count.load(Ordering::Relaxed)
            );
        }
        let connected = switches
            .iter()
            .filter(|s| s.connected.load(Ordering::Relaxed))
            .count();
        let _ = writeln!(
            o,
            "# HELP flowmesh_connected_switches Switches with an OpenFlow session."
        );
        let _ = writeln!(o, "# TYPE flowmesh_connected_switches gauge");
        let _ = writeln!(o, "flowmesh_connected_switches {connected}");
        type SwitchGauge = fn(&SwitchStatus) -> u64;
        let gauges: [(&str, &str, SwitchGauge); 5] = [
            (
                "flowmesh_switch_flows_desired",
                "Flows the switch should hold.",
                |s| s.desired_flows.load(Ordering::Relaxed),
            ),
            (
                "flowmesh_switch_flows_installed",
                "Flows the switch holds.",
                |s| s.installed_flows.load(Ordering::Relaxed),
            ),
            (
                "flowmesh_switch_connected",
                "1 when the switch is connected.",
                |s| s.connected.load(Ordering::Relaxed) as u64,
            ),
            (
                "flowmesh_switch_synced",
                "1 when the switch holds exactly the desired flows.",
                |s| s.synced.load(Ordering::Relaxed) as u64,
            ),
            ("flowmesh_switch_errors", "Errors of this switch.", |s| {
                s.errors.load(Ordering::Relaxed)
            }),
        ];
        for (name, help, f) in gauges {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} gauge");
            for s in switches {
                let dpid = s.dpid.load(Ordering::Relaxed);
                let node = if s.unknown { "" } else { s.node.as_str() };
                let _ = writeln!(
                    o,
                    "{name}{{node=\"{node}\",dpid=\"{dpid:#018x}\"}} {}",
                    f(s)
                );
            }
        }
        o
    }
}

/// The allocator's name and, with jemalloc, what it holds.
fn render_allocator(o: &mut String) {
    let _ = writeln!(
        o,
        "# HELP flowmesh_allocator_info The memory allocator of this build (label allocator)."
    );
    let _ = writeln!(o, "# TYPE flowmesh_allocator_info gauge");
    let _ = writeln!(
        o,
        "flowmesh_allocator_info{{allocator=\"{}\"}} 1",
        super::allocator::name()
    );
    if let Some(bg) = super::allocator::background_thread() {
        let _ = writeln!(
            o,
            "# HELP flowmesh_allocator_background_thread 1 while jemalloc's background threads purge freed memory."
        );
        let _ = writeln!(o, "# TYPE flowmesh_allocator_background_thread gauge");
        let _ = writeln!(o, "flowmesh_allocator_background_thread {}", u8::from(bg));
    }
    let Some(s) = super::allocator::stats() else {
        return;
    };
    for (name, help, v) in [
        ("allocated", "Bytes in live allocations (jemalloc stats.allocated): the live state.", s.allocated),
        ("active", "Bytes in pages with live allocations (jemalloc stats.active).", s.active),
        ("resident", "Bytes of resident pages the allocator maps, metadata included (jemalloc stats.resident).", s.resident),
        ("mapped", "Bytes mapped by the allocator (jemalloc stats.mapped).", s.mapped),
        ("retained", "Bytes of virtual memory kept for reuse, not resident (jemalloc stats.retained).", s.retained),
        ("metadata", "Bytes of the allocator's metadata (jemalloc stats.metadata).", s.metadata),
    ] {
        let _ = writeln!(o, "# HELP flowmesh_allocator_{name}_bytes {help}");
        let _ = writeln!(o, "# TYPE flowmesh_allocator_{name}_bytes gauge");
        let _ = writeln!(o, "flowmesh_allocator_{name}_bytes {v}");
    }
}
