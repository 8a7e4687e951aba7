//! NETIDs (VNIDs): 24-bit, 0 global, 1–9 reserved, 10..=16,777,215 allocated.

use super::AllocError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The global NETID: reaches and is reached by every namespace.
pub const NETID_GLOBAL: u32 = 0;
/// Lowest allocatable NETID.
pub const NETID_MIN: u32 = 10;
/// Highest NETID (24 bits).
pub const NETID_MAX: u32 = 0x00ff_ffff;

/// Reference-counted NETIDs: a value is freed when no namespace uses it any more. Allocation
/// scans upward from a moving cursor (wrapping), so it is deterministic given the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetIdAllocator {
    min: u32,
    max: u32,
    cursor: u32,
    refs: BTreeMap<u32, u32>,
    in_range: u32,
}

impl Default for NetIdAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl NetIdAllocator {
    /// The allocator over 10..=16,777,215.
    pub fn new() -> Self {
        Self::with_range(NETID_MIN, NETID_MAX)
    }

    /// An allocator over a narrower range (tests of exhaustion); clamped into 10..=2^24-1.
    pub fn with_range(min: u32, max: u32) -> Self {
        let min = min.clamp(NETID_MIN, NETID_MAX);
        let max = max.clamp(min, NETID_MAX);
        NetIdAllocator {
            min,
            max,
            cursor: min,
            refs: BTreeMap::new(),
            in_range: 0,
        }
    }

    /// Allocate a fresh NETID (reference count 1).
    pub fn allocate(&mut self) -> Result<u32, AllocError> {
        let total = self.max - self.min + 1;
        if self.in_range >= total {
            return Err(AllocError::NetIdsExhausted {
                min: self.min,
                max: self.max,
            });
        }
        let found = first_gap(&self.refs, self.cursor, self.max)
            .or_else(|| first_gap(&self.refs, self.min, self.max));
        let v = found.ok_or(AllocError::NetIdsExhausted {
            min: self.min,
            max: self.max,
        })?;
        self.refs.insert(v, 1);
        self.in_range += 1;
        self.cursor = if v >= self.max { self.min } else { v + 1 };
        Ok(v)
    }

    /// Take one more reference on `v` (a namespace joins it, or state is restored). 0 is
    /// never counted; reserved values 1–9 are accepted (placed there by an administrator).
    pub fn retain(&mut self, v: u32) -> Result<(), AllocError> {
        if v > NETID_MAX {
            return Err(AllocError::NetIdOutOfRange(v));
        }
        if v == NETID_GLOBAL {
            return Ok(());
        }
        let e = self.refs.entry(v).or_insert(0);
        if *e == 0 && (self.min..=self.max).contains(&v) {
            self.in_range += 1;
        }
        *e += 1;
        Ok(())
    }

    /// Drop one reference; the value is free again when none remain.
    pub fn release(&mut self, v: u32) {
        if let Some(n) = self.refs.get_mut(&v) {
            *n -= 1;
            if *n == 0 {
                self.refs.remove(&v);
                if (self.min..=self.max).contains(&v) {
                    self.in_range -= 1;
                }
            }
        }
    }

    /// Number of namespaces using `v` (0 for the global NETID and free values).
    pub fn users(&self, v: u32) -> u32 {
        self.refs.get(&v).copied().unwrap_or(0)
    }

    /// The scan cursor (saved with the model).
    pub fn cursor(&self) -> u32 {
        self.cursor
    }

    /// Restore the scan cursor.
    pub fn set_cursor(&mut self, c: u32) {
        self.cursor = c.clamp(self.min, self.max);
    }
}

/// The first value in `from..=max` absent from `used`.
fn first_gap(used: &BTreeMap<u32, u32>, from: u32, max: u32) -> Option<u32> {
    let mut want = from;
    for (&k, _) in used.range(from..=max) {
        if k != want {
            return Some(want);
        }
        if k == max {
            return None;
        }
        want = k + 1;
    }
    (want <= max).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_reuse_after_wrap_and_exhaustion() {
        let mut a = NetIdAllocator::with_range(10, 12);
        assert_eq!(a.allocate(), Ok(10));
        assert_eq!(a.allocate(), Ok(11));
        a.retain(11).expect("retain");
        a.release(10);
        assert_eq!(a.allocate(), Ok(12));
        assert_eq!(a.allocate(), Ok(10));
        assert_eq!(
            a.allocate(),
            Err(AllocError::NetIdsExhausted { min: 10, max: 12 })
        );
        a.release(11);
        assert_eq!(a.users(11), 1);
        assert!(a.allocate().is_err());
        a.release(11);
        assert_eq!(a.allocate(), Ok(11));
        assert_eq!(a.retain(1 << 24), Err(AllocError::NetIdOutOfRange(1 << 24)));
    }

    #[test]
    fn full_range_bounds() {
        let mut a = NetIdAllocator::new();
        a.set_cursor(NETID_MAX);
        assert_eq!(a.allocate(), Ok(NETID_MAX));
        assert_eq!(a.allocate(), Ok(NETID_MIN));
    }
}
