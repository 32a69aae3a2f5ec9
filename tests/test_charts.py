"""pages/charts.py: a chart's Vega-Lite spec is built once per builder and arguments, and is the spec
the builder's chart converts to."""

import altair as alt
import pandas as pd
import pytest

from pages import charts, encodings


class Where:
    """Stands in for st or a column: records what vega_lite_chart was given."""

    def __init__(self):
        self.calls = []

    def vega_lite_chart(self, spec, **kw):
        self.calls.append((spec, kw))


def counting_builder(name: str):
    built = []

    def bars(df: pd.DataFrame, title: str) -> alt.Chart:
        built.append(title)
        return alt.Chart(df, title=title).mark_bar().encode(x="x:Q", y="y:N")

    bars.__module__, bars.__qualname__ = "pages.test_only", name
    return bars, built


@pytest.fixture(autouse=True)
def empty_cache():
    charts._spec.clear()
    yield
    charts._spec.clear()


def test_a_spec_is_built_once_per_arguments_and_is_the_charts_own():
    bars, built = counting_builder("bars_once")
    df = pd.DataFrame({"x": [1.0, 2.0], "y": ["a", "b"]})
    where = Where()
    charts.draw(where, bars, df, "first", width="stretch")
    charts.draw(where, bars, df, "first", width="stretch")
    charts.draw(where, bars, df.assign(x=[3.0, 4.0]), "first")
    charts.draw(where, bars, df, "second", height=200)
    assert built == ["first", "first", "second"]  # the same frame and title again: no new chart
    specs = [spec for spec, _ in where.calls]
    assert specs[0] == specs[1] == charts.vega_spec(alt.Chart(df, title="first").mark_bar().encode(x="x:Q", y="y:N"))
    assert specs[2]["datasets"] != specs[0]["datasets"]  # new data, a new dataset
    assert specs[3]["title"] == "second"
    assert [kw for _, kw in where.calls] == [{"width": "stretch"}, {"width": "stretch"}, {}, {"height": 200}]


def test_two_builders_given_the_same_arguments_keep_their_own_specs():
    a, _ = counting_builder("builder_a")
    b, _ = counting_builder("builder_b")
    df = pd.DataFrame({"x": [1.0], "y": ["a"]})
    where = Where()
    charts.draw(where, a, df, "A")
    charts.draw(where, b, df, "B")
    assert [spec["title"] for spec, _ in where.calls] == ["A", "B"]


def test_a_builder_defined_in_a_page_script_is_refused():
    def made_at_each_run(df):  # a page script's functions are made anew at every run, in module __main__
        return alt.Chart(df).mark_bar()

    made_at_each_run.__module__ = "__main__"
    with pytest.raises(ValueError, match="pages module"):
        charts.draw(Where(), made_at_each_run, pd.DataFrame({"x": [1]}))


def test_every_implementation_gets_its_own_colour_however_many_there_are():

    assert encodings.palette(10) == encodings.PALETTE  # today's backends keep today's colours
    many = encodings.palette(14)
    assert len(set(many)) == 14 and all(c.startswith("#") and len(c) == 7 for c in many)


def _scales(chart) -> dict:
    spec = chart.to_dict()
    layer = spec.get("layer", [spec])[0]
    return {axis: layer["encoding"][axis].get("scale", {}) for axis in ("x", "y")}


def test_a_line_charts_first_and_last_points_sit_inside_its_frame_not_on_it():
    """Zoomable line charts clip their marks at the frame: with the x domain exactly the first and last value
    measured, those points were drawn halved (a Chromium pass, issue 42); now a quarter step of room each side, and
    room at the y ends too."""
    from pages import benchmarks_ui

    df = pd.DataFrame({"q_len": [64, 256, 4096] * 2, "wall_ms": [0.1, 0.4, 9.0, 0.2, 0.5, 12.0],
                       "implementation": ["naive"] * 3 + ["sdpa_xla"] * 3, "dtype": ["float32"] * 6,
                       "status": ["OK"] * 6})
    for chart in (encodings.line_chart(df, "q_len", "wall_ms", title="wall by q_len"),
                  benchmarks_ui.line_chart(df, "q_len", "wall_ms", "wall by q_len", "dtype")):
        x, y = _scales(chart).values()
        lo, hi = x["domain"]
        assert lo < 64 and hi > 4096 and 64 / lo == pytest.approx(hi / 4096) == pytest.approx(2 ** 0.25)
        assert y.get("padding", 0) > 0


def test_the_step_through_error_chart_starts_at_its_first_step_with_half_a_step_of_room():
    """The flash step-through's error chart: x is steps 1..n with half a step each side (Vega's 'nice' domain
    had drawn an empty slot from 0 to 1 before the first step, a Chromium pass of issue 42)."""
    import types

    from pages import kernel_ui

    walk = [types.SimpleNamespace(max_error=e, q_block=i // 2) for i, e in enumerate([0.5, 0.2, 0.4, 0.0])]
    x = kernel_ui.error_chart(walk, current=2).to_dict()["layer"][0]["encoding"]["x"]
    assert x["scale"]["domain"] == [0.5, 4.5] and x["scale"]["nice"] is False


def test_every_chart_leaves_room_on_its_right_for_the_last_x_label():
    """A horizontal bar chart's last x label sits on a tick short of the end of its 'nice' domain, centred: without
    room on the right it was drawn half outside the chart (page 7's bars in Chromium, issue 42)."""
    from pages import benchmarks_ui

    df = pd.DataFrame({"implementation": ["naive", "sdpa_xla"], "wall_ms": [3.53, 2.1], "status": ["OK"] * 2})
    spec = charts.vega_spec(benchmarks_ui.bar_chart(df, "implementation", "wall_ms", "wall (ms)"))
    assert spec["padding"]["right"] >= 12


def test_charts_of_a_chromium_pass_tick_the_lengths_measured_and_keep_the_datas_own_range():
    """Issue 42's second Chromium pass: page 5b's backward chart had ticks at powers of two while its points sat at
    192, 384, 768 (the learner's T without a tick) and its y title repeated the chart's; page 7's sweep ran its log y
    over whole decades (0.01-1 ms for points of 0.06-0.16) and drew its dtype legend as circles for dashed lines."""
    from pages import benchmarks_ui, kernel_ui

    df = pd.DataFrame({"q_len": [192, 384, 768], "temp_bytes": [3e6, 9e6, 3e7], "implementation": ["naive"] * 3})
    spec = kernel_ui.bytes_chart(df, "q_len", "temp_bytes", "implementation", "forward+backward scratch", "T = S",
                                 "scratch").to_dict()
    x, y = spec["encoding"]["x"], spec["encoding"]["y"]
    assert x["axis"]["values"] == [192, 384, 768] and x["title"].endswith("(log)")
    assert y["axis"]["title"] == "scratch (log)" != spec["title"]

    sweep = pd.DataFrame({"q_len": [128, 256] * 2, "wall_ms": [0.06, 0.1, 0.08, 0.16], "implementation": ["naive"] * 4,
                          "dtype": ["float32", "float32", "bfloat16", "bfloat16"], "status": ["OK"] * 4})
    enc = benchmarks_ui.line_chart(sweep, "q_len", "wall_ms", "wall", "dtype").to_dict()["encoding"]
    assert enc["y"]["scale"]["nice"] is False
    assert enc["strokeDash"]["legend"]["symbolType"] == "stroke"
