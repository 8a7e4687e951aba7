//! The etcd v3 backend (`--datastore etcd`): every record is one key under a prefix
//! (`/flowmesh/pod/NS/NAME`, value: the record as JSON), every change batch one transaction
//! that compares each key's mod revision with the one the writer last saw, and replicas kept
//! current by one prefix watch (relisting when its revision was compacted).
//!
//! Requests go to etcd with `require_leader`: a member that lost quorum refuses at once
//! ("no leader") instead of hanging, so writes fail clearly and the watch notices.

use super::{
    unguarded, Change, Guarded, Listing, Record, RecordKey, Revision, StateBackend, StoreError,
    Watch, WatchEvent,
};
use etcd_rpc::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs (`http://127.0.0.1:2379`, `https://...`).
    pub endpoints: Vec<String>,
    /// Key prefix of every record (ends with `/`).
    pub prefix: String,
    /// CA certificate (PEM) that signs the etcd servers' certificates.
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM), with `key`.
    pub cert: Option<PathBuf>,
    /// Client key (PEM), with `cert`.
    pub key: Option<PathBuf>,
    /// How long one request may take before it fails.
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// Endpoints from a comma-separated list, the default prefix and timeout.
    pub fn new(endpoints: &str) -> Result<Self, StoreError> {
        let endpoints: Vec<String> = endpoints
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(StoreError::Unavailable(
                "--etcd-endpoints is empty: give one or more URLs, e.g. http://127.0.0.1:2379"
                    .into(),
            ));
        }
        for e in &endpoints {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(StoreError::Unavailable(format!(
                    "--etcd-endpoints {e:?}: expected an http:// or https:// URL"
                )));
            }
        }
        Ok(EtcdConfig {
            endpoints,
            prefix: "/flowmesh/".into(),
            ca: None,
            cert: None,
            key: None,
            request_timeout: Duration::from_secs(5),
        })
    }
}

/// The etcd datastore.
pub struct EtcdStore {
    /// Its own runtime: the blocking trait methods wait on it from any thread.
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    cfg: EtcdConfig,
    /// While this replica leads: the leader key and revision every write is compared with.
    fence: crate::state::Fence,
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn unavailable(cfg: &EtcdConfig, e: etcd_rpc::Error) -> StoreError {
    let text = e.to_string();
    let lower = text.to_lowercase();
    if e.is_timeout() {
        // A write etcd did not answer in time may still commit (when quorum returns): the
        // outcome is unknown, and the core re-reads etcd to follow whatever happened.
        return StoreError::Unavailable(format!(
            "etcd {} did not answer within {}s ({text}): it has no quorum or is unreachable; a change in flight is applied only if etcd committed it (the controller re-reads etcd); switches keep their flows; retry when it is back",
            cfg.endpoints.join(","),
            cfg.request_timeout.as_secs()
        ));
    }
    if lower.contains("database space exceeded") {
        // etcd's NOSPACE alarm: a member's database outgrew its --quota-backend-bytes (or its
        // disk), and the whole cluster refuses writes until an operator frees space and
        // disarms the alarm. Reads and watches go on.
        return StoreError::Unavailable(format!(
            "etcd {}: {text}: etcd is out of space (its NOSPACE alarm is raised) and refuses every write until an operator frees space and disarms the alarm (docs/operations.md, \"etcd out of space\"); a change in flight is applied only if etcd committed it (the controller re-reads etcd); switches keep their flows; retry once the alarm is disarmed",
            cfg.endpoints.join(",")
        ));
    }
    // etcd refuses the request itself, for its shape, while healthy: more operations per
    // transaction than its --max-txn-ops, more bytes than its --max-request-bytes. That is no
    // outage: another, smaller change goes through.
    if let etcd_rpc::Error::Status { code, .. } = &e {
        let too_large = lower.contains("too large") || lower.contains("larger than max");
        if *code == tonic::Code::InvalidArgument
            || (*code == tonic::Code::ResourceExhausted && too_large)
        {
            let limit = if lower.contains("too many operations") {
                " (more operations in one transaction than etcd's --max-txn-ops)"
            } else if too_large {
                " (more bytes in one request than etcd's --max-request-bytes)"
            } else {
                ""
            };
            return StoreError::Refused(format!("{text}{limit}"));
        }
    }
    let hint = if [
        "no leader",
        "timed out",
        "timeout",
        "deadline",
        "unavailable",
        "connect",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        " (etcd unreachable, or the cluster has no quorum or no leader; switches keep their flows; retry when it is back)"
    } else {
        ""
    };
    StoreError::Unavailable(format!("etcd {}: {text}{hint}", cfg.endpoints.join(",")))
}

fn read_pem(flag: &str, p: &PathBuf) -> Result<Vec<u8>, StoreError> {
    std::fs::read(p).map_err(|e| StoreError::Unavailable(format!("{flag} {}: {e}", p.display())))
}

impl EtcdStore {
    /// Connect (lazily: an unreachable cluster shows in the first request).
    pub fn connect(mut cfg: EtcdConfig) -> Result<Self, StoreError> {
        if !cfg.prefix.starts_with('/') {
            return Err(StoreError::Unavailable(format!(
                "--etcd-prefix {:?} must start with /",
                cfg.prefix
            )));
        }
        if !cfg.prefix.ends_with('/') {
            cfg.prefix.push('/');
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("etcd")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("etcd client runtime: {e}")))?;
        let mut opts = ConnectOptions {
            request_timeout: cfg.request_timeout,
            ..ConnectOptions::default()
        };
        opts.ca_pem = match &cfg.ca {
            Some(ca) => Some(read_pem("--etcd-ca", ca)?),
            None => None,
        };
        opts.identity_pem = match (&cfg.cert, &cfg.key) {
            (Some(c), Some(k)) => Some((read_pem("--etcd-cert", c)?, read_pem("--etcd-key", k)?)),
            (None, None) => None,
            _ => {
                return Err(StoreError::Unavailable(
                    "--etcd-cert and --etcd-key go together".into(),
                ))
            }
        };
        // The channels start their connection tasks on the store's runtime.
        let client = {
            let _in_rt = rt.enter();
            Client::connect(&cfg.endpoints, opts).map_err(|e| unavailable(&cfg, e))?
        };
        Ok(EtcdStore {
            rt: Some(rt),
            client,
            cfg,
            fence: crate::state::Fence::default(),
        })
    }

