//! What a mutation did besides returning its value: the nodes it affected, the records to
//! store and the events to publish.

use crate::error::ApiError;
use crate::state::Change;
use topology::{Affected, ClusterModel};

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
    /// When it cannot, the call fails and [`Effects::undo`] takes the change back, so a failed
    /// call leaves nothing behind (a CNI ADD that fails is retried from scratch).
    pub require_connected: Option<String>,
    /// How to take the change back when the switch of `require_connected` does not take it.
    pub undo: Option<Undo>,
    /// Events to publish once acknowledged.
    pub events: Vec<Event>,
}

/// A mutation's inverse: changes the model back and says what that touched. It checks that
/// what it undoes is still as the mutation left it, and refuses otherwise.
pub type Undo = Box<dyn FnOnce(&mut ClusterModel) -> Result<Effects, ApiError> + Send>;

impl Effects {
    /// Fold another mutation's effects into these (one transaction of several objects). The
    /// other's connection requirement and undo are not carried over: a transaction names at
    /// most one.
    pub fn merge(&mut self, other: Effects) {
        self.affected.merge(other.affected);
        self.changes.extend(other.changes);
        self.events.extend(other.events);
    }
}
