"""A server in a 6 GiB memory limit survives a browser visiting every page with hostile-but-valid links.

The server is started inside a cgroup (v1 memory controller, as root) limited to 6 GiB, the way a
pod's memory limit holds it; the lab reads that limit for its budget. Skipped where no memory cgroup
can be made (not root, or no v1 memory controller)."""

import time
import uuid
from pathlib import Path

import pytest

from tests.browser_util import EXCEPTION, PAGES, StreamlitServer, healthy, open_page

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
CGROUPS = Path("/sys/fs/cgroup/memory")
LIMIT = 6 * 2**30
LINKS = ["batch=2&q_len=1&kv_len=2048&heads=512&kv_heads=1&head_dim=512",
         "batch=16&q_len=4096&kv_len=4096&heads=16&head_dim=128&dtype=bfloat16&causal=true"]


@pytest.fixture
def memory_cgroup():
    group = CGROUPS / f"attnlab-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
    except OSError as e:
        pytest.skip(f"cannot make a memory cgroup here: {e}")
    yield group
    for _ in range(20):
        try:
            group.rmdir()
            break
        except OSError:
            time.sleep(0.5)


def test_a_server_in_six_gib_survives_every_page_with_heavy_links(memory_cgroup, browser):
    prefix = ["sh", "-c", f'echo $$ > {memory_cgroup}/cgroup.procs && exec "$@"', "sh"]
    with StreamlitServer(prefix=prefix, env={"ATTNLAB_WARM": "0"}) as server:
        context = browser.new_context()
        page = context.new_page()
        visited = []
        for path, title in PAGES:  # app.py's pages (the first by its alias: the default page has no path of its own)
            for query in LINKS:
                open_page(page, server.url, path, title, query, timeout_ms=240_000)  # its title, then its run's end
                assert page.locator(EXCEPTION).count() == 0, (path, query)
                assert server.proc.poll() is None, f"the server died at /{path}?{query}:\n{server.log()}"
                visited.append(path)
        context.close()
        assert healthy(server.url)
        peak = int((memory_cgroup / "memory.max_usage_in_bytes").read_text())
        oom = (memory_cgroup / "memory.oom_control").read_text()
        assert "oom_kill 0" in oom or "oom_kill" not in oom, oom
        assert peak < LIMIT and len(visited) == 2 * len(PAGES)
        print(f"peak memory of the server in its cgroup: {peak / 2**30:.2f} GiB over {len(visited)} pages")
