//! What OpenShift SDN's master does with the cluster's own objects, on the leader (with
//! `--datastore kubernetes`): a HostSubnet (subnet) for every Node with an IPv4 InternalIP, a
//! NetNamespace (NETID) for every Namespace, both released when their object goes; the
//! `pod.network.openshift.io/multitenant.change-network` annotation `oc adm pod-network`
//! writes on a NetNamespace carried out and removed; PodAttachments whose Pod is gone removed
//! (and legacy attachment annotations imported, when asked); and Kubernetes Events for what
//! went wrong (an exhausted range, a refused request, an object flowmesh refuses, a stored
//! record the model leaves out).
//!
//! It reacts to every change of the datastore's cache, and retries what failed every few
//! seconds; it calls the same operations as the admin API.

use crate::core::CoreHandle;
use crate::ha::Leadership;
use crate::resources::nodes::{self as ops, NetIdOp};
use crate::state::kube::{dpid_from_ip, ClusterObjects, KubeStore, CHANGE_NETWORK};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KEvent, EventType, Recorder, Reporter};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use topology::Mode;

/// How often failed reactions are retried without a change.
const RETRY: Duration = Duration::from_secs(5);

/// The model's nodes and namespaces, as the reactions compare them.
struct ModelView {
    nodes: BTreeMap<String, (Ipv4Addr, u64)>,
    namespaces: Vec<String>,
    mode: Mode,
}

