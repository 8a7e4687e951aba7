//! The egress firewall resolver's schedule, I/O-free (time is an argument): which names are
//! due for a lookup, which changed answers may be stored now, and when to wake next.
//!
//! * Every name has a schedule of its own: its next lookup follows its own answer's TTL (or
//!   the retry interval after a failure), and a lookup in flight occupies only that name —
//!   a slow or dead name delays no other. At most [`Limits::in_flight`] lookups run at once,
//!   earliest due first.
//! * A project's firewall resolves at most [`Limits::names_per_namespace`] distinct names (in
//!   rule order; the model refuses a policy with more, this also covers policies stored before
//!   the limit was lowered); the others are reported and never looked up.
//! * A changed answer is stored (a write to the store and a bundle to the switches of the
//!   projects that use it) under two token buckets: per name, [`Limits::write_burst`] at once
//!   and then one per [`Limits::write_interval`]; in all, [`Limits::writes_per_second`]. An
//!   answer that changes faster is held and only the latest is stored when a token comes.

use kinds::egress_firewall::DnsSchedule;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The resolver's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Distinct names one project's firewall may have resolved.
    pub names_per_namespace: usize,
    /// Lookups in flight at once.
    pub in_flight: usize,
    /// Stored changes of one name in a burst.
    pub write_burst: u32,
    /// After the burst, one stored change of a name per this interval.
    pub write_interval: Duration,
    /// Stored changes per second, all names together (bursts of up to one second's worth).
    pub writes_per_second: u32,
}

/// Default [`Limits::in_flight`]: more than any one project's names (the default limit is
/// 256), so one project's dead names never take every slot.
pub const DEFAULT_IN_FLIGHT: usize = 1024;
/// Default [`Limits::write_burst`].
pub const DEFAULT_WRITE_BURST: u32 = 3;
/// Default [`Limits::write_interval`].
pub const DEFAULT_WRITE_INTERVAL: Duration = Duration::from_secs(10);
/// Default [`Limits::writes_per_second`].
pub const DEFAULT_WRITES_PER_SECOND: u32 = 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            names_per_namespace: topology::model::DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE,
            in_flight: DEFAULT_IN_FLIGHT,
            write_burst: DEFAULT_WRITE_BURST,
            write_interval: DEFAULT_WRITE_INTERVAL,
            writes_per_second: DEFAULT_WRITES_PER_SECOND,
        }
    }
}

/// A token bucket: `capacity` tokens, refilled at `per_sec`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    per_sec: f64,
    at: Instant,
}

impl Bucket {
    fn full(capacity: f64, per_sec: f64, now: Instant) -> Self {
        Bucket {
            tokens: capacity,
            capacity,
            per_sec,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.per_sec).min(self.capacity);
        self.at = now;
    }

    /// When the next whole token is there (now if it is).
    fn ready_at(&self) -> Instant {
        if self.tokens >= 1.0 || self.per_sec <= 0.0 {
            return self.at;
        }
        self.at + Duration::from_secs_f64((1.0 - self.tokens) / self.per_sec)
    }
}

/// One name's state.
#[derive(Debug)]
struct Name {
    /// Its next lookup.
    due: Instant,
    in_flight: bool,
    /// What the model holds for it (None: nothing yet).
    stored: Option<BTreeSet<Ipv4Addr>>,
    /// A changed answer waiting for a write token, and since when it waits.
    pending: Option<(BTreeSet<Ipv4Addr>, Instant)>,
    /// The answer being stored now.
    writing: Option<BTreeSet<Ipv4Addr>>,
    bucket: Bucket,
    /// Why it is not resolved at all (over its projects' limit).
    capped: Option<String>,
    shown: DnsSchedule,
}

/// The schedule of every name the firewalls use.
#[derive(Debug)]
pub struct Schedule {
    limits: Limits,
    names: BTreeMap<String, Name>,
    writes: Bucket,
    in_flight: usize,
}

/// One project's DNS names in rule order (repeats allowed), as the model holds them.
pub type ProjectNames = (String, Vec<String>);

impl Schedule {
    /// An empty schedule.
    pub fn new(limits: Limits, now: Instant) -> Self {
        let per_sec = f64::from(limits.writes_per_second.max(1));
        Schedule {
            limits,
            names: BTreeMap::new(),
            writes: Bucket::full(per_sec, per_sec, now),
            in_flight: 0,
        }
    }

