import pytest

from attnlab.shapes import AttentionShape


def test_defaults_are_the_codelabs_shape():
    s = AttentionShape()
    assert (s.batch, s.q_len, s.kv_len, s.heads, s.kv_heads, s.head_dim, s.dtype, s.causal) == (
        4, 128, 128, 8, 8, 64, "float32", False)
    assert s.window is None and s.kv_lengths == () and not s.masked
    assert s.validate() == []


def test_validate_reports_every_problem_as_a_sentence():
    problems = AttentionShape(batch=0, q_len=-3, dtype="int8").validate()
    assert any("batch must be a positive whole number" in p for p in problems)
    assert any("q_len must be a positive whole number" in p for p in problems)
    assert any("dtype must be one of float32, bfloat16, float16" in p for p in problems)


def test_heads_must_be_a_multiple_of_kv_heads():
    assert AttentionShape(heads=8, kv_heads=3).validate() == ["heads (8) must be a multiple of kv_heads (3)."]
    assert "cannot exceed" in AttentionShape(heads=4, kv_heads=8).validate()[0]


def test_masks_are_part_of_the_shape_and_validated():
    assert AttentionShape(window=(16, 0), kv_lengths=(100,)).validate() == []
    assert AttentionShape(batch=2, kv_lengths=(100, 50)).validate() == []
    assert "one per sequence" in AttentionShape(batch=4, kv_lengths=(1, 2)).validate()[0]
    assert "from 0 to kv_len (128)" in AttentionShape(kv_lengths=(129,)).validate()[0]
    assert "window must be two whole numbers" in AttentionShape(window=(-1, 0)).validate()[0]
    s = AttentionShape(batch=2, causal=True, window=(8, 0), kv_lengths=(64, 32))
    assert s.masked and s.kv_lengths_per_batch() == (64, 32)
    assert AttentionShape(batch=3, kv_lengths=(7,)).kv_lengths_per_batch() == (7, 7, 7)
    assert s.describe().endswith("causal window8,0 kv_lengths64,32")


def test_flops_count_four_BNTSH_and_half_when_causal():
    s = AttentionShape()
    assert s.flops() == 4 * 4 * 8 * 128 * 128 * 64
    assert s.replace(causal=True).flops() == s.flops() / 2
    assert s.flops(backward=True) == 3.5 * s.flops()


def test_masked_flops_count_the_pairs_a_window_or_padding_lets_through():
    s = AttentionShape(batch=1, q_len=8, kv_len=8)
    assert s.replace(window=(0, 0)).visible_fraction() == pytest.approx(8 / 64)  # the diagonal only
    assert s.replace(kv_lengths=(2,)).visible_fraction() == pytest.approx(2 / 8)
    assert s.replace(causal=True, window=(1, 0)).visible_fraction() == pytest.approx(15 / 64)
    assert s.replace(kv_lengths=(4,)).flops() == s.flops() / 2


def test_variants_name_mha_gqa_mqa():
    assert AttentionShape(heads=8, kv_heads=8).variant == "MHA"
    assert AttentionShape(heads=8, kv_heads=2).variant == "GQA"
    assert AttentionShape(heads=8, kv_heads=1).variant == "MQA"


def test_query_params_round_trip():
    s = AttentionShape(batch=2, q_len=96, kv_len=160, heads=8, kv_heads=2, head_dim=32, dtype="bfloat16", causal=True,
                       window=(32, 4), kv_lengths=(160, 90))
    params = s.to_query_params()
    assert all(isinstance(v, str) for v in params.values())
    assert params["window"] == "32,4" and params["kv_lengths"] == "160,90"
    back, problems = AttentionShape.from_query_params(params)
    assert problems == [] and back == s
    assert AttentionShape().to_query_params() == {}


