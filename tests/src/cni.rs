//! Driving flowmesh's node side in a [`NetnsLab`]: start `flowmesh-shim` in a node namespace
//! and execute `flowmesh-cni` exactly as a container runtime does (`CNI_*` environment, network
//! configuration on stdin, result or error JSON on stdout).
//!
//! The binaries come from [`shim_bins`]: `$FLOWMESH_SHIM_BIN_DIR` if set, else they are built
//! (`cargo build -p agent-shim --bins`, a no-op when fresh) into this test's own target
//! directory, once per test process. So `cargo test --workspace` and
//! `cargo test -p flowmesh-tests` both work on a clean checkout and never use stale binaries.
//!
//! ```ignore
//! let shim = start_shim(&lab, 1, &ShimOptions::new("http://172.31.X.254:PORT"))?;
//! let pod_ns = lab.add_netns("pod1")?;
//! let out = invoke_cni(&lab, 1, &CniCall::add(&shim, "c1", &pod_ns, "ns1", "pod1"))?;
//! assert_eq!(out.exit_code, 0);
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{HarnessError, Result};
use crate::netns::NetnsLab;
use crate::process::command_line;

/// Paths of the agent-shim binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimBins {
    /// `flowmesh-shim`.
    pub shim: PathBuf,
    /// `flowmesh-cni`.
    pub cni: PathBuf,
}

static BINS: OnceLock<std::result::Result<ShimBins, String>> = OnceLock::new();

/// The agent-shim binaries (see the module doc for where they come from).
pub fn shim_bins() -> Result<ShimBins> {
    BINS.get_or_init(locate_or_build)
        .clone()
        .map_err(HarnessError::Invalid)
}

fn locate_or_build() -> std::result::Result<ShimBins, String> {
    let dir = crate::bins::locate_or_build(
        "FLOWMESH_SHIM_BIN_DIR",
        &["-p", "agent-shim", "--bins"],
        &["flowmesh-shim", "flowmesh-cni"],
    )?;
    Ok(ShimBins {
        shim: dir.join("flowmesh-shim"),
        cni: dir.join("flowmesh-cni"),
    })
}

/// How to start a shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimOptions {
    /// Node API URL (`http://IP:PORT`).
    pub controller: String,
    /// OpenFlow target for br0 (`tcp:IP:PORT`), if any.
    pub openflow_target: Option<String>,
    /// `--datapath-type` (the lab's nodes use `netdev`).
    pub datapath_type: Option<String>,
    /// Extra environment (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// Directory of the lab's certificates (`flowmeshctl certs lab`): node `n` gets
    /// `--ca ca.pem --cert node-nodeN.pem --key node-nodeN-key.pem`. None: plaintext.
    pub pki: Option<PathBuf>,
    /// More flags, as given.
    pub extra: Vec<String>,
}

impl ShimOptions {
    /// Defaults for a lab node: userspace datapath, no OpenFlow target, `RUST_LOG=debug`.
    pub fn new(controller: impl Into<String>) -> Self {
        ShimOptions {
            controller: controller.into(),
            openflow_target: None,
            datapath_type: Some("netdev".into()),
            env: vec![("RUST_LOG".into(), "debug".into())],
            pki: None,
            extra: Vec::new(),
        }
    }
}

/// A running `flowmesh-shim` in a lab node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeShim {
    /// Node number.
    pub node: usize,
    /// Its PID (stop it with [`NetnsLab::stop_process`]).
    pub pid: u32,
    /// Its CNI socket.
    pub socket: PathBuf,
    /// Its log file.
    pub log: PathBuf,
}

/// The CNI socket path used for node `node` of `lab`.
pub fn socket_path(lab: &NetnsLab, node: usize) -> PathBuf {
    lab.run_dir()
        .join(format!("node{node}-cni"))
        .join("cni.sock")
}

