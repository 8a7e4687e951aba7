//! `FlowSet`: one switch's flows (sorted by table, priority descending, normalized match; keys
//! unique), groups and meters, stored as slices of shared, pre-sorted runs so that flows identical on
//! many nodes are built and held once. `FlowSet::diff` gives the minimal change between two.

use ofproto::{Flow, Group, Meter};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Order of flows in a FlowSet: table, priority (high first), match. The identity of a flow
/// on a switch is exactly this key (with the match normalized).
pub fn key_cmp(a: &Flow, b: &Flow) -> Ordering {
    a.table
        .cmp(&b.table)
        .then(b.priority.cmp(&a.priority))
        .then_with(|| a.matches.cmp(&b.matches))
}

/// A flow's key (table, priority descending, match) packed into 32 bytes so that comparing two
/// packed keys orders them exactly as [`key_cmp`]; None when the match does not fit. Each
/// field is a presence byte, its header (class, field, experimenter), its value and its
/// optional mask: fields of one header have values and masks of one length, so byte order is
/// the derived order of the match's fields.
pub fn packed_key(f: &Flow) -> Option<[u64; 4]> {
    let mut b = [0u8; 32];
    let mut n = 0;
    let mut put = |bytes: &[u8]| -> Option<()> {
        let end = n + bytes.len();
        b.get_mut(n..end)?.copy_from_slice(bytes);
        n = end;
        Some(())
    };
    put(&[f.table])?;
    put(&(u16::MAX - f.priority).to_be_bytes())?;
    for mf in &f.matches.fields {
        put(&[1])?;
        put(&mf.header.class.to_be_bytes())?;
        put(&[mf.header.field])?;
        match mf.header.experimenter {
            None => put(&[0])?,
            Some(e) => {
                put(&[1])?;
                put(&e.to_be_bytes())?;
            }
        }
        put(&mf.value)?;
        match &mf.mask {
            None => put(&[0])?,
            Some(m) => {
                put(&[1])?;
                put(m)?;
            }
        }
    }
    let mut out = [0u64; 4];
    for (i, chunk) in b.chunks_exact(8).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        out[i] = u64::from_be_bytes(w);
    }
    Some(out)
}

/// A slice `start..end` of a shared run. The bounds are 32-bit: FlowSets hold millions of
/// slices in all (a node's policy flows are thousands of short ones), and no run comes near
/// 2^32 flows.
#[derive(Clone, Debug)]
struct Run {
    flows: Arc<[Flow]>,
    start: u32,
    end: u32,
}

/// A slice bound as stored (runs never come near 2^32 flows).
fn bound32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl Run {
    fn new(flows: Arc<[Flow]>, start: usize, end: usize) -> Self {
        Run {
            flows,
            start: bound32(start),
            end: bound32(end),
        }
    }
    fn start(&self) -> usize {
        self.start as usize
    }
    fn end(&self) -> usize {
        self.end as usize
    }
    fn slice(&self) -> &[Flow] {
        self.flows.get(self.start()..self.end()).unwrap_or(&[])
    }
}

/// A position in a FlowSet's slices, owning them (for [`FlowSet::merge`]).
struct Chain {
    runs: Vec<Run>,
    r: usize,
    i: usize,
}

/// Move a position (run `r`, index `i` in it) past the ends of runs.
fn settle(runs: &[Run], r: &mut usize, i: &mut usize) {
    while let Some(run) = runs.get(*r) {
        if *i < run.end() - run.start() {
            break;
        }
        *r += 1;
        *i = 0;
    }
}

impl Chain {
    fn settle(&mut self) {
        settle(&self.runs, &mut self.r, &mut self.i);
    }
    /// The head as a heap entry.
    fn head(&self, idx: usize) -> Option<Head> {
        let run = self.runs.get(self.r)?;
        let pos = run.start() + self.i;
        (pos < run.end()).then(|| Head {
            run: run.flows.clone(),
            pos,
            idx,
        })
    }
    fn advance(&mut self, n: usize) {
        self.i += n;
        self.settle();
    }
}

/// A set's current head in the merge heap: smallest key first, then the earliest set.
struct Head {
    run: SharedRun,
    pos: usize,
    idx: usize,
}

