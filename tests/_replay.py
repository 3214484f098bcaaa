"""Shared helpers of the direct-launch and replayed-call tests (tests/test_direct_launch.py,
tests/test_replayed_calls*.py): a cpu-backend PyNative context with the fast path's direct launch on, and
the hit counters of an op's replay plans (ms_kvcache/_eager.py, "Replayed calls")."""
from importlib import import_module

import pytest
import mindspore as ms

import ms_kvcache
from ms_kvcache import _custom


def direct_launch_context(need="run_or_queue"):
    """Generator body of a ``fast`` fixture: PyNative, backend cpu, direct launch on; yields the fast-path
    module and restores backend and direct-launch state. Skips (with the reason) when the module or its
    attribute ``need`` (``run_or_queue``: the direct launch; ``Plan``: replay plans) is missing."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    old_backend = ms_kvcache.get_backend()
    ms_kvcache.set_backend("cpu")
    ok, why = _custom.fast_path_available("cpu")
    mod = _custom._fast_module()
    if not ok or not hasattr(mod, need):
        ms_kvcache.set_backend(old_backend)
        pytest.skip(f"no fast path with {need}: {why or 'module without it'}")
    old = mod.set_direct_launch(True)
    yield mod
    mod.set_direct_launch(old)
    ms_kvcache.set_backend(old_backend)


def plans(op_name):
    """The replay plans of the public op module ``ms_kvcache.ops.<op_name>`` (its ``_EAGER``)."""
    eager = import_module(f"ms_kvcache.ops.{op_name}")._EAGER
    return [p for k, p in _custom._LAUNCHERS.items() if k[0] == "replay" and k[1] == id(eager)]


def hits(op_name):
    """Calls of ``op_name`` replayed so far (sum over its plans)."""
    return sum(p.hits for p in plans(op_name))
