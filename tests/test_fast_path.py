"""The PyNative fast path (ms_kvcache._cpu_pyboost launched by ms_kvcache._eager.EagerOp) for every
public op, with the emphasis on the ops with real outputs (the RoPE-write family): outputs allocated
and returned as MindSpore tensors, results bit-identical to the ops.Custom path, in-place writes
ordered with the built-in ops around them, index checks without a pipeline sync plus the kernels'
strict re-check at launch, cache views, and the fallback to ops.Custom."""
import os
import sys

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, ops

import ms_kvcache
from conftest import assert_bits_equal, to_ms, to_np
from copy_util import fast_path
from ms_kvcache import _custom
from ms_kvcache._eager import EagerOp
from ms_kvcache._spec import all_specs
from rope_ref import rope_f32_model
from test_rope_reshape_and_cache import make_table, rand

pytestmark = pytest.mark.usefixtures("cpu_backend")


def _require_fast():
    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip(f"fast path unavailable: {_custom.fast_path_available('cpu')[1]}")


def _module(name):
    return sys.modules[f"ms_kvcache.ops.{name}"]


def _launchers(op_name):
    """Kinds of the PyNative launchers created so far for ``op_name``: "fast" or "ops.Custom"."""
    return {"fast" if _custom.is_fast_launcher(f) else "ops.Custom"
            for k, f in _custom._LAUNCHERS.items() if k[0] == op_name}


# ---------------------------------------------------------------------------------------- the ops

def _rope_args(rng, dtype, rows=5, hq=4, hk=2, d=64, rd=64, nb=4, bs=8, maxp=64, layout="BSND"):
    q, k, v = rand(rng, (rows, hq, d), dtype), rand(rng, (rows, hk, d), dtype), rand(rng, (rows, hk, d), dtype)
    shape = (nb, bs, hk, d) if layout == "BSND" else (nb, hk, bs, d)
    kc, vc = rand(rng, shape, dtype), rand(rng, shape, dtype)
    pos = rng.integers(0, maxp, size=rows).astype(np.int64)
    pos[0] = maxp - 1
    slots = rng.permutation(nb * bs)[:rows - 1].astype(np.int32)  # T = rows - 1 < T'
    slots[1] = -1
    return q, k, v, make_table(maxp, rd), kc, vc, pos, slots


def run_rope(rng, dtype):
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, dtype, layout="BNSD")
    caches = [to_ms(kc), to_ms(vc)]
    outs = ms_kvcache.rope_reshape_and_cache(Tensor(pos), to_ms(q), to_ms(k), to_ms(v), to_ms(cs), *caches,
                                             Tensor(slots), is_neox_style=False, cache_layout="BNSD")
    return list(outs) + caches


def run_rope_merged(rng, dtype):
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, dtype)
    kv = to_ms(np.stack([kc, vc]))
    outs = ms_kvcache.rope_reshape_and_cache_merged(Tensor(pos.astype(np.int32)), to_ms(q), to_ms(k), to_ms(v),
                                                    to_ms(cs), kv, Tensor(slots.astype(np.int64)))
    return list(outs) + [kv]


def run_rope_mla(rng, dtype, norm=True):
    rows, nb, bs = 6, 4, 8
    q_pe, k_pe, kv_c = rand(rng, (rows, 8, 64), dtype), rand(rng, (rows, 64), dtype), rand(rng, (rows, 512), dtype)
    ccache, pcache = to_ms(rand(rng, (nb, bs, 512), dtype)), to_ms(rand(rng, (nb, bs, 64), dtype))
    pos = rng.integers(0, 128, size=rows).astype(np.int64)
    slots = rng.permutation(nb * bs)[:rows].astype(np.int64)
    slots[2] = -1
    w = to_ms(rng.uniform(0.5, 1.5, size=512).astype(np.float32)) if norm else None
    outs = ms_kvcache.rope_concat_and_cache_mla(Tensor(pos), to_ms(q_pe), to_ms(k_pe), to_ms(kv_c),
                                                to_ms(make_table(128, 64)), ccache, pcache, Tensor(slots),
                                                kv_c_norm_weight=w, epsilon=1e-5)
    return list(outs) + [ccache, pcache]


