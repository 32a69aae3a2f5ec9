"""The GPU image's Python stack is requirements-image.lock, and nothing else: checked here, without Docker.

Rule: the lock (uv, CPython 3.12, Linux x86_64, hashes) holds JAX's CUDA 13 wheels, TransformerEngine and the app
within every bound of requirements-image.txt and of tokamax's own metadata, Ray at requirements.lock's version;
uv re-resolving requirements-image.txt against it gives it back byte for byte; deploy/Dockerfile installs exactly
it (TransformerEngine's JAX extension built from the sdist it pins) and nothing unpinned. Why: the image cannot be
built here, so what it will contain has to be decided, and checked, by its lock.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

requirements = pytest.importorskip("packaging.requirements")
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements-image.lock"
WANTS = REPO / "requirements-image.txt"
UV_CONFIG = REPO / "deploy" / "uv-image.toml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
MAKEFILE = (REPO / "Makefile").read_text()
UV_VERSION = re.search(r"^UV_VERSION := (\S+)", MAKEFILE, re.MULTILINE).group(1)
VENV_SITE = "/opt/venv/lib/python3.12/site-packages"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line[:1].isalnum():
            name, _, version = line.split(";")[0].split(" ")[0].partition("==")
            pins[_norm(name.split("[")[0])] = version
    return pins


def _requirements(path: Path) -> list:
    return [requirements.Requirement(line.split(" #")[0]) for line in path.read_text().splitlines()
            if line[:1].isalnum()]


def _stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (INSTRUCTION, arguments), continuation lines joined."""
    stages: list[list[tuple[str, str]]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        pending = ""
        if word.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word.upper(), rest.strip()))
    return stages


def _args(stage: list[tuple[str, str]], word: str) -> list[str]:
    return [args for inst, args in stage if inst == word]


LOCKED = _pins(LOCK)


def test_the_image_builds_on_pinned_cuda_13_images_a_devel_builder_and_a_base_runtime():
    builder, runtime = _stages()
    (first,), (last,) = _args(builder, "FROM"), _args(runtime, "FROM")
    devel = re.fullmatch(r"nvidia/cuda:(13\.\d+\.\d+)-(cudnn-)?devel-(ubuntu24\.04) AS builder", first)
    base = re.fullmatch(r"nvidia/cuda:(13\.\d+\.\d+)-base-(ubuntu24\.04)", last)
    assert devel and base, (first, last)
    assert (devel.group(1), devel.group(3)) == base.groups(), "builder and runtime: one CUDA, one Ubuntu"
    assert any("/opt/venv /opt/venv" in a and "--from=builder" in a for a in _args(runtime, "COPY"))


def test_the_lock_is_what_make_lock_image_makes_for_cpython_312_with_hashes():
    header = LOCK.read_text().splitlines()[1].strip("# ")
    flags = re.search(r"^IMAGE_LOCK_FLAGS := (.*?[^\\])$", MAKEFILE, re.MULTILINE | re.DOTALL).group(1)
    flags = " ".join(flags.replace("\\\n", " ").split())
    assert header == f"uv pip compile requirements-image.txt {flags} -o requirements-image.lock"
    assert "--python-version 3.12 --python-platform x86_64-unknown-linux-gnu --generate-hashes" in flags
    assert "image-base" not in MAKEFILE and not (REPO / "deploy" / "image-base.txt").exists()
    entries = re.split(r"\n(?=[a-z0-9])", LOCK.read_text().split("\n", 2)[2])
    assert len(entries) == len(LOCKED) and all("--hash=sha256:" in e for e in entries)
    assert "requirements-image.lock" not in (REPO / ".dockerignore").read_text()


def test_the_lock_holds_the_cuda_13_accelerator_stack_and_no_cuda_12_core():
    jax = LOCKED["jax"]
    for name in ("jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt"):
        assert LOCKED[name] == jax, name
    for name in ("nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cublas", "nvidia-cuda-runtime", "nvidia-curand",
                 "transformer-engine", "transformer-engine-cu13", "transformer-engine-jax", "tokamax"):
        assert name in LOCKED, name
    assert LOCKED["transformer-engine-cu13"] == LOCKED["transformer-engine-jax"] == LOCKED["transformer-engine"]
    assert not {"transformer-engine-cu12", "jax-cuda12-plugin", "jax-cuda12-pjrt"} & set(LOCKED)


