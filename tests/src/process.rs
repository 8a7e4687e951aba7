//! Child processes the harness starts: one-shot commands with typed errors, and tracked
//! long-running daemons that are killed by PID and reaped when dropped.
//!
//! PID 1 on the test machines does not reap orphans, so daemons are never started with
//! `--detach`: they stay our direct children and we `wait()` for them ourselves.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{HarnessError, Result};

/// How long a tracked process gets after SIGTERM before it is sent SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(3);

/// Renders a command line for error messages.
pub(crate) fn command_line(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion and returns its raw output (any exit status).
pub(crate) fn output_of(cmd: &mut Command) -> Result<Output> {
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|source| HarnessError::Spawn {
            program: command_line(cmd),
            source,
        })
}

/// Runs `cmd` and returns its stdout; a non-zero exit becomes [`HarnessError::CommandFailed`].
pub(crate) fn run_checked(cmd: &mut Command) -> Result<String> {
    let out = output_of(cmd)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(HarnessError::CommandFailed {
            command: command_line(cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            stdout: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        })
    }
}

/// Convenience: `program args...` checked, stdout returned.
pub(crate) fn run<I, S>(program: &str, args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_checked(Command::new(program).args(args))
}

/// A long-running child process that is terminated (SIGTERM, then SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct TrackedProcess {
    name: String,
    child: Child,
    exited: Option<ExitStatus>,
}

impl TrackedProcess {
    /// Spawns `cmd` (stdin from /dev/null) and tracks it under `name`.
    pub fn spawn(name: impl Into<String>, cmd: &mut Command) -> Result<Self> {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: command_line(cmd),
                source,
            })?;
        Ok(TrackedProcess {
            name: name.into(),
            child,
            exited: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn time.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Returns the exit status if the process has already exited (reaping it).
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.exited = Some(st);
            }
        }
        self.exited
    }

    /// Sends `sig` to the process (by PID) unless it has already been reaped.
    pub fn signal(&mut self, sig: Signal) -> Result<()> {
        if self.try_exited().is_some() {
            return Ok(());
        }
        let pid = pid_of(self.pid())?;
        kill(pid, sig).map_err(|e| HarnessError::Net {
            context: format!("kill -{sig} {} ({})", self.pid(), self.name),
            source: std::io::Error::from(e),
        })
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; always reaps. Returns the exit status.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(st) = self.try_exited() {
            return Some(st);
        }
        let _ = self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(st) = self.try_exited() {
                return Some(st);
            }
            thread::sleep(Duration::from_millis(2));
        }
        self.kill_now()
    }

    /// SIGKILL and reap (simulates a crash).
    pub fn kill_now(&mut self) -> Option<ExitStatus> {
        if let Some(st) = self.try_exited() {
            return Some(st);
        }
        let _ = self.signal(Signal::SIGKILL);
        match self.child.wait() {
            Ok(st) => {
                self.exited = Some(st);
                Some(st)
            }
            Err(e) => {
                eprintln!(
                    "flowmesh-harness: wait for {} ({}) failed: {e}",
                    self.name,
                    self.pid()
                );
                None
            }
        }
    }
}

impl Drop for TrackedProcess {
    fn drop(&mut self) {
        self.terminate(TERM_GRACE);
    }
}

/// Waits (at most `timeout`) for one connection on `listener` (made non-blocking here) from a
/// process that may exit first (`exited` says whether it has): the connection, held by the
/// caller, or what happened instead. For a stand-in server that accepts and never answers.
pub fn accept_from(
    listener: &std::net::TcpListener,
    mut exited: impl FnMut() -> Option<ExitStatus>,
    timeout: Duration,
) -> std::result::Result<std::net::TcpStream, String> {
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listener: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match listener.accept() {
            Ok((conn, _)) => return Ok(conn),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("accept: {e}")),
        }
        if let Some(st) = exited() {
            return Err(format!("exited ({st}) before it connected"));
        }
        if Instant::now() > deadline {
            return Err(format!("no connection within {timeout:?}"));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn pid_of(pid: u32) -> Result<Pid> {
    i32::try_from(pid)
        .map(Pid::from_raw)
        .map_err(|_| HarnessError::Invalid(format!("pid {pid} out of range")))
}

/// State letter and start time (clock ticks since boot) of a process, from /proc/PID/stat.
pub fn proc_stat(pid: u32) -> Option<(char, u64, u32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ..." -- comm may contain spaces and parentheses: split at the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start, ppid))
}

/// True if `pid` names a live process (not a zombie, not merely a thread id, which /proc also
/// answers for), optionally with the given start time.
pub fn pid_alive(pid: u32, start_time: Option<u64>) -> bool {
    match proc_stat(pid) {
        None => false,
        Some((state, start, _)) => {
            state != 'Z'
                && state != 'X'
                && start_time.is_none_or(|t| t == start)
                && thread_group_leader(pid)
        }
    }
}

/// True unless /proc/PID/status says PID is a non-leader thread of another process.
fn thread_group_leader(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_none_or(|tgid| tgid == pid)
}

/// The command line of `pid` with NULs turned into spaces, if readable.
pub fn proc_cmdline(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Polls `ready` every few milliseconds until it returns true or `timeout` passes.
pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::Timeout {
                what: what.to_owned(),
                timeout,
            });
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Last `n` lines of a log file (for error messages).
pub(crate) fn log_tail(path: &Path, n: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}
