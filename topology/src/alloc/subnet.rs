//! Node subnets (HostSubnet) cut from the cluster ranges, tried in order.

use super::AllocError;
use crate::cidr::Ipv4Cidr;
use crate::config::ClusterNetworkEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Hands out node subnets from the cluster ranges in order, sequentially from a moving cursor
/// per range (a released subnet is reused only after the cursor wraps).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSubnetAllocator {
    ranges: Vec<ClusterNetworkEntry>,
    cursors: Vec<u64>,
    used_per_range: Vec<u64>,
    used: BTreeSet<Ipv4Cidr>,
}

impl HostSubnetAllocator {
    /// An allocator over validated ranges.
    pub fn new(ranges: &[ClusterNetworkEntry]) -> Self {
        HostSubnetAllocator {
            ranges: ranges.to_vec(),
            cursors: vec![0; ranges.len()],
            used_per_range: vec![0; ranges.len()],
            used: BTreeSet::new(),
        }
    }

    /// Append ranges (the config gained new ones); existing allocations are kept.
    pub fn extend_ranges(&mut self, ranges: &[ClusterNetworkEntry]) {
        for r in ranges.iter().skip(self.ranges.len()) {
            self.ranges.push(*r);
            self.cursors.push(0);
            self.used_per_range.push(0);
        }
    }

    fn count(r: &ClusterNetworkEntry) -> u64 {
        1u64 << (r.host_prefix - r.cidr.prefix()) as u32
    }

    /// Allocate the next free subnet.
    pub fn allocate(&mut self) -> Result<Ipv4Cidr, AllocError> {
        for (i, r) in self.ranges.iter().enumerate() {
            let count = Self::count(r);
            if self.used_per_range[i] >= count {
                continue;
            }
            let start = self.cursors[i] % count;
            for k in 0..count {
                let idx = (start + k) % count;
                if let Some(s) = r.cidr.subnet(r.host_prefix, idx) {
                    if !self.used.contains(&s) {
                        self.used.insert(s);
                        self.used_per_range[i] += 1;
                        self.cursors[i] = idx + 1;
                        return Ok(s);
                    }
                }
            }
        }
        Err(AllocError::SubnetsExhausted {
            total: self.ranges.iter().map(Self::count).sum(),
        })
    }

    fn range_of(&self, s: &Ipv4Cidr) -> Option<usize> {
        self.ranges
            .iter()
            .position(|r| r.host_prefix == s.prefix() && r.cidr.covers(s))
    }

    /// Mark a given subnet as allocated (restoring saved state).
    pub fn reserve(&mut self, s: Ipv4Cidr) -> Result<(), AllocError> {
        let i = self.range_of(&s).ok_or(AllocError::SubnetNotInRanges(s))?;
        if !self.used.insert(s) {
            return Err(AllocError::SubnetInUse(s));
        }
        self.used_per_range[i] += 1;
        Ok(())
    }

    /// Release a subnet (node deleted). Releasing a free subnet does nothing.
    pub fn release(&mut self, s: Ipv4Cidr) {
        if self.used.remove(&s) {
            if let Some(i) = self.range_of(&s) {
                self.used_per_range[i] -= 1;
            }
        }
    }

    /// The per-range cursors (saved with the model so restore allocates identically).
    pub fn cursors(&self) -> &[u64] {
        &self.cursors
    }

    /// Restore per-range cursors (missing entries stay 0).
    pub fn set_cursors(&mut self, cursors: &[u64]) {
        for (c, v) in self.cursors.iter_mut().zip(cursors) {
            *c = *v;
        }
    }

    /// Whether `s` is allocated.
    pub fn is_used(&self, s: &Ipv4Cidr) -> bool {
        self.used.contains(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(c: &str, hp: u8) -> ClusterNetworkEntry {
        ClusterNetworkEntry {
            cidr: c.parse().expect("cidr"),
            host_prefix: hp,
        }
    }

    #[test]
    fn ranges_in_order_then_exhaustion() {
        let mut a = HostSubnetAllocator::new(&[e("10.0.0.0/23", 24), e("10.9.0.0/24", 25)]);
        let got: Vec<String> = (0..4)
            .map(|_| a.allocate().expect("free").to_string())
            .collect();
        assert_eq!(
            got,
            ["10.0.0.0/24", "10.0.1.0/24", "10.9.0.0/25", "10.9.0.128/25"]
        );
        assert_eq!(a.allocate(), Err(AllocError::SubnetsExhausted { total: 4 }));
        a.release("10.0.1.0/24".parse().expect("cidr"));
        assert_eq!(a.allocate().expect("free").to_string(), "10.0.1.0/24");
        assert!(matches!(
            a.reserve("10.0.1.0/24".parse().expect("cidr")),
            Err(AllocError::SubnetInUse(_))
        ));
        assert!(matches!(
            a.reserve("10.5.0.0/24".parse().expect("cidr")),
            Err(AllocError::SubnetNotInRanges(_))
        ));
    }
}
