//! The object writes a batch of record changes becomes (create, replace, merge patch, delete,
//! each with the resourceVersion it was planned on), and carrying one out against the API
//! server (a conflict re-reads the object).

use super::*;

/// One write of an object.
#[allow(clippy::large_enum_variant)] // short-lived, one per object write
pub(super) enum Write {
    HostSubnet(Op<HostSubnet>),
    NetNamespace(Op<NetNamespace>),
    Namespace(Op<Namespace>),
    Pod(Op<Pod>),
    NetworkPolicy(Op<K8sPolicy>),
    EgressNetworkPolicy(Op<EgressNetworkPolicy>),
    ConfigMap(Op<ConfigMap>),
    ClusterNetwork(Op<ClusterNetwork>),
    PodAttachment(Op<PodAttachment>),
}

pub(super) enum Op<T> {
    Create(T),
    Replace(T),
    /// A JSON merge patch carrying the resourceVersion it expects.
    Merge(String, String, serde_json::Value),
    /// Delete by namespace and name (absent is fine).
    Delete(String, String),
    /// Delete by namespace and name if still at this resourceVersion (absent is fine).
    DeleteAt(String, String, String),
}

/// The HostSubnet write that stores a node record (its allocation, datapath id and pod-IP
/// cursor), keeping what else the object holds.
pub(super) fn host_subnet_write(c: &Cache, n: &topology::model::NodeRecord) -> Write {
    let (mut h, exists) = match c.host_subnet(&n.info.name) {
        Some(h) => (h.clone(), true),
        None => (
            HostSubnet {
                metadata: ObjectMeta {
                    name: Some(n.info.name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
            false,
        ),
    };
    h.host = n.info.name.clone();
    h.host_ip = n.info.ip.to_string();
    h.subnet = n.info.subnet.to_string();
    let a = h.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(DPID.into(), format!("{:#018x}", n.info.dpid));
    a.insert(POD_IP_CURSOR.into(), n.pod_ip_cursor.to_string());
    Write::HostSubnet(if exists {
        Op::Replace(h)
    } else {
        Op::Create(h)
    })
}

/// A merge patch of labels from `from` to `to`, expecting resourceVersion `rv`.
pub(super) fn labels_patch(rv: &str, from: &Labels, to: &Labels) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    for (k, v) in to {
        if from.get(k) != Some(v) {
            labels.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    for k in from.keys() {
        if !to.contains_key(k) {
            labels.insert(k.clone(), serde_json::Value::Null);
        }
    }
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), rv.into());
    if !labels.is_empty() {
        meta.insert("labels".into(), labels.into());
    }
    serde_json::json!({ "metadata": meta })
}

pub(super) fn configmap_write(
    c: &Cache,
    ns: &str,
    name: &str,
    kind: &str,
    data: BTreeMap<String, String>,
) -> Write {
    match c.get(Kind::ConfigMap, "", name) {
        Some(Obj::ConfigMap(cur)) => {
            let mut o = (**cur).clone();
            o.data = Some(data);
            Write::ConfigMap(Op::Replace(o))
        }
        _ => Write::ConfigMap(Op::Create(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                labels: Some([(RECORD_LABEL.to_string(), kind.to_string())].into()),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        })),
    }
}

/// Write an egress-IP state into the HostSubnets and NetNamespaces that differ from it.
pub(super) fn egress_writes(c: &Cache, e: &EgressSnapshot, out: &mut Vec<Write>) {
    for (k, o) in c.of_kind(Kind::HostSubnet) {
        let Obj::HostSubnet(h) = o else { continue };
        let want = e.nodes.get(&k.2).cloned().unwrap_or_default();
        let (ips, cidrs): (Vec<String>, Vec<String>) = if want.egress_cidrs.is_empty() {
            (
                want.egress_ips.iter().map(ToString::to_string).collect(),
                Vec::new(),
            )
        } else {
            (
                e.automatic
                    .iter()
                    .filter(|(_, n)| **n == k.2)
                    .map(|(ip, _)| ip.to_string())
                    .collect(),
                want.egress_cidrs.iter().map(ToString::to_string).collect(),
            )
        };
        let ips = (!ips.is_empty()).then_some(ips);
        let cidrs = (!cidrs.is_empty()).then_some(cidrs);
        if h.egress_ips != ips || h.egress_cidrs != cidrs {
            let mut n = (**h).clone();
            n.egress_ips = ips;
            n.egress_cidrs = cidrs;
            out.push(Write::HostSubnet(Op::Replace(n)));
        }
    }
    for (k, o) in c.of_kind(Kind::NetNamespace) {
        let Obj::NetNamespace(nn) = o else { continue };
        let want: Option<Vec<String>> = e
            .namespaces
            .get(&k.2)
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().map(ToString::to_string).collect());
        if nn.egress_ips != want {
            let mut n = (**nn).clone();
            n.egress_ips = want;
            out.push(Write::NetNamespace(Op::Replace(n)));
        }
    }
}

