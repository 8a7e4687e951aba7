//! Rendering of admin API objects: `oc get`-style tables, JSON and YAML (pure functions).
//!
//! JSON/YAML field names are camelCase, as in OpenShift's objects. Datapath ids are strings of
//! `0x` + 16 hex digits in every format (a 64-bit number does not survive JSON readers that use
//! doubles, and this is a form `--dpid` and the datapath-id annotation accept). Cookies are
//! strings in `ovs-ofctl`'s own form, `0x` + minimal hex (`0x0`, `0x1f`), so they can be
//! matched against `dump-flows` lines.

use proto::admin;
use serde::Serialize;
use std::collections::BTreeMap;

/// How `flowmeshctl` prints objects (`-o`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns with upper-case headers (the default).
    #[default]
    Table,
    /// The table with extra columns.
    Wide,
    /// A JSON array (pretty-printed).
    Json,
    /// A YAML sequence.
    Yaml,
}

/// Why output could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// JSON serialization failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML serialization failed.
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

/// `0x` and 16 hex digits (datapath ids).
pub fn hex64(v: u64) -> String {
    format!("0x{v:016x}")
}

/// `0x` and minimal hex, as `ovs-ofctl` prints cookies.
pub fn cookie(v: u64) -> String {
    format!("0x{v:x}")
}

/// An object that prints as a table row.
pub trait Tabular {
    /// Column headers (upper case).
    fn headers(wide: bool) -> Vec<&'static str>;
    /// The row's cells, one per header.
    fn row(&self, wide: bool) -> Vec<String>;
    /// How many of the last columns are left out of a table when every row has them empty
    /// (egress IPs: shown only where some are configured).
    fn optional_columns() -> usize {
        0
    }
}

/// A pod as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Node.
    pub node: String,
    /// IPv4 address.
    pub ip: String,
    /// MAC address.
    pub mac: String,
    /// OpenFlow port.
    pub ofport: u32,
    /// NETID of the pod's namespace.
    pub netid: u32,
    /// OVS port name.
    pub port_name: String,
    /// `metadata.labels` (left out when there are none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Named container ports (left out when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPortView>,
}

/// A named container port as printed (Kubernetes field names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPortView {
    /// Port name.
    pub name: String,
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// Port number.
    pub container_port: u32,
}

/// Labels as `k=v,k2=v2` (empty when none; tables print `<none>`).
pub fn labels_cell(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl From<&admin::Pod> for PodView {
    fn from(p: &admin::Pod) -> Self {
        PodView {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            node: p.node.clone(),
            ip: p.ip.clone(),
            mac: p.mac.clone(),
            ofport: p.ofport,
            netid: p.netid,
            port_name: p.port_name.clone(),
            labels: p.labels.clone().into_iter().collect(),
            ports: p
                .ports
                .iter()
                .map(|c| ContainerPortView {
                    name: c.name.clone(),
                    protocol: c.protocol.clone(),
                    container_port: c.container_port,
                })
                .collect(),
        }
    }
}

impl Tabular for PodView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NAMESPACE", "NAME", "NODE", "IP", "MAC", "OFPORT", "NETID"];
        if wide {
            h.extend(["PORT", "LABELS"]);
        }
        h
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let mut r = vec![
            self.namespace.clone(),
            self.name.clone(),
            self.node.clone(),
            self.ip.clone(),
            self.mac.clone(),
            self.ofport.to_string(),
            self.netid.to_string(),
        ];
        if wide {
            r.push(self.port_name.clone());
            r.push(labels_cell(&self.labels));
        }
        r
    }
}

