//! `FlowSet`: one switch's flows (sorted by table, priority descending, normalized match; keys
//! unique) and groups, stored as slices of shared, pre-sorted runs so that flows identical on
//! many nodes are built and held once. `FlowSet::diff` gives the minimal change between two.

use ofproto::{Flow, Group};
use std::cmp::Ordering;
use std::sync::Arc;

/// Order of flows in a FlowSet: table, priority (high first), match. The identity of a flow
/// on a switch is exactly this key (with the match normalized).
pub fn key_cmp(a: &Flow, b: &Flow) -> Ordering {
    a.table
        .cmp(&b.table)
        .then(b.priority.cmp(&a.priority))
        .then_with(|| a.matches.cmp(&b.matches))
}

#[derive(Clone, Debug)]
struct Run {
    flows: Arc<[Flow]>,
    start: usize,
    end: usize,
}

impl Run {
    fn slice(&self) -> &[Flow] {
        self.flows.get(self.start..self.end).unwrap_or(&[])
    }
}

/// A sorted, shared run of flows (the unit of sharing between FlowSets).
pub type SharedRun = Arc<[Flow]>;

/// The desired (or installed) flows and groups of one switch.
#[derive(Clone, Debug, Default)]
pub struct FlowSet {
    runs: Vec<Run>,
    groups: Arc<[Group]>,
    len: usize,
}

impl PartialEq for FlowSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.groups == other.groups && self.iter().eq(other.iter())
    }
}
impl Eq for FlowSet {}

impl FlowSet {
    /// A FlowSet from any flows and groups (e.g. read back from a switch): matches are
    /// normalized, flows sorted; of two flows with the same key the last one wins.
    pub fn new(flows: Vec<Flow>, groups: Vec<Group>) -> Self {
        let mut flows: Vec<Flow> = flows
            .into_iter()
            .map(|mut f| {
                f.matches.fields.sort();
                f
            })
            .collect();
        flows.sort_by(key_cmp); // stable: equal keys keep input order
        let mut dedup: Vec<Flow> = Vec::with_capacity(flows.len());
        for f in flows {
            match dedup.last_mut() {
                Some(last) if key_cmp(last, &f) == Ordering::Equal => *last = f,
                _ => dedup.push(f),
            }
        }
        let mut groups = groups;
        groups.sort_by_key(|g| g.group_id);
        groups.dedup_by_key(|g| g.group_id);
        Self::from_runs(vec![(Arc::from(dedup), 0..usize::MAX)], groups)
    }

    /// Assemble from sorted runs (each given as a range of a shared run). Runs may interleave;
    /// the result is their merge, stored as maximal slices. Equal keys: the first run wins.
    pub fn from_runs(parts: Vec<(SharedRun, std::ops::Range<usize>)>, groups: Vec<Group>) -> Self {
        let mut cur: Vec<Run> = parts
            .into_iter()
            .map(|(flows, r)| {
                let end = r.end.min(flows.len());
                Run {
                    start: r.start.min(end),
                    end,
                    flows,
                }
            })
            .filter(|r| r.start < r.end)
            .collect();
        let mut runs = Vec::new();
        let mut len = 0;
        loop {
            cur.retain(|r| r.start < r.end);
            if cur.is_empty() {
                break;
            }
            if cur.len() == 1 {
                let r = cur.remove(0);
                len += r.end - r.start;
                runs.push(r);
                break;
            }
            // The run with the smallest head (first such on ties).
            let mut best = 0;
            for i in 1..cur.len() {
                if key_cmp(
                    &cur[i].flows[cur[i].start],
                    &cur[best].flows[cur[best].start],
                ) == Ordering::Less
                {
                    best = i;
                }
            }
            let mut next_min: Option<&Flow> = None;
            for (i, r) in cur.iter().enumerate() {
                if i != best {
                    let h = &r.flows[r.start];
                    if next_min.is_none_or(|m| key_cmp(h, m) == Ordering::Less) {
                        next_min = Some(h);
                    }
                }
            }
            let b = &cur[best];
            let n = match next_min {
                Some(m) => b
                    .slice()
                    .partition_point(|f| key_cmp(f, m) == Ordering::Less),
                None => b.end - b.start,
            };
            let n = n.max(1);
            let emitted = Run {
                flows: b.flows.clone(),
                start: b.start,
                end: b.start + n,
            };
            let last = &emitted.flows[emitted.end - 1];
            for (i, r) in cur.iter_mut().enumerate() {
                if i != best {
                    while r.start < r.end && key_cmp(&r.flows[r.start], last) == Ordering::Equal {
                        r.start += 1;
                    }
                }
            }
            cur[best].start += n;
            len += n;
            match runs.last_mut() {
                Some(prev)
                    if Arc::ptr_eq(&prev.flows, &emitted.flows) && prev.end == emitted.start =>
                {
                    prev.end = emitted.end
                }
                _ => runs.push(emitted),
            }
        }
        FlowSet {
            runs,
            groups: Arc::from(groups),
            len,
        }
    }

