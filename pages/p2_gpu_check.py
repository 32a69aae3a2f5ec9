"""Lab step 2: what is here, and which implementations can run the sidebar's shape on it."""

import pandas as pd
import streamlit as st

from pages import common, tables, workers

st.title("2 · GPU check")
st.write(
    "Before timing anything, find out what JAX is computing on. The fused kernels have hard "
    "requirements (a CUDA GPU of a given compute capability, a dtype, a head size); each "
    "implementation in the lab's registry says whether it can run your shape here, and if not, why."
)

info = workers.device_info()
st.subheader("This machine")
st.table(pd.DataFrame(info.as_rows(), columns=["what", "value"]).set_index("what"))
if info.backend != "gpu":
    st.info("JAX is on its **CPU** backend: naive attention and XLA's SDPA (scaled dot-product attention, `jax.nn.dot_product_attention`) run here; cuDNN, FP8 and "
            "TransformerEngine need an NVIDIA GPU. Pages 4, 5, 5b, 7, 8, 9 and 10 show results measured on H200s, "
            "labelled as such.")

shape = common.require_shape()
st.subheader(f"Implementations at {shape.describe()}")
tables.text_table(common.support_table(shape, merged=True))

st.subheader("Each implementation's requirements")
st.write("What each backend declares it needs, what is here, and whether it is met. The first unmet one is the "
         "reason above; where every declared requirement is met but the backend still refuses the shape, its own "
         "error is the reason.")
tables.text_table(common.requirements_table(shape, info))
