//! The Kubernetes datastore's [`KubeStore`]: the watchers that fill the cache, the records
//! derived from it, and the [`StateBackend`] it implements (writes planned from the cache).

use super::attachments::attachment_spec;
use super::writes::*;
use super::*;

/// The Kubernetes datastore.
pub struct KubeStore {
    rt: Option<tokio::runtime::Runtime>,
    pub(super) client: Client,
    pub(super) cfg: KubeConfig,
    pub(super) cache: Arc<Mutex<Cache>>,
    changed: tokio::sync::watch::Receiver<u64>,
    fence: crate::state::Fence,
}

impl Drop for KubeStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl KubeStore {
    /// Connect and start following every kind (the first listing shows in [`StateBackend::list`]).
    pub fn connect(cfg: KubeConfig) -> Result<Self, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kube")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("kubernetes client runtime: {e}")))?;
        let path = cfg.kubeconfig.clone();
        let client = rt.block_on(async move { client_for(path.as_deref()).await })?;
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let cache = Arc::new(Mutex::new(Cache {
            changed: Some(tx),
            import_annotations: cfg.import_attachment_annotations,
            ..Default::default()
        }));
        let store = KubeStore {
            rt: Some(rt),
            client,
            cfg,
            cache,
            changed,
            fence: crate::state::Fence::default(),
        };
        store.start_watches()?;
        Ok(store)
    }

    /// The store's relist and write-conflict counters (rendered by the metrics).
    pub fn counters(&self) -> Arc<crate::observe::metrics::KubeCounters> {
        lock(&self.cache).counters.clone()
    }

    /// The client (for the leader election and the master's reactions).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The namespace of the controller's own objects.
    pub fn namespace(&self) -> &str {
        &self.cfg.namespace
    }

    /// The fence the leader election sets while this replica leads.
    pub fn fence(&self) -> crate::state::Fence {
        self.fence.clone()
    }

    /// Nodes, Namespaces and pending change-network requests, as the cache holds them now.
    pub fn cluster_objects(&self) -> ClusterObjects {
        let c = lock(&self.cache);
        let mut out = ClusterObjects {
            synced: c.all_synced(),
            ..Default::default()
        };
        for (k, o) in &c.objs {
            match o {
                Obj::Node(v) => {
                    out.nodes.insert(k.2.clone(), v.clone());
                }
                Obj::Namespace(_) => {
                    out.namespaces.insert(k.2.clone());
                }
                Obj::NetNamespace(n) => {
                    if let Some(v) = annotation(&n.metadata, CHANGE_NETWORK) {
                        out.change_network.insert(k.2.clone(), v.to_string());
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The objects flowmesh refuses (an invalid NetworkPolicy, an unparsable HostSubnet, ...):
    /// a reference to each and why.
    pub fn refusals(&self) -> Vec<(k8s_openapi::api::core::v1::ObjectReference, String)> {
        let c = lock(&self.cache);
        c.refused
            .iter()
            .map(|((kind, ns, name), why)| {
                let (api_version, k) = match kind {
                    Kind::Node => ("v1", "Node"),
                    Kind::Namespace => ("v1", "Namespace"),
                    Kind::Pod => ("v1", "Pod"),
                    Kind::HostSubnet => ("network.openshift.io/v1", "HostSubnet"),
                    Kind::NetNamespace => ("network.openshift.io/v1", "NetNamespace"),
                    Kind::ClusterNetwork => ("network.openshift.io/v1", "ClusterNetwork"),
                    Kind::NetworkPolicy => ("networking.k8s.io/v1", "NetworkPolicy"),
                    Kind::EgressNetworkPolicy => ("network.openshift.io/v1", "EgressNetworkPolicy"),
                    Kind::ConfigMap => ("v1", "ConfigMap"),
                    Kind::PodAttachment => ("flowmesh.io/v1", "PodAttachment"),
                };
                let ns = match (kind, ns.is_empty()) {
                    (Kind::ConfigMap, _) => Some(self.cfg.namespace.clone()),
                    (_, true) => None,
                    (_, false) => Some(ns.clone()),
                };
                (
                    k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some(api_version.into()),
                        kind: Some(k.into()),
                        namespace: ns,
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    why.clone(),
                )
            })
            .collect()
    }

    /// Whether this replica's view of the API server is current: every kind listed and no
    /// watch failing. A watch that failed holds what it saw before the failure until it lists
    /// again (after its back-off): a replica in that state must not take the lead, or it would
    /// program the switches from a stale view (e.g. delete the flows of pods made meanwhile).
    pub fn view_is_current(&self) -> bool {
        self.view_problem().is_none()
    }

    /// Wakes up whenever an object changed.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.clone()
    }

    /// Run one API request `f` on the store's runtime and wait for it, at most
    /// [`REQUEST_TIMEOUT`] (a hung API server must not hold the core up).
    pub(super) fn block<F>(&self, f: F) -> Result<F::Output, StoreError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let bounded = tokio::time::timeout(REQUEST_TIMEOUT, f);
        crate::state::run_on(self.rt.as_ref(), "kubernetes client", bounded)?.map_err(|_| {
            StoreError::Unavailable(format!(
                "Kubernetes API server: no answer within {} s",
                REQUEST_TIMEOUT.as_secs()
            ))
        })
    }

    fn start_watches(&self) -> Result<(), StoreError> {
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("kubernetes client stopped".into()))?;
        let c = self.client.clone();
        let cache = self.cache.clone();
        let ns = self.cfg.namespace.clone();
        let cfg = watcher::Config::default();
        rt.spawn(follow(
            Api::<Node>::all(c.clone()),
            cfg.clone(),
            Kind::Node,
            cache.clone(),
            |n: Node| {
                Some((
                    (Kind::Node, String::new(), n.name_any()),
                    Obj::Node(node_view(&n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<Namespace>::all(c.clone()),
            cfg.clone(),
            Kind::Namespace,
            cache.clone(),
            |n: Namespace| {
                Some((
                    (Kind::Namespace, String::new(), n.name_any()),
                    Obj::Namespace(ns_view(&n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<Pod>::all(c.clone()),
            cfg.clone(),
            Kind::Pod,
            cache.clone(),
            |p: Pod| {
                let ns = p.namespace().unwrap_or_default();
                Some(((Kind::Pod, ns, p.name_any()), Obj::Pod(pod_view(&p))))
            },
        ));
        rt.spawn(follow(
            Api::<HostSubnet>::all(c.clone()),
            cfg.clone(),
            Kind::HostSubnet,
            cache.clone(),
            |h: HostSubnet| {
                let name = h.metadata.name.clone()?;
                Some((
                    (Kind::HostSubnet, String::new(), name),
                    Obj::HostSubnet(Box::new(h)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<NetNamespace>::all(c.clone()),
            cfg.clone(),
            Kind::NetNamespace,
            cache.clone(),
            |n: NetNamespace| {
                let name = n.metadata.name.clone()?;
                Some((
                    (Kind::NetNamespace, String::new(), name),
                    Obj::NetNamespace(Box::new(n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<ClusterNetwork>::all(c.clone()),
            cfg.clone(),
            Kind::ClusterNetwork,
            cache.clone(),
            |n: ClusterNetwork| {
                let name = n.metadata.name.clone()?;
                Some((
                    (Kind::ClusterNetwork, String::new(), name),
                    Obj::ClusterNetwork(Box::new(n)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<K8sPolicy>::all(c.clone()),
            cfg.clone(),
            Kind::NetworkPolicy,
            cache.clone(),
            |p: K8sPolicy| {
                let ns = p.namespace().unwrap_or_default();
                Some((
                    (Kind::NetworkPolicy, ns, p.name_any()),
                    Obj::NetworkPolicy(Box::new(p)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<EgressNetworkPolicy>::all(c.clone()),
            cfg.clone(),
            Kind::EgressNetworkPolicy,
            cache.clone(),
            |p: EgressNetworkPolicy| {
                let ns = p.namespace().unwrap_or_default();
                Some((
                    (Kind::EgressNetworkPolicy, ns, p.name_any()),
                    Obj::EgressNetworkPolicy(Box::new(p)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<PodAttachment>::all(c.clone()),
            cfg.clone(),
            Kind::PodAttachment,
            cache.clone(),
            |a: PodAttachment| {
                let name = a.metadata.name.clone()?;
                Some((
                    (Kind::PodAttachment, String::new(), name),
                    Obj::PodAttachment(Box::new(a)),
                ))
            },
        ));
        rt.spawn(follow(
            Api::<ConfigMap>::namespaced(c, &ns),
            cfg.labels(RECORD_LABEL),
            Kind::ConfigMap,
            cache,
            |m: ConfigMap| {
                Some((
                    (Kind::ConfigMap, String::new(), m.name_any()),
                    Obj::ConfigMap(Box::new(m)),
                ))
            },
        ));
        Ok(())
    }

    /// Wait until every kind has been listed once.
    fn wait_synced(&self) -> Result<(), StoreError> {
        let deadline = Instant::now() + self.cfg.sync_timeout;
        loop {
            {
                let c = lock(&self.cache);
                if c.all_synced() {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    let missing = c.unlisted();
                    let errors = c.failing();
                    return Err(StoreError::Unavailable(format!(
                        "Kubernetes API server: could not list {} within {:?}{}",
                        missing.join(", "),
                        self.cfg.sync_timeout,
                        if errors.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", errors.join("; "))
                        }
                    )));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The object writes that store one change, planned from the cache (empty: the objects
    /// already say it).
    fn plan(&self, c: &mut Cache, change: &Change) -> Result<Vec<Write>, StoreError> {
        // Nothing to write when the objects already say it.
        let key = change.key();
        let now = c.derive(&key);
        match change {
            Change::Put(r) if now.as_ref() == Some(r) => return Ok(vec![]),
            Change::Delete(_) if now.is_none() && key != RecordKey::EgressIps => return Ok(vec![]),
            _ => {}
        }
        let ns = self.cfg.namespace.clone();
        let mut out = Vec::new();
        match change {
            Change::Put(Record::ClusterNetwork(cfg)) => {
                let mut o = cluster_network_object(cfg);
                match c.get(Kind::ClusterNetwork, "", CLUSTER_NETWORK_NAME) {
                    Some(Obj::ClusterNetwork(cur)) => {
                        o.metadata = cur.metadata.clone();
                        out.push(Write::ClusterNetwork(Op::Replace(o)));
                    }
                    _ => out.push(Write::ClusterNetwork(Op::Create(o))),
                }
            }
            Change::Put(Record::Node(n)) => {
                // Nodes are the API's: a HostSubnet is made for a Node, not for a name.
                if c.host_subnet(&n.info.name).is_none()
                    && c.get(Kind::Node, "", &n.info.name).is_none()
                {
                    return Err(StoreError::Refused(format!(
                        "node {}: there is no Kubernetes Node of that name; with the kubernetes datastore nodes come from the API server (their HostSubnets are made for them)",
                        n.info.name
                    )));
                }
                out.push(host_subnet_write(c, n))
            }
            Change::Delete(RecordKey::Node(n)) => {
                out.push(Write::HostSubnet(Op::Delete(String::new(), n.clone())));
            }
            Change::Put(Record::Namespace(info)) => {
                if c.net_namespace(&info.name).is_none()
                    && info.name != "default"
                    && c.get(Kind::Namespace, "", &info.name).is_none()
                {
                    return Err(StoreError::Refused(format!(
                        "namespace {0}: there is no Kubernetes Namespace of that name; with the kubernetes datastore namespaces come from the API server (kubectl create namespace {0})",
                        info.name
                    )));
                }
                let (mut nn, exists) = match c.net_namespace(&info.name) {
                    Some(n) => (n.clone(), true),
                    None => (
                        NetNamespace {
                            metadata: ObjectMeta {
                                name: Some(info.name.clone()),
                                ..Default::default()
                            },
                            ..Default::default()
                        },
                        false,
                    ),
                };
                let before = nn.clone();
                nn.netname = info.name.clone();
                nn.netid = Some(info.netid);
                let a = nn.metadata.annotations.get_or_insert_with(Default::default);
                if info.multicast {
                    a.insert(MULTICAST_ANNOTATION.into(), "true".into());
                } else {
                    a.remove(MULTICAST_ANNOTATION);
                }
                if nn
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.is_empty())
                {
                    nn.metadata.annotations =
                        before.metadata.annotations.clone().filter(|a| a.is_empty());
                }
                if !exists {
                    out.push(Write::NetNamespace(Op::Create(nn)));
                } else if nn != before {
                    out.push(Write::NetNamespace(Op::Replace(nn)));
                }
                // Labels live on the Namespace: a new NetNamespace takes them from there (as
                // a first attachment takes a Pod's), only an existing one's are edited.
                let cur = match c.get(Kind::Namespace, "", &info.name) {
                    Some(Obj::Namespace(v)) => Some(v.clone()),
                    _ => None,
                };
                match cur {
                    Some(_) if !exists => {}
                    Some(v) if v.labels != info.labels || acl_differs(&v, info) => {
                        let mut patch = labels_patch(&v.rv, &v.labels, &info.labels);
                        if acl_differs(&v, info) {
                            let value = match info.acl_logging {
                                Some(a) => serde_json::Value::String(a.to_annotation()),
                                None => serde_json::Value::Null,
                            };
                            patch["metadata"]["annotations"] =
                                serde_json::json!({ ACL_LOGGING_ANNOTATION: value });
                        }
                        out.push(Write::Namespace(Op::Merge(
                            String::new(),
                            info.name.clone(),
                            patch,
                        )));
                    }
                    None if !info.labels.is_empty() => {
                        return Err(StoreError::Refused(format!(
                            "namespace {}: there is no Kubernetes Namespace to hold its labels",
                            info.name
                        )))
                    }
                    _ => {}
                }
            }
            Change::Delete(RecordKey::Namespace(n)) => {
                out.push(Write::NetNamespace(Op::Delete(String::new(), n.clone())));
            }
            Change::Put(Record::Pod(p)) => {
                let (pns, pname) = (&p.info.key.namespace, &p.info.key.name);
                let Some(Obj::Pod(v)) = c.get(Kind::Pod, pns, pname) else {
                    return Err(StoreError::Refused(format!(
                        "pod {pns}/{pname} is not in the Kubernetes API: flowmesh attaches only pods the API server has"
                    )));
                };
                // The scheduler's binding decides where a pod may be attached.
                if v.node_name.as_deref() != Some(p.info.node.as_str()) {
                    return Err(StoreError::Refused(format!(
                        "pod {pns}/{pname} is bound to {} (spec.nodeName), not to node {:?}: a pod is attached only on its own node",
                        v.node_name.as_deref().map_or("no node".to_string(), |n| format!("node {n:?}")),
                        p.info.node
                    )));
                }
                let spec = attachment_spec(p, &v.uid);
                let attached = c.records.contains_key(&key);
                match c.pod_attachment(pns, pname) {
                    Some(cur) if cur.spec == spec => {}
                    Some(cur) => {
                        let mut o = cur.clone();
                        o.spec = spec;
                        out.push(Write::PodAttachment(Op::Replace(o)));
                    }
                    None => out.push(Write::PodAttachment(Op::Create(PodAttachment::new(
                        &attachment_name(pns, pname),
                        spec,
                    )))),
                }
                // The Pod's labels are the API's: a first attachment takes them from there,
                // and only an attached pod's labels are edited through flowmesh.
                if attached && v.labels != p.info.labels {
                    out.push(Write::Pod(Op::Merge(
                        pns.clone(),
                        pname.clone(),
                        labels_patch(&v.rv, &v.labels, &p.info.labels),
                    )));
                }
            }
            Change::Delete(RecordKey::Pod(pns, pname)) => {
                if c.pod_attachment(pns, pname).is_some() {
                    out.push(Write::PodAttachment(Op::Delete(
                        String::new(),
                        attachment_name(pns, pname),
                    )));
                }
                // An imported legacy annotation goes with the record it held.
                if let Some(Obj::Pod(v)) = c.get(Kind::Pod, pns, pname) {
                    if v.attachment.is_some() && self.cfg.import_attachment_annotations {
                        out.push(Write::Pod(Op::Merge(
                            pns.clone(),
                            pname.clone(),
                            serde_json::json!({"metadata": {
                                "resourceVersion": v.rv,
                                "annotations": {ATTACHMENT: null}}}),
                        )));
                    }
                }
            }
            Change::Put(Record::NetworkPolicy(p)) => {
                let mut o = kinds::netpol::to_k8s(p);
                match c.get(Kind::NetworkPolicy, &p.namespace, &p.name) {
                    Some(Obj::NetworkPolicy(cur)) => {
                        o.metadata = cur.metadata.clone();
                        out.push(Write::NetworkPolicy(Op::Replace(o)));
                    }
                    _ => {
                        o.metadata = ObjectMeta {
                            name: Some(p.name.clone()),
                            namespace: Some(p.namespace.clone()),
                            ..Default::default()
                        };
                        out.push(Write::NetworkPolicy(Op::Create(o)));
                    }
                }
            }
            Change::Delete(RecordKey::NetworkPolicy(pns, pname)) => {
                out.push(Write::NetworkPolicy(Op::Delete(pns.clone(), pname.clone())));
            }
            Change::Put(Record::EgressNetworkPolicy(f)) => {
                let spec = firewall_spec(f);
                let existing: Vec<(String, EgressNetworkPolicy)> = c
                    .of_kind(Kind::EgressNetworkPolicy)
                    .filter(|(k, _)| k.1 == f.namespace)
                    .filter_map(|(k, o)| match o {
                        Obj::EgressNetworkPolicy(p) => Some((k.2.clone(), (**p).clone())),
                        _ => None,
                    })
                    .collect();
                let mut same = None;
                for (name, o) in existing {
                    if name == f.name {
                        same = Some(o);
                    } else {
                        out.push(Write::EgressNetworkPolicy(Op::Delete(
                            f.namespace.clone(),
                            name,
                        )));
                    }
                }
                match same {
                    Some(mut o) => {
                        o.spec = spec;
                        out.push(Write::EgressNetworkPolicy(Op::Replace(o)));
                    }
                    None => {
                        let mut o = EgressNetworkPolicy::new(&f.name, spec);
                        o.metadata.namespace = Some(f.namespace.clone());
                        out.push(Write::EgressNetworkPolicy(Op::Create(o)));
                    }
                }
            }
            Change::Delete(RecordKey::EgressNetworkPolicy(pns)) => {
                for (k, _) in c.of_kind(Kind::EgressNetworkPolicy) {
                    if &k.1 == pns {
                        out.push(Write::EgressNetworkPolicy(Op::Delete(
                            pns.clone(),
                            k.2.clone(),
                        )));
                    }
                }
            }
            Change::Put(Record::Cursors(cur)) => {
                let text = serde_json::to_string(cur)
                    .map_err(|e| StoreError::Transaction(e.to_string()))?;
                out.push(configmap_write(
                    c,
                    &ns,
                    CURSORS_CONFIGMAP,
                    "cursors",
                    [("cursors".to_string(), text)].into(),
                ));
            }
            Change::Delete(RecordKey::Cursors) | Change::Delete(RecordKey::ClusterNetwork) => {}
            Change::Put(Record::EgressDns(d)) => {
                let addrs = serde_json::to_string(&d.addresses)
                    .map_err(|e| StoreError::Transaction(e.to_string()))?;
                out.push(configmap_write(
                    c,
                    &ns,
                    &dns_configmap_name(&d.name),
                    "egress-dns",
                    [
                        ("name".to_string(), d.name.clone()),
                        ("addresses".to_string(), addrs),
                    ]
                    .into(),
                ));
            }
            Change::Delete(RecordKey::EgressDns(name)) => {
                out.push(Write::ConfigMap(Op::Delete(
                    ns.clone(),
                    dns_configmap_name(name),
                )));
            }
            Change::Put(Record::EgressIps(e)) => egress_writes(c, e, &mut out),
            Change::Delete(RecordKey::EgressIps) => {
                egress_writes(c, &EgressSnapshot::default(), &mut out)
            }
        }
        Ok(out)
    }
}

impl KubeStore {
    /// Carry out one object write now and bring the cache up to it (changed records go to
    /// the watchers).
    pub(super) fn write_now(&self, w: Write) -> Result<(), StoreError> {
        let target = w.target(&self.cfg.namespace);
        let delete = w.is_delete();
        match self.block(execute(self.client.clone(), w))? {
            Ok(after) => {
                let mut c = lock(&self.cache);
                match after {
                    Some((k, o)) => {
                        c.set(k, Some(o), true);
                    }
                    None if delete => {
                        c.set(target, None, true);
                    }
                    None => {}
                }
                Ok(())
            }
            Err((what, e)) => match api_error(&what, e) {
                // Changed meanwhile: the next pass looks again.
                WriteError::Conflict(m) => {
                    lock(&self.cache).counters.write_conflicts.inc();
                    tracing::debug!(message = %m, "kubernetes write conflict; left for the next pass");
                    Ok(())
                }
                WriteError::Other(e) => Err(e),
            },
        }
    }

    /// The object as the API server holds it now (None: there is none).
    fn read_fresh(&self, target: &ObjKey) -> Result<Option<Obj>, StoreError> {
        self.block(reread(
            self.client.clone(),
            self.cfg.namespace.clone(),
            target.clone(),
        ))?
        .map_err(|e| StoreError::Unavailable(format!("Kubernetes API server: {e}")))
    }

    /// A pod's attachment needs its Pod; kubelet runs CNI ADD as soon as the Pod is bound, so
    /// this replica's watch may not have brought it yet (seen at load 20: "pod ... is not in
    /// the Kubernetes API" for a Pod created just before). Before refusing, the Pod is read
    /// from the API server itself, which decides.
    fn read_missing_pod(&self, change: &Change) -> Result<(), StoreError> {
        let Change::Put(Record::Pod(p)) = change else {
            return Ok(());
        };
        let (ns, name) = (&p.info.key.namespace, &p.info.key.name);
        if lock(&self.cache).get(Kind::Pod, ns, name).is_some() {
            return Ok(());
        }
        let target: ObjKey = (Kind::Pod, ns.clone(), name.clone());
        let fresh = self.read_fresh(&target)?;
        if fresh.is_some() {
            lock(&self.cache).set(target, fresh, true);
        }
        Ok(())
    }

    /// Write one change (retrying a conflict with an unrelated writer); the records it changed.
    fn write_change(
        &self,
        g: &Guarded,
        written: &mut BTreeSet<RecordKey>,
    ) -> Result<(), StoreError> {
        let key = g.change.key();
        self.read_missing_pod(&g.change)?;
        for _attempt in 0..5 {
            let writes = {
                let mut c = lock(&self.cache);
                if g.expected >= 0 && c.record_revision(&key) != g.expected {
                    return Err(StoreError::Conflict {
                        key: key.as_string(),
                        expected: g.expected,
                        found: c.record_revision(&key),
                    });
                }
                self.plan(&mut c, &g.change)?
            };
            let mut conflict = None;
            for w in writes {
                let target = w.target(&self.cfg.namespace);
                let delete = w.is_delete();
                let before = lock(&self.cache).objs.get(&target).map(Obj::rv);
                match self.block(execute(self.client.clone(), w))? {
                    Ok(after) => {
                        let mut c = lock(&self.cache);
                        // The watch may have brought a newer version meanwhile: keep it.
                        let now = c.objs.get(&target).map(Obj::rv);
                        if now == before {
                            let changed = match after {
                                Some((k, o)) => c.set(k, Some(o), false),
                                None if delete => c.set(target, None, false),
                                None => Vec::new(),
                            };
                            written.extend(changed.into_iter().map(|(k, _)| k));
                        }
                    }
                    Err((what, e)) => match api_error(&what, e) {
                        WriteError::Conflict(m) => {
                            lock(&self.cache).counters.write_conflicts.inc();
                            conflict = Some((target, m));
                            break;
                        }
                        WriteError::Other(e) => return Err(e),
                    },
                }
            }
            let Some((target, message)) = conflict else {
                return Ok(());
            };
            // Someone else changed the object: read it again; the record the writer meant to
            // change decides (the loop's check) whether to try again.
            tracing::debug!(%message, "kubernetes write conflict; re-reading");
            let fresh = self.read_fresh(&target)?;
            lock(&self.cache).set(target, fresh, true);
        }
        Err(StoreError::Conflict {
            key: key.as_string(),
            expected: g.expected,
            found: lock(&self.cache).record_revision(&key),
        })
    }
}

/// The batch in the order its objects are written. The API server has no transactions: a batch
/// is written object by object, each write guarded by its resourceVersion. The records that
/// hold allocation state (a node's pod-IP cursor, the NETID and other cursors, the cluster
/// network, the egress-IP state) go first, so that a replica whose view of them is stale (another
/// replica allocated meanwhile) fails on its first write, before it wrote anything: the pods,
/// namespaces and policies allocated from that stale view are never stored. Written the other
/// way round, two replicas attaching pods on one node at once both stored a pod with the same
/// IP, and the loser's pod record was left in the store ("pod IP ... is already allocated").
pub(super) fn allocations_first(mut batch: Vec<(RecordKey, Guarded)>) -> Vec<(RecordKey, Guarded)> {
    // A stable sort: the writer's order is kept within each group.
    batch.sort_by_key(|(k, _)| {
        !matches!(
            k,
            RecordKey::Cursors
                | RecordKey::Node(_)
                | RecordKey::ClusterNetwork
                | RecordKey::EgressIps
        )
    });
    batch
}

impl StateBackend for KubeStore {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn load(&self) -> Result<Vec<Record>, StoreError> {
        Ok(self.list()?.records.into_iter().map(|(r, _)| r).collect())
    }

    fn list(&self) -> Result<Listing, StoreError> {
        self.wait_synced()?;
        Ok(lock(&self.cache).listing())
    }

    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        self.apply_guarded(&unguarded(changes)).map(|_| ())
    }

    fn view_problem(&self) -> Option<String> {
        let c = lock(&self.cache);
        let (unlisted, failing) = (c.unlisted(), c.failing());
        match (unlisted.is_empty(), failing.is_empty()) {
            (true, true) => None,
            (false, _) => Some(format!(
                "Kubernetes: not listed yet: {}",
                unlisted.join(", ")
            )),
            (true, false) => Some(format!(
                "Kubernetes watches failing: {}",
                failing.join("; ")
            )),
        }
    }

    fn apply_guarded(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        self.wait_synced()?;
        let batch = allocations_first(coalesce(changes));
        let mut written = BTreeSet::new();
        for (_, g) in &batch {
            self.write_change(g, &mut written)?;
        }
        // As in a transaction, every record of the batch gets the batch's revision.
        let mut c = lock(&self.cache);
        c.revision += 1;
        let rev = c.revision;
        let keys: BTreeSet<RecordKey> = batch.iter().map(|(k, _)| k.clone()).collect();
        for k in &keys {
            if let Some(e) = c.records.get_mut(k) {
                e.1 = rev;
            }
        }
        // Records the API server holds differently from what was written (a pod's labels
        // are the Pod's), and records the writes changed besides, come back as a watched
        // change, newer than the write.
        let mut differ = Vec::new();
        for (k, g) in &batch {
            let held = c.records.get(k).map(|(r, _)| r.clone());
            let meant = match &g.change {
                Change::Put(r) => Some(r.clone()),
                Change::Delete(_) => None,
            };
            if held != meant {
                differ.push((k.clone(), held));
            }
        }
        for k in written.difference(&keys) {
            differ.push((k.clone(), c.records.get(k).map(|(r, _)| r.clone())));
        }
        if !differ.is_empty() {
            c.revision += 1;
            let r = c.revision;
            let mut changes = Vec::new();
            for (k, held) in differ {
                if let Some(e) = c.records.get_mut(&k) {
                    e.1 = r;
                }
                changes.push(match held {
                    Some(rec) => Change::Put(rec),
                    None => Change::Delete(k),
                });
            }
            c.send(WatchEvent::Changes {
                revision: r,
                changes,
            });
        }
        Ok(rev)
    }

    fn apply_guarded_leader(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        if self.fence.current().is_none() {
            return Err(StoreError::NotLeader(
                "this replica does not lead: the controller's own changes are the leader's".into(),
            ));
        }
        self.apply_guarded(changes)
    }

    fn watch(&self, from: Revision) -> Option<Watch> {
        let (tx, events) = mpsc::unbounded_channel();
        let (relist, mut relist_rx) = mpsc::unbounded_channel::<()>();
        {
            let mut c = lock(&self.cache);
            if c.revision > from {
                let _ = tx.send(WatchEvent::Relisted(c.listing()));
            }
            c.subscribers.push(tx.clone());
        }
        let cache = self.cache.clone();
        self.rt.as_ref()?.spawn(async move {
            while relist_rx.recv().await.is_some() {
                let l = lock(&cache).listing();
                if tx.send(WatchEvent::Relisted(l)).is_err() {
                    break;
                }
            }
        });
        Some(Watch { events, relist })
    }
}
