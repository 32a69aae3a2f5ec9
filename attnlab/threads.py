"""Many threads in one process: how the two processes that serve a class share their interpreter.

The UI server runs each learner's page in a thread of its own, and the device worker each request; every one
of them needs CPython's GIL for its Python. A thread that lets go of the GIL for a short call into C (pyarrow's
compute kernels, which pandas ≥ 3 uses for every column of strings; a file's stat; JAX's dispatch) asks for it
back when the call returns, and while another thread is busy in Python it waits for that thread's switch
interval, 5 ms by default: the convoy effect. A page of small DataFrame operations then pays 5 ms for each one.

Measured on the H200 machine (one UI process, 20 learners, `scripts/capacity.py --serve 1`): a quarter of the
UI's samples were threads in `pyarrow.compute.take` under a DataFrame's column selection, waiting for the GIL.
`scripts/convoy.py` reproduces it in one process (docs/design-notes.md, "The GIL's convoy").

`serve_many_threads()` is what the UI server (serve.py) and every device worker (service.worker.DeviceWorker)
set at start: a shorter switch interval, and pandas's object strings, whose operations stay in Python and NumPy
and so never queue for the GIL in the middle of one. Neither changes a value any page shows.
"""

from __future__ import annotations

import sys
import warnings

SWITCH_INTERVAL_S = 0.0005  # Python's default is 0.005


def serve_many_threads() -> None:
    """Set this process up to serve many threads at once (the module's docstring says why)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    import pandas as pd

    with warnings.catch_warnings():  # pandas 3 warns that the option goes in pandas 4; until then it is the fix
        warnings.simplefilter("ignore")
        try:
            pd.set_option("future.infer_string", False)
        except (KeyError, pd.errors.OptionError):  # a pandas without it: the switch interval alone
            pass


def serving_many_threads() -> bool:
    """Whether `serve_many_threads()` holds in this process."""
    import pandas as pd

    return sys.getswitchinterval() == SWITCH_INTERVAL_S and pd.Series(["a"]).dtype == object
