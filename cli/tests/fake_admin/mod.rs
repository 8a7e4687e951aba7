//! An in-process fake admin API server that records the requests it receives, and `ctl`, which
//! runs the real `flowmeshctl` against it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use proto::admin::admin_server::{Admin, AdminServer};
use proto::admin::{self, FlowView};
use tonic::{Request, Response, Status};

/// A request the fake server received.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Got {
    AddNode(admin::AddNodeRequest),
    DeleteNode(String),
    CreateNamespace(String),
    DeleteNamespace(String),
    Attach(admin::AttachPodRequest),
    Detach(admin::PodRef),
    Join(admin::JoinProjectsRequest),
    Isolate(Vec<String>),
    Global(Vec<String>),
    DumpFlows(String, i32),
    Trace(admin::TraceRequest),
    Apply(String),
    List(&'static str),
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) nodes: Vec<admin::HostSubnet>,
    pub(crate) namespaces: Vec<admin::NetNamespace>,
    pub(crate) pods: Vec<admin::Pod>,
    pub(crate) got: Vec<Got>,
}

/// In-memory admin API with canned behaviour.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) state: Mutex<State>,
}

impl Fake {
    pub(crate) fn seeded() -> Fake {
        let state = State {
            nodes: vec![
                admin::HostSubnet {
                    node: "node-2".into(),
                    node_ip: "192.168.1.12".into(),
                    subnet: "10.128.2.0/23".into(),
                    dpid: 0x2,
                    gateway: "10.128.2.1".into(),
                    ..Default::default()
                },
                admin::HostSubnet {
                    node: "node-1".into(),
                    node_ip: "192.168.1.11".into(),
                    subnet: "10.128.0.0/23".into(),
                    dpid: 0xa1,
                    gateway: "10.128.0.1".into(),
                    ..Default::default()
                },
            ],
            namespaces: vec![
                admin::NetNamespace {
                    name: "default".into(),
                    netid: 0,
                    ..Default::default()
                },
                admin::NetNamespace {
                    name: "blue".into(),
                    netid: 11,
                    ..Default::default()
                },
                admin::NetNamespace {
                    name: "red".into(),
                    netid: 12,
                    ..Default::default()
                },
            ],
            pods: vec![
                pod("red", "db", "node-2", "10.128.2.7", 7, 12),
                pod("blue", "web", "node-1", "10.128.0.5", 5, 11),
            ],
            got: Vec::new(),
        };
        Fake {
            state: Mutex::new(state),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn record(&self, g: Got) {
        self.lock().got.push(g);
    }

    pub(crate) fn got(&self) -> Vec<Got> {
        self.lock().got.clone()
    }
}

pub(crate) fn pod(
    ns: &str,
    name: &str,
    node: &str,
    ip: &str,
    ofport: u32,
    netid: u32,
) -> admin::Pod {
    admin::Pod {
        namespace: ns.into(),
        name: name.into(),
        node: node.into(),
        ip: ip.into(),
        mac: format!("0a:58:0a:80:00:{ofport:02x}"),
        ofport,
        netid,
        port_name: format!("veth-{name}"),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl Admin for Fake {
    async fn get_cluster_network(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<admin::ClusterNetwork>, Status> {
        Ok(Response::new(admin::ClusterNetwork {
            cluster_networks: vec![admin::ClusterNetworkEntry {
                cidr: "10.128.0.0/14".into(),
                host_prefix: 23,
            }],
            service_network: "172.30.0.0/16".into(),
            mode: "multitenant".into(),
            vxlan_port: 4789,
            mtu: 1450,
        }))
    }

    async fn add_node(
        &self,
        r: Request<admin::AddNodeRequest>,
    ) -> Result<Response<admin::HostSubnet>, Status> {
        let r = r.into_inner();
        self.record(Got::AddNode(r.clone()));
        let mut s = self.lock();
        if r.dpid == 0 {
            return Err(Status::invalid_argument("datapath id 0 is reserved"));
        }
        if s.nodes.iter().any(|n| n.node == r.name) {
            return Err(Status::already_exists(format!(
                "node {:?} already exists",
                r.name
            )));
        }
        let hs = admin::HostSubnet {
            node: r.name,
            node_ip: r.node_ip,
            subnet: "10.128.4.0/23".into(),
            dpid: r.dpid,
            gateway: "10.128.4.1".into(),
            ..Default::default()
        };
        s.nodes.push(hs.clone());
        Ok(Response::new(hs))
    }

    async fn delete_node(
        &self,
        r: Request<admin::NameRequest>,
    ) -> Result<Response<admin::Empty>, Status> {
        let name = r.into_inner().name;
        self.record(Got::DeleteNode(name.clone()));
        let mut s = self.lock();
        let before = s.nodes.len();
        s.nodes.retain(|n| n.node != name);
        if s.nodes.len() == before {
            // No message: the client must say what was not found itself.
            return Err(Status::not_found(""));
        }
        Ok(Response::new(admin::Empty {}))
    }

    async fn list_host_subnets(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<admin::HostSubnetList>, Status> {
        self.record(Got::List("hostsubnets"));
        Ok(Response::new(admin::HostSubnetList {
            items: self.lock().nodes.clone(),
        }))
    }

    async fn create_namespace(
        &self,
        r: Request<admin::NameRequest>,
    ) -> Result<Response<admin::NetNamespace>, Status> {
        let name = r.into_inner().name;
        self.record(Got::CreateNamespace(name.clone()));
        let mut s = self.lock();
        if name.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(Status::invalid_argument(format!(
                "namespace name {name:?} must be lower case"
            )));
        }
        if s.namespaces.iter().any(|n| n.name == name) {
            return Err(Status::already_exists(format!(
                "namespace {name:?} already exists"
            )));
        }
        let ns = admin::NetNamespace {
            name,
            netid: 13,
            ..Default::default()
        };
        s.namespaces.push(ns.clone());
        Ok(Response::new(ns))
    }

    async fn delete_namespace(
        &self,
        r: Request<admin::NameRequest>,
    ) -> Result<Response<admin::Empty>, Status> {
        let name = r.into_inner().name;
        self.record(Got::DeleteNamespace(name.clone()));
        let mut s = self.lock();
        let before = s.namespaces.len();
        s.namespaces.retain(|n| n.name != name);
        if s.namespaces.len() == before {
            return Err(Status::not_found(format!("namespace {name:?} not found")));
        }
        Ok(Response::new(admin::Empty {}))
    }

    async fn list_net_namespaces(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<admin::NetNamespaceList>, Status> {
        self.record(Got::List("netnamespaces"));
        Ok(Response::new(admin::NetNamespaceList {
            items: self.lock().namespaces.clone(),
        }))
    }

    async fn attach_pod(
        &self,
        r: Request<admin::AttachPodRequest>,
    ) -> Result<Response<admin::Pod>, Status> {
        let r = r.into_inner();
        self.record(Got::Attach(r.clone()));
        if r.name == "slow" {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let mut s = self.lock();
        let Some(netid) = s
            .namespaces
            .iter()
            .find(|n| n.name == r.namespace)
            .map(|n| n.netid)
        else {
            return Err(Status::not_found(format!(
                "namespace {:?} not found",
                r.namespace
            )));
        };
        if !s.nodes.iter().any(|n| n.node == r.node) {
            return Err(Status::not_found(format!("node {:?} not found", r.node)));
        }
        let p = admin::Pod {
            port_name: r.port_name.clone(),
            ..pod(
                &r.namespace,
                &r.name,
                &r.node,
                "10.128.0.9",
                if r.ofport == 0 { 9 } else { r.ofport },
                netid,
            )
        };
        s.pods.push(p.clone());
        Ok(Response::new(p))
    }

    async fn detach_pod(
        &self,
        r: Request<admin::PodRef>,
    ) -> Result<Response<admin::Empty>, Status> {
        let r = r.into_inner();
        self.record(Got::Detach(r.clone()));
        let mut s = self.lock();
        let before = s.pods.len();
        s.pods
            .retain(|p| !(p.namespace == r.namespace && p.name == r.name));
        if s.pods.len() == before {
            return Err(Status::not_found(format!(
                "pod {}/{} not found",
                r.namespace, r.name
            )));
        }
        Ok(Response::new(admin::Empty {}))
    }

    async fn list_pods(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<admin::PodList>, Status> {
        self.record(Got::List("pods"));
        Ok(Response::new(admin::PodList {
            items: self.lock().pods.clone(),
        }))
    }

    async fn join_projects(
        &self,
        r: Request<admin::JoinProjectsRequest>,
    ) -> Result<Response<admin::NetNamespaceList>, Status> {
        let r = r.into_inner();
        self.record(Got::Join(r.clone()));
        let mut s = self.lock();
        let netid = s
            .namespaces
            .iter()
            .find(|n| n.name == r.to)
            .map(|n| n.netid)
            .ok_or_else(|| Status::not_found(format!("namespace {:?} not found", r.to)))?;
        if let Some(missing) = r
            .namespaces
            .iter()
            .find(|n| !s.namespaces.iter().any(|x| &x.name == *n))
        {
            return Err(Status::not_found(format!(
                "namespace {missing:?} not found"
            )));
        }
        let mut changed = Vec::new();
        for n in s.namespaces.iter_mut() {
            if r.namespaces.contains(&n.name) {
                n.netid = netid;
                changed.push(n.clone());
            }
        }
        Ok(Response::new(admin::NetNamespaceList { items: changed }))
    }

    async fn isolate_projects(
        &self,
        r: Request<admin::ProjectsRequest>,
    ) -> Result<Response<admin::NetNamespaceList>, Status> {
        let r = r.into_inner();
        self.record(Got::Isolate(r.namespaces.clone()));
        let items = r
            .namespaces
            .iter()
            .enumerate()
            .map(|(i, n)| admin::NetNamespace {
                name: n.clone(),
                netid: 100 + i as u32,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(admin::NetNamespaceList { items }))
    }

    async fn make_projects_global(
        &self,
        r: Request<admin::ProjectsRequest>,
    ) -> Result<Response<admin::NetNamespaceList>, Status> {
        let r = r.into_inner();
        self.record(Got::Global(r.namespaces.clone()));
        let items = r
            .namespaces
            .iter()
            .map(|n| admin::NetNamespace {
                name: n.clone(),
                netid: 0,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(admin::NetNamespaceList { items }))
    }

    async fn list_switches(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<admin::SwitchList>, Status> {
        self.record(Got::List("switches"));
        Ok(Response::new(admin::SwitchList {
            items: vec![
                admin::Switch {
                    node: String::new(),
                    dpid: 0xdead,
                    connected: true,
                    unknown: true,
                    peer: "127.0.0.1:40001".into(),
                    ..Default::default()
                },
                admin::Switch {
                    node: "node-1".into(),
                    dpid: 0xa1,
                    connected: true,
                    synced: true,
                    flows: 42,
                    desired_flows: 42,
                    errors: 0,
                    peer: "127.0.0.1:40000".into(),
                    last_error: String::new(),
                    unknown: false,
                    role: "master".into(),
                    audit: "on".into(),
                },
                admin::Switch {
                    node: "node-2".into(),
                    dpid: 0x2,
                    connected: false,
                    synced: false,
                    flows: 0,
                    desired_flows: 40,
                    errors: 3,
                    peer: String::new(),
                    last_error: "OFPBAC_BAD_OUT_PORT".into(),
                    unknown: false,
                    role: String::new(),
                    audit: "off: the switch has no meters".into(),
                },
            ],
        }))
    }

    async fn get_controllers(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<admin::ControllerList>, Status> {
        self.record(Got::List("controllers"));
        Ok(Response::new(admin::ControllerList {
            datastore: "etcd".into(),
            leader: "c2".into(),
            generation: 77,
            replicas: vec![
                admin::ControllerReplica {
                    id: "c1".into(),
                    state: "standby".into(),
                    grpc: "127.0.0.1:7001".into(),
                    this: true,
                    switches: vec![admin::SwitchRole {
                        switch: "node-1".into(),
                        role: "slave".into(),
                    }],
                    ..Default::default()
                },
                admin::ControllerReplica {
                    id: "c2".into(),
                    state: "leader".into(),
                    switches: vec![admin::SwitchRole {
                        switch: "node-1".into(),
                        role: "master".into(),
                    }],
                    ..Default::default()
                },
            ],
        }))
    }

    async fn dump_flows(
        &self,
        r: Request<admin::DumpFlowsRequest>,
    ) -> Result<Response<admin::DumpFlowsReply>, Status> {
        let r = r.into_inner();
        self.record(Got::DumpFlows(r.node.clone(), r.view));
        if !self.lock().nodes.iter().any(|n| n.node == r.node) {
            return Err(Status::not_found(format!("node {:?} not found", r.node)));
        }
        let view = FlowView::try_from(r.view).map_err(|_| Status::invalid_argument("view"))?;
        if r.node == "node-2" && view != FlowView::Desired {
            return Err(Status::unavailable("the switch of node-2 is not connected"));
        }
        let lines = match view {
            FlowView::Desired => vec![
                " cookie=0x0, table=0, priority=100,ip actions=goto_table:20".to_string(),
                " cookie=0x0, table=0, priority=0 actions=drop".to_string(),
            ],
            FlowView::Installed => {
                vec![" cookie=0x0, table=0, priority=100,ip actions=goto_table:20".to_string()]
            }
            FlowView::Diff => vec!["+ cookie=0x0, table=0, priority=0 actions=drop".to_string()],
        };
        Ok(Response::new(admin::DumpFlowsReply { lines }))
    }

    async fn trace(
        &self,
        r: Request<admin::TraceRequest>,
    ) -> Result<Response<admin::TraceReply>, Status> {
        let r = r.into_inner();
        self.record(Got::Trace(r.clone()));
        if r.from == "nope/x" {
            return Err(Status::not_found("pod nope/x not found"));
        }
        Ok(Response::new(admin::TraceReply {
            verdict: "dropped on node-2 (netid 11 may not reach netid 12)".into(),
            allowed: false,
            decided_by: 2,
            steps: vec![
                admin::TraceStep {
                    node: "node-1".into(),
                    table: 0,
                    priority: 100,
                    cookie: 0,
                    flow: "priority=100,ip actions=goto_table:20".into(),
                    note: String::new(),
                },
                admin::TraceStep {
                    node: "node-2".into(),
                    table: 10,
                    priority: 100,
                    cookie: 0x1_0000_0002,
                    flow: "priority=100,tun_src=192.168.1.11 actions=goto_table:30".into(),
                    note: "from VXLAN".into(),
                },
                admin::TraceStep {
                    node: "node-2".into(),
                    table: 80,
                    priority: 0,
                    cookie: 0x50,
                    flow: "priority=0 actions=drop".into(),
                    note: String::new(),
                },
            ],
        }))
    }

    async fn apply(
        &self,
        r: Request<admin::ApplyRequest>,
    ) -> Result<Response<admin::ApplyReply>, Status> {
        let yaml = r.into_inner().yaml;
        self.record(Got::Apply(yaml.clone()));
        let objects =
            kinds::manifest::parse(&yaml).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if objects.iter().any(|o| o.describe() == "namespace/taken") {
            return Err(Status::invalid_argument(
                "document 1 (Namespace \"taken\"): netid 5 is in use by namespace \"red\"",
            ));
        }
        Ok(Response::new(admin::ApplyReply {
            results: objects
                .iter()
                .map(|o| format!("{} created", o.describe()))
                .collect(),
        }))
    }

    type WatchEventsStream = tokio_stream::Iter<std::vec::IntoIter<Result<admin::Event, Status>>>;

    async fn watch_events(
        &self,
        _: Request<admin::Empty>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let events = vec![
            Ok(admin::Event {
                time_unix_ms: 1_709_210_096_789,
                kind: "NamespaceCreated".into(),
                object: "namespace/blue".into(),
                message: "netid 11".into(),
            }),
            Ok(admin::Event {
                time_unix_ms: 1_709_210_097_000,
                kind: "PodAttached".into(),
                object: "pod/blue/web".into(),
                message: "10.128.0.5 on node-1".into(),
            }),
        ];
        Ok(Response::new(tokio_stream::iter(events)))
    }

    // NetworkPolicy and label calls are tested against the real controller
    // (tests/netpol_cli.rs); this fake does not serve them.
    async fn apply_network_policy(
        &self,
        _: Request<admin::NetworkPolicy>,
    ) -> Result<Response<admin::ApplyNetworkPolicyReply>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn delete_network_policy(
        &self,
        _: Request<admin::PolicyRef>,
    ) -> Result<Response<admin::Empty>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn list_network_policies(
        &self,
        _: Request<admin::ListNetworkPoliciesRequest>,
    ) -> Result<Response<admin::NetworkPolicyList>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn apply_egress_network_policy(
        &self,
        _: Request<admin::EgressNetworkPolicy>,
    ) -> Result<Response<admin::ApplyEgressNetworkPolicyReply>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn delete_egress_network_policy(
        &self,
        _: Request<admin::PolicyRef>,
    ) -> Result<Response<admin::Empty>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn list_egress_network_policies(
        &self,
        _: Request<admin::ListNetworkPoliciesRequest>,
    ) -> Result<Response<admin::EgressNetworkPolicyList>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn label_namespace(
        &self,
        _: Request<admin::LabelRequest>,
    ) -> Result<Response<admin::LabelReply>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn label_pod(
        &self,
        _: Request<admin::LabelRequest>,
    ) -> Result<Response<admin::LabelReply>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn patch_net_namespace(
        &self,
        _: Request<admin::PatchNetNamespaceRequest>,
    ) -> Result<Response<admin::NetNamespace>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn patch_host_subnet(
        &self,
        _: Request<admin::PatchHostSubnetRequest>,
    ) -> Result<Response<admin::HostSubnet>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn annotate_net_namespace(
        &self,
        _: Request<admin::AnnotateRequest>,
    ) -> Result<Response<admin::AnnotateReply>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn annotate_namespace(
        &self,
        _: Request<admin::AnnotateRequest>,
    ) -> Result<Response<admin::AnnotateReply>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }
}

/// A fake server on 127.0.0.1, stopped when dropped.
pub(crate) struct Server {
    pub(crate) url: String,
    pub(crate) fake: Arc<Fake>,
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) thread: Option<JoinHandle<()>>,
}

impl Server {
    pub(crate) fn start() -> Server {
        let fake = Arc::new(Fake::seeded());
        let svc = AdminServer::from_arc(fake.clone());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind 127.0.0.1:0");
                addr_tx
                    .send(listener.local_addr().expect("local addr"))
                    .expect("send addr");
                tonic::transport::Server::builder()
                    .add_service(svc)
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::TcpListenerStream::new(listener),
                        async {
                            let _ = stop_rx.await;
                        },
                    )
                    .await
                    .expect("serve");
            });
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server address");
        Server {
            url: format!("http://{addr}"),
            fake,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Run flowmeshctl with `--server` pointing here.
    pub(crate) fn ctl(&self, args: &[&str]) -> Run {
        let mut all = vec!["--server", self.url.as_str()];
        all.extend_from_slice(args);
        ctl(&all, None)
    }

    pub(crate) fn ctl_stdin(&self, args: &[&str], stdin: &str) -> Run {
        let mut all = vec!["--server", self.url.as_str()];
        all.extend_from_slice(args);
        ctl(&all, Some(stdin))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The result of one flowmeshctl run.
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "flowmeshctl failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    pub(crate) fn fails(&self, code: i32) -> &str {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stderr
    }
}

pub(crate) fn ctl(args: &[&str], stdin: Option<&str>) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowmeshctl"));
    cmd.args(args)
        .env_remove("FLOWMESH_SERVER")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn flowmeshctl");
    if let Some(text) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("flowmeshctl output");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

pub(crate) fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}
