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
        sim.launch("MskvReshapeAndCache", _rac_args(), order="sideways")
    assert ei.value.rule == "LAUNCH" and ei.value.op == "MskvReshapeAndCache"
    assert str(ei.value).startswith("LAUNCH: op MskvReshapeAndCache: core order must be") and "'sideways'" in str(ei.value)
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


# ----------------------------------------------------------------------------- failing AOT calls (U1, W1)
def _graph_rac(mk, slots, cache_shape=(16, 8, 2, 16), match="Error message is"):
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(np.zeros(cache_shape, np.float32)), name="key_cache")
            self.vc = Parameter(Tensor(np.zeros(cache_shape, np.float32)), name="value_cache")

        def construct(self, k, v, s):
            mk.reshape_and_cache(k, v, self.kc, self.vc, s)
            return s

    rng = np.random.default_rng(len(slots))
    k = Tensor(rng.standard_normal((len(slots),) + cache_shape[2:]).astype(np.float32))
    net = Net()
    old = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(RuntimeError, match=match):
            net(k, k, Tensor(np.asarray(slots, np.int32)))
    finally:
        ms.set_context(mode=old)
    return net


@pytest.mark.parametrize("case,rule", [("cores", "GM_WRITE_CONFLICT"), ("one_core", "PIPE_HAZARD")])
def test_graph_mode_duplicate_slot_error_is_explained(case, rule, capfd):
    # Duplicated non-negative slots are undefined on the AscendC backends in graph mode (docs/design.md);
    # the sim backend fails the call and says why, on stderr and in last_error().
    from _copy_sim_ref import public_backend_or_skip

    mk = public_backend_or_skip("reshape_and_cache")
    from ms_kvcache._backends import sim as simbackend

    slots = [3, 7, 3, 3] if case == "cores" else [0, 0] + list(range(1, 99))  # 100 tokens: 0 and 1 on core 0
    mk.set_backend("sim")
    try:
        capfd.readouterr()
        # the reason reaches the Python exception text (the AOT entry throws it to MindSpore), not only
        # MindSpore's generic "Return value ... is 1"
        net = _graph_rac(mk, slots, match=rf"Error message is {rule}: op MskvReshapeAndCache.*slot_mapping repeats a "
                                          r"non-negative slot")
    finally:
        mk.set_backend("cpu")
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("ms_kvcache sim: ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ms_kvcache sim: {rule}: op MskvReshapeAndCache"), lines[0]
    assert "slot_mapping repeats a non-negative slot" in lines[0] and "undefined on the AscendC backends" in lines[0]
    assert simbackend.last_error() == lines[0][len("ms_kvcache sim: "):]
    assert not net.kc.asnumpy().any(), "the cache changed although the call failed"


def test_pynative_tiling_rejection_raised_at_the_call(capfd):
    """PyNative on sim runs the op's tiling before the launch (sim.check_tiling): a call the AscendC tiling
    rejects raises its reason where the user made it, nothing is launched, the caches keep their bytes."""
    from _copy_sim_ref import public_backend_or_skip

    mk = public_backend_or_skip("reshape_and_cache")
    import mindspore as ms
    from mindspore import Parameter, Tensor

    sim = sim_module()
    rng = np.random.default_rng(11)
    kc0 = rng.standard_normal((4, 8, 2, 3)).astype(np.float16)
    kc = Parameter(Tensor(kc0.copy()), name="kc")
    vc = Parameter(Tensor(kc0.copy()), name="vc")
    x = Tensor(np.ones((3, 2, 3), np.float16))
    old_soc = sim.get_soc()
    mk.set_backend("sim")
    sim.set_soc("Ascend310P3")
    try:
        capfd.readouterr()
        with pytest.raises(sim.TilingRejectedError, match=r"reshape_and_cache: the AscendC tiling for Ascend310P3 "
                                                          r"rejects this call: rows of 12 bytes"):
            mk.reshape_and_cache(x, x, kc, vc, Tensor(np.array([0, 1, 2], np.int32)))
        # a list-input op: bfloat16 has no OpDef row on Ascend310P3
        caches = [Parameter(Tensor(np.zeros((4, 16, 2, 16), np.float32), ms.bfloat16), name=f"c{i}") for i in range(2)]
        buf = Tensor(np.ones((2, 1, 3, 32), np.float32), ms.bfloat16)
        with pytest.raises(sim.TilingDTypeRejectedError, match="bfloat16"):
            mk.multi_layer_kv_transfer(buf, [tuple(caches)], Tensor(np.array([0, 1, 2], np.int64)),
                                       kv_format=mk.KVCacheFormat.SEPARATE_KV, direction="h2d")
        assert np.array_equal(kc.asnumpy(), kc0) and np.array_equal(vc.asnumpy(), kc0)
        assert not any(c.asnumpy().astype(np.float32).any() for c in caches)
    finally:
        sim.set_soc(old_soc)
        mk.set_backend("cpu")
    err = capfd.readouterr().err
    assert "ms_kvcache sim: " not in err, "nothing should have been launched"
    assert ms.get_context("mode") == ms.PYNATIVE_MODE


