//! An in-process mock Kubernetes API server speaking the real HTTP protocol, for running the
//! controller with `--datastore kubernetes --kubeconfig FILE` against something a test controls.
//!
//! Objects are stored as `serde_json::Value`, generic over the [`ResourceDef`]s the server is
//! started with. It serves what kube-rs's `Api<K>` and `kube::runtime::watcher` use:
//!
//! * paths `/api/v1/[namespaces/{ns}/]{res}[/{name}[/status]]` and
//!   `/apis/{group}/{version}/...` (also the legacy `/watch/` prefix); `/version`, `/api`,
//!   `/apis`, `/api/v1`, `/apis/{g}[/{v}]` discovery;
//! * get, list (label/field selectors, `limit`/`continue` paging over a snapshot taken by the
//!   first page, so all pages share its resourceVersion), watch (from a resourceVersion, replayed
//!   from the history; BOOKMARKs with `allowWatchBookmarks`; `timeoutSeconds`; a 410 `Expired`
//!   ERROR event in an HTTP 200 stream when the resourceVersion is older than the history;
//!   `sendInitialEvents` with the `k8s.io/initial-events-end` bookmark), create (201,
//!   `generateName`, 409 AlreadyExists, 404 when the Namespace object is missing), update
//!   (409 Conflict on a stale `metadata.resourceVersion`), patch (merge, strategic, apply, JSON
//!   patch), delete (DeleteOptions preconditions), deletecollection, `dryRun=All`;
//! * every write stamps `metadata.resourceVersion` (one global counter), `uid`,
//!   `creationTimestamp` and `generation` (bumped when anything outside metadata/status
//!   changes); an update that changes nothing keeps the resourceVersion and sends no event;
//! * errors are `Status` objects with the matching HTTP code.
//!
//! Approximations (vs a real API server):
//! * strategic merge patch is applied as a JSON merge patch (lists are replaced, not merged by
//!   key; `$patch`/`$retainKeys`/`$setElementOrder` directives are dropped);
//! * server-side apply (`application/apply-patch+yaml`) is a merge patch that creates the
//!   object when absent: no managedFields, no field ownership, no conflicts between managers,
//!   fields dropped from an applied config are not removed;
//! * no finalizers/`deletionTimestamp` (delete is immediate, a Namespace delete does not cascade),
//!   no admission, no schema validation or defaulting, no authentication/RBAC;
//! * PUT/PATCH on the main resource also changes `status` (only `/status` is restricted to it);
//! * list ignores `resourceVersion`/`resourceVersionMatch` (it always serves the latest state, or
//!   the snapshot of its continue token), and a watch from a resourceVersion newer than the
//!   store's starts from now;
//! * field selectors accept any dotted path of the object;
//! * watch timeouts default to 30 min when `timeoutSeconds` is absent.
//!
//! What the real API server of the test cluster (`scripts/kube-up.sh`) now shows instead:
//! a watch expiring after etcd compacted its resourceVersion, the API server stopped and started
//! again, and 409 Conflict from another writer (`tests/tests/cluster_apiserver.rs`); egress
//! placement, Lease takeover, RBAC and NodeRestriction (`tests/tests/cluster_*.rs`). The mock
//! stays for what a real server cannot be made to do on demand: watches held open without
//! events (`hold_watches`) or lagging behind the store, a watch dropped mid-stream at a chosen
//! moment, exact answers for one object among many (a 404 or 422 the test scripts), and runs
//! of the controller tests without a cluster (seconds, not the cluster's minutes).

mod http;
mod patch;
mod select;
mod store;

use http::{lock, AppState, KillableListener, Shared};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use store::{Store, WatchMsg};
use tokio_util::sync::CancellationToken;

/// A resource the server serves: `group` is `""` for the core group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    /// The plural (URL) name, e.g. `configmaps`.
    pub resource: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

