//! The workspace builds on a machine with only Debian and the Rust toolchain: no system
//! `protoc`. Our two protobuf crates (`proto`, `etcd-rpc`) compile their files with protox;
//! no other crate in the build may generate code from .proto files (their build scripts call
//! protoc).

use std::path::PathBuf;
use std::process::Command;

/// Build-time code generators that run a system protoc.
const PROTOC_GENERATORS: &[&str] = &["prost-build", "tonic-build", "tonic-prost-build"];

/// The workspace crates that may use a generator: they hand it protox's descriptors.
const PROTOX_CRATES: &[&str] = &["proto", "etcd-rpc"];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(env!("CARGO"));
    c.current_dir(workspace_root());
    c
}

/// The host's target triple, as rustc names it.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let out = Command::new(rustc).arg("-vV").output().expect("rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

#[test]
fn only_protox_crates_generate_code_from_protobuf() {
    // Only this platform's packages: a fresh CARGO_HOME has downloaded no Windows crates, and
    // --offline must not need them.
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host_triple()])
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata json");
    let name_of = |id: &str| -> String {
        meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["id"].as_str() == Some(id))
            .and_then(|p| p["name"].as_str())
            .unwrap_or(id)
            .to_string()
    };
    let mut users = Vec::new();
    for node in meta["resolve"]["nodes"].as_array().into_iter().flatten() {
        for dep in node["deps"].as_array().into_iter().flatten() {
            let dep_name = name_of(dep["pkg"].as_str().unwrap_or_default());
            let at_build = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].as_str() == Some("build"));
            if at_build && PROTOC_GENERATORS.contains(&dep_name.as_str()) {
                users.push((name_of(node["id"].as_str().unwrap_or_default()), dep_name));
            }
        }
    }
    assert!(
        users.iter().any(|(u, _)| u == "proto"),
        "the check sees no generator at all: {users:?}"
    );
    let foreign: Vec<_> = users
        .iter()
        .filter(|(u, _)| !PROTOX_CRATES.contains(&u.as_str()))
        .collect();
    assert!(
        foreign.is_empty(),
        "crates whose build scripts generate protobuf code (and so need a system protoc): {foreign:?}"
    );
}

#[test]
fn the_protobuf_crates_build_with_a_protoc_that_fails() {
    // Our own target directory (target/debug/deps/<this test> → target), a folder of its
    // own inside it so the build scripts run afresh.
    let exe = std::env::current_exe().expect("test path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("target directory")
        .join("no-protoc");
    let tmp = tempfile::tempdir().expect("tempdir");
    let marker = tmp.path().join("protoc-was-run");
    let fake = tmp.path().join("protoc");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\necho 'protoc must not be needed' >&2\nexit 1\n",
            marker.display()
        ),
    )
    .expect("fake protoc");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Clean the two crates so their build scripts run now, under the failing protoc.
    let clean = cargo()
        .args([
            "clean",
            "--offline",
            "-p",
            "proto",
            "-p",
            "etcd-rpc",
            "--target-dir",
        ])
        .arg(&target)
        .output()
        .expect("cargo clean");
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let out = cargo()
        .args([
            "build",
            "--locked",
            "--offline",
            "-p",
            "proto",
            "-p",
            "etcd-rpc",
            "--target-dir",
        ])
        .arg(&target)
        .env("PROTOC", &fake)
        .env("PROTOC_INCLUDE", tmp.path().join("no-include"))
        // A `protoc` found on the PATH is the failing one too.
        .env(
            "PATH",
            format!(
                "{}:{}",
                tmp.path().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .expect("cargo build");
    assert!(
        out.status.success(),
        "building without protoc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !marker.exists(),
        "a build script ran protoc: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
}
