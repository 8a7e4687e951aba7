//! Leader election on a `coordination.k8s.io/v1` Lease (with `--datastore kubernetes`), as
//! client-go's leader election does it: the holder renews `spec.renewTime` every third of the
//! lease duration with an optimistic update; a standby that has seen the Lease unchanged for a
//! whole lease duration (by its own clock, so clocks need not agree) takes it over, bumping
//! `leaseTransitions`. The OpenFlow generation of a leader is `leaseTransitions + 1`, so every
//! new leader's is higher.
//!
//! A leader counts its lease as held until `leaseDurationSeconds` after the start of its last
//! successful renewal, less a tenth; past that it stops programming switches
//! ([`Leadership::may_program`]) and, once the renewal fails for good, steps down. The
//! Kubernetes API has no transactions, so the fence on store writes is this same local
//! validity, not a compare in the write itself (the etcd datastore's is).
//!
//! Every replica also keeps a Lease of its own, `LEASE-replica-ID` labelled
//! [`REPLICA_LABEL`], whose annotation holds its [`ReplicaInfo`] (addresses, state, role per
//! switch) for `flowmeshctl get controllers`; it is refreshed whenever that changes and at
//! least once a lease duration, and deleted on shutdown.

use super::{Leadership, ReplicaInfo, ReplicaRegistry, ReplicaView, Standing};
use crate::state::Fence;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The Lease's settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// This replica's identity (`holderIdentity`).
    pub id: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// The label of the replicas' own Leases.
pub const REPLICA_LABEL: &str = "flowmesh.io/replica";
/// The annotation holding a replica's [`ReplicaInfo`] as JSON.
const REPLICA_ANNOTATION: &str = "flowmesh.io/replica-info";

/// Where the replicas of one Kubernetes datastore register and elect.
#[derive(Clone)]
pub struct KubeRegistry {
    /// The API client.
    pub client: Client,
    /// The controller's namespace.
    pub namespace: String,
    /// The election Lease's name.
    pub lease: String,
    /// This replica's id.
    pub id: String,
}

impl ReplicaRegistry for KubeRegistry {
    fn id(&self) -> String {
        self.id.clone()
    }
    fn view(&self) -> BoxFuture<'static, Result<ReplicaView, String>> {
        let r = self.clone();
        Box::pin(async move {
            view(&r)
                .await
                .map_err(|e| format!("Kubernetes API server: {e}"))
        })
    }
}

/// The name of replica `id`'s own Lease: a valid object name whatever the id holds (its
/// letters and digits, and a hash of the whole id so that two ids never share one).
pub fn replica_lease_name(lease: &str, id: &str) -> String {
    let mut clean: String = id
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    clean.truncate(100);
    // FNV-1a: stable across builds and platforms.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!(
        "{lease}-replica-{}-{:08x}",
        clean.trim_matches('-'),
        hash as u32
    )
}

/// Every replica whose Lease is fresh (renewed within three of its durations, by this
/// replica's clock) and the leader.
pub async fn view(r: &KubeRegistry) -> Result<ReplicaView, kube::Error> {
    let api: Api<Lease> = Api::namespaced(r.client.clone(), &r.namespace);
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut replicas: Vec<ReplicaInfo> = api
        .list(&ListParams::default().labels(REPLICA_LABEL))
        .await?
        .items
        .into_iter()
        .filter(|l| {
            let spec = l.spec.as_ref();
            let renewed = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
            let secs = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(1);
            renewed.is_some_and(|t| now.duration_since(t).as_secs() <= 3 * i64::from(secs.max(1)))
        })
        .filter_map(|l| {
            let a = l.metadata.annotations.as_ref()?.get(REPLICA_ANNOTATION)?;
            serde_json::from_str(a).ok()
        })
        .collect();
    replicas.sort_by(|a, b| a.id.cmp(&b.id));
    let election = api.get_opt(&r.lease).await?;
    let (leader, generation) = match election.as_ref().and_then(|l| holder(l).map(|h| (h, l))) {
        Some((h, l)) => (h, generation(l)),
        None => (String::new(), 0),
    };
    Ok(ReplicaView {
        replicas,
        leader,
        generation,
    })
}

/// Keeps this replica's own Lease current.
struct Registration {
    name: String,
    written: Option<(u64, String, Instant)>,
}

