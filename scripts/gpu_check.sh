#!/usr/bin/env bash
# The one GPU check: GPU-marked tests (core and pages), then the benchmark suite, summary last.
# On the GPU machine (see README "On a GPU"):  bash scripts/gpu_check.sh [OUT_DIR]
# Streamlit/altair wheels, if carried as .whl/, are installed to /tmp/sitew first (the GPU image lacks them).
set -o pipefail
OUT_DIR=${1:-${OUT:-gpucheck}}
mkdir -p "$OUT_DIR"
if [ -d .whl ] && [ ! -d /tmp/sitew ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/sitew .whl/*.whl || exit 3
fi
[ -d /tmp/sitew ] && export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/sitew
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$OUT_DIR/nvidia-smi.txt"
python3 -m attnlab gpucheck --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/gpucheck.log"
