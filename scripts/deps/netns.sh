#!/usr/bin/env bash
# Installs what the node agent's tenant-network tests (node-agent/tests/tenant_networks.rs)
# need, idempotently:
#   ip     Debian iproute2: network namespaces, veth, bridge and vxlan devices
#   ping   Debian iputils-ping: the reachability checks between "pod" namespaces
# The tests themselves need root (CI runs as root); nothing is started here.
# Does nothing when both are already installed.
set -euo pipefail

say() { printf 'deps/netns: %s\n' "$*" >&2; }

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)

if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || { say "missing ${missing[*]} and no apt-get to install them"; exit 1; }
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing ${missing[*]} (Debian packages)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

ip -V >/dev/null
ping -V >/dev/null
say "ok: $(ip -V), $(ping -V | head -n1)"
