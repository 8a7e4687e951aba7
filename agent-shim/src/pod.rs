//! Pod attachment: ADD, DEL, CHECK, GC and STATUS as the shim performs them. ADD records an
//! undo step after each change and rolls back in reverse on any failure, so a failed ADD
//! leaves nothing behind; DEL is idempotent.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use proto::node::{AttachPodRequest, DetachPodRequest, PodNetwork};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::cni::{code, CniError, CniResult, Command, Interface, IpConfig, NetConf, RouteConfig};
use crate::net::{mac_to_string, pod_mac, Ipv4Net};
use crate::netlink::{in_netns, is_up, link_mac, Netlink, NetlinkError, RouteEntry};
use crate::node::{NodeSettings, MULTICAST};
use crate::nodeapi::{NodeApi, NodeApiError};
use crate::ovs::{ext, OvsError, PodPort, Vsctl};
use crate::protocol::{ShimRequest, ShimResponse};

/// How long ADD waits for OVS to assign the pod port's ofport.
const OFPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The host end's name: `veth` + 11 hex digits of SHA-256(container id / ifname) — stable, so
/// DEL finds it without any saved state, and at most 15 bytes.
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    let digest = Sha256::digest(format!("{container_id}/{ifname}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("veth{}", hex.get(..11).unwrap_or("0"))
}

fn ovs_err(e: OvsError) -> CniError {
    CniError::new(code::OVS, "Open vSwitch operation failed", e.to_string())
}

fn nl_err(e: NetlinkError) -> CniError {
    CniError::new(code::NETLINK, "netlink operation failed", e.to_string())
}

fn api_err(e: NodeApiError) -> CniError {
    e.to_cni()
}

/// What was done so far during ADD, undone in reverse on failure.
#[derive(Debug)]
enum Undo {
    Veth(String),
    Port(String),
    /// The pod attached on host port `port`.
    Attached {
        namespace: String,
        name: String,
        port: String,
    },
}

/// The pod-side configuration computed from the controller's answer.
#[derive(Debug, Clone)]
struct PodIfConfig {
    ifname: String,
    mac: [u8; 6],
    addr: Ipv4Net,
    gateway: Ipv4Addr,
    routes: Vec<(Ipv4Net, Option<Ipv4Addr>)>,
    /// Turn TX checksum offload off (the bridge is on the userspace datapath).
    tx_checksum_off: bool,
}

/// What [`PodManager::restore_ports`] did with one vanished pod port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// Put back or cleaned up, as the line says.
    Done(String),
    /// Could not be handled this time (retried at the next check): port and error.
    Failed(String),
}

/// Does pod work for the CNI server; one per shim.
#[derive(Debug)]
pub struct PodManager {
    vsctl: Vsctl,
    nl: Netlink,
    api: NodeApi,
    bridge: String,
    settings: NodeSettings,
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// The pod ports this shim attached or found at start, by port name, with their ofport
    /// and external ids: what `restore_ports` puts back when they vanish from OVS (br0
    /// deleted and recreated behind the shim's back).
    known: Mutex<BTreeMap<String, PodPort>>,
}