def test_the_lock_meets_every_bound_of_requirements_image_and_ray_is_requirements_locks():
    for req in _requirements(WANTS):
        name = _norm(req.name)
        assert name in LOCKED, f"{name} is not in requirements-image.lock: run `make lock-image`"
        assert req.specifier.contains(LOCKED[name], prereleases=True), f"{name}=={LOCKED[name]} vs {req}"
    assert LOCKED["ray"] == _pins(REPO / "requirements.lock")["ray"], "Ray must be one version in every pod"
    (ray,) = [r for r in _requirements(WANTS) if r.name == "ray"]
    assert {"default", "client"} <= ray.extras  # the dashboard agent KubeRay probes, and ray:// from the UI pods
    raycluster = (REPO / "deploy" / "k8s" / "raycluster.yaml").read_text()
    assert re.search(rf'rayVersion: "?{re.escape(LOCKED["ray"])}"?', raycluster)


def test_the_image_installs_every_app_requirement():
    lines = (REPO / "requirements.txt").read_text().splitlines()
    app = lines[: next(i for i, line in enumerate(lines) if line.startswith("# The tests"))]
    for req in (requirements.Requirement(line) for line in app if line[:1].isalnum()):
        assert _norm(req.name) in LOCKED, req.name
        assert req.specifier.contains(LOCKED[_norm(req.name)], prereleases=True), req


def test_the_lock_meets_tokamaxs_own_requirements_read_from_pypi():
    """tokamax's bounds (jax>=0.11.1 among them) as PyPI serves them for the locked version: not typed here."""
    requires, why = None, ""
    for url in (f"https://pypi.org/pypi/tokamax/{LOCKED['tokamax']}/json", "https://pypi.org/pypi/tokamax/json"):
        try:  # the version's own page; else the project's, when the locked version is its newest
            with urllib.request.urlopen(url, timeout=20) as answer:
                info = json.load(answer)["info"]
        except OSError as err:
            why += f"{url}: {err}; "
            continue
        if info["version"] == LOCKED["tokamax"]:
            requires = info["requires_dist"]
            break
        why += f"{url}: newest is {info['version']}; "
    if requires is None:
        pytest.skip(f"tokamax {LOCKED['tokamax']}'s metadata cannot be read from PyPI here ({why}); CI reaches it")
    environment = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    needed = [r for r in map(requirements.Requirement, requires) if not r.marker or r.marker.evaluate(environment)]
    assert any(r.name == "jax" for r in needed), requires
    for req in needed:
        assert req.specifier.contains(LOCKED[_norm(req.name)], prereleases=True), f"{req} vs the lock"


def test_uv_resolves_transformer_engines_jax_sdist_with_the_metadata_its_cuda_13_build_gives():
    (entry,) = tomllib.loads(UV_CONFIG.read_text())["dependency-metadata"]
    assert _norm(entry["name"]) == "transformer-engine-jax" and entry["version"] == LOCKED["transformer-engine-jax"]
    wants = {_norm(r.name): r for r in map(requirements.Requirement, entry["requires-dist"])}
    assert str(wants["transformer-engine-cu13"].specifier) == f"=={entry['version']}"  # setup.py: cu<JAX's major>
    for name, req in wants.items():
        assert req.specifier.contains(LOCKED[name], prereleases=True), req


def _uv() -> str:
    for candidate in (REPO / ".venv" / "uv" / "bin" / "uv", shutil.which("uv")):
        if candidate and Path(candidate).is_file():
            out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True)
            if out.stdout.split()[1:2] == [UV_VERSION]:
                return str(candidate)
    return ""


def test_uv_re_resolving_requirements_image_against_the_lock_gives_the_lock_back(tmp_path_factory):
    uv = _uv()
    if not uv:  # the Makefile's uv, installed beside the test run as `make lock-image` installs it
        target = tmp_path_factory.mktemp("uv")
        got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target),
                              f"uv=={UV_VERSION}"], capture_output=True, text=True, timeout=300)
        if got.returncode != 0:
            pytest.skip(f"uv {UV_VERSION} could not be installed (no index reachable?): {got.stderr[-300:]}")
        uv = str(target / "bin" / "uv")
    work = tmp_path_factory.mktemp("relock")
    (work / "deploy").mkdir()
    for path in (WANTS, LOCK, UV_CONFIG):
        shutil.copy(path, work / path.relative_to(REPO))
    command = LOCK.read_text().splitlines()[1].strip("# ").split()  # the Makefile's (test above)
    out = subprocess.run([uv, *command[1:], "--quiet"], cwd=work, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "UV_NO_PROGRESS": "1"})
    if out.returncode != 0 and re.search(r"(?i)failed to fetch|connect|dns|network|timed out", out.stderr):
        pytest.skip(f"uv cannot reach the package index: {out.stderr[-400:]}")
    assert out.returncode == 0, out.stderr
    assert (work / LOCK.name).read_text() == LOCK.read_text(), "the lock is stale: run `make lock-image`"
    # uv keeps a preferred pin's hashes from the file it rewrites: the same pins, as constraints, into a new file
    # give the index's own hashes
    (work / "pins.txt").write_text("".join(f"{name}=={version}\n" for name, version in LOCKED.items()))
    out = subprocess.run([uv, *command[1:-2], "-c", "pins.txt", "-o", "fresh.lock", "--quiet"], cwd=work,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "UV_NO_PROGRESS": "1"})
    assert out.returncode == 0, out.stderr
    assert _hashes(work / "fresh.lock") == _hashes(LOCK), "a pin's hashes are not the index's: `make lock-image`"