impl ResourceDef {
    pub const fn new(
        group: &'static str,
        version: &'static str,
        resource: &'static str,
        kind: &'static str,
        namespaced: bool,
    ) -> Self {
        Self {
            group,
            version,
            resource,
            kind,
            namespaced,
        }
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as in error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// What the flowmesh controller reads and writes.
pub const CONTROLLER_RESOURCES: &[ResourceDef] = &[
    ResourceDef::new("", "v1", "nodes", "Node", false),
    ResourceDef::new("", "v1", "namespaces", "Namespace", false),
    ResourceDef::new("", "v1", "pods", "Pod", true),
    ResourceDef::new("", "v1", "configmaps", "ConfigMap", true),
    ResourceDef::new("", "v1", "events", "Event", true),
    ResourceDef::new("events.k8s.io", "v1", "events", "Event", true),
    ResourceDef::new(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    ResourceDef::new(
        "network.openshift.io",
        "v1",
        "clusternetworks",
        "ClusterNetwork",
        false,
    ),
    ResourceDef::new(
        "network.openshift.io",
        "v1",
        "hostsubnets",
        "HostSubnet",
        false,
    ),
    ResourceDef::new(
        "network.openshift.io",
        "v1",
        "netnamespaces",
        "NetNamespace",
        false,
    ),
    ResourceDef::new(
        "network.openshift.io",
        "v1",
        "egressnetworkpolicies",
        "EgressNetworkPolicy",
        true,
    ),
    ResourceDef::new(
        "flowmesh.io",
        "v1",
        "podattachments",
        "PodAttachment",
        false,
    ),
    ResourceDef::new("coordination.k8s.io", "v1", "leases", "Lease", true),
    ResourceDef::new("config.openshift.io", "v1", "networks", "Network", false),
    ResourceDef::new("operator.openshift.io", "v1", "networks", "Network", false),
];

/// One request the server received, with its Kubernetes RBAC verb (get, list, watch, create,
/// update, patch, delete, deletecollection). `resource` is `plural` or `plural/subresource`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

struct UpState {
    token: CancellationToken,
    done: std::sync::mpsc::Receiver<()>,
}

/// The mock API server, serving plain HTTP on 127.0.0.1 from its own thread and tokio runtime.
/// All methods are blocking and thread-safe; they never need the caller's runtime. Stopped on
/// drop.
pub struct MockApiServer {
    store: Shared,
    addr: SocketAddr,
    handle: tokio::runtime::Handle,
    up: Mutex<Option<UpState>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// A kubeconfig for the API server at `server` (a URL; no auth, namespace `default`).
pub fn kubeconfig_for(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: mock\n  cluster:\n    server: {server}\n\
         contexts:\n- name: mock\n  context:\n    cluster: mock\n    user: mock\n    namespace: default\n\
         current-context: mock\nusers:\n- name: mock\n  user: {{}}\npreferences: {{}}\n"
    )
}

impl MockApiServer {
    /// Starts serving `resources` on a free port of 127.0.0.1.
    pub fn start(resources: &[ResourceDef]) -> Self {
        Self::try_start(resources).unwrap_or_else(|e| panic!("mock API server: {e}"))
    }

    /// [`MockApiServer::start`] with [`CONTROLLER_RESOURCES`].
    pub fn start_for_controller() -> Self {
        Self::start(CONTROLLER_RESOURCES)
    }

    pub fn try_start(resources: &[ResourceDef]) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (htx, hrx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("mock-kube-api".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("mock-kube-api-rt")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = htx.send(Err(e));
                        return;
                    }
                };
                let _ = htx.send(Ok(rt.handle().clone()));
                let _ = rt.block_on(stop_rx);
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        let handle = hrx
            .recv()
            .map_err(|_| std::io::Error::other("the server thread died"))??;
        let server = Self {
            store: Arc::new(Mutex::new(Store::new(resources.to_vec()))),
            addr,
            handle,
            up: Mutex::new(None),
            stop: Some(stop),
            thread: Some(thread),
        };
        let up = server.serve(listener)?;
        *server.up.lock().unwrap_or_else(|p| p.into_inner()) = Some(up);
        Ok(server)
    }

    fn serve(&self, listener: std::net::TcpListener) -> std::io::Result<UpState> {
        listener.set_nonblocking(true)?;
        let token = CancellationToken::new();
        let (done_tx, done) = std::sync::mpsc::channel();
        let state = AppState {
            store: self.store.clone(),
            epoch: token.clone(),
        };
        let t = token.clone();
        self.handle.spawn(async move {
            if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                let app = axum::Router::new().fallback(http::handle).with_state(state);
                let serve = axum::serve(
                    KillableListener {
                        listener,
                        token: t.clone(),
                    },
                    app,
                );
                let serve = std::future::IntoFuture::into_future(serve);
                tokio::pin!(serve);
                tokio::select! {
                    _ = &mut serve => {}
                    () = t.cancelled() => {}
                }
            }
            // The listener is dropped (closed) by now.
            let _ = done_tx.send(());
        });
        Ok(UpState { token, done })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server (no auth, namespace `default`).
    pub fn kubeconfig(&self) -> String {
        kubeconfig_for(&self.url())
    }

    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    fn resolve(&self, store: &Store, resource: &str) -> usize {
        store
            .find_res(resource)
            .unwrap_or_else(|| panic!("mock API server: unknown resource {resource:?}"))
    }

    /// Creates or replaces an object (resource from its `apiVersion` and `kind`) as a user's
    /// `kubectl apply` would: stamps a new resourceVersion and sends watch events; not recorded
    /// in [`MockApiServer::requests`], no Namespace check. Returns the stored object.
    /// Panics on an object of an unknown resource or without a name.
    pub fn put(&self, obj: Value) -> Value {
        let mut store = lock(&self.store);
        let res = store
            .res_of(&obj)
            .unwrap_or_else(|| panic!("mock API server: no resource for {obj}"));
        store
            .upsert(res, obj)
            .unwrap_or_else(|e| panic!("mock API server: put: {}", e.message))
    }

    /// Creates the Namespaces every real cluster has: default, kube-system, kube-public,
    /// kube-node-lease (a fresh mock has none).
    pub fn seed_default_namespaces(&self) {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            self.put(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        }
    }

    /// [`MockApiServer::put`] for many objects.
    pub fn seed(&self, objs: impl IntoIterator<Item = Value>) {
        for o in objs {
            self.put(o);
        }
    }

    /// `resource` is `plural`, `plural.group` or `group/plural` (a bare plural prefers core).
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let store = lock(&self.store);
        let res = self.resolve(&store, resource);
        store.get(res, namespace, name).cloned()
    }

    /// Objects of a resource, in one namespace or all, ordered by namespace and name.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        let store = lock(&self.store);
        let res = self.resolve(&store, resource);
        store.list_all(res, namespace)
    }

