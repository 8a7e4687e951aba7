//! Desired-state backends. The controller keeps its desired state (cluster network config,
//! nodes with their subnets, namespaces with their NETIDs, pods with their IPs) behind the
//! [`StateBackend`] trait; the embedded database is the default, and a Kubernetes backend can
//! implement the same trait. Nothing above this module knows which backend is in use.

mod embedded;
mod records;

pub use embedded::EmbeddedStore;
pub use records::{CursorsRecord, Record, RecordKey};

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
pub trait StateBackend: Send + Sync + 'static {
    /// A short name for logs (`embedded`, `kubernetes`).
    fn name(&self) -> &'static str;
    /// Every stored record, in key order.
    fn load(&self) -> Result<Vec<Record>, StoreError>;
    /// Apply a batch of changes in one transaction.
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError>;
}
