//! Pod attachments in the Kubernetes datastore: a pod's record is its `flowmesh.io/v1`
//! PodAttachment (written only by flowmesh) together with its Pod (labels, named ports), and
//! it counts only while the attachment's node is the Pod's `spec.nodeName` and its uid the
//! Pod's. The legacy Pod annotation [`ATTACHMENT`] is ignored and reported, or imported once
//! when the operator asks ([`KubeConfig::import_attachment_annotations`]). The leader removes
//! the PodAttachments no Pod owns any more ([`KubeStore::tidy_attachments`]).

use super::writes::*;
use super::*;

/// Why a legacy annotation is not used.
fn ignored_annotation() -> String {
    format!(
        "annotation {ATTACHMENT} is ignored: pod attachments are kept in PodAttachment objects \
         that only flowmesh writes (the annotation was forged, or written before an upgrade: \
         see docs/operations.md, \"Upgrading\")"
    )
}

/// Whether attachment `a` describes an earlier Pod of the same name.
fn stale(a: &PodAttachmentSpec, v: &PodView) -> bool {
    !a.pod_uid.is_empty() && !v.uid.is_empty() && a.pod_uid != v.uid
}

/// The Pod must be bound to `node`.
fn check_node(node: &str, v: &PodView) -> Result<(), String> {
    match v.node_name.as_deref() {
        Some(bound) if bound == node => Ok(()),
        Some(bound) => Err(format!(
            "it places the pod on node {node:?}, but the Pod is bound to node {bound:?} (spec.nodeName)"
        )),
        None => Err(format!(
            "it places the pod on node {node:?}, but the Pod is bound to no node (no spec.nodeName)"
        )),
    }
}

fn pod_record(
    ns: &str,
    name: &str,
    v: &PodView,
    (node, port_name, ofport, ip): (String, String, u32, Ipv4Addr),
) -> PodRecord {
    PodRecord {
        info: topology::PodInfo {
            key: PodKey {
                namespace: ns.to_string(),
                name: name.to_string(),
            },
            node,
            port_name,
            ofport,
            ip,
            labels: v.labels.clone(),
            ports: v.ports.clone(),
        },
    }
}

/// The record of pod `ns/name` from its PodAttachment.
fn attachment_record(
    ns: &str,
    name: &str,
    v: &PodView,
    a: &PodAttachmentSpec,
) -> Result<PodRecord, String> {
    if a.namespace != ns || a.pod != name {
        return Err(format!(
            "it names pod {}/{}, not {ns}/{name}",
            a.namespace, a.pod
        ));
    }
    check_node(&a.node, v)?;
    let ip: Ipv4Addr =
        a.ip.parse()
            .map_err(|e| format!("ip {:?} is not an IPv4 address: {e}", a.ip))?;
    Ok(pod_record(
        ns,
        name,
        v,
        (a.node.clone(), a.port_name.clone(), a.ofport, ip),
    ))
}

/// The record of pod `ns/name` from its legacy annotation `text`, when importing: its node
/// must be the Pod's `spec.nodeName` and its IP the Pod's `status.podIP`.
fn legacy_record(ns: &str, name: &str, v: &PodView, text: &str) -> Result<PodRecord, String> {
    let a: Attachment =
        serde_json::from_str(text).map_err(|e| format!("annotation {ATTACHMENT}: {e}"))?;
    check_node(&a.node, v).map_err(|e| format!("annotation {ATTACHMENT}: {e}"))?;
    match v.pod_ip.as_deref().map(str::parse::<Ipv4Addr>) {
        Some(Ok(ip)) if ip == a.ip => {}
        _ => {
            return Err(format!(
            "annotation {ATTACHMENT}: its IP {} is not the Pod's status.podIP ({}); not imported",
            a.ip,
            v.pod_ip.as_deref().unwrap_or("none")
        ))
        }
    }
    Ok(pod_record(
        ns,
        name,
        v,
        (a.node, a.port_name, a.ofport, a.ip),
    ))
}

/// The PodAttachment spec that stores `p` for the Pod of uid `uid`.
pub(super) fn attachment_spec(p: &PodRecord, uid: &str) -> PodAttachmentSpec {
    PodAttachmentSpec {
        namespace: p.info.key.namespace.clone(),
        pod: p.info.key.name.clone(),
        pod_uid: uid.to_string(),
        node: p.info.node.clone(),
        port_name: p.info.port_name.clone(),
        ofport: p.info.ofport,
        ip: p.info.ip.to_string(),
    }
}

