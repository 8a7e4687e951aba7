//! What `get switches` and `/metrics` show of each switch: atomics its reconciler writes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// What `get switches` shows of a switch; shared between the reconciler (writer) and readers.
#[derive(Debug, Default)]
pub struct SwitchStatus {
    /// Node name (empty for an unknown datapath).
    pub node: String,
    /// Datapath id (0 until a switch connected).
    pub dpid: AtomicU64,
    /// Whether a switch is connected.
    pub connected: AtomicBool,
    /// Whether the switch holds exactly the desired state.
    pub synced: AtomicBool,
    /// Flows the switch holds (as last read or written).
    pub installed_flows: AtomicU64,
    /// Flows the switch should hold.
    pub desired_flows: AtomicU64,
    /// Errors (refused changes, failed reads) so far.
    pub errors: AtomicU64,
    /// Flow and group mods sent so far.
    pub mods_sent: AtomicU64,
    /// Changes made by audits to repair drift.
    pub drift_repairs: AtomicU64,
    /// Syncs that found the switch's digest marker equal to the desired digest and read and
    /// sent nothing else.
    pub marker_verified: AtomicU64,
    /// The last error, for `get switches`.
    pub last_error: Mutex<String>,
    /// The switch's address.
    pub peer: Mutex<String>,
    /// True for a datapath no node claims.
    pub unknown: bool,
    /// The OpenFlow role this replica holds on the switch ("" when none was requested).
    pub role: Mutex<String>,
    /// Audit logging on this switch: "" (no namespace on it logs), "on", or "off: WHY" (the
    /// switch cannot hold the audit meter).
    pub audit: Mutex<String>,
}

impl SwitchStatus {
    /// Count an error and keep it as the last one.
    pub fn set_error(&self, e: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.last_error.lock() {
            *g = e.to_string();
        }
    }
}
