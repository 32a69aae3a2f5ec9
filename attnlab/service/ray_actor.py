"""The device worker as a Ray actor: what runs on a GPU node (ray_workers.RayWorkers is the UI's side)."""

from __future__ import annotations

import threading

from attnlab.service.request import Reply, Request


class DeviceActor:
    """The Ray actor around a DeviceWorker (Ray's `@ray.remote` is applied in `actor_class`)."""

    def __init__(self, name: str):
        from attnlab.service.worker import DeviceWorker
        from attnlab.studies import warm

        self.worker = DeviceWorker(name)
        # JAX's device, then the optional imports once no request is in flight (warm.worker_start says why)
        threading.Thread(target=warm.worker_start, args=(self.worker.busy,), name="attnlab-worker-start",
                         daemon=True).start()

    def call(self, request: Request) -> Reply:
        return self.worker.call(request)

    def info(self):
        return self.worker.info()

    def forget(self) -> int:
        return self.worker.forget()

    def drop(self, sessions: list[str]) -> int:
        return self.worker.drop(sessions)


def actor_class():
    """DeviceActor as Ray's remote class (Ray imported only where a class runs on Ray)."""
    import ray

    return ray.remote(DeviceActor)
