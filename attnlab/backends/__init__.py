"""Every attention backend the lab knows, in the order pages and tables list them.

A new backend is one module here and one line in `REGISTRY` (in the ladder's order, slowest first): it then
appears in the CLI, every page's tables and the sweeps. Optional backends stay listed where they cannot run;
their requirements say why."""

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


def unmet(shape, names=None) -> dict[str, str | None]:
    """For each backend of `names` (default: all), None when it can run `shape` on this device, else why not.
    Only those asked about are traced (tracing tokamax's Pallas kernels at a new shape costs seconds)."""
    from attnlab import device

    info = device.info()
    return {n: get(n).unmet(shape, info) for n in (names or REGISTRY)}


def requirement_rows(shape, names=None) -> list[dict]:
    """Every declared requirement of `names` (default: every backend) at `shape` on this device, as rows."""
    from attnlab import device

    info = device.info()
    return [{"implementation": n, "requirement": r.what, "needed": r.needed, "here": r.here,
             "met": "yes" if r.met else "no"} for n in (names or REGISTRY) for r in get(n).requirements(shape, info)]


def refusal(name: str, shape) -> str | None:
    """What tracing backend `name` at `shape` raises on this device (the library's own words), or None."""
    from attnlab.backends.base import trace_error

    return trace_error(get(name), shape)
