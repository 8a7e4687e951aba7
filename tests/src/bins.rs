//! flowmesh's own binaries for tests: taken from a directory named by an environment variable
//! (`scripts/test.sh` sets them after its build), or built once per test process with a nested
//! `cargo build` into the test's own target directory (a no-op when they are fresh).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::command_line;

/// The directory holding every binary in `names`: `$env_var` if set (it must hold them),
/// else the test's profile directory after `cargo build <build_args>` (quiet, same profile).
pub fn locate_or_build(
    env_var: &str,
    build_args: &[&str],
    names: &[&str],
) -> std::result::Result<PathBuf, String> {
    let all_in = |d: &Path| names.iter().all(|n| d.join(n).is_file());
    if let Some(dir) = std::env::var_os(env_var) {
        let dir = PathBuf::from(dir);
        return if all_in(&dir) {
            Ok(dir)
        } else {
            Err(format!("{env_var}={dir:?} lacks {}", names.join("/")))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let profile_dir = profile_dir_of(&exe)
        .ok_or_else(|| format!("unexpected test executable path {}", exe.display()))?;
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("unexpected profile dir {}", profile_dir.display()))?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("Cargo.toml"))
        .ok_or("no workspace root")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet"])
        .args(build_args)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    clean_cargo_env(&mut cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", command_line(&cmd)))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            command_line(&cmd),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if all_in(profile_dir) {
        Ok(profile_dir.to_path_buf())
    } else {
        Err(format!(
            "built {} but found no binaries in {}",
            names.join("/"),
            profile_dir.display()
        ))
    }
}

/// The profile directory (`<target>/<profile>`) of an executable cargo built: a test lives in
/// its `deps/`, a binary such as `flowmesh-bench` in the profile directory itself.
pub fn profile_dir_of(exe: &Path) -> Option<&Path> {
    let dir = exe.parent()?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent()
    } else {
        Some(dir)
    }
}

/// Removes the variables `cargo test` sets for a test process (`CARGO_PKG_*`,
/// `CARGO_MANIFEST_DIR`, `OUT_DIR`, ...) from a nested `cargo build`: build scripts such as
/// ring's declare `rerun-if-env-changed` on them, so inheriting them would rebuild those crates
/// here and again in the next ordinary `cargo test`.
pub fn clean_cargo_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let set_by_cargo_for_tests = k == "OUT_DIR"
            || k == "CARGO_MANIFEST_DIR"
            || k == "CARGO_MANIFEST_PATH"
            || k == "CARGO_MANIFEST_LINKS"
            || k == "CARGO_CRATE_NAME"
            || k == "CARGO_PRIMARY_PACKAGE"
            || k == "CARGO_TARGET_TMPDIR"
            || k == "CARGO_RUSTC_CURRENT_DIR"
            || k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_BIN_");
        if set_by_cargo_for_tests {
            cmd.env_remove(k);
        }
    }
}

/// `flowmeshctl` (its own crate, so not a `CARGO_BIN_EXE_*` of the controller's tests):
/// `$FLOWMESH_BIN_DIR/flowmeshctl` if set, else built once with `cargo build -p flowmeshctl`.
pub fn flowmeshctl() -> PathBuf {
    static CTL: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
        std::sync::OnceLock::new();
    let dir = CTL.get_or_init(|| {
        locate_or_build(
            "FLOWMESH_BIN_DIR",
            &["-p", "flowmeshctl", "--bin", "flowmeshctl"],
            &["flowmeshctl"],
        )
    });
    match dir {
        Ok(d) => d.join("flowmeshctl"),
        Err(e) => panic!("flowmeshctl: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::profile_dir_of;
    use std::path::Path;

    #[test]
    fn tests_and_binaries_find_their_profile_directory() {
        assert_eq!(
            profile_dir_of(Path::new("/t/debug/deps/e2e_ha-0123abcd")),
            Some(Path::new("/t/debug"))
        );
        // flowmesh-bench is a binary of the profile directory, not of deps/: its nested build
        // must not go to the target directory's parent.
        assert_eq!(
            profile_dir_of(Path::new("/t/release/flowmesh-bench")),
            Some(Path::new("/t/release"))
        );
    }
}
