"""Every ATTNLAB_* setting, read once from the environment into one frozen value.

    from attnlab.settings import settings
    settings().device            # "child", "inprocess" or "ray"

No other module reads an ATTNLAB_* variable. A process reads them on first use; `override(**fields)` changes
them for a test.

    ATTNLAB_DEVICE            where device work runs: "child" (default: a worker process beside the server,
                              restarted if it dies), "inprocess" (CLI, tests), "ray" (a Ray actor per GPU)
    ATTNLAB_RAY_ADDRESS       with ATTNLAB_DEVICE=ray: the cluster ("auto", "ray://head:10001"), or "local" to
                              start a cluster in this process (tests and a laptop); default "auto"
    ATTNLAB_DEVICE_WORKERS    with Ray: how many device workers (default: one per GPU of the cluster, or 1)
    ATTNLAB_FAKE_GPUS         with ATTNLAB_RAY_ADDRESS=local: GPUs the local cluster claims to have (CPU tests
                              of two and four workers, each running JAX on the CPU)
    ATTNLAB_WORKER_THREADS    requests a device worker serves at once, most waiting (compiles and device work
                              have their own bounds); default 64: a kept answer never queues behind compiles
    ATTNLAB_SPARE_WORKER      1 (default): a device worker in a child process keeps a spare child with the lab
                              imported and no device, which takes over when the worker dies
                              (attnlab/service/child.py); 0: a new child is started then
    ATTNLAB_SPARE_DEVICE      1: that spare also opens JAX's device and meets the first uses of XLA's compiler,
                              cuDNN and the float64 check at two tiny shapes before it is needed (a GPU context's
                              memory beside the worker's); default 0: a spare opens no device (warm.spare_device;
                              a lone restart's answer came 0.6 s sooner on an H100, a class's fault no sooner)
    ATTNLAB_COMPILE_THREADS   programs the device worker compiles at once; default the CPUs it may use
    ATTNLAB_COMPILE_CACHE_GIB the most JAX's persistent compilation cache (JAX_COMPILATION_CACHE_DIR) may
                              hold, in GiB (default 8: the worker pods' volume is 10 GiB; 0: no bound), kept
                              by the device worker (attnlab/measure/disk_cache.py), not by JAX's locked cap
    ATTNLAB_TURN_SWITCH_S     Python's switch interval while a run holds the device (default 0.0001 s; 0: Python's
                              own, 5 ms throughout): attnlab/threads.py, held_turn, says why
    ATTNLAB_OLDEST_FIRST      1 (default): the device worker lowers, traces and runs for the page that began
                              earliest first (attnlab/oldest_first.py); 0: in order of arrival
    ATTNLAB_MEMORY_LIMIT_GIB  the device worker's memory budget in GiB (default: 80 % of the GPU's free memory
                              and half of the host's available memory when it started)
    ATTNLAB_RUN_SECONDS       the longest one run may hold the device (default 60 s): a run whose lower bound
                              (attnlab/measure/cost.py) is longer is refused before it starts
    ATTNLAB_CHECKS_PER_MINUTE Check presses one browser session may make in any 60 s
                              (attnlab/yourturn/pace.py; default 10; 0: no limit)
    ATTNLAB_WARM              1 (default): compile the codelab's shape and the presets after the first page, and
                              again for each device worker that answers later (pages/opening.py keep_warm)
    ATTNLAB_CLASS_SHAPES      the shapes the class will use, as the lab's links' queries separated by spaces
                              ("batch=1&heads=1&kv_heads=1 q_len=64&kv_len=64"): the warm-up opens every page
                              at each (pages/opening.py), so the class finds them computed; unset: none
    ATTNLAB_WARM_BY_CLOCK     1: a GPU timing's warm-up ends once the SM clock reads 90 % of its maximum (NVML),
                              3 calls at least and 0.2 s at most; default 0: 0.2 s of calls always
                              (attnlab/measure/timing.py: warm_up)
    ATTNLAB_METRICS           1: serve Streamlit's /_stcore/metrics (closed by default)
    ATTNLAB_ALLOW_CLEAR_CACHE 1: let a browser's "clear cache" empty the server's caches (refused by default)
    ATTNLAB_TIMING_LOG        a file: every measurement appends its start and end (a load test checks overlap)
    ATTNLAB_REQUEST_LOG       a file: each device worker appends a JSON line per request (what, shape, how
                              long, and whether computed, shared or a kept result)
    ATTNLAB_REQUIRE_GPU       1: the container's entrypoint refuses to start without a working GPU
    ATTNLAB_REFUSE_KNOWN_ABORTS  1 (default): refuse up front the shapes known to abort a compiler (0: the
                              worker meets them, and dies: the fault tests)
    ATTNLAB_FAULT_INJECTION   1: the device worker also serves requests that abort it or hold it (tests only)
    ATTNLAB_IAP_AUDIENCE      behind Identity-Aware Proxy: the audience IAP's signed header must carry
                              (/projects/NUMBER/global/backendServices/ID, or its prefix); a request without a
                              valid x-goog-iap-jwt-assertion is refused (attnlab/iap.py); unset: no check
    ATTNLAB_ACCESS_TOKEN      the quick mode's door: a browser must bring ?token=<this> once (then a cookie);
                              unset: no door (attnlab/token_door.py)
    ATTNLAB_INSTRUCTOR_TOKEN  a secret: the instructor's page (class progress, GPU queue) shows to a browser
                              that opened a link with ?instructor=<the secret>; unset: none
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping

DEVICES = ("child", "inprocess", "ray")


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    return default if not raw else raw in {"1", "true", "yes", "on"}


def _whole(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = env.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


def _count(env: Mapping[str, str], name: str, default: int, problems: list[str]) -> int:
    """A whole number, 0 included; anything else is said in `problems` and the default used."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if raw.isdigit():
        return int(raw)
    problems.append(f"{name}={raw!r} is not a whole number; using {default}")
    return default


