#!/usr/bin/env bash
# Prepare, HERE, what benchmarks/vllm_peer_run.sh needs on the GPU machine beyond the served path's parts
# (benchmarks/gpu_served_stage.sh, run first: its .gpucarry/0 carries the code, its parts the gateway's runtime,
# tiny.en and the speech). Writes, in the checkout the device tool sends (the first worktree, or GPU_CARRY_ROOT):
#   .vllmcarry/v1..vN   vLLM's closure the machine lacks (wheels/, files over a part split into pieces) and
#                       peer/ (the long file and the real-voice corpus with their text), each part sized to
#                       travel beside .gpucarry/0 and the sent tree with GPU_CARRY_MARGIN_MIB (4) to spare,
#                       at most VLLM_PART_MIB (60) MiB
#   .vllmcarry/closure.json   the measured closure: every wheel that travels, its bytes, the totals
# The closure is derived, not listed: pip resolves VLLM_PIN (vllm==0.24.0) for CPython 3.12 / manylinux
# x86-64 with a Python 3.12 interpreter (PYTHON312: environment markers such as python_version > "3.11"
# are read from the resolving interpreter, not from --python-version), and what the machine has
# (benchmarks/gpu_machine_packages.txt) is dropped: torch 2.11.0, torchaudio 2.11.0, torchvision 0.26.0 and the
# CUDA 13 libraries are the machine's. vLLM gets a site directory of its own there (/tmp/vllm-site), so
# its pins (fastapi<0.137, pydantic, openai...) never meet the served path's. VLLM_STAGE_WITHOUT (names)
# leaves distributions out on purpose; empty by default (the whole closure travels).
# Wheels are cached in .vllm-wheels/ here (git-ignored); nothing of this is committed.
#
# usage: bash benchmarks/gpu_served_stage.sh && bash benchmarks/vllm_stage.sh
# then one device call per part (the scripts print them), each within ~30 s of the last:
#   run command "bash .gpucarry/0/code/benchmarks/vllm_peer_run.sh"
#       carry [".gpucarry/0", ".gpucarry/<k>"] for k = 1..N, then [".gpucarry/0", ".vllmcarry/v<j>"] for j = 1..M
set -euo pipefail
src=$(git rev-parse --show-toplevel); cd "$src"
root=${GPU_CARRY_ROOT:-$(git worktree list --porcelain | awk '/^worktree /{print $2; exit}')}
py=${PYTHON:-$src/.venv/bin/python}
py312=${PYTHON312:-python3.12}
pin=${VLLM_PIN:-vllm==0.24.0}
read -r -a without <<< "${VLLM_STAGE_WITHOUT:-}"
exclude=$(git rev-parse --path-format=absolute --git-path info/exclude)
for ignored in /.vllmcarry/ /.vllm-wheels/; do grep -qx "$ignored" "$exclude" 2>/dev/null || echo "$ignored" >> "$exclude"; done
cache=$src/.vllm-wheels; carry=$root/.vllmcarry; work=$(mktemp -d)
mkdir -p "$cache"; rm -rf "$carry"; mkdir -p "$carry" "$work/flat/wheels"
[ -d "$root/.gpucarry/0" ] || { echo "run benchmarks/gpu_served_stage.sh first (its .gpucarry/0 travels in every call)"; exit 1; }

platforms=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for n in $(seq 5 39); do platforms+=(--platform "manylinux_2_${n}_x86_64"); done  # pip matches N exactly
report=$cache/report-$pin.json  # the resolution takes minutes: kept per pin, VLLM_RESOLVE=1 redoes it
if [ ! -f "$report" ] || [ -n "${VLLM_RESOLVE:-}" ]; then
  echo "== $pin resolved for cp312 manylinux x86-64 with $("$py312" --version)"
  "$py312" -m pip install -q --dry-run --ignore-installed --report "$report" --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" --target "$work/none" "$pin" 2> >(grep -v '^WARNING: Location' >&2)
fi
"$py" -m benchmarks.gpu_carry missing "$report" benchmarks/gpu_machine_packages.txt > "$work/all.txt"
"$py" -m benchmarks.vllm_closure select "$work/all.txt" --without "${without[@]}" > "$work/wheels.txt"
echo "$(wc -l < "$work/all.txt") of $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["install"]))' "$report") resolved packages are missing on the machine; $(wc -l < "$work/wheels.txt") travel"
while read -r wheel; do
  stem=$(echo "${wheel%%==*}" | tr '[:upper:]' '[:lower:]' | sed 's/[-_.]\{1,\}/_/g')-${wheel##*==}-
  compgen -G "$cache/$stem*.whl" > /dev/null && continue  # cached (wheel names: PEP 427)
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$cache" "$wheel" 2> >(grep -v '^WARNING: Location' >&2)
done < "$work/wheels.txt"
"$py" -m benchmarks.vllm_closure link "$work/wheels.txt" "$cache" "$work/flat/wheels"

echo "== the peer's inputs: the long file and the real-voice corpus with their text"
"$py" -m benchmarks.vllm_peer --prepare --peer "$work/flat/peer"
[ -f "$work/flat/peer/texts.json" ] || { echo "the peer's inputs were not written"; exit 1; }

# 64 MiB = 67 108 864 bytes a call: the sent checkout's files + .gpucarry/0 + one part + the margin
tree=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 du -cb 2>/dev/null) | tail -1 | cut -f1)
code=$(du -sb "$root/.gpucarry/0" | cut -f1)
budget=$((67108864 - tree - code - ${GPU_CARRY_MARGIN_MIB:-4} * 1048576 - 65536))
cap=$((${VLLM_PART_MIB:-60} * 1048576)); [ "$budget" -le "$cap" ] || budget=$cap
"$py" -m benchmarks.vllm_closure summary "$report" "$work/all.txt" "$work/flat/wheels" \
  --budget "$budget" --without "${without[@]}" > "$carry/closure.json"
parts=$("$py" -m benchmarks.gpu_carry pack "$work/flat" "$carry" --budget "$budget" --split --prefix v)
rm -rf "$work"
(cd "$carry" && find . -type f ! -name 'MANIFEST*' ! -name closure.json | sed 's|^\./||' | sort | xargs sha256sum) > "$carry/MANIFEST.tmp"
for part in "$carry"/v*/; do cp "$carry/MANIFEST.tmp" "$part/MANIFEST"; done
rm "$carry/MANIFEST.tmp"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(json.dumps({k: v for k, v in c.items() if k != "wheels"}, indent=1))' "$carry/closure.json"
echo "tree $tree + .gpucarry/0 $code bytes; each part <= $budget bytes"
echo "staged $parts vLLM parts; device calls: one per .gpucarry part, then one per .vllmcarry/v1..v$parts"