    /// Number of flows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no flows and no groups.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.groups.is_empty()
    }

    /// The flows in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Flow> + '_ {
        self.runs.iter().flat_map(|r| r.slice().iter())
    }

    /// The flows of one table, highest priority first.
    pub fn table(&self, table: u8) -> impl Iterator<Item = &Flow> + '_ {
        self.iter().filter(move |f| f.table == table)
    }

    /// The groups, by id.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Number of stored slices (a measure of sharing; not part of the value).
    pub fn slice_count(&self) -> usize {
        self.runs.len()
    }

    /// The minimal change that turns `installed` into `desired`.
    pub fn diff(installed: &FlowSet, desired: &FlowSet) -> FlowDiff {
        let mut d = FlowDiff::default();
        let mut a = Cursor::new(&installed.runs);
        let mut b = Cursor::new(&desired.runs);
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(x), None) => {
                    d.deletes.push(x.clone());
                    a.advance(1);
                }
                (None, Some(y)) => {
                    d.adds.push(y.clone());
                    b.advance(1);
                }
                (Some(x), Some(y)) => {
                    if std::ptr::eq(x, y) {
                        // Same shared run at the same place: identical for as long as both last.
                        let n = a.left_in_run().min(b.left_in_run());
                        a.advance(n);
                        b.advance(n);
                        continue;
                    }
                    match key_cmp(x, y) {
                        Ordering::Less => {
                            d.deletes.push(x.clone());
                            a.advance(1);
                        }
                        Ordering::Greater => {
                            d.adds.push(y.clone());
                            b.advance(1);
                        }
                        Ordering::Equal => {
                            if x.cookie != y.cookie
                                || x.instructions != y.instructions
                                || x.idle_timeout != y.idle_timeout
                                || x.hard_timeout != y.hard_timeout
                                || x.flags != y.flags
                            {
                                d.modifies.push(y.clone());
                            }
                            a.advance(1);
                            b.advance(1);
                        }
                    }
                }
            }
        }
        let (ga, gb) = (installed.groups(), desired.groups());
        let (mut i, mut j) = (0, 0);
        while i < ga.len() || j < gb.len() {
            match (ga.get(i), gb.get(j)) {
                (Some(x), Some(y)) if x.group_id == y.group_id => {
                    if x != y {
                        d.group_modifies.push(y.clone());
                    }
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.group_id < y.group_id => {
                    d.group_deletes.push(x.clone());
                    i += 1;
                }
                (Some(x), None) => {
                    d.group_deletes.push(x.clone());
                    i += 1;
                }
                (_, Some(y)) => {
                    d.group_adds.push(y.clone());
                    j += 1;
                }
                (None, None) => break,
            }
        }
        d
    }

    /// This set with a diff applied (what the switch holds after the reconciler sends it).
    pub fn apply(&self, d: &FlowDiff) -> FlowSet {
        let mut flows: Vec<Flow> = Vec::with_capacity(self.len + d.adds.len());
        let mut dels = d.deletes.clone();
        dels.sort_by(key_cmp);
        for f in self.iter() {
            if dels.binary_search_by(|x| key_cmp(x, f)).is_err() {
                flows.push(f.clone());
            }
        }
        flows.extend(d.modifies.iter().cloned());
        flows.extend(d.adds.iter().cloned());
        let mut groups: Vec<Group> = self
            .groups
            .iter()
            .filter(|g| !d.group_deletes.iter().any(|x| x.group_id == g.group_id))
            .cloned()
            .collect();
        groups.extend(d.group_modifies.iter().cloned());
        groups.extend(d.group_adds.iter().cloned());
        groups.reverse(); // later (modified) entries first so dedup keeps them
        groups.sort_by_key(|g| g.group_id);
        groups.dedup_by_key(|g| g.group_id);
        FlowSet::new(flows, groups)
    }
}

struct Cursor<'a> {
    runs: &'a [Run],
    r: usize,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(runs: &'a [Run]) -> Self {
        let mut c = Cursor { runs, r: 0, i: 0 };
        c.settle();
        c
    }
    fn settle(&mut self) {
        while let Some(run) = self.runs.get(self.r) {
            if self.i < run.end - run.start {
                break;
            }
            self.r += 1;
            self.i = 0;
        }
    }
    fn peek(&self) -> Option<&'a Flow> {
        self.runs.get(self.r).and_then(|r| r.slice().get(self.i))
    }
    fn left_in_run(&self) -> usize {
        self.runs
            .get(self.r)
            .map_or(0, |r| (r.end - r.start).saturating_sub(self.i))
    }
    fn advance(&mut self, n: usize) {
        self.i += n;
        self.settle();
    }
}

/// The minimal change between two FlowSets. Modifies replace cookie and instructions of a flow
/// with the same table, priority and match (OFPFC_MODIFY_STRICT plus the cookie).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowDiff {
    /// Flows to add.
    pub adds: Vec<Flow>,
    /// Flows to modify (the desired version).
    pub modifies: Vec<Flow>,
    /// Flows to delete (strictly: table, priority, match).
    pub deletes: Vec<Flow>,
    /// Groups to add (send before the flows that use them).
    pub group_adds: Vec<Group>,
    /// Groups to modify.
    pub group_modifies: Vec<Group>,
    /// Groups to delete (send after the flows that used them are gone).
    pub group_deletes: Vec<Group>,
}

impl FlowDiff {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of flow and group changes.
    pub fn len(&self) -> usize {
        self.adds.len()
            + self.modifies.len()
            + self.deletes.len()
            + self.group_adds.len()
            + self.group_modifies.len()
            + self.group_deletes.len()
    }
}