# ----------------------------------------------------------------------------- check_tiling
def _rac_shapes(D, dtype, T=3):
    return [((T, 2, D), dtype), ((T, 2 * D), dtype), ((4, 8, 2, D), dtype), ((4, 8, 2, D), dtype), ((T,), "int32")]


def test_check_tiling_accepts_and_memoises():
    import mindspore as ms

    sim = sim_module()
    r = sim.check_tiling("reshape_and_cache", _rac_shapes(16, "float16"), {"cache_layout": "BSND"}, "Ascend310P3")
    ref = sim.tiling("MskvReshapeAndCache", _rac_shapes(16, "float16"), {"cache_layout": "BSND"}, "Ascend310P3")
    assert r["tiling_bytes"] == ref["tiling_bytes"] and r["tiling_key"] == 100
    # MindSpore tensors, numpy arrays and dtypes, CamelCase name: same signature, same (memoised) result
    t = ms.Tensor(np.zeros((3, 2, 16), np.float16))
    again = sim.check_tiling("MskvReshapeAndCache", [t, ((3, 32), ms.float16), np.zeros((4, 8, 2, 16), np.float16),
                                                 ((4, 8, 2, 16), np.float16), ((3,), np.int32)],
                             {"cache_layout": "BSND"}, "Ascend310P3")
    assert again is r
    # DYNAMIC inputs as lists; default SoC = sim.get_soc()
    args = [[((6, 16, 2, 16), "float32")] * 3, [((6, 16, 2, 16), "float32")] * 3, ((5, 2), "int64")]
    cb = sim.check_tiling("copy_blocks", args)
    assert cb["fields"]["numLayers"] == 3 and cb["block_dim"] == cb["fields"]["usedCoreNum"] > 1
    assert sim.check_tiling("MskvCopyBlocks", args, None, sim.get_soc()) is cb


def test_check_tiling_raises_rejections_at_the_call_site():
    sim = sim_module()
    with pytest.raises(sim.TilingRejectedError) as ei:
        sim.check_tiling("reshape_and_cache", _rac_shapes(3, "float16"), {"cache_layout": "BSND"}, "Ascend310P3")
    e = ei.value
    assert isinstance(e, ValueError) and not isinstance(e, TypeError)
    assert (e.op, e.op_type, e.soc, e.rule) == ("reshape_and_cache", "MskvReshapeAndCache", "Ascend310P3", "TILING_FAILED")
    assert str(e).startswith("reshape_and_cache: the AscendC tiling for Ascend310P3 rejects this call: rows of 12 "
                             "bytes (one token row) are not a multiple of 32 bytes"), str(e)
    assert str(e).endswith("(TILING_FAILED)") and "\n" not in str(e)
    assert "GRAPH_FAILED" in e.emulation_message
    with pytest.raises(TypeError) as ei:
        sim.check_tiling("reshape_and_cache", _rac_shapes(16, "bfloat16"), {}, "Ascend310P3")
    assert isinstance(ei.value, sim.TilingDTypeRejectedError) and ei.value.rule == "SOC_BF16"
    assert "has no bfloat16 support" in str(ei.value)
    with pytest.raises(sim.TilingRejectedError, match="cache_layout: expected 0 .BSND., 1 .BNSD. or 2 .NZ., got 5"):
        sim.check_tiling("reshape_and_cache", _rac_shapes(16, "float16"), {"cache_layout": 5}, "Ascend910B1")
    with pytest.raises(ValueError, match="attribute 'cache_layout': expected one of"):  # a name: refused before
        sim.check_tiling("reshape_and_cache", _rac_shapes(16, "float16"), {"cache_layout": "NHD"}, "Ascend910B1")
    with pytest.raises(sim.TilingRejectedError) as again:  # memoised, raised afresh
        sim.check_tiling("reshape_and_cache", _rac_shapes(3, "float16"), {"cache_layout": "BSND"}, "Ascend310P3")
    assert again.value is not e and str(again.value) == str(e)
    with pytest.raises(KeyError, match="no op 'no_such_op'"):
        sim.check_tiling("no_such_op", [], {})


