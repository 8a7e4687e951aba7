//! A real etcd v3 cluster on loopback (Debian's `etcd-server`, `/usr/bin/etcd`): members on
//! free ports chosen below the ephemeral range, private data directories under the harness's
//! run directory, each member a tracked child killed by PID on drop. Members can be killed and restarted one by one, to
//! take the cluster's quorum away and give it back.

use crate::process::TrackedProcess;
use crate::rundir::RunDir;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The etcd server binary (override with `FLOWMESH_ETCD_BIN`).
pub fn etcd_bin() -> PathBuf {
    std::env::var_os("FLOWMESH_ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"))
}

/// A port etcd can listen on. etcd needs its ports before it starts (every member names the
/// others'), so they are chosen here; below Linux's ephemeral range (32768 and up by default),
/// where no outgoing connection of another test takes one in the meantime, starting from a
/// point that differs per process and call, and free when checked.
fn free_port() -> Result<u16, String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOW + seed.wrapping_add(n.wrapping_mul(7_919)) % SPAN;
        let port = port as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(format!(
        "no free port on 127.0.0.1 in {LOW}..{}",
        LOW + SPAN
    ))
}

/// One member whose data directory is a tmpfs of its own, with a backend quota: the member
/// that runs out of space (etcd raises its cluster-wide NOSPACE alarm when the database of a
/// member grows past that member's `--quota-backend-bytes`; a member whose disk itself is full
/// exits instead, as a killed member does).
#[derive(Debug, Clone, Copy)]
pub struct SmallMember {
    /// The member's index.
    pub member: usize,
    /// Size of the tmpfs mounted on its data directory, MiB (its write-ahead log preallocates
    /// 64 MiB segments: at least twice that).
    pub tmpfs_mib: u64,
    /// Its `--quota-backend-bytes`.
    pub quota_bytes: u64,
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    log: PathBuf,
    process: Option<TrackedProcess>,
}

/// The members' `--election-timeout` (ms): give it to controllers as
/// `--etcd-election-timeout`, which decides the smallest `--leader-ttl` they accept (3 s here).
pub const ELECTION_TIMEOUT_MS: &str = "250";

/// A running etcd cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    run: RunDir,
    /// The network namespace the members (and etcdctl) run in; None: the current one.
    netns: Option<String>,
    /// The member on a small tmpfs, if any (its mount is removed on drop).
    small: Option<SmallMember>,
    /// Whether the small member's tmpfs is mounted.
    mounted: bool,
    /// More flags for every member (e.g. `--max-txn-ops`).
    flags: Vec<String>,
}

impl EtcdCluster {
    /// Start `n` members and wait until the cluster commits a write.
    pub fn start(n: usize) -> Result<Self, String> {
        Self::start_in(n, None)
    }

    /// [`EtcdCluster::start`] inside network namespace `netns` (on its loopback), e.g. a
    /// [`crate::NetnsLab`]'s controller namespace, for controllers started there.
    pub fn start_in(n: usize, netns: Option<&str>) -> Result<Self, String> {
        Self::start_with(n, netns, None)
    }

    /// [`EtcdCluster::start_in`] with member `small.member` on a tmpfs of its own and a small
    /// backend quota (mounts need root).
    pub fn start_with(
        n: usize,
        netns: Option<&str>,
        small: Option<SmallMember>,
    ) -> Result<Self, String> {
        Self::start_full(n, netns, small, &[])
    }

    /// [`EtcdCluster::start`] with more flags for every member, e.g. its limits
    /// (`--max-txn-ops`, `--max-request-bytes`).
    pub fn start_with_flags(n: usize, flags: &[&str]) -> Result<Self, String> {
        Self::start_full(n, None, None, flags)
    }