/// Run the reactions until `stop`.
pub async fn run(
    core: CoreHandle,
    store: Arc<KubeStore>,
    lead: Arc<Leadership>,
    mut stop: watch::Receiver<bool>,
) {
    let mut changes = store.changes();
    let mut standing = lead.subscribe();
    let events = Events::new(
        store.client(),
        lead.id().unwrap_or_else(|| "flowmesh".into()),
    );
    let mut failed: BTreeMap<String, String> = BTreeMap::new();
    loop {
        if *stop.borrow() {
            return;
        }
        if lead.leads() {
            let objs = store.cluster_objects();
            if objs.synced {
                react(&core, &store, &objs, &events, &mut failed).await;
                tidy_attachments(&store).await;
            }
        }
        tokio::select! {
            _ = changes.changed() => {
                // Let a burst of changes settle into one pass.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ = standing.changed() => {}
            _ = tokio::time::sleep(RETRY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Remove the PodAttachments no Pod owns (and import legacy annotations, when asked).
async fn tidy_attachments(store: &Arc<KubeStore>) {
    let s = store.clone();
    match tokio::task::spawn_blocking(move || s.tidy_attachments()).await {
        Ok(Ok(t)) if t.imported > 0 || t.removed > 0 => {
            tracing::info!(
                imported = t.imported,
                removed = t.removed,
                "pod attachments tidied"
            );
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "tidying pod attachments failed; retried"),
        Err(e) => tracing::warn!(error = %e, "tidying pod attachments stopped"),
    }
}

async fn model_view(core: &CoreHandle) -> Option<ModelView> {
    core.read(|c| ModelView {
        nodes: c
            .model
            .nodes()
            .map(|n| (n.name.clone(), (n.ip, n.dpid)))
            .collect(),
        namespaces: c.model.namespaces().map(|n| n.name).collect(),
        mode: c.model.config().mode,
    })
    .await
    .ok()
}

/// One pass over the objects.
async fn react(
    core: &CoreHandle,
    store: &KubeStore,
    objs: &ClusterObjects,
    events: &Events,
    failed: &mut BTreeMap<String, String>,
) {
    let Some(m) = model_view(core).await else {
        return;
    };
    let mut outcome = |key: String, r: Result<(), String>, reference: ObjectReference| match r {
        Ok(()) => {
            failed.remove(&key);
            None
        }
        Err(e) => {
            if failed.get(&key) == Some(&e) {
                return None;
            }
            tracing::warn!(object = %key, error = %e, "kubernetes: could not carry out");
            failed.insert(key, e.clone());
            Some((reference, e))
        }
    };
    let mut warnings = Vec::new();
    for (name, n) in &objs.nodes {
        let Some(ip) = n.ip else { continue };
        let dpid = match m.nodes.get(name) {
            Some((cur_ip, _)) if *cur_ip == ip => continue,
            Some((_, dpid)) => *dpid,
            None => dpid_from_ip(ip),
        };
        let r = ops::add_node(core, name.clone(), ip, dpid)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        warnings.extend(
            outcome(
                format!("node/{name}"),
                r,
                reference("v1", "Node", None, name),
            )
            .map(|(o, e)| (o, "SubnetAllocationFailed", e)),
        );
    }
    for name in m.nodes.keys() {
        if !objs.nodes.contains_key(name) {
            let r = ops::delete_node(core, name.clone())
                .await
                .map_err(|e| e.to_string());
            warnings.extend(
                outcome(
                    format!("node-delete/{name}"),
                    r,
                    reference("network.openshift.io/v1", "HostSubnet", None, name),
                )
                .map(|(o, e)| (o, "HostSubnetReleaseFailed", e)),
            );
        }
    }
    for name in &objs.namespaces {
        if !m.namespaces.contains(name) {
            let r = ops::create_namespace(core, name.clone())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
            warnings.extend(
                outcome(
                    format!("namespace/{name}"),
                    r,
                    reference("v1", "Namespace", None, name),
                )
                .map(|(o, e)| (o, "NetIDAllocationFailed", e)),
            );
        }
    }
    for name in &m.namespaces {
        if name != "default" && !objs.namespaces.contains(name) {
            let r = ops::delete_namespace(core, name.clone())
                .await
                .map_err(|e| e.to_string());
            warnings.extend(
                outcome(
                    format!("namespace-delete/{name}"),
                    r,
                    reference("network.openshift.io/v1", "NetNamespace", None, name),
                )
                .map(|(o, e)| (o, "NetNamespaceReleaseFailed", e)),
            );
        }
    }
    for (name, value) in &objs.change_network {
        let r = change_network(core, m.mode, name, value).await;
        // The annotation is a request: removed once handled, carried out or refused. Every
        // refused request is reported (a repeated one as the same event's series).
        let removed = remove_annotation(store.client(), name).await;
        if let Err(e) = r.and(removed) {
            tracing::warn!(netnamespace = %name, error = %e, "kubernetes: change-network refused");
            warnings.push((
                reference("network.openshift.io/v1", "NetNamespace", None, name),
                "ChangeNetworkRefused",
                e,
            ));
        }
    }
    // Refused objects and stored records the model left out, each reported once per reason;
    // a fixed one is forgotten, so that breaking it again is reported again.
    let mut refused_now = BTreeMap::new();
    let refusals = store.refusals();
    core.metrics.kube_objects_refused.set(refusals.len() as u64);
    for (o, why) in refusals {
        let key = format!(
            "refused/{}/{}/{}",
            o.kind.as_deref().unwrap_or_default(),
            o.namespace.as_deref().unwrap_or_default(),
            o.name.as_deref().unwrap_or_default()
        );
        if failed.get(&key) != Some(&why) {
            warnings.push((o, "Refused", why.clone()));
        }
        refused_now.insert(key, why);
    }
    let left_out = core
        .read(|c| c.refused_records().clone())
        .await
        .unwrap_or_default();
    for (record, why) in left_out {
        let key = format!("left-out/{record}");
        if failed.get(&key) != Some(&why) {
            warnings.push((reference_of_record(&record, &why), "Refused", why.clone()));
        }
        refused_now.insert(key, why);
    }
    failed.retain(|k, _| !k.starts_with("refused/") && !k.starts_with("left-out/"));
    failed.extend(refused_now);
    for (o, reason, note) in warnings {
        events.warn(&o, reason, &note).await;
    }
}

/// Carry out one change-network request (`join:OTHER`, `isolate`, `global`).
async fn change_network(
    core: &CoreHandle,
    mode: Mode,
    name: &str,
    value: &str,
) -> Result<(), String> {
    if mode != Mode::Multitenant {
        return Err(format!(
            "{CHANGE_NETWORK}={value:?} on {name}: joining, isolating and making projects global needs the multitenant mode (the cluster runs {mode:?})"
        ));
    }
    let op = match value {
        "isolate" | "isolate:" => NetIdOp::Isolate,
        "global" | "global:" => NetIdOp::Global,
        v => match v.strip_prefix("join:") {
            Some(other) if !other.is_empty() => NetIdOp::Join {
                to: other.to_string(),
            },
            _ => {
                return Err(format!(
                    "{CHANGE_NETWORK}={value:?} on {name}: expected join:PROJECT, isolate or global"
                ))
            }
        },
    };
    ops::netid_op(core, op, vec![name.to_string()])
        .await
        .map(|_| ())
        .map_err(|e| format!("{CHANGE_NETWORK}={value:?} on {name}: {e}"))
}

async fn remove_annotation(client: Client, name: &str) -> Result<(), String> {
    let api: Api<kinds::openshift::NetNamespace> = Api::all(client);
    let patch = serde_json::json!({"metadata": {"annotations": {CHANGE_NETWORK: null}}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!("removing {CHANGE_NETWORK} from {name}: {e}")),
    }
}

fn reference(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: namespace.map(str::to_string),
        name: Some(name.into()),
        ..Default::default()
    }
}

/// Kubernetes Events (`events.k8s.io/v1`) for users.
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events reported as `flowmesh-controller`, instance `id`.
    pub fn new(client: Client, id: String) -> Self {
        Events {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "flowmesh-controller".into(),
                    instance: Some(id),
                },
            ),
        }
    }

    /// A Warning event about an object (failures to post are logged, never fatal).
    pub async fn warn(&self, regarding: &ObjectReference, reason: &str, note: &str) {
        let ev = KEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.chars().take(1024).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, regarding).await {
            tracing::debug!(error = %e, "could not post a Kubernetes event");
        }
    }
}

