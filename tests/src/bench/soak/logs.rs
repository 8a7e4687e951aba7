//! Keeping the logs: the lab's run directory (replicas, shims, ovs-vswitchd, ovsdb-server) and
//! etcd's are removed with the lab, so their logs are copied next to the history first, where a
//! replica that panicked, or a switch that stalled, can still be read once the run is over.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::cluster::{lock, Cluster};

/// The most kept of one log (its end).
const MAX_BYTES: u64 = 32 << 20;

/// `<history without .jsonl>.logs`.
pub fn dir_for(history: &Path) -> PathBuf {
    let mut name = history
        .file_stem()
        .map(|s| s.to_os_string())
        .unwrap_or_else(|| "soak".into());
    name.push(".logs");
    history.with_file_name(name)
}

/// Whether a file is a log the harness or a daemon wrote.
fn is_log(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.ends_with(".log") || name.ends_with(".stderr")
}

/// Copies every log under `from` to `to`, the relative path flattened (`node1/ovs-vswitchd.log`
/// becomes `node1__ovs-vswitchd.log`), at most the last [`MAX_BYTES`] of each. Returns how many.
fn copy_logs(from: &Path, to: &Path, prefix: &str) -> Result<usize, String> {
    let mut n = 0;
    let mut stack = vec![from.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() && is_log(&p) {
                let rel = p.strip_prefix(from).unwrap_or(&p);
                let flat = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("__");
                let dst = to.join(format!("{prefix}{flat}"));
                copy_tail(&p, &dst)
                    .map_err(|e| format!("{} -> {}: {e}", p.display(), dst.display()))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Removes the logs (files only, nothing else) directly in `dir`.
fn clear_logs(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_file()) && is_log(&p) {
            std::fs::remove_file(&p).map_err(|e| format!("remove {}: {e}", p.display()))?;
        }
    }
    Ok(())
}

fn copy_tail(src: &Path, dst: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::open(src)?;
    let len = f.metadata()?.len();
    if len > MAX_BYTES {
        f.seek(SeekFrom::Start(len - MAX_BYTES))?;
    }
    let mut buf = Vec::new();
    f.take(MAX_BYTES).read_to_end(&mut buf)?;
    std::fs::write(dst, buf)
}

/// Copies the lab's and etcd's logs to `to` (made if missing; the logs an earlier run left
/// there are removed first, so the directory holds this run's only); how many files.
pub fn keep(c: &Cluster, to: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(to).map_err(|e| format!("create {}: {e}", to.display()))?;
    clear_logs(to)?;
    let mut n = copy_logs(c.lab.run_dir(), to, "")?;
    let etcd = lock(&c.etcd).as_ref().map(|e| e.run_path().to_path_buf());
    if let Some(etcd) = etcd {
        n += copy_logs(&etcd, to, "etcd__")?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_copied_flat_and_only_logs() {
        let base = std::env::temp_dir().join(format!("soak-logs-test-{}", std::process::id()));
        let (from, to) = (base.join("run"), base.join("kept"));
        std::fs::create_dir_all(from.join("node1")).expect("test file");
        std::fs::create_dir_all(&to).expect("test file");
        std::fs::write(from.join("controller.0.log"), "panicked at x").expect("test file");
        std::fs::write(from.join("node1/ovs-vswitchd.log"), "Unreasonably long")
            .expect("test file");
        std::fs::write(from.join("node1/conf.db"), "db").expect("test file");
        assert_eq!(copy_logs(&from, &to, "").expect("test file"), 2);
        assert_eq!(
            std::fs::read_to_string(to.join("node1__ovs-vswitchd.log")).expect("test file"),
            "Unreasonably long"
        );
        assert!(to.join("controller.0.log").exists());
        assert!(!to.join("node1__conf.db").exists());
        // A second run's logs replace the first's; other files stay.
        std::fs::write(to.join("notes.txt"), "mine").expect("test file");
        std::fs::remove_file(from.join("controller.0.log")).expect("test file");
        clear_logs(&to).expect("clear");
        assert_eq!(copy_logs(&from, &to, "").expect("test file"), 1);
        assert!(!to.join("controller.0.log").exists());
        assert!(to.join("notes.txt").exists());
        assert_eq!(
            dir_for(Path::new("/x/ci-seed33.jsonl")),
            PathBuf::from("/x/ci-seed33.logs")
        );
        std::fs::remove_dir_all(&base).expect("test file");
    }
}
