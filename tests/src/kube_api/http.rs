//! The HTTP side: a killable listener for axum, request routing (paths, verbs, query
//! parameters), discovery answers and streamed watches.

use super::select::{FieldSelector, LabelSelector};
use super::store::{meta_str, ApiError, PatchKind, Store, WatchFilter, WatchMsg};
use super::RequestRecord;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

pub(crate) type Shared = Arc<Mutex<Store>>;

pub(crate) fn lock(s: &Shared) -> MutexGuard<'_, Store> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection that fails (read, write and flush) once its up-period's token is cancelled, so
/// `set_down(true)` cuts open connections too.
pub(crate) struct KillableIo {
    inner: TcpStream,
    cancelled: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl KillableIo {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.cancelled.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "mock API server is down",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl AsyncRead for KillableIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

pub(crate) struct KillableListener {
    pub listener: TcpListener,
    pub token: CancellationToken,
}

impl axum::serve::Listener for KillableListener {
    type Io = KillableIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((s, a)) => {
                    let _ = s.set_nodelay(true);
                    let io = KillableIo {
                        inner: s,
                        cancelled: Box::pin(self.token.clone().cancelled_owned()),
                    };
                    return (io, a);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub store: Shared,
    /// Cancelled when the server goes down: ends watches and connections of this up-period.
    pub epoch: CancellationToken,
}

fn json_response(code: u16, v: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_default()
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn discovery(store: &Store, segs: &[String]) -> Option<Value> {
    let resources = |group: &str, version: &str| {
        let rs: Vec<Value> = store
            .defs
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .map(|d| {
                json!({"name": d.resource, "singularName": d.kind.to_lowercase(),
                       "namespaced": d.namespaced, "kind": d.kind,
                       "verbs": ["create", "delete", "deletecollection", "get", "list",
                                 "patch", "update", "watch"]})
            })
            .collect();
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        (!rs.is_empty())
            .then(|| json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": rs}))
    };
    let group_json = |g: &str| {
        let mut versions: Vec<&str> = store
            .defs
            .iter()
            .filter(|d| d.group == g)
            .map(|d| d.version)
            .collect();
        versions.dedup();
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
            .collect();
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs,
               "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
    };
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Some(json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-flowmesh-mock",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc",
            "platform": "linux/amd64"})),
        ["api"] => Some(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})),
        ["apis"] => {
            let mut groups: Vec<&str> = store
                .defs
                .iter()
                .map(|d| d.group)
                .filter(|g| !g.is_empty())
                .collect();
            groups.sort_unstable();
            groups.dedup();
            let gs: Vec<Value> = groups.iter().map(|g| group_json(g)).collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs}))
        }
        ["api", v] => resources("", v),
        ["apis", g] => store
            .defs
            .iter()
            .any(|d| d.group == *g)
            .then(|| group_json(g)),
        ["apis", g, v] => resources(g, v),
        _ => None,
    }
}

/// A parsed resource request.
struct Target {
    res: usize,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch_path: bool,
}

fn not_found_path() -> ApiError {
    ApiError::new(404, "the server could not find the requested resource")
}

fn parse_target(store: &Store, segs: &[String]) -> Result<Target, ApiError> {
    let (group, version, rest) = match segs {
        [a, v, rest @ ..] if a == "api" => ("", v.as_str(), rest),
        [a, g, v, rest @ ..] if a == "apis" => (g.as_str(), v.as_str(), rest),
        _ => return Err(not_found_path()),
    };
    let (watch_path, rest) = match rest {
        [w, rest @ ..] if w == "watch" => (true, rest),
        _ => (false, rest),
    };
    let namespaced_res = |r: &str| {
        store
            .find_gvr(group, version, r)
            .filter(|i| store.defs[*i].namespaced)
    };
    let (ns, rest) = match rest {
        [n, ns, r, rest @ ..] if n == "namespaces" && namespaced_res(r).is_some() => {
            (Some(ns.clone()), &segs[segs.len() - rest.len() - 1..])
        }
        _ => (None, rest),
    };
    let Some((r, tail)) = rest.split_first() else {
        return Err(not_found_path());
    };
    let res = store
        .find_gvr(group, version, r)
        .ok_or_else(not_found_path)?;
    let def = &store.defs[res];
    let (name, sub) = match tail {
        [] => (None, None),
        [n] => (Some(n.clone()), None),
        [n, s] => (Some(n.clone()), Some(s.clone())),
        _ => return Err(not_found_path()),
    };
    if ns.is_some() != def.namespaced && (name.is_some() || !def.namespaced) {
        return Err(not_found_path());
    }
    if name.as_deref() == Some("") {
        return Err(not_found_path());
    }
    Ok(Target {
        res,
        ns,
        name,
        sub,
        watch_path,
    })
}

fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

