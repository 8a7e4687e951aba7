//! The egress node's half of egress IPs: the shim learns the egress IPs its node hosts from
//! the controller (`WatchEgress`, a stream it keeps open) and makes the host match:
//!
//! * each egress IP is held as `IP/32` on the underlay interface (the link holding the node's
//!   own IP) and announced with a gratuitous ARP (`arping -U`) when added;
//! * nftables table `ip flowmesh-egress` (see [`render`]): packets arriving on tun0 from a
//!   NETID's egress MAC (`0a:59:00` + NETID, written by the local bucket of table 101's group)
//!   get the NETID's mark, and a postrouting chain that runs just before flowmesh's masquerade
//!   SNATs that mark to the egress IP; any other egress-MAC packet is dropped (never sent from
//!   the node's own address); new inbound connections to an egress IP are rejected;
//! * what is no longer assigned is removed (the table's `egress-ips` set records which
//!   addresses are the shim's, so they are found again after a restart);
//! * a reconcile every `--egress-reconcile-interval` re-adds an address removed behind the
//!   shim's back and repairs the table. With unchanged state it changes nothing.
//!
//! Until the first list arrives (shim start-up, controller down) the shim keeps what it holds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use proto::node::{EgressAssignment, EgressAssignments};
use tokio::process::Command;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::net::TUN0;
use crate::net::{mac_to_string, Ipv4Net};
use crate::netlink::{Netlink, NetlinkError};
use crate::nft::{self, NftError};
use crate::nodeapi::NodeApi;

/// Family and name of the egress table.
pub const TABLE: &str = "ip flowmesh-egress";

/// The first three bytes of every egress MAC (the last three are the NETID).
pub const EGRESS_MAC_PREFIX: [u8; 3] = [0x0a, 0x59, 0x00];

/// One egress IP this node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Assignment {
    /// The egress IP.
    pub ip: Ipv4Addr,
    /// Its NETID.
    pub netid: u32,
    /// The NETID's egress MAC.
    pub mac: [u8; 6],
    /// The NETID's packet mark.
    pub mark: u32,
}

