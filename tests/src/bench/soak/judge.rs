//! Judging the soak's history: which probe results are violations (a forbidden connection that
//! succeeded, egress traffic with a node's own address), which failures are outages longer than
//! the fixed recovery windows, and how long the longest outage was. Pure: it reads the
//! recorded model versions, faults and probes (all in milliseconds since the start of the run)
//! and is run once the run is over, when every fault's end is known.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::truth::{Model, PodKey, Proto};

/// Window after a fault ends (or after an acknowledged change) within which new connections
/// must work again: the "everything else ≤ 2 s".
pub const WINDOW_MS: u64 = 2_000;

/// How long before a datapath fault a stream's last good round trip may be for the fault to
/// have caused its stall (the stream's line interval and the stall threshold, with room for a
/// loaded machine).
pub const STALL_LEAD_MS: u64 = 2_000;

/// How much longer than the time the machine held the bench or a switch a stall it explains
/// may be: the stream's line interval (100 ms) and a round trip, with room for a loaded machine.
pub const PAUSE_SLACK_MS: u64 = 500;

/// A sampling interval of a switch's forwarding thread counts as held when the thread was
/// blocked at its end, or waited for a CPU for at least this share of it (per mille).
pub const HELD_WAIT_PER_MILLE: u64 = 800;

/// What the machine did, from records that are not flowmesh's: when the bench was paused,
/// when the control stream (no Open vSwitch on its path) stalled, and the scheduling samples of
/// every node's ovs-vswitchd.
#[derive(Debug, Clone, Copy, Default)]
pub struct Machine<'a> {
    /// Pauses of the bench.
    pub pauses: &'a [Pause],
    /// Stalls of the control stream.
    pub control: &'a [Stall],
    /// Samples of the switches' forwarding threads.
    pub sched: &'a [Sched],
}

impl Machine<'_> {
    /// Whether the machine explains a failure from `start_ms` to `end_ms` of traffic through
    /// `nodes`: the time in which the bench was paused, the control stream stalled, or the
    /// ovs-vswitchd of one of `nodes` could not run (blocked, or runnable but without a CPU),
    /// overlaps counted once, covers all of it but [`PAUSE_SLACK_MS`]. The traffic of one pair
    /// or one node that stops while the machine moves packets and its switches run is never
    /// explained: only the kernel's accounting and the control stream count.
    pub fn explains(&self, start_ms: u64, end_ms: u64, nodes: &[usize]) -> bool {
        let mut spans: Vec<(u64, u64)> = self
            .pauses
            .iter()
            .map(|p| (p.start_ms, p.end_ms))
            .chain(self.control.iter().map(|c| (c.start_ms, c.end_ms)))
            .collect();
        spans.extend(
            self.sched
                .iter()
                .filter(|s| nodes.contains(&s.node))
                .filter(|s| {
                    let len = s.end_ms.saturating_sub(s.start_ms).max(1);
                    s.blocked || s.wait_ms * 1000 >= len * HELD_WAIT_PER_MILLE
                })
                .map(|s| (s.start_ms, s.end_ms)),
        );
        covered(&spans, start_ms, end_ms) + PAUSE_SLACK_MS >= end_ms.saturating_sub(start_ms)
            && covered(&spans, start_ms, end_ms) > 0
    }
}

