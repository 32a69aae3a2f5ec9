"""The benchmark's sampling profiler: it counts where page threads are, and only page threads."""

import json
import threading
import time

from attnlab import sampler


def test_the_sampler_counts_page_threads_by_the_labs_frame_and_the_innermost_one(tmp_path):
    stop = threading.Event()

    def page_script():  # named like Streamlit's script threads
        stop.wait(1.0)

    page = threading.Thread(target=page_script, name="ScriptRunner.scriptThread")
    other = threading.Thread(target=lambda: stop.wait(1.0), name="somebody-else")
    page.start(), other.start()
    sampler.start(tmp_path, interval=0.005, write_every=0.2)
    time.sleep(0.6)
    stop.set()
    page.join(), other.join()
    rows = json.loads(next(tmp_path.glob("sample-*.json")).read_text())["rows"]
    assert rows and all(r["thread"] in ("ScriptRunner", "attnlab-compile") for r in rows)  # not somebody-else
    assert all(r["innermost"] != "thread.py:_worker" for r in rows)  # idle compile threads are not counted
    rows = [r for r in rows if r["thread"] == "ScriptRunner"]
    assert rows[0]["ours"] == "elsewhere" and rows[0]["innermost"] == "threading.py:wait"  # a test, not attnlab
    assert rows[0]["samples"] >= 20


def test_where_names_the_innermost_frame_of_the_labs_code():
    import sys

    from attnlab.measure import compiled

    seen = []

    def callback():
        seen.append(sampler.where(sys._getframe()))

    assert compiled._try(callback) is None  # attnlab code that calls back into this test
    assert seen == [("compiled.py:_try", "test_sampler.py:callback")]
    assert sampler.where(sys._getframe())[0] == "elsewhere"


def test_the_sampler_counts_nothing_while_not_active(tmp_path):
    # the app samples only while a learner's page runs, so a server warming itself leaves no samples
    stop, on = threading.Event(), threading.Event()
    page = threading.Thread(target=lambda: stop.wait(2.0), name="ScriptRunner.scriptThread")
    page.start()
    sampler.start(tmp_path, interval=0.005, write_every=0.1, active=on.is_set)
    time.sleep(0.4)
    assert sum(r["samples"] for r in json.loads(next(tmp_path.glob("sample-*.json")).read_text())["rows"]) == 0
    on.set()
    time.sleep(0.4)
    stop.set()
    page.join()
    assert sum(r["samples"] for r in json.loads(next(tmp_path.glob("sample-*.json")).read_text())["rows"]) >= 20
