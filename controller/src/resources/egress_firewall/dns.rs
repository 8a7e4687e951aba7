//! The egress firewall's DNS resolver task, and the admin API calls that show its state.
//!
//! The controller (not every node) resolves each `dnsName` the firewalls use: A records, from
//! the nameservers of `/etc/resolv.conf` or the one given with `--egress-dns-server`. A name is
//! resolved again when its answer's TTL runs out, clamped to `[ttl_floor, ttl_ceiling]`. A
//! lookup that fails (timeout, SERVFAIL, no server) keeps the old addresses and is retried
//! after `retry`; an answer that the name has no A record (NXDOMAIN, NODATA) is an answer:
//! the name's flows go away. Only the flows of a name whose addresses changed are touched
//! (the model's `set_egress_dns_addresses`, then the usual diff per switch).

use crate::core::CoreHandle;
use crate::error::ApiError;
use crate::resources::egress_firewall as efw;
use crate::resources::nodes as ops;
use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolveErrorKind, Resolver};
use kinds::egress_firewall::{self as shapes, DnsSchedule};
use proto::admin as pa;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
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
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            server: None,
            ttl_floor: DEFAULT_TTL_FLOOR,
            ttl_ceiling: DEFAULT_TTL_CEILING,
            retry: DEFAULT_RETRY,
            timeout: Duration::from_secs(5),
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

/// Run the resolver until the core stops: picks up the names the firewalls use (checked
/// every second), resolves each when due, and hands changed addresses to the core.
pub async fn run(core: CoreHandle, cfg: DnsConfig) {
    let resolver = match build_resolver(&cfg) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "egress firewall DNS: no resolver; dnsName rules stay unresolved");
            return;
        }
    };
    let mut due: BTreeMap<String, Instant> = BTreeMap::new();
    let mut schedule: BTreeMap<String, DnsSchedule> = BTreeMap::new();
    loop {
        let Ok((leads, names)) = core.read(|c| (c.leads(), c.model.egress_dns_names())).await
        else {
            return; // the core stopped
        };
        if !leads {
            // A standby resolves nothing: the leader's results reach it by the store's watch.
            due.clear();
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        due.retain(|n, _| names.contains(n));
        schedule.retain(|n, _| names.contains(n));
        let now = Instant::now();
        for n in &names {
            due.entry(n.clone()).or_insert(now);
        }
        let ready: Vec<String> = due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        if !ready.is_empty() {
            let results = futures_lookups(&resolver, &ready).await;
            for (name, r) in results {
                let (wait, error) = match r {
                    LookupResult::Answer(addrs, ttl) => {
                        if let Err(e) = efw::set_addresses(&core, name.clone(), addrs).await {
                            tracing::warn!(name = %name, error = %e, "egress firewall DNS: addresses not applied");
                        }
                        (cfg.clamp(ttl), String::new())
                    }
                    LookupResult::Failed(e) => {
                        tracing::warn!(name = %name, error = %e, "egress firewall DNS: lookup failed; keeping the old addresses");
                        (cfg.retry, e)
                    }
                };
                due.insert(name.clone(), Instant::now() + wait);
                schedule.insert(
                    name,
                    DnsSchedule {
                        next_refresh_unix_ms: unix_ms_in(wait),
                        last_error: error,
                    },
                );
            }
            let s = schedule.clone();
            if core.read(move |c| c.dns_schedule = s).await.is_err() {
                return;
            }
        }
        let next = due.values().min().copied();
        let wake = match next {
            Some(t) => t.min(Instant::now() + Duration::from_secs(1)),
            None => Instant::now() + Duration::from_secs(1),
        };
        tokio::time::sleep_until(wake).await;
    }
}

/// Resolve many names at once (at most 64 in flight).
async fn futures_lookups(
    resolver: &Resolver<TokioConnectionProvider>,
    names: &[String],
) -> Vec<(String, LookupResult)> {
    let mut out = Vec::with_capacity(names.len());
    for chunk in names.chunks(64) {
        let mut set = tokio::task::JoinSet::new();
        for n in chunk {
            let r = resolver.clone();
            let n = n.clone();
            set.spawn(async move {
                let res = lookup(&r, &n).await;
                (n, res)
            });
        }
        while let Some(j) = set.join_next().await {
            if let Ok(x) = j {
                out.push(x);
            }
        }
    }
    out
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
