//! Desired-state backends. The controller keeps its desired state (cluster network config,
//! nodes with their subnets, namespaces with their NETIDs, pods with their IPs) behind the
//! [`StateBackend`] trait; the embedded database is the default, and a Kubernetes backend can
//! implement the same trait. Nothing above this module knows which backend is in use.
//!
//! The seam has watch semantics: a backend tells the core what changed in the store, whoever
//! wrote it ([`StateBackend::watch`]), with revisions, so several controller replicas can share
//! one store (etcd, the Kubernetes API). Writes are guarded by each record's mod revision
//! ([`StateBackend::apply_guarded`]): a record changed by someone else since the writer last saw
//! it makes the whole batch fail with [`StoreError::Conflict`].

mod embedded;
pub mod etcd;
mod fence;
pub mod kube;
mod records;

pub use embedded::EmbeddedStore;
pub use fence::Fence;
pub use records::{default_config, CursorsRecord, DnsRecord, Record, RecordKey};

/// A store revision: etcd's revision, a Kubernetes resourceVersion, the embedded store's commit
/// counter. Revisions only grow; `0` means "none" (a record not stored yet, or a backend that
/// keeps none).
pub type Revision = i64;

/// Why the backend could not load or store state.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created or written.
    #[error("data directory {path}: {source} (check that it exists and is writable)")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    /// The database could not be opened (corrupt, locked by another controller, ...).
    #[error("embedded database {path}: {detail}")]
    Open { path: String, detail: String },
    /// A transaction failed.
    #[error("embedded database transaction failed: {0}")]
    Transaction(String),
    /// A stored record could not be decoded.
    #[error("stored record {key} is unreadable: {detail}")]
    Corrupt { key: String, detail: String },
    /// A guarded write found a record changed since the writer last saw it (another replica
    /// wrote it): nothing of the batch was written. Retrying after the change arrived succeeds.
    #[error("conflict: {key} was changed by another writer (expected revision {expected}, found {found}); nothing was written")]
    Conflict {
        key: String,
        expected: Revision,
        found: Revision,
    },
    /// The store refused the change itself, for what it holds, not for being unreachable (with
    /// the Kubernetes datastore: a Pod the API server does not have, or bound to another node; a
    /// Node or Namespace that does not exist; an object the API server rejects). The store is
    /// healthy: the writer reports the refusal and does not treat it as an outage.
    #[error("the store refused the change: {0}")]
    Refused(String),
    /// The store cannot be reached or cannot commit (e.g. etcd without quorum).
    #[error("{0}")]
    Unavailable(String),
    /// The write was fenced: this replica wrote as leader, and is no longer (nothing of the
    /// batch was written).
    #[error("{0}; nothing was written")]
    NotLeader(String),
}

/// One change of a guarded batch: the change and the mod revision of the record the writer
/// last saw (0: the writer saw no record under that key).
#[derive(Clone, Debug, PartialEq)]
pub struct Guarded {
    /// The change.
    pub change: Change,
    /// The expected mod revision of the stored record.
    pub expected: Revision,
}

/// Every stored record with its mod revision, as of `revision`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    /// The store revision the listing is consistent at; watch from `revision + 1`.
    pub revision: Revision,
    /// The records, in key order, each with the revision that last changed it.
    pub records: Vec<(Record, Revision)>,
}

/// What a backend's watch reports.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// One committed transaction (of any writer) at `revision`: its changes, each a put or a
    /// delete of one record.
    Changes {
        /// The transaction's revision (every change in it has this mod revision).
        revision: Revision,
        /// The changes.
        changes: Vec<Change>,
    },
    /// The watch could not go on from where it was (the revision was compacted, the stream
    /// was lost for too long, the core asked for it): a fresh complete listing. The core
    /// brings its model to exactly this state, applying only the differences.
    Relisted(Listing),
    /// Whether the store is reachable (for logs, health and `get controllers`).
    Health {
        /// Reachable and committing.
        ok: bool,
        /// What is wrong, or what recovered.
        detail: String,
    },
}

/// The watch of a backend: events come in revision order on `events`; sending on `relist`
/// asks the backend for a [`WatchEvent::Relisted`] (the core does after a failed write).
pub struct Watch {
    /// The events.
    pub events: tokio::sync::mpsc::UnboundedReceiver<WatchEvent>,
    /// Ask for a relist.
    pub relist: tokio::sync::mpsc::UnboundedSender<()>,
}

