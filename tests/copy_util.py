"""Helpers of the copy-operator tests (reshape_and_cache*, concat_and_cache_mla, copy_blocks,
swap_blocks): run one op call in PyNative, in a GRAPH_MODE Cell holding the caches as Parameters, or in
an ``@ms.jit`` function taking the caches as Parameter arguments, and read everything back."""
import contextlib
import itertools

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, nn, ops

from conftest import assert_bits_equal, ms_mode, random_array, to_ms, to_np

from ms_kvcache import _custom

DTYPES = ("float16", "bfloat16", "float32", "int8")
INDEX = ("int32", "int64")
_names = itertools.count()


def params(arrays):
    """Parameters (unique names) holding copies of numpy arrays (bfloat16 via ml_dtypes)."""
    return [Parameter(to_ms(a), name=f"cache{next(_names)}") for a in arrays]


def tensors(arrays):
    return [to_ms(a) for a in arrays]


def _read_all(caches):
    """Every cache cast to float32 (a loop: generator expressions compile slowly in graph mode)."""
    out = ()
    for c in caches:
        out = out + (ops.cast(c, ms.float32),)
    return out


class OpCell(nn.Cell):
    """GRAPH_MODE Cell: caches are Parameters in a ParameterTuple; ``call(caches, *inputs)`` runs the op
    (its return value unused) and the Cell returns every cache read back in the same graph (cast to
    float32), so a missing write or a read ordered before the write shows up."""

    def __init__(self, call, caches, read_back=True):
        super().__init__()
        self.call = call
        self.caches = ParameterTuple(caches)
        self.read_back = read_back

    def construct(self, *inputs):
        self.call(self.caches, *inputs)
        if self.read_back:
            return _read_all(self.caches)
        return inputs[-1]


def make_jit(call, num_caches, read_back=True):
    """``@ms.jit`` function ``f(*caches, *inputs)`` (caches passed as individual Parameters)."""

    @ms.jit
    def f(*args):
        call(args[:num_caches], *args[num_caches:])
        if read_back:
            return _read_all(args[:num_caches])
        return args[-1]

    return f


def run(mode, call, cache_arrays, input_arrays, read_back=True):
    """Run ``call(caches, *inputs)`` once in ``mode``; return (caches after as numpy, in-graph reads as
    float32 numpy or None, whether every cache kept its data pointer)."""
    caches = params(cache_arrays)
    inputs = tensors(input_arrays)
    ptrs = [c.data_ptr() for c in caches]
    reads = None
    with ms_mode(mode):
        if mode == "pynative":
            call(caches, *inputs)
        elif mode == "graph":
            reads = OpCell(call, caches, read_back)(*inputs)
        else:
            reads = make_jit(call, len(caches), read_back)(*caches, *inputs)
    after = [to_np(c) for c in caches]
    same_ptr = all(c.data_ptr() == p for c, p in zip(caches, ptrs))
    if read_back and reads is not None:
        reads = [r.asnumpy() for r in reads]
    else:
        reads = None
    return after, reads, same_ptr


def check(mode, call, cache_arrays, input_arrays, expected, msg=""):
    """run() and compare bit-exactly with the expected caches (and the in-graph reads with them)."""
    after, reads, same_ptr = run(mode, call, cache_arrays, input_arrays)
    assert same_ptr, f"{msg}: a cache changed its data pointer (copied)"
    for i, (a, e) in enumerate(zip(after, expected)):
        assert_bits_equal(a, e, f"{msg} cache {i}")
    if reads is not None:
        for i, (r, e) in enumerate(zip(reads, expected)):
            np.testing.assert_array_equal(r, np.asarray(e, dtype=np.float32), err_msg=f"{msg} in-graph read {i}")


def random_slots(rng, num_tokens, num_slots, dtype, pad=0, must_include=()):
    """num_tokens distinct slots in [0, num_slots) (with the ``must_include`` ones) and ``pad`` of them
    replaced by negative values (-1 and other negatives), shuffled."""
    pool = np.setdiff1d(np.arange(num_slots), np.asarray(must_include, dtype=np.int64))
    take = rng.choice(pool, size=num_tokens - len(must_include), replace=False)
    s = np.concatenate([np.asarray(must_include, dtype=np.int64), take])
    rng.shuffle(s)
    if pad:
        idx = rng.choice(np.nonzero(~np.isin(s, must_include))[0], size=pad, replace=False)
        s[idx] = rng.choice([-1, -1, -2, -7], size=pad)
    return s.astype(dtype)


@contextlib.contextmanager
def fast_path(enabled):
    """Force the PyNative fast path on/off for the body (when off, PyNative uses ops.Custom)."""
    old = _custom.set_fast_path(enabled)
    try:
        yield
    finally:
        _custom.set_fast_path(old)


__all__ = ["DTYPES", "INDEX", "params", "tensors", "OpCell", "make_jit", "run", "check", "random_slots",
           "fast_path", "random_array", "assert_bits_equal", "to_np", "to_ms", "ms_mode"]
