#!/usr/bin/env bash
# Installs what the etcd store backend and its tests need, idempotently:
#   etcd, etcdctl  Debian etcd-server and etcd-client (etcd 3.4): the store tests start their
#                  own members on loopback ports, nothing is started here
#   protoc         Debian protobuf-compiler and libprotobuf-dev (the well-known types, e.g.
#                  google/protobuf/descriptor.proto, that etcd's .proto files import): the
#                  etcd-client crate compiles those files in its build script, so every build of
#                  the workspace needs them
# Does nothing when all of them are already installed.
set -euo pipefail

say() { printf 'deps/etcd: %s\n' "$*" >&2; }

missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)

if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || { say "missing ${missing[*]} and no apt-get to install them"; exit 1; }
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing ${missing[*]} (Debian packages)"
  "${sudo[@]}" apt-get update -qq
  # The etcd-server package must not start a system-wide etcd: tests start their own.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

etcd --version >/dev/null
etcdctl version >/dev/null 2>&1 || ETCDCTL_API=3 etcdctl version >/dev/null
protoc --version >/dev/null
[ -e /usr/include/google/protobuf/descriptor.proto ]
say "ok: $(etcd --version | head -n1), $(protoc --version)"