/// A HostSubnet as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostSubnetView {
    /// Node name.
    pub node: String,
    /// Node underlay IPv4.
    #[serde(rename = "nodeIP")]
    pub node_ip: String,
    /// Subnet CIDR.
    pub subnet: String,
    /// Datapath id, `0x%016x`.
    pub dpid: String,
    /// Gateway (tun0) address.
    pub gateway: String,
    /// `egressCIDRs` (automatic egress IPs may be placed from these).
    #[serde(rename = "egressCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub egress_cidrs: Vec<String>,
    /// `egressIPs` (manual: the IPs this node hosts).
    #[serde(rename = "egressIPs", skip_serializing_if = "Vec::is_empty")]
    pub egress_ips: Vec<String>,
    /// The egress IPs this node serves, manual or assigned, with their state.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assigned_egress_ips: Vec<EgressIpView>,
    /// True while the node's switch is disconnected (left out otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
}

/// One requested egress IP as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressIpView {
    /// The IP.
    pub ip: String,
    /// The namespace requesting it.
    pub namespace: String,
    /// The node hosting it (left out when none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// Placed by the controller from egressCIDRs.
    pub automatic: bool,
    /// Whether traffic uses it now.
    pub usable: bool,
    /// Why not (left out when usable).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl From<&admin::EgressIpStatus> for EgressIpView {
    fn from(s: &admin::EgressIpStatus) -> Self {
        EgressIpView {
            ip: s.ip.clone(),
            namespace: s.namespace.clone(),
            node: s.node.clone(),
            automatic: s.automatic,
            usable: s.usable,
            reason: s.reason.clone(),
        }
    }
}

/// `IP` (usable) or `IP(unusable)`, comma-separated.
fn egress_cell(v: &[EgressIpView], with_node: bool) -> String {
    v.iter()
        .map(|s| match (s.usable, with_node) {
            (true, true) => format!("{}@{}", s.ip, s.node),
            (true, false) => s.ip.clone(),
            (false, _) => format!("{}(unusable)", s.ip),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl From<&admin::HostSubnet> for HostSubnetView {
    fn from(h: &admin::HostSubnet) -> Self {
        HostSubnetView {
            node: h.node.clone(),
            node_ip: h.node_ip.clone(),
            subnet: h.subnet.clone(),
            dpid: hex64(h.dpid),
            gateway: h.gateway.clone(),
            egress_cidrs: h.egress_cidrs.clone(),
            egress_ips: h.egress_ips.clone(),
            assigned_egress_ips: h
                .assigned_egress_ips
                .iter()
                .map(EgressIpView::from)
                .collect(),
            offline: h.offline,
        }
    }
}

impl Tabular for HostSubnetView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NODE", "NODE IP", "SUBNET", "DPID"];
        if wide {
            h.push("GATEWAY");
        }
        h.extend(["EGRESS CIDRS", "EGRESS IPS"]);
        h
    }
    fn optional_columns() -> usize {
        2
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let mut r = vec![
            self.node.clone(),
            self.node_ip.clone(),
            self.subnet.clone(),
            self.dpid.clone(),
        ];
        if wide {
            r.push(self.gateway.clone());
        }
        r.push(self.egress_cidrs.join(","));
        // Manual IPs not requested by any namespace are hosted but idle: shown bare.
        let mut ips: Vec<String> = self
            .egress_ips
            .iter()
            .filter(|ip| !self.assigned_egress_ips.iter().any(|a| &a.ip == *ip))
            .cloned()
            .collect();
        let assigned = egress_cell(&self.assigned_egress_ips, false);
        if !assigned.is_empty() {
            ips.insert(0, assigned);
        }
        r.push(ips.join(","));
        r
    }
}

/// A NetNamespace as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetNamespaceView {
    /// Namespace name.
    pub name: String,
    /// NETID (0 = global).
    pub netid: u32,
    /// `metadata.labels` (left out when there are none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `egressIPs` (left out when there are none).
    #[serde(rename = "egressIPs", skip_serializing_if = "Vec::is_empty")]
    pub egress_ips: Vec<String>,
    /// Where each requested egress IP stands (left out when none is requested).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub egress_ip_status: Vec<EgressIpView>,
    /// The annotations flowmesh keeps (left out when there are none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl From<&admin::NetNamespace> for NetNamespaceView {
    fn from(n: &admin::NetNamespace) -> Self {
        NetNamespaceView {
            name: n.name.clone(),
            netid: n.netid,
            labels: n.labels.clone().into_iter().collect(),
            egress_ips: n.egress_ips.clone(),
            egress_ip_status: n.egress_ip_status.iter().map(EgressIpView::from).collect(),
            annotations: n.annotations.clone().into_iter().collect(),
        }
    }
}

