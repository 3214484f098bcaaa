"""64-bit offsets: one cache of more than 2^31 elements (int8, 2.1 GB of lazily zeroed host memory shared
with a MindSpore tensor), written at its last slot and copied from/to its last block."""
import numpy as np
from mindspore import Tensor

from ms_kvcache import _custom, reshape_and_cache_merged, swap_blocks


def test_cache_over_2_pow_31_elements():
    nb, bs, h, d = 65537, 128, 1, 128  # [2, nb, bs, h, d] = 2,147,516,416 elements > 2^31
    host = np.zeros((2, nb, bs, h, d), np.int8)  # calloc: pages materialise only where written
    kv = Tensor.from_numpy(host)  # shares host's memory: no 2 GB copy
    assert kv.size > 2**31 and kv.data_ptr() == host.ctypes.data
    key = Tensor(np.arange(2 * d, dtype=np.int8).reshape(2, h, d))
    value = Tensor((np.arange(2 * d, dtype=np.int8) * 3).reshape(2, h, d))
    last = nb * bs - 1
    reshape_and_cache_merged(key, value, kv, Tensor(np.array([last, 0], np.int64)))
    a = kv.asnumpy()  # same memory as `host`
    np.testing.assert_array_equal(a[1, nb - 1, bs - 1], value.asnumpy()[0])  # byte offset ~2^31 - 128
    np.testing.assert_array_equal(a[0, nb - 1, bs - 1], key.asnumpy()[0])
    np.testing.assert_array_equal(a[1, 0, 0], value.asnumpy()[1])
    np.testing.assert_array_equal(a[0, 0, 0], key.asnumpy()[1])
    written = np.count_nonzero(key.asnumpy()) + np.count_nonzero(value.asnumpy())
    assert np.count_nonzero(host) == written, "bytes outside the written rows changed"

    # Block copies with 64-bit block offsets: the same memory as [2 * nb, bs, h, d] blocks, through a
    # reshape view (only the PyNative fast path writes through views; ops.Custom would write a copy).
    if not _custom.fast_path_available()[0]:
        return
    flat = kv.reshape(2 * nb, bs, h, d)
    assert flat.data_ptr() == kv.data_ptr() and flat.is_contiguous()
    small = Tensor(np.zeros((2, bs, h, d), np.int8))
    swap_blocks(flat, small, Tensor(np.array([[2 * nb - 1, 1]], np.int64)))  # read the last block
    np.testing.assert_array_equal(small.asnumpy()[1], host[1, nb - 1])
    src = Tensor(np.full((1, bs, h, d), 9, np.int8))
    swap_blocks(src, flat, Tensor(np.array([[0, 2 * nb - 2]], np.int64)))  # write the block before it
    flat.asnumpy()  # PyNative is asynchronous: wait for the copy before reading `host` directly
    assert (host[1, nb - 2] == 9).all()
    assert np.count_nonzero(host) == written + bs * h * d
