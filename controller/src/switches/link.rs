//! What the reconciler needs from a switch connection, as a small trait: read what the switch
//! holds, and apply a batch of changes atomically (one bundle closed by a barrier; meters,
//! which Open vSwitch cannot bundle, just before and after it).

use ofproto::{Flow, FlowMod, Group, GroupMod, Meter, MeterFeatures, MeterMod};
use std::future::Future;
use std::pin::Pin;
use topology::pipeline::{FlowDiff, FlowSet};

/// A boxed future, so links can be used as trait objects.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a switch holds: its flows (all tables), groups and meters.
pub type SwitchState = (Vec<Flow>, Vec<Group>, Vec<Meter>);

/// What a whole-table read of a switch took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Flows the switch holds (read).
    pub flows: usize,
    /// The most decoded flow entries of the read held in memory at once (the whole table
    /// when the read is not streamed; about a reply part or two when it is).
    pub held_at_once: usize,
}

/// One change to a switch's tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SwitchChange {
    /// A flow add/modify/delete.
    Flow(FlowMod),
    /// A group add/modify/delete.
    Group(GroupMod),
    /// A meter add/modify/delete. Open vSwitch refuses meter-mods in a bundle
    /// (OFPBFC_MSG_UNSUP): adds and modifies go just before the bundle, deletes just after.
    Meter(MeterMod),
}

/// Why a switch operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The connection is gone.
    #[error("switch disconnected: {0}")]
    Disconnected(String),
    /// The switch refused a change; nothing of the batch was applied.
    #[error("switch refused change #{index} ({change}): {error}")]
    Refused {
        /// Index of the refused change in the batch.
        index: usize,
        /// The change, in ovs-ofctl syntax.
        change: String,
        /// The switch's error.
        error: String,
    },
    /// The switch did not answer in time.
    #[error("switch timed out: {0}")]
    Timeout(String),
    /// Anything else (decode error, unexpected reply).
    #[error("{0}")]
    Other(String),
}

/// A turn to read or program a switch whole, shared with every other switch (see
/// `switches::SyncLimiter`); the turn ends when it is dropped.
pub type SyncTurn = tokio::sync::OwnedSemaphorePermit;

/// A connected switch as the reconciler sees it.
pub trait SwitchLink: Send + Sync + 'static {
    /// The peer address, for logs and `get switches`.
    fn peer(&self) -> String;
    /// Waits for a turn to read or program this switch whole: the caller holds it across
    /// [`SwitchLink::read_state`] and [`SwitchLink::apply`] (and the diff and plan between
    /// them, so that only switches with a turn hold a whole table or batch in memory). None:
    /// this link takes no turns.
    fn turn(&self) -> LinkFuture<'_, Option<SyncTurn>> {
        Box::pin(async { None })
    }
    /// Waits for a turn to audit this switch (read it whole although its marker agrees):
    /// audits of all switches share a bounded rate. The default waits for nothing.
    fn audit_turn(&self) -> LinkFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Every flow (all tables), group and meter the switch holds (no meters from a switch
    /// that has none).
    fn read_state(&self) -> LinkFuture<'_, Result<SwitchState, LinkError>>;
    /// Reads the switch whole and diffs it against `desired` (flows, groups, meters): what
    /// [`FlowSet::diff`] of [`SwitchLink::read_state`] and `desired` gives. A link that can
    /// stream the read folds each reply part into the diff as it arrives
    /// (`topology::pipeline::StreamedDiff`), so the whole table is never held; this default reads it whole.
    fn read_diff<'a>(
        &'a self,
        desired: &'a FlowSet,
    ) -> LinkFuture<'a, Result<(FlowDiff, ReadCounts), LinkError>> {
        Box::pin(async move {
            let (flows, groups, meters) = self.read_state().await?;
            let n = flows.len();
            let held = FlowSet::new(flows, groups).with_meters(meters);
            let counts = ReadCounts {
                flows: n,
                held_at_once: n,
            };
            Ok((FlowSet::diff(&held, desired), counts))
        })
    }
    /// The flows of table 253 whose cookie is `cookie` (the digest marker: one flow, or none
    /// when the switch lost its tables). The default reads the whole switch and filters.
    fn read_marker(&self, cookie: u64) -> LinkFuture<'_, Result<Vec<Flow>, LinkError>> {
        Box::pin(async move {
            let (flows, _, _) = self.read_state().await?;
            Ok(flows
                .into_iter()
                .filter(|f| f.table == 253 && f.cookie == cookie)
                .collect())
        })
    }
    /// The switch's meter features; None when it answers no meter request (no meters). The
    /// default: a link without meters.
    fn meter_features(&self) -> LinkFuture<'_, Result<Option<MeterFeatures>, LinkError>> {
        Box::pin(async { Ok(None) })
    }
    /// Apply a batch atomically; returns after the switch acknowledged it (barrier reply).
    fn apply(&self, changes: Vec<SwitchChange>) -> LinkFuture<'_, Result<(), LinkError>>;
    /// The switch's ports as (name, OpenFlow port number), as last reported by the switch
    /// (PORT_DESC at connect, kept up to date by PORT_STATUS).
    fn ports(&self) -> LinkFuture<'_, Result<Vec<(String, u32)>, LinkError>>;
    /// Whether this connection may drive `node`'s switch. True unless the switch
    /// authenticated (OpenFlow TLS) with a certificate that does not name `node`: such a
    /// switch is treated as an unknown datapath (default drop only).
    fn may_serve(&self, _node: &str) -> bool {
        true
    }
    /// Is the switch on this connection still there? An echo answered within `within`.
    /// Links that cannot tell answer false (a newer connection for the datapath then
    /// replaces this one at once).
    fn probe(&self, _within: std::time::Duration) -> LinkFuture<'_, bool> {
        Box::pin(async { false })
    }
    /// Closes the connection (a refused or replaced one).
    fn close(&self) -> LinkFuture<'_, ()> {
        Box::pin(async {})
    }
    /// True once the connection has ended.
    fn is_closed(&self) -> bool {
        false
    }
    /// Request an OpenFlow role (master or slave with a generation id); returns once the
    /// switch granted it. The default (links without roles) grants at once.
    fn set_role(
        &self,
        _role: ofproto::message::Role,
        _generation: u64,
    ) -> LinkFuture<'_, Result<(), LinkError>> {
        Box::pin(async { Ok(()) })
    }
}

impl std::fmt::Display for SwitchChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SwitchChange::Flow(fm) => write!(f, "flow {:?} {}", fm.command, fm.flow),
            SwitchChange::Group(gm) => {
                write!(f, "group {:?} group_id={}", gm.command, gm.group.group_id)
            }
            SwitchChange::Meter(mm) => {
                write!(f, "meter {:?} meter_id={}", mm.command, mm.meter.meter_id)
            }
        }
    }
}
