//! Test support: the Open vSwitch sandbox and network-namespace lab harness.
//!
//! * [`OvsSandbox`]: one dummy-datapath Open vSwitch with many bridges (one per simulated node).
//! * [`NetnsLab`]: nodes as network namespaces, each with its own userspace-datapath Open
//!   vSwitch, joined by an underlay; pods as namespaces.
//! * [`Trace`]: parsed `ofproto/trace` verdicts; [`OfHandshakeListener`]: a raw OpenFlow
//!   HELLO/FEATURES listener for smoke tests.
//!
//! Everything a harness starts is a tracked child killed by PID on drop (also while a test
//! panics); names and directories are unique per instance; leftovers of dead runs are reaped.

pub mod audit;
pub mod bench;
pub mod bins;
pub mod cluster;
pub mod cni;
pub mod dns;
pub mod e2e;
pub mod egress;
pub mod error;
pub mod etcd;
pub mod hostile;
pub mod kube_api;
pub mod netns;
pub mod of_listener;
pub mod ovs;
pub mod pcap;
pub mod ping;
pub mod process;
pub mod rundir;
pub mod sandbox;
pub mod tcp;
pub mod trace;

pub use error::{HarnessError, Result};
pub use etcd::EtcdCluster;
pub use kube_api::{MockApiServer, ResourceDef};
pub use netns::{LabBuilder, LabNode, NetnsLab, Pod};
pub use of_listener::OfHandshakeListener;
pub use ovs::{DatapathMode, OvsInstance};
pub use process::TrackedProcess;
pub use sandbox::{BridgeSpec, OvsSandbox, SandboxBuilder, SandboxTimings};
pub use tcp::{tcp_transfer, TcpTransfer};
pub use trace::{OutputPort, Trace, TraceOutput, TunnelSet};
