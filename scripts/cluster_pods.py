"""The rendered manifests' pods as local processes: what each container runs, with what environment, probed how.

    pods = Cluster.from_manifests(docs, Image.read(DOCKERFILE), ui=2, workers=2, root=Path("/tmp/rhX"))
    pods.head, pods.workers, pods.ui      # Pod: its init containers, container command, env, probes, ports

What Kubernetes and KubeRay would run, translated for one machine and nothing else:
- a Ray container's command is what KubeRay generates from `rayStartParams` (KubeRay v1.6.2,
  `ray-operator/controllers/ray/common/pod.go`: `setMissingRayStartParams` adds `--block`,
  `--metrics-export-port=8080`, `--dashboard-agent-listen-port=52365`, the head's `--dashboard-host=0.0.0.0`
  and a worker's `--address=<head service>:6379`; `generateRayStartCommand` adds `--num-cpus` from the CPU limit,
  else the request, `--memory` from the memory limit, `--num-gpus` from `nvidia.com/gpu`), run as
  `/bin/bash -c -- "ulimit -n 65536; ray start ..."`; a worker pod first waits for the GCS (KubeRay's injected
  `wait-gcs-ready` init container, `ray health-check`), then runs its own init containers (the GPU gate);
- a Deployment's container without `command` runs the image's ENTRYPOINT + CMD (read from deploy/Dockerfile),
  with the image's ENV under the manifest's `env` (a Secret's value is made here, as deploy/setup.sh makes it);
- probes are the manifest's own; a Ray container without one gets the one KubeRay injects for Ray >= 2.53: an HTTP
  GET of `/api/healthz` on the dashboard agent's port (utils/constant.go's defaults: readiness after 10 s every 5 s,
  timeout 1 s, 10 failures; liveness after 30 s every 5 s, timeout 1 s, 120 failures). The manifest sets those
  same probes itself, so that every KubeRay version runs them (older ones inject `wget` commands instead).

What one machine changes, and only that: every port a pod listens on is a free port of this machine (several pods
would all want 8501 or 52365), written into the command where the pod's own flag names it; a Service's DNS name is
127.0.0.1; the pod's volumes are folders under `root` (its /tmp is TMPDIR, so Ray's /tmp/ray is the pod's own);
/app (the image's WORKDIR) is this checkout; a container sees the GPUs its `nvidia.com/gpu` limit gives it and no
others (`CUDA_VISIBLE_DEVICES`, as NVIDIA's device plugin mounts only the devices it allocates): the head and the UI
pods none, worker pod i the i-th (without it, Ray's head on a GPU machine finds the GPU and takes a device worker,
which then runs JAX on the CPU: the head's JAX_PLATFORMS); `python3`, `ray` and their native libraries (`NATIVE`) are this
environment's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shlex
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
HEAD_SVC = "attnlab-head-svc"  # KubeRay names the head's Service <cluster>-head-svc
RAY_PORTS = {"port": 6379, "ray-client-server-port": 10001, "dashboard-port": 8265,
             "dashboard-agent-listen-port": 52365, "metrics-export-port": 8080}
KUBERAY_READY = dict(initial_delay=10, period=5, timeout=1, failures=10)
KUBERAY_LIVE = dict(initial_delay=30, period=5, timeout=1, failures=120)


@dataclasses.dataclass
class Probe:
    """One probe as the kubelet runs it: an HTTP GET of `path` on `port`, every `period` s after `initial_delay`."""
    kind: str  # startup, readiness or liveness
    path: str
    port: int
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    failures: int = 3
    source: str = "manifest"

    @classmethod
    def from_manifest(cls, kind: str, spec: dict, ports: dict) -> Probe:
        get = spec["httpGet"]
        return cls(kind, get["path"], ports[get["port"]], spec.get("initialDelaySeconds", 0), spec.get("periodSeconds", 10),
                   spec.get("timeoutSeconds", 1), spec.get("failureThreshold", 3))


@dataclasses.dataclass
class Pod:
    name: str
    command: list[str]
    env: dict[str, str]
    init: list[tuple[str, list[str], dict[str, str]]]  # (name, command, env) run in order before the container
    probes: list[Probe]
    ports: dict  # the container's port names and numbers -> this machine's port
    folder: Path


@dataclasses.dataclass
class Image:
    """What deploy/Dockerfile's final stage gives a container: ENTRYPOINT, CMD, ENV, WORKDIR."""
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]

    @classmethod
    def read(cls, dockerfile: Path) -> Image:
        text = re.sub(r"\\\n", " ", dockerfile.read_text())
        stage: list[tuple[str, str]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            word, _, rest = line.partition(" ")
            if word.upper() == "FROM":
                stage = []  # only the last stage is the image
            stage.append((word.upper(), rest.strip()))
        entry, cmd, env = [], [], {}
        for word, rest in stage:
            if word == "ENTRYPOINT":
                entry = json.loads(rest)
            elif word == "CMD":
                cmd = json.loads(rest)
            elif word == "ENV":
                for item in shlex.split(rest):
                    key, _, value = item.partition("=")
                    env[key] = expand(value, env)
        return cls(entry, cmd, env)


def expand(value: str, env: dict[str, str]) -> str:
    """Docker's ${VAR}, ${VAR:+word} and ${VAR:-word} against the image's ENV so far (the base's ENV is not known)."""
    def one(m: re.Match) -> str:
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        have = env.get(name, "")
        if op == ":+":
            return expand(word, env) if have else ""
        if op == ":-":
            return have or expand(word, env)
        return have
    return re.sub(r"\$\{(\w+)(?:(:[+-])((?:[^{}]|\{[^{}]*\})*))?\}", one, value)


def kuberay_start(params: dict[str, str], resources: dict, head: bool) -> str:
    """The `ray start` line KubeRay v1.6.2 generates for a Ray container (module docstring)."""
    p = {k: str(v) for k, v in params.items()}
    if not head:
        p.setdefault("address", f"{HEAD_SVC}:6379")
    else:
        p.setdefault("dashboard-host", "0.0.0.0")
    p.setdefault("metrics-export-port", "8080")
    p["block"] = "true"
    p.setdefault("dashboard-agent-listen-port", "52365")
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    if "num-cpus" not in p and (limits.get("cpu") or requests.get("cpu")):
        p["num-cpus"] = str(int(quantity(limits.get("cpu") or requests["cpu"])))
    if "memory" not in p and limits.get("memory"):
        p["memory"] = str(int(quantity(limits["memory"])))
    if "num-gpus" not in p and limits.get("nvidia.com/gpu"):
        p["num-gpus"] = str(int(quantity(limits["nvidia.com/gpu"])))
    flags = "".join(f" --{k} " if v.lower() == "true" else f" --{k}={v} " for k, v in sorted(p.items())
                    if v.lower() != "false")
    return f"ray start{' --head' if head else ''} {flags}"


def quantity(q: str) -> float:
    """A Kubernetes quantity (4, 500m, 3Gi, 1G) as a number."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    return float(m.group(1)) * units.get(m.group(2), 1)


# Where this machine's python3 finds its native libraries (TransformerEngine's on the H200: ../shared/te-on-h200/env.sh)
NATIVE = ("LD_LIBRARY_PATH", "CUDNN_PATH", "NVTE_FRAMEWORK")
# Diagnostics a rehearsal may ask every pod for (where a class's time went: scripts/request_log.py); not the manifests'
DIAGNOSTIC = ("ATTNLAB_REQUEST_LOG", "ATTNLAB_TIMING_LOG")


def visible_gpus(container: dict, pod_index: int = 0) -> str:
    """CUDA_VISIBLE_DEVICES for a container: the devices its `nvidia.com/gpu` limit allocates it, the pod_index-th
    set of this machine's GPUs; none ("") without a limit, as a pod on Kubernetes sees no GPU it was not given."""
    n = int(quantity(str(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))))
    return ",".join(str(pod_index * n + j) for j in range(n))


