"""Shared AppTest helpers: open a page the way a learner's browser does, and read what it shows.

Every page test uses these (tests/pages/test_p*.py); `fake_shipped()` is a small stand-in for the
shipped H200 measurements (attnlab/shipped/h200.json), with the structure `suite.run()` writes.
"""

from pathlib import Path

import pandas as pd
import pyarrow as pa
from streamlit.testing.v1 import AppTest

from attnlab.shapes import AttentionShape

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CUSTOM = {"batch": "2", "q_len": "32", "kv_len": "48", "heads": "4", "kv_heads": "2", "head_dim": "16", "causal": "true"}
CUSTOM_SHAPE = AttentionShape(batch=2, q_len=32, kv_len=48, heads=4, kv_heads=2, head_dim=16, causal=True)
SMALL = {"batch": "1", "q_len": "32", "kv_len": "32", "heads": "4", "kv_heads": "2", "head_dim": "16"}
HOSTILE = {"batch": "__import__('os')", "dtype": "<script>"}
# valid, yet many GiB if a page computed it on load: MQA with 512 query heads of 512
HEAVY = {"batch": "2", "q_len": "1", "kv_len": "2048", "heads": "512", "kv_heads": "1", "head_dim": "512"}


def open_page(page: str, params: dict[str, str] | None = None, *, check: bool = True,
              tab: tuple[str, str] | None = None) -> AppTest:
    """Run app.py with the URL's query parameters, switch to `page`, run it; no exception allowed.
    `tab`: (the tabs' key, a label) opens that tab, as a learner's click does (closed tabs are not run)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()  # AppTest needs one run of the entry point before switch_page
    if tab is not None:
        at.session_state[tab[0]] = tab[1]
    at.switch_page(page)
    at.run()
    if check:
        assert not at.exception, [e.value for e in at.exception]
    return at


def record_runs(monkeypatch) -> list[dict]:
    """Every runs.run call a page makes from now on, as its keyword arguments (the parts it asked for)."""
    from attnlab.measure import runs

    calls, real = [], runs.run
    monkeypatch.setattr(runs, "run", lambda shape, names=None, **kw: calls.append(kw) or real(shape, names, **kw))
    return calls


def frames(at: AppTest, column: str | None = None) -> list[pd.DataFrame]:
    """The tables on the page, interactive (st.dataframe) and static (st.table, whose long text wraps;
    its first column is the index, put back as a column), those with `column` if given."""
    found = [d.value for d in at.dataframe] + [t.value.reset_index() for t in at.table]
    return [df for df in found if column is None or column in df.columns]


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    found = frames(at, column)
    assert found, f"no table with a {column!r} column"
    return found[0]


def chart_data(at: AppTest) -> list[pd.DataFrame]:
    """The data behind each Altair chart on the page (Streamlit ships it as Arrow)."""
    out = []
    for chart in at.get("vega_lite_chart"):
        for d in chart.proto.datasets:
            out.append(pa.ipc.open_stream(d.data.data).read_all().to_pandas())
    return out


def heatmaps(at: AppTest, value: str = "weight") -> list[pd.DataFrame]:
    """Each heatmap's cells in (query, key) order, with a `masked` column. A small map (one rect per
    cell: visible and masked cells in two datasets) also has `value`; a large one, drawn as one image
    (pages/weights_ui.py), has each cell's colour as r, g, b, read at the cell's centre."""
    maps = []
    for chart in at.get("vega_lite_chart"):
        parts = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in chart.proto.datasets]
        image = [p for p in parts if "url" in p.columns and "rows" in p.columns]
        if image:
            cells = _image_cells(image[0].iloc[0])
            scale = [p for p in parts if list(p.columns) == [value]]  # the colour legend's [0, vmax]
            cells.attrs["vmax"] = float(scale[0][value].max()) if scale else None
            maps.append(cells)
            continue
        seen = [p for p in parts if value in p.columns and "masked" not in p.columns]
        if seen:
            hidden = [p for p in parts if "masked" in p.columns]
            maps.append(pd.concat([seen[0].assign(masked=False), *hidden]).sort_values(["query", "key"])
                        .reset_index(drop=True))
    return maps


def _image_cells(row) -> pd.DataFrame:
    import base64
    import io

    import numpy as np
    from PIL import Image

    from pages.weights_ui import MASKED_GREY

    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(row["url"].split(",", 1)[1]))).convert("RGB"))
    t, s = int(row["rows"]), int(row["columns"])
    centres = [((np.arange(n) + 0.5) * size / n).astype(int) for n, size in ((t, img.shape[0]), (s, img.shape[1]))]
    rgb = img[np.ix_(*centres)]
    q, k = np.indices((t, s))
    grey = np.array([int(MASKED_GREY[i:i + 2], 16) for i in (1, 3, 5)])
    return pd.DataFrame({"query": q.ravel(), "key": k.ravel(), "masked": (rgb == grey).all(-1).ravel(),
                         "r": rgb[..., 0].ravel(), "g": rgb[..., 1].ravel(), "b": rgb[..., 2].ravel()})


def charts(at: AppTest) -> list[str]:
    """Each chart's Vega-Lite spec, as JSON text."""
    return [e.proto.spec for e in at.get("vega_lite_chart")]