/// Egress failures.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The controller sent something unusable.
    #[error("bad egress assignment {what}: {why}")]
    Bad {
        /// The assignment.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// Netlink failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// nft failed.
    #[error(transparent)]
    Nft(#[from] NftError),
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

impl TryFrom<&EgressAssignment> for Assignment {
    type Error = EgressError;

    fn try_from(a: &EgressAssignment) -> Result<Self, EgressError> {
        let bad = |why: &str| EgressError::Bad {
            what: format!("{a:?}"),
            why: why.to_owned(),
        };
        let ip: Ipv4Addr = a.ip.parse().map_err(|_| bad("ip is not an IPv4 address"))?;
        if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() || ip.is_loopback() {
            return Err(bad("ip is not a unicast address"));
        }
        let mac = parse_mac(&a.mac).ok_or_else(|| bad("mac is not aa:bb:cc:dd:ee:ff"))?;
        if mac[..3] != EGRESS_MAC_PREFIX {
            return Err(bad("mac does not start with 0a:59:00"));
        }
        if a.mark == 0 {
            return Err(bad("mark is 0"));
        }
        Ok(Assignment {
            ip,
            netid: a.netid,
            mac,
            mark: a.mark,
        })
    }
}

/// Parses a whole list; a bad entry is an error (the list is then ignored, keeping the state).
pub fn parse_list(list: &EgressAssignments) -> Result<Vec<Assignment>, EgressError> {
    let mut v = list
        .assignments
        .iter()
        .map(Assignment::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    v.sort();
    v.dedup();
    let mut seen = BTreeSet::new();
    for a in &v {
        if !seen.insert(a.ip) {
            return Err(EgressError::Bad {
                what: a.ip.to_string(),
                why: "assigned twice".into(),
            });
        }
    }
    Ok(v)
}

/// The egress table, written as `nft list table ip flowmesh-egress` prints it. Per NETID the
/// lowest of its IPs on this node is the SNAT source (a node normally hosts one IP per NETID).
pub fn render(assignments: &[Assignment]) -> String {
    let ips: BTreeSet<Ipv4Addr> = assignments.iter().map(|a| a.ip).collect();
    let mut per_netid: BTreeMap<u32, Assignment> = BTreeMap::new();
    for a in assignments {
        per_netid
            .entry(a.netid)
            .and_modify(|b| {
                if a.ip < b.ip {
                    *b = *a;
                }
            })
            .or_insert(*a);
    }
    let mut by_mark: Vec<&Assignment> = per_netid.values().collect();
    by_mark.sort_by_key(|a| (a.mark, a.netid));
    let mut s = format!("table {TABLE} {{\n\tset egress-ips {{\n\t\ttype ipv4_addr\n");
    if !ips.is_empty() {
        let e = ips
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!("\t\telements = {{ {e} }}\n"));
    }
    s.push_str(
        "\t}\n\n\tchain prerouting {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n",
    );
    for a in &by_mark {
        s.push_str(&format!(
            "\t\tiifname \"{TUN0}\" ether saddr {} meta mark set {:#010x} accept\n",
            mac_to_string(&a.mac),
            a.mark
        ));
    }
    let [p0, p1, p2] = EGRESS_MAC_PREFIX;
    s.push_str(&format!(
        "\t\tiifname \"{TUN0}\" ether saddr & ff:ff:ff:00:00:00 == {p0:02x}:{p1:02x}:{p2:02x}:00:00:00 drop\n\t}}\n\n"
    ));
    s.push_str(
        "\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\
         \t\tip daddr @egress-ips ct state new reject\n\t}\n\n",
    );
    s.push_str(
        "\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat - 1; policy accept;\n",
    );
    for a in &by_mark {
        s.push_str(&format!(
            "\t\tmeta mark {:#010x} snat to {}\n",
            a.mark, a.ip
        ));
    }
    s.push_str("\t}\n}\n");
    s
}

/// The addresses in the listed table's `egress-ips` set (the IPs the shim holds).
pub fn owned_ips(listing: &str) -> BTreeSet<Ipv4Addr> {
    let Some(set) = listing.split("set egress-ips").nth(1) else {
        return BTreeSet::new();
    };
    let set = set.split('}').next().unwrap_or_default();
    let Some(elements) = set.split("elements = {").nth(1) else {
        return BTreeSet::new();
    };
    elements
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// Removes from the host every egress IP the shim holds (the `egress-ips` set of its table),
/// leaving the table itself; for `flowmesh-shim --uninstall`, before the table goes (it is the
/// only record of which /32s are the shim's). Returns the addresses released.
pub async fn release_all(nl: &Netlink) -> Result<Vec<String>, EgressError> {
    let Some(listing) = nft::current_table(TABLE).await? else {
        return Ok(Vec::new());
    };
    let owned = owned_ips(&listing);
    let addrs = nl.all_ipv4_addrs().await?;
    let released = release(nl, &addrs, &owned).await?;
    Ok(released
        .iter()
        .map(|ip| format!("egress IP {ip}"))
        .collect())
}

/// Removes from the host (whose addresses are `addrs`) the /32s of `ips`; returns the ones
/// removed.
async fn release(
    nl: &Netlink,
    addrs: &[(u32, Ipv4Net)],
    ips: &BTreeSet<Ipv4Addr>,
) -> Result<Vec<Ipv4Addr>, NetlinkError> {
    let mut released = Vec::new();
    for (idx, n) in addrs {
        if n.prefix() == 32 && ips.contains(&n.addr()) && nl.del_addr(*idx, *n).await? {
            released.push(n.addr());
        }
    }
    Ok(released)
}

/// The host side of egress IPs for one node.
#[derive(Debug, Clone)]
pub struct HostEgress {
    nl: Netlink,
    node_ip: Ipv4Addr,
}

impl HostEgress {
    /// For the node whose underlay address is `node_ip`.
    pub fn new(nl: Netlink, node_ip: Ipv4Addr) -> Self {
        HostEgress { nl, node_ip }
    }

    /// Makes the host match `want` (None: no list heard yet, keep and repair what is held).
    /// Returns the changes made.
    pub async fn reconcile(&self, want: Option<&[Assignment]>) -> Result<Vec<String>, EgressError> {
        let mut changes = Vec::new();
        let listing = nft::current_table(TABLE).await?;
        let owned = listing.as_deref().map(owned_ips).unwrap_or_default();
        let addrs = self.nl.all_ipv4_addrs().await?;
        let iface = addrs
            .iter()
            .find(|(_, n)| n.addr() == self.node_ip)
            .map(|(i, _)| *i)
            .ok_or_else(|| {
                NetlinkError::Missing(format!("no interface holds the node IP {}", self.node_ip))
            })?;
        let keep: BTreeSet<Ipv4Addr> = match want {
            None => {
                if listing.is_none() && nft::ensure_table(TABLE, &render(&[])).await? {
                    changes.push(format!("nftables table {TABLE}"));
                }
                owned.clone()
            }
            Some(want) => {
                let keep: BTreeSet<Ipv4Addr> = want.iter().map(|a| a.ip).collect();
                // Release first, so a crash in between never leaves an unrecorded address.
                let gone: BTreeSet<Ipv4Addr> = owned.difference(&keep).copied().collect();
                for ip in release(&self.nl, &addrs, &gone).await? {
                    changes.push(format!("egress IP {ip} released"));
                }
                if nft::ensure_table(TABLE, &render(want)).await? {
                    changes.push(format!("nftables table {TABLE}"));
                }
                keep
            }
        };
        for ip in &keep {
            if addrs.iter().any(|(_, n)| n.addr() == *ip) {
                continue;
            }
            let host = Ipv4Net::new(*ip, 32).ok_or_else(|| EgressError::Bad {
                what: ip.to_string(),
                why: "not a /32".into(),
            })?;
            if self.nl.ensure_addr(iface, host).await? {
                changes.push(format!("egress IP {ip} added"));
                match self.nl.link_name(iface).await? {
                    Some(name) => announce(name, *ip),
                    None => warn!(%ip, iface, "underlay link vanished before the gratuitous ARP"),
                }
            }
        }
        Ok(changes)
    }
}

/// Sends a gratuitous ARP for `ip` on `iface` in the background: Debian's `arping` package
/// (`arping -U -S IP ... IP`: an unsolicited broadcast ARP whose sender and target are the egress
/// IP, which updates existing neighbour entries; iputils-arping's flags differ).
fn announce(iface: String, ip: Ipv4Addr) {
    tokio::spawn(async move {
        let r = Command::new("arping")
            .args([
                "-q",
                "-U",
                "-S",
                &ip.to_string(),
                "-c",
                "2",
                "-w",
                "2",
                "-I",
            ])
            .arg(&iface)
            .arg(ip.to_string())
            .status()
            .await;
        match r {
            // arping exits 1 in -U mode when nobody answers, which is the normal case.
            Ok(s) if s.success() || s.code() == Some(1) => {}
            Ok(s) => warn!(%ip, %iface, status = %s, "arping failed"),
            Err(e) => {
                warn!(%ip, %iface, error = %e, "cannot run arping (install the arping package)")
            }
        }
    });
}

/// Keeps the `WatchEgress` stream open: publishes every list heard; reconnects (after a short
/// back-off, on new connections: [`NodeApi::fresh_connections`]) when the stream ends, fails,
/// or stays silent for three keepalives.
pub async fn watch_controller(
    mut api: NodeApi,
    node: String,
    tx: watch::Sender<Option<Vec<Assignment>>>,
    reconnected: Arc<tokio::sync::Notify>,
) {
    let mut delay = Duration::from_millis(100);
    let mut first = true;
    loop {
        match api.watch_egress(&node).await {
            Ok(mut stream) => {
                // A controller answers again after the stream broke (it restarted, or
                // another replica answers): whoever waits re-registers the node.
                if !first {
                    reconnected.notify_one();
                }
                first = false;
                let mut silence = Duration::from_secs(3);
                loop {
                    match tokio::time::timeout(silence, stream.message()).await {
                        Ok(Ok(Some(list))) => {
                            delay = Duration::from_millis(100);
                            if list.keepalive_ms > 0 {
                                silence = Duration::from_millis(u64::from(list.keepalive_ms) * 3);
                            }
                            match parse_list(&list) {
                                Ok(v) => {
                                    tx.send_if_modified(|cur| {
                                        let changed = cur.as_ref() != Some(&v);
                                        *cur = Some(v);
                                        changed
                                    });
                                }
                                Err(e) => warn!(error = %e, "egress list ignored"),
                            }
                        }
                        Ok(Ok(None)) => {
                            warn!("egress stream ended by the controller");
                            break;
                        }
                        Ok(Err(status)) => {
                            warn!(%status, "egress stream failed");
                            break;
                        }
                        Err(_) => {
                            warn!(
                                silent_ms = silence.as_millis() as u64,
                                "egress stream silent, reconnecting"
                            );
                            break;
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot open the egress stream"),
        }
        if tx.is_closed() {
            return;
        }
        api = api.fresh_connections();
        tokio::time::sleep(delay).await;
        // At most half a second between attempts: a restarted controller is found (and the
        // node re-registered) within about that.
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// Runs the egress side until the process ends: follows the controller's lists and reconciles
/// on every change and every `interval`.
pub async fn run(
    api: NodeApi,
    node: String,
    host: HostEgress,
    interval: Duration,
    reconnected: Arc<tokio::sync::Notify>,
) {
    let (tx, mut rx) = watch::channel(None);
    tokio::spawn(watch_controller(api, node, tx, reconnected));
    loop {
        let want = rx.borrow_and_update().clone();
        match host.reconcile(want.as_deref()).await {
            Ok(changes) => {
                for c in changes {
                    info!(change = %c, "egress");
                }
            }
            Err(e) => warn!(error = %e, "egress reconcile failed"),
        }
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(ip: &str, netid: u32) -> Assignment {
        let b = netid.to_be_bytes();
        Assignment {
            ip: ip.parse().expect("ip"),
            netid,
            mac: [0x0a, 0x59, 0, b[1], b[2], b[3]],
            mark: netid,
        }
    }

    #[test]
    fn render_is_what_nft_lists() {
        let t = render(&[
            a("192.168.0.101", 0x2a),
            a("192.168.0.100", 0x2a),
            a("192.168.0.7", 5),
        ]);
        assert!(
            t.contains("elements = { 192.168.0.7, 192.168.0.100, 192.168.0.101 }"),
            "{t}"
        );
        assert!(t.contains(
            "iifname \"tun0\" ether saddr 0a:59:00:00:00:05 meta mark set 0x00000005 accept"
        ));
        assert!(
            t.contains("meta mark 0x0000002a snat to 192.168.0.100\n"),
            "{t}"
        );
        assert!(
            !t.contains("snat to 192.168.0.101"),
            "one SNAT source per NETID: {t}"
        );
        assert!(t.contains("priority srcnat - 1;"));
        let empty = render(&[]);
        assert!(!empty.contains("elements"), "{empty}");
        assert!(empty.contains("== 0a:59:00:00:00:00 drop"));
        assert_eq!(owned_ips(&t).len(), 3);
        assert!(owned_ips(&empty).is_empty());
    }

    #[test]
    fn owned_ips_reads_wrapped_listings() {
        let l = "table ip flowmesh-egress {\n\tset egress-ips {\n\t\ttype ipv4_addr\n\t\t\
                 elements = { 10.0.0.1, 10.0.0.2,\n\t\t\t     10.0.0.3 }\n\t}\n\n\tchain input {\n}";
        let v: Vec<String> = owned_ips(l).iter().map(ToString::to_string).collect();
        assert_eq!(v, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    }

    #[test]
    fn bad_assignments_are_refused() {
        let ok = EgressAssignment {
            ip: "192.168.0.100".into(),
            netid: 42,
            mac: "0a:59:00:00:00:2a".into(),
            mark: 42,
        };
        assert!(Assignment::try_from(&ok).is_ok());
        for (f, v) in [
            ("ip", "x"),
            ("ip", "224.0.0.1"),
            ("mac", "0a:58:00:00:00:2a"),
            ("mac", "0a:59:00"),
        ] {
            let mut b = ok.clone();
            match f {
                "ip" => b.ip = v.into(),
                _ => b.mac = v.into(),
            }
            assert!(Assignment::try_from(&b).is_err(), "{f}={v}");
        }
        let list = EgressAssignments {
            node: "n".into(),
            assignments: vec![
                ok.clone(),
                EgressAssignment {
                    netid: 7,
                    ..ok.clone()
                },
            ],
            keepalive_ms: 1000,
        };
        assert!(parse_list(&list).is_err(), "one IP twice");
    }

    #[tokio::test]
    async fn an_egress_stream_whose_connection_died_silently_is_opened_on_a_new_one() {
        use crate::nodeapi::tests::{serve, Relay, Replica};
        use std::sync::atomic::Ordering;
        use std::sync::Arc;
        let leader = Replica::default();
        let (url, _stop) = serve(leader.clone()).await;
        let relay = Relay::start(&url).await;
        // A call timeout far beyond this test's own bound: a call left waiting on the dead
        // connection would not end by itself.
        let api = NodeApi::new(&relay.url, Duration::from_secs(3600), None).expect("client");
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        let reconnected = Arc::new(tokio::sync::Notify::new());
        let watcher = tokio::spawn(watch_controller(
            api,
            "node1".into(),
            tx,
            reconnected.clone(),
        ));
        tokio::time::timeout(Duration::from_secs(60), rx.wait_for(Option::is_some))
            .await
            .expect("a first list within 60 s")
            .expect("the watcher runs");
        let before = leader.2.load(Ordering::SeqCst);
        relay.freeze();
        // The stream goes silent; the shim opens it again and the replica serves it — on a
        // new connection, since the frozen ones forward nothing — and the shim hears it.
        let reopened = async {
            loop {
                reconnected.notified().await;
                if leader.2.load(Ordering::SeqCst) > before {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), reopened)
            .await
            .expect("the egress stream opened again on a live connection within 60 s");
        watcher.abort();
    }
}
