//! End-to-end helpers: the real `flowmesh-controller` running inside a [`NetnsLab`]'s
//! controller namespace on the underlay, `flowmeshctl` run there against it, and small TCP
//! probes between namespaces (connect with a deadline, a listener that records peers).
//!
//! The controller binaries come from [`controller_bins`]: `$FLOWMESH_CONTROLLER_BIN_DIR` if
//! set, else `cargo build -p controller -p flowmeshctl --bin flowmesh-controller --bin flowmeshctl` into this
//! test's own target directory (a no-op when fresh), once per test process -- the same rule
//! as [`crate::cni::shim_bins`], so both use binaries of the same build.
//!
//! ```ignore
//! let lab = NetnsLab::builder().nodes(3).tun0(false).start()?;
//! let ctl = LabController::start(&lab, &ControllerOptions::multitenant())?;
//! ctl.ctl(&lab, &["namespace", "create", "red"])?;
//! let shim = start_shim(&lab, 1, &ctl.shim_options(&lab))?;
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::cni::{log_tail, ShimOptions};
use crate::error::{HarnessError, Result};
use crate::netns::NetnsLab;
use crate::tcp::{enter_netns, in_netns};

/// OpenFlow port the lab controller listens on (on the controller namespace's address).
pub const OPENFLOW_PORT: u16 = 6653;
/// gRPC port (admin + node API) the lab controller listens on.
pub const GRPC_PORT: u16 = 9650;
/// Metrics port of the lab controller.
pub const METRICS_PORT: u16 = 9651;

/// Paths of the controller binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerBins {
    /// `flowmesh-controller`.
    pub controller: PathBuf,
    /// `flowmeshctl`.
    pub ctl: PathBuf,
}

static BINS: OnceLock<std::result::Result<ControllerBins, String>> = OnceLock::new();

/// The controller binaries (see the module doc for where they come from).
pub fn controller_bins() -> Result<ControllerBins> {
    BINS.get_or_init(locate_or_build)
        .clone()
        .map_err(HarnessError::Invalid)
}

fn locate_or_build() -> std::result::Result<ControllerBins, String> {
    let dir = crate::bins::locate_or_build(
        "FLOWMESH_CONTROLLER_BIN_DIR",
        &[
            "-p",
            "controller",
            "-p",
            "flowmeshctl",
            "--bin",
            "flowmesh-controller",
            "--bin",
            "flowmeshctl",
        ],
        &["flowmesh-controller", "flowmeshctl"],
    )?;
    Ok(ControllerBins {
        controller: dir.join("flowmesh-controller"),
        ctl: dir.join("flowmeshctl"),
    })
}

