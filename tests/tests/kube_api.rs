//! The mock Kubernetes API server (`flowmesh_tests::kube_api`) driven by the real kube-rs client
//! and `kube::runtime::watcher`: CRUD and its errors, selectors, paging, watch ordering,
//! bookmarks, 410 relists, cut watches, the server going down, injected failures and the
//! request log.

use flowmesh_tests::kube_api::{MockApiServer, RequestRecord, CONTROLLER_RESOURCES};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Client, Config, ResourceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "flowmesh";

fn mock() -> MockApiServer {
    let m = MockApiServer::start(CONTROLLER_RESOURCES);
    m.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    m
}

async fn client(m: &MockApiServer) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = std::env::temp_dir().join(format!(
        "flowmesh-kube-api-{}-{}.kubeconfig",
        std::process::id(),
        m.addr().port()
    ));
    m.write_kubeconfig(&path).expect("write kubeconfig");
    let kc = Kubeconfig::read_from(&path).expect("kubeconfig parses");
    let _ = std::fs::remove_file(&path);
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    assert_eq!(cfg.cluster_url.to_string().trim_end_matches('/'), m.url());
    Client::try_from(cfg).expect("kube client")
}

fn cm(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .expect("configmap")
}

/// The code and reason of the API error a request must have failed with.
fn api_err<T: std::fmt::Debug>(r: kube::Result<T>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn data(c: &ConfigMap) -> BTreeMap<String, String> {
    c.data.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_conflicts_patches_delete() {
    let m = mock();
    let cms: Api<ConfigMap> = Api::namespaced(client(&m).await, NS);
    let pp = PostParams::default();

    let created = cms
        .create(&pp, &cm("a", &[], &[("k", "1")]))
        .await
        .expect("create");
    let rv1 = created.resource_version().expect("rv");
    assert!(created.uid().is_some());
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.namespace().as_deref(), Some(NS));
    assert_eq!(rv1, m.resource_version().to_string());
    assert_eq!(
        api_err(cms.create(&pp, &cm("a", &[], &[])).await),
        (409, "AlreadyExists".into())
    );

    let mut gen: ConfigMap = cm("", &[], &[]);
    gen.metadata.generate_name = Some("gen-".into());
    let g = cms.create(&pp, &gen).await.expect("generateName");
    assert!(
        g.name_any().starts_with("gen-") && g.name_any().len() == 9,
        "{}",
        g.name_any()
    );

    let elsewhere: Api<ConfigMap> = Api::namespaced(cms.clone().into_client(), "nope");
    assert_eq!(
        api_err(elsewhere.create(&pp, &cm("x", &[], &[])).await),
        (404, "NotFound".into())
    );

    let got = cms.get("a").await.expect("get");
    assert_eq!(data(&got)["k"], "1");
    assert_eq!(api_err(cms.get("missing").await), (404, "NotFound".into()));

    // Replace: fresh RV works, the now stale one conflicts.
    let mut upd = got.clone();
    upd.data = Some([("k".to_string(), "2".to_string())].into());
    let replaced = cms.replace("a", &pp, &upd).await.expect("replace");
    assert_ne!(replaced.resource_version(), Some(rv1.clone()));
    assert_eq!(replaced.uid(), created.uid());
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(
        api_err(cms.replace("a", &pp, &upd).await),
        (409, "Conflict".into())
    );
    assert_eq!(
        api_err(cms.replace("missing", &pp, &cm("missing", &[], &[])).await),
        (404, "NotFound".into())
    );

    // Patches.
    let p = PatchParams::default();
    let merged = cms
        .patch(
            "a",
            &p,
            &Patch::Merge(json!({"data": {"m": "x", "k": null}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(data(&merged), [("m".to_string(), "x".to_string())].into());
    let stale = json!({"metadata": {"resourceVersion": rv1}, "data": {"z": "1"}});
    assert_eq!(
        api_err(cms.patch("a", &p, &Patch::Merge(&stale)).await),
        (409, "Conflict".into())
    );
    let sm = cms
        .patch(
            "a",
            &p,
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "1"}}})),
        )
        .await
        .expect("strategic patch");
    assert_eq!(sm.labels().get("s").map(String::as_str), Some("1"));
    let jp = cms
        .patch(
            "a",
            &p,
            &Patch::<()>::Json(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/data/m", "value": "x"},
                    {"op": "add", "path": "/data/j", "value": "y"},
                    {"op": "replace", "path": "/data/m", "value": "w"},
                    {"op": "remove", "path": "/metadata/labels/s"}
                ]))
                .expect("json patch"),
            ),
        )
        .await
        .expect("json patch applies");
    assert_eq!(
        data(&jp),
        [
            ("j".to_string(), "y".to_string()),
            ("m".to_string(), "w".to_string())
        ]
        .into()
    );
    assert!(jp.labels().is_empty());
    let failing = Patch::<()>::Json(
        serde_json::from_value(json!([{"op": "test", "path": "/data/m", "value": "nope"}]))
            .expect("json patch"),
    );
    assert_eq!(api_err(cms.patch("a", &p, &failing).await).0, 422);
    assert_eq!(
        api_err(cms.patch("missing", &p, &Patch::Merge(json!({}))).await),
        (404, "NotFound".into())
    );
    let applied = cms
        .patch(
            "applied",
            &PatchParams::apply("flowmesh-test").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}})),
        )
        .await
        .expect("server-side apply creates");
    assert_eq!(data(&applied)["a"], "1");

    // A no-op update keeps the resourceVersion.
    let before = cms.get("a").await.expect("get");
    let same = cms.replace("a", &pp, &before).await.expect("no-op replace");
    assert_eq!(same.resource_version(), before.resource_version());

    // Delete.
    let rv_before = m.resource_version();
    let deleted = cms
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let obj = deleted.left().expect("the deleted object");
    assert_eq!(obj.resource_version(), Some((rv_before + 1).to_string()));
    assert_eq!(api_err(cms.get("a").await).0, 404);
    assert_eq!(
        api_err(cms.delete("a", &DeleteParams::default()).await),
        (404, "NotFound".into())
    );
    assert!(m.get("configmaps", Some(NS), "a").is_none());
    assert!(m.get("configmaps", Some(NS), "applied").is_some());

    // Cluster-scoped and other groups.
    let nss: Api<Namespace> = Api::all(cms.into_client());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    assert_eq!(names, vec![NS.to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_pagination() {
    let m = mock();
    m.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}));
    let c = client(&m).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), NS);
    for (i, app) in ["web", "web", "db", "cache", "web"].iter().enumerate() {
        let mut labels = json!({"app": app});
        if i % 2 == 0 {
            labels["even"] = json!("yes");
        }
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    m.put(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "other", "labels": {"app": "web"}}}));

    let names =
        |l: &kube::core::ObjectList<Pod>| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>();
    let sel = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(&pods.list(&sel("app=web")).await.expect("list")),
        ["p0", "p1", "p4"]
    );
    assert_eq!(
        names(&pods.list(&sel("app!=web")).await.expect("list")),
        ["p2", "p3"]
    );
    assert_eq!(
        names(&pods.list(&sel("even")).await.expect("list")),
        ["p0", "p2", "p4"]
    );
    assert_eq!(
        names(&pods.list(&sel("!even")).await.expect("list")),
        ["p1", "p3"]
    );
    assert_eq!(
        names(
            &pods
                .list(&sel("app in (db,cache),even"))
                .await
                .expect("list")
        ),
        ["p2"]
    );
    assert_eq!(
        names(
            &pods
                .list(&ListParams::default().fields("metadata.name=p3"))
                .await
                .expect("list")
        ),
        ["p3"]
    );
    let all: Api<Pod> = Api::all(c.clone());
    assert_eq!(
        names(&all.list(&sel("app=web")).await.expect("list")),
        ["p0", "p1", "p4", "q"]
    );
    assert_eq!(
        names(
            &all.list(&ListParams::default().fields("metadata.namespace=other"))
                .await
                .expect("list")
        ),
        ["q"]
    );
    assert_eq!(api_err(pods.list(&sel("app in (x")).await).0, 400);

    // Pages of 2 share the first page's resourceVersion, even with writes in between.
    let mut lp = ListParams::default().limit(2);
    let (mut seen, mut rvs, mut pages) = (Vec::new(), Vec::new(), 0);
    loop {
        let page = pods.list(&lp).await.expect("page");
        pages += 1;
        assert!(page.items.len() <= 2);
        seen.extend(names(&page));
        rvs.push(page.metadata.resource_version.clone().expect("list rv"));
        if pages == 1 {
            m.put(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p9", "namespace": NS}}));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
    assert!(rvs.iter().all(|r| *r == rvs[0]), "{rvs:?}");
    assert_eq!(
        pods.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        6
    );
    // An unknown continue token is 410 Expired, as for a compacted one.
    assert_eq!(
        api_err(
            pods.list(&ListParams::default().limit(2).continue_token("99-2"))
                .await
        ),
        (410, "Expired".into())
    );
}

/// A reflector over configmaps in `NS`, with a log of the watcher's events.
struct Reflected {
    store: reflector::Store<ConfigMap>,
    log: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reflected {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reflect(c: Client, cfg: watcher::Config) -> Reflected {
    let api: Api<ConfigMap> = Api::namespaced(c, NS);
    let (store, writer) = reflector::store();
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let stream = reflector(writer, watcher(api, cfg).default_backoff());
    let task = tokio::spawn(async move {
        stream
            .for_each(|ev| {
                let line = match ev {
                    Ok(watcher::Event::Apply(o)) => format!(
                        "apply {} {}",
                        o.name_any(),
                        data(&o).get("v").cloned().unwrap_or_default()
                    ),
                    Ok(watcher::Event::Delete(o)) => format!("delete {}", o.name_any()),
                    Ok(watcher::Event::Init) => "init".into(),
                    Ok(watcher::Event::InitApply(o)) => format!("initapply {}", o.name_any()),
                    Ok(watcher::Event::InitDone) => "initdone".into(),
                    Err(e) => format!("error {e}"),
                };
                l.lock().expect("log").push(line);
                futures::future::ready(())
            })
            .await;
    });
    Reflected { store, log, task }
}

impl Reflected {
    fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }
    fn count(&self, line: &str) -> usize {
        self.log().iter().filter(|l| *l == line).count()
    }
    fn state(&self) -> BTreeMap<String, (String, String)> {
        self.store
            .state()
            .iter()
            .map(|o| {
                (
                    o.name_any(),
                    (
                        o.resource_version().unwrap_or_default(),
                        data(o).get("v").cloned().unwrap_or_default(),
                    ),
                )
            })
            .collect()
    }
}

fn mock_state(m: &MockApiServer) -> BTreeMap<String, (String, String)> {
    m.list("configmaps", Some(NS))
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                (
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    o["data"]["v"].as_str().unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}

fn put_cm(m: &MockApiServer, name: &str, v: &str) -> Value {
    m.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"v": v}}))
}

