//! The gRPC services: the admin API (flowmeshctl, operators) and the node API (flowmesh-shim).
//! Both translate requests into [`crate::resources::nodes`] calls and model reads.

use crate::core::{Core, CoreHandle};
use crate::error::ApiError;
use crate::resources::network_policy as policy_ops;
use crate::resources::nodes::{self as ops, NetIdOp};
use crate::switches::reconciler::ReconcileCmd;
use kinds::netpol;
use proto::admin::admin_server::Admin;
use proto::admin::{self as pa};
use proto::node::node_api_server::NodeApi;
use proto::node::{self as pn};
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use tokio::sync::oneshot;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use topology::model::{NamespaceInfo, NodeInfo};
use topology::sim::{Outcome, Packet, Simulator};
use topology::{ClusterModel, FlowSet, PodInfo};

/// The admin API service.
#[derive(Clone)]
pub struct AdminService {
    core: CoreHandle,
}

/// The node API service.
#[derive(Clone)]
pub struct NodeService {
    core: CoreHandle,
}

impl AdminService {
    /// A service over the core.
    pub fn new(core: CoreHandle) -> Self {
        AdminService { core }
    }

    async fn netid(
        &self,
        op: NetIdOp,
        names: Vec<String>,
    ) -> Result<Response<pa::NetNamespaceList>, Status> {
        let v = ops::netid_op(&self.core, op, names).await?;
        Ok(Response::new(pa::NetNamespaceList {
            items: v.iter().map(netns).collect(),
        }))
    }

    /// A NETID operation on named namespaces or on those a label selector picks.
    async fn netid_selected(
        &self,
        op: NetIdOp,
        names: Vec<String>,
        selector: String,
    ) -> Result<Response<pa::NetNamespaceList>, Status> {
        if selector.is_empty() {
            return self.netid(op, names).await;
        }
        if !names.is_empty() {
            return Err(
                ApiError::Invalid("give namespace names or a selector, not both".into()).into(),
            );
        }
        let v = policy_ops::netid_op_by_selector(&self.core, op, selector).await?;
        Ok(Response::new(pa::NetNamespaceList {
            items: v.iter().map(netns).collect(),
        }))
    }
}

impl NodeService {
    /// A service over the core.
    pub fn new(core: CoreHandle) -> Self {
        NodeService { core }
    }
}

fn parse_ip(what: &str, s: &str) -> Result<Ipv4Addr, ApiError> {
    s.trim()
        .parse()
        .map_err(|_| ApiError::Invalid(format!("{what} {s:?} is not an IPv4 address")))
}

fn host_subnet(n: &NodeInfo) -> pa::HostSubnet {
    pa::HostSubnet {
        node: n.name.clone(),
        node_ip: n.ip.to_string(),
        subnet: n.subnet.to_string(),
        dpid: n.dpid,
        gateway: n.gateway().to_string(),
        ..Default::default()
    }
}

fn netns(n: &NamespaceInfo) -> pa::NetNamespace {
    pa::NetNamespace {
        name: n.name.clone(),
        netid: n.netid,
        labels: n.labels.clone().into_iter().collect(),
        annotations: crate::resources::multicast::annotations(n),
        ..Default::default()
    }
}