impl NetNamespaceView {
    /// The MULTICAST column: whether the namespace has the multicast annotation `true`.
    fn multicast(&self) -> &'static str {
        match self
            .annotations
            .get(topology::model::multicast::MULTICAST_ANNOTATION)
        {
            Some(v) if v == "true" => "true",
            _ => "false",
        }
    }
}

impl Tabular for NetNamespaceView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NAME", "NETID"];
        if wide {
            h.push("MULTICAST");
            h.push("LABELS");
        }
        h.push("EGRESS IPS");
        h
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let mut r = vec![self.name.clone(), self.netid.to_string()];
        if wide {
            r.push(self.multicast().to_string());
            r.push(labels_cell(&self.labels));
        }
        r.push(egress_cell(&self.egress_ip_status, true));
        r
    }
    fn optional_columns() -> usize {
        1
    }
}

/// A NetworkPolicy as printed: a Kubernetes `networking.k8s.io/v1` object in JSON/YAML (so
/// the output can be applied again), `NAMESPACE NAME POD-SELECTOR` in tables.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct NetworkPolicyView(pub k8s_openapi::api::networking::v1::NetworkPolicy);

impl From<&admin::NetworkPolicy> for NetworkPolicyView {
    fn from(p: &admin::NetworkPolicy) -> Self {
        NetworkPolicyView(kinds::netpol::proto_to_k8s(p))
    }
}

impl Tabular for NetworkPolicyView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NAMESPACE", "NAME", "POD-SELECTOR"];
        if wide {
            h.extend(["POLICY-TYPES", "INGRESS", "EGRESS"]);
        }
        h
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let m = &self.0.metadata;
        let spec = self.0.spec.clone().unwrap_or_default();
        let selector = spec
            .pod_selector
            .as_ref()
            .and_then(|s| kinds::netpol::selector(s, "spec.podSelector").ok())
            .map(|s| s.to_string())
            .unwrap_or_default();
        let mut r = vec![
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
            selector,
        ];
        if wide {
            r.push(spec.policy_types.unwrap_or_default().join(","));
            r.push(spec.ingress.map_or(0, |v| v.len()).to_string());
            r.push(spec.egress.map_or(0, |v| v.len()).to_string());
        }
        r
    }
}

/// A switch as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchView {
    /// Node name (empty for an unknown datapath).
    pub node: String,
    /// Datapath id, `0x%016x`.
    pub dpid: String,
    /// OpenFlow session up.
    pub connected: bool,
    /// Installed flows equal the desired ones.
    pub synced: bool,
    /// Installed flows.
    pub flows: u64,
    /// Desired flows.
    pub desired_flows: u64,
    /// Errors the switch reported.
    pub errors: u64,
    /// Remote address of the OpenFlow session.
    pub peer: String,
    /// The last error, if any.
    pub last_error: String,
    /// No registered node claims this datapath.
    pub unknown: bool,
    /// The OpenFlow role the answering replica holds on it (empty: none requested).
    pub role: String,
    /// Audit logging there: empty (nothing logs on it), `on`, or `off: WHY`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit: String,
}

impl From<&admin::Switch> for SwitchView {
    fn from(s: &admin::Switch) -> Self {
        SwitchView {
            node: s.node.clone(),
            dpid: hex64(s.dpid),
            connected: s.connected,
            synced: s.synced,
            flows: s.flows,
            desired_flows: s.desired_flows,
            errors: s.errors,
            peer: s.peer.clone(),
            last_error: s.last_error.clone(),
            unknown: s.unknown,
            role: s.role.clone(),
            audit: s.audit.clone(),
        }
    }
}