impl Registration {
    /// Write the registration if it changed or is due; failures are retried next round.
    async fn refresh(
        &mut self,
        api: &Api<Lease>,
        me: &ReplicaInfo,
        lead: &Leadership,
        duration: Duration,
    ) {
        let version = lead.roles_version();
        let state = match lead.standing() {
            Standing::Leader { .. } => "leader",
            _ => "standby",
        };
        let due = match &self.written {
            Some((v, st, at)) => *v != version || st != state || at.elapsed() >= duration,
            None => true,
        };
        if !due {
            return;
        }
        let info = ReplicaInfo {
            state: state.to_string(),
            generation: lead.standing().generation(),
            switches: lead.switch_roles(),
            ..me.clone()
        };
        let Ok(text) = serde_json::to_string(&info) else {
            return;
        };
        let secs = i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some([(REPLICA_LABEL.to_string(), "true".to_string())].into()),
                annotations: Some([(REPLICA_ANNOTATION.to_string(), text)].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(me.id.clone()),
                lease_duration_seconds: Some(secs),
                renew_time: Some(now_micro()),
                ..Default::default()
            }),
        };
        let written = match api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&lease))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                api.create(&PostParams::default(), &lease).await.map(drop)
            }
            r => r.map(drop),
        };
        match written {
            Ok(()) => self.written = Some((version, state.to_string(), Instant::now())),
            Err(e) => tracing::debug!(error = %e, "replica registration not written"),
        }
    }
}

/// What a standby saw last of the Lease, and when (its own clock).
struct Observed {
    /// Holder, renewTime and resourceVersion.
    record: (Option<String>, Option<String>, Option<String>),
    at: Instant,
}

fn generation(l: &Lease) -> u64 {
    let t = l
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    u64::try_from(t).unwrap_or(0) + 1
}

