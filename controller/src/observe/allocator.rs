//! Which memory allocator the controller was built with (the `jemalloc` feature, the default,
//! or `mimalloc`; glibc's malloc without either), and what it holds when it can say:
//! jemalloc's statistics (`tikv-jemalloc-ctl`, a safe interface) as metrics.

/// The allocator this build uses as the global allocator of `flowmesh-controller`.
pub fn name() -> &'static str {
    if cfg!(feature = "jemalloc") {
        "jemalloc"
    } else if cfg!(feature = "mimalloc") {
        "mimalloc"
    } else {
        "glibc"
    }
}

/// jemalloc's view of the process's heap, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes in live allocations the program holds (`stats.allocated`): the live state.
    pub allocated: u64,
    /// Bytes in pages with live allocations (`stats.active`).
    pub active: u64,
    /// Bytes of physically resident pages the allocator maps, metadata included
    /// (`stats.resident`).
    pub resident: u64,
    /// Bytes in chunks mapped by the allocator (`stats.mapped`).
    pub mapped: u64,
    /// Bytes of virtual memory retained for reuse, not resident (`stats.retained`).
    pub retained: u64,
    /// Bytes of the allocator's own metadata (`stats.metadata`).
    pub metadata: u64,
}

/// The allocator's statistics now; None when the allocator keeps none this build can read
/// (glibc, mimalloc).
#[cfg(feature = "jemalloc")]
pub fn stats() -> Option<AllocStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are a snapshot refreshed by advancing the epoch.
    epoch::advance().ok()?;
    let b = |r: tikv_jemalloc_ctl::Result<usize>| r.ok().map(|v| v as u64);
    Some(AllocStats {
        allocated: b(stats::allocated::read())?,
        active: b(stats::active::read())?,
        resident: b(stats::resident::read())?,
        mapped: b(stats::mapped::read())?,
        retained: b(stats::retained::read())?,
        metadata: b(stats::metadata::read())?,
    })
}

/// The allocator's statistics now; None when the allocator keeps none this build can read
/// (glibc, mimalloc).
#[cfg(not(feature = "jemalloc"))]
pub fn stats() -> Option<AllocStats> {
    None
}

/// Whether jemalloc's background purging threads run (None: not jemalloc).
#[cfg(feature = "jemalloc")]
pub fn background_thread() -> Option<bool> {
    tikv_jemalloc_ctl::background_thread::read().ok()
}

/// Whether jemalloc's background purging threads run (None: not jemalloc).
#[cfg(not(feature = "jemalloc"))]
pub fn background_thread() -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_follows_the_features() {
        let want = if cfg!(feature = "jemalloc") {
            "jemalloc"
        } else if cfg!(feature = "mimalloc") {
            "mimalloc"
        } else {
            "glibc"
        };
        assert_eq!(name(), want);
        assert_eq!(stats().is_some(), cfg!(feature = "jemalloc"));
    }
}
