"""Aliased caches (U3): a tensor an op writes passed twice, or two views of one storage, is a ValueError
naming both arguments in PyNative on every backend path (cpu fast path, cpu ops.Custom, sim), and
nothing is written. Graph mode (no tensor identity there; the AOT entries compare addresses at launch):
tests/test_graph_inplace_rules.py."""
import contextlib

import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache import _backend, _custom

from conftest import assert_bits_equal, random_array, to_ms, to_np
from copy_util import fast_path

PATHS = ["cpu-fast", "cpu-custom", "sim"]


@contextlib.contextmanager
def path(name):
    old = _backend.get_backend()
    if name == "sim":
        from ms_kvcache._backends import sim

        if not sim.available()[0]:
            pytest.skip("sim backend not built")
    if name == "cpu-fast" and not _custom.fast_path_available("cpu")[0]:
        pytest.skip("fast path unavailable")
    ms_kvcache.set_backend("sim" if name == "sim" else "cpu")
    try:
        with fast_path(name == "cpu-fast"):
            yield
    finally:
        ms_kvcache.set_backend(old)


def _kv(rng, t=3):
    return to_ms(random_array(rng, (t, 2, 16), "float32")), to_ms(random_array(rng, (t, 2, 16), "float32"))


@pytest.mark.parametrize("p", PATHS)
def test_reshape_and_cache_same_cache_twice(p, rng):
    """reshape_and_cache(k, v, c, c, s): cpu used to let value overwrite key silently, sim failed later."""
    c0 = random_array(rng, (4, 8, 2, 16), "float32")
    c = Parameter(Tensor(c0.copy()), name="c_alias")
    k, v = _kv(rng)
    with path(p):
        with pytest.raises(ValueError, match="reshape_and_cache: argument 'value_cache': expected a distinct cache "
                                             "tensor .*got the same tensor as 'key_cache'"):
            ms_kvcache.reshape_and_cache(k, v, c, c, Tensor(np.array([0, 5, 31], np.int32)))
    assert_bits_equal(to_np(c), c0, "untouched")


def test_reshape_and_cache_two_views_of_one_plane(rng):
    """On the fast path views are allowed, but two views of the same bytes are not; views of disjoint
    planes of one merged tensor are fine."""
    with path("cpu-fast"):
        m0 = random_array(rng, (2, 4, 8, 2, 16), "float32")
        m = Tensor(m0.copy())
        k, v = _kv(rng)
        slots = Tensor(np.array([0, 5, 31], np.int32))
        with pytest.raises(ValueError, match="argument 'value_cache': expected a distinct cache tensor .*got a tensor "
                                             "sharing memory with .*'key_cache'"):
            ms_kvcache.reshape_and_cache(k, v, m[0], m.reshape(8, 8, 2, 16)[1:5], slots)
        # value_cache (blocks 3..6 of the flat 8) starts below key_cache (blocks 4..7) and overlaps it:
        # the later argument is named
        with pytest.raises(ValueError, match="argument 'value_cache'.*sharing memory with.*'key_cache'"):
            ms_kvcache.reshape_and_cache(k, v, m[1], m.reshape(8, 8, 2, 16)[3:7], slots)
        assert_bits_equal(to_np(m), m0, "untouched")
        ms_kvcache.reshape_and_cache(k, v, m[0], m[1], slots)  # disjoint planes: written
        got = to_np(m).reshape(2, 32, 2, 16)
        assert_bits_equal(got[0, [0, 5, 31]], to_np(k), "key plane")
        assert_bits_equal(got[1, [0, 5, 31]], to_np(v), "value plane")


