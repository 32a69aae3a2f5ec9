"""The server runs on a read-only root filesystem, as the GKE pod does (readOnlyRootFilesystem: true).

The server starts in a mount namespace of its own (`unshare -m`, as root) where `/` is remounted
read-only and only a scratch tmpfs (TMPDIR: the pod's emptyDir /tmp) holding the cache volume is writable, with the pod's
environment: JAX's compilation cache on the cache volume, HOME on the read-only root, and the device worker
in its child process (its own socket, no file). A browser visits every page; none may fail, nothing may be
refused a write, and the compiled programs must appear on the volume. Skipped where no mount namespace can
be made (not root, no unshare)."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.browser_util import EXCEPTION, PAGES, StreamlitServer, open_page

pytestmark = pytest.mark.browser
# The pod's writable /tmp is a fresh tmpfs here at a path of its own (TMPDIR points to it), so that a
# checkout that itself lives under /tmp (a CI clone) stays visible; the cache volume is under it.
READ_ONLY = ('mount --make-rprivate / && mount -o remount,ro,bind / && mount -t tmpfs tmpfs "$SCRATCH" '
             '&& mkdir -p "$SCRATCH/cache/jax" && exec "$@"')


@pytest.fixture
def scratch():
    """An empty directory on the root filesystem, to be covered by the server's tmpfs."""
    path = Path("/var/tmp") / f"attnlab-scratch-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home(scratch):
    """HOME on the (soon read-only) root, as in the image."""
    path = Path("/var/tmp") / f"attnlab-home-{uuid.uuid4().hex[:8]}"
    (path / ".streamlit").mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --make-rprivate / && mount -o remount,ro,bind /"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare to make a read-only mount namespace")
def test_every_page_serves_on_a_read_only_root(scratch, home, browser):
    cache = scratch / "cache"
    env = {"HOME": str(home), "SCRATCH": str(scratch), "TMPDIR": str(scratch),
           "ATTNLAB_WARM": "0", "JAX_COMPILATION_CACHE_DIR": f"{cache}/jax",
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    with StreamlitServer(prefix=["unshare", "-m", "sh", "-c", READ_ONLY, "sh"], env=env, startup_timeout=120) as server:
        context = browser.new_context()
        page = context.new_page()
        for path, title in PAGES:
            open_page(page, server.url, path, title, timeout_ms=240_000)
            assert page.locator(EXCEPTION).count() == 0, (path, page.locator(EXCEPTION).first.inner_text()[:500])
        context.close()
        assert server.proc.poll() is None, server.log()
        log = server.log(tail=1_000_000)
        assert "Read-only file system" not in log, log[-3000:]
        # what the pod keeps across restarts landed on the volume, seen through the server's own namespace
        volume = Path(f"/proc/{server.proc.pid}/root{cache}")
        assert any((volume / "jax").iterdir()), "no compiled program in JAX's cache on the volume"
