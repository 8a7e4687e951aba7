//! Running the real flowmesh-controller binary against a real Open vSwitch sandbox.

#![allow(dead_code)]

use flowmesh_tests::{BridgeSpec, OvsSandbox};
use proto::admin::admin_client::AdminClient;
use proto::admin::{self as pa};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A controller process (killed on drop).
pub struct Controller {
    pub child: Option<Child>,
    pub data_dir: PathBuf,
    pub grpc: SocketAddr,
    pub openflow: SocketAddr,
    pub metrics: SocketAddr,
    /// The health listener (with `--health-listen`).
    pub health: Option<SocketAddr>,
    pub log: PathBuf,
    pub extra: Vec<String>,
}

/// The line a controller prints once its listeners are bound.
const STARTED: &str = "flowmesh-controller: gRPC on ";

/// The whole start-up lines of a log (a line still being written is not one yet).
pub fn started_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
        .filter(|l| l.starts_with(STARTED) && l.ends_with('\n'))
        .map(str::trim_end)
}

/// The address a start-up line gives after `after` ("gRPC on ", "OpenFlow on ", "metrics on
/// http://"): "flowmesh-controller: gRPC on A, OpenFlow on B, metrics on http://C/metrics".
pub fn announced(line: &str, after: &str) -> Option<SocketAddr> {
    line.split(after)
        .nth(1)?
        .split([',', '/'])
        .next()?
        .trim()
        .parse()
        .ok()
}

impl Controller {
    /// Start a controller with `data_dir` on ports the kernel picks when it binds (port 0:
    /// no window in which another test could take a port chosen beforehand); the addresses
    /// come from the controller's start-up line.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Controller {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut c = Controller {
            child: None,
            data_dir: data_dir.to_path_buf(),
            grpc: any,
            openflow: any,
            metrics: any,
            health: None,
            log: data_dir.with_extension("log"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        c.spawn();
        c
    }

    /// (Re)start the process on the same ports (the first time: any) and data dir, and wait
    /// until this process announces what it bound.
    pub fn spawn(&mut self) {
        let starts_before = started_lines(&self.log_text()).count();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--grpc-listen")
            .arg(self.grpc.to_string())
            .arg("--openflow-listen")
            .arg(self.openflow.to_string())
            .arg("--metrics-listen")
            .arg(self.metrics.to_string())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start flowmesh-controller");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let line = loop {
            let text = self.log_text();
            if let Some(l) = started_lines(&text).nth(starts_before) {
                break l.to_string();
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "controller did not start ({exited:?}); log:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr = |after: &str| -> SocketAddr {
            announced(&line, after)
                .unwrap_or_else(|| panic!("no address after {after:?} in {line:?}"))
        };
        self.grpc = addr("gRPC on ");
        self.openflow = addr("OpenFlow on ");
        self.metrics =
            announced(&line, "metrics on http://").unwrap_or_else(|| addr("metrics on https://"));
        self.health = announced(&line, "health on http://");
    }

    /// SIGKILL the process (no clean shutdown) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The OpenFlow target for switches.
    pub fn target(&self) -> String {
        format!("tcp:{}", self.openflow)
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An admin API client.
    pub async fn admin(&self) -> AdminClient<Channel> {
        AdminClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("connect admin API")
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- flowmesh-controller log ----\n{}", self.log_text());
        }
        self.kill9();
    }
}

/// A node's bridge: name, datapath id, pod ports (name, ofport).
pub type NodeSpec<'a> = (&'a str, u64, &'a [(&'a str, u32)]);

