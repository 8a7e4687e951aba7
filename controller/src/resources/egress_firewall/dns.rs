//! The egress firewall's DNS resolver task, and the admin API calls that show its state.
//!
//! The controller (not every node) resolves each `dnsName` the firewalls use: A records, from
//! the nameservers of `/etc/resolv.conf` or the one given with `--egress-dns-server`. A name is
//! resolved again when its answer's TTL runs out, clamped to `[ttl_floor, ttl_ceiling]`. A
//! lookup that fails (timeout, SERVFAIL, no server) keeps the old addresses and is retried
//! after `retry`; an answer that the name has no A record (NXDOMAIN, NODATA) is an answer:
//! the name's flows go away. Only the flows of a name whose addresses changed are touched
//! (the model's `set_egress_dns_addresses`, then the usual diff per switch). Every name has
//! its own schedule and deadline, and stored changes are rate-limited
//! ([`super::schedule`]).

use crate::core::CoreHandle;
use crate::error::ApiError;
use crate::resources::egress_firewall as efw;
use crate::resources::egress_firewall::schedule::{Limits, ProjectNames, Schedule};
use crate::resources::nodes as ops;
use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolveErrorKind, Resolver};
use kinds::egress_firewall as shapes;
use proto::admin as pa;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Default shortest re-resolution interval, whatever the TTL says.
pub const DEFAULT_TTL_FLOOR: Duration = Duration::from_secs(2);
/// Default longest re-resolution interval, whatever the TTL says.
pub const DEFAULT_TTL_CEILING: Duration = Duration::from_secs(1800);
/// Default retry interval after a failed lookup.
pub const DEFAULT_RETRY: Duration = Duration::from_secs(5);

/// How the resolver works.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsConfig {
    /// The nameserver to ask (None: those of `/etc/resolv.conf`).
    pub server: Option<SocketAddr>,
    /// Shortest interval between two lookups of one name.
    pub ttl_floor: Duration,
    /// Longest interval between two lookups of one name.
    pub ttl_ceiling: Duration,
    /// Retry interval after a failed lookup.
    pub retry: Duration,
    /// One query's timeout.
    pub timeout: Duration,
    /// Names per project, lookups in flight, stored writes.
    pub limits: Limits,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            server: None,
            ttl_floor: DEFAULT_TTL_FLOOR,
            ttl_ceiling: DEFAULT_TTL_CEILING,
            retry: DEFAULT_RETRY,
            timeout: Duration::from_secs(5),
            limits: Limits::default(),
        }
    }
}

impl DnsConfig {
    /// The interval before the next lookup for an answer with `ttl`.
    pub fn clamp(&self, ttl: Duration) -> Duration {
        ttl.max(self.ttl_floor)
            .min(self.ttl_ceiling.max(self.ttl_floor))
    }
}

/// What one lookup gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupResult {
    /// The addresses (empty: the name has no A record) and the smallest TTL of the answer.
    Answer(BTreeSet<Ipv4Addr>, Duration),
    /// The lookup failed; keep what we had.
    Failed(String),
}

fn build_resolver(cfg: &DnsConfig) -> Result<Resolver<TokioConnectionProvider>, String> {
    let (config, mut opts) = match cfg.server {
        Some(s) => (
            ResolverConfig::from_parts(
                None,
                vec![],
                NameServerConfigGroup::from_ips_clear(&[s.ip()], s.port(), true),
            ),
            ResolverOpts::default(),
        ),
        None => hickory_resolver::system_conf::read_system_conf()
            .map_err(|e| format!("reading /etc/resolv.conf: {e}"))?,
    };
    // The controller schedules lookups by TTL itself: every lookup asks the server.
    opts.cache_size = 0;
    opts.timeout = cfg.timeout;
    opts.attempts = 1;
    opts.ndots = 0;
    let mut b = Resolver::builder_with_config(config, TokioConnectionProvider::default());
    *b.options_mut() = opts;
    Ok(b.build())
}

