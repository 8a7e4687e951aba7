//! The soak's history: one JSON object per line (faults, workload steps, probe results, the
//! verdict), each with `t_ms`, milliseconds since the run began, so that a failure can be read
//! back and replayed with the same seed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// The history file and the run's clock.
pub struct History {
    file: Mutex<BufWriter<File>>,
    t0: Instant,
    path: PathBuf,
}

impl History {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        }
        let f = File::create(path).map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(History {
            file: Mutex::new(BufWriter::new(f)),
            t0: Instant::now(),
            path: path.to_path_buf(),
        })
    }

    /// Where it is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Milliseconds since the run began.
    pub fn ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Milliseconds since the run began at `t`.
    pub fn ms_at(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.t0).as_millis()).unwrap_or(u64::MAX)
    }

    /// Appends one event (`event` is an object; `t_ms` and `event` name are added).
    pub fn log(&self, event: &str, mut v: serde_json::Value) {
        if let Some(o) = v.as_object_mut() {
            o.insert("t_ms".into(), self.ms().into());
            o.insert("event".into(), event.into());
        }
        let mut f = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        // A full disk must not stop the run; the verdict line still goes to stdout.
        let _ = writeln!(f, "{v}");
        // Each line out at once: a run can be followed while it goes, and a crash loses nothing.
        let _ = f.flush();
    }

    /// Writes buffered lines out.
    pub fn flush(&self) {
        let _ = self
            .file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flush();
    }
}