# ----------------------------------------------------------------------------- read-only arrays (W4)
@pytest.mark.parametrize("all_orders", [False, True])
def test_launch_refuses_to_write_a_read_only_array(all_orders):
    sim = sim_module()
    rng = np.random.default_rng(4)
    key = rng.standard_normal((3, 2, 16)).astype(np.float32)
    key.setflags(write=False)  # only read by the kernel: fine
    kc = np.zeros((4, 8, 2, 16), np.float32)
    vc = np.zeros_like(kc)
    ro = np.zeros_like(kc)
    ro.setflags(write=False)
    slots = np.array([0, 9, 30], np.int32)
    run = sim.launch_all_orders if all_orders else sim.launch
    with pytest.raises(sim.EmulationError) as ei:
        run("MskvReshapeAndCache", [key, key, ro, vc, slots, status()], attrs={"cache_layout": "BSND"})
    msg = str(ei.value)
    assert ei.value.rule == "GM_READONLY", msg
    assert "into input 2 'key_cache', which is read-only" in msg and "writeable False" in msg, msg
    assert not ro.any() and not vc.any()
    run("MskvReshapeAndCache", [key, key, kc, vc, slots, status()], attrs={"cache_layout": "BSND"})
    assert np.array_equal(kc.reshape(32, 2, 16)[[0, 9, 30]], key)


# ----------------------------------------------------------------------------- sim.build messages (U5)
KERNEL_WITH_TILING = """
#include "kernel_operator.h"
extern "C" __global__ __aicore__ void breaker_k2(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x; (void)workspace;
  GET_TILING_DATA(td, tiling);
  (void)td;
}
"""


def test_build_names_a_missing_tiling_header(tmp_path):
    sim = sim_module()
    kdir = tmp_path / "op_kernel"
    kdir.mkdir()
    src = kdir / "breaker_k2.cpp"
    src.write_text(KERNEL_WITH_TILING)
    extra = tmp_path / "inc"
    extra.mkdir()
    with pytest.raises(ValueError) as ei:
        sim.build("breaker_k2", [src], include_dirs=[extra])
    msg = str(ei.value)
    assert "uses GET_TILING_DATA but no breaker_k2_tiling.h was found" in msg, msg
    for where in (kdir / "breaker_k2_tiling.h", tmp_path / "op_host" / "breaker_k2_tiling.h",
                  extra / "breaker_k2_tiling.h"):
        assert str(where) in msg, msg
    assert "REGISTER_TILING_DATA_CLASS(BreakerK2" in msg
    # with the header next to the kernel it builds
    (kdir / "breaker_k2_tiling.h").write_text(
        '#include "register/tilingdata_base.h"\nnamespace optiling {\nBEGIN_TILING_DATA_DEF(BreakerK2TD)\n'
        "  TILING_DATA_FIELD_DEF(uint32_t, n);\nEND_TILING_DATA_DEF;\n"
        "REGISTER_TILING_DATA_CLASS(BreakerK2, BreakerK2TD)\n}\n")
    mod = sim.build("breaker_k2", [src])
    assert mod.kernels == ["breaker_k2"]


def test_set_soc_canonical_name_and_type():
    """set_soc matches names case-insensitively and stores the canonical spelling (a lower-case name used to
    be accepted for launches and then rejected by set_backend('sim') as a bad environment variable); a
    non-str is a TypeError naming the argument; an unknown name is PLATFORM_UNKNOWN_SOC."""
    sim = sim_module()
    old = sim.get_soc()
    try:
        sim.set_soc("ascend310p3")
        assert sim.get_soc() == "Ascend310P3"
        sim.check_settings()  # no complaint about a name set_soc accepted
        with pytest.raises(TypeError, match="set_soc: argument 'name': expected a SoC name"):
            sim.set_soc(None)
        with pytest.raises(sim.EmulationError, match="PLATFORM_UNKNOWN_SOC"):
            sim.set_soc("Ascend999")
        assert sim.get_soc() == "Ascend310P3"
    finally:
        sim.set_soc(old)


def test_pynative_rejection_names_a_passed_input_not_the_absent_optional():
    """multi_layer_block_transfer without staging: the wrapper passes an empty stand-in for the absent
    OPTIONAL input; a dtype rejection must name an input the user gave (was: 'staging')."""
    from _copy_sim_ref import public_backend_or_skip

    mk = public_backend_or_skip("multi_layer_block_transfer")
    import mindspore as ms
    from mindspore import Parameter, Tensor

    sim = sim_module()
    kc = Parameter(Tensor(np.zeros((4, 2, 8, 16), np.float32), ms.bfloat16), name="bk")
    vc = Parameter(Tensor(np.zeros((4, 2, 8, 16), np.float32), ms.bfloat16), name="bv")
    hb = tuple(Tensor(np.zeros((1, 8, 1, 2, 16), np.float32), ms.bfloat16) for _ in range(2))
    old = sim.get_soc()
    mk.set_backend("sim")
    sim.set_soc("Ascend310P3")
    try:
        with pytest.raises(sim.TilingDTypeRejectedError) as ei:
            mk.multi_layer_block_transfer([(kc, vc)], hb, Tensor(np.array([1], np.int64)), direction="h2d")
        assert "'staging'" not in str(ei.value) and "bfloat16" in str(ei.value), str(ei.value)
    finally:
        sim.set_soc(old)
        mk.set_backend("cpu")
