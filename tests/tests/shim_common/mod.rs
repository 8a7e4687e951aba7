//! A fake controller node API for the shim tests: a tonic server implementing `NodeApi` with
//! an in-memory per-node IP allocator, recording every call, able to fail AttachPod on demand.
//! It listens inside the lab's controller namespace, so the shims reach it over the underlay.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use flowmesh_tests::cni::bind_tcp_in_netns;
use flowmesh_tests::NetnsLab;
use proto::node::node_api_server::{NodeApi, NodeApiServer};
use proto::node::{
    AttachPodRequest, DetachPodReply, DetachPodRequest, NodeConfig, PodNetwork, RegisterNodeRequest,
};
use tonic::{Request, Response, Status};

/// Cluster network handed out by the fake.
pub const CLUSTER_NETWORK: &str = "10.128.0.0/14";
/// Service network handed out by the fake.
pub const SERVICE_NETWORK: &str = "172.30.0.0/16";
/// Overlay MTU handed out by the fake.
pub const MTU: u32 = 1450;

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// RegisterNode.
    Register(RegisterNodeRequest),
    /// AttachPod.
    Attach(AttachPodRequest),
    /// DetachPod.
    Detach(DetachPodRequest),
}

/// The fake's state.
#[derive(Debug, Default)]
pub struct FakeState {
    /// Node name → node number (order of first registration, from 1).
    pub nodes: BTreeMap<String, u8>,
    /// (namespace, name) → (node, last octet) of attached pods.
    pub pods: BTreeMap<(String, String), (String, u8)>,
    /// Every call, in order.
    pub calls: Vec<Call>,
    /// When set, the next AttachPod fails with this status.
    pub fail_next_attach: Option<Status>,
}

impl FakeState {
    /// The node's subnet third octet: node names are `node<N>`, subnet 10.128.N.0/24.
    fn node_octet(name: &str) -> Option<u8> {
        name.strip_prefix("node")?.parse().ok()
    }

    /// Addresses of attached pods, by (namespace, name).
    pub fn pod_ips(&self) -> BTreeMap<(String, String), Ipv4Addr> {
        self.pods
            .iter()
            .filter_map(|(k, (node, host))| {
                Some((
                    k.clone(),
                    Ipv4Addr::new(10, 128, Self::node_octet(node)?, *host),
                ))
            })
            .collect()
    }
}

#[derive(Debug, Clone, Default)]
struct Fake {
    state: Arc<Mutex<FakeState>>,
}

fn lock(m: &Mutex<FakeState>) -> MutexGuard<'_, FakeState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[tonic::async_trait]
impl NodeApi for Fake {
    async fn register_node(
        &self,
        req: Request<RegisterNodeRequest>,
    ) -> Result<Response<NodeConfig>, Status> {
        let r = req.into_inner();
        let mut st = lock(&self.state);
        st.calls.push(Call::Register(r.clone()));
        let n = FakeState::node_octet(&r.name).ok_or_else(|| {
            Status::invalid_argument(format!("node name {:?} is not nodeN", r.name))
        })?;
        st.nodes.insert(r.name.clone(), n);
        Ok(Response::new(NodeConfig {
            node: r.name,
            subnet: format!("10.128.{n}.0/24"),
            gateway: format!("10.128.{n}.1"),
            cluster_networks: vec![CLUSTER_NETWORK.into()],
            service_network: SERVICE_NETWORK.into(),
            mtu: MTU,
            vxlan_port: 4789,
            mode: "multitenant".into(),
            dpid: r.dpid,
        }))
    }

