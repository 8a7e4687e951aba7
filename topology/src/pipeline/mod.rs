//! The flow pipeline: tables declared as data, the checked flow builder, register and cookie
//! layouts, per-object fragments, the incremental `(model, node) -> FlowSet`, and the diff.

pub mod audit;
pub mod builder;
pub mod compute;
pub mod cookie;
pub mod egress_firewall;
pub mod egress_ip;
pub mod flowset;
pub mod fragments;
pub mod groups;
pub mod marker;
pub mod multicast;
pub mod netpol;
pub mod priority;
pub mod regs;
pub mod tables;

pub use builder::{FlowBuilder, PipelineError};
pub use compute::{compute_node, Pipeline};
pub use flowset::{FlowDiff, FlowSet, StreamedDiff};
pub use priority::Band;
pub use tables::{TableId, TableSpec, TABLES};
