//! flowmesh controller library: state backends, reconciler, gRPC services.

pub mod cli;
pub mod manifest;
pub mod state;
