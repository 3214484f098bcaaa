"""The in-kernel alias check of the kernels that write several tensors (issue 15): copy_blocks, the multi-layer
transfers, reshape_and_cache, concat_and_cache_mla and the fused RoPE writers. On the ascend backend in
GRAPH_MODE the same Parameter can reach a kernel twice (graph code sees no Parameter identity), and no
launch-time check sees the addresses there. The kernels compare the GM byte ranges of the tensors they
write with every other tensor of the launch at kernel start, on every core before its first write, and
stop the launch with AscendC::Trap() (mskv::TrapOnAliasedWrites, op_kernel/kv_copy_common.h).

Here the kernels run in the emulation, which models Trap() as a launch failure with rule TRAP. The sim
backend's own launch-time alias check (runner.cpp AliasProblem, reading the primitive's mskv_disjoint
attributes) is bypassed: by ``ms_kvcache.sim.launch`` directly, and in GRAPH_MODE by a primitive
without those attributes - as the ascend backend's primitives are on the NPU. On hardware only the
Trap itself (an AI Core exception, the launch fails) is not shown by these tests."""
import numpy as np
import pytest

from _copy_sim_ref import launch, sim_module, status
from _multi_layer_ref import SEPARATE, Geometry, flat_caches, host_block_shape
from conftest import random_array

SOCS = ["Ascend910B1", "Ascend310P3"]  # the A2 and the 310P builds of each kernel


def _trap(op, arrays, attrs=None, soc="Ascend910B1", written=()):
    """The launch stops with rule TRAP and the arrays in ``written`` keep their bytes."""
    sim = sim_module()
    before = [w.copy() for w in written]
    with pytest.raises(sim.EmulationError) as ei:
        launch(op, arrays, attrs, soc, gm_copy="never")
    assert ei.value.rule == "TRAP", str(ei.value)
    assert "AscendC::Trap()" in str(ei.value)
    for w, b in zip(written, before):
        np.testing.assert_array_equal(w, b, "written before the trap")


# ------------------------------------------------------------------------------------------ copy_blocks
@pytest.mark.parametrize("soc", SOCS)
def test_copy_blocks_same_cache_as_key_and_value_traps(soc, rng):
    """key_caches[0] is value_caches[1]: was GM_RACE / GM_WRITE_CONFLICT between cores at best, or a
    silently order-dependent result with one core."""
    k0, k1, v0 = (random_array(rng, (8, 4, 16), "float16") for _ in range(3))
    bm = np.array([[0, 3], [2, 5]], np.int64)
    _trap("MskvCopyBlocks", [[k0, k1], [v0, k0], bm, status()], soc=soc, written=(k0, k1, v0))


def test_copy_blocks_overlapping_views_trap(rng):
    """Two caches over overlapping bytes of one buffer (two Parameters set_data'd to views)."""
    m = random_array(rng, (12, 4, 16), "float32")
    _trap("MskvCopyBlocks", [[m[0:8]], [m[4:12]], np.array([[0, 1]], np.int32), status()], written=(m,))


def test_copy_blocks_many_layers_pairwise_fallback_traps():
    """More than the 128 ranges sorted on the stack at a time: the check of the later ranges against the sorted
    batch finds the repeat."""
    caches = [np.zeros((2, 16), np.float16) for _ in range(65)]
    vals = [np.ones((2, 16), np.float16) for _ in range(64)] + [caches[40]]
    _trap("MskvCopyBlocks", [caches, vals, np.array([[0, 1]], np.int32), status()], written=tuple(caches))


def test_copy_blocks_disjoint_caches_still_run(rng):
    """Not over-strict: distinct caches, and disjoint planes of one buffer, are copied."""
    m = random_array(rng, (2, 8, 4, 16), "float16")
    exp = m.copy()
    exp[:, 3] = exp[:, 1]
    launch("MskvCopyBlocks", [[m[0]], [m[1]], np.array([[1, 3]], np.int64), status()], gm_copy="never")
    np.testing.assert_array_equal(m, exp)


# ------------------------------------------------------------------------------- multi-layer transfers
def _kv_attrs(geo, direction):
    return {"kv_format": int(geo.fmt), "direction": direction, "cache_layout": geo.layout, "num_layers": geo.L}