/// How much of `start_ms..end_ms` the spans cover, overlaps once.
fn covered(spans: &[(u64, u64)], start_ms: u64, end_ms: u64) -> u64 {
    let mut clipped: Vec<(u64, u64)> = spans
        .iter()
        .copied()
        .map(|(a, b)| (a.max(start_ms), b.min(end_ms)))
        .filter(|(a, b)| a < b)
        .collect();
    clipped.sort_unstable();
    let mut held = 0;
    let mut cur: Option<(u64, u64)> = None;
    for (a, b) in clipped {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                held += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    if let Some((ca, cb)) = cur {
        held += cb - ca;
    }
    held
}

/// One state of the objects: written from `start_ms` (the write may act at once), acknowledged
/// at `ack_ms`.
#[derive(Debug, Clone)]
pub struct Version {
    /// When the write that made it began.
    pub start_ms: u64,
    /// When it was acknowledged (after retries).
    pub ack_ms: u64,
    /// The objects.
    pub model: Arc<Model>,
}

/// A fault as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpan {
    /// Its kind (`leader-kill`, `link-down`, ...).
    pub kind: String,
    /// The node it hit, for node faults; None: the control plane (every probe).
    pub node: Option<usize>,
    /// Start.
    pub start_ms: u64,
    /// End (the process restarted, the link up; = start for instant faults).
    pub end_ms: u64,
    /// The leader stopped or killed: new connections and changes get the leader TTL + 2 s.
    pub leader: bool,
}

impl FaultSpan {
    /// Until when failures of the probes it touches are excused.
    pub fn excused_until(&self, leader_ttl_ms: u64) -> u64 {
        let after_end = self.end_ms + WINDOW_MS;
        if self.leader {
            after_end.max(self.start_ms + leader_ttl_ms + WINDOW_MS)
        } else {
            after_end
        }
    }

    fn touches(&self, nodes: &[usize]) -> bool {
        self.node.is_none_or(|n| nodes.contains(&n))
    }
}

/// What a probe asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Pod to pod: the truth table decides.
    Pod {
        /// Source pod.
        src: PodKey,
        /// Destination pod.
        dst: PodKey,
        /// Protocol.
        proto: Proto,
        /// Port.
        port: u16,
    },
    /// A probe whose answer is fixed by the set-up (egress firewall, egress IP, multicast).
    Fixed {
        /// What it is.
        name: String,
        /// Whether it must succeed (else it must not).
        allowed: bool,
    },
}

/// One probe result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRec {
    /// What was probed.
    pub target: Target,
    /// Nodes on its path (source, destination, egress node).
    pub nodes: Vec<usize>,
    /// Start.
    pub start_ms: u64,
    /// End.
    pub end_ms: u64,
    /// Answered.
    pub ok: bool,
    /// Egress traffic answered from a node's own address.
    pub wrong_source: bool,
}

/// An established TCP stream that stalled or broke (`end_ms`: when it moved again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// Stream name.
    pub name: String,
    /// Nodes of its ends.
    pub nodes: Vec<usize>,
    /// Last good round trip.
    pub start_ms: u64,
    /// Next good round trip.
    pub end_ms: u64,
}

/// A time the bench itself was not scheduled (its pause monitor woke that late).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// The monitor's last tick before it.
    pub start_ms: u64,
    /// The monitor's first tick after it.
    pub end_ms: u64,
}

/// One sampling interval of a node's `ovs-vswitchd` main thread (which forwards every packet of
/// the lab's userspace datapath): the kernel's accounting of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sched {
    /// Node.
    pub node: usize,
    /// Start of the interval.
    pub start_ms: u64,
    /// End of the interval.
    pub end_ms: u64,
    /// Time on a CPU within it.
    pub run_ms: u64,
    /// Time runnable but waiting for a CPU within it.
    pub wait_ms: u64,
    /// In uninterruptible sleep (state D) at its end.
    pub blocked: bool,
}

/// Faults that take a node's datapath away (its established traffic is not "between live
/// nodes" while they last).
pub fn kills_datapath(kind: &str) -> bool {
    matches!(kind, "link-down" | "br0-delete")
}

/// The verdict over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Forbidden connections that succeeded, egress with a node's address.
    pub violations: usize,
    /// Allowed connections that failed outside every window, stalls of established streams.
    pub outages_over_window: usize,
    /// Longest run of failures of one allowed probe (first failure's start to the last one's
    /// end, excused or not), or stall of a stream not caused by its node losing its datapath.
    pub max_outage_ms: u64,
    /// Probes judged.
    pub probes: usize,
    /// Probes whose answer was the old or new state during a change.
    pub transitional: usize,
    /// Stalls of established streams that the machine explains: the bench itself or an
    /// ovs-vswitchd on the path could not run for all but [`PAUSE_SLACK_MS`] of the stall (not
    /// counted as outages; reported apart).
    pub machine_stalls: usize,
    /// Failed probes of allowed connections the machine explains the same way.
    pub machine_failures: usize,
    /// Descriptions of the first violations and outages (for the log).
    pub examples: Vec<String>,
}