async fn converge(m: &MockApiServer, r: &Reflected, what: &str) {
    let ok = m
        .wait_for_async(Duration::from_secs(30), |m| r.state() == mock_state(m))
        .await;
    assert!(
        ok,
        "{what}: reflector {:?} != mock {:?}; log {:?}",
        r.state(),
        mock_state(m),
        r.log()
    );
}

fn verbs(m: &MockApiServer, verb: &str) -> usize {
    m.requests()
        .iter()
        .filter(|r| r.verb == verb && r.resource == "configmaps")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_sees_changes_in_order() {
    let m = mock();
    put_cm(&m, "pre", "0");
    let c = client(&m).await;
    let r = reflect(c.clone(), watcher::Config::default());
    converge(&m, &r, "initial list").await;
    assert!(
        m.wait_for_async(Duration::from_secs(10), |m| m.open_watches() == 1)
            .await
    );
    let cms: Api<ConfigMap> = Api::namespaced(c, NS);
    cms.create(&PostParams::default(), &cm("w", &[], &[("v", "1")]))
        .await
        .expect("create");
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .expect("patch");
    cms.delete("w", &DeleteParams::default())
        .await
        .expect("delete");
    cms.delete("pre", &DeleteParams::default())
        .await
        .expect("delete");
    let want = [
        "init",
        "initapply pre",
        "initdone",
        "apply w 1",
        "apply w 2",
        "delete w",
        "delete pre",
    ];
    let ok = m
        .wait_for_async(Duration::from_secs(10), |_| r.log().len() >= want.len())
        .await;
    assert!(ok, "{:?}", r.log());
    assert_eq!(r.log(), want);
    assert!(r.state().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_and_timeouts_on_raw_watches() {
    let m = mock();
    m.set_bookmark_interval(Duration::from_millis(200));
    put_cm(&m, "a", "1");
    let cms: Api<ConfigMap> = Api::namespaced(client(&m).await, NS);
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let started = Instant::now();
    let stream = cms
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .expect("watch");
    tokio::pin!(stream);
    let put = put_cm(&m, "a", "2");
    let (mut bookmarks, mut modified) = (Vec::new(), 0);
    while let Some(ev) = stream.try_next().await.expect("watch stream") {
        match ev {
            WatchEvent::Bookmark(b) => bookmarks.push(
                b.metadata
                    .resource_version
                    .parse::<u64>()
                    .expect("numeric rv"),
            ),
            WatchEvent::Modified(o) => {
                assert!(bookmarks.is_empty(), "the event precedes later bookmarks");
                assert_eq!(
                    o.resource_version().as_deref(),
                    put["metadata"]["resourceVersion"].as_str()
                );
                modified += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "timeoutSeconds=2 took {took:?}"
    );
    assert_eq!(modified, 1);
    assert!(bookmarks.len() >= 3, "{bookmarks:?}");
    assert!(
        bookmarks.iter().all(|b| *b == m.resource_version()),
        "{bookmarks:?}"
    );

    // Without allowWatchBookmarks there are none.
    let stream = cms
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv)
        .await
        .expect("watch");
    let evs: Vec<_> = stream.try_collect().await.expect("watch");
    assert_eq!(evs.len(), 1, "{evs:?}");

    // A watch from a compacted resourceVersion: an ERROR event with a 410 Status.
    m.compact();
    let stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .expect("watch");
    let evs: Vec<_> = stream.try_collect().await.expect("watch");
    match evs.as_slice() {
        [WatchEvent::Error(s)] => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected one 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_relists_after_expiry_and_resumes_after_cuts() {
    let m = mock();
    m.set_bookmark_interval(Duration::from_millis(300));
    for i in 0..5 {
        put_cm(&m, &format!("c{i}"), "0");
    }
    let r = reflect(client(&m).await, watcher::Config::default().page_size(2));
    converge(&m, &r, "initial paged list").await;
    assert_eq!(
        verbs(&m, "list"),
        3,
        "5 objects in pages of 2: {:?}",
        m.requests()
    );
    assert!(
        m.wait_for_async(Duration::from_secs(10), |m| m.open_watches() == 1)
            .await
    );

    // Compaction + expiry: the watcher must relist (new Init) and catch up.
    let lists = verbs(&m, "list");
    m.compact();
    put_cm(&m, "c1", "1");
    m.delete("configmaps", Some(NS), "c2");
    m.expire_watches();
    put_cm(&m, "c5", "1");
    converge(&m, &r, "after 410").await;
    assert!(verbs(&m, "list") > lists, "no relist after 410");
    assert_eq!(r.count("init"), 2, "{:?}", r.log());
    assert!(
        m.wait_for_async(Duration::from_secs(10), |m| m.open_watches() == 1)
            .await
    );

    // Cut watches: it resumes watching from its last resourceVersion, without a relist.
    let (lists, watches) = (verbs(&m, "list"), verbs(&m, "watch"));
    m.drop_watches();
    put_cm(&m, "c3", "2");
    put_cm(&m, "c6", "2");
    converge(&m, &r, "after a cut watch").await;
    assert!(
        m.wait_for_async(Duration::from_secs(20), |m| verbs(m, "watch") > watches)
            .await
    );
    assert_eq!(
        verbs(&m, "list"),
        lists,
        "a cut watch must not need a relist: {:?}",
        m.requests()
    );

    // Down and back up on the same port.
    let addr = m.addr();
    m.set_down(true);
    assert!(m.is_down());
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "still listening"
    );
    assert_eq!(m.open_watches(), 0);
    put_cm(&m, "c0", "3");
    m.delete("configmaps", Some(NS), "c4");
    // A window in which the reflector must see none of the changes made while the server is
    // down: that nothing arrives is what is tested.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_ne!(r.state(), mock_state(&m));
    m.set_down(false);
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok());
    converge(&m, &r, "after the server came back").await;
    assert!(
        r.log().iter().any(|l| l.starts_with("error")),
        "the outage went unnoticed: {:?}",
        r.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_failures_and_request_log() {
    let m = mock();
    let c = client(&m).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    m.fail_next("create", "configmaps", 409, 2);
    m.fail_next("get", "*", 500, 1);
    for _ in 0..2 {
        assert_eq!(
            api_err(cms.create(&PostParams::default(), &cm("f", &[], &[])).await),
            (409, "Conflict".into())
        );
    }
    cms.create(&PostParams::default(), &cm("f", &[], &[]))
        .await
        .expect("third create");
    assert_eq!(api_err(cms.get("f").await), (500, "InternalError".into()));
    cms.get("f").await.expect("second get");
    // kube-rs retries 503/429/504 by itself: one injected 503 is absorbed, seen as two patches.
    m.fail_next("patch", "configmaps", 503, 1);
    cms.patch("f", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .expect("patch retried past the 503");
    assert_eq!(m.requests().iter().filter(|r| r.verb == "patch").count(), 2);
    m.fail_next("delete", "configmaps", 403, 1);
    assert_eq!(
        api_err(cms.delete("f", &DeleteParams::default()).await),
        (403, "Forbidden".into())
    );

    m.clear_requests();
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.list(&ListParams::default()).await.expect("list");
    cms.replace(
        "f",
        &PostParams::default(),
        &cms.get("f").await.expect("get"),
    )
    .await
    .expect("replace");
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .expect("patch");
    cms.delete("f", &DeleteParams::default())
        .await
        .expect("delete");
    cms.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("deletecollection");
    let stream = cms
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch");
    let _: Vec<_> = stream.try_collect().await.expect("watch");
    put_cm(&m, "not-recorded", "1");
    let rec = |verb: &str, resource: &str, ns: Option<&str>, name: Option<&str>| RequestRecord {
        verb: verb.into(),
        group: String::new(),
        resource: resource.into(),
        namespace: ns.map(String::from),
        name: name.map(String::from),
    };
    assert_eq!(
        m.requests(),
        vec![
            rec("list", "namespaces", None, None),
            rec("get", "configmaps", Some(NS), Some("f")),
            rec("update", "configmaps", Some(NS), Some("f")),
            rec("patch", "configmaps", Some(NS), Some("f")),
            rec("delete", "configmaps", Some(NS), Some("f")),
            rec("deletecollection", "configmaps", Some(NS), None),
            rec("watch", "configmaps", Some(NS), None),
        ]
    );
}

/// One raw HTTP/1.1 request; (status, body).
fn raw(m: &MockApiServer, method: &str, path: &str, ctype: &str, body: &str) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(m.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).expect("status line");
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let mut chunked = false;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).expect("header");
        if h.trim().is_empty() {
            break;
        }
        chunked |= h
            .to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked");
    }
    let mut rest = String::new();
    r.read_to_string(&mut rest).expect("body");
    let body = if chunked {
        rest.lines()
            .filter(|l| l.starts_with('{'))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        rest
    };
    (
        code,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

#[test]
fn bad_input_gives_status_errors_and_discovery_answers() {
    let m = mock();
    let status = |(code, v): (u16, Value)| {
        assert_eq!(v["kind"], "Status", "{v}");
        assert_eq!(v["code"], code, "{v}");
        (code, v["reason"].as_str().unwrap_or_default().to_string())
    };
    let cmp = format!("/api/v1/namespaces/{NS}/configmaps");
    assert_eq!(
        status(raw(&m, "POST", &cmp, "application/json", "{not json")),
        (400, "BadRequest".into())
    );
    assert_eq!(
        status(raw(&m, "POST", &cmp, "application/json", "{}")),
        (422, "Invalid".into())
    );
    assert_eq!(
        status(raw(
            &m,
            "POST",
            &cmp,
            "application/json",
            r#"{"kind":"Pod","metadata":{"name":"x"}}"#
        ))
        .0,
        400
    );
    assert_eq!(
        status(raw(&m, "GET", "/api/v1/nonsense", "", "")),
        (404, "NotFound".into())
    );
    assert_eq!(
        status(raw(&m, "GET", "/apis/nope/v1/things/a/b/c", "", "")),
        (404, "NotFound".into())
    );
    assert_eq!(
        status(raw(&m, "GET", "/api/v1/configmaps/x", "", "")),
        (404, "NotFound".into())
    );
    assert_eq!(
        status(raw(&m, "GET", "/api/v1/namespaces/a/nodes/x", "", "")),
        (404, "NotFound".into())
    );
    assert_eq!(
        status(raw(&m, "PATCH", &format!("{cmp}/x"), "text/plain", "{}")).0,
        415
    );
    assert_eq!(
        status(raw(&m, "GET", &format!("{cmp}?limit=abc"), "", "")).0,
        400
    );
    assert_eq!(
        status(raw(
            &m,
            "GET",
            &format!("{cmp}?watch=1&resourceVersion=zz"),
            "",
            ""
        ))
        .0,
        400
    );
    assert_eq!(
        status(raw(&m, "PUT", &cmp, "application/json", "{}")).0,
        405
    );
    let (code, v) = raw(&m, "GET", "/version", "", "");
    assert_eq!((code, v["major"].as_str()), (200, Some("1")));
    let (code, v) = raw(&m, "GET", "/apis", "", "");
    assert_eq!(code, 200);
    assert!(
        v["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["name"] == "network.openshift.io")),
        "{v}"
    );
    let (code, v) = raw(&m, "GET", "/apis/network.openshift.io/v1", "", "");
    assert_eq!(code, 200);
    assert!(
        v["resources"].as_array().is_some_and(|r| r
            .iter()
            .any(|r| r["name"] == "hostsubnets" && r["namespaced"] == false)),
        "{v}"
    );

    // Cluster-scoped openshift objects, the status subresource and a watch ERROR over raw HTTP.
    let (code, v) = raw(
        &m,
        "POST",
        "/apis/network.openshift.io/v1/hostsubnets",
        "application/json",
        r#"{"apiVersion":"network.openshift.io/v1","kind":"HostSubnet","metadata":{"name":"n1"},"host":"n1","subnet":"10.128.0.0/23"}"#,
    );
    assert_eq!(code, 201, "{v}");
    let (code, v) = raw(
        &m,
        "PATCH",
        "/apis/config.openshift.io/v1/networks/cluster/status",
        "application/merge-patch+json",
        r#"{"status":{}}"#,
    );
    assert_eq!((code, v["reason"].as_str()), (404, Some("NotFound")));
    m.put(json!({"apiVersion": "config.openshift.io/v1", "kind": "Network", "metadata": {"name": "cluster"}, "spec": {"a": 1}}));
    let (code, v) = raw(
        &m,
        "PATCH",
        "/apis/config.openshift.io/v1/networks/cluster/status",
        "application/merge-patch+json",
        r#"{"spec":{"a":2},"status":{"ok":true}}"#,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["spec"]["a"].as_i64(), v["status"]["ok"].as_bool()),
        (Some(1), Some(true)),
        "status subresource only changes status"
    );
    let old = m.resource_version() - 1;
    m.compact();
    let (code, v) = raw(
        &m,
        "GET",
        &format!("/apis/network.openshift.io/v1/hostsubnets?watch=true&resourceVersion={old}"),
        "",
        "",
    );
    assert_eq!(
        (code, v["type"].as_str(), v["object"]["code"].as_u64()),
        (200, Some("ERROR"), Some(410)),
        "{v}"
    );
}
