#!/usr/bin/env bash
# Starts `fabrik up` from the given binary on a fresh data directory and a free port, waits for
# its admin kubeconfig and for the host to answer, then stops it. Fails with the server's log.
set -euo pipefail
bin=${1:?usage: smoke-up.sh FABRIK_BINARY}
dir=$(mktemp -d)
log="$dir/fabrik.log"
"$bin" up --data-dir "$dir/data" --listen 127.0.0.1:0 --nodes 0 >"$log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 1 600); do
  if [ -s "$dir/data/host.kubeconfig" ]; then
    if "${KUBECTL:-kubectl-1.35}" --kubeconfig "$dir/data/host.kubeconfig" get namespaces >/dev/null 2>&1; then
      echo "smoke-up: fabrik up from $bin served its host"
      exit 0
    fi
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "smoke-up: fabrik up exited:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "smoke-up: fabrik up did not serve within 60 s:" >&2
cat "$log" >&2
exit 1
