"""Results shared between server processes and kept across restarts: computed once, read by all.

    run = store.once(run)            # then run(shape, names) computes, or reads what was computed

With ATTNLAB_RESULTS_DIR set (`serve.py --workers K` sets it; the GKE image points it at the
cache volume), a call's result is a pickle in that directory, named by the function and its
arguments, under a folder named by this code's version and this kind of machine (a hash of attnlab/
and pages/, and of the devices and library versions: a new release, another GPU or another JAX never
reads the old one's numbers). The first process to ask computes while holding
the key's lock file; the others wait on the lock, then read. Without the setting, `once` is the
function itself. Results that say "try again" (`keep` false) are returned, not stored.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

from attnlab import waiting

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of the lab's code (attnlab/ and pages/ sources)."""
    h = hashlib.sha256()
    for folder in ("attnlab", "pages"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def environment() -> str:
    """A hash of what results depend on besides the code: the devices (kind, count, compute capability),
    JAX, jaxlib, cuDNN and the optional libraries. A pod moved to another GPU, or an image with another
    JAX, on the same cache volume does not show the old machine's timings as its own."""
    import importlib.metadata

    from attnlab import device  # late: reading the devices initialises JAX's backend

    d = device.info()
    optional = []
    for package in ("tokamax", "transformer-engine", "transformer_engine_jax"):
        try:
            optional.append(importlib.metadata.version(package))
        except importlib.metadata.PackageNotFoundError:
            optional.append(None)
    text = repr((d.backend, d.platform, d.device_kind, d.device_count, d.compute_capability, d.jax_version,
                 d.jaxlib_version, d.cudnn_version, d.te_version, optional))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def folder() -> Path | None:
    """ATTNLAB_RESULTS_DIR/<code>-<environment>: results of this code on this kind of machine."""
    where = os.environ.get("ATTNLAB_RESULTS_DIR")
    return Path(where) / f"{code_version()}-{environment()}" if where else None


def key(fn: Callable, args: tuple, kwargs: dict) -> str:
    """The file name of a call: the function (its file and name: a page's functions all live in
    Streamlit's `__main__`) and a hash of its arguments' repr (shapes are frozen dataclasses, names
    tuples of strings: their repr is the value)."""
    text = repr((args, sorted(kwargs.items())))
    where = Path(fn.__code__.co_filename).stem if hasattr(fn, "__code__") else fn.__module__
    return f"{where}.{fn.__qualname__}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def once(fn: Callable | None = None, *, keep: Callable[[object], bool] = lambda result: True):
    """`fn`, its results shared through ATTNLAB_RESULTS_DIR (read at each call)."""
    if fn is None:
        return lambda f: once(f, keep=keep)

    @functools.wraps(fn)
    def shared(*args, **kwargs):
        where = folder()
        if where is None:
            return fn(*args, **kwargs)
        where.mkdir(parents=True, exist_ok=True)
        path = where / (key(fn, args, kwargs) + ".pkl")
        found = _read(path)
        if found is not None:
            return found[0]
        with open(path.with_suffix(".lock"), "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another process computing this: wait for it (released if it dies)
                waiting.about_to_wait()
                fcntl.flock(lock, fcntl.LOCK_EX)
            found = _read(path)
            if found is not None:
                return found[0]
            result = fn(*args, **kwargs)
            if keep(result):
                _write(path, result)
            return result

    return shared


def _read(path: Path) -> tuple[object] | None:
    try:
        with open(path, "rb") as f:
            return (pickle.load(f),)
    except FileNotFoundError:
        return None
    except Exception:  # a file this code cannot read (damaged): computed again and replaced
        return None


def _write(path: Path, value: object) -> None:
    """Written whole or not at all (a temporary file renamed): a reader never sees half a result."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".writing-")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # a result that cannot be pickled, or a full disk: it is returned, just not shared
        with contextlib.suppress(OSError):
            os.remove(tmp)
