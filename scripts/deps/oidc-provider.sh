#!/usr/bin/env bash
# Installs the OpenID Provider the OIDC end-to-end tests run (npm `oidc-provider`, pinned in
# e2e/oidc/package-lock.json) into e2e/oidc/node_modules. Idempotent: does nothing when
# node_modules is newer than the lock file and holds the package; reinstalls it when stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir="$root/e2e/oidc"

say() { printf 'oidc-provider: %s\n' "$*" >&2; }

command -v node >/dev/null 2>&1 || { say "node is not on the PATH (Node.js 20.19 or later is needed)"; exit 1; }
command -v npm >/dev/null 2>&1 || { say "npm is not on the PATH"; exit 1; }

stamp="$dir/node_modules/.package-lock.json"
if [ -f "$stamp" ] && [ -f "$dir/node_modules/oidc-provider/package.json" ] \
  && [ ! "$dir/package-lock.json" -nt "$stamp" ] && [ ! "$dir/package.json" -nt "$stamp" ]; then
  exit 0
fi

say "installing into e2e/oidc/node_modules (npm ci)"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
node -e "import('$dir/node_modules/oidc-provider/lib/index.js').then(() => process.exit(0), (e) => { console.error(e); process.exit(1); })"
say "ok: oidc-provider $(node -p "require('$dir/node_modules/oidc-provider/package.json').version")"
