//! The real Kubernetes cluster of `scripts/kube-up.sh` (docs/cluster.md): upstream
//! kube-apiserver, controller-manager, scheduler, three nodes with kubelet, containerd,
//! kube-proxy and Open vSwitch each in its own network and mount namespace, and flowmesh
//! installed from `deploy/`.
//!
//! [`Cluster::ensure`] runs `scripts/kube-up.sh --mode MODE` (which reuses a healthy cluster of
//! that mode, so the test binaries share one; a different mode is a new cluster) and reads
//! its `env` file. The cluster stays up after the tests: `scripts/test.sh` stops it with
//! `scripts/kube-down.sh`. `kubectl` runs as the admin in the control-plane namespace, or with
//! any kubeconfig given; a pod's probes run with `kubectl exec`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::process::{command_line, output_of, run_checked};

/// Serializes bring-ups inside one test process (kube-up.sh also holds a lock across
/// processes).
static ENSURE: Mutex<()> = Mutex::new(());

/// The network mode flowmesh runs in (the ConfigMap's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// OpenShift SDN's multitenant mode: NETID isolation per project.
    Multitenant,
    /// Kubernetes NetworkPolicy.
    NetworkPolicy,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Multitenant => "multitenant",
            Mode::NetworkPolicy => "networkpolicy",
        }
    }
}

/// A running cluster (see the module doc).
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The state directory (`FLOWMESH_CLUSTER_DIR`, default /var/lib/flowmesh-kube).
    pub dir: PathBuf,
    /// Where kubectl and the other upstream binaries are.
    pub upstream_bin: PathBuf,
    /// The admin's kubeconfig (system:masters).
    pub kubeconfig: PathBuf,
    /// The control plane's network namespace (the API server's address is there).
    pub cp_netns: String,
    /// The underlay's network namespace.
    pub ul_netns: String,
    /// Number of nodes (`node1`...).
    pub nodes: usize,
    /// The nodes' underlay addresses, `node1` first.
    pub node_ips: Vec<Ipv4Addr>,
    /// The API server's address on the underlay.
    pub cp_ip: Ipv4Addr,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Parses `KEY=VALUE` lines.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `KUBERNETES_SERVICE_HOST:PORT` in a `/proc/PID/environ` (NUL-separated `K=V`); "" if unset.
fn api_server_in_environ(environ: &[u8]) -> String {
    let env = parse_env(&String::from_utf8_lossy(environ).replace('\0', "\n"));
    match (
        env.get("KUBERNETES_SERVICE_HOST"),
        env.get("KUBERNETES_SERVICE_PORT"),
    ) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.clone(),
        _ => String::new(),
    }
}

