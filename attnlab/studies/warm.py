"""Warm a fresh server: compile and run the shapes a class opens first, before the first learner asks.

`python -m attnlab warm` (or the app after its first page, through the device service) runs every backend
that runs the codelab's shape, in float32 and bfloat16, checked against float64, program read: compiling is
what a first page waits for. JAX's persistent compilation cache keeps the programs across a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from attnlab import device, presets
from attnlab.backends import REGISTRY
from attnlab.measure import runs
from attnlab.shapes import AttentionShape

SHAPES = (AttentionShape(), AttentionShape(dtype="bfloat16"), AttentionShape(dtype="bfloat16", causal=True))
# the sidebar's model presets at the codelab's batch and length, for the codelab's implementations only
CODELAB = ("naive", "sdpa_auto", "sdpa_xla", "sdpa_cudnn")
PRESET_SHAPES = tuple(presets.apply(p, AttentionShape(dtype=d)) for p in presets.PRESETS for d in ("float32", "bfloat16"))


def head_start() -> float:
    """Page 1's own work on a fresh server, done ahead (serve.py, while a browser loads Streamlit): the
    imports its first run needs and the compiles of its default tiny example, in the page process. Seconds."""
    t0 = time.perf_counter()
    import altair  # noqa: F401  (pages/common.py's charts)

    from attnlab.studies import weights

    weights.four_stages(weights.example_shape())
    return time.perf_counter() - t0


QUIET_S = 1.0  # no request in flight for this long: the worker may take the GIL for the optional imports


def spare_start() -> None:
    """A spare device worker's imports before it is needed (attnlab/service/child.py): pandas, with
    attnlab.threads' setting, and every entry point's module; no JAX backend, so no GPU memory."""
    from attnlab import threads
    from attnlab.service import entries

    threads.serve_many_threads()
    for name in entries.names():  # every entry point's module (a request imports only its own)
        entries.get(name)


SPARE_SHAPES = (AttentionShape(batch=1, q_len=64, kv_len=64, heads=2, kv_heads=2, head_dim=64, dtype="bfloat16"),
                AttentionShape(batch=1, q_len=64, kv_len=64, heads=2, kv_heads=1, head_dim=64, causal=True))


def spare_device(needed=lambda: False) -> list[str]:
    """ATTNLAB_SPARE_DEVICE: a spare's first uses of its device before it is needed, so that the process taking
    over from a dead worker pays none of them: JAX's device (a GPU client, holding a CUDA context's memory beside
    the worker's), two tiny shapes (bfloat16; float32, causal, grouped) checked against float64 by the codelab's four
    implementations (JAX's tracing and lowering, XLA's compiler, cuDNN's attention and the check's first uses: on an
    H100 a restarted worker traced and compiled little in its first two seconds), then tokamax's and
    TransformerEngine's imports. Stops between steps (a shape is one) once `needed()` (the word to take the device
    came), so a takeover waits for one step at most. The steps done, by name."""
    from attnlab.backends import te, tokamax

    steps: list[tuple[str, Callable[[], object]]] = [
        ("device", device.info), *((f"codelab {s.dtype}", lambda s=s: warm_shape(s, CODELAB)) for s in SPARE_SHAPES),
        ("tokamax", tokamax.import_error), ("te", te.import_error)]
    done = []
    for name, step in steps:
        if needed():
            break
        step()
        done.append(name)
    return done


def worker_start(busy=lambda: False) -> None:
    """A new device worker's one-time costs, in the background: JAX's device at once; then, once `busy()` (requests
    in flight) has been false for QUIET_S, the imports of pandas (with attnlab.threads' setting), every entry
    point's module, tokamax and TransformerEngine where they are installed, and the learners' sandbox's fork server
    (a process of its own: attnlab/yourturn/forks.py). On an H100 the device, tokamax and TE are 0.4, 2.1 and 2.9 s
    (`scripts/first_uses.py`), pandas 0.4 s here, and an import holds Python's GIL: the pages a class opens first
    after Ray restarts a worker (4, 5, 6, 8) need none of them, so the imports wait for a quiet moment instead of
    slowing every request in the first seconds; a request that needs one first imports it."""
    device.info()
    quiet = time.monotonic()
    while time.monotonic() - quiet < QUIET_S:
        time.sleep(0.1)
        if busy():
            quiet = time.monotonic()
    from attnlab.backends import te, tokamax

    spare_start()  # done already where this worker was a spare
    tokamax.import_error()
    te.import_error()
    from attnlab.yourturn import sandbox

    sandbox.start_server()  # a learner's first check then forks a sandbox: JAX loaded in it already


def warm_shape(shape: AttentionShape, among: tuple[str, ...]) -> list[str]:
    """On the device worker: run and compile `shape` for every backend of `among` that can run it here
    (checked against float64, compiled program read); a line per backend."""
    info = device.info()
    names = [n for n in among if REGISTRY[n].unmet(shape, info) is None]
    return [f"warm {shape.describe()} {r.implementation}: {r.status}"
            for r in runs.run(shape, names, accuracy=True, program=True)]


# Logged when the warm-up is done (app.py): an instructor's `kubectl logs` and the class scripts wait for it
DONE = "attnlab: warm-up done"
STOPPED = "attnlab: warm-up stopped"  # an error ended it early: the pages compute what they need themselves


def plan(codelab: bool = True, presets: bool = True) -> list[tuple[AttentionShape, tuple[str, ...]]]:
    """What a fresh worker compiles first: `SHAPES` for every backend, then the presets for the codelab's four."""
    return ([(s, tuple(REGISTRY)) for s in SHAPES] if codelab else []) + \
        ([(s, CODELAB) for s in PRESET_SHAPES] if presets else [])


def warm(call=None, log=lambda s: None, pause=lambda: None, shapes=None) -> float:
    """Warm the device worker(s) a shape at a time; seconds it took. `call(fn, *args)` sends the work
    (default: here); `pause()` before each shape waits while learners' pages run (idle time only)."""
    call = call or (lambda fn, *args: fn(*args))
    t0 = time.perf_counter()
    for shape, among in shapes or plan():
        pause()
        for line in call(warm_shape, shape, among):
            log(line)
    return time.perf_counter() - t0