/// A kube client from a kubeconfig file, or inferred (in-cluster, `$KUBECONFIG`).
pub async fn client_for(path: Option<&std::path::Path>) -> Result<Client, StoreError> {
    let config = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                StoreError::Unavailable(format!("--kubeconfig {}: {e}", p.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!("--kubeconfig {}: {e}", p.display()))
                })?
        }
        None => kube::Config::infer().await.map_err(|e| {
            StoreError::Unavailable(format!(
                "no Kubernetes configuration (not in a pod and no kubeconfig; give --kubeconfig): {e}"
            ))
        })?,
    };
    let mut config = config;
    config.connect_timeout = Some(Duration::from_secs(5));
    Client::try_from(config).map_err(|e| StoreError::Unavailable(format!("Kubernetes client: {e}")))
}

/// The back-off between a watch's failed attempts: from 250 ms, doubling, at most 4 s, plus
/// jitter of up to as much again (so at most 8 s). kube-runtime's default (client-go's
/// reflector: from 800 ms to 30 s, each with up to as much jitter again) left a replica
/// listing again 68–78 s after the API server came back: its view stale, and until then no
/// change reached it. Most of that wait turned out to be kube-proxy's, not ours: through the
/// `kubernetes` Service's cluster IP the replicas could not reach the restarted API server until
/// kube-proxy's own watches came back (26–73 s); the Deployment now gives them the server's own
/// address (docs/install.md, step 5), and they list again within 0.1 s. Twelve kinds on three
/// replicas retrying every 4 s are ~9 requests a second to an API server that is down; one that
/// is up answers the first retry.
pub(super) fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(WATCH_BACKOFF_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The longest wait between a watch's attempts (before jitter).
pub(super) const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(4);

/// Follow one kind into the cache until the runtime stops.
///
/// A watch that fails is started over with a fresh list after a back-off ([`watch_backoff`]),
/// as client-go's reflector does, rather than resumed: the kind counts as failing (the store's
/// health, and a standby's right to take the Lease) until a list succeeded, so "not failing"
/// always means "listed or followed without a gap since". (kube-runtime's watcher resumes a
/// failed watch from its last resourceVersion and yields nothing when that works, so a kind
/// whose objects do not change would stay "failing" until one did.)
pub(super) async fn follow<K, F>(
    api: Api<K>,
    cfg: watcher::Config,
    kind: Kind,
    cache: Arc<Mutex<Cache>>,
    to_obj: F,
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    F: Fn(K) -> Option<(ObjKey, Obj)>,
{
    // Reset only after two minutes without a failure (as kube-runtime's default does): a kind
    // whose list works and whose watch fails at once is listed again every few seconds, not
    // four times a second.
    let mut backoff =
        kube::runtime::utils::ResetTimerBackoff::new(watch_backoff(), Duration::from_secs(120));
    let mut listed = false;
    loop {
        let mut stream = watcher(api.clone(), cfg.clone()).boxed();
        let mut init: Option<Vec<(ObjKey, Obj)>> = None;
        while let Some(ev) = stream.next().await {
            let mut c = lock(&cache);
            match ev {
                Ok(e) => match e {
                    watcher::Event::Init => init = Some(Vec::new()),
                    watcher::Event::InitApply(o) => {
                        if let Some(x) = to_obj(o) {
                            init.get_or_insert_with(Vec::new).push(x);
                        }
                    }
                    watcher::Event::InitDone => {
                        if listed {
                            c.counters.relists.inc();
                            tracing::info!(
                                ?kind,
                                "kubernetes: listed again (the watch expired or failed)"
                            );
                        }
                        listed = true;
                        let objs = init.take().unwrap_or_default();
                        c.reset(kind, objs, true);
                        if c.errors.contains_key(&kind) {
                            c.set_error(kind, None);
                        }
                    }
                    watcher::Event::Apply(o) => {
                        if let Some((k, x)) = to_obj(o) {
                            c.set(k, Some(x), true);
                        }
                    }
                    watcher::Event::Delete(o) => {
                        if let Some((k, _)) = to_obj(o) {
                            c.set(k, None, true);
                        }
                    }
                },
                // One event that does not decode (an object the schema lets through but the
                // type refuses): the watch itself goes on, that object stays as it was.
                // kube-client reads such a line as a Status when it can (any JSON object is
                // one): an "API error" with no code, which no API server sends.
                Err(watcher::Error::WatchFailed(e)) if undecodable(&e) => {
                    tracing::warn!(?kind, error = %e, "kubernetes: a watched object does not decode; left as it was");
                }
                Err(e) => {
                    tracing::debug!(?kind, error = %e, "kubernetes watch");
                    c.set_error(kind, Some(e.to_string()));
                    break;
                }
            }
        }
        drop(stream);
        let wait = backoff.next().unwrap_or(WATCH_BACKOFF_MAX);
        tokio::time::sleep(wait).await;
    }
}

/// Whether a watch stream's error is one event that did not decode (the stream goes on).
fn undecodable(e: &kube::Error) -> bool {
    match e {
        kube::Error::SerdeError(_) => true,
        kube::Error::Api(s) => s.code == 0,
        _ => false,
    }
}

/// Carry out one object write; the object as stored after it (None: deleted or absent).
pub(super) async fn execute(
    client: Client,
    w: Write,
) -> Result<Option<(ObjKey, Obj)>, (String, kube::Error)> {
    async fn run<K>(
        api_for: impl Fn(&str) -> Api<K>,
        op: Op<K>,
    ) -> Result<Option<K>, (String, kube::Error)>
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Serialize,
        K::DynamicType: Default,
    {
        let pp = PostParams::default();
        let what = |ns: &str, name: &str| {
            let kind = K::kind(&Default::default()).to_string();
            if ns.is_empty() {
                format!("{kind} {name}")
            } else {
                format!("{kind} {ns}/{name}")
            }
        };
        match op {
            Op::Create(o) => {
                let ns = o.meta().namespace.clone().unwrap_or_default();
                let name = o.meta().name.clone().unwrap_or_default();
                api_for(&ns)
                    .create(&pp, &o)
                    .await
                    .map(Some)
                    .map_err(|e| (format!("create {}", what(&ns, &name)), e))
            }
            Op::Replace(o) => {
                let ns = o.meta().namespace.clone().unwrap_or_default();
                let name = o.meta().name.clone().unwrap_or_default();
                api_for(&ns)
                    .replace(&name, &pp, &o)
                    .await
                    .map(Some)
                    .map_err(|e| (format!("update {}", what(&ns, &name)), e))
            }
            Op::Merge(ns, name, patch) => api_for(&ns)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(Some)
                .map_err(|e| (format!("patch {}", what(&ns, &name)), e)),
            Op::Delete(ns, name) => {
                match api_for(&ns).delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(None),
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err((format!("delete {}", what(&ns, &name)), e)),
                }
            }
            Op::DeleteAt(ns, name, rv) => {
                let dp = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        resource_version: Some(rv),
                        uid: None,
                    }),
                    ..Default::default()
                };
                match api_for(&ns).delete(&name, &dp).await {
                    Ok(_) => Ok(None),
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err((format!("delete {}", what(&ns, &name)), e)),
                }
            }
        }
    }
    let c = client;
    let cluster = |k: Kind, name: Option<String>| name.map(|n| (k, String::new(), n));
    Ok(match w {
        Write::HostSubnet(op) => run(|_| Api::<HostSubnet>::all(c.clone()), op)
            .await?
            .and_then(|h| {
                cluster(Kind::HostSubnet, h.metadata.name.clone())
                    .map(|k| (k, Obj::HostSubnet(Box::new(h))))
            }),
        Write::NetNamespace(op) => run(|_| Api::<NetNamespace>::all(c.clone()), op)
            .await?
            .and_then(|h| {
                cluster(Kind::NetNamespace, h.metadata.name.clone())
                    .map(|k| (k, Obj::NetNamespace(Box::new(h))))
            }),
        Write::ClusterNetwork(op) => run(|_| Api::<ClusterNetwork>::all(c.clone()), op)
            .await?
            .and_then(|h| {
                cluster(Kind::ClusterNetwork, h.metadata.name.clone())
                    .map(|k| (k, Obj::ClusterNetwork(Box::new(h))))
            }),
        Write::Namespace(op) => run(|_| Api::<Namespace>::all(c.clone()), op)
            .await?
            .map(|n| {
                (
                    (Kind::Namespace, String::new(), n.name_any()),
                    Obj::Namespace(ns_view(&n)),
                )
            }),
        Write::Pod(op) => run(|ns| Api::<Pod>::namespaced(c.clone(), ns), op)
            .await?
            .map(|p| {
                (
                    (Kind::Pod, p.namespace().unwrap_or_default(), p.name_any()),
                    Obj::Pod(pod_view(&p)),
                )
            }),
        Write::NetworkPolicy(op) => run(|ns| Api::<K8sPolicy>::namespaced(c.clone(), ns), op)
            .await?
            .map(|p| {
                (
                    (
                        Kind::NetworkPolicy,
                        p.namespace().unwrap_or_default(),
                        p.name_any(),
                    ),
                    Obj::NetworkPolicy(Box::new(p)),
                )
            }),
        Write::EgressNetworkPolicy(op) => run(
            |ns| Api::<EgressNetworkPolicy>::namespaced(c.clone(), ns),
            op,
        )
        .await?
        .map(|p| {
            (
                (
                    Kind::EgressNetworkPolicy,
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                ),
                Obj::EgressNetworkPolicy(Box::new(p)),
            )
        }),
        Write::ConfigMap(op) => run(|ns| Api::<ConfigMap>::namespaced(c.clone(), ns), op)
            .await?
            .map(|m| {
                (
                    (Kind::ConfigMap, String::new(), m.name_any()),
                    Obj::ConfigMap(Box::new(m)),
                )
            }),
        Write::PodAttachment(op) => run(|_| Api::<PodAttachment>::all(c.clone()), op)
            .await?
            .and_then(|a| {
                cluster(Kind::PodAttachment, a.metadata.name.clone())
                    .map(|k| (k, Obj::PodAttachment(Box::new(a))))
            }),
    })
}

