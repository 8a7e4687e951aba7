//! One private Open vSwitch: an ovsdb-server and an ovs-vswitchd sharing a run directory
//! (OVS_RUNDIR = OVS_LOGDIR = OVS_DBDIR = OVS_SYSCONFDIR = that directory), started as tracked
//! children (never `--detach`), optionally inside a network namespace via `ip netns exec`.
//! Also the `ovs-vsctl` / `ovs-ofctl` / `ovs-appctl` runners against it.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::process::{log_tail, run_checked, wait_until, TrackedProcess, TERM_GRACE};

/// Where Debian installs the Open vSwitch database schema.
pub const DEFAULT_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Time allowed for a daemon to create its sockets.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// `--timeout` passed to every ovs-* client.
const CLIENT_TIMEOUT_S: u32 = 30;

/// Which datapath flavour a vswitchd runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatapathMode {
    /// `--enable-dummy --disable-system --disable-system-route`: bridges use datapath_type=dummy.
    Dummy,
    /// `--disable-system`: userspace `netdev` datapath with real packets (used in namespaces).
    Netdev,
}

/// A private ovsdb-server + ovs-vswitchd pair; both are stopped and reaped on drop.
#[derive(Debug)]
pub struct OvsInstance {
    dir: PathBuf,
    netns: Option<String>,
    mode: DatapathMode,
    vswitchd: Option<TrackedProcess>,
    ovsdb: Option<TrackedProcess>,
    restarts: u32,
}