@pytest.mark.parametrize("soc", SOCS)
def test_kv_transfer_h2d_cache_in_two_layers_traps(soc, rng):
    geo = Geometry(SEPARATE, "BSND", num_layers=2, num_blocks=4, block_size=8)
    planes = geo.random_planes(rng, "float16")
    caches = flat_caches(geo, planes)
    caches[3] = caches[0]  # value cache of layer 1 is the key cache of layer 0
    buf = random_array(rng, (2, geo.L, 3, geo.hidden[0]), "float16")
    _trap("MskvMultiLayerKvTransfer", [buf, np.array([0, 9, 31], np.int64), caches, status()],
          _kv_attrs(geo, "h2d"), soc, written=tuple(caches))


def test_kv_transfer_d2h_repeated_cache_is_read_twice_and_buffer_over_cache_traps(rng):
    """d2h only reads the caches: one cache in two layers is gathered twice (allowed, as on cpu); a
    buffer whose bytes are a cache's would overwrite rows still to be read: TRAP."""
    geo = Geometry(SEPARATE, "BSND", num_layers=2, num_blocks=4, block_size=8)
    planes = geo.random_planes(rng, "float16")
    caches = flat_caches(geo, planes)
    caches[2] = caches[0]
    slots = np.array([0, 9, 31], np.int64)
    buf = np.zeros((2, geo.L, 3, geo.hidden[0]), np.float16)
    launch("MskvMultiLayerKvTransfer", [buf, slots, caches, status()], _kv_attrs(geo, "d2h"), gm_copy="never")
    rows = caches[0].reshape(geo.slots, -1)[slots]
    np.testing.assert_array_equal(buf[0, 0], rows)
    np.testing.assert_array_equal(buf[0, 1], rows)  # layer 1's key plane: the same cache
    over = caches[1].reshape(-1)[:buf.size].reshape(buf.shape)  # the buffer is the start of v0
    _trap("MskvMultiLayerKvTransfer", [over, slots, caches, status()], _kv_attrs(geo, "d2h"),
          written=tuple(caches))


@pytest.mark.parametrize("staged", [False, True])
def test_block_transfer_h2d_cache_in_two_layers_traps(staged, rng):
    geo = Geometry(SEPARATE, "BSND", num_layers=2, num_blocks=4, block_size=8)
    caches = flat_caches(geo, geo.random_planes(rng, "float32"))
    caches[2] = caches[0]
    ids = np.array([1, 3], np.int64)
    host = [random_array(rng, host_block_shape(geo, p, 2), "float32") for p in range(geo.P)]
    staging = np.zeros(2 * geo.bs * geo.L * sum(geo.hidden), np.float32) if staged else None
    _trap("MskvMultiLayerBlockTransfer", [ids, staging, host, caches, status()], _kv_attrs(geo, "h2d"),
          written=tuple(caches))


def test_block_transfer_many_tensors_checked_in_batches(rng):
    """64 layers x 2 planes + 2 host blocks = 130 ranges: the check reads each range about twice (a sorted batch
    of 128, then the rest against it), not once per pair (was ~8.6k ListTensorDesc reads per core, which made
    the GM traffic of a one-block transfer 1.4x its payload); a host block over a cache (range 129 against the
    first batch) still traps."""
    geo = Geometry(SEPARATE, "BSND", num_layers=64, num_blocks=64, block_size=4, heads=1, head_size=32)
    caches = flat_caches(geo, geo.random_planes(rng, "float16"))
    host = [np.zeros(host_block_shape(geo, p, 1), np.float16) for p in range(geo.P)]
    ids = np.array([2], np.int64)
    st = launch("MskvMultiLayerBlockTransfer", [ids, None, host, caches, status()], _kv_attrs(geo, "d2h"),
                gm_copy="never")
    assert max(st["scalar_gm_reads_per_core"]) < 600, st["scalar_gm_reads_per_core"]
    over = caches[5].reshape(-1)[:host[1].size].reshape(host[1].shape)
    _trap("MskvMultiLayerBlockTransfer", [ids, None, [host[0], over], caches, status()], _kv_attrs(geo, "d2h"),
          written=tuple(caches))


