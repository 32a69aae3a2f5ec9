"""Measurement: the timing harness (timing.py), what the compiler made (compiled.py) and THE run layer
(runs.py: run(shape, names, ...) -> Results), each in its turn on the device (attnlab/admission.py)."""