pub(crate) async fn handle(State(st): State<AppState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let segs: Vec<String> = parts
        .uri
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let q: HashMap<String, String> =
        match axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri) {
            Ok(q) => q.0,
            Err(e) => return error_response(&ApiError::bad_request(format!("bad query: {e}"))),
        };
    if parts.method == Method::GET {
        if let Some(v) = discovery(&lock(&st.store), &segs) {
            return json_response(200, &v);
        }
    }
    let target = match parse_target(&lock(&st.store), &segs) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let watch = target.watch_path || truthy(&q, "watch");
    let verb = match (&parts.method, target.name.is_some()) {
        (&Method::GET, _) if watch => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => {
            return error_response(&ApiError::new(
                405,
                "the server does not allow this method on the requested resource",
            ))
        }
    };
    let bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading the body: {e}"))),
    };
    let record = {
        let store = lock(&st.store);
        let def = &store.defs[target.res];
        RequestRecord {
            verb: verb.to_string(),
            group: def.group.to_string(),
            resource: match &target.sub {
                Some(s) => format!("{}/{s}", def.resource),
                None => def.resource.to_string(),
            },
            namespace: target.ns.clone(),
            name: target.name.clone(),
        }
    };
    {
        let mut store = lock(&st.store);
        store.requests.push(record.clone());
        if let Some(e) = store.take_failure(&record) {
            return error_response(&e);
        }
    }
    if matches!(target.sub.as_deref(), Some(s) if s != "status") {
        return error_response(&not_found_path());
    }
    let status_only = target.sub.is_some();
    let dry_run = q.get("dryRun").is_some_and(|v| v == "All");
    let labels = match LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str)) {
        Ok(l) => l,
        Err(e) => return error_response(&ApiError::bad_request(e)),
    };
    let mut field_sel = q.get("fieldSelector").cloned().unwrap_or_default();
    if let (true, Some(n)) = (watch, &target.name) {
        // Watching one object: a real server turns the name into a field selector.
        if !field_sel.is_empty() {
            field_sel.push(',');
        }
        field_sel.push_str(&format!("metadata.name={n}"));
    }
    let fields = match FieldSelector::parse(&field_sel) {
        Ok(f) => f,
        Err(e) => return error_response(&ApiError::bad_request(e)),
    };
    let filter = WatchFilter {
        res: target.res,
        ns: target.ns.clone(),
        labels,
        fields,
    };
    let parse_body = |b: &Bytes| -> Result<Value, ApiError> {
        serde_json::from_slice(b)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
    };
    let ns = target.ns.as_deref();
    let name = target.name.as_deref().unwrap_or_default();
    let result: Result<(u16, Value), ApiError> = match verb {
        "watch" => return start_watch(&st, filter, &q),
        "get" => {
            let store = lock(&st.store);
            match store.get(target.res, ns, name) {
                Some(v) => Ok((200, v.clone())),
                None => Err(ApiError::not_found(&store.defs[target.res], name)),
            }
        }
        "list" => list(&st, &filter, &q).map(|v| (200, v)),
        "create" => parse_body(&bytes)
            .and_then(|b| lock(&st.store).create(target.res, ns, b, dry_run, true))
            .map(|v| (201, v)),
        "update" => parse_body(&bytes)
            .and_then(|b| lock(&st.store).update(target.res, ns, name, b, status_only, dry_run))
            .map(|v| (200, v)),
        "patch" => patch(&st, &target, &parts.headers, &bytes, status_only, dry_run),
        "delete" => {
            let opts: Option<Value> = serde_json::from_slice(&bytes).ok();
            let pre = opts.as_ref().and_then(|o| o.get("preconditions"));
            lock(&st.store)
                .delete(target.res, ns, name, pre, dry_run)
                .map(|v| (200, v))
        }
        _ => delete_collection(&st, &filter, dry_run).map(|v| (200, v)),
    };
    match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}

fn list(
    st: &AppState,
    filter: &WatchFilter,
    q: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let limit = match q.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    let cont = q
        .get("continue")
        .map(String::as_str)
        .filter(|c| !c.is_empty());
    let mut store = lock(&st.store);
    let page = store.list(filter, limit, cont)?;
    let def = &store.defs[filter.res];
    let mut md = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = page.cont {
        md["continue"] = json!(c);
        md["remainingItemCount"] = json!(page.remaining);
    }
    Ok(
        json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(),
              "metadata": md, "items": page.items}),
    )
}

fn delete_collection(
    st: &AppState,
    filter: &WatchFilter,
    dry_run: bool,
) -> Result<Value, ApiError> {
    let mut store = lock(&st.store);
    let victims = store.list(filter, None, None)?.items;
    let mut deleted = Vec::new();
    for v in victims {
        let ns = meta_str(&v, "namespace").map(str::to_string);
        let name = meta_str(&v, "name").unwrap_or_default().to_string();
        deleted.push(store.delete(filter.res, ns.as_deref(), &name, None, dry_run)?);
    }
    let def = &store.defs[filter.res];
    Ok(
        json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(),
              "metadata": {"resourceVersion": store.rv().to_string()}, "items": deleted}),
    )
}