    /// Run `f` on the store's runtime and wait for it (from any thread, async or not).
    fn block<F>(&self, f: F) -> Result<F::Output, StoreError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        super::run_on(self.rt.as_ref(), "etcd client", f)
    }

    fn full_key(&self, k: &RecordKey) -> String {
        format!("{}{}", self.cfg.prefix, k.as_string())
    }

    /// The prefix under which every record lives.
    pub fn prefix(&self) -> &str {
        &self.cfg.prefix
    }

    /// A client for the leader election (it shares the store's connections).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The fence the leader election sets while this replica leads.
    pub fn fence(&self) -> crate::state::Fence {
        self.fence.clone()
    }
}

/// Read every record under the prefix, at one revision.
async fn list_async(client: Client, cfg: EtcdConfig) -> Result<Listing, StoreError> {
    let resp = client
        .get(cfg.prefix.clone(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| unavailable(&cfg, e))?;
    let revision = resp.revision();
    let mut records = Vec::with_capacity(resp.kvs.len());
    for kv in &resp.kvs {
        let key = String::from_utf8_lossy(&kv.key).to_string();
        let rec = decode(&cfg.prefix, &key, &kv.value)?;
        records.push((rec, kv.mod_revision));
    }
    records.sort_by_key(|a| a.0.key().as_string());
    Ok(Listing { revision, records })
}

fn decode(prefix: &str, key: &str, value: &[u8]) -> Result<Record, StoreError> {
    let rec: Record = serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        key: key.to_string(),
        detail: e.to_string(),
    })?;
    let want = format!("{prefix}{}", rec.key().as_string());
    if want != key {
        return Err(StoreError::Corrupt {
            key: key.to_string(),
            detail: format!("holds the record of {want}"),
        });
    }
    Ok(rec)
}

impl StateBackend for EtcdStore {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn load(&self) -> Result<Vec<Record>, StoreError> {
        Ok(self.list()?.records.into_iter().map(|(r, _)| r).collect())
    }

    fn list(&self) -> Result<Listing, StoreError> {
        self.block(list_async(self.client.clone(), self.cfg.clone()))?
    }

    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        self.apply_guarded(&unguarded(changes)).map(|_| ())
    }

    /// One transaction: `mod_revision(key) == expected` for every key (a missing key has mod
    /// revision 0), then the puts and deletes; on a failed comparison, the keys are read back
    /// to name the one that changed. An expectation of -1 (plain `apply`) compares nothing.
    fn apply_guarded(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        self.apply_fenced(changes, self.fence.current())
    }

    fn apply_guarded_leader(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        // One reading of the fence decides and guards: the transaction compares the leader
        // key with it even if the election clears it meanwhile.
        match self.fence.current() {
            None => Err(StoreError::NotLeader(
                "this replica does not lead: the controller's own changes are the leader's".into(),
            )),
            fence => self.apply_fenced(changes, fence),
        }
    }

    fn watch(&self, from: Revision) -> Option<Watch> {
        let (tx, events) = mpsc::unbounded_channel();
        let (relist, relist_rx) = mpsc::unbounded_channel();
        let rt = self.rt.as_ref()?;
        rt.spawn(watch_loop(
            self.client.clone(),
            self.cfg.clone(),
            from,
            tx,
            relist_rx,
        ));
        Some(Watch { events, relist })
    }
}

