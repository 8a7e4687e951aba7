//! A small IPv4 CIDR type (`10.128.0.0/14`), serialized as its text form.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Why a CIDR string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// Not of the form `A.B.C.D/N`.
    #[error("malformed CIDR {0:?}: expected IPv4 address/prefix such as 10.128.0.0/14")]
    Malformed(String),
    /// An IPv6 address was given; flowmesh (like OpenShift SDN) is IPv4 only.
    #[error("IPv6 CIDR {0:?} is not supported: flowmesh is IPv4 only")]
    Ipv6(String),
    /// The prefix length is above 32.
    #[error("CIDR {0:?}: prefix length must be 0..=32")]
    BadPrefix(String),
    /// Host bits are set (`10.128.0.1/14`).
    #[error("CIDR {text:?} has host bits set; did you mean {canonical}?")]
    HostBitsSet {
        /// The text given.
        text: String,
        /// The network address with host bits cleared.
        canonical: Ipv4Cidr,
    },
}

/// An IPv4 network: address with host bits cleared and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Cidr {
    addr: u32,
    prefix: u8,
}

impl Ipv4Cidr {
    /// A network from an address and prefix; host bits are cleared. `prefix` is clamped to 32.
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Self {
        let prefix = prefix.min(32);
        Ipv4Cidr {
            addr: u32::from(addr) & mask(prefix),
            prefix,
        }
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The netmask as an integer.
    pub fn mask_u32(&self) -> u32 {
        mask(self.prefix)
    }

    /// The last address of the network.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr | !mask(self.prefix))
    }

    /// Number of addresses in the network.
    pub fn size(&self) -> u64 {
        1u64 << (32 - self.prefix as u32)
    }

    /// The address at `offset` from the network address, if inside the network.
    pub fn addr_at(&self, offset: u64) -> Option<Ipv4Addr> {
        (offset < self.size()).then(|| Ipv4Addr::from(self.addr + offset as u32))
    }

    /// The offset of `ip` from the network address, if inside.
    pub fn offset_of(&self, ip: Ipv4Addr) -> Option<u64> {
        self.contains(ip)
            .then(|| (u32::from(ip) - self.addr) as u64)
    }

    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == self.addr
    }

    /// Whether the two networks share any address.
    pub fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        let p = self.prefix.min(other.prefix);
        self.addr & mask(p) == other.addr & mask(p)
    }

    /// Whether `other` lies entirely inside `self`.
    pub fn covers(&self, other: &Ipv4Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.network())
    }

    /// The `index`-th subnet of length `sub_prefix` inside this network, if it exists.
    pub fn subnet(&self, sub_prefix: u8, index: u64) -> Option<Ipv4Cidr> {
        if sub_prefix < self.prefix || sub_prefix > 32 {
            return None;
        }
        let count = 1u64 << (sub_prefix - self.prefix) as u32;
        if index >= count {
            return None;
        }
        let step = 1u64 << (32 - sub_prefix as u32);
        Some(Ipv4Cidr {
            addr: self.addr + (index * step) as u32,
            prefix: sub_prefix,
        })
    }

    /// The index of `sub` among this network's subnets of its length, if it is one.
    pub fn subnet_index(&self, sub: &Ipv4Cidr) -> Option<u64> {
        if !self.covers(sub) {
            return None;
        }
        Some(((sub.addr - self.addr) as u64) >> (32 - sub.prefix as u32))
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix.min(32) as u32)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| CidrError::Malformed(s.to_string()))?;
        if a.contains(':') {
            return Err(CidrError::Ipv6(s.to_string()));
        }
        let addr: Ipv4Addr = a.parse().map_err(|_| CidrError::Malformed(s.to_string()))?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CidrError::Malformed(s.to_string()));
        }
        let prefix: u8 = p.parse().map_err(|_| CidrError::BadPrefix(s.to_string()))?;
        if prefix > 32 {
            return Err(CidrError::BadPrefix(s.to_string()));
        }
        let c = Ipv4Cidr::new(addr, prefix);
        if c.network() != addr {
            return Err(CidrError::HostBitsSet {
                text: s.to_string(),
                canonical: c,
            });
        }
        Ok(c)
    }
}

impl Serialize for Ipv4Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ipv4Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Ipv4Cidr {
        s.parse().expect("valid cidr")
    }

    #[test]
    fn parse_and_errors() {
        assert_eq!(c("10.128.0.0/14").to_string(), "10.128.0.0/14");
        assert!(matches!(
            "10.0.0.0".parse::<Ipv4Cidr>(),
            Err(CidrError::Malformed(_))
        ));
        assert!(matches!(
            "fd00::/64".parse::<Ipv4Cidr>(),
            Err(CidrError::Ipv6(_))
        ));
        assert!(matches!(
            "10.0.0.0/33".parse::<Ipv4Cidr>(),
            Err(CidrError::BadPrefix(_))
        ));
        assert!(matches!(
            "10.0.0.0/".parse::<Ipv4Cidr>(),
            Err(CidrError::Malformed(_))
        ));
        assert!(matches!(
            "10.128.0.1/14".parse::<Ipv4Cidr>(),
            Err(CidrError::HostBitsSet { .. })
        ));
    }

    #[test]
    fn overlap_contains_subnets() {
        assert!(c("10.128.0.0/14").overlaps(&c("10.130.0.0/16")));
        assert!(!c("10.128.0.0/14").overlaps(&c("10.132.0.0/14")));
        assert!(c("0.0.0.0/0").overlaps(&c("1.2.3.0/24")));
        let s = c("10.128.0.0/14").subnet(23, 3).expect("subnet");
        assert_eq!(s, c("10.128.6.0/23"));
        assert_eq!(c("10.128.0.0/14").subnet_index(&s), Some(3));
        assert_eq!(c("10.128.0.0/14").subnet(23, 512), None);
        assert_eq!(
            c("10.128.6.0/23").broadcast(),
            Ipv4Addr::new(10, 128, 7, 255)
        );
        assert_eq!(c("0.0.0.0/0").size(), 1 << 32);
    }
}
