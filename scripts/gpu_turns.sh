#!/usr/bin/env bash
# Where a device turn's seconds go while a class moves to new shapes (issue 40's own-shape worker fault): one call.
#   bash scripts/gpu_turns.sh OUT_DIR [--sample] [rehearse.py arguments, e.g. --set-env workers:XLA_FLAGS=...]
# 1. the own-shape rehearsal (20 learners, the control and the worker's kill) with the device worker's request log
#    and its spans (ATTNLAB_TIMING_LOG: turns, their parts, builds, compiles); --sample: py-spy records it too (it
#    slows the processes it samples: the times are then for locating, not for the issue's figures);
# 2. request_log.py per window of the rehearsal (`in_turns`: seconds by part of a turn), and with --sample
#    samples.py per window: every counted thread by the lab's frame (where a restarted worker's window went beside
#    the control's), and --inside runs.py:_run_held (the lines a turn's samples were at);
# 3. compile_options.py --shapes 4 --backends (the own-shape window's four): check programs' compiles and first runs,
#    with and without LLVM -O0 (the one measured candidate that kept every program described alike) and nvjitlink
#    (never measured) (CANDIDATES="..." for others: its names; BACKENDS="" for every backend).
# An A/B's other arm, the rehearsal alone: e.g. SHAPES=0 bash scripts/gpu_turns.sh OUT/off, then
# SHAPES=0 bash scripts/gpu_turns.sh OUT/on --set-env workers:ATTNLAB_SPARE_DEVICE=1 (the thirty-second session's:
# deploy/measurements/h100_spare_rehearsal_2026-12-07_32nd/), or oldest page first against arrival order:
# SHAPES=0 bash scripts/gpu_turns.sh OUT/arrival --set-env workers:ATTNLAB_OLDEST_FIRST=0 (docs/design-notes.md).
# On the GPU machine: `. .te/env.sh && SKIP_TESTS=1 bash scripts/gpu_session.sh $OUT "bash scripts/gpu_turns.sh $OUT"`
# (about 6 minutes on an H100; carry .whl .te/env.sh .ray/class/rendered.yaml). Here: PYTHON=.venv/bin/python.
set -o pipefail
OUT_DIR=${1:?OUT_DIR}; shift
PY=${PYTHON:-python3}
SAMPLE=()
if [ "$1" = "--sample" ]; then SAMPLE=(--sample-to "$OUT_DIR/samples"); shift; fi
RENDERED=()
[ -f .ray/class/rendered.yaml ] && RENDERED=(--rendered .ray/class/rendered.yaml)
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR/own-req.log" "$OUT_DIR/own-spans.log"
$PY scripts/rehearse.py "${RENDERED[@]}" --ui 2 --workers 1 --learners "${LEARNERS:-20}" --mode own \
  --faults shapes worker --set-env "workers:ATTNLAB_REQUEST_LOG=$OUT_DIR/own-req.log" \
  --set-env "workers:ATTNLAB_TIMING_LOG=$OUT_DIR/own-spans.log" "${SAMPLE[@]}" --json "$OUT_DIR/own.json" \
  --logs "$OUT_DIR/own-logs" "$@" > "$OUT_DIR/own.txt" 2>&1
echo "rehearsal: exit $?"; grep -E "^(class|fault|missed)" "$OUT_DIR/own.txt" | cut -c1-330
# the spans' clock is this machine's monotonic one: its offset from wall time, for reading them on another machine
$PY -c "import time; print(f'{time.time() - time.monotonic():.3f}')" > "$OUT_DIR/clock-offset.txt"
$PY scripts/request_log.py "$OUT_DIR/own-req.log" --rehearsal "$OUT_DIR/own.json" --spans "$OUT_DIR/own-spans.log" \
  --clock-offset "$(cat "$OUT_DIR/clock-offset.txt")" > "$OUT_DIR/own-request-log.txt" 2>&1
grep -E "^===|in_turns|^the first request computed" "$OUT_DIR/own-request-log.txt" | sed -E "s/.*('compiles_by_backend')/  \1/" | cut -c1-600
if [ ${#SAMPLE[@]} -gt 0 ]; then
  for d in "$OUT_DIR"/samples/*/; do
    echo "== py-spy, every counted thread: $(basename "$d")"  # the killed worker's window against the control's
    $PY scripts/samples.py "$d" --top 10 2>&1 | sed -n '/by thread and the lab/,/^$/p' | head -11
    echo "== py-spy inside turns: $(basename "$d")"
    $PY scripts/samples.py "$d" --inside runs.py:_run_held --top 8 2>&1 | sed -n '/by all three/,$p' | head -9
  done > "$OUT_DIR/turn-samples.txt"
  cat "$OUT_DIR/turn-samples.txt"
fi
gzip -f "$OUT_DIR/own-req.log" "$OUT_DIR/own-spans.log"
[ "${SHAPES:-4}" = 0 ] && exit 0  # the rehearsal alone (an A/B's second arm)
# the others: measurements/h100_compile_options_2026-12-06.json and h100_own_2026-12-07_30th/compile_options.txt
CANDS=("LLVM -O0" nvjitlink)
[ -n "$CANDIDATES" ] && eval "CANDS=($CANDIDATES)"  # e.g. CANDIDATES='"no CUDA graphs" "ptxas -O0"'
$PY scripts/compile_options.py --shapes "${SHAPES:-4}" --json "$OUT_DIR/compile_options.json" \
  --only "${CANDS[@]}" --backends ${BACKENDS-naive sdpa_xla sdpa_auto sdpa_cudnn} > "$OUT_DIR/compile_options.txt" 2>&1
echo "compile_options: exit $?"; grep -E "compiles:|by backend|cannot" "$OUT_DIR/compile_options.txt" | cut -c1-300
