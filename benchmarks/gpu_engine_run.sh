#!/usr/bin/env bash
# GPU, engine: the torch engine on the lent H200 — real-weight checks (benchmarks/gpu_engine_check.py) and
# large-v3-turbo shapes with random weights, graphs vs eager (benchmarks/gpu_engine_random.py).
#
# Prepare here first: bash benchmarks/gpu_engine_stage.sh (its header gives the device calls). Run there
# from .gpucarry-engine/code. Each call copies the weight piece it carries into /tmp/gpu-engine-stage and
# checks every piece against MANIFEST; while pieces are missing it names them and stops. Once all are
# there it unpacks the checkpoints and runs both scripts (~5 min). GPU_ENGINE_ARGS adds flags to
# gpu_engine_random.py. Results in $OUT: gpu_engine_check.json, gpu_engine_random.json, dmon.txt, log.txt.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-engine-out}; mkdir -p "$OUT"
stage=/tmp/gpu-engine-stage; mkdir -p "$stage"
for part in ../part*/; do
  [ -d "$part" ] || continue
  name=$(basename "$part"); rm -rf "${stage:?}/$name"; cp -r "$part" "$stage/$name"; echo "staged $name"
done
cp MANIFEST "$stage/MANIFEST"
missing=$(cd "$stage" && sha256sum -c MANIFEST 2>/dev/null | grep -v ': OK$' | cut -d/ -f1 | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "MISSING or damaged pieces: $missing-> next call: carry .gpucarry-engine/<piece> for each"; exit 0
fi
echo "all pieces verified"
models=/tmp/gpu-engine-models
if [ ! -f "$models/.done" ]; then
  mkdir -p "$models" && cat "$stage"/part*/weights.tar.* | tar -x -C "$models" && touch "$models/.done" || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi dmon -s u -d 1 > "$OUT/dmon.txt" 2>&1 &
dmon=$!
set -o pipefail
{
  echo "== real weights: graphed vs eager per bucket, WER, languages, translate"
  timeout 200 python3 -m benchmarks.gpu_engine_check --speech ../speech --model "tiny.en=$models/hf-tiny-en" \
    --model "base=$models/hf-base" --out "$OUT/gpu_engine_check.json"
  echo "== large-v3-turbo shapes, random weights: graphs vs eager"
  # shellcheck disable=SC2086
  timeout 330 python3 -m benchmarks.gpu_engine_random --tokenizer-dir ../tok --profile --out "$OUT/gpu_engine_random.json" \
    ${GPU_ENGINE_ARGS:-}
} 2>&1 | grep -v "Loading weights" | tee "$OUT/log.txt"
status=$?
kill "$dmon" 2>/dev/null
exit $status
