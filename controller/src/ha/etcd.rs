//! Several controller replicas on one etcd datastore: one leader, elected through an etcd
//! lease, programs the switches as OpenFlow **master**; the others are **standby**: connected
//! to every switch as **slave**, their model kept current by the store's watch, ready to take
//! over with a hitless resync.
//!
//! * Election: every replica holds a lease (TTL `--leader-ttl`, kept alive every third of it)
//!   and tries to create the leader key `PREFIX-ha/leader` bound to it (`create_revision == 0`
//!   in one transaction). The winner's generation is the etcd revision of that creation, so
//!   generations only grow. Standbys watch the key and campaign again when it is deleted
//!   (the leader resigned, or its lease ran out).
//! * Fencing: the leader's store writes compare the leader key's revision with its generation
//!   (a deposed leader's writes fail), its role requests carry the generation (a switch
//!   refuses a stale one), and a leader that could not renew its lease within the TTL steps
//!   down before etcd lets anyone else win — so a process resumed after a pause does not
//!   write first and learn later.
//! * Registration: each replica keeps `PREFIX-ha/replicas/ID` (bound to its lease) with its
//!   addresses and the role it holds on each switch, for `flowmeshctl get controllers`.

use super::{Leadership, ReplicaInfo, ReplicaRegistry, ReplicaView, Standing};
use crate::state::Fence;
use etcd_rpc::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The etcd registry: keys under `prefix`.
#[derive(Clone)]
pub struct EtcdRegistry {
    /// The etcd client (boxed: it is large).
    pub client: Box<Client>,
    /// The election's key prefix ([`ha_prefix`]).
    pub prefix: String,
    /// This replica's id.
    pub id: String,
}

impl ReplicaRegistry for EtcdRegistry {
    fn id(&self) -> String {
        self.id.clone()
    }
    fn view(&self) -> BoxFuture<'static, Result<ReplicaView, String>> {
        let (client, prefix) = ((*self.client).clone(), self.prefix.clone());
        Box::pin(async move {
            view(client, &prefix)
                .await
                .map_err(|e| format!("etcd: {e}"))
        })
    }
}

/// The leader key's value.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LeaderValue {
    id: String,
    lease: i64,
}

/// Election settings.
#[derive(Clone, Debug)]
pub struct HaConfig {
    /// This replica's id (unique among replicas).
    pub id: String,
    /// Lease TTL in whole seconds (etcd raises it to its own minimum, 1.5 × its election
    /// timeout rounded up: 2 s with etcd's defaults).
    pub ttl_secs: i64,
}

/// How often a held lease is renewed: a third of its TTL, at most every half second (a renewal
/// is one small message; renewing often shortens the gap a lost member leaves).
pub fn renewal_period(ttl: Duration) -> Duration {
    (ttl / 3).clamp(Duration::from_millis(100), Duration::from_millis(500))
}

/// Time for the keep-alive stream to move to another member and for a round trip on a loaded
/// machine, besides etcd's own election. 0.5 s was not enough: on a 2-core machine at load 19
/// the step-down check itself ran 0.4 s late and a 2 s lease was given up while etcd had
/// already elected its new leader.
const FAILOVER_SLACK: Duration = Duration::from_millis(1000);

/// The smallest lease TTL (whole seconds) that survives the loss of any one etcd member, the
/// raft leader included, for a cluster whose members run with `--election-timeout`
/// `election_timeout` (etcd's default: 1,000 ms).
///
/// When the raft leader dies, no renewal is confirmed until the others elect a new one: each
/// follower waits a randomized 1-2 election timeouts from the last heartbeat, so up to twice
/// `election_timeout`. The last confirmed renewal may be one renewal period older than the
/// loss, and the replica steps down a sixth of the TTL before the lease could end
/// (`hold_lease`). So the TTL must satisfy `TTL - TTL/6 >= 2 * election_timeout + period +
/// FAILOVER_SLACK`: 5 s with etcd's defaults, 3 s at 250 ms.
pub fn min_safe_ttl_secs(election_timeout: Duration) -> i64 {
    (1..=3600)
        .find(|&t| {
            let ttl = Duration::from_secs(t as u64);
            ttl - ttl / 6 >= 2 * election_timeout + renewal_period(ttl) + FAILOVER_SLACK
        })
        .unwrap_or(3600)
}
/// The keys the election uses, beside (not under) the records' prefix, so the store's watch
/// never sees them.
pub fn ha_prefix(record_prefix: &str) -> String {
    format!("{}-ha/", record_prefix.trim_end_matches('/'))
}

