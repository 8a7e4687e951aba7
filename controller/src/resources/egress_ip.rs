//! Egress IPs in the admin API and `apply -f`: setting `NetNamespace.egressIPs` and
//! `HostSubnet.egressIPs` / `egressCIDRs`, and showing where every requested IP stands.
//! Node liveness (which moves or drops egress IPs) comes from the switch sessions, in
//! [`crate::core`].

use crate::core::{egress_change, CoreHandle, Effects, Event};
use crate::error::ApiError;
use proto::admin as pa;
use std::net::Ipv4Addr;
use topology::model::{EgressIpStatus, EgressPlan, HostSubnetEgress};
use topology::{ClusterModel, Ipv4Cidr};

/// Parse a list of IPv4 addresses (`what` names the field in errors).
pub fn parse_ips(what: &str, v: &[String]) -> Result<Vec<Ipv4Addr>, ApiError> {
    v.iter()
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| ApiError::Invalid(format!("{what}: {s:?} is not an IPv4 address")))
        })
        .collect()
}

/// Parse a list of IPv4 CIDRs (`what` names the field in errors).
pub fn parse_cidrs(what: &str, v: &[String]) -> Result<Vec<Ipv4Cidr>, ApiError> {
    v.iter()
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|e| ApiError::Invalid(format!("{what}: {s:?} is not an IPv4 CIDR ({e})")))
        })
        .collect()
}

fn status(s: &EgressIpStatus) -> pa::EgressIpStatus {
    pa::EgressIpStatus {
        ip: s.ip.to_string(),
        namespace: s.namespace.clone(),
        node: s.node.clone().unwrap_or_default(),
        automatic: s.automatic,
        usable: s.usable,
        reason: s.reason.clone().unwrap_or_default(),
    }
}

/// Fill a HostSubnet's egress fields from the model.
pub fn fill_host_subnet(m: &ClusterModel, plan: &EgressPlan, h: &mut pa::HostSubnet) {
    let e = m.host_subnet_egress(&h.node);
    h.egress_ips = e.egress_ips.iter().map(ToString::to_string).collect();
    h.egress_cidrs = e.egress_cidrs.iter().map(ToString::to_string).collect();
    h.assigned_egress_ips = plan
        .ips
        .values()
        .filter(|s| s.node.as_deref() == Some(h.node.as_str()))
        .map(status)
        .collect();
    h.offline = !m.node_online(&h.node);
}

/// Fill a NetNamespace's egress fields from the model.
pub fn fill_net_namespace(m: &ClusterModel, plan: &EgressPlan, n: &mut pa::NetNamespace) {
    let ips = m.namespace_egress_ips(&n.name);
    n.egress_ips = ips.iter().map(ToString::to_string).collect();
    n.egress_ip_status = ips
        .iter()
        .filter_map(|ip| plan.ips.get(ip))
        .map(status)
        .collect();
}

/// The model side of setting `NetNamespace.egressIPs`.
pub fn set_net_namespace_egress_in(
    m: &mut ClusterModel,
    name: &str,
    ips: &[Ipv4Addr],
) -> Result<Effects, ApiError> {
    let affected = m.set_namespace_egress_ips(name, ips)?;
    let list = ips
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    Ok(Effects {
        events: if affected.is_empty() {
            Vec::new()
        } else {
            vec![Event::now(
                "EgressIPsChanged",
                format!("netnamespace/{name}"),
                format!("netnamespace {name} egressIPs [{list}]"),
            )]
        },
        affected,
        changes: vec![egress_change(m)],
        require_connected: None,
        undo: None,
    })
}

/// The model side of setting `HostSubnet.egressIPs` / `egressCIDRs` (`None`: keep).
pub fn set_host_subnet_egress_in(
    m: &mut ClusterModel,
    node: &str,
    egress_ips: Option<Vec<Ipv4Addr>>,
    egress_cidrs: Option<Vec<Ipv4Cidr>>,
) -> Result<Effects, ApiError> {
    let old = m.host_subnet_egress(node);
    let new = HostSubnetEgress {
        egress_ips: egress_ips.unwrap_or(old.egress_ips),
        egress_cidrs: egress_cidrs.unwrap_or(old.egress_cidrs),
    };
    let text = format!(
        "hostsubnet {node} egressIPs [{}] egressCIDRs [{}]",
        new.egress_ips
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        new.egress_cidrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let affected = m.set_host_subnet_egress(node, new)?;
    Ok(Effects {
        events: if affected.is_empty() {
            Vec::new()
        } else {
            vec![Event::now(
                "EgressIPsChanged",
                format!("hostsubnet/{node}"),
                text,
            )]
        },
        affected,
        changes: vec![egress_change(m)],
        require_connected: None,
        undo: None,
    })
}

/// `PatchNetNamespace`.
pub async fn patch_net_namespace(
    core: &CoreHandle,
    r: pa::PatchNetNamespaceRequest,
) -> Result<pa::NetNamespace, ApiError> {
    let ips = parse_ips(&format!("netnamespace {} egressIPs", r.name), &r.egress_ips)?;
    let name = r.name.clone();
    core.mutate(move |m| {
        let effects = set_net_namespace_egress_in(m, &name, &ips)?;
        Ok(((), effects))
    })
    .await?;
    core.read(move |c| {
        let plan = c.model.egress_plan();
        c.model.namespace(&r.name).map(|n| {
            let mut out = pa::NetNamespace {
                name: n.name.clone(),
                netid: n.netid,
                labels: n.labels.clone().into_iter().collect(),
                ..Default::default()
            };
            fill_net_namespace(&c.model, &plan, &mut out);
            out
        })
    })
    .await?
    .ok_or_else(|| ApiError::NotFound("the namespace was deleted meanwhile".into()))
}

/// `PatchHostSubnet`.
pub async fn patch_host_subnet(
    core: &CoreHandle,
    r: pa::PatchHostSubnetRequest,
) -> Result<pa::HostSubnet, ApiError> {
    let what = |f: &str| format!("hostsubnet {} {f}", r.node);
    let ips = match r.set_egress_ips {
        true => Some(parse_ips(&what("egressIPs"), &r.egress_ips)?),
        false => None,
    };
    let cidrs = match r.set_egress_cidrs {
        true => Some(parse_cidrs(&what("egressCIDRs"), &r.egress_cidrs)?),
        false => None,
    };
    if ips.is_none() && cidrs.is_none() {
        return Err(ApiError::Invalid(format!(
            "hostsubnet {}: nothing to change (give egress IPs and/or egress CIDRs)",
            r.node
        )));
    }
    let node = r.node.clone();
    core.mutate(move |m| {
        let effects = set_host_subnet_egress_in(m, &node, ips, cidrs)?;
        Ok(((), effects))
    })
    .await?;
    core.read(move |c| {
        let plan = c.model.egress_plan();
        c.model.node(&r.node).map(|n| {
            let mut out = pa::HostSubnet {
                node: n.name.clone(),
                node_ip: n.ip.to_string(),
                subnet: n.subnet.to_string(),
                dpid: n.dpid,
                gateway: n.gateway().to_string(),
                ..Default::default()
            };
            fill_host_subnet(&c.model, &plan, &mut out);
            out
        })
    })
    .await?
    .ok_or_else(|| ApiError::NotFound("the node was deleted meanwhile".into()))
}