impl OvsInstance {
    /// Creates the database in `dir` and starts both daemons (inside `netns` if given).
    pub fn start(dir: &Path, netns: Option<&str>, mode: DatapathMode) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|source| HarnessError::Io {
            op: "create dir",
            path: dir.to_owned(),
            source,
        })?;
        let mut me = OvsInstance {
            dir: dir.to_owned(),
            netns: netns.map(str::to_owned),
            mode,
            vswitchd: None,
            ovsdb: None,
            restarts: 0,
        };
        let schema = std::env::var("FLOWMESH_OVS_SCHEMA").unwrap_or_else(|_| DEFAULT_SCHEMA.into());
        let db = dir.join("conf.db");
        run_checked(
            Command::new("ovsdb-tool")
                .arg("create")
                .arg(&db)
                .arg(&schema),
        )?;
        me.start_ovsdb()?;
        me.vsctl(["--no-wait", "init"])?;
        me.start_vswitchd()?;
        Ok(me)
    }

    /// The run directory (also OVS_RUNDIR).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The namespace the daemons run in, if any.
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    /// PID of ovs-vswitchd while it runs.
    pub fn vswitchd_pid(&self) -> Option<u32> {
        self.vswitchd.as_ref().map(TrackedProcess::pid)
    }

    /// PID of ovsdb-server while it runs.
    pub fn ovsdb_pid(&self) -> Option<u32> {
        self.ovsdb.as_ref().map(TrackedProcess::pid)
    }

    /// Path of vswitchd's unixctl socket (`ovs-appctl -t PATH`).
    pub fn vswitchd_ctl(&self) -> PathBuf {
        self.dir.join("ovs-vswitchd.ctl")
    }

    /// Path of a bridge's OpenFlow management socket (`unix:PATH` for a controller to dial).
    pub fn mgmt_socket(&self, bridge: &str) -> PathBuf {
        self.dir.join(format!("{bridge}.mgmt"))
    }

    fn daemon_command(&self, program: &str) -> Command {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        };
        self.set_env(&mut cmd);
        cmd
    }

    fn set_env(&self, cmd: &mut Command) {
        for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"] {
            cmd.env(var, &self.dir);
        }
    }

    fn stderr_file(&self, name: &str) -> Result<Stdio> {
        let path = self.dir.join(name);
        File::options()
            .create(true)
            .append(true)
            .open(&path)
            .map(Stdio::from)
            .map_err(|source| HarnessError::Io {
                op: "open",
                path,
                source,
            })
    }

    fn start_ovsdb(&mut self) -> Result<()> {
        let d = &self.dir;
        let sock = d.join("db.sock");
        let mut cmd = self.daemon_command("ovsdb-server");
        cmd.arg("--no-chdir")
            .arg(format!(
                "--pidfile={}",
                d.join("ovsdb-server.pid").display()
            ))
            .arg(format!(
                "--log-file={}",
                d.join("ovsdb-server.log").display()
            ))
            .arg(format!(
                "--unixctl={}",
                d.join("ovsdb-server.ctl").display()
            ))
            .arg("-vconsole:off")
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(d.join("conf.db"))
            .stdout(self.stderr_file("ovsdb-server.stderr")?)
            .stderr(self.stderr_file("ovsdb-server.stderr")?);
        let child = TrackedProcess::spawn("ovsdb-server", &mut cmd)?;
        let log = d.join("ovsdb-server.log");
        self.ovsdb = Some(child);
        self.wait_ready("ovsdb-server", &sock, &log, |s| s.ovsdb.as_mut())
    }

    /// Starts ovs-vswitchd (again) against the existing database and waits for its socket.
    pub fn start_vswitchd(&mut self) -> Result<()> {
        if self.vswitchd.is_some() {
            return Err(HarnessError::Invalid(
                "ovs-vswitchd is already running".into(),
            ));
        }
        let d = self.dir.clone();
        let ctl = self.vswitchd_ctl();
        let _ = fs::remove_file(&ctl); // stale after a SIGKILL
        let mut cmd = self.daemon_command("ovs-vswitchd");
        match self.mode {
            DatapathMode::Dummy => {
                cmd.args([
                    "--enable-dummy",
                    "--disable-system",
                    "--disable-system-route",
                ]);
            }
            DatapathMode::Netdev => {
                cmd.arg("--disable-system");
            }
        }
        cmd.arg("--no-chdir")
            .arg(format!(
                "--pidfile={}",
                d.join("ovs-vswitchd.pid").display()
            ))
            .arg(format!(
                "--log-file={}",
                d.join("ovs-vswitchd.log").display()
            ))
            .arg(format!("--unixctl={}", ctl.display()))
            .args(["-vconsole:off", "-vvconn:file:info"])
            .arg(format!("unix:{}", d.join("db.sock").display()))
            .stdout(self.stderr_file("ovs-vswitchd.stderr")?)
            .stderr(self.stderr_file("ovs-vswitchd.stderr")?);
        let child = TrackedProcess::spawn("ovs-vswitchd", &mut cmd)?;
        self.vswitchd = Some(child);
        let log = d.join("ovs-vswitchd.log");
        self.wait_ready("ovs-vswitchd", &ctl, &log, |s| s.vswitchd.as_mut())
    }

    fn wait_ready(
        &mut self,
        daemon: &str,
        socket: &Path,
        log: &Path,
        child: impl Fn(&mut Self) -> Option<&mut TrackedProcess>,
    ) -> Result<()> {
        let mut died = None;
        let res = wait_until(
            &format!("{daemon} socket {}", socket.display()),
            START_TIMEOUT,
            || {
                if let Some(st) = child(self).and_then(TrackedProcess::try_exited) {
                    died = Some(st);
                    return Ok(true);
                }
                // The file appears at bind(), before listen(): only a connect proves readiness.
                Ok(UnixStream::connect(socket).is_ok())
            },
        );
        if let Some(st) = died {
            return Err(HarnessError::DaemonDied {
                daemon: daemon.to_owned(),
                status: st.to_string(),
                log_tail: log_tail(log, 15),
            });
        }
        res
    }

    /// Kills ovs-vswitchd with SIGKILL (a crash: OVS keeps no flows) and reaps it.
    pub fn kill_vswitchd(&mut self) {
        if let Some(mut p) = self.vswitchd.take() {
            p.kill_now();
        }
    }

    /// Stops ovs-vswitchd (SIGTERM), starts it again on the same database, and waits until it
    /// has re-applied the configuration. Flows are gone afterwards, as with a real restart.
    pub fn restart_vswitchd(&mut self) -> Result<()> {
        if let Some(mut p) = self.vswitchd.take() {
            p.terminate(TERM_GRACE);
        }
        self.start_vswitchd()?;
        self.restarts += 1;
        // A database change makes ovs-vsctl wait until the new vswitchd has caught up.
        self.vsctl([
            "set",
            "Open_vSwitch",
            ".",
            &format!("external_ids:flowmesh-harness-restarts={}", self.restarts),
        ])?;
        Ok(())
    }

    /// Runs `ovs-vsctl --timeout=30 ARGS` against this instance; returns stdout.
    pub fn vsctl<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("ovs-vsctl");
        self.set_env(&mut cmd);
        cmd.arg(format!("--timeout={CLIENT_TIMEOUT_S}")).args(args);
        run_checked(&mut cmd)
    }

    /// Runs `ovs-ofctl -O OpenFlow13 --timeout=30 ARGS`; returns stdout.
    pub fn ofctl<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("ovs-ofctl");
        self.set_env(&mut cmd);
        cmd.args(["-O", "OpenFlow13"])
            .arg(format!("--timeout={CLIENT_TIMEOUT_S}"))
            .args(args);
        run_checked(&mut cmd)
    }

    /// Runs `ovs-appctl -t <vswitchd ctl> ARGS`; returns stdout.
    pub fn appctl<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("ovs-appctl");
        self.set_env(&mut cmd);
        cmd.arg(format!("--timeout={CLIENT_TIMEOUT_S}"))
            .arg("-t")
            .arg(self.vswitchd_ctl())
            .args(args);
        run_checked(&mut cmd)
    }

    /// `ovs-ofctl dump-flows BRIDGE --no-stats`, header dropped, lines trimmed and sorted.
    pub fn dump_flows(&self, bridge: &str) -> Result<Vec<String>> {
        let text = self.ofctl(["dump-flows", bridge, "--no-stats"])?;
        Ok(normalize_dump(&text))
    }

    /// `ovs-ofctl dump-groups BRIDGE`, header dropped, lines trimmed and sorted.
    pub fn dump_groups(&self, bridge: &str) -> Result<Vec<String>> {
        let text = self.ofctl(["dump-groups", bridge])?;
        Ok(normalize_dump(&text))
    }

    /// Adds flows (ovs-ofctl text, one per entry) in one ONF bundle via `--bundle add-flows`.
    pub fn add_flows(&self, bridge: &str, flows: &[String]) -> Result<()> {
        let file = self.write_temp("flows", &flows.join("\n"))?;
        let res = self.ofctl([
            OsStr::new("--bundle"),
            OsStr::new("add-flows"),
            OsStr::new(bridge),
            file.as_os_str(),
        ]);
        let _ = fs::remove_file(&file);
        res.map(|_| ())
    }

    /// Replaces the whole flow table with `flows` (`ovs-ofctl --bundle replace-flows`).
    pub fn replace_flows(&self, bridge: &str, flows: &[String]) -> Result<()> {
        let file = self.write_temp("flows", &flows.join("\n"))?;
        let res = self.ofctl([
            OsStr::new("--bundle"),
            OsStr::new("replace-flows"),
            OsStr::new(bridge),
            file.as_os_str(),
        ]);
        let _ = fs::remove_file(&file);
        res.map(|_| ())
    }

    fn write_temp(&self, stem: &str, text: &str) -> Result<PathBuf> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("{stem}-{n}.txt"));
        fs::write(&path, format!("{text}\n")).map_err(|source| HarnessError::Io {
            op: "write",
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// Sets (replaces) the controller target of a bridge, e.g. `tcp:127.0.0.1:6653`.
    pub fn set_controller(&self, bridge: &str, target: &str) -> Result<()> {
        self.vsctl(["set-controller", bridge, target]).map(|_| ())
    }

    /// `ovs-appctl coverage/read-counter NAME` as a number.
    pub fn coverage_counter(&self, name: &str) -> Result<u64> {
        let text = self.appctl(["coverage/read-counter", name])?;
        text.trim().parse().map_err(|_| HarnessError::Parse {
            what: format!("coverage/read-counter {name}"),
            detail: text.trim().to_owned(),
        })
    }

    /// The OpenFlow port number OVS assigned to an interface.
    pub fn ofport(&self, iface: &str) -> Result<u32> {
        let text = self.vsctl(["get", "Interface", iface, "ofport"])?;
        match text.trim().parse::<i64>() {
            Ok(n) if n > 0 => u32::try_from(n).map_err(|_| HarnessError::Parse {
                what: format!("ofport of {iface}"),
                detail: text.trim().to_owned(),
            }),
            _ => Err(HarnessError::Parse {
                what: format!("ofport of {iface}"),
                detail: format!("{} (interface not attached?)", text.trim()),
            }),
        }
    }

    /// Stops both daemons (vswitchd first) and reaps them. Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.vswitchd.take() {
            p.terminate(TERM_GRACE);
        }
        if let Some(mut p) = self.ovsdb.take() {
            p.terminate(TERM_GRACE);
        }
    }
}

impl Drop for OvsInstance {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Normalizes `dump-flows`/`dump-groups` text: drops the reply header line(s), trims each
/// line, drops empty lines, sorts.
pub fn normalize_dump(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with("OFPST_") && !l.starts_with("NXST_"))
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_is_normalized() {
        let text = "OFPST_FLOW reply (OF1.3) (xid=0x2):\n table=10, priority=100,ip actions=output:3\n priority=0 actions=drop\n";
        assert_eq!(
            normalize_dump(text),
            vec![
                "priority=0 actions=drop".to_owned(),
                "table=10, priority=100,ip actions=output:3".to_owned()
            ]
        );
        let groups = "OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):\n group_id=5,type=all,bucket=bucket_id:0,actions=output:3\n";
        assert_eq!(
            normalize_dump(groups),
            vec!["group_id=5,type=all,bucket=bucket_id:0,actions=output:3".to_owned()]
        );
    }
}
