"""The one boundary between a server process and its device worker(s): what `service.client()` returns.

Three homes implement it: `local.InProcess` (the CLI, unit tests), `child.ChildWorker` (make run: a child process,
started again when it dies) and `ray_workers.RayWorkers` (a hosted class: one Ray actor per GPU). Pages and the CLI
use only these methods; tests/test_service_boundary.py holds every home to them, parameter for parameter.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from attnlab.service.request import Reply, Request
from attnlab.service.worker import WorkerInfo


@runtime_checkable
class DeviceClient(Protocol):
    def call(self, request: Request) -> Reply:
        """The request served by the worker that owns it (a Reply: its value or its error, never an exception,
        except WorkerLost when no worker could serve it)."""

    def wait_ready(self, timeout: float) -> bool:
        """Whether the worker(s) answered within `timeout` seconds."""

    def ready(self) -> str | None:
        """None when the device service can be reached now; else why not, in a sentence (a pod's readiness)."""

    def infos(self) -> list[WorkerInfo]:
        """Every worker's figures now, those that answer."""

    def drop(self, sessions: list[str]) -> int:
        """These browser sessions have ended: requests in flight that only they wait for leave the device's line
        (DeviceWorker.drop); how many were dropped."""

    def forget(self) -> int:
        """Drop every kept result in the worker(s); how many were dropped."""

    def describe(self) -> str:
        """Where the worker(s) run, in words."""

    def close(self) -> None:
        """Let go of the worker(s) this process started (a detached Ray actor stays)."""
