//! The operations of the admin and node APIs, as mutations and reads of the core. Both gRPC
//! services and `apply -f` go through these, so every path stores, recomputes and waits for
//! acknowledgements the same way.

use crate::core::{
    cursors_change, egress_change, namespace_change, node_change, pod_change, CoreHandle, Effects,
    Event, Undo,
};
use crate::error::ApiError;
use proto::admin as pa;
use std::net::Ipv4Addr;
use topology::model::{NamespaceInfo, NodeInfo};
use topology::{ClusterModel, ModelError, PodAttach, PodInfo};

/// Add (or update the IP/datapath of) a node; allocates its subnet on first add.
pub async fn add_node(
    core: &CoreHandle,
    name: String,
    ip: Ipv4Addr,
    dpid: u64,
) -> Result<NodeInfo, ApiError> {
    check_name("node", &name)?;
    core.mutate(move |m| add_node_in(m, &name, ip, dpid)).await
}

/// The model side of [`add_node`]: the change, the records it touched and its event.
pub fn add_node_in(
    m: &mut ClusterModel,
    name: &str,
    ip: Ipv4Addr,
    dpid: u64,
) -> Result<(NodeInfo, Effects), ApiError> {
    check_name("node", name)?;
    let existed = m.node(name).is_some();
    let (info, affected) = m.add_node(name, ip, dpid)?;
    let ev = Event::now(
        if existed { "NodeUpdated" } else { "NodeAdded" },
        format!("node/{name}"),
        format!(
            "node {name} ({ip}, datapath {dpid:#018x}) has subnet {}",
            info.subnet
        ),
    );
    let effects = Effects {
        affected,
        changes: vec![node_change(m, name), cursors_change(m)],
        require_connected: None,
        undo: None,
        events: vec![ev],
    };
    Ok((info, effects))
}

