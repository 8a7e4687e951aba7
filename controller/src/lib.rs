//! flowmesh controller library: state backends, reconciler, gRPC services.
