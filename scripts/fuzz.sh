#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ one after another, each for a bounded time, and prints
# executions, time and crashes per target. Not part of CI's default path (CI replays the seed
# corpora instead: `cargo test -p fabrik-fuzz-targets`).
#
#   scripts/fuzz.sh                       # every target, FUZZ_SECONDS (default 60) each
#   FUZZ_SECONDS=300 scripts/fuzz.sh patch quantity
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). Only stable Rust is required: RUSTC_BOOTSTRAP=1
# lets it accept the -Z flags cargo-fuzz passes. Environment:
#   FUZZ_SECONDS    seconds per target (default 60)
#   FUZZ_SANITIZER  none (default; the workspace forbids unsafe code, so the run looks for
#                   panics, aborts, stack overflows, timeouts and memory blow-ups) or address
#   FUZZ_NICE       niceness of the fuzzers (default 19: other builds keep the CPU)
#   FUZZ_RSS_MB     memory limit per input, in MiB (default 2048): above it is a crash
#   FUZZ_TIMEOUT    seconds one input may take (default 10): above it is a crash
# New inputs that found coverage are kept in fuzz/corpus-run/<target>/ (ignored by git; the
# committed seeds in fuzz/corpus/<target>/ are only read); crashes are written to
# fuzz/artifacts/<target>/. A crash fixed in the code gets a copy of its input in
# fuzz/regressions/<target>/, which the CI test replays.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT/fuzz"

SECONDS_EACH="${FUZZ_SECONDS:-60}"
SANITIZER="${FUZZ_SANITIZER:-none}"
NICE="${FUZZ_NICE:-19}"
RSS_MB="${FUZZ_RSS_MB:-2048}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi

if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo fuzz list)
fi

# -O: optimised; -a: debug assertions and overflow checks on, as in the test builds.
nice -n "$NICE" cargo fuzz build -O -a -s "$SANITIZER" >&2
BIN_DIR="$ROOT/fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"

LOG_DIR="$(mktemp -d)"
trap 'rm -rf "$LOG_DIR"' EXIT
failed=0
total_execs=0
printf '%-16s %12s %8s %10s %8s %8s\n' target execs seconds execs/s corpus crashes
for t in "${TARGETS[@]}"; do
    work="corpus-run/$t"
    mkdir -p "$work" "artifacts/$t"
    log="$LOG_DIR/$t.log"
    start=$(date +%s)
    rc=0
    # The binary built above, not `cargo fuzz run`: that would rebuild whenever a source file
    # changes while the targets run.
    nice -n "$NICE" "$BIN_DIR/$t" "$work" "corpus/$t" \
        -max_total_time="$SECONDS_EACH" -artifact_prefix="artifacts/$t/" -rss_limit_mb="$RSS_MB" -timeout="$TIMEOUT" \
        -print_final_stats=1 >"$log" 2>&1 || rc=$?
    elapsed=$(( $(date +%s) - start ))
    execs=$(awk '/stat::number_of_executed_units:/ {print $2}' "$log" | tail -1)
    execs="${execs:-0}"
    corpus=$(find "$work" -type f | wc -l)
    crashes=$(find "artifacts/$t" -type f -newermt "@$start" | wc -l)
    rate=$(( execs / (elapsed > 0 ? elapsed : 1) ))
    printf '%-16s %12s %8s %10s %8s %8s\n' "$t" "$execs" "$elapsed" "$rate" "$corpus" "$crashes"
    total_execs=$(( total_execs + execs ))
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        failed=1
        echo "--- $t failed (exit $rc); the end of its log:" >&2
        tail -40 "$log" >&2
    fi
done
echo "total executions: $total_execs"
exit "$failed"
