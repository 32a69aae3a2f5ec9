"""What a page asks of the device service, and what comes back.

    Request("attnlab.measure.runs:run", (shape, ("naive",)), (("timed", True),))  ->  Reply(value=[Result])

A request names an entry point (attnlab/service/entries.py) and its arguments, all plain values: its `key`
says which requests are the same (one run, one kept result) and its `route` which worker owns it (the one with
that shape's programs compiled)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np


class WorkerLost(RuntimeError):
    """The device worker died serving this request (a native abort, a kill) and is restarting: press again."""


def _stable(x: Any) -> Any:
    """A value whose repr says all of it (an array's repr elides its middle: its bytes are hashed)."""
    if isinstance(x, np.ndarray):
        return ("ndarray", x.shape, str(x.dtype), hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest())
    if isinstance(x, (list, tuple)):
        return type(x).__name__, tuple(_stable(v) for v in x)
    if isinstance(x, dict):
        return "dict", tuple(sorted((repr(k), _stable(v)) for k, v in x.items()))
    return x


@dataclasses.dataclass(frozen=True)
class Request:
    fn: str  # "module:function" of an entry point
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()  # sorted (name, value) pairs
    pin: str = ""  # a route fixed by the caller: every request with this pin meets one worker
    session: str = ""  # the browser session that waits for it (a worker drops a run whose sessions all ended); not in `key`
    since: float = 0.0  # when the page asking for it began (time.time()): the worker serves older pages first; not in `key`

    @classmethod
    def of(cls, fn, *args, **kwargs) -> Request:
        """The request to call `fn(*args, **kwargs)` (fn: an entry point, or its "module:function" name)."""
        name = fn if isinstance(fn, str) else f"{fn.__module__}:{fn.__qualname__}"
        return cls(name, tuple(args), tuple(sorted(kwargs.items())))

    @classmethod
    def pinned(cls, pin: str, fn, *args, **kwargs) -> Request:
        """As `of`, always served by the worker that owns `pin` (e.g. the class's progress counts)."""
        return dataclasses.replace(cls.of(fn, *args, **kwargs), pin=pin)

    @property
    def key(self) -> str:
        return hashlib.sha256(repr((self.fn, _stable(self.args), _stable(self.kwargs))).encode()).hexdigest()[:32]

    @property
    def route(self) -> str:
        """Which worker: the pin, else the first shape argument (compiled in one worker), else `key`."""
        from attnlab.shapes import AttentionShape

        if self.pin:
            return self.pin

        for a in (*self.args, *(v for _, v in self.kwargs)):
            if isinstance(a, AttentionShape):
                return repr(a)
            if isinstance(a, (list, tuple)) and a and isinstance(a[0], AttentionShape):
                return repr(a[0])
        return self.key

    @property
    def timed(self) -> bool:
        """A timing: any idle worker may take it (the device alone matters more than where programs are)."""
        return dict(self.kwargs).get("timed") is True

    def describe(self) -> str:
        return f"{self.fn.split(':')[-1]}({', '.join(map(_short, self.args))})"


def _short(x: Any) -> str:
    from attnlab.shapes import AttentionShape

    return x.describe() if isinstance(x, AttentionShape) else repr(x)[:40]


@dataclasses.dataclass(frozen=True)
class Reply:
    value: Any = None
    error: BaseException | None = None
    kept: bool = True  # the worker keeps this result for the next identical request (a busy GPU is not kept)
    cached: bool = False  # it was a kept result: nothing ran
    worker: str = ""
    seconds: float = 0.0  # time in the worker

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value
