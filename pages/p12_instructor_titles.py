"""Each exercise's page as the navigation names it (the exercises name pages by file; app.py's st.Page titles):
the instructor's table shows these. tests/pages/test_guide.py holds them to app.py."""

TITLES = {"pages/p4_naive_vs_fused.py": "4 · Naive vs fused", "pages/p5b_fused_kernel.py": "5b · Inside the fused kernel",
          "pages/p6_causal.py": "6 · Causal masking", "pages/p8_mha_gqa_mqa.py": "8 · MHA, GQA, MQA"}