/// Judges the run.
pub fn judge(
    versions: &[Version],
    faults: &[FaultSpan],
    probes: &[ProbeRec],
    stalls: &[Stall],
    machine: &Machine,
    leader_ttl_ms: u64,
) -> Verdict {
    let mut v = Verdict::default();
    // Per probe target, the start of the current run of failures of an allowed probe (excused
    // or not). Probes of one pair are minutes apart at times, so an outage is measured from the
    // first failure's start to the last one's end (what was seen failing), not to the next
    // success.
    let mut failing: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut sorted: Vec<&ProbeRec> = probes.iter().collect();
    sorted.sort_by_key(|p| p.start_ms);
    for p in sorted {
        v.probes += 1;
        let name = format!("{:?}", p.target);
        let accepted = acceptable(versions, faults, p, leader_ttl_ms);
        if p.wrong_source {
            v.violations += 1;
            note(
                &mut v,
                format!("egress with a node address: {name} at {} ms", p.start_ms),
            );
        }
        if accepted.is_empty() {
            continue;
        }
        if accepted.contains(&p.ok) {
            if accepted.iter().any(|&a| a != p.ok) {
                v.transitional += 1;
            }
            if p.ok {
                failing.remove(&name);
            }
            continue;
        }
        if p.ok {
            v.violations += 1;
            note(
                &mut v,
                format!("forbidden but reached: {name} at {} ms", p.start_ms),
            );
            continue;
        }
        let run = failing
            .entry(name.clone())
            .or_insert((p.start_ms, p.end_ms));
        run.1 = p.end_ms;
        v.max_outage_ms = v.max_outage_ms.max(run.1.saturating_sub(run.0));
        let excused = faults.iter().any(|f| {
            f.touches(&p.nodes)
                && f.start_ms <= p.end_ms
                && f.excused_until(leader_ttl_ms) >= p.start_ms
        });
        if !excused && machine.explains(p.start_ms, p.end_ms, &p.nodes) {
            v.machine_failures += 1;
            continue;
        }
        if !excused {
            v.outages_over_window += 1;
            note(
                &mut v,
                format!(
                    "allowed but failed outside every window: {name} at {}..{} ms",
                    p.start_ms, p.end_ms
                ),
            );
        }
    }
    for s in stalls {
        // The fault must have begun the stall: a stream's last good round trip comes at most
        // a line's interval plus a stall's length before the fault that stops it. A stream
        // already stalled when a node's datapath went away was stalled by something else.
        let excused = faults.iter().any(|f| {
            kills_datapath(&f.kind)
                && f.touches(&s.nodes)
                && s.start_ms + STALL_LEAD_MS >= f.start_ms
                && f.excused_until(leader_ttl_ms) >= s.start_ms
        });
        // A stream whose node lost its datapath resumes when TCP's backed-off retransmission
        // fires, seconds after the path is back: that length is TCP's, not the network's (new
        // connections, probed every round, measure the network).
        // A stream whose own thread was not running cannot tell a slow network from its
        // own pause, and the lab's switches forward every packet in their ovs-vswitchd's main
        // thread: a stall during which the bench or a switch on the path could not run (its
        // spans added up: a busy machine pauses it several times in a row) for all but the
        // slack is the machine's, not the network's.
        if !excused && machine.explains(s.start_ms, s.end_ms, &s.nodes) {
            v.machine_stalls += 1;
            continue;
        }
        if !excused {
            v.max_outage_ms = v.max_outage_ms.max(s.end_ms.saturating_sub(s.start_ms));
            v.outages_over_window += 1;
            note(
                &mut v,
                format!(
                    "established stream {} stalled {}..{} ms",
                    s.name, s.start_ms, s.end_ms
                ),
            );
        }
    }
    v
}

