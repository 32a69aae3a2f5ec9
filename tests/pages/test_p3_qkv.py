"""Page 3 · Q, K, V: the layout table, bytes, and where the arrays live."""

import pytest

from attnlab.shapes import AttentionShape
from attnlab.studies import layout
from tests.apptest_util import CUSTOM, CUSTOM_SHAPE, button, frame_with, frames, open_page, texts

PAGE = "pages/p3_qkv.py"


@pytest.mark.parametrize("params,shape", [({}, AttentionShape()), (CUSTOM, CUSTOM_SHAPE)])
def test_qkv_page_layout_table_bytes_match_the_shape(params, shape):
    at = open_page(PAGE, params)
    table = frame_with(at, "layout").set_index("array")
    assert table.iloc[:3]["bytes"].sum() == shape.input_bytes()
    assert table.loc["output", "bytes"] == shape.output_bytes()
    assert list(table["layout"]) == ["BTNH", "BSKH", "BSKH", "BTNH", "BNTS"]
    assert table.loc["Q (query)", "shape"] == str(shape.q_shape())
    placed = frame_with(at, "devices()")
    assert placed["nbytes"].sum() == shape.input_bytes()
    assert "equal to the table's sum" in texts(at)


@pytest.mark.parametrize(("params", "shape"), [({}, AttentionShape()), (CUSTOM, CUSTOM_SHAPE)])
def test_qkv_page_works_out_the_sidebars_shape_from_computed_numbers(params, shape):
    # the worked example is the learner's shape (it once showed the codelab's default under any shape)
    at = open_page(PAGE, params)
    rows = layout.layout_table(shape).set_index("array")
    info = " ".join(i.value for i in at.info)
    assert f"{rows.loc['Q (query)', 'elements']:,} elements" in info and rows.loc["Q (query)", "size"] in info
    if shape.kv_len != shape.q_len or shape.kv_heads != shape.heads:  # GQA and S != T: K and V have their own size
        assert rows.loc["K (key)", "size"] in info and f"K = {shape.kv_heads} KV heads" in info
    else:
        assert "K and V are the same size too" in info


def test_big_arrays_are_made_only_on_a_click():
    big = {"batch": "16", "q_len": "4096", "kv_len": "4096", "heads": "16", "head_dim": "128", "dtype": "bfloat16"}
    at = open_page(PAGE, big)
    assert not frames(at, "devices()")  # nothing allocated on page load
    button(at, "btn_p3_placement").click().run()
    assert not at.exception and frames(at, "devices()")


def test_a_presets_note_is_a_sentence_of_its_own():
    # "Source: google/gemma-2-9b config.json (Hugging Face). alternate layers attend ...": a sentence in lower case
    at = open_page(PAGE)
    at.selectbox(key="shape_preset").set_value("Gemma 2 9B").run()
    assert not at.exception
    said = " ".join(str(c.value) for c in at.sidebar.caption)
    assert "(Hugging Face). Gemma 2 9B: alternate layers attend within a 4,096-token sliding window" in said
