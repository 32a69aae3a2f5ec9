"""The UI server and every device worker serve many threads with a short GIL switch interval and pandas's
object strings (attnlab.threads: the convoy a page's DataFrame work met under pyarrow strings on the H200)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def in_a_fresh_python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu",
                              "ATTNLAB_WARM": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_a_fresh_python_does_not_and_serve_many_threads_does():
    assert in_a_fresh_python("from attnlab import threads; print(threads.serving_many_threads())") == "False"
    assert in_a_fresh_python("from attnlab import threads; threads.serve_many_threads(); "
                             "import pandas as pd; print(threads.serving_many_threads(), pd.Series(['a']).dtype)"
                             ) == "True object"


def test_the_ui_server_sets_it_before_streamlit_starts():
    # serve.main as it runs, with Streamlit's own main and the device worker's start replaced by a look at this process
    code = ("import sys, serve, streamlit.web.cli as cli; from attnlab import service, threads;"
            "service.start = lambda *a, **k: None; serve.head_start = lambda: None;"
            "cli.main = lambda **k: print(threads.serving_many_threads()); serve.main([])")
    assert in_a_fresh_python(code) == "True"


def test_a_device_worker_starts_and_serves_a_run_without_pandas_and_makes_every_table_under_it():
    # the child process and the Ray actor both serve through a DeviceWorker: neither its start nor a page's run
    # imports pandas or the studies (a restarted worker's first page waits for its imports), and an entry point
    # that makes a table gets object strings
    code = ("import sys; from attnlab.service.worker import DeviceWorker; from attnlab.service.request import Request;"
            "from attnlab.shapes import AttentionShape; from attnlab.measure import runs; w = DeviceWorker('t');"
            "small = AttentionShape(batch=1, q_len=8, kv_len=8);"
            "ran = w.call(Request.of(runs.run, small, ('naive',))).value[0].ok;"
            "light = not {'pandas', 'attnlab.studies.memory'} & set(sys.modules);"
            "r = w.call(Request.of('attnlab.studies.layout:placement', small));"
            "print(ran, light, r.error, r.value['array'].dtype)")
    assert in_a_fresh_python(code) == "True True None object"


def test_a_new_device_workers_quiet_moment_imports_pandas_under_it_and_every_entry_points_module():
    code = ("import sys; from attnlab import threads; from attnlab.studies import warm; warm.QUIET_S = 0.0;"
            "before = 'pandas' in sys.modules; warm.worker_start(lambda: False);"
            "print(before, threads.serving_many_threads(), 'attnlab.studies.memory' in sys.modules)")
    assert in_a_fresh_python(code) == "False True True"  # and every entry point's module, for the next requests
