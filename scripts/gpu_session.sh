#!/usr/bin/env bash
# One device call on the H200: carried wheels (tokamax, streamlit), then the GPU-marked tests (core and
# pages), then whatever commands follow as arguments, a short summary last.
#   bash scripts/gpu_session.sh OUT_DIR ["python3 -m attnlab ladder --out OUT_DIR/h200_ladder.json" ...]
# The wheels go to /tmp/w/site-packages (kept while the machine stays warm: a later call need not carry them;
# `bash scripts/gpu_session.sh --install-only` installs them alone). The folder is named site-packages because
# Streamlit outside one takes itself for a development checkout and refuses --server.port.
# TransformerEngine's final.sh owns /tmp/site, Ray's install.sh /tmp/site-ray (../shared/*-on-h200/).
# With .ray/image/records.json.gz carried (`python scripts/wheel_records.py fetch` here), the installed accelerator
# stack is first compared, file for file, with the image lock's wheels. SKIP_TESTS=1: only the commands. GPU_TESTS="paths": only those tests (the whole suite took 437 s on an H100
# before tests/test_gpu_gradients.py added 143 s: two calls, e.g. GPU_TESTS="tests/pages tests/test_gpu.py" and
# GPU_TESTS="tests/test_gpu_gradients.py tests/test_gpu_hostile.py tests/test_gpu_service.py tests/test_gpu_yourturn.py tests/test_tokamax_backend.py").
set -o pipefail
WHL_SITE=/tmp/w/site-packages
if [ -d .whl ] && [ ! -d $WHL_SITE ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target $WHL_SITE .whl/*.whl || exit 3
  cp -r .whl/stub/* $WHL_SITE/  # tokamax's import of xprof (../shared/tokamax-on-h200/README.md)
fi
[ "$1" = "--install-only" ] && { ls $WHL_SITE | head -3; exit 0; }
OUT_DIR=${1:-${OUT:-gpu-out}}; shift || true
mkdir -p "$OUT_DIR"
export PYTHONPATH=$WHL_SITE:/tmp/site:/tmp/site-ray:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site-ray/bin:$PWD/.whl/bin:$PATH  # .whl/bin: py-spy (scripts/gpu_wheels.sh)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false ATTNLAB_WARM=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$OUT_DIR/nvidia-smi.txt"
start=$(date +%s)
if [ -f .ray/image/records.json.gz ]; then  # the lock's wheels, file for file (scripts/wheel_records.py; carry .ray/image)
  python3 scripts/wheel_records.py verify .ray/image/records.json.gz --json "$OUT_DIR/image-records.json" \
    > "$OUT_DIR/image-records.txt" 2>&1; echo "image lock, file for file: $(tail -1 "$OUT_DIR/image-records.txt")"
fi
if [ -z "$SKIP_TESTS" ]; then
  python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=300 ${GPU_TESTS:-tests} 2>&1 | tee "$OUT_DIR/gpu-tests.log" | tail -25
fi
echo "[$(( $(date +%s) - start )) s] GPU tests done"
for cmd in "$@"; do
  echo "=== $cmd"; bash -c "$cmd" 2>&1 | tee -a "$OUT_DIR/extra.log" | tail -40
  echo "[$(( $(date +%s) - start )) s] done: $cmd"
done
# each folder under OUT_DIR as one .tgz: the device returns only a few files a call (a py-spy folder per fault did not come back)
for d in "$OUT_DIR"/*/; do
  [ -d "$d" ] && tar czf "${d%/}.tgz" -C "$OUT_DIR" "$(basename "$d")" && rm -rf "$d" && echo "packed ${d%/}.tgz"
done
[ -f "$OUT_DIR/gpu-tests.log" ] && grep -E "passed|failed" "$OUT_DIR/gpu-tests.log" | tail -1
true
