"""Shared test setup: GPU tests skip cleanly without a GPU; browser tests skip without Chromium
unless ATTNLAB_REQUIRE_BROWSER=1 (CI), where a missing browser is a failure, not a skip."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# AppTests run app.py in this process: no background warm-up there (it would compete with, and show up in,
# what a test measures); the warm-up itself is tested through `python -m attnlab warm`
os.environ.setdefault("ATTNLAB_WARM", "0")
# AppTests and unit tests call the device worker's code in this process (a server started by a test gets
# the real default, a child process: see tests/test_service.py and the browser tests)
os.environ.setdefault("ATTNLAB_DEVICE", "inprocess")
# learners' programs that stopped a worker are remembered in a folder (attnlab/yourturn/suspects.py), by default
# one per user on the machine: a test process killed while it ran a mistake's program (a CI run stopped by hand)
# left a marker that later runs read as a crash, and refused that program in every test after (the digests
# include the checkout's path, so a clone at the same path met it again). Each test run has its own, removed by
# the process that made it (pytest-xdist's workers inherit the controller's).
if not os.environ.get("ATTNLAB_SUSPECTS_DIR"):
    os.environ["ATTNLAB_SUSPECTS_DIR"] = tempfile.mkdtemp(prefix="attnlab-suspects-tests-")
    atexit.register(shutil.rmtree, os.environ["ATTNLAB_SUSPECTS_DIR"], ignore_errors=True)
sys.path.insert(0, str(ROOT))
# as the UI server and the device workers run (attnlab.threads), from the first test on: an in-process device
# worker sets it when a test first makes one, and tests after it would otherwise see other pandas strings
from attnlab import threads  # noqa: E402

threads.serve_many_threads()


def _backend() -> str:
    import jax

    return jax.default_backend()


def pytest_collection_modifyitems(config, items):
    gpu = _backend() == "gpu"
    skip_gpu = pytest.mark.skip(reason=f"needs a CUDA GPU; JAX's backend here is {_backend()}")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    skip_browser = pytest.mark.skip(reason="needs Debian's Chromium (apt-get install chromium) and playwright")
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip_gpu)
        if "browser" in item.keywords and not chromium and os.environ.get("ATTNLAB_REQUIRE_BROWSER") != "1":
            item.add_marker(skip_browser)


@pytest.fixture
def small_memory_cap(monkeypatch):
    """A 64 MiB budget, so that 'over the memory budget' is reachable with small shapes."""
    from attnlab import settings
    from attnlab.admission import DEVICE

    with settings.override(memory_limit_gib=64 / 1024):
        monkeypatch.setattr(DEVICE, "_budget", None)  # read again from the settings
        yield
    DEVICE._budget = None


@pytest.fixture
def with_shipped(monkeypatch):
    """Pages see the small stand-in for the shipped H200 measurements."""
    import json

    from attnlab import shipped
    from tests.apptest_util import fake_shipped

    data = json.loads(json.dumps(fake_shipped()))  # as it comes back from a JSON file
    # a suite's file under every name but the ladder's and the rings' (files of another kind: none ship here)
    monkeypatch.setattr(shipped, "load", lambda name="h200": None if name == "h200_ladder" or name.startswith("ring_")
                        else data)
    return data


@pytest.fixture
def without_shipped(monkeypatch):
    """Pages see no shipped measurements at all."""
    from attnlab import shipped

    monkeypatch.setattr(shipped, "load", lambda name="h200": None)


@pytest.fixture(scope="session")
def browser():
    """One headless Debian Chromium for every browser test (Playwright's sync API allows one per process)."""
    from playwright.sync_api import sync_playwright

    from tests.browser_util import launch_kwargs

    with sync_playwright() as p:
        b = p.chromium.launch(**launch_kwargs())
        yield b
        b.close()


@pytest.fixture
def device_turns(monkeypatch):
    """A list that gets one entry each time a thread asks for this process's device without holding it."""
    from attnlab.admission import DEVICE

    turns, real = [], DEVICE.use

    def counted(*a, **k):
        if not DEVICE.held_here():
            turns.append(1)
        return real(*a, **k)

    monkeypatch.setattr(DEVICE, "use", counted)
    return turns
