"""For the instructor: where the class is stuck (counts only) and the GPU queue, refreshed every 5 s.
Listed only for a browser that opened the lab with ?instructor=<ATTNLAB_INSTRUCTOR_TOKEN> (app.py)."""

import ast
import functools
from pathlib import Path
from urllib.parse import parse_qs

import pandas as pd
import streamlit as st

from attnlab import service
from attnlab.service.request import Request
from attnlab.settings import settings
from attnlab.shapes import AttentionShape
from attnlab.yourturn import exercises, progress
from pages import common, opening, tables

st.title("Instructor: where the class is")
st.caption("Anonymous counts since the device worker started: no learner's code or identity is kept. An attempt is "
           "one learner's distinct answer (the same code checked again counts once); a refusal is code the lab "
           "would not run.")


@functools.cache
def page_title(path: str) -> str:
    """The title a learner sees for the page at `path` (its own st.title, as the sidebar names it), read from its
    source; the file name where it has none."""
    try:
        tree = ast.parse((Path(__file__).resolve().parents[1] / path).read_text())
    except (OSError, SyntaxError, ValueError):
        return path.split("/")[-1]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "title"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            return node.args[0].value
    return path.split("/")[-1]


def lab_root() -> str:
    """The lab's first page as the browser reached this one (this page is one step below it), or "" where Streamlit
    does not say (AppTest): the links handed out must not lead to this page."""
    try:
        url = st.context.url or ""
    except Exception:  # noqa: BLE001 (no request context)
        url = ""
    return url.split("?", 1)[0].rsplit("/", 1)[0] + "/" if url else ""


@st.fragment(run_every=5)
def live() -> None:
    counts = common.send(Request.pinned(progress.PIN, progress.snapshot)) or {}
    rows = []
    for name, ex in exercises.EXERCISES.items():
        c = counts.get(name, {})
        top = ", ".join(f"{m} ({n})" for m, n in list(c.get("mistakes", {}).items())[:3])
        rows.append({"exercise": ex.title, "page": page_title(ex.page), "learners": c.get("learners", 0),
                     "attempts": c.get("attempts", 0),
                     "passed": c.get("passes", 0), "refused": c.get("refused", 0),
                     "mistakes most often named": top or None})
    st.subheader("The exercises")
    tables.text_table(pd.DataFrame(rows))
    st.subheader("The GPU queue")
    try:
        workers = service.workers()
    except service.WorkerLost as e:
        st.warning(str(e))
        return
    tables.text_table(pd.DataFrame([{
        "worker": w.name, "device": w.device.device_kind, "running": w.running, "waiting to run": w.waiting,
        "waiting to compile": len(w.builds), "compiling": len(w.building), "requests in flight": w.in_flight,
        "device busy since start": f"{w.busy_share:.0%}", "requests served": w.served,
        "answered from kept results": w.kept_hits} for w in workers]))


live()

st.subheader("The class's shapes")
good, bad = opening.class_shapes(settings().class_shapes)
for sentence in bad:
    st.warning(sentence)
if not good:
    st.caption("None named. Set ATTNLAB_CLASS_SHAPES to the shapes you will ask the class to use (deploy/README.md, "
               "\"Class day\"): the server then opens every page at each before the class, and the class's first "
               "visits there find their results computed.")
elif settings().warm:
    st.caption("Opened on every page by each server's warm-up before the class (its log says when). Hand out these "
               "links:")
else:
    st.caption("Not opened ahead: this server's warm-up is off (ATTNLAB_WARM=0). Hand out these links:")
root = lab_root()
for query in good:
    shape, _ = AttentionShape.from_query_params(parse_qs(query))
    link = f"{root}?{query}" if query else root or "/"
    st.markdown(f"[{shape.describe()}]({link}): `{link}`")
