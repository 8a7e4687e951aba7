//! The object store: objects per resource, the global resourceVersion counter, the event
//! history watches resume from, open watches, list snapshots behind continue tokens, injected
//! failures and the request log.

use super::patch::{json_patch, merge_patch, strip_directives};
use super::select::{FieldSelector, LabelSelector};
use super::{RequestRecord, ResourceDef};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedSender;

/// Events kept for watches to resume from before the oldest ones are dropped (as if compacted).
const MAX_HISTORY: usize = 100_000;
/// List snapshots kept for continue tokens.
const MAX_SNAPSHOTS: usize = 256;

/// A Kubernetes `Status` failure with its HTTP code.
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

impl ApiError {
    pub(crate) fn new(code: u16, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason_for(code),
            message: message.into(),
            details: None,
        }
    }
    fn with_details(mut self, def: &ResourceDef, name: &str) -> Self {
        let mut d = json!({"name": name, "kind": def.resource});
        if !def.group.is_empty() {
            d["group"] = json!(def.group);
        }
        self.details = Some(d);
        self
    }
    pub(crate) fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(404, format!("{} {name:?} not found", def.qualified())).with_details(def, name)
    }
    pub(crate) fn conflict(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; \
                 please apply your changes to the latest version and try again",
                def.qualified()
            ),
        )
        .with_details(def, name)
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }
    pub(crate) fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EvType {
    Added,
    Modified,
    Deleted,
}

struct HistEvent {
    rv: u64,
    res: usize,
    ty: EvType,
    old: Option<Value>,
    obj: Value,
}

/// What a watch sees: resource, namespace and selectors.
#[derive(Clone, Debug)]
pub(crate) struct WatchFilter {
    pub res: usize,
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl WatchFilter {
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self.ns.as_deref().is_none_or(|ns| {
            obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
        });
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event this watch sees for a change, as a real server's filtered watch does: an object
    /// that stops matching is DELETED, one that starts matching is ADDED.
    fn translate(&self, ty: EvType, old: Option<&Value>, obj: &Value) -> Option<Value> {
        let now = self.matches(obj);
        let t = match ty {
            EvType::Added if now => "ADDED",
            EvType::Deleted if now => "DELETED",
            EvType::Modified => match (old.is_some_and(|o| self.matches(o)), now) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            },
            _ => return None,
        };
        Some(json!({"type": t, "object": obj}))
    }
}

/// Messages to an open watch.
#[derive(Debug)]
pub(crate) enum WatchMsg {
    Event(Value),
    /// Send a 410 Expired ERROR event and end the stream.
    Expire,
    /// Cut the stream abruptly.
    Cut,
}

struct WatchReg {
    id: u64,
    filter: WatchFilter,
    tx: UnboundedSender<WatchMsg>,
}

struct Snapshot {
    rv: u64,
    items: Vec<Value>,
}

struct Failure {
    verb: String,
    resource: String,
    code: u16,
    remaining: u32,
}

/// A list page.
pub(crate) struct ListPage {
    pub rv: u64,
    pub items: Vec<Value>,
    pub cont: Option<String>,
    pub remaining: usize,
}

type Key = (String, String);

pub(crate) struct Store {
    pub defs: Vec<ResourceDef>,
    objects: Vec<BTreeMap<Key, Value>>,
    rv: u64,
    counter: u64,
    history: VecDeque<HistEvent>,
    /// Watches may resume from any RV >= this one.
    compacted_rv: u64,
    watches: Vec<WatchReg>,
    next_watch: u64,
    snapshots: HashMap<u64, Snapshot>,
    next_snapshot: u64,
    failures: Vec<Failure>,
    pub requests: Vec<RequestRecord>,
    pub require_namespaces: bool,
    pub bookmark_interval: Duration,
    /// Events held back from the open watches while a test holds them (see
    /// `MockApiServer::hold_watches`).
    held: Option<Vec<HeldEvent>>,
}

/// A change held back from the watches: resource index, event type, old and new object.
type HeldEvent = (usize, EvType, Option<Value>, Value);

