//! One place per feature: its conversion from the outside shape (through the `kinds` crate),
//! its validation and its mutation of the model, run by the core as one operation.
//!
//! * [`nodes`]: nodes, namespaces, pods and the NETID operations (join, isolate, global);
//! * [`network_policy`]: NetworkPolicy and the labels it selects on;
//! * [`egress_ip`]: HostSubnet/NetNamespace egress IPs;
//! * [`egress_probe`]: the underlay probe of egress nodes, egress failover's liveness signal;
//! * [`egress_firewall`]: EgressNetworkPolicy and the DNS names it resolves;
//! * [`multicast`]: the multicast annotation;
//! * [`audit`]: network policy audit logging (`policyAuditConfig`, the acl-logging annotation);
//! * [`apply`]: `apply -f`, every object of a manifest in one transaction;
//! * [`cookies`]: the feature and object a flow's cookie names.

pub mod apply;
pub mod audit;
pub mod cookies;
pub mod egress_firewall;
pub mod egress_ip;
pub mod egress_probe;
pub mod multicast;
pub mod network_policy;
pub mod nodes;

#[cfg(test)]
mod attach_tests;
#[cfg(test)]
mod session_tests;