def test_block_transfer_d2h_staging_over_a_cache_traps(rng):
    geo = Geometry(SEPARATE, "BSND", num_layers=2, num_blocks=4, block_size=8)
    caches = flat_caches(geo, geo.random_planes(rng, "float32"))
    host = [np.zeros(host_block_shape(geo, p, 2), np.float32) for p in range(geo.P)]
    staging = caches[1].reshape(-1)  # scratch space that is a cache being offloaded
    _trap("MskvMultiLayerBlockTransfer", [np.array([1, 3], np.int64), staging, host, caches, status()],
          _kv_attrs(geo, "d2h"), written=tuple(caches) + tuple(host))


# ----------------------------------------------------------------- GRAPH_MODE without the launch check
def test_graph_mode_aliased_caches_fail_loudly_without_launch_check(monkeypatch, rng):
    """GRAPH_MODE on the sim backend with primitives that carry no mskv_disjoint attributes (the launch
    check of the cpu / sim AOT entries then sees nothing, as on the ascend backend): copy_blocks with one
    Parameter as key and value cache fails with the kernel's TRAP in the RuntimeError, and nothing is
    written (was: GM_RACE between the cores, or with one core a silent order-dependent result). The
    transfers' traps: the sim.launch tests above (one graph compile here: CI time)."""
    from mindspore import Parameter, Tensor, nn
    from mindspore.ops import _primitive_cache

    import ms_kvcache as mk
    from ms_kvcache import _custom
    from ms_kvcache._backends import sim as sim_backend
    from conftest import ms_mode, to_np

    if not sim_backend.available()[0]:
        pytest.skip("sim backend not built")
    monkeypatch.setattr(_custom, "_set_alias_attrs", lambda *a, **k: None)
    monkeypatch.setattr(_primitive_cache, "_PRIM_CACHE", {})  # primitives made afresh, without the attrs

    class CopyNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.k = Parameter(Tensor(rng.standard_normal((8, 4, 16)).astype(np.float32)), name="trap_cb_k")
            self.k2 = Parameter(Tensor(rng.standard_normal((8, 4, 16)).astype(np.float32)), name="trap_cb_k2")

        def construct(self, bm):
            return mk.copy_blocks((self.k, self.k2), (self.k2, self.k), bm)

    old = mk.get_backend()
    mk.set_backend("sim")
    try:
        with ms_mode("graph"):
            net = CopyNet()
            before = [to_np(net.k).copy(), to_np(net.k2).copy()]
            with pytest.raises(RuntimeError, match=r"TRAP.*AscendC::Trap\(\)"):
                net(Tensor(np.array([[0, 3]], np.int64)))
            np.testing.assert_array_equal(to_np(net.k), before[0])
            np.testing.assert_array_equal(to_np(net.k2), before[1])
    finally:
        mk.set_backend(old)


# ---------------------------------------------------------------------------- the scatter-by-slot writers
def _kv_rows(rng, T, H, D, dtype="float16"):
    return random_array(rng, (T, H, D), dtype), random_array(rng, (T, H, D), dtype)


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
def test_reshape_and_cache_same_cache_as_key_and_value_traps(soc, layout, rng):
    """key_cache is value_cache (one Parameter passed twice in a graph): was PIPE_HAZARD in the emulation
    (on the NPU the value rows overwrite the key rows in an order-dependent way)."""
    k, v = _kv_rows(rng, 40, 2, 16)
    shape = (4, 16, 2, 16) if layout == "BSND" else (4, 2, 16, 16)
    kc = random_array(rng, shape, "float16")
    _trap("MskvReshapeAndCache", [k, v, kc, kc, np.arange(40, dtype=np.int64), status()],
          {"cache_layout": layout}, soc, written=(kc,))


def test_reshape_and_cache_overlapping_caches_trap(rng):
    """Two caches over overlapping bytes of one buffer: one block in common."""
    k, v = _kv_rows(rng, 9, 2, 16, "float32")
    m = random_array(rng, (7, 16, 2, 16), "float32")
    _trap("MskvReshapeAndCache", [k, v, m[0:4], m[3:7], np.arange(9, dtype=np.int32), status()], written=(m,))