/// RFC 3339 UTC with second precision, as Kubernetes writes `creationTimestamp`.
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let o = obj.as_object_mut().expect("made an object above");
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("made an object above")
}

/// The object without metadata and status: a change there bumps `metadata.generation`.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

/// How a PATCH body is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Strategic,
    Apply,
    Json,
}

impl Store {
    pub(crate) fn new(defs: Vec<ResourceDef>) -> Self {
        let n = defs.len();
        Self {
            defs,
            objects: vec![BTreeMap::new(); n],
            rv: 1,
            counter: 0,
            history: VecDeque::new(),
            compacted_rv: 1,
            watches: Vec::new(),
            next_watch: 1,
            snapshots: HashMap::new(),
            next_snapshot: 1,
            failures: Vec::new(),
            requests: Vec::new(),
            require_namespaces: true,
            bookmark_interval: Duration::from_secs(1),
            held: None,
        }
    }

    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// `plural`, `plural.group` or `group/plural`; a bare plural prefers the core group.
    pub(crate) fn find_res(&self, spec: &str) -> Option<usize> {
        if let Some((g, r)) = spec.split_once('/') {
            return self
                .defs
                .iter()
                .position(|d| d.group == g && d.resource == r);
        }
        if let Some(i) = self.defs.iter().position(|d| d.qualified() == spec) {
            return Some(i);
        }
        let mut it = self
            .defs
            .iter()
            .enumerate()
            .filter(|(_, d)| d.resource == spec);
        let first = it.next().map(|(i, _)| i);
        self.defs
            .iter()
            .position(|d| d.resource == spec && d.group.is_empty())
            .or(first)
    }

    pub(crate) fn find_gvr(&self, group: &str, version: &str, resource: &str) -> Option<usize> {
        self.defs
            .iter()
            .position(|d| d.group == group && d.version == version && d.resource == resource)
    }

    /// The resource an object belongs to, from its `apiVersion` and `kind`.
    pub(crate) fn res_of(&self, obj: &Value) -> Option<usize> {
        let av = obj.get("apiVersion").and_then(Value::as_str)?;
        let kind = obj.get("kind").and_then(Value::as_str)?;
        let (g, v) = av.split_once('/').unwrap_or(("", av));
        self.defs
            .iter()
            .position(|d| d.group == g && d.version == v && d.kind == kind)
    }

    fn key(&self, res: usize, ns: Option<&str>, name: &str) -> Key {
        let ns = if self.defs[res].namespaced {
            ns.unwrap_or_default()
        } else {
            ""
        };
        (ns.to_string(), name.to_string())
    }

    pub(crate) fn get(&self, res: usize, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.objects[res].get(&self.key(res, ns, name))
    }

