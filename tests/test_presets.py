"""Model presets: published attention shapes, valid in the lab, and applied from the sidebar into the URL."""

import dataclasses

import pytest
from streamlit.testing.v1 import AppTest

from attnlab import presets
from attnlab.shapes import AttentionShape
from tests.apptest_util import APP

# (heads, kv_heads, head_dim) as published in each model's config.json
PUBLISHED = {
    "GPT-2 small": (12, 12, 64),
    "Llama 3 8B": (32, 8, 128),
    "Llama 3 70B": (64, 8, 128),
    "Mistral 7B": (32, 8, 128),
    "Qwen2.5 7B": (28, 4, 128),
    "Gemma 2 9B": (16, 8, 256),
}


def test_the_table_holds_the_published_values_with_a_named_source():
    assert {p.name: (p.heads, p.kv_heads, p.head_dim) for p in presets.PRESETS} == PUBLISHED
    for p in presets.PRESETS:
        assert "config.json" in p.source and "/" in p.source, p.name  # the Hugging Face repo, named
        assert p.context >= 1024


@pytest.mark.parametrize("preset", presets.PRESETS, ids=[p.name for p in presets.PRESETS])
def test_every_preset_is_a_valid_shape_whose_kv_heads_divide_its_heads(preset):
    assert preset.heads % preset.kv_heads == 0
    shape = presets.apply(preset)
    assert shape.validate() == []
    assert shape.variant == preset.variant and shape.group_size == preset.heads // preset.kv_heads
    assert AttentionShape.from_query_params(shape.to_query_params()) == (shape, [])  # URL round trip


@pytest.mark.parametrize("preset", presets.PRESETS, ids=[p.name for p in presets.PRESETS])
def test_applying_a_preset_keeps_batch_lengths_dtype_and_causal(preset):
    before = AttentionShape(batch=2, q_len=512, kv_len=640, heads=2, kv_heads=1, head_dim=32,
                            dtype="bfloat16", causal=True)
    after = presets.apply(preset.name, before)
    assert (after.heads, after.kv_heads, after.head_dim) == (preset.heads, preset.kv_heads, preset.head_dim)
    for f in ("batch", "q_len", "kv_len", "dtype", "causal"):
        assert getattr(after, f) == getattr(before, f), f
    assert presets.matching(after) is not None
    assert dataclasses.replace(before) == before  # the original is untouched (frozen)


def test_describe_names_the_variant_and_group():
    assert presets.get("Llama 3 8B").describe() == (
        "Llama 3 8B: 32 query heads, 8 KV heads (GQA, 4 per group), head_dim 128, context 8,192")
    assert "(MHA)" in presets.get("GPT-2 small").describe()


def test_choosing_a_preset_in_the_sidebar_sets_the_heads_and_the_url():
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["q_len"] = "64"
    at.run()
    at.selectbox(key="shape_preset").select("Gemma 2 9B").run()
    assert not at.exception
    ss = at.session_state
    assert (ss["shape_heads"], ss["shape_kv_heads"], ss["shape_head_dim"], ss["shape_q_len"]) == (16, 8, 256, 64)
    assert ss["shape"].describe() == "B4 T64 S128 N16 K8 H256 float32"
    query = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert query == {"q_len": "64", "heads": "16", "head_dim": "256"}  # kv_heads 8 is the default
    assert any("google/gemma-2-9b" in c.value for c in at.sidebar.caption)

    # a change by hand afterwards: the shape is no longer Gemma's, so the preset reads custom again
    at.number_input(key="shape_head_dim").set_value(128).run()
    assert not at.exception
    assert at.session_state["shape_preset"] == "— custom —"
    assert at.session_state["shape"].head_dim == 128
