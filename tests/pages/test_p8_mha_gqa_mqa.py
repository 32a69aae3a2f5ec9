"""Page 8 · MHA, GQA, MQA: the same output with fewer KV heads (checked against float64), the KV
cache's size, and a timed decode step (AppTest, CPU backend; the GPU test is marked)."""

import jax
import pytest

from attnlab.admission import DEVICE
from attnlab.measure import runs
from tests.apptest_util import (
    CUSTOM,
    CUSTOM_SHAPE,
    SMALL,
    button,
    charts,
    frame_with,
    frames,
    open_page,
    texts,
)

PAGE = "pages/p8_mha_gqa_mqa.py"
on_gpu = jax.default_backend() == "gpu"
HEAVY_MQA = {"batch": "2", "q_len": "1", "kv_len": "2048", "heads": "512", "kv_heads": "1", "head_dim": "512"}


def bytes_per_token(at) -> dict[str, int]:
    return {m.label.split(":")[0]: int(m.value.replace(",", "").removesuffix(" B"))
            for m in at.metric if "bytes per token" in m.label}



@pytest.mark.parametrize("params", [{"q_len": "12abc", "heads": "<script>"}, {"kv_heads": "3"},
                                    {"dtype": "float8", "causal": "maybe"}])
def test_bad_urls_give_messages_not_exceptions(params):
    at = open_page(PAGE, params)
    assert at.error and "computes nothing" in texts(at, "warning")
    assert not frames(at, "output_shape")


def test_variants_page_at_the_codelab_shape_shows_identical_outputs_and_the_cache_formula():
    at = open_page(PAGE)  # small: the check runs on load
    checks = frame_with(at, "output_shape")
    assert set(checks["variant"]) == {"MHA", "GQA", "MQA"}
    assert set(checks["output_shape"]) == {"(4, 128, 8, 64)"}
    assert checks["allclose"].all()
    assert "matches the float64 reference" in texts(at, "success")
    layers, itemsize, head_dim = 32, 4, 64  # the page's default layers; float32; the codelab's H
    assert bytes_per_token(at) == {"MHA": 2 * 8 * head_dim * itemsize * layers,
                                   "GQA": 2 * 2 * head_dim * itemsize * layers, "MQA": 2 * 1 * head_dim * itemsize * layers}


def test_variants_page_at_a_custom_shape_follows_the_widgets_and_times_a_decode_step():
    at = open_page(PAGE, {**SMALL, "dtype": "bfloat16"})
    at.number_input(key="p8_layers").set_value(3)
    at.number_input(key="p8_context").set_value(100)
    at.number_input(key="p8_kv_len").set_value(64)
    at.multiselect(key="p8_decode_impls").set_value(["naive", "sdpa_xla"])
    at.run()
    assert bytes_per_token(at) == {"MHA": 2 * 4 * 16 * 2 * 3, "GQA": 2 * 2 * 16 * 2 * 3, "MQA": 2 * 1 * 16 * 2 * 3}
    cache = frame_with(at, "query heads per KV head")
    assert list(cache["kv_heads"]) == [4, 2, 1]
    assert not frames(at, "kv_read_gb_per_s"), "the decode step is timed only on its button"
    button(at, "btn_p8_decode").click().run()
    assert not at.exception
    decode = frame_with(at, "K and V bytes read")
    assert len(decode) == 6 and list(decode["implementation"].unique()) == ["naive", "sdpa_xla"]
    assert list(decode.drop_duplicates("variant")["K and V bytes read"]) == ["16.00 KiB", "8.00 KiB", "4.00 KiB"]  # 2·B·S·K·H·2 bytes
    assert "Wall spread (the middle half of the samples, IQR) is" in texts(at, "caption")
    assert any('"variant"' in spec and "One decode step" in spec for spec in charts(at))


def test_variants_page_without_a_gqa_says_so():
    at = open_page(PAGE, {"batch": "1", "q_len": "16", "kv_len": "16", "heads": "2", "kv_heads": "2", "head_dim": "8"})
    assert "No GQA" in texts(at, "caption")
    assert set(bytes_per_token(at)) == {"MHA", "MQA"}


def test_decode_text_says_naive_groups_heads_and_does_not_repeat_kv():
    text = texts(open_page(PAGE, SMALL), "markdown")
    assert "jnp.repeat" not in text and "gains nothing" not in text
    assert "einsum" in text and "kv_heads·S·H" in text