/// The object a record key names (for events about stored changes the model refused).
pub fn reference_of_record(key: &str, message: &str) -> ObjectReference {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["node", n] => reference("network.openshift.io/v1", "HostSubnet", None, n),
        ["namespace", n] => reference("network.openshift.io/v1", "NetNamespace", None, n),
        ["pod", ns, n] => reference("v1", "Pod", Some(ns), n),
        ["networkpolicy", ns, n] => reference("networking.k8s.io/v1", "NetworkPolicy", Some(ns), n),
        ["egressnetworkpolicy", ns] => reference("v1", "Namespace", None, ns),
        _ => {
            // The egress-IP state: the message names the object (`netnamespace/NAME: ...`).
            let named = message.split(':').next().unwrap_or_default();
            match named.split_once('/') {
                Some(("netnamespace", n)) => {
                    reference("network.openshift.io/v1", "NetNamespace", None, n)
                }
                Some(("hostsubnet", n)) => {
                    reference("network.openshift.io/v1", "HostSubnet", None, n)
                }
                _ => reference(
                    "network.openshift.io/v1",
                    "ClusterNetwork",
                    None,
                    crate::state::kube::CLUSTER_NETWORK_NAME,
                ),
            }
        }
    }
}

/// The cluster network config of an OpenShift cluster, from the Cluster Network Operator's
/// `config.openshift.io/v1` Network `cluster` (clusterNetwork, serviceNetwork) and
/// `operator.openshift.io/v1` Network `cluster` (openshiftSDNConfig: mode, vxlanPort, mtu).
/// None: the cluster has no such objects (not OpenShift, or not installed by the CNO).
pub async fn openshift_network_config(
    client: Client,
    base: &topology::ClusterNetworkConfig,
) -> Result<Option<topology::ClusterNetworkConfig>, String> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let get = |group: &str| {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, "v1", "Network"),
            "networks",
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        async move {
            match api.get_opt("cluster").await {
                Ok(o) => Ok(o),
                // The API group itself is absent on plain Kubernetes.
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    let Some(config) = get("config.openshift.io").await? else {
        return Ok(None);
    };
    let operator = get("operator.openshift.io").await?;
    let spec = &config.data["spec"];
    let mut cfg = base.clone();
    if let Some(ranges) = spec["clusterNetwork"].as_array() {
        let mut out = Vec::new();
        for (i, r) in ranges.iter().enumerate() {
            let cidr = r["cidr"].as_str().ok_or_else(|| {
                format!("Network cluster: spec.clusterNetwork[{i}].cidr is missing")
            })?;
            let cidr = cidr.parse().map_err(|e| {
                format!("Network cluster: spec.clusterNetwork[{i}].cidr {cidr:?}: {e}")
            })?;
            let host_prefix = r["hostPrefix"]
                .as_u64()
                .and_then(|p| u8::try_from(p).ok())
                .ok_or_else(|| {
                    format!("Network cluster: spec.clusterNetwork[{i}].hostPrefix is missing")
                })?;
            out.push(topology::ClusterNetworkEntry { cidr, host_prefix });
        }
        if !out.is_empty() {
            cfg.cluster_networks = out;
        }
    }
    if let Some(s) = spec["serviceNetwork"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|v| v.as_str())
    {
        cfg.service_network = s
            .parse()
            .map_err(|e| format!("Network cluster: spec.serviceNetwork {s:?}: {e}"))?;
    }
    if let Some(op) = operator {
        let sdn = &op.data["spec"]["defaultNetwork"]["openshiftSDNConfig"];
        if let Some(m) = sdn["mode"].as_str() {
            cfg.mode = match m {
                "Subnet" => Mode::Subnet,
                "Multitenant" => Mode::Multitenant,
                "NetworkPolicy" => Mode::Networkpolicy,
                other => {
                    return Err(format!(
                        "Network.operator.openshift.io cluster: openshiftSDNConfig.mode {other:?} is not Subnet, Multitenant or NetworkPolicy"
                    ))
                }
            };
        }
        if let Some(p) = sdn["vxlanPort"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
        {
            cfg.vxlan_port = p;
        }
        if let Some(mtu) = sdn["mtu"].as_u64().and_then(|p| u32::try_from(p).ok()) {
            cfg.mtu = mtu;
        }
    }
    cfg.validate()
        .map_err(|e| format!("Network cluster: {e}"))?;
    Ok(Some(cfg))
}
