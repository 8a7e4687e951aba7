//! rtnetlink operations: links, addresses and routes, in the shim's own network namespace or
//! (through [`in_netns`]) inside a pod's.

use std::fs::File;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::{InfoData, InfoVeth, LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::net::Ipv4Net;

/// A failed netlink operation, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel (or the socket) refused.
    #[error("{op}: {source}")]
    Request {
        /// What was being done.
        op: String,
        /// Cause.
        source: rtnetlink::Error,
    },
    /// Opening the socket or a namespace failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Something expected is not there.
    #[error("{0}")]
    Missing(String),
}

/// errno of a netlink error (positive), if it is one.
pub fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(m.raw_code().abs()),
        _ => None,
    }
}

const ENODEV: i32 = nix::errno::Errno::ENODEV as i32;
const EEXIST: i32 = nix::errno::Errno::EEXIST as i32;

fn req(op: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> NetlinkError {
    let op = op.into();
    move |source| NetlinkError::Request { op, source }
}

/// An IPv4 route of the main table, reduced to what the shim compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteEntry {
    /// Destination prefix.
    pub dst: Ipv4Net,
    /// Next hop.
    pub gw: Option<Ipv4Addr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Whether the kernel made it (connected route of an address).
    pub kernel: bool,
}

impl RouteEntry {
    fn from_message(m: &RouteMessage) -> Option<Self> {
        let mut dst_addr = Ipv4Addr::UNSPECIFIED;
        let (mut gw, mut oif, mut table) = (None, None, u32::from(m.header.table));
        for a in &m.attributes {
            match a {
                RouteAttribute::Destination(RouteAddress::Inet(d)) => dst_addr = *d,
                RouteAttribute::Gateway(RouteAddress::Inet(g)) => gw = Some(*g),
                RouteAttribute::Oif(i) => oif = Some(*i),
                RouteAttribute::Table(t) => table = *t,
                _ => {}
            }
        }
        if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
            return None;
        }
        Some(RouteEntry {
            dst: Ipv4Net::new(dst_addr, m.header.destination_prefix_length)?,
            gw,
            oif,
            kernel: m.header.protocol == RouteProtocol::Kernel,
        })
    }

    fn to_message(self) -> RouteMessage {
        let mut b = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(self.dst.addr(), self.dst.prefix());
        if let Some(i) = self.oif {
            b = b.output_interface(i);
        }
        match self.gw {
            Some(g) => b = b.gateway(g),
            None => b = b.scope(RouteScope::Link),
        }
        if self.kernel {
            b = b.protocol(RouteProtocol::Kernel);
        }
        b.build()
    }
}

/// A netlink route socket bound to the namespace of the thread that opened it.
#[derive(Debug, Clone)]
pub struct Netlink {
    handle: Handle,
}