def test_decode_implementations_widget_keeps_its_options_and_default_when_the_shape_changes():
    """A multiselect whose options or default change between runs loses its state (issue 12)."""
    at = open_page(PAGE, SMALL)
    first = at.multiselect(key="p8_decode_impls")
    options, value = list(first.options), list(first.value)
    at.number_input(key="shape_heads").set_value(8).run()
    at.number_input(key="p8_kv_len").set_value(8).run()
    assert not at.exception
    assert list(at.multiselect(key="p8_decode_impls").options) == options
    assert list(at.multiselect(key="p8_decode_impls").value) == value


def test_heavy_mqa_link_computes_nothing_until_a_click(monkeypatch):
    called = []
    real = runs.run
    monkeypatch.setattr(runs, "run", lambda *a, **k: called.append(a[0]) or real(*a, **k))
    at = open_page(PAGE, HEAVY_MQA)
    assert not called, f"ran on load: {called}"
    assert not frames(at, "output_shape") and not frames(at, "kv_read_gb_per_s")
    assert "too big to run on page load" in texts(at, "caption")
    assert {"btn_p8_checks", "btn_p8_decode"} <= {b.key for b in at.button}
    assert list(frame_with(at, "query heads per KV head")["kv_heads"]) == [512, 128, 1]  # the cache table is arithmetic


def test_a_check_that_does_not_fit_is_a_row_with_its_reason(small_memory_cap, monkeypatch):
    monkeypatch.setattr(DEVICE, "_budget", None)  # the queue keeps the budget it read first: read the cap
    at = open_page(PAGE, {"batch": "1", "q_len": "1", "kv_len": "4096", "heads": "64", "kv_heads": "1",
                          "head_dim": "128"})
    assert not frames(at, "output_shape")
    button(at, "btn_p8_checks").click().run()
    assert not at.exception
    missing = frame_with(at, "reason")
    assert runs.OVER_BUDGET in set(missing["status"]) and "MHA" in set(missing["variant"])
    assert "MQA" in set(frame_with(at, "output_shape")["variant"])  # the variant that fits still ran
    assert "Every variant that ran" in texts(at, "success")


@pytest.mark.gpu
def test_decode_device_time_tracks_kv_bytes_on_a_gpu():
    at = open_page(PAGE, {"dtype": "bfloat16", "heads": "32", "kv_heads": "8", "head_dim": "128"})
    at.number_input(key="p8_kv_len").set_value(32768).run()
    button(at, "btn_p8_decode").click().run()
    assert not at.exception
    decode = frame_with(at, "K and V bytes read").set_index(["implementation", "variant"])
    for impl in ("naive", "sdpa_xla"):
        assert decode.loc[(impl, "MQA"), "device_ms"] < decode.loc[(impl, "MHA"), "device_ms"]


@pytest.mark.skipif(on_gpu, reason="on a GPU every default implementation runs")
def test_decode_button_counts_only_the_cells_that_can_run_here():
    # the default selection keeps sdpa_cudnn (the multiselect's default must not follow the machine or the
    # shape), so on a CPU the button says how many of its cells cannot run rather than promising all of them
    at = open_page(PAGE)
    label = button(at, "btn_p8_decode").label
    assert "(6 cells of 9: 3 cannot run here)" in label, label


def test_at_its_own_shapes_the_page_asks_only_about_its_three_implementations(monkeypatch):
    # the variants and the decode steps are shapes of the page's own: tracing every backend of the registry
    # at each (six shapes) costs seconds per learner on a GPU machine, for answers the page never shows
    from attnlab.backends.base import Backend
    from attnlab.shapes import AttentionShape

    params = {"batch": "1", "q_len": "40", "kv_len": "40", "heads": "6", "kv_heads": "3", "head_dim": "24"}
    sidebar = AttentionShape(batch=1, q_len=40, kv_len=40, heads=6, kv_heads=3, head_dim=24)
    asked, real = [], Backend.unmet
    monkeypatch.setattr(Backend, "unmet", lambda self, shape, info: asked.append((self.name, shape))
                        or real(self, shape, info))
    open_page(PAGE, params)
    elsewhere = {name for name, shape in asked if shape != sidebar}
    assert elsewhere and elsewhere <= {"naive", "sdpa_xla", "sdpa_cudnn"}, sorted(elsewhere)


