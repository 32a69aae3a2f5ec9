"""The shape sidebar: widgets <-> the URL's query parameters, model presets, and the device badge.

The URL is the source of truth when it names a shape (a shared link, a reload); otherwise the
session's last shape is written back into the URL, so every page can be shared as a link. Every
value passes `AttentionShape.from_query_params` (the one parser for URL text and widget text alike).
"""

from __future__ import annotations

import streamlit as st

from attnlab import presets, service
from attnlab.backends.base import streamed_bytes
from attnlab.masks import MASK_TYPES
from attnlab.shapes import FIELD_MAX, INT_FIELDS, PARAM_KEYS, AttentionShape
from pages.common import literal
from pages.workers import device_info, worker_info

SHAPE_KEYS = list(PARAM_KEYS)
LABELS = {"batch": "batch (B)", "q_len": "q_len (T)", "kv_len": "kv_len (S)", "heads": "heads (N)",
          "kv_heads": "kv_heads (K)", "head_dim": "head_dim (H)"}


def _url_shape_params() -> dict[str, str]:
    return {k: v for k, v in st.query_params.to_dict().items() if k in SHAPE_KEYS}


TEXT_MASKS = [t for t in MASK_TYPES if t.count != 0]  # text widgets: "" for none, else numbers separated by commas
FLAG_MASKS = [t for t in MASK_TYPES if t.count == 0]  # toggles


def _widget_values(shape: AttentionShape) -> dict:
    return {k: "" if v is None else v for k, v in shape.columns().items()}  # a mask's text box: "" for none


def _seed_widgets(shape: AttentionShape) -> None:
    st.session_state["shape_values"] = _widget_values(shape)
    for k, v in _widget_values(shape).items():
        st.session_state[f"shape_{k}"] = v


def _reset() -> None:
    """Back to the codelab's shape (a callback: it runs before the widgets are drawn)."""
    _seed_widgets(AttentionShape())
    st.session_state["shape_url_problems"] = []


def _widgets_changed() -> None:
    """The widgets' values become the shape; a number box that comes back empty keeps the shape's last value.

    Empty is what a box holds when the learner clears it, and what Streamlit gives back when a page change
    interrupted a run and reset the widget (with 0 as the default, such a reset would read as a typed 0: the likely
    cause of a CI run that reopened a link at batch 0, not reproduced here)."""
    ss = st.session_state
    last = ss.get("shape_values", {})
    for k in INT_FIELDS:
        if ss[f"shape_{k}"] is None and k in last:
            ss[f"shape_{k}"] = last[k]
    ss["shape_values"] = {k: ss[f"shape_{k}"] for k in SHAPE_KEYS}
    st.session_state["shape_url_problems"] = []  # the learner took over from a bad URL


CUSTOM = "— custom —"


def _apply_preset() -> None:
    """A model's heads, kv_heads and head_dim into the widgets (a callback: before they are drawn);
    the rest of the shape stays, and the URL then carries the new values like any other change."""
    ss = st.session_state
    preset = presets.BY_NAME.get(ss.get("shape_preset"))
    if preset is not None:
        for k, v in (("heads", preset.heads), ("kv_heads", preset.kv_heads), ("head_dim", preset.head_dim)):
            ss[f"shape_{k}"] = v
        _widgets_changed()


def _preset_selectbox(sb) -> None:
    """'model preset': back to custom once the heads no longer match the chosen model; its source shown."""
    ss = st.session_state
    chosen = presets.BY_NAME.get(ss.get("shape_preset"))
    if chosen and (ss["shape_heads"], ss["shape_kv_heads"], ss["shape_head_dim"]) != (
            chosen.heads, chosen.kv_heads, chosen.head_dim):
        ss["shape_preset"], chosen = CUSTOM, None
    sb.selectbox("model preset", [CUSTOM, *presets.BY_NAME], key="shape_preset", on_change=_apply_preset,
                 help="Sets heads, kv_heads and head_dim to a published model's; the rest of the shape stays.")
    if chosen:
        sb.caption(f"{chosen.describe()}. Source: {chosen.source}." + (f" {chosen.name}: {chosen.note}." if chosen.note else ""))


