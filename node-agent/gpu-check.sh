#!/usr/bin/env bash
# gpu-check.sh — read-only GPU discovery for a Fabrik GPU node, through nvidia-smi (NVML).
#
# Prints: driver and CUDA versions; every GPU (index, UUID, model, memory, PCI bus id,
# MIG mode current/pending, persistence mode, temperature); ECC mode and error counters
# (volatile and aggregate, corrected and uncorrected); retired / remapped rows where
# supported; the MIG devices present; the GPU/NIC topology matrix (`nvidia-smi topo -m`)
# and NVLink status.
#
# It only queries. It never enables or disables MIG, creates or destroys MIG instances,
# resets a GPU, or changes clocks, power or persistence mode.
#
# Exit status: 0 when GPUs were found and queried; 2 when nvidia-smi is missing; 3 when the
# driver / NVML cannot be reached or no GPU is visible.
set -u

say() { printf '%s\n' "$*"; }
section() { printf '\n== %s ==\n' "$*"; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
  say "gpu-check: nvidia-smi not found: no NVIDIA driver is installed on this machine (or it is not on PATH)" >&2
  exit 2
fi

if ! list=$(nvidia-smi -L 2>&1); then
  say "gpu-check: nvidia-smi cannot talk to the driver (NVML): $list" >&2
  exit 3
fi
if ! printf '%s\n' "$list" | grep -q '^GPU '; then
  say "gpu-check: the driver answers but no GPU is visible: $list" >&2
  exit 3
fi

# A query that fails (field unsupported on this GPU or driver) is reported, not fatal.
q() {
  local title=$1; shift
  section "$title"
  nvidia-smi "$@" 2>&1 || say "(not available: nvidia-smi $* exited $?)"
}

section "driver"
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n1 | sed 's/^/driver: /'
nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n1

q "GPUs" --query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current,mig.mode.pending,persistence_mode,temperature.gpu --format=csv
q "ECC mode and error counters" --query-gpu=index,ecc.mode.current,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total --format=csv
q "remapped rows" --query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv
q "GPUs and MIG devices (nvidia-smi -L)" -L
q "topology (nvidia-smi topo -m)" topo -m
q "NVLink status" nvlink --status
exit 0
