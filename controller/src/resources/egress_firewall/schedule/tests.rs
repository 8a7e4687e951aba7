//! The resolver's schedule with explicit time: names on their own clocks, the in-flight
//! bound, the per-project name limit, and the write buckets.

use super::*;

fn t0() -> Instant {
    Instant::now()
}

fn s(n: &[&str]) -> Vec<String> {
    n.iter().map(|x| x.to_string()).collect()
}

fn addrs(last: &[u8]) -> BTreeSet<Ipv4Addr> {
    last.iter().map(|l| Ipv4Addr::new(192, 0, 2, *l)).collect()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn a_slow_name_delays_no_other_name() {
    let now = t0();
    let mut sc = Schedule::new(Limits::default(), now);
    // fast.test's answer is already stored: no write is waiting.
    let stored: BTreeMap<String, BTreeSet<Ipv4Addr>> =
        [("fast.test".to_string(), addrs(&[1]))].into();
    sc.sync(
        &[("a".into(), s(&["slow.test", "fast.test"]))],
        &stored,
        now,
    );
    let mut due = sc.due_lookups(now);
    due.sort();
    assert_eq!(due, s(&["fast.test", "slow.test"]));
    // fast answers at once (TTL 2 s), slow is still in flight: fast comes round again on its
    // own clock, twice, while slow has not answered.
    sc.lookup_done("fast.test", Ok((addrs(&[1]), secs(2))), now, 0);
    for round in 1..=2u64 {
        let at = now + secs(2 * round);
        assert_eq!(sc.next_wake(), Some(at));
        assert_eq!(sc.due_lookups(at), s(&["fast.test"]), "round {round}");
        sc.lookup_done("fast.test", Ok((addrs(&[1]), secs(2))), at, 0);
    }
    assert_eq!(sc.in_flight(), 1, "only slow.test");
    // slow times out at its own deadline and retries on its own.
    sc.lookup_done(
        "slow.test",
        Err(("no answer within 5s".into(), secs(5))),
        now + secs(5),
        0,
    );
    assert_eq!(
        sc.shown().get("slow.test").map(|d| d.last_error.as_str()),
        Some("no answer within 5s")
    );
    assert_eq!(
        sc.due_lookups(now + secs(10)),
        s(&["fast.test", "slow.test"])
    );
}

#[test]
fn lookups_in_flight_are_bounded_earliest_due_first() {
    let now = t0();
    let limits = Limits {
        in_flight: 2,
        ..Limits::default()
    };
    let mut sc = Schedule::new(limits, now);
    sc.sync(
        &[("a".into(), s(&["n1.test", "n2.test", "n3.test"]))],
        &BTreeMap::new(),
        now,
    );
    assert_eq!(sc.due_lookups(now).len(), 2);
    assert!(sc.due_lookups(now).is_empty(), "no room");
    let first: Vec<String> = sc
        .names
        .iter()
        .filter(|(_, n)| n.in_flight)
        .map(|(k, _)| k.clone())
        .collect();
    sc.lookup_done(&first[0], Ok((addrs(&[1]), secs(60))), now, 0);
    assert_eq!(sc.due_lookups(now), s(&["n3.test"]));
    // A name dropped while in flight frees its slot.
    sc.sync(&[("a".into(), s(&["n3.test"]))], &BTreeMap::new(), now);
    assert_eq!(sc.in_flight(), 1);
}

#[test]
fn a_project_resolves_at_most_its_limit_of_names() {
    let now = t0();
    let limits = Limits {
        names_per_namespace: 2,
        ..Limits::default()
    };
    let mut sc = Schedule::new(limits, now);
    let projects = vec![
        (
            "greedy".to_string(),
            s(&["a.test", "b.test", "a.test", "c.test", "d.test"]),
        ),
        ("other".to_string(), s(&["d.test", "e.test"])),
    ];
    sc.sync(&projects, &BTreeMap::new(), now);
    let mut due = sc.due_lookups(now);
    due.sort();
    // c.test is only greedy's third name; d.test is also other's first.
    assert_eq!(due, s(&["a.test", "b.test", "d.test", "e.test"]));
    let shown = sc.shown();
    let c = shown.get("c.test").expect("c.test is shown");
    assert!(
        c.last_error
            .contains("project greedy uses more than 2 distinct dnsNames"),
        "{c:?}"
    );
    // When greedy drops a name, c.test is resolved.
    sc.sync(
        &[("greedy".into(), s(&["a.test", "c.test"]))],
        &BTreeMap::new(),
        now + secs(1),
    );
    assert_eq!(sc.due_lookups(now + secs(1)), s(&["c.test"]));
}

#[test]
fn changed_answers_are_stored_in_bursts_then_one_per_interval() {
    let now = t0();
    let limits = Limits {
        write_burst: 2,
        write_interval: secs(10),
        ..Limits::default()
    };
    let mut sc = Schedule::new(limits, now);
    sc.sync(&[("a".into(), s(&["flap.test"]))], &BTreeMap::new(), now);
    let mut at = now;
    let mut stored_at = Vec::new();
    let mut last = BTreeSet::new();
    // The answer changes on every lookup, every second, for 40 s.
    for i in 0..40u8 {
        assert!(sc.due_lookups(at).len() <= 1);
        sc.lookup_done("flap.test", Ok((addrs(&[i]), secs(1))), at, 0);
        for (n, a) in sc.due_writes(at) {
            assert_eq!(a, addrs(&[i]), "the latest answer is stored");
            stored_at.push(at.duration_since(now).as_secs());
            last = a.clone();
            sc.write_done(&n, Ok(()), at);
        }
        at += secs(1);
    }
    // Two at once, then one per 10 s (to the second the 1 s lookups allow).
    assert_eq!(stored_at.len(), 5, "{stored_at:?}");
    assert_eq!(stored_at[..2], [0, 1], "{stored_at:?}");
    for w in stored_at[1..].windows(2) {
        assert!((9..=11).contains(&(w[1] - w[0])), "{stored_at:?}");
    }
    // An answer back to what is stored cancels the waiting write.
    sc.lookup_done("flap.test", Ok((addrs(&[99]), secs(1))), at, 0);
    sc.lookup_done("flap.test", Ok((last, secs(1))), at, 0);
    assert!(sc.due_writes(at + secs(60)).is_empty());
}

#[test]
fn an_unchanged_answer_is_not_stored_and_a_failed_write_is_retried() {
    let now = t0();
    let mut sc = Schedule::new(Limits::default(), now);
    let stored: BTreeMap<String, BTreeSet<Ipv4Addr>> = [("a.test".to_string(), addrs(&[1]))].into();
    sc.sync(&[("a".into(), s(&["a.test"]))], &stored, now);
    sc.due_lookups(now);
    sc.lookup_done("a.test", Ok((addrs(&[1]), secs(30))), now, 1_000);
    assert!(sc.due_writes(now).is_empty(), "same as stored");
    assert_eq!(
        sc.shown().get("a.test").map(|d| d.next_refresh_unix_ms),
        Some(31_000)
    );
    let later = now + secs(30);
    sc.due_lookups(later);
    sc.lookup_done("a.test", Ok((addrs(&[2]), secs(30))), later, 0);
    let w = sc.due_writes(later);
    assert_eq!(w, vec![("a.test".to_string(), addrs(&[2]))]);
    sc.write_done("a.test", Err("store unavailable".into()), later);
    assert!(sc
        .shown()
        .get("a.test")
        .is_some_and(|d| d.last_error.contains("store unavailable")));
    let w = sc.due_writes(later + secs(1));
    assert_eq!(w, vec![("a.test".to_string(), addrs(&[2]))], "retried");
    sc.write_done("a.test", Ok(()), later + secs(1));
    assert!(sc.due_writes(later + secs(100)).is_empty());
}

#[test]
fn all_names_together_are_held_to_the_writes_per_second() {
    let now = t0();
    let limits = Limits {
        writes_per_second: 5,
        ..Limits::default()
    };
    let mut sc = Schedule::new(limits, now);
    let names: Vec<String> = (0..20).map(|i| format!("n{i}.test")).collect();
    sc.sync(&[("a".into(), names.clone())], &BTreeMap::new(), now);
    for n in sc.due_lookups(now) {
        sc.lookup_done(&n, Ok((addrs(&[1]), secs(60))), now, 0);
    }
    let first = sc.due_writes(now);
    assert_eq!(first.len(), 5);
    for (n, _) in &first {
        sc.write_done(n, Ok(()), now);
    }
    assert!(sc.due_writes(now).is_empty());
    assert_eq!(sc.next_wake(), Some(now + Duration::from_millis(200)));
    assert_eq!(sc.due_writes(now + secs(1)).len(), 5);
}