def shape_sidebar() -> AttentionShape | None:
    """Render the shape controls in the sidebar; return the valid shape, or None (messages shown).

    The URL is the source of truth when it names a shape (a shared link, a reload); otherwise the
    session's last shape is written back into the URL, so every page can be shared as a link.
    """
    ss = st.session_state
    url = _url_shape_params()
    if "shape_batch" not in ss or (url and url != ss.get("shape_url_seen")):
        shape, problems = AttentionShape.from_query_params(url)
        _seed_widgets(shape or AttentionShape.salvage(url))
        ss["shape_url_problems"] = problems
        ss["shape_url_seen"] = url
    else:
        # Streamlit resets widget state when a page change interrupts a run, and these widgets then
        # come back empty; the shape itself lives in a plain key.
        for k, v in ss.get("shape_values", {}).items():
            ss[f"shape_{k}"] = v

    sb = st.sidebar
    sb.markdown("### Shape")
    _preset_selectbox(sb)
    c1, c2 = sb.columns(2)
    for i, f in enumerate(INT_FIELDS):
        # no min or max in the box: a browser refuses a value outside them with a red "!" alone and keeps the old
        # one, so the page silently stays at a shape the learner did not ask for; the lab's parser says why instead.
        # value=None: a reset box is empty, never a number the learner did not type (_widgets_changed)
        (c1 if i % 2 == 0 else c2).number_input(
            LABELS[f], value=None, step=1, key=f"shape_{f}", on_change=_widgets_changed,
            help=f"a whole number from 1 to {FIELD_MAX[f]:,}")
    sb.selectbox("dtype", ["float32", "bfloat16", "float16"], key="shape_dtype", on_change=_widgets_changed)
    for t in FLAG_MASKS:
        sb.toggle(t.key, key=f"shape_{t.key}", on_change=_widgets_changed)
    with sb.expander("More masks", expanded=any(ss.get(f"shape_{t.key}") for t in TEXT_MASKS)):
        for t in TEXT_MASKS:
            label, placeholder, help_text = t.widget
            st.text_input(label, key=f"shape_{t.key}", on_change=_widgets_changed, placeholder=placeholder,
                          help=help_text)
    sb.button("Reset to the codelab's shape", use_container_width=True, key="shape_reset", on_click=_reset)

    if ss.get("shape_url_problems"):
        bad_link(url, ss["shape_url_problems"])
        return None
    typed = {k: str(ss[f"shape_{k}"]).lower() if isinstance(ss[f"shape_{k}"], bool) else str(ss[f"shape_{k}"])
             for k in SHAPE_KEYS}
    shape, problems = AttentionShape.from_query_params(typed)
    if problems:
        for p in problems:
            st.error(literal(p))
        return None
    try:
        too_big = worker_info().budget.check(streamed_bytes(shape), 0)
    except service.WorkerLost:  # no worker to ask: checked again once one answers, and by the worker (OverBudget)
        too_big = None
    if too_big:
        st.error(f"Even a fused kernel at {shape.describe()} {too_big}. Make batch, q_len, kv_len or heads smaller.")
        return None
    wanted = shape.to_query_params()
    if wanted != url:
        for k in SHAPE_KEYS:
            if k in st.query_params and k not in wanted:
                del st.query_params[k]
        st.query_params.update(wanted)
        ss["shape_url_seen"] = wanted
    return shape


def bad_link(url: dict[str, str], problems: list[str]) -> None:
    """A link whose shape is not valid: what it said, every bad value with why, and what the sidebar shows."""
    said = " ".join(literal(f"{k}={v}") for k, v in url.items())
    st.markdown(f"This page's link asks for a shape the lab cannot run: {said}")
    for p in problems:
        st.error(f"From the link: {literal(p)}")
    shown = AttentionShape.salvage(url)
    st.info(f"The sidebar shows **{shown.describe()}**: "
            + ("the codelab's default shape, since the link's values that are valid on their own do not fit together. "
               if AttentionShape.kept(url).validate() else
               "the link's values that are valid on their own and the codelab's default for each one that is not. ")
            + "Nothing is computed until you use it, change a value or press Reset.")
    st.button(f"Use {shown.describe()}", key="shape_use_shown", on_click=_widgets_changed)


def device_badge() -> None:
    """What the device worker computes on; without one answering, a note that the pages' text needs none (page 1's
    example runs in this process), so a page draws what it can before its first device call says why it stops."""
    try:
        info = device_info()
    except service.WorkerLost:
        st.sidebar.warning("**No device worker answers** right now: each page's text is here; what it computes "
                           "needs one, and the page says so where that starts.")
        return
    if info.backend == "gpu":
        st.sidebar.success(f"**{info.device_kind}** · compute capability {info.compute_capability_str}")
    else:
        st.sidebar.info(f"**{info.backend.upper()} backend** ({info.device_kind}). GPU-only paths say so "
                        "on each page; shipped H200 results are shown where it helps.")
