#!/usr/bin/env bash
# Prepare, HERE, what benchmarks/gpu_served_run.sh needs on the GPU machine (no network there;
# one device call carries at most 64 MiB): three parts under .gpucarry/ (git-ignored), each with
# the same MANIFEST (sha256 of every file of every part).
#
#   .gpucarry/1: the tritonserver runtime of the nvidia-pytriton wheel (xz tarball) + tiny.en shard 2
#                + the small cp312 wheels the machine lacks (FastAPI, tritonclient, pydantic, ...)
#   .gpucarry/2: the PyAV wheel (~36 MB) + tiny.en shard 3 and tokenizer
#   .gpucarry/3: tiny.en shard 1 + config/tokenizer, espeak-ng speech, reference transcripts,
#                the numpy 1.26 wheel (see "always" below)
#
# The wheel list is generated, not hand-written: `pip install --dry-run --report` resolves the
# serving path's pins for CPython 3.12 / manylinux x86-64, and every package the machine already
# has (benchmarks/gpu_machine_packages.txt) is dropped.
#
# usage (from the repository root of the checkout that is copied to the GPU machine):
#   bash benchmarks/gpu_served_stage.sh            # ~2 min: downloads ~50 MB of wheels, espeak-ng
# then three device calls, each within ~30 s of the last (the machine stays warm ~30 s):
#   run command "bash benchmarks/gpu_served_run.sh", carry [".gpucarry/1"]
#   run command "bash benchmarks/gpu_served_run.sh", carry [".gpucarry/2"]
#   run command "bash benchmarks/gpu_served_run.sh", carry [".gpucarry/3"]   <- stages, then runs
# Each call verifies what /tmp/gpustage already holds and says which parts are still missing.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
py=${PYTHON:-.venv/bin/python}
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.gpucarry/' "$exclude" 2>/dev/null || echo '/.gpucarry/' >> "$exclude"
rm -rf .gpucarry; mkdir -p .gpucarry/1 .gpucarry/2 .gpucarry/3 .gpucarry/work
work=.gpucarry/work

echo "== wheels: resolve for cp312 manylinux, drop what the machine has"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
requirements=(fastapi uvicorn python-multipart 'tritonclient[grpc]' pydantic pydantic-settings av soxr soundfile
              jiwer prometheus-client numpy)
pins=()
for r in "${requirements[@]}"; do
  base=${r%%[*}; pins+=("$(grep -iE "^${base}(\[[a-z,]+\])?==" requirements.txt || echo "$r")")
done
"$py" -m pip install -q --dry-run --ignore-installed --report "$work/report.json" --only-binary=:all: \
  --python-version 3.12 --implementation cp "${platforms[@]}" --target "$work/none" "${pins[@]}"
# numpy is carried although the machine has one: its numpy 2.x breaks the python backend stub of
# Triton 2.51 (nvidia-pytriton 0.7.0 requires numpy<2; seen there: BYTES inputs deserialized wrong,
# the stub aborts), so the project's pin (requirements.txt) goes along and comes first on sys.path.
always=(numpy)
"$py" - "$work/report.json" benchmarks/gpu_machine_packages.txt "${always[@]}" > "$work/wheels.txt" <<'EOF'
import json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n.lower())
have = {norm(l.strip()) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")} - set(sys.argv[3:])
for item in json.load(open(sys.argv[1]))["install"]:
    if norm(item["metadata"]["name"]) not in have:
        print(item["download_info"]["url"])
EOF
while read -r url; do
  file=${url##*/}; name=${file%%-*}; version=${file#*-}; version=${version%%-*}
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .gpucarry/2 "${name}==${version}"
done < "$work/wheels.txt"
find .gpucarry/2 -name '*.whl' ! -name 'av-*' ! -name 'numpy-*' -exec mv {} .gpucarry/1/ \;
mv .gpucarry/2/numpy-*.whl .gpucarry/3/
ls .gpucarry/1 .gpucarry/2 .gpucarry/3

echo "== tritonserver runtime of the nvidia-pytriton wheel (server, libraries, python backend, 3.12 stub)"
site=$("$py" -c 'import pathlib, pytriton; print(pathlib.Path(pytriton.__file__).parent.parent)')
tar -C "$site" -cf - --exclude='libpython3*' --exclude='__pycache__' \
  pytriton/tritonserver/bin pytriton/tritonserver/backends pytriton/tritonserver/caches \
  pytriton/tritonserver/python_backend_stubs/3.12 nvidia_pytriton.libs | xz -T0 -6 > .gpucarry/1/tritonserver.tar.xz

echo "== speech, reference transcripts, tiny.en in the transformers layout"
"$py" -m benchmarks.gpu_served --prepare --stage "$work/stage"
mv "$work"/stage/hf-tiny-en/model-00002-of-00003.safetensors .gpucarry/1/
mv "$work"/stage/hf-tiny-en/model-00003-of-00003.safetensors .gpucarry/2/
mkdir -p .gpucarry/2/hf-tiny-en .gpucarry/3/hf-tiny-en
mv "$work"/stage/hf-tiny-en/tokenizer.json .gpucarry/2/hf-tiny-en/
mv "$work"/stage/hf-tiny-en/* .gpucarry/3/hf-tiny-en/
mv "$work"/stage/audio "$work"/stage/references.json .gpucarry/3/
rm -rf "$work"

(cd .gpucarry && find 1 2 3 -type f | sort | xargs sha256sum) > MANIFEST.tmp
for part in 1 2 3; do cp MANIFEST.tmp .gpucarry/$part/MANIFEST; done
rm MANIFEST.tmp
du -sh .gpucarry/1 .gpucarry/2 .gpucarry/3
# 64 MiB = 67 108 864 bytes a call, the repository's tracked files included (+ 300 kB margin)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
for part in 1 2 3; do
  size=$(du -sb .gpucarry/$part | cut -f1)
  [ $((size + tree + 300000)) -lt 67108864 ] \
    || { echo "part $part ($size bytes) + the tracked tree ($tree) is over the 64 MiB a call carries"; exit 1; }
done
echo "staged; now three device calls: bash benchmarks/gpu_served_run.sh with carry .gpucarry/1, then /2, then /3"
