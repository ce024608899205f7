#!/usr/bin/env bash
# The whole test suite: installs what the tests need (idempotently), checks formatting and
# lints, builds once, then runs every unit, client and end-to-end test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/install-test-deps.sh
export PATH="$root/.tools/bin:$PATH"

# Every cargo feature on (the etcd store backend is the only one): the suite tests it all.
features=(--features control-plane/etcd,fabrik-store/etcd)

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked "${features[@]}" -- -D warnings
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
cargo check --locked -p control-plane --bin fabrik
# The end-to-end tests start the real binaries: build them once, tests find them in target/debug.
cargo build --locked "${features[@]}" -p control-plane --bin fabrik -p node-agent --bin fabrik-node-agent
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked "${features[@]}" --no-fail-fast
else
  cargo test --workspace --locked "${features[@]}" --no-fail-fast
fi
