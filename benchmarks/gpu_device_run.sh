#!/usr/bin/env bash
# GPU figures on an NVIDIA H200 machine (CUDA 13, PyTorch 2.11, transformers 5.x, no network).
#
# Prepare here (once): the ctranslate2 wheel for the device's Python 3.12 travels in .gpucarry/
# (42 MB; the carry limit is 64 MiB per call):
#   echo /.gpucarry/ >> .git/info/exclude
#   .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .gpucarry ctranslate2==4.8.5
# Run there from the repository root, with .gpucarry/ copied beside the checkout: bash benchmarks/gpu_device_run.sh.
# Results land in $OUT (gpu_whisper_random.json, gpu_ct2_random.json). ~3 minutes.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
echo "== cuBLAS on the machine"; ldconfig -p | grep -i 'libcublas'
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpucarry/ctranslate2-*.whl || exit 1

echo "== (1) ctranslate2 4.8.5 as shipped (expects libcublas.so.12)"
PYTHONPATH=/tmp/site timeout 120 python3 -m benchmarks.gpu_whisper_random --runtime ctranslate2 --model tiny \
  --batch-sizes 1 --new-tokens 4 --repeats 1 --workdir /tmp/wr-tiny 2>&1 | grep -E "batch|Error|libcublas" | tail -3

echo "== (2) transformers, random-weights large-v3-turbo shapes, fp16"
timeout 330 python3 -m benchmarks.gpu_whisper_random --budget-s 240 --out "$OUT/gpu_whisper_random.json" 2>&1 \
  | grep -v "attention mask"

echo "== (3) ctranslate2 with libcublas.so.12 -> CUDA 13 cuBLAS symlinks (ABI not promised by NVIDIA)"
lib=$(dirname "$(ldconfig -p | awk '/libcublas.so.13 /{print $NF; exit}')")
mkdir -p /tmp/cu12; ln -sf "$lib/libcublas.so.13" /tmp/cu12/libcublas.so.12; ln -sf "$lib/libcublasLt.so.13" /tmp/cu12/libcublasLt.so.12
LD_LIBRARY_PATH=/tmp/cu12:$lib PYTHONPATH=/tmp/site timeout 420 python3 -m benchmarks.gpu_whisper_random \
  --runtime ctranslate2 --budget-s 360 --out "$OUT/gpu_ct2_random.json" 2>&1 | grep -v "Writing model\|Loading weights"