/// Look `name` up once (A records).
pub async fn lookup(resolver: &Resolver<TokioConnectionProvider>, name: &str) -> LookupResult {
    // A trailing dot: the name is absolute, no search domains.
    match resolver.ipv4_lookup(format!("{name}.")).await {
        Ok(l) => {
            let addrs: BTreeSet<Ipv4Addr> = l.iter().map(|a| a.0).collect();
            let ttl = l
                .as_lookup()
                .records()
                .iter()
                .map(|r| r.ttl())
                .min()
                .unwrap_or(0);
            LookupResult::Answer(addrs, Duration::from_secs(u64::from(ttl)))
        }
        Err(e) => match e.kind() {
            ResolveErrorKind::Proto(p) => match p.kind() {
                hickory_resolver::proto::ProtoErrorKind::NoRecordsFound {
                    negative_ttl, ..
                } => LookupResult::Answer(
                    BTreeSet::new(),
                    Duration::from_secs(u64::from(negative_ttl.unwrap_or(0))),
                ),
                _ => LookupResult::Failed(e.to_string()),
            },
            _ => LookupResult::Failed(e.to_string()),
        },
    }
}

fn unix_ms_in(d: Duration) -> i64 {
    SystemTime::now()
        .checked_add(d)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// How often the resolver re-reads the names the firewalls use.
const NAMES_EVERY: Duration = Duration::from_secs(1);

/// The wall clock now, Unix milliseconds.
fn wall_ms() -> i64 {
    unix_ms_in(Duration::ZERO)
}

/// Run the resolver until the core stops. Every name runs on its own schedule
/// ([`super::schedule::Schedule`]): its lookup is a task of its own with its own deadline
/// (`timeout`), so a slow or dead name delays no other, and changed answers are stored under
/// the schedule's write limits, each write a task of its own.
pub async fn run(core: CoreHandle, cfg: DnsConfig) {
    let resolver = match build_resolver(&cfg) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "egress firewall DNS: no resolver; dnsName rules stay unresolved");
            return;
        }
    };
    let mut sched = Schedule::new(cfg.limits, std::time::Instant::now());
    let mut lookups: JoinSet<(String, LookupResult)> = JoinSet::new();
    let mut writes: JoinSet<(String, Result<(), String>)> = JoinSet::new();
    let mut next_names = Instant::now();
    let mut shown_dirty = false;
    let mut warned_capped: BTreeSet<String> = BTreeSet::new();
    loop {
        if Instant::now() >= next_names {
            next_names = Instant::now() + NAMES_EVERY;
            let read = core
                .read(|c| {
                    let projects: Vec<ProjectNames> = c
                        .model
                        .egress_firewalls()
                        .map(|f| {
                            (
                                f.namespace.clone(),
                                f.dns_names().map(str::to_string).collect(),
                            )
                        })
                        .collect();
                    let stored: BTreeMap<String, BTreeSet<Ipv4Addr>> = c
                        .model
                        .egress_dns_all()
                        .map(|(n, a)| (n.to_string(), a.clone()))
                        .collect();
                    (c.leads(), projects, stored)
                })
                .await;
            let Ok((leads, projects, stored)) = read else {
                return; // the core stopped
            };
            if !leads {
                // A standby resolves nothing: the leader's results reach it by the store's
                // watch. Whatever is in flight is dropped.
                lookups.abort_all();
                writes.abort_all();
                sched = Schedule::new(cfg.limits, std::time::Instant::now());
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            sched.sync(&projects, &stored, std::time::Instant::now());
            for (name, s) in sched.shown() {
                if s.next_refresh_unix_ms == 0
                    && !s.last_error.is_empty()
                    && warned_capped.insert(name.clone())
                {
                    tracing::warn!(name = %name, "egress firewall DNS: {}", s.last_error);
                }
            }
            shown_dirty = true;
        }
        let now = std::time::Instant::now();
        for name in sched.due_lookups(now) {
            let (r, timeout) = (resolver.clone(), cfg.timeout);
            lookups.spawn(async move {
                // The resolver's own timeout, and a deadline of our own in case it overruns.
                let res =
                    match tokio::time::timeout(timeout + Duration::from_secs(1), lookup(&r, &name))
                        .await
                    {
                        Ok(res) => res,
                        Err(_) => LookupResult::Failed(format!("no answer within {timeout:?}")),
                    };
                (name, res)
            });
        }
        for (name, addrs) in sched.due_writes(now) {
            let core = core.clone();
            writes.spawn(async move {
                let r = efw::set_addresses(&core, name.clone(), addrs)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                (name, r)
            });
        }
        if shown_dirty {
            shown_dirty = false;
            let s = sched.shown();
            if core.read(move |c| c.dns_schedule = s).await.is_err() {
                return;
            }
        }
        let wake = sched
            .next_wake()
            .map(Instant::from_std)
            .unwrap_or(next_names)
            .min(next_names);
        tokio::select! {
            Some(done) = lookups.join_next(), if !lookups.is_empty() => {
                let Ok((name, result)) = done else { continue };
                let result = match result {
                    LookupResult::Answer(addrs, ttl) => Ok((addrs, cfg.clamp(ttl))),
                    LookupResult::Failed(e) => {
                        tracing::warn!(name = %name, error = %e, "egress firewall DNS: lookup failed; keeping the old addresses");
                        Err((e, cfg.retry))
                    }
                };
                sched.lookup_done(&name, result, std::time::Instant::now(), wall_ms());
                shown_dirty = true;
            }
            Some(done) = writes.join_next(), if !writes.is_empty() => {
                let Ok((name, result)) = done else { continue };
                if let Err(e) = &result {
                    tracing::warn!(name = %name, error = %e, "egress firewall DNS: addresses not applied");
                }
                sched.write_done(&name, result, std::time::Instant::now());
                shown_dirty = true;
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// `ApplyEgressNetworkPolicy`: check like `apply -f`, then create or replace.
pub async fn api_apply(
    core: &CoreHandle,
    p: pa::EgressNetworkPolicy,
) -> Result<pa::ApplyEgressNetworkPolicyReply, ApiError> {
    ops::check_name("namespace", &p.namespace)?;
    ops::check_name("egressnetworkpolicy", &p.name)?;
    let f = shapes::from_proto(&p).map_err(|e| {
        ApiError::Invalid(format!(
            "egressnetworkpolicy {}/{}: {e}",
            p.namespace, p.name
        ))
    })?;
    let result = efw::apply(core, f.clone()).await?;
    let policy = core
        .read(move |c| shapes::to_proto(&c.model, &f, &c.dns_schedule))
        .await?;
    Ok(pa::ApplyEgressNetworkPolicyReply {
        result: result.as_str().to_string(),
        policy: Some(policy),
    })
}

/// `ListEgressNetworkPolicies`: all, or one namespace's (an unknown namespace is NotFound).
pub async fn api_list(
    core: &CoreHandle,
    namespace: String,
) -> Result<pa::EgressNetworkPolicyList, ApiError> {
    let items = core
        .read(move |c| {
            if !namespace.is_empty() && c.model.namespace(&namespace).is_none() {
                return Err(ApiError::from(topology::ModelError::UnknownNamespace(
                    namespace,
                )));
            }
            Ok(c.model
                .egress_firewalls()
                .filter(|f| namespace.is_empty() || f.namespace == namespace)
                .map(|f| shapes::to_proto(&c.model, f, &c.dns_schedule))
                .collect())
        })
        .await??;
    Ok(pa::EgressNetworkPolicyList { items })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_clamped() {
        let c = DnsConfig::default();
        assert_eq!(c.clamp(Duration::from_secs(0)), DEFAULT_TTL_FLOOR);
        assert_eq!(c.clamp(Duration::from_secs(60)), Duration::from_secs(60));
        assert_eq!(c.clamp(Duration::from_secs(86_400)), DEFAULT_TTL_CEILING);
    }
}
