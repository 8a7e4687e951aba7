//! `NetnsLab`: K nodes as network namespaces, each running its own ovsdb-server and
//! ovs-vswitchd (userspace `netdev` datapath) as tracked children started with
//! `ip netns exec`, joined by a Linux bridge in an underlay namespace; a controller namespace
//! on the underlay; pod namespaces attached by veth.
//!
//! Layout of a lab with id `fmh<PID>-<N>` and underlay 172.31.X.0/24 (X derived from the id;
//! the addresses only ever exist inside the lab's own namespaces):
//! * `<id>-ul`: Linux bridge `br-ul`; veth `n<i>` to node i, `ctl` to the controller namespace.
//! * `<id>-ctl`: `eth0` = 172.31.X.254/24 (a controller started there with
//!   [`NetnsLab::spawn_in`] is reachable from every node at `tcp:172.31.X.254:PORT`).
//! * `<id>-n<i>` (node i, 1-based): `eth0` (veth to the underlay, ARP off: the node's kernel
//!   must not answer for the node's address from it) in bridge `br-phy`
//!   (netdev, hwaddr `0a:00:00:00:00:<i>`) whose tap holds 172.31.X.i/24 -- userspace
//!   tunnelling must route out through an OVS bridge port; integration bridge `br0` (netdev,
//!   OpenFlow13, fail_mode=secure, disable-in-band, datapath id i) with `vxlan0` at ofport 1 (remote_ip=flow,
//!   key=flow, local_ip=172.31.X.i) and optionally `tun0` (internal) at ofport 2.
//! * `<id>-n<i>-<pod>`: a pod; `eth0` (MTU 1450, tx checksum offload off) whose peer `<pod>`
//!   sits on the node's `br0`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::ovs::{DatapathMode, OvsInstance};
use crate::process::{output_of, run, run_checked, TrackedProcess, TERM_GRACE};
use crate::rundir::{delete_netns, RunDir};
use crate::tcp::{tcp_transfer, TcpTransfer};

/// OpenFlow port of `vxlan0` on every node's integration bridge.
pub const VXLAN_OFPORT: u32 = 1;
/// OpenFlow port of the optional `tun0` on every node's integration bridge.
pub const TUN0_OFPORT: u32 = 2;
/// MTU of pod interfaces (underlay 1500 minus VXLAN overhead).
pub const POD_MTU: u32 = 1450;

/// Serializes `ip netns add` inside this process (the first one sets up /run/netns).
static NETNS_ADD: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Builder for [`NetnsLab`].
#[derive(Debug, Clone)]
pub struct LabBuilder {
    nodes: usize,
    bridge: String,
    vxlan_dst_port: Option<u16>,
    tun0: bool,
    controller_port: Option<u16>,
    seed_neighbors: bool,
}

impl Default for LabBuilder {
    fn default() -> Self {
        LabBuilder {
            nodes: 2,
            bridge: "br0".into(),
            vxlan_dst_port: None,
            tun0: false,
            controller_port: None,
            seed_neighbors: true,
        }
    }
}

impl LabBuilder {
    /// Number of nodes (1..=200).
    pub fn nodes(mut self, k: usize) -> Self {
        self.nodes = k;
        self
    }

    /// Name of the integration bridge (default `br0`).
    pub fn bridge(mut self, name: impl Into<String>) -> Self {
        self.bridge = name.into();
        self
    }

    /// options:dst_port of every `vxlan0` (default: OVS's 4789).
    pub fn vxlan_dst_port(mut self, port: u16) -> Self {
        self.vxlan_dst_port = Some(port);
        self
    }

    /// Whether to create `tun0` (internal, ofport 2) on each node (default: no, so a node shim
    /// can create it itself).
    pub fn tun0(mut self, yes: bool) -> Self {
        self.tun0 = yes;
        self
    }

    /// Points every node's integration bridge at `tcp:<controller ns IP>:PORT`.
    pub fn controller_port(mut self, port: u16) -> Self {
        self.controller_port = Some(port);
        self
    }