impl Head {
    fn flow(&self) -> &Flow {
        &self.run[self.pos]
    }
}

impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse so the smallest key (then set) comes out first.
        key_cmp(other.flow(), self.flow()).then(other.idx.cmp(&self.idx))
    }
}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}

/// Append a slice to a list of slices, joined with the last one when it continues it.
fn push_joined(runs: &mut Vec<Run>, run: Run) {
    match runs.last_mut() {
        Some(prev) if Arc::ptr_eq(&prev.flows, &run.flows) && prev.end == run.start => {
            prev.end = run.end
        }
        _ => runs.push(run),
    }
}

/// Whether set `idx`'s head comes before every head in the heap (or the heap is empty).
fn leads(c: &Chain, idx: usize, heap: &BinaryHeap<Head>) -> bool {
    match (c.head(idx), heap.peek()) {
        (Some(h), Some(next)) => key_cmp(h.flow(), next.flow()) == Ordering::Less,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// A sorted, shared run of flows (the unit of sharing between FlowSets).
pub type SharedRun = Arc<[Flow]>;

/// The desired (or installed) flows, groups and meters of one switch.
#[derive(Clone, Debug, Default)]
pub struct FlowSet {
    runs: Vec<Run>,
    groups: Arc<[Group]>,
    /// By id.
    meters: Arc<[Meter]>,
    len: usize,
}

impl PartialEq for FlowSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self.groups == other.groups
            && self.meters == other.meters
            && self.iter().eq(other.iter())
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
        let chains = parts
            .into_iter()
            .map(|(flows, r)| {
                let end = r.end.min(flows.len());
                let start = r.start.min(end);
                FlowSet {
                    runs: vec![Run::new(flows, start, end)],
                    groups: Arc::from([]),
                    meters: Arc::from([]),
                    len: end - start,
                }
            })
            .collect();
        Self::merge(chains, groups)
    }

    /// A FlowSet from consecutive pieces of shared runs that together are already sorted with
    /// unique keys (no merge; adjacent pieces of one run are joined).
    pub fn from_chain(pieces: Vec<(SharedRun, std::ops::Range<usize>)>) -> Self {
        let mut runs: Vec<Run> = Vec::with_capacity(pieces.len());
        let mut len = 0;
        for (flows, r) in pieces {
            let end = r.end.min(flows.len());
            let start = r.start.min(end);
            if start == end {
                continue;
            }
            len += end - start;
            push_joined(&mut runs, Run::new(flows, start, end));
        }
        debug_assert!(runs
            .iter()
            .flat_map(|r| r.slice().iter())
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| key_cmp(w[0], w[1]) == Ordering::Less));
        runs.shrink_to_fit();
        FlowSet {
            runs,
            groups: Arc::from([]),
            meters: Arc::from([]),
            len,
        }
    }

    /// The merge of several FlowSets (their groups are dropped; `groups` are the result's),
    /// stored as maximal slices of their shared runs. Equal keys: the first set wins.
    /// A heap keeps the cost at O(slices · log sets) comparisons.
    pub fn merge(sets: Vec<FlowSet>, groups: Vec<Group>) -> Self {
        let mut cursors: Vec<Chain> = sets
            .into_iter()
            .map(|s| Chain {
                runs: s.runs,
                r: 0,
                i: 0,
            })
            .collect();
        for c in &mut cursors {
            c.settle();
        }
        let mut heap: BinaryHeap<Head> = cursors
            .iter()
            .enumerate()
            .filter_map(|(idx, c)| c.head(idx))
            .collect();
        let mut runs: Vec<Run> = Vec::new();
        let mut len = 0;
        while let Some(best) = heap.pop() {
            let idx = best.idx;
            let mut last: Option<(SharedRun, usize)> = None;
            // Emit from this set while it holds the smallest keys: whole slices cost one
            // comparison each, without going through the heap.
            loop {
                let c = &cursors[idx];
                let Some(run) = c.runs.get(c.r) else { break };
                let pos = run.start() + c.i;
                let slice = run.flows.get(pos..run.end()).unwrap_or(&[]);
                let Some(tail) = slice.last() else { break };
                let n = match heap.peek() {
                    Some(next) if key_cmp(tail, next.flow()) != Ordering::Less => slice
                        .partition_point(|f| key_cmp(f, next.flow()) == Ordering::Less)
                        .max(1),
                    _ => slice.len(),
                };
                let emitted = Run::new(run.flows.clone(), pos, pos + n);
                last = Some((run.flows.clone(), pos + n - 1));
                let whole = n == slice.len();
                len += n;
                push_joined(&mut runs, emitted);
                cursors[idx].advance(n);
                if !whole || !leads(&cursors[idx], idx, &heap) {
                    break;
                }
                // Whole slices of this set that end before the next set's head go out at once,
                // found by a binary search over their last flows instead of one comparison
                // each (a node's policy flows are thousands of short slices).
                let Some(next) = heap.peek() else { continue };
                let c = &cursors[idx];
                let rest = c.runs.get(c.r..).unwrap_or(&[]);
                let before = rest.partition_point(|run| {
                    run.slice()
                        .last()
                        .is_some_and(|t| key_cmp(t, next.flow()) == Ordering::Less)
                });
                let Some(end) = rest.get(..before).and_then(|r| r.last()) else {
                    continue;
                };
                // The cursor is at the start of a slice (the previous one went out whole).
                last = Some((end.flows.clone(), end.end() - 1));
                for run in rest.get(..before).unwrap_or(&[]) {
                    len += run.end() - run.start();
                    push_joined(&mut runs, run.clone());
                }
                let c = &mut cursors[idx];
                c.r += before;
                c.i = 0;
                c.settle();
                if !leads(c, idx, &heap) {
                    break;
                }
            }
            if let Some(h) = cursors[idx].head(idx) {
                heap.push(h);
            }
            // Other sets' flows with the key just emitted lose to it.
            let Some((run, at)) = last else { continue };
            let last = &run[at];
            while heap
                .peek()
                .is_some_and(|top| top.idx != idx && key_cmp(top.flow(), last) == Ordering::Equal)
            {
                if let Some(top) = heap.pop() {
                    cursors[top.idx].advance(1);
                    if let Some(h) = cursors[top.idx].head(top.idx) {
                        heap.push(h);
                    }
                }
            }
        }
        runs.shrink_to_fit(); // kept for as long as the switch's flows are
        FlowSet {
            runs,
            groups: Arc::from(groups),
            meters: Arc::from([]),
            len,
        }
    }

    /// Where a flow with `f`'s key is or would go: the slice (`runs.len()` past the end) and
    /// the offset in it.
    fn position(&self, f: &Flow) -> (usize, usize) {
        let r = self.runs.partition_point(|run| {
            run.slice()
                .last()
                .is_some_and(|t| key_cmp(t, f) == Ordering::Less)
        });
        let i = self.runs.get(r).map_or(0, |run| {
            run.slice()
                .partition_point(|x| key_cmp(x, f) == Ordering::Less)
        });
        (r, i)
    }

    /// Take out the flow with `f`'s key (table, priority, match), if there is one: its slice
    /// is cut around it, the shared run is not touched. O(log slices + log slice length).
    pub(crate) fn remove_key(&mut self, f: &Flow) -> bool {
        let (r, i) = self.position(f);
        let Some(run) = self.runs.get(r) else {
            return false;
        };
        if run
            .slice()
            .get(i)
            .is_none_or(|x| key_cmp(x, f) != Ordering::Equal)
        {
            return false;
        }
        let (start, end) = (run.start(), run.end());
        let at = start + i;
        if end - start == 1 {
            self.runs.remove(r);
        } else if at == start {
            self.runs[r].start += 1;
        } else if at + 1 == end {
            self.runs[r].end -= 1;
        } else {
            let tail = Run::new(run.flows.clone(), at + 1, end);
            self.runs[r].end = bound32(at);
            self.runs.insert(r + 1, tail);
        }
        self.len -= 1;
        true
    }

    /// Put in every flow of `run` (sorted, unique keys), each as a slice of it at its place;
    /// a flow with the key of one already here replaces it. Consecutive flows of `run` that
    /// land next to each other stay one slice.
    pub(crate) fn insert_run(&mut self, run: &SharedRun) {
        for (k, f) in run.iter().enumerate() {
            self.remove_key(f);
            let (r, i) = self.position(f);
            let piece = Run::new(run.clone(), k, k + 1);
            if i > 0 {
                // Inside slice r (its flows from i on come after f): split it.
                let cur = &self.runs[r];
                let tail = Run::new(cur.flows.clone(), cur.start() + i, cur.end());
                self.runs[r].end = bound32(self.runs[r].start() + i);
                self.runs.insert(r + 1, tail);
                self.runs.insert(r + 1, piece);
            } else {
                match r.checked_sub(1).and_then(|p| self.runs.get_mut(p)) {
                    Some(prev)
                        if Arc::ptr_eq(&prev.flows, &piece.flows) && prev.end == piece.start =>
                    {
                        prev.end = piece.end
                    }
                    _ => self.runs.insert(r, piece),
                }
            }
            self.len += 1;
        }
    }

    /// The same flows as one new run of their own (one slice).
    pub(crate) fn compacted(&self) -> FlowSet {
        let flows: SharedRun = self.iter().cloned().collect();
        let runs = if flows.is_empty() {
            Vec::new()
        } else {
            vec![Run::new(flows.clone(), 0, flows.len())]
        };
        FlowSet {
            runs,
            groups: self.groups.clone(),
            meters: self.meters.clone(),
            len: flows.len(),
        }
    }

    /// Number of flows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no flows, groups or meters.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.groups.is_empty() && self.meters.is_empty()
    }

    /// This set with `meters` (one per id: of two with the same id the last wins).
    pub fn with_meters(mut self, meters: Vec<Meter>) -> Self {
        let mut meters = meters;
        meters.reverse();
        meters.sort_by_key(|m| m.meter_id); // stable: the last given comes first
        meters.dedup_by_key(|m| m.meter_id);
        self.meters = Arc::from(meters);
        self
    }

    /// The meters, by id.
    pub fn meters(&self) -> &[Meter] {
        &self.meters
    }

    /// This set without its meters and without the flows that use one of them (a meter
    /// instruction, or a `controller(meter_id=..)` action): what a switch that cannot hold
    /// the meters gets instead.
    pub fn without_meters(&self) -> FlowSet {
        if self.meters.is_empty() {
            return self.clone();
        }
        let ids: Vec<u32> = self.meters.iter().map(|m| m.meter_id).collect();
        let uses_meter = |f: &Flow| {
            f.instructions.iter().any(|i| match i {
                ofproto::Instruction::Meter(m) => ids.contains(m),
                ofproto::Instruction::ApplyActions(a) | ofproto::Instruction::WriteActions(a) => {
                    a.iter().any(|a| {
                        matches!(a, ofproto::Action::Controller { meter_id: Some(m), .. } if ids.contains(m))
                    })
                }
                _ => false,
            })
        };
        let flows: Vec<Flow> = self.iter().filter(|f| !uses_meter(f)).cloned().collect();
        FlowSet::new(flows, self.groups.to_vec())
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

    /// Walks two sets in key order, telling `on` of every flow that differs:
    /// `(Some(old), None)` only in `installed`, `(None, Some(new))` only in `desired`,
    /// `(Some(old), Some(new))` same key, other contents. Stretches of one shared run at the
    /// same place are skipped whole (they are identical).
    pub fn walk_changes<'a>(
        installed: &'a FlowSet,
        desired: &'a FlowSet,
        mut on: impl FnMut(Option<&'a Flow>, Option<&'a Flow>),
    ) {
        let mut a = Cursor::new(&installed.runs);
        let mut b = Cursor::new(&desired.runs);
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(x), None) => {
                    on(Some(x), None);
                    a.advance(1);
                }
                (None, Some(y)) => {
                    on(None, Some(y));
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
                            on(Some(x), None);
                            a.advance(1);
                        }
                        Ordering::Greater => {
                            on(None, Some(y));
                            b.advance(1);
                        }
                        Ordering::Equal => {
                            if x.cookie != y.cookie
                                || x.instructions != y.instructions
                                || x.idle_timeout != y.idle_timeout
                                || x.hard_timeout != y.hard_timeout
                                || x.flags != y.flags
                            {
                                on(Some(x), Some(y));
                            }
                            a.advance(1);
                            b.advance(1);
                        }
                    }
                }
            }
        }
    }

    /// The minimal change that turns `installed` into `desired`.
    pub fn diff(installed: &FlowSet, desired: &FlowSet) -> FlowDiff {
        let mut d = FlowDiff::default();
        FlowSet::walk_changes(installed, desired, |old, new| match (old, new) {
            (Some(x), None) => d.deletes.push(x.clone()),
            (None, Some(y)) => d.adds.push(y.clone()),
            (Some(_), Some(y)) => d.modifies.push(y.clone()),
            (None, None) => {}
        });
        let (ma, mb) = (installed.meters(), desired.meters());
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            match (ma.get(i), mb.get(j)) {
                (Some(x), Some(y)) if x.meter_id == y.meter_id => {
                    if x != y {
                        d.meter_modifies.push(y.clone());
                    }
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.meter_id < y.meter_id => {
                    d.meter_deletes.push(x.clone());
                    i += 1;
                }
                (Some(x), None) => {
                    d.meter_deletes.push(x.clone());
                    i += 1;
                }
                (_, Some(y)) => {
                    d.meter_adds.push(y.clone());
                    j += 1;
                }
                (None, None) => break,
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
        let meters: Vec<Meter> = self
            .meters
            .iter()
            .filter(|m| !d.meter_deletes.iter().any(|x| x.meter_id == m.meter_id))
            .cloned()
            .chain(d.meter_modifies.iter().cloned())
            .chain(d.meter_adds.iter().cloned())
            .collect();
        FlowSet::new(flows, groups).with_meters(meters)
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
        settle(self.runs, &mut self.r, &mut self.i);
    }
    fn peek(&self) -> Option<&'a Flow> {
        self.runs.get(self.r).and_then(|r| r.slice().get(self.i))
    }
    fn left_in_run(&self) -> usize {
        self.runs
            .get(self.r)
            .map_or(0, |r| (r.end() - r.start()).saturating_sub(self.i))
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
    /// Meters to add (send before the flows that use them).
    pub meter_adds: Vec<Meter>,
    /// Meters to modify.
    pub meter_modifies: Vec<Meter>,
    /// Meters to delete (send after the flows that used them are gone).
    pub meter_deletes: Vec<Meter>,
}

impl FlowDiff {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of flow, group and meter changes.
    pub fn len(&self) -> usize {
        self.meter_adds.len()
            + self.meter_modifies.len()
            + self.meter_deletes.len()
            + self.adds.len()
            + self.modifies.len()
            + self.deletes.len()
            + self.group_adds.len()
            + self.group_modifies.len()
            + self.group_deletes.len()
    }
}

/// The diff of what a switch holds against the desired set, computed while the switch's
/// flows arrive in parts (a flow-stats reply streamed part by part): each part is folded in and
/// can be dropped at once, so only the desired set, one mark per desired flow and the changes
/// found are held, never the switch's whole table. [`StreamedDiff::finish`] gives exactly what
/// [`FlowSet::diff`] gives for the same flows, groups and meters.
#[derive(Debug)]
pub struct StreamedDiff<'a> {
    desired: &'a FlowSet,
    /// The desired flows in key order (for the lookup of each flow read).
    index: Vec<&'a Flow>,
    /// Per desired flow: what the switch holds under its key.
    seen: Vec<Seen>,
    /// Flows the switch holds under keys the desired set does not have (the last read under
    /// a key wins, as in [`FlowSet::new`]).
    deletes: Vec<Flow>,
    read: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Not held: an add.
    No,
    /// Held as desired.
    Same,
    /// Held with another cookie, instructions, timeouts or flags: a modify.
    Differs,
}