impl Write {
    /// The object it writes (to re-read after a conflict, and to drop after a delete).
    pub(super) fn target(&self, own_ns: &str) -> ObjKey {
        fn of<T: kube::Resource>(op: &Op<T>) -> (String, String) {
            match op {
                Op::Create(o) | Op::Replace(o) => (
                    o.meta().namespace.clone().unwrap_or_default(),
                    o.meta().name.clone().unwrap_or_default(),
                ),
                Op::Merge(ns, n, _) | Op::Delete(ns, n) | Op::DeleteAt(ns, n, _) => {
                    (ns.clone(), n.clone())
                }
            }
        }
        let (kind, (ns, name)) = match self {
            Write::HostSubnet(op) => (Kind::HostSubnet, of(op)),
            Write::NetNamespace(op) => (Kind::NetNamespace, of(op)),
            Write::Namespace(op) => (Kind::Namespace, of(op)),
            Write::Pod(op) => (Kind::Pod, of(op)),
            Write::NetworkPolicy(op) => (Kind::NetworkPolicy, of(op)),
            Write::EgressNetworkPolicy(op) => (Kind::EgressNetworkPolicy, of(op)),
            Write::ConfigMap(op) => (Kind::ConfigMap, of(op)),
            Write::ClusterNetwork(op) => (Kind::ClusterNetwork, of(op)),
            Write::PodAttachment(op) => (Kind::PodAttachment, of(op)),
        };
        // flowmesh's ConfigMaps are keyed without their (fixed) namespace.
        let ns = if kind == Kind::ConfigMap && ns == own_ns {
            String::new()
        } else {
            ns
        };
        (kind, ns, name)
    }

