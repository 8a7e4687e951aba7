//! Node setup: br0 and its fixed ports, tun0's address and routes, IPv4 forwarding, the
//! masquerade table. Every step reads the current state first and changes only what differs,
//! so running it again on a correct node changes nothing.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use proto::node::NodeConfig;

use crate::net::{BadPrefix, Ipv4Net};
use crate::netlink::{is_up, Netlink, NetlinkError, RouteEntry};
use crate::nft::{self, NftError};
use crate::ovs::{opt_int, ovs_map, ovs_strings, quote, ControllerRow, OvsError, Record, Vsctl};

/// OpenFlow port of `vxlan0`.
pub const VXLAN_OFPORT: u32 = 1;
/// OpenFlow port of `tun0`.
pub const TUN0_OFPORT: u32 = 2;
/// Name of the VXLAN port.
pub const VXLAN_PORT_NAME: &str = "vxlan0";
/// Name of the host gateway port (defined beside the address rules, which egress and nftables
/// use without depending on the node setup).
pub use crate::net::TUN0;
/// Multicast range routed on-link in pods.
pub const MULTICAST: Ipv4Net = match Ipv4Net::new(Ipv4Addr::new(224, 0, 0, 0), 4) {
    Some(n) => n,
    None => Ipv4Net::DEFAULT_ROUTE,
};