impl<'a> StreamedDiff<'a> {
    /// A diff against `desired` with nothing read yet.
    pub fn new(desired: &'a FlowSet) -> Self {
        let index: Vec<&Flow> = desired.iter().collect();
        StreamedDiff {
            desired,
            seen: vec![Seen::No; index.len()],
            index,
            deletes: Vec::new(),
            read: 0,
        }
    }

    /// Folds in flows the switch holds (any order, any number of parts).
    pub fn fold(&mut self, flows: impl IntoIterator<Item = Flow>) {
        for mut f in flows {
            self.read += 1;
            f.matches.fields.sort();
            match self.index.binary_search_by(|d| key_cmp(d, &f)) {
                Ok(i) => {
                    let d = self.index.get(i).copied();
                    let same = d.is_some_and(|d| {
                        d.cookie == f.cookie
                            && d.instructions == f.instructions
                            && d.idle_timeout == f.idle_timeout
                            && d.hard_timeout == f.hard_timeout
                            && d.flags == f.flags
                    });
                    if let Some(s) = self.seen.get_mut(i) {
                        *s = if same { Seen::Same } else { Seen::Differs };
                    }
                }
                Err(_) => self.deletes.push(f),
            }
        }
    }

    /// Flows folded in so far.
    pub fn flows_read(&self) -> usize {
        self.read
    }