impl PodManager {
    /// A manager for pods on `bridge` of the node described by `settings`.
    pub fn new(
        vsctl: Vsctl,
        nl: Netlink,
        api: NodeApi,
        bridge: String,
        settings: NodeSettings,
    ) -> Self {
        PodManager {
            vsctl,
            nl,
            api,
            bridge,
            settings,
            locks: Mutex::new(HashMap::new()),
            known: Mutex::new(BTreeMap::new()),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PodPort>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts back on the bridge, with their OpenFlow port numbers and external ids, the pod
    /// ports that vanished from OVS while their pod still runs (br0 deleted and recreated
    /// behind the shim's back): the controller's flows for them apply again unchanged. A
    /// vanished port whose veth is gone too is a pod that went away: it is cleaned up as DEL
    /// would (detached from the controller by the identity remembered for it). Each port is
    /// handled on its own: one that fails does not hold the others back. Returns what was
    /// done and what failed, one line each; Err only when OVS could not be listed.
    pub async fn restore_ports(&self) -> Result<Vec<RestoreOutcome>, CniError> {
        let snapshot: Vec<PodPort> = self.known().values().cloned().collect();
        if snapshot.is_empty() {
            return Ok(Vec::new());
        }
        let present: BTreeSet<String> = self
            .vsctl
            .pod_ports()
            .await
            .map_err(ovs_err)?
            .into_iter()
            .map(|p| p.name)
            .collect();
        let mut done = Vec::new();
        for p in snapshot {
            if present.contains(&p.name) {
                continue;
            }
            match self.restore_port(&p).await {
                Ok(Some(line)) => done.push(RestoreOutcome::Done(line)),
                Ok(None) => {}
                Err(e) => done.push(RestoreOutcome::Failed(format!(
                    "{}: {} {}",
                    p.name, e.msg, e.details
                ))),
            }
        }
        Ok(done)
    }

    /// One vanished port of [`PodManager::restore_ports`], under its container's lock.
    async fn restore_port(&self, p: &PodPort) -> Result<Option<String>, CniError> {
        let (Some(cid), Some(ifname), Some(ofport)) = (
            p.external_ids.get(ext::SANDBOX),
            p.external_ids.get(ext::IFNAME),
            p.ofport,
        ) else {
            return Ok(None);
        };
        let lock = self.pod_lock(cid);
        let _g = lock.lock().await;
        // A DEL, GC or a new ADD of the same container may have run since the snapshot: act
        // only on the very port remembered then, and only if it is still missing.
        if self.known().get(&p.name) != Some(p) {
            return Ok(None);
        }
        if self
            .vsctl
            .find("Interface", &p.name, &["name"])
            .await
            .map_err(ovs_err)?
            .is_some()
        {
            return Ok(None);
        }
        if self.nl.link(&p.name).await.map_err(nl_err)?.is_none() {
            info!(container = %cid, port = %p.name, "a vanished pod port's pod is gone too: cleaning up");
            self.del(cid, ifname, &BTreeMap::new()).await?;
            return Ok(Some(format!("removed {}", p.name)));
        }
        let ids: Vec<(&str, &str)> = p
            .external_ids
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.vsctl
            .add_port_with_ids(&self.bridge, &p.name, &ids, Some(ofport))
            .await
            .map_err(ovs_err)?;
        let got = self
            .vsctl
            .wait_ofport(&p.name, OFPORT_TIMEOUT)
            .await
            .map_err(ovs_err)?;
        if got != ofport {
            warn!(port = %p.name, want = ofport, got, "a restored pod port got another OpenFlow port: its pod needs re-creating");
        }
        Ok(Some(format!("restored {} (ofport {got})", p.name)))
    }

    /// The lock that serializes operations on one container.
    fn pod_lock(&self, container_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = map.get(container_id).and_then(Weak::upgrade) {
            return l;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let l = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(container_id.to_owned(), Arc::downgrade(&l));
        l
    }

    /// Serves one request from the plugin.
    pub async fn handle(&self, req: ShimRequest) -> ShimResponse {
        let t0 = Instant::now();
        let r = self.dispatch(&req).await;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        match r {
            Ok(result) => {
                info!(command = %req.command, container = %req.container_id, ms, "done");
                ShimResponse::Ok { result }
            }
            Err(e) => {
                warn!(command = %req.command, container = %req.container_id, ms, code = e.code, msg = %e.msg, details = %e.details, "failed");
                ShimResponse::Error(e)
            }
        }
    }

    async fn dispatch(&self, req: &ShimRequest) -> Result<Option<Value>, CniError> {
        let conf = NetConf::from_value(req.config.clone())?;
        conf.check_command(req.command)?;
        match req.command {
            Command::Status => self.status().await.map(|()| None),
            Command::Gc => self.gc(&conf).await.map(|()| None),
            Command::Version => Err(CniError::new(
                code::PROTOCOL,
                "VERSION is answered by the plugin",
                "",
            )),
            Command::Add | Command::Del | Command::Check => {
                if req.container_id.is_empty() || req.ifname.is_empty() {
                    return Err(CniError::new(
                        code::INVALID_ENV,
                        "missing container id or interface name",
                        "",
                    ));
                }
                let lock = self.pod_lock(&req.container_id);
                let _guard = lock.lock().await;
                match req.command {
                    Command::Add => self.add(req, &conf).await.map(Some),
                    Command::Del => self
                        .del(&req.container_id, &req.ifname, &req.args)
                        .await
                        .map(|()| None),
                    _ => self.check(req, &conf).await.map(|()| None),
                }
            }
        }
    }

    /// STATUS: ready when br0 exists (the node was set up and OVS answers).
    pub async fn status(&self) -> Result<(), CniError> {
        match self.vsctl.bridge_exists(&self.bridge).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(CniError::new(
                code::NOT_AVAILABLE,
                format!("bridge {} is missing", self.bridge),
                "",
            )),
            Err(e) => Err(CniError::new(
                code::NOT_AVAILABLE,
                "Open vSwitch is not answering",
                e.to_string(),
            )),
        }
    }

    fn pod_identity(args: &BTreeMap<String, String>) -> Option<(String, String)> {
        let ns = args.get("K8S_POD_NAMESPACE").filter(|s| !s.is_empty())?;
        let name = args.get("K8S_POD_NAME").filter(|s| !s.is_empty())?;
        Some((ns.clone(), name.clone()))
    }

    /// ADD.
    async fn add(&self, req: &ShimRequest, conf: &NetConf) -> Result<Value, CniError> {
        let (namespace, name) = Self::pod_identity(&req.args).ok_or_else(|| {
            CniError::new(
                code::INVALID_ENV,
                "CNI_ARGS must name the pod",
                "K8S_POD_NAMESPACE and K8S_POD_NAME are required",
            )
        })?;
        open_pod_netns(&req.netns)?;
        let host = host_veth_name(&req.container_id, &req.ifname);
        self.remove_stale(&host).await?;
        let mut undo: Vec<Undo> = Vec::new();
        let r = self
            .add_steps(req, conf, &namespace, &name, &host, &mut undo)
            .await;
        if r.is_err() {
            self.rollback(undo).await;
        }
        r
    }

    async fn add_steps(
        &self,
        req: &ShimRequest,
        conf: &NetConf,
        namespace: &str,
        name: &str,
        host: &str,
        undo: &mut Vec<Undo>,
    ) -> Result<Value, CniError> {
        let t0 = Instant::now();
        let netns = open_pod_netns(&req.netns)?;
        self.nl
            .add_veth_into(host, &req.ifname, self.settings.mtu, &netns)
            .await
            .map_err(nl_err)?;
        drop(netns);
        undo.push(Undo::Veth(host.to_owned()));
        let link = self.nl.require_link(host).await.map_err(nl_err)?;
        quiet_host_veth(host)?;
        self.nl.set_up(link.header.index).await.map_err(nl_err)?;
        let host_mac = link_mac(&link)
            .map(|m| mac_to_string(&m))
            .unwrap_or_default();
        let ids = [
            (ext::SANDBOX, req.container_id.as_str()),
            (ext::POD_NAMESPACE, namespace),
            (ext::POD_NAME, name),
            (ext::IFNAME, req.ifname.as_str()),
        ];
        undo.push(Undo::Port(host.to_owned()));
        self.vsctl
            .add_port_with_ids(&self.bridge, host, &ids, None)
            .await
            .map_err(ovs_err)?;
        let ofport = self
            .vsctl
            .wait_ofport(host, OFPORT_TIMEOUT)
            .await
            .map_err(ovs_err)?;
        debug!(
            host,
            ofport,
            ms = t0.elapsed().as_secs_f64() * 1e3,
            "veth on bridge"
        );
        let attach = AttachPodRequest {
            node: self.settings.node.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port_name: host.to_owned(),
            ofport,
            sandbox_id: req.container_id.clone(),
            // The CNI request carries no labels or ports; they come from the admin API.
            labels: Default::default(),
            ports: Vec::new(),
        };
        // Recorded before the call: a timeout may still have attached the pod.
        undo.push(Undo::Attached {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port: host.to_owned(),
        });
        let pn = self.api.attach(attach).await.map_err(api_err)?;
        debug!(ip = %pn.ip, ms = t0.elapsed().as_secs_f64() * 1e3, "attached");
        let mut cfg = self.pod_config(&req.ifname, &pn)?;
        cfg.tx_checksum_off = self.userspace_datapath().await;
        let cfg2 = cfg.clone();
        in_netns(Path::new(&req.netns), move |nl| configure_pod(nl, cfg2))
            .await
            .map_err(nl_err)?;
        if cfg.tx_checksum_off {
            crate::ethtool::disable_tx_checksum(Path::new(&req.netns), &req.ifname)
                .await
                .map_err(|e| {
                    CniError::new(code::NETLINK, "cannot turn TX checksum offload off", e)
                })?;
        }
        let result = CniResult {
            interfaces: vec![
                Interface {
                    name: host.to_owned(),
                    mac: host_mac,
                    sandbox: None,
                },
                Interface {
                    name: req.ifname.clone(),
                    mac: mac_to_string(&cfg.mac),
                    sandbox: Some(req.netns.clone()),
                },
            ],
            ips: vec![IpConfig {
                interface: 1,
                address: cfg.addr.to_string(),
                gateway: cfg.gateway.to_string(),
            }],
            routes: cfg
                .routes
                .iter()
                .map(|(dst, gw)| RouteConfig {
                    dst: dst.to_string(),
                    gw: gw.map(|g| g.to_string()),
                })
                .collect(),
        };
        let port = PodPort {
            name: host.to_owned(),
            external_ids: ids
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ofport: Some(ofport),
        };
        self.known().insert(host.to_owned(), port);
        Ok(result.to_json(&conf.cni_version))
    }

    /// Whether the bridge uses Open vSwitch's userspace datapath (`datapath_type=netdev`),
    /// which needs the pods' TX checksum offload off (`crate::ethtool`).
    async fn userspace_datapath(&self) -> bool {
        match self
            .vsctl
            .find("Bridge", &self.bridge, &["datapath_type"])
            .await
        {
            Ok(Some(rec)) => rec
                .get("datapath_type")
                .and_then(|v| v.as_str())
                .is_some_and(|t| t == "netdev"),
            _ => false,
        }
    }

    /// The pod interface settings from the controller's answer: its MAC if given (else
    /// `0a:58:`+IP), its routes if given (else default via the gateway, the cluster networks
    /// and 224.0.0.0/4 on-link).
    fn pod_config(&self, ifname: &str, pn: &PodNetwork) -> Result<PodIfConfig, CniError> {
        let bad = |what: String| {
            CniError::new(
                code::NODE_API,
                "controller sent an unusable pod network",
                what,
            )
        };
        let ip: Ipv4Addr = pn.ip.parse().map_err(|_| bad(format!("ip {:?}", pn.ip)))?;
        let prefix = u8::try_from(pn.prefix_len)
            .ok()
            .and_then(|p| Ipv4Net::new(ip, p))
            .ok_or_else(|| bad(format!("prefix length {}", pn.prefix_len)))?;
        let gateway: Ipv4Addr = match pn.gateway.as_str() {
            "" => self.settings.gateway,
            g => g.parse().map_err(|_| bad(format!("gateway {g:?}")))?,
        };
        let mac = match pn.mac.as_str() {
            "" => pod_mac(ip),
            m => parse_mac(m).ok_or_else(|| bad(format!("mac {m:?}")))?,
        };
        let routes = if pn.routes.is_empty() {
            let mut r = vec![(Ipv4Net::DEFAULT_ROUTE, Some(gateway))];
            r.extend(self.settings.cluster_networks.iter().map(|c| (*c, None)));
            r.push((MULTICAST, None));
            r
        } else {
            pn.routes
                .iter()
                .map(|r| {
                    let dst: Ipv4Net = r
                        .destination
                        .parse()
                        .map_err(|_| bad(format!("route {:?}", r.destination)))?;
                    let gw = match r.gateway.as_str() {
                        "" => None,
                        g => Some(g.parse().map_err(|_| bad(format!("route gateway {g:?}")))?),
                    };
                    Ok((dst.network(), gw))
                })
                .collect::<Result<Vec<_>, CniError>>()?
        };
        Ok(PodIfConfig {
            ifname: ifname.to_owned(),
            mac,
            addr: prefix,
            gateway,
            routes,
            tx_checksum_off: false,
        })
    }

    /// Removes a leftover port/veth of an earlier attempt with the same name.
    async fn remove_stale(&self, host: &str) -> Result<(), CniError> {
        let on_ovs = self.vsctl.ofport(host).await.map_err(ovs_err)?.is_some();
        let link = self.nl.link(host).await.map_err(nl_err)?.is_some();
        if on_ovs || link {
            warn!(
                host,
                on_ovs, link, "removing leftovers of an earlier attempt"
            );
            self.vsctl
                .del_port(&self.bridge, host)
                .await
                .map_err(ovs_err)?;
            self.nl.del_link(host).await.map_err(nl_err)?;
        }
        Ok(())
    }

    async fn rollback(&self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            let r = match &step {
                Undo::Attached {
                    namespace,
                    name,
                    port,
                } => self
                    .api
                    .detach(DetachPodRequest {
                        node: self.settings.node.clone(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                        port_name: port.clone(),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Undo::Port(p) => self
                    .vsctl
                    .del_port(&self.bridge, p)
                    .await
                    .map_err(|e| e.to_string()),
                Undo::Veth(v) => self
                    .nl
                    .del_link(v)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            };
            match r {
                Ok(()) => debug!(?step, "rolled back"),
                Err(e) => warn!(?step, error = %e, "rollback step failed"),
            }
        }
    }

    /// DEL: detach from the controller, remove the OVS port and the veth. Missing pieces are
    /// fine. Local cleanup happens even when the controller is unreachable; that case is then
    /// reported as "try again later" so the runtime retries and the IP gets freed.
    async fn del(
        &self,
        container_id: &str,
        ifname: &str,
        args: &BTreeMap<String, String>,
    ) -> Result<(), CniError> {
        let host = host_veth_name(container_id, ifname);
        let ports = self.vsctl.pod_ports().await.map_err(ovs_err)?;
        let ids = ports
            .iter()
            .find(|p| p.name == host)
            .map(|p| &p.external_ids);
        let identity = ids
            .and_then(|ids| {
                Some((
                    ids.get(ext::POD_NAMESPACE)?.clone(),
                    ids.get(ext::POD_NAME)?.clone(),
                ))
            })
            .or_else(|| Self::pod_identity(args))
            .or_else(|| {
                // The port is gone from OVS (br0 recreated): the identity remembered for it.
                let known = self.known();
                let ids = &known.get(&host)?.external_ids;
                Some((
                    ids.get(ext::POD_NAMESPACE)?.clone(),
                    ids.get(ext::POD_NAME)?.clone(),
                ))
            });
        let detach = match identity {
            Some((namespace, name)) => self
                .api
                .detach(DetachPodRequest {
                    node: self.settings.node.clone(),
                    namespace,
                    name,
                    // Only this sandbox's attachment: the pod may be attached again on
                    // another sandbox's port already (kubelet made a new one, or the pod name
                    // was made again) and that one stays.
                    port_name: host.clone(),
                })
                .await
                .err(),
            None => None,
        };
        self.vsctl
            .del_port(&self.bridge, &host)
            .await
            .map_err(ovs_err)?;
        self.known().remove(&host);
        self.nl.del_link(&host).await.map_err(nl_err)?;
        match detach {
            Some(e) => Err(api_err(e)),
            None => Ok(()),
        }
    }

    /// CHECK: the host end is on the bridge and up, the pod end exists, is up, has the
    /// expected addresses (prevResult's, else any), the MAC derived from its address and a
    /// default route.
    async fn check(&self, req: &ShimRequest, conf: &NetConf) -> Result<(), CniError> {
        let failed = |msg: String| CniError::new(code::CHECK_FAILED, msg, "");
        open_pod_netns(&req.netns)?;
        let host = host_veth_name(&req.container_id, &req.ifname);
        let ports = self.vsctl.pod_ports().await.map_err(ovs_err)?;
        let port = ports
            .iter()
            .find(|p| p.name == host)
            .ok_or_else(|| failed(format!("host veth {host} is not on {}", self.bridge)))?;
        if port.external_ids.get(ext::SANDBOX) != Some(&req.container_id) {
            return Err(failed(format!("port {host} belongs to another sandbox")));
        }
        match self.vsctl.ofport(&host).await.map_err(ovs_err)? {
            Some(p) if p > 0 => {}
            other => {
                return Err(failed(format!(
                    "port {host} has no OpenFlow port ({other:?})"
                )))
            }
        }
        let link = self
            .nl
            .link(&host)
            .await
            .map_err(nl_err)?
            .ok_or_else(|| failed(format!("host veth {host} is missing")))?;
        if !is_up(&link) {
            return Err(failed(format!("host veth {host} is down")));
        }
        let want = prev_addresses(conf.prev_result.as_ref(), &req.ifname);
        let ifname = req.ifname.clone();
        let seen = in_netns(Path::new(&req.netns), move |nl| async move {
            let Some(l) = nl.link(&ifname).await? else {
                return Ok(None);
            };
            let addrs = nl.ipv4_addrs(l.header.index).await?;
            let routes = nl.routes().await?;
            Ok(Some((
                is_up(&l),
                link_mac(&l),
                addrs,
                routes,
                l.header.index,
            )))
        })
        .await
        .map_err(nl_err)?;
        let (up, mac, addrs, routes, idx) =
            seen.ok_or_else(|| failed(format!("{} is missing in {}", req.ifname, req.netns)))?;
        if !up {
            return Err(failed(format!("{} is down", req.ifname)));
        }
        let first = addrs
            .first()
            .ok_or_else(|| failed(format!("{} has no IPv4 address", req.ifname)))?;
        for w in &want {
            if !addrs.contains(w) {
                return Err(failed(format!(
                    "{} lacks address {w} (has {addrs:?})",
                    req.ifname
                )));
            }
        }
        if mac.as_deref() != Some(&pod_mac(first.addr())[..]) {
            return Err(failed(format!(
                "{} MAC {} is not 0a:58 + {}",
                req.ifname,
                mac.map(|m| mac_to_string(&m)).unwrap_or_default(),
                first.addr()
            )));
        }
        if !routes
            .iter()
            .any(|r| r.dst.prefix() == 0 && r.oif == Some(idx) && r.gw.is_some())
        {
            return Err(failed(format!("no default route via {}", req.ifname)));
        }
        Ok(())
    }

    /// At start: the ports of pods that went away while the shim was down (their network
    /// namespace was deleted, which destroys the veth pair, so the port's host end is gone)
    /// are cleaned up as DEL would (detached from the controller, port removed); running
    /// pods are left exactly as they are (and their ports remembered for `restore_ports`).
    /// Returns the removed ports.
    pub async fn reclaim_orphans(&self) -> Vec<String> {
        let ports = match self.vsctl.pod_ports().await {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "cannot list pod ports to reclaim those of deleted pods");
                return Vec::new();
            }
        };
        let mut removed = Vec::new();
        for p in ports {
            match self.nl.link(&p.name).await {
                Ok(Some(_)) => {
                    // A running pod: its port is one `restore_ports` keeps on the bridge.
                    if p.ofport.is_some() {
                        self.known().insert(p.name.clone(), p);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(port = %p.name, error = %e, "cannot look up a pod port's link");
                    continue;
                }
            }
            let (Some(cid), Some(ifname)) = (
                p.external_ids.get(ext::SANDBOX),
                p.external_ids.get(ext::IFNAME),
            ) else {
                continue;
            };
            info!(container = %cid, port = %p.name, "the pod went away while the shim was down: removing its port");
            let lock = self.pod_lock(cid);
            let _g = lock.lock().await;
            match self.del(cid, ifname, &BTreeMap::new()).await {
                Ok(()) => removed.push(p.name.clone()),
                Err(e) => {
                    warn!(container = %cid, port = %p.name, error = %e.msg, "removing the port of a deleted pod failed; CNI GC will retry")
                }
            }
        }
        removed
    }

    /// GC: detach every flowmesh pod port whose (container id, ifname) is not in the valid list.
    async fn gc(&self, conf: &NetConf) -> Result<(), CniError> {
        let valid = conf.valid_attachments.clone().unwrap_or_default();
        let ports = self.vsctl.pod_ports().await.map_err(ovs_err)?;
        let mut first_err = None;
        for p in ports {
            let (Some(cid), Some(ifname)) = (
                p.external_ids.get(ext::SANDBOX),
                p.external_ids.get(ext::IFNAME),
            ) else {
                continue;
            };
            if valid
                .iter()
                .any(|a| &a.container_id == cid && &a.ifname == ifname)
            {
                continue;
            }
            info!(container = %cid, port = %p.name, "GC removes a stale attachment");
            let lock = self.pod_lock(cid);
            let _g = lock.lock().await;
            if let Err(e) = self.del(cid, ifname, &BTreeMap::new()).await {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Opens the pod's netns (closing it at once only checks it exists); a missing one is the
/// spec's "unknown container".
/// The host end of a pod's veth belongs to br0 only: the node's own IP stack must neither
/// answer the pod's ARP (with `arp_ignore=8` it answers none; the gateway's MAC comes from
/// tun0 through br0) nor route what the pod sends (`forwarding=0` on this interface), nor
/// speak IPv6 on it. Otherwise, with a datapath that leaves the kernel a copy of each frame
/// (the userspace datapath), a pod could reach the host, and through it the outside,
/// around the flows on br0 — and around its egress NetworkPolicy.
fn quiet_host_veth(host: &str) -> Result<(), CniError> {
    for (path, value) in [
        (format!("/proc/sys/net/ipv4/conf/{host}/arp_ignore"), "8"),
        (format!("/proc/sys/net/ipv4/conf/{host}/forwarding"), "0"),
        (format!("/proc/sys/net/ipv4/conf/{host}/accept_local"), "0"),
        (format!("/proc/sys/net/ipv6/conf/{host}/disable_ipv6"), "1"),
    ] {
        if let Err(e) = std::fs::write(&path, value) {
            // IPv6 may be disabled on the node altogether.
            if path.contains("/ipv6/") && e.kind() == std::io::ErrorKind::NotFound {
                continue;
            }
            return Err(CniError::new(
                code::IO_FAILURE,
                format!("cannot set {path}"),
                e.to_string(),
            ));
        }
    }
    Ok(())
}

fn open_pod_netns(path: &str) -> Result<std::fs::File, CniError> {
    crate::netlink::open_netns(&PathBuf::from(path)).map_err(|e| {
        let c = if e.kind() == std::io::ErrorKind::NotFound {
            code::UNKNOWN_CONTAINER
        } else {
            code::IO_FAILURE
        };
        CniError::new(c, format!("cannot open netns {path:?}"), e.to_string())
    })
}

async fn configure_pod(nl: Netlink, cfg: PodIfConfig) -> Result<(), NetlinkError> {
    let link = nl.require_link(&cfg.ifname).await?;
    let idx = link.header.index;
    nl.set_mac(idx, cfg.mac).await?;
    nl.ensure_addr(idx, cfg.addr).await?;
    nl.set_up(idx).await?;
    if let Some(lo) = nl.link("lo").await? {
        if !is_up(&lo) {
            nl.set_up(lo.header.index).await?;
        }
    }
    for (dst, gw) in &cfg.routes {
        nl.ensure_route(RouteEntry {
            dst: *dst,
            gw: *gw,
            oif: Some(idx),
            kernel: false,
        })
        .await?;
    }
    Ok(())
}

/// Addresses of `prevResult` that belong to `ifname` (or to no interface in particular).
fn prev_addresses(prev: Option<&Value>, ifname: &str) -> Vec<Ipv4Net> {
    let Some(prev) = prev else {
        return Vec::new();
    };
    let names: Vec<Option<&str>> = prev
        .get("interfaces")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|i| i.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    prev.get("ips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|ip| match ip.get("interface").and_then(Value::as_u64) {
            Some(i) => {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| names.get(i).copied().flatten())
                    == Some(ifname)
            }
            None => true,
        })
        .filter_map(|ip| ip.get("address")?.as_str()?.parse().ok())
        .collect()
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn host_veth_names_are_stable_and_short() {
        let a = host_veth_name("0123456789abcdef0123", "eth0");
        assert_eq!(a, host_veth_name("0123456789abcdef0123", "eth0"));
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("veth"));
        assert_ne!(a, host_veth_name("0123456789abcdef0123", "eth1"));
        assert_ne!(a, host_veth_name("0123456789abcdef0124", "eth0"));
    }

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("0a:58:0a:80:02:05"),
            Some([0x0a, 0x58, 10, 128, 2, 5])
        );
        assert_eq!(parse_mac("0a:58:0a:80:02"), None);
        assert_eq!(parse_mac("0a:58:0a:80:02:05:06"), None);
        assert_eq!(parse_mac("zz:58:0a:80:02:05"), None);
    }

    #[test]
    fn prev_result_addresses_are_picked_by_interface() {
        let prev = json!({
            "interfaces": [{"name": "vethx"}, {"name": "eth0", "sandbox": "/x"}],
            "ips": [{"interface": 1, "address": "10.128.2.5/23"}, {"interface": 0, "address": "1.2.3.4/32"}]
        });
        let got = prev_addresses(Some(&prev), "eth0");
        assert_eq!(
            got,
            vec!["10.128.2.5/23".parse::<Ipv4Net>().expect("valid")]
        );
        assert!(prev_addresses(None, "eth0").is_empty());
    }
}
