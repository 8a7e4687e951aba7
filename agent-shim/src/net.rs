//! IPv4 prefixes (`10.128.0.0/14`), the pod MAC rule (`0a:58:` + the IPv4 address bytes) and
//! the host gateway port's name.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Name of the host gateway port (`tun0`, OpenShift SDN's).
pub const TUN0: &str = "tun0";

/// An IPv4 address with a prefix length; [`Ipv4Net::network`] gives the masked prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ipv4Net {
    addr: Ipv4Addr,
    prefix: u8,
}

/// A string that is not `a.b.c.d/len` with len <= 32.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IPv4 prefix (a.b.c.d/len, len <= 32)")]
pub struct BadPrefix(pub String);

impl Ipv4Net {
    /// Builds a prefix; `None` when `prefix > 32`.
    pub const fn new(addr: Ipv4Addr, prefix: u8) -> Option<Self> {
        if prefix <= 32 {
            Some(Ipv4Net { addr, prefix })
        } else {
            None
        }
    }

    /// `0.0.0.0/0`.
    pub const DEFAULT_ROUTE: Ipv4Net = Ipv4Net {
        addr: Ipv4Addr::UNSPECIFIED,
        prefix: 0,
    };

    /// The address as given (not masked).
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// Prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The netmask as a u32.
    fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    /// The network prefix (host bits cleared).
    pub fn network(&self) -> Ipv4Net {
        Ipv4Net {
            addr: Ipv4Addr::from(u32::from(self.addr) & self.mask()),
            prefix: self.prefix,
        }
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr) & self.mask()
    }
}

impl FromStr for Ipv4Net {
    type Err = BadPrefix;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPrefix(s.to_owned());
        let (ip, len) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = len.parse().map_err(|_| bad())?;
        Ipv4Net::new(addr, prefix).ok_or_else(bad)
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The pod MAC derived from its IPv4 address: `0a:58:` followed by the four address bytes
/// (the openshift-sdn / Kubernetes convention, so the MAC never needs an ARP-cache flush).
pub fn pod_mac(ip: Ipv4Addr) -> [u8; 6] {
    let [a, b, c, d] = ip.octets();
    [0x0a, 0x58, a, b, c, d]
}

/// `aa:bb:cc:dd:ee:ff` text of a MAC.
pub fn mac_to_string(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_mask() {
        let n: Ipv4Net = "10.128.2.1/23".parse().expect("valid");
        assert_eq!(n.network().to_string(), "10.128.2.0/23");
        assert!(n.contains(Ipv4Addr::new(10, 128, 3, 9)));
        assert!(!n.contains(Ipv4Addr::new(10, 128, 4, 1)));
        let all: Ipv4Net = "0.0.0.0/0".parse().expect("valid");
        assert!(all.contains(Ipv4Addr::new(192, 0, 2, 1)));
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "10.0.0/8", "10.0.0.0/-1"] {
            assert!(bad.parse::<Ipv4Net>().is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_mac_is_0a58_plus_ip() {
        let mac = pod_mac(Ipv4Addr::new(10, 128, 2, 5));
        assert_eq!(mac_to_string(&mac), "0a:58:0a:80:02:05");
    }
}