impl Cluster {
    /// Brings the cluster up in `mode` (or finds it up) with `scripts/kube-up.sh`.
    pub fn ensure(mode: Mode) -> Result<Cluster> {
        let _guard = ENSURE.lock().unwrap_or_else(PoisonError::into_inner);
        let script = repo_root().join("scripts/kube-up.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(&script).args(["--mode", mode.as_str()]);
        if let Ok(dir) = std::env::var("FLOWMESH_RELEASE_BIN_DIR") {
            cmd.args(["--bin-dir", &dir]);
        }
        // Its progress goes to the test's stderr as it happens.
        cmd.stderr(Stdio::inherit());
        let out = output_of(&mut cmd)?;
        if !out.status.success() {
            return Err(HarnessError::CommandFailed {
                command: command_line(&cmd),
                status: out.status.to_string(),
                stderr: "see the lines above (kube-up.sh says where its logs are)".into(),
                stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            });
        }
        let dir = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string();
        Self::open(Path::new(&dir))
    }

    /// Reads the `env` file of a cluster kube-up.sh brought up in `dir`.
    pub fn open(dir: &Path) -> Result<Cluster> {
        let env_path = dir.join("env");
        let text = std::fs::read_to_string(&env_path).map_err(|source| HarnessError::Io {
            op: "read",
            path: env_path.clone(),
            source,
        })?;
        let env = parse_env(&text);
        let get = |k: &str| {
            env.get(k).cloned().ok_or_else(|| HarnessError::Parse {
                what: env_path.display().to_string(),
                detail: format!("no {k}"),
            })
        };
        let ip = |s: String| {
            s.parse::<Ipv4Addr>().map_err(|e| HarnessError::Parse {
                what: env_path.display().to_string(),
                detail: format!("{s}: {e}"),
            })
        };
        let nodes: usize = get("NODES")?.parse().map_err(|e| HarnessError::Parse {
            what: env_path.display().to_string(),
            detail: format!("NODES: {e}"),
        })?;
        let prefix = get("NODE_PREFIX")?;
        let node_ips = (1..=nodes)
            .map(|i| ip(format!("{prefix}.{i}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Cluster {
            dir: dir.to_path_buf(),
            upstream_bin: PathBuf::from(get("UPSTREAM_BIN")?),
            kubeconfig: PathBuf::from(get("KUBECONFIG")?),
            cp_netns: get("CP_NETNS")?,
            ul_netns: get("UL_NETNS")?,
            nodes,
            node_ips,
            cp_ip: ip(get("CP_IP")?)?,
        })
    }

    /// Node `i`'s name (1-based).
    pub fn node_name(&self, i: usize) -> String {
        format!("node{i}")
    }

    /// Node `i`'s network namespace.
    pub fn node_netns(&self, i: usize) -> String {
        format!("fmk-n{i}")
    }

    /// Node `i`'s mount namespace file.
    pub fn node_mount_ns(&self, i: usize) -> PathBuf {
        self.dir.join(format!("ns/node{i}.mnt"))
    }

    /// The kubeconfig with node `i`'s credentials (system:node:nodeI).
    pub fn node_kubeconfig(&self, i: usize) -> PathBuf {
        self.dir.join(format!("pki/node{i}.kubeconfig"))
    }

    /// Where the daemons' logs are.
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// `kubectl ARGS` as the admin; raw output.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        self.kubectl_as(&self.kubeconfig, args, stdin)
    }

    /// `kubectl ARGS` with `kubeconfig`'s identity, in the control-plane namespace.
    pub fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<Output> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.cp_netns])
            .arg(self.upstream_bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args);
        let Some(input) = stdin else {
            return output_of(&mut cmd);
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: command_line(&cmd),
                source,
            })?;
        if let Some(mut w) = child.stdin.take() {
            w.write_all(input.as_bytes())
                .map_err(|source| HarnessError::Net {
                    context: "write kubectl's stdin".into(),
                    source,
                })?;
        }
        child
            .wait_with_output()
            .map_err(|source| HarnessError::Net {
                context: "wait for kubectl".into(),
                source,
            })
    }

    /// `kubectl ARGS` as the admin; stdout, or an error with its stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        checked(args, self.kubectl_output(args, None)?)
    }

    /// `kubectl apply -f -` of `yaml` as the admin.
    ///
    /// A pod in a namespace the same `yaml` creates is refused until kube-controller-manager
    /// has made that namespace's `default` ServiceAccount (`error looking up service account
    /// NS/default`): at once on a quiet cluster, but up to a minute or more after the API server
    /// restarted (its informers re-watch with client-go's backoff; CI met it after
    /// `cluster_apiserver`). As the upstream e2e framework does after it creates a namespace,
    /// the account and the `kube-root-ca.crt` ConfigMap (which every pod's API-access volume
    /// mounts) are waited for, 3 minutes for all; then the apply is made again (idempotent:
    /// kubectl applied every other document the first time). If they never come, the first
    /// apply's error is returned with what was waited for.
    pub fn apply(&self, yaml: &str) -> Result<String> {
        let args = ["apply", "-f", "-"];
        let first = checked(&args, self.kubectl_output(&args, Some(yaml))?);
        let missing = match &first {
            Err(HarnessError::CommandFailed { stderr, .. }) => missing_default_accounts(stderr),
            _ => Vec::new(),
        };
        if missing.is_empty() {
            return first;
        }
        let wait = Duration::from_secs(180);
        let deadline = Instant::now() + wait;
        let mut pending: Vec<(String, &str, &str)> = missing
            .iter()
            .flat_map(|ns| {
                [
                    (ns.clone(), "serviceaccount", "default"),
                    (ns.clone(), "configmap", "kube-root-ca.crt"),
                ]
            })
            .collect();
        while !pending.is_empty() && Instant::now() < deadline {
            pending.retain(|(ns, kind, name)| {
                self.kubectl(&["get", *kind, *name, "-n", ns.as_str()])
                    .is_err()
            });
            if !pending.is_empty() {
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        if !pending.is_empty() {
            let never: Vec<String> = pending
                .iter()
                .map(|(ns, kind, name)| format!("{kind} {ns}/{name}"))
                .collect();
            return first.map_err(|e| match e {
                HarnessError::CommandFailed {
                    command,
                    status,
                    stderr,
                    stdout,
                } => HarnessError::CommandFailed {
                    command,
                    status,
                    stderr: format!(
                        "{stderr}\n(waited {} s for what kube-controller-manager makes in a new \
                         namespace; still missing: {}; cluster logs: {})",
                        wait.as_secs(),
                        never.join(", "),
                        self.logs().display()
                    ),
                    stdout,
                },
                other => other,
            });
        }
        checked(&args, self.kubectl_output(&args, Some(yaml))?)
    }

    /// `kubectl exec -n NS POD -- CMD...`: the command's output, or an error with its stderr.
    pub fn exec(&self, ns: &str, pod: &str, cmd: &[&str]) -> Result<String> {
        let mut args = vec!["exec", "-n", ns, pod, "--"];
        args.extend_from_slice(cmd);
        self.kubectl(&args)
    }

    /// `agnhost connect IP:PORT --timeout=TIMEOUT` run in pod `ns/pod` by `kubectl exec`, as the
    /// upstream suite probes: whether TCP connected (agnhost exits 0).
    pub fn agnhost_connects(
        &self,
        ns: &str,
        pod: &str,
        ip: &str,
        port: u16,
        timeout: &str,
    ) -> bool {
        self.exec(
            ns,
            pod,
            &[
                "/agnhost",
                "connect",
                &format!("{ip}:{port}"),
                &format!("--timeout={timeout}"),
            ],
        )
        .is_ok()
    }

    /// Waits until `probe` returns `Some`, retrying every 250 ms up to `timeout`.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = probe() {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("{what} (cluster logs: {})", self.logs().display()),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The cluster's flowmesh-controller processes (by comm, in the cluster's cgroup).
    pub fn controller_pids(&self) -> Vec<u32> {
        let cg = std::fs::read_to_string(self.dir.join("cgroup")).unwrap_or_default();
        let cg = cg.trim();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| {
                    c.trim() == "flowmesh-contro" || c.trim() == "flowmesh-controller"
                }) && (cg.is_empty()
                    || std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                        .is_ok_and(|c| c.contains(cg)))
            })
            .collect()
    }

    /// For every controller process of the cluster (by PID), the API server address it was
    /// started with: `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT` from its environment,
    /// as kube-rs reads them; "" for a process whose environment cannot be read or names no
    /// host (one that is exiting has an empty environ).
    pub fn controllers_api_server(&self) -> BTreeMap<u32, String> {
        self.controller_pids()
            .into_iter()
            .map(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                (pid, api_server_in_environ(&env))
            })
            .collect()
    }

    /// What is still being deleted in the cluster: every Namespace in phase Terminating and
    /// every pod with a deletion timestamp (`ns/name`). An earlier test's namespaces deleted
    /// with `--wait=false` go on being torn down (their pods' CNI DELs change the switches'
    /// tables) well into the next test.
    pub fn terminating(&self) -> Result<Vec<String>> {
        let ns = self.kubectl(&[
            "get",
            "namespaces",
            "-o",
            r#"jsonpath={range .items[?(@.status.phase=="Terminating")]}namespace/{.metadata.name}{"\n"}{end}"#,
        ])?;
        let pods = self.kubectl(&[
            "get",
            "pods",
            "-A",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}"#,
        ])?;
        let mut out: Vec<String> = ns.lines().map(str::to_string).collect();
        out.extend(pods.lines().filter_map(|l| {
            let (pod, deleted) = l.split_once(' ')?;
            (!deleted.trim().is_empty()).then(|| format!("pod {pod}"))
        }));
        Ok(out)
    }

    /// The pods of `ns` matching `selector` once `count` of them are Ready: (name, node, IP).
    pub fn wait_pods_ready(
        &self,
        ns: &str,
        selector: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<PodInfo>> {
        self.wait_for(
            &format!("{count} Ready pods {selector} in {ns}"),
            timeout,
            || {
                let pods = self.pods(ns, selector).ok()?;
                let ready: Vec<PodInfo> = pods.into_iter().filter(|p| p.ready).collect();
                (ready.len() >= count).then_some(ready)
            },
        )
    }

    /// `PROGRAM ARGS` inside node `i`'s network and mount namespaces (where its Open vSwitch,
    /// kubelet and containerd see their own `/run`): stdout, or an error with stderr.
    pub fn node_run(&self, i: usize, program: &str, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.node_netns(i)))
            .arg(format!("--mount={}", self.node_mount_ns(i).display()))
            .arg("--")
            .arg(program)
            .args(args);
        run_checked(&mut cmd)
    }

    /// Node `i`'s `br0` as the switch holds it: its flows without counters and durations
    /// (`ovs-ofctl dump-flows --no-stats`) and its groups, each list sorted.
    pub fn switch_tables(&self, i: usize) -> Result<Vec<String>> {
        let of = |what: &str, extra: &[&str]| -> Result<Vec<String>> {
            let mut args = vec!["-O", "OpenFlow13", what, "br0"];
            args.extend_from_slice(extra);
            let out = self.node_run(i, "ovs-ofctl", &args)?;
            let mut lines: Vec<String> = out
                .lines()
                .filter(|l| !l.starts_with("OFPST_") && !l.trim().is_empty())
                .map(|l| l.trim().to_string())
                .collect();
            lines.sort();
            Ok(lines)
        };
        let mut all = of("dump-flows", &["--no-stats"])?;
        all.extend(of("dump-groups", &[])?);
        Ok(all)
    }

    /// The OpenFlow controller connections of node `i`'s `br0` as the switch reports them:
    /// (target, role) of each connected one (`role` is `master`, `slave` or `other`).
    pub fn switch_roles(&self, i: usize) -> Result<Vec<(String, String)>> {
        let out = self.node_run(
            i,
            "ovs-vsctl",
            &[
                "--timeout=10",
                "--format=csv",
                "--data=bare",
                "--no-headings",
                "--columns=target,role,is_connected",
                "list",
                "controller",
            ],
        )?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').map(str::trim).collect();
                (f.len() == 3 && f[2] == "true").then(|| (f[0].to_string(), f[1].to_string()))
            })
            .collect())
    }

    /// The Prometheus text of the controller replica listening on `ip` (replicas use host
    /// networking, so a node's address), read from the control plane's namespace with the
    /// read-only client certificate kube-up made (`flowmesh-pki/read-only-viewer.pem`).
    pub fn controller_metrics(&self, ip: Ipv4Addr) -> Result<String> {
        let pki = self.dir.join("flowmesh-pki");
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.cp_netns,
            "curl",
            "-sS",
            "-f",
            "-m",
            "10",
        ])
        .arg("--cacert")
        .arg(pki.join("ca.pem"))
        .arg("--cert")
        .arg(pki.join("read-only-viewer.pem"))
        .arg("--key")
        .arg(pki.join("read-only-viewer-key.pem"))
        .arg(format!("https://{ip}:9651/metrics"));
        run_checked(&mut cmd)
    }

    /// The holder of the controller's election Lease (`flowmesh/flowmesh-controller`, the
    /// holder being the replica's pod name); None while nobody holds it.
    pub fn controller_leader(&self) -> Result<Option<String>> {
        let out = self.kubectl(&[
            "get",
            "lease",
            "-n",
            "flowmesh",
            "flowmesh-controller",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])?;
        let h = out.trim();
        Ok((!h.is_empty()).then(|| h.to_string()))
    }

    /// The index (1-based) of the node named `name`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        (1..=self.nodes).find(|i| self.node_name(*i) == name)
    }

    /// The pods of `ns` matching `selector`.
    pub fn pods(&self, ns: &str, selector: &str) -> Result<Vec<PodInfo>> {
        let out = self.kubectl(&["get", "pods", "-n", ns, "-l", selector, "-o", "json"])?;
        parse_pods(&out)
    }
}

