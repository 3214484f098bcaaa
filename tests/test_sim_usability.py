"""Messages and settings of the AscendC emulation as a user meets them: core order / gm_copy errors
name the op, bad MS_KVCACHE_SIM_* settings are rejected when the sim backend is selected, and
read-only arrays are refused by sim.launch."""
import numpy as np
import pytest

from _copy_sim_ref import sim_module, status


def _rac_args():
    kc = np.zeros((2, 16, 1, 16), np.float16)
    return [np.zeros((0, 1, 16), np.float16), np.zeros((0, 1, 16), np.float16), kc, kc.copy(),
            np.zeros(0, np.int64), status()]


def test_bad_order_and_gm_copy_name_the_op():
    sim = sim_module()
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch("ReshapeAndCache", _rac_args(), order="sideways")
    assert ei.value.rule == "LAUNCH" and ei.value.op == "ReshapeAndCache"
    assert str(ei.value).startswith("LAUNCH: op ReshapeAndCache: core order must be") and "'sideways'" in str(ei.value)
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel("reshape_and_cache", [None] * 6, 1, gm_copy="sometimes")
    assert str(ei.value).startswith("LAUNCH: op reshape_and_cache: gm_copy must be")
    with pytest.raises(sim.EmulationError) as ei:
        sim.set_order("sideways")
    assert str(ei.value).startswith("LAUNCH: set_order: core order must be")
