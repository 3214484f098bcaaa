"""cache_layout="NZ" (FRACTAL_NZ) on the cpu backend.

nd_to_nz / nz_to_nd against the index formula ``((b * (hidden // C0) + h // C0) * block_size + t) * C0 + h % C0``;
every NZ write - reshape_and_cache(_merged), their int8 quantized forms (static and dynamic scales), the fused
rope_reshape_and_cache(_merged) and its quantized form - against the numpy NZ model (the ND write of the same rows,
then nd_to_nz) for float16, bfloat16 and int8, in PyNative, GRAPH_MODE and @ms.jit, with random slots, -1 and
other negative slots, padding rows, the last slot and runs of consecutive slots across block boundaries;
copy_blocks / swap_blocks on NZ caches; and the refusals (float32, wrong C0, block_size, the key rank of the
per-head writes, rerope_cached_keys, dequantize_kv_cache). The emulation (sim) runs: tests/test_nz_layout_sim.py;
the transfers: tests/test_nz_transfer.py.
"""
import ml_dtypes
import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache import nd_to_nz, nz_to_nd
from ms_kvcache._formats import NZ_C0

from conftest import MODES, assert_bits_equal, ms_mode, random_array, to_ms, to_np
from copy_util import check, random_slots
from test_kv_quant import quant_dynamic, quant_rows, rand_scale
from test_rope_reshape_and_cache import Case as RopeCase

pytestmark = pytest.mark.usefixtures("cpu_backend")

NZ_DTYPES = ("float16", "bfloat16", "int8")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int8": np.int8}