def run_rerope(rng, dtype):
    nb, bs, h, d, n = 6, 8, 2, 128, 10
    cache = to_ms(rand(rng, (nb, bs, h, d), dtype))
    slots = rng.permutation(nb * bs)[:n].astype(np.int32)
    slots[3] = -1
    old, new = rng.integers(0, 256, size=n), rng.integers(0, 256, size=n)
    out = ms_kvcache.rerope_cached_keys(cache, Tensor(slots), Tensor(old), Tensor(new), to_ms(make_table(256, 64)))
    assert out is None
    return [cache]


ROPE_OPS = {"rope_reshape_and_cache": run_rope, "rope_reshape_and_cache_merged": run_rope_merged,
            "rope_concat_and_cache_mla": run_rope_mla, "rerope_cached_keys": run_rerope}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("op", sorted(ROPE_OPS))
def test_rope_ops_fast_path_bit_identical_to_ops_custom(op, dtype):
    """Same inputs through the fast path and through ops.Custom (the MS_KVCACHE_PYNATIVE_FAST=0 path):
    every output and cache bit for bit equal, and each path really used. (The values themselves are
    checked against numpy references in the op's own test file, on the default path = fast path.)"""
    _require_fast()
    seed = abs(hash((op, dtype))) % 2**32
    fast = [to_np(t) for t in ROPE_OPS[op](np.random.default_rng(seed), dtype)]
    assert _launchers(op) == {"fast"}
    with fast_path(False):
        slow = [to_np(t) for t in ROPE_OPS[op](np.random.default_rng(seed), dtype)]
        assert _launchers(op) == {"ops.Custom"}
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert_bits_equal(a, b, f"{op} {dtype}: result {i}, fast path vs ops.Custom")


def test_every_public_op_has_the_fast_path():
    """Every registered op's PyNative launcher is the fast path (an op left on ops.Custom costs 10-50x
    per call). The copy and rope ops run their PyNative branch through an EagerOp; the multi-layer
    transfers (and their variants with scale caches) flatten their per-format nested kv_caches themselves
    (ops._multi_layer.flatten_eager) and call the same eager_launcher."""
    _require_fast()
    own_flattening = {"multi_layer_kv_transfer", "multi_layer_block_transfer", "multi_layer_kv_transfer_quant",
                      "multi_layer_block_transfer_quant"}
    for spec in all_specs():
        if spec.name not in own_flattening:
            assert isinstance(_module(spec.name)._EAGER, EagerOp), spec.name
        arity = 2 if spec.has_dynamic else None
        attrs = tuple(a.default for a in spec.attrs)
        assert _custom.is_fast_launcher(_custom.eager_launcher(spec, "cpu", attrs, arity)), spec.name
        n_out = len([o for o in spec.outputs if o.group != "__status__"])
        assert len(_custom.output_sources(spec, arity)) == n_out, spec.name


def test_output_sources():
    spec = _module("rope_concat_and_cache_mla").SPEC
    assert _custom.output_sources(spec) == (1, 2, 3)
    assert _custom.output_sources(_module("reshape_and_cache").SPEC) == ()
    bad = type(spec)(name="x", op_type="X", inputs=spec.inputs, dtype_groups=spec.dtype_groups,
                     extra={"out_shape": lambda *s: ([1],), "out_dtype": lambda *d: (d[0],)})
    with pytest.raises(ValueError, match="not 'like an input'"):
        _custom.output_sources(bad)


# ---------------------------------------------------------------------------------------- outputs