def test_reshape_and_cache_adjacent_planes_of_one_buffer_still_run(rng):
    """Not over-strict: the two planes of one [2, ...] buffer (adjacent, no byte shared) are written."""
    from _copy_sim_ref import ref_reshape_and_cache

    k, v = _kv_rows(rng, 21, 2, 16)
    m = random_array(rng, (2, 3, 16, 2, 16), "float16")
    slots = np.array([47, -1] + list(range(0, 38, 2)), np.int64)
    ek, ev = ref_reshape_and_cache(k, v, m[0], m[1], slots)
    launch("MskvReshapeAndCache", [k, v, m[0], m[1], slots, status()], gm_copy="never")
    np.testing.assert_array_equal(m[0], ek)
    np.testing.assert_array_equal(m[1], ev)


@pytest.mark.parametrize("soc", SOCS)
def test_concat_and_cache_mla_same_cache_for_both_parts_traps(soc, rng):
    """kv_c_cache is k_pe_cache (kv_lora_rank == rope_dim, one Parameter passed twice in a graph)."""
    kv_c, k_pe = random_array(rng, (30, 32), "float16"), random_array(rng, (30, 32), "float16")
    c = random_array(rng, (3, 16, 32), "float16")
    _trap("MskvConcatAndCacheMla", [kv_c, k_pe, c, c, np.arange(30, dtype=np.int64), status()], soc=soc,
          written=(c,))


def test_concat_and_cache_mla_overlapping_and_adjacent_caches(rng):
    """k_pe_cache starting one row before the end of kv_c_cache in one buffer: TRAP; starting right at
    its end (no byte shared): written as usual."""
    from _copy_sim_ref import ref_concat_and_cache_mla

    nb, bs, R, P = 2, 16, 64, 16
    kv_c, k_pe = random_array(rng, (20, R), "float16"), random_array(rng, (20, P), "float16")
    slots = np.arange(20, dtype=np.int64)[::-1].copy()
    flat = random_array(rng, (nb * bs * (R + P) + P,), "float16")
    kvcc = flat[:nb * bs * R].reshape(nb, bs, R)
    over = flat[nb * bs * R - P:nb * bs * (R + P) - P].reshape(nb, bs, P)
    _trap("MskvConcatAndCacheMla", [kv_c, k_pe, kvcc, over, slots, status()], written=(flat,))
    kpec = flat[nb * bs * R:nb * bs * (R + P)].reshape(nb, bs, P)
    e1, e2 = ref_concat_and_cache_mla(kv_c, k_pe, kvcc, kpec, slots)
    launch("MskvConcatAndCacheMla", [kv_c, k_pe, kvcc, kpec, slots, status()], gm_copy="never")
    np.testing.assert_array_equal(kvcc, e1)
    np.testing.assert_array_equal(kpec, e2)


# -------------------------------------------------------------------------------- the fused RoPE writers
def _rope_inputs(rng, T=12, hq=2, hk=1, d=32, nb=2, bs=16, max_position=16):
    from _rope_sim_ref import make_table

    positions = rng.integers(0, max_position, size=T).astype(np.int64)
    q = random_array(rng, (T, hq, d), "float16")
    k = random_array(rng, (T, hk, d), "float16")
    v = random_array(rng, (T, hk, d), "float16")
    table = make_table(max_position, d, "float32")
    slots = rng.permutation(nb * bs)[:T].astype(np.int64)
    return positions, q, k, v, table, slots


ROPE_ATTRS = {"is_neox_style": True, "cache_layout": "BSND"}


@pytest.mark.parametrize("soc", SOCS)
def test_rope_reshape_and_cache_same_cache_as_key_and_value_traps(soc, rng):
    """key_cache is value_cache: was PIPE_HAZARD in the emulation (rotated keys and values racing)."""
    positions, q, k, v, table, slots = _rope_inputs(rng)
    kc = random_array(rng, (2, 16, 1, 32), "float16")
    qo, ko = np.zeros_like(q), np.zeros_like(k)
    _trap("MskvRopeReshapeAndCache", [positions, q, k, v, table, kc, kc, slots, qo, ko], ROPE_ATTRS, soc,
          written=(kc, qo, ko))


