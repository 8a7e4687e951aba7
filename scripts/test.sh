#!/usr/bin/env bash
# The whole flowmesh test suite: system packages, format check, every test of every crate
# (unit, codec oracle, real Open vSwitch sandbox, network-namespace end to end).
# Needs root: the tests create network namespaces and run their own Open vSwitch daemons.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "flowmesh tests need root (network namespaces, private Open vSwitch daemons)." >&2
    echo "run: sudo bash scripts/test.sh" >&2
    exit 1
fi
bash scripts/deps.sh
cargo fmt --all -- --check
cargo build --workspace --all-targets --locked
# Tests that run the binaries (controller, shim, CNI plugin) find them here, already built.
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
export FLOWMESH_BIN_DIR="${FLOWMESH_BIN_DIR:-$target_dir/debug}"
export FLOWMESH_SHIM_BIN_DIR="${FLOWMESH_SHIM_BIN_DIR:-$FLOWMESH_BIN_DIR}"
export FLOWMESH_CONTROLLER_BIN_DIR="${FLOWMESH_CONTROLLER_BIN_DIR:-$FLOWMESH_BIN_DIR}"
cargo test --workspace --locked -- --test-threads="${FLOWMESH_TEST_THREADS:-4}"
