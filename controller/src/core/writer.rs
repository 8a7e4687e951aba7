//! The store writer (group commit of the records mutations produce) and the dispatcher that
//! sends flows to the reconcilers in mutation order, each batch after its write is stored.

use super::CoreCmd;
use crate::core::store_sync::Revisions;
use crate::error::ApiError;
use crate::observe::Metrics;
use crate::state::{Change, Guarded, StateBackend, StoreError, WatchEvent};
use crate::switches::reconciler::{Ack, ReconcileCmd, ReconcilerHandle};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use topology::FlowSet;

/// A batch of records to make durable, and who waits for it.
pub(super) struct WriteJob {
    pub(super) changes: Vec<Change>,
    pub(super) done: oneshot::Sender<Result<(), ApiError>>,
    /// The controller's own change (egress failover, DNS results): stored only under this
    /// replica's leadership (the store's fence), never by a standby or a deposed leader.
    pub(super) leader_only: bool,
}

/// What the store writer is asked to do.
pub(super) enum WriterCmd {
    /// Store a batch.
    Write(WriteJob),
    /// The core relisted after a failed write: writes are accepted again.
    Resynced,
}

pub(super) fn lock_slot<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Revisions shared by the core and the store writer.
pub(super) type SharedRevisions = Arc<std::sync::Mutex<Revisions>>;

pub(super) fn revisions(r: &SharedRevisions) -> std::sync::MutexGuard<'_, Revisions> {
    // A panic elsewhere while holding the lock leaves plain data: keep using it.
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store writer, a thread of its own: group-commits every job queued while the previous
/// commit ran, so durability costs one sync per batch rather than per change, and runs beside
/// the switch programming instead of before it. The backend's calls block (a file sync, a
/// request to etcd): on a thread of its own the writer waits for them without a hop to a
/// blocking pool and back per commit.
pub(super) fn store_writer(
    store: Arc<dyn StateBackend>,
    mut rx: mpsc::UnboundedReceiver<WriterCmd>,
    core: mpsc::UnboundedSender<CoreCmd>,
    revs: SharedRevisions,
    watched: bool,
    metrics: Arc<Metrics>,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = Vec::new();
        let mut next = Some(first);
        while let Some(cmd) = next.take().or_else(|| rx.try_recv().ok()) {
            match cmd {
                WriterCmd::Write(j) => jobs.push(j),
                WriterCmd::Resynced => {
                    // Jobs before the marker were built on the model before the relist.
                    fail_draining(&revs, std::mem::take(&mut jobs));
                    revisions(&revs).draining = false;
                }
            }
        }
        if jobs.is_empty() {
            continue;
        }
        if revisions(&revs).draining {
            fail_draining(&revs, jobs);
            continue;
        }
        // API changes and the leader's own are separate transactions: only the latter must
        // carry the leadership fence.
        let (leader_jobs, jobs): (Vec<WriteJob>, Vec<WriteJob>) =
            jobs.into_iter().partition(|j| j.leader_only);
        for (group, leader_only) in [(jobs, false), (leader_jobs, true)] {
            if group.is_empty() {
                continue;
            }
            // The first group's failure made the model stale for the second too.
            if revisions(&revs).draining {
                fail_draining(&revs, group);
                continue;
            }
            write_group(&store, group, leader_only, &core, &revs, watched, &metrics);
        }
    }
}

/// One durable transaction of `changes`, each guarded by the revision the model last saw of
/// its key (taken now: a retry alone sees what the writes before it committed).
fn commit(
    store: &Arc<dyn StateBackend>,
    changes: &[Change],
    leader_only: bool,
    revs: &SharedRevisions,
    metrics: &Metrics,
) -> Result<crate::state::Revision, StoreError> {
    let guarded: Vec<Guarded> = {
        let r = revisions(revs);
        changes
            .iter()
            .map(|c| Guarded {
                expected: r.expected(&c.key()),
                change: c.clone(),
            })
            .collect()
    };
    let t = std::time::Instant::now();
    // A panic in the backend fails this write, not the writer.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if leader_only {
            store.apply_guarded_leader(&guarded)
        } else {
            store.apply_guarded(&guarded)
        }
    }))
    .unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(StoreError::Transaction(format!(
            "the store backend failed: {why}"
        )))
    });
    metrics.phase_store.observe(t.elapsed());
    tracing::debug!(
        changes = changes.len(),
        micros = t.elapsed().as_micros() as u64,
        ok = result.is_ok(),
        "state stored"
    );
    result
}

