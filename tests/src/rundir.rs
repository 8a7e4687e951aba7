//! Unique per-instance names and run directories, owner markers, and the reaper that removes
//! leftovers of earlier runs whose owning test process died.
//!
//! Naming: every harness instance gets an id `fmh<PID>-<N>` (`fmh` = flowmesh harness, PID of
//! the test process, N a per-process counter). Its run directory is `<base>/fmh<PID>-<N>` where
//! `<base>` is `$FLOWMESH_HARNESS_DIR` or `/tmp/flowmesh-harness`; every network namespace it
//! creates is named `fmh<PID>-<N>-<role>`. The directory holds `owner` (`PID STARTTIME`) and
//! `netns` (one namespace name per line). Only names with this prefix are ever reaped.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{HarnessError, Result};
use crate::process::{output_of, pid_alive, proc_cmdline, proc_stat};

/// Prefix of every run directory and namespace the harness creates.
pub const PREFIX: &str = "fmh";

static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);
static REAP_ONCE: Once = Once::new();

/// Base directory holding all run directories.
pub fn base_dir() -> PathBuf {
    std::env::var_os("FLOWMESH_HARNESS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/flowmesh-harness"))
}

/// A unique, owned run directory for one harness instance.
#[derive(Debug)]
pub struct RunDir {
    id: String,
    path: PathBuf,
    instance: u32,
}

impl RunDir {
    /// Creates `<base>/fmh<PID>-<N>` with its owner marker (and reaps stale runs once).
    pub fn create() -> Result<Self> {
        reap_stale_once();
        let pid = std::process::id();
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let id = format!("{PREFIX}{pid}-{instance}");
        let base = base_dir();
        let path = base.join(&id);
        if path.exists() {
            // A leftover of a dead process whose PID we now reuse: clean it first.
            reap_dir(&path);
        }
        fs::create_dir_all(&path).map_err(|source| HarnessError::Io {
            op: "create run dir",
            path: path.clone(),
            source,
        })?;
        let start = proc_stat(pid).map(|s| s.1).unwrap_or(0);
        let owner = path.join("owner");
        fs::write(&owner, format!("{pid} {start}\n")).map_err(|source| HarnessError::Io {
            op: "write",
            path: owner,
            source,
        })?;
        Ok(RunDir { id, path, instance })
    }

    /// The instance id `fmh<PID>-<N>`, also the prefix of its namespace names.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The per-process instance counter value (used to derive address ranges).
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a namespace name so a reaper can find it if this process dies.
    pub fn record_netns(&self, name: &str) -> Result<()> {
        let file = self.path.join("netns");
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .map_err(|source| HarnessError::Io {
                op: "open",
                path: file.clone(),
                source,
            })?;
        writeln!(f, "{name}").map_err(|source| HarnessError::Io {
            op: "append",
            path: file,
            source,
        })
    }

    /// Removes the directory (best effort; keeps it when FLOWMESH_KEEP_RUN_DIR is set).
    pub fn remove(&self) {
        if std::env::var_os("FLOWMESH_KEEP_RUN_DIR").is_some() {
            eprintln!("flowmesh-harness: keeping {}", self.path.display());
            return;
        }
        if let Err(e) = fs::remove_dir_all(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!(
                    "flowmesh-harness: remove {} failed: {e}",
                    self.path.display()
                );
            }
        }
    }
}

/// What the reaper removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReapReport {
    /// Run directories removed.
    pub dirs: Vec<PathBuf>,
    /// Processes killed.
    pub pids: Vec<u32>,
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
}

/// Runs [`reap_stale_runs`] once per process (harness constructors call it; later calls wait
/// for the first to finish and then return).
pub fn reap_stale_once() {
    REAP_ONCE.call_once(|| {
        let report = reap_stale_runs();
        if report != ReapReport::default() {
            eprintln!(
                "flowmesh-harness: reaped leftovers of dead runs: {} dirs, pids {:?}, namespaces {:?}",
                report.dirs.len(),
                report.pids,
                report.namespaces
            );
        }
    });
}

/// Owner PID encoded in a `fmh<PID>-<N>...` name.
fn owner_pid_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if rest[digits.len()..].starts_with('-') {
        digits.parse().ok()
    } else {
        None
    }
}

/// True if the run `fmh<PID>-<N>` belongs to a process that is still alive.
fn owner_alive(base: &Path, id: &str) -> bool {
    let Some(pid) = owner_pid_of(id) else {
        return true; // not ours to judge
    };
    let marker = base.join(id).join("owner");
    let start = fs::read_to_string(marker).ok().and_then(|t| {
        let mut it = t.split_whitespace();
        let p: u32 = it.next()?.parse().ok()?;
        let s: u64 = it.next()?.parse().ok()?;
        (p == pid && s != 0).then_some(s)
    });
    pid_alive(pid, start)
}

/// Removes leftovers (processes, namespaces, run directories) of runs whose owner is dead,
/// under [`base_dir`] and among all `fmh` namespaces.
pub fn reap_stale_runs() -> ReapReport {
    reap_stale_runs_in(&base_dir())
}

