//! The soak's cluster: a 3-node [`NetnsLab`], a 3-member etcd in the lab's controller
//! namespace, three controller replicas on it, a shim per node, two outside hosts on the
//! underlay; and the handles the workload, fault and probe threads share (each behind its own
//! lock, held only for the moment a PID or address is read).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::cni::{NodeShim, ShimOptions};
use crate::e2e::{controller_bins, ControllerOptions, LabController, TcpServer};
use crate::egress::UdpRecorder;
use crate::{EtcdCluster, NetnsLab};

use super::truth::Mode;

/// Nodes in the lab.
pub const NODES: usize = 3;
/// Controller replicas.
pub const REPLICAS: usize = 3;
/// Port of the outside hosts' TCP service.
pub const OUTSIDE_TCP: u16 = 9099;
/// Port of outside host A's UDP service that reports the source address.
pub const OUTSIDE_UDP: u16 = 9100;

/// Locks, ignoring poisoning (a panicking thread is reported by its join).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a replica is there to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaState {
    /// Running.
    Up,
    /// SIGSTOPped.
    Stopped,
    /// Killed.
    Down,
}

/// Everything the soak runs.
pub struct Cluster {
    /// The lab (nodes, pods' namespaces, processes).
    pub lab: NetnsLab,
    /// The etcd members (None: the embedded-store phase, one controller on its own store).
    pub etcd: Mutex<Option<EtcdCluster>>,
    /// The controller replicas.
    pub replicas: Mutex<Vec<LabController>>,
    /// Whether each replica answers.
    pub replica_state: Mutex<Vec<ReplicaState>>,
    /// gRPC address of each replica.
    pub grpc: Vec<SocketAddrV4>,
    /// The lab certificates.
    pub pki: PathBuf,
    /// The shims (node `n` is `shims[n - 1]`).
    pub shims: Mutex<Vec<NodeShim>>,
    /// How the shims are started.
    pub shim_opts: ShimOptions,
    /// `--leader-ttl`, seconds.
    pub leader_ttl: u64,
    /// Outside host A (allowed everywhere, and the egress-IP witness).
    pub outside_a: Ipv4Addr,
    /// Outside host B (denied to the `fw` project by its egress firewall).
    pub outside_b: Ipv4Addr,
    /// The egress IP of the `egress` project (hosted by node 3).
    pub egress_ip: Ipv4Addr,
    /// Servers on the outside hosts (kept running).
    pub outside: Vec<TcpServer>,
    /// Outside host A's UDP service.
    pub udp: UdpRecorder,
    /// The cluster mode.
    pub mode: Mode,
    /// Each replica's libfaketime offset file (`--clock-steps`; None: clocks are left alone).
    pub clock_files: Option<Vec<PathBuf>>,
    /// The etcd member on a small tmpfs with a small quota (`--etcd-nospace`).
    pub nospace_member: Option<usize>,
    /// The writes made through flowmesh during etcd's NOSPACE alarm: (namespace, manifest,
    /// acknowledged yet).
    pub nospace_writes: Mutex<Vec<(String, String, bool)>>,
    /// What the NOSPACE faults found wrong (a refusal without the reason, a late recovery).
    pub nospace_errors: Mutex<Vec<String>>,
    /// The embedded-store phase: the tmpfs the controller's data directory is on.
    pub disk: Option<PathBuf>,
}

/// Which store the replicas run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Three replicas on a 3-member etcd; with `nospace`, member [`NOSPACE`]`.member` on a
    /// small tmpfs with a small quota.
    Etcd {
        /// `--etcd-nospace`.
        nospace: bool,
    },
    /// One controller on its embedded store, its data directory on a tmpfs of this many MiB
    /// (`--phase embedded-full`).
    EmbeddedFull {
        /// The tmpfs's size.
        mib: u64,
    },
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(d) = &self.disk {
            // Lazily: the controller (stopped with the lab right after) may still hold it.
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(d)
                .status();
        }
    }
}

