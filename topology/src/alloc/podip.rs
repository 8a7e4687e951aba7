//! Pod IPs from a node subnet, and the pod MAC derived from the IP.

use super::AllocError;
use crate::cidr::Ipv4Cidr;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// The MAC of a pod: `0a:58:` followed by the four bytes of its IPv4 address.
pub fn pod_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x0a, 0x58, o[0], o[1], o[2], o[3]]
}

/// Pod addresses of one node subnet: the network address, the gateway (first address) and
/// the broadcast address are never handed out. The lowest free address is handed out, so an
/// address freed by a deleted pod goes to the next pod (as the CNI contract of flowmesh promises).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIpAllocator {
    subnet: Ipv4Cidr,
    cursor: u64,
    used: BTreeSet<u64>,
}

impl PodIpAllocator {
    /// An allocator over `subnet` (prefix at most /30).
    pub fn new(subnet: Ipv4Cidr) -> Self {
        PodIpAllocator {
            subnet,
            cursor: 2,
            used: BTreeSet::new(),
        }
    }

    fn first(&self) -> u64 {
        2
    }
    fn last(&self) -> u64 {
        self.subnet.size().saturating_sub(2)
    }

    /// Allocate the next free address.
    pub fn allocate(&mut self) -> Result<Ipv4Addr, AllocError> {
        let (first, last) = (self.first(), self.last());
        if last < first || self.used.len() as u64 > last - first {
            return Err(AllocError::PodIpsExhausted(self.subnet));
        }
        // The lowest free address: the first gap in the used ones, walked in order (one pass,
        // no look-up per candidate).
        let mut off = first;
        for &u in self.used.range(first..=last) {
            if u != off {
                break;
            }
            off += 1;
        }
        if off > last {
            return Err(AllocError::PodIpsExhausted(self.subnet));
        }
        self.used.insert(off);
        self.cursor = off + 1;
        self.subnet
            .addr_at(off)
            .ok_or(AllocError::PodIpsExhausted(self.subnet))
    }

    /// Mark a given address as allocated (restoring saved state).
    pub fn reserve(&mut self, ip: Ipv4Addr) -> Result<(), AllocError> {
        let off = self
            .subnet
            .offset_of(ip)
            .filter(|o| (self.first()..=self.last()).contains(o))
            .ok_or(AllocError::PodIpNotInSubnet {
                ip,
                subnet: self.subnet,
            })?;
        if !self.used.insert(off) {
            return Err(AllocError::PodIpInUse(ip));
        }
        Ok(())
    }

    /// Release an address (pod deleted).
    pub fn release(&mut self, ip: Ipv4Addr) {
        if let Some(off) = self.subnet.offset_of(ip) {
            self.used.remove(&off);
        }
    }

    /// The cursor (saved with the model).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Restore the cursor.
    pub fn set_cursor(&mut self, c: u64) {
        self.cursor = c;
    }

    /// The node subnet.
    pub fn subnet(&self) -> Ipv4Cidr {
        self.subnet
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_reserved_and_exhausts() {
        let mut a = PodIpAllocator::new("10.1.0.0/29".parse().expect("cidr"));
        let ips: Vec<String> = (0..5)
            .map(|_| a.allocate().expect("ip").to_string())
            .collect();
        assert_eq!(
            ips,
            ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"]
        );
        assert!(matches!(a.allocate(), Err(AllocError::PodIpsExhausted(_))));
        a.release(Ipv4Addr::new(10, 1, 0, 3));
        assert_eq!(a.allocate(), Ok(Ipv4Addr::new(10, 1, 0, 3)));
        // the lowest free address goes first, whatever was allocated last
        a.release(Ipv4Addr::new(10, 1, 0, 6));
        a.release(Ipv4Addr::new(10, 1, 0, 2));
        assert_eq!(a.allocate(), Ok(Ipv4Addr::new(10, 1, 0, 2)));
        assert_eq!(a.allocate(), Ok(Ipv4Addr::new(10, 1, 0, 6)));
        assert!(a.reserve(Ipv4Addr::new(10, 1, 0, 1)).is_err());
        assert!(a.reserve(Ipv4Addr::new(10, 1, 0, 7)).is_err());
        assert_eq!(
            a.reserve(Ipv4Addr::new(10, 1, 0, 4)),
            Err(AllocError::PodIpInUse(Ipv4Addr::new(10, 1, 0, 4)))
        );
        assert_eq!(
            pod_mac(Ipv4Addr::new(10, 1, 0, 4)),
            [0x0a, 0x58, 10, 1, 0, 4]
        );
    }
}