impl Tabular for SwitchView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NODE", "DPID", "CONNECTED", "SYNCED", "FLOWS", "ERRORS"];
        if wide {
            h.extend(["DESIRED", "PEER", "ROLE", "AUDIT", "LAST ERROR"]);
        }
        h
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let node = if self.unknown || self.node.is_empty() {
            "<unknown>".to_string()
        } else {
            self.node.clone()
        };
        let mut r = vec![
            node,
            self.dpid.clone(),
            self.connected.to_string(),
            self.synced.to_string(),
            self.flows.to_string(),
            self.errors.to_string(),
        ];
        if wide {
            r.extend([
                self.desired_flows.to_string(),
                self.peer.clone(),
                if self.role.is_empty() {
                    "-".into()
                } else {
                    self.role.clone()
                },
                if self.audit.is_empty() {
                    "-".into()
                } else {
                    self.audit.clone()
                },
                self.last_error.clone(),
            ]);
        }
        r
    }
}

/// A controller replica as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerView {
    /// Replica id.
    pub id: String,
    /// leader, standby, or alone.
    pub state: String,
    /// The leader's generation (on the leader's row; 0 elsewhere).
    pub generation: u64,
    /// gRPC address.
    pub grpc: String,
    /// OpenFlow address.
    pub openflow: String,
    /// The replica that answered.
    pub this: bool,
    /// The OpenFlow role it holds, by switch.
    pub switches: std::collections::BTreeMap<String, String>,
}

impl ControllerView {
    /// Every replica of a listing.
    pub fn all(l: &admin::ControllerList) -> Vec<ControllerView> {
        l.replicas
            .iter()
            .map(|r| ControllerView {
                id: r.id.clone(),
                state: r.state.clone(),
                generation: if r.state == "leader" { l.generation } else { 0 },
                grpc: r.grpc.clone(),
                openflow: r.openflow.clone(),
                this: r.this,
                switches: r
                    .switches
                    .iter()
                    .map(|s| (s.switch.clone(), s.role.clone()))
                    .collect(),
            })
            .collect()
    }
}

impl Tabular for ControllerView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["REPLICA", "STATE", "GENERATION", "MASTER", "SLAVE", "OTHER"];
        if wide {
            h.extend(["GRPC", "OPENFLOW", "ROLES"]);
        }
        h
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let count = |role: &str| {
            self.switches
                .values()
                .filter(|r| r.as_str() == role)
                .count()
        };
        let other = self.switches.len() - count("master") - count("slave");
        let id = if self.this {
            format!("{} (this)", self.id)
        } else {
            self.id.clone()
        };
        let mut r = vec![
            id,
            self.state.clone(),
            if self.generation == 0 {
                "-".into()
            } else {
                self.generation.to_string()
            },
            count("master").to_string(),
            count("slave").to_string(),
            other.to_string(),
        ];
        if wide {
            let roles: Vec<String> = self
                .switches
                .iter()
                .map(|(s, role)| format!("{s}={role}"))
                .collect();
            r.extend([
                or_dash(&self.grpc),
                or_dash(&self.openflow),
                if roles.is_empty() {
                    "-".into()
                } else {
                    roles.join(",")
                },
            ]);
        }
        r
    }
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// One cluster network range as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkEntryView {
    /// CIDR.
    pub cidr: String,
    /// Node subnet prefix length.
    pub host_prefix: u32,
}

/// The cluster network config as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkView {
    /// Ranges.
    pub cluster_networks: Vec<ClusterNetworkEntryView>,
    /// Service CIDR.
    pub service_network: String,
    /// Plugin mode.
    pub mode: String,
    /// VXLAN UDP port.
    pub vxlan_port: u32,
    /// Overlay MTU.
    pub mtu: u32,
}

