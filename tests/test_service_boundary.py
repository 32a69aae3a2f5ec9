"""The declared boundary (attnlab/service/client.py): every home of the device worker implements each method of
DeviceClient with the same parameters, and service.client() is one of them."""

from __future__ import annotations

import inspect

import pytest

from attnlab.service.client import DeviceClient

HOMES = [("attnlab.service.local", "InProcess"), ("attnlab.service.child", "ChildWorker"),
         ("attnlab.service.ray_workers", "RayWorkers")]
METHODS = [n for n, v in vars(DeviceClient).items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize("module, name", HOMES)
def test_each_home_of_the_device_worker_implements_the_declared_boundary(module, name):
    import importlib

    home = getattr(importlib.import_module(module), name)
    assert set(METHODS) == {"call", "wait_ready", "ready", "infos", "drop", "forget", "restarting", "describe", "close"}
    for method in METHODS:
        assert callable(getattr(home, method, None)), f"{name} lacks {method}"
        want = list(inspect.signature(getattr(DeviceClient, method)).parameters)
        got = list(inspect.signature(getattr(home, method)).parameters)
        assert got == want, (name, method, got, want)


def test_the_in_process_client_is_a_device_client():
    from attnlab.service.local import InProcess

    assert isinstance(InProcess(), DeviceClient)
