#!/usr/bin/env bash
# Wheels for the GPU machine (cp312, manylinux x86_64, no network there): streamlit and altair, at
# the versions of the reference venv (.venv, built by `make`), and every dependency of theirs, read
# from each wheel's METADATA Requires-Dist (markers evaluated for CPython 3.12 on Linux x86_64),
# that the GPU image does not already hold. Into .whl/ (git-ignored; never commit wheels).
#
#   bash scripts/gpu_wheels.sh                      # VENV=.venv by default; prints the list and the size
#   VENV=/work/main/.venv bash scripts/gpu_wheels.sh
#   WITH="pydeck" bash scripts/gpu_wheels.sh        # also names skipped by default (see SKIP)
#
# On the GPU machine (carry .whl):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site
#
# The packages the GPU image holds are read from /work/.library/device/KINDS.md ('Python packages
# already there') when that file is here, else from the copy below. Skipped by default: pydeck
# (~7 MB; streamlit imports it only for st.pydeck_chart, which the lab does not use).
# Other wheels already in .whl/ (tokamax's, say) are left alone; ones this script fetched before
# at another version are replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || VENV=/work/main/.venv
PY="$VENV/bin/python"
mkdir -p .whl
grep -qxF '/.whl/' .gitignore 2>/dev/null || grep -qxF '/.whl/' .git/info/exclude 2>/dev/null \
  || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"

SKIP=${SKIP:-pydeck} WITH=${WITH:-} "$PY" - <<'EOF'
import importlib.metadata as md
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

KINDS = Path("/work/.library/device/KINDS.md")
# As read from KINDS.md on 2026-11 (the 'cuda' image of nvidia-h200*).
ON_GPU = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split()
if KINDS.is_file():
    m = re.search(r"Python packages already there.*?Packages: (.*?)\.\s*$", KINDS.read_text(), re.S | re.M)
    if m:
        ON_GPU = [n.strip() for n in m.group(1).split(",")]
present = {canonicalize_name(n) for n in ON_GPU}
skip = {canonicalize_name(n) for n in os.environ["SKIP"].split()} - {canonicalize_name(n) for n in os.environ["WITH"].split()}
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "extra": ""}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64",
             "manylinux_2_35_x86_64"]
WHL = Path(".whl")


def venv_version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def wheel_of(name):
    key = canonicalize_name(name).replace("-", "_")
    return [w for w in WHL.glob("*.whl") if canonicalize_name(w.name.split("-")[0]).replace("-", "_") == key]


def fetch(req):
    """Download one wheel (no deps) for cp312 manylinux x86_64; the wheel's path."""
    name = canonicalize_name(req.name)
    version = venv_version(req.name)
    pin = f"{req.name}=={version}" if version and req.specifier.contains(version, prereleases=True) \
        else f"{req.name}{req.specifier}"
    want = pin.split("==")[1] if "==" in pin else None
    old = wheel_of(req.name)
    if want and any(w.name.split("-")[1] == want for w in old):
        return next(w for w in old if w.name.split("-")[1] == want)
    for w in old:
        w.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + ["-d", str(WHL), pin], check=True)
    (found,) = wheel_of(req.name)
    return found


def requires(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            r = Requirement(line.split(":", 1)[1].strip())
            if r.marker is None or r.marker.evaluate(ENV):
                out.append(r)
    return out


streamlit = venv_version("streamlit")
todo = [Requirement(f"streamlit=={streamlit}"), Requirement("altair")]
seen, got, skipped, there = set(), [], set(), set()
while todo:
    r = todo.pop(0)
    name = canonicalize_name(r.name)
    if name in seen:
        continue
    seen.add(name)
    if name in present:
        there.add(name)
        continue
    if name in skip:
        skipped.add(name)
        continue
    wheel = fetch(r)
    got.append(wheel)
    todo += requires(wheel)

total = sum(w.stat().st_size for w in got)
everything = sum(w.stat().st_size for w in WHL.glob("*.whl"))
print("fetched into .whl/ (not on the GPU image):")
for w in sorted(got):
    print(f"  {w.stat().st_size / 1e6:7.2f} MB  {w.name}")
print(f"  {total / 1e6:7.2f} MB  in all, {len(got)} wheels")
print(f"already on the GPU image: {', '.join(sorted(there))}")
if skipped:
    print(f"skipped (WITH=... to add): {', '.join(sorted(skipped))}")
print(f".whl/ holds {everything / 1e6:.2f} MB ({everything / 2**20:.2f} MiB) in {len(list(WHL.glob('*.whl')))} wheels")
EOF
# py-spy for `scripts/rehearse.py --sample-to` there (a static binary: it runs on that machine as it is)
mkdir -p .whl/bin && cp "$(dirname "$PY")/py-spy" .whl/bin/ && echo "py-spy: .whl/bin/py-spy ($(du -h .whl/bin/py-spy | cut -f1))"