def codes(at: AppTest) -> list[str]:
    """The text of each code block on the page (pages/codeblock.py draws them as HTML; st.code too)."""
    from pages import codeblock

    found = [c.value for c in at.code]
    return found + [codeblock.text_of(e.proto.body) for e in at.get("html") if "attnlab-code" in e.proto.body]


def metric(at: AppTest, label_start: str) -> str:
    found = [m.value for m in at.metric if m.label.startswith(label_start)]
    assert found, f"no metric starting {label_start!r}: {[m.label for m in at.metric]}"
    return found[0]


def texts(at: AppTest, *kinds: str) -> str:
    """Everything written on the page in these element kinds (default: text, captions and boxes)."""
    kinds = kinds or ("markdown", "caption", "info", "success", "error", "warning")
    return "\n".join(str(e.value) for kind in kinds for e in getattr(at, kind))


def button(at: AppTest, key: str):
    return next(b for b in at.button if b.key == key)


def _row(impl: str, q_len: int = 128, batch: int = 4, pass_: str = "forward", causal: bool = False,
         head_dim: int = 64, heads: int = 8, dtype: str = "bfloat16", ok: bool = True) -> dict:
    shape = AttentionShape(batch=batch, q_len=q_len, kv_len=q_len, heads=heads, kv_heads=heads, head_dim=head_dim,
                           dtype=dtype, causal=causal)
    row = {"implementation": impl, "label": impl, "pass": pass_, **shape.columns(), "shape": shape.describe(),
           "status": "ok" if ok else "unsupported", "reason": "" if ok else "test reason: does not fit"}
    if ok:
        row.update(compile_ms=100.0, wall_ms=0.05, wall_ms_iqr=0.001, throughput_ms=0.02, device_ms=0.01,
                   kernel_count=1, kernels="test_kernel 10.0µs", device_note="test", gflop=1.0, tflops=50.0,
                   device_tflops=100.0, pct_of_peak=10.0, temp_bytes=1024, custom_calls="", repeats=30)
    return row


