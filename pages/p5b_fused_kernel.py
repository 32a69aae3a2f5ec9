"""Inside the fused kernel: the flash algorithm tile by tile, the bytes it saves, its backward pass, masks
that skip tiles, and the ladder of implementations from XLA to cuDNN (measured on an H200, shipped)."""

import streamlit as st

from attnlab.studies import ladder
from pages import common, flash_ui, sections

st.title("5b · Inside the fused kernel")
st.write("A fused attention kernel computes softmax(QKᵀ/√d)·V one tile at a time and never writes the T × S "
         "scores to GPU memory. The tabs open it up: the algorithm step by step, the bytes it saves, how it "
         "trains, how masks let it skip work, and how fast each way of writing it runs on an H200.")
shape = common.require_shape()
found = ladder.load_shipped()
tabs = sections.tabs("p10_tab", ["Step through", "Memory traffic", "The backward pass", "Masks that skip work",
                                 "The ladder"])
sections_of = [lambda: flash_ui.step_through(shape, __file__), lambda: flash_ui.traffic(shape, found),
               lambda: flash_ui.backward(shape), lambda: flash_ui.masks(shape, found), lambda: flash_ui.ladder(found)]
for tab, section in zip(tabs, sections_of, strict=True):
    if tab.open:
        with tab:
            section()