impl Netlink {
    /// Opens a connection; its task runs on the current tokio runtime.
    pub fn connect() -> Result<Self, NetlinkError> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(|source| NetlinkError::Io {
            op: "open a netlink socket".into(),
            source,
        })?;
        tokio::spawn(conn);
        Ok(Netlink { handle })
    }

    /// The link named `name`, if any.
    pub async fn link(&self, name: &str) -> Result<Option<LinkMessage>, NetlinkError> {
        let r = self
            .handle
            .link()
            .get()
            .match_name(name.to_owned())
            .execute()
            .try_next()
            .await;
        match r {
            Ok(m) => Ok(m),
            Err(e) if errno(&e) == Some(ENODEV) => Ok(None),
            Err(e) => Err(req(format!("look up link {name}"))(e)),
        }
    }

    /// The name of link `index`, if it exists.
    pub async fn link_name(&self, index: u32) -> Result<Option<String>, NetlinkError> {
        let r = self
            .handle
            .link()
            .get()
            .match_index(index)
            .execute()
            .try_next()
            .await;
        match r {
            Ok(m) => Ok(m.and_then(|m| {
                m.attributes.into_iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n),
                    _ => None,
                })
            })),
            Err(e) if errno(&e) == Some(ENODEV) => Ok(None),
            Err(e) => Err(req(format!("look up link {index}"))(e)),
        }
    }

    /// The link named `name`, or an error saying it is missing.
    pub async fn require_link(&self, name: &str) -> Result<LinkMessage, NetlinkError> {
        self.link(name)
            .await?
            .ok_or_else(|| NetlinkError::Missing(format!("no interface {name}")))
    }

    /// Waits for a link to appear (OVS creates internal ports asynchronously).
    pub async fn wait_link(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<LinkMessage, NetlinkError> {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.link(name).await? {
                return Ok(l);
            }
            if t0.elapsed() > timeout {
                return Err(NetlinkError::Missing(format!(
                    "interface {name} did not appear within {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Creates a veth pair: `host` here and `peer` directly inside the namespace `netns`
    /// (so the pod end never exists under its name in the node's namespace), both with `mtu`.
    pub async fn add_veth_into(
        &self,
        host: &str,
        peer: &str,
        mtu: u32,
        netns: &File,
    ) -> Result<(), NetlinkError> {
        use std::os::fd::AsRawFd;
        let peer_msg = LinkMessageBuilder::<LinkUnspec>::new()
            .name(peer.to_owned())
            .mtu(mtu)
            .setns_by_fd(netns.as_raw_fd())
            .build();
        let msg = LinkVeth::new(host, peer)
            .mtu(mtu)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
            .build();
        self.handle
            .link()
            .add(msg)
            .execute()
            .await
            .map_err(req(format!("create veth {host} <-> {peer}")))
    }

    /// Deletes the link `name`; false when there was none.
    pub async fn del_link(&self, name: &str) -> Result<bool, NetlinkError> {
        let Some(l) = self.link(name).await? else {
            return Ok(false);
        };
        match self.handle.link().del(l.header.index).execute().await {
            Ok(()) => Ok(true),
            Err(e) if errno(&e) == Some(ENODEV) => Ok(false),
            Err(e) => Err(req(format!("delete link {name}"))(e)),
        }
    }

    /// Brings a link up.
    pub async fn set_up(&self, index: u32) -> Result<(), NetlinkError> {
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(req(format!("bring link {index} up")))
    }

    /// Sets a link's MAC address.
    pub async fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<(), NetlinkError> {
        self.handle
            .link()
            .set(
                LinkUnspec::new_with_index(index)
                    .address(mac.to_vec())
                    .build(),
            )
            .execute()
            .await
            .map_err(req(format!("set MAC of link {index}")))
    }

    /// IPv4 addresses on a link.
    pub async fn ipv4_addrs(&self, index: u32) -> Result<Vec<Ipv4Net>, NetlinkError> {
        let msgs: Vec<_> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(req(format!("list addresses of link {index}")))?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(IpAddr::V4(ip)) => {
                        Ipv4Net::new(*ip, m.header.prefix_len)
                    }
                    _ => None,
                })
            })
            .collect())
    }

    /// Adds an IPv4 address unless it is already there.
    pub async fn ensure_addr(&self, index: u32, addr: Ipv4Net) -> Result<bool, NetlinkError> {
        if self.ipv4_addrs(index).await?.contains(&addr) {
            return Ok(false);
        }
        match self
            .handle
            .address()
            .add(index, IpAddr::V4(addr.addr()), addr.prefix())
            .execute()
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if errno(&e) == Some(EEXIST) => Ok(false),
            Err(e) => Err(req(format!("add address {addr} to link {index}"))(e)),
        }
    }

    /// Every IPv4 address of the namespace with its link index.
    pub async fn all_ipv4_addrs(&self) -> Result<Vec<(u32, Ipv4Net)>, NetlinkError> {
        let msgs: Vec<_> = self
            .handle
            .address()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(req("list addresses"))?;
        Ok(msgs
            .iter()
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(IpAddr::V4(ip)) => {
                        Ipv4Net::new(*ip, m.header.prefix_len).map(|n| (m.header.index, n))
                    }
                    _ => None,
                })
            })
            .collect())
    }

    /// Removes an IPv4 address from a link; false when it was not there.
    pub async fn del_addr(&self, index: u32, addr: Ipv4Net) -> Result<bool, NetlinkError> {
        let msgs: Vec<_> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(req(format!("list addresses of link {index}")))?;
        for m in msgs {
            let this = m.header.index == index
                && m.header.prefix_len == addr.prefix()
                && m.attributes.iter().any(|a| {
                    matches!(a, AddressAttribute::Address(IpAddr::V4(ip)) if *ip == addr.addr())
                });
            if this {
                self.handle
                    .address()
                    .del(m)
                    .execute()
                    .await
                    .map_err(req(format!("remove address {addr} from link {index}")))?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// IPv4 routes of the main table.
    pub async fn routes(&self) -> Result<Vec<RouteEntry>, NetlinkError> {
        let msgs: Vec<_> = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .map_err(req("list routes"))?;
        let mut v: Vec<_> = msgs.iter().filter_map(RouteEntry::from_message).collect();
        v.sort();
        Ok(v)
    }

    /// Adds a route (scope link when it has no gateway) unless an equal one exists.
    pub async fn ensure_route(&self, route: RouteEntry) -> Result<bool, NetlinkError> {
        let have = self.routes().await?;
        if have
            .iter()
            .any(|r| r.dst == route.dst && r.gw == route.gw && r.oif == route.oif)
        {
            return Ok(false);
        }
        match self.handle.route().add(route.to_message()).execute().await {
            Ok(()) => Ok(true),
            Err(e) if errno(&e) == Some(EEXIST) => Ok(false),
            Err(e) => Err(req(format!("add route {}", route.dst))(e)),
        }
    }

    /// Deletes a route.
    pub async fn del_route(&self, route: RouteEntry) -> Result<(), NetlinkError> {
        self.handle
            .route()
            .del(route.to_message())
            .execute()
            .await
            .map_err(req(format!("delete route {}", route.dst)))
    }
}

/// Whether the link is administratively up.
pub fn is_up(link: &LinkMessage) -> bool {
    link.header.flags.contains(LinkFlags::Up)
}

/// The link's MAC address.
pub fn link_mac(link: &LinkMessage) -> Option<Vec<u8>> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(m) => Some(m.clone()),
        _ => None,
    })
}