@pytest.mark.parametrize("params, expected", [
    ({"batch": "__import__('os').system('id')"}, "batch must be a positive whole number"),
    ({"q_len": "1e9"}, "q_len must be a positive whole number"),
    ({"q_len": "-5"}, "q_len must be a positive whole number"),
    ({"heads": "0"}, "heads must be a positive whole number"),
    ({"head_dim": "99999999999999999999"}, "head_dim must be a positive whole number"),
    ({"batch": "5000"}, "above the lab's limit"),
    ({"dtype": "<script>alert(1)</script>"}, "dtype must be one of"),
    ({"dtype": "float64"}, "dtype must be one of"),
    ({"causal": "maybe"}, "causal must be true or false"),
    ({"kv_heads": "3"}, "heads (8) must be a multiple of kv_heads (3)"),
    ({"batch": ["2", "3"], "q_len": []}, "q_len must be a positive whole number"),
    ({"q_len": "12\x00"}, "q_len must be a positive whole number"),
    ({"window": "4"}, "window needs 2 numbers"),
    ({"window": "a,b"}, "window must be whole numbers"),
    ({"kv_lengths": "1;2"}, "kv_lengths must be whole numbers"),
    ({"kv_lengths": "999"}, "from 0 to kv_len"),
])
def test_hostile_query_strings_give_messages_not_exceptions(params, expected):
    shape, problems = AttentionShape.from_query_params(params)
    assert shape is None
    assert any(expected in p for p in problems), problems
    assert all(len(p) < 300 for p in problems)


def test_repeated_keys_take_the_last_value_as_streamlit_does():
    shape, problems = AttentionShape.from_query_params({"q_len": ["16", "32"]})
    assert problems == [] and shape.q_len == 32


def test_unknown_query_keys_are_ignored():
    shape, problems = AttentionShape.from_query_params({"page": "x", "utm_source": "mail", "q_len": "64"})
    assert problems == [] and shape.q_len == 64


def test_validation_reads_no_device():
    # the shape is a fact: whether it fits is decided by attnlab.admission, not here (no device import)
    import ast
    import pathlib

    import attnlab.masks
    import attnlab.shapes

    def top_level_imports(module):
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        imported = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
        return imported | {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}

    # the shape's one attnlab import is its mask value, which imports neither JAX nor anything of the lab
    assert {m for m in top_level_imports(attnlab.shapes) if m.startswith(("attnlab", "jax"))} <= {
        "attnlab", "attnlab.masks"}
    assert not any(m.startswith(("attnlab", "jax")) for m in top_level_imports(attnlab.masks))


def test_every_bad_field_of_a_link_is_named_at_once_and_salvage_keeps_the_good_ones():
    params = {"batch": "-3", "q_len": "abc", "head_dim": "0", "kv_len": "999999999", "heads": "16", "kv_heads": "4"}
    shape, problems = AttentionShape.from_query_params(params)
    assert shape is None and [p.split()[0] for p in problems] == ["batch", "q_len", "kv_len", "head_dim"]
    assert AttentionShape.salvage(params).describe() == "B4 T128 S128 N16 K4 H64 float32"
    assert AttentionShape.salvage({"heads": "3"}) == AttentionShape()  # 3 heads and 8 kv_heads: the defaults


def test_a_links_bad_field_and_a_pair_that_does_not_fit_are_named_together():
    """q_len=0 is wrong on its own and kv_heads=3 against heads=8 only together: one look at the link names both."""
    params = {"heads": "8", "kv_heads": "3", "q_len": "0"}
    shape, problems = AttentionShape.from_query_params(params)
    assert shape is None and len(problems) == 2
    assert problems[0].startswith("q_len ") and "kv_heads" in problems[1] and "(3)" in problems[1]
    assert AttentionShape.salvage(params) == AttentionShape()  # the pair cannot be kept: the defaults
    assert AttentionShape.from_query_params({"q_len": "0"})[1] == ["q_len must be a positive whole number (got 0)."]
    assert AttentionShape.kept(params).validate() and not AttentionShape.kept({"q_len": "0"}).validate()
