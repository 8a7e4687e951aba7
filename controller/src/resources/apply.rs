//! `flowmeshctl apply -f`: Kubernetes-style YAML objects applied in ONE transaction. Either
//! every object is applied (stored, flows acknowledged) or none is. Applying the same file
//! twice changes nothing the second time.

use crate::core::{cursors_change, namespace_change, pod_change, CoreHandle, Effects};
use crate::error::ApiError;
use crate::resources::network_policy::{
    all_namespace_changes, apply_policy_in, attach_pod_with_in,
};
use crate::resources::nodes::{add_node_in, create_namespace_in, PodRequest};
use crate::state::{Change, Record};
use kinds::manifest::{self, ManifestObject};
use topology::model::PodMeta;
use topology::{Affected, ClusterModel, Ipv4Cidr};

/// Apply a multi-document YAML; returns one result line per object (`namespace/a created`).
pub async fn apply_yaml(core: &CoreHandle, yaml: &str) -> Result<Vec<String>, ApiError> {
    let mut objects = manifest::parse(yaml).map_err(|e| ApiError::Invalid(e.to_string()))?;
    if objects.is_empty() {
        return Err(ApiError::Invalid("the file holds no objects".into()));
    }
    resolve_ofports(core, &mut objects).await?;
    core.mutate(move |m| {
        let before = m.clone();
        let mut fx = Effects::default();
        let mut results = Vec::new();
        for o in &objects {
            match apply_one(m, o, &mut fx) {
                Ok(r) => results.push(format!("{} {r}", o.describe())),
                Err(e) => {
                    *m = before;
                    return Err(prefix(&o.describe(), e));
                }
            }
        }
        fx.changes.push(cursors_change(m));
        Ok((results, fx))
    })
    .await
}

/// Pods without the `flowmesh.io/ofport` annotation get the OpenFlow port of their
/// `flowmesh.io/ovs-port` from their node's switch. A pod already attached on the same node and
/// port keeps its ofport (re-applying a file changes nothing, even with the switch away); a
/// node added by the same file is found by the datapath id the file gives it.
async fn resolve_ofports(
    core: &CoreHandle,
    objects: &mut [ManifestObject],
) -> Result<(), ApiError> {
    let file_dpids: Vec<(String, u64)> = objects
        .iter()
        .filter_map(|o| match o {
            ManifestObject::Node(n) => Some((n.name.clone(), n.dpid)),
            _ => None,
        })
        .collect();
    for o in objects.iter_mut() {
        let ManifestObject::Pod(p) = o else { continue };
        if p.ofport.is_some() {
            continue;
        }
        let what = format!("pod/{}/{}", p.namespace, p.name);
        let (ns, name, node, port) = (
            p.namespace.clone(),
            p.name.clone(),
            p.node.clone(),
            p.port_name.clone(),
        );
        let kept = core
            .read(move |c| {
                c.model
                    .pod(&ns, &name)
                    .filter(|old| old.node == node && old.port_name == port)
                    .map(|old| old.ofport)
            })
            .await?;
        let ofport = match kept {
            Some(n) => n,
            None => {
                let dpid = file_dpids
                    .iter()
                    .find(|(n, _)| *n == p.node)
                    .map(|(_, d)| *d);
                crate::resources::nodes::lookup_ofport(core, &p.node, &p.port_name, dpid)
                    .await
                    .map_err(|e| prefix(&what, e))?
            }
        };
        p.ofport = Some(ofport);
    }
    Ok(())
}

fn prefix(what: &str, e: ApiError) -> ApiError {
    match e {
        ApiError::NotFound(s) => ApiError::NotFound(format!("{what}: {s}")),
        ApiError::AlreadyExists(s) => ApiError::AlreadyExists(format!("{what}: {s}")),
        ApiError::Invalid(s) => ApiError::Invalid(format!("{what}: {s}")),
        ApiError::FailedPrecondition(s) => ApiError::FailedPrecondition(format!("{what}: {s}")),
        ApiError::Exhausted(s) => ApiError::Exhausted(format!("{what}: {s}")),
        ApiError::Unavailable(s) => ApiError::Unavailable(format!("{what}: {s}")),
        ApiError::Internal(s) => ApiError::Internal(format!("{what}: {s}")),
        ApiError::Aborted(s) => ApiError::Aborted(format!("{what}: {s}")),
    }
}

fn merge(fx: &mut Effects, a: Affected) {
    fx.affected.merge(a);
}

