"""Many threads in one process: how the two processes that serve a class share their interpreter.

The UI server runs each learner's page in a thread of its own, and the device worker each request; every one
of them needs CPython's GIL for its Python. A thread that lets go of the GIL for a short call into C asks for it
back when the call returns, and while another thread is busy in Python it waits for that thread's switch
interval, 5 ms by default: the convoy effect. pandas ≥ 3 keeps every column of strings in pyarrow, whose compute
kernels let go of the GIL, so each small DataFrame operation of a page (a column selection, a filter, a
groupby) paid about 5 ms whenever other learners' pages were running.

Measured on the H200 machine: with 20 learners on one UI process (`scripts/capacity.py --serve 1`), a quarter of
its page threads' samples were in `pyarrow.compute.take`; `scripts/convoy.py` reproduces it in one process. With
pandas's object strings those operations stay in Python and NumPy and never queue for the GIL halfway. The
hosted class's rehearsal (2 UI replicas, 20 learners, TE and tokamax): 95th-percentile page 4.6 s before,
3.3-3.8 s after, the class 17.5 s long before and 10.7-11.2 s after (deploy/README.md).

A shorter switch interval (`sys.setswitchinterval`) also shortens the convoy in `scripts/convoy.py`, but in the
rehearsal it made the class slower (median page 0.3 s with the default, 0.7 s at 1 ms, 1.0 s at 0.5 ms): the
device worker's compile and trace threads then hand the GIL to each other ten times as often. It is left at
Python's default.

`serve_many_threads()` is what the UI server (serve.py) and every device worker (service.worker.DeviceWorker)
set at start. It changes no value a page shows.
"""

from __future__ import annotations

import warnings


def serve_many_threads() -> None:
    """Set this process up to serve many threads at once: pandas's object strings (the module's docstring says why)."""
    import pandas as pd

    with warnings.catch_warnings():  # pandas 3 warns that the option goes in pandas 4; until then it is the fix
        warnings.simplefilter("ignore")
        try:
            pd.set_option("future.infer_string", False)
        except (KeyError, pd.errors.OptionError):  # a pandas without the option: nothing to set
            pass


def serving_many_threads() -> bool:
    """Whether `serve_many_threads()` holds in this process."""
    import pandas as pd

    return pd.Series(["a"]).dtype == object
