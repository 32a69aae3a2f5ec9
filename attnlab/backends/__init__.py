"""Every attention backend the lab knows, in the order pages and tables list them.

Adding a backend is one new module here and one line in `REGISTRY`: it then appears in the CLI,
every page's tables and the sweeps. Optional backends (TransformerEngine, FP8 on Hopper) stay
listed where they cannot run; their requirements say why.
"""

from attnlab.backends import flash, fp8, naive, sdpa, te, tokamax
from attnlab.backends.base import Backend

REGISTRY: dict[str, Backend] = {b.name: b for b in (
    naive.NAIVE,
    sdpa.AUTO,
    sdpa.XLA,
    flash.FLASH,
    tokamax.XLA_CHUNKED,
    tokamax.TRITON,
    tokamax.MOSAIC,
    sdpa.CUDNN,
    te.TE_DPA,
    fp8.FP8,
)}


def get(name: str) -> Backend:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(REGISTRY)}") from None
