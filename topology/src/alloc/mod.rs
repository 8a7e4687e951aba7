//! The allocators of the cluster model: node subnets, NETIDs and pod IPs. All are I/O-free,
//! deterministic given their state, and serializable so allocation survives a restart.

mod netid;
mod podip;
mod subnet;

pub use netid::{NetIdAllocator, NETID_GLOBAL, NETID_MAX, NETID_MIN};
pub use podip::{pod_mac, PodIpAllocator};
pub use subnet::HostSubnetAllocator;

use crate::cidr::Ipv4Cidr;
use std::net::Ipv4Addr;

/// Why an allocation or reservation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Every node subnet of every cluster range is taken.
    #[error("no free node subnet: all {total} subnets of the cluster networks are allocated; append a cluster network range")]
    SubnetsExhausted {
        /// Number of subnets in all ranges.
        total: u64,
    },
    /// A subnet is not a node subnet of any cluster range.
    #[error("subnet {0} is not a node subnet of any cluster network range")]
    SubnetNotInRanges(Ipv4Cidr),
    /// A subnet is already allocated.
    #[error("subnet {0} is already allocated")]
    SubnetInUse(Ipv4Cidr),
    /// Every NETID is taken.
    #[error("no free NETID: all values {min}..={max} are in use")]
    NetIdsExhausted {
        /// Lowest allocatable.
        min: u32,
        /// Highest allocatable.
        max: u32,
    },
    /// A NETID above 24 bits.
    #[error("NETID {0} is out of range (0..=16777215)")]
    NetIdOutOfRange(u32),
    /// Every pod address of a node subnet is taken.
    #[error("no free pod IP in node subnet {0}")]
    PodIpsExhausted(Ipv4Cidr),
    /// An IP outside the usable addresses of the subnet.
    #[error("{ip} is not a usable pod address of node subnet {subnet} (network, gateway and broadcast are reserved)")]
    PodIpNotInSubnet {
        /// The IP.
        ip: Ipv4Addr,
        /// The node subnet.
        subnet: Ipv4Cidr,
    },
    /// A pod IP already allocated.
    #[error("pod IP {0} is already allocated")]
    PodIpInUse(Ipv4Addr),
}
