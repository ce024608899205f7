#!/usr/bin/env bash
# The whole test suite: installs what the tests need (idempotently), checks formatting and
# lints, builds once, then runs every unit, client and end-to-end test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# A clean build takes about 2.9 GB under target/debug: say so up front where less is free,
# rather than fail later inside a linker.
free_kib=$(df -Pk "$root" 2>/dev/null | awk 'NR == 2 {print $4}') || free_kib=""
if [ -n "$free_kib" ] && [ "$free_kib" -lt $((3 * 1024 * 1024)) ] && [ ! -d target/debug/deps ]; then
  echo "test.sh: only $((free_kib / 1024)) MiB free here; a clean build of the suite needs about 3 GiB" >&2
fi

scripts/install-test-deps.sh
export PATH="$root/.tools/bin:$PATH"

# A clean build (CI's) gains nothing from incremental state; it only costs disk.
export CARGO_INCREMENTAL=0

# Every cargo feature on (the etcd store backend is the only one): the suite tests it all.
features=(--features control-plane/etcd,fabrik-store/etcd)

cargo fmt --all -- --check
# Lints see the benchmark binaries too (built only on request: the `bench` feature of e2e).
cargo clippy --workspace --all-targets --locked --features control-plane/etcd,fabrik-store/etcd,e2e/bench -- -D warnings
# The quick start builds without the etcd feature, on a machine with nothing but Rust: keep
# what needs `protoc` (etcd-client's build script) out of the default build.
needs_protoc() { cargo tree --locked -p control-plane -e normal,build -i prost-build "$@" >/dev/null 2>&1; }
if ! needs_protoc --features etcd; then
  echo "test.sh: cannot find prost-build under control-plane's etcd feature; update this check" >&2
  exit 1
fi
if needs_protoc; then
  echo "test.sh: the default build of control-plane needs protoc (prost-build); keep it behind the etcd feature" >&2
  exit 1
fi
# The quick start on a fresh machine: the default build runs no protoc (PROTOC points nowhere,
# so a build script that wanted it fails here), and what it builds starts `fabrik up`.
PROTOC=/nonexistent/protoc cargo build --locked -p control-plane --bin fabrik
scripts/smoke-up.sh target/debug/fabrik
# Every test, and the binaries the end-to-end tests start (they find them in target/debug), in
# one build: one feature resolution, the tests' dev-dependencies included, so the test run below
# rebuilds nothing (a separate build of the binaries alone resolved features differently and
# compiled every crate under them twice).
cargo build --locked --workspace --tests --bins "${features[@]}"
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked "${features[@]}" --no-fail-fast || status=$?
else
  cargo test --workspace --locked "${features[@]}" --no-fail-fast || status=$?
fi
# The build's footprint, for whoever sizes the CI machine's disk.
du -sh target 2>/dev/null || true
exit "$status"
