"""scripts/capacity.py, the class-capacity benchmark (issue 11): its parts, quickly; and a run with
two AppTest sessions through every page (marked `load`: `pytest -m load tests/test_capacity.py`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import capacity  # noqa: E402


def test_pages_are_read_from_app_py_in_order():
    pages = capacity.discover_pages()
    assert pages[0] == "pages/p1_attention.py" and len(pages) >= 9
    assert all((ROOT / p).is_file() for p in pages)
    assert len(set(pages)) == len(pages)


def test_a_page_added_to_app_py_is_found(tmp_path):
    (tmp_path / "pages").mkdir()
    for name in ("a.py", "b.py", "new.py"):
        (tmp_path / "pages" / name).write_text("")
    (tmp_path / "app.py").write_text(
        "import streamlit as st\n"
        "PAGES = [st.Page('pages/a.py', title='A', default=True),\n"
        "         st.Page(page='pages/b.py')]\n"
        "EXTRA = st.Page('pages/new.py')\n"
        "ALIAS = st.Page(lambda: None, url_path='home')\n")
    assert capacity.discover_pages(tmp_path / "app.py") == ["pages/a.py", "pages/b.py", "pages/new.py"]


def test_shapes_are_valid_shared_by_five_or_each_its_own():
    from attnlab.shapes import AttentionShape

    shared = capacity.session_shapes("shared", 12, None)
    assert len({json.dumps(s, sort_keys=True) for s in shared}) == 5 and shared[0] == {}
    assert any(s.get("dtype") == "bfloat16" and s.get("causal") == "true" and s["kv_heads"] != s.get("heads", "8")
               for s in shared)
    own = capacity.session_shapes("own", 40, None)
    assert len({json.dumps(s, sort_keys=True) for s in own}) == 40
    for params in shared + own:
        shape, problems = AttentionShape.from_query_params(params)
        assert shape is not None and not problems and not shape.validate(), params


def test_percentile_is_nearest_rank():
    assert capacity.percentile([], 95) is None
    assert capacity.percentile([3.0], 95) == 3.0
    assert capacity.percentile([float(i) for i in range(1, 101)], 95) == 95.0
    assert capacity.percentile([1.0, 2.0, 10.0], 50) == 2.0


def test_queue_probe_reads_the_devices_own_statistics():
    from attnlab.admission import DEVICE

    probe = capacity.QueueProbe()
    probe.reset()
    DEVICE.stats.longest_wait_s, DEVICE.stats.waited = 1.5, 3
    assert probe.read() == 1.5 and probe.waits == 3 and "queue_peak_device_bytes" in probe.peaks()
    probe.reset()
    assert probe.read() == 0.0


@pytest.mark.load
def test_two_sessions_get_every_page_without_an_error(tmp_path):
    out = tmp_path / "capacity.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "capacity.py"), "--sessions", "2", "--mode", "shared",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    print(proc.stdout[-3000:])
    (r,) = json.loads(out.read_text())
    assert r["errors"] == 0, r["error_messages"][:5]
    assert r["pages_served"] == r["pages_planned"] == 2 * len(capacity.discover_pages())
    assert r["median_page_s"] is not None and r["p95_page_s"] >= r["median_page_s"]
    assert r["peak_rss_bytes"] > 0
    assert proc.returncode == 0
    assert "served/planned" in proc.stdout and "fresh process" in proc.stdout


def test_a_real_server_class_asks_for_pages_by_their_url_path_and_the_default_at_the_root():
    paths = capacity.page_paths()
    assert list(paths) == capacity.discover_pages()
    assert paths["pages/p1_attention.py"] == ""  # default=True: served at /, its url_path is not a page name
    assert paths["pages/p6_causal.py"] == "causal"


def test_a_later_own_shape_class_gets_shapes_nobody_compiled_before():
    from attnlab.shapes import AttentionShape

    first, later = capacity.session_shapes("own", 20, None, 0), capacity.session_shapes("own", 20, None, 1)
    seen = {json.dumps(s, sort_keys=True) for s in first}
    assert not seen & {json.dumps(s, sort_keys=True) for s in later}
    for params in later:
        shape, problems = AttentionShape.from_query_params(params)
        assert shape is not None and not problems and not shape.validate(), params


# make load: tests/test_rehearsal.py runs the same class (two UI replicas, two Ray workers, a worker killed) from the
# manifests in make test, and CI's 30 minutes do not hold both
@pytest.mark.load
def test_a_class_on_two_ui_processes_and_two_ray_workers_gets_every_page_and_survives_a_killed_worker(tmp_path):
    """--serve 2 --device ray --device-workers 2: a Ray head with two fake GPUs, two UI processes, four headless
    tabs (two on each), every page each, and one device worker killed mid-class: no session lost."""
    pytest.importorskip("ray")
    out = tmp_path / "served.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "capacity.py"), "--serve", "2", "--device", "ray",
                           "--device-workers", "2", "--sessions", "4", "--timeout", "300", "--kill-after", "3",
                           "--json", str(out), "--server-log", str(tmp_path / "server.log")],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(proc.stdout[-3000:], proc.stderr[-3000:], (tmp_path / "server.log").read_text()[-3000:])
    (r,) = json.loads(out.read_text())
    assert r["ui_processes"] == 2 and r["device_workers"] == 2 and r["errors"] == 0, r["error_messages"][:5]
    assert r["pages_served"] == r["pages_planned"] == 4 * len(capacity.discover_pages())
    assert r["cpu_s"] > 0 and r["peak_rss_bytes"] > 0 and r["warm_s"] > 0
    assert {w["name"] for w in r["workers"]} == {"attnlab-device-0", "attnlab-device-1"}
    assert sum(w["served"] for w in r["workers"]) > 0
    fault = r["fault"]
    assert fault["killed_pid"] and fault["sessions_lost"] == 0 and fault["learners_served_again"] == 4
    assert proc.returncode == 0 and "2 UI, 2 dev" in proc.stdout
