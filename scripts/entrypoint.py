"""The container's entry: check the GPU, then become the server (exec, so signals reach it).

    python3 scripts/entrypoint.py python3 serve.py --server.port=8501 --server.address=0.0.0.0
    python3 scripts/entrypoint.py --check      # the gate alone (a device worker pod's init container)

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


# the oldest driver branch each CUDA major runs on (NVIDIA's CUDA toolkit release notes, table 3)
MIN_DRIVER = {12: 525, 13: 580}


def driver_problem(version_file: str = "/proc/driver/nvidia/version", cuda: str | None = None) -> str | None:
    """A sentence when the node's NVIDIA driver is older than the image's CUDA needs (GKE installs the
    driver the node pool asks for: deploy/terraform's gpu_driver_version), else None."""
    import re

    cuda = cuda if cuda is not None else os.environ.get("CUDA_VERSION", "")
    try:
        with open(version_file) as f:
            found = re.search(r"Kernel Module\s+(\d+)\.", f.read())
    except OSError:
        return None  # no driver file: the JAX check below says what is missing
    major = int(cuda.split(".")[0]) if cuda[:1].isdigit() else None
    need = MIN_DRIVER.get(major) if major else None
    if found and need and int(found.group(1)) < need:
        return (f"the NVIDIA driver is {found.group(1)}, older than CUDA {cuda} needs ({need} or newer): give the "
                "GPU node pool a newer driver (gpu_driver_version = \"LATEST\" in deploy/terraform/main.tf) or "
                "build the image on an older CUDA")
    return None


def gpu_problem() -> str | None:
    """None when the driver is new enough for the image's CUDA, JAX computes on a GPU, cuDNN's fused attention
    runs there and TransformerEngine (where installed) imports; else a sentence saying what was found instead."""
    old = driver_problem()
    if old:
        return old
    try:
        import jax
        import jax.numpy as jnp

        backend = jax.default_backend()
        if backend == "gpu":
            jnp.ones(8).sum().block_until_ready()  # the driver loads and a kernel runs
            return cudnn_problem() or te_problem()
        found = f"JAX's backend is {backend!r} ({', '.join(str(d) for d in jax.devices())})"
    except Exception as err:  # e.g. JAX_PLATFORMS=cuda and no driver: backend init raises
        found = f"JAX could not start a GPU backend ({type(err).__name__}: {err or 'no message'})"
    return (
        f"{found}, not 'gpu'. LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')!r}, "
        f"JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '')!r}. Hint: the pod must ask for "
        "nvidia.com/gpu and run on a GPU node with the NVIDIA driver (GKE mounts it at "
        "/usr/local/nvidia/lib64, which LD_LIBRARY_PATH must include); check `nvidia-smi` in the pod."
    )


def cudnn_problem() -> str | None:
    """One tiny cuDNN attention call: a GPU whose cuDNN cannot load passes a plain kernel, not this."""
    import jax
    import jax.numpy as jnp

    try:
        x = jnp.ones((1, 8, 1, 64), jnp.bfloat16)
        jax.nn.dot_product_attention(x, x, x, implementation="cudnn").block_until_ready()
    except Exception as err:
        return (f"JAX runs on the GPU but cuDNN's fused attention does not ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no message'}); LD_LIBRARY_PATH="
                f"{os.environ.get('LD_LIBRARY_PATH', '')!r}")
    return None


def te_problem() -> str | None:
    """Where TransformerEngine is installed, its JAX module must import (else a sentence); None otherwise."""
    import importlib.util

    if importlib.util.find_spec("transformer_engine") is None:
        return None
    try:
        import transformer_engine.jax  # noqa: F401
    except Exception as err:
        return f"TransformerEngine is installed but transformer_engine.jax does not import ({type(err).__name__}: {err})"
    return None


def main(argv: list[str]) -> int:
    check_only = argv[:1] == ["--check"]
    command = argv or DEFAULT_COMMAND
    if check_only or os.environ.get("ATTNLAB_REQUIRE_GPU", "").strip().lower() in {"1", "true", "yes"}:
        problem = gpu_problem()
        if problem:
            log(f"refusing to start: ATTNLAB_REQUIRE_GPU=1 but {problem}")
            return EXIT_NO_GPU
        log("GPU check passed: JAX's backend is 'gpu', a cuDNN attention call ran")
    if check_only:
        return 0
    sys.stdout.flush()
    os.execvp(command[0], command)  # does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