@pytest.mark.parametrize("p", PATHS)
def test_rope_and_mla_ops_aliased(p, rng):
    """The generic check covers every op with several written caches."""
    kv0, pe0 = random_array(rng, (4, 8, 32), "float32"), random_array(rng, (4, 8, 32), "float32")
    c = Parameter(Tensor(kv0.copy()), name="mla_alias")
    x = to_ms(random_array(rng, (3, 32), "float32"))
    with path(p):
        with pytest.raises(ValueError, match="concat_and_cache_mla: argument 'k_pe_cache': expected a distinct cache "
                                             "tensor .*'kv_c_cache'"):
            ms_kvcache.concat_and_cache_mla(x, x, c, c, Tensor(np.array([0, 1, 2], np.int32)))
    assert_bits_equal(to_np(c), kv0, "untouched")
    del pe0


@pytest.mark.parametrize("p", PATHS)
def test_copy_blocks_same_storage(p, rng):
    """copy_blocks: the same tensor twice (was caught by id only) and, on the fast path, two different
    views of one storage (was accepted)."""
    k = [Tensor(random_array(rng, (8, 4, 16), "float16")) for _ in range(2)]
    v = [Tensor(random_array(rng, (8, 4, 16), "float16")) for _ in range(2)]
    bm = Tensor(np.array([[0, 1]], np.int32))
    with path(p):
        with pytest.raises(ValueError, match=r"argument 'value_caches\[1\]': expected a distinct cache tensor.*"
                                             r"the same tensor as 'key_caches\[0\]'"):
            ms_kvcache.copy_blocks(k, [v[0], k[0]], bm)
    if p == "cpu-fast":
        m0 = random_array(rng, (2, 8, 4, 16), "float16")
        m = Tensor(m0.copy())
        with path(p):
            with pytest.raises(ValueError, match=r"argument 'value_caches\[0\]'.*sharing memory with.*'key_caches\[1\]'"):
                ms_kvcache.copy_blocks([k[0], m[1]], [m.reshape(16, 4, 16)[8:], v[1]], bm)
            assert_bits_equal(to_np(m), m0, "untouched")
            ms_kvcache.copy_blocks([m[0]], [m[1]], bm)  # two disjoint planes of one tensor: fine
        exp = m0.copy()
        exp[:, 1] = exp[:, 0]
        assert_bits_equal(to_np(m), exp, "written")


@pytest.mark.parametrize("p", ["cpu-fast", "cpu-custom"])
def test_kv_transfer_h2d_same_cache_for_two_layers(p, rng):
    c = [Parameter(Tensor(np.zeros((4, 8, 2, 16), np.float32)), name=f"l{i}") for i in range(3)]
    buf = Tensor(random_array(rng, (2, 2, 3, 32), "float32"))
    with path(p):
        with pytest.raises(ValueError, match=r"multi_layer_kv_transfer: argument 'kv_caches \(tensor 3 .*\)': expected "
                                             r"a distinct cache tensor.*'kv_caches \(tensor 0 "):
            ms_kvcache.multi_layer_kv_transfer(buf, [(c[0], c[1]), (c[2], c[0])], Tensor(np.array([0, 1, 2], np.int32)),
                                               kv_format="SEPARATE_KV", direction="h2d")
    for x in c:
        assert not to_np(x).any()


def test_swap_blocks_same_tensor_still_allowed(rng):
    """src_cache is dst_cache is a documented use (rows in order): src is read-only, so no alias error."""
    c0 = random_array(rng, (4, 8), "float32")
    c = Parameter(Tensor(c0.copy()), name="swap_same")
    ms_kvcache.swap_blocks(c, c, Tensor(np.array([[0, 1]], np.int64)))
    exp = c0.copy()
    exp[1] = exp[0]
    assert_bits_equal(to_np(c), exp, "in place")