def env_of(container: dict, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
    return env


class Local:
    """A pod's view of this machine: its folders, its ports, the Services' names."""

    def __init__(self, folder: Path, head_ports: dict[int, int]):
        self.folder, self.head_ports = folder, head_ports
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, value: str) -> str:
        for mount, here in (("/app", ROOT), ("/cache", self.folder / "cache"), ("/tmp", self.folder),
                            ("/home/attnlab", self.folder / "home")):
            if value == mount or value.startswith(mount + "/"):
                return str(here) + value[len(mount):]
        return value

    def address(self, value: str) -> str:
        """A Service's name and port as this machine's: attnlab-head-svc:10001 -> 127.0.0.1:<the head's 10001>."""
        def one(m: re.Match) -> str:
            port = m.group(1)
            return "127.0.0.1" + (f":{self.head_ports.get(int(port), port)}" if port else "")
        return re.sub(rf"\b{HEAD_SVC}(?:\.[a-z0-9.-]*[a-z0-9])?(?::(\d+))?", one, value)

    def env(self, image_env: dict[str, str], manifest_env: dict[str, str], gpus: str) -> dict[str, str]:
        """The image's ENV under the manifest's env (Kubernetes' order), its paths and addresses made local; `gpus`:
        the devices the container was allocated (`visible_gpus`)."""
        env = {k: self.address(self.path(v)) for k, v in {**image_env, **manifest_env}.items()}
        env["HOME"] = self.path(env.get("HOME", "/home/attnlab"))
        env["TMPDIR"] = str(self.folder)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", "")]))
        for name in NATIVE + DIAGNOSTIC:  # this environment's native libraries (the image's paths are the image's)
            if name in os.environ:
                env[name] = os.environ[name]
        env["CUDA_VISIBLE_DEVICES"] = gpus
        for sub in ("cache", "home"):
            (self.folder / sub).mkdir(exist_ok=True)
        return env

    def command(self, argv: list[str]) -> list[str]:
        return [self.address(self.path(a)) for a in argv]


