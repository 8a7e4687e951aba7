//! NodeRestriction for the node API: what a node certificate may assert (docs/security.md,
//! "Tenants and nodes"). Callers without a certificate (plaintext on loopback) pass unchecked.
//!
//! Every datastore:
//! * a node registers, attaches, detaches and watches only as itself;
//! * it may not set a pod's labels or named ports (NetworkPolicies trust them): they come from
//!   the Pod (Kubernetes) or the admin API;
//! * it never attaches or detaches a pod the stored state places on another node.
//!
//! Kubernetes datastore — the API server's objects decide:
//! * a node registers only with its Node's `InternalIP`, and with the datapath id pinned for it
//!   (its HostSubnet's, which an admin may set; else the InternalIP as a number);
//! * it attaches only a Pod that exists and is bound to it (`spec.nodeName`).
//!
//! Embedded and etcd datastores — the stored node decides:
//! * a node's first registration pins its IP and datapath id (neither may be another node's);
//!   later registrations must repeat them (an admin changes them with `flowmeshctl node add`);
//! * with `--nodes-preregistered`, a node registers only after an admin added it.

use std::net::Ipv4Addr;
use std::sync::Arc;

use proto::node::node_api_server::NodeApi;
use proto::node::{self as pn};
use tonic::{Request, Response, Status};

use crate::api::auth::{Caller, Identity};
use crate::api::grpc::NodeService;
use crate::core::CoreHandle;
use crate::state::kube::{dpid_from_ip, KubeStore, PodBinding};

/// The node a request's caller is, when it came through the authorization layer (None:
/// plaintext loopback, no authentication).
fn node_caller<T>(r: &Request<T>) -> Result<Option<String>, Status> {
    match r.extensions().get::<Caller>() {
        None => Ok(None),
        Some(Caller(Identity::Node(n))) => Ok(Some(n.clone())),
        Some(Caller(other)) => Err(Status::permission_denied(format!(
            "{other} may not use the node API"
        ))),
    }
}

fn not_yours(caller: &str, what: String) -> Status {
    Status::permission_denied(format!("node {caller} may not {what}"))
}

/// Where the facts about nodes and pods come from.
#[derive(Clone, Default)]
pub struct NodeTrust {
    /// The Kubernetes datastore: its Nodes and Pods decide.
    pub kube: Option<Arc<KubeStore>>,
    /// Embedded and etcd: a node registers only after an admin added it.
    pub preregistered_only: bool,
}

/// The node API with NodeRestriction.
#[derive(Clone)]
pub struct NodeGuard {
    inner: NodeService,
    core: CoreHandle,
    trust: NodeTrust,
}

impl NodeGuard {
    /// The guarded node API over the core.
    pub fn new(core: CoreHandle, trust: NodeTrust) -> Self {
        NodeGuard {
            inner: NodeService::new(core.clone()),
            core,
            trust,
        }
    }

    /// Refuse when the pod `namespace/name` is stored on a node other than `caller`.
    async fn pod_elsewhere(&self, caller: &str, namespace: &str, name: &str) -> Result<(), Status> {
        let (ns, n) = (namespace.to_string(), name.to_string());
        let on = self
            .core
            .read(move |c| c.model.pod(&ns, &n).map(|p| p.node.clone()))
            .await?;
        match on {
            Some(node) if node != caller => Err(not_yours(
                caller,
                format!("touch pod {namespace}/{name}: it runs on node {node}"),
            )),
            _ => Ok(()),
        }
    }

    /// Whether node `me` may register with `ip` and `dpid`.
    async fn check_registration(&self, me: &str, ip: Ipv4Addr, dpid: u64) -> Result<(), Status> {
        let name = me.to_string();
        let stored = self
            .core
            .read(move |c| c.model.node(&name).map(|n| (n.ip, n.dpid)))
            .await?;
        if let Some(kube) = &self.trust.kube {
            let address = match kube.node_internal_ip(me) {
                None => {
                    return Err(not_yours(
                        me,
                        "register: the Kubernetes API has no Node of that name".into(),
                    ))
                }
                Some(None) => {
                    return Err(not_yours(
                        me,
                        "register: its Kubernetes Node has no IPv4 InternalIP yet".into(),
                    ))
                }
                Some(Some(a)) => a,
            };
            if ip != address {
                return Err(not_yours(
                    me,
                    format!("register with IP {ip}: its Kubernetes Node's InternalIP is {address}"),
                ));
            }
            let pinned = stored.map_or(dpid_from_ip(address), |(_, d)| d);
            if dpid != pinned {
                return Err(not_yours(
                    me,
                    format!(
                        "register with datapath id {dpid:#018x}: its datapath id is pinned to \
                         {pinned:#018x} (its HostSubnet's flowmesh.io/datapath-id, else its \
                         InternalIP as a number); an admin changes it with `flowmeshctl node add \
                         {me} --ip {address} --dpid DPID`"
                    ),
                ));
            }
            return Ok(());
        }
        match stored {
            Some((cur_ip, cur_dpid)) if (cur_ip, cur_dpid) != (ip, dpid) => Err(not_yours(
                me,
                format!(
                    "register with IP {ip} and datapath id {dpid:#018x}: it is registered with \
                     IP {cur_ip} and datapath id {cur_dpid:#018x}, which only an admin changes \
                     (`flowmeshctl node add {me} --ip IP --dpid DPID`)"
                ),
            )),
            None if self.trust.preregistered_only => Err(not_yours(
                me,
                format!(
                    "register: no admin added it, and this controller takes only nodes an admin \
                     added (--nodes-preregistered; `flowmeshctl node add {me} --ip IP --dpid DPID`)"
                ),
            )),
            // A new node: the model refuses an IP or datapath id another node holds.
            _ => Ok(()),
        }
    }