impl Cache {
    /// The PodAttachment of pod `ns/name`, if any.
    pub(super) fn pod_attachment(&self, ns: &str, name: &str) -> Option<&PodAttachment> {
        match self.get(Kind::PodAttachment, "", &attachment_name(ns, name)) {
            Some(Obj::PodAttachment(a)) => Some(a),
            _ => None,
        }
    }

    /// The pod record of `ns/name` and the object it comes from (None: not attached). A
    /// legacy annotation is noted as refused on its Pod unless it is being imported.
    pub(super) fn derive_pod(
        &mut self,
        ns: &str,
        name: &str,
    ) -> Option<(ObjKey, Result<PodRecord, String>)> {
        let pod_key = (Kind::Pod, ns.to_string(), name.to_string());
        let v = match self.get(Kind::Pod, ns, name) {
            Some(Obj::Pod(v)) => v.clone(),
            _ => return None,
        };
        let spec = self.pod_attachment(ns, name).map(|a| a.spec.clone());
        match (spec, v.attachment.as_deref()) {
            (Some(spec), legacy) => {
                if legacy.is_some() && !self.import_annotations {
                    self.refuse(pod_key, ignored_annotation());
                } else {
                    self.refused.remove(&pod_key);
                }
                let obj = (
                    Kind::PodAttachment,
                    String::new(),
                    attachment_name(ns, name),
                );
                if stale(&spec, &v) {
                    // An earlier Pod's: the leader removes it.
                    self.refused.remove(&obj);
                    return None;
                }
                Some((obj, attachment_record(ns, name, &v, &spec)))
            }
            (None, Some(text)) if self.import_annotations => {
                Some((pod_key, legacy_record(ns, name, &v, text)))
            }
            (None, Some(_)) => {
                self.refuse(pod_key, ignored_annotation());
                None
            }
            (None, None) => {
                self.refused.remove(&pod_key);
                None
            }
        }
    }
}

/// What [`KubeStore::tidy_attachments`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AttachmentTidy {
    /// Legacy annotations carried over into PodAttachments.
    pub imported: usize,
    /// PodAttachments removed because no Pod owns them.
    pub removed: usize,
}

/// The Pods and PodAttachments the leader's tidying has not looked at since they changed.
#[derive(Debug)]
pub(super) struct TidyQueue {
    pods: BTreeSet<(String, String)>,
    attachments: BTreeSet<String>,
    all: bool,
}

impl Default for TidyQueue {
    fn default() -> Self {
        TidyQueue {
            pods: BTreeSet::new(),
            attachments: BTreeSet::new(),
            all: true,
        }
    }
}

impl TidyQueue {
    /// Object `k` changed.
    pub(super) fn changed(&mut self, k: &ObjKey) {
        match k.0 {
            Kind::Pod => {
                self.pods.insert((k.1.clone(), k.2.clone()));
            }
            Kind::PodAttachment => {
                self.attachments.insert(k.2.clone());
            }
            _ => {}
        }
    }

    /// Every object of `kind` was listed afresh.
    pub(super) fn relisted(&mut self, kind: Kind) {
        if matches!(kind, Kind::Pod | Kind::PodAttachment) {
            self.all = true;
        }
    }
}

impl KubeStore {
    /// On the leader: remove the PodAttachments whose Pod is gone (or is another Pod of the
    /// same name, as the API server confirms), and with
    /// [`KubeConfig::import_attachment_annotations`] write a PodAttachment for every pod
    /// whose record comes from its legacy annotation and remove the annotations that are
    /// carried over. The records do not change. Looks only at what changed since its last
    /// pass (everything after a relist, or after a pass that failed).
    pub fn tidy_attachments(&self) -> Result<AttachmentTidy, StoreError> {
        let r = self.tidy_pass();
        if r.is_err() {
            lock(&self.cache).tidy.all = true;
        }
        r
    }