def test_rope_reshape_and_cache_key_out_over_a_cache_traps(rng):
    """key_out over bytes of value_cache (an output must never share memory with a cache)."""
    positions, q, k, v, table, slots = _rope_inputs(rng)
    kc, vc = random_array(rng, (2, 16, 1, 32), "float16"), random_array(rng, (2, 16, 1, 32), "float16")
    qo = np.zeros_like(q)
    ko = vc.reshape(-1)[32:32 + k.size].reshape(k.shape)
    _trap("MskvRopeReshapeAndCache", [positions, q, k, v, table, kc, vc, slots, qo, ko], ROPE_ATTRS,
          written=(kc, vc, qo))


def test_rope_reshape_and_cache_merged_query_out_over_the_cache_traps(rng):
    """The merged cache is the only cache written (its two planes are disjoint by construction); query_out
    over its bytes: TRAP."""
    positions, q, k, v, table, slots = _rope_inputs(rng)
    kv = random_array(rng, (2, 2, 16, 1, 32), "float16")
    qo = kv.reshape(-1)[-q.size:].reshape(q.shape)  # the end of the value plane
    ko = np.zeros_like(k)
    _trap("MskvRopeReshapeAndCacheMerged", [positions, q, k, v, table, kv, slots, qo, ko], ROPE_ATTRS,
          written=(kv, ko))


def _mla_inputs(rng, T=10, hq=2, rope=32, rank=32, nb=2, bs=16, max_position=16):
    from _rope_sim_ref import make_table

    positions = rng.integers(0, max_position, size=T).astype(np.int32)
    q = random_array(rng, (T, hq, rope), "float16")
    k = random_array(rng, (T, rope), "float16")
    kv = random_array(rng, (T, rank), "float16")
    table = make_table(max_position, rope, "float32")
    slots = rng.permutation(nb * bs)[:T].astype(np.int64)
    return positions, q, k, kv, table, slots


@pytest.mark.parametrize("soc", SOCS)
def test_rope_concat_and_cache_mla_same_cache_for_both_parts_traps(soc, rng):
    """kv_c_cache is k_pe_cache (kv_lora_rank == rope_dim, one Parameter passed twice in a graph)."""
    positions, q, k, kv, table, slots = _mla_inputs(rng)
    c = random_array(rng, (2, 16, 32), "float16")
    outs = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(kv)]
    _trap("MskvRopeConcatAndCacheMla", [positions, q, k, kv, table, c, c, slots, None, *outs],
          {"is_neox_style": False, "epsilon": 1e-6}, soc, written=(c, *outs))


def test_rope_concat_and_cache_mla_kv_c_out_over_a_cache_traps(rng):
    positions, q, k, kv, table, slots = _mla_inputs(rng, rank=64)
    kvcc, kpec = random_array(rng, (2, 16, 64), "float16"), random_array(rng, (2, 16, 32), "float16")
    kv_out = kvcc.reshape(-1)[:kv.size].reshape(kv.shape)
    outs = [np.zeros_like(q), np.zeros_like(k), kv_out]
    _trap("MskvRopeConcatAndCacheMla", [positions, q, k, kv, table, kvcc, kpec, slots, None, *outs],
          {"is_neox_style": False, "epsilon": 1e-6}, written=(kvcc, kpec, outs[0], outs[1]))


