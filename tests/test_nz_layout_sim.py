"""cache_layout="NZ" through the AscendC kernels and tilings in the emulation ("sim").

The kernels directly (``sim.launch``) on every target SoC, byte-exact against the numpy NZ model of
tests/test_nz_layout.py (the ND write of the same rows, then nd_to_nz): float16, bfloat16 (a tiling error on
Ascend310P) and int8, both slot dtypes, slot padding and out-of-range slots, all core orders; the data movement
on Ascend310P3 and Atlas A2 (GM traffic at most 1.05x the minimum, one strided DataCopy per token and plane, no
DataCopyPad); the tiling's refusals. Then the public ops with set_backend("sim") on Ascend310P3 and Ascend910B1
in PyNative and GRAPH_MODE: every NZ write of tests/test_nz_layout.py (reshape_and_cache(_merged), int8 static
and dynamic, rope and rope-quantized), against the same model.
"""
import numpy as np
import pytest

import ms_kvcache
from ms_kvcache import nd_to_nz

from _copy_sim_ref import (INDEX_DTYPES, SOCS, assert_last_launch, assert_same_bytes, cores_of, expect_tiling_error,
                           launch, make_slots, public_backend_or_skip, rand, reset_last_launch, stable_seed, status)
import test_nz_layout as NZ

OP = "MskvReshapeAndCache"
DTYPE_DIGIT = {"float16": 1, "bfloat16": 2, "int8": 4}


