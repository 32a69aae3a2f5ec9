"""Studies built on the run layer, one lesson each: memory, weights, layout, kvcache, ladder, fp8_study, suite,
timing_demo, flash_traffic, context_parallel and the ring modules, and warm (what a fresh worker compiles)."""