/// Sandbox bridges named after nodes, pointed at the controller.
pub fn sandbox(ctl: &Controller, nodes: &[NodeSpec<'_>]) -> OvsSandbox {
    sandbox_all(&[ctl], nodes)
}

/// Sandbox bridges named after nodes, each connected to every one of `ctls` (replicas).
pub fn sandbox_all(ctls: &[&Controller], nodes: &[NodeSpec<'_>]) -> OvsSandbox {
    let mut b = OvsSandbox::builder().controller_max_backoff_ms(1000);
    for c in ctls {
        b = b.controller(c.target());
    }
    for (name, dpid, pods) in nodes {
        let mut spec = BridgeSpec::new(*name, *dpid);
        for (p, ofport) in pods.iter() {
            spec = spec.pod(*p, *ofport);
        }
        b = b.bridge(spec);
    }
    b.start().expect("sandbox")
}

/// One counter from a controller's metrics endpoint (0 when it is absent or unreachable).
pub fn metric(c: &Controller, name: &str) -> u64 {
    flowmesh_tests::bench::scrape_metric(c.metrics, name)
}

/// The index in `cs` of the replica that leads, as `get controllers` through any live one
/// reports it; waits up to 20 s for an election.
pub async fn leader_of(cs: &[&Controller]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for c in cs.iter().filter(|c| c.child.is_some()) {
            let Ok(mut a) = AdminClient::connect(format!("http://{}", c.grpc)).await else {
                continue;
            };
            let Ok(l) = a.get_controllers(pa::Empty {}).await else {
                continue;
            };
            let l = l.into_inner();
            let grpc = l
                .replicas
                .iter()
                .find(|r| r.id == l.leader)
                .map(|r| r.grpc.clone());
            if let Some(i) = cs
                .iter()
                .position(|c| c.child.is_some() && Some(c.grpc.to_string()) == grpc)
            {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Register every node of `nodes` (underlay addresses 172.31.0.1, .2, ...).
pub async fn add_nodes(admin: &mut AdminClient<Channel>, nodes: &[NodeSpec<'_>]) {
    for (i, (name, dpid, _)) in nodes.iter().enumerate() {
        admin
            .add_node(pa::AddNodeRequest {
                name: name.to_string(),
                node_ip: format!("172.31.0.{}", i + 1),
                dpid: *dpid,
            })
            .await
            .expect("add node");
    }
}

/// Sorted flow lines the controller wants on `node`.
pub async fn desired(admin: &mut AdminClient<Channel>, node: &str) -> Vec<String> {
    let r = admin
        .dump_flows(pa::DumpFlowsRequest {
            node: node.into(),
            view: pa::FlowView::Desired as i32,
        })
        .await
        .expect("dump-flows")
        .into_inner();
    let mut v: Vec<String> = r
        .lines
        .into_iter()
        .filter(|l| !l.starts_with("group_id"))
        .collect();
    v.sort();
    v
}

/// Wait until `f` is true.
pub async fn wait_for(what: &str, timeout: Duration, f: impl AsyncFnMut() -> bool) {
    wait_for_or(what, timeout, f, String::new).await
}

/// Wait until `f` is true; a time-out also says what `seen` reports then.
pub async fn wait_for_or(
    what: &str,
    timeout: Duration,
    mut f: impl AsyncFnMut() -> bool,
    seen: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out waiting for {what}{}", seen());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until every named switch is connected and synced.
pub async fn wait_synced(admin: &mut AdminClient<Channel>, nodes: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sw = admin
            .list_switches(pa::Empty {})
            .await
            .expect("switches")
            .into_inner()
            .items;
        let ok = nodes
            .iter()
            .all(|n| sw.iter().any(|s| s.node == *n && s.connected && s.synced));
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "switches never synced: {sw:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a `flowmeshctl` run did.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Assert exit 0; the stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Assert exit 1; the stderr.
    pub fn fails(&self) -> &str {
        assert_eq!(
            self.code,
            Some(1),
            "expected exit 1\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        &self.stderr
    }
}

/// Run the real `flowmeshctl` against `server` (`--server` is passed first).
pub fn ctl(server: SocketAddr, args: &[&str]) -> Run {
    let out = Command::new(flowmesh_tests::bins::flowmeshctl())
        .arg("--server")
        .arg(server.to_string())
        .args(args)
        .env_remove("FLOWMESH_SERVER")
        .stdin(Stdio::null())
        .output()
        .expect("run flowmeshctl");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Send `signal` (e.g. `TERM`) to a process we started, by PID, with kill(1).
pub fn send_signal(pid: u32, signal: &str) {
    let st = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -{signal} {pid} failed");
}

/// Whether every switch of `nodes` is connected to `c` and granted it `role` (its ROLE_REPLY,
/// as `get switches` shows it).
pub async fn granted_everywhere(c: &Controller, nodes: &[&str], role: &str) -> bool {
    let Ok(mut a) = AdminClient::connect(format!("http://{}", c.grpc)).await else {
        return false;
    };
    let Ok(sw) = a.list_switches(pa::Empty {}).await else {
        return false;
    };
    let sw = sw.into_inner().items;
    nodes.iter().all(|n| {
        sw.iter()
            .any(|s| s.node == *n && s.connected && s.role == role)
    })
}

/// Each bridge's connected controllers and their roles as Open vSwitch shows them.
pub fn roles_seen(sbx: &OvsSandbox, nodes: &[&str]) -> String {
    nodes
        .iter()
        .map(|n| match sbx.controller_roles(n) {
            Ok(r) => format!("\n  {n}: {r:?}"),
            Err(e) => format!("\n  {n}: {e}"),
        })
        .collect()
}

/// Whether OVS's database shows replica `target` as master, and every other connected one as
/// slave, on the bridge of every one of `nodes` (ovs-vswitchd refreshes these columns every
/// few seconds).
pub fn master_everywhere(sbx: &OvsSandbox, nodes: &[&str], target: &str) -> bool {
    nodes.iter().all(|n| {
        let roles = sbx.controller_roles(n).unwrap_or_default();
        roles.get(target).map(String::as_str) == Some("master")
            && roles.iter().all(|(t, r)| t == target || r == "slave")
    })
}

/// A pod to attach: (node, port on its bridge, namespace, ofport); it is named `NODE-PORT`.
pub type PodSpec<'a> = (&'a str, &'a str, &'a str, u32);

/// Attach `pods` through the admin API, as the nodes' shims do. An attach is refused
/// (UNAVAILABLE) until the pod's switch is connected: that is retried for a while. An
/// UNAVAILABLE answer can also mean "stored, but the switch did not acknowledge it in time":
/// a retry then finds the pod there (ALREADY_EXISTS), which is the earlier attempt's success.
pub async fn attach_pods(admin: &mut AdminClient<Channel>, pods: &[PodSpec<'_>]) {
    for (node, port, ns, ofport) in pods {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut retried = false;
        loop {
            let r = admin
                .attach_pod(pa::AttachPodRequest {
                    node: node.to_string(),
                    namespace: ns.to_string(),
                    name: format!("{node}-{port}"),
                    port_name: OvsSandbox::port_name(node, port),
                    ofport: *ofport,
                    ..Default::default()
                })
                .await;
            match r {
                Err(e) if e.code() == tonic::Code::Unavailable && Instant::now() < deadline => {
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) if retried && e.code() == tonic::Code::AlreadyExists => break,
                r => {
                    r.unwrap_or_else(|e| panic!("attach {node}-{port}: {e}"));
                    break;
                }
            }
        }
    }
}

/// Every namespace's NETID, as the controller lists them.
pub async fn netids(admin: &mut AdminClient<Channel>) -> std::collections::BTreeMap<String, u32> {
    admin
        .list_net_namespaces(pa::Empty {})
        .await
        .expect("list netnamespaces")
        .into_inner()
        .items
        .into_iter()
        .map(|n| (n.name, n.netid))
        .collect()
}

/// Wait until the bridge of every one of `nodes` holds exactly the flows the controller wants
/// there (re-read each round: the desired set may still be changing); on a timeout, fail with
/// the flows missing and the ones in excess.
pub async fn bridges_match(sbx: &OvsSandbox, admin: &mut AdminClient<Channel>, nodes: &[&str]) {
    for node in nodes {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let want = desired(admin, node).await;
            let have = sbx.dump_flows(node).expect("dump-flows");
            if have == want {
                break;
            }
            if Instant::now() > deadline {
                let missing: Vec<_> = want.iter().filter(|l| !have.contains(l)).collect();
                let extra: Vec<_> = have.iter().filter(|l| !want.contains(l)).collect();
                panic!(
                    "{node}: the bridge differs from the desired flows\nmissing: {missing:#?}\nextra: {extra:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A lab PKI made by the real `flowmeshctl certs lab` in `dir`: a CA, the controller's
/// certificate for 127.0.0.1, one per node (`node-NAME.pem`), `admin-admin` and
/// `read-only-viewer` (each with its `-key.pem`).
pub fn lab_pki(dir: &Path, nodes: &[&str]) -> PathBuf {
    let mut cmd = Command::new(flowmesh_tests::bins::flowmeshctl());
    cmd.args(["certs", "lab", "--dir"])
        .arg(dir)
        .args(["--san", "127.0.0.1", "--days", "2"]);
    for n in nodes {
        cmd.args(["--node", n]);
    }
    let out = cmd.output().expect("run flowmeshctl certs lab");
    assert!(
        out.status.success(),
        "flowmeshctl certs lab: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

/// The controller flags serving the gRPC APIs over TLS with client certificates of `pki`.
pub fn grpc_tls_args(pki: &Path) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "--grpc-tls-cert".into(),
        f("controller.pem"),
        "--grpc-tls-key".into(),
        f("controller-key.pem"),
        "--grpc-client-ca".into(),
        f("ca.pem"),
    ]
}

/// A TLS channel to `addr` trusting `pki`'s CA, presenting the certificate `STEM.pem` (with
/// `STEM-key.pem`), e.g. `node-node-a` or `admin-admin`.
pub async fn tls_channel(addr: SocketAddr, pki: &Path, stem: &str) -> Channel {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let read = |f: String| std::fs::read(pki.join(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem".into())))
        .identity(Identity::from_pem(
            read(format!("{stem}.pem")),
            read(format!("{stem}-key.pem")),
        ));
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls config")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr} as {stem}: {e:?}"))
}

/// `GET path` in plaintext; the whole answer, status line first (empty when the connection
/// just closed).
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Wait until the controller's `/readyz` answers 200.
pub async fn wait_ready(ctl: &Controller, what: &str, timeout: Duration) {
    wait_for(what, timeout, async || {
        http_get(ctl.metrics, "/readyz")
            .await
            .starts_with("HTTP/1.1 200")
    })
    .await;
}
