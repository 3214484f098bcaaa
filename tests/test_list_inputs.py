"""The one mechanism for ops that take lists of tensors (TensorSpec(dynamic=True)): per-instance counts,
dyn_input_sizes on every backend path, written sets per attribute value, the PyNative fast path of the
multi-layer transfers (strict kernels, index checks without a pipeline sync) against the ops.Custom path."""
import importlib

import numpy as np
import pytest
from mindspore import Parameter, Tensor, ops

import ms_kvcache as mk
from ms_kvcache import _custom
from ms_kvcache._spec import AttrSpec, OpSpec, TensorSpec

from conftest import assert_bits_equal, random_array, to_ms, to_np
from copy_util import fast_path
from _multi_layer_ref import (DSA, MLA, SEPARATE, Geometry, host_block_shape, pack_buffer, ref_block_gather,
                              ref_block_scatter, ref_gather, ref_scatter, unpack_buffer)


# the modules (ms_kvcache.ops exports the functions under the same names)
cb_mod = importlib.import_module("ms_kvcache.ops.copy_blocks")
kt_mod = importlib.import_module("ms_kvcache.ops.multi_layer_kv_transfer")
bt_mod = importlib.import_module("ms_kvcache.ops.multi_layer_block_transfer")


@pytest.fixture(autouse=True)
def _cpu(cpu_backend):
    yield


TOY = OpSpec(
    name="toy_lists", op_type="ToyLists",
    inputs=(TensorSpec("ids", "S", (1,)),
            TensorSpec("a", "T", (2,), dynamic=True, inplace_if=("direction", "h2d")),
            TensorSpec("buf", "T", (1,), inplace_if=("direction", "d2h")),
            TensorSpec("b", "T", (2,), dynamic=True, inplace=True)),
    dtype_groups={"T": ("float16",), "S": ("int64",)},
    attrs=(AttrSpec("direction", "str", "h2d", ("h2d", "d2h")),),
)


def test_spec_counts_sizes_and_expanded_inputs():
    assert TOY.has_dynamic and TOY.has_conditional_writes
    assert TOY.counts(3) == (3, 3)
    assert TOY.counts((2, 5)) == (2, 5)
    assert TOY.dyn_input_sizes((2, 5)) == [-1, 2, -1, 5]
    for bad in ((2,), (0, 1), (1, 2, 3), "x"):
        with pytest.raises(ValueError, match="toy_lists: expected"):
            TOY.counts(bad)
    h2d = TOY.expanded_inputs((2, 1), {"direction": "h2d"})
    assert [(t.name, t.inplace) for t in h2d] == [("ids", False), ("a_0", True), ("a_1", True), ("buf", False),
                                                  ("b_0", True)]
    d2h = TOY.expanded_inputs((2, 1), {"direction": "d2h"})
    assert [t.name for t in d2h if t.inplace] == ["buf", "b_0"]
    assert TOY.written_inputs() == ("a", "b")  # the default direction is h2d
    assert TOY.inplace_inputs == ("a", "buf", "b")


def test_primitive_instances_carry_counts_and_written_set():
    """One class per op; each instance gets dyn_input_sizes and side_effect_mem from its counts and attrs."""
    cb = cb_mod._Prim("cpu", (3, 3))
    assert cb.attrs["dyn_input_sizes"] == [3, 3, -1] and cb.attrs["side_effect_mem"]
    assert type(cb) is type(cb_mod._Prim("cpu", 40))
    kt = kt_mod._Prim("cpu", (8,), int(SEPARATE), "d2h", "BSND", 4, 0)
    assert kt.attrs["dyn_input_sizes"] == [-1, -1, 8] and kt.attrs["direction"] == 2  # "d2h", int-coded
    bt = bt_mod._Prim("cpu", (3, 183), int(DSA), "h2d", "BSND", 61, 0)
    assert bt.attrs["dyn_input_sizes"] == [-1, -1, 3, 183]
    assert _custom.prim_class(bt_mod.SPEC) is bt_mod._Prim
    with pytest.raises(ValueError, match="one count >= 1 per dynamic input"):
        kt_mod._Prim("cpu", (1, 2), int(SEPARATE), "d2h", "BSND", 1, 0)


def _kv_case(rng, dtype="float16", L=3):
    geo = Geometry(SEPARATE, "BNSD", num_layers=L, num_blocks=6, block_size=4, heads=2, head_size=16)
    planes = geo.random_planes(rng, dtype)
    slots = rng.permutation(geo.slots)[:7].astype(np.int64)
    slots[2] = -1
    return geo, planes, slots