    fn start_full(
        n: usize,
        netns: Option<&str>,
        small: Option<SmallMember>,
        flags: &[&str],
    ) -> Result<Self, String> {
        if small.is_some_and(|s| s.member >= n) {
            return Err(format!(
                "no etcd member {:?} of {n}",
                small.map(|s| s.member)
            ));
        }
        let bin = etcd_bin();
        if !bin.exists() {
            return Err(format!(
                "{} not found: install etcd-server (scripts/deps.sh)",
                bin.display()
            ));
        }
        // The ports are picked before etcd binds them, so another process may take one in
        // between: a member that could not bind says so in its log, and the cluster starts
        // again on fresh ports.
        let mut attempt = 1;
        loop {
            match Self::start_once(n, netns, small, flags) {
                Ok(c) => return Ok(c),
                Err((e, true)) if attempt < 3 => {
                    eprintln!("etcd: a port was taken before etcd bound it, again: {e}");
                    attempt += 1;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// One start on freshly picked ports; on failure, why and whether a port was taken (the
    /// members started are stopped).
    fn start_once(
        n: usize,
        netns: Option<&str>,
        small: Option<SmallMember>,
        flags: &[&str],
    ) -> Result<Self, (String, bool)> {
        let run = RunDir::create().map_err(|e| (e.to_string(), false))?;
        let mut members = Vec::new();
        for i in 0..n {
            let name = format!("m{i}");
            members.push(Member {
                data: run.path().join(format!("etcd-{name}")),
                log: run.path().join(format!("etcd-{name}.log")),
                name,
                client: free_port().map_err(|e| (e, false))?,
                peer: free_port().map_err(|e| (e, false))?,
                process: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("flowmesh-{}", run.id());
        let mut c = EtcdCluster {
            members,
            initial_cluster,
            token,
            run,
            netns: netns.map(str::to_string),
            small,
            mounted: false,
            flags: flags.iter().map(|f| f.to_string()).collect(),
        };
        let started = c
            .mount_small()
            .and_then(|()| (0..n).try_for_each(|i| c.spawn(i)))
            .and_then(|()| c.wait_writable(Duration::from_secs(30)));
        match started {
            Ok(()) => Ok(c),
            Err(e) => Err((e, c.a_port_was_taken())),
        }
    }

    /// Whether a member's log says it could not bind its port.
    fn a_port_was_taken(&self) -> bool {
        self.members.iter().any(|m| {
            std::fs::read_to_string(&m.log).is_ok_and(|l| l.contains("address already in use"))
        })
    }

    /// Mounts the small member's tmpfs on its data directory.
    fn mount_small(&mut self) -> Result<(), String> {
        let Some(s) = self.small else { return Ok(()) };
        let dir = &self.members[s.member].data;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={}m,mode=0700", s.tmpfs_mib))
            .arg("flowmesh-etcd-small")
            .arg(dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount a tmpfs on {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        self.mounted = true;
        Ok(())
    }

    /// The small member's data directory (its tmpfs), if there is one.
    pub fn small_member(&self) -> Option<(SmallMember, PathBuf)> {
        let s = self.small?;
        Some((s, self.members[s.member].data.clone()))
    }

    /// Client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client)
    }

    /// `etcdctl` against member `i` alone, `input` on its standard input.
    pub fn etcdctl_at(&self, i: usize, args: &[&str], input: &[u8]) -> Result<String, String> {
        use std::io::Write;
        let mut child = self
            .command(PathBuf::from("etcdctl"))
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoint(i))
            .arg("--command-timeout=5s")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run etcdctl: {e} (install etcd-client)"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // etcdctl may refuse before it reads: a broken pipe is its error, read below.
            let _ = stdin.write_all(input);
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| format!("{}: {e}", m.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let mut cmd = self.command(etcd_bin());
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--initial-cluster-state")
            .arg("new")
            // Loopback: elections in well under a second (etcd wants at least 5 heartbeats
            // per election timeout). Controllers are told with --etcd-election-timeout.
            .arg("--heartbeat-interval")
            .arg("50")
            .arg("--election-timeout")
            .arg(ELECTION_TIMEOUT_MS);
        if let Some(s) = self.small.filter(|s| s.member == i) {
            cmd.arg("--quota-backend-bytes")
                .arg(s.quota_bytes.to_string());
        }
        cmd.args(&self.flags);
        cmd.stdout(Stdio::from(log)).stderr(Stdio::from(err));
        let p = TrackedProcess::spawn(format!("etcd {}", m.name), &mut cmd)
            .map_err(|e| e.to_string())?;
        self.members[i].process = Some(p);
        Ok(())
    }

    /// `program`, run in the cluster's namespace (`ip netns exec` execs it: same PID).
    fn command(&self, program: PathBuf) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(program);
                c
            }
        }
    }

    /// Every member's client URL, comma-separated (for `--etcd-endpoints`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many members there are.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// PID of member `i` while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members
            .get(i)?
            .process
            .as_ref()
            .map(TrackedProcess::pid)
    }

    /// SIGKILL member `i` (its data directory stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].process.take() {
            p.kill_now();
        }
    }

    /// Start member `i` again on its ports and data directory.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        self.spawn(i)
    }

    /// `etcdctl` against the live members, with a short command timeout.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(PathBuf::from("etcdctl"))
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoints())
            .arg("--command-timeout=2s")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run etcdctl: {e} (install etcd-client)"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// Each live member's raft id (as etcd prints it: decimal) and the leader's id as that
    /// member sees it, by member index.
    fn statuses(&self) -> Result<Vec<(usize, u64, u64)>, String> {
        let out = self.etcdctl(&["endpoint", "status", "-w", "json"])?;
        let v: serde_json::Value = serde_json::from_str(&out)
            .map_err(|e| format!("etcdctl endpoint status: {e}: {out}"))?;
        let mut found = Vec::new();
        for s in v.as_array().into_iter().flatten() {
            let ep = s["Endpoint"].as_str().unwrap_or_default();
            let Some(i) = self
                .members
                .iter()
                .position(|m| ep == format!("http://127.0.0.1:{}", m.client))
            else {
                continue;
            };
            let id = s["Status"]["header"]["member_id"].as_u64().unwrap_or(0);
            let leader = s["Status"]["leader"].as_u64().unwrap_or(0);
            found.push((i, id, leader));
        }
        Ok(found)
    }

