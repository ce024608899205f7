#!/usr/bin/env bash
# The whole test suite: installs what the tests need (idempotently), checks formatting and
# lints, builds once, then runs every unit, client and end-to-end test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/install-test-deps.sh
export PATH="$root/.tools/bin:$PATH"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The end-to-end tests start the real binaries: build them once, tests find them in target/debug.
cargo build --locked -p control-plane --bin fabrik -p node-agent --bin fabrik-node-agent
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
