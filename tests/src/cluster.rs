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
use crate::process::{command_line, output_of};

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
    pub fn apply(&self, yaml: &str) -> Result<String> {
        let args = ["apply", "-f", "-"];
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

    /// The pods of `ns` matching `selector`.
    pub fn pods(&self, ns: &str, selector: &str) -> Result<Vec<PodInfo>> {
        let out = self.kubectl(&["get", "pods", "-n", ns, "-l", selector, "-o", "json"])?;
        parse_pods(&out)
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
    }
}