@pytest.mark.parametrize("fast", [True, False])
def test_kv_transfer_fast_path_and_ops_custom_agree(rng, fast):
    geo, planes, slots = _kv_case(rng)
    caches = geo.to_ms(planes, "float16")
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, geo.L, len(slots), geo.hidden[0]), np.float16))
    with fast_path(fast):
        assert _custom.fast_path_available("cpu")[0] == fast
        mk.multi_layer_kv_transfer(buf, caches, Tensor(slots), kv_format=SEPARATE, direction="d2h",
                                   cache_layout="BNSD")
        assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")
        src = random_array(rng, to_np(buf).shape, "float16")
        fresh = geo.to_ms(planes, "float16")
        mk.multi_layer_kv_transfer(Tensor(src), fresh, Tensor(slots), kv_format=SEPARATE, direction="h2d",
                                   cache_layout="BNSD")
        exp = ref_scatter(geo, planes, unpack_buffer(geo, src, len(slots)), slots)
        for got, want in zip(geo.from_ms(fresh), exp):
            for g, w in zip(got, want):
                assert_bits_equal(g, w, "h2d")


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("staged", [False, True])
def test_block_transfer_fast_path_and_ops_custom_agree(rng, fast, staged):
    geo = Geometry(MLA, "BSND", num_layers=3, num_blocks=5, block_size=4, mla=(16, 8))
    planes = geo.random_planes(rng, "bfloat16")
    ids = np.array([4, 0, 2], np.int64)
    per_block = geo.bs * geo.L * sum(geo.hidden)
    staging = (lambda: to_ms(np.zeros(2 * per_block, np.float32), "bfloat16")) if staged else (lambda: None)
    with fast_path(fast):
        caches = geo.to_ms(planes, "bfloat16")
        host = [to_ms(np.zeros(host_block_shape(geo, p, 3), np.float32), "bfloat16") for p in range(geo.P)]
        mk.multi_layer_block_transfer(caches, host, Tensor(ids), direction="d2h", staging=staging())
        for p, (got, want) in enumerate(zip(host, ref_block_gather(geo, planes, ids))):
            assert_bits_equal(to_np(got), want, f"d2h plane {p}")
        src = [random_array(rng, host_block_shape(geo, p, 3), "bfloat16") for p in range(geo.P)]
        mk.multi_layer_block_transfer(caches, [to_ms(x, "bfloat16") for x in src], Tensor(ids), direction="h2d",
                                      staging=staging())
        for got, want in zip(geo.from_ms(caches), ref_block_scatter(geo, planes, src, ids)):
            for g, w in zip(got, want):
                assert_bits_equal(g, w, "h2d")


def _fast_kernel(spec, attr_values, counts):
    pyboost = pytest.importorskip("ms_kvcache._cpu_pyboost")
    from ms_kvcache import _cpu

    attrs = spec.kernel_attrs({a.name: v for a, v in zip(spec.attrs, attr_values)})  # named modes -> int codes
    attrs.update(mskv_strict=True, dyn_input_sizes=spec.dyn_input_sizes(counts))
    return pyboost, pyboost.kernel(_cpu.__file__, spec.op_type, spec.name, attrs)


def test_strict_kv_transfer_kernel_rechecks_slots_at_launch(rng):
    """On the fast path the kernel re-checks the slots it reads: out of range (both directions) and
    repeated (h2d) fail the op without writing; a repeated slot is fine for d2h."""
    geo, planes, _ = _kv_case(rng)
    caches = [x for layer in geo.to_ms(planes, "float16") for x in layer]
    buf = Tensor(random_array(rng, kt_mod.transfer_buffer_shape(SEPARATE, geo.L, 2, 32), "float16"))
    before = to_np(buf).copy()
    for direction, slots, match in (("h2d", [3, 3], "distinct non-negative slots"),
                                    ("d2h", [0, geo.slots], "num_blocks\\*block_size = 24"),
                                    ("h2d", [geo.slots + 5, 1], "num_blocks\\*block_size = 24")):
        pyboost, kern = _fast_kernel(kt_mod.SPEC, (int(SEPARATE), direction, "BNSD", geo.L, 0), (len(caches),))
        pyboost.run(kern, buf, Tensor(np.array(slots, np.int64)), *caches)
        with pytest.raises(RuntimeError, match=match):
            buf.asnumpy()
    assert_bits_equal(to_np(buf), before, "buffer untouched")
    for got, want in zip(geo.from_ms([tuple(caches[i:i + 2]) for i in range(0, len(caches), 2)]), planes):
        for g, w in zip(got, want):
            assert_bits_equal(g, w, "caches untouched")
    pyboost, kern = _fast_kernel(kt_mod.SPEC, (int(SEPARATE), "d2h", "BNSD", geo.L, 0), (len(caches),))
    pyboost.run(kern, buf, Tensor(np.array([5, 5], np.int64)), *caches)
    got = unpack_buffer(geo, to_np(buf), 2)
    assert_bits_equal(got[0][:, 0], got[0][:, 1], "d2h of a repeated slot")