    /// The names the firewalls use now (per project, in rule order) and what the model holds
    /// for each (`stored`): new names are due at once, names no longer used are forgotten (a
    /// lookup in flight for one is ignored when it ends).
    pub fn sync(
        &mut self,
        projects: &[ProjectNames],
        stored: &BTreeMap<String, BTreeSet<Ipv4Addr>>,
        now: Instant,
    ) {
        let limit = self.limits.names_per_namespace.max(1);
        let mut active: BTreeSet<&str> = BTreeSet::new();
        let mut over: BTreeMap<&str, &str> = BTreeMap::new();
        for (ns, names) in projects {
            let mut distinct: Vec<&str> = Vec::new();
            for n in names {
                if !distinct.contains(&n.as_str()) {
                    distinct.push(n);
                }
            }
            for (i, n) in distinct.into_iter().enumerate() {
                if i < limit {
                    active.insert(n);
                } else {
                    over.entry(n).or_insert(ns);
                }
            }
        }
        let wanted: BTreeSet<&str> = active.iter().chain(over.keys()).copied().collect();
        let gone: Vec<String> = self
            .names
            .keys()
            .filter(|n| !wanted.contains(n.as_str()))
            .cloned()
            .collect();
        for n in gone {
            if let Some(s) = self.names.remove(&n) {
                if s.in_flight {
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
            }
        }
        let per_name = 1.0 / self.limits.write_interval.as_secs_f64().max(1e-3);
        let burst = f64::from(self.limits.write_burst.max(1));
        for n in wanted {
            let capped = match (active.contains(n), over.get(n)) {
                (false, Some(ns)) => Some(format!(
                    "not resolved: project {ns} uses more than {limit} distinct dnsNames \
                     (--egress-dns-names-per-namespace); this rule matches nothing"
                )),
                _ => None,
            };
            let s = self.names.entry(n.to_string()).or_insert_with(|| Name {
                due: now,
                in_flight: false,
                stored: None,
                pending: None,
                writing: None,
                bucket: Bucket::full(burst, per_name, now),
                capped: None,
                shown: DnsSchedule::default(),
            });
            if s.writing.is_none() {
                s.stored = stored.get(n).cloned();
            }
            if s.capped.is_none() && capped.is_some() {
                s.shown = DnsSchedule {
                    next_refresh_unix_ms: 0,
                    last_error: capped.clone().unwrap_or_default(),
                };
            }
            if s.capped.is_some() && capped.is_none() {
                s.due = now;
                s.shown = DnsSchedule::default();
            }
            s.capped = capped;
        }
    }

    /// Names to look up now, earliest due first (marked in flight); at most
    /// [`Limits::in_flight`] run at once.
    pub fn due_lookups(&mut self, now: Instant) -> Vec<String> {
        let room = self.limits.in_flight.max(1).saturating_sub(self.in_flight);
        let mut due: Vec<(Instant, &String)> = self
            .names
            .iter()
            .filter(|(_, s)| !s.in_flight && s.capped.is_none() && s.due <= now)
            .map(|(n, s)| (s.due, n))
            .collect();
        due.sort();
        let picked: Vec<String> = due.into_iter().take(room).map(|(_, n)| n.clone()).collect();
        for n in &picked {
            if let Some(s) = self.names.get_mut(n) {
                s.in_flight = true;
            }
        }
        self.in_flight += picked.len();
        picked
    }

    /// A lookup ended: `Ok((addresses, next lookup in))` or `Err((error, retry in))`.
    /// `wall_ms` is the wall clock now (Unix milliseconds), for the shown schedule.
    pub fn lookup_done(
        &mut self,
        name: &str,
        result: Result<(BTreeSet<Ipv4Addr>, Duration), (String, Duration)>,
        now: Instant,
        wall_ms: i64,
    ) {
        let Some(s) = self.names.get_mut(name) else {
            return; // no longer used
        };
        if s.in_flight {
            s.in_flight = false;
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        let (wait, error) = match result {
            Ok((addrs, wait)) => {
                let unchanged = s.writing.as_ref().or(s.stored.as_ref()) == Some(&addrs);
                s.pending = match (unchanged, s.pending.take()) {
                    (true, _) => None,
                    (false, Some((_, since))) => Some((addrs, since)),
                    (false, None) => Some((addrs, now)),
                };
                (wait, String::new())
            }
            Err((e, wait)) => (wait, e),
        };
        s.due = now + wait;
        s.shown = DnsSchedule {
            next_refresh_unix_ms: wall_ms.saturating_add(wait.as_millis() as i64),
            last_error: error,
        };
    }

    /// Changed answers that may be stored now (each marked as being written), oldest first.
    pub fn due_writes(&mut self, now: Instant) -> Vec<(String, BTreeSet<Ipv4Addr>)> {
        self.writes.refill(now);
        let mut waiting: Vec<(Instant, String)> = self
            .names
            .iter()
            .filter_map(|(n, s)| match (&s.pending, &s.writing) {
                (Some((_, since)), None) => Some((*since, n.clone())),
                _ => None,
            })
            .collect();
        waiting.sort();
        let mut out = Vec::new();
        for (_, n) in waiting {
            if self.writes.tokens < 1.0 {
                break;
            }
            let Some(s) = self.names.get_mut(&n) else {
                continue;
            };
            s.bucket.refill(now);
            if s.bucket.tokens < 1.0 {
                continue;
            }
            if let Some((addrs, _)) = s.pending.take() {
                s.bucket.tokens -= 1.0;
                self.writes.tokens -= 1.0;
                s.writing = Some(addrs.clone());
                out.push((n, addrs));
            }
        }
        out
    }

    /// A write ended (`Err`: it was not stored; the answer waits for the next token unless a
    /// newer one came meanwhile).
    pub fn write_done(&mut self, name: &str, result: Result<(), String>, now: Instant) {
        let Some(s) = self.names.get_mut(name) else {
            return;
        };
        let Some(written) = s.writing.take() else {
            return;
        };
        match result {
            Ok(()) => {
                if s.pending.as_ref().is_some_and(|(p, _)| *p == written) {
                    s.pending = None;
                }
                s.stored = Some(written);
            }
            Err(e) => {
                if s.pending.is_none() {
                    s.pending = Some((written, now));
                }
                s.shown.last_error = format!("the changed addresses were not stored: {e}");
            }
        }
    }

    /// When something is next to do: a lookup due, or a token for a waiting write (None:
    /// nothing scheduled).
    pub fn next_wake(&self) -> Option<Instant> {
        let lookups = self
            .names
            .values()
            .filter(|s| !s.in_flight && s.capped.is_none())
            .map(|s| s.due)
            .min();
        let writes = self
            .names
            .values()
            .filter(|s| s.pending.is_some() && s.writing.is_none())
            .map(|s| s.bucket.ready_at().max(self.writes.ready_at()))
            .min();
        match (lookups, writes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Lookups in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// What `get egressnetworkpolicies` shows per name.
    pub fn shown(&self) -> BTreeMap<String, DnsSchedule> {
        self.names
            .iter()
            .map(|(n, s)| (n.clone(), s.shown.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests;