    pub(crate) fn list_all(&self, res: usize, ns: Option<&str>) -> Vec<Value> {
        self.objects[res]
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|ns| ns == ons))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn commit(&mut self, res: usize, ty: EvType, old: Option<Value>, obj: Value) {
        let rv = self.rv;
        match &mut self.held {
            Some(q) => q.push((res, ty, old.clone(), obj.clone())),
            None => self.deliver(res, ty, old.as_ref(), &obj),
        }
        self.history.push_back(HistEvent {
            rv,
            res,
            ty,
            old,
            obj,
        });
        while self.history.len() > MAX_HISTORY {
            if let Some(e) = self.history.pop_front() {
                self.compacted_rv = e.rv;
            }
        }
    }

    /// Checks apiVersion/kind/namespace/name of a body against the request and fills them in.
    fn normalize(
        &self,
        res: usize,
        ns: Option<&str>,
        name: Option<&str>,
        body: &mut Value,
    ) -> ApiResult<()> {
        let def = &self.defs[res];
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let av = def.api_version();
        match body.get("apiVersion").and_then(Value::as_str) {
            Some(a) if !a.is_empty() && a != av => {
                return Err(ApiError::bad_request(format!(
                "the API version in the data ({a}) does not match the expected API version ({av})"
            )))
            }
            _ => body["apiVersion"] = json!(av),
        }
        match body.get("kind").and_then(Value::as_str) {
            Some(k) if !k.is_empty() && k != def.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    def.kind
                )))
            }
            _ => body["kind"] = json!(def.kind),
        }
        let body_ns = meta_str(body, "namespace").map(str::to_string);
        let body_name = meta_str(body, "name").map(str::to_string);
        let m = meta_mut(body);
        if def.namespaced {
            let Some(ns) = ns else {
                return Err(ApiError::new(
                    404,
                    "the server could not find the requested resource",
                ));
            };
            if body_ns.as_deref().is_some_and(|b| b != ns) {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        if let Some(name) = name {
            if body_name.as_deref().is_some_and(|b| b != name) {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    body_name.unwrap_or_default()
                )));
            }
            m.insert("name".into(), json!(name));
        }
        Ok(())
    }

    fn namespace_exists(&self, ns: &str) -> bool {
        match self.find_gvr("", "v1", "namespaces") {
            Some(nsres) if self.require_namespaces => {
                self.objects[nsres].contains_key(&(String::new(), ns.to_string()))
            }
            _ => true,
        }
    }

    fn generate_name(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let mut x = self.counter.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.rv.rotate_left(17);
        let mut s = prefix.to_string();
        for _ in 0..5 {
            s.push(char::from(
                b"bcdfghjklmnpqrstvwxz2456789"[(x % 27) as usize],
            ));
            x /= 27;
        }
        s
    }

    /// POST: create. `check_ns` enforces that the Namespace object exists.
    pub(crate) fn create(
        &mut self,
        res: usize,
        ns: Option<&str>,
        mut body: Value,
        dry_run: bool,
        check_ns: bool,
    ) -> ApiResult<Value> {
        self.normalize(res, ns, None, &mut body)?;
        if meta_str(&body, "resourceVersion").is_some() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match (meta_str(&body, "name"), meta_str(&body, "generateName")) {
            (Some(n), _) => n.to_string(),
            (None, Some(g)) => {
                let g = g.to_string();
                let mut n = self.generate_name(&g);
                while self.get(res, ns, &n).is_some() {
                    n = self.generate_name(&g);
                }
                n
            }
            (None, None) => {
                return Err(ApiError::new(422, "name or generateName is required")
                    .with_details(&self.defs[res], ""))
            }
        };
        let def = self.defs[res];
        if def.namespaced && check_ns {
            let ns = ns.unwrap_or_default();
            if !self.namespace_exists(ns) {
                return Err(ApiError::new(404, format!("namespaces {ns:?} not found"))
                    .with_details(
                        &ResourceDef::new("", "v1", "namespaces", "Namespace", false),
                        ns,
                    ));
            }
        }
        if self.get(res, ns, &name).is_some() {
            return Err(
                ApiError::new(409, format!("{} {name:?} already exists", def.qualified()))
                    .with_details(&def, &name)
                    .reason("AlreadyExists"),
            );
        }
        self.counter += 1;
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (self.counter >> 16) as u32 ^ 0x5eed_f10e,
            self.counter & 0xffff,
            self.rv & 0xfff,
            res & 0xfff,
            self.counter
        );
        let rv = if dry_run { self.rv } else { self.next_rv() };
        let m = meta_mut(&mut body);
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.insert("generation".into(), json!(1));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        if !dry_run {
            let key = self.key(res, ns, &name);
            self.objects[res].insert(key, body.clone());
            self.commit(res, EvType::Added, None, body.clone());
        }
        Ok(body)
    }

    /// Stores `new` over `old` (same key): keeps uid/creationTimestamp, bumps generation when
    /// anything outside metadata/status changed, and is a no-op (same RV, no event) when nothing
    /// changed, like a real server.
    fn store_update(&mut self, res: usize, old: Value, mut new: Value, dry_run: bool) -> Value {
        let om = meta(&old).cloned().unwrap_or_default();
        let generation = om.get("generation").and_then(Value::as_i64).unwrap_or(1);
        let bump = spec_part(&old) != spec_part(&new);
        let m = meta_mut(&mut new);
        for k in ["uid", "creationTimestamp", "resourceVersion"] {
            match om.get(k) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
        m.insert(
            "generation".into(),
            json!(if bump { generation + 1 } else { generation }),
        );
        if new == old {
            return old;
        }
        if dry_run {
            return new;
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        let ns = meta_str(&new, "namespace").map(str::to_string);
        let name = meta_str(&new, "name").unwrap_or_default().to_string();
        let key = self.key(res, ns.as_deref(), &name);
        self.objects[res].insert(key, new.clone());
        self.commit(res, EvType::Modified, Some(old), new.clone());
        new
    }

    fn check_rv(&self, res: usize, name: &str, stored: &Value, body: &Value) -> ApiResult<()> {
        match meta_str(body, "resourceVersion") {
            Some(rv) if Some(rv) != meta_str(stored, "resourceVersion") => {
                Err(ApiError::conflict(&self.defs[res], name))
            }
            _ => Ok(()),
        }
    }

    /// Keeps everything of `old` but its status, taken from `new` (the status subresource).
    fn only_status(old: &Value, new: &Value) -> Value {
        let mut out = old.clone();
        match new.get("status") {
            Some(s) => out["status"] = s.clone(),
            None => {
                if let Some(o) = out.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        if let Some(rv) = meta_str(new, "resourceVersion") {
            meta_mut(&mut out).insert("resourceVersion".into(), json!(rv));
        }
        out
    }

    /// PUT: update (replace). An empty body resourceVersion means unconditional.
    pub(crate) fn update(
        &mut self,
        res: usize,
        ns: Option<&str>,
        name: &str,
        mut body: Value,
        status_only: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        self.normalize(res, ns, Some(name), &mut body)?;
        let Some(old) = self.get(res, ns, name).cloned() else {
            return Err(ApiError::not_found(&self.defs[res], name));
        };
        self.check_rv(res, name, &old, &body)?;
        if status_only {
            body = Self::only_status(&old, &body);
        }
        Ok(self.store_update(res, old, body, dry_run))
    }

    /// PATCH. Server-side apply creates the object when absent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        res: usize,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
        status_only: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let old = self.get(res, ns, name).cloned();
        if old.is_none() && kind != PatchKind::Apply {
            return Err(ApiError::not_found(&self.defs[res], name));
        }
        let mut new = old.clone().unwrap_or_else(|| json!({}));
        match kind {
            PatchKind::Merge | PatchKind::Apply => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                merge_patch(&mut new, patch);
            }
            PatchKind::Strategic => {
                let mut p = patch.clone();
                strip_directives(&mut p);
                if !p.is_object() {
                    return Err(ApiError::bad_request(
                        "a strategic merge patch must be a JSON object",
                    ));
                }
                merge_patch(&mut new, &p);
            }
            PatchKind::Json => {
                json_patch(&mut new, patch).map_err(|e| ApiError::new(422, e))?;
            }
        }
        let Some(old) = old else {
            if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            return self.create(res, ns, new, dry_run, true);
        };
        self.normalize(res, ns, Some(name), &mut new)?;
        self.check_rv(res, name, &old, &new)?;
        if status_only {
            new = Self::only_status(&old, &new);
        }
        Ok(self.store_update(res, old, new, dry_run))
    }

    /// DELETE: the last state with a new resourceVersion, also sent as the DELETED event.
    pub(crate) fn delete(
        &mut self,
        res: usize,
        ns: Option<&str>,
        name: &str,
        preconditions: Option<&Value>,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let key = self.key(res, ns, name);
        let Some(old) = self.objects[res].get(&key) else {
            return Err(ApiError::not_found(&self.defs[res], name));
        };
        if let Some(p) = preconditions {
            let rv_bad = p
                .get("resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|rv| Some(rv) != meta_str(old, "resourceVersion"));
            let uid_bad = p
                .get("uid")
                .and_then(Value::as_str)
                .is_some_and(|u| Some(u) != meta_str(old, "uid"));
            if rv_bad || uid_bad {
                return Err(ApiError::conflict(&self.defs[res], name));
            }
        }
        if dry_run {
            return Ok(old.clone());
        }
        let mut obj = self.objects[res].remove(&key).unwrap_or_default();
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.commit(res, EvType::Deleted, None, obj.clone());
        Ok(obj)
    }

    /// Test control: create or replace regardless of resourceVersion.
    pub(crate) fn upsert(&mut self, res: usize, mut obj: Value) -> ApiResult<Value> {
        let ns = meta_str(&obj, "namespace").map(str::to_string);
        let name = meta_str(&obj, "name").map(str::to_string);
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        match name
            .as_deref()
            .and_then(|n| self.get(res, ns.as_deref(), n))
        {
            Some(_) => {
                let n = name.unwrap_or_default();
                self.update(res, ns.as_deref(), &n, obj, false, false)
            }
            None => self.create(res, ns.as_deref(), obj, false, false),
        }
    }

    /// A list page: the first page snapshots the matching objects, continue tokens page through
    /// that snapshot (so all pages share one resourceVersion, like a real server).
    pub(crate) fn list(
        &mut self,
        filter: &WatchFilter,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> ApiResult<ListPage> {
        let (id, offset, snap_rv, items) = match cont {
            Some(tok) => {
                let parsed = tok
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<usize>().ok()?)));
                let Some((id, offset)) = parsed else {
                    return Err(ApiError::bad_request(format!(
                        "invalid continue token {tok:?}"
                    )));
                };
                let Some(s) = self.snapshots.get(&id) else {
                    return Err(ApiError::new(
                        410,
                        "The provided continue parameter is too old to display a consistent list \
                         result. You can start a new list without the continue parameter.",
                    ));
                };
                (id, offset, s.rv, None)
            }
            None => {
                let items: Vec<Value> = self.objects[filter.res]
                    .values()
                    .filter(|o| filter.matches(o))
                    .cloned()
                    .collect();
                (0, 0, self.rv, Some(items))
            }
        };
        let limit = limit.filter(|l| *l > 0);
        let total = match &items {
            Some(i) => i.len(),
            None => self.snapshots.get(&id).map_or(0, |s| s.items.len()),
        };
        let end = limit.map_or(total, |l| (offset + l).min(total));
        let page: Vec<Value> = match &items {
            Some(i) => i[offset.min(total)..end].to_vec(),
            None => self
                .snapshots
                .get(&id)
                .map(|s| s.items[offset.min(total)..end].to_vec())
                .unwrap_or_default(),
        };
        let mut next = None;
        if end < total {
            let id = match items {
                Some(items) => {
                    let id = self.next_snapshot;
                    self.next_snapshot += 1;
                    self.snapshots.insert(id, Snapshot { rv: snap_rv, items });
                    if self.snapshots.len() > MAX_SNAPSHOTS {
                        if let Some(oldest) = self.snapshots.keys().min().copied() {
                            self.snapshots.remove(&oldest);
                        }
                    }
                    id
                }
                None => id,
            };
            next = Some(format!("{id}-{end}"));
        } else if cont.is_some() {
            self.snapshots.remove(&id);
        }
        Ok(ListPage {
            rv: snap_rv,
            items: page,
            cont: next,
            remaining: total - end,
        })
    }

    /// Opens a watch from `from` (None: synthetic ADDED events for the current state first).
    /// Err(message) when `from` is older than the retained history (410 Expired).
    pub(crate) fn open_watch(
        &mut self,
        filter: WatchFilter,
        from: Option<u64>,
        tx: UnboundedSender<WatchMsg>,
    ) -> Result<(u64, Vec<Value>), String> {
        let mut initial = Vec::new();
        match from {
            Some(rv) if rv < self.compacted_rv => {
                return Err(format!(
                    "too old resource version: {rv} ({})",
                    self.compacted_rv
                ))
            }
            Some(rv) => {
                for e in self
                    .history
                    .iter()
                    .filter(|e| e.rv > rv && e.res == filter.res)
                {
                    initial.extend(filter.translate(e.ty, e.old.as_ref(), &e.obj));
                }
            }
            None => {
                for o in self.objects[filter.res]
                    .values()
                    .filter(|o| filter.matches(o))
                {
                    initial.push(json!({"type": "ADDED", "object": o}));
                }
            }
        }
        let id = self.next_watch;
        self.next_watch += 1;
        self.watches.push(WatchReg { id, filter, tx });
        Ok((id, initial))
    }

    pub(crate) fn close_watch(&mut self, id: u64) {
        self.watches.retain(|w| w.id != id);
    }

    /// Sends one change to the open watches of its resource.
    fn deliver(&mut self, res: usize, ty: EvType, old: Option<&Value>, obj: &Value) {
        self.watches.retain(|w| {
            if w.filter.res != res {
                return !w.tx.is_closed();
            }
            match w.filter.translate(ty, old, obj) {
                Some(ev) => w.tx.send(WatchMsg::Event(ev)).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
    }

    /// Holds the open watches' events back (on), or sends what was held, in order (off).
    pub(crate) fn hold_watches(&mut self, on: bool) {
        if on {
            self.held.get_or_insert_with(Vec::new);
        } else if let Some(q) = self.held.take() {
            for (res, ty, old, obj) in q {
                self.deliver(res, ty, old.as_ref(), &obj);
            }
        }
    }

    pub(crate) fn open_watches(&self) -> usize {
        self.watches.iter().filter(|w| !w.tx.is_closed()).count()
    }

    /// Sends `msg()` to every open watch and forgets them.
    pub(crate) fn end_watches(&mut self, msg: impl Fn() -> WatchMsg) {
        for w in self.watches.drain(..) {
            let _ = w.tx.send(msg());
        }
    }

    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
        self.snapshots.clear();
    }

    pub(crate) fn add_failure(&mut self, verb: &str, resource: &str, code: u16, n: u32) {
        self.failures.push(Failure {
            verb: verb.to_string(),
            resource: resource.to_string(),
            code,
            remaining: n,
        });
    }

    pub(crate) fn clear_failures(&mut self) {
        self.failures.clear();
    }

    /// The injected failure for a request, if one matches (`*` matches any verb or resource;
    /// a resource matches as `plural`, `plural/sub`, `plural.group` or `group/plural`).
    pub(crate) fn take_failure(&mut self, r: &RequestRecord) -> Option<ApiError> {
        let base = r.resource.split('/').next().unwrap_or_default();
        let names = [
            r.resource.clone(),
            base.to_string(),
            format!("{base}.{}", r.group),
            format!("{}/{base}", r.group),
        ];
        let f = self.failures.iter_mut().find(|f| {
            f.remaining > 0
                && (f.verb == "*" || f.verb == r.verb)
                && (f.resource == "*" || names.contains(&f.resource))
        })?;
        f.remaining -= 1;
        let code = f.code;
        self.failures.retain(|f| f.remaining > 0);
        let msg = format!("injected failure {code} for {} {}", r.verb, r.resource);
        let mut e = ApiError::new(code, msg);
        if let Some(name) = &r.name {
            e.details = Some(json!({"name": name, "kind": base}));
        }
        Some(e)
    }

    /// Drains the queued messages of a watch under the lock, so a bookmark sent after them
    /// never precedes an event with a smaller resourceVersion.
    pub(crate) fn bookmark_point(
        &self,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<WatchMsg>,
    ) -> (u64, Vec<WatchMsg>) {
        let mut queued = Vec::new();
        while let Ok(m) = rx.try_recv() {
            queued.push(m);
        }
        (self.rv, queued)
    }
}

impl ApiError {
    fn reason(mut self, reason: &'static str) -> Self {
        self.reason = reason;
        self
    }
}