fn mac_string(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn pod(m: &ClusterModel, p: &PodInfo) -> pa::Pod {
    pa::Pod {
        namespace: p.key.namespace.clone(),
        name: p.key.name.clone(),
        node: p.node.clone(),
        ip: p.ip.to_string(),
        mac: mac_string(p.mac()),
        ofport: p.ofport,
        netid: m.effective_netid(&p.key.namespace),
        port_name: p.port_name.clone(),
        labels: p.labels.clone().into_iter().collect(),
        ports: p.ports.iter().map(netpol::proto_container_port).collect(),
    }
}

fn split_pod_ref(s: &str) -> Result<(String, String), ApiError> {
    match s.split_once('/') {
        Some((ns, n)) if !ns.is_empty() && !n.is_empty() => Ok((ns.to_string(), n.to_string())),
        _ => Err(ApiError::Invalid(format!("{s:?} is not NAMESPACE/POD"))),
    }
}

fn flow_lines(fs: &FlowSet) -> Vec<String> {
    let mut lines: Vec<String> = fs.iter().map(|f| f.to_string()).collect();
    lines.sort();
    let mut groups: Vec<String> = fs.groups().iter().map(|g| g.to_string()).collect();
    groups.sort();
    lines.extend(groups);
    lines
}

fn diff_lines(installed: &FlowSet, desired: &FlowSet) -> Vec<String> {
    let d = FlowSet::diff(installed, desired);
    let mut out = Vec::new();
    for f in &d.deletes {
        out.push(format!("- {f}"));
    }
    for f in &d.adds {
        out.push(format!("+ {f}"));
    }
    for f in &d.modifies {
        out.push(format!("~ {f}"));
    }
    for g in &d.group_deletes {
        out.push(format!("- group_id={}", g.group_id));
    }
    for g in d.group_adds.iter().chain(&d.group_modifies) {
        out.push(format!("+ group_id={}", g.group_id));
    }
    out
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pa::Event, Status>> + Send>>;

#[tonic::async_trait]
impl Admin for AdminService {
    async fn get_cluster_network(
        &self,
        _: Request<pa::Empty>,
    ) -> Result<Response<pa::ClusterNetwork>, Status> {
        let c = self.core.read(|c| c.model.config().clone()).await?;
        Ok(Response::new(pa::ClusterNetwork {
            cluster_networks: c
                .cluster_networks
                .iter()
                .map(|e| pa::ClusterNetworkEntry {
                    cidr: e.cidr.to_string(),
                    host_prefix: e.host_prefix as u32,
                })
                .collect(),
            service_network: c.service_network.to_string(),
            mode: format!("{:?}", c.mode).to_lowercase(),
            vxlan_port: c.vxlan_port as u32,
            mtu: c.mtu,
        }))
    }

    async fn add_node(
        &self,
        r: Request<pa::AddNodeRequest>,
    ) -> Result<Response<pa::HostSubnet>, Status> {
        let r = r.into_inner();
        let ip = parse_ip(&format!("node {}: IP", r.name), &r.node_ip)?;
        let n = ops::add_node(&self.core, r.name, ip, r.dpid).await?;
        Ok(Response::new(host_subnet(&n)))
    }

    async fn delete_node(
        &self,
        r: Request<pa::NameRequest>,
    ) -> Result<Response<pa::Empty>, Status> {
        ops::delete_node(&self.core, r.into_inner().name).await?;
        Ok(Response::new(pa::Empty {}))
    }

    async fn list_host_subnets(
        &self,
        _: Request<pa::Empty>,
    ) -> Result<Response<pa::HostSubnetList>, Status> {
        let items = self
            .core
            .read(|c| {
                let plan = c.model.egress_plan();
                c.model
                    .nodes()
                    .map(|n| {
                        let mut h = host_subnet(n);
                        crate::resources::egress_ip::fill_host_subnet(&c.model, &plan, &mut h);
                        h
                    })
                    .collect()
            })
            .await?;
        Ok(Response::new(pa::HostSubnetList { items }))
    }

    async fn create_namespace(
        &self,
        r: Request<pa::NameRequest>,
    ) -> Result<Response<pa::NetNamespace>, Status> {
        let n = ops::create_namespace(&self.core, r.into_inner().name).await?;
        Ok(Response::new(netns(&n)))
    }

    async fn delete_namespace(
        &self,
        r: Request<pa::NameRequest>,
    ) -> Result<Response<pa::Empty>, Status> {
        ops::delete_namespace(&self.core, r.into_inner().name).await?;
        Ok(Response::new(pa::Empty {}))
    }

    async fn list_net_namespaces(
        &self,
        _: Request<pa::Empty>,
    ) -> Result<Response<pa::NetNamespaceList>, Status> {
        let items = self
            .core
            .read(|c| {
                let plan = c.model.egress_plan();
                c.model
                    .namespaces()
                    .map(|n| {
                        let mut v = netns(&n);
                        crate::resources::egress_ip::fill_net_namespace(&c.model, &plan, &mut v);
                        v
                    })
                    .collect()
            })
            .await?;
        Ok(Response::new(pa::NetNamespaceList { items }))
    }

    async fn attach_pod(
        &self,
        r: Request<pa::AttachPodRequest>,
    ) -> Result<Response<pa::Pod>, Status> {
        let r = r.into_inner();
        let ports: Vec<(String, String, u32)> = r
            .ports
            .iter()
            .map(|p| (p.name.clone(), p.protocol.clone(), p.container_port))
            .collect();
        let meta = netpol::pod_meta(r.labels, &ports).map_err(ApiError::Invalid)?;
        let out = policy_ops::attach_pod_then(
            &self.core,
            ops::PodRequest {
                node: r.node,
                namespace: r.namespace,
                name: r.name,
                port_name: r.port_name,
                ofport: r.ofport,
            },
            meta,
            pod,
        )
        .await?;
        Ok(Response::new(out))
    }

    async fn detach_pod(&self, r: Request<pa::PodRef>) -> Result<Response<pa::Empty>, Status> {
        let r = r.into_inner();
        let existed =
            ops::detach_pod(&self.core, r.namespace.clone(), r.name.clone(), None).await?;
        if !existed {
            return Err(
                ApiError::NotFound(format!("pod {}/{} not found", r.namespace, r.name)).into(),
            );
        }
        Ok(Response::new(pa::Empty {}))
    }

    async fn list_pods(&self, _: Request<pa::Empty>) -> Result<Response<pa::PodList>, Status> {
        let items = self
            .core
            .read(|c| {
                let mut v: Vec<pa::Pod> = c.model.pods().map(|p| pod(&c.model, p)).collect();
                v.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
                v
            })
            .await?;
        Ok(Response::new(pa::PodList { items }))
    }

    async fn join_projects(
        &self,
        r: Request<pa::JoinProjectsRequest>,
    ) -> Result<Response<pa::NetNamespaceList>, Status> {
        let r = r.into_inner();
        self.netid_selected(NetIdOp::Join { to: r.to }, r.namespaces, r.selector)
            .await
    }

    async fn isolate_projects(
        &self,
        r: Request<pa::ProjectsRequest>,
    ) -> Result<Response<pa::NetNamespaceList>, Status> {
        let r = r.into_inner();
        self.netid_selected(NetIdOp::Isolate, r.namespaces, r.selector)
            .await
    }

    async fn make_projects_global(
        &self,
        r: Request<pa::ProjectsRequest>,
    ) -> Result<Response<pa::NetNamespaceList>, Status> {
        let r = r.into_inner();
        self.netid_selected(NetIdOp::Global, r.namespaces, r.selector)
            .await
    }

    async fn list_switches(
        &self,
        _: Request<pa::Empty>,
    ) -> Result<Response<pa::SwitchList>, Status> {
        // A node's switch is listed under the datapath id the node registered, connected or
        // not; an unknown datapath under its own.
        let statuses = self
            .core
            .read(|c| {
                c.switch_statuses()
                    .into_iter()
                    .map(|s| {
                        let registered = (!s.unknown)
                            .then(|| c.model.node(&s.node).map(|n| n.dpid))
                            .flatten();
                        (s, registered)
                    })
                    .collect::<Vec<_>>()
            })
            .await?;
        let items = statuses
            .iter()
            .map(|(s, registered)| pa::Switch {
                node: s.node.clone(),
                dpid: registered.unwrap_or_else(|| s.dpid.load(Ordering::Relaxed)),
                connected: s.connected.load(Ordering::Relaxed),
                synced: s.synced.load(Ordering::Relaxed),
                flows: s.installed_flows.load(Ordering::Relaxed),
                errors: s.errors.load(Ordering::Relaxed),
                desired_flows: s.desired_flows.load(Ordering::Relaxed),
                peer: s.peer.lock().map(|p| p.clone()).unwrap_or_default(),
                last_error: s.last_error.lock().map(|p| p.clone()).unwrap_or_default(),
                unknown: s.unknown,
                role: s.role.lock().map(|r| r.clone()).unwrap_or_default(),
                audit: s.audit.lock().map(|a| a.clone()).unwrap_or_default(),
            })
            .collect();
        Ok(Response::new(pa::SwitchList { items }))
    }

    async fn get_controllers(
        &self,
        _: Request<pa::Empty>,
    ) -> Result<Response<pa::ControllerList>, Status> {
        let (lead, datastore, statuses) = self
            .core
            .read(|c| (c.leadership(), c.store_name(), c.switch_statuses()))
            .await?;
        let Some(view) = lead.view().await else {
            // No other replica can exist: this one, with the switches connected to it.
            let switches = statuses
                .iter()
                .filter(|s| s.connected.load(Ordering::Relaxed))
                .map(|s| pa::SwitchRole {
                    switch: if s.unknown {
                        format!("{:#018x}", s.dpid.load(Ordering::Relaxed))
                    } else {
                        s.node.clone()
                    },
                    role: "equal".into(),
                })
                .collect();
            return Ok(Response::new(pa::ControllerList {
                datastore: datastore.into(),
                leader: String::new(),
                generation: 0,
                replicas: vec![pa::ControllerReplica {
                    id: "controller".into(),
                    state: "alone".into(),
                    this: true,
                    switches,
                    ..Default::default()
                }],
            }));
        };
        let view = view.map_err(|e| {
            Status::unavailable(format!(
                "the replicas could not be read from the datastore: {e} (switches keep their flows; retry when it is back)"
            ))
        })?;
        let me = self.core.read(|c| c.replica_id()).await?;
        let replicas = view
            .replicas
            .into_iter()
            .map(|r| pa::ControllerReplica {
                this: Some(&r.id) == me.as_ref(),
                state: if r.id == view.leader {
                    "leader".into()
                } else {
                    "standby".into()
                },
                switches: r
                    .switches
                    .into_iter()
                    .map(|(switch, role)| pa::SwitchRole { switch, role })
                    .collect(),
                id: r.id,
                grpc: r.grpc,
                openflow: r.openflow,
                started: r.started,
            })
            .collect();
        Ok(Response::new(pa::ControllerList {
            datastore: datastore.into(),
            leader: view.leader,
            generation: view.generation,
            replicas,
        }))
    }

    async fn dump_flows(
        &self,
        r: Request<pa::DumpFlowsRequest>,
    ) -> Result<Response<pa::DumpFlowsReply>, Status> {
        let r = r.into_inner();
        let node = r.node.clone();
        let (desired, handle) = self
            .core
            .read(move |c: &mut Core| (c.node_flowset(&node), c.reconciler(&node)))
            .await?;
        // What the switch must hold: the pipeline's flows and the digest marker of table 253
        // that the reconciler writes with them (docs/pipeline.md).
        let desired = desired?;
        let desired = topology::pipeline::marker::with_marker(
            &desired,
            &topology::pipeline::marker::FlowSetDigest::of(&desired),
        );
        let view = pa::FlowView::try_from(r.view).unwrap_or(pa::FlowView::Desired);
        let lines = match view {
            pa::FlowView::Desired => flow_lines(&desired),
            pa::FlowView::Installed | pa::FlowView::Diff => {
                let h = handle.ok_or_else(|| {
                    ApiError::NotFound(format!("node {:?} has no switch", r.node))
                })?;
                let (tx, rx) = oneshot::channel();
                h.tx.send(ReconcileCmd::ReadInstalled { reply: tx })
                    .map_err(|_| ApiError::Unavailable("reconciler stopped".into()))?;
                let installed = rx
                    .await
                    .map_err(|_| ApiError::Unavailable("reconciler stopped".into()))??;
                if view == pa::FlowView::Installed {
                    flow_lines(&installed)
                } else {
                    diff_lines(&installed, &desired)
                }
            }
        };
        Ok(Response::new(pa::DumpFlowsReply { lines }))
    }

    async fn trace(
        &self,
        r: Request<pa::TraceRequest>,
    ) -> Result<Response<pa::TraceReply>, Status> {
        let r = r.into_inner();
        let reply = self.core.read(move |c: &mut Core| trace(c, &r)).await??;
        Ok(Response::new(reply))
    }

    async fn apply(
        &self,
        r: Request<pa::ApplyRequest>,
    ) -> Result<Response<pa::ApplyReply>, Status> {
        let results = crate::resources::apply::apply_yaml(&self.core, &r.into_inner().yaml).await?;
        Ok(Response::new(pa::ApplyReply { results }))
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(&self, _: Request<pa::Empty>) -> Result<Response<EventStream>, Status> {
        let rx = self.core.subscribe();
        let s = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map_ok();
        Ok(Response::new(Box::pin(s)))
    }

    async fn apply_network_policy(
        &self,
        r: Request<pa::NetworkPolicy>,
    ) -> Result<Response<pa::ApplyNetworkPolicyReply>, Status> {
        let reply =
            crate::resources::network_policy::requests::apply(&self.core, r.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn delete_network_policy(
        &self,
        r: Request<pa::PolicyRef>,
    ) -> Result<Response<pa::Empty>, Status> {
        let r = r.into_inner();
        policy_ops::delete_policy(&self.core, r.namespace, r.name).await?;
        Ok(Response::new(pa::Empty {}))
    }

    async fn list_network_policies(
        &self,
        r: Request<pa::ListNetworkPoliciesRequest>,
    ) -> Result<Response<pa::NetworkPolicyList>, Status> {
        let reply =
            crate::resources::network_policy::requests::list(&self.core, r.into_inner().namespace)
                .await?;
        Ok(Response::new(reply))
    }

    async fn apply_egress_network_policy(
        &self,
        r: Request<pa::EgressNetworkPolicy>,
    ) -> Result<Response<pa::ApplyEgressNetworkPolicyReply>, Status> {
        let reply =
            crate::resources::egress_firewall::dns::api_apply(&self.core, r.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn delete_egress_network_policy(
        &self,
        r: Request<pa::PolicyRef>,
    ) -> Result<Response<pa::Empty>, Status> {
        let r = r.into_inner();
        crate::resources::egress_firewall::delete(&self.core, r.namespace, r.name).await?;
        Ok(Response::new(pa::Empty {}))
    }

    async fn list_egress_network_policies(
        &self,
        r: Request<pa::ListNetworkPoliciesRequest>,
    ) -> Result<Response<pa::EgressNetworkPolicyList>, Status> {
        let reply =
            crate::resources::egress_firewall::dns::api_list(&self.core, r.into_inner().namespace)
                .await?;
        Ok(Response::new(reply))
    }

    async fn label_namespace(
        &self,
        r: Request<pa::LabelRequest>,
    ) -> Result<Response<pa::LabelReply>, Status> {
        let reply =
            crate::resources::network_policy::requests::label(&self.core, r.into_inner(), false)
                .await?;
        Ok(Response::new(reply))
    }

    async fn label_pod(
        &self,
        r: Request<pa::LabelRequest>,
    ) -> Result<Response<pa::LabelReply>, Status> {
        let reply =
            crate::resources::network_policy::requests::label(&self.core, r.into_inner(), true)
                .await?;
        Ok(Response::new(reply))
    }

    async fn patch_net_namespace(
        &self,
        r: Request<pa::PatchNetNamespaceRequest>,
    ) -> Result<Response<pa::NetNamespace>, Status> {
        let n =
            crate::resources::egress_ip::patch_net_namespace(&self.core, r.into_inner()).await?;
        Ok(Response::new(n))
    }

    async fn patch_host_subnet(
        &self,
        r: Request<pa::PatchHostSubnetRequest>,
    ) -> Result<Response<pa::HostSubnet>, Status> {
        let h = crate::resources::egress_ip::patch_host_subnet(&self.core, r.into_inner()).await?;
        Ok(Response::new(h))
    }

    async fn annotate_net_namespace(
        &self,
        r: Request<pa::AnnotateRequest>,
    ) -> Result<Response<pa::AnnotateReply>, Status> {
        let (info, changed) =
            crate::resources::multicast::annotate(&self.core, r.into_inner()).await?;
        Ok(Response::new(pa::AnnotateReply {
            netnamespace: Some(netns(&info)),
            changed,
        }))
    }

    async fn annotate_namespace(
        &self,
        r: Request<pa::AnnotateRequest>,
    ) -> Result<Response<pa::AnnotateReply>, Status> {
        let (info, changed) = crate::resources::audit::annotate(&self.core, r.into_inner()).await?;
        Ok(Response::new(pa::AnnotateReply {
            netnamespace: Some(netns(&info)),
            changed,
        }))
    }
}

/// Filtering lagged-receiver errors out of a broadcast stream.
trait FilterLagged {
    fn filter_map_ok(self) -> Pin<Box<dyn Stream<Item = Result<pa::Event, Status>> + Send>>;
}

impl FilterLagged for tokio_stream::wrappers::BroadcastStream<crate::core::Event> {
    fn filter_map_ok(self) -> Pin<Box<dyn Stream<Item = Result<pa::Event, Status>> + Send>> {
        use tokio_stream::StreamExt;
        Box::pin(self.filter_map(|r| {
            r.ok().map(|e| {
                Ok(pa::Event {
                    time_unix_ms: e.time_unix_ms,
                    kind: e.kind,
                    object: e.object,
                    message: e.message,
                })
            })
        }))
    }
}

/// The cluster-wide trace of one packet.
fn trace(c: &mut Core, r: &pa::TraceRequest) -> Result<pa::TraceReply, ApiError> {
    let (ns, name) = split_pod_ref(&r.from)?;
    let src = c
        .model
        .pod(&ns, &name)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("pod {ns}/{name} not found")))?;
    let dst_ip = if r.to.contains('/') {
        let (dns, dname) = split_pod_ref(&r.to)?;
        c.model
            .pod(&dns, &dname)
            .map(|p| p.ip)
            .ok_or_else(|| ApiError::NotFound(format!("pod {dns}/{dname} not found")))?
    } else {
        parse_ip("destination", &r.to)?
    };
    let packet = match r.protocol.as_str() {
        "" | "icmp" => Packet::ipv4(src.ofport, src.mac(), src.ip, dst_ip),
        "tcp" => Packet::l4(src.ofport, src.mac(), src.ip, dst_ip, 6, r.dst_port as u16),
        "udp" => Packet::l4(src.ofport, src.mac(), src.ip, dst_ip, 17, r.dst_port as u16),
        other => {
            return Err(ApiError::Invalid(format!(
                "protocol {other:?}: use icmp, tcp or udp"
            )))
        }
    };
    let flowsets = c.all_flowsets()?;
    let sim = Simulator::from_model(&c.model, &flowsets);
    let t = sim.trace(&src.node, packet);
    let mut steps = Vec::new();
    for s in &t.steps {
        let flow = flowsets.get(&s.node).and_then(|fs| {
            fs.table(s.table)
                .find(|f| Some(f.priority) == s.priority && f.cookie == s.cookie)
                .map(|f| f.to_string())
        });
        steps.push(pa::TraceStep {
            node: s.node.clone(),
            table: s.table as u32,
            priority: s.priority.unwrap_or(0) as u32,
            cookie: s.cookie,
            flow: flow.unwrap_or_default(),
            note: crate::resources::cookies::explain_cookie(&c.model, s.cookie),
        });
    }
    let pod_at = |node: &str, ofport: u32| {
        c.model
            .pods_on_node(node)
            .find(|p| p.ofport == ofport)
            .map(|p| p.key.to_string())
    };
    let mut verdicts = Vec::new();
    let mut allowed = false;
    for o in &t.outcomes {
        match o {
            Outcome::Delivered { node, ofport, port } => {
                allowed = true;
                let who = pod_at(node, *ofport).unwrap_or_else(|| port.clone());
                verdicts.push(format!("delivered to {who} on {node} (ofport {ofport})"));
            }
            Outcome::Host { node } => {
                allowed = true;
                verdicts.push(format!("to the host of {node} via tun0"));
            }
            Outcome::Dropped { node, by } => verdicts.push(format!(
                "dropped on {node} in table {} (priority {}, cookie {:#x})",
                by.table,
                by.priority
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "miss".into()),
                by.cookie
            )),
            Outcome::TunnelToUnknown { node, tun_dst } => verdicts.push(format!(
                "sent by {node} to unknown tunnel endpoint {tun_dst}"
            )),
            Outcome::UnknownPort { node, ofport } => verdicts.push(format!(
                "output on {node} to ofport {ofport}, which has no pod"
            )),
            Outcome::Loop { node } => verdicts.push(format!("loop detected on {node}")),
        }
    }
    let decided_by = steps.len().saturating_sub(1) as u32;
    let step_cookies: Vec<(u8, u64)> = t.steps.iter().map(|s| (s.table, s.cookie)).collect();
    let dropped_in = t.outcomes.iter().find_map(|o| match o {
        Outcome::Dropped { by, .. } => Some(by.table),
        _ => None,
    });
    if let Some(v) = crate::resources::network_policy::requests::policy_verdict(
        &c.model,
        &step_cookies,
        allowed,
        dropped_in,
    ) {
        verdicts.push(v);
    }
    Ok(pa::TraceReply {
        verdict: verdicts.join("; "),
        allowed,
        steps,
        decided_by,
    })
}

#[tonic::async_trait]
impl NodeApi for NodeService {
    async fn register_node(
        &self,
        r: Request<pn::RegisterNodeRequest>,
    ) -> Result<Response<pn::NodeConfig>, Status> {
        let r = r.into_inner();
        let ip = parse_ip(&format!("node {}: IP", r.name), &r.node_ip)?;
        let n = ops::add_node(&self.core, r.name, ip, r.dpid).await?;
        let c = self.core.read(|c| c.model.config().clone()).await?;
        Ok(Response::new(pn::NodeConfig {
            node: n.name.clone(),
            subnet: n.subnet.to_string(),
            gateway: n.gateway().to_string(),
            cluster_networks: c
                .cluster_networks
                .iter()
                .map(|e| e.cidr.to_string())
                .collect(),
            service_network: c.service_network.to_string(),
            mtu: c.mtu,
            vxlan_port: c.vxlan_port as u32,
            mode: format!("{:?}", c.mode).to_lowercase(),
            dpid: n.dpid,
        }))
    }

    async fn attach_pod(
        &self,
        r: Request<pn::AttachPodRequest>,
    ) -> Result<Response<pn::PodNetwork>, Status> {
        let r = r.into_inner();
        let ports: Vec<(String, String, u32)> = r
            .ports
            .iter()
            .map(|p| (p.name.clone(), p.protocol.clone(), p.container_port))
            .collect();
        let meta = netpol::pod_meta(r.labels, &ports).map_err(ApiError::Invalid)?;
        let (node, cfg, netid, p) = policy_ops::attach_pod_then(
            &self.core,
            ops::PodRequest {
                node: r.node,
                namespace: r.namespace,
                name: r.name,
                port_name: r.port_name,
                ofport: r.ofport,
            },
            meta,
            |m, p| {
                let node = m.node(&p.node).cloned();
                let cfg = m.config().clone();
                let netid = m.effective_netid(&p.key.namespace);
                (node, cfg, netid, p.clone())
            },
        )
        .await?;
        let node =
            node.ok_or_else(|| ApiError::NotFound(format!("node {:?} not found", p.node)))?;
        let gw = node.gateway().to_string();
        let mut routes = vec![pn::Route {
            destination: "0.0.0.0/0".into(),
            gateway: gw.clone(),
        }];
        routes.extend(cfg.cluster_networks.iter().map(|e| pn::Route {
            destination: e.cidr.to_string(),
            gateway: String::new(),
        }));
        routes.push(pn::Route {
            destination: "224.0.0.0/4".into(),
            gateway: String::new(),
        });
        Ok(Response::new(pn::PodNetwork {
            ip: p.ip.to_string(),
            prefix_len: node.subnet.prefix() as u32,
            gateway: gw,
            mac: mac_string(p.mac()),
            routes,
            mtu: cfg.mtu,
            netid,
            ofport: p.ofport,
        }))
    }

    async fn detach_pod(
        &self,
        r: Request<pn::DetachPodRequest>,
    ) -> Result<Response<pn::DetachPodReply>, Status> {
        let r = r.into_inner();
        let existed = ops::detach_pod(&self.core, r.namespace, r.name, Some(r.port_name)).await?;
        Ok(Response::new(pn::DetachPodReply { existed }))
    }

    type WatchEgressStream = crate::api::egress_watch::AssignmentStream;

    async fn watch_egress(
        &self,
        r: Request<pn::WatchEgressRequest>,
    ) -> Result<Response<Self::WatchEgressStream>, Status> {
        crate::api::egress_watch::watch(&self.core, r.into_inner().node).await
    }

    type WatchAuditStream = crate::api::audit_watch::SettingsStream;

    async fn watch_audit(
        &self,
        r: Request<pn::WatchAuditRequest>,
    ) -> Result<Response<Self::WatchAuditStream>, Status> {
        crate::api::audit_watch::watch(&self.core, r.into_inner().node).await
    }

    async fn lookup_pods(
        &self,
        r: Request<pn::LookupPodsRequest>,
    ) -> Result<Response<pn::LookupPodsReply>, Status> {
        crate::api::audit_watch::lookup(&self.core, r.into_inner().ips)
            .await
            .map(Response::new)
    }
}
