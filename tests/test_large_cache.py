"""64-bit offsets: caches of more than 2^31 elements (int8, ~2.1 GB each of lazily zeroed host memory
shared with a MindSpore tensor: calloc'd pages materialise only where written), written at their last
slot / block. One test per op family on the cpu backend (PyNative; the fast path and ops.Custom both
take the caches' own memory here, no views)."""
import numpy as np
import pytest
from mindspore import Tensor

import ms_kvcache
from ms_kvcache import _custom, concat_and_cache_mla, copy_blocks, reshape_and_cache_merged, swap_blocks


def _host_zeros(shape):
    """A zero int8 array of ``shape`` (lazily allocated) and the MindSpore tensor sharing its memory."""
    try:
        host = np.zeros(shape, np.int8)
    except MemoryError:
        pytest.skip(f"cannot reserve {np.prod(shape, dtype=np.int64) / 2**30:.1f} GiB of virtual memory here")
    t = Tensor.from_numpy(host)  # shares host's memory: no copy
    assert t.data_ptr() == host.ctypes.data
    return host, t


@pytest.fixture(autouse=True)
def _enough_memory():
    try:
        avail = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemAvailable")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return
    if avail < 2**30:  # the tests touch a few MiB, but MindSpore and numpy need some room
        pytest.skip(f"only {avail / 2**30:.1f} GiB of memory available")


def _nonzero_outside(host, expected_nonzero):
    assert np.count_nonzero(host) == expected_nonzero, "bytes outside the written rows changed"


def test_reshape_and_cache_merged_over_2_pow_31_elements():
    nb, bs, h, d = 65537, 128, 1, 128  # [2, nb, bs, h, d] = 2,147,516,416 elements > 2^31
    host, kv = _host_zeros((2, nb, bs, h, d))
    assert kv.size > 2**31
    key = Tensor(np.arange(2 * d, dtype=np.int8).reshape(2, h, d))
    value = Tensor((np.arange(2 * d, dtype=np.int8) * 3).reshape(2, h, d))
    last = nb * bs - 1
    reshape_and_cache_merged(key, value, kv, Tensor(np.array([last, 0], np.int64)))
    ms_kvcache.synchronize()
    np.testing.assert_array_equal(host[1, nb - 1, bs - 1], value.asnumpy()[0])  # byte offset ~2^32 - 128
    np.testing.assert_array_equal(host[0, nb - 1, bs - 1], key.asnumpy()[0])  # ~2^31 - 128
    np.testing.assert_array_equal(host[1, 0, 0], value.asnumpy()[1])
    np.testing.assert_array_equal(host[0, 0, 0], key.asnumpy()[1])
    _nonzero_outside(host, np.count_nonzero(key.asnumpy()) + np.count_nonzero(value.asnumpy()))


def test_swap_blocks_over_2_pow_31_elements():
    nb, bs, h, d = 2 * 65537, 128, 1, 128  # [nb, bs, h, d] > 2^31 elements
    host, cache = _host_zeros((nb, bs, h, d))
    host[nb - 1] = 5  # the last block (byte offset 2^32 - 16 KiB)
    small = Tensor(np.zeros((2, bs, h, d), np.int8))
    swap_blocks(cache, small, Tensor(np.array([[nb - 1, 1]], np.int64)))  # read the last block
    assert (small.asnumpy()[1] == 5).all() and not small.asnumpy()[0].any()
    src = Tensor(np.full((1, bs, h, d), 9, np.int8))
    swap_blocks(src, cache, Tensor(np.array([[0, nb - 2]], np.int64)))  # write the block before it
    ms_kvcache.synchronize()
    assert (host[nb - 2] == 9).all()
    _nonzero_outside(host, 2 * bs * h * d)