def fake_shipped() -> dict:
    env = {"date": "2000-01-01", "device": "NVIDIA H200", "backend": "gpu", "compute_capability": "9.0",
           "driver": "test", "jax": "test", "cudnn": "test", "transformer_engine": "test",
           "peak": {"bf16_tflops": 989.5, "memory_tb_s": 4.8, "source": "test datasheet"}}
    impls_ = ["naive", "sdpa_xla", "sdpa_cudnn", "te_dpa"]
    fp8_row = {"shape": "B4 T2048 S2048 N16 K16 H128 bfloat16", "q_len": 2048, "head_dim": 128, "causal": False,
               "status": "ok", "scale_o": 1.0, "err_unit_scales": 0.1, "err_amax_qkv": 0.05, "err_amax_qkv_p": 0.03,
               "err_amax_all": 0.02, "err_small_inputs_unit_scales": 0.5, "err_small_inputs_amax_scales": 0.02,
               "bf16_ms": 1.0, "bf16_tflops": 400.0, "fp8_ms": 0.6, "fp8_tflops": 600.0, "speedup": 1.5,
               "fp8_e2e_ms": 0.8, "fp8_e2e_tflops": 500.0, "e2e_speedup": 1.25,
               "bf16_burst_tflops": 440.0, "fp8_burst_tflops": 1010.0, "burst_speedup": 2.3, "fp8_unit_tflops": 590.0,
               "bf16_burst_clock_mhz": 1980, "bf16_clock_mhz": 1755, "fp8_burst_clock_mhz": 1980, "fp8_clock_mhz": 1700,
               "max_clock_mhz": 1980}
    return {
        "environment": env,
        "ceilings": {"matmul_bf16_tflops": 700.0, "matmul_n": 8192, "copy_tb_s": 4.0, "copy_bytes": 2**31},
        "tables": {
            "default": [_row(n, dtype=d, ok=n != "te_dpa" or d == "bfloat16") for d in ("float32", "bfloat16")
                        for n in impls_],
            "seq_sweep": [_row(n, q_len=t) for t in (64, 128) for n in impls_],
            "batch_sweep": [_row(n, q_len=256, batch=b) for b in (1, 2) for n in impls_],
            "te_sweep": [_row(n, q_len=t, causal=True) for t in (128, 256) for n in ("sdpa_xla", "sdpa_cudnn", "te_dpa")],
            "long_context": [_row(n, q_len=t, pass_=p, causal=c, head_dim=128, heads=16, ok=not (n == "naive" and t > 2048))
                             for t in (2048, 4096) for c in (False, True) for p in ("forward", "forward+backward")
                             for n in impls_],
        },
        "fidelity": [{"shape": "B4 T8192", "implementation": "sdpa_cudnn", "harness_tflops": 500.0,
                      "bare_tflops": 500.0, "harness_over_bare": 1.0}],
        "fp8_attention": [fp8_row, {"shape": "B4 T128 S128 N8 K8 H64 bfloat16", "causal": False,
                                    "status": "error", "reason": "test reason"}],
        "te_autocast": {"status": "ok", "shape": "B4 T2048", "max_abs_diff_autocast_vs_not": 0.0, "bf16_ms": 0.2,
                        "autocast_ms": 0.2, "bf16_kernels": ["cudnn_fmha_test"], "autocast_kernels": ["cudnn_fmha_test"]},
        "te_block": [{"shape": "B4 T4096", "recipe": r, "status": "ok", "ms": 1.0, "tflops": 300.0,
                      "rel_err_vs_bf16": 0.0 if r == "bf16" else 0.03, "top_kernels": [["gemm_test", 12.5]]}
                     for r in ("bf16", "fp8_delayed", "fp8_current")],
    }




class Screen:
    """What a learner's browser shows while a page runs, from the deltas the page sends (AppTest gives only the
    final tree). The browser keeps the last run's elements, faded, until each is replaced at its place: an element
    replaces what was there; a container of the same kind as the one there keeps its children (Streamlit's
    frontend, AppRoot.addBlock); a spinner is drawn over what is there (a transient) and replaces nothing."""

    def __init__(self, monkeypatch):
        from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext

        self.sent, real = [], ScriptRunContext.enqueue

        def enqueue(ctx, msg):
            if msg.WhichOneof("type") == "delta":
                self.sent.append(msg)
            return real(ctx, msg)

        monkeypatch.setattr(ScriptRunContext, "enqueue", enqueue)
        self.shown: dict[tuple, tuple[str, str]] = {}

    def settle(self) -> None:
        """The run has ended: what it drew is the screen, and the next run's deltas apply over it."""
        self.shown, self.sent = self.now(), []

    def now(self) -> dict[tuple, tuple[str, str]]:
        shown = dict(self.shown)
        for msg in list(self.sent):
            path, delta = tuple(msg.metadata.delta_path), msg.delta
            kind = delta.WhichOneof("type")
            if kind not in ("new_element", "add_block"):
                continue  # a transient (spinner) covers, an added row extends: neither removes
            old = shown.get(path)
            new = (("block", delta.add_block.WhichOneof("type") or "") if kind == "add_block"
                   else ("element", str(delta.new_element)))
            if not (kind == "add_block" and old == new):
                for p in [p for p in shown if p[:len(path)] == path]:
                    del shown[p]
            shown[path] = new
        return shown

    def text(self) -> str:
        return "\n".join(text for kind, text in self.now().values() if kind == "element")