/// A control-plane daemon kube-up started, stopped by [`Cluster::stop_daemon`]: its command
/// line, to start it again as it was.
#[derive(Debug, Clone)]
pub struct StoppedDaemon {
    /// Its name in kube-up's `pids/` and `logs/` (`apiserver`, `etcd`, ...).
    pub name: String,
    argv: Vec<std::ffi::OsString>,
}

impl Cluster {
    /// `PROGRAM ARGS` in the control plane's network namespace: stdout, or an error.
    pub fn cp_run(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.cp_netns, program])
            .args(args);
        run_checked(&mut cmd)
    }

    /// The PID kube-up recorded for daemon `name` (`pids/NAME`), if it is running.
    pub fn daemon_pid(&self, name: &str) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("pids").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        process_alive(pid).then_some(pid)
    }

    /// Stops the control-plane daemon `name` (SIGTERM, then SIGKILL after 30 s), waiting until
    /// it is gone; what [`Cluster::start_daemon`] needs to start it again. Only daemons of the
    /// control plane's network namespace (no mount namespace or cgroup of their own).
    pub fn stop_daemon(&self, name: &str) -> Result<StoppedDaemon> {
        let pid = self.daemon_pid(name).ok_or_else(|| HarnessError::Parse {
            what: format!("{}/pids/{name}", self.dir.display()),
            detail: "no running process".into(),
        })?;
        let cmdline_path = PathBuf::from(format!("/proc/{pid}/cmdline"));
        let raw = std::fs::read(&cmdline_path).map_err(|source| HarnessError::Io {
            op: "read",
            path: cmdline_path,
            source,
        })?;
        let argv: Vec<std::ffi::OsString> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| {
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(a).to_os_string()
            })
            .collect();
        let pid_s = pid.to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        let _ = run_checked(Command::new("kill").args(["-TERM", &pid_s]));
        while process_alive(pid) {
            if Instant::now() >= deadline {
                let _ = run_checked(Command::new("kill").args(["-KILL", &pid_s]));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(StoppedDaemon {
            name: name.to_string(),
            argv,
        })
    }

    /// Starts a stopped daemon again with its command line, in its own session in the control
    /// plane's network namespace, its output appended to its log, its PID in `pids/NAME` (so
    /// kube-down stops it).
    pub fn start_daemon(&self, d: &StoppedDaemon) -> Result<u32> {
        let log_path = self.logs().join(format!("{}.log", d.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| HarnessError::Io {
                op: "open",
                path: log_path.clone(),
                source,
            })?;
        let err = log.try_clone().map_err(|source| HarnessError::Io {
            op: "dup",
            path: log_path,
            source,
        })?;
        // As kube-up's spawn: no descriptor but 0-2 (this process may hold a caller's flock,
        // which the daemon would otherwise hold for the cluster's lifetime).
        let mut cmd = Command::new("setsid");
        cmd.arg("nsenter")
            .arg(format!("--net=/run/netns/{}", self.cp_netns))
            .args(["--", "bash", "-c"])
            .arg(
                r#"for fd in /proc/self/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null; done; exec "$@""#,
            )
            .arg(&d.name)
            .args(&d.argv)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let child = cmd.spawn().map_err(|source| HarnessError::Spawn {
            program: command_line(&cmd),
            source,
        })?;
        // setsid (not a group leader here), nsenter (network only) and bash exec: the child is
        // the daemon itself.
        let pid = child.id();
        let pid_path = self.dir.join("pids").join(&d.name);
        std::fs::write(&pid_path, format!("{pid}\n")).map_err(|source| HarnessError::Io {
            op: "write",
            path: pid_path,
            source,
        })?;
        Ok(pid)
    }

    /// The control plane's etcd: `etcdctl ARGS` against it.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String> {
        let mut a = vec!["--endpoints", "http://127.0.0.1:2379"];
        a.extend_from_slice(args);
        self.cp_run("etcdctl", &a)
    }

    /// The sum of the unlabelled sample `name` over every controller replica that answers
    /// (replicas use host networking: each node's address), by node.
    pub fn controller_metric_by_node(&self, name: &str) -> BTreeMap<usize, f64> {
        (1..=self.nodes)
            .filter_map(|i| {
                let text = self.controller_metrics(self.node_ips[i - 1]).ok()?;
                Some((i, metric_value(&text, name)?))
            })
            .collect()
    }
}

