"""The "Your turn" sections: the learner writes the codelab's code, the lab checks it against float64, names
the usual mistakes, times a passing function at the learner's shape, and shares it as a link.

    yourturn_ui.exercises("pages/p4_naive_vs_fused.py", shape)    # every exercise of that page

The code is text in a box: the device worker checks it (attnlab/yourturn/grade.py: the allowlist, then a
disposable process traces it, then the compiled program runs); nothing a learner types runs in this
process. A link's code (?ex=NAME&code=...) fills the box and is checked only when Check is pressed.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from attnlab.measure import runs
from attnlab.service.request import Request
from attnlab.settings import settings
from attnlab.shapes import AttentionShape
from attnlab.yourturn import allowlist, exercises, grade, pace, progress, share, timed
from pages import charts, codeblock, common, sections, tables, waiting, workers
from pages.weights_ui import heatmap


def exercises_of(page_file: str, shape: AttentionShape | None) -> None:
    """Every exercise of the page whose file is `page_file` (its __file__), one after another."""
    for name in exercises.ON_PAGE.get(f"pages/{Path(page_file).name}", ()):
        st.divider()
        section(name, shape)


def _from_link(name: str) -> tuple[str | None, str | None]:
    """The code a shared link carries for this exercise, or why it is not read."""
    if st.query_params.get("ex") != name or "code" not in st.query_params:
        return None, None
    return share.decode(st.query_params.get("code", ""))


def _page_url() -> str:
    """This page's address as the browser sees it (no query), or "" where Streamlit does not say."""
    try:
        url = st.context.url or ""
    except Exception:  # AppTest, or a Streamlit without st.context.url
        url = ""
    return url.split("?", 1)[0]


def _press(key: str) -> None:
    st.session_state[f"{key}_record"] = True  # this press is sent to the class's progress (a new answer counts)
    st.session_state[f"{key}_tried"] = True  # before the rerun: what sits above the exercise (answer()) opens now


def _learner() -> str:
    """An anonymous token of this browser session: the class's progress counts each learner's answer once."""
    return st.session_state.setdefault("yt_learner", secrets.token_hex(8))


@st.cache_resource
def _presses() -> pace.Presses:
    return pace.Presses()


def _browser() -> str:
    """Who pressed, the same for every tab of one browser: IAP's signed-in user where the class sits behind IAP,
    else the browser's XSRF cookie (one per browser, sent by every tab), else this session (AppTest has neither)."""
    try:
        who = (st.context.headers.get("X-Goog-Authenticated-User-Email")
               or _xsrf_token(st.context.cookies.get("_streamlit_xsrf") or ""))
    except Exception:  # noqa: BLE001 (no request context: AppTest)
        who = ""
    if not isinstance(who, str):  # AppTest's context is not a request's
        who = ""
    return hashlib.sha256(who.encode()).hexdigest()[:16] if who else "session:" + _learner()


def _xsrf_token(cookie: str) -> str:
    """Tornado's XSRF cookie "2|mask|masked token|time" as its token (the same however it was masked)."""
    parts = cookie.split("|")
    if len(parts) != 4 or parts[0] != "2":
        return cookie
    try:
        mask, masked = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
    except ValueError:
        return cookie
    return bytes(b ^ mask[i % len(mask)] for i, b in enumerate(masked)).hex() if mask else cookie


def tried(name: str) -> bool:
    """Whether this session pressed Check on exercise `name` at least once (the lab's answer may show from then)."""
    return bool(st.session_state.get(f"yt_{name}_tried"))


def answer(name: str, label: str):
    """A container for what answers exercise `name` (the lab's own code): collapsed, and saying so, until a first
    Check; open from then on, as the solution toggle."""
    done = tried(name)
    return st.expander(label if done else f"{label}: it answers the exercise below, so it opens after your first Check",
                       expanded=done)


def section(name: str, shape: AttentionShape | None) -> None:
    ex = exercises.get(name)
    key = f"yt_{name}"
    st.subheader(f"✍️ Your turn: {ex.title}")
    st.markdown(ex.task)
    linked, link_problem = _from_link(name)
    if f"{key}_code" not in st.session_state:
        st.session_state[f"{key}_code"] = linked if linked is not None else ex.skeleton
    if link_problem:
        st.error(f"The code in this link is not shown: {common.literal(link_problem)}")
    elif linked is not None:
        refused = allowlist.refusal(linked, ex.entry)  # reading the code, never running it
        st.info("This link carries code: press Check to run it." if refused is None else
                f"This link's code would not run here: {common.literal(refused)}")
    st.html(f"<style>.st-key-{key}_code textarea {{font-family: 'Source Code Pro', monospace; font-size: 0.9rem;}}"
            "</style>")  # code in a monospaced font, as every code block of the lab
    code = st.text_area(f"Your `{ex.entry}` (jnp, jax.nn, jax.lax and math are already there; no imports)",
                        key=f"{key}_code", height=220)
    c1, c2, c3 = st.columns([1, 1, 2])
    if c1.button("Check", key=f"{key}_check", type="primary", on_click=_press, args=(key,)):
        paced = _presses().admit(_browser(), time.monotonic(),
                                 settings().checks_per_minute)  # one browser's presses, every tab's and exercise's
        if paced:
            st.session_state.pop(f"{key}_record", None)
            st.warning(paced)
        else:
            st.session_state[f"{key}_asked"] = code
        st.session_state[f"{key}_tried"] = True
    if st.session_state.get(f"{key}_tried") and c2.toggle("Show the lab's solution", key=f"{key}_solution"):
        codeblock.code(ex.solution)
    if code.strip() and code != ex.skeleton:
        c3.caption("Share exactly this code: a link that opens it here (it runs only when Check is pressed).")
        with c3:
            codeblock.code(f"{_page_url()}?ex={name}&code={share.encode(code)}", "text", wrap=True)
    with waiting.fresh():  # the last verdict and timing go as a new check starts: never shown as this code's
        _verdict(name, ex, key, code, shape)


