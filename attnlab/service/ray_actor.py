"""The device worker as a Ray actor: what runs on a GPU node (ray_workers.RayWorkers is the UI's side).

The actor is the device worker's supervisor, as the app is on a laptop: the worker runs in its child process
(attnlab/service/child.py), with a spare child beside it. A native abort in XLA, cuDNN or a kernel compiler ends
the child, not the actor: its requests in flight fail with WorkerLost (returned, not raised, so Ray does not wrap
it) and the spare takes the GPU at once, where Ray would start a new Python for the actor (on an H100 its first
request came 2.4-3.4 s after the kill). Ray restarts the actor itself (an out-of-memory kill, a node's trouble)."""

from __future__ import annotations

from attnlab.service.request import Reply, Request, WorkerLost


class DeviceActor:
    """The Ray actor around a ChildWorker (Ray's `@ray.remote` is applied in `actor_class`)."""

    def __init__(self, name: str):
        from attnlab.service.child import ChildWorker
        from attnlab.settings import settings
        from attnlab.yourturn import suspects

        # the GPU Ray gave this actor (CUDA_VISIBLE_DEVICES) and the pod's environment pass to the child; the learners'
        # programs that stopped a worker are remembered in the pod's folder, so an actor Ray restarts refuses them too
        self.child = ChildWorker(env={"ATTNLAB_SUSPECTS_DIR": suspects.folder()}, name=name,
                                 threads=settings().worker_threads)
        self.name = name

    def call(self, request: Request) -> Reply:
        try:
            return self.child.call(request)
        except WorkerLost as e:  # the child died; this actor, and the spare taking over, did not
            return Reply(error=e, kept=False, worker=self.name)

    def info(self):
        return self.child.infos()[0]

    def forget(self) -> int:
        return self.child.forget()

    def drop(self, sessions: list[str]) -> int:
        return self.child.drop(sessions)


def actor_class():
    """DeviceActor as Ray's remote class (Ray imported only where a class runs on Ray)."""
    import ray

    return ray.remote(DeviceActor)
