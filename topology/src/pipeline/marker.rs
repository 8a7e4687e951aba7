//! The digest marker of table 253: one flow, written in the same bundle as every change the
//! controller commits to a switch, whose note carries a digest of the switch's whole desired
//! state (flows, groups and meters, the marker itself excluded). A controller that connects to a
//! switch (restart, reconnect, a new leader) reads this one flow instead of the whole table:
//! equal digests mean the switch holds what this controller wants, and nothing is read or sent.
//!
//! The digest is a multiset hash: the wrapping sum of a 128-bit hash of every flow (and, apart,
//! of every group and of every meter), so a change of a few flows updates it from the diff alone
//! ([`FlowSetDigest::after`]) without hashing the whole set again.

use crate::pipeline::cookie::{self, Feature, ObjectKind};
use crate::pipeline::flowset::FlowSet;
use crate::pipeline::tables::TableId;
use ofproto::{Action, Flow, Group, Instruction, Match, Meter};
use std::hash::BuildHasher;

/// The marker's priority in table 253 (the pipeline version note is at priority 0).
pub const MARKER_PRIORITY: u16 = 1;

/// The marker's cookie: feature Version, kind None, object 1 (the version note is object 0).
pub fn marker_cookie() -> u64 {
    cookie::cookie(Feature::Version, ObjectKind::None, 1)
}

/// The table the marker lives in.
pub const MARKER_TABLE: u8 = TableId::Version as u8;

/// The note's first bytes: what follows is a digest of this layout (version 2: with meters;
/// a version-1 marker reads as no digest, so a switch last written by a build without meters
/// in its digest is read whole once).
const NOTE_TAG: &[u8; 4] = b"fmd2";

/// A digest of a switch's desired flows, groups and meters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowSetDigest {
    /// Wrapping sum of the flows' hashes.
    pub flows: u128,
    /// How many flows.
    pub flow_count: u64,
    /// Wrapping sum of the groups' hashes.
    pub groups: u128,
    /// Wrapping sum of the meters' hashes (id, flags and bands: a changed rate moves it).
    pub meters: u128,
}

/// Fixed seeds: every process of one build hashes alike (a build that hashes differently
/// only costs one full read, never a missed change: digests then differ).
const SEED_A: u64 = 0x666c_6f77_6d65_7368;
const SEED_B: u64 = 0x6d61_726b_6572_3235;

fn hash128<T: std::hash::Hash>(x: &T) -> u128 {
    let a = foldhash::quality::FixedState::with_seed(SEED_A).hash_one(x);
    let b = foldhash::quality::FixedState::with_seed(SEED_B).hash_one(x);
    (u128::from(a) << 64) | u128::from(b)
}

impl FlowSetDigest {
    /// The digest of a whole set (the marker flow, if the set holds one, is left out).
    pub fn of(set: &FlowSet) -> Self {
        let mut d = FlowSetDigest::default();
        for f in set.iter().filter(|f| !is_marker(f)) {
            d.add_flow(f);
        }
        d.groups = groups_digest(set.groups());
        d.meters = meters_digest(set.meters());
        d
    }

    /// The digest of `desired`, from the digest `self` of `previous`: only the flows that
    /// differ are hashed (shared runs are skipped), the groups and meters again (they are
    /// few).
    pub fn after(&self, previous: &FlowSet, desired: &FlowSet) -> Self {
        let mut d = *self;
        FlowSet::walk_changes(previous, desired, |old, new| {
            if let Some(f) = old.filter(|f| !is_marker(f)) {
                d.remove_flow(f);
            }
            if let Some(f) = new.filter(|f| !is_marker(f)) {
                d.add_flow(f);
            }
        });
        d.groups = groups_digest(desired.groups());
        d.meters = meters_digest(desired.meters());
        d
    }

    fn add_flow(&mut self, f: &Flow) {
        self.flows = self.flows.wrapping_add(hash128(f));
        self.flow_count = self.flow_count.wrapping_add(1);
    }

    fn remove_flow(&mut self, f: &Flow) {
        self.flows = self.flows.wrapping_sub(hash128(f));
        self.flow_count = self.flow_count.wrapping_sub(1);
    }

