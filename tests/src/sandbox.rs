//! `OvsSandbox`: one ovsdb-server + ovs-vswitchd with the dummy datapath in a private run
//! directory, holding N bridges, one per simulated node.
//!
//! Every bridge gets datapath_type=dummy, protocols=OpenFlow13, fail_mode=secure,
//! other-config:datapath-id and other-config:disable-in-band=true, plus:
//! * `<bridge>-vxlan0` at ofport 1: type=vxlan, remote_ip=flow, key=flow, a distinct local_ip
//!   per bridge (all bridges share one datapath tunnel port; identical configs would collide),
//!   and options:dst_port when configured;
//! * `<bridge>-tun0` at ofport 2: type=internal;
//! * one `<bridge>-<pod>` port (type=dummy) per pod, at the chosen ofport (>= 3).
//!
//! Port names must be unique within one ovs-vswitchd, hence the `<bridge>-<local>` naming;
//! [`OvsSandbox::port_name`] builds it. All bridges are created in one ovs-vsctl transaction.
//! The daemons are our children and are stopped (by PID) and reaped on drop.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::ovs::{DatapathMode, OvsInstance};
use crate::pcap::pcap_frames;
use crate::process::wait_until;
use crate::rundir::RunDir;
use crate::trace::Trace;

/// OpenFlow port of the VXLAN port on every sandbox bridge.
pub const VXLAN_OFPORT: u32 = 1;
/// OpenFlow port of the tun0 internal port on every sandbox bridge.
pub const TUN0_OFPORT: u32 = 2;

/// One bridge of the sandbox (one simulated node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSpec {
    /// Bridge name (also its LOCAL port name).
    pub name: String,
    /// OpenFlow datapath id.
    pub dpid: u64,
    /// Pod ports: (local name, ofport); the OVS port is named `<bridge>-<local name>`.
    pub pods: Vec<(String, u32)>,
    /// VXLAN local_ip; None picks a distinct address from the bridge's position.
    pub local_ip: Option<Ipv4Addr>,
}

impl BridgeSpec {
    /// A bridge with no pod ports.
    pub fn new(name: impl Into<String>, dpid: u64) -> Self {
        BridgeSpec {
            name: name.into(),
            dpid,
            pods: Vec::new(),
            local_ip: None,
        }
    }

    /// Bridge `br<i>` with datapath id i+1 and pods `pod1..=podN` at ofports 3.. .
    pub fn numbered(i: u32, pods: u32) -> Self {
        let mut b = BridgeSpec::new(format!("br{i}"), u64::from(i) + 1);
        for p in 1..=pods {
            b = b.pod(format!("pod{p}"), p + 2);
        }
        b
    }

    /// Adds a pod port.
    pub fn pod(mut self, name: impl Into<String>, ofport: u32) -> Self {
        self.pods.push((name.into(), ofport));
        self
    }

    /// Sets the VXLAN local_ip.
    pub fn local_ip(mut self, ip: Ipv4Addr) -> Self {
        self.local_ip = Some(ip);
        self
    }
}

/// Builder for [`OvsSandbox`].
#[derive(Debug, Clone, Default)]
pub struct SandboxBuilder {
    bridges: Vec<BridgeSpec>,
    controllers: Vec<String>,
    vxlan_dst_port: Option<u16>,
    max_backoff_ms: Option<u32>,
}

impl SandboxBuilder {
    /// Adds a bridge.
    pub fn bridge(mut self, spec: BridgeSpec) -> Self {
        self.bridges.push(spec);
        self
    }

    /// Adds several bridges.
    pub fn bridges(mut self, specs: impl IntoIterator<Item = BridgeSpec>) -> Self {
        self.bridges.extend(specs);
        self
    }

    /// Points every bridge at this controller target (e.g. `tcp:127.0.0.1:6653`); called
    /// again, adds another (each bridge then connects to every controller replica).
    pub fn controller(mut self, target: impl Into<String>) -> Self {
        self.controllers.push(target.into());
        self
    }