def test_strict_block_transfer_kernel_rechecks_ids_at_launch(rng):
    geo = Geometry(SEPARATE, "BNSD", num_layers=2, num_blocks=4, block_size=4)
    planes = geo.random_planes(rng, "float16")
    caches = [x for layer in geo.to_ms(planes, "float16") for x in layer]
    host = [Tensor(np.zeros(host_block_shape(geo, p, 2), np.float16)) for p in range(2)]
    empty = _custom.empty_input(caches[0].dtype)
    for direction, ids, match in (("h2d", [1, 1], "expected distinct ids for h2d"),
                                  ("d2h", [0, 4], "expected block ids in \\[0, 4\\), got 4 at index 1"),
                                  ("h2d", [-1, 0], "expected block ids in \\[0, 4\\), got -1 at index 0")):
        pyboost, kern = _fast_kernel(bt_mod.SPEC, (int(SEPARATE), direction, "BNSD", 2, 0), (2, len(caches)))
        pyboost.run(kern, Tensor(np.array(ids, np.int64)), empty, *host, *caches)
        with pytest.raises(RuntimeError, match=match):
            caches[0].asnumpy()
    for got, want in zip(geo.from_ms([tuple(caches[i:i + 2]) for i in range(0, 4, 2)]), planes):
        for g, w in zip(got, want):
            assert_bits_equal(g, w, "caches untouched")
    assert not to_np(host[0]).any()


def test_check_block_ids_nosync_matches_numpy(rng):
    pyboost = pytest.importorskip("ms_kvcache._cpu_pyboost")
    for trial in range(40):
        n, nb = int(rng.integers(1, 60)), int(rng.integers(1, 100))
        ids = rng.integers(-2, nb + 2, size=n)
        if trial % 2:
            ids = rng.permutation(nb)[:min(n, nb)]
        for dtype in (np.int32, np.int64):
            for distinct in (False, True):
                code, i, j, v = pyboost.check_block_ids_nosync(Tensor(ids.astype(dtype)), nb, distinct)
                bad = np.nonzero((ids < 0) | (ids >= nb))[0]
                if bad.size:
                    assert (code, i, v) == (1, bad[0], ids[bad[0]])
                    continue
                first, dup = {}, None
                for jj, x in enumerate(ids.tolist()):
                    if x in first and dup is None:
                        dup = (first[x], jj, x)
                    first.setdefault(x, jj)
                if distinct and dup:
                    assert (code, i, j, v) == (2,) + dup
                else:
                    assert code == 0
    assert pyboost.check_block_ids_nosync(ops.add(Tensor(np.array([1], np.int64)), 1), 4, True) is None


def test_fast_path_transfer_is_ordered_with_builtin_ops(rng):
    """PyNative fast path is asynchronous: an h2d transfer is seen by a later built-in read, and a d2h
    sees an earlier built-in write into the caches (the kernel runs in MindSpore's backend stage)."""
    geo, planes, _ = _kv_case(rng, "float32", L=2)
    caches = [(Parameter(to_ms(k), name=f"ok{l}"), Parameter(to_ms(v), name=f"ov{l}"))
              for l, (k, v) in enumerate(planes)]
    slots = Tensor(np.array([1, 9], np.int64))
    big = Tensor(random_array(rng, (192, 192), "float32"))
    for r in range(4):
        for _ in range(3):
            big = ops.matmul(big, big) * 1e-3  # keep the pipeline busy
        src = ops.add(Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 2, 32), np.float32)), float(r))
        mk.multi_layer_kv_transfer(src, caches, slots, kv_format=SEPARATE, direction="h2d", cache_layout="BNSD")
        read = ops.mul(caches[1][1], 1.0)
        ops.assign(caches[0][0], ops.mul(caches[0][0], 0.0) + 100.0 + r)
        out = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 2, 32), np.float32))
        mk.multi_layer_kv_transfer(out, caches, slots, kv_format=SEPARATE, direction="d2h", cache_layout="BNSD")
        got = to_np(out)
        assert (got[0, 0] == 100.0 + r).all(), f"round {r}: d2h saw the earlier assign"
        assert (got[1] == float(r)).all(), f"round {r}: d2h saw the h2d"
        rows = geo.rows(read.asnumpy())
        assert (rows[[1, 9]] == float(r)).all(), f"round {r}: built-in read after h2d"
