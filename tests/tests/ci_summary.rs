//! The suite's summary (`scripts/test.sh --summary-of LOG`): what CI prints at the end of a
//! run, often the only part of the output a reader of a failed run gets. Fed cargo test
//! output as libtest writes it.

use std::path::PathBuf;
use std::process::Command;

fn summary_of(log: &str) -> (String, bool) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cargo-test.log");
    std::fs::write(&path, log).expect("write log");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/test.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--summary-of")
        .arg(&path)
        .output()
        .expect("run bash");
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).expect("utf-8"),
        out.status.success(),
    )
}

const PASSING: &str = "     Running tests/a.rs (/t/debug/deps/a-0123abcd)

running 2 tests
test one ... ok
test two ... ok

test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

";

const FAILING: &str = "     Running tests/controller_kube.rs (/t/debug/deps/controller_kube-ea1b0c252fd8eb0d)

running 3 tests
test a_refused_change_is_not_a_store_outage ... FAILED
test other ... ok
test third ... FAILED

failures:

---- a_refused_change_is_not_a_store_outage stdout ----

thread 'a_refused_change_is_not_a_store_outage' (8382) panicked at controller/tests/controller_kube.rs:1633:10:
the next attach is not refused for the one before it: Status { code: Aborted }
stack backtrace:
   0: __rustc::rust_begin_unwind
thread 'a_refused_change_is_not_a_store_outage' (8382) panicked at library/core/src/x.rs:1:1:
a second panic, not the cause
---- third stdout ----
a line the test printed

failures:
    a_refused_change_is_not_a_store_outage
    third

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 47.51s

     Running tests/crashed.rs (/t/debug/deps/crashed-99aa)

running 1 test
";

#[test]
fn a_passing_run_is_counted_and_exits_zero() {
    let (out, ok) = summary_of(PASSING);
    assert!(ok, "{out}");
    assert_eq!(out, "2 passed, 0 failed, 1 skipped\n");
}

#[test]
fn a_failed_test_is_named_with_where_and_why_it_panicked() {
    let (out, ok) = summary_of(&format!("{PASSING}{FAILING}"));
    assert!(!ok, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "FAILED controller_kube: a_refused_change_is_not_a_store_outage (panicked at \
             controller/tests/controller_kube.rs:1633:10: the next attach is not refused for \
             the one before it: Status { code: Aborted })",
            "FAILED controller_kube: third",
            "FAILED crashed: ended without a test result (crashed or killed)",
            "3 passed, 3 failed, 1 skipped",
        ],
        "{out}"
    );
}

/// A thread that is not a test panicked (its lines go to stderr, mixed with libtest's): the
/// line after it is libtest's own and still counts.
#[test]
fn a_panic_line_from_another_thread_does_not_swallow_libtests_next_line() {
    let log = "     Running tests/b.rs (/t/debug/deps/b-0a1b)

running 1 test
test one ... ok
thread 'tokio-rt-worker' (13943) panicked at ofproto/src/x.rs:1:1:
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

";
    let (out, ok) = summary_of(log);
    assert!(ok, "{out}");
    assert_eq!(out, "1 passed, 0 failed, 0 skipped\n");
}