def test_disjoint_memo_never_hides_a_new_alias(rng):
    """The identity memo of checked tensor sets: a new pair (or a recreated tensor reusing an id) is
    checked afresh."""
    from ms_kvcache import _validate as V

    a, b = Tensor(np.zeros((4, 8), np.float32)), Tensor(np.zeros((4, 8), np.float32))
    V.require_disjoint("op", [("x", a), ("y", b)])
    V.require_disjoint("op", [("x", a), ("y", b)])  # memoised
    with pytest.raises(ValueError, match="argument 'y'.*the same tensor as 'x'"):
        V.require_disjoint("op", [("x", a), ("y", a)])
    m = Tensor(np.zeros((2, 4, 8), np.float32))
    for _ in range(3):  # views made afresh each time (ids may repeat): always checked
        with pytest.raises(ValueError, match="sharing memory"):
            V.require_disjoint("op", [("x", m.reshape(8, 8)[2:6]), ("y", m[1])])


# ------------------------------------------------------------- transfers: written vs read tensors
def _block_caches(rng, layers=2, shape=(4, 2, 8, 16)):
    return [(Parameter(Tensor(random_array(rng, shape, "float32")), name=f"xk{i}"),
             Parameter(Tensor(random_array(rng, shape, "float32")), name=f"xv{i}")) for i in range(layers)]


@pytest.mark.parametrize("p", PATHS)
def test_block_transfer_staging_must_not_be_a_cache(p, rng):
    """d2h reads the caches and writes staging: a staging buffer that is (a view of) a cache would
    overwrite the KV being offloaded. Rejected naming both, nothing written (was: accepted, cache and
    host blocks corrupted)."""
    caches = _block_caches(rng)
    before = [to_np(c) for kv in caches for c in kv]
    hb = (Tensor(np.zeros((2, 8, 2, 2, 16), np.float32)), Tensor(np.zeros((2, 8, 2, 2, 16), np.float32)))
    with path(p):
        with pytest.raises(ValueError, match=r"argument 'staging': expected a tensor sharing no memory with the "
                                             r"tensors the op reads, got the same tensor as 'kv_caches \(tensor 0"):
            ms_kvcache.multi_layer_block_transfer(caches, hb, Tensor(np.array([1, 3], np.int64)), direction="d2h",
                                                  staging=caches[0][0])
    for a, b in zip([to_np(c) for kv in caches for c in kv], before):
        assert_bits_equal(a, b, "cache untouched")
    assert not to_np(hb[0]).any() and not to_np(hb[1]).any()


@pytest.mark.parametrize("p", PATHS)
def test_transfer_h2d_reads_strided_views_correctly(p, rng):
    """h2d reads the buffer / host blocks: a strided view of a bigger tensor is read as the view (copied
    first), not as the first bytes of its storage (was: silently wrong on the cpu fast path)."""
    nb, bs, H, D = 4, 8, 2, 16
    big = random_array(rng, (2, 1, 3, 2 * H * D), "float32")
    kc = Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name="tk")
    vc = Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name="tv")
    slots = np.array([0, 9, 17], np.int32)
    with path(p):
        ms_kvcache.multi_layer_kv_transfer(Tensor(big)[:, :, :, :H * D], [(kc, vc)], Tensor(slots),
                                           kv_format="SEPARATE_KV", direction="h2d")
        assert_bits_equal(to_np(kc).reshape(-1, H * D)[slots], big[0, 0, :, :H * D], "key rows from the view")
        assert_bits_equal(to_np(vc).reshape(-1, H * D)[slots], big[1, 0, :, :H * D], "value rows from the view")
        caches = _block_caches(rng, layers=2)
        host = random_array(rng, (1, 8, 2, 2, 32), "float32")
        ht = Tensor(host)
        ms_kvcache.multi_layer_block_transfer(caches, (ht[..., :16], ht[..., 16:]), Tensor(np.array([2], np.int64)),
                                              direction="h2d")
        for layer in range(2):  # host block [bs, L, H, D] -> BNSD cache block [H, bs, D]
            assert_bits_equal(to_np(caches[layer][0])[2], host[0, :, layer, :, :16].transpose(1, 0, 2), "K block")
            assert_bits_equal(to_np(caches[layer][1])[2], host[0, :, layer, :, 16:].transpose(1, 0, 2), "V block")