    async fn attach_pod(
        &self,
        req: Request<AttachPodRequest>,
    ) -> Result<Response<PodNetwork>, Status> {
        let r = req.into_inner();
        let mut st = lock(&self.state);
        st.calls.push(Call::Attach(r.clone()));
        if let Some(s) = st.fail_next_attach.take() {
            return Err(s);
        }
        let n = *st.nodes.get(&r.node).ok_or_else(|| {
            Status::failed_precondition(format!("node {} not registered", r.node))
        })?;
        if r.ofport == 0 || r.port_name.is_empty() {
            return Err(Status::invalid_argument("no ofport/port name"));
        }
        let key = (r.namespace.clone(), r.name.clone());
        let host = match st.pods.get(&key) {
            Some((_, h)) => *h,
            None => {
                let used: Vec<u8> = st
                    .pods
                    .values()
                    .filter(|(node, _)| *node == r.node)
                    .map(|(_, h)| *h)
                    .collect();
                let h = (2..=254u8)
                    .find(|h| !used.contains(h))
                    .ok_or_else(|| Status::resource_exhausted("subnet full"))?;
                st.pods.insert(key, (r.node.clone(), h));
                h
            }
        };
        Ok(Response::new(PodNetwork {
            ip: format!("10.128.{n}.{host}"),
            prefix_len: 24,
            gateway: format!("10.128.{n}.1"),
            mac: String::new(),
            routes: Vec::new(),
            mtu: MTU,
            netid: 0,
            ofport: r.ofport,
        }))
    }

    async fn detach_pod(
        &self,
        req: Request<DetachPodRequest>,
    ) -> Result<Response<DetachPodReply>, Status> {
        let r = req.into_inner();
        let mut st = lock(&self.state);
        st.calls.push(Call::Detach(r.clone()));
        let existed = st.pods.remove(&(r.namespace, r.name)).is_some();
        Ok(Response::new(DetachPodReply { existed }))
    }

    type WatchEgressStream = tonic::codegen::BoxStream<proto::node::EgressAssignments>;

    /// The fake has no egress IPs to hand out: the shim keeps retrying and holds nothing.
    async fn watch_egress(
        &self,
        _: Request<proto::node::WatchEgressRequest>,
    ) -> Result<Response<Self::WatchEgressStream>, Status> {
        Err(Status::unimplemented("the fake node API has no egress IPs"))
    }

    type WatchAuditStream = tonic::codegen::BoxStream<proto::node::AuditSettings>;

    async fn watch_audit(
        &self,
        _: Request<proto::node::WatchAuditRequest>,
    ) -> Result<Response<Self::WatchAuditStream>, Status> {
        Err(Status::unimplemented(
            "the fake node API has no audit logging",
        ))
    }

    async fn lookup_pods(
        &self,
        _: Request<proto::node::LookupPodsRequest>,
    ) -> Result<Response<proto::node::LookupPodsReply>, Status> {
        Err(Status::unimplemented(
            "the fake node API has no audit logging",
        ))
    }
}

/// A running fake node API; stopped on drop.
pub struct FakeNodeApi {
    /// `http://<controller ns IP>:<port>`.
    pub url: String,
    state: Arc<Mutex<FakeState>>,
    rt: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl FakeNodeApi {
    /// Starts the fake in the lab's controller namespace.
    pub fn start(lab: &NetnsLab) -> Self {
        let addr = SocketAddr::new(lab.controller_ip().into(), 0);
        let std_listener =
            bind_tcp_in_netns(lab.controller_ns(), addr).expect("bind in the controller netns");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let port = std_listener.local_addr().expect("local addr").port();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let fake = Fake::default();
        let state = Arc::clone(&fake.state);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("tokio listener");
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let r = tonic::transport::Server::builder()
                .add_service(NodeApiServer::new(fake))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = r {
                eprintln!("fake node API: {e}");
            }
        });
        FakeNodeApi {
            url: format!("http://{}:{port}", lab.controller_ip()),
            state,
            rt,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// The state (calls, pods).
    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        lock(&self.state)
    }

    /// Stops serving (the port then refuses connections: "controller down").
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = self.rt.block_on(t);
        }
    }
}

impl Drop for FakeNodeApi {
    fn drop(&mut self) {
        self.stop();
    }
}