    fn tidy_pass(&self) -> Result<AttachmentTidy, StoreError> {
        let mut done = AttachmentTidy::default();
        let (imports, candidates) = {
            let mut c = lock(&self.cache);
            if !c.all_synced() {
                return Ok(done);
            }
            let queue = std::mem::replace(
                &mut c.tidy,
                TidyQueue {
                    all: false,
                    ..Default::default()
                },
            );
            let (pods, names): (Vec<(String, String)>, BTreeSet<String>) = if queue.all {
                (
                    c.of_kind(Kind::Pod)
                        .map(|(k, _)| (k.1.clone(), k.2.clone()))
                        .collect(),
                    c.of_kind(Kind::PodAttachment)
                        .map(|(k, _)| k.2.clone())
                        .collect(),
                )
            } else {
                let mut names = queue.attachments;
                names.extend(queue.pods.iter().map(|(ns, n)| attachment_name(ns, n)));
                (queue.pods.into_iter().collect(), names)
            };
            let imports = if self.cfg.import_attachment_annotations {
                legacy_imports(&mut c, pods)
            } else {
                Vec::new()
            };
            let mut candidates = Vec::new();
            for name in names {
                let Some(Obj::PodAttachment(a)) = c.get(Kind::PodAttachment, "", &name) else {
                    continue;
                };
                let owned = name == attachment_name(&a.spec.namespace, &a.spec.pod)
                    && matches!(c.get(Kind::Pod, &a.spec.namespace, &a.spec.pod),
                        Some(Obj::Pod(v)) if !stale(&a.spec, v));
                if !owned {
                    candidates.push((name, meta_rv(&a.metadata), a.spec.clone()));
                }
            }
            (imports, candidates)
        };
        for (ns, name, write) in imports {
            if let Some(w) = write {
                self.write_now(w)?;
                done.imported += 1;
                tracing::info!(pod = %format!("{ns}/{name}"), "imported the pod's {ATTACHMENT} annotation into its PodAttachment");
            }
            let rv = match lock(&self.cache).get(Kind::Pod, &ns, &name) {
                Some(Obj::Pod(v)) => v.rv.clone(),
                _ => continue,
            };
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": rv, "annotations": {ATTACHMENT: null}}});
            self.write_now(Write::Pod(Op::Merge(ns, name, patch)))?;
        }
        for (aname, rv, spec) in candidates {
            // The cache may not have seen a new Pod yet: the API server decides.
            let key = (Kind::Pod, spec.namespace.clone(), spec.pod.clone());
            let pod = self
                .block(reread(
                    self.client.clone(),
                    self.cfg.namespace.clone(),
                    key.clone(),
                ))?
                .map_err(|e| StoreError::Unavailable(format!("Kubernetes API server: {e}")))?;
            let owned = aname == attachment_name(&spec.namespace, &spec.pod)
                && matches!(&pod, Some(Obj::Pod(v)) if !stale(&spec, v));
            if owned {
                continue;
            }
            self.write_now(Write::PodAttachment(Op::DeleteAt(
                String::new(),
                aname.clone(),
                rv,
            )))?;
            done.removed += 1;
            tracing::info!(podattachment = %aname, pod = %format!("{}/{}", spec.namespace, spec.pod), "removed a PodAttachment whose Pod is gone");
        }
        Ok(done)
    }
}

/// Where the cluster says a Pod runs (for the node API's NodeRestriction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodBinding {
    /// No such Pod in the API.
    NoPod,
    /// The Pod exists and is bound to no node yet.
    Unbound,
    /// The Pod's `spec.nodeName`.
    Node(String),
}

impl KubeStore {
    /// The first IPv4 `InternalIP` of Node `name` (None: no such Node; Some(None): it has
    /// none), as the cache holds it.
    pub fn node_internal_ip(&self, name: &str) -> Option<Option<Ipv4Addr>> {
        match lock(&self.cache).get(Kind::Node, "", name) {
            Some(Obj::Node(v)) => Some(v.ip),
            _ => None,
        }
    }