    pub(super) fn is_delete(&self) -> bool {
        fn del<T>(op: &Op<T>) -> bool {
            matches!(op, Op::Delete(..) | Op::DeleteAt(..))
        }
        match self {
            Write::HostSubnet(op) => del(op),
            Write::NetNamespace(op) => del(op),
            Write::Namespace(op) => del(op),
            Write::Pod(op) => del(op),
            Write::NetworkPolicy(op) => del(op),
            Write::EgressNetworkPolicy(op) => del(op),
            Write::ConfigMap(op) => del(op),
            Write::ClusterNetwork(op) => del(op),
            Write::PodAttachment(op) => del(op),
        }
    }
}

/// Read one object afresh (after a conflict).
pub(super) async fn reread(
    client: Client,
    own_ns: String,
    k: ObjKey,
) -> Result<Option<Obj>, kube::Error> {
    let (kind, ns, name) = k;
    let ns = if kind == Kind::ConfigMap { own_ns } else { ns };
    Ok(match kind {
        Kind::HostSubnet => Api::<HostSubnet>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::HostSubnet(Box::new(o))),
        Kind::NetNamespace => Api::<NetNamespace>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::NetNamespace(Box::new(o))),
        Kind::ClusterNetwork => Api::<ClusterNetwork>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::ClusterNetwork(Box::new(o))),
        Kind::Namespace => Api::<Namespace>::all(client)
            .get_opt(&name)
            .await?
            .map(|n| Obj::Namespace(ns_view(&n))),
        Kind::Node => Api::<Node>::all(client)
            .get_opt(&name)
            .await?
            .map(|n| Obj::Node(node_view(&n))),
        Kind::Pod => Api::<Pod>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|p| Obj::Pod(pod_view(&p))),
        Kind::NetworkPolicy => Api::<K8sPolicy>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|o| Obj::NetworkPolicy(Box::new(o))),
        Kind::EgressNetworkPolicy => Api::<EgressNetworkPolicy>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|o| Obj::EgressNetworkPolicy(Box::new(o))),
        Kind::ConfigMap => Api::<ConfigMap>::namespaced(client, &ns)
            .get_opt(&name)
            .await?
            .map(|o| Obj::ConfigMap(Box::new(o))),
        Kind::PodAttachment => Api::<PodAttachment>::all(client)
            .get_opt(&name)
            .await?
            .map(|o| Obj::PodAttachment(Box::new(o))),
    })
}

