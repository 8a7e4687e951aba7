//! The locally built flowmesh image (`scripts/images.sh`, no registry or container engine)
//! and `deploy/Containerfile` (how users with a registry build it) install the same Debian
//! packages and copy the same binaries: compared statically, from the two files' text.

use std::collections::BTreeSet;
use std::path::PathBuf;

fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The Containerfile with its backslash continuations joined into single lines.
fn containerfile_lines() -> Vec<String> {
    let text = repo_file("deploy/Containerfile");
    let mut lines = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    lines
}

/// Packages of the runtime stage's `apt-get install` (the last stage: after the last FROM).
fn containerfile_packages() -> BTreeSet<String> {
    let lines = containerfile_lines();
    let last_from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM line");
    let install = lines[last_from..]
        .iter()
        .find(|l| l.starts_with("RUN ") && l.contains("apt-get install"))
        .expect("the runtime stage installs packages");
    let after = install.split("apt-get install").nth(1).expect("install");
    let words = after.split("&&").next().unwrap_or_default();
    words
        .split_whitespace()
        .filter(|w| !w.starts_with('-'))
        .map(str::to_string)
        .collect()
}

/// Names of the binaries the runtime stage copies from the build stage into /usr/local/bin/.
fn containerfile_binaries() -> BTreeSet<String> {
    let lines = containerfile_lines();
    let copy = lines
        .iter()
        .find(|l| l.starts_with("COPY --from=build") && l.trim_end().ends_with("/usr/local/bin/"))
        .expect("a COPY --from=build ... /usr/local/bin/ line");
    copy.split_whitespace()
        .skip(2)
        .filter(|w| w.contains("/release/"))
        .map(|w| w.rsplit('/').next().unwrap_or(w).to_string())
        .collect()
}

/// `readonly NAME="a b c"` of scripts/images.sh as a set of words.
fn images_sh_list(name: &str) -> BTreeSet<String> {
    let text = repo_file("scripts/images.sh");
    let prefix = format!("readonly {name}=\"");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("scripts/images.sh has no {prefix}...\" line"));
    line.trim_end_matches('"')
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn local_image_installs_the_containerfile_packages() {
    let containerfile = containerfile_packages();
    let local = images_sh_list("FLOWMESH_PACKAGES");
    assert!(!containerfile.is_empty());
    assert_eq!(
        local, containerfile,
        "scripts/images.sh FLOWMESH_PACKAGES must equal deploy/Containerfile's apt-get install list"
    );
}

#[test]
fn local_image_copies_the_containerfile_binaries() {
    let containerfile = containerfile_binaries();
    let local = images_sh_list("FLOWMESH_BINARIES");
    assert_eq!(
        containerfile,
        BTreeSet::from(
            [
                "flowmesh-controller",
                "flowmeshctl",
                "flowmesh-shim",
                "flowmesh-cni"
            ]
            .map(String::from)
        )
    );
    assert_eq!(
        local, containerfile,
        "scripts/images.sh FLOWMESH_BINARIES must equal the binaries deploy/Containerfile copies"
    );
}

#[test]
fn local_image_is_the_one_the_manifests_name() {
    let text = repo_file("scripts/images.sh");
    let local_ref = text
        .lines()
        .find_map(|l| l.strip_prefix("readonly FLOWMESH_REF="))
        .expect("FLOWMESH_REF");
    for file in [
        "deploy/kubernetes/30-controller.yaml",
        "deploy/kubernetes/40-node.yaml",
    ] {
        let manifest = repo_file(file);
        let images: BTreeSet<&str> = manifest
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: "))
            .collect();
        assert_eq!(images, BTreeSet::from([local_ref]), "{file}");
    }
    // And the Containerfile's own usage line builds that tag.
    assert!(repo_file("deploy/Containerfile").contains(&format!("-t {local_ref} ")));
}

/// The image's tools are the packages the tests run the shim with on the host
/// (`scripts/deps.sh`), so the flags the shim passes are the ones tested: `arping` is Debian's
/// `arping` package (`arping -U -S IP`); `iputils-arping`'s flags differ (with it, every
/// gratuitous ARP of an egress IP failed, exit status 2, and an outside host kept sending to
/// the old holder until its neighbour entry expired: a 9.5 s failover on the real cluster).
#[test]
fn the_image_installs_the_tools_the_shim_is_tested_with() {
    let text = repo_file("scripts/deps.sh");
    let start = text.find("pkgs=(").expect("deps.sh's pkgs=(...) list") + "pkgs=(".len();
    let end = start + text[start..].find(')').expect("the list's end");
    let host: BTreeSet<String> = text[start..end]
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let image = containerfile_packages();
    // Certificates are no tool; everything else the image installs the host tests run with.
    let untested: Vec<&String> = image
        .iter()
        .filter(|p| *p != "ca-certificates" && !host.contains(*p))
        .collect();
    assert!(
        untested.is_empty(),
        "the image installs {untested:?}, which scripts/deps.sh does not give the tests"
    );
    assert!(image.contains("arping"), "{image:?}");
}