/// [`reap_stale_runs`] with run directories looked up under `base`.
pub fn reap_stale_runs_in(base: &Path) -> ReapReport {
    let mut report = ReapReport::default();
    // Namespaces first: `ip netns list` shows also ones whose directory is already gone.
    for ns in list_netns() {
        let Some(id) = run_id_of_netns(&ns) else {
            continue;
        };
        if !owner_alive(base, &id) {
            report.pids.extend(kill_netns_pids(&ns));
            if delete_netns(&ns) {
                report.namespaces.push(ns);
            }
        }
    }
    if let Ok(entries) = fs::read_dir(base) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if owner_pid_of(&name).is_none() || owner_alive(base, &name) {
                continue;
            }
            let (pids, nss) = reap_dir(&e.path());
            report.pids.extend(pids);
            report.namespaces.extend(nss);
            report.dirs.push(e.path());
        }
    }
    report
}

/// `fmh<PID>-<N>` from a namespace name `fmh<PID>-<N>-<role>`.
fn run_id_of_netns(ns: &str) -> Option<String> {
    owner_pid_of(ns)?;
    let mut parts = ns.splitn(3, '-');
    let a = parts.next()?;
    let b = parts.next()?;
    b.chars()
        .all(|c| c.is_ascii_digit())
        .then(|| format!("{a}-{b}"))
}

/// Kills processes recorded in pidfiles under `dir`, deletes its recorded namespaces, removes it.
fn reap_dir(dir: &Path) -> (Vec<u32>, Vec<String>) {
    let mut pids = Vec::new();
    let mut nss = Vec::new();
    let dir_text = dir.to_string_lossy().into_owned();
    let mut pidfiles = Vec::new();
    collect_pidfiles(dir, 3, &mut pidfiles);
    for pf in pidfiles {
        let Some(pid) = fs::read_to_string(&pf)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        else {
            continue;
        };
        // Only a live process whose command line names this run directory is ours.
        if pid_alive(pid, None) && proc_cmdline(pid).is_some_and(|c| c.contains(&dir_text)) {
            if let Ok(p) = i32::try_from(pid) {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                pids.push(pid);
            }
        }
    }
    if let Ok(list) = fs::read_to_string(dir.join("netns")) {
        for ns in list
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(PREFIX))
        {
            pids.extend(kill_netns_pids(ns));
            if delete_netns(ns) {
                nss.push(ns.to_owned());
            }
        }
    }
    let _ = fs::remove_dir_all(dir);
    (pids, nss)
}

fn collect_pidfiles(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && depth > 0 {
            collect_pidfiles(&p, depth - 1, out);
        } else if p.extension().is_some_and(|x| x == "pid") {
            out.push(p);
        }
    }
}

/// All network namespace names (`ip netns list`, first word of each line).
pub fn list_netns() -> Vec<String> {
    match output_of(Command::new("ip").args(["netns", "list"])) {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// SIGKILLs every process inside namespace `ns` (only used on our own `fmh` namespaces).
fn kill_netns_pids(ns: &str) -> Vec<u32> {
    let Ok(out) = output_of(Command::new("ip").args(["netns", "pids", ns])) else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed.push(pid.unsigned_abs());
        }
    }
    killed
}

/// `ip netns del ns`; true if it is gone afterwards.
pub(crate) fn delete_netns(ns: &str) -> bool {
    match output_of(Command::new("ip").args(["netns", "del", ns])) {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.contains("No such file") {
                eprintln!("flowmesh-harness: ip netns del {ns}: {}", err.trim());
            }
            false
        }
        Err(e) => {
            eprintln!("flowmesh-harness: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_is_parsed_from_names() {
        assert_eq!(owner_pid_of("fmh123-4"), Some(123));
        assert_eq!(owner_pid_of("fmh123-4-n1"), Some(123));
        assert_eq!(owner_pid_of("fmhx-4"), None);
        assert_eq!(owner_pid_of("olab-n1"), None);
        assert_eq!(owner_pid_of("fmh123"), None);
        assert_eq!(
            run_id_of_netns("fmh123-4-n1-pod1").as_deref(),
            Some("fmh123-4")
        );
        assert_eq!(run_id_of_netns("fmh123-x-n1"), None);
    }

    #[test]
    fn run_dirs_are_unique_and_marked() {
        let a = RunDir::create().expect("run dir a");
        let b = RunDir::create().expect("run dir b");
        assert_ne!(a.path(), b.path());
        assert!(owner_alive(&base_dir(), a.id()));
        let owner = fs::read_to_string(a.path().join("owner")).expect("owner");
        assert!(owner.starts_with(&format!("{} ", std::process::id())));
        a.remove();
        b.remove();
        assert!(!a.path().exists());
    }

    #[test]
    fn our_own_process_is_alive_with_its_start_time() {
        let me = std::process::id();
        let (_, start, _) = proc_stat(me).expect("stat of self");
        assert!(pid_alive(me, Some(start)));
        assert!(!pid_alive(me, Some(start + 1)));
    }
}