    /// Pre-seed every node's tunnel neighbour table with the other nodes' underlay MACs
    /// (`tnl/neigh/set`), so the first packet to a remote node is not lost (default: yes).
    pub fn seed_neighbors(mut self, yes: bool) -> Self {
        self.seed_neighbors = yes;
        self
    }

    /// Creates the namespaces, starts every node's Open vSwitch and wires the underlay.
    pub fn start(self) -> Result<NetnsLab> {
        if self.nodes == 0 || self.nodes > 200 {
            return Err(HarnessError::Invalid(format!(
                "a lab has 1..=200 nodes, not {}",
                self.nodes
            )));
        }
        check_ifname(&self.bridge)?;
        let t0 = Instant::now();
        let run = RunDir::create()?;
        let id = run.id().to_owned();
        let octet =
            u8::try_from(20 + (std::process::id() + run.instance() * 37) % 200).unwrap_or(20);
        let mut lab = NetnsLab {
            underlay_ns: format!("{id}-ul"),
            ctl_ns: format!("{id}-ctl"),
            octet,
            bridge: self.bridge.clone(),
            nodes: Vec::new(),
            namespaces: Mutex::new(Vec::new()),
            pods: Mutex::new(Vec::new()),
            procs: Mutex::new(Vec::new()),
            startup: Duration::ZERO,
            spawn_seq: Mutex::new(0),
            id,
            run,
        };
        // From here on, an early return drops `lab`, which removes what was made so far.
        let ul = lab.underlay_ns.clone();
        lab.create_netns(&ul)?;
        lab.ip(&["-n", &ul, "link", "add", "br-ul", "type", "bridge"])?;
        lab.ip(&["-n", &ul, "link", "set", "br-ul", "up"])?;
        let ctl = lab.ctl_ns.clone();
        lab.create_netns(&ctl)?;
        lab.add_veth(&ctl, "eth0", &ul, "ctl")?;
        lab.ip(&["-n", &ul, "link", "set", "ctl", "master", "br-ul", "up"])?;
        let ctl_cidr = format!("{}/24", lab.controller_ip());
        lab.ip(&["-n", &ctl, "addr", "add", &ctl_cidr, "dev", "eth0"])?;
        lab.ip(&["-n", &ctl, "link", "set", "eth0", "up"])?;
        // TCP from a veth with TX checksum offload reaches the userspace datapath with partial
        // checksums, and the node's kernel drops it: compute checksums in software.
        lab.tx_offload_off(&ctl, "eth0")?;
        // Nodes come up in parallel; every one that started is kept so drop can clean it.
        let results: Vec<Result<LabNode>> = std::thread::scope(|s| {
            let lab = &lab;
            let cfg = &self;
            let handles: Vec<_> = (1..=self.nodes)
                .map(|i| s.spawn(move || lab.start_node(i, cfg)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(HarnessError::Invalid(
                            "node start-up thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        let mut first_err = None;
        for r in results {
            match r {
                Ok(node) => lab.nodes.push(node),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        if self.seed_neighbors {
            lab.seed_tunnel_neighbors()?;
        }
        lab.startup = t0.elapsed();
        Ok(lab)
    }
}

/// One node: its namespace and its Open vSwitch.
#[derive(Debug)]
pub struct LabNode {
    index: usize,
    ns: String,
    underlay_ip: Ipv4Addr,
    phy_mac: String,
    ovs: OvsInstance,
}

impl LabNode {
    /// 1-based node number.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The node's network namespace.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The node's underlay (VTEP) address, on its `br-phy`.
    pub fn underlay_ip(&self) -> Ipv4Addr {
        self.underlay_ip
    }

    /// MAC of the node's `br-phy`.
    pub fn phy_mac(&self) -> &str {
        &self.phy_mac
    }

    /// The node's Open vSwitch (ovs-vsctl/ofctl/appctl, dump_flows, add_flows, ...).
    pub fn ovs(&self) -> &OvsInstance {
        &self.ovs
    }

    /// Mutable access (restart/kill vswitchd).
    pub fn ovs_mut(&mut self) -> &mut OvsInstance {
        &mut self.ovs
    }
}

/// A pod namespace attached to a node's integration bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// Pod name (also the host-side veth name on the node).
    pub name: String,
    /// Node number.
    pub node: usize,
    /// The pod's namespace.
    pub ns: String,
    /// Pod address.
    pub ip: Ipv4Addr,
    /// Prefix length.
    pub prefix: u8,
    /// Pod MAC.
    pub mac: String,
    /// OpenFlow port of the host end on the integration bridge.
    pub ofport: u32,
}

/// A process started with [`NetnsLab::spawn_in`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnedProcess {
    /// Its PID.
    pub pid: u32,
    /// File receiving its stdout and stderr.
    pub log: PathBuf,
}

/// Result of a ping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingStats {
    /// Echo requests sent.
    pub transmitted: u32,
    /// Replies received.
    pub received: u32,
    /// ping's output.
    pub output: String,
}

/// A running namespace lab; everything it made is removed on drop.
#[derive(Debug)]
pub struct NetnsLab {
    id: String,
    underlay_ns: String,
    ctl_ns: String,
    octet: u8,
    bridge: String,
    nodes: Vec<LabNode>,
    /// Every namespace created, in creation order.
    namespaces: Mutex<Vec<String>>,
    pods: Mutex<Vec<Pod>>,
    procs: Mutex<Vec<TrackedProcess>>,
    startup: Duration,
    spawn_seq: Mutex<u32>,
    run: RunDir,
}

impl NetnsLab {
    /// A builder (2 nodes, `br0`, no tun0, no controller, neighbours pre-seeded).
    pub fn builder() -> LabBuilder {
        LabBuilder::default()
    }

    /// Unique id (`fmh<PID>-<N>`), the prefix of every namespace of this lab.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The run directory (per-node OVS run dirs, process logs).
    pub fn run_dir(&self) -> &Path {
        self.run.path()
    }

    /// Time `LabBuilder::start` took.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The underlay namespace.
    pub fn underlay_ns(&self) -> &str {
        &self.underlay_ns
    }

    /// The controller namespace.
    pub fn controller_ns(&self) -> &str {
        &self.ctl_ns
    }

    /// The controller namespace's address on the underlay.
    pub fn controller_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(172, 31, self.octet, 254)
    }

    /// Node `i`'s underlay address (172.31.X.i).
    pub fn underlay_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(172, 31, self.octet, u8::try_from(i).unwrap_or(u8::MAX))
    }

    /// Name of the integration bridge on every node.
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// All nodes.
    pub fn nodes(&self) -> &[LabNode] {
        &self.nodes
    }

    /// Node `i` (1-based).
    pub fn node(&self, i: usize) -> Result<&LabNode> {
        i.checked_sub(1)
            .and_then(|k| self.nodes.get(k))
            .ok_or_else(|| HarnessError::Invalid(format!("no node {i} in this lab")))
    }

    /// Node `i` (1-based), mutably.
    pub fn node_mut(&mut self, i: usize) -> Result<&mut LabNode> {
        i.checked_sub(1)
            .and_then(|k| self.nodes.get_mut(k))
            .ok_or_else(|| HarnessError::Invalid(format!("no node {i} in this lab")))
    }

    /// Pods added so far.
    pub fn pods(&self) -> Vec<Pod> {
        lock(&self.pods).clone()
    }

    /// Every namespace this lab created (so far), in creation order.
    pub fn namespaces(&self) -> Vec<String> {
        lock(&self.namespaces).clone()
    }

    /// PIDs of every process this lab runs (daemons and spawned processes).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .nodes
            .iter()
            .flat_map(|n| [n.ovs.ovsdb_pid(), n.ovs.vswitchd_pid()])
            .flatten()
            .collect();
        pids.extend(lock(&self.procs).iter().map(TrackedProcess::pid));
        pids
    }

    fn ip(&self, args: &[&str]) -> Result<String> {
        run("ip", args)
    }

    fn create_netns(&self, name: &str) -> Result<()> {
        {
            let _g = lock(&NETNS_ADD);
            self.run.record_netns(name)?;
            run("ip", ["netns", "add", name])?;
        }
        lock(&self.namespaces).push(name.to_owned());
        run("ip", ["-n", name, "link", "set", "lo", "up"]).map(|_| ())
    }

    /// Creates a namespace `<id>-<role>` (lo up) that the lab deletes on drop; returns its name.
    pub fn add_netns(&self, role: &str) -> Result<String> {
        if role.is_empty() || role.contains(['/', ' ']) {
            return Err(HarnessError::Invalid(format!(
                "bad namespace role {role:?}"
            )));
        }
        let name = format!("{}-{role}", self.id);
        self.create_netns(&name)?;
        Ok(name)
    }

    /// `ethtool -K IFNAME tx off` inside `ns`. Any veth whose namespace originates TCP into the
    /// userspace datapath needs it (pods, controllers), or checksums stay partial and TCP fails.
    pub fn tx_offload_off(&self, ns: &str, ifname: &str) -> Result<()> {
        self.run_in(ns, "ethtool", &["-K", ifname, "tx", "off"])
            .map(|_| ())
    }

    /// Creates a veth pair with `if_a` in namespace `ns_a` and `if_b` in `ns_b` (made directly
    /// inside the namespaces, so names only need to be unique there).
    pub fn add_veth(&self, ns_a: &str, if_a: &str, ns_b: &str, if_b: &str) -> Result<()> {
        check_ifname(if_a)?;
        check_ifname(if_b)?;
        self.ip(&[
            "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b,
        ])
        .map(|_| ())
    }

    fn start_node(&self, i: usize, cfg: &LabBuilder) -> Result<LabNode> {
        let ns = format!("{}-n{i}", self.id);
        let ul = &self.underlay_ns;
        let peer = format!("n{i}");
        self.create_netns(&ns)?;
        self.add_veth(&ns, "eth0", ul, &peer)?;
        self.ip(&["-n", ul, "link", "set", &peer, "master", "br-ul", "up"])?;
        // eth0 is br-phy's port (OVS reads and writes it raw, as DPDK would a NIC), but the
        // node's kernel still sees it: left alone, that kernel answers an underlay ARP request
        // for the node's address a second time from eth0's own MAC, and whichever answer OVS
        // snoops last becomes its tunnel neighbour entry. With eth0's MAC there, tunnelled
        // packets to the node are not addressed to br-phy and are dropped (issue 33's soak:
        // traffic between two nodes stopped for up to 135 s, each time a few seconds after a
        // br0 deletion on one of them). No ARP on eth0: only br-phy answers.
        self.ip(&["-n", &ns, "link", "set", "eth0", "arp", "off", "up"])?;
        let dir = self.run.path().join(format!("node{i}"));
        let ovs = OvsInstance::start(&dir, Some(&ns), DatapathMode::Netdev)?;
        let underlay_ip = self.underlay_ip(i);
        let phy_mac = format!("0a:00:00:00:{:02x}:{:02x}", i >> 8, i & 0xff);
        let br = cfg.bridge.as_str();
        let dpid = format!("other-config:datapath-id={i:016x}");
        let hwaddr = format!("other-config:hwaddr={phy_mac}");
        let vx_ofport = format!("ofport_request={VXLAN_OFPORT}");
        let local_ip = format!("options:local_ip={underlay_ip}");
        let mut args: Vec<String> = Vec::new();
        let mut add = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
        add(&["--", "add-br", "br-phy", "--", "set", "bridge", "br-phy"]);
        add(&["datapath_type=netdev", &hwaddr]);
        add(&["--", "add-port", "br-phy", "eth0"]);
        add(&[
            "--",
            "add-br",
            br,
            "--",
            "set",
            "bridge",
            br,
            "datapath_type=netdev",
        ]);
        add(&["protocols=OpenFlow13", "fail_mode=secure", &dpid]);
        add(&["other-config:disable-in-band=true"]);
        add(&[
            "--",
            "add-port",
            br,
            "vxlan0",
            "--",
            "set",
            "interface",
            "vxlan0",
        ]);
        add(&[
            "type=vxlan",
            &vx_ofport,
            "options:remote_ip=flow",
            "options:key=flow",
        ]);
        add(&[&local_ip]);
        if let Some(p) = cfg.vxlan_dst_port {
            add(&[&format!("options:dst_port={p}")]);
        }
        if cfg.tun0 {
            add(&[
                "--",
                "add-port",
                br,
                "tun0",
                "--",
                "set",
                "interface",
                "tun0",
            ]);
            add(&["type=internal", &format!("ofport_request={TUN0_OFPORT}")]);
        }
        if let Some(port) = cfg.controller_port {
            let target = format!("tcp:{}:{port}", self.controller_ip());
            add(&["--", "set-controller", br, &target]);
        }
        ovs.vsctl(&args)?;
        let cidr = format!("{underlay_ip}/24");
        self.ip(&["-n", &ns, "addr", "add", &cidr, "dev", "br-phy"])?;
        self.ip(&["-n", &ns, "link", "set", "br-phy", "up"])?;
        Ok(LabNode {
            index: i,
            ns,
            underlay_ip,
            phy_mac,
            ovs,
        })
    }

    /// Tells every node's OVS the underlay MAC of every other node (`tnl/neigh/set`).
    pub fn seed_tunnel_neighbors(&self) -> Result<()> {
        for n in &self.nodes {
            for m in self.nodes.iter().filter(|m| m.index != n.index) {
                n.ovs.appctl([
                    "tnl/neigh/set",
                    "br-phy",
                    &m.underlay_ip.to_string(),
                    &m.phy_mac,
                ])?;
            }
        }
        Ok(())
    }

    /// Sets every node's integration-bridge controller target.
    pub fn set_controller_all(&self, target: &str) -> Result<()> {
        for n in &self.nodes {
            n.ovs.set_controller(&self.bridge, target)?;
        }
        Ok(())
    }

    /// Adds a host on the underlay outside the cluster: namespace `<id>-<role>` whose `eth0`
    /// (TX checksum offload off) joins the underlay bridge with `172.31.X.<host>/24`. Hosts 1..=200
    /// are the nodes' and 254 the controller's. Returns the namespace and the address.
    pub fn add_underlay_host(&self, role: &str, host: u8) -> Result<(String, Ipv4Addr)> {
        if host == 0 || host == 255 || host == 254 || usize::from(host) <= self.nodes.len() {
            return Err(HarnessError::Invalid(format!(
                "underlay host address .{host} is taken or invalid"
            )));
        }
        check_ifname(role)?;
        let ns = self.add_netns(role)?;
        let ul = self.underlay_ns.clone();
        self.add_veth(&ns, "eth0", &ul, role)?;
        self.ip(&["-n", &ul, "link", "set", role, "master", "br-ul", "up"])?;
        let ip = Ipv4Addr::new(172, 31, self.octet, host);
        self.ip(&["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
        self.ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        self.tx_offload_off(&ns, "eth0")?;
        Ok((ns, ip))
    }

    /// Sets node `i`'s integration-bridge controller target.
    pub fn set_controller(&self, i: usize, target: &str) -> Result<()> {
        self.node(i)?.ovs.set_controller(&self.bridge, target)
    }

    /// Adds a pod namespace `<id>-n<node>-<name>` wired by veth to node `node`'s integration
    /// bridge: pod `eth0` with `mac`, MTU 1450, `cidr` (e.g. `10.244.1.2/24`), default route via
    /// `gw`, TX checksum offload off (needed for TCP on the userspace datapath); host end
    /// `<name>` at `ofport` (or one OVS picks).
    pub fn add_pod(
        &self,
        node: usize,
        name: &str,
        cidr: &str,
        gw: Ipv4Addr,
        mac: &str,
        ofport: Option<u32>,
    ) -> Result<Pod> {
        check_ifname(name)?;
        if ["eth0", "br-phy", "tun0", "vxlan0", "ovs-netdev", "lo"].contains(&name)
            || name == self.bridge
            || name.starts_with("vxlan_sys")
        {
            return Err(HarnessError::Invalid(format!(
                "pod name {name} clashes with a node interface"
            )));
        }
        let (ip, prefix) = parse_cidr(cidr)?;
        let n = self.node(node)?;
        let ns = format!("{}-n{node}-{name}", self.id);
        self.create_netns(&ns)?;
        self.add_veth(&n.ns, name, &ns, "eth0")?;
        let mtu = POD_MTU.to_string();
        self.ip(&[
            "-n", &ns, "link", "set", "eth0", "address", mac, "mtu", &mtu, "up",
        ])?;
        self.tx_offload_off(&ns, "eth0")?;
        self.ip(&["-n", &ns, "addr", "add", cidr, "dev", "eth0"])?;
        self.ip(&["-n", &ns, "route", "add", "default", "via", &gw.to_string()])?;
        self.ip(&["-n", &n.ns, "link", "set", name, "mtu", &mtu, "up"])?;
        let mut args = vec!["add-port".to_owned(), self.bridge.clone(), name.to_owned()];
        if let Some(p) = ofport {
            args.extend([
                "--".into(),
                "set".into(),
                "interface".into(),
                name.to_owned(),
            ]);
            args.push(format!("ofport_request={p}"));
        }
        n.ovs.vsctl(&args)?;
        let got = n.ovs.ofport(name)?;
        if ofport.is_some_and(|p| p != got) {
            return Err(HarnessError::Invalid(format!(
                "pod {name}: asked for ofport {ofport:?}, OVS gave {got}"
            )));
        }
        let pod = Pod {
            name: name.to_owned(),
            node,
            ns,
            ip,
            prefix,
            mac: mac.to_owned(),
            ofport: got,
        };
        lock(&self.pods).push(pod.clone());
        Ok(pod)
    }

    /// Runs `program args` inside namespace `ns` (`ip netns exec`); any exit status.
    pub fn exec_in(&self, ns: &str, program: &str, args: &[&str]) -> Result<Output> {
        output_of(
            Command::new("ip")
                .args(["netns", "exec", ns, program])
                .args(args),
        )
    }

    /// Like [`NetnsLab::exec_in`] but a non-zero exit is an error; returns stdout.
    pub fn run_in(&self, ns: &str, program: &str, args: &[&str]) -> Result<String> {
        run_checked(
            Command::new("ip")
                .args(["netns", "exec", ns, program])
                .args(args),
        )
    }

    /// Starts a long-running `program args` inside `ns` as a tracked child (stdout and stderr
    /// to a log file in the run dir); it is killed by PID when the lab is dropped.
    pub fn spawn_in(
        &self,
        ns: &str,
        program: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<SpawnedProcess> {
        let seq = {
            let mut g = lock(&self.spawn_seq);
            *g += 1;
            *g
        };
        let base = Path::new(program)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "proc".into());
        let log = self.run.path().join(format!("{base}.{seq}.log"));
        let file = std::fs::File::create(&log).map_err(|source| HarnessError::Io {
            op: "create",
            path: log.clone(),
            source,
        })?;
        let file2 = file.try_clone().map_err(|source| HarnessError::Io {
            op: "dup",
            path: log.clone(),
            source,
        })?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, program])
            .args(args)
            .envs(envs.iter().copied())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(file2));
        let p = TrackedProcess::spawn(base, &mut cmd)?;
        let pid = p.pid();
        lock(&self.procs).push(p);
        Ok(SpawnedProcess { pid, log })
    }

    /// Stops a process from [`NetnsLab::spawn_in`] (SIGTERM, then SIGKILL) and reaps it.
    pub fn stop_process(&self, pid: u32) -> Option<ExitStatus> {
        let mut procs = lock(&self.procs);
        let i = procs.iter().position(|p| p.pid() == pid)?;
        let mut p = procs.swap_remove(i);
        drop(procs);
        p.terminate(TERM_GRACE)
    }

    /// SIGKILLs a process from [`NetnsLab::spawn_in`] (no clean shutdown) and reaps it.
    pub fn kill_process(&self, pid: u32) {
        let mut procs = lock(&self.procs);
        if let Some(i) = procs.iter().position(|p| p.pid() == pid) {
            let mut p = procs.swap_remove(i);
            drop(procs);
            p.kill_now();
        }
    }

    /// Exit status of a spawned process if it has exited (None while it runs).
    pub fn process_exited(&self, pid: u32) -> Option<ExitStatus> {
        lock(&self.procs)
            .iter_mut()
            .find(|p| p.pid() == pid)
            .and_then(TrackedProcess::try_exited)
    }

    /// `ping -c COUNT -i 0.2 -W 1 DST` from namespace `ns`; returns counts (not an error when
    /// replies are missing).
    pub fn ping(&self, ns: &str, dst: IpAddr, count: u32) -> Result<PingStats> {
        let out = self.exec_in(
            ns,
            "ping",
            &[
                "-n",
                "-c",
                &count.to_string(),
                "-i",
                "0.2",
                "-W",
                "1",
                &dst.to_string(),
            ],
        )?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        parse_ping(&text).ok_or_else(|| HarnessError::Parse {
            what: format!("ping from {ns}"),
            detail: format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
        })
    }

    /// Moves `bytes` over TCP from pod `from` to pod `to` (port `port` in `to`).
    pub fn tcp_transfer(&self, from: &Pod, to: &Pod, port: u16, bytes: u64) -> Result<TcpTransfer> {
        tcp_transfer(&from.ns, &to.ns, IpAddr::V4(to.ip), port, bytes)
    }

    fn teardown(&mut self) {
        for mut p in lock(&self.procs).drain(..) {
            p.terminate(TERM_GRACE);
        }
        for n in &mut self.nodes {
            n.ovs.stop();
        }
        let nss: Vec<String> = lock(&self.namespaces).drain(..).rev().collect();
        for ns in nss {
            delete_netns(&ns);
        }
        self.run.remove();
    }
}

impl Drop for NetnsLab {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Linux interface names are at most 15 bytes and may not contain '/', ':' or spaces.
fn check_ifname(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 15
        || name.contains(['/', ':', ' '])
        || name == "."
        || name == ".."
    {
        return Err(HarnessError::Invalid(format!(
            "{name:?} is not a valid interface name (1..=15 bytes, no '/', ':' or space)"
        )));
    }
    Ok(())
}

fn parse_cidr(cidr: &str) -> Result<(Ipv4Addr, u8)> {
    let bad = || HarnessError::Invalid(format!("{cidr:?} is not an IPv4 address/prefix"));
    let (ip, len) = cidr.split_once('/').ok_or_else(bad)?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    if len > 32 {
        return Err(bad());
    }
    Ok((ip, len))
}

/// Reads "N packets transmitted, M received" from ping's summary.
fn parse_ping(text: &str) -> Option<PingStats> {
    let line = text.lines().find(|l| l.contains("packets transmitted"))?;
    let mut nums = line.split(',').map(|part| {
        part.split_whitespace()
            .next()
            .and_then(|n| n.parse::<u32>().ok())
    });
    let transmitted = nums.next()??;
    let received = nums.next()??;
    Some(PingStats {
        transmitted,
        received,
        output: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_summary_is_parsed() {
        let text = "PING 10.244.2.2 (10.244.2.2) 56(84) bytes of data.\n\n--- 10.244.2.2 ping statistics ---\n3 packets transmitted, 2 received, 33.3333% packet loss, time 405ms\n";
        let s = parse_ping(text).expect("parsed");
        assert_eq!((s.transmitted, s.received), (3, 2));
        let text = "3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2ms\n";
        assert_eq!(parse_ping(text).map(|s| s.received), Some(0));
        assert!(parse_ping("connect: Network is unreachable").is_none());
    }

    #[test]
    fn names_and_cidrs_are_checked() {
        assert!(check_ifname("pod1").is_ok());
        assert!(check_ifname("a-very-long-name").is_err());
        assert!(check_ifname("").is_err());
        assert_eq!(
            parse_cidr("10.244.1.2/24").ok(),
            Some((Ipv4Addr::new(10, 244, 1, 2), 24))
        );
        assert!(parse_cidr("10.244.1.2").is_err());
        assert!(parse_cidr("10.244.1.2/33").is_err());
    }
}