/// Node setup failures.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The controller's node configuration is unusable.
    #[error("bad node configuration from the controller: {0}")]
    Config(String),
    /// ovs-vsctl failed.
    #[error(transparent)]
    Ovs(#[from] OvsError),
    /// Netlink failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// nft failed.
    #[error(transparent)]
    Nft(#[from] NftError),
    /// Writing a configuration file failed.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Writing a sysctl failed.
    #[error("sysctl {path}: {source}")]
    Sysctl {
        /// The /proc/sys path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A fixed port did not get its OpenFlow port number.
    #[error("{port} has ofport {got}, expected {want} (another port took it?)")]
    Ofport {
        /// Port name.
        port: String,
        /// What OVS gave.
        got: u32,
        /// What was requested.
        want: u32,
    },
}

/// The node's network settings, validated from the controller's `NodeConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// Node name as registered.
    pub node: String,
    /// The node's pod subnet (network address).
    pub subnet: Ipv4Net,
    /// Gateway address, held by tun0.
    pub gateway: Ipv4Addr,
    /// Cluster networks (pod address ranges of all nodes).
    pub cluster_networks: Vec<Ipv4Net>,
    /// Service network, if any.
    pub service_network: Option<Ipv4Net>,
    /// Overlay MTU.
    pub mtu: u32,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
}

impl TryFrom<&NodeConfig> for NodeSettings {
    type Error = SetupError;

    fn try_from(c: &NodeConfig) -> Result<Self, SetupError> {
        let bad = |e: BadPrefix| SetupError::Config(e.to_string());
        let subnet: Ipv4Net = c.subnet.parse().map_err(bad)?;
        let gateway: Ipv4Addr = c.gateway.parse().map_err(|_| {
            SetupError::Config(format!("gateway {:?} is not an IPv4 address", c.gateway))
        })?;
        if !subnet.contains(gateway) {
            return Err(SetupError::Config(format!(
                "gateway {gateway} is outside the node subnet {subnet}"
            )));
        }
        let cluster_networks = c
            .cluster_networks
            .iter()
            .map(|s| s.parse::<Ipv4Net>().map(|n| n.network()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        if cluster_networks.is_empty() {
            return Err(SetupError::Config("no cluster networks".into()));
        }
        let service_network = match c.service_network.as_str() {
            "" => None,
            s => Some(s.parse::<Ipv4Net>().map_err(bad)?.network()),
        };
        if !(576..=65535).contains(&c.mtu) {
            return Err(SetupError::Config(format!("MTU {} out of range", c.mtu)));
        }
        let vxlan_port = match c.vxlan_port {
            0 => 4789,
            p => u16::try_from(p)
                .map_err(|_| SetupError::Config(format!("VXLAN port {p} out of range")))?,
        };
        Ok(NodeSettings {
            node: c.node.clone(),
            subnet: subnet.network(),
            gateway,
            cluster_networks,
            service_network,
            mtu: c.mtu,
            vxlan_port,
        })
    }
}

/// What the shim wants of br0 (from its flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSpec {
    /// Bridge name (`br0`).
    pub bridge: String,
    /// `datapath_type` to set (e.g. `netdev`); None leaves OVS's default.
    pub datapath_type: Option<String>,
    /// Datapath id.
    pub dpid: u64,
    /// OpenFlow controller target (`tcp:IP:6653`); None leaves the controller alone.
    pub controller: Option<String>,
    /// `max_backoff` of each of the bridge's Controller rows, milliseconds (at least 1000).
    pub max_backoff_ms: u32,
    /// The node's underlay address (VXLAN local_ip).
    pub node_ip: Ipv4Addr,
    /// NetworkManager's `conf.d` directory: when it exists, `flowmesh.conf` there keeps the
    /// node's OVS and pod devices out of NetworkManager's hands (None: leave it alone).
    pub nm_conf_dir: Option<std::path::PathBuf>,
}

/// The file the shim writes in NetworkManager's `conf.d`.
pub const NM_CONF: &str = "flowmesh.conf";

/// What `NM_CONF` holds: br0, vxlan0, tun0, the kernel datapath's devices and the pods' host
/// veths are unmanaged.
pub fn nm_conf(bridge: &str) -> String {
    format!(
        "# Written by flowmesh-shim (removed by flowmesh-shim --uninstall): Open vSwitch and pod\n\
         # devices are not NetworkManager's.\n\
         [keyfile]\n\
         unmanaged-devices=interface-name:{bridge};interface-name:vxlan0;interface-name:tun0;\
         interface-name:ovs-system;interface-name:vxlan_sys_*;interface-name:veth*\n"
    )
}

/// Write `NM_CONF` into `dir` if the directory exists (NetworkManager is installed) and the
/// file differs; returns the change made, if any.
pub fn ensure_nm_conf(dir: &std::path::Path, bridge: &str) -> Result<Option<String>, SetupError> {
    if !dir.is_dir() {
        return Ok(None);
    }
    let path = dir.join(NM_CONF);
    let want = nm_conf(bridge);
    if std::fs::read_to_string(&path).is_ok_and(|have| have == want) {
        return Ok(None);
    }
    std::fs::write(&path, want).map_err(|source| SetupError::File {
        path: path.display().to_string(),
        source,
    })?;
    Ok(Some(format!(
        "NetworkManager: {} (devices unmanaged)",
        path.display()
    )))
}

/// br0 as read from OVSDB.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObservedOvs {
    /// The Bridge row.
    pub bridge: Option<Record>,
    /// Port names on the bridge.
    pub ports: Vec<String>,
    /// The vxlan0 Interface row.
    pub vxlan: Option<Record>,
    /// The tun0 Interface row.
    pub tun0: Option<Record>,
    /// The bridge's Controller rows.
    pub controllers: Vec<ControllerRow>,
}

const BRIDGE_COLUMNS: &[&str] = &[
    "name",
    "datapath_type",
    "fail_mode",
    "protocols",
    "other_config",
];
const IFACE_COLUMNS: &[&str] = &["name", "type", "ofport_request", "options", "mtu_request"];

/// Reads what [`plan_ovs`] needs.
pub async fn observe_ovs(vsctl: &Vsctl, bridge: &str) -> Result<ObservedOvs, OvsError> {
    let br = vsctl.find("Bridge", bridge, BRIDGE_COLUMNS).await?;
    let (ports, controllers) = if br.is_some() {
        (
            vsctl.list_ports(bridge).await?,
            vsctl.controllers(bridge).await?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(ObservedOvs {
        bridge: br,
        ports,
        vxlan: vsctl
            .find("Interface", VXLAN_PORT_NAME, IFACE_COLUMNS)
            .await?,
        tun0: vsctl.find("Interface", TUN0, IFACE_COLUMNS).await?,
        controllers,
    })
}

fn col_str(r: Option<&Record>, col: &str) -> Option<String> {
    r.and_then(|r| r.get(col))
        .map(ovs_strings)
        .and_then(|v| v.into_iter().next())
}

fn col_map(r: Option<&Record>, col: &str) -> BTreeMap<String, String> {
    r.and_then(|r| r.get(col)).map(ovs_map).unwrap_or_default()
}

fn col_int(r: Option<&Record>, col: &str) -> Option<i64> {
    r.and_then(|r| r.get(col)).and_then(opt_int)
}

/// The `ovs-vsctl` arguments (one transaction) that bring OVSDB from `seen` to what `spec` and
/// `s` want, and a description of each change. Empty when everything is already right.
pub fn plan_ovs(
    spec: &BridgeSpec,
    s: &NodeSettings,
    seen: &ObservedOvs,
) -> (Vec<String>, Vec<String>) {
    let mut args: Vec<String> = Vec::new();
    let mut changes: Vec<String> = Vec::new();
    let br = spec.bridge.as_str();
    let cmd = |args: &mut Vec<String>, words: Vec<String>| {
        if !args.is_empty() {
            args.push("--".into());
        }
        args.extend(words);
    };
    if seen.bridge.is_none() {
        cmd(
            &mut args,
            vec!["--may-exist".into(), "add-br".into(), br.into()],
        );
        changes.push(format!("create bridge {br}"));
    }
    let b = seen.bridge.as_ref();
    let mut sets: Vec<String> = Vec::new();
    if let Some(dt) = &spec.datapath_type {
        if col_str(b, "datapath_type").as_deref().unwrap_or("") != dt {
            sets.push(format!("datapath_type={dt}"));
        }
    }
    if col_str(b, "fail_mode").as_deref() != Some("secure") {
        sets.push("fail_mode=secure".into());
    }
    if b.and_then(|r| r.get("protocols")).map(ovs_strings) != Some(vec!["OpenFlow13".to_owned()]) {
        sets.push("protocols=OpenFlow13".into());
    }
    let oc = col_map(b, "other_config");
    let dpid = format!("{:016x}", spec.dpid);
    if oc.get("datapath-id") != Some(&dpid) {
        sets.push(format!("other_config:datapath-id={}", quote(&dpid)));
    }
    if oc.get("disable-in-band").map(String::as_str) != Some("true") {
        sets.push("other_config:disable-in-band=true".into());
    }
    if !sets.is_empty() {
        changes.push(format!("bridge {br}: {}", sets.join(" ")));
        cmd(
            &mut args,
            [vec!["set".into(), "Bridge".into(), br.into()], sets].concat(),
        );
    }
    let vx_opts = [
        ("remote_ip", "flow".to_owned()),
        ("key", "flow".to_owned()),
        ("dst_port", s.vxlan_port.to_string()),
        ("local_ip", spec.node_ip.to_string()),
    ];
    let tun_mtu = i64::from(s.mtu);
    for (name, rec, ty, ofport, opts, mtu) in [
        (
            VXLAN_PORT_NAME,
            seen.vxlan.as_ref(),
            "vxlan",
            VXLAN_OFPORT,
            &vx_opts[..],
            None,
        ),
        (
            TUN0,
            seen.tun0.as_ref(),
            "internal",
            TUN0_OFPORT,
            &[][..],
            Some(tun_mtu),
        ),
    ] {
        if !seen.ports.iter().any(|p| p == name) {
            cmd(
                &mut args,
                ["--may-exist", "add-port", br, name]
                    .map(String::from)
                    .to_vec(),
            );
            changes.push(format!("add port {name}"));
        }
        let mut sets: Vec<String> = Vec::new();
        if col_str(rec, "type").as_deref().unwrap_or("") != ty {
            sets.push(format!("type={ty}"));
        }
        if col_int(rec, "ofport_request") != Some(i64::from(ofport)) {
            sets.push(format!("ofport_request={ofport}"));
        }
        let have = col_map(rec, "options");
        for (k, v) in opts {
            if have.get(*k) != Some(v) {
                sets.push(format!("options:{k}={}", quote(v)));
            }
        }
        if let Some(m) = mtu {
            if col_int(rec, "mtu_request") != Some(m) {
                sets.push(format!("mtu_request={m}"));
            }
        }
        if !sets.is_empty() {
            changes.push(format!("interface {name}: {}", sets.join(" ")));
            cmd(
                &mut args,
                [vec!["set".into(), "Interface".into(), name.into()], sets].concat(),
            );
        }
    }
    if let Some(target) = &spec.controller {
        // Several replicas: comma-separated targets, one OVS controller each.
        let mut want: Vec<String> = target
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        want.sort();
        want.dedup();
        let mut have: Vec<String> = seen.controllers.iter().map(|c| c.target.clone()).collect();
        have.sort();
        let backoff = i64::from(spec.max_backoff_ms);
        if have != want {
            // New rows made with their settings in the same transaction (set-controller would
            // make rows with Open vSwitch's defaults, and a switch that lost them waits up to
            // 8 s between reconnects).
            let mut ids = Vec::new();
            for (i, t) in want.iter().enumerate() {
                let id = format!("@flowmesh_ctl{i}");
                cmd(
                    &mut args,
                    vec![
                        format!("--id={id}"),
                        "create".into(),
                        "Controller".into(),
                        format!("target={}", quote(t)),
                        format!("max_backoff={backoff}"),
                    ],
                );
                ids.push(id);
            }
            cmd(
                &mut args,
                vec![
                    "set".into(),
                    "Bridge".into(),
                    br.into(),
                    format!("controller=[{}]", ids.join(",")),
                ],
            );
            changes.push(format!(
                "controller {} (max_backoff {backoff} ms)",
                want.join(" ")
            ));
        } else {
            for c in seen
                .controllers
                .iter()
                .filter(|c| c.max_backoff != Some(backoff))
            {
                cmd(
                    &mut args,
                    vec![
                        "set".into(),
                        "Controller".into(),
                        c.uuid.clone(),
                        format!("max_backoff={backoff}"),
                    ],
                );
                changes.push(format!("controller {}: max_backoff {backoff} ms", c.target));
            }
        }
    }
    (args, changes)
}

/// Brings OVS, tun0, routes, forwarding and nftables to the wanted state; returns the list
/// of changes made (empty when the node was already right).
pub async fn ensure_node(
    vsctl: &Vsctl,
    nl: &Netlink,
    spec: &BridgeSpec,
    s: &NodeSettings,
) -> Result<Vec<String>, SetupError> {
    let seen = observe_ovs(vsctl, &spec.bridge).await?;
    let (args, mut changes) = plan_ovs(spec, s, &seen);
    if !args.is_empty() {
        vsctl.run(&args).await?;
    }
    for (port, want) in [(VXLAN_PORT_NAME, VXLAN_OFPORT), (TUN0, TUN0_OFPORT)] {
        let got = vsctl.wait_ofport(port, Duration::from_secs(10)).await?;
        if got != want {
            return Err(SetupError::Ofport {
                port: port.into(),
                got,
                want,
            });
        }
    }
    changes.extend(ensure_host_network(nl, s).await?);
    if ensure_ip_forward()? {
        changes.push("net.ipv4.ip_forward=1".into());
    }
    if nft::ensure(&s.cluster_networks, s.vxlan_port).await? {
        changes.push(format!("nftables table {}", nft::TABLE));
    }
    if let Some(dir) = &spec.nm_conf_dir {
        changes.extend(ensure_nm_conf(dir, &spec.bridge)?);
    }
    Ok(changes)
}

/// `flowmesh-shim --uninstall`: remove what the shim set up on the node — br0 with its ports
/// (vxlan0, tun0 and its routes, pod ports and the host ends of their veths), the egress IPs it
/// holds, the nftables tables, the NetworkManager file. Returns what was removed.
pub async fn uninstall(
    vsctl: &Vsctl,
    nl: &Netlink,
    bridge: &str,
    nm_conf_dir: Option<&std::path::Path>,
) -> Result<Vec<String>, SetupError> {
    let mut removed = Vec::new();
    // The pod veths' host ends would outlive the bridge: removing one also removes its pod end.
    for p in vsctl.pod_ports().await? {
        if nl.del_link(&p.name).await? {
            removed.push(format!("pod veth {}", p.name));
        }
    }
    if observe_ovs(vsctl, bridge).await?.bridge.is_some() {
        vsctl.run(&["--if-exists", "del-br", bridge]).await?;
        removed.push(format!("bridge {bridge}"));
    }
    // Egress IPs the node still holds would keep answering ARP for addresses the controller
    // moves elsewhere; the egress table is the record of which they are, so they go first.
    match crate::egress::release_all(nl).await {
        Ok(ips) => removed.extend(ips),
        Err(crate::egress::EgressError::Netlink(e)) => return Err(e.into()),
        Err(crate::egress::EgressError::Nft(e)) => return Err(e.into()),
        Err(e) => tracing::warn!(error = %e, "egress IPs not released"),
    }
    for table in [nft::TABLE, crate::egress::TABLE] {
        if nft::delete_table(table).await? {
            removed.push(format!("nftables table {table}"));
        }
    }
    if let Some(dir) = nm_conf_dir {
        let path = dir.join(NM_CONF);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(format!("NetworkManager: {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(SetupError::File {
                    path: path.display().to_string(),
                    source,
                })
            }
        }
    }
    Ok(removed)
}

/// tun0: gateway address, up, no connected route for the subnet (when a cluster network
/// covers it), a scope-link route for each cluster network and the service network.
pub async fn ensure_host_network(
    nl: &Netlink,
    s: &NodeSettings,
) -> Result<Vec<String>, SetupError> {
    let mut changes = Vec::new();
    let tun = nl.wait_link(TUN0, Duration::from_secs(10)).await?;
    let idx = tun.header.index;
    let gw = Ipv4Net::new(s.gateway, s.subnet.prefix())
        .ok_or_else(|| SetupError::Config("bad subnet prefix".into()))?;
    if nl.ensure_addr(idx, gw).await? {
        changes.push(format!("tun0 address {gw}"));
    }
    // Table 101's local egress bucket addresses tun0 by this MAC.
    let mac = crate::net::pod_mac(s.gateway);
    if crate::netlink::link_mac(&tun).as_deref() != Some(&mac[..]) {
        nl.set_mac(idx, mac).await?;
        changes.push(format!("tun0 MAC {}", crate::net::mac_to_string(&mac)));
    }
    if !is_up(&tun) {
        nl.set_up(idx).await?;
        changes.push("tun0 up".into());
    }
    if s.cluster_networks
        .iter()
        .any(|c| c.contains(s.subnet.addr()))
    {
        let connected: Vec<RouteEntry> = nl
            .routes()
            .await?
            .into_iter()
            .filter(|r| r.kernel && r.dst == s.subnet && r.oif == Some(idx) && r.gw.is_none())
            .collect();
        for r in connected {
            nl.del_route(r).await?;
            changes.push(format!("removed connected route {}", r.dst));
        }
    }
    for dst in s.cluster_networks.iter().chain(s.service_network.iter()) {
        let r = RouteEntry {
            dst: *dst,
            gw: None,
            oif: Some(idx),
            kernel: false,
        };
        if nl.ensure_route(r).await? {
            changes.push(format!("route {dst} dev tun0"));
        }
    }
    Ok(changes)
}

/// Sets net.ipv4.ip_forward=1 (in the shim's namespace) unless it already is.
pub fn ensure_ip_forward() -> Result<bool, SetupError> {
    let path = "/proc/sys/net/ipv4/ip_forward";
    let err = |source| SetupError::Sysctl {
        path: path.into(),
        source,
    };
    let now = std::fs::read_to_string(path).map_err(err)?;
    if now.trim() == "1" {
        return Ok(false);
    }
    std::fs::write(path, "1\n").map_err(err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> NodeSettings {
        NodeSettings::try_from(&NodeConfig {
            node: "n1".into(),
            subnet: "10.128.2.0/23".into(),
            gateway: "10.128.2.1".into(),
            cluster_networks: vec!["10.128.0.0/14".into()],
            service_network: "172.30.0.0/16".into(),
            mtu: 1450,
            vxlan_port: 4789,
            mode: "multitenant".into(),
            dpid: 1,
        })
        .expect("valid")
    }

    fn spec() -> BridgeSpec {
        BridgeSpec {
            bridge: "br0".into(),
            datapath_type: Some("netdev".into()),
            dpid: 1,
            controller: Some("tcp:172.31.1.254:6653".into()),
            max_backoff_ms: 1000,
            node_ip: Ipv4Addr::new(172, 31, 1, 1),
            nm_conf_dir: None,
        }
    }

    #[test]
    fn empty_ovsdb_gets_everything_in_one_transaction() {
        let (args, changes) = plan_ovs(&spec(), &settings(), &ObservedOvs::default());
        let text = args.join(" ");
        for want in [
            "--may-exist add-br br0",
            "datapath_type=netdev",
            "fail_mode=secure",
            "protocols=OpenFlow13",
            "other_config:datapath-id=\"0000000000000001\"",
            "add-port br0 vxlan0",
            "type=vxlan ofport_request=1",
            "options:dst_port=\"4789\"",
            "options:local_ip=\"172.31.1.1\"",
            "type=internal ofport_request=2",
            "mtu_request=1450",
            "--id=@flowmesh_ctl0 create Controller target=\"tcp:172.31.1.254:6653\" max_backoff=1000",
            "set Bridge br0 controller=[@flowmesh_ctl0]",
        ] {
            assert!(text.contains(want), "{want} missing from {text}");
        }
        assert_eq!(changes.len(), 7, "{changes:?}");
    }

    #[test]
    fn correct_ovsdb_plans_nothing() {
        let rec = |v: serde_json::Value| -> Record {
            v.as_object().expect("object").clone().into_iter().collect()
        };
        let seen = ObservedOvs {
            bridge: Some(rec(
                json!({"name":"br0","datapath_type":"netdev","fail_mode":"secure",
                "protocols":["set",["OpenFlow13"]],
                "other_config":["map",[["datapath-id","0000000000000001"],["disable-in-band","true"]]]}),
            )),
            ports: vec!["tun0".into(), "vxlan0".into()],
            vxlan: Some(rec(
                json!({"name":"vxlan0","type":"vxlan","ofport_request":1,
                "options":["map",[["dst_port","4789"],["key","flow"],["local_ip","172.31.1.1"],["remote_ip","flow"]]],
                "mtu_request":["set",[]]}),
            )),
            tun0: Some(rec(
                json!({"name":"tun0","type":"internal","ofport_request":2,
                "options":["map",[]],"mtu_request":1450}),
            )),
            controllers: vec![row("u1", "tcp:172.31.1.254:6653", Some(1000))],
        };
        let (args, changes) = plan_ovs(&spec(), &settings(), &seen);
        assert!(args.is_empty(), "{args:?} {changes:?}");
        let mut wrong = seen.clone();
        wrong.tun0 = Some(rec(
            json!({"name":"tun0","type":"internal","ofport_request":2,
            "options":["map",[]],"mtu_request":1500}),
        ));
        let (args, _) = plan_ovs(&spec(), &settings(), &wrong);
        assert_eq!(args, ["set", "Interface", "tun0", "mtu_request=1450"]);
    }

    fn row(uuid: &str, target: &str, max_backoff: Option<i64>) -> ControllerRow {
        ControllerRow {
            uuid: uuid.into(),
            target: target.into(),
            max_backoff,
        }
    }

    #[test]
    fn several_controller_replicas_are_one_transaction_with_their_backoff() {
        let mut sp = spec();
        sp.controller = Some("ssl:10.0.0.2:6653, ssl:10.0.0.1:6653".into());
        let seen = ObservedOvs {
            controllers: vec![row("u1", "ssl:10.0.0.1:6653", Some(1000))],
            ..ObservedOvs::default()
        };
        let (args, _) = plan_ovs(&sp, &settings(), &seen);
        let text = args.join(" ");
        assert!(
            text.contains(
                "--id=@flowmesh_ctl0 create Controller target=\"ssl:10.0.0.1:6653\" max_backoff=1000 -- \
                 --id=@flowmesh_ctl1 create Controller target=\"ssl:10.0.0.2:6653\" max_backoff=1000 -- \
                 set Bridge br0 controller=[@flowmesh_ctl0,@flowmesh_ctl1]"
            ),
            "{text}"
        );
        // The same set in another order is no change.
        let seen = ObservedOvs {
            controllers: vec![
                row("u2", "ssl:10.0.0.2:6653", Some(1000)),
                row("u1", "ssl:10.0.0.1:6653", Some(1000)),
            ],
            ..ObservedOvs::default()
        };
        let (args, _) = plan_ovs(&sp, &settings(), &seen);
        assert!(!args.join(" ").contains("Controller"), "{args:?}");
        // Rows with Open vSwitch's default backoff (set by hand, or by an older shim) get it
        // set in place: the switch keeps its connections.
        let seen = ObservedOvs {
            controllers: vec![
                row("u2", "ssl:10.0.0.2:6653", None),
                row("u1", "ssl:10.0.0.1:6653", Some(1000)),
            ],
            ..ObservedOvs::default()
        };
        let (args, changes) = plan_ovs(&sp, &settings(), &seen);
        assert!(
            args.join(" ")
                .ends_with("-- set Controller u2 max_backoff=1000"),
            "{args:?}"
        );
        assert_eq!(
            changes.last().map(String::as_str),
            Some("controller ssl:10.0.0.2:6653: max_backoff 1000 ms")
        );
        assert_eq!(args.iter().filter(|a| *a == "Controller").count(), 1);
    }

    #[test]
    fn node_config_is_validated() {
        let s = settings();
        assert_eq!(s.subnet.to_string(), "10.128.2.0/23");
        assert_eq!(
            s.service_network.map(|n| n.to_string()).as_deref(),
            Some("172.30.0.0/16")
        );
        let mut c = NodeConfig {
            subnet: "10.128.2.0/23".into(),
            gateway: "10.0.0.1".into(),
            cluster_networks: vec!["10.128.0.0/14".into()],
            mtu: 1450,
            ..Default::default()
        };
        assert!(
            NodeSettings::try_from(&c).is_err(),
            "gateway outside subnet"
        );
        c.gateway = "10.128.2.1".into();
        assert_eq!(
            NodeSettings::try_from(&c).map(|s| s.vxlan_port).ok(),
            Some(4789)
        );
        c.mtu = 0;
        assert!(NodeSettings::try_from(&c).is_err());
    }
}