fn note(v: &mut Verdict, what: String) {
    if v.examples.len() < 20 {
        v.examples.push(what);
    }
}

/// The answers acceptable for probe `p`: the verdicts of every version in force at some moment
/// of the probe, where a version stays in force until its successor was acknowledged plus the
/// window (stretched by faults in progress then). Empty: no constraint (a pod did not exist).
fn acceptable(versions: &[Version], faults: &[FaultSpan], p: &ProbeRec, ttl_ms: u64) -> Vec<bool> {
    let (src, dst, proto, port) = match &p.target {
        Target::Fixed { allowed, .. } => return vec![*allowed],
        Target::Pod {
            src,
            dst,
            proto,
            port,
        } => (src, dst, *proto, *port),
    };
    let mut out = Vec::new();
    for (i, ver) in versions.iter().enumerate() {
        let until = match versions.get(i + 1) {
            None => u64::MAX,
            Some(next) => {
                let base = next.ack_ms + WINDOW_MS;
                faults
                    .iter()
                    .filter(|f| {
                        f.touches(&p.nodes)
                            && f.start_ms <= next.ack_ms
                            && f.excused_until(ttl_ms) >= next.ack_ms
                    })
                    .map(|f| f.excused_until(ttl_ms))
                    .fold(base, u64::max)
            }
        };
        if ver.start_ms > p.end_ms || until < p.start_ms {
            continue;
        }
        match ver.model.allowed(src, dst, proto, port) {
            // A pod that does not exist in one of the states: anything goes.
            None => return Vec::new(),
            Some(a) => {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::truth::{Mode, PodObj, Policy};
    use super::*;
    use std::net::Ipv4Addr;

    /// The judge without pauses of the bench.
    fn judge(
        versions: &[Version],
        faults: &[FaultSpan],
        probes: &[ProbeRec],
        stalls: &[Stall],
        leader_ttl_ms: u64,
    ) -> Verdict {
        super::judge(
            versions,
            faults,
            probes,
            stalls,
            &Machine::default(),
            leader_ttl_ms,
        )
    }

    /// The judge of stalls alone, with the machine's own records (pauses of the bench, the
    /// control stream's stalls, the switches' scheduling samples).
    fn judge_stalls(
        stalls: &[Stall],
        pauses: &[Pause],
        control: &[Stall],
        sched: &[Sched],
    ) -> Verdict {
        super::judge(
            &[],
            &[],
            &[],
            stalls,
            &Machine {
                pauses,
                control,
                sched,
            },
            2_000,
        )
    }

    #[test]
    fn a_stall_the_bench_s_own_pause_explains_is_not_an_outage() {
        let s = Stall {
            name: "s".into(),
            nodes: vec![1, 2],
            start_ms: 10_000,
            end_ms: 11_700,
        };
        let pause = Pause {
            start_ms: 10_200,
            end_ms: 11_400,
        };
        let v = judge_stalls(std::slice::from_ref(&s), &[pause], &[], &[]);
        assert_eq!((v.outages_over_window, v.machine_stalls), (0, 1));
        // A pause elsewhere in the run explains nothing.
        let other = Pause {
            start_ms: 50_000,
            end_ms: 51_200,
        };
        let v = judge_stalls(std::slice::from_ref(&s), &[other], &[], &[]);
        assert_eq!((v.outages_over_window, v.machine_stalls), (1, 0));
        // A stall much longer than the pause inside it is the network's.
        let long = Stall {
            end_ms: 20_000,
            ..s.clone()
        };
        let v = judge_stalls(std::slice::from_ref(&long), &[pause], &[], &[]);
        assert_eq!(
            (v.outages_over_window, v.machine_stalls, v.max_outage_ms),
            (1, 0, 10_000)
        );
        // Several pauses in a row (the seed-7 run: 659, 447, 586 and 1236 ms within a 3 s
        // stall) add up.
        let three = Stall {
            end_ms: 13_000,
            ..s
        };
        let row = [
            Pause {
                start_ms: 10_050,
                end_ms: 10_700,
            },
            Pause {
                start_ms: 10_710,
                end_ms: 11_600,
            },
            Pause {
                start_ms: 11_620,
                end_ms: 12_900,
            },
        ];
        let v = judge_stalls(&[three], &row, &[], &[]);
        assert_eq!((v.outages_over_window, v.machine_stalls), (0, 1));
    }

    /// Samples of node `node`'s switch every 50 ms over `from..to`, each `wait` ms runnable
    /// without a CPU, blocked or not.
    fn samples(node: usize, from: u64, to: u64, wait: u64, blocked: bool) -> Vec<Sched> {
        (from..to)
            .step_by(50)
            .map(|t| Sched {
                node,
                start_ms: t,
                end_ms: t + 50,
                run_ms: 0,
                wait_ms: wait,
                blocked,
            })
            .collect()
    }

    #[test]
    fn a_stall_while_a_switch_on_the_path_could_not_run_is_the_machine_s() {
        let s = Stall {
            name: "s".into(),
            nodes: vec![1, 2],
            start_ms: 10_000,
            end_ms: 12_000,
        };
        let one = |sched: &[Sched], st: &Stall| {
            let v = judge_stalls(std::slice::from_ref(st), &[], &[], sched);
            (v.outages_over_window, v.machine_stalls)
        };
        // Node 2's ovs-vswitchd blocked (state D) for 1.8 s of the 2 s: the machine's.
        assert_eq!(one(&samples(2, 10_100, 11_900, 0, true), &s), (0, 1));
        // Runnable but without a CPU for 45 ms of every 50: the machine's too.
        assert_eq!(one(&samples(1, 10_100, 11_900, 45, false), &s), (0, 1));
        // Waiting 20 ms of every 50 still forwards: the network's.
        assert_eq!(one(&samples(1, 10_100, 11_900, 20, false), &s), (1, 0));
        // A switch off the path explains nothing.
        assert_eq!(one(&samples(3, 10_000, 12_000, 0, true), &s), (1, 0));
        // Held for 1 s of it: the other second is an outage.
        assert_eq!(one(&samples(2, 10_000, 11_000, 0, true), &s), (1, 0));
        // A pause of the bench and a held switch after it add up, overlaps once.
        let pause = Pause {
            start_ms: 10_000,
            end_ms: 11_000,
        };
        let held = samples(2, 10_800, 11_800, 0, true);
        let v = judge_stalls(std::slice::from_ref(&s), &[pause], &[], &held);
        assert_eq!((v.outages_over_window, v.machine_stalls), (0, 1));
        // A 10 s outage with a 2 s machine stall inside it stays an outage, with its length.
        let long = Stall {
            end_ms: 20_000,
            ..s.clone()
        };
        let v = super::judge(
            &[],
            &[],
            &[],
            &[long],
            &Machine {
                pauses: &[],
                control: &[],
                sched: &samples(2, 10_000, 12_000, 0, true),
            },
            2_000,
        );
        assert_eq!(
            (v.outages_over_window, v.machine_stalls, v.max_outage_ms),
            (1, 0, 10_000)
        );
        // The control stream (no Open vSwitch on its path) stalled over it: the machine did
        // not move packets at all.
        let control = Stall {
            name: "control".into(),
            nodes: vec![],
            start_ms: 9_950,
            end_ms: 11_900,
        };
        let m = Machine {
            pauses: &[],
            control: std::slice::from_ref(&control),
            sched: &[],
        };
        let v = super::judge(&[], &[], &[], std::slice::from_ref(&s), &m, 2_000);
        assert_eq!((v.outages_over_window, v.machine_stalls), (0, 1));
        let later = Stall {
            start_ms: 30_000,
            end_ms: 32_000,
            ..control.clone()
        };
        let m = Machine {
            control: std::slice::from_ref(&later),
            ..m
        };
        let v = super::judge(&[], &[], &[], std::slice::from_ref(&s), &m, 2_000);
        assert_eq!((v.outages_over_window, v.machine_stalls), (1, 0));
        // A probe of an allowed pair that timed out while the switch of its source could not
        // run is the machine's; the same failure with the switches running is an outage.
        let vs = versions();
        let p = probe(5_000, false);
        let p = ProbeRec { end_ms: 6_500, ..p };
        let v = super::judge(
            &vs,
            &[],
            std::slice::from_ref(&p),
            &[],
            &Machine {
                pauses: &[],
                control: &[],
                sched: &samples(1, 5_000, 6_500, 50, false),
            },
            2_000,
        );
        assert_eq!((v.outages_over_window, v.machine_failures), (0, 1));
        let v = super::judge(
            &vs,
            &[],
            &[p],
            &[],
            &Machine {
                pauses: &[],
                control: &[],
                sched: &[],
            },
            2_000,
        );
        assert_eq!((v.outages_over_window, v.machine_failures), (1, 0));
    }

    fn key(n: &str) -> PodKey {
        ("a".into(), n.into())
    }

    fn base() -> Model {
        let mut m = Model::new(Mode::NetworkPolicy);
        for (i, n) in ["x", "y"].into_iter().enumerate() {
            m.pods.insert(
                key(n),
                PodObj {
                    node: i + 1,
                    ip: Ipv4Addr::new(10, 128, 0, 2 + i as u8),
                    labels: Default::default(),
                },
            );
        }
        m
    }

    fn deny(mut m: Model) -> Model {
        m.policies.insert(
            ("a".into(), "deny".into()),
            Policy {
                selector: Default::default(),
                ingress: vec![],
            },
        );
        m
    }

    fn probe(at: u64, ok: bool) -> ProbeRec {
        ProbeRec {
            target: Target::Pod {
                src: key("x"),
                dst: key("y"),
                proto: Proto::Tcp,
                port: 8080,
            },
            nodes: vec![1, 2],
            start_ms: at,
            end_ms: at + 100,
            ok,
            wrong_source: false,
        }
    }

    fn versions() -> Vec<Version> {
        vec![
            Version {
                start_ms: 0,
                ack_ms: 0,
                model: Arc::new(base()),
            },
            Version {
                start_ms: 10_000,
                ack_ms: 10_500,
                model: Arc::new(deny(base())),
            },
        ]
    }

    #[test]
    fn a_change_has_its_window_then_a_forbidden_success_is_a_violation() {
        let vs = versions();
        // Within the write and its window either answer is fine.
        let v = judge(
            &vs,
            &[],
            &[
                probe(10_200, true),
                probe(12_000, true),
                probe(12_100, false),
            ],
            &[],
            2_000,
        );
        assert_eq!(
            (v.violations, v.outages_over_window, v.transitional),
            (0, 0, 3)
        );
        let v = judge(&vs, &[], &[probe(12_600, true)], &[], 2_000);
        assert_eq!(v.violations, 1, "{v:?}");
        // Before the change, the old verdict only.
        let v = judge(
            &vs,
            &[],
            &[probe(5_000, false), probe(6_000, false), probe(7_000, true)],
            &[],
            2_000,
        );
        assert_eq!(
            (v.violations, v.outages_over_window, v.max_outage_ms),
            (0, 2, 1_100)
        );
    }

    #[test]
    fn faults_excuse_failures_of_the_nodes_they_touch_until_their_window_ends() {
        let vs = versions();
        let link = FaultSpan {
            kind: "link-down".into(),
            node: Some(2),
            start_ms: 1_000,
            end_ms: 4_000,
            leader: false,
        };
        let v = judge(
            &vs,
            std::slice::from_ref(&link),
            &[probe(3_000, false), probe(5_900, false)],
            &[],
            2_000,
        );
        assert_eq!(v.outages_over_window, 0);
        let v = judge(
            &vs,
            std::slice::from_ref(&link),
            &[probe(6_100, false)],
            &[],
            2_000,
        );
        assert_eq!(v.outages_over_window, 1);
        let other = FaultSpan {
            node: Some(3),
            ..link.clone()
        };
        let v = judge(&vs, &[other], &[probe(3_000, false)], &[], 2_000);
        assert_eq!(v.outages_over_window, 1);
        // The leader's window runs TTL + 2 s from its start even when it ends early.
        let leader = FaultSpan {
            kind: "leader-stop".into(),
            node: None,
            start_ms: 1_000,
            end_ms: 1_500,
            leader: true,
        };
        let v = judge(
            &vs,
            std::slice::from_ref(&leader),
            &[probe(4_800, false)],
            &[],
            2_000,
        );
        assert_eq!(v.outages_over_window, 0);
        let v = judge(&vs, &[leader], &[probe(5_100, false)], &[], 2_000);
        assert_eq!(v.outages_over_window, 1);
    }

    #[test]
    fn a_change_during_a_fault_waits_for_the_fault_s_window() {
        let vs = versions();
        let cut = FaultSpan {
            kind: "switch-cut".into(),
            node: Some(2),
            start_ms: 9_000,
            end_ms: 20_000,
            leader: false,
        };
        let v = judge(&vs, &[cut], &[probe(21_000, true)], &[], 2_000);
        assert_eq!(v.violations, 0);
        let v = judge(&vs, &[], &[probe(21_000, true)], &[], 2_000);
        assert_eq!(v.violations, 1);
    }

    #[test]
    fn stalls_count_unless_a_datapath_fault_touches_their_nodes() {
        let s = Stall {
            name: "s".into(),
            nodes: vec![1, 2],
            start_ms: 1_000,
            end_ms: 2_500,
        };
        let v = judge(&[], &[], &[], std::slice::from_ref(&s), 2_000);
        assert_eq!((v.outages_over_window, v.max_outage_ms), (1, 1_500));
        let stop = FaultSpan {
            kind: "leader-stop".into(),
            node: None,
            start_ms: 500,
            end_ms: 3_000,
            leader: true,
        };
        let v = judge(
            &[],
            std::slice::from_ref(&stop),
            &[],
            std::slice::from_ref(&s),
            2_000,
        );
        assert_eq!(
            v.outages_over_window, 1,
            "the datapath keeps forwarding without a leader"
        );
        let link = FaultSpan {
            kind: "link-down".into(),
            node: Some(2),
            ..stop
        };
        let v = judge(
            &[],
            std::slice::from_ref(&link),
            &[],
            std::slice::from_ref(&s),
            2_000,
        );
        assert_eq!((v.outages_over_window, v.max_outage_ms), (0, 0));
        // A stream stalled since long before the link went down: the link did not stall it
        // (the soak's seed-7 run had one stalled for 108 s, excused by a link fault that came
        // 24 s into it).
        let early = Stall {
            start_ms: 1_000,
            end_ms: 40_000,
            ..s
        };
        let late_link = FaultSpan {
            start_ms: 25_000,
            end_ms: 31_000,
            ..link
        };
        let v = judge(&[], &[late_link], &[], &[early], 2_000);
        assert_eq!((v.outages_over_window, v.max_outage_ms), (1, 39_000));
    }

    #[test]
    fn fixed_probes_and_wrong_sources() {
        let p = ProbeRec {
            target: Target::Fixed {
                name: "fw".into(),
                allowed: false,
            },
            nodes: vec![1],
            start_ms: 0,
            end_ms: 10,
            ok: true,
            wrong_source: false,
        };
        assert_eq!(
            judge(&[], &[], std::slice::from_ref(&p), &[], 2_000).violations,
            1
        );
        let q = ProbeRec {
            target: Target::Fixed {
                name: "eip".into(),
                allowed: true,
            },
            wrong_source: true,
            ..p
        };
        assert_eq!(judge(&[], &[], &[q], &[], 2_000).violations, 1);
    }
}
