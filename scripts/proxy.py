"""HAProxy in front of the UI replicas, configured from the manifests as Google's load balancer applies them.

    lb = Proxy.start(folder, servers={"ui-0": 8501, "ui-1": 8502}, backend_config=bc_spec)
    lb.url                      # what the learners open
    lb.set_ready("ui-0", False) # a pod's readiness, as the Service's endpoints follow it
    lb.stop()

From the BackendConfig (deploy/k8s/backendconfig.yaml): `sessionAffinity: GENERATED_COOKIE` becomes a cookie the
proxy inserts and routes by (named GCLB, as Google's), `affinityCookieTtlSec` its lifetime, `timeoutSec` the
longest a request or websocket may run (Google's backend service timeout caps a websocket's life), `healthCheck`
the proxy's own checks (path, interval, timeout, thresholds); a replica whose readiness probe fails is taken out
of rotation through HAProxy's runtime API, as Kubernetes takes an unready pod out of the Service's endpoints
(its open websockets stay, as on Google's load balancer). When the replica a cookie names is down, the request
goes to another replica (`option redispatch`), which sets a new cookie.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from attnlab.procs import free_port


def config(port: int, servers: dict[str, int], bc: dict, sock: Path) -> str:
    hc = bc.get("healthCheck", {})
    aff = bc.get("sessionAffinity", {})
    timeout = int(bc.get("timeoutSec", 30))
    if aff.get("affinityType") != "GENERATED_COOKIE":
        raise ValueError(f"the rehearsal's proxy knows GENERATED_COOKIE affinity only, not {aff!r}")
    lines = [
        "global",
        f"  stats socket {sock} mode 600 level admin",
        "  maxconn 4096",
        "defaults",
        "  mode http",
        "  option redispatch",
        "  retries 2",
        "  timeout connect 5s",
        f"  timeout client {timeout}s",
        f"  timeout server {timeout}s",
        f"  timeout tunnel {timeout}s",
        "frontend class",
        f"  bind 127.0.0.1:{port}",
        "  default_backend ui",
        "backend ui",
        "  balance roundrobin",
        f"  cookie GCLB insert indirect nocache maxlife {int(aff.get('affinityCookieTtlSec', 0)) or 86400}s",
        f"  option httpchk GET {hc.get('requestPath', '/')}",
        f"  default-server inter {hc.get('checkIntervalSec', 5)}s rise {hc.get('healthyThreshold', 1)} "
        f"fall {hc.get('unhealthyThreshold', 2)}",
        f"  timeout check {hc.get('timeoutSec', 5)}s",
    ]
    lines += [f"  server {name} 127.0.0.1:{p} cookie {name} check disabled" for name, p in servers.items()]
    return "\n".join(lines) + "\n"


class Proxy:
    def __init__(self, proc: subprocess.Popen, port: int, sock: Path):
        self.proc, self.port, self.sock = proc, port, sock
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, folder: Path, servers: dict[str, int], backend_config: dict) -> Proxy:
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        port, sock = free_port(), folder / "haproxy.sock"
        cfg = folder / "haproxy.cfg"
        cfg.write_text(config(port, servers, backend_config, sock))
        check = subprocess.run([haproxy, "-c", "-f", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its configuration:\n{check.stdout}{check.stderr}")
        log = open(folder / "haproxy.log", "ab")
        proc = subprocess.Popen([haproxy, "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.1)
        return cls(proc, port, sock)

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.sock))
            s.sendall(line.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def set_ready(self, server: str, ready: bool) -> None:
        self.command(f"set server ui/{server} state {'ready' if ready else 'maint'}")

    def states(self) -> dict[str, str]:
        """Each server's state as HAProxy sees it (its `show servers state` table)."""
        rows = [r.split() for r in self.command("show servers state ui").splitlines()[2:] if r.strip()]
        return {r[3]: ("up" if r[5] == "2" else "down") + ("/maint" if int(r[6]) & 1 else "") for r in rows if len(r) > 6}

    def get(self, path: str = "/", cookie: str | None = None, timeout: float = 10.0) -> tuple[int, str | None]:
        """A browser's first request: the page, its status and the affinity cookie the proxy set (if any)."""
        req = urllib.request.Request(self.url + path, headers={"Cookie": cookie} if cookie else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, header = r.status, r.headers.get("Set-Cookie")
        except urllib.error.HTTPError as e:
            status, header = e.code, e.headers.get("Set-Cookie")
        return status, (header.split(";")[0] if header else None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