@pytest.mark.parametrize("op", ["reshape_and_cache", "rope_reshape_and_cache"])
def test_graph_mode_same_parameter_as_both_caches_fails_loudly_without_launch_check(op, monkeypatch, rng):
    """GRAPH_MODE on the sim backend with primitives that carry no mskv_disjoint attributes (as on the ascend
    backend): one Parameter as key_cache and value_cache fails with the kernel's TRAP in the RuntimeError and
    the Parameter keeps its bytes (was: PIPE_HAZARD, on the NPU an order-dependent result). The MLA
    writers' traps: the sim.launch tests above (one graph compile per op here: CI time)."""
    from mindspore import Parameter, Tensor, nn
    from mindspore.ops import _primitive_cache

    import ms_kvcache as mk
    from ms_kvcache import _custom
    from ms_kvcache._backends import sim as sim_backend
    from conftest import ms_mode, to_np

    if not sim_backend.available()[0]:
        pytest.skip("sim backend not built")
    monkeypatch.setattr(_custom, "_set_alias_attrs", lambda *a, **k: None)
    monkeypatch.setattr(_primitive_cache, "_PRIM_CACHE", {})  # primitives made afresh, without the attrs
    positions, q, k, v, table, slots = _rope_inputs(rng)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.c = Parameter(Tensor(random_array(rng, (2, 16, 1, 32), "float16")), name=f"trap_{op}_kv")

        def construct(self, p, q, k, v, table, s):
            if op == "reshape_and_cache":
                return mk.reshape_and_cache(k, v, self.c, self.c, s)
            return mk.rope_reshape_and_cache(p, q, k, v, table, self.c, self.c, s)

    old = mk.get_backend()
    mk.set_backend("sim")
    try:
        with ms_mode("graph"):
            net = Net()
            before = to_np(net.c).copy()
            with pytest.raises(RuntimeError, match=r"TRAP.*AscendC::Trap\(\)"):
                net(*(Tensor(x) for x in (positions, q, k, v, table, slots)))
            np.testing.assert_array_equal(to_np(net.c), before)
    finally:
        mk.set_backend(old)


# ------------------------------------------------------------------------------ the quantizing writes
_E = np.zeros((0,), np.float32)  # an absent optional input of the quantizing ops


@pytest.mark.parametrize("soc", SOCS)
def test_reshape_and_cache_quant_same_cache_as_key_and_value_traps(soc, rng):
    """key_cache is value_cache of an int8 static-scale write (one Parameter passed twice in a graph)."""
    k, v = _kv_rows(rng, 24, 2, 32, "float32")
    kc = np.zeros((3, 8, 2, 32), np.int8)
    s = np.full((), 0.05, np.float32)
    _trap("MskvReshapeAndCacheQuant",
          [k, v, kc, kc, np.arange(24, dtype=np.int32), s, s, _E, _E, _E, _E, status()],
          {"quant_mode": "static"}, soc, written=(kc,))


@pytest.mark.parametrize("soc", SOCS)
def test_reshape_and_cache_quant_scale_cache_aliases_traps(soc, rng):
    """k_scale_cache is v_scale_cache of a dynamic per-token write: each token's value scale would
    overwrite its key scale."""
    k, v = _kv_rows(rng, 24, 8, 32, "float32")
    kc, vc = np.zeros((3, 8, 8, 32), np.int8), np.zeros((3, 8, 8, 32), np.int8)
    sc = np.zeros((3, 8, 8, 1), np.float32)
    _trap("MskvReshapeAndCacheQuant",
          [k, v, kc, vc, np.arange(24, dtype=np.int32), _E, _E, _E, _E, sc, sc, status()],
          {"quant_mode": "dynamic"}, soc, written=(kc, vc, sc))


def test_reshape_and_cache_quant_distinct_caches_still_run(rng):
    """Not over-strict: distinct data and scale caches are written (the scale caches' rows change)."""
    k, v = _kv_rows(rng, 5, 8, 32, "float32")
    kc, vc = np.zeros((3, 8, 8, 32), np.int8), np.zeros((3, 8, 8, 32), np.int8)
    ksc, vsc = np.zeros((3, 8, 8, 1), np.float32), np.zeros((3, 8, 8, 1), np.float32)
    launch("MskvReshapeAndCacheQuant", [k, v, kc, vc, np.arange(5, dtype=np.int32), _E, _E, _E, _E, ksc, vsc,
                                        status()], {"quant_mode": "dynamic"}, gm_copy="never")
    want = np.abs(k).max(-1) / np.float32(127)
    np.testing.assert_allclose(ksc[0, :5, :, 0], want, rtol=1e-6)
    assert np.abs(kc[0, :5]).max() == 127


def test_concat_and_cache_mla_quant_same_cache_for_both_parts_traps(rng):
    """kv_c_cache is k_pe_cache of an int8 static-scale MLA write (kv_lora_rank == rope_dim)."""
    kv_c, k_pe = random_array(rng, (30, 32), "float32"), random_array(rng, (30, 32), "float32")
    c = np.zeros((3, 16, 32), np.int8)
    s = np.full((), 0.05, np.float32)
    _trap("MskvConcatAndCacheMlaQuant",
          [kv_c, k_pe, c, c, np.arange(30, dtype=np.int64), s, s, _E, _E, _E, _E, status()],
          {"quant_mode": "static"}, written=(c,))