fn patch(
    st: &AppState,
    t: &Target,
    headers: &axum::http::HeaderMap,
    bytes: &Bytes,
    status_only: bool,
    dry_run: bool,
) -> Result<(u16, Value), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let ct = ct.split(';').next().unwrap_or_default().trim();
    let kind = match ct {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/apply-patch+yaml" | "application/apply-patch+json" => PatchKind::Apply,
        "application/json-patch+json" => PatchKind::Json,
        other => {
            return Err(ApiError::new(
                415,
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {other:?}"),
            ))
        }
    };
    let body: Value = if kind == PatchKind::Apply {
        serde_yaml::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the apply body is not valid YAML: {e}")))?
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?
    };
    let name = t.name.as_deref().unwrap_or_default();
    let mut store = lock(&st.store);
    let existed = store.get(t.res, t.ns.as_deref(), name).is_some();
    let v = store.patch(
        t.res,
        t.ns.as_deref(),
        name,
        kind,
        &body,
        status_only,
        dry_run,
    )?;
    Ok((if existed { 200 } else { 201 }, v))
}

fn event_line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn expired_event(message: String) -> Value {
    json!({"type": "ERROR", "object": ApiError::new(410, message).status()})
}

type Chunk = Result<Bytes, io::Error>;

fn start_watch(st: &AppState, filter: WatchFilter, q: &HashMap<String, String>) -> Response {
    let from = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => match rv.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resource version {rv:?}"
                )))
            }
        },
    };
    let send_initial = truthy(q, "sendInitialEvents");
    let from = if send_initial { None } else { from };
    let bookmarks = truthy(q, "allowWatchBookmarks");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let (out_tx, mut out_rx) = mpsc::channel::<Chunk>(1024);
    let body = Body::from_stream(futures::stream::poll_fn(move |cx| out_rx.poll_recv(cx)));
    let st = st.clone();
    // Register synchronously so events after this request are not missed.
    let (tx, rx) = mpsc::unbounded_channel();
    let (api_version, kind, opened, interval) = {
        let mut store = lock(&st.store);
        let def = &store.defs[filter.res];
        let (av, kind) = (def.api_version(), def.kind);
        let interval = store.bookmark_interval;
        (av, kind, store.open_watch(filter, from, tx), interval)
    };
    let res = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_default();
    tokio::spawn(async move {
        let (id, initial) = match opened {
            Ok(x) => x,
            Err(msg) => {
                let _ = out_tx.send(Ok(event_line(&expired_event(msg)))).await;
                return;
            }
        };
        let w = WatchTask {
            st: st.clone(),
            out: out_tx,
            rx,
            id,
            api_version,
            kind: kind.to_string(),
        };
        w.run(initial, send_initial, bookmarks, interval, timeout)
            .await;
        lock(&st.store).close_watch(id);
    });
    res
}

struct WatchTask {
    st: AppState,
    out: mpsc::Sender<Chunk>,
    rx: mpsc::UnboundedReceiver<WatchMsg>,
    id: u64,
    api_version: String,
    kind: String,
}

enum Flow {
    Continue,
    Stop,
}

impl WatchTask {
    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"apiVersion": self.api_version, "kind": self.kind, "metadata": md}})
    }

    async fn send(&self, v: &Value) -> Flow {
        match self.out.send(Ok(event_line(v))).await {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop,
        }
    }

    async fn deliver(&self, m: WatchMsg) -> Flow {
        match m {
            WatchMsg::Event(v) => self.send(&v).await,
            WatchMsg::Expire => {
                let _ = self
                    .send(&expired_event("the watch was expired by the test".into()))
                    .await;
                Flow::Stop
            }
            WatchMsg::Cut => {
                let _ = self
                    .out
                    .send(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "watch cut by the test",
                    )))
                    .await;
                Flow::Stop
            }
        }
    }

    async fn run(
        mut self,
        initial: Vec<Value>,
        send_initial: bool,
        bookmarks: bool,
        interval: Duration,
        timeout: Duration,
    ) {
        let _ = self.id;
        for ev in &initial {
            if let Flow::Stop = self.send(ev).await {
                return;
            }
        }
        if send_initial {
            let (rv, queued) = lock(&self.st.store).bookmark_point(&mut self.rx);
            for m in queued {
                if let Flow::Stop = self.deliver(m).await {
                    return;
                }
            }
            if let Flow::Stop = self.send(&self.bookmark(rv, true)).await {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let interval = interval.max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let epoch = self.st.epoch.clone();
        loop {
            tokio::select! {
                () = epoch.cancelled() => {
                    let _ = self.out.send(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "server down"))).await;
                    return;
                }
                () = self.out.closed() => return,
                () = &mut deadline => return,
                _ = ticker.tick(), if bookmarks => {
                    let (rv, queued) = lock(&self.st.store).bookmark_point(&mut self.rx);
                    for m in queued {
                        if let Flow::Stop = self.deliver(m).await { return; }
                    }
                    if let Flow::Stop = self.send(&self.bookmark(rv, false)).await { return; }
                }
                m = self.rx.recv() => match m {
                    Some(m) => if let Flow::Stop = self.deliver(m).await { return; },
                    None => return,
                },
            }
        }
    }
}