_GIVEN: set[int] = set()


def pod_port() -> int:
    """A free TCP port for a pod to listen on, from 20000-32767: outside the kernel's ephemeral range (32768-60999
    here), which every outgoing connection and every process binding port 0 draws from (Ray's processes do, and
    took a UI pod's port between its choice and Streamlit's bind: the rehearsal's CI run of 2026-12-03), and
    outside Ray's worker ports (10002-19999). Never the same port twice in one rehearsal."""
    for _ in range(1000):
        port = random.randint(20000, 32767)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError("no free port in 20000-32767")


def _ports(container: dict, extra: dict[str, int] | None = None) -> dict:
    """Every port the container declares, by name and number, and `extra` (KubeRay's), each a free port here."""
    ports: dict = {}
    for p in container.get("ports", []):
        local = pod_port()
        ports[p["containerPort"]] = local
        if "name" in p:
            ports[p["name"]] = local
    for name, number in (extra or {}).items():
        ports.setdefault(number, pod_port())
        ports[name] = ports[number]
    return ports


@dataclasses.dataclass
class Cluster:
    head: Pod
    workers: list[Pod]
    ui: list[Pod]
    ray_version: str
    gate: tuple[str, list[str], dict[str, str]] | None  # a worker pod's GPU gate (its first init container)

    @classmethod
    def from_manifests(cls, docs: list[dict], image: Image, *, ui: int | None, workers: int, root: Path, fake_gpus: bool,
                       cookie_secret: str) -> Cluster:
        """`ui`: UI replicas (None: the Deployment's `replicas`)."""
        by_kind = {d["kind"]: d for d in docs}
        rc, dep = by_kind["RayCluster"], by_kind["Deployment"]
        ui = dep["spec"].get("replicas", 1) if ui is None else ui
        secrets = {"attnlab-cookie": {"cookieSecret": cookie_secret}}  # deploy/setup.sh makes it with openssl
        head_spec = rc["spec"]["headGroupSpec"]
        hc = head_spec["template"]["spec"]["containers"][0]
        head_ports = _ports(hc, RAY_PORTS)
        by_number = {n: head_ports[n] for n in RAY_PORTS.values()}
        head = cls._ray_pod("ray-head", hc, head_spec["rayStartParams"], True, image, root / "h", by_number,
                            {k: head_ports[v] for k, v in RAY_PORTS.items()}, secrets, [])
        group = rc["spec"]["workerGroupSpecs"][0]
        tmpl = group["template"]["spec"]
        pods, gate = [], None
        for i in range(workers):
            wc = tmpl["containers"][0]
            own = _ports(wc, {k: RAY_PORTS[k] for k in ("dashboard-agent-listen-port", "metrics-export-port")})
            local = Local(root / f"w{i}", by_number)
            wait = ["/bin/bash", "-c", f"until ray health-check --address {HEAD_SVC}:6379 >/dev/null 2>&1; do sleep 5; done"]
            init = [("wait-gcs-ready", local.command(wait), local.env(image.env, {}, visible_gpus({})))]
            gates = [(c["name"], local.command(c["command"]), local.env(image.env, env_of(c, secrets), visible_gpus(c, i)))
                     for c in tmpl.get("initContainers", [])]
            gate = gates[0] if gates else None
            init += [] if fake_gpus else gates  # a fake GPU cannot pass the gate: rehearse.py shows it refuses once
            params = dict(group["rayStartParams"], **{k: own[RAY_PORTS[k]] for k in
                                                       ("dashboard-agent-listen-port", "metrics-export-port")})
            pods.append(cls._ray_pod(f"gpu-worker-{i}", wc, params, False, image, root / f"w{i}", by_number, own,
                                     secrets, init, i))
        uis = []
        uc = dep["spec"]["template"]["spec"]["containers"][0]
        for i in range(ui):
            local = Local(root / f"u{i}", by_number)
            ports = _ports(uc)
            argv = (uc.get("command") or image.entrypoint) + (uc.get("args") or ([] if uc.get("command") else image.cmd))
            argv = [re.sub(r"^(--server\.port=)(\d+)$", lambda m, p=ports: m.group(1) + str(p[int(m.group(2))]), a) for a in argv]
            probes = [Probe.from_manifest(kind, uc[f"{kind}Probe"], ports) for kind in ("startup", "readiness", "liveness")
                      if f"{kind}Probe" in uc]
            uis.append(Pod(f"ui-{i}", local.command(argv), local.env(image.env, env_of(uc, secrets), visible_gpus(uc)), [],
                           probes, ports,
                           local.folder))
        return cls(head, pods, uis, rc["spec"].get("rayVersion", ""), gate)

    @staticmethod
    def _ray_pod(name, container, params, head, image, folder, head_ports, ports, secrets, init, index=0) -> Pod:
        local = Local(folder, head_ports)
        if head:
            params = dict(params, **{k: ports[k] for k in RAY_PORTS})
        line = "ulimit -n 65536; " + kuberay_start(params, container.get("resources", {}), head)
        agent = ports["dashboard-agent-listen-port"]
        # the container's own probes; KubeRay injects one only where the container has none (v1.6.2's, for Ray 2.53+)
        by_number = {**ports, **{number: ports[name] for name, number in RAY_PORTS.items() if name in ports}}
        injected = {"readiness": Probe("readiness", "/api/healthz", agent, source="KubeRay", **KUBERAY_READY),
                    "liveness": Probe("liveness", "/api/healthz", agent, source="KubeRay", **KUBERAY_LIVE)}
        probes = [Probe.from_manifest(kind, container[f"{kind}Probe"], by_number) if f"{kind}Probe" in container
                  else probe for kind, probe in injected.items()]
        return Pod(name, ["/bin/bash", "-c", "--", local.address(line)],
                   local.env(image.env, env_of(container, secrets), visible_gpus(container, index)),
                   init, probes, ports, local.folder)