/// Whether a failed grouped write may have failed for the content of some of its operations
/// rather than for the store as a whole (a conflict on one key, a change or a transaction the
/// store refuses, e.g. etcd's limits on operations or bytes per transaction): then each
/// operation is written again alone. An unreachable store or a lost leadership fails every
/// operation alike, and retrying each would only multiply the wait.
fn worth_alone(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Conflict { .. } | StoreError::Refused(_) | StoreError::Transaction(_)
    )
}

/// The API's answer to a failed write.
fn api_error(e: StoreError, watched: bool) -> ApiError {
    match e {
        StoreError::NotLeader(_) => ApiError::Unavailable(format!(
            "the change was not stored: {e}; another replica leads now: retry"
        )),
        StoreError::Conflict { .. } => ApiError::Aborted(format!(
            "the change was not stored: {e}; another controller replica changed the same objects; retry"
        )),
        // The store is healthy and said no to this change: the caller's to fix.
        StoreError::Refused(_) => {
            ApiError::FailedPrecondition(format!("the change was not stored: {e}"))
        }
        // With a shared store a timed-out write may still commit: the message says so.
        e if watched => ApiError::Unavailable(format!("the store did not confirm the change: {e}")),
        e => ApiError::Unavailable(format!("the change was not stored: {e}")),
    }
}

/// Store one group of jobs in one transaction and answer them. If the group fails for what it
/// holds ([`worth_alone`]), each job is written again alone, in order: each gets its own
/// result, none is acknowledged unless its own changes were stored, and nothing queued behind
/// the group is written before them (the writer takes its next batch only after this returns).
/// With a shared store, once one job failed alone the model holds a change the store does not:
/// the jobs after it were built on that model and are refused like every write queued before
/// the relist (`fail_draining`).
///
/// On a failure the core is told to relist (or reload) before any caller is answered: a caller
/// that sends its next change as soon as it hears of the failure finds the core already
/// re-reading, and its change waits for the listing instead of being built on the model that
/// still holds the failed change (and refused with it).
pub(super) fn write_group(
    store: &Arc<dyn StateBackend>,
    jobs: Vec<WriteJob>,
    leader_only: bool,
    core: &mpsc::UnboundedSender<CoreCmd>,
    revs: &SharedRevisions,
    watched: bool,
    metrics: &Metrics,
) {
    let changes: Vec<Change> = jobs
        .iter()
        .flat_map(|j| j.changes.iter().cloned())
        .collect();
    let result = commit(store, &changes, leader_only, revs, metrics);
    let mut answers = Vec::with_capacity(jobs.len());
    let failure = match result {
        Err(e) if jobs.len() > 1 && worth_alone(&e) => {
            metrics.store_group_fallbacks.inc();
            tracing::warn!(
                jobs = jobs.len(),
                error = %e,
                "a grouped store write failed; writing its changes one by one"
            );
            let mut failure = None;
            for j in jobs {
                if revisions(revs).draining {
                    answers.push((j.done, Err(refuse_draining(revs, &j.changes))));
                    continue;
                }
                let r = commit(store, &j.changes, leader_only, revs, metrics);
                let (r, f) = answer(r, &j.changes, 1, core, revs, watched, metrics);
                if let Some(f) = f {
                    failure.get_or_insert(f);
                    if watched {
                        // The model holds a change the store refused: the writes built on it
                        // wait for the relist (see above).
                        revisions(revs).draining = true;
                    }
                }
                answers.push((j.done, r));
            }
            failure
        }
        result => {
            let n = jobs.len() as u64;
            let (r, f) = answer(result, &changes, n, core, revs, watched, metrics);
            answers.extend(jobs.into_iter().map(|j| (j.done, r.clone())));
            f
        }
    };
    if let Some((r, not_leader)) = failure {
        resync_after(&r, not_leader, core, revs, watched);
    }
    for (done, r) in answers {
        let _ = done.send(r);
    }
}

