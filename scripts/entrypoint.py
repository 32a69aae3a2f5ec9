"""The container's entry: check the GPU, then become the server (exec, so signals reach it).

    python3 scripts/entrypoint.py streamlit run app.py --server.port=8501 --server.address=0.0.0.0

With ATTNLAB_REQUIRE_GPU=1 (set by the GPU image and the GKE deployment) it refuses to start,
with one log line that says why, when JAX's backend is not the GPU: JAX quietly falls back to the
CPU when it cannot load the NVIDIA driver, and a class would then time a CPU as if it were a GPU.
The pod then never becomes ready and `kubectl logs` shows the line. Without the setting (a
laptop, CI) it starts the command straight away and never imports JAX.
"""

from __future__ import annotations

import os
import sys

EXIT_NO_GPU = 3
DEFAULT_COMMAND = ["python3", "serve.py", "--server.port=8501", "--server.address=0.0.0.0"]


def log(message: str) -> None:
    print(f"attnlab-entrypoint: {message}", file=sys.stderr, flush=True)


def gpu_problem() -> str | None:
    """None when JAX computes on a GPU, else a sentence saying what JAX found instead."""
    try:
        import jax
        import jax.numpy as jnp

        backend = jax.default_backend()
        if backend == "gpu":
            jnp.ones(8).sum().block_until_ready()  # the driver loads and a kernel runs
            return None
        found = f"JAX's backend is {backend!r} ({', '.join(str(d) for d in jax.devices())})"
    except Exception as err:  # e.g. JAX_PLATFORMS=cuda and no driver: backend init raises
        found = f"JAX could not start a GPU backend ({type(err).__name__}: {err or 'no message'})"
    return (
        f"{found}, not 'gpu'. LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')!r}, "
        f"JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '')!r}. Hint: the pod must ask for "
        "nvidia.com/gpu and run on a GPU node with the NVIDIA driver (GKE mounts it at "
        "/usr/local/nvidia/lib64, which LD_LIBRARY_PATH must include); check `nvidia-smi` in the pod."
    )


def main(argv: list[str]) -> int:
    command = argv or DEFAULT_COMMAND
    if os.environ.get("ATTNLAB_REQUIRE_GPU", "").strip().lower() in {"1", "true", "yes"}:
        problem = gpu_problem()
        if problem:
            log(f"refusing to start: ATTNLAB_REQUIRE_GPU=1 but {problem}")
            return EXIT_NO_GPU
        log("GPU check passed: JAX's backend is 'gpu'")
    sys.stdout.flush()
    os.execvp(command[0], command)  # does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