    /// Sets options:dst_port of every VXLAN port (default: OVS's 4789).
    pub fn vxlan_dst_port(mut self, port: u16) -> Self {
        self.vxlan_dst_port = Some(port);
        self
    }

    /// Caps the controller reconnect backoff (OVS default 8000 ms) for faster reconnects.
    pub fn controller_max_backoff_ms(mut self, ms: u32) -> Self {
        self.max_backoff_ms = Some(ms);
        self
    }

    /// Starts the daemons and configures every bridge in one transaction.
    pub fn start(self) -> Result<OvsSandbox> {
        self.validate()?;
        let t0 = Instant::now();
        let run = RunDir::create()?;
        let ovs = OvsInstance::start(run.path(), None, DatapathMode::Dummy);
        let ovs = match ovs {
            Ok(o) => o,
            Err(e) => {
                run.remove();
                return Err(e);
            }
        };
        let daemons_up = t0.elapsed();
        let sandbox = OvsSandbox {
            ovs,
            bridges: self.bridges.clone(),
            timings: SandboxTimings {
                daemons_up,
                bridges_configured: Duration::ZERO,
            },
            run,
        };
        let mut sandbox = sandbox;
        if !self.bridges.is_empty() {
            let args = self.vsctl_args();
            sandbox.ovs.vsctl(&args)?;
        }
        sandbox.timings.bridges_configured = t0.elapsed();
        Ok(sandbox)
    }

