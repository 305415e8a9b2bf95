#!/usr/bin/env bash
# GPU, served path: gateway -> tritonserver (pytriton build) -> torch engine on an H200,
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
  wheels=$(ls "$stage"/[123]/*.whl | grep -v '/numpy-')
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
    && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/np "$stage"/3/numpy-*.whl \
    && touch /tmp/site/.done || exit 1
fi
# Triton 2.51's python backend stub (pybind11 built for numpy 1.x) receives BYTES inputs wrong under
# numpy 2 (on the H200 run of docs/benchmarks.md: itemsize read as 0, so TEXT_PREFIX arrived as its first byte repeated, and the
# stub aborted in deserialize_bytes_tensor); nvidia-pytriton 0.7.0 requires numpy<2. The machine's
# scipy/scikit-learn need numpy 2, and transformers imports them when present. So, in the Triton stub
# only (tritonserver gets GPU_SERVED_STUB_NUMPY1=1 from gpu_served.py --triton-env), the project's
# numpy 1.26 pin comes first and scipy/sklearn are hidden; every process also finds the carried
# packages (/tmp/site) after the machine's. The stub embeds Python and ignores PYTHONPATH (seen: its
# sys.path is the interpreter's plus the working directory), hence a .pth file in the machine's
# site-packages (the machine is discarded after the lease).
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
echo 'import os, sys; sys.path.append("/tmp/site"); os.environ.get("GPU_SERVED_STUB_NUMPY1") and (sys.path.insert(0, "/tmp/np"), sys.modules.update(sklearn=None, scipy=None))' \
  > "$site/00_gpu_served_carried.pth"
if [ ! -f /tmp/rt/.done ]; then
  mkdir -p /tmp/rt && tar -xJf "$stage/1/tritonserver.tar.xz" -C /tmp/rt && touch /tmp/rt/pytriton/__init__.py /tmp/rt/.done || exit 1
fi
run=$stage/run; rm -rf "$run"; mkdir -p "$run/hf-tiny-en"
ln -s "$stage"/[123]/hf-tiny-en/* "$stage"/[12]/*.safetensors "$run/hf-tiny-en/"
ln -s "$stage/3/audio" "$stage/3/references.json" "$run/"

# The pytriton runtime's libraries, then the interpreter's libpython for the python backend stub.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=/tmp/rt
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
set -o pipefail
# shellcheck disable=SC2086
timeout 560 python3 -m benchmarks.gpu_served --stage "$run" --out /tmp/gpu-served \
  --triton-env GPU_SERVED_STUB_NUMPY1=1 ${GPU_SERVED_ARGS:-} 2>&1 \
  | grep -v "Loading weights\|attention mask" | tee "$OUT/log.txt"
status=$?
cp /tmp/gpu-served/gpu_served.json /tmp/gpu-served/checks_*.json "$OUT/" 2>/dev/null
tar -C /tmp/gpu-served -czf "$OUT/details.tgz" --exclude='random-large-v3-turbo' --exclude='triton_*/backends' . 2>/dev/null
exit $status
