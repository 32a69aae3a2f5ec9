"""JAX's persistent compilation cache, bounded without JAX's lock.

    disk_cache.bound()        # at a device worker's start, then after every EVERY programs it compiles

JAX's own bound (`jax_compilation_cache_max_size`) takes a file lock on every read and write and scans every
entry on each write; uncapped, JAX takes no lock. So the one process that writes the folder (a device worker
owns its pod's cache volume) bounds it now and then: the entries least recently written or read go first until
the folder holds at most `ATTNLAB_COMPILE_CACHE_GIB`. A reader that loses an entry compiles again (JAX treats
an unreadable entry as a miss)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import jax

from attnlab.settings import settings

EVERY = 256  # programs compiled between two looks at the folder
SUFFIX = "-cache"  # JAX's name for an entry's file (jax/_src/lru_cache.py)

_lock = threading.Lock()  # one bound() at a time
_compiled = itertools.count(1)  # next() on it is one C call under the GIL: a counter with no lock of its own


def folder() -> Path | None:
    """The persistent cache's folder in this process, or None where there is none."""
    path = jax.config.values.get("jax_compilation_cache_dir")
    return Path(path) if path else None


def bound(path: Path | None = None, limit_bytes: int | None = None) -> int:
    """Remove the least recently used entries until the folder holds at most `limit_bytes` (default: the
    setting). Bytes removed; 0 where there is no folder, no limit, or another thread is at it already."""
    path = path or folder()
    limit = limit_bytes if limit_bytes is not None else int(settings().compile_cache_gib * 2**30)
    if path is None or limit <= 0 or not _lock.acquire(blocking=False):
        return 0
    try:
        entries = []
        for f in path.glob(f"*{SUFFIX}"):
            try:
                s = f.stat()
            except OSError:  # written or removed meanwhile
                continue
            entries.append((max(s.st_atime, s.st_mtime), s.st_size, f))
        total, removed = sum(size for _, size, _ in entries), 0
        for _, size, f in sorted(entries, key=lambda e: e[0]):
            if total - removed <= limit:
                break
            try:
                f.unlink()
                removed += size
            except OSError:
                continue
        return removed
    finally:
        _lock.release()


def compiled_one() -> None:
    """A program was compiled (and so perhaps written to the folder): every EVERY of them, `bound()`."""
    if next(_compiled) % EVERY == 0:
        bound()