    fn validate(&self) -> Result<()> {
        let mut names = std::collections::BTreeSet::new();
        let mut dpids = std::collections::BTreeSet::new();
        for b in &self.bridges {
            if b.name.is_empty() || b.name.contains(|c: char| c.is_whitespace() || c == '/') {
                return Err(HarnessError::Invalid(format!(
                    "bad bridge name {:?}",
                    b.name
                )));
            }
            if !names.insert(b.name.clone()) {
                return Err(HarnessError::Invalid(format!(
                    "duplicate bridge {}",
                    b.name
                )));
            }
            if !dpids.insert(b.dpid) {
                return Err(HarnessError::Invalid(format!(
                    "duplicate dpid {:#x}",
                    b.dpid
                )));
            }
            let mut ports = std::collections::BTreeSet::from([VXLAN_OFPORT, TUN0_OFPORT]);
            let mut pods = std::collections::BTreeSet::new();
            for (pod, ofport) in &b.pods {
                if !ports.insert(*ofport) || *ofport == 0 || *ofport >= 0xff00 {
                    return Err(HarnessError::Invalid(format!(
                        "{}: ofport {ofport} of pod {pod} is reserved or used twice",
                        b.name
                    )));
                }
                if !pods.insert(pod.clone()) || pod == "vxlan0" || pod == "tun0" {
                    return Err(HarnessError::Invalid(format!(
                        "{}: pod port name {pod} used twice",
                        b.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn vsctl_args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |items: &[&str]| a.extend(items.iter().map(|s| (*s).to_owned()));
        for (i, b) in self.bridges.iter().enumerate() {
            let br = b.name.as_str();
            let vx = OvsSandbox::port_name(br, "vxlan0");
            let tun = OvsSandbox::port_name(br, "tun0");
            let local_ip = b.local_ip.unwrap_or_else(|| default_local_ip(i));
            push(&["--", "add-br", br]);
            push(&[
                "--",
                "set",
                "bridge",
                br,
                "datapath_type=dummy",
                "protocols=OpenFlow13",
                "fail_mode=secure",
                &format!("other-config:datapath-id={:016x}", b.dpid),
                "other-config:disable-in-band=true",
            ]);
            push(&["--", "add-port", br, &vx]);
            let mut vx_opts = vec![
                "--".to_owned(),
                "set".into(),
                "interface".into(),
                vx.clone(),
                "type=vxlan".into(),
                format!("ofport_request={VXLAN_OFPORT}"),
                "options:remote_ip=flow".into(),
                "options:key=flow".into(),
                format!("options:local_ip={local_ip}"),
            ];
            if let Some(p) = self.vxlan_dst_port {
                vx_opts.push(format!("options:dst_port={p}"));
            }
            let vx_refs: Vec<&str> = vx_opts.iter().map(String::as_str).collect();
            push(&vx_refs);
            push(&["--", "add-port", br, &tun]);
            push(&[
                "--",
                "set",
                "interface",
                &tun,
                "type=internal",
                &format!("ofport_request={TUN0_OFPORT}"),
            ]);
            for (pod, ofport) in &b.pods {
                let name = OvsSandbox::port_name(br, pod);
                push(&["--", "add-port", br, &name]);
                push(&[
                    "--",
                    "set",
                    "interface",
                    &name,
                    "type=dummy",
                    &format!("ofport_request={ofport}"),
                ]);
            }
            let mut ids = Vec::new();
            for (j, target) in self.controllers.iter().enumerate() {
                let id = format!("@c{i}_{j}");
                let mut create = vec![
                    "--".to_owned(),
                    format!("--id={id}"),
                    "create".into(),
                    "Controller".into(),
                    format!("target=\"{target}\""),
                ];
                if let Some(ms) = self.max_backoff_ms {
                    create.push(format!("max_backoff={ms}"));
                }
                let refs: Vec<&str> = create.iter().map(String::as_str).collect();
                push(&refs);
                ids.push(id);
            }
            if !ids.is_empty() {
                push(&[
                    "--",
                    "set",
                    "bridge",
                    br,
                    &format!("controller=[{}]", ids.join(",")),
                ]);
            }
        }
        a
    }
}

/// Distinct VXLAN local_ip for the i-th bridge: 172.31.<i/250>.<i%250+1>.
fn default_local_ip(i: usize) -> Ipv4Addr {
    let hi = u8::try_from(i / 250).unwrap_or(u8::MAX);
    let lo = u8::try_from(i % 250 + 1).unwrap_or(u8::MAX);
    Ipv4Addr::new(172, 31, hi, lo)
}

/// Start-up timings measured by the builder (from the start of `SandboxBuilder::start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxTimings {
    /// Both daemons answering on their sockets.
    pub daemons_up: Duration,
    /// All bridges configured (ovs-vsctl returned after vswitchd applied the transaction).
    pub bridges_configured: Duration,
}

/// A running dummy-datapath Open vSwitch with the configured bridges.
#[derive(Debug)]
pub struct OvsSandbox {
    ovs: OvsInstance,
    bridges: Vec<BridgeSpec>,
    timings: SandboxTimings,
    run: RunDir,
}

impl OvsSandbox {
    /// A builder with no bridges.
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder::default()
    }

    /// The vswitch-wide port name of a bridge-local port: `<bridge>-<local>`.
    pub fn port_name(bridge: &str, local: &str) -> String {
        format!("{bridge}-{local}")
    }

    /// The underlying daemons and ovs-* runners.
    pub fn ovs(&self) -> &OvsInstance {
        &self.ovs
    }

    /// The bridges as configured.
    pub fn bridges(&self) -> &[BridgeSpec] {
        &self.bridges
    }

    /// Start-up timings.
    pub fn timings(&self) -> SandboxTimings {
        self.timings
    }

    /// The private run directory (OVS_RUNDIR).
    pub fn run_dir(&self) -> &Path {
        self.run.path()
    }

    /// Unique id of this instance (`fmh<PID>-<N>`).
    pub fn id(&self) -> &str {
        self.run.id()
    }

    /// PID of ovs-vswitchd (None after [`OvsSandbox::kill_vswitchd`]).
    pub fn vswitchd_pid(&self) -> Option<u32> {
        self.ovs.vswitchd_pid()
    }

    /// PID of ovsdb-server.
    pub fn ovsdb_pid(&self) -> Option<u32> {
        self.ovs.ovsdb_pid()
    }

    /// `ovs-vsctl ARGS`.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        self.ovs.vsctl(args)
    }

    /// `ovs-ofctl -O OpenFlow13 ARGS`.
    pub fn ofctl(&self, args: &[&str]) -> Result<String> {
        self.ovs.ofctl(args)
    }

    /// `ovs-appctl ARGS` (to ovs-vswitchd).
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        self.ovs.appctl(args)
    }

    /// Normalized `dump-flows --no-stats` (sorted, trimmed, header dropped).
    pub fn dump_flows(&self, bridge: &str) -> Result<Vec<String>> {
        self.ovs.dump_flows(bridge)
    }

    /// Normalized `dump-groups`.
    pub fn dump_groups(&self, bridge: &str) -> Result<Vec<String>> {
        self.ovs.dump_groups(bridge)
    }

    /// Adds flows in one bundle (`ovs-ofctl --bundle add-flows` from a temp file).
    pub fn add_flows(&self, bridge: &str, flows: &[String]) -> Result<()> {
        self.ovs.add_flows(bridge, flows)
    }

    /// Adds a dummy port `<bridge>-<local>` at `ofport`; returns its full name.
    pub fn add_port(&self, bridge: &str, local: &str, ofport: u32) -> Result<String> {
        let name = Self::port_name(bridge, local);
        self.ovs.vsctl([
            "add-port",
            bridge,
            &name,
            "--",
            "set",
            "interface",
            &name,
            "type=dummy",
            &format!("ofport_request={ofport}"),
        ])?;
        let got = self.ovs.ofport(&name)?;
        if got != ofport {
            return Err(HarnessError::Invalid(format!(
                "{name}: asked for ofport {ofport}, OVS gave {got}"
            )));
        }
        Ok(name)
    }

    /// Removes the port `<bridge>-<local>`.
    pub fn del_port(&self, bridge: &str, local: &str) -> Result<()> {
        self.ovs
            .vsctl(["del-port", bridge, &Self::port_name(bridge, local)])
            .map(|_| ())
    }

    /// Sets the controller of one bridge.
    pub fn set_controller(&self, bridge: &str, target: &str) -> Result<()> {
        self.ovs.set_controller(bridge, target)
    }

    /// The role OVS reports for each of a bridge's controllers, by target (`master`,
    /// `slave`, `other`; absent while that controller is not connected).
    pub fn controller_roles(
        &self,
        bridge: &str,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        let out = self.ovs.vsctl([
            "--format=csv",
            "--no-headings",
            "--columns=_uuid,target,role,is_connected",
            "list",
            "controller",
        ])?;
        let mine = self.ovs.vsctl(["get", "bridge", bridge, "controller"])?;
        let mut roles = std::collections::BTreeMap::new();
        for line in out.lines() {
            let cols: Vec<&str> = line.split(',').map(|c| c.trim_matches('"')).collect();
            if let [uuid, target, role, connected] = cols[..] {
                if connected == "true" && mine.contains(uuid) {
                    roles.insert(target.to_string(), role.to_string());
                }
            }
        }
        Ok(roles)
    }

    /// `ovs-appctl ofproto/trace BRIDGE FLOW`, parsed.
    pub fn trace(&self, bridge: &str, flow: &str) -> Result<Trace> {
        Trace::parse(&self.ovs.appctl(["ofproto/trace", bridge, flow])?)
    }

    /// Injects a packet on port `<bridge>-<local>` with `netdev-dummy/receive`. `packet` is an
    /// ODP flow (`eth(src=..,dst=..),eth_type(0x0800),ipv4(...),...`) or hex bytes.
    pub fn inject(&self, bridge: &str, local: &str, packet: &str) -> Result<()> {
        self.ovs
            .appctl([
                "netdev-dummy/receive",
                &Self::port_name(bridge, local),
                packet,
            ])
            .map(|_| ())
    }

    /// Makes port `<bridge>-<local>` record what it transmits into a pcap file; returns it.
    pub fn capture_tx(&self, bridge: &str, local: &str) -> Result<PathBuf> {
        let name = Self::port_name(bridge, local);
        let path = self.run.path().join(format!("{name}.tx.pcap"));
        self.ovs.vsctl([
            "set",
            "interface",
            &name,
            &format!("options:tx_pcap={}", path.display()),
        ])?;
        Ok(path)
    }

    /// Frames written so far to a pcap from [`OvsSandbox::capture_tx`].
    pub fn captured(&self, pcap: &Path) -> Result<Vec<Vec<u8>>> {
        match fs::read(pcap) {
            Ok(bytes) if bytes.len() < 24 => Ok(Vec::new()),
            Ok(bytes) => pcap_frames(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(HarnessError::Io {
                op: "read",
                path: pcap.to_owned(),
                source,
            }),
        }
    }

    /// Waits until the pcap holds at least `n` frames; returns them.
    pub fn wait_captured(&self, pcap: &Path, n: usize, timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let mut frames = Vec::new();
        wait_until(
            &format!("{n} frames in {}", pcap.display()),
            timeout,
            || {
                frames = self.captured(pcap)?;
                Ok(frames.len() >= n)
            },
        )?;
        Ok(frames)
    }

    /// `ovs-appctl coverage/read-counter NAME`.
    pub fn coverage_counter(&self, name: &str) -> Result<u64> {
        self.ovs.coverage_counter(name)
    }

    /// Kills ovs-vswitchd (SIGKILL, like a crash); ovsdb-server keeps running.
    pub fn kill_vswitchd(&mut self) {
        self.ovs.kill_vswitchd();
    }

    /// Starts ovs-vswitchd again after [`OvsSandbox::kill_vswitchd`]; returns once its control
    /// socket answers, without waiting for it to apply the configuration (with many bridges
    /// that can take longer than the ovs-* clients' timeout).
    pub fn start_vswitchd(&mut self) -> Result<()> {
        self.ovs.start_vswitchd()
    }

    /// Restarts ovs-vswitchd on the same database (flows are gone afterwards, as in OVS).
    /// Also starts it again after [`OvsSandbox::kill_vswitchd`].
    pub fn restart_vswitchd(&mut self) -> Result<()> {
        self.ovs.restart_vswitchd()
    }
}

impl Drop for OvsSandbox {
    fn drop(&mut self) {
        self.ovs.stop();
        self.run.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_rejects_clashes() {
        let dup_port = OvsSandbox::builder().bridge(BridgeSpec::new("b", 1).pod("p", 1));
        assert!(matches!(dup_port.validate(), Err(HarnessError::Invalid(_))));
        let dup_dpid = OvsSandbox::builder()
            .bridge(BridgeSpec::new("a", 1))
            .bridge(BridgeSpec::new("b", 1));
        assert!(dup_dpid.validate().is_err());
        let ok = OvsSandbox::builder().bridges((0..3).map(|i| BridgeSpec::numbered(i, 2)));
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn one_transaction_names_ports_after_their_bridge() {
        let args = OvsSandbox::builder()
            .bridge(BridgeSpec::numbered(7, 1))
            .controller("tcp:127.0.0.1:1")
            .vxlan_dst_port(4790)
            .vsctl_args();
        let text = args.join(" ");
        assert!(text.contains("add-port br7 br7-vxlan0"));
        assert!(text.contains("add-port br7 br7-tun0"));
        assert!(text.contains("add-port br7 br7-pod1"));
        assert!(text.contains("ofport_request=3"));
        assert!(text.contains("options:dst_port=4790"));
        assert!(text.contains("other-config:datapath-id=0000000000000008"));
        assert!(text.contains("target=\"tcp:127.0.0.1:1\""));
        assert_eq!(default_local_ip(0), Ipv4Addr::new(172, 31, 0, 1));
        assert_eq!(default_local_ip(251), Ipv4Addr::new(172, 31, 1, 2));
    }
}
