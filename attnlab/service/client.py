"""The one boundary between a server process and its device worker(s): what `service.client()` returns.

Three homes implement it: `local.InProcess` (the CLI, unit tests), `child.ChildWorker` (make run: a child
process, restarted when it dies) and `ray_workers.RayWorkers` (one Ray actor per GPU); pages and the CLI use
only these methods, and tests/test_service_boundary.py holds every home to them."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from attnlab.service.request import Reply, Request
from attnlab.service.worker import WorkerInfo


@runtime_checkable
class DeviceClient(Protocol):
    def call(self, request: Request) -> Reply:
        """The request served by its owner: a Reply (value or error); only WorkerLost when none could."""

    def wait_ready(self, timeout: float) -> bool:
        """Whether the worker(s) answered within `timeout` seconds."""

    def ready(self) -> str | None:
        """None when the device service can be reached now; else why not, in a sentence (a pod's readiness)."""

    def infos(self) -> list[WorkerInfo]:
        """Every worker's figures now, those that answer."""

    def drop(self, sessions: list[str]) -> int:
        """Sessions that ended: requests in flight only they wait for leave the device's line; how many."""

    def forget(self) -> int:
        """Drop every kept result in the worker(s); how many were dropped."""

    def restarting(self) -> bool:
        """Whether a device worker is being started again now (after it stopped): requests wait for it meanwhile."""

    def describe(self) -> str:
        """Where the worker(s) run, in words."""

    def close(self) -> None:
        """Let go of the worker(s) this process started (a detached Ray actor stays)."""