    /// The diff, given the switch's groups and meters (read whole: a handful per switch).
    pub fn finish(self, groups: Vec<Group>, meters: Vec<Meter>) -> FlowDiff {
        let held = FlowSet::new(Vec::new(), groups).with_meters(meters);
        let wanted = FlowSet::new(Vec::new(), self.desired.groups().to_vec())
            .with_meters(self.desired.meters().to_vec());
        let mut d = FlowSet::diff(&held, &wanted);
        for (f, s) in self.index.iter().zip(&self.seen) {
            match s {
                Seen::No => d.adds.push((*f).clone()),
                Seen::Differs => d.modifies.push((*f).clone()),
                Seen::Same => {}
            }
        }
        let mut deletes = self.deletes;
        deletes.sort_by(key_cmp); // stable: of equal keys the last read stays last
        let mut unique: Vec<Flow> = Vec::with_capacity(deletes.len());
        for f in deletes {
            match unique.last_mut() {
                Some(last) if key_cmp(last, &f) == Ordering::Equal => *last = f,
                _ => unique.push(f),
            }
        }
        d.deletes = unique;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofproto::Match;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A flow with key (table, priority, reg0 = value) and the set it came from as cookie.
    fn flow(table: u8, priority: u16, value: u32, set: usize) -> Flow {
        let mut f = Flow::new(table, priority, Match::new().reg(0, value));
        f.cookie = set as u64;
        f
    }

    proptest! {
        /// Folding a switch's flows in parts (any split, duplicates and flows of other cookies
        /// included) gives exactly the diff of the whole table.
        #[test]
        fn streamed_diff_is_the_diff(
            desired in proptest::collection::btree_map((0u8..3, 0u16..3, 0u32..30), 0u64..3, 0..50),
            held in proptest::collection::vec(((0u8..3, 0u16..3, 0u32..30), 0u64..3), 0..60),
            cuts in proptest::collection::vec(0usize..60, 0..6),
        ) {
            let want: Vec<Flow> = desired
                .iter()
                .map(|(&(t, p, v), &c)| flow(t, p, v, c as usize))
                .collect();
            let have: Vec<Flow> = held
                .iter()
                .map(|&((t, p, v), c)| flow(t, p, v, c as usize))
                .collect();
            let desired = FlowSet::new(want, Vec::new());
            let whole = FlowSet::diff(&FlowSet::new(have.clone(), Vec::new()), &desired);
            let mut cuts = cuts;
            cuts.push(have.len());
            cuts.sort();
            let mut streamed = StreamedDiff::new(&desired);
            let mut at = 0;
            for c in cuts {
                let c = c.min(have.len()).max(at);
                streamed.fold(have[at..c].iter().cloned());
                at = c;
            }
            prop_assert_eq!(streamed.flows_read(), have.len());
            prop_assert_eq!(streamed.finish(Vec::new(), Vec::new()), whole);
        }

        /// The merge of sets stored as slices of shared runs (many short ones, as a node's
        /// policy flows) is their sorted union, the first set winning on equal keys.
        #[test]
        fn merge_is_the_sorted_union(
            sets in proptest::collection::vec(
                (
                    proptest::collection::btree_set((0u8..3, 0u16..3, 0u32..40), 0..60),
                    proptest::collection::vec(1usize..6, 1..20),
                ),
                1..6,
            )
        ) {
            let mut want: BTreeMap<(u8, u16, u32), usize> = BTreeMap::new();
            let mut inputs = Vec::new();
            for (idx, (keys, cuts)) in sets.iter().enumerate() {
                let mut flows: Vec<Flow> =
                    keys.iter().map(|&(t, p, v)| flow(t, p, v, idx)).collect();
                flows.sort_by(key_cmp);
                for &(t, p, v) in keys {
                    want.entry((t, p, v)).or_insert(idx);
                }
                // Slices of one shared run, every other piece skipped into a second run.
                let run: SharedRun = Arc::from(flows.clone());
                let other: SharedRun = Arc::from(flows);
                let mut pieces = Vec::new();
                let (mut at, mut k) = (0, 0);
                while at < run.len() {
                    let n = cuts[k % cuts.len()].min(run.len() - at);
                    let from = if k % 2 == 0 { &run } else { &other };
                    pieces.push((from.clone(), at..at + n));
                    at += n;
                    k += 1;
                }
                inputs.push(FlowSet::from_chain(pieces));
            }
            let merged = FlowSet::merge(inputs, Vec::new());
            let mut expected: Vec<Flow> =
                want.iter().map(|(&(t, p, v), &idx)| flow(t, p, v, idx)).collect();
            expected.sort_by(key_cmp);
            let got: Vec<Flow> = merged.iter().cloned().collect();
            prop_assert_eq!(merged.len(), expected.len());
            prop_assert_eq!(got, expected);
        }
    }

    fn meter(id: u32, rate: u32) -> Meter {
        Meter {
            meter_id: id,
            flags: ofproto::meter::meter_flags::PKTPS | ofproto::meter::meter_flags::BURST,
            bands: vec![ofproto::MeterBand::drop(rate, rate)],
        }
    }

    #[test]
    fn meters_are_diffed_by_id_and_an_unchanged_set_needs_nothing() {
        let base = FlowSet::new(vec![flow(0, 1, 1, 0)], Vec::new());
        let installed = base.clone().with_meters(vec![meter(1, 20), meter(3, 5)]);
        let desired = base.clone().with_meters(vec![meter(2, 7), meter(1, 30)]);
        let d = FlowSet::diff(&installed, &desired);
        assert_eq!(d.meter_adds, vec![meter(2, 7)]);
        assert_eq!(d.meter_modifies, vec![meter(1, 30)]);
        assert_eq!(d.meter_deletes, vec![meter(3, 5)]);
        assert_eq!((d.len(), d.adds.len()), (3, 0));
        assert_eq!(installed.apply(&d), desired);
        assert!(FlowSet::diff(&desired, &desired.clone()).is_empty());
        // Read back in another order: the same set.
        let read_back = base.with_meters(vec![meter(1, 30), meter(2, 7)]);
        assert!(FlowSet::diff(&read_back, &desired).is_empty());
        assert_ne!(read_back, FlowSet::new(vec![flow(0, 1, 1, 0)], Vec::new()));
    }

    #[test]
    fn without_meters_drops_the_meters_and_the_flows_that_use_them() {
        let metered = flow(80, 181, 1, 0).apply(vec![ofproto::Action::Controller {
            max_len: u16::MAX,
            controller_id: 7,
            reason: 1,
            userdata: vec![1],
            pause: false,
            meter_id: Some(1),
            extended: false,
        }]);
        let mut by_instruction = flow(80, 181, 2, 0);
        by_instruction
            .instructions
            .push(ofproto::Instruction::Meter(1));
        let other_meter = flow(80, 181, 3, 0).apply(vec![ofproto::Action::Controller {
            max_len: u16::MAX,
            controller_id: 7,
            reason: 1,
            userdata: vec![1],
            pause: false,
            meter_id: Some(9),
            extended: false,
        }]);
        let plain = flow(80, 180, 1, 0);
        let set = FlowSet::new(
            vec![metered, by_instruction, other_meter.clone(), plain.clone()],
            Vec::new(),
        )
        .with_meters(vec![meter(1, 20)]);
        let stripped = set.without_meters();
        assert!(stripped.meters().is_empty());
        let left: Vec<Flow> = stripped.iter().cloned().collect();
        assert_eq!(left, vec![other_meter, plain]);
    }
}