def test_outputs_are_new_tensors_per_call(rng):
    """Two calls in a row return distinct output tensors (the second does not reuse or overwrite the
    first); the inputs are not modified; outputs feed later built-in and ms_kvcache ops."""
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, "float32")
    table, kcm, vcm = to_ms(cs), Parameter(to_ms(kc), name="kc"), Parameter(to_ms(vc), name="vc")
    qt, kt, vt = to_ms(q), to_ms(k), to_ms(v)
    no_slots = Tensor(np.zeros((0,), np.int32))
    qo1, ko1 = ms_kvcache.rope_reshape_and_cache(Tensor(pos), qt, kt, vt, table, kcm, vcm, no_slots)
    qo2, ko2 = ms_kvcache.rope_reshape_and_cache(Tensor(pos[::-1].copy()), qt, kt, vt, table, kcm, vcm, no_slots)
    doubled = ops.add(qo1, qo1)                               # built-in op on an output
    ms_kvcache.reshape_and_cache(ko1, vt, kcm, vcm, Tensor(slots))  # ms_kvcache op on an output
    c = table.asnumpy()
    for p, qo, ko in ((pos, qo1, ko1), (pos[::-1], qo2, ko2)):
        cos, sin = c[p][:, None, :32], c[p][:, None, 32:]
        assert_bits_equal(to_np(qo), rope_f32_model(q, cos, sin, 64, True, "float32"), "query_out")
        assert_bits_equal(to_np(ko), rope_f32_model(k, cos, sin, 64, True, "float32"), "key_out")
    assert_bits_equal(to_np(doubled), to_np(qo1) * 2, "built-in op on query_out")
    assert_bits_equal(to_np(qt), q, "query unchanged")
    assert_bits_equal(to_np(kt), k, "key unchanged")
    exp = kc.copy()
    k1 = to_np(ko1)
    for t, s in enumerate(slots):
        if s >= 0:
            exp[s // 8, s % 8] = k1[t]
    assert_bits_equal(to_np(kcm), exp, "key_cache written from key_out")
    assert qo1.dtype == ms.float32 and qo1.shape == (5, 4, 64) and ko1.shape == (5, 2, 64)


def test_noncontiguous_inputs(rng):
    """Strided query/key/value views are made contiguous before the launch (the kernel reads raw memory)."""
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, "bfloat16")
    qv, kv_, vv = (to_ms(np.ascontiguousarray(x.transpose(1, 0, 2))).transpose(1, 0, 2) for x in (q, k, v))
    assert not qv.is_contiguous()
    a = [to_ms(kc), to_ms(vc)]
    outs_view = ms_kvcache.rope_reshape_and_cache(Tensor(pos), qv, kv_, vv, to_ms(cs), *a, Tensor(slots))
    b = [to_ms(kc), to_ms(vc)]
    outs = ms_kvcache.rope_reshape_and_cache(Tensor(pos), to_ms(q), to_ms(k), to_ms(v), to_ms(cs), *b, Tensor(slots))
    for x, y, n in zip(list(outs_view) + a, list(outs) + b, ("query_out", "key_out", "key_cache", "value_cache")):
        assert_bits_equal(to_np(x), to_np(y), n)


# ---------------------------------------------------------------------------------------- ordering

