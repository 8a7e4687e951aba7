//! flowmesh controller library: state backends, the core (model, pipeline, reconcilers), the
//! gRPC services and metrics.

pub mod apply;
pub mod auth;
pub mod certs;
pub mod cli;
pub mod core;
pub mod egress_api;
pub mod egress_dns;
pub mod egress_firewall;
pub mod egress_watch;
pub mod error;
pub mod grpc;
pub mod ha;
pub mod ha_kube;
pub mod kube_sync;
pub mod link;
pub mod manifest;
pub mod metrics;
pub mod multicast_api;
pub mod netpol;
pub mod openshift;
pub mod ops;
pub mod plan;
pub mod policy_api;
pub mod policy_ops;
pub mod reconciler;
pub mod server;
pub mod state;
pub mod store_sync;
pub mod switches;