/// One change of a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Insert or replace a record.
    Put(Record),
    /// Delete a record (no error if absent).
    Delete(RecordKey),
}

/// Where desired state lives. `apply` is atomic and durable when it returns `Ok`.
///
/// The methods block (the core calls them from blocking threads, never from its task);
/// `watch` is called once, from inside the tokio runtime, and may spawn tasks there.
pub trait StateBackend: Send + Sync + 'static {
    /// A short name for logs (`embedded`, `etcd`, `kubernetes`).
    fn name(&self) -> &'static str;
    /// Every stored record, in key order.
    fn load(&self) -> Result<Vec<Record>, StoreError>;
    /// Apply a batch of changes in one transaction.
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError>;
    /// Every stored record with its mod revision, and the revision the listing is
    /// consistent at. The default has no revisions.
    fn list(&self) -> Result<Listing, StoreError> {
        Ok(Listing {
            revision: 0,
            records: self.load()?.into_iter().map(|r| (r, 0)).collect(),
        })
    }
    /// Apply a batch in one transaction if every record is still at its expected mod
    /// revision; otherwise write nothing and fail with [`StoreError::Conflict`]. A key may
    /// appear several times: the last change wins and the first expectation is checked.
    /// Returns the revision of the commit (every written record's new mod revision). The
    /// default (a store with one writer) checks nothing.
    fn apply_guarded(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        let plain: Vec<Change> = changes.iter().map(|g| g.change.clone()).collect();
        self.apply(&plain).map(|()| 0)
    }
    /// [`StateBackend::apply_guarded`] for the controller's own changes, which only the
    /// leader of several replicas may make: a backend shared by replicas refuses the batch
    /// with [`StoreError::NotLeader`] unless this replica holds the leadership fence. The
    /// default (a store with one writer) is `apply_guarded`.
    fn apply_guarded_leader(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        self.apply_guarded(changes)
    }
    /// Watch the store from revision `from` (exclusive: changes after it). `None`: the
    /// backend has no other writer and nothing to report (the core then keeps its own model).
    fn watch(&self, from: Revision) -> Option<Watch> {
        let _ = from;
        None
    }
    /// Why this replica's view of the store is not current, if it is not (a store followed by
    /// watches: one that fails or has not listed yet). None: current, or nothing to follow.
    fn view_problem(&self) -> Option<String> {
        None
    }
}

/// Keep the last change per key of a batch, in first-seen key order, with the first
/// Run `f` on a backend's own runtime and wait for it, from any thread, async or not (the
/// trait's methods are blocking). `client` names the backend's client in errors.
pub(crate) fn run_on<F>(
    rt: Option<&tokio::runtime::Runtime>,
    client: &str,
    f: F,
) -> Result<F::Output, StoreError>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = rt.ok_or_else(|| StoreError::Unavailable(format!("{client} stopped")))?;
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| StoreError::Unavailable(format!("{client} runtime stopped")))
}

/// Changes as guarded writes that compare nothing (a plain [`StateBackend::apply`]).
pub(crate) fn unguarded(changes: &[Change]) -> Vec<Guarded> {
    changes
        .iter()
        .map(|c| Guarded {
            change: c.clone(),
            expected: -1,
        })
        .collect()
}

/// expectation of each key (the revision the batch started from).
pub fn coalesce(changes: &[Guarded]) -> Vec<(RecordKey, Guarded)> {
    let mut order: Vec<RecordKey> = Vec::new();
    let mut by_key: std::collections::HashMap<RecordKey, Guarded> =
        std::collections::HashMap::new();
    for g in changes {
        let key = g.change.key();
        match by_key.get_mut(&key) {
            Some(cur) => cur.change = g.change.clone(),
            None => {
                order.push(key.clone());
                by_key.insert(key, g.clone());
            }
        }
    }
    order
        .into_iter()
        .filter_map(|k| by_key.remove(&k).map(|g| (k, g)))
        .collect()
}

impl Change {
    /// The key the change writes.
    pub fn key(&self) -> RecordKey {
        match self {
            Change::Put(r) => r.key(),
            Change::Delete(k) => k.clone(),
        }
    }
}