def _case(rng, dtype, T, hidden, nb, bs, sdtype="int64", extra_rows=3):
    kc = nd_to_nz(rand(rng, (nb, bs, hidden), dtype))
    vc = nd_to_nz(rand(rng, (nb, bs, hidden), dtype))
    key = rand(rng, (T + extra_rows, hidden), dtype)
    value = rand(rng, (T + extra_rows, hidden // 32, 32), dtype)
    return key, value, kc, vc, make_slots(rng, T, nb * bs, sdtype)


def _run(key, value, kc, vc, slots, soc, **kw):
    T = len(slots)
    ek, ev = NZ.place_nz(kc, key[:T], slots), NZ.place_nz(vc, value[:T], slots)
    st = launch(OP, [key, value, kc, vc, slots, status()], {"cache_layout": "NZ"}, soc, **kw)
    assert_same_bytes(kc, ek, f"key_cache ({soc}, {kc.dtype})")
    assert_same_bytes(vc, ev, f"value_cache ({soc}, {kc.dtype})")
    return st


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("dtype", NZ.NZ_DTYPES)
@pytest.mark.parametrize("sdtype", INDEX_DTYPES)
def test_kernel_every_soc(soc, dtype, sdtype):
    rng = np.random.default_rng(stable_seed("nz", soc, dtype, sdtype))
    args = _case(rng, dtype, 57, 256, 5, 32, sdtype)
    if soc == "Ascend310P3" and dtype == "bfloat16":
        expect_tiling_error(OP, [*args, status()], {"cache_layout": "NZ"}, soc, "bfloat16", "Ascend310P")
        return
    st = _run(*args, soc)
    assert st["tiling_key"] == 2000 + 100 * DTYPE_DIGIT[dtype] + 10 * INDEX_DTYPES.index(sdtype)
    assert sum(st["datacopy_pad_calls_per_core"]) == 0


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_kernel_merged_and_all_core_orders(soc):
    rng = np.random.default_rng(3)
    T = cores_of(soc) + 1
    key, value, kc, vc, slots = _case(rng, "int8", T, 128, 4, 16)
    kv = np.stack([kc, vc])
    want = np.stack([NZ.place_nz(kc, key[:T], slots), NZ.place_nz(vc, value[:T], slots)])
    st = launch("MskvReshapeAndCacheMerged", [key, value, kv, slots, status()], {"cache_layout": "NZ"}, soc,
                all_orders=True)
    assert_same_bytes(kv, want, f"kv_cache ({soc})")
    assert st["block_dim"] == st["cores_used"] == cores_of(soc)


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("pattern", ["prefill", "scattered"])
def test_data_movement(soc, pattern):
    """Llama-3-8B-like rows (8 KV heads x 128, float16), block_size 128: GM traffic at most 1.05x the minimum
    (the rows read once, written once, and the slots), every core busy, and per core one copy-in per run of
    valid tokens and plane and one strided DataCopy of hidden / 16 32-byte units per token and plane out; no
    DataCopyPad (Ascend310P has none)."""
    rng = np.random.default_rng(11)
    T, hidden, bs = 301, 1024, 128
    nb = T // bs + 4
    kc = nd_to_nz(rand(rng, (nb, bs, hidden), "float16"))
    vc = nd_to_nz(rand(rng, (nb, bs, hidden), "float16"))
    key, value = rand(rng, (T, hidden), "float16"), rand(rng, (T, hidden), "float16")
    if pattern == "prefill":  # a sequence's tokens fill its blocks in order, blocks in random order
        slots = (rng.permutation(nb)[:, None] * bs + np.arange(bs)).reshape(-1)[:T].astype(np.int64)
    else:
        slots = rng.permutation(nb * bs)[:T].astype(np.int64)
    slots[7] = -1
    st = _run(key, value, kc, vc, slots, soc)
    valid = int(np.count_nonzero(slots >= 0))
    minimum = 2 * 2 * valid * hidden * 2 + slots.nbytes
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    assert total <= 1.05 * minimum, (total, minimum)
    assert st["cores_used"] == st["block_dim"] == cores_of(soc)
    assert sum(st["datacopy_pad_calls_per_core"]) == 0
    assert sum(st["datacopy_out_per_core"]) == 2 * valid


def test_tiling_refusals():
    rng = np.random.default_rng(5)
    key, value, kc, vc, slots = _case(rng, "float16", 5, 64, 2, 16)
    attrs = {"cache_layout": "NZ"}
    k32 = key.astype(np.float32)
    expect_tiling_error(OP, [k32, k32, np.zeros((2, 8, 16, 8), np.float32), np.zeros((2, 8, 16, 8), np.float32), slots,
                             status()], attrs, "Ascend910B1", "an NZ cache is float16, bfloat16 or int8")
    bad = np.zeros((2, 2, 16, 32), np.float16)  # C0 32 for float16
    expect_tiling_error(OP, [key, key, bad, bad.copy(), slots, status()], attrs, "Ascend310P3", "C0 = 16 for float16")
    bad = np.zeros((2, 4, 8, 16), np.float16)  # block_size 8
    expect_tiling_error(OP, [key, key, bad, bad.copy(), slots, status()], attrs, "Ascend910B1",
                        "block_size (dim 2 of an NZ cache) a multiple of 16")
    # the rotary write needs the head split: key [T', H*D] is refused with an NZ cache
    with pytest.raises(Exception, match="with an NZ cache expected \\[T', num_kv_heads, head_size\\]"):
        import ms_kvcache.sim as sim
        c = nd_to_nz(np.zeros((2, 16, 64), np.float16))
        sim.launch("MskvRopeReshapeAndCache", [np.zeros(5, np.int64), key, key, key, np.ones((8, 32), np.float32),
                                               c, c.copy(), slots, key.copy(), key.copy()],
                   attrs={"is_neox_style": True, "cache_layout": "NZ"}, soc="Ascend910B1")


# --------------------------------------------------------------------------- the public ops on sim
@pytest.fixture(params=["Ascend310P3", "Ascend910B1"])
def sim_soc(request):
    public_backend_or_skip("reshape_and_cache")
    import ms_kvcache.sim as sim

    old = sim.get_soc() if hasattr(sim, "get_soc") else None
    ms_kvcache.set_backend("sim")
    sim.set_soc(request.param)
    yield request.param
    if old is not None:
        sim.set_soc(old)
    ms_kvcache.set_backend("cpu")


def _dtype(soc):
    return "float16" if soc == "Ascend310P3" else "bfloat16"


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_writes(sim_soc, mode, rng):
    for dtype in ("int8", _dtype(sim_soc)):
        reset_last_launch("MskvReshapeAndCache")
        NZ.test_reshape_and_cache(mode, dtype, rng)
        assert_last_launch("MskvReshapeAndCache", segElems=32 // (1 if dtype == "int8" else 2))
    NZ.test_reshape_and_cache_merged(mode, rng, dtype=_dtype(sim_soc))
    assert_last_launch("MskvReshapeAndCacheMerged")


@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("scales", ["channel_offset", "dynamic"])
def test_public_quantized_writes(sim_soc, mode, scales, rng):
    reset_last_launch("MskvReshapeAndCacheQuant")
    NZ.test_quantized_write(mode, scales, rng, dtype=_dtype(sim_soc))
    assert_last_launch("MskvReshapeAndCacheQuant", segElems=32)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_rope_writes(sim_soc, mode, rng):
    for merged in (False, True):
        NZ.test_rope_write_modes(mode, merged, rng)
    assert_last_launch("MskvRopeReshapeAndCacheMerged")
    for scales in ("static", "dynamic"):
        NZ.test_rope_quantized_write(mode, scales, rng, dtype="float16")
    assert_last_launch("MskvRopeReshapeAndCacheQuant")


def test_public_rope_values(sim_soc, rng):
    NZ.test_rope_write_values(_dtype(sim_soc), True, rng)