impl From<&admin::ClusterNetwork> for ClusterNetworkView {
    fn from(c: &admin::ClusterNetwork) -> Self {
        ClusterNetworkView {
            cluster_networks: c
                .cluster_networks
                .iter()
                .map(|e| ClusterNetworkEntryView {
                    cidr: e.cidr.clone(),
                    host_prefix: e.host_prefix,
                })
                .collect(),
            service_network: c.service_network.clone(),
            mode: c.mode.clone(),
            vxlan_port: c.vxlan_port,
            mtu: c.mtu,
        }
    }
}

impl Tabular for ClusterNetworkView {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec![
            "CLUSTER NETWORK",
            "HOST PREFIX",
            "SERVICE NETWORK",
            "MODE",
            "VXLAN PORT",
            "MTU",
        ]
    }
    fn row(&self, _wide: bool) -> Vec<String> {
        let join = |f: &dyn Fn(&ClusterNetworkEntryView) -> String| {
            self.cluster_networks
                .iter()
                .map(f)
                .collect::<Vec<_>>()
                .join(",")
        };
        vec![
            join(&|e| e.cidr.clone()),
            join(&|e| format!("/{}", e.host_prefix)),
            self.service_network.clone(),
            self.mode.clone(),
            self.vxlan_port.to_string(),
            self.mtu.to_string(),
        ]
    }
}

/// An event as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// RFC 3339 UTC time with milliseconds.
    pub time: String,
    /// Milliseconds since the Unix epoch.
    pub time_unix_ms: i64,
    /// Event kind.
    pub kind: String,
    /// The object concerned.
    pub object: String,
    /// What happened.
    pub message: String,
}

impl From<&admin::Event> for EventView {
    fn from(e: &admin::Event) -> Self {
        EventView {
            time: rfc3339_ms(e.time_unix_ms),
            time_unix_ms: e.time_unix_ms,
            kind: e.kind.clone(),
            object: e.object.clone(),
            message: e.message.clone(),
        }
    }
}

/// One trace step as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceStepView {
    /// Node whose switch the step ran on.
    pub node: String,
    /// Table id.
    pub table: u32,
    /// Priority of the matched flow.
    pub priority: u32,
    /// Cookie of the matched flow, `0x%x`.
    pub cookie: String,
    /// The matched flow (ovs-ofctl syntax); empty when none matched.
    pub flow: String,
    /// Simulator note.
    pub note: String,
    /// This step decided the verdict.
    pub deciding: bool,
}

/// A trace result as printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceView {
    /// What happened to the packet.
    pub verdict: String,
    /// Whether it was delivered.
    pub allowed: bool,
    /// Index of the deciding step.
    pub decided_by: u32,
    /// The steps, in order.
    pub steps: Vec<TraceStepView>,
}

impl From<&admin::TraceReply> for TraceView {
    fn from(t: &admin::TraceReply) -> Self {
        TraceView {
            verdict: t.verdict.clone(),
            allowed: t.allowed,
            decided_by: t.decided_by,
            steps: t
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| TraceStepView {
                    node: s.node.clone(),
                    table: s.table,
                    priority: s.priority,
                    cookie: cookie(s.cookie),
                    flow: s.flow.clone(),
                    note: s.note.clone(),
                    deciding: usize::try_from(t.decided_by).ok() == Some(i),
                })
                .collect(),
        }
    }
}

/// Aligned columns, three spaces apart, like `oc get`; empty cells print as `<none>`.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |s: &str| -> String {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cell(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                l.push_str("   ");
            }
            l.push_str(c);
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(c.chars().count());
            l.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for r in &rows {
        line(&mut r.iter().map(String::as_str));
    }
    out
}

