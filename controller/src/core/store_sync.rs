//! Bringing store changes into the model: a change another replica wrote (from the store's
//! watch) or a difference found by a relist goes through the model's sync operations, which
//! answer the nodes it affects exactly as the local mutation did, so the core recomputes only
//! those nodes' flows.

use crate::state::DnsRecord;
use crate::state::{Change, CursorsRecord, Listing, Record, RecordKey, Revision};
use std::collections::{BTreeMap, HashMap};
use topology::model::{ModelError, NodeRecord, PodRecord};
use topology::{Affected, ClusterModel};

/// The order kinds are applied in: what others refer to first (a pod needs its namespace and
/// node). Deletes go in the reverse order.
fn rank(k: &RecordKey) -> u8 {
    match k {
        RecordKey::ClusterNetwork => 0,
        RecordKey::Cursors => 1,
        RecordKey::Namespace(_) => 2,
        RecordKey::Node(_) => 3,
        RecordKey::Pod(..) => 4,
        RecordKey::NetworkPolicy(..) => 5,
        RecordKey::EgressNetworkPolicy(_) => 6,
        RecordKey::EgressDns(_) => 7,
        RecordKey::EgressIps => 8,
    }
}

/// Sort changes for applying: deletes (dependants first), then puts (dependencies first).
pub fn order(changes: &mut [Change]) {
    changes.sort_by_key(|c| match c {
        Change::Delete(k) => (0u8, 255 - rank(k)),
        Change::Put(r) => (1u8, rank(&r.key())),
    });
}

/// Every record the model would store, by key (what a relist is compared with).
pub fn model_records(m: &ClusterModel) -> BTreeMap<RecordKey, Record> {
    let mut out = BTreeMap::new();
    let mut put = |r: Record| {
        out.insert(r.key(), r);
    };
    put(Record::ClusterNetwork(m.config().clone()));
    put(Record::Cursors(CursorsRecord {
        subnet_cursors: m.subnet_cursors(),
        netid_cursor: m.netid_cursor(),
    }));
    for n in m.nodes() {
        if let Some(r) = m.node_record(&n.name) {
            put(Record::Node(r));
        }
    }
    for ns in m.namespaces() {
        put(Record::Namespace(ns));
    }
    for p in m.pods() {
        put(Record::Pod(PodRecord { info: p.clone() }));
    }
    for p in m.policies() {
        put(Record::NetworkPolicy(p.clone()));
    }
    for f in m.egress_firewalls() {
        put(Record::EgressNetworkPolicy(f.clone()));
    }
    for (name, addrs) in m.egress_dns_all() {
        put(Record::EgressDns(DnsRecord {
            name: name.to_string(),
            addresses: addrs.iter().copied().collect(),
        }));
    }
    let e = m.egress_snapshot();
    if !e.is_empty() {
        put(Record::EgressIps(e.clone()));
    }
    out
}

/// The changes that bring the model to `listing` (only the differences).
pub fn relist_changes(m: &ClusterModel, listing: &Listing) -> Vec<Change> {
    let mut have = model_records(m);
    let mut out = Vec::new();
    for (r, _) in &listing.records {
        let k = r.key();
        match have.remove(&k) {
            Some(cur) if cur == *r => {}
            _ => out.push(Change::Put(r.clone())),
        }
    }
    for (k, _) in have {
        // The singletons are never deleted: a store without them keeps the model's.
        if !matches!(k, RecordKey::ClusterNetwork | RecordKey::Cursors) {
            out.push(Change::Delete(k));
        }
    }
    order(&mut out);
    out
}

/// Bring one stored change into the model; the nodes whose flows it changes.
// The model's own error type, as the model's mutations return it.
#[allow(clippy::result_large_err)]
pub fn apply_change(m: &mut ClusterModel, c: &Change) -> Result<Affected, ModelError> {
    match c {
        Change::Put(r) => match r {
            Record::ClusterNetwork(cfg) => {
                if m.config() == cfg {
                    Ok(Affected::none())
                } else {
                    m.update_config(cfg.clone())
                }
            }
            Record::Cursors(cur) => {
                m.sync_cursors(&cur.subnet_cursors, cur.netid_cursor);
                Ok(Affected::none())
            }
            Record::Node(n) => m.sync_node(&NodeRecord { ..n.clone() }),
            Record::Namespace(ns) => m.sync_namespace(ns),
            Record::Pod(p) => m.sync_pod(p),
            Record::NetworkPolicy(p) => {
                if m.policy(&p.namespace, &p.name) == Some(p) {
                    Ok(Affected::none())
                } else {
                    m.apply_policy(p.clone())
                }
            }
            Record::EgressIps(e) => m.sync_egress(e),
            Record::EgressNetworkPolicy(f) => {
                if m.egress_firewall(&f.namespace) == Some(f) {
                    Ok(Affected::none())
                } else {
                    m.apply_egress_firewall(f.clone())
                }
            }
            Record::EgressDns(d) => {
                Ok(m.set_egress_dns_addresses(&d.name, d.addresses.iter().copied().collect()))
            }
        },
        Change::Delete(k) => match k {
            RecordKey::ClusterNetwork | RecordKey::Cursors => Ok(Affected::none()),
            RecordKey::Node(n) => m.sync_node_deleted(n),
            RecordKey::Namespace(n) => m.sync_namespace_deleted(n),
            RecordKey::Pod(ns, n) => m.sync_pod_deleted(ns, n),
            RecordKey::NetworkPolicy(ns, n) => {
                if m.policy(ns, n).is_some() {
                    m.delete_policy(ns, n)
                } else {
                    Ok(Affected::none())
                }
            }
            RecordKey::EgressIps => m.sync_egress(&Default::default()),
            RecordKey::EgressNetworkPolicy(ns) => {
                match m.egress_firewall(ns).map(|f| f.name.clone()) {
                    Some(name) => m.delete_egress_firewall(ns, &name),
                    None => Ok(Affected::none()),
                }
            }
            RecordKey::EgressDns(name) => {
                if m.egress_dns_addresses(name).is_some() {
                    Ok(m.set_egress_dns_addresses(name, Default::default()))
                } else {
                    Ok(Affected::none())
                }
            }
        },
    }
}