/// Why a write failed.
pub(super) enum WriteError {
    Conflict(String),
    Other(StoreError),
}

pub(super) fn api_error(what: &str, e: kube::Error) -> WriteError {
    match &e {
        kube::Error::Api(s) if s.code == 409 => {
            WriteError::Conflict(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 404 => WriteError::Other(StoreError::Refused(format!(
            "{what}: not found in the Kubernetes API ({})",
            s.message
        ))),
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => WriteError::Other(
            StoreError::Refused(format!("{what}: the API server refused it: {}", s.message)),
        ),
        _ => WriteError::Other(StoreError::Unavailable(format!(
            "Kubernetes API server: {what}: {e}"
        ))),
    }
}

pub(super) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_watch_retries_within_seconds_and_starts_over_after_a_reset() {
        use kube::runtime::utils::Backoff;
        let mut b = watch_backoff();
        let delays: Vec<Duration> = (&mut b).take(12).collect();
        // 250 ms doubling to at most 4 s; jitter adds up to as much again.
        for (i, d) in delays.iter().enumerate() {
            let base = (Duration::from_millis(250) * 2u32.pow(i as u32)).min(WATCH_BACKOFF_MAX);
            assert!(*d >= base && *d <= 2 * base, "attempt {i}: {delays:?}");
        }
        b.reset();
        assert!(b.next().expect("a delay") < Duration::from_millis(500));
    }

    #[test]
    fn a_node_record_round_trips_through_its_host_subnet() {
        let n = topology::model::NodeRecord {
            info: NodeInfo {
                name: "node-a".into(),
                ip: Ipv4Addr::new(172, 31, 0, 1),
                dpid: 0xac1f_0001,
                subnet: "10.128.2.0/23".parse().expect("cidr"),
            },
            pod_ip_cursor: 7,
        };
        let Write::HostSubnet(Op::Create(h)) = host_subnet_write(&Cache::default(), &n) else {
            panic!("expected a HostSubnet create");
        };
        assert_eq!(node_record(&h), Ok(n));
    }

    #[test]
    fn labels_patch_sets_changed_and_removes_dropped() {
        let from: Labels = [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        let to: Labels = [("a".into(), "1".into()), ("c".into(), "3".into())].into();
        let p = labels_patch("7", &from, &to);
        assert_eq!(
            p,
            serde_json::json!({"metadata": {"resourceVersion": "7", "labels": {"b": null, "c": "3"}}})
        );
    }
}
