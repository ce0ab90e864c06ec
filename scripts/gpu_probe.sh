#!/usr/bin/env bash
# scripts/gpu_probe.sh: the probe stage of scripts/gpu_check.sh under its own name: the environment (device,
# driver, nvcc, NCCL location and version, MPI), the ceilings (copy bandwidth, cuBLASLt bf16/fp8 GEMM) and
# nccl_ranks with 2 and 4 ranks on the one GPU. Raw output in DIR/probe.log and DIR/ceilings.json.
#   usage: scripts/gpu_probe.sh [--quick] [--out DIR] [--kit DIR]   (scripts/gpu_check.sh probe --help)
set -u
for a in "$@"; do
    case "$a" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
done
exec bash "$(dirname "$0")/gpu_check.sh" probe "$@"