@pytest.mark.parametrize("soc", SOCS)
def test_rope_reshape_and_cache_quant_aliases_trap(soc, rng):
    """rope_reshape_and_cache with int8 caches: key_cache is value_cache (static), k_scale_cache is v_scale_cache
    (dynamic, 8 kv heads: the 310P rule), query_out over key_cache's bytes: TRAP before any write."""
    positions, q, k, v, table, slots = _rope_inputs(rng, hq=8, hk=8)
    qo, ko = np.zeros_like(q), np.zeros_like(k)
    kc, vc = np.zeros((2, 16, 8, 32), np.int8), np.zeros((2, 16, 8, 32), np.int8)
    s = np.full((), 0.05, np.float32)
    op = "MskvRopeReshapeAndCacheQuant"
    _trap(op, [positions, q, k, v, table, kc, kc, slots, s, s, _E, _E, _E, _E, qo, ko], ROPE_ATTRS, soc,
          written=(kc, qo, ko))
    sc = np.zeros((2, 16, 8, 1), np.float32)
    dyn = dict(ROPE_ATTRS, quant_mode="dynamic")
    _trap(op, [positions, q, k, v, table, kc, vc, slots, _E, _E, _E, _E, sc, sc, qo, ko], dyn, soc,
          written=(kc, vc, sc, qo, ko))
    qo_alias = kc.view(np.float16).reshape(-1)[:q.size].reshape(q.shape)  # query_out over key_cache
    _trap(op, [positions, q, k, v, table, kc, vc, slots, s, s, _E, _E, _E, _E, qo_alias, ko], ROPE_ATTRS, soc,
          written=(vc, ko))
    # not over-strict: the same launch with distinct tensors runs and writes the caches
    launch(op, [positions, q, k, v, table, kc, vc, slots, _E, _E, _E, _E, sc, np.zeros_like(sc), qo, ko], dyn, soc,
           gm_copy="never")
    assert np.abs(kc).max() == 127 and (sc > 0).any()


@pytest.mark.parametrize("soc", SOCS)
def test_rope_concat_and_cache_mla_quant_aliases_trap(soc, rng):
    """rope_concat_and_cache_mla with int8 caches: kv_c_cache is k_pe_cache (static), kv_c_scale_cache is
    k_pe_scale_cache (dynamic, A2 only: Ascend310P refuses dynamic MLA scales), kv_c_out over kv_c_cache's bytes:
    TRAP before any write."""
    positions, q, k, kv, table, slots = _mla_inputs(rng)
    outs = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(kv)]
    c, p = np.zeros((2, 16, 32), np.int8), np.zeros((2, 16, 32), np.int8)
    s = np.full((), 0.05, np.float32)
    op, st = "MskvRopeConcatAndCacheMlaQuant", {"is_neox_style": False, "epsilon": 1e-6, "quant_mode": "static"}
    _trap(op, [positions, q, k, kv, table, c, c, slots, None, s, s, _E, _E, _E, _E, *outs], st, soc,
          written=(c, *outs))
    kv_alias = c.view(np.float16).reshape(-1)[:kv.size].reshape(kv.shape)  # kv_c_out over kv_c_cache's bytes
    _trap(op, [positions, q, k, kv, table, c, p, slots, None, s, s, _E, _E, _E, _E, outs[0], outs[1], kv_alias], st,
          soc, written=(p, outs[0], outs[1]))
    if soc != "Ascend310P3":
        sc = np.zeros((2, 16, 1), np.float32)
        dyn = dict(st, quant_mode="dynamic")
        _trap(op, [positions, q, k, kv, table, c, p, slots, None, _E, _E, _E, _E, sc, sc, *outs], dyn, soc,
              written=(c, p, sc, *outs))
        # not over-strict: the same launch with distinct tensors runs and writes the caches and scales
        launch(op, [positions, q, k, kv, table, c, p, slots, None, _E, _E, _E, _E, sc, np.zeros_like(sc), *outs],
               dyn, soc, gm_copy="never")
        assert np.abs(c).max() == 127 and np.abs(p).max() == 127 and (sc > 0).any()
