"""The device worker in this process, for the CLI and unit tests (a native abort ends the process)."""

from __future__ import annotations

from attnlab.service.request import Reply, Request
from attnlab.service.worker import DeviceWorker


class InProcess:
    def __init__(self, name: str = "device-0"):
        self.worker = DeviceWorker(name)

    def call(self, request: Request) -> Reply:
        return self.worker.call(request)

    def wait_ready(self, timeout: float = 0.0) -> bool:
        return True

    def ready(self) -> str | None:
        return None

    def infos(self) -> list:
        return [self.worker.info()]

    def drop(self, sessions: list[str]) -> int:
        return self.worker.drop(sessions)

    def forget(self) -> int:
        return self.worker.forget()

    def restarting(self) -> bool:
        return False  # it never stops without this process

    def describe(self) -> str:
        return "the device worker in this process"

    def close(self) -> None:
        pass