/// Render a list in the chosen format. An empty list in table form renders as nothing (the
/// caller says "No resources found." on stderr, like `oc`).
pub fn render_list<T: Serialize + Tabular>(
    items: &[T],
    format: OutputFormat,
) -> Result<String, OutputError> {
    match format {
        OutputFormat::Table | OutputFormat::Wide => {
            if items.is_empty() {
                return Ok(String::new());
            }
            let wide = format == OutputFormat::Wide;
            let mut rows: Vec<Vec<String>> = items.iter().map(|i| i.row(wide)).collect();
            let mut headers = T::headers(wide);
            for _ in 0..T::optional_columns() {
                let last = headers.len().saturating_sub(1);
                if rows
                    .iter()
                    .all(|r| r.get(last).is_none_or(|c| c.is_empty()))
                {
                    headers.truncate(last);
                    for r in &mut rows {
                        r.truncate(last);
                    }
                } else {
                    break;
                }
            }
            Ok(table(&headers, &rows))
        }
        OutputFormat::Json => Ok(format!("{}\n", serde_json::to_string_pretty(items)?)),
        OutputFormat::Yaml => Ok(serde_yaml::to_string(items)?),
    }
}

/// Render one object: a one-row table, or a JSON/YAML object (not an array).
pub fn render_one<T: Serialize + Tabular>(
    item: &T,
    format: OutputFormat,
) -> Result<String, OutputError> {
    match format {
        OutputFormat::Table | OutputFormat::Wide => render_list(std::slice::from_ref(item), format),
        OutputFormat::Json => Ok(format!("{}\n", serde_json::to_string_pretty(item)?)),
        OutputFormat::Yaml => Ok(serde_yaml::to_string(item)?),
    }
}

