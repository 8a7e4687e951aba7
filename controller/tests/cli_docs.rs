//! Every `flowmeshctl` example of docs/cli.md, run in document order against the real
//! controller and real Open vSwitch bridges, so the documentation cannot drift from the binary.
//!
//! The conventions (documented at the end of docs/cli.md):
//!
//! * In a fenced code block, a line `$ flowmeshctl ARGS` is run (ARGS split like a shell
//!   would, with `'...'` and `"..."` quoting). The lines after it, up to the next `$ ` line or
//!   the end of the block, are its expected output.
//! * Expected output whose first line starts with `error: ` means the command must exit with
//!   status 1 and print exactly those lines on stderr. Otherwise it must exit 0 and print
//!   exactly those lines on stdout (no lines: no output). A line `...` matches any number of
//!   lines; within a line, `…` matches any text (times, for instance).
//! * `$ cat FILE` followed by lines writes those lines to FILE in the working directory (the
//!   example shows the file, and the test uses it).
//! * An HTML comment `<!-- doc-test: flowmeshctl ARGS -->` (invisible when rendered) runs a
//!   set-up command that must succeed; its output is not checked.
//!
//! The cluster the examples assume: nodes `node-1` (bridge datapath 0xa1, port `veth-web` at
//! ofport 5, `veth-g` at 6) and `node-2` (0x2, port `veth-db` at 7), and a bridge of datapath
//! 0xdead that no node claims, each a bridge of an `OvsSandbox` connected to the controller.

mod support;

use flowmesh_tests::{BridgeSpec, OvsSandbox};
use std::path::Path;
use std::process::{Command, Stdio};
use support::Controller;

/// One step of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A shown example: the command line, its expected output, the line number in the doc.
    Example {
        line: usize,
        args: Vec<String>,
        expect: Vec<String>,
    },
    /// A hidden set-up command.
    Setup { line: usize, args: Vec<String> },
    /// A file the example shows with `cat`.
    File { name: String, text: String },
}

/// Shell-like splitting: whitespace separates words, quotes group.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// The steps of a markdown document, in order.
fn parse(doc: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut in_block = false;
    // The step being collected inside a block: (kind, line, words, lines after it).
    let mut open: Option<(usize, Vec<String>, Vec<String>)> = None;
    let close = |open: &mut Option<(usize, Vec<String>, Vec<String>)>, steps: &mut Vec<Step>| {
        if let Some((line, words, mut body)) = open.take() {
            while body.last().is_some_and(|l| l.trim().is_empty()) {
                body.pop();
            }
            if words.first().map(String::as_str) == Some("cat") {
                let name = words.get(1).cloned().unwrap_or_default();
                let mut text = body.join("\n");
                text.push('\n');
                steps.push(Step::File { name, text });
            } else {
                steps.push(Step::Example {
                    line,
                    args: words[1..].to_vec(),
                    expect: body,
                });
            }
        }
    };
    for (i, raw) in doc.lines().enumerate() {
        let line_no = i + 1;
        if raw.trim_start().starts_with("```") {
            if in_block {
                close(&mut open, &mut steps);
            }
            in_block = !in_block;
            continue;
        }
        if !in_block {
            let t = raw.trim();
            if let Some(cmd) = t
                .strip_prefix("<!-- doc-test:")
                .and_then(|r| r.strip_suffix("-->"))
            {
                let words = split_words(cmd);
                assert_eq!(
                    words.first().map(String::as_str),
                    Some("flowmeshctl"),
                    "docs/cli.md:{line_no}: a doc-test comment runs flowmeshctl"
                );
                steps.push(Step::Setup {
                    line: line_no,
                    args: words[1..].to_vec(),
                });
            }
            continue;
        }
        if let Some(cmd) = raw.strip_prefix("$ ") {
            close(&mut open, &mut steps);
            let words = split_words(cmd);
            match words.first().map(String::as_str) {
                Some("flowmeshctl") | Some("cat") => open = Some((line_no, words, Vec::new())),
                other => panic!("docs/cli.md:{line_no}: unknown example command {other:?}"),
            }
        } else if let Some((_, _, body)) = open.as_mut() {
            body.push(raw.to_string());
        }
    }
    steps
}

/// Whether `got` lines match `want` lines (`...` matches any number of lines).
fn lines_match(want: &[String], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w.trim() == "..." => {
            (0..=got.len()).any(|skip| lines_match(rest, &got[skip..]))
        }
        Some((w, rest)) => got.split_first().is_some_and(|(g, grest)| {
            line_matches(w.trim_end(), g.trim_end()) && lines_match(rest, grest)
        }),
    }
}

