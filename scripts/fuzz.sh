#!/usr/bin/env bash
# Runs every cargo-fuzz target (fuzz/Cargo.toml) for SECONDS each (default 30), seeded from
# fuzz/seeds/<target>, and prints each target's executions and whether it crashed; exits 1 on
# any crash (the input is kept in fuzz/artifacts/<target>/).
#
# Works on the stable toolchain: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its nightly flags.
# Installs cargo-fuzz from crates.io when it is missing. No sanitizer (`-s none`): the
# workspace forbids unsafe code, so what fuzzing finds is panics, overflows (debug
# assertions are on) and hangs; that also keeps the build small enough for CI.
#
#   bash scripts/fuzz.sh 30            # every target, 30 s each
#   bash scripts/fuzz.sh 60 fuzz_cni   # one target
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_INCREMENTAL=0
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked --quiet
fi
# The build directory may live outside the checkout (FLOWMESH_FUZZ_TARGET) so CI runs on the
# same machine reuse it.
target_dir="${FLOWMESH_FUZZ_TARGET:-fuzz/target}"
flags=(--fuzz-dir fuzz -s none --debug-assertions --target-dir "$target_dir")
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi
t0=$(date +%s)
cargo fuzz build "${flags[@]}" >&2
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - t0 )) s" >&2
crashed=0
summary=()
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    mkdir -p "$corpus" "fuzz/artifacts/$t"
    seeds=()
    [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
    log=$(mktemp)
    set +e
    cargo fuzz run "${flags[@]}" "$t" "$corpus" "${seeds[@]}" -- \
        -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=4096 -timeout=10 \
        -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        summary+=("$t: ${execs:-?} executions in ${secs} s, no crash")
    else
        crashed=$((crashed + 1))
        summary+=("$t: CRASHED after ${execs:-?} executions (exit $rc); see fuzz/artifacts/$t/")
        tail -40 "$log" >&2
    fi
    rm -f "$log"
done
printf 'fuzz: %s\n' "${summary[@]}"
echo "fuzz: ${#targets[@]} targets, $crashed crashed"
[ "$crashed" -eq 0 ]
