//! flowmesh topology: the cluster model and its allocators, the flow pipeline (tables declared
//! as data, `(model, node) -> FlowSet`, incremental), `FlowSet::diff`, and a packet simulator.
//! No I/O (except `bench::peak_rss_kib` / `bench::cpu_secs`, which read `/proc/self`).

pub mod alloc;
pub mod bench;
pub mod cidr;
pub mod config;
pub mod model;
pub mod pipeline;
pub mod sim;

pub use cidr::Ipv4Cidr;
pub use config::{ClusterNetworkConfig, ClusterNetworkEntry, Mode};
pub use model::{
    Affected, ClusterModel, ModelError, ModelSnapshot, NamespaceInfo, NodeInfo, PodAttach, PodInfo,
    PodKey,
};
pub use pipeline::{compute_node, FlowDiff, FlowSet, Pipeline, PipelineError};
pub use sim::{Outcome, Packet, Simulator, Trace};