fn shim_args(lab: &NetnsLab, node: usize, o: &ShimOptions) -> Vec<String> {
    let mut a = vec![
        "--node-name".to_owned(),
        format!("node{node}"),
        "--node-ip".into(),
        lab.underlay_ip(node).to_string(),
        "--controller".into(),
        o.controller.clone(),
        "--dpid".into(),
        format!("{node:016x}"),
        "--bridge".into(),
        lab.bridge().to_owned(),
        "--cni-socket".into(),
        socket_path(lab, node).display().to_string(),
    ];
    if let Some(t) = &o.openflow_target {
        a.extend(["--openflow-target".into(), t.clone()]);
    }
    if let Some(t) = &o.datapath_type {
        a.extend(["--datapath-type".into(), t.clone()]);
    }
    if let Some(pki) = &o.pki {
        let f = |n: String| pki.join(n).display().to_string();
        a.extend([
            "--ca".into(),
            f("ca.pem".into()),
            "--cert".into(),
            f(format!("node-node{node}.pem")),
            "--key".into(),
            f(format!("node-node{node}-key.pem")),
        ]);
    }
    // The audit log and the syslog socket of its `libc` destination stay the lab's too.
    a.extend([
        "--audit-log-file".into(),
        audit_log_path(lab, node).display().to_string(),
        "--syslog-socket".into(),
        syslog_socket_path(lab, node).display().to_string(),
    ]);
    // NetworkManager's configuration stays the lab's: the shim writes its file into the run
    // directory, never into this machine's /etc.
    let nm = lab.run_dir().join(format!("node{node}-networkmanager"));
    let _ = std::fs::create_dir_all(&nm);
    a.extend(["--networkmanager-conf-dir".into(), nm.display().to_string()]);
    a.extend(o.extra.iter().cloned());
    a
}

/// The network policy audit log of node `node`'s shim (see `shim_args`).
pub fn audit_log_path(lab: &NetnsLab, node: usize) -> PathBuf {
    lab.run_dir()
        .join(format!("node{node}-audit"))
        .join("acl-audit-log.log")
}

/// The syslog socket node `node`'s shim writes to with the `libc` audit destination (nobody
/// listens there unless a test binds it).
pub fn syslog_socket_path(lab: &NetnsLab, node: usize) -> PathBuf {
    lab.run_dir()
        .join(format!("node{node}-audit"))
        .join("dev-log")
}

/// The NetworkManager `conf.d` directory node `node`'s shim was given (see `shim_args`).
pub fn networkmanager_dir(lab: &NetnsLab, node: usize) -> PathBuf {
    lab.run_dir().join(format!("node{node}-networkmanager"))
}

fn ovs_env(lab: &NetnsLab, node: usize) -> Result<Vec<(String, String)>> {
    let dir = lab.node(node)?.ovs().dir().display().to_string();
    Ok(["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"]
        .iter()
        .map(|k| ((*k).to_owned(), dir.clone()))
        .collect())
}