def test_async_pipeline_ordering(rng):
    """PyNative is asynchronous. Over several rounds: inputs (query/key/value, one round's positions)
    produced by pending built-in ops; a built-in in-place write to the caches before the op; the op's
    cache write, then rerope of the same rows, then built-in reads of the caches and of the outputs.
    Every read must see every earlier write and no later one."""
    _require_fast()
    nb, bs, hk, hq, d, maxp = 4, 8, 2, 4, 32, 64
    table = make_table(maxp, d)
    kc0 = rand(rng, (nb, bs, hk, d), "float32")
    kc, vc = Parameter(to_ms(kc0), name="ord_kc"), Parameter(to_ms(kc0 * 2), name="ord_vc")
    exp_k, exp_v = kc0.copy(), kc0 * 2
    qb, kb, vb = (rand(rng, (2, h, d), "float32") for h in (hq, hk, hk))
    big = to_ms(rand(rng, (256, 256), "float32"))
    cs = to_ms(table)

    def rot(x, p):
        c = table[p]
        return rope_f32_model(x, c[:, None, : d // 2], c[:, None, d // 2:], d, True, "float32")

    reads = []
    for r in range(6):
        for _ in range(3):  # keep the pipeline busy so that our launch really queues behind other work
            big = ops.matmul(big, big) * 1e-3
        if r == 3:  # a built-in op writes the caches before ours
            ops.assign(kc, ops.zeros_like(kc))
            exp_k[:] = 0
        q, k, v = ops.add(to_ms(qb), float(r)), ops.add(to_ms(kb), float(r)), ops.add(to_ms(vb), float(r))
        pos_np = np.array([r, 2 * r + 1], np.int64)
        pos = ops.add(Tensor(pos_np - 1), 1) if r == 2 else Tensor(pos_np)  # an op output: checked with a sync
        slots_np = np.array([r, 31 - r], np.int32)
        qo, ko = ms_kvcache.rope_reshape_and_cache(pos, q, k, v, cs, kc, vc, Tensor(slots_np))
        kr = rot(kb + r, pos_np)
        for t, s in enumerate(slots_np):
            exp_k[s // bs, s % bs], exp_v[s // bs, s % bs] = kr[t], vb[t] + r
        snap_k = ops.mul(kc, 1.0)                       # read after the write
        new = np.array([5, 7], np.int64)
        ms_kvcache.rerope_cached_keys(kc, Tensor(slots_np), Tensor(pos_np), Tensor(new), cs)
        snap_k2, snap_v = ops.mul(kc, 1.0), ops.mul(vc, 1.0)
        exp_k_before = exp_k.copy()
        rows = np.stack([exp_k[s // bs, s % bs] for s in slots_np])
        c = table[pos_np].astype(np.float64)
        cn = table[new].astype(np.float64)
        den = c[:, : d // 2] ** 2 + c[:, d // 2:] ** 2
        cd = ((cn[:, : d // 2] * c[:, : d // 2] + cn[:, d // 2:] * c[:, d // 2:]) / den).astype(np.float32)
        sd = ((cn[:, d // 2:] * c[:, : d // 2] - cn[:, : d // 2] * c[:, d // 2:]) / den).astype(np.float32)
        rows = rope_f32_model(rows, cd[:, None], sd[:, None], d, True, "float32")
        for t, s in enumerate(slots_np):
            exp_k[s // bs, s % bs] = rows[t]
        reads.append((r, ops.mul(qo, 1.0), rot(qb + r, pos_np), snap_k, exp_k_before, snap_k2, exp_k.copy(),
                      snap_v, exp_v.copy()))
    for r, qo, eq, sk, ek, sk2, ek2, sv, ev in reads:
        assert_bits_equal(to_np(qo), eq, f"round {r}: query_out")
        assert_bits_equal(to_np(sk), ek, f"round {r}: key_cache after rope write")
        assert_bits_equal(to_np(sk2), ek2, f"round {r}: key_cache after rerope")
        assert_bits_equal(to_np(sv), ev, f"round {r}: value_cache")


# ---------------------------------------------------------------------------------------- index values

def test_positions_nosync_reader():
    _require_fast()
    mod = _custom._fast_module()
    assert tuple(mod.check_positions_nosync(Tensor(np.array([0, 5, 63], np.int64)), 64)) == (0, -1, -1, 0)
    assert tuple(mod.check_positions_nosync(Tensor(np.array([0, 64, -1], np.int32)), 64)) == (1, 1, -1, 64)
    assert tuple(mod.check_positions_nosync(Tensor(np.array([3, -2], np.int64)), 64)) == (1, 1, -1, -2)
    assert mod.check_positions_nosync(ops.add(Tensor(np.array([1], np.int64)), 1), 64) is None  # op output
    assert mod.check_positions_nosync(Tensor(np.arange(8, dtype=np.int64))[::2], 64) is None  # strided view


@pytest.mark.parametrize("source", ["host", "op_output"])
def test_bad_positions_raise_on_either_read(rng, source):
    """Host tensors are read without a sync, op outputs with one; both raise the same error and
    nothing is written."""
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, "float16")
    pos[2] = 64
    p = Tensor(pos) if source == "host" else ops.add(Tensor(pos - 1), 1)
    caches = [to_ms(kc), to_ms(vc)]
    with pytest.raises(ValueError, match=r"rope_reshape_and_cache: argument 'positions': expected positions in "
                                         r"\[0, 64\) \(rows of cos_sin_cache\), got 64 at index 2"):
        ms_kvcache.rope_reshape_and_cache(p, to_ms(q), to_ms(k), to_ms(v), to_ms(cs), *caches, Tensor(slots))
    assert_bits_equal(to_np(caches[0]), kc, "key_cache untouched")
    bad_new = Tensor(np.array([1, -3], np.int64))
    with pytest.raises(ValueError, match=r"rerope_cached_keys: argument 'new_positions'.*got -3 at index 1"):
        ms_kvcache.rerope_cached_keys(caches[0], Tensor(np.array([0, 1], np.int32)), Tensor(np.array([1, 2])),
                                      bad_new if source == "host" else ops.add(bad_new, 0), to_ms(cs))


def _strict_kernel(spec, attrs):
    from ms_kvcache import _cpu
    mod = _custom._fast_module()
    return mod, mod.kernel(_cpu.__file__, spec.op_type, spec.name, dict(attrs, mskv_strict=True),
                           list(_custom.output_sources(spec)))


def test_strict_kernels_recheck_positions_and_slots_at_launch(rng):
    """The fast path's rope kernels re-check positions and slots at launch (the eager check may have
    read other values): an invalid one fails the op before anything is written, MindSpore raises at
    the next sync, and the next call works."""
    _require_fast()
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, "bfloat16")
    spec = _module("rope_reshape_and_cache").SPEC
    mod, kern = _strict_kernel(spec, {"is_neox_style": True, "cache_layout": "BSND"})
    caches = [to_ms(kc), to_ms(vc)]
    ins = [to_ms(q), to_ms(k), to_ms(v), to_ms(cs)]
    bad_pos = pos.copy()
    bad_pos[4] = -7
    mod.run(kern, Tensor(bad_pos), *ins, *caches, Tensor(slots))
    with pytest.raises(RuntimeError, match=r"argument 'positions': expected positions in \[0, 64\).*got -7 at "
                                           r"index 4 \(checked at launch"):
        caches[0].asnumpy()
    dup = slots.copy()
    dup[3] = dup[0]
    mod.run(kern, Tensor(pos), *ins, *caches, Tensor(dup))
    with pytest.raises(RuntimeError, match="distinct non-negative slots"):
        caches[1].asnumpy()
    assert_bits_equal(to_np(caches[0]), kc, "key_cache untouched")
    assert_bits_equal(to_np(caches[1]), vc, "value_cache untouched")
    qo, _ = mod.run(kern, Tensor(pos), *ins, *caches, Tensor(slots))  # recovers
    assert qo.shape == q.shape and not np.array_equal(to_np(caches[0]), kc)

    rspec = _module("rerope_cached_keys").SPEC
    mod, rk = _strict_kernel(rspec, {"is_neox_style": True, "cache_layout": "BSND"})
    before = to_np(caches[0])
    idx = Tensor(np.array([0, 1], np.int64))
    assert mod.run(rk, caches[0], Tensor(np.array([2, 3], np.int32)), idx, Tensor(np.array([0, 99], np.int64)),
                   to_ms(cs)) is None
    with pytest.raises(RuntimeError, match=r"argument 'new_positions'.*got 99 at index 1"):
        caches[0].asnumpy()
    assert_bits_equal(to_np(caches[0]), before, "rerope wrote nothing")


# ---------------------------------------------------------------------------------------- views, fallback

def test_cache_views_fast_path_and_fallback(rng):
    """On the fast path a cache may be a view (here the K and V planes of one merged tensor): the
    kernel writes through its memory. ops.Custom would write into a copy, so without the fast path a
    view is rejected (it was silently lost before)."""
    _require_fast()
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, "float32")
    merged = to_ms(np.stack([kc, vc]))
    args = (Tensor(pos), to_ms(q), to_ms(k), to_ms(v), to_ms(cs))
    ms_kvcache.rope_reshape_and_cache(*args, merged[0], merged[1], Tensor(slots))
    ref = to_ms(np.stack([kc, vc]))
    ms_kvcache.rope_reshape_and_cache_merged(*args, ref, Tensor(slots))
    assert_bits_equal(to_np(merged), to_np(ref), "writes through plane views")
    assert not np.array_equal(to_np(merged)[1], vc)
    with fast_path(False):
        # merged[0] (offset 0) is caught too: the views are found in MindSpore's storage metadata
        with pytest.raises(ValueError, match="argument 'key_cache': expected a tensor that owns its memory"):
            ms_kvcache.rope_reshape_and_cache(*args, merged[0], merged[1], Tensor(slots))
        with pytest.raises(ValueError, match="argument 'value_cache': expected a tensor that owns its memory"):
            ms_kvcache.rope_reshape_and_cache(*args, to_ms(kc), merged[1], Tensor(slots))
        with pytest.raises(ValueError, match="argument 'key_cache': expected a tensor that owns its memory"):
            ms_kvcache.rerope_cached_keys(merged[1], Tensor(slots), Tensor(pos[:4]), Tensor(pos[:4]), to_ms(cs))


def test_env_var_disables_fast_path():
    """MS_KVCACHE_PYNATIVE_FAST=0 in a fresh process: every op falls back to ops.Custom and still works."""
    import subprocess
    code = ("import numpy as np, mindspore as ms, ms_kvcache; from ms_kvcache import _custom\n"
            "from mindspore import Tensor\n"
            "assert not _custom.fast_path_available('cpu')[0]\n"
            "t = ms_kvcache.build_cos_sin_cache(8, 16)\n"
            "kc = Tensor(np.zeros((2, 4, 1, 8), np.float32)); vc = Tensor(np.zeros((2, 4, 1, 8), np.float32))\n"
            "x = Tensor(np.ones((1, 1, 8), np.float32))\n"
            "qo, ko = ms_kvcache.rope_reshape_and_cache(Tensor(np.array([3])), x, x, x, t, kc, vc, "
            "Tensor(np.array([5], np.int32)))\n"
            "assert np.array_equal(kc.asnumpy()[1, 1, 0], ko.asnumpy()[0, 0]) and qo.shape == (1, 1, 8)\n"
            "assert _custom._LAUNCHERS and not any(_custom.is_fast_launcher(f) for f in _custom._LAUNCHERS.values())\n"
            "print('ok')\n")
    env = dict(os.environ, MS_KVCACHE_PYNATIVE_FAST="0", GLOG_v="3")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(ms_kvcache.__file__)))] +
                                        [p for p in [env.get("PYTHONPATH")] if p])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_static_checks_memoised_per_signature(rng, monkeypatch):
    """The shape/dtype check runs once per signature (shapes, dtypes, attribute values and types):
    repeated decode-step calls pay one dict lookup; a new shape, dtype or attribute type re-checks."""
    mod = _module("rope_reshape_and_cache")
    calls = []
    real = mod._EAGER.check_static
    monkeypatch.setattr(mod._EAGER, "check_static", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(mod._EAGER, "_static", {})
    q, k, v, cs, kc, vc, pos, slots = _rope_args(rng, "float16")
    args = [Tensor(pos), to_ms(q), to_ms(k), to_ms(v), to_ms(cs), to_ms(kc), to_ms(vc), Tensor(slots)]
    for _ in range(3):
        ms_kvcache.rope_reshape_and_cache(*args)
    assert len(calls) == 1
    ms_kvcache.rope_reshape_and_cache(*args, is_neox_style=False)
    ms_kvcache.rope_reshape_and_cache(Tensor(pos.astype(np.int32)), *args[1:])
    assert len(calls) == 3
    with pytest.raises(TypeError, match="argument 'is_neox_style': expected a bool"):
        ms_kvcache.rope_reshape_and_cache(*args, is_neox_style=1)  # == True, but not a bool
    args[1] = to_ms(q.astype(np.float32))
    with pytest.raises(TypeError, match=r"argument 'key': expected dtype float32 \(same as 'query'\)"):
        ms_kvcache.rope_reshape_and_cache(*args)
    assert calls[0][1] is ms.int64 and calls[0][3] is ms.float16  # the check sees real dtypes


def test_eager_op_list_inputs_and_attribute_dependent_writes(monkeypatch):
    """EagerOp on a multi-layer-transfer-like spec (declared as on the transfer branch: a ``dynamic``
    list input, inputs written only for one ``direction``): the list is flattened with its length as
    the arity, in-place inputs depend on the attribute (contiguity enforced, never copied), read-only
    ones are made contiguous, and the slot check allows duplicates only for the gather direction."""
    import dataclasses
    from ms_kvcache import _eager
    from ms_kvcache._spec import AttrSpec, OpSpec, TensorSpec

    @dataclasses.dataclass(frozen=True)
    class TS(TensorSpec):
        dynamic: bool = False
        inplace_if: tuple = None

    spec = OpSpec(name="fake_transfer", op_type="FakeTransfer",
                  inputs=(TS("buffer", "T", (2,), inplace_if=("direction", "d2h")), TS("slot_mapping", "S", (1,)),
                          TS("kv_caches", "T", (4,), dynamic=True, inplace_if=("direction", "h2d"))),
                  dtype_groups={"T": ("float32",), "S": ("int32", "int64")},
                  attrs=(AttrSpec("direction", "str", "d2h", ("d2h", "h2d")),))

    def check_static(b_shape, b_dtype, s_shape, s_dtype, c_shapes, c_dtypes, direction):
        assert isinstance(c_shapes, tuple) and all(d is ms.float32 for d in c_dtypes)
        return c_shapes[0][0] * c_shapes[0][1]

    launched = []
    monkeypatch.setattr(_eager, "eager_launcher",
                        lambda spec_, backend, attrs, arity: lambda *flat: launched.append((attrs, arity, flat)))
    op = EagerOp(spec, check_static, index_checks=(_eager.Slots("slot_mapping", allow_duplicates=lambda a: a[0] == "d2h"),),
                 skip_if_empty=("slot_mapping",))
    caches = [to_ms(np.zeros((2, 4, 1, 8), np.float32)) for _ in range(3)]
    strided = to_ms(np.zeros((8, 6), np.float32)).transpose(1, 0)   # [6, 8] view, not contiguous
    dup = Tensor(np.array([3, 3], np.int32))

    op("cpu", ("d2h",), to_ms(np.zeros((6, 8), np.float32)), dup, caches)  # gather: duplicates fine
    attrs, arity, flat = launched[-1]
    assert attrs == ("d2h",) and arity == 3 and len(flat) == 5 and all(a is b for a, b in zip(flat[2:], caches))
    with pytest.raises(ValueError, match="argument 'buffer': expected a contiguous tensor"):
        op("cpu", ("d2h",), strided, dup, caches)
    with pytest.raises(ValueError, match="argument 'slot_mapping': expected distinct non-negative slots"):
        op("cpu", ("h2d",), to_ms(np.zeros((6, 8), np.float32)), dup, caches)
    op("cpu", ("h2d",), strided, Tensor(np.array([0, 7], np.int64)), caches)  # h2d: buffer read-only, copied
    flat = launched[-1][2]
    assert flat[0] is not strided and flat[0].is_contiguous() and np.array_equal(flat[0].asnumpy(), strided.asnumpy())
    bad = caches[:2] + [to_ms(np.zeros((4, 2, 1, 8), np.float32)).transpose(1, 0, 2, 3)]
    with pytest.raises(ValueError, match=r"argument 'kv_caches\[2\]': expected a contiguous tensor"):
        op("cpu", ("h2d",), to_ms(np.zeros((6, 8), np.float32)), Tensor(np.array([0], np.int32)), bad)
    n = len(launched)
    assert op("cpu", ("h2d",), strided, Tensor(np.zeros((0,), np.int32)), caches) is None and len(launched) == n


_THREADS_SCRIPT = r"""
import sys, threading, numpy as np
from mindspore import Tensor, Parameter
import ms_kvcache as mk
nb, bs, H, D, N = 16, 16, 2, 32, 200
results, errs = {}, []
def work(i):
    try:
        rng = np.random.default_rng(i)
        kc = Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"k{i}")
        vc = Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"v{i}")
        exp = np.zeros((nb * bs, H, D), np.float32)
        for it in range(N):
            k = rng.standard_normal((4, H, D)).astype(np.float32)
            s = rng.permutation(nb * bs)[:4].astype(np.int32)
            mk.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(s))
            exp[s] = k
            if it % 10 == 0:
                buf = Tensor(np.zeros((2, 1, 4, H * D), np.float32))
                mk.multi_layer_kv_transfer(buf, [(kc, vc)], Tensor(s), kv_format="SEPARATE_KV", direction="d2h")
                assert np.array_equal(buf.asnumpy()[0, 0].reshape(4, H, D), k)
        results[i] = np.array_equal(kc.asnumpy().reshape(-1, H, D), exp)
    except Exception as e:
        errs.append(repr(e))
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("RESULT", sorted(results.items()), errs)
"""


def test_calls_from_several_threads_do_not_abort():
    """Four Python threads calling ops on the fast path: MindSpore's frontend is not thread-safe, and
    unserialised submissions through PyboostRunner aborted the process (uncaught C++ exception on a
    pipeline thread, 4 of 5 runs). The fast path serialises its submissions: every thread's caches end up
    right. Run in a subprocess so an abort fails the test instead of killing pytest."""
    _require_fast()
    import subprocess

    env = dict(os.environ, GLOG_v="3")
    r = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "RESULT [(0, True), (1, True), (2, True), (3, True)] []" in r.stdout, r.stdout[-2000:]
