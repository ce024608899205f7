#!/usr/bin/env bash
# Installs what the real-host test (e2e/tests/real_host.rs) needs, idempotently:
#   zstd  Debian zstd: the test harness decompresses the Kubernetes control-plane builds in
#         shared/k8s/bin/*.zst beside the repository with it, once, into target/k8s-bin/
#         (unless FABRIK_K8S_BIN_DIR names a directory with plain binaries)
# etcd comes from deps/etcd.sh. Does nothing when zstd is installed.
set -euo pipefail

say() { printf 'deps/zstd: %s\n' "$*" >&2; }

if ! command -v zstd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { say "missing zstd and no apt-get to install it"; exit 1; }
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing zstd (Debian package)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends zstd >/dev/null
fi

say "ok: $(zstd --version)"