/// Delete a node (its pods go with it) and release its subnet.
pub async fn delete_node(core: &CoreHandle, name: String) -> Result<(), ApiError> {
    core.mutate(move |m| {
        let pods: Vec<(String, String)> = m
            .pods_on_node(&name)
            .map(|p| (p.key.namespace.clone(), p.key.name.clone()))
            .collect();
        let affected = m.delete_node(&name)?;
        let mut changes = vec![node_change(m, &name), cursors_change(m), egress_change(m)];
        changes.extend(pods.iter().map(|(ns, n)| pod_change(m, ns, n)));
        let ev = Event::now(
            "NodeDeleted",
            format!("node/{name}"),
            format!("node {name} deleted"),
        );
        Ok((
            (),
            Effects {
                affected,
                changes,
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// Create a namespace (allocating its NETID). An existing namespace is an error.
pub async fn create_namespace(core: &CoreHandle, name: String) -> Result<NamespaceInfo, ApiError> {
    check_name("namespace", &name)?;
    core.mutate(move |m| create_namespace_in(m, &name)).await
}

/// The model side of [`create_namespace`].
pub fn create_namespace_in(
    m: &mut ClusterModel,
    name: &str,
) -> Result<(NamespaceInfo, Effects), ApiError> {
    check_name("namespace", name)?;
    if m.namespace(name).is_some() {
        return Err(ApiError::AlreadyExists(format!(
            "namespace {name:?} already exists"
        )));
    }
    let (info, affected) = m.add_namespace(name)?;
    let ev = Event::now(
        "NamespaceCreated",
        format!("namespace/{name}"),
        format!("namespace {name} has NETID {}", info.netid),
    );
    let changes = vec![namespace_change(m, name), cursors_change(m)];
    Ok((
        info,
        Effects {
            affected,
            changes,
            require_connected: None,
            undo: None,
            events: vec![ev],
        },
    ))
}

/// Delete a namespace (its pods go with it) and free its NETID when unused.
pub async fn delete_namespace(core: &CoreHandle, name: String) -> Result<(), ApiError> {
    core.mutate(move |m| {
        if name == "default" {
            return Err(ApiError::FailedPrecondition(
                "the default namespace cannot be deleted".into(),
            ));
        }
        let pods: Vec<String> = m
            .pods()
            .filter(|p| p.key.namespace == name)
            .map(|p| p.key.name.clone())
            .collect();
        let had_firewall = m.egress_firewall(&name).is_some();
        let dns_before = crate::core::changes::resolved_names(m);
        let affected = m.delete_namespace(&name)?;
        let mut changes = vec![
            namespace_change(m, &name),
            cursors_change(m),
            egress_change(m),
        ];
        if had_firewall {
            changes.push(crate::state::Change::Delete(
                crate::state::RecordKey::EgressNetworkPolicy(name.clone()),
            ));
            changes.extend(crate::core::changes::dropped_dns_changes(m, &dns_before));
        }
        changes.extend(pods.iter().map(|p| pod_change(m, &name, p)));
        let ev = Event::now(
            "NamespaceDeleted",
            format!("namespace/{name}"),
            format!("namespace {name} deleted"),
        );
        Ok((
            (),
            Effects {
                affected,
                changes,
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// A pod to attach: where it runs and on which OVS port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRequest {
    /// Node.
    pub node: String,
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Host-side OVS port name.
    pub port_name: String,
    /// Its OpenFlow port number ([`attach_pod`] looks up 0 on the switch by `port_name`).
    pub ofport: u32,
}

impl PodRequest {
    /// Checks that need no model: the name, the port name, the ofport range.
    fn validate(&self) -> Result<(), ApiError> {
        let (namespace, name, ofport) = (&self.namespace, &self.name, self.ofport);
        check_name("pod", name)?;
        if self.port_name.is_empty() {
            return Err(ApiError::Invalid(format!(
                "pod {namespace}/{name}: the OVS port name is required"
            )));
        }
        if ofport == 0 || ofport >= ofproto::action::port::MAX {
            return Err(ApiError::Invalid(format!(
                "pod {namespace}/{name}: ofport {ofport} is not a valid OpenFlow port number"
            )));
        }
        Ok(())
    }
}

/// The OpenFlow port number of the port `port_name` on the switch of `node`, as the switch
/// reported it (PORT_DESC, PORT_STATUS). `dpid`, when given, is the datapath id the node is about
/// to have (a Node object in the same manifest); otherwise the model's is used.
pub async fn lookup_ofport(
    core: &CoreHandle,
    node: &str,
    port_name: &str,
    dpid: Option<u64>,
) -> Result<u32, ApiError> {
    let n = node.to_string();
    let (dpid, link) = core
        .read(move |c| {
            let dpid = dpid.or_else(|| c.model.node(&n).map(|i| i.dpid));
            (dpid, dpid.and_then(|d| c.datapath_link(d)))
        })
        .await?;
    let Some(dpid) = dpid else {
        return Err(ApiError::from(ModelError::UnknownNode(node.to_string())));
    };
    let not_connected = || {
        ApiError::Unavailable(format!(
            "cannot look up the OpenFlow port of {port_name:?}: the switch of node {node} (datapath {dpid:#018x}) is not connected"
        ))
    };
    let link = link.ok_or_else(not_connected)?;
    let ports = link.ports().await.map_err(|_| not_connected())?;
    match ports.iter().find(|(name, _)| name == port_name) {
        Some((_, ofport)) if *ofport != 0 && *ofport < ofproto::action::port::MAX => Ok(*ofport),
        Some((_, ofport)) => Err(ApiError::Invalid(format!(
            "port {port_name:?} on the switch of node {node} is OpenFlow port {ofport:#x}, a reserved port, not a pod port"
        ))),
        None => Err(ApiError::NotFound(format!(
            "port {port_name:?} not found on the switch of node {node} (datapath {dpid:#018x}; it has {} ports)",
            ports.len()
        ))),
    }
}

/// Attach a pod: allocate its IP; returns once its switch acknowledged the pod's flows. An
/// ofport of 0 is looked up on the node's switch by the port name.
pub async fn attach_pod(core: &CoreHandle, mut pod: PodRequest) -> Result<PodInfo, ApiError> {
    wait_for_namespace(core, &pod.namespace, NAMESPACE_WAIT).await?;
    resolve_pod_ofport(core, &mut pod).await?;
    pod.validate()?;
    core.mutate(move |m| attach_pod_in(m, &pod)).await
}

/// How long an attach waits for its namespace to arrive from a watched store.
pub const NAMESPACE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// With a watched store (Kubernetes, etcd), waits up to `limit` for `namespace` to be in the
/// model. kubelet starts a pod's sandbox as soon as the Pod is scheduled, often before this
/// replica's watch has brought the Namespace created just before it (as OpenShift SDN's node
/// waits for the NetNamespace's VNID); without the wait the attach failed with "namespace not
/// found" and kubelet retried the sandbox only after its back-off. Returns at once when the
/// namespace is there, when the store is not watched (nothing else creates namespaces), or
/// when the name is not a valid one; the attach itself then reports what is missing.
pub async fn wait_for_namespace(
    core: &CoreHandle,
    namespace: &str,
    limit: std::time::Duration,
) -> Result<(), ApiError> {
    // Without a watched store nothing but this controller creates namespaces: no need to ask
    // the core (a hop to its task and back, per attach).
    if !core.store_is_watched() || check_name("namespace", namespace).is_err() {
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let ns = namespace.to_string();
        let (present, watched) = core
            .read(move |c| (c.model.namespace(&ns).is_some(), c.store_is_watched()))
            .await?;
        if present || !watched || tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An ofport of 0 is looked up on the node's switch by the pod's port name.
pub async fn resolve_pod_ofport(core: &CoreHandle, pod: &mut PodRequest) -> Result<(), ApiError> {
    if pod.ofport == 0 && !pod.port_name.is_empty() {
        check_name("pod", &pod.name)?;
        // A missing namespace is the first thing to report, as when the ofport is given.
        let ns = pod.namespace.clone();
        if !core.read(move |c| c.model.namespace(&ns).is_some()).await? {
            return Err(ApiError::from(ModelError::UnknownNamespace(
                pod.namespace.clone(),
            )));
        }
        pod.ofport = lookup_ofport(core, &pod.node, &pod.port_name, None).await?;
    }
    Ok(())
}

/// The model side of [`attach_pod`]; the pod's node must acknowledge.
pub fn attach_pod_in(
    m: &mut ClusterModel,
    pod: &PodRequest,
) -> Result<(PodInfo, Effects), ApiError> {
    pod.validate()?;
    let PodRequest {
        node,
        namespace,
        name,
        port_name,
        ofport,
    } = pod;
    if m.namespace(namespace).is_none() {
        return Err(ApiError::from(ModelError::UnknownNamespace(
            namespace.clone(),
        )));
    }
    let (info, affected) = m.add_pod(PodAttach {
        namespace,
        name,
        node,
        port_name,
        ofport: *ofport,
    })?;
    let ev = Event::now(
        "PodAttached",
        format!("pod/{namespace}/{name}"),
        format!(
            "pod {namespace}/{name} on {node} port {port_name} (ofport {ofport}) has IP {}",
            info.ip
        ),
    );
    let changes = vec![pod_change(m, namespace, name), node_change(m, node)];
    let undo = undo_attach(info.clone());
    Ok((
        info,
        Effects {
            affected,
            changes,
            require_connected: Some(node.clone()),
            undo: Some(undo),
            events: vec![ev],
        },
    ))
}

/// Takes back the attach of `attached` when its switch cannot take the pod's flows, if the pod
/// is still the one attached (same node, port and IP).
fn undo_attach(attached: PodInfo) -> Undo {
    Box::new(move |m| {
        let PodInfo { key, node, .. } = &attached;
        let (ns, name) = (key.namespace.as_str(), key.name.as_str());
        let same = m.pod(ns, name).is_some_and(|p| {
            p.node == attached.node && p.ofport == attached.ofport && p.ip == attached.ip
        });
        if !same {
            return Err(ApiError::FailedPrecondition(format!(
                "pod {ns}/{name} was changed meanwhile"
            )));
        }
        let affected = m.delete_pod(ns, name)?;
        Ok(Effects {
            affected,
            changes: vec![pod_change(m, ns, name), node_change(m, node)],
            require_connected: None,
            undo: None,
            events: Vec::new(),
        })
    })
}

/// Detach a pod and free its IP; Ok(false) when there was no such pod, or when `port` is
/// given and the pod is attached on another port (the DEL of an earlier sandbox of the same
/// pod name: the current attachment stays).
pub async fn detach_pod(
    core: &CoreHandle,
    namespace: String,
    name: String,
    port: Option<String>,
) -> Result<bool, ApiError> {
    core.mutate(move |m| {
        let Some((node, attached_on)) = m
            .pod(&namespace, &name)
            .map(|p| (p.node.clone(), p.port_name.clone()))
        else {
            return Ok((false, Effects::default()));
        };
        if let Some(port) = port.as_deref().filter(|p| !p.is_empty()) {
            if port != attached_on {
                tracing::info!(
                    pod = %format!("{namespace}/{name}"),
                    port,
                    attached_on,
                    "detach of another sandbox's port: the pod's attachment stays"
                );
                return Ok((false, Effects::default()));
            }
        }
        let affected = m.delete_pod(&namespace, &name)?;
        let ev = Event::now(
            "PodDetached",
            format!("pod/{namespace}/{name}"),
            format!("pod {namespace}/{name} detached"),
        );
        let changes = vec![pod_change(m, &namespace, &name), node_change(m, &node)];
        Ok((
            true,
            Effects {
                affected,
                changes,
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// What a NETID operation does.
#[derive(Clone, Debug)]
pub enum NetIdOp {
    /// Give the namespaces the NETID of `to`.
    Join { to: String },
    /// Give each namespace a fresh NETID.
    Isolate,
    /// Give the namespaces NETID 0.
    Global,
}

/// Join, isolate or make global; returns the namespaces' new NETIDs.
pub async fn netid_op(
    core: &CoreHandle,
    op: NetIdOp,
    names: Vec<String>,
) -> Result<Vec<NamespaceInfo>, ApiError> {
    if names.is_empty() {
        return Err(ApiError::Invalid("name at least one namespace".into()));
    }
    core.mutate(move |m| netid_op_in(m, &op, &names)).await
}

/// The model side of [`netid_op`].
pub fn netid_op_in(
    m: &mut ClusterModel,
    op: &NetIdOp,
    names: &[String],
) -> Result<(Vec<NamespaceInfo>, Effects), ApiError> {
    {
        for n in names.iter() {
            if m.namespace(n).is_none() {
                return Err(ApiError::from(ModelError::UnknownNamespace(n.clone())));
            }
        }
        let before = m.clone();
        let mut affected = topology::Affected::none();
        let result: Result<(), Box<ModelError>> = (|| {
            match op {
                NetIdOp::Join { to } => {
                    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    affected.merge(m.join(&refs, to).map_err(Box::new)?);
                }
                NetIdOp::Isolate => {
                    for n in names {
                        affected.merge(m.isolate(n).map_err(Box::new)?);
                    }
                }
                NetIdOp::Global => {
                    for n in names {
                        affected.merge(m.make_global(n).map_err(Box::new)?);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            *m = before;
            return Err(ApiError::from(*e));
        }
        let infos: Vec<NamespaceInfo> = names.iter().filter_map(|n| m.namespace(n)).collect();
        let mut changes: Vec<_> = names.iter().map(|n| namespace_change(m, n)).collect();
        changes.push(cursors_change(m));
        let what = match op {
            NetIdOp::Join { to } => format!("joined to {to}"),
            NetIdOp::Isolate => "isolated".to_string(),
            NetIdOp::Global => "made global".to_string(),
        };
        let events = infos
            .iter()
            .map(|i| {
                Event::now(
                    "NetIdChanged",
                    format!("netnamespace/{}", i.name),
                    format!("namespace {} {what}: NETID {}", i.name, i.netid),
                )
            })
            .collect();
        Ok((
            infos,
            Effects {
                affected,
                changes,
                require_connected: None,
                undo: None,
                events,
            },
        ))
    }
}

/// Names follow Kubernetes' DNS-1123 label/subdomain rules (lower-case, digits, '-', '.').
pub fn check_name(kind: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name
            .as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .as_bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::Invalid(format!(
            "{kind} name {name:?} is invalid: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
        )))
    }
}

/// The one annotation `key` that a `kind` keeps, as an annotate request asks it: `Some(value)`
/// to set it, `None` to remove it; or why the request is refused (nothing given, another key,
/// the key both set and removed). `keeps` follows "is not one flowmesh keeps" in the message.
pub fn single_annotation<'a>(
    kind: &str,
    name: &str,
    key: &str,
    keeps: &str,
    r: &'a pa::AnnotateRequest,
) -> Result<Option<&'a str>, ApiError> {
    if r.set.is_empty() && r.remove.is_empty() {
        return Err(ApiError::Invalid(format!(
            "{kind} {name}: no annotations given (KEY=VALUE to set, KEY- to remove)"
        )));
    }
    if let Some(k) = r
        .set
        .keys()
        .chain(r.remove.iter())
        .find(|k| k.as_str() != key)
    {
        return Err(ApiError::Invalid(format!(
            "{kind} {name}: annotation {k:?} is not one flowmesh keeps{keeps} (it keeps {key})"
        )));
    }
    match (r.set.get(key), r.remove.is_empty()) {
        (Some(_), false) => Err(ApiError::Invalid(format!(
            "{kind} {name}: annotation {key:?} is both set and removed"
        ))),
        (Some(v), true) => Ok(Some(v.as_str())),
        (None, _) => Ok(None),
    }
}
