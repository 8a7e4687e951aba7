//! flowmesh topology: cluster model, allocators, pipeline, FlowSet diff, simulator. No I/O.

pub mod alloc;
pub mod bench;
pub mod cidr;
pub mod config;
pub mod model;

pub use cidr::Ipv4Cidr;
pub use config::{ClusterNetworkConfig, ClusterNetworkEntry, Mode};
pub use model::{Affected, ClusterModel, ModelError, PodAttach, PodInfo, PodKey};
pub mod pipeline;
pub mod sim;

pub use pipeline::{compute_node, FlowDiff, FlowSet, Pipeline, PipelineError};