def _hashes(path: Path) -> dict[str, tuple[str, list[str]]]:
    entries = re.split(r"\n(?=[a-z0-9])", path.read_text().split("\n", 2)[2])
    return {_norm(e.split("==")[0]): (e.split("==")[1].split()[0], sorted(re.findall(r"sha256:(\w+)", e)))
            for e in entries}


def test_the_dockerfile_installs_exactly_the_lock_and_nothing_unpinned():
    builder, runtime = _stages()
    runs = " ; ".join(_args(builder, "RUN"))
    assert any("requirements-image.lock" in a for a in _args(builder, "COPY"))
    installs = re.findall(r"pip install ([^;&|]*)", runs)
    assert len(installs) == 4, installs  # uv; the lock; TE-JAX's build tools; TE-JAX
    lock_install, = [i for i in installs if "-r /tmp/attnlab/requirements-image.lock" in i]
    assert "--require-hashes" in lock_install and "--no-deps" in lock_install and "--excludes" in lock_install
    assert "echo transformer-engine-jax > /tmp/attnlab/sdist.txt" in runs  # all but the one sdist
    te, = [i for i in installs if '"$pin"' in i]
    assert "--require-hashes" in te and "--no-build-isolation" in te and "-c /tmp/attnlab/requirements-image.lock" in te
    assert "pin=$(grep -oE '^transformer-engine-jax==[^ ]+' /tmp/attnlab/requirements-image.lock)" in runs
    assert "NVTE_FRAMEWORK=jax" in runs and "nvidia/cudnn/include" in runs and "nvidia/nccl/include" in runs
    for install in installs:  # everything else by exact version
        words = [w.strip("\"'") for w in install.split() if not w.startswith(("-", "/", '"$'))]
        assert words == [] or all(re.fullmatch(r"[A-Za-z0-9_.-]+==\$\{[A-Z0-9_]+\}", w) for w in words), install
    defaults = dict(a.split("=", 1) for a in _args(builder, "ARG") if "=" in a)
    assert defaults["UV_VERSION"] == UV_VERSION
    assert re.search(r"uv pip uninstall --python \"\$py\" setuptools pybind11", runs.replace("\"$uv\"", "uv"))
    assert "diff /tmp/attnlab/locked.txt /tmp/attnlab/installed.txt" in runs and "pip check" in runs
    assert not re.search(r"pip install|uv ", " ".join(_args(runtime, "RUN")))  # the runtime only copies the venv


def test_the_runtime_image_checks_its_libraries_and_imports_at_build_time():
    _, runtime = _stages()
    run = " ".join(_args(runtime, "RUN"))
    assert "ldd" in run and "grep 'not found'" in run and "libcuda" in run
    imports = re.search(r'python3 -c "import ([^;]+);', run).group(1).replace(" ", "").split(",")
    for module in ("transformer_engine.jax", "tokamax", "jax", "flax", "streamlit", "ray", "ray.dashboard",
                   "ray.dashboard.optional_deps", "grpc"):
        assert module in imports, module
    assert 'LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/cuda/compat" python3 -c' in run  # for the import only


def test_the_images_library_path_starts_with_the_driver_and_names_the_wheels_cuda_libraries():
    _, runtime = _stages()
    env = dict(re.findall(r"([A-Z_]+)=(\S+)", " ".join(_args(runtime, "ENV"))))
    path = env["LD_LIBRARY_PATH"].split(":")
    assert path[:2] == ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"]  # GKE's driver mount, first
    for lib in ("cu13", "cudnn", "nccl"):  # TransformerEngine's, found by no RPATH
        assert f"{VENV_SITE}/nvidia/{lib}/lib" in path, lib
    assert "$" not in env["LD_LIBRARY_PATH"], "complete in the image: the pods do not set it"
    assert env["PATH"].startswith("/opt/venv/bin:")


