#!/usr/bin/env bash
# Side by side with vLLM on the GPU machine: our gateway (Triton + torch engine) and vLLM 0.24.0's `vllm serve`,
# the same weights, audio and client (benchmarks/vllm_peer.py; docs/benchmarks.md, "Side by side with vLLM").
#
# Prepare here first: bash benchmarks/gpu_served_stage.sh && bash benchmarks/vllm_stage.sh (git-ignored
# .gpucarry/0..N and .vllmcarry/v1..vM). Then the same command in every device call, each within ~30 s of the last:
#   run  command: bash .gpucarry/0/code/benchmarks/vllm_peer_run.sh
#        carry:   [".gpucarry/0", ".gpucarry/<k>"] for k = 1..N, then [".gpucarry/0", ".vllmcarry/v<j>"] for j = 1..M,
#                 then [".gpucarry/0"] until it prints "every workload is measured"
# While parts are missing a call stages what it carries and names the rest. Once all are there it installs
# the served runtime (/tmp/site, /tmp/rt) and vLLM's closure (/tmp/vllm-site, its own site directory), then
# measures the next workload without records (tiny_en, dense, mixed: one a call, each ours then vLLM's,
# ~5-8 min) into /tmp/vllm-peer/vllm_peer.json, kept on the warm machine between calls.
# VLLM_PEER_ARGS adds flags to benchmarks/vllm_peer.py (e.g. --vllm-arg=--max-num-batched-tokens=32768).
# $OUT: vllm_peer.json, table.md, log.txt, the vLLM server logs.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/vllm-peer-out}; mkdir -p "$OUT"
code=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benchmarks/gpu_stage_lib.sh
source "$code/benchmarks/gpu_stage_lib.sh"
stage_parts .gpucarry /tmp/gpustage; served=$?
stage_parts .vllmcarry /tmp/vllmstage; peer=$?
[ "$served" = 0 ] && [ "$peer" = 0 ] || { echo "staging not complete: carry the parts named above"; exit 0; }
all=$(merge_parts /tmp/gpustage "$code") || exit 1
vall=$(merge_parts /tmp/vllmstage "$code") || exit 1
served_runtime "$all" || exit 1
if [ ! -f /tmp/vllm-site/.done ]; then
  started=$SECONDS
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vllm-site "$vall"/wheels/*.whl \
    && touch /tmp/vllm-site/.done || exit 1
  echo "vLLM's closure installed into /tmp/vllm-site in $((SECONDS - started)) s ($(du -sh /tmp/vllm-site | cut -f1))"
  # the machine's packages were taken by name: name any version vLLM's pins refuse (not fatal; the run says more)
  PYTHONPATH=/tmp/vllm-site python3 -m pip check 2>&1 | grep -i "^vllm " | tee "$OUT/pip_check.txt"
fi
cd "$all/code" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
PYTHONPATH=/tmp/vllm-site python3 -c 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1 | tee -a "$OUT/gpu.txt"
set -o pipefail
# one 600 s device command: what the staging and installs above left
left=$((585 - SECONDS))
# shellcheck disable=SC2086
timeout "$left" python3 -m benchmarks.vllm_peer --stage "$all" --peer "$vall/peer" --out /tmp/vllm-peer \
  --triton-env GPU_SERVED_STUB_NUMPY1=1 --vllm-pythonpath "/tmp/vllm-site:$all/code" ${VLLM_PEER_ARGS:-} 2>&1 \
  | grep -v "Loading weights\|attention mask" | tee "$OUT/log.txt"
status=$?
python3 -m benchmarks.vllm_peer_report /tmp/vllm-peer/vllm_peer.json | tee "$OUT/table.md"
cp /tmp/vllm-peer/vllm_peer.json "$OUT/" 2>/dev/null
for log in /tmp/vllm-peer/vllm_*.log; do [ -f "$log" ] && tail -c 2000000 "$log" > "$OUT/$(basename "$log")"; done
exit $status