/// Whether `got` is `want`, where each `…` in `want` stands for any text.
fn line_matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split('…').collect();
    if parts.len() == 1 {
        return want == got;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !got.starts_with(first) || !got[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &got[first.len()..got.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

fn flowmeshctl(server: &str, dir: &Path, args: &[String]) -> (Option<i32>, String, String) {
    let out = Command::new(flowmesh_tests::bins::flowmeshctl())
        .args(args)
        .current_dir(dir)
        .env("FLOWMESH_SERVER", server)
        .stdin(Stdio::null())
        .output()
        .expect("run flowmeshctl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_parser_follows_the_conventions() {
    let doc = "text\n<!-- doc-test: flowmeshctl node add a --ip 1.2.3.4 --dpid 1 -->\n```\n$ cat f.yaml\nkind: x\n$ flowmeshctl get pods -o 'json'\n[\n]\n\n$ flowmeshctl node delete zz\nerror: delete node \"zz\": no\n```\n```\nnot a command\n```\n";
    let steps = parse(doc);
    assert_eq!(
        steps,
        vec![
            Step::Setup {
                line: 2,
                args: split_words("node add a --ip 1.2.3.4 --dpid 1")
            },
            Step::File {
                name: "f.yaml".into(),
                text: "kind: x\n".into()
            },
            Step::Example {
                line: 6,
                args: split_words("get pods -o json"),
                expect: vec!["[".into(), "]".into()]
            },
            Step::Example {
                line: 10,
                args: split_words("node delete zz"),
                expect: vec!["error: delete node \"zz\": no".into()]
            },
        ]
    );
    let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&w(&["a", "...", "d"]), &["a", "b", "c", "d"]));
    assert!(lines_match(&w(&["a", "..."]), &["a"]));
    assert!(!lines_match(&w(&["a", "d"]), &["a", "b", "d"]));
    assert!(!lines_match(&w(&["a"]), &["a", "b"]));
    assert!(lines_match(
        &w(&["t=… kind=… end"]),
        &["t=12:00 kind=Pod end"]
    ));
    assert!(!lines_match(&w(&["t=… kind=… end"]), &["t=12:00 kind=Pod"]));
    assert!(lines_match(&w(&[]), &[]));
    assert!(!lines_match(&w(&[]), &["x"]));
}

#[test]
fn every_example_of_docs_cli_md_works_as_written() {
    let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md");
    let doc = std::fs::read_to_string(doc_path).expect("read docs/cli.md");
    let steps = parse(&doc);
    let examples = steps
        .iter()
        .filter(|s| matches!(s, Step::Example { .. }))
        .count();
    assert!(
        examples >= 20,
        "only {examples} examples found in docs/cli.md"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let ctl = Controller::start(&dir.path().join("data"), &[]);
    let sbx = OvsSandbox::builder()
        .controller(ctl.target())
        .controller_max_backoff_ms(1000)
        .bridge(BridgeSpec::new("node-1", 0xa1))
        .bridge(BridgeSpec::new("node-2", 0x2))
        .bridge(BridgeSpec::new("spare", 0xdead))
        .start()
        .expect("sandbox");
    for (bridge, port, ofport) in [
        ("node-1", "veth-web", 5),
        ("node-1", "veth-g", 6),
        ("node-2", "veth-db", 7),
    ] {
        sbx.vsctl(&[
            "add-port",
            bridge,
            port,
            "--",
            "set",
            "interface",
            port,
            "type=dummy",
            &format!("ofport_request={ofport}"),
        ])
        .expect("add port");
    }
    // Every bridge connected (as a datapath no node claims yet) and holding its default drop,
    // so the examples do not race the switches' first connection.
    let connected = (|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, out, _) = flowmeshctl(
                &format!("http://{}", ctl.grpc),
                dir.path(),
                &["get".into(), "switches".into(), "-o".into(), "json".into()],
            );
            let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
            let ready = v.as_array().is_some_and(|a| {
                a.len() == 3
                    && a.iter()
                        .all(|s| s["connected"] == true && s["synced"] == true)
            });
            if ready || std::time::Instant::now() > deadline {
                return ready;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })();
    assert!(connected, "the sandbox bridges never connected");
    let server = format!("http://{}", ctl.grpc);
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");

    let mut failures = Vec::new();
    for step in &steps {
        match step {
            Step::File { name, text } => {
                std::fs::write(work.join(name), text).expect("write example file")
            }
            Step::Setup { line, args } => {
                let (code, out, err) = flowmeshctl(&server, &work, args);
                assert_eq!(
                    code,
                    Some(0),
                    "docs/cli.md:{line}: set-up `flowmeshctl {}` failed:\n{out}{err}",
                    args.join(" ")
                );
            }
            Step::Example { line, args, expect } => {
                let (code, out, err) = flowmeshctl(&server, &work, args);
                let wants_error = expect.first().is_some_and(|l| l.starts_with("error: "));
                let (want_code, got) = if wants_error { (1, &err) } else { (0, &out) };
                let got_lines: Vec<&str> = got.lines().collect();
                let ok = code == Some(want_code) && lines_match(expect, &got_lines);
                if !ok {
                    failures.push(format!(
                        "docs/cli.md:{line}: $ flowmeshctl {}\n  exit {code:?} (want {want_code})\n  --- doc says:\n{}\n  --- stdout:\n{out}  --- stderr:\n{err}",
                        args.join(" "),
                        expect.join("\n")
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {examples} examples differ from the binary:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