/// Whether `pid` runs (a zombie counts as gone: PID 1 here may not reap).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// What the tests need of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Its name.
    pub name: String,
    /// The node it runs on.
    pub node: String,
    /// Its IP (empty until it has one).
    pub ip: String,
    /// Its Ready condition.
    pub ready: bool,
}

/// Reads a `kubectl get pods -o json` list.
pub fn parse_pods(json: &str) -> Result<Vec<PodInfo>> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| HarnessError::Parse {
        what: "kubectl get pods -o json".into(),
        detail: e.to_string(),
    })?;
    let items = v["items"].as_array().cloned().unwrap_or_default();
    Ok(items.iter().map(pod_info).collect())
}

/// What the tests need of one Pod object (as `kubectl get -o json` or a watch event shows it).
pub fn pod_info(p: &serde_json::Value) -> PodInfo {
    PodInfo {
        name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
        node: p["spec"]["nodeName"].as_str().unwrap_or_default().into(),
        ip: p["status"]["podIP"].as_str().unwrap_or_default().into(),
        ready: p["status"]["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .unwrap_or(false),
    }
}

/// The value of the unlabelled sample `name` in a Prometheus text.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The namespaces whose `default` ServiceAccount the API server's ServiceAccount admission
/// found missing, from kubectl's errors (`... error looking up service account NS/default:
/// serviceaccount "default" not found`), each once.
fn missing_default_accounts(stderr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for rest in stderr.split("error looking up service account ").skip(1) {
        let Some((ns, _)) = rest.split_once("/default:") else {
            continue;
        };
        if !ns.is_empty() && !ns.contains(char::is_whitespace) && !out.iter().any(|n| n == ns) {
            out.push(ns.to_string());
        }
    }
    out
}

fn checked(args: &[&str], out: Output) -> Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(HarnessError::CommandFailed {
            command: format!("kubectl {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_server_is_read_from_a_process_environment() {
        let env =
            b"PATH=/bin\0KUBERNETES_SERVICE_PORT=6443\0KUBERNETES_SERVICE_HOST=172.31.200.254\0";
        assert_eq!(api_server_in_environ(env), "172.31.200.254:6443");
        assert_eq!(api_server_in_environ(b"PATH=/bin\0"), "");
    }

    #[test]
    fn missing_default_accounts_are_read_from_kubectls_errors() {
        // As CI saw it (two pods of one namespace, one of another).
        let stderr = "Error from server (Forbidden): error when creating \"STDIN\": pods \"shop-1\" is forbidden: error looking up service account eip-shop/default: serviceaccount \"default\" not found\nError from server (Forbidden): error when creating \"STDIN\": pods \"shop-2\" is forbidden: error looking up service account eip-shop/default: serviceaccount \"default\" not found\nError from server (Forbidden): error when creating \"STDIN\": pods \"other\" is forbidden: error looking up service account eip-other/default: serviceaccount \"default\" not found";
        assert_eq!(missing_default_accounts(stderr), ["eip-shop", "eip-other"]);
        assert!(missing_default_accounts(
            "Error from server (Forbidden): pods is forbidden: User \"x\" cannot create"
        )
        .is_empty());
        assert!(missing_default_accounts("").is_empty());
    }

    #[test]
    fn env_and_pods_parse() {
        let env = parse_env("A=1\nKUBECONFIG=/x/y\nnoise\n");
        assert_eq!(env["KUBECONFIG"], "/x/y");
        let pods = parse_pods(
            r#"{"items":[{"metadata":{"name":"a"},"spec":{"nodeName":"node1"},
               "status":{"podIP":"10.128.0.2","conditions":[{"type":"Ready","status":"True"}]}},
              {"metadata":{"name":"b"},"spec":{},"status":{}}]}"#,
        )
        .expect("parses");
        assert_eq!(pods.len(), 2);
        assert!(pods[0].ready && !pods[1].ready);
        assert_eq!(pods[0].ip, "10.128.0.2");
        assert!(parse_pods("not json").is_err());
        let m = "# TYPE x counter\nflowmesh_flow_mods_sent_total 12\nflowmesh_flow_mods_sent_totals 3\n";
        assert_eq!(metric_value(m, "flowmesh_flow_mods_sent_total"), Some(12.0));
        assert_eq!(metric_value(m, "flowmesh_switch_errors_total"), None);
    }
}
