//! flowmesh controller library: state backends, reconciler, gRPC services.

pub mod state;
