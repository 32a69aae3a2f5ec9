"""The device service on a real GPU: the worker process owns the GPU, the caller's process never opens it.

Run on the GPU machine (`pytest -m gpu`); skipped elsewhere.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.measure import runs
from attnlab.service.request import Request, WorkerLost
from attnlab.shapes import AttentionShape

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
BF16 = AttentionShape(dtype="bfloat16")

CALLER = r"""
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"          # as serve.py keeps a UI process
from attnlab.service.child import ChildWorker
from attnlab.service.request import Request
from attnlab.measure import runs
from attnlab.shapes import AttentionShape
import jax
worker = ChildWorker(env={"JAX_PLATFORMS": "", "ATTNLAB_WARM": "0"})
reply = worker.call(Request.of(runs.run, AttentionShape(dtype="bfloat16"), ("sdpa_cudnn",), timed=True))
info = worker.infos()[0]
r = reply.value[0]
print("RESULT", r.status, info.device.backend, info.pid != os.getpid(), jax.default_backend(),
      r.timing.device_ms is not None and r.timing.device_ms > 0, "cudnn" in (r.row()["what_ran"] or "").lower() or
      r.row()["kernels"] is not None)
worker.close()
"""


def test_the_child_worker_owns_the_gpu_and_its_caller_stays_on_the_cpu():
    out = subprocess.run([sys.executable, "-c", CALLER], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), out.stderr[-3000:])
    assert line.split()[1:] == ["ok", "gpu", "True", "cpu", "True", "True"], line


def test_a_native_abort_in_the_gpu_worker_costs_one_request():
    from attnlab.service import faults
    from attnlab.service.child import ChildWorker

    worker = ChildWorker(env={"ATTNLAB_FAULT_INJECTION": "1", "ATTNLAB_WARM": "0", "JAX_PLATFORMS": ""})
    try:
        assert worker.call(Request.of(runs.run, BF16, ("sdpa_cudnn",))).value[0].ok
        with pytest.raises(WorkerLost, match="SIGABRT"):
            worker.call(Request.of(faults.abort))
        assert worker.call(Request.of(runs.run, BF16, ("sdpa_cudnn",))).value[0].ok  # a new process on the GPU
        assert worker.infos()[0].device.backend == "gpu" and worker.restarts == 1
    finally:
        worker.close()


def test_a_ray_actor_with_one_gpu_runs_cudnn_and_comes_back_after_an_abort():
    ray = pytest.importorskip("ray")
    from attnlab.service import faults
    from attnlab.service.ray_workers import RayWorkers

    client = RayWorkers("local", workers=1, worker_env={"ATTNLAB_FAULT_INJECTION": "1", "ATTNLAB_WARM": "0",
                                                        "JAX_PLATFORMS": ""})
    try:
        assert client.gpus_each == 1 and client.wait_ready(300)
        (r,) = client.call(Request.of(runs.run, BF16, ("sdpa_cudnn",), timed=True)).value
        assert r.ok and r.timing.device_ms > 0
        info = client.infos()[0]
        assert info.device.backend == "gpu" and info.pid != os.getpid()
        with pytest.raises(WorkerLost):
            client.call(Request.of(faults.abort))
        assert client.wait_ready(300)
        assert client.call(Request.of(runs.run, BF16.replace(causal=True), ("sdpa_cudnn",))).value[0].ok
    finally:
        for name in client.names:
            ray.kill(ray.get_actor(name, namespace="attnlab"))
        ray.shutdown()
