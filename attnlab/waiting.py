"""Before a thread blocks on something slow that needs no Python (the device, held by another run;
a result another process is computing), it says so here, and whoever registered a hook hears it.

The app registers one: a page script that is about to wait gives back its turn to run
(pages/turns.py, ATTNLAB_MAX_RUNS), so pages that need no device run meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

_HOOKS: list[Callable[[], None]] = []


def register(hook: Callable[[], None]) -> None:
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def about_to_wait() -> None:
    """Called by the thread that is about to block (queue, across, store)."""
    for hook in _HOOKS:
        hook()