    /// With the Kubernetes datastore, whether Pod `ns/name` is bound to node `me`.
    async fn check_binding(&self, me: &str, ns: &str, name: &str) -> Result<(), Status> {
        let Some(kube) = self.trust.kube.clone() else {
            return Ok(());
        };
        let (pns, pname, node) = (ns.to_string(), name.to_string(), me.to_string());
        let binding = tokio::task::spawn_blocking(move || kube.pod_binding(&pns, &pname, &node))
            .await
            .map_err(|e| Status::internal(format!("looking up pod {ns}/{name}: {e}")))?
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let why = match binding {
            PodBinding::Node(n) if n == me => return Ok(()),
            PodBinding::Node(n) => format!("it is bound to node {n} (spec.nodeName)"),
            PodBinding::Unbound => "it is bound to no node yet (no spec.nodeName)".to_string(),
            PodBinding::NoPod => "the Kubernetes API has no such Pod".to_string(),
        };
        Err(not_yours(me, format!("attach pod {ns}/{name}: {why}")))
    }
}

#[tonic::async_trait]
impl NodeApi for NodeGuard {
    async fn register_node(
        &self,
        r: Request<pn::RegisterNodeRequest>,
    ) -> Result<Response<pn::NodeConfig>, Status> {
        if let Some(me) = node_caller(&r)? {
            let q = r.get_ref();
            if q.name != me {
                return Err(not_yours(&me, format!("register node {:?}", q.name)));
            }
            // An unparsable address is the service's to report.
            if let Ok(ip) = q.node_ip.trim().parse::<Ipv4Addr>() {
                self.check_registration(&me, ip, q.dpid).await?;
            }
        }
        self.inner.register_node(r).await
    }

    async fn attach_pod(
        &self,
        r: Request<pn::AttachPodRequest>,
    ) -> Result<Response<pn::PodNetwork>, Status> {
        if let Some(me) = node_caller(&r)? {
            let q = r.get_ref();
            if q.node != me {
                return Err(not_yours(
                    &me,
                    format!("attach pod {}/{} on node {:?}", q.namespace, q.name, q.node),
                ));
            }
            if !q.labels.is_empty() || !q.ports.is_empty() {
                return Err(not_yours(
                    &me,
                    format!(
                        "set the labels or named ports of pod {}/{}: they come from the Pod \
                         object (Kubernetes) or the admin API (`flowmeshctl label pod`)",
                        q.namespace, q.name
                    ),
                ));
            }
            self.pod_elsewhere(&me, &q.namespace, &q.name).await?;
            self.check_binding(&me, &q.namespace, &q.name).await?;
        }
        self.inner.attach_pod(r).await
    }

    async fn detach_pod(
        &self,
        r: Request<pn::DetachPodRequest>,
    ) -> Result<Response<pn::DetachPodReply>, Status> {
        if let Some(me) = node_caller(&r)? {
            let q = r.get_ref();
            if q.node != me {
                return Err(not_yours(
                    &me,
                    format!("detach pod {}/{} on node {:?}", q.namespace, q.name, q.node),
                ));
            }
            // Only what is stored on the caller is detached; anything else is refused, and a
            // pod not stored at all is a no-op (CNI DEL must succeed after the Pod is gone).
            self.pod_elsewhere(&me, &q.namespace, &q.name).await?;
        }
        self.inner.detach_pod(r).await
    }

    type WatchEgressStream = crate::api::egress_watch::AssignmentStream;

    async fn watch_egress(
        &self,
        r: Request<pn::WatchEgressRequest>,
    ) -> Result<Response<Self::WatchEgressStream>, Status> {
        if let Some(me) = node_caller(&r)? {
            if r.get_ref().node != me {
                return Err(not_yours(
                    &me,
                    format!("watch the egress IPs of node {:?}", r.get_ref().node),
                ));
            }
        }
        self.inner.watch_egress(r).await
    }

    type WatchAuditStream = crate::api::audit_watch::SettingsStream;

    async fn watch_audit(
        &self,
        r: Request<pn::WatchAuditRequest>,
    ) -> Result<Response<Self::WatchAuditStream>, Status> {
        if let Some(me) = node_caller(&r)? {
            if r.get_ref().node != me {
                return Err(not_yours(
                    &me,
                    format!("watch the audit settings of node {:?}", r.get_ref().node),
                ));
            }
        }
        self.inner.watch_audit(r).await
    }

    /// Any node may learn which pods are behind the addresses its audit lines name (asking
    /// as itself).
    async fn lookup_pods(
        &self,
        r: Request<pn::LookupPodsRequest>,
    ) -> Result<Response<pn::LookupPodsReply>, Status> {
        if let Some(me) = node_caller(&r)? {
            if r.get_ref().node != me {
                return Err(not_yours(
                    &me,
                    format!("look pods up as node {:?}", r.get_ref().node),
                ));
            }
        }
        self.inner.lookup_pods(r).await
    }
}
