//! Shared helpers of the message oracle and capture tests: run Open vSwitch's own decoder
//! (`ovs-ofctl ofp-print` / `ofp-parse`) and read the captured messages.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// Markers that show `ovs-ofctl` could not decode what it was given (its exit status is 0
/// even then).
const FAILURE_MARKERS: &[&str] = &["decode error", "truncated", "|WARN|", "|ERR|", "only uses"];

fn ovs_ofctl() -> &'static str {
    let ok = Command::new("ovs-ofctl")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "ovs-ofctl (Open vSwitch 3.1) is required for the oracle tests: apt-get install openvswitch-switch"
    );
    "ovs-ofctl"
}

fn text_of(out: std::process::Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

/// OVS's rendering of one message (stdout and stderr).
pub fn ovs_print(bytes: &[u8]) -> String {
    let out = Command::new(ovs_ofctl())
        .arg("ofp-print")
        .arg(hex(bytes))
        .output()
        .expect("run ovs-ofctl ofp-print");
    text_of(out)
}

/// OVS's rendering of one message, split into (stdout, stderr): the text, and its log lines
/// (which may carry multi-line hex dumps of their own).
pub fn ovs_print_split(bytes: &[u8]) -> (String, String) {
    let out = Command::new(ovs_ofctl())
        .arg("ofp-print")
        .arg(hex(bytes))
        .output()
        .expect("run ovs-ofctl ofp-print");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// OVS's rendering of a stream of messages (via `ofp-parse FILE`).
pub fn ovs_parse_stream(bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("flowmesh-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("stream-{}.bin", bytes.len()));
    std::fs::write(&file, bytes).expect("write stream");
    let out = Command::new(ovs_ofctl())
        .arg("ofp-parse")
        .arg(&file)
        .output()
        .expect("run ovs-ofctl ofp-parse");
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir(&dir);
    text_of(out)
}

/// OVS's text without its log lines (`...|ofp_bundle|WARN|...` on stderr).
pub fn strip_log(text: &str) -> String {
    text.lines()
        .filter(|l| !(l.contains("|WARN|") || l.contains("|ERR|") || l.contains("|INFO|")))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// True when OVS complained about the bytes.
pub fn ovs_failed(text: &str) -> bool {
    FAILURE_MARKERS.iter().any(|m| text.contains(m))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Directory of the captured messages.
pub fn capture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/msg")
}

/// The messages of one capture file (one hex message per line).
pub fn capture(name: &str) -> Vec<Vec<u8>> {
    let path = capture_dir().join(format!("{name}.hex"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| ofproto::parse_hex(l).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect()
}

/// Every capture file name (without `.hex`).
pub fn capture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(capture_dir())
        .expect("capture dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".hex").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// Assert that flowmesh's text equals OVS's, showing the first differing line.
pub fn assert_same_text(what: &str, ours: &str, theirs: &str) {
    if ours == theirs {
        return;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), theirs.lines().collect());
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).copied(), b.get(i).copied());
        if x != y {
            panic!(
                "{what}: text differs at line {}:\n  ours: {x:?}\n  ovs:  {y:?}\n--- ours ---\n{ours}--- ovs ---\n{theirs}",
                i + 1
            );
        }
    }
    panic!("{what}: text differs in whitespace:\n{ours:?}\n{theirs:?}");
}
