#!/usr/bin/env bash
# GPU, served path: gateway -> tritonserver (pytriton build) -> torch engine on an H200, beside Triton
# called directly, the engine in-process and the engine alone, dense and mixed workloads (benchmarks/gpu_served.py).
#
# Prepare here first: bash benchmarks/gpu_served_stage.sh (writes .gpucarry/0..N, git-ignored; its header
# gives the calls). Then one device call per part k, within ~30 s of each other, from the sent checkout:
#   run  command: bash .gpucarry/0/code/benchmarks/gpu_served_run.sh   carry: [".gpucarry/0", ".gpucarry/<k>"]
# Each call copies the parts it carries into /tmp/gpustage, checks every staged file against the
# MANIFEST (sha256) and, while parts are missing, names them and stops. Once all are there it merges
# them into /tmp/gpustage/all, installs the wheels into /tmp/site, unpacks tritonserver into /tmp/rt and
# runs the benchmark from the carried code (~7 min, cut at GPU_SERVED_TIMEOUT s, 470 by default; GPU_SERVED_ARGS adds flags to
# benchmarks/gpu_served.py; gpu_served.json is written after each workload), then prints the levels and the
# targets with pass/fail (benchmarks/gpu_served_report.py). $OUT: gpu_served.json, table.md, details (tar), log.
# --live (first argument): instead, live sessions at real-time pace (benchmarks/gpu_live.py: tiny.en for latency
# and WER, the random-weight turbo for load; GPU_LIVE_ARGS adds flags); $OUT: gpu_live.json, live_table.md, log.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-served-out}; mkdir -p "$OUT"
# shellcheck source=benchmarks/gpu_stage_lib.sh
source "$(dirname "$0")/gpu_stage_lib.sh"
stage_parts .gpucarry /tmp/gpustage; case $? in 1) exit 1 ;; 2) exit 0 ;; esac
all=$(merge_parts /tmp/gpustage "$(dirname "$0")/..") || exit 1
served_runtime "$all" || exit 1
cd "$all/code" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
set -o pipefail
if [ "${1:-}" = "--live" ]; then
  # shellcheck disable=SC2086
  timeout 560 python3 -m benchmarks.gpu_live --stage "$all" --out "$OUT" --triton-env GPU_SERVED_STUB_NUMPY1=1 \
    ${GPU_LIVE_ARGS:-} 2>&1 | grep -v "Loading weights\|attention mask" | tee "$OUT/log.txt"
  status=$?
  python3 -m benchmarks.gpu_live --table "$OUT/gpu_live.json" | tee "$OUT/live_table.md"
  exit $status
fi
# shellcheck disable=SC2086
timeout "${GPU_SERVED_TIMEOUT:-470}" python3 -m benchmarks.gpu_served --stage "$all" --out /tmp/gpu-served \
  --triton-env GPU_SERVED_STUB_NUMPY1=1 ${GPU_SERVED_ARGS:-} 2>&1 \
  | grep -v "Loading weights\|attention mask" | tee "$OUT/log.txt"
status=$?
python3 -m benchmarks.gpu_served --table /tmp/gpu-served/gpu_served.json | tee "$OUT/table.md"
cp /tmp/gpu-served/gpu_served.json /tmp/gpu-served/checks_*.json "$OUT/" 2>/dev/null
tar -C /tmp/gpu-served -czf "$OUT/details.tgz" --exclude='random-large-v3-turbo' --exclude='mixed-audio' --exclude='triton_*/backends' . 2>/dev/null
exit $status