/// `flowmeshctl certs lab` into `dir`: a CA, the controller's certificate for the lab's
/// controller address, one per node (`node1`...), `admin-admin` and `read-only-viewer`.
pub fn make_lab_pki(lab: &NetnsLab, dir: &Path) -> Result<()> {
    let bins = controller_bins()?;
    let san = lab.controller_ip().to_string();
    let mut args: Vec<String> = vec![
        "certs".into(),
        "lab".into(),
        "--dir".into(),
        dir.display().to_string(),
        "--san".into(),
        san,
        "--days".into(),
        "2".into(),
    ];
    for i in 1..=lab.nodes().len() {
        args.extend(["--node".into(), format!("node{i}")]);
    }
    let out = std::process::Command::new(&bins.ctl)
        .args(&args)
        .output()
        .map_err(|source| HarnessError::Io {
            op: "run flowmeshctl certs lab into",
            path: dir.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(HarnessError::CommandFailed {
            command: format!("flowmeshctl {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        });
    }
    Ok(())
}

/// How to start the lab controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerOptions {
    /// The `--config` YAML (a `ClusterNetworkConfig`).
    pub config_yaml: String,
    /// `RUST_LOG` for the controller.
    pub log: String,
    /// Extra arguments.
    pub extra: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl ControllerOptions {
    /// multitenant mode, clusterNetworks 10.128.0.0/14 hostPrefix 23, services 172.30.0.0/16.
    pub fn multitenant() -> Self {
        ControllerOptions {
            config_yaml: "clusterNetworks:\n  - cidr: 10.128.0.0/14\n    hostPrefix: 23\n\
                          serviceNetwork: 172.30.0.0/16\nmode: multitenant\nvxlanPort: 4789\n\
                          mtu: 1450\n"
                .into(),
            log: "info".into(),
            extra: Vec::new(),
            env: Vec::new(),
        }
    }

    /// [`ControllerOptions::multitenant`] in networkpolicy mode.
    pub fn networkpolicy() -> Self {
        let mut o = Self::multitenant();
        o.config_yaml = o
            .config_yaml
            .replace("mode: multitenant", "mode: networkpolicy");
        o
    }
}

/// The real `flowmesh-controller`, a process started with [`NetnsLab::spawn_in`] inside the
/// lab's controller namespace (killed by PID with the lab, or by [`LabController::stop`]).
#[derive(Debug)]
pub struct LabController {
    /// Its PID while it runs.
    pub pid: Option<u32>,
    /// Log files, one per start.
    pub logs: Vec<PathBuf>,
    /// `--data-dir` (kept across restarts).
    pub data_dir: PathBuf,
    /// The `--config` file.
    pub config: PathBuf,
    /// gRPC address (admin + node API).
    pub grpc: SocketAddrV4,
    /// OpenFlow address.
    pub openflow: SocketAddrV4,
    /// Metrics address.
    pub metrics: SocketAddrV4,
    /// The lab's certificates (`flowmeshctl certs lab`): the controller serves both APIs and
    /// OpenFlow over TLS with them, each shim and switch uses its node's, `ctl` the admin's.
    pub pki: PathBuf,
    opts: ControllerOptions,
}

impl LabController {
    /// Writes the config, starts the controller in the lab's controller namespace and waits
    /// until its gRPC port accepts connections.
    pub fn start(lab: &NetnsLab, opts: &ControllerOptions) -> Result<Self> {
        Self::start_replica(lab, opts, 0, None)
    }

    /// Replica `i` of several sharing one datastore (`opts.extra` names it): its own data
    /// directory and ports (the standard ones + 10 × `i`) on the controller address, and the
    /// lab certificates of `pki` (replica 0's) when given, else new ones.
    pub fn start_replica(
        lab: &NetnsLab,
        opts: &ControllerOptions,
        i: u16,
        pki: Option<&Path>,
    ) -> Result<Self> {
        let dir = match i {
            0 => lab.run_dir().join("controller"),
            i => lab.run_dir().join(format!("controller-{i}")),
        };
        std::fs::create_dir_all(&dir).map_err(|source| HarnessError::Io {
            op: "create",
            path: dir.clone(),
            source,
        })?;
        let config = dir.join("cluster.yaml");
        std::fs::write(&config, &opts.config_yaml).map_err(|source| HarnessError::Io {
            op: "write",
            path: config.clone(),
            source,
        })?;
        let ip = lab.controller_ip();
        let pki = match pki {
            Some(p) => p.to_path_buf(),
            None => {
                let p = dir.join("pki");
                make_lab_pki(lab, &p)?;
                p
            }
        };
        let mut c = LabController {
            pid: None,
            logs: Vec::new(),
            data_dir: dir.join("data"),
            config,
            grpc: SocketAddrV4::new(ip, GRPC_PORT + 10 * i),
            openflow: SocketAddrV4::new(ip, OPENFLOW_PORT + 10 * i),
            metrics: SocketAddrV4::new(ip, METRICS_PORT + 10 * i),
            pki,
            opts: opts.clone(),
        };
        c.spawn(lab)?;
        Ok(c)
    }

    /// (Re)starts the process with the same data dir and addresses.
    pub fn spawn(&mut self, lab: &NetnsLab) -> Result<()> {
        let bins = controller_bins()?;
        let metrics = self.metrics.to_string();
        let mut args: Vec<String> = vec![
            "--config".into(),
            self.config.display().to_string(),
            "--data-dir".into(),
            self.data_dir.display().to_string(),
            "--openflow-listen".into(),
            self.openflow.to_string(),
            "--grpc-listen".into(),
            self.grpc.to_string(),
            "--metrics-listen".into(),
            metrics,
        ];
        let pem = |f: &str| self.pki.join(f).display().to_string();
        for (flag, file) in [
            ("--grpc-tls-cert", "controller.pem"),
            ("--grpc-tls-key", "controller-key.pem"),
            ("--grpc-client-ca", "ca.pem"),
            ("--openflow-tls-cert", "controller.pem"),
            ("--openflow-tls-key", "controller-key.pem"),
            ("--openflow-ca", "ca.pem"),
            // Metrics on the lab address: TLS with client certificates, as in production.
            ("--metrics-tls-cert", "controller.pem"),
            ("--metrics-tls-key", "controller-key.pem"),
            ("--metrics-client-ca", "ca.pem"),
        ] {
            args.extend([flag.to_string(), pem(file)]);
        }
        args.extend(self.opts.extra.iter().cloned());
        let arg_ref: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut env = vec![("RUST_LOG", self.opts.log.as_str())];
        env.extend(self.opts.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let p = lab.spawn_in(
            lab.controller_ns(),
            &bins.controller.display().to_string(),
            &arg_ref,
            &env,
        )?;
        self.pid = Some(p.pid);
        self.logs.push(p.log.clone());
        let grpc = SocketAddr::V4(self.grpc);
        let timeout = Duration::from_secs(30);
        let t0 = Instant::now();
        loop {
            let up = in_netns(lab.controller_ns(), move || {
                Ok(TcpStream::connect_timeout(&grpc, Duration::from_millis(200)).is_ok())
            })?;
            if up {
                return Ok(());
            }
            if let Some(status) = lab.process_exited(p.pid) {
                self.pid = None;
                return Err(HarnessError::DaemonDied {
                    daemon: "flowmesh-controller".into(),
                    status: status.to_string(),
                    log_tail: log_tail(&p.log, 30),
                });
            }
            if t0.elapsed() > timeout {
                return Err(HarnessError::Timeout {
                    what: format!("flowmesh-controller gRPC on {grpc}"),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process (SIGTERM, then SIGKILL) by PID.
    pub fn stop(&mut self, lab: &NetnsLab) {
        if let Some(pid) = self.pid.take() {
            lab.stop_process(pid);
        }
    }

    /// SIGKILLs the process by PID (no clean shutdown: a leader does not resign).
    pub fn kill9(&mut self, lab: &NetnsLab) {
        if let Some(pid) = self.pid.take() {
            lab.kill_process(pid);
        }
    }

    /// Node API URL for shims.
    pub fn node_api_url(&self) -> String {
        format!("https://{}", self.grpc)
    }

    /// OpenFlow target for bridges (TLS: the switch presents its node's certificate).
    pub fn openflow_target(&self) -> String {
        format!("ssl:{}", self.openflow)
    }

    /// Shim options pointing at this controller (node API and OpenFlow target).
    pub fn shim_options(&self) -> ShimOptions {
        Self::shim_options_all(&[self])
    }

    /// Shim options pointing at every replica of `ctls` (comma-separated node API URLs and
    /// OpenFlow targets; the certificates of the first).
    pub fn shim_options_all(ctls: &[&LabController]) -> ShimOptions {
        let join = |f: &dyn Fn(&LabController) -> String| {
            ctls.iter().map(|c| f(c)).collect::<Vec<_>>().join(",")
        };
        let first = ctls[0];
        let mut o = ShimOptions::new(join(&|c| c.node_api_url()));
        o.openflow_target = Some(join(&|c| c.openflow_target()));
        o.pki = Some(first.pki.clone());
        o.env = vec![("RUST_LOG".into(), "info".into())];
        o
    }

    /// The tail of the current (last) log.
    pub fn log_tail(&self, n: usize) -> String {
        self.logs.last().map(|l| log_tail(l, n)).unwrap_or_default()
    }

    /// Runs `flowmeshctl --server <grpc> ARGS` inside the controller namespace; any exit.
    pub fn ctl_output(&self, lab: &NetnsLab, args: &[&str]) -> Result<Output> {
        self.ctl_output_as(lab, "admin-admin", args)
    }

    /// Its `/metrics` text, read over HTTPS from the controller's namespace with the lab's
    /// read-only certificate (metrics off loopback need one).
    pub fn metrics_text(&self, lab: &NetnsLab) -> Result<String> {
        https_get(
            lab.controller_ns(),
            self.metrics,
            "/metrics",
            &TlsClientFiles::from_pki(&self.pki, "read-only-viewer"),
            Duration::from_secs(5),
        )
    }

    /// Like [`LabController::ctl_output`] with the credentials `PKI/STEM.pem` (e.g.
    /// `read-only-viewer`, `node-node1`).
    pub fn ctl_output_as(&self, lab: &NetnsLab, stem: &str, args: &[&str]) -> Result<Output> {
        let bins = controller_bins()?;
        let server = format!("https://{}", self.grpc);
        let ca = self.pki.join("ca.pem").display().to_string();
        let cert = self.pki.join(format!("{stem}.pem")).display().to_string();
        let key = self
            .pki
            .join(format!("{stem}-key.pem"))
            .display()
            .to_string();
        let mut all = vec![
            "--server",
            server.as_str(),
            "--timeout",
            "20s",
            "--ca",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
        ];
        all.extend_from_slice(args);
        lab.exec_in(lab.controller_ns(), &bins.ctl.display().to_string(), &all)
    }

    /// Like [`LabController::ctl_output`] but a non-zero exit is an error; returns stdout.
    pub fn ctl(&self, lab: &NetnsLab, args: &[&str]) -> Result<String> {
        let out = self.ctl_output(lab, args)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(HarnessError::CommandFailed {
                command: format!("flowmeshctl {}", args.join(" ")),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                stdout,
            });
        }
        Ok(stdout)
    }

    /// `flowmeshctl ARGS -o json`, parsed.
    pub fn ctl_json(&self, lab: &NetnsLab, args: &[&str]) -> Result<serde_json::Value> {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-o", "json"]);
        let text = self.ctl(lab, &all)?;
        serde_json::from_str(text.trim()).map_err(|e| HarnessError::Parse {
            what: format!("flowmeshctl {} -o json", args.join(" ")),
            detail: format!("{e}: {text}"),
        })
    }

    /// Waits until every named node's switch is connected and synced (`get switches`).
    pub fn wait_synced(&self, lab: &NetnsLab, nodes: &[&str], timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            let sw = self.ctl_json(lab, &["get", "switches"])?;
            let ok = nodes.iter().all(|n| {
                sw.as_array().is_some_and(|a| {
                    a.iter()
                        .any(|s| s["node"] == *n && s["connected"] == true && s["synced"] == true)
                })
            });
            if ok {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                return Err(HarnessError::Timeout {
                    what: format!("switches {nodes:?} connected and synced: {sw}"),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Tell the thread that started a server whether its socket is bound (an error goes back to
/// it); the socket, when it is.
pub fn report_bound<T>(tx: &std::sync::mpsc::Sender<Result<()>>, bound: Result<T>) -> Option<T> {
    match bound {
        Ok(s) => {
            let _ = tx.send(Ok(()));
            Some(s)
        }
        Err(e) => {
            let _ = tx.send(Err(e));
            None
        }
    }
}

/// Tries a TCP connection from namespace `ns` to `dst` within `timeout`; on success sends
/// `payload`, reads until EOF, and returns what the server answered (None: no connection).
pub fn tcp_probe(
    ns: &str,
    dst: SocketAddrV4,
    payload: &[u8],
    timeout: Duration,
) -> Result<Option<Vec<u8>>> {
    let payload = payload.to_vec();
    in_netns(ns, move || {
        let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::V4(dst), timeout) else {
            return Ok(None);
        };
        let io = |source| HarnessError::Net {
            context: format!("TCP exchange with {dst}"),
            source,
        };
        s.set_read_timeout(Some(timeout)).map_err(io)?;
        s.set_write_timeout(Some(timeout)).map_err(io)?;
        s.write_all(&payload).map_err(io)?;
        s.shutdown(std::net::Shutdown::Write).map_err(io)?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).map_err(io)?;
        Ok(Some(buf))
    })
}

/// `GET path` over HTTP/1.1 (`Connection: close`) from namespace `ns`; returns the body.
/// Unlike [`tcp_probe`] it does not half-close: HTTP servers may drop a half-closed client
/// before answering.
pub fn http_get(ns: &str, addr: SocketAddrV4, path: &str, timeout: Duration) -> Result<String> {
    let req = http_request(addr, path);
    in_netns(ns, move || {
        let io = |source| HarnessError::Net {
            context: format!("HTTP GET {addr}"),
            source,
        };
        let mut s = TcpStream::connect_timeout(&SocketAddr::V4(addr), timeout).map_err(io)?;
        s.set_read_timeout(Some(timeout)).map_err(io)?;
        s.write_all(req.as_bytes()).map_err(io)?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).map_err(io)?;
        http_body(addr, &req, &buf)
    })
}

/// Client credentials for [`https_get`]: the CA that signed the server's certificate and a
/// client certificate with its key (PEM files, e.g. a lab PKI's `ca.pem`, `STEM.pem`,
/// `STEM-key.pem`).
#[derive(Clone, Debug)]
pub struct TlsClientFiles {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The client certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl TlsClientFiles {
    /// `PKI/ca.pem`, `PKI/STEM.pem` and `PKI/STEM-key.pem`.
    pub fn from_pki(pki: &Path, stem: &str) -> Self {
        TlsClientFiles {
            ca: pki.join("ca.pem"),
            cert: pki.join(format!("{stem}.pem")),
            key: pki.join(format!("{stem}-key.pem")),
        }
    }

    fn client_config(&self) -> Result<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |what: &Path, e: &dyn std::fmt::Display| HarnessError::Parse {
            what: what.display().to_string(),
            detail: e.to_string(),
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca).map_err(|e| bad(&self.ca, &e))? {
            roots
                .add(c.map_err(|e| bad(&self.ca, &e))?)
                .map_err(|e| bad(&self.ca, &e))?;
        }
        let chain = CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| bad(&self.cert, &e))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| bad(&self.cert, &e))?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| bad(&self.key, &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&self.ca, &e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad(&self.cert, &e))
    }
}

/// `GET path` over HTTPS with a client certificate, from namespace `ns`; returns the body.
/// The server's certificate must name `addr`'s IP address.
pub fn https_get(
    ns: &str,
    addr: SocketAddrV4,
    path: &str,
    tls: &TlsClientFiles,
    timeout: Duration,
) -> Result<String> {
    let req = http_request(addr, path);
    let cfg = Arc::new(tls.client_config()?);
    in_netns(ns, move || {
        let io = |source| HarnessError::Net {
            context: format!("HTTPS GET {addr}"),
            source,
        };
        let server =
            rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::V4(*addr.ip()).into());
        let conn = rustls::ClientConnection::new(cfg, server).map_err(|e| HarnessError::Parse {
            what: format!("TLS to {addr}"),
            detail: e.to_string(),
        })?;
        let s = TcpStream::connect_timeout(&SocketAddr::V4(addr), timeout).map_err(io)?;
        s.set_read_timeout(Some(timeout)).map_err(io)?;
        s.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut tls = rustls::StreamOwned::new(conn, s);
        tls.write_all(req.as_bytes()).map_err(io)?;
        let mut buf = Vec::new();
        match tls.read_to_end(&mut buf) {
            Ok(_) => {}
            // A server that closes without close_notify after the whole answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => {}
            Err(e) => return Err(io(e)),
        }
        http_body(addr, &req, &buf)
    })
}

fn http_request(addr: SocketAddrV4, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
}

/// The body of a `200` answer to `req`, else the whole answer as the error.
fn http_body(addr: SocketAddrV4, req: &str, answer: &[u8]) -> Result<String> {
    let text = String::from_utf8_lossy(answer).into_owned();
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_owned()),
        _ => Err(HarnessError::Parse {
            what: format!("HTTP GET {addr}{}", req.lines().next().unwrap_or("")),
            detail: text,
        }),
    }
}

/// A TCP server in a namespace: for each connection (each on its own thread) it records the
/// peer address, reads the request until EOF and answers `<name> peer=<addr>`. Stops when
/// dropped.
#[derive(Debug)]
pub struct TcpServer {
    /// Where it listens.
    pub addr: SocketAddrV4,
    peers: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
}

impl TcpServer {
    /// Binds `ip:port` inside `ns` and serves on a background thread (which stays in `ns`).
    pub fn start(ns: &str, ip: Ipv4Addr, port: u16, name: &str) -> Result<Self> {
        let addr = SocketAddrV4::new(ip, port);
        let ns_owned = ns.to_owned();
        let name = name.to_owned();
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let peers = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (peers2, stop2) = (Arc::clone(&peers), Arc::clone(&stop));
        std::thread::Builder::new()
            .name(format!("tcp-server-{ns}"))
            .spawn(move || {
                let bound = enter_netns(&ns_owned).and_then(|()| {
                    let l = TcpListener::bind(addr).map_err(|source| HarnessError::Net {
                        context: format!("bind {addr} in {ns_owned}"),
                        source,
                    })?;
                    l.set_nonblocking(true)
                        .map_err(|source| HarnessError::Net {
                            context: "nonblocking listener".into(),
                            source,
                        })?;
                    Ok(l)
                });
                let Some(l) = report_bound(&tx, bound) else {
                    return;
                };
                while !stop2.load(Ordering::Relaxed) {
                    let (mut s, peer) = match l.accept() {
                        Ok(c) => c,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    peers2
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(peer);
                    // Each connection is served on its own thread: a client that never
                    // finishes its request (its FIN lost in a fault, its pod deleted) holds
                    // up only itself, never the connections behind it in the backlog.
                    let answer = format!("{name} peer={peer}");
                    let _ = std::thread::Builder::new()
                        .name("tcp-server-conn".into())
                        .spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                            let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                            let mut sink = Vec::new();
                            let _ = s.read_to_end(&mut sink);
                            let _ = s.write_all(answer.as_bytes());
                        });
                }
            })
            .map_err(|source| HarnessError::Net {
                context: "spawn a TCP server".into(),
                source,
            })?;
        rx.recv()
            .map_err(|_| HarnessError::Invalid("TCP server thread ended".into()))??;
        Ok(TcpServer { addr, peers, stop })
    }

    /// Peers seen so far.
    pub fn peers(&self) -> Vec<SocketAddr> {
        self.peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A UDP echo server inside a namespace: answers every datagram with `NAME:` + the datagram.
pub struct UdpEcho {
    /// Where it listens.
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
}

/// Binds UDP `addr` inside `ns` and calls `handle(socket, datagram, sender)` for every
/// datagram on a background thread (which stays in `ns`) until `stop` is set. Returns once the
/// socket is bound (or why it could not be).
pub fn serve_udp(
    ns: &str,
    addr: SocketAddrV4,
    thread_name: String,
    stop: Arc<AtomicBool>,
    mut handle: impl FnMut(&std::net::UdpSocket, &[u8], SocketAddr) + Send + 'static,
) -> Result<()> {
    let ns_owned = ns.to_owned();
    let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
    std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            let bound = enter_netns(&ns_owned).and_then(|()| {
                let s = std::net::UdpSocket::bind(addr).map_err(|source| HarnessError::Net {
                    context: format!("bind UDP {addr} in {ns_owned}"),
                    source,
                })?;
                s.set_read_timeout(Some(Duration::from_millis(50)))
                    .map_err(|source| HarnessError::Net {
                        context: "UDP read timeout".into(),
                        source,
                    })?;
                Ok(s)
            });
            let Some(s) = report_bound(&tx, bound) else {
                return;
            };
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, peer)) = s.recv_from(&mut buf) {
                    handle(&s, buf.get(..n).unwrap_or_default(), peer);
                }
            }
        })
        .map_err(|source| HarnessError::Net {
            context: "spawn a UDP server".into(),
            source,
        })?;
    rx.recv()
        .map_err(|_| HarnessError::Invalid("UDP server thread ended".into()))?
}

impl UdpEcho {
    /// Binds `ip:port` inside `ns` and echoes on a background thread (which stays in `ns`).
    pub fn start(ns: &str, ip: Ipv4Addr, port: u16, name: &str) -> Result<Self> {
        let addr = SocketAddrV4::new(ip, port);
        let prefix = format!("{name}:").into_bytes();
        let stop = Arc::new(AtomicBool::new(false));
        serve_udp(
            ns,
            addr,
            format!("udp-echo-{ns}"),
            Arc::clone(&stop),
            move |s, data, peer| {
                let mut reply = prefix.clone();
                reply.extend_from_slice(data);
                let _ = s.send_to(&reply, peer);
            },
        )?;
        Ok(UdpEcho { addr, stop })
    }
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sends `payload` over UDP from namespace `ns` to `dst` up to `tries` times (each waiting
/// `wait`); the first answer, or `None`.
pub fn udp_probe(
    ns: &str,
    dst: SocketAddrV4,
    payload: &[u8],
    tries: usize,
    wait: Duration,
) -> Result<Option<Vec<u8>>> {
    let payload = payload.to_vec();
    in_netns(ns, move || {
        let io = |source| HarnessError::Net {
            context: format!("UDP exchange with {dst}"),
            source,
        };
        let s = std::net::UdpSocket::bind("0.0.0.0:0").map_err(io)?;
        s.set_read_timeout(Some(wait)).map_err(io)?;
        let mut buf = [0u8; 2048];
        for _ in 0..tries.max(1) {
            s.send_to(&payload, dst).map_err(io)?;
            if let Ok((n, _)) = s.recv_from(&mut buf) {
                return Ok(Some(buf.get(..n).unwrap_or_default().to_vec()));
            }
        }
        Ok(None)
    })
}

/// The lab [`CniCluster`] runs on: 3 nodes, userspace datapath, no tun0 (the shims make
/// it), tunnel neighbours seeded. Panics when it cannot start.
pub fn cni_lab() -> NetnsLab {
    cni_lab_result().unwrap_or_else(|e| panic!("lab: {e}"))
}

/// [`cni_lab`], returning why it could not start instead of panicking.
pub fn cni_lab_result() -> Result<NetnsLab> {
    NetnsLab::builder()
        .nodes(3)
        .tun0(false)
        .seed_neighbors(true)
        .start()
}

/// A 3-node `NetnsLab` (userspace datapath, no tun0, neighbours seeded) with the real
/// controller and a shim per node, every switch synced: what the end-to-end tests with
/// `flowmesh-cni` pods start from. Test helpers: failures panic with the controller's log.
pub struct CniCluster {
    /// The lab.
    pub lab: NetnsLab,
    /// The controller.
    pub ctl: LabController,
    /// One shim per node (node `n` is `shims[n - 1]`).
    pub shims: Vec<crate::cni::NodeShim>,
}

impl CniCluster {
    /// Start the lab, the controller with `opts` and the shims, and wait until every switch
    /// is synced (30 s at most).
    pub fn start(opts: &ControllerOptions) -> CniCluster {
        Self::start_with(|_| opts.clone())
    }

    /// [`CniCluster::start`] with the controller's options made from the lab once it is up
    /// (for hosts the controller must know about, e.g. a DNS server on the underlay).
    pub fn start_with(opts: impl FnOnce(&NetnsLab) -> ControllerOptions) -> CniCluster {
        let lab = cni_lab();
        let opts = opts(&lab);
        let ctl = LabController::start(&lab, &opts).unwrap_or_else(|e| panic!("controller: {e}"));
        let so = ctl.shim_options();
        let shims = (1..=3)
            .map(|i| crate::cni::start_shim(&lab, i, &so).unwrap_or_else(|e| panic!("shim: {e}")))
            .collect();
        let c = CniCluster { lab, ctl, shims };
        c.wait_all_synced("switches");
        c
    }

    /// Wait until the three nodes' switches are connected and synced (30 s at most); on
    /// timeout fail with `what` and the controller's log.
    pub fn wait_all_synced(&self, what: &str) {
        self.ctl
            .wait_synced(
                &self.lab,
                &["node1", "node2", "node3"],
                Duration::from_secs(30),
            )
            .unwrap_or_else(|e| self.fail(&format!("{what}: {e}")));
    }

    /// Panic with `what` and the tail of the controller's log.
    pub fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\n---- controller log ----\n{}",
            self.ctl.log_tail(40)
        );
    }

    /// Run `flowmeshctl ARGS` against the controller; its output.
    pub fn ctl(&self, args: &[&str]) -> String {
        self.ctl
            .ctl(&self.lab, args)
            .unwrap_or_else(|e| self.fail(&format!("flowmeshctl {args:?}: {e}")))
    }

    /// `flowmeshctl apply -f` of `yaml` (written to a file of the lab's run directory named
    /// after `name`).
    pub fn apply(&self, name: &str, yaml: &str) {
        let path = self.lab.run_dir().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml)
            .unwrap_or_else(|e| self.fail(&format!("write {}: {e}", path.display())));
        self.ctl(&["apply", "-f", &path.to_string_lossy()]);
    }

    /// Add a pod on node `node` (1-based) through the CNI plugin.
    pub fn add_cni_pod(&self, node: usize, namespace: &str, name: &str) -> crate::cni::CniPod {
        crate::cni::add_pod_via_cni(&self.lab, node, &self.shims[node - 1], namespace, name)
            .unwrap_or_else(|e| self.fail(&format!("ADD {namespace}/{name}: {e:?}")))
    }
}
