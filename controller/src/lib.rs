//! flowmesh controller library. Data flows one way, and so do the imports (docs/architecture.md
//! has the layer table a test enforces):
//!
//! * [`api`]: what the outside world calls — the admin and node gRPC services, auth, the
//!   node's egress watch, the Kubernetes master's reactions;
//! * [`resources`]: one place per feature (nodes/namespaces/pods and NETIDs, NetworkPolicy,
//!   egress IPs, egress firewall and its DNS names, multicast, `apply -f`): conversion from the
//!   outside shape, validation and the mutation of the model;
//! * [`core`]: the actor that owns the model and pipeline, its effects, its store writer;
//! * [`switches`]: the OpenFlow listener adapter, one reconciler per switch, bundle plans;
//! * [`ha`]: leadership among replicas (etcd or a Lease) behind one interface;
//! * [`state`]: storage only (embedded redb, etcd, Kubernetes);
//! * [`observe`], [`error`]: metrics, switch status and the API error, used everywhere.
//!
//! The outside shapes (Kubernetes/OpenShift objects, manifests) are the `kinds` crate;
//! [`server`] assembles everything for `flowmesh-controller`.

pub mod api;
pub mod core;
pub mod error;
pub mod ha;
pub mod identity;
pub mod observe;
pub mod resources;
pub mod server;
pub mod state;
pub mod switches;
