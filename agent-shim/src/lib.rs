//! flowmesh's node side: `flowmesh-cni` (the CNI plugin a container runtime executes) and
//! `flowmesh-shim` (the node daemon that sets up br0, tun0, routes and NAT, and wires pods).
//!
//! * [`cni`]: the CNI spec's data (pure); [`protocol`]: the plugin ↔ shim socket messages;
//!   [`plugin`]: the plugin's logic.
//! * [`node`]: node setup; [`pod`]: ADD/DEL/CHECK/GC/STATUS; [`server`]: the CNI socket;
//!   [`daemon`]: the shim's main loop.
//! * [`egress`]: the egress node's half of egress IPs (address, ARP, SNAT).
//! * [`audit`]: network policy audit lines (the second OpenFlow connection to br0).
//! * [`ovs`] (ovs-vsctl), [`netlink`] (rtnetlink), [`nft`] (nftables), [`nodeapi`] (the
//!   controller's gRPC node API), [`net`] (IPv4 prefixes, pod MACs).

pub mod audit;
pub mod cni;
pub mod daemon;
pub mod egress;
pub mod ethtool;
pub mod net;
pub mod netlink;
pub mod nft;
pub mod node;
pub mod nodeapi;
pub mod ovs;
pub mod plugin;
pub mod pod;
pub mod protocol;
pub mod server;