# --------------------------------------------------------------------------- the layout and its helpers
def nz_by_formula(nd):
    """NZ of an ND cache [nb, bs, hidden], element by element from the documented flat index formula."""
    nb, bs, hidden = nd.shape
    c0 = NZ_C0[str(nd.dtype)]
    out = np.zeros(nd.size, nd.dtype)
    b, t, h = np.meshgrid(np.arange(nb), np.arange(bs), np.arange(hidden), indexing="ij")
    flat = ((b * (hidden // c0) + h // c0) * bs + t) * c0 + h % c0
    out[flat.reshape(-1)] = nd.reshape(-1)
    return out.reshape(nb, hidden // c0, bs, c0)


@pytest.mark.parametrize("dtype", NZ_DTYPES)
def test_nd_to_nz_is_the_index_formula(rng, dtype):
    nd = random_array(rng, (3, 32, 4, 24), dtype)  # hidden 96: 6 / 6 / 3 fractal columns
    if dtype == "int8":
        nd = random_array(rng, (3, 32, 4, 32), dtype)
    nz = nd_to_nz(nd)
    c0 = NZ_C0[dtype]
    assert nz.shape == (3, nd.shape[2] * nd.shape[3] // c0, 32, c0) and nz.dtype == nd.dtype
    assert_bits_equal(nz, nz_by_formula(nd.reshape(3, 32, -1)), "nd_to_nz")
    back = nz_to_nd(nz)
    assert back.shape == (3, 32, nd.shape[2] * nd.shape[3])
    assert_bits_equal(back, nd.reshape(back.shape), "nz_to_nd(nd_to_nz(x))")
    assert_bits_equal(nd_to_nz(back), nz, "nd_to_nz of a 3-d ND cache")


@pytest.mark.parametrize("dtype", NZ_DTYPES)
def test_helpers_take_and_return_tensors(rng, dtype):
    nd = random_array(rng, (2, 16, 64), dtype)
    t = nd_to_nz(to_ms(nd))
    assert isinstance(t, Tensor) and t.dtype == getattr(ms, dtype)
    assert_bits_equal(to_np(t), nd_to_nz(nd), "nd_to_nz(Tensor)")
    back = nz_to_nd(t)
    assert isinstance(back, Tensor)
    assert_bits_equal(to_np(back), nd, "nz_to_nd(Tensor)")


@pytest.mark.parametrize("call,arg,exc,match", [
    (nd_to_nz, np.zeros((2, 16, 64), np.float32), TypeError, r"nd_to_nz: argument 'cache': expected dtype float16, "
     r"bfloat16 or int8 for an NZ cache .*got float32"),
    (nd_to_nz, np.zeros((2, 16, 24), np.float16), ValueError, r"hidden = num_kv_heads \* head_size a multiple of C0 = 16"),
    (nd_to_nz, np.zeros((2, 16, 48), np.int8), ValueError, r"a multiple of C0 = 32"),
    (nd_to_nz, np.zeros((2, 8, 64), np.float16), ValueError, r"block_size a multiple of 16"),
    (nd_to_nz, np.zeros((2, 64), np.float16), ValueError, r"expected \[num_blocks, block_size"),
    (nz_to_nd, np.zeros((2, 4, 16, 32), np.float16), ValueError, r"nz_to_nd: argument 'cache': expected an NZ cache "
     r".*C0 = 16, got shape \(2, 4, 16, 32\)"),
    (nz_to_nd, [1, 2], TypeError, r"expected a numpy array or a MindSpore Tensor, got list"),
])
def test_helper_errors(call, arg, exc, match):
    with pytest.raises(exc, match=match):
        call(arg)


# --------------------------------------------------------------------------- the numpy NZ model of the writes
def place_nz(cache_nz, rows, slots):
    """The NZ model: the ND cache of ``cache_nz``, row ``t`` of ``rows`` (any shape [T', ...]) written at
    slot ``slots[t]`` (slot < 0 or >= num_slots skipped, a later token wins), back to NZ."""
    nd = nz_to_nd(cache_nz)
    nb, bs, hidden = nd.shape
    flat = np.asarray(rows).reshape(len(rows), hidden)
    for t, s in enumerate(np.asarray(slots, np.int64)):
        if 0 <= s < nb * bs:
            nd[s // bs, s % bs] = flat[t]
    return nd_to_nz(nd)


def nz_cache(rng, dtype, nb, bs, hidden):
    return nd_to_nz(random_array(rng, (nb, bs, hidden), dtype))


def slots_with_runs(rng, num_tokens, nb, bs, sdt="int64", pad=2):
    """Distinct slots: a run of consecutive slots across a block boundary, the last slot, random others,
    ``pad`` of them negative (-1, -7)."""
    run = np.arange(bs - 3, bs + 5)  # crosses from block 0 into block 1
    rest = np.setdiff1d(np.arange(nb * bs - 1), run)
    s = np.concatenate([run, [nb * bs - 1], rng.choice(rest, num_tokens - len(run) - 1, replace=False)])
    idx = rng.choice(np.arange(len(run) + 1, num_tokens), size=pad, replace=False)
    s[idx] = [-1, -7][:pad] if pad <= 2 else -1
    return s.astype(sdt)


def rac_call(layout="NZ"):
    def call(caches, key, value, slots):
        ms_kvcache.reshape_and_cache(key, value, caches[0], caches[1], slots, layout)
    return call


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", NZ_DTYPES)
def test_reshape_and_cache(mode, dtype, rng):
    nb, bs, H, D = 4, 32, 4, 32
    kc, vc = nz_cache(rng, dtype, nb, bs, H * D), nz_cache(rng, dtype, nb, bs, H * D)
    slots = slots_with_runs(rng, 21, nb, bs, "int32" if dtype == "int8" else "int64")
    key = random_array(rng, (24, H, D), dtype)      # 3 padding rows
    value = random_array(rng, (24, H * D), dtype)   # the flat [T', H*D] view
    check(mode, rac_call(), [kc, vc], [key, value, slots],
          [place_nz(kc, key[:21], slots), place_nz(vc, value[:21], slots)], f"{mode} {dtype}")


@pytest.mark.parametrize("mode", MODES)
def test_reshape_and_cache_merged(mode, rng, dtype="bfloat16"):
    nb, bs, hidden = 3, 16, 64
    kv = np.stack([nz_cache(rng, dtype, nb, bs, hidden), nz_cache(rng, dtype, nb, bs, hidden)])
    slots = random_slots(rng, 9, nb * bs, "int64", pad=2, must_include=(nb * bs - 1, 0))
    key, value = random_array(rng, (11, 2, 32), dtype), random_array(rng, (11, 64), dtype)

    def call(caches, k, v, s):
        ms_kvcache.reshape_and_cache_merged(k, v, caches[0], s, "NZ")

    want = np.stack([place_nz(kv[0], key[:9], slots), place_nz(kv[1], value[:9], slots)])
    check(mode, call, [kv], [key, value, slots], [want], mode)


@pytest.mark.parametrize("tokens,pattern", [(1024, "blocks"), (1024, "random"), (2000, "blocks")])
def test_reshape_and_cache_large(tokens, pattern, rng):
    """Threads and non-temporal stores (>= 256 KiB written): prefill slots (whole blocks in random block
    order) and scattered slots."""
    nb, bs, hidden = tokens // 128 + 4, 128, 512
    kc, vc = nz_cache(rng, "float16", nb, bs, hidden), nz_cache(rng, "float16", nb, bs, hidden)
    if pattern == "blocks":
        blocks = rng.permutation(nb)
        slots = (blocks[:, None] * bs + np.arange(bs)).reshape(-1)[:tokens]
    else:
        slots = rng.permutation(nb * bs)[:tokens]
    slots = slots.astype(np.int64)
    slots[5] = -1
    key, value = random_array(rng, (tokens, hidden), "float16"), random_array(rng, (tokens, hidden), "float16")
    check("pynative", rac_call(), [kc, vc], [key, value, slots],
          [place_nz(kc, key, slots), place_nz(vc, value, slots)], pattern)


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_mode_repeated_and_out_of_range_slots(mode, rng):
    """Graph mode cannot check values: a slot >= num_slots is skipped, a slot given twice ends with the later
    token's row (cpu semantics, as for ND caches)."""
    nb, bs, hidden = 2, 16, 32
    kc, vc = nz_cache(rng, "float16", nb, bs, hidden), nz_cache(rng, "float16", nb, bs, hidden)
    slots = np.array([3, 32, 4, 3, -1, 31, 10**9], np.int64)
    key, value = random_array(rng, (7, hidden), "float16"), random_array(rng, (7, hidden), "float16")
    check(mode, rac_call(), [kc, vc], [key, value, slots], [place_nz(kc, key, slots), place_nz(vc, value, slots)],
          mode)


def test_zero_tokens_and_last_slot(rng):
    kc, vc = nz_cache(rng, "int8", 2, 16, 64), nz_cache(rng, "int8", 2, 16, 64)
    for slots in (np.zeros((0,), np.int64), np.array([31], np.int64)):
        key = random_array(rng, (len(slots) + 1, 64), "int8")
        check("pynative", rac_call(), [kc, vc], [key, key, slots], [place_nz(kc, key, slots), place_nz(vc, key, slots)],
              f"T={len(slots)}")


# --------------------------------------------------------------------------- quantized int8 writes
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scales", ["tensor", "head", "channel_offset", "dynamic"])
def test_quantized_write(mode, scales, rng, dtype="bfloat16"):
    nb, bs, H, D = 3, 16, 8, 32  # 8 heads: a BSND scale row of 32 bytes (Ascend310P's rule, tests/test_nz_layout_sim.py)
    kc, vc = nz_cache(rng, "int8", nb, bs, H * D), nz_cache(rng, "int8", nb, bs, H * D)
    slots = random_slots(rng, 9, nb * bs, "int64", pad=2, must_include=(nb * bs - 1,))
    key, value = random_array(rng, (11, H, D), dtype), random_array(rng, (11, H, D), dtype)
    caches, inputs = [kc, vc], [key, value, slots]
    if scales == "dynamic":
        ksc, vsc = np.zeros((nb, bs, H, 1), np.float32), np.zeros((nb, bs, H), np.float32)  # both accepted forms
        caches += [ksc, vsc]
        kq, ks = quant_dynamic(key[:9], "int8")
        vq, vs = quant_dynamic(value[:9], "int8")
        want = [place_nz(kc, kq, slots), place_nz(vc, vq, slots)]
        want += [place_rows(ksc, ks, slots), place_rows(vsc, vs, slots)]
    else:
        shape = {"tensor": (), "head": (H,), "channel_offset": (H, D)}[scales]
        k_s, v_s = rand_scale(rng, shape), rand_scale(rng, shape)
        offs = (rng.uniform(-3, 3, (H, D)).astype(np.float32), rng.uniform(-3, 3, (H, D)).astype(np.float32)) \
            if scales == "channel_offset" else (None, None)
        inputs += [k_s, v_s] + [o for o in offs if o is not None]
        b = (lambda s: s.reshape(H, 1)) if scales == "head" else (lambda s: s)
        kq = quant_rows(key[:9], "int8", b(k_s), offs[0])
        vq = quant_rows(value[:9], "int8", b(v_s), offs[1])
        want = [place_nz(kc, kq, slots), place_nz(vc, vq, slots)]

    def call(cs, k, v, s, *q):
        kw = {"k_scale_cache": cs[2], "v_scale_cache": cs[3]} if scales == "dynamic" else \
            {"k_scale": q[0], "v_scale": q[1], "k_offset": q[2] if len(q) > 2 else None,
             "v_offset": q[3] if len(q) > 2 else None}
        ms_kvcache.reshape_and_cache(k, v, cs[0], cs[1], s, "NZ", **kw)

    check(mode, call, caches, inputs, want, f"{mode} {scales}")


def place_rows(scale_cache, scales, slots):
    """A BSND scale cache [nb, bs, H(, 1)] with token t's H scales at slots[t]."""
    out = scale_cache.copy()
    nb, bs = out.shape[:2]
    for t, s in enumerate(np.asarray(slots, np.int64)):
        if 0 <= s < nb * bs:
            out[s // bs, s % bs] = np.asarray(scales[t]).reshape(out.shape[2:])
    return out


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_quantized_merged_write(mode, rng):
    nb, bs, H, D = 2, 16, 2, 64
    kv = np.stack([nz_cache(rng, "int8", nb, bs, H * D), nz_cache(rng, "int8", nb, bs, H * D)])
    slots = random_slots(rng, 6, nb * bs, "int32", pad=1, must_include=(31,))
    key, value = random_array(rng, (6, H, D), "float32"), random_array(rng, (6, H, D), "float32")
    k_s = rand_scale(rng, (H,))

    def call(cs, k, v, s, sc):
        ms_kvcache.reshape_and_cache_merged(k, v, cs[0], s, "NZ", k_scale=sc, v_scale=sc)

    q = [quant_rows(x, "int8", k_s.reshape(H, 1)) for x in (key, value)]
    check(mode, call, [kv], [key, value, slots, k_s], [np.stack([place_nz(kv[p], q[p], slots) for p in (0, 1)])], mode)


# --------------------------------------------------------------------------- fused rotary writes
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_rope_write_values(dtype, neox, rng):
    """query_out / key_out as the float64 reference and the fp32 model; the caches as the NZ model of the
    rotated key and the value rows."""
    case = RopeCase(rng, dtype, head_size=64, rotary_dim=32, num_heads=4, num_kv_heads=2, rows=9, tokens=7,
                    num_blocks=3, block_size=16, neox=neox)
    kc = nd_to_nz(case.key_cache.reshape(3, 16, -1))
    vc = nd_to_nz(case.value_cache.reshape(3, 16, -1))
    p, q, k, v, cs, _, _, s = case.tensors()
    tkc, tvc = Parameter(to_ms(kc)), Parameter(to_ms(vc))
    qo, ko = ms_kvcache.rope_reshape_and_cache(p, q, k, v, cs, tkc, tvc, s, is_neox_style=neox, cache_layout="NZ")
    case.check_rotated(case.q, qo, "query_out")
    case.check_rotated(case.k, ko, "key_out")
    rows = case.slots.shape[0]
    assert_bits_equal(to_np(tkc), place_nz(kc, case.expected_model(case.k)[:rows], case.slots), "key_cache")
    assert_bits_equal(to_np(tvc), place_nz(vc, case.v[:rows], case.slots), "value_cache")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("merged", [False, True], ids=["separate", "merged"])
def test_rope_write_modes(mode, merged, rng):
    case = RopeCase(rng, "float16", head_size=32, rotary_dim=32, num_heads=2, num_kv_heads=2, rows=8, tokens=6,
                    num_blocks=2, block_size=16, neox=True)
    kc = nd_to_nz(case.key_cache.reshape(2, 16, -1))
    vc = nd_to_nz(case.value_cache.reshape(2, 16, -1))
    k_rot = case.expected_model(case.k)[:6]
    want = [place_nz(kc, k_rot, case.slots), place_nz(vc, case.v[:6], case.slots)]

    def call(caches, p, q, k, v, cs, s):
        if merged:
            ms_kvcache.rope_reshape_and_cache_merged(p, q, k, v, cs, caches[0], s, cache_layout="NZ")
        else:
            ms_kvcache.rope_reshape_and_cache(p, q, k, v, cs, caches[0], caches[1], s, cache_layout="NZ")

    inputs = [case.positions, case.q, case.k, case.v, case.table, case.slots]
    if merged:
        check(mode, call, [np.stack([kc, vc])], inputs, [np.stack(want)], mode)
    else:
        check(mode, call, [kc, vc], inputs, want, mode)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("scales", ["static", "dynamic"])
def test_rope_quantized_write(mode, scales, rng, dtype="bfloat16"):
    """The rotated key (fp32 model) and the value quantized into NZ int8 caches; 8 kv heads of 32 (a BSND scale
    row of 32 bytes: Ascend310P's rule; tests/test_nz_layout_sim.py runs this with float16)."""
    H, D = 8, 32
    case = RopeCase(rng, dtype, head_size=D, rotary_dim=D, num_heads=2, num_kv_heads=H, rows=7, tokens=7,
                    num_blocks=2, block_size=16, neox=False)
    z = nd_to_nz(np.zeros((2, 16, H * D), np.int8))
    k_rot = case.expected_model(case.k)
    caches, extra = [z, z.copy()], []
    if scales == "static":
        k_s, v_s = rand_scale(rng, ()), rand_scale(rng, (H, D))
        extra = [k_s, v_s]
        kq, vq = quant_rows(k_rot, "int8", k_s), quant_rows(case.v, "int8", v_s)
        want = [place_nz(z, kq, case.slots), place_nz(z, vq, case.slots)]
    else:
        caches += [np.zeros((2, 16, H, 1), np.float32), np.zeros((2, 16, H, 1), np.float32)]
        (kq, ks), (vq, vs) = quant_dynamic(k_rot, "int8"), quant_dynamic(case.v, "int8")
        want = [place_nz(z, kq, case.slots), place_nz(z, vq, case.slots), place_rows(caches[2], ks, case.slots),
                place_rows(caches[3], vs, case.slots)]

    def call(cs, p, q, k, v, table, s, *sc):
        kw = {"k_scale": sc[0], "v_scale": sc[1]} if scales == "static" else \
            {"k_scale_cache": cs[2], "v_scale_cache": cs[3]}
        ms_kvcache.rope_reshape_and_cache(p, q, k, v, table, cs[0], cs[1], s, is_neox_style=False, cache_layout="NZ",
                                          **kw)

    check(mode, call, caches, [case.positions, case.q, case.k, case.v, case.table, case.slots] + extra, want,
          f"{mode} {scales}")


# --------------------------------------------------------------------------- block copies
def test_copy_blocks_and_swap_blocks_move_nz_blocks(rng):
    """A block of an NZ cache is contiguous ([hidden / C0, block_size, C0]): copy_blocks / swap_blocks move it
    like any block, and the moved block reads back as the same ND rows."""
    kc, vc = nz_cache(rng, "float16", 5, 16, 64), nz_cache(rng, "float16", 5, 16, 64)
    mapping = np.array([[0, 3], [4, 1]], np.int64)
    tk, tv = Parameter(to_ms(kc)), Parameter(to_ms(vc))
    ms_kvcache.copy_blocks([tk], [tv], Tensor(mapping))
    for cache, t in ((kc, tk), (vc, tv)):
        want = nz_to_nd(cache)
        want[3], want[1] = want[0], want[4]
        assert_bits_equal(nz_to_nd(to_np(t)), want, "copy_blocks")
    dst = Parameter(to_ms(nz_cache(rng, "float16", 5, 16, 64)))
    before = to_np(dst)
    ms_kvcache.swap_blocks(tk, dst, Tensor(np.array([[2, 0]], np.int64)))
    want = nz_to_nd(before)
    want[0] = nz_to_nd(to_np(tk))[2]
    assert_bits_equal(nz_to_nd(to_np(dst)), want, "swap_blocks")


# --------------------------------------------------------------------------- refusals
def _rac(kc, key, layout="NZ"):
    ms_kvcache.reshape_and_cache(key, key, Parameter(kc), Parameter(kc.copy()), Tensor(np.array([0], np.int64)),
                                 layout)


@pytest.mark.parametrize("shape,dtype,exc,match", [
    ((2, 4, 16, 8), "float32", TypeError, r"reshape_and_cache: argument 'key_cache': expected dtype float16, "
     r"bfloat16 or int8 for an NZ cache"),
    ((2, 2, 16, 32), "float16", ValueError, r"argument 'key_cache': expected an NZ cache \[num_blocks, num_kv_heads "
     r"\* head_size // C0, block_size, C0\] with C0 = 16 for float16, got shape \(2, 2, 16, 32\)"),
    ((2, 4, 8, 16), "float16", ValueError, r"block_size \(dim 2 of an NZ cache\) a multiple of 16, got 8"),
    ((2, 2, 16, 32), "int8", ValueError, r"argument 'key': expected shape \[T', 64\] or \[T', num_kv_heads, "
     r"head_size\] with num_kv_heads \* head_size = 64"),
])
def test_write_refusals(shape, dtype, exc, match):
    key = Tensor(np.zeros((1, 2, 16 if dtype != "int8" else 16), np.float32)).astype(getattr(ms, dtype))
    with pytest.raises(exc, match=match):
        _rac(Tensor(np.zeros(shape, np.float32)).astype(getattr(ms, dtype)), key)


def test_per_head_writes_need_the_head_split(rng):
    kc = Parameter(to_ms(nz_cache(rng, "int8", 2, 16, 64)))
    vc = Parameter(to_ms(nz_cache(rng, "int8", 2, 16, 64)))
    key = Tensor(np.ones((1, 64), np.float32))
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'key': expected \[T', num_kv_heads, head_size\] "
                                         r"\(rank 3\) with an NZ cache \(quantization scales work per head"):
        ms_kvcache.reshape_and_cache(key, key, kc, vc, Tensor(np.array([0], np.int64)), "NZ",
                                     k_scale=Tensor(np.float32(1)), v_scale=Tensor(np.float32(1)))
    key = Tensor(np.ones((1, 4, 16), np.float32))  # head_size 16: half an int8 fractal column
    with pytest.raises(ValueError, match=r"head_size a multiple of C0 = 32, got shape \(1, 4, 16\)"):
        ms_kvcache.reshape_and_cache(key, key, kc, vc, Tensor(np.array([0], np.int64)), "NZ",
                                     k_scale=Tensor(np.float32(1)), v_scale=Tensor(np.float32(1)))


def test_ops_without_nz_refuse_it(rng):
    kc = Parameter(to_ms(nz_cache(rng, "float16", 2, 16, 64)))
    s = Tensor(np.array([0], np.int64))
    with pytest.raises(ValueError, match=r"rerope_cached_keys: argument 'cache_layout': expected 'BSND' or 'BNSD', "
                                         r"got 'NZ'"):
        ms_kvcache.rerope_cached_keys(kc, s, s, s, ms_kvcache.build_cos_sin_cache(32, 4), cache_layout="NZ")
    with pytest.raises(ValueError, match=r"dequantize_kv_cache: argument 'cache_layout': expected 'BSND' or 'BNSD', "
                                         r"got 'NZ': dequantize an NZ cache as ms_kvcache.nz_to_nd"):
        ms_kvcache.dequantize_kv_cache(Tensor(np.zeros((2, 2, 16, 32), np.int8)), scale=Tensor(np.float32(1)),
                                       cache_layout="NZ")


def test_graph_mode_refusal_at_compile_time(rng):
    """The shape rules are constexpr checks: a float32 NZ cache fails the graph compile."""
    with pytest.raises(TypeError, match=r"expected dtype float16, bfloat16 or int8 for an NZ cache"):
        check("graph", rac_call(), [np.zeros((2, 4, 16, 8), np.float32)] * 2,
              [np.zeros((1, 32), np.float32), np.zeros((1, 32), np.float32), np.array([0], np.int64)], [], "float32")


def test_docstrings_give_the_nz_shape_with_c0():
    """Every public op that takes NZ caches gives their shape with C0 (16 or 32 by dtype): the int8 caches of the
    quantizing writes have C0 = 32. rope_reshape_and_cache_merged's docstring gave ``[..., H*D // 16,
    block_size, 16]``, the shape of 2-byte dtypes only."""
    import inspect
    import re

    for name in ms_kvcache.ops.__all__:
        doc = inspect.getdoc(getattr(ms_kvcache, name)) or ""
        if '"NZ"' not in doc:
            continue
        assert not re.search(r"//\s*16\s*,\s*block_size\s*,\s*16\]", doc), f"{name}: NZ shape with a fixed C0 = 16"
        assert "C0" in doc, f"{name}: NZ cache shape without C0"