    /// Where Pod `ns/name` is bound. The cache answers when it says the Pod is bound to
    /// `expected`; otherwise (absent, unbound, elsewhere: the watch may lag behind a Pod the
    /// kubelet already runs) the API server is asked, and its answer goes into the cache.
    /// Blocks on the API server: call from a blocking context.
    pub fn pod_binding(
        &self,
        ns: &str,
        name: &str,
        expected: &str,
    ) -> Result<PodBinding, StoreError> {
        let of = |o: Option<&Obj>| match o {
            Some(Obj::Pod(v)) => match &v.node_name {
                Some(n) => PodBinding::Node(n.clone()),
                None => PodBinding::Unbound,
            },
            _ => PodBinding::NoPod,
        };
        let cached = of(lock(&self.cache).get(Kind::Pod, ns, name));
        if cached == PodBinding::Node(expected.to_string()) {
            return Ok(cached);
        }
        let key = (Kind::Pod, ns.to_string(), name.to_string());
        let fresh = self
            .block(reread(
                self.client.clone(),
                self.cfg.namespace.clone(),
                key.clone(),
            ))?
            .map_err(|e| StoreError::Unavailable(format!("Kubernetes API server: {e}")))?;
        let binding = of(fresh.as_ref());
        if fresh.is_some() {
            lock(&self.cache).set(key, fresh, true);
        }
        Ok(binding)
    }
}

