"""serve.py as a server: what a client may not do to everyone's session, and how it refuses bad options.
(The browser's view of `--workers`: tests/test_browser.py; the front itself: tests/test_front.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from browser_util import StreamlitServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from st_client import Tab, run  # noqa: E402


def test_a_client_cannot_clear_every_learners_cached_results():
    """Streamlit lets any websocket send "clear cache" (every result of every learner, and the
    warm-up's resources); serve.py refuses it and says so in the log."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    async def visit_clear_visit(url: str):
        tab = await Tab.open(url)
        first = await tab.visit("qkv", "q_len=32&kv_len=32")
        msg = BackMsg()
        msg.clear_cache = True
        await tab.ws.send(msg.SerializeToString())
        await asyncio.sleep(0.5)
        again = await tab.visit("qkv", "q_len=32&kv_len=32")
        await tab.close()
        return first, again

    with StreamlitServer(env={"ATTNLAB_WARM": "0"}) as srv:
        first, again = run(visit_clear_visit(srv.url))
        deadline = time.monotonic() + 10
        while "refused" not in srv.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.ok and again.ok, (first, again)
        assert "asked to clear the server's caches; refused" in srv.log()


def test_a_bad_number_of_workers_is_refused_with_a_sentence():
    out = subprocess.run([sys.executable, "serve.py", "--workers", "two"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "takes a whole number of processes or 'auto', not 'two'" in out.stderr
    assert "Traceback" not in out.stderr


def test_auto_is_one_worker_per_two_cpus_and_at_most_four(monkeypatch):
    import serve

    for cpus, workers in [(1.0, 1), (2.0, 1), (5.0, 2), (8.0, 4), (224.0, 4)]:
        monkeypatch.setattr(serve, "usable_cpus", lambda c=cpus: c)
        assert serve.auto_workers() == workers


def test_workers_that_cannot_start_stop_the_server_instead_of_restarting_forever():
    out = subprocess.run([sys.executable, "serve.py", "--workers", "2", "--server.port", "0", "--server.bogus", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "within 20 s of starting; stopping the server" in out.stderr
    assert out.stderr.count("starting it again") == 0