fn holder(l: &Lease) -> Option<String> {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

/// Whether this replica's view of the store is current (see [`run`]).
pub type ViewIsCurrent = Box<dyn Fn() -> bool + Send + Sync>;

/// Campaign and hold the Lease until `stop`, and keep this replica (`me`) registered;
/// releases the Lease and removes the registration on the way out.
///
/// A standby takes a free or expired Lease only while `current` says its view of the store is
/// current: a replica whose watches are failing (in back-off after the API server went away)
/// would program every switch from what it saw before, deleting what was made since. It
/// leaves the Lease to a standby that sees the present, and campaigns again once it does. A
/// leader keeps renewing its own Lease whatever its view (a failing API server fails every
/// replica's watches alike; stepping down would only add a takeover); one that stopped leading
/// (its renewals failed) takes even a Lease still naming it only with a current view.
pub async fn run(
    client: Client,
    cfg: LeaseConfig,
    me: ReplicaInfo,
    lead: Arc<Leadership>,
    fence: Fence,
    current: ViewIsCurrent,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut registration = Registration {
        name: replica_lease_name(&cfg.name, &cfg.id),
        written: None,
    };
    let period = (cfg.duration / 3).max(Duration::from_millis(100));
    let secs = i32::try_from(cfg.duration.as_secs().max(1)).unwrap_or(i32::MAX);
    let mut observed: Option<Observed> = None;
    let mut last_error: Option<String> = None;
    let mut view_stale = false;
    loop {
        if *stop.borrow() {
            break;
        }
        let started = Instant::now();
        let may_take = current();
        if may_take == view_stale && !matches!(lead.standing(), Standing::Leader { .. }) {
            view_stale = !may_take;
            if view_stale {
                tracing::info!(replica = %cfg.id, "leader election: this replica's view of the API server is not current (a watch is failing or listing again): it does not take the Lease until it is");
            } else {
                tracing::info!(replica = %cfg.id, "leader election: this replica's view of the API server is current again");
            }
        }
        let leading = matches!(lead.standing(), Standing::Leader { .. });
        match step(&api, &cfg, secs, may_take, leading, &mut observed).await {
            Ok(Outcome::Leader(gen)) => {
                let valid = started + cfg.duration - cfg.duration / 10;
                if !matches!(lead.standing(), Standing::Leader { generation } if generation == gen)
                {
                    tracing::info!(replica = %cfg.id, generation = gen, lease = %cfg.name, "leader election: this replica leads");
                }
                fence.set(Some((cfg.name.clone(), gen as i64)));
                if lead.standing() == (Standing::Leader { generation: gen }) {
                    lead.extend(valid);
                } else {
                    lead.set(Standing::Leader { generation: gen }, Some(valid));
                }
                last_error = None;
            }
            Ok(Outcome::Standby { generation, leader }) => {
                step_down(&lead, &fence, &cfg, generation, leader);
                last_error = None;
            }
            Err(e) => {
                if last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(replica = %cfg.id, error = %e, "leader election: the Lease could not be read or renewed");
                    last_error = Some(e);
                }
                // A leader keeps leading while its lease is surely held; past that, it stops.
                if matches!(lead.standing(), Standing::Leader { .. }) && !lead.may_program() {
                    let g = lead.standing().generation();
                    step_down(&lead, &fence, &cfg, g, None);
                }
            }
        }
        let bounded = registration.refresh(&api, &me, &lead, cfg.duration);
        let _ = tokio::time::timeout(period, bounded).await;
        tokio::select! {
            _ = tokio::time::sleep(period.saturating_sub(started.elapsed())) => {}
            _ = stop.changed() => {}
        }
    }
    let dp = DeleteParams::default();
    let unregister = api.delete(&registration.name, &dp);
    let _ = tokio::time::timeout(Duration::from_secs(2), unregister).await;
    // Resign: clear the holder so a standby takes over at once.
    if matches!(lead.standing(), Standing::Leader { .. }) {
        let g = lead.standing().generation();
        step_down(&lead, &fence, &cfg, g, None);
        let release = async {
            if let Ok(Some(mut l)) = api.get_opt(&cfg.name).await {
                if holder(&l).as_deref() == Some(cfg.id.as_str()) {
                    if let Some(s) = l.spec.as_mut() {
                        s.holder_identity = None;
                        s.renew_time = None;
                    }
                    let _ = api.replace(&cfg.name, &PostParams::default(), &l).await;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), release).await;
        tracing::info!(replica = %cfg.id, "leader election: resigned");
    }
}

fn step_down(
    lead: &Leadership,
    fence: &Fence,
    cfg: &LeaseConfig,
    generation: u64,
    leader: Option<String>,
) {
    if matches!(lead.standing(), Standing::Leader { .. }) {
        tracing::warn!(replica = %cfg.id, "leader election: this replica no longer leads; now standby");
    }
    // Standby first, then no fence: nothing sees "leader" without the fence.
    lead.set(Standing::Standby { generation, leader }, None);
    fence.set(None);
}

/// The result of one round.
enum Outcome {
    /// This replica holds the Lease, with this generation.
    Leader(u64),
    /// Another replica holds it (or took it first).
    Standby {
        /// The holder's generation.
        generation: u64,
        /// The holder.
        leader: Option<String>,
    },
}

fn standby_of(l: &Lease) -> Outcome {
    Outcome::Standby {
        generation: generation(l),
        leader: holder(l),
    }
}

/// One round of the election. A Lease is taken only if `may_take` (this replica's view of the
/// store is current) — also one still naming this replica after it stopped `leading` (its
/// renewals failed while the API server was away): only a leader renews whatever its view.
async fn step(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    secs: i32,
    may_take: bool,
    leading: bool,
    observed: &mut Option<Observed>,
) -> Result<Outcome, String> {
    let pp = PostParams::default();
    let current = api.get_opt(&cfg.name).await.map_err(|e| e.to_string())?;
    let Some(mut l) = current else {
        if !may_take {
            return Ok(Outcome::Standby {
                generation: 1,
                leader: None,
            });
        }
        let l = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.id.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(now_micro()),
                renew_time: Some(now_micro()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&pp, &l).await {
            Ok(l) => Ok(Outcome::Leader(generation(&l))),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Standby {
                generation: 1,
                leader: None,
            }),
            Err(e) => Err(e.to_string()),
        };
    };
    let spec = l.spec.get_or_insert_with(Default::default);
    let mine = spec.holder_identity.as_deref() == Some(cfg.id.as_str());
    if mine && !leading && !may_take {
        return Ok(Outcome::Standby {
            generation: generation(&l),
            leader: None,
        });
    }
    if !mine {
        let record = (
            spec.holder_identity.clone().filter(|h| !h.is_empty()),
            spec.renew_time.as_ref().map(|t| t.0.to_string()),
            l.metadata.resource_version.clone(),
        );
        let held_for = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1)))
            .unwrap_or(cfg.duration);
        let now = Instant::now();
        let expired = match observed {
            // Released (no holder): free to take.
            _ if record.0.is_none() => true,
            Some(o) if o.record == record => now.duration_since(o.at) >= held_for,
            _ => {
                *observed = Some(Observed { record, at: now });
                false
            }
        };
        if !expired {
            return Ok(standby_of(&l));
        }
        if !may_take {
            return Ok(standby_of(&l));
        }
        let spec = l.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(cfg.id.clone());
        spec.acquire_time = Some(now_micro());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    let spec = l.spec.get_or_insert_with(Default::default);
    spec.renew_time = Some(now_micro());
    spec.lease_duration_seconds = Some(secs);
    match api.replace(&cfg.name, &pp, &l).await {
        Ok(l) => {
            *observed = None;
            Ok(Outcome::Leader(generation(&l)))
        }
        // Someone else renewed or took it first: who, the next round reads (until then no
        // role is requested: a guessed generation could outrun the leader's).
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Standby {
            generation: 0,
            leader: None,
        }),
        Err(e) => Err(e.to_string()),
    }
}