/// Follow the prefix from `from`: changes grouped by revision, a relist when the revision
/// was compacted or the core asks, health as the stream comes and goes. Ends when the core
/// stops listening.
async fn watch_loop(
    client: Client,
    cfg: EtcdConfig,
    from: Revision,
    tx: mpsc::UnboundedSender<WatchEvent>,
    mut relist_rx: mpsc::UnboundedReceiver<()>,
) {
    let mut next = from + 1;
    let mut relist = false;
    let mut healthy = true;
    let mut backoff = Duration::from_millis(100);
    let health = |healthy: &mut bool, ok: bool, detail: String| -> bool {
        if *healthy == ok {
            return true;
        }
        *healthy = ok;
        if ok {
            tracing::info!(%detail, "etcd is available again");
        } else {
            tracing::warn!(%detail, "etcd is unavailable");
        }
        tx.send(WatchEvent::Health { ok, detail }).is_ok()
    };
    loop {
        if tx.is_closed() {
            return;
        }
        while relist_rx.try_recv().is_ok() {
            relist = true;
        }
        if relist {
            match list_async(client.clone(), cfg.clone()).await {
                Ok(l) => {
                    next = l.revision + 1;
                    relist = false;
                    if tx.send(WatchEvent::Relisted(l)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    if !health(&mut healthy, false, e.to_string()) {
                        return;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
        }
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(next)
            .with_progress_notify();
        let mut stream = match client.watch(cfg.prefix.clone(), Some(opts)).await {
            Ok(s) => s,
            Err(e) => {
                if !health(&mut healthy, false, unavailable(&cfg, e).to_string()) {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        loop {
            let msg = tokio::select! {
                r = relist_rx.recv() => {
                    if r.is_none() { return; }
                    relist = true;
                    break;
                }
                m = stream.message() => m,
            };
            let resp = match msg {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    // Often one member went away: watch again (through another member)
                    // before calling the store unavailable.
                    tracing::debug!(error = %e, "etcd watch stream ended");
                    break;
                }
            };
            if resp.compact_revision > 0 {
                tracing::warn!(
                    from = next,
                    compacted = resp.compact_revision,
                    "etcd compacted the watched revision: relisting"
                );
                relist = true;
                break;
            }
            if resp.canceled {
                let reason = resp.cancel_reason.clone();
                if !health(
                    &mut healthy,
                    false,
                    format!("etcd watch cancelled: {reason} (no quorum?)"),
                ) {
                    return;
                }
                break;
            }
            if resp.created || !resp.events.is_empty() {
                backoff = Duration::from_millis(100);
                if !health(&mut healthy, true, "etcd watch established".into()) {
                    return;
                }
            }
            let mut batch: Option<(Revision, Vec<Change>)> = None;
            for ev in &resp.events {
                let Some(kv) = &ev.kv else { continue };
                let rev = kv.mod_revision;
                let key = String::from_utf8_lossy(&kv.key).to_string();
                let change = match ev.r#type() {
                    EventType::Put => match decode(&cfg.prefix, &key, &kv.value) {
                        Ok(r) => Change::Put(r),
                        Err(e) => {
                            tracing::error!(error = %e, "ignoring an unreadable etcd record");
                            continue;
                        }
                    },
                    EventType::Delete => {
                        match key.strip_prefix(&cfg.prefix).and_then(RecordKey::parse) {
                            Some(k) => Change::Delete(k),
                            None => {
                                tracing::warn!(%key, "ignoring the deletion of a foreign key");
                                continue;
                            }
                        }
                    }
                };
                match &mut batch {
                    Some((r, v)) if *r == rev => v.push(change),
                    _ => {
                        if let Some((revision, changes)) = batch.take() {
                            if tx.send(WatchEvent::Changes { revision, changes }).is_err() {
                                return;
                            }
                        }
                        batch = Some((rev, vec![change]));
                    }
                }
                next = rev + 1;
            }
            if let Some((revision, changes)) = batch {
                if tx.send(WatchEvent::Changes { revision, changes }).is_err() {
                    return;
                }
            }
            if let Some(h) = &resp.header {
                // Progress notifications carry the current revision with no events.
                if resp.events.is_empty() && !resp.created && h.revision >= next {
                    next = h.revision + 1;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

impl EtcdStore {
    /// One guarded transaction; with `fence` (this replica leads), the leader key's revision
    /// is compared too.
    fn apply_fenced(
        &self,
        changes: &[Guarded],
        fence: Option<(String, i64)>,
    ) -> Result<Revision, StoreError> {
        let batch = super::coalesce(changes);
        if batch.is_empty() {
            return Ok(0);
        }
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let mut reads = Vec::new();
        let mut keys = Vec::new();
        for (k, g) in &batch {
            let full = self.full_key(k);
            if g.expected >= 0 {
                compares.push(Compare::mod_revision(
                    full.clone(),
                    CompareOp::Equal,
                    g.expected,
                ));
            }
            match &g.change {
                Change::Put(r) => {
                    let bytes = serde_json::to_vec(r)
                        .map_err(|e| StoreError::Transaction(e.to_string()))?;
                    ops.push(TxnOp::put(full.clone(), bytes, None));
                }
                Change::Delete(_) => ops.push(TxnOp::delete(full.clone())),
            }
            reads.push(TxnOp::get(full.clone(), None));
            keys.push((full, g.expected));
        }
        if let Some((key, rev)) = &fence {
            compares.push(Compare::mod_revision(key.clone(), CompareOp::Equal, *rev));
            reads.push(TxnOp::get(key.clone(), None));
        }
        let txn = Txn::new().when(compares).and_then(ops).or_else(reads);
        let client = self.client.clone();
        let cfg = self.cfg.clone();
        let resp =
            self.block(async move { client.txn(txn).await.map_err(|e| unavailable(&cfg, e)) })??;
        let revision = resp.revision();
        if resp.succeeded {
            return Ok(revision);
        }
        let responses = resp.op_responses();
        if let (Some((key, rev)), Some(TxnOpResponse::Get(g))) = (&fence, responses.last()) {
            let found = g.kvs.first().map(|kv| kv.mod_revision).unwrap_or(0);
            if found != *rev {
                return Err(StoreError::NotLeader(format!(
                    "this replica's leadership (generation {rev}) ended: {key} is {}",
                    if found == 0 {
                        "gone".to_string()
                    } else {
                        format!("at generation {found}")
                    }
                )));
            }
        }
        // Name the first key whose revision moved.
        for (op, (key, expected)) in responses.into_iter().zip(keys) {
            if let TxnOpResponse::Get(g) = op {
                let found = g.kvs.first().map(|kv| kv.mod_revision).unwrap_or(0);
                if found != expected {
                    return Err(StoreError::Conflict {
                        key,
                        expected,
                        found,
                    });
                }
            }
        }
        Err(StoreError::Conflict {
            key: "(a key of the batch)".into(),
            expected: -1,
            found: revision,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_rpc::Error {
        etcd_rpc::Error::Status {
            member: "http://127.0.0.1:2379".into(),
            code,
            message: message.into(),
        }
    }

    #[test]
    fn nospace_says_etcd_is_out_of_space_and_what_frees_it() {
        let cfg = EtcdConfig::new("http://127.0.0.1:2379").expect("config");
        let e = unavailable(
            &cfg,
            status(
                tonic::Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded",
            ),
        );
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
        let text = e.to_string();
        for want in [
            "mvcc: database space exceeded",
            "etcd is out of space",
            "NOSPACE alarm",
            "disarms the alarm",
            "docs/operations.md",
        ] {
            assert!(text.contains(want), "{want:?} missing: {text}");
        }
        // Not mistaken for a lost quorum.
        assert!(!text.contains("no quorum"), "{text}");
        let other = unavailable(&cfg, status(tonic::Code::Unavailable, "no leader"));
        assert!(!other.to_string().contains("out of space"), "{other}");
    }

    #[test]
    fn a_request_over_etcds_limits_is_a_refusal_not_an_outage() {
        let cfg = EtcdConfig::new("http://127.0.0.1:2379").expect("config");
        for (code, message, limit) in [
            (
                tonic::Code::InvalidArgument,
                "etcdserver: too many operations in txn request",
                "--max-txn-ops",
            ),
            (
                tonic::Code::InvalidArgument,
                "etcdserver: request is too large",
                "--max-request-bytes",
            ),
            (
                tonic::Code::ResourceExhausted,
                "grpc: received message larger than max (2000000 vs. 1572864)",
                "--max-request-bytes",
            ),
        ] {
            let e = unavailable(&cfg, status(code, message));
            assert!(matches!(e, StoreError::Refused(_)), "{e:?}");
            assert!(e.to_string().contains(limit), "{e}");
        }
        // Rate limiting is no refusal of the change.
        let busy = unavailable(
            &cfg,
            status(
                tonic::Code::ResourceExhausted,
                "etcdserver: too many requests",
            ),
        );
        assert!(matches!(busy, StoreError::Unavailable(_)), "{busy:?}");
    }
}