    /// Deletes an object (DELETED event); the deleted object, None if absent.
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let mut store = lock(&self.store);
        let res = self.resolve(&store, resource);
        store.delete(res, namespace, name, None, false).ok()
    }

    /// The store's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.store).rv()
    }

    /// Forgets the event history and the list snapshots: watches from an older
    /// resourceVersion and old continue tokens get 410 Expired.
    pub fn compact(&self) {
        lock(&self.store).compact();
    }

    /// Sends a 410 Expired ERROR event on every open watch and ends it.
    pub fn expire_watches(&self) {
        lock(&self.store).end_watches(|| WatchMsg::Expire);
    }

    /// Cuts every open watch stream abruptly (no final event, no terminating chunk).
    pub fn drop_watches(&self) {
        lock(&self.store).end_watches(|| WatchMsg::Cut);
    }

    /// Open watch streams.
    pub fn open_watches(&self) -> usize {
        lock(&self.store).open_watches()
    }

    /// Down: closes the listener and every open connection, ending every watch (new connections
    /// are refused; test controls keep working and their events are replayed to watches that
    /// resume from an older resourceVersion after the server is up again). Up:
    /// listens again on the same port. Idempotent. Panics if the port cannot be re-bound
    /// within 10 s.
    pub fn set_down(&self, down: bool) {
        let mut up = self.up.lock().unwrap_or_else(|p| p.into_inner());
        if down {
            if let Some(u) = up.take() {
                u.token.cancel();
                let _ = u.done.recv_timeout(Duration::from_secs(10));
                lock(&self.store).end_watches(|| WatchMsg::Cut);
            }
            return;
        }
        if up.is_some() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match std::net::TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => {
                    panic!("mock API server: re-binding {}: {e}", self.addr)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let state = self
            .serve(listener)
            .unwrap_or_else(|e| panic!("mock API server: serving again: {e}"));
        *up = Some(state);
    }

    pub fn is_down(&self) -> bool {
        self.up.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// The next `n` requests with this RBAC `verb` on `resource` (`plural`, `plural/sub`,
    /// `plural.group`, `group/plural`; `*` matches anything) fail with `code` (a Status with the
    /// matching reason: 409 Conflict, 500 InternalError, ...). They are still recorded. Note
    /// kube-rs's default client retries 429, 503 and 504 by itself (a few times, with backoff).
    pub fn fail_next(&self, verb: &str, resource: &str, code: u16, n: u32) {
        lock(&self.store).add_failure(verb, resource, code, n);
    }

    /// Drops every failure [`fail_next`](Self::fail_next) injected that is not used up yet.
    pub fn clear_failures(&self) {
        lock(&self.store).clear_failures();
    }

    /// Every HTTP request received so far (test controls are not recorded).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.store).requests.clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.store).requests.clear();
    }

    /// Holds every event back from the open watches (the objects change, lists and gets show
    /// them, watches see nothing yet) until called with `false`, which sends them in order: a
    /// client's watch lagging behind the API server, which a real server cannot be made to
    /// show on demand.
    pub fn hold_watches(&self, on: bool) {
        lock(&self.store).hold_watches(on);
    }

    /// Watch bookmark period for watches opened from now on (default 1 s).
    pub fn set_bookmark_interval(&self, every: Duration) {
        lock(&self.store).bookmark_interval = every;
    }

    /// Whether creating a namespaced object needs its Namespace object (default true; only
    /// when the server serves core `namespaces`).
    pub fn set_require_namespaces(&self, on: bool) {
        lock(&self.store).require_namespaces = on;
    }

    /// Polls `pred` every 20 ms until true or `timeout`; whether it became true. Blocks the
    /// calling thread: from async code use [`MockApiServer::wait_for_async`].
    pub fn wait_for(&self, timeout: Duration, mut pred: impl FnMut(&Self) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(self) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`MockApiServer::wait_for`] for async callers.
    pub async fn wait_for_async(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&Self) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(self) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until an object exists and satisfies `pred`; the object.
    pub fn wait_for_object(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        let mut found = None;
        self.wait_for(timeout, |s| {
            found = s.get(resource, namespace, name).filter(|o| pred(o));
            found.is_some()
        });
        found
    }
}

impl Drop for MockApiServer {
    fn drop(&mut self) {
        self.set_down(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
