import pytest

from attnlab.shapes import GIB, AttentionShape, format_bytes


def test_defaults_are_the_codelabs_shape():
    s = AttentionShape()
    assert (s.batch, s.q_len, s.kv_len, s.heads, s.kv_heads, s.head_dim, s.dtype, s.causal) == (
        4, 128, 128, 8, 8, 64, "float32", False)
    assert s.validate() == []


def test_validate_reports_every_problem_as_a_sentence():
    problems = AttentionShape(batch=0, q_len=-3, dtype="int8").validate()
    assert any("batch must be a positive whole number" in p for p in problems)
    assert any("q_len must be a positive whole number" in p for p in problems)
    assert any("dtype must be one of float32, bfloat16, float16" in p for p in problems)


def test_heads_must_be_a_multiple_of_kv_heads():
    assert AttentionShape(heads=8, kv_heads=3).validate() == ["heads (8) must be a multiple of kv_heads (3)."]
    assert "cannot exceed" in AttentionShape(heads=4, kv_heads=8).validate()[0]


def test_memory_cap_refuses_with_the_estimate_in_the_message():
    big = AttentionShape(batch=64, q_len=8192, kv_len=8192, heads=32, kv_heads=32, head_dim=128)
    problems = big.validate(implementation="naive", memory_limit=4 * GIB)
    assert len(problems) == 1 and "naive" in problems[0] and "GiB" in problems[0] and "cap" in problems[0]
    assert format_bytes(big.memory_estimate("naive")) in problems[0]
    assert big.validate(implementation="sdpa_cudnn", memory_limit=1024 * GIB) == []


def test_naive_memory_grows_quadratically_and_fused_linearly():
    a, b = AttentionShape(q_len=1024, kv_len=1024), AttentionShape(q_len=2048, kv_len=2048)
    naive_ratio = b.memory_estimate("naive") / a.memory_estimate("naive")
    fused_ratio = b.memory_estimate("sdpa_cudnn") / a.memory_estimate("sdpa_cudnn")
    assert 3.5 < naive_ratio <= 4.0 and 1.9 < fused_ratio <= 2.0


def test_flops_count_four_BNTSH_and_half_when_causal():
    s = AttentionShape()
    assert s.flops() == 4 * 4 * 8 * 128 * 128 * 64
    assert s.replace(causal=True).flops() == s.flops() / 2
    assert s.flops(backward=True) == 3.5 * s.flops()


def test_variants_name_mha_gqa_mqa():
    assert AttentionShape(heads=8, kv_heads=8).variant == "MHA"
    assert AttentionShape(heads=8, kv_heads=2).variant == "GQA"
    assert AttentionShape(heads=8, kv_heads=1).variant == "MQA"


def test_query_params_round_trip():
    s = AttentionShape(batch=2, q_len=96, kv_len=160, heads=8, kv_heads=2, head_dim=32, dtype="bfloat16", causal=True)
    params = s.to_query_params()
    assert all(isinstance(v, str) for v in params.values())
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
])
def test_hostile_query_strings_give_messages_not_exceptions(params, expected):
    shape, problems = AttentionShape.from_query_params(params)
    assert shape is None
    assert any(expected in p for p in problems), problems
    assert all(len(p) < 300 for p in problems)


def test_a_huge_shape_from_the_url_is_refused_by_the_memory_cap():
    shape, problems = AttentionShape.from_query_params(
        {"batch": "4096", "q_len": "262144", "kv_len": "262144", "heads": "1024", "kv_heads": "1024"})
    assert shape is None and "cap" in problems[0]


def test_unknown_query_keys_are_ignored():
    shape, problems = AttentionShape.from_query_params({"page": "x", "utm_source": "mail", "q_len": "64"})
    assert problems == [] and shape.q_len == 64


def test_memory_limit_env_override(monkeypatch):
    from attnlab.shapes import default_memory_limit

    monkeypatch.setenv("ATTNLAB_MEMORY_LIMIT_GIB", "0.5")
    assert default_memory_limit() == GIB // 2