    /// The note bytes that carry this digest.
    fn note(&self) -> Vec<u8> {
        let mut n = NOTE_TAG.to_vec();
        n.extend_from_slice(&self.flows.to_be_bytes());
        n.extend_from_slice(&self.flow_count.to_be_bytes());
        n.extend_from_slice(&self.groups.to_be_bytes());
        n.extend_from_slice(&self.meters.to_be_bytes());
        // Open vSwitch pads a note action (10 bytes of header and the note) to a multiple of
        // 8 bytes and reads it back padded: pad it here, so it reads back identical.
        while !(10 + n.len()).is_multiple_of(8) {
            n.push(0);
        }
        n
    }

    /// The marker flow that records this digest in table 253.
    pub fn marker(&self) -> Flow {
        let mut f = Flow::new(MARKER_TABLE, MARKER_PRIORITY, Match::new());
        f.cookie = marker_cookie();
        f.instructions = vec![Instruction::ApplyActions(vec![Action::Note(self.note())])];
        f
    }

    /// The digest a marker flow (as read back from a switch) records; None for any other flow
    /// or a note of another layout.
    pub fn from_marker(f: &Flow) -> Option<Self> {
        if !is_marker(f) {
            return None;
        }
        let note = f.instructions.iter().find_map(|i| match i {
            Instruction::ApplyActions(a) => a.iter().find_map(|a| match a {
                Action::Note(n) => Some(n),
                _ => None,
            }),
            _ => None,
        })?;
        // Open vSwitch pads a note with zeros to a multiple of 8 bytes (with its header).
        let body = note.strip_prefix(NOTE_TAG)?;
        let flows = u128::from_be_bytes(body.get(0..16)?.try_into().ok()?);
        let flow_count = u64::from_be_bytes(body.get(16..24)?.try_into().ok()?);
        let groups = u128::from_be_bytes(body.get(24..40)?.try_into().ok()?);
        let meters = u128::from_be_bytes(body.get(40..56)?.try_into().ok()?);
        if body
            .get(56..)
            .is_some_and(|rest| rest.iter().any(|b| *b != 0))
        {
            return None;
        }
        Some(FlowSetDigest {
            flows,
            flow_count,
            groups,
            meters,
        })
    }
}

fn groups_digest(groups: &[Group]) -> u128 {
    groups
        .iter()
        .fold(0u128, |acc, g| acc.wrapping_add(hash128(g)))
}

fn meters_digest(meters: &[Meter]) -> u128 {
    meters
        .iter()
        .fold(0u128, |acc, m| acc.wrapping_add(hash128(m)))
}

/// True for the digest marker (table 253, its priority and cookie).
pub fn is_marker(f: &Flow) -> bool {
    f.table == MARKER_TABLE && f.priority == MARKER_PRIORITY && f.cookie == marker_cookie()
}