fn apply_one(
    m: &mut ClusterModel,
    o: &ManifestObject,
    fx: &mut Effects,
) -> Result<&'static str, ApiError> {
    match o {
        ManifestObject::Namespace(ns) => {
            let (info, mut verb) = match m.namespace(&ns.name) {
                Some(info) => (info, "unchanged"),
                None => {
                    let (info, created) = create_namespace_in(m, &ns.name)?;
                    fx.merge(created);
                    (info, "created")
                }
            };
            if let Some(want) = ns.netid {
                if want != info.netid {
                    if want == 0 {
                        merge(fx, m.make_global(&ns.name)?);
                    } else if let Some(other) = {
                        let found = m
                            .namespaces()
                            .find(|n| n.netid == want && n.name != ns.name);
                        found.map(|n| n.name)
                    } {
                        merge(fx, m.join(&[ns.name.as_str()], &other)?);
                    } else {
                        return Err(ApiError::Invalid(format!(
                            "netid {want} is used by no namespace; NETIDs are allocated by flowmesh (leave netid out, or use join-projects)"
                        )));
                    }
                    verb = "configured";
                }
            }
            if let Some(labels) = &ns.labels {
                if m.namespace_labels(&ns.name) != Some(labels) {
                    merge(fx, m.set_namespace_labels(&ns.name, labels.clone())?);
                    if verb == "unchanged" {
                        verb = "configured";
                    }
                    fx.changes.push(namespace_change(m, &ns.name));
                }
            }
            if let Some(mc) = ns.multicast {
                if m.multicast_annotated(&ns.name) != Some(mc) {
                    merge(fx, m.set_multicast(&ns.name, mc)?);
                    if verb == "unchanged" {
                        verb = "configured";
                    }
                    fx.changes.push(namespace_change(m, &ns.name));
                }
            }
            if verb == "configured" {
                fx.changes.push(namespace_change(m, &ns.name));
            }
            if let Some(ips) = &ns.egress_ips {
                if m.namespace_egress_ips(&ns.name) != ips.as_slice() {
                    fx.merge(crate::resources::egress_ip::set_net_namespace_egress_in(
                        m, &ns.name, ips,
                    )?);
                    if verb == "unchanged" {
                        verb = "configured";
                    }
                }
            }
            Ok(verb)
        }
        ManifestObject::Node(n) => {
            let existed = m.node(&n.name).cloned();
            let (info, added) = add_node_in(m, &n.name, n.node_ip, n.dpid)?;
            if let Some(s) = &n.subnet {
                if s.parse::<Ipv4Cidr>().ok() != Some(info.subnet) {
                    return Err(ApiError::Invalid(format!(
                        "subnet {s} was requested but the node has {}; subnets are allocated by flowmesh (leave subnet out)",
                        info.subnet
                    )));
                }
            }
            let mut verb = match existed {
                None => "created",
                Some(old) if old == info => "unchanged",
                Some(_) => "configured",
            };
            if verb != "unchanged" {
                fx.merge(added);
            }
            if let Some((ips, cidrs)) = &n.egress {
                let have = m.host_subnet_egress(&n.name);
                if &have.egress_ips != ips || &have.egress_cidrs != cidrs {
                    fx.merge(crate::resources::egress_ip::set_host_subnet_egress_in(
                        m,
                        &n.name,
                        Some(ips.clone()),
                        Some(cidrs.clone()),
                    )?);
                    if verb == "unchanged" {
                        verb = "configured";
                    }
                }
            }
            Ok(verb)
        }
        ManifestObject::Pod(p) => {
            // resolve_ofports filled it in when the file left it out.
            let ofport = p.ofport.ok_or_else(|| {
                ApiError::Invalid("the OpenFlow port of flowmesh.io/ovs-port is unknown: set the annotation flowmesh.io/ofport".into())
            })?;
            if let Some(old) = m.pod(&p.namespace, &p.name) {
                if old.node == p.node && old.port_name == p.port_name && old.ofport == ofport {
                    if old.labels == p.labels && old.ports == p.ports {
                        return Ok("unchanged");
                    }
                    let meta = PodMeta {
                        labels: p.labels.clone(),
                        ports: p.ports.clone(),
                    };
                    merge(fx, m.set_pod_meta(&p.namespace, &p.name, meta)?);
                    fx.changes.push(pod_change(m, &p.namespace, &p.name));
                    return Ok("configured");
                }
                return Err(ApiError::AlreadyExists(format!(
                    "pod {}/{} is attached on {} port {} (detach it first)",
                    p.namespace, p.name, old.node, old.port_name
                )));
            }
            let (_, attached) = attach_pod_with_in(
                m,
                &PodRequest {
                    node: p.node.clone(),
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    port_name: p.port_name.clone(),
                    ofport,
                },
                PodMeta {
                    labels: p.labels.clone(),
                    ports: p.ports.clone(),
                },
            )?;
            fx.merge(attached);
            Ok("created")
        }
        ManifestObject::ClusterNetwork(c) => {
            let cfg = manifest::to_config(c, m.config()).map_err(ApiError::Invalid)?;
            if &cfg == m.config() {
                return Ok("unchanged");
            }
            let mode_changed = cfg.mode != m.config().mode;
            merge(fx, m.update_config(cfg.clone())?);
            fx.changes.push(Change::Put(Record::ClusterNetwork(cfg)));
            if mode_changed {
                // Leaving subnet mode gives every namespace a NETID of its own.
                fx.changes.extend(all_namespace_changes(m));
            }
            Ok("configured")
        }
        ManifestObject::NetworkPolicy(p) => {
            let (verdict, applied) = apply_policy_in(m, p.clone())?;
            fx.merge(applied);
            Ok(verdict.as_str())
        }
        ManifestObject::EgressNetworkPolicy(f) => {
            let (verdict, applied) = crate::resources::egress_firewall::apply_in(m, f.clone())?;
            fx.merge(applied);
            Ok(verdict.as_str())
        }
    }
}