def test_the_h200_decode_study_shows_who_turns_fewer_kv_bytes_into_less_time():
    at = open_page(PAGE)
    table = frame_with(at, "of which layout copies").set_index(["implementation", "variant"])
    assert "(4× fewer)" in table.loc[("sdpa_cudnn", "GQA"), "K and V read"]
    assert "(32× fewer)" in table.loc[("sdpa_cudnn", "MQA"), "K and V read"]
    assert table.loc[("sdpa_cudnn", "GQA"), "of which layout copies"] == "—"
    assert table.loc[("sdpa_xla", "GQA"), "of which layout copies"].endswith("µs")
    words = texts(at, "info", "caption")
    # the length is the number input under "One decode step", two sections up: "above" read as the chart just above
    assert "At kv_len = 4,096 (the cache length chosen under *One decode step*)" in words
    assert "Measured on NVIDIA H200" in words
    assert "cuDNN reads K and V in place at" in words and "XLA copies K and V" in words
    assert any('"facet"' in spec and "kv_read_gb_per_s" in spec for spec in charts(at))
    at.selectbox(key="p8_h200_base").set_value("the lab's default shape").run()
    assert "Not at this shape: sdpa_cudnn" in texts(at, "caption")  # float32: cuDNN's rows say why not
    at.number_input(key="p8_kv_len").set_value(100).run()  # not a length of the study: its longest
    assert "At kv_len = 131,072 (the study's longest" in texts(at, "caption")


def test_a_decode_step_that_would_take_minutes_is_refused_before_its_button():
    # the link that held a CPU for 351 s: 1,024 heads of 1,024 over a 262,144-token cache
    # the sidebar's kv_len is small (the page's own cache length is the decode's): the sidebar's memory check, which
    # reads the worker's budget (half the host's available memory at its start), cannot stop the page first
    at = open_page(PAGE, {"batch": "1", "q_len": "1", "kv_len": "1024", "heads": "1024", "kv_heads": "1",
                          "head_dim": "1024"})
    assert "p8_kv_len" in [n.key for n in at.number_input], texts(at, "error", "warning")
    at.number_input(key="p8_kv_len").set_value(262_144).run()
    assert not at.exception
    assert any("would hold this CPU for at least" in w.value and "limit of 60 s" in w.value for w in at.warning)
    assert "btn_p8_decode" not in [b.key for b in at.button]


def test_the_variants_forward_pass_is_timed_on_its_button_one_row_per_variant_and_implementation():
    at = open_page(PAGE, SMALL)
    assert not [d for d in frames(at, "wall_ms") if "variant" in d]  # nothing timed before the click
    button(at, "btn_p8_forward").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (timed,) = [d for d in frames(at, "wall_ms") if "variant" in d and "kv_heads" in d]
    assert set(timed["variant"]) == {"MHA", "GQA", "MQA"} and (timed["wall_ms"] > 0).all()
    assert len(timed) == 3 * timed["implementation"].nunique()


def test_the_page_names_only_the_implementations_that_answer_here():
    """At bfloat16 with head_dim 1 XLA's CPU compiler is refused up front: the page said "the naive code and XLA's
    SDPA answer" while only naive ran (issue 42, section 5)."""
    from attnlab.backends import unmet
    from attnlab.shapes import AttentionShape

    if unmet(AttentionShape(dtype="bfloat16", head_dim=1), ("sdpa_xla",))["sdpa_xla"] is None:
        pytest.skip("XLA's SDPA runs bfloat16 at head_dim 1 here")
    at = open_page(PAGE, {"dtype": "bfloat16", "head_dim": "1"})
    said = texts(at, "markdown")
    assert "on this CPU backend the naive code answers." in said and "XLA's SDPA answer" not in said


def test_the_page_asks_for_its_six_shapes_checks_together_before_waiting_for_any(monkeypatch):
    """In a class every request waits its turn in the device worker: the page's backend checks of its three variants
    and their three decode steps go out at once, before it waits for the first (on the H200 page 8 was the slowest
    first visit of a class at a new shape)."""
    from attnlab import backends
    from attnlab.studies import kvcache
    from pages import common

    asked, real = [], common.ask_ahead
    monkeypatch.setattr(common, "ask_ahead", lambda fn, *a, **kw: asked.append((fn, a)) or real(fn, *a, **kw))
    open_page(PAGE, CUSTOM)
    variants = kvcache.variants(CUSTOM_SHAPE)
    candidates = ("naive", "sdpa_xla", "sdpa_cudnn")
    wanted = {(v, candidates) for v in variants + [kvcache.decode_shape(v, 4096) for v in variants]}
    assert {a for fn, a in asked if fn is backends.unmet} == wanted
