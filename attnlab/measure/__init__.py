"""Measurement: the one timing harness (timing.py), what the compiler made (compiled.py), and THE run layer
(runs.py: run(shape, names, ...) -> typed Results). Each takes its turn on this process's device through
attnlab/admission.py (one run at a time, compiles between runs, memory)."""