/// Starts `flowmesh-shim` inside node `node`'s namespace (with that node's `OVS_RUNDIR`) and
/// waits until its CNI socket accepts connections.
pub fn start_shim(lab: &NetnsLab, node: usize, o: &ShimOptions) -> Result<NodeShim> {
    let bins = shim_bins()?;
    let args = shim_args(lab, node, o);
    let mut env = ovs_env(lab, node)?;
    env.extend(o.env.iter().cloned());
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let arg_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let ns = lab.node(node)?.ns().to_owned();
    let shim_path = bins.shim.display().to_string();
    let p = lab.spawn_in(&ns, &shim_path, &arg_ref, &env_ref)?;
    let socket = socket_path(lab, node);
    let timeout = Duration::from_secs(30);
    let t0 = Instant::now();
    loop {
        if UnixStream::connect(&socket).is_ok() {
            return Ok(NodeShim {
                node,
                pid: p.pid,
                socket,
                log: p.log,
            });
        }
        if let Some(status) = lab.process_exited(p.pid) {
            return Err(HarnessError::DaemonDied {
                daemon: format!("flowmesh-shim on node {node}"),
                status: status.to_string(),
                log_tail: log_tail(&p.log, 30),
            });
        }
        if t0.elapsed() > timeout {
            return Err(HarnessError::Timeout {
                what: format!(
                    "flowmesh-shim socket {} (log {})",
                    socket.display(),
                    p.log.display()
                ),
                timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `flowmesh-shim --setup-only` in node `node` and returns the changes it reports.
pub fn shim_setup_once(lab: &NetnsLab, node: usize, o: &ShimOptions) -> Result<Vec<String>> {
    shim_once(lab, node, o, "--setup-only", "changes")
}

/// Runs `flowmesh-shim --uninstall` in node `node` and returns what it reports removed.
pub fn shim_uninstall(lab: &NetnsLab, node: usize, o: &ShimOptions) -> Result<Vec<String>> {
    shim_once(lab, node, o, "--uninstall", "removed")
}

/// Runs the shim once with `flag` and returns the strings of `key` in its JSON answer.
fn shim_once(
    lab: &NetnsLab,
    node: usize,
    o: &ShimOptions,
    flag: &str,
    key: &str,
) -> Result<Vec<String>> {
    let bins = shim_bins()?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", lab.node(node)?.ns()])
        .arg(&bins.shim)
        .args(shim_args(lab, node, o))
        .arg(flag)
        .envs(ovs_env(lab, node)?)
        .envs(o.env.iter().cloned())
        .stdin(Stdio::null());
    let out = cmd.output().map_err(|source| HarnessError::Spawn {
        program: command_line(&cmd),
        source,
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(HarnessError::CommandFailed {
            command: command_line(&cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout,
        });
    }
    let v: Value = serde_json::from_str(stdout.trim()).map_err(|e| HarnessError::Parse {
        what: format!("flowmesh-shim {flag}"),
        detail: format!("{e}: {stdout}"),
    })?;
    Ok(v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// The last `n` lines of a log file.
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `/var/run/netns/<ns>`: what a runtime passes as `CNI_NETNS` for a named namespace.
pub fn netns_path(ns: &str) -> String {
    format!("/var/run/netns/{ns}")
}

/// A network configuration for flowmesh-cni pointing at `socket`.
pub fn netconf(socket: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "flowmesh",
        "type": "flowmesh-cni",
        "socket": socket.display().to_string(),
    })
}

/// One plugin invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct CniCall {
    /// CNI_COMMAND.
    pub command: String,
    /// CNI_CONTAINERID (omitted when empty).
    pub container_id: String,
    /// CNI_NETNS (omitted when empty).
    pub netns: String,
    /// CNI_IFNAME (omitted when empty).
    pub ifname: String,
    /// CNI_ARGS pairs.
    pub args: BTreeMap<String, String>,
    /// The network configuration (stdin).
    pub config: Value,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Raw stdin instead of `config` (to send malformed input).
    pub raw_stdin: Option<String>,
}

impl CniCall {
    /// A call of `command` for container `container_id` in namespace `ns` (a name made by the
    /// lab), pod `pod_ns/pod_name`, interface eth0, config pointing at `shim`'s socket.
    pub fn new(
        command: &str,
        socket: &Path,
        container_id: &str,
        ns: &str,
        pod_namespace: &str,
        pod_name: &str,
    ) -> Self {
        let args = [
            ("IgnoreUnknown".to_owned(), "1".to_owned()),
            ("K8S_POD_NAMESPACE".to_owned(), pod_namespace.to_owned()),
            ("K8S_POD_NAME".to_owned(), pod_name.to_owned()),
            (
                "K8S_POD_INFRA_CONTAINER_ID".to_owned(),
                container_id.to_owned(),
            ),
        ]
        .into();
        CniCall {
            command: command.to_owned(),
            container_id: container_id.to_owned(),
            netns: if ns.is_empty() {
                String::new()
            } else {
                netns_path(ns)
            },
            ifname: "eth0".into(),
            args,
            config: netconf(socket),
            env: Vec::new(),
            raw_stdin: None,
        }
    }

    /// Same call with another command (e.g. DEL after ADD).
    pub fn with_command(&self, command: &str) -> Self {
        CniCall {
            command: command.to_owned(),
            ..self.clone()
        }
    }
}

/// What the plugin did.
#[derive(Debug, Clone, PartialEq)]
pub struct CniOutcome {
    /// Exit status (-1 if killed by a signal).
    pub exit_code: i32,
    /// stdout parsed as JSON (Null when empty).
    pub stdout: Value,
    /// Raw stdout.
    pub raw_stdout: String,
    /// stderr.
    pub stderr: String,
    /// Wall time from exec to exit.
    pub elapsed: Duration,
}

impl CniOutcome {
    /// The spec error code, when stdout is an error.
    pub fn error_code(&self) -> Option<u64> {
        self.stdout.get("code").and_then(Value::as_u64)
    }
}

/// Executes `flowmesh-cni` in node `node`'s namespace as a runtime does: a clean environment
/// with only `CNI_*` (and `PATH`), the configuration on stdin.
pub fn invoke_cni(lab: &NetnsLab, node: usize, call: &CniCall) -> Result<CniOutcome> {
    let bins = shim_bins()?;
    exec_plugin(lab, node, &bins.cni, call)
}

/// Where Debian's `containernetworking-plugins` installs the standard plugins.
pub const STANDARD_PLUGINS: &str = "/usr/lib/cni";

/// Runs plugin `program` in node `node`'s namespace as a runtime would (environment from
/// `call`, `call.config` or `raw_stdin` on stdin).
fn exec_plugin(lab: &NetnsLab, node: usize, program: &Path, call: &CniCall) -> Result<CniOutcome> {
    let bins = shim_bins()?;
    let cni_path = format!(
        "{}:{STANDARD_PLUGINS}",
        bins.cni.parent().unwrap_or(Path::new("/")).display()
    );
    let mut cmd = Command::new("ip");
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["netns", "exec", lab.node(node)?.ns()])
        .arg(program)
        .env("CNI_COMMAND", &call.command)
        .env("CNI_PATH", cni_path);
    for (k, v) in [
        ("CNI_CONTAINERID", &call.container_id),
        ("CNI_NETNS", &call.netns),
        ("CNI_IFNAME", &call.ifname),
    ] {
        if !v.is_empty() {
            cmd.env(k, v);
        }
    }
    if !call.args.is_empty() {
        let a: Vec<String> = call.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        cmd.env("CNI_ARGS", a.join(";"));
    }
    cmd.envs(call.env.iter().cloned())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|source| HarnessError::Spawn {
        program: command_line(&cmd),
        source,
    })?;
    let body = call
        .raw_stdin
        .clone()
        .unwrap_or_else(|| call.config.to_string());
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(body.as_bytes())
            .map_err(|source| HarnessError::Net {
                context: "write the CNI config to the plugin".into(),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| HarnessError::Net {
            context: format!("wait for {}", program.display()),
            source,
        })?;
    let elapsed = t0.elapsed();
    let raw_stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stdout = if raw_stdout.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(raw_stdout.trim()).map_err(|e| HarnessError::Parse {
            what: "flowmesh-cni stdout".into(),
            detail: format!("{e}: {raw_stdout}"),
        })?
    };
    Ok(CniOutcome {
        exit_code: out.status.code().unwrap_or(-1),
        stdout,
        raw_stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed,
    })
}

/// Binds a TCP listener inside network namespace `ns` (a thread enters it, binds, and the
/// socket stays in that namespace), e.g. for a node API server on the lab's controller address.
pub fn bind_tcp_in_netns(ns: &str, addr: SocketAddr) -> Result<TcpListener> {
    let path = netns_path(ns);
    let ns_name = ns.to_owned();
    std::thread::spawn(move || -> Result<TcpListener> {
        let f = std::fs::File::open(&path).map_err(|source| HarnessError::Io {
            op: "open",
            path: path.clone().into(),
            source,
        })?;
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
            HarnessError::Setns {
                ns: ns_name.clone(),
                source,
            }
        })?;
        TcpListener::bind(addr).map_err(|source| HarnessError::Net {
            context: format!("bind {addr} in {ns_name}"),
            source,
        })
    })
    .join()
    .map_err(|_| HarnessError::Invalid("bind thread panicked".into()))?
}

/// Runs `call` (ADD or DEL) through every plugin of the network config list `conflist` (a
/// `.conflist` as a runtime reads it), as libcni does: each plugin gets the list's
/// `cniVersion` and `name`, the `runtimeConfig` entries of `runtime` its `capabilities` ask
/// for, and (ADD) the previous plugin's result as `prevResult`; DEL runs the list backwards.
/// `flowmesh-cni` is the one built here, the others come from [`STANDARD_PLUGINS`]. Stops
/// at the first failure; returns every outcome (the last is the chain's result).
pub fn invoke_chain(
    lab: &NetnsLab,
    node: usize,
    conflist: &Value,
    socket: &Path,
    call: &CniCall,
    runtime: &Value,
) -> Result<Vec<CniOutcome>> {
    let bins = shim_bins()?;
    let mut plugins: Vec<Value> = conflist["plugins"].as_array().cloned().unwrap_or_default();
    if call.command == "DEL" {
        plugins.reverse();
    }
    let mut outcomes: Vec<CniOutcome> = Vec::new();
    let mut prev: Option<Value> = None;
    for plugin in plugins {
        let ty = plugin["type"].as_str().unwrap_or_default().to_string();
        let mut conf = plugin.clone();
        conf["cniVersion"] = conflist["cniVersion"].clone();
        conf["name"] = conflist["name"].clone();
        if ty == "flowmesh-cni" {
            conf["socket"] = json!(socket.display().to_string());
        }
        let mut rc = serde_json::Map::new();
        if let Some(caps) = plugin["capabilities"].as_object() {
            for (k, on) in caps {
                if on == &json!(true) && !runtime[k].is_null() {
                    rc.insert(k.clone(), runtime[k].clone());
                }
            }
        }
        if !rc.is_empty() {
            conf["runtimeConfig"] = Value::Object(rc);
        }
        if let Some(p) = &prev {
            conf["prevResult"] = p.clone();
        }
        let program = if ty == "flowmesh-cni" {
            bins.cni.clone()
        } else {
            Path::new(STANDARD_PLUGINS).join(&ty)
        };
        let c = CniCall {
            config: conf,
            ..call.clone()
        };
        let out = exec_plugin(lab, node, &program, &c)?;
        let failed = out.exit_code != 0;
        if call.command == "ADD" && !failed {
            prev = Some(out.stdout.clone());
        }
        outcomes.push(out);
        if failed {
            break;
        }
    }
    Ok(outcomes)
}

/// A pod created through flowmesh-cni by [`add_pod_via_cni`].
#[derive(Debug, Clone, PartialEq)]
pub struct CniPod {
    /// Node number.
    pub node: usize,
    /// The pod's network namespace (deleted with the lab).
    pub ns: String,
    /// Its address, from the CNI result.
    pub ip: std::net::Ipv4Addr,
    /// Host end of its veth (the OVS port), from the CNI result.
    pub host_veth: String,
    /// The ADD call (use `with_command("DEL")` to remove the pod).
    pub call: CniCall,
    /// The ADD result.
    pub result: Value,
    /// How long the ADD took (exec to exit).
    pub add_time: Duration,
}

/// Creates namespace `<lab id>-<name>`, runs CNI ADD for it on node `node` (container id
/// `<name>`, pod `pod_namespace/name`, eth0) against `shim`, and turns TX checksum offload off
/// in the pod (TCP over the userspace datapath needs it). A failed ADD is an error carrying
/// the plugin's output.
pub fn add_pod_via_cni(
    lab: &NetnsLab,
    node: usize,
    shim: &NodeShim,
    pod_namespace: &str,
    name: &str,
) -> Result<CniPod> {
    let ns = lab.add_netns(name)?;
    let call = CniCall::new("ADD", &shim.socket, name, &ns, pod_namespace, name);
    let out = invoke_cni(lab, node, &call)?;
    let fail = |why: &str| HarnessError::CommandFailed {
        command: format!("flowmesh-cni ADD {pod_namespace}/{name} on node {node}"),
        status: format!("exit {}", out.exit_code),
        stderr: format!("{why}; {}", out.stderr.trim()),
        stdout: out.raw_stdout.clone(),
    };
    if out.exit_code != 0 {
        return Err(fail("non-zero exit"));
    }
    let ip = out.stdout["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| fail("no ips[0].address in the result"))?;
    let host_veth = out.stdout["interfaces"][0]["name"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| fail("no interfaces[0].name in the result"))?;
    lab.tx_offload_off(&ns, &call.ifname)?;
    Ok(CniPod {
        node,
        ns,
        ip,
        host_veth,
        result: out.stdout.clone(),
        add_time: out.elapsed,
        call,
    })
}