def test_swap_blocks_through_a_reshape_view_over_2_pow_31_elements():
    """The fast path writes through views: the same memory as [2 * nb, bs, h, d] blocks, reached through
    a whole-tensor reshape of a [2, nb, bs, h, d] cache."""
    if not _custom.fast_path_available()[0]:
        pytest.skip("needs the PyNative fast path (ms_kvcache._cpu_pyboost): ops.Custom rejects a view cache "
                    f"({_custom.fast_path_available()[1]})")
    nb, bs, h, d = 65537, 128, 1, 128
    host, kv = _host_zeros((2, nb, bs, h, d))
    flat = kv.reshape(2 * nb, bs, h, d)
    assert flat.data_ptr() == kv.data_ptr() and flat.is_contiguous()
    host[1, nb - 1] = 7
    small = Tensor(np.zeros((2, bs, h, d), np.int8))
    swap_blocks(flat, small, Tensor(np.array([[2 * nb - 1, 1]], np.int64)))
    assert (small.asnumpy()[1] == 7).all()
    swap_blocks(Tensor(np.full((1, bs, h, d), 9, np.int8)), flat, Tensor(np.array([[0, 2 * nb - 2]], np.int64)))
    ms_kvcache.synchronize()
    assert (host[1, nb - 2] == 9).all()
    _nonzero_outside(host, 2 * bs * h * d)


def test_concat_and_cache_mla_over_2_pow_31_elements():
    """kv_c_cache [65537, 64, 512] int8 = 2,147,516,416 elements: the last slot's row starts at byte
    2,147,515,904 (> 2^31); k_pe_cache [65537, 64, 64] is written at the same slots."""
    nb, bs, rank, rope = 65537, 64, 512, 64
    host_c, kv_c_cache = _host_zeros((nb, bs, rank))
    host_pe, k_pe_cache = _host_zeros((nb, bs, rope))
    assert kv_c_cache.size > 2**31
    rng = np.random.default_rng(31)
    kv_c = rng.integers(1, 127, size=(3, rank), dtype=np.int8)
    k_pe = rng.integers(1, 127, size=(3, rope), dtype=np.int8)
    last = nb * bs - 1
    slots = np.array([last, -1, last - bs], np.int64)  # last slot, a skipped token, the previous block's last row
    concat_and_cache_mla(Tensor(kv_c), Tensor(k_pe), kv_c_cache, k_pe_cache, Tensor(slots))
    ms_kvcache.synchronize()
    np.testing.assert_array_equal(host_c[nb - 1, bs - 1], kv_c[0])
    np.testing.assert_array_equal(host_pe[nb - 1, bs - 1], k_pe[0])
    np.testing.assert_array_equal(host_c[nb - 2, bs - 1], kv_c[2])
    np.testing.assert_array_equal(host_pe[nb - 2, bs - 1], k_pe[2])
    _nonzero_outside(host_c, 2 * rank)
    _nonzero_outside(host_pe, 2 * rope)


def test_copy_blocks_over_2_pow_31_elements():
    """One layer, key and value caches [131073, 128, 1, 128] int8 (2,147,500,032 > 2^31 elements each):
    the last blocks start above byte 2^31."""
    nb, bs, h, d = 131073, 128, 1, 128
    host_k, kc = _host_zeros((nb, bs, h, d))
    host_v, vc = _host_zeros((nb, bs, h, d))
    assert kc.size > 2**31
    host_k[nb - 1, :, 0, :5] = 3  # last block: source of the first pair
    host_v[nb - 1, :, 0, :5] = 4
    host_k[1, 0, 0, 0] = 6  # block 1 -> last block - 1
    host_v[1, 0, 0, 0] = 8
    bm = Tensor(np.array([[nb - 1, 0], [1, nb - 2]], np.int64))
    copy_blocks([kc], [vc], bm)
    ms_kvcache.synchronize()
    np.testing.assert_array_equal(host_k[0], host_k[nb - 1])
    np.testing.assert_array_equal(host_v[0], host_v[nb - 1])
    assert host_k[nb - 2, 0, 0, 0] == 6 and host_v[nb - 2, 0, 0, 0] == 8
    _nonzero_outside(host_k, 2 * bs * 5 + 2)
    _nonzero_outside(host_v, 2 * bs * 5 + 2)