/// Mounts a tmpfs of `mib` MiB on `dir` (made if missing).
pub fn mount_tmpfs(dir: &std::path::Path, mib: u64) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let out = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={mib}m,mode=0700"),
            "flowmesh-soak-disk",
        ])
        .arg(dir)
        .output()
        .map_err(|e| format!("mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mount a tmpfs on {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// With `--etcd-nospace`: the member on a small tmpfs, its size and its backend quota.
pub const NOSPACE: crate::etcd::SmallMember = crate::etcd::SmallMember {
    member: 2,
    tmpfs_mib: 512,
    quota_bytes: 16 << 20,
};

/// libfaketime (Debian's `faketime` package), the thread-safe variant.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Writes replica clock file `f`: the replica's wall clock runs `secs` seconds off the
/// machine's (its monotonic clock is left alone, as a stepped wall clock leaves it).
pub fn set_clock(f: &std::path::Path, secs: i64) -> Result<(), String> {
    std::fs::write(f, format!("{secs:+}\n")).map_err(|e| format!("{}: {e}", f.display()))
}

/// The node that hosts the egress IP.
pub const EGRESS_NODE: usize = 3;

impl Cluster {
    /// Starts everything and waits until a leader holds every switch, synced.
    pub fn start(
        mode: Mode,
        leader_ttl: u64,
        shim_extra: &[String],
        clock_steps: bool,
        store: Store,
    ) -> Result<Cluster, String> {
        if clock_steps && !std::path::Path::new(LIBFAKETIME).exists() {
            return Err(format!(
                "--clock-steps needs {LIBFAKETIME} (Debian's faketime; scripts/deps.sh installs it)"
            ));
        }
        let lab = crate::e2e::cni_lab_result().map_err(|e| format!("lab: {e}"))?;
        let clock_files: Option<Vec<PathBuf>> = clock_steps.then(|| {
            (0..REPLICAS)
                .map(|i| lab.run_dir().join(format!("clock-r{i}")))
                .collect()
        });
        if let Some(files) = &clock_files {
            for f in files {
                set_clock(f, 0)?;
            }
        }
        let small = (store == Store::Etcd { nospace: true }).then_some(NOSPACE);
        let etcd = match store {
            Store::Etcd { .. } => Some(EtcdCluster::start_with(
                3,
                Some(lab.controller_ns()),
                small,
            )?),
            Store::EmbeddedFull { .. } => None,
        };
        let eps = etcd
            .as_ref()
            .map(EtcdCluster::endpoints)
            .unwrap_or_default();
        // The embedded store's data directory (LabController's for replica 0) on its tmpfs.
        let disk = match store {
            Store::EmbeddedFull { mib } => {
                let d = lab.run_dir().join("controller").join("data");
                mount_tmpfs(&d, mib)?;
                Some(d)
            }
            Store::Etcd { .. } => None,
        };
        let mut base = ControllerOptions::multitenant();
        base.config_yaml = base.config_yaml.replace(
            "mode: multitenant",
            &format!("mode: {}", mode.config_name()),
        );
        base.log = "info".into();
        let ttl = leader_ttl.to_string();
        let opts = |id: &str| {
            let mut o = base.clone();
            if etcd.is_none() {
                return o;
            }
            o.extra = [
                "--datastore",
                "etcd",
                "--etcd-endpoints",
                &eps,
                "--replica-id",
                id,
                "--etcd-election-timeout",
                crate::etcd::ELECTION_TIMEOUT_MS,
                "--leader-ttl",
                &ttl,
            ]
            .map(String::from)
            .to_vec();
            if let Some(files) = &clock_files {
                let i: usize = id.trim_start_matches('r').parse().unwrap_or(0);
                let file = files.get(i).map(|f| f.display().to_string());
                o.env = vec![
                    ("LD_PRELOAD".into(), LIBFAKETIME.into()),
                    ("FAKETIME_TIMESTAMP_FILE".into(), file.unwrap_or_default()),
                    // Read again at most every second; the monotonic clock stays the machine's.
                    ("FAKETIME_CACHE_DURATION".into(), "1".into()),
                    ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                ];
            }
            o
        };
        let mut replicas: Vec<LabController> = Vec::new();
        let count = if etcd.is_some() { REPLICAS } else { 1 };
        for i in 0..count {
            let pki = replicas.first().map(|c| c.pki.clone());
            let id = format!("r{i}");
            let c = LabController::start_replica(&lab, &opts(&id), i as u16, pki.as_deref())
                .map_err(|e| format!("replica {id}: {e}"))?;
            replicas.push(c);
        }
        let refs: Vec<&LabController> = replicas.iter().collect();
        let mut shim_opts = LabController::shim_options_all(&refs);
        shim_opts.extra.extend(shim_extra.iter().cloned());
        let mut shims = Vec::new();
        for n in 1..=NODES {
            shims.push(
                crate::cni::start_shim(&lab, n, &shim_opts)
                    .map_err(|e| format!("shim {n}: {e}"))?,
            );
        }
        let (a_ns, outside_a) = lab
            .add_underlay_host("outa", 101)
            .map_err(|e| format!("outside host A: {e}"))?;
        let (b_ns, outside_b) = lab
            .add_underlay_host("outb", 102)
            .map_err(|e| format!("outside host B: {e}"))?;
        let outside = vec![
            TcpServer::start(&a_ns, outside_a, OUTSIDE_TCP, "A").map_err(|e| e.to_string())?,
            TcpServer::start(&b_ns, outside_b, OUTSIDE_TCP, "B").map_err(|e| e.to_string())?,
        ];
        let udp = UdpRecorder::start(&a_ns, outside_a, OUTSIDE_UDP).map_err(|e| e.to_string())?;
        let egress_ip = crate::egress::underlay_addr(&lab, 150);
        let c = Cluster {
            grpc: replicas.iter().map(|r| r.grpc).collect(),
            pki: replicas[0].pki.clone(),
            replica_state: Mutex::new(vec![ReplicaState::Up; count]),
            replicas: Mutex::new(replicas),
            etcd: Mutex::new(etcd),
            shims: Mutex::new(shims),
            shim_opts,
            leader_ttl,
            outside_a,
            outside_b,
            egress_ip,
            outside,
            udp,
            mode,
            clock_files,
            nospace_member: small.map(|s| s.member),
            nospace_writes: Mutex::new(Vec::new()),
            nospace_errors: Mutex::new(Vec::new()),
            disk,
            lab,
        };
        let t0 = Instant::now();
        loop {
            if let Some(l) = c.leader() {
                if c.synced_everywhere(l) {
                    break;
                }
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err("no leader with every switch synced within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(c)
    }

    /// `flowmeshctl ARGS` against replica `i` (admin credentials, `timeout` seconds); stdout, or
    /// the error it printed.
    pub fn ctl_at(&self, i: usize, timeout_s: u64, args: &[&str]) -> Result<String, String> {
        let bins = controller_bins().map_err(|e| e.to_string())?;
        let server = format!("https://{}", self.grpc[i]);
        let p = |f: &str| self.pki.join(f).display().to_string();
        let (ca, cert, key) = (p("ca.pem"), p("admin-admin.pem"), p("admin-admin-key.pem"));
        let t = format!("{timeout_s}s");
        let mut all = vec![
            "--server",
            &server,
            "--timeout",
            &t,
            "--ca",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
        ];
        all.extend_from_slice(args);
        let out = self
            .lab
            .exec_in(
                self.lab.controller_ns(),
                &bins.ctl.display().to_string(),
                &all,
            )
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    /// Replicas that are up now, in an order that starts at `start` (to spread calls).
    pub fn up_replicas(&self, start: usize) -> Vec<usize> {
        let st = lock(&self.replica_state).clone();
        let n = self.grpc.len();
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| st[i] == ReplicaState::Up)
            .collect()
    }

    /// The leader, as the first replica that answers `get controllers` says.
    pub fn leader(&self) -> Option<usize> {
        if self.grpc.len() == 1 {
            // One controller on its own store ("alone"): it leads whenever it answers.
            let up = self.up_replicas(0).first().copied()?;
            return self.ctl_at(up, 3, &["get", "controllers"]).ok().map(|_| up);
        }
        for i in self.up_replicas(0) {
            let Ok(text) = self.ctl_at(i, 3, &["get", "controllers", "-o", "json"]) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
                continue;
            };
            let Some(l) = v
                .as_array()
                .and_then(|a| a.iter().find(|r| r["state"] == "leader"))
            else {
                continue;
            };
            let grpc = l["grpc"].as_str().unwrap_or_default();
            return self.grpc.iter().position(|g| g.to_string() == grpc);
        }
        None
    }

    /// Every node's switch connected to and synced by replica `i`.
    pub fn synced_everywhere(&self, i: usize) -> bool {
        let Ok(text) = self.ctl_at(i, 3, &["get", "switches", "-o", "json"]) else {
            return false;
        };
        let Ok(sw) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
            return false;
        };
        (1..=NODES).all(|n| {
            sw.as_array().is_some_and(|a| {
                a.iter().any(|s| {
                    s["node"] == format!("node{n}") && s["connected"] == true && s["synced"] == true
                })
            })
        })
    }

    /// The shim of node `n` now.
    pub fn shim(&self, n: usize) -> NodeShim {
        lock(&self.shims)[n - 1].clone()
    }

    /// The processes whose memory is watched: (name, PID).
    pub fn watched_pids(&self) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for (i, r) in lock(&self.replicas).iter().enumerate() {
            if let Some(p) = r.pid {
                out.push((format!("controller-r{i}"), p));
            }
        }
        for s in lock(&self.shims).iter() {
            out.push((format!("shim-node{}", s.node), s.pid));
        }
        if let Some(etcd) = lock(&self.etcd).as_ref() {
            for i in 0..etcd.len() {
                if let Some(p) = etcd.pid(i) {
                    out.push((format!("etcd-m{i}"), p));
                }
            }
        }
        for n in self.lab.nodes() {
            if let Some(p) = n.ovs().vswitchd_pid() {
                out.push((format!("ovs-vswitchd-node{}", n.index()), p));
            }
        }
        out
    }
}