/// Tell the core to re-read the store after a failed write: nothing of the failed change was
/// acknowledged, and the model may hold it.
fn resync_after(
    r: &ApiError,
    not_leader: bool,
    core: &mpsc::UnboundedSender<CoreCmd>,
    revs: &SharedRevisions,
    watched: bool,
) {
    if watched {
        // The core relists what is stored and every write queued meanwhile is refused (it was
        // built on the same model).
        match r {
            ApiError::FailedPrecondition(m) => {
                tracing::warn!(error = %m, "the store refused a change; relisting the store")
            }
            e => tracing::error!(error = %e, "storing changes failed; relisting the store"),
        }
        revisions(revs).draining = true;
        let down = match (r, not_leader) {
            (ApiError::Unavailable(m), false) => Some(m.clone()),
            _ => None,
        };
        let _ = core.send(CoreCmd::Relist(down));
    } else {
        tracing::error!(error = %r, "storing changes failed; reloading state from the store");
        let _ = core.send(CoreCmd::Reload);
    }
}

/// Ends the writes of `changes`, the changes of `jobs` jobs (their revisions, the watched
/// changes held back meanwhile) and says what their callers get: the answer, and on failure
/// the error and whether it was a lost leadership.
fn answer(
    result: Result<crate::state::Revision, StoreError>,
    changes: &[Change],
    jobs: u64,
    core: &mpsc::UnboundedSender<CoreCmd>,
    revs: &SharedRevisions,
    watched: bool,
    metrics: &Metrics,
) -> (Result<(), ApiError>, Option<(ApiError, bool)>) {
    let released = revisions(revs).end(changes, result.as_ref().ok().copied());
    if !released.is_empty() {
        let _ = core.send(CoreCmd::Store(released_event(released)));
    }
    match result {
        Ok(_) => {
            metrics.store_jobs.inc_by(jobs);
            (Ok(()), None)
        }
        Err(e) => {
            let not_leader = matches!(e, StoreError::NotLeader(_));
            let a = api_error(e, watched);
            (Err(a.clone()), Some((a, not_leader)))
        }
    }
}

/// Flows to send once a write is stored (shared stores only).
pub(super) struct Dispatch {
    /// The store write to wait for (None: send at once, in order).
    pub(super) write: Option<oneshot::Receiver<Result<(), ApiError>>>,
    /// What to send to which reconciler.
    pub(super) sends: Vec<(ReconcilerHandle, FlowSet, Option<Ack>)>,
    /// Who learns the write's result.
    pub(super) result: Option<oneshot::Sender<Result<(), ApiError>>>,
}

/// Sends flows in mutation order, each batch after its store write succeeded.
pub(super) async fn dispatcher(mut rx: mpsc::UnboundedReceiver<Dispatch>) {
    while let Some(d) = rx.recv().await {
        let r = match d.write {
            Some(w) => w
                .await
                .unwrap_or_else(|_| Err(ApiError::Unavailable("the store writer stopped".into()))),
            None => Ok(()),
        };
        if r.is_ok() {
            for (h, flows, ack) in d.sends {
                let _ = h.tx.send(ReconcileCmd::Desired { flows, ack });
            }
        }
        if let Some(t) = d.result {
            let _ = t.send(r);
        }
    }
}

/// Refuse jobs queued on a model that a failed write made stale.
pub(super) fn fail_draining(revs: &SharedRevisions, jobs: Vec<WriteJob>) {
    for j in jobs {
        let _ = j.done.send(Err(refuse_draining(revs, &j.changes)));
    }
}

/// End the write of `changes`, refused because it was built on a model a failed write made
/// stale, and say why.
fn refuse_draining(revs: &SharedRevisions, changes: &[Change]) -> ApiError {
    let down = {
        let mut r = revisions(revs);
        r.end(changes, None);
        r.store_down.clone()
    };
    match down {
        Some(why) => ApiError::Unavailable(format!(
            "the change was not stored: the store is unavailable ({why}); retry when it is back"
        )),
        None => ApiError::Aborted(
            "the change was not stored: an earlier change failed and the controller is re-reading the store; retry".into(),
        ),
    }
}

/// Watched changes released after a local write, as one event per revision.
pub(super) fn released_event(released: Vec<(crate::state::Revision, Change)>) -> Vec<WatchEvent> {
    let mut by_rev: BTreeMap<crate::state::Revision, Vec<Change>> = BTreeMap::new();
    for (r, c) in released {
        by_rev.entry(r).or_default().push(c);
    }
    by_rev
        .into_iter()
        .map(|(revision, changes)| WatchEvent::Changes { revision, changes })
        .collect()
}