/// Read every replica and the leader.
pub async fn view(client: Client, prefix: &str) -> Result<ReplicaView, etcd_rpc::Error> {
    let resp = client
        .get(
            format!("{prefix}replicas/"),
            Some(GetOptions::new().with_prefix()),
        )
        .await?;
    let mut replicas: Vec<ReplicaInfo> = resp
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect();
    replicas.sort_by(|a, b| a.id.cmp(&b.id));
    let l = client.get(format!("{prefix}leader"), None).await?;
    let (leader, generation) = match l.kvs.first() {
        Some(kv) => (
            serde_json::from_slice::<LeaderValue>(&kv.value)
                .map(|v| v.id)
                .unwrap_or_default(),
            kv.create_revision as u64,
        ),
        None => (String::new(), 0),
    };
    Ok(ReplicaView {
        replicas,
        leader,
        generation,
    })
}

/// How a held lease ended.
enum LeaseEnd {
    /// It could not be renewed in time (or etcd says it expired).
    Lost(String),
    /// The replica is shutting down (the lease was revoked).
    Stopped,
}

/// Run the election until `stop` turns true (then resign: the lease is revoked, so a standby
/// takes over at once).
pub async fn run(
    client: Client,
    prefix: String,
    cfg: HaConfig,
    me: ReplicaInfo,
    lead: Arc<Leadership>,
    fence: Fence,
    mut stop: watch::Receiver<bool>,
) {
    let ttl = Duration::from_secs(cfg.ttl_secs.max(1) as u64);
    let mut backoff = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return;
        }
        // The lease runs from no earlier than the request: count from before it.
        let asked_at = Instant::now();
        let lease = match client.lease_grant(cfg.ttl_secs.max(1)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "leader election: no lease (etcd unavailable?); retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        // The lease's real TTL: etcd raises a short one to its minimum.
        let granted = Duration::from_secs(lease.ttl.max(1) as u64);
        let ttl = ttl.max(granted);
        let id = lease.id;
        tracing::info!(lease = id, ttl_s = ttl.as_secs(), replica = %cfg.id, "leader election: lease granted");
        let end = hold_lease(
            &client, &prefix, &cfg, &me, id, ttl, asked_at, &lead, &fence, &mut stop,
        )
        .await;
        let was_leader = matches!(lead.standing(), Standing::Leader { .. });
        let generation = lead.standing().generation();
        // Standby first, then no fence: nothing sees "leader" without the fence.
        lead.set(
            Standing::Standby {
                generation,
                leader: None,
            },
            None,
        );
        fence.set(None);
        match end {
            LeaseEnd::Stopped => {
                let _ = tokio::time::timeout(Duration::from_secs(2), client.lease_revoke(id)).await;
                tracing::info!(replica = %cfg.id, was_leader, "leader election: resigned");
                return;
            }
            LeaseEnd::Lost(why) => {
                tracing::warn!(replica = %cfg.id, was_leader, %why, "leader election: lease lost; now standby, campaigning again");
                // It may still live in etcd (renewals were only late): let it go, so a
                // leader key bound to it goes at once instead of at its expiry.
                let _ = tokio::time::timeout(ttl / 3, client.lease_revoke(id)).await;
            }
        }
    }
}