/// A trace: the verdict first, then one line per step (the deciding one marked `=>`).
pub fn render_trace(trace: &TraceView, format: OutputFormat) -> Result<String, OutputError> {
    match format {
        OutputFormat::Json => return Ok(format!("{}\n", serde_json::to_string_pretty(trace)?)),
        OutputFormat::Yaml => return Ok(serde_yaml::to_string(trace)?),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut out = format!(
        "verdict: {}: {}\n",
        if trace.allowed { "ALLOWED" } else { "BLOCKED" },
        trace.verdict
    );
    if trace.steps.is_empty() {
        out.push_str("(no steps)\n");
        return Ok(out);
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = trace
        .steps
        .iter()
        .map(|s| {
            let flow = match (s.flow.is_empty(), s.note.is_empty()) {
                (true, true) => "(no flow matched)".to_string(),
                (true, false) => format!("(no flow matched: {})", s.note),
                (false, true) => s.flow.clone(),
                (false, false) => format!("{}   # {}", s.flow, s.note),
            };
            vec![
                if s.deciding { "=>" } else { "  " }.to_string(),
                s.node.clone(),
                s.table.to_string(),
                s.priority.to_string(),
                s.cookie.clone(),
                flow,
            ]
        })
        .collect();
    let body = table(
        &["  ", "NODE", "TABLE", "PRIORITY", "COOKIE", "FLOW"],
        &rows,
    );
    out.push_str(&body);
    if let Some(s) = trace.steps.iter().find(|s| s.deciding) {
        out.push_str(&format!(
            "\ndecided by table {} on {} (priority {}, cookie {})\n",
            s.table, s.node, s.priority, s.cookie
        ));
    }
    Ok(out)
}

/// One event as one line: `TIME  KIND  OBJECT  MESSAGE` (table), or one JSON/YAML document.
pub fn render_event(event: &EventView, format: OutputFormat) -> Result<String, OutputError> {
    match format {
        OutputFormat::Table | OutputFormat::Wide => Ok(format!(
            "{}  {}  {}  {}\n",
            event.time, event.kind, event.object, event.message
        )),
        OutputFormat::Json => Ok(format!("{}\n", serde_json::to_string(event)?)),
        OutputFormat::Yaml => Ok(format!("---\n{}", serde_yaml::to_string(event)?)),
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC, e.g. `2024-05-01T12:00:00.250Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Shift to a calendar starting on 0000-03-01 so leap days fall at the end of a year;
    // 146097 days make a 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// An EgressNetworkPolicy as `flowmeshctl get` prints it: the API object (with flowmesh's
/// `status`) in JSON/YAML, `NAMESPACE NAME RULES STATE` in tables.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct EgressNetworkPolicyView(pub kinds::egress_firewall::EgressNetworkPolicyObject);

impl From<&admin::EgressNetworkPolicy> for EgressNetworkPolicyView {
    fn from(p: &admin::EgressNetworkPolicy) -> Self {
        EgressNetworkPolicyView(kinds::egress_firewall::proto_to_api(p))
    }
}

impl Tabular for EgressNetworkPolicyView {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NAMESPACE", "NAME", "RULES", "STATE"];
        if wide {
            h.extend(["DNS-NAMES", "REASON"]);
        }
        h
    }
    fn row(&self, wide: bool) -> Vec<String> {
        let o = &self.0;
        let st = o.status.clone().unwrap_or_default();
        let mut r = vec![
            o.metadata.namespace.clone().unwrap_or_default(),
            o.metadata.name.clone().unwrap_or_default(),
            o.spec.egress.len().to_string(),
            st.state.clone(),
        ];
        if wide {
            r.push(st.dns_names.len().to_string());
            r.push(st.reason);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, ip: &str) -> admin::Pod {
        admin::Pod {
            namespace: ns.into(),
            name: name.into(),
            node: "node-1".into(),
            ip: ip.into(),
            mac: "0a:58:0a:80:00:05".into(),
            ofport: 5,
            netid: 42,
            port_name: "veth5".into(),
            ..Default::default()
        }
    }

    #[test]
    fn table_aligns_and_marks_empty_cells() {
        let t = table(
            &["NAME", "NETID"],
            &[
                vec!["a".into(), "1".into()],
                vec!["longer-name".into(), "".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME          NETID\na             1\nlonger-name   <none>\n"
        );
    }

    #[test]
    fn pods_table_and_wide() {
        let v: Vec<PodView> = [pod("ns1", "web", "10.128.0.5")]
            .iter()
            .map(PodView::from)
            .collect();
        let t = render_list(&v, OutputFormat::Table).expect("renders");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines,
            vec![
                "NAMESPACE   NAME   NODE     IP           MAC                 OFPORT   NETID",
                "ns1         web    node-1   10.128.0.5   0a:58:0a:80:00:05   5        42",
            ]
        );
        let w = render_list(&v, OutputFormat::Wide).expect("renders");
        assert!(w
            .lines()
            .next()
            .is_some_and(|l| l.contains("NETID   PORT") && l.ends_with("LABELS")));
        assert!(w.contains("veth5"));
    }

    #[test]
    fn pods_json_keys() {
        let v: Vec<PodView> = [pod("ns1", "web", "10.128.0.5")]
            .iter()
            .map(PodView::from)
            .collect();
        let j: serde_json::Value =
            serde_json::from_str(&render_list(&v, OutputFormat::Json).expect("renders"))
                .expect("valid JSON");
        assert_eq!(
            j,
            serde_json::json!([{
                "namespace": "ns1", "name": "web", "node": "node-1", "ip": "10.128.0.5",
                "mac": "0a:58:0a:80:00:05", "ofport": 5, "netid": 42, "portName": "veth5"
            }])
        );
    }

    #[test]
    fn hostsubnet_json_and_table_dpid() {
        let h = admin::HostSubnet {
            node: "n1".into(),
            node_ip: "192.168.1.1".into(),
            subnet: "10.128.0.0/23".into(),
            dpid: 0xa1,
            gateway: "10.128.0.1".into(),
            ..Default::default()
        };
        let v = vec![HostSubnetView::from(&h)];
        let j: serde_json::Value =
            serde_json::from_str(&render_list(&v, OutputFormat::Json).expect("renders"))
                .expect("valid JSON");
        assert_eq!(j[0]["nodeIP"], "192.168.1.1");
        assert_eq!(j[0]["dpid"], "0x00000000000000a1");
        assert_eq!(j[0]["subnet"], "10.128.0.0/23");
        let t = render_list(&v, OutputFormat::Table).expect("renders");
        assert!(t.contains("0x00000000000000a1"), "{t}");
        assert!(t.starts_with("NODE   NODE IP"), "{t}");
    }

    #[test]
    fn yaml_is_a_sequence_of_mappings() {
        let v = vec![NetNamespaceView {
            name: "a".into(),
            netid: 0,
            labels: BTreeMap::new(),
            egress_ips: Vec::new(),
            egress_ip_status: Vec::new(),
            annotations: BTreeMap::new(),
        }];
        let y = render_list(&v, OutputFormat::Yaml).expect("renders");
        assert_eq!(y, "- name: a\n  netid: 0\n");
    }

    #[test]
    fn empty_lists() {
        let v: Vec<NetNamespaceView> = vec![];
        assert_eq!(render_list(&v, OutputFormat::Table).expect("renders"), "");
        assert_eq!(
            render_list(&v, OutputFormat::Json).expect("renders"),
            "[]\n"
        );
    }

    #[test]
    fn switch_unknown_row() {
        let s = admin::Switch {
            dpid: 7,
            connected: true,
            unknown: true,
            ..Default::default()
        };
        let row = SwitchView::from(&s).row(false);
        assert_eq!(row[0], "<unknown>");
        assert_eq!(row[1], "0x0000000000000007");
    }

    #[test]
    fn trace_marks_the_deciding_step() {
        let reply = admin::TraceReply {
            verdict: "dropped".into(),
            allowed: false,
            decided_by: 1,
            steps: vec![
                admin::TraceStep {
                    node: "node-1".into(),
                    table: 0,
                    priority: 100,
                    cookie: 0,
                    flow: "priority=100,ip actions=goto_table:20".into(),
                    note: String::new(),
                },
                admin::TraceStep {
                    node: "node-1".into(),
                    table: 80,
                    priority: 0,
                    cookie: 0x1f,
                    flow: "priority=0 actions=drop".into(),
                    note: "netid mismatch".into(),
                },
            ],
        };
        let t = render_trace(&TraceView::from(&reply), OutputFormat::Table).expect("renders");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "verdict: BLOCKED: dropped");
        assert!(lines[2].contains("NODE") && lines[2].contains("COOKIE"));
        assert!(lines[3].starts_with("   ") && lines[3].contains("goto_table:20"));
        assert!(lines[4].starts_with("=>"), "{t}");
        assert!(lines[4].contains(" 0x1f "));
        assert!(lines[3].contains(" 0x0 "));
        assert!(lines[4].ends_with("priority=0 actions=drop   # netid mismatch"));
        assert!(t.contains("decided by table 80 on node-1"));
        let j: serde_json::Value = serde_json::from_str(
            &render_trace(&TraceView::from(&reply), OutputFormat::Json).expect("renders"),
        )
        .expect("valid JSON");
        assert_eq!(j["steps"][1]["deciding"], true);
        assert_eq!(j["decidedBy"], 1);
    }

    #[test]
    fn times() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_250), "2000-02-29T00:00:00.250Z");
        assert_eq!(rfc3339_ms(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn event_lines() {
        let e = EventView::from(&admin::Event {
            time_unix_ms: 0,
            kind: "PodAttached".into(),
            object: "pod/ns1/web".into(),
            message: "10.128.0.5 on node-1".into(),
        });
        assert_eq!(
            render_event(&e, OutputFormat::Table).expect("renders"),
            "1970-01-01T00:00:00.000Z  PodAttached  pod/ns1/web  10.128.0.5 on node-1\n"
        );
        let j: serde_json::Value =
            serde_json::from_str(&render_event(&e, OutputFormat::Json).expect("renders"))
                .expect("valid JSON");
        assert_eq!(j["kind"], "PodAttached");
        assert_eq!(j["timeUnixMs"], 0);
    }
}