    /// The index of the member that is raft leader now.
    pub fn leader(&self) -> Result<usize, String> {
        let st = self.statuses()?;
        st.iter()
            .find(|(_, id, leader)| id == leader && *id != 0)
            .map(|(i, _, _)| *i)
            .ok_or_else(|| format!("no etcd member is leader: {st:?}"))
    }

    /// Make member `i` the raft leader (`etcdctl move-leader`), and wait until it is.
    pub fn move_leader(&self, i: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.statuses()?;
            let id = st
                .iter()
                .find(|(j, _, _)| *j == i)
                .map(|(_, id, _)| *id)
                .ok_or_else(|| format!("etcd member {i} does not answer: {st:?}"))?;
            if self.leader() == Ok(i) {
                return Ok(());
            }
            let moved = self.etcdctl(&["move-leader", &format!("{id:x}")]);
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd member {i} did not become leader within {timeout:?}: {moved:?}"
                ));
            }
            if moved.is_err() {
                // An election is going on: ask again once it is over.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Wait until a write commits (the cluster has a leader and quorum).
    pub fn wait_writable(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.etcdctl(&["put", "/flowmesh-harness/health", "ok"]) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "etcd cluster not writable after {timeout:?}: {e}; logs in {}",
                        self.run.path().display()
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The run directory (members' data directories and logs).
    pub fn run_path(&self) -> &std::path::Path {
        self.run.path()
    }

    /// The log of member `i`.
    pub fn log_text(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        if self.mounted {
            if let Some((_, dir)) = self.small_member() {
                // Lazily: a process of the member's namespace may still hold it a moment.
                let _ = Command::new("umount").arg("-l").arg(&dir).status();
            }
        }
        self.run.remove();
    }
}
