//! The outside shapes flowmesh reads and writes, and their conversions: Kubernetes' and
//! OpenShift's objects (k8s-openapi types and [`openshift`]'s, built with kube's derive on
//! `kube-core` only), flowmesh's own [`flowmesh`] objects (PodAttachment), multi-document [`manifest`]s, and the conversions of [`netpol`]
//! (NetworkPolicy) and [`egress_firewall`] (EgressNetworkPolicy) to the model and to the
//! admin API's messages. Pure: no I/O, no API client, so `flowmeshctl` and the controller
//! share it.

pub mod egress_firewall;
pub mod flowmesh;
pub mod manifest;
pub mod netpol;
pub mod openshift;
