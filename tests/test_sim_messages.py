"""Emulation messages and the TQue buffer limit (issue 13 items 7 and 8): the queue buffers' hardware event
ids run out as in CANN's TQueBind (QUE_BUFFER_LIMIT), AllocEventID exhaustion and leaks are reported as
such (EVENT_ID, EVENT_ID_LEAK), a PIPE_HAZARD names every missing pipe pair, GM tensors of a launch_kernel
carry the kernel's parameter names, and a message ends with the kernel file:line of the failing call.

Kernels: tests/sim_kernels/bad/sim_messages.cpp (key 0 correct, 1 broken, 2 a variant), built once per
module with ms_kvcache.sim.build (which also lints it: its unqualified printf under `using namespace
AscendC;` is accepted). Only ms_kvcache.sim is imported.
"""
import re
from pathlib import Path

import numpy as np
import pytest

from ms_kvcache import sim

HERE = Path(__file__).resolve().parent
SRC = HERE / "sim_kernels" / "bad" / "sim_messages.cpp"
N = 1024
TILING = np.zeros(4, np.uint32).tobytes()


@pytest.fixture(scope="module")
def mod():
    return sim.build("sim_messages", [SRC])


def _line(mark):
    """1-based line of the `// MARK:<mark>` comment in the kernel source."""
    for i, text in enumerate(SRC.read_text().splitlines(), 1):
        if f"// MARK:{mark}" in text:
            return i
    raise AssertionError(mark)


def _run(kernel, key, **kw):
    x = np.arange(N, dtype=np.float32)
    y = np.zeros(N, np.float32)
    sim.launch_kernel(kernel, [x, y], 1, tiling=TILING, tiling_key=key, **kw)
    return x, y


def _fails(kernel, key, rule, **kw):
    with pytest.raises(sim.EmulationError) as ei:
        _run(kernel, key, **kw)
    assert ei.value.rule == rule, str(ei.value)
    return str(ei.value)


def test_parameter_names_and_source_line(mod):
    assert mod.kernels and "msg_gm_oob" in mod.kernels
    _, y = _run("msg_gm_oob", 0)
    assert np.array_equal(y[N - 64:], np.full(64, 2.0, np.float32)) and not y[:N - 64].any()
    msg = _fails("msg_gm_oob", 1, "GM_OUT_OF_BOUNDS")
    assert "at byte offset 3968 of argument 1 'dst', which has 4096 bytes (past its end by 128 B)" in msg, msg
    assert msg.endswith(f" (at {SRC}:{_line('gm_oob')})"), msg


@pytest.mark.parametrize("order", ["forward", "reverse", "threads"])
def test_que_buffer_limit(mod, order):
    _run("msg_que_buffer_limit", 0, order=order)  # FreeAllEvent after each queue's use
    _run("msg_que_buffer_limit", 2, order=order)  # eight VECIN queues fit
    msg = _fails("msg_que_buffer_limit", 1, "QUE_BUFFER_LIMIT", order=order)
    assert ("FreeTensor on a VECIN queue needs a free V_MTE2 event id, but all 8 are held (TQue #0 (VECIN): 1, "
            "TQue #1 (VECIN): 1") in msg, msg
    assert "TQue #7 (VECIN): 1)" in msg and "at most 8 buffers per TPosition" in msg and "FreeAllEvent" in msg, msg
    assert msg.endswith(f"(at {SRC}:{_line('que_free')})"), msg


def test_alloc_event_id_exhaustion_is_reported_as_a_leak(mod):
    _run("msg_event_id_leak", 0)
    msg = _fails("msg_event_id_leak", 1, "EVENT_ID")
    line = _line("alloc_event")
    assert msg.startswith("EVENT_ID: op msg_event_id_leak, core 0 of 1: AllocEventID<V_MTE2>: no free event id, "
                          "all 8 are taken: 8 by AllocEventID and never released with ReleaseEventID"), msg
    assert "FetchEventID" not in msg and "leaks it" in msg, msg
    assert f"(id(s) 0, 1, 2, 3, 4, 5, 6, 7 (allocated at {SRC}:{line})), 0 by queue buffers (none);" in msg, msg
    assert msg.endswith(f"(at {SRC}:{line})"), msg


def test_alloc_event_id_never_released_by_the_end(mod):
    msg = _fails("msg_event_id_leak", 2, "EVENT_ID_LEAK")
    assert "AllocEventID<V_MTE2>() returned id 0, which was never released with ReleaseEventID" in msg, msg
    assert msg.endswith(f"(at {SRC}:{_line('alloc_event')})"), msg


def test_hazard_hint_names_every_missing_pair(mod):
    _, y = _run("msg_hazard_pairs", 0)
    assert np.array_equal(y[:64], np.arange(64, dtype=np.float32) + 1)
    both = _fails("msg_hazard_pairs", 1, "PIPE_HAZARD")
    assert ("write on pipe MTE2 touches UB byte 0 last written and read by pipe V and last read by pipe MTE3 "
            "with no synchronisation in between (EnQue/DeQue, AllocTensor/FreeTensor, SetFlag/WaitFlag<V_MTE2> "
            "and SetFlag/WaitFlag<MTE3_MTE2> or PipeBarrier)") in both, both
    assert both.endswith(f"(at {SRC}:{_line('hazard_copy')})"), both
    only = _fails("msg_hazard_pairs", 2, "PIPE_HAZARD")  # V_MTE2 given, MTE3 -> MTE2 missing
    assert "last read by pipe MTE3 with" in only and "SetFlag/WaitFlag<MTE3_MTE2> or" in only, only
    assert "V_MTE2" not in only, only


def test_end_of_kernel_checks_name_the_right_line(mod):
    _run("msg_end_checks", 0)
    msg = _fails("msg_end_checks", 1, "FLAG_UNPAIRED")
    assert "SetFlag<MTE2_V>(1) was never matched by a WaitFlag" in msg, msg
    assert msg.endswith(f"(at {SRC}:{_line('set_flag')})"), msg
    leak = _fails("msg_end_checks", 2, "QUE_LEAK")
    assert not re.search(r"\(at [^)]*:\d+\)$", leak), leak  # no API call failed: no (stale) line