/// Opens a network namespace file (`/var/run/netns/NAME`, `/proc/PID/ns/net`).
pub fn open_netns(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// Runs `f` with a netlink connection inside the network namespace at `path`: a dedicated
/// thread enters the namespace (`setns`, which only affects that thread), runs a
/// current-thread runtime and exits, so no other task ever runs in the pod's namespace.
pub async fn in_netns<T, F, Fut>(path: &Path, f: F) -> Result<T, NetlinkError>
where
    T: Send + 'static,
    F: FnOnce(Netlink) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, NetlinkError>>,
{
    let ns = open_netns(path).map_err(|source| NetlinkError::Io {
        op: format!("open netns {}", path.display()),
        source,
    })?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let label = path.display().to_string();
    std::thread::Builder::new()
        .name("netns".into())
        .spawn(move || {
            let r = (|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                    NetlinkError::Io {
                        op: format!("enter netns {label}"),
                        source: e.into(),
                    }
                })?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| NetlinkError::Io {
                        op: "start a runtime in the pod netns".into(),
                        source,
                    })?;
                rt.block_on(async move { f(Netlink::connect()?).await })
            })();
            let _ = tx.send(r);
        })
        .map_err(|source| NetlinkError::Io {
            op: "spawn the netns thread".into(),
            source,
        })?;
    rx.await
        .map_err(|_| NetlinkError::Missing("the netns thread died".into()))?
}