/// `desired` with the marker of its digest `digest` (replacing any marker it holds; its groups
/// and meters kept).
pub fn with_marker(desired: &FlowSet, digest: &FlowSetDigest) -> FlowSet {
    let marker = FlowSet::new(vec![digest.marker()], Vec::new());
    FlowSet::merge(vec![marker, desired.clone()], desired.groups().to_vec())
        .with_meters(desired.meters().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofproto::{Bucket, GroupType};

    fn flow(i: u16, port: u32) -> Flow {
        let mut f = Flow::new(70, 100 + i, Match::new().in_port(u32::from(i) + 3));
        f.instructions = vec![Instruction::ApplyActions(vec![Action::output(port)])];
        f
    }

    fn set(flows: &[Flow], groups: Vec<Group>) -> FlowSet {
        FlowSet::new(flows.to_vec(), groups)
    }

    #[test]
    fn the_digest_changes_with_any_add_delete_or_modify_and_updates_incrementally() {
        let base: Vec<Flow> = (0..50).map(|i| flow(i, 9)).collect();
        let a = set(&base, Vec::new());
        let da = FlowSetDigest::of(&a);
        assert_eq!(da.flow_count, 50);
        assert_eq!(FlowSetDigest::of(&a.clone()), da, "deterministic");
        let mut added = base.clone();
        added.push(flow(60, 9));
        let mut deleted = base.clone();
        deleted.remove(7);
        let mut modified = base.clone();
        modified[7] = flow(7, 10);
        let mut cookie = base.clone();
        cookie[7].cookie = 5;
        let group = Group {
            group_id: 3,
            group_type: GroupType::Select,
            buckets: vec![Bucket::new(vec![Action::output(2)])],
        };
        let cases = [
            set(&added, Vec::new()),
            set(&deleted, Vec::new()),
            set(&modified, Vec::new()),
            set(&cookie, Vec::new()),
            set(&base, vec![group]),
        ];
        for b in &cases {
            let db = FlowSetDigest::of(b);
            assert_ne!(db, da, "a real change moves the digest");
            assert_eq!(da.after(&a, b), db, "incremental = from scratch");
            assert_eq!(db.after(b, &a), da, "and back");
        }
    }

    #[test]
    fn a_meter_added_deleted_or_changed_moves_the_digest_and_the_marker_keeps_the_meters() {
        use ofproto::meter::meter_flags;
        use ofproto::MeterBand;
        let meter = |id: u32, rate: u32| Meter {
            meter_id: id,
            flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
            bands: vec![MeterBand::drop(rate, rate)],
        };
        let flows: Vec<Flow> = (0..20).map(|i| flow(i, 9)).collect();
        let a = set(&flows, Vec::new()).with_meters(vec![meter(1, 20)]);
        let da = FlowSetDigest::of(&a);
        let cases = [
            set(&flows, Vec::new()), // deleted
            set(&flows, Vec::new()).with_meters(vec![meter(1, 20), meter(2, 5)]), // added
            set(&flows, Vec::new()).with_meters(vec![meter(1, 50)]), // another rate
            set(&flows, Vec::new()).with_meters(vec![meter(3, 20)]), // another id
        ];
        for b in &cases {
            let db = FlowSetDigest::of(b);
            assert_ne!(db, da, "a meter change moves the digest: {:?}", b.meters());
            assert_eq!(db.flows, da.flows, "the flows are the same");
            assert_eq!(da.after(&a, b), db, "incremental = from scratch");
            // The marker records it: a switch holding `a`'s marker does not agree with `b`.
            assert_ne!(FlowSetDigest::from_marker(&da.marker()), Some(db));
            assert_eq!(FlowSetDigest::from_marker(&db.marker()), Some(db));
        }
        // The marked set is what the switch must hold: the meters are kept.
        let marked = with_marker(&a, &da);
        assert_eq!(marked.meters(), a.meters());
        assert_eq!(FlowSetDigest::of(&marked), da);
        // A marker of the previous layout (no meters) reads as no digest.
        let mut v1 = da.marker();
        if let Some(Instruction::ApplyActions(acts)) = v1.instructions.first_mut() {
            if let Some(Action::Note(n)) = acts.first_mut() {
                n[..4].copy_from_slice(b"fmd1");
            }
        }
        assert_eq!(FlowSetDigest::from_marker(&v1), None);
    }

    #[test]
    fn the_marker_round_trips_and_is_left_out_of_its_own_digest() {
        let a = set(&(0..10).map(|i| flow(i, 9)).collect::<Vec<_>>(), Vec::new());
        let d = FlowSetDigest::of(&a);
        let m = d.marker();
        assert!(is_marker(&m));
        assert_eq!(FlowSetDigest::from_marker(&m), Some(d));
        // As read back: the note padded with zeros.
        let mut padded = m.clone();
        if let Some(Instruction::ApplyActions(acts)) = padded.instructions.first_mut() {
            if let Some(Action::Note(n)) = acts.first_mut() {
                n.extend_from_slice(&[0; 6]);
            }
        }
        assert_eq!(FlowSetDigest::from_marker(&padded), Some(d));
        let marked = with_marker(&a, &d);
        assert_eq!(marked.len(), a.len() + 1);
        assert_eq!(FlowSetDigest::of(&marked), d);
        // Replacing the marker of a marked set keeps one marker.
        let d2 = FlowSetDigest { flow_count: 1, ..d };
        let remarked = with_marker(&marked, &d2);
        assert_eq!(remarked.len(), a.len() + 1);
        assert_eq!(
            remarked
                .iter()
                .filter_map(FlowSetDigest::from_marker)
                .collect::<Vec<_>>(),
            vec![d2]
        );
        // Other flows, other notes, garbage: no digest.
        assert_eq!(FlowSetDigest::from_marker(&flow(1, 2)), None);
        let mut other = m.clone();
        other.instructions = vec![Instruction::ApplyActions(vec![Action::Note(b"x".to_vec())])];
        assert_eq!(FlowSetDigest::from_marker(&other), None);
    }
}