/// The legacy annotations to carry over: per pod, the PodAttachment to write (None: it has
/// one already) before its annotation is removed.
fn legacy_imports(
    c: &mut Cache,
    pods: Vec<(String, String)>,
) -> Vec<(String, String, Option<Write>)> {
    let mut out = Vec::new();
    for (ns, name) in pods {
        if !matches!(c.get(Kind::Pod, &ns, &name), Some(Obj::Pod(v)) if v.attachment.is_some()) {
            continue;
        }
        let Some((obj, Ok(rec))) = c.derive_pod(&ns, &name) else {
            continue;
        };
        if obj.0 == Kind::PodAttachment {
            out.push((ns, name, None));
            continue;
        }
        let uid = match c.get(Kind::Pod, &ns, &name) {
            Some(Obj::Pod(v)) => v.uid.clone(),
            _ => continue,
        };
        let spec = attachment_spec(&rec, &uid);
        let write = match c.pod_attachment(&ns, &name) {
            Some(cur) => {
                let mut o = cur.clone();
                o.spec = spec;
                Op::Replace(o)
            }
            None => Op::Create(PodAttachment::new(&attachment_name(&ns, &name), spec)),
        };
        out.push((ns, name, Some(Write::PodAttachment(write))));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    /// Pod ns1/web (uid-1), at a new resourceVersion each time.
    fn pod(node: Option<&str>, pod_ip: Option<&str>, annotation: Option<&str>) -> Obj {
        static RV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
        let rv = RV.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns1".into()),
                uid: Some("uid-1".into()),
                resource_version: Some(rv.to_string()),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                annotations: annotation.map(|a| [(ATTACHMENT.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: Some(PodStatus {
                pod_ip: pod_ip.map(str::to_string),
                ..Default::default()
            }),
        };
        Obj::Pod(pod_view(&p))
    }

    fn attachment(node: &str, uid: &str, rv: &str) -> Obj {
        let mut a = PodAttachment::new(
            "ns1.web",
            PodAttachmentSpec {
                namespace: "ns1".into(),
                pod: "web".into(),
                pod_uid: uid.into(),
                node: node.into(),
                port_name: "veth1".into(),
                ofport: 3,
                ip: "10.128.0.5".into(),
            },
        );
        a.metadata.resource_version = Some(rv.into());
        Obj::PodAttachment(Box::new(a))
    }

    const FORGED: &str = r#"{"node":"node-a","portName":"veth9","ofport":9,"ip":"10.128.0.99"}"#;

    fn cache(import: bool) -> Cache {
        let mut c = Cache {
            import_annotations: import,
            ..Default::default()
        };
        // The namespace's NetNamespace, which pods wait for.
        let nn = NetNamespace {
            metadata: ObjectMeta {
                name: Some("ns1".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            netname: "ns1".into(),
            netid: Some(11),
            ..Default::default()
        };
        c.set(
            (Kind::NetNamespace, String::new(), "ns1".into()),
            Some(Obj::NetNamespace(Box::new(nn))),
            false,
        );
        c
    }

    fn pod_key() -> ObjKey {
        (Kind::Pod, "ns1".into(), "web".into())
    }

    fn att_key() -> ObjKey {
        (Kind::PodAttachment, String::new(), "ns1.web".into())
    }

    fn record(c: &Cache) -> Option<PodRecord> {
        match c.records.get(&RecordKey::Pod("ns1".into(), "web".into())) {
            Some((Record::Pod(p), _)) => Some(p.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_forged_annotation_is_ignored_and_reported() {
        let mut c = cache(false);
        c.set(
            pod_key(),
            Some(pod(Some("node-a"), Some("10.128.0.99"), Some(FORGED))),
            false,
        );
        assert_eq!(record(&c), None);
        assert!(
            c.refused
                .get(&pod_key())
                .is_some_and(|r| r.contains("is ignored")),
            "{:?}",
            c.refused
        );
        // Beside a real attachment it is still ignored (and reported); the record is the
        // attachment's.
        c.set(att_key(), Some(attachment("node-a", "uid-1", "7")), false);
        let r = record(&c).expect("attached");
        assert_eq!(
            (r.info.ofport, r.info.ip),
            (3, Ipv4Addr::new(10, 128, 0, 5))
        );
        assert_eq!(r.info.labels.get("app").map(String::as_str), Some("web"));
        assert!(c.refused.contains_key(&pod_key()));
        // Removed: no longer reported.
        c.set(
            pod_key(),
            Some(pod(Some("node-a"), Some("10.128.0.5"), None)),
            false,
        );
        assert!(c.refused.is_empty(), "{:?}", c.refused);
        assert!(record(&c).is_some());
    }

    #[test]
    fn an_attachment_must_match_the_pods_node_and_uid() {
        let mut c = cache(false);
        c.set(pod_key(), Some(pod(Some("node-b"), None, None)), false);
        c.set(att_key(), Some(attachment("node-a", "uid-1", "7")), false);
        assert_eq!(record(&c), None);
        let why = c.refused.get(&att_key()).cloned().unwrap_or_default();
        assert!(why.contains("bound to node \"node-b\""), "{why}");
        // Not scheduled at all.
        c.set(pod_key(), Some(pod(None, None, None)), false);
        assert_eq!(record(&c), None);
        assert!(c.refused[&att_key()].contains("bound to no node"));
        // Bound to the attachment's node: counts, and the refusal is forgotten.
        c.set(pod_key(), Some(pod(Some("node-a"), None, None)), false);
        assert!(record(&c).is_some());
        assert!(c.refused.is_empty(), "{:?}", c.refused);
        // An earlier Pod's attachment (another uid) describes nothing, and is not an error.
        c.set(att_key(), Some(attachment("node-a", "uid-0", "8")), false);
        assert_eq!(record(&c), None);
        assert!(c.refused.is_empty(), "{:?}", c.refused);
    }

    #[test]
    fn importing_takes_only_annotations_the_cluster_confirms() {
        let mut c = cache(true);
        // Its IP is not the Pod's status.podIP: refused.
        c.set(
            pod_key(),
            Some(pod(Some("node-a"), Some("10.128.0.5"), Some(FORGED))),
            false,
        );
        assert_eq!(record(&c), None);
        assert!(c.refused[&pod_key()].contains("status.podIP"));
        // Another node than spec.nodeName: refused.
        c.set(
            pod_key(),
            Some(pod(Some("node-b"), Some("10.128.0.99"), Some(FORGED))),
            false,
        );
        assert_eq!(record(&c), None);
        assert!(c.refused[&pod_key()].contains("node-b"));
        // Both as the cluster says: imported, and planned as a PodAttachment.
        c.set(
            pod_key(),
            Some(pod(Some("node-a"), Some("10.128.0.99"), Some(FORGED))),
            false,
        );
        let r = record(&c).expect("imported");
        assert_eq!(r.info.ofport, 9);
        let all = || vec![("ns1".to_string(), "web".to_string())];
        let plans = legacy_imports(&mut c, all());
        assert_eq!(plans.len(), 1);
        let Some(Write::PodAttachment(Op::Create(a))) = &plans[0].2 else {
            panic!("expected a PodAttachment create");
        };
        assert_eq!(a.metadata.name.as_deref(), Some("ns1.web"));
        assert_eq!(a.spec, attachment_spec(&r, "uid-1"));
        // Once the PodAttachment exists, only the annotation is removed.
        c.set(
            att_key(),
            Some(Obj::PodAttachment(Box::new(a.clone()))),
            false,
        );
        assert_eq!(record(&c), Some(r));
        let plans = legacy_imports(&mut c, all());
        assert!(matches!(plans.as_slice(), [(_, _, None)]));
    }
}
