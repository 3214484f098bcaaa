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


def _python(code, env_extra, tmp_path):
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, **env_extra)
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, str(script)], cwd=str(root), env=env, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout + p.stderr


BAD_ENV = {"MS_KVCACHE_SIM_SOC": "bogus", "MS_KVCACHE_SIM_ORDER": "sideways", "MS_KVCACHE_SIM_GM_COPY": "maybe",
           "MS_KVCACHE_SIM_HAZARDS": "off"}


def test_bad_sim_environment_rejected_at_set_backend(tmp_path):
    sim_module()
    rc, out = _python("""
        import ms_kvcache
        try:
            ms_kvcache.set_backend("sim")
        except RuntimeError as exc:
            print("RAISED", exc)
        else:
            print("ACCEPTED")
        print("BACKEND", ms_kvcache.get_backend())
    """, BAD_ENV, tmp_path)
    assert rc == 0, out
    assert "RAISED set_backend('sim'): backend unavailable: AscendC emulation settings:" in out, out
    for var, val in BAD_ENV.items():
        assert f"{var}={val!r}" in out, (var, out)
    assert "expected one of ['Ascend910B1', 'Ascend910B3', 'Ascend910_9391', 'Ascend310P3']" in out
    assert "BACKEND cpu" in out, out


def test_bad_sim_environment_rejected_with_ms_kvcache_backend(tmp_path):
    sim_module()
    rc, out = _python("""
        import ms_kvcache
        try:
            ms_kvcache.get_backend()
        except RuntimeError as exc:
            print("RAISED", exc)
    """, {"MS_KVCACHE_BACKEND": "sim", "MS_KVCACHE_SIM_ORDER": "sideways"}, tmp_path)
    assert "RAISED MS_KVCACHE_BACKEND='sim': backend unavailable:" in out, out
    assert "MS_KVCACHE_SIM_ORDER='sideways'" in out, out


def test_good_sim_environment_accepted(tmp_path):
    sim_module()
    rc, out = _python("""
        import ms_kvcache
        from ms_kvcache import sim
        ms_kvcache.set_backend("sim")
        print("OK", sim.get_soc(), sim.get_order(), sim.get_hazards())
    """, {"MS_KVCACHE_SIM_SOC": "Ascend310P3", "MS_KVCACHE_SIM_ORDER": "threads", "MS_KVCACHE_SIM_GM_COPY": "never",
          "MS_KVCACHE_SIM_HAZARDS": "0"}, tmp_path)
    assert rc == 0 and "OK Ascend310P3 threads False" in out, out
