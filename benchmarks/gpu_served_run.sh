#!/usr/bin/env bash
# GPU, served path: gateway -> tritonserver (pytriton build) -> torch engine on the lent H200,
# beside Triton called directly and the engine in-process (benchmarks/gpu_served.py).
#
# Prepare here first: bash benchmarks/gpu_served_stage.sh (writes .gpucarry/1..3, git-ignored).
# Then one device call per part, the same command each time, within ~30 s of each other:
#   run  command: bash benchmarks/gpu_served_run.sh   carry: [".gpucarry/1"]   (then /2, then /3)
# Each call copies the part it carries into /tmp/gpustage, checks every staged file against the
# MANIFEST (sha256) and, while parts are missing, names them and stops. Once all are there it
# installs the wheels into /tmp/site, unpacks tritonserver into /tmp/rt and runs the benchmark
# (~7 min; GPU_SERVED_ARGS adds flags to benchmarks/gpu_served.py, e.g. "--duration 8").
# Results in $OUT: gpu_served.json, per-model bench JSON/PNG (tar), dmon logs, checks, log.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-served-out}; mkdir -p "$OUT"
stage=/tmp/gpustage; mkdir -p "$stage"
for part in .gpucarry/*/; do
  [ -f "$part/MANIFEST" ] || continue
  name=$(basename "$part"); rm -rf "${stage:?}/$name"; cp -r "$part" "$stage/$name"
  cp "$part/MANIFEST" "$stage/MANIFEST"; echo "staged part $name ($(du -sh "$stage/$name" | cut -f1))"
done
[ -f "$stage/MANIFEST" ] || { echo "nothing staged: carry .gpucarry/1 (run benchmarks/gpu_served_stage.sh here first)"; exit 1; }
missing=$(cd "$stage" && sha256sum -c --quiet MANIFEST 2>/dev/null | cut -d/ -f1 | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "MISSING or damaged parts: $missing -> next call: carry .gpucarry/<part> for each"; exit 0
fi
echo "all parts verified"

if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$stage"/[123]/*.whl && touch /tmp/site/.done || exit 1
fi
# Triton's python backend stub embeds the interpreter and ignores PYTHONPATH (seen: its sys.path is
# the interpreter's own plus the working directory), so the carried packages reach the model through
# a .pth file in the machine's site-packages that puts /tmp/site FIRST: the carried numpy 1.26 (the
# project's pin; Triton 2.51's stub fails with the machine's numpy 2) then serves every process.
# The machine is discarded after the lease.
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
echo 'import sys; sys.path.insert(0, "/tmp/site")' > "$site/00_gpu_served_carried.pth"
if [ ! -f /tmp/rt/.done ]; then
  mkdir -p /tmp/rt && tar -xJf "$stage/1/tritonserver.tar.xz" -C /tmp/rt && touch /tmp/rt/pytriton/__init__.py /tmp/rt/.done || exit 1
fi
run=$stage/run; rm -rf "$run"; mkdir -p "$run/hf-tiny-en"
ln -s "$stage"/3/hf-tiny-en/* "$stage"/1/*.safetensors "$stage"/2/*.safetensors "$run/hf-tiny-en/"
ln -s "$stage/3/audio" "$stage/3/references.json" "$run/"

# The pytriton runtime's libraries, then the interpreter's libpython for the python backend stub.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=/tmp/site:/tmp/rt
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
set -o pipefail
# shellcheck disable=SC2086
timeout 560 python3 benchmarks/gpu_served.py --stage "$run" --out /tmp/gpu-served ${GPU_SERVED_ARGS:-} 2>&1 \
  | grep -v "Loading weights\|attention mask" | tee "$OUT/log.txt"
status=$?
cp /tmp/gpu-served/gpu_served.json /tmp/gpu-served/checks_*.json "$OUT/" 2>/dev/null
tar -C /tmp/gpu-served -czf "$OUT/details.tgz" --exclude='random-large-v3-turbo' --exclude='triton_*/backends' . 2>/dev/null
exit $status