def test_the_test_tools_stay_out_of_the_image():
    lines = (REPO / "requirements.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# The tests"))
    tools = {_norm(r.name) for r in map(requirements.Requirement, (ln for ln in lines[start:] if ln[:1].isalnum()))}
    tools -= {"pyyaml", "py-spy"}  # streamlit's own dependency; Ray's dashboard (ray[default]) samples with py-spy
    assert tools and not tools & set(LOCKED), tools & set(LOCKED)


def test_the_gpu_requirements_and_pyprojects_extras_ask_for_cuda_13_and_match_requirements_txt():
    gpu = (REPO / "requirements-gpu.txt").read_text()
    assert "jax[cuda13]" in gpu and "core_cu13" in gpu and "nvidia-curand" in gpu
    assert "cuda12]" not in "".join(ln for ln in gpu.splitlines() if not ln.startswith("#"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def specs(lines) -> dict[str, str]:
        return {_norm(r.name): str(r.specifier) for r in map(requirements.Requirement, lines)}

    lines = (REPO / "requirements.txt").read_text().splitlines()
    app = [ln for ln in lines[: next(i for i, ln in enumerate(lines) if ln.startswith("# The tests"))] if ln[:1].isalnum()]
    assert specs(project["dependencies"] + extras["app"]) == specs(app)
    assert specs(extras["gpu"]) == specs(ln for ln in gpu.splitlines() if ln[:1].isalnum())


def test_image_stack_compares_this_python_with_the_lock_and_lists_the_other_wheels(tmp_path):
    spec = importlib.util.spec_from_file_location("image_stack", REPO / "scripts" / "image_stack.py")
    stack = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stack)
    lock = tmp_path / "lock.txt"
    numpy = stack.installed_versions()["numpy"]
    lock.write_text(f"jax==0.0.1 \\\n    --hash=sha256:00\nnumpy=={numpy}\nstreamlit==1.0\n")
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "image_stack.py"), "--lock", str(lock), "--json",
                          str(tmp_path / "rows.json")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {r["package"]: r for r in json.loads((tmp_path / "rows.json").read_text())["rows"]}
    assert rows["jax"]["locked"] == "0.0.1" and rows["jax"]["equal"] is False
    assert rows["numpy"]["equal"] is True and "streamlit" not in rows
    assert re.search(r"^jax\s+0\.0\.1\s+\S+\s+NO$", out.stdout, re.MULTILINE)
    wheels = stack.wheel_commands(LOCK, "/tmp/w")
    assert len(wheels) == len([n for n in LOCKED if not stack.ACCELERATOR.match(n)]) > 100
    assert any(w.endswith(f" ray=={LOCKED['ray']}") for w in wheels) and not any(" jax==" in w for w in wheels)


def stack_row(name: str) -> bool:
    return bool(re.match(r"^(jax|jaxlib|jax-cuda\d+-(plugin|pjrt)|nvidia-.+|transformer-engine(-.+)?|numpy|ml-dtypes|scipy)$", name))


def test_the_images_accelerator_stack_is_the_one_the_h200_test_machine_runs():
    """Every accelerator package the H200 machine has installed (deploy/h200-stack.json: scripts/image_stack.py --json
    there, 2026-12-03) is locked at its version there, so the GPU tests on that machine test the image's JAX, CUDA
    and cuDNN; the packages that machine lacks are the ones it gets elsewhere (its system CUDA 13.0 toolkit's nvcc)
    or that travel to it as wheels of the locked versions (TransformerEngine 2.20.2)."""
    recorded = json.loads((REPO / "deploy" / "h200-stack.json").read_text())["installed"]
    there = {n: v for n, v in recorded.items() if v not in (None, "-")}
    locked = {n: v for n, v in LOCKED.items() if n in there}
    assert len(locked) > 15 and {n: there[n] for n in locked} == locked
    missing = {n for n in LOCKED if stack_row(n) and n not in there}
    assert all(n.startswith(("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cutlass-dsl",
                             "nvidia-cudnn-frontend", "transformer-engine", "nvidia-cuda-cccl")) for n in missing), missing
    assert {LOCKED[n] for n in ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm")} == {there["nvidia-cuda-nvrtc"]}
    assert {LOCKED[n] for n in LOCKED if n.startswith("transformer-engine")} == {"2.20.2"}  # ../shared/te-on-h200
