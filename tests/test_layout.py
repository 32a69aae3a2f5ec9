"""The layout table and where arrays live (attnlab.studies.layout)."""



from attnlab.shapes import AttentionShape
from attnlab.studies import layout

SMALL = AttentionShape(batch=2, q_len=16, kv_len=24, heads=4, kv_heads=2, head_dim=8)


# layout table
def test_layout_table_bytes_add_up_to_the_shapes_input_and_output_bytes():
    for shape in (AttentionShape(), SMALL, SMALL.replace(dtype="bfloat16")):
        t = layout.layout_table(shape).set_index("layout")
        inputs = layout.layout_table(shape).iloc[:3]["bytes"].sum()
        assert inputs == shape.input_bytes()
        assert t.loc["BTNH", "bytes"].iloc[-1] == shape.output_bytes()
        assert t.loc["BNTS", "elements"] == shape.score_elements()
        assert t.loc["BNTS", "bytes"] == shape.score_elements() * 4  # float32 whatever the inputs


def test_codelab_default_is_one_mebibyte_per_tensor():
    t = layout.layout_table(AttentionShape()).set_index("array")
    for name in ("Q (query)", "K (key)", "V (value)", "output"):
        assert t.loc[name, "bytes"] == 1024**2
        assert t.loc[name, "size"] == "1.00 MiB"


def test_layout_letters_follow_jax_nn_dot_product_attention():
    t = layout.layout_table(SMALL).set_index("array")
    assert t.loc["Q (query)", "layout"] == "BTNH" and t.loc["Q (query)", "shape"] == str(SMALL.q_shape())
    assert t.loc["K (key)", "layout"] == "BSKH" and t.loc["K (key)", "shape"] == str(SMALL.kv_shape())
    letters = layout.letters(SMALL).set_index("letter")["value"]
    assert dict(letters) == {"B": 2, "T": 16, "S": 24, "N": 4, "K": 2, "H": 8}


def test_placement_reports_the_default_device_and_live_nbytes():
    df = layout.placement(SMALL)
    assert list(df["array"]) == ["Q", "K", "V"]
    assert set(df["platform"]) == {"cpu"} or set(df["platform"]) == {"gpu"} or "cuda" in df["platform"].iloc[0]
    table = layout.layout_table(SMALL)
    assert list(df["nbytes"]) == list(table["bytes"].iloc[:3])


