//! Golden files: the complete flow table of every node of a small fixed cluster, one file per
//! mode and node, in the canonical text `ovs-ofctl -O OpenFlow13 dump-flows --no-stats` prints
//! (leading space dropped, lines sorted bytewise). A pipeline change shows up as a diff of
//! these files; `FLOWMESH_REGEN=1 cargo test -p topology --test golden` rewrites them, and the
//! diff is what gets reviewed. `flowmesh-tests`' `pipeline_ovs` installs every file into a real
//! Open vSwitch and checks that it reads back byte for byte.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use topology::model::PodAttach;
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Pipeline};

const REGEN_VAR: &str = "FLOWMESH_REGEN";

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Two nodes; namespaces `default` (global), `alpha`, `beta`, `gamma` (joined to `alpha` in
/// multitenant mode); four pods.
fn cluster(mode: Mode) -> ClusterModel {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        mode,
    );
    let mut m = ClusterModel::new(config).expect("model");
    m.add_node("node1", Ipv4Addr::new(192, 168, 10, 1), 1)
        .expect("node1");
    m.add_node("node2", Ipv4Addr::new(192, 168, 10, 2), 2)
        .expect("node2");
    for ns in ["default", "alpha", "beta", "gamma"] {
        m.add_namespace(ns).expect("namespace");
    }
    if mode == Mode::Multitenant {
        m.join(&["gamma"], "alpha").expect("join");
    }
    for (ns, name, node, ofport) in [
        ("default", "dns", "node1", 3),
        ("alpha", "app", "node1", 4),
        ("beta", "db", "node2", 3),
        ("gamma", "web", "node2", 5),
    ] {
        m.add_pod(PodAttach {
            namespace: ns,
            name,
            node,
            port_name: name,
            ofport,
        })
        .expect("pod");
    }
    m
}

/// The canonical text of one node's flows: one dump-flows line each, sorted bytewise.
fn canonical(m: &ClusterModel, p: &mut Pipeline, node: &str) -> String {
    let fs = p.node_flows(m, node).expect("flows");
    let mut lines: Vec<String> = fs.iter().map(|f| f.to_string()).collect();
    lines.sort();
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Lines only in `a`, prefixed with `mark`.
fn only_in(a: &str, b: &str, mark: char) -> Vec<String> {
    let other: BTreeSet<&str> = b.lines().collect();
    a.lines()
        .filter(|l| !other.contains(l))
        .map(|l| format!("{mark} {l}"))
        .collect()
}

fn check_scenario(scenario: &str, mode: Mode) {
    let m = cluster(mode);
    let mut p = Pipeline::new();
    let regen = std::env::var_os(REGEN_VAR).is_some_and(|v| v == "1");
    let dir = golden_dir();
    let mut failures = Vec::new();
    let mut expected_files = BTreeSet::new();
    for n in m.nodes() {
        let file = format!("{scenario}-{}.flows", n.name);
        let path = dir.join(&file);
        expected_files.insert(file.clone());
        let got = canonical(&m, &mut p, &n.name);
        if regen {
            std::fs::create_dir_all(&dir).expect("create golden dir");
            std::fs::write(&path, &got).expect("write golden file");
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == got => {}
            Ok(want) => {
                let mut diff = only_in(&want, &got, '-');
                diff.extend(only_in(&got, &want, '+'));
                failures.push(format!(
                    "{file}: computed flows differ from the golden file (- golden, + computed):\n{}",
                    diff.join("\n")
                ));
            }
            Err(e) => failures.push(format!("{file}: {e}")),
        }
    }
    // A golden file of this scenario that no node produces any more is stale.
    let prefix = format!("{scenario}-");
    for entry in std::fs::read_dir(&dir).expect("golden dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(".flows") && !expected_files.contains(&name)
        {
            if regen {
                std::fs::remove_file(entry.path()).expect("remove stale golden file");
            } else {
                failures.push(format!("{name}: stale golden file (no such node)"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change is intended: {REGEN_VAR}=1 cargo test -p topology --test golden, then review `git diff topology/tests/golden`.",
        failures.join("\n\n")
    );
}

#[test]
fn subnet_flows_match_the_golden_files() {
    check_scenario("subnet", Mode::Subnet);
}

#[test]
fn multitenant_flows_match_the_golden_files() {
    check_scenario("multitenant", Mode::Multitenant);
}

#[test]
fn golden_text_is_stable_across_recomputation() {
    // The same model computed by a fresh and by a warm pipeline gives the same text.
    let m = cluster(Mode::Multitenant);
    let mut warm = Pipeline::new();
    let first = canonical(&m, &mut warm, "node1");
    let again = canonical(&m, &mut warm, "node1");
    let fresh = canonical(&m, &mut Pipeline::new(), "node1");
    assert_eq!(first, again);
    assert_eq!(first, fresh);
}