/// Keep a lease alive; campaign with it, and while leader or standby, follow the leader key.
#[allow(clippy::too_many_arguments)]
async fn hold_lease(
    client: &Client,
    prefix: &str,
    cfg: &HaConfig,
    me: &ReplicaInfo,
    lease: i64,
    ttl: Duration,
    granted_at: Instant,
    lead: &Arc<Leadership>,
    fence: &Fence,
    stop: &mut watch::Receiver<bool>,
) -> LeaseEnd {
    let period = renewal_period(ttl);
    // The keep-alive stream; reopened (each attempt bounded by `period`) when it breaks, e.g.
    // when the etcd member it went to dies or loses its leader, or when a renewal stays
    // unanswered for a period (a member that stopped, or lost its network, without closing
    // the connection): the client then moves to another member.
    let mut stream: Option<(etcd_rpc::LeaseKeeper, etcd_rpc::LeaseKeepAliveStream)> = None;
    // The lease is surely held until the last renewal that etcd confirmed, sent at
    // `confirmed`, plus the TTL; stepping down a sixth of the TTL before that leaves room.
    let margin = ttl / 6;
    let mut confirmed = granted_at;
    // Send times of the renewals not answered yet, oldest first (one answer each, in order).
    let mut sent: std::collections::VecDeque<Instant> = std::collections::VecDeque::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let leader_key = format!("{prefix}leader");
    let replica_key = format!("{prefix}replicas/{}", cfg.id);
    let mut registered_version = u64::MAX;
    let mut registered_state = String::new();
    // The leader key's watch: Some while following another leader (or ourselves).
    let mut follow: Option<etcd_rpc::WatchStream> = None;
    let mut campaign_now = true;
    loop {
        if Instant::now() + margin >= confirmed + ttl {
            return LeaseEnd::Lost(format!(
                "not renewed for {} ms (TTL {} s)",
                confirmed.elapsed().as_millis(),
                ttl.as_secs()
            ));
        }
        if campaign_now {
            campaign_now = false;
            let bounded =
                tokio::time::timeout(period, campaign(client, &leader_key, &cfg.id, lease));
            let outcome = match bounded.await {
                Ok(r) => r,
                Err(_) => Err(etcd_rpc::Error::Closed(
                    "the campaign took longer than a renewal period".into(),
                )),
            };
            match outcome {
                Ok(Campaign::Won(rev)) => {
                    let generation = rev as u64;
                    fence.set(Some((leader_key.clone(), rev)));
                    lead.set(
                        Standing::Leader { generation },
                        Some(confirmed + ttl - margin),
                    );
                    tracing::info!(replica = %cfg.id, generation, "leader election: elected leader");
                    follow = watch_key(client, &leader_key, rev + 1, period).await;
                    if follow.is_none() {
                        campaign_now = true;
                    }
                }
                Ok(Campaign::Lost {
                    holder_lease,
                    generation,
                    revision,
                    ..
                }) if holder_lease == lease => {
                    // The key is ours, under this very lease (we looked again after the watch
                    // broke): still the leader.
                    fence.set(Some((leader_key.clone(), generation)));
                    lead.set(
                        Standing::Leader {
                            generation: generation as u64,
                        },
                        Some(confirmed + ttl - margin),
                    );
                    follow = watch_key(client, &leader_key, revision + 1, period).await;
                    if follow.is_none() {
                        campaign_now = true;
                    }
                }
                Ok(Campaign::Lost {
                    leader,
                    generation,
                    revision,
                    ..
                }) => {
                    lead.set(
                        Standing::Standby {
                            generation: generation as u64,
                            leader: Some(leader.clone()),
                        },
                        None,
                    );
                    fence.set(None);
                    tracing::info!(replica = %cfg.id, %leader, generation, "leader election: standby");
                    follow = watch_key(client, &leader_key, revision + 1, period).await;
                    if follow.is_none() {
                        campaign_now = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: campaign failed; retrying");
                    campaign_now = true;
                }
            }
        }
        // Publish this replica's registration when it changed.
        let version = lead.roles_version.load(Ordering::Relaxed);
        let state = match lead.standing() {
            Standing::Leader { .. } => "leader",
            _ => "standby",
        };
        if version != registered_version || state != registered_state {
            let info = ReplicaInfo {
                state: state.to_string(),
                generation: lead.standing().generation(),
                switches: lead.switch_roles(),
                ..me.clone()
            };
            if let Ok(v) = serde_json::to_vec(&info) {
                let put = client.put(
                    replica_key.clone(),
                    v,
                    Some(PutOptions::new().with_lease(lease)),
                );
                if matches!(tokio::time::timeout(period, put).await, Ok(Ok(_))) {
                    registered_version = version;
                    registered_state = state.to_string();
                }
            }
        }
        if let Some(oldest) = sent.front() {
            if stream.is_some() && oldest.elapsed() > period {
                tracing::debug!(
                    member = %client.pinned(),
                    waited_ms = oldest.elapsed().as_millis() as u64,
                    "lease renewal unanswered; trying another etcd member"
                );
                client.avoid(&client.pinned());
                stream = None;
                sent.clear();
            }
        }
        if stream.is_none() {
            let opened_at = Instant::now();
            let open = client.lease_keep_alive(lease);
            match tokio::time::timeout(period, open).await {
                Ok(Ok(s)) => {
                    // The opening carried the first renewal.
                    sent.push_back(opened_at);
                    stream = Some(s);
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "lease keep-alive stream not opened");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(_) => continue,
            }
        }
        let Some((keeper, responses)) = stream.as_mut() else {
            continue;
        };
        tokio::select! {
            _ = stop.changed() => {
                if *stop.borrow() {
                    return LeaseEnd::Stopped;
                }
            }
            _ = stalled(sent.front().map(|t| *t + period)) => {
                // Checked at the top of the loop.
            }
            _ = tick.tick() => {
                let at = Instant::now();
                match keeper.keep_alive().await {
                    Ok(()) => sent.push_back(at),
                    Err(e) => {
                        tracing::debug!(error = %e, "lease keep-alive not sent; reopening the stream");
                        stream = None;
                        sent.clear();
                    }
                }
            }
            r = responses.message() => match r {
                Ok(Some(resp)) => {
                    if resp.ttl <= 0 {
                        return LeaseEnd::Lost("etcd says the lease expired".into());
                    }
                    if let Some(at) = sent.pop_front() {
                        confirmed = confirmed.max(at);
                    }
                    if matches!(lead.standing(), Standing::Leader { .. }) {
                        lead.extend(confirmed + ttl - margin);
                    }
                }
                Ok(None) | Err(_) => {
                    // The stream broke (a member went away): open another one; the deadline
                    // above still counts from the last confirmed renewal.
                    stream = None;
                    sent.clear();
                }
            },
            ev = next_event(&mut follow) => match ev {
                KeyEvent::Deleted => {
                    tracing::info!(replica = %cfg.id, "leader election: the leader key is gone; campaigning");
                    campaign_now = true;
                    follow = None;
                }
                KeyEvent::Broken => {
                    // Look again (campaigning is harmless: it fails while a leader holds the key).
                    follow = None;
                    campaign_now = true;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                KeyEvent::Other => {}
            },
        }
    }
}

/// Pending until `at` (forever when None).
async fn stalled(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

enum Campaign {
    Won(i64),
    Lost {
        leader: String,
        /// The lease the leader key is bound to.
        holder_lease: i64,
        generation: i64,
        revision: i64,
    },
}

async fn campaign(
    client: &Client,
    key: &str,
    id: &str,
    lease: i64,
) -> Result<Campaign, etcd_rpc::Error> {
    let value = serde_json::to_vec(&LeaderValue {
        id: id.to_string(),
        lease,
    })
    .unwrap_or_default();
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let resp = client.txn(txn).await?;
    let revision = resp.revision();
    if resp.succeeded {
        return Ok(Campaign::Won(revision));
    }
    for op in resp.op_responses() {
        if let TxnOpResponse::Get(g) = op {
            if let Some(kv) = g.kvs.first() {
                let leader = serde_json::from_slice::<LeaderValue>(&kv.value)
                    .map(|v| v.id)
                    .unwrap_or_default();
                return Ok(Campaign::Lost {
                    leader,
                    holder_lease: kv.lease,
                    generation: kv.create_revision,
                    revision,
                });
            }
        }
    }
    // The key vanished between the comparison and the read: someone else's turn, or ours
    // on the next try.
    Ok(Campaign::Lost {
        leader: String::new(),
        holder_lease: 0,
        generation: 0,
        revision,
    })
}

async fn watch_key(
    client: &Client,
    key: &str,
    from: i64,
    within: Duration,
) -> Option<etcd_rpc::WatchStream> {
    let open = client.watch(
        key.to_string(),
        Some(WatchOptions::new().with_start_revision(from)),
    );
    tokio::time::timeout(within, open).await.ok()?.ok()
}

enum KeyEvent {
    Deleted,
    Broken,
    Other,
}

/// The next event of the followed key (pending forever when nothing is followed).
async fn next_event(follow: &mut Option<etcd_rpc::WatchStream>) -> KeyEvent {
    let Some(s) = follow.as_mut() else {
        return std::future::pending().await;
    };
    match s.message().await {
        Ok(Some(resp)) => {
            if resp.canceled || resp.compact_revision > 0 {
                return KeyEvent::Broken;
            }
            if resp.events.iter().any(|e| e.r#type() == EventType::Delete) {
                KeyEvent::Deleted
            } else {
                KeyEvent::Other
            }
        }
        Ok(None) | Err(_) => KeyEvent::Broken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_safe_ttl_outlasts_two_election_timeouts() {
        assert_eq!(min_safe_ttl_secs(Duration::from_millis(1000)), 5);
        assert_eq!(min_safe_ttl_secs(Duration::from_millis(500)), 3);
        assert_eq!(min_safe_ttl_secs(Duration::from_millis(250)), 3);
        // Never 1 s: a renewal period and the slack alone leave too little of it.
        assert_eq!(min_safe_ttl_secs(Duration::from_millis(10)), 2);
        for ms in [100u64, 250, 500, 1000, 2500, 5000] {
            let e = Duration::from_millis(ms);
            let t = Duration::from_secs(min_safe_ttl_secs(e) as u64);
            // The step-down point comes after the longest gap one member's loss can leave.
            assert!(
                t - t / 6 >= 2 * e + renewal_period(t) + FAILOVER_SLACK,
                "{ms}"
            );
        }
    }

    #[test]
    fn ha_keys_sit_beside_the_record_prefix() {
        let p = ha_prefix("/flowmesh/");
        assert_eq!(p, "/flowmesh-ha/");
        // Not inside the records' prefix range, so the store's watch never sees them.
        assert!(!p.starts_with("/flowmesh/"));
    }

    #[test]
    fn standing_decides_roles_and_programming() {
        let l = Leadership::standby();
        assert!(!l.leads());
        assert!(!l.may_program());
        l.set(Standing::Leader { generation: 7 }, None);
        assert!(l.leads());
        // Leader without a confirmed lease: may not program.
        assert!(!l.may_program());
        l.extend(Instant::now() + Duration::from_secs(5));
        assert!(l.may_program());
        assert_eq!(
            l.standing().role(),
            Some((ofproto::message::Role::Master, 7))
        );
        l.extend(Instant::now() - Duration::from_millis(1));
        assert!(!l.may_program(), "a lapsed lease stops programming");
        assert!(Leadership::alone().may_program());
        assert_eq!(Standing::Alone.role(), None);
    }

    #[test]
    fn a_standby_without_a_generation_requests_no_role() {
        let s = Standing::Standby {
            generation: 0,
            leader: None,
        };
        assert_eq!(s.role(), None);
        let s = Standing::Standby {
            generation: 9,
            leader: Some("c1".into()),
        };
        assert_eq!(s.role(), Some((ofproto::message::Role::Slave, 9)));
    }

    #[test]
    fn a_renewal_after_a_lapse_wakes_the_followers() {
        let l = Leadership::standby();
        let mut rx = l.subscribe();
        l.set(
            Standing::Leader { generation: 3 },
            Some(Instant::now() + Duration::from_secs(5)),
        );
        assert!(rx.has_changed().unwrap_or(false));
        rx.borrow_and_update();
        // A renewal while the lease is held: no wake-up (followers would re-read switches).
        l.extend(Instant::now() + Duration::from_secs(6));
        assert!(!rx.has_changed().unwrap_or(true));
        // Lapsed, then renewed: followers are woken to program again.
        l.extend(Instant::now() - Duration::from_millis(1));
        assert!(!l.may_program());
        l.extend(Instant::now() + Duration::from_secs(5));
        assert!(rx.has_changed().unwrap_or(false));
        assert!(l.may_program());
    }

    #[test]
    fn switch_roles_count_changes() {
        let l = Leadership::alone();
        l.set_switch_role("node1", "master");
        let v = l.roles_version.load(Ordering::Relaxed);
        l.set_switch_role("node1", "master");
        assert_eq!(l.roles_version.load(Ordering::Relaxed), v);
        l.set_switch_role("node1", "");
        assert!(l.switch_roles().is_empty());
    }
}