def _verdict(name: str, ex: exercises.Exercise, key: str, code: str, shape: AttentionShape | None) -> None:
    """The verdict on `code` once Check was pressed for exactly this code, and its timing when it passes."""
    asked = st.session_state.get(f"{key}_asked")
    if asked is None:
        return
    if asked != code:
        st.caption("The code changed since the last check: press Check again.")
        return
    verdict = sections.guarded(common.on_device, grade.check, name, code, what="The check")
    if verdict is None:
        return
    if st.session_state.pop(f"{key}_record", False):
        common.send(Request.pinned(progress.PIN, progress.record, name, verdict.passed, verdict.mistakes,
                                   verdict.status == "refused", learner=_learner(),
                                   answer=hashlib.sha256(code.encode()).hexdigest()[:20]))
    _show(ex, verdict)
    if verdict.passed and name in timed.TIMED and shape is not None:
        _time(name, code, shape)


def _show(ex: exercises.Exercise, v: grade.Verdict) -> None:
    if v.status == "refused":
        st.error(f"The lab does not run this code: {common.literal(v.message)}")
        st.caption(f"What your function may use: {', '.join(sorted(allowlist.BUILTINS))}; jnp, jax.nn, jax.lax and "
                   "math functions; array attributes and methods such as .shape, .T, .astype, .reshape, "
                   ".swapaxes, .max, .sum; `for i in range(n)` with a small n.")
        return
    if v.status in ("stopped", "too big"):
        st.warning(f"Your function could not be checked: {common.literal(v.message)}")
        return
    if v.passed:
        st.success(f"✅ Right at every case: {len(v.cases)} of {len(v.cases)} match the float64 reference within the "
                   "lab's tolerances.")
    elif v.cases and all(c.passed for c in v.cases):  # right numbers, made the way the task forbids
        st.error(f"Not yet: all {len(v.cases)} cases match the float64 reference, but not the way the task asks.")
        for hint in v.hints:
            st.info(hint)
    else:
        st.error(f"Not yet: {sum(c.passed for c in v.cases)} of {len(v.cases)} cases match the float64 reference.")
        for hint in v.hints:
            st.info(hint)
        if v.message:
            st.caption(common.literal(v.message))
    rows = pd.DataFrame([{"case": c.what, "right": "yes" if c.passed else "no", "output shape": str(c.output_shape),
                          "expected shape": str(c.expected_shape), "max abs error": c.max_abs_error,
                          "relative error": c.relative_error, "note": c.note or None} for c in v.cases])
    tables.text_table(rows)
    if v.lab_scratch_bytes is not None and v.scratch_bytes is not None:
        st.caption(f"Compiled scratch at the first case: yours {tables.fmt_bytes(v.scratch_bytes)}, the lab's "
                   f"{tables.fmt_bytes(v.lab_scratch_bytes)}"
                   + (" (your program builds copies of K and V)." if "K/V copied" in v.mistakes else "."))
    if v.heatmap is not None:
        yours, lab = (np.asarray(m) for m in v.heatmap)
        c1, c2 = st.columns(2)
        charts.draw(c1, heatmap, np.nan_to_num(yours, nan=0.0), "your weights (batch 0, head 0)", width="content")
        charts.draw(c2, heatmap, lab, "the lab's weights", allowed=lab > 0, width="content")
        if not np.all(np.isfinite(yours)):
            st.caption("Your weights have NaN in some rows (drawn as 0 here).")


def _time(name: str, code: str, shape: AttentionShape) -> None:
    s = timed.shape_for(name, shape)
    st.markdown(f"**Timed at your shape** (the sidebar's, as this exercise takes it: {s.describe()})")
    beside = "naive and cuDNN" if workers.device_info().backend == "gpu" else "naive"  # no trace before the press
    if not sections.on_demand(f"yt_{name}_time", f"Time it beside {beside}", (s, code), auto=False):
        return
    sections.queue_notice()
    mine = sections.guarded(common.on_device, timed.time_solution, name, code, shape, what="Timing your function")
    others = sections.guarded(common.run, s, ("naive", "sdpa_cudnn"), accuracy=False, timed=True, program=True,
                              tuned=False, what="Timing the lab's")  # untuned, as yours is (timed.py says why)
    if mine is None or others is None:
        return
    df = runs.to_frame([mine, *others])
    df = df.assign(scratch=df["temp_bytes"].map(tables.fmt_bytes))
    sections.results(df, ["implementation", "wall_ms", "throughput_ms", "device_ms", "tflops", "device_tflops",
                          "scratch"])
    if workers.device_info().backend == "gpu":
        st.caption("All three compiled without XLA's autotuner: a learner's compile never holds the class's GPU, so "
                   "the lab's rows are compiled the same way. Page 7 times the lab's tuned programs.")
    else:
        st.caption("These are this machine's CPU timings. On an H200 the lab's own rows at the codelab's shape are "
                   "page 7's shipped table; the kernels' lead shows at long sequences (page 7's *Long context on an H200* tab).")