/// What the core knows of each stored record's revision, shared by the core (which applies
/// the store's changes) and the store writer (which guards its writes with them).
#[derive(Default)]
pub struct Revisions {
    /// Per key: the mod revision of the record the model reflects, and whether it exists.
    known: HashMap<RecordKey, (Revision, bool)>,
    /// Per key: local writes queued or in flight.
    inflight: HashMap<RecordKey, usize>,
    /// Per key: the latest watched change that arrived while a local write of the key was in
    /// flight (applied afterwards if it is newer than that write).
    deferred: HashMap<RecordKey, (Revision, Change)>,
    /// After a failed guarded write: every write is refused until the core relisted.
    pub draining: bool,
    /// What the store's watch last reported wrong (None: healthy).
    pub store_down: Option<String>,
}

impl Revisions {
    /// The revision a write of `k` must find.
    pub fn expected(&self, k: &RecordKey) -> Revision {
        match self.known.get(k) {
            Some((r, true)) => *r,
            _ => 0,
        }
    }

    /// Local writes of these keys were queued.
    pub fn begin(&mut self, keys: impl IntoIterator<Item = RecordKey>) {
        for k in keys {
            *self.inflight.entry(k).or_insert(0) += 1;
        }
    }

    /// Local writes of these changes ended: committed at `revision` (Some), or failed (None).
    /// Returns the watched changes held back meanwhile that are newer than the write.
    pub fn end(
        &mut self,
        changes: &[Change],
        revision: Option<Revision>,
    ) -> Vec<(Revision, Change)> {
        let mut released = Vec::new();
        for c in changes {
            let k = c.key();
            if let Some(r) = revision {
                let present = matches!(c, Change::Put(_));
                let e = self.known.entry(k.clone()).or_insert((0, false));
                if r >= e.0 {
                    *e = (r, present);
                }
            }
            let left = match self.inflight.get_mut(&k) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    *n
                }
                None => 0,
            };
            if left == 0 {
                self.inflight.remove(&k);
                if let Some((r, ch)) = self.deferred.remove(&k) {
                    if r > self.known.get(&k).map(|e| e.0).unwrap_or(0) {
                        self.known.insert(k, (r, matches!(ch, Change::Put(_))));
                        released.push((r, ch));
                    }
                }
            }
        }
        released
    }

    /// A watched change at `revision`: whether to apply it now (newer than what the model
    /// reflects and no local write of the key in flight). Records the revision when so.
    pub fn admit(&mut self, revision: Revision, c: &Change) -> bool {
        let k = c.key();
        if self.inflight.get(&k).copied().unwrap_or(0) > 0 {
            let newer = self.deferred.get(&k).is_none_or(|(r, _)| revision > *r);
            if newer {
                self.deferred.insert(k, (revision, c.clone()));
            }
            return false;
        }
        if let Some((r, _)) = self.known.get(&k) {
            if revision <= *r {
                return false;
            }
        }
        self.known
            .insert(k, (revision, matches!(c, Change::Put(_))));
        true
    }

    /// A relist: the model now reflects exactly `listing`.
    pub fn relisted(&mut self, listing: &Listing) {
        self.known = listing
            .records
            .iter()
            .map(|(r, rev)| (r.key(), (*rev, true)))
            .collect();
        self.deferred.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::model::NamespaceInfo;

    fn ns(name: &str, netid: u32) -> Change {
        Change::Put(Record::Namespace(NamespaceInfo {
            name: name.into(),
            netid,
            labels: Default::default(),
            multicast: false,
            acl_logging: None,
        }))
    }

    #[test]
    fn own_writes_coming_back_are_skipped_and_newer_ones_applied() {
        let mut r = Revisions::default();
        let a = ns("a", 10);
        r.begin([a.key()]);
        // The echo of our own write arrives before the writer finished: held back.
        assert!(!r.admit(5, &a));
        assert_eq!(r.end(std::slice::from_ref(&a), Some(5)), vec![]);
        assert_eq!(r.expected(&a.key()), 5);
        // Late echo: skipped. Another replica's newer write: applied.
        assert!(!r.admit(5, &a));
        assert!(r.admit(7, &ns("a", 11)));
        assert_eq!(r.expected(&a.key()), 7);
        // A newer change held back during our write is released after it.
        r.begin([a.key()]);
        assert!(!r.admit(9, &ns("a", 12)));
        let released = r.end(std::slice::from_ref(&a), Some(8));
        assert_eq!(released, vec![(9, ns("a", 12))]);
        assert_eq!(r.expected(&a.key()), 9);
        // A delete makes the key expect absence.
        assert!(r.admit(10, &Change::Delete(a.key())));
        assert_eq!(r.expected(&a.key()), 0);
    }
}