def _amount(env: Mapping[str, str], name: str, default: float, problems: list[str], unit: str = "GiB") -> float:
    """A number of `unit` (GiB unless said), 0 included; anything else is said in `problems` and the default used."""
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
        if not value >= 0:
            raise ValueError
    except ValueError:
        problems.append(f"{name}={raw!r} is not a number of {unit}; using {default:g}")
        return default
    return value


@dataclasses.dataclass(frozen=True)
class Settings:
    device: str = "child"
    ray_address: str = "auto"
    device_workers: int | None = None
    fake_gpus: int = 0
    worker_threads: int = 64
    spare_worker: bool = True
    spare_device: bool = False
    compile_threads: int | None = None
    compile_cache_gib: float = 8.0
    turn_switch_s: float = 0.0001
    oldest_first: bool = True
    memory_limit_gib: float | None = None
    run_seconds: float = 60.0
    checks_per_minute: int = 10
    warm: bool = True
    class_shapes: tuple[str, ...] = ()
    warm_by_clock: bool = False
    metrics: bool = False
    allow_clear_cache: bool = False
    timing_log: str | None = None
    request_log: str | None = None
    require_gpu: bool = False
    refuse_known_aborts: bool = True
    fault_injection: bool = False
    instructor_token: str = ""
    iap_audience: str = ""
    access_token: str = ""
    problems: tuple[str, ...] = ()  # values that could not be read, said once by whoever starts the server

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        problems = []
        device = env.get("ATTNLAB_DEVICE", "").strip().lower() or "child"
        if device not in DEVICES:
            problems.append(f"ATTNLAB_DEVICE={device!r} is not one of {', '.join(DEVICES)}; using 'child'")
            device = "child"
        limit = None
        raw = env.get("ATTNLAB_MEMORY_LIMIT_GIB", "").strip()
        if raw:
            try:
                limit = float(raw)
                if not limit > 0:
                    raise ValueError
            except ValueError:
                problems.append(f"ATTNLAB_MEMORY_LIMIT_GIB={raw!r} is not a positive number of GiB; ignored")
                limit = None
        run_seconds = _whole(env, "ATTNLAB_RUN_SECONDS", None)
        if env.get("ATTNLAB_RUN_SECONDS", "").strip() and run_seconds is None:
            problems.append(f"ATTNLAB_RUN_SECONDS={env['ATTNLAB_RUN_SECONDS']!r} is not a whole number of seconds; using 60")
        return cls(
            device=device,
            run_seconds=float(run_seconds or 60),
            checks_per_minute=_count(env, "ATTNLAB_CHECKS_PER_MINUTE", 10, problems),
            ray_address=env.get("ATTNLAB_RAY_ADDRESS", "").strip() or "auto",
            device_workers=_whole(env, "ATTNLAB_DEVICE_WORKERS", None),
            fake_gpus=_whole(env, "ATTNLAB_FAKE_GPUS", 0) or 0,
            worker_threads=_whole(env, "ATTNLAB_WORKER_THREADS", 64) or 64,
            spare_worker=_flag(env, "ATTNLAB_SPARE_WORKER", True),
            spare_device=_flag(env, "ATTNLAB_SPARE_DEVICE", False),
            compile_threads=_whole(env, "ATTNLAB_COMPILE_THREADS", None),
            compile_cache_gib=_amount(env, "ATTNLAB_COMPILE_CACHE_GIB", 8.0, problems),
            turn_switch_s=_amount(env, "ATTNLAB_TURN_SWITCH_S", 0.0001, problems, "seconds"),
            oldest_first=_flag(env, "ATTNLAB_OLDEST_FIRST", True),
            memory_limit_gib=limit,
            warm=_flag(env, "ATTNLAB_WARM", True),
            class_shapes=tuple(env.get("ATTNLAB_CLASS_SHAPES", "").split()),
            warm_by_clock=_flag(env, "ATTNLAB_WARM_BY_CLOCK", False),
            metrics=_flag(env, "ATTNLAB_METRICS", False),
            allow_clear_cache=_flag(env, "ATTNLAB_ALLOW_CLEAR_CACHE", False),
            timing_log=env.get("ATTNLAB_TIMING_LOG") or None,
            request_log=env.get("ATTNLAB_REQUEST_LOG") or None,
            require_gpu=_flag(env, "ATTNLAB_REQUIRE_GPU", False),
            refuse_known_aborts=_flag(env, "ATTNLAB_REFUSE_KNOWN_ABORTS", True),
            fault_injection=_flag(env, "ATTNLAB_FAULT_INJECTION", False),
            instructor_token=env.get("ATTNLAB_INSTRUCTOR_TOKEN", "").strip(),
            iap_audience=env.get("ATTNLAB_IAP_AUDIENCE", "").strip(),
            access_token=env.get("ATTNLAB_ACCESS_TOKEN", "").strip(),
            problems=tuple(problems),
        )


_CURRENT: list[Settings] = []


def settings() -> Settings:
    """This process's settings, read from the environment on first use."""
    if not _CURRENT:
        _CURRENT.append(Settings.from_env())
    return _CURRENT[0]


@contextlib.contextmanager
def override(**fields):
    """These settings changed for the duration (tests)."""
    before = settings()
    _CURRENT[0] = dataclasses.replace(before, **fields)
    try:
        yield _CURRENT[0]
    finally:
        _CURRENT[0] = before
