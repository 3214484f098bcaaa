"""Small valid calls of every op with an in-place argument, for the in-place rule tests
(tests/test_graph_inplace_rules.py): the arguments as a tuple (written tensors as Parameters, lists as
tuples), a module-level function ``call(args)`` usable in ``construct`` / ``@ms.jit``, and the written
arguments as (path into the tuple, name in the error message)."""
import numpy as np
from mindspore import Parameter, Tensor

import ms_kvcache as mk

NB, BS, H, D = 4, 8, 2, 16  # caches [NB, BS, H, D] (BSND), 32 slots
T = 3
SLOTS = np.array([0, 9, 31], np.int32)  # the last slot included


class Case:
    """One op call: ``args()`` builds fresh arguments (``param(name, array)`` for written tensors),
    ``call`` runs the op on them, ``written`` lists (path, argument name) of every tensor it writes."""

    def __init__(self, op, build, call, written):
        self.op, self.build, self.call, self.written = op, build, call, written

    def args(self, rng, tag=""):
        return self.build(rng, lambda name, a: Parameter(Tensor(a), name=f"{self.op}_{name}{tag}"))


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _cos_sin(max_pos=64, rot=D):
    inv = 1.0 / (10000 ** (np.arange(0, rot, 2) / rot))
    f = np.outer(np.arange(max_pos), inv)
    return Tensor(np.concatenate([np.cos(f), np.sin(f)], axis=1).astype(np.float32))


def _positions(rng):
    return Tensor(rng.integers(0, 64, size=T).astype(np.int32))


# --------------------------------------------------------------------------------------- module-level calls
def call_reshape_and_cache(a):
    return mk.reshape_and_cache(*a)


def call_reshape_and_cache_merged(a):
    return mk.reshape_and_cache_merged(*a)


def call_concat_and_cache_mla(a):
    return mk.concat_and_cache_mla(*a)


def call_copy_blocks(a):
    return mk.copy_blocks(*a)


def call_swap_blocks(a):
    return mk.swap_blocks(*a)


def call_kv_h2d(a):
    return mk.multi_layer_kv_transfer(a[0], a[1], a[2], kv_format="SEPARATE_KV", direction="h2d")


def call_kv_d2h(a):
    return mk.multi_layer_kv_transfer(a[0], a[1], a[2], kv_format="SEPARATE_KV", direction="d2h")


def call_block_h2d(a):
    return mk.multi_layer_block_transfer(a[0], a[1], a[2], direction="h2d", kv_format="SEPARATE_KV",
                                         cache_layout="BSND")


def call_block_d2h(a):
    return mk.multi_layer_block_transfer(a[0], a[1], a[2], direction="d2h", kv_format="SEPARATE_KV",
                                         cache_layout="BSND")


def call_block_d2h_staged(a):
    return mk.multi_layer_block_transfer(a[0], a[1], a[2], direction="d2h", kv_format="SEPARATE_KV",
                                         cache_layout="BSND", staging=a[3])


def call_rope_reshape_and_cache(a):
    return mk.rope_reshape_and_cache(*a)


def call_rope_reshape_and_cache_merged(a):
    return mk.rope_reshape_and_cache_merged(*a)


def call_rope_concat_and_cache_mla(a):
    return mk.rope_concat_and_cache_mla(*a)


def call_rerope_cached_keys(a):
    return mk.rerope_cached_keys(*a)


# --------------------------------------------------------------------------------------- argument builders
def _rc(rng, p):
    k, v = Tensor(_f32(rng, T, H, D)), Tensor(_f32(rng, T, H, D))
    return (k, v, p("kc", _f32(rng, NB, BS, H, D)), p("vc", _f32(rng, NB, BS, H, D)), Tensor(SLOTS))


def _rcm(rng, p):
    return (Tensor(_f32(rng, T, H, D)), Tensor(_f32(rng, T, H, D)), p("kv", _f32(rng, 2, NB, BS, H, D)),
            Tensor(SLOTS))


def _mla(rng, p):
    return (Tensor(_f32(rng, T, 32)), Tensor(_f32(rng, T, 16)), p("ckv", _f32(rng, NB, BS, 32)),
            p("kpe", _f32(rng, NB, BS, 16)), Tensor(SLOTS))


def _cb(rng, p):
    return ((p("k0", _f32(rng, NB, BS, H, D)), p("k1", _f32(rng, NB, BS, H, D))),
            (p("v0", _f32(rng, NB, BS, H, D)), p("v1", _f32(rng, NB, BS, H, D))),
            Tensor(np.array([[0, 3], [2, 1]], np.int64)))


def _swap(rng, p):
    return (Tensor(_f32(rng, NB, BS, H, D)), p("dst", _f32(rng, NB, BS, H, D)), Tensor(np.array([[1, 2]], np.int64)))


def _kv_caches(rng, p, writable):
    """Two layers of SEPARATE_KV caches, flat and layer-major (k0, v0, k1, v1)."""
    mkc = p if writable else (lambda name, a: Tensor(a))
    return tuple(mkc(f"{kv}{l}", _f32(rng, NB, BS, H, D)) for l in range(2) for kv in "kv")


def _kv_h2d(rng, p):
    return (Tensor(_f32(rng, 2, 2, T, H * D)), _kv_caches(rng, p, True), Tensor(SLOTS))


def _kv_d2h(rng, p):
    return (p("buf", np.zeros((2, 2, T, H * D), np.float32)), _kv_caches(rng, p, False), Tensor(SLOTS))


def _host(rng, n, p=None):
    mkh = p if p is not None else (lambda name, a: Tensor(a))
    return tuple(mkh(f"h{i}", _f32(rng, n, BS, 2, H, D)) for i in range(2))


def _block_h2d(rng, p):
    return (_kv_caches(rng, p, True), _host(rng, 2), Tensor(np.array([3, 0], np.int64)))


def _block_d2h(rng, p):
    return (_kv_caches(rng, p, False), _host(rng, 2, p), Tensor(np.array([3, 0], np.int64)))


def _block_d2h_staged(rng, p):
    return _block_d2h(rng, p) + (p("staging", np.zeros(2 * BS * 2 * H * D, np.float32)),)


def _rope(rng, p):
    return (_positions(rng), Tensor(_f32(rng, T, 4, D)), Tensor(_f32(rng, T, H, D)), Tensor(_f32(rng, T, H, D)),
            _cos_sin(), p("kc", _f32(rng, NB, BS, H, D)), p("vc", _f32(rng, NB, BS, H, D)), Tensor(SLOTS))


def _rope_merged(rng, p):
    return (_positions(rng), Tensor(_f32(rng, T, 4, D)), Tensor(_f32(rng, T, H, D)), Tensor(_f32(rng, T, H, D)),
            _cos_sin(), p("kv", _f32(rng, 2, NB, BS, H, D)), Tensor(SLOTS))


def _rope_mla(rng, p):
    return (_positions(rng), Tensor(_f32(rng, T, 4, D)), Tensor(_f32(rng, T, D)), Tensor(_f32(rng, T, 32)),
            _cos_sin(), p("ckv", _f32(rng, NB, BS, 32)), p("kpe", _f32(rng, NB, BS, D)), Tensor(SLOTS))


def _rerope(rng, p):
    return (p("kc", _f32(rng, NB, BS, H, D)), Tensor(SLOTS), _positions(rng), _positions(rng), _cos_sin())


#: every op with an in-place argument (both directions of the transfers, the optional staging buffer)
CASES = [
    Case("reshape_and_cache", _rc, call_reshape_and_cache, [((2,), "key_cache"), ((3,), "value_cache")]),
    Case("reshape_and_cache_merged", _rcm, call_reshape_and_cache_merged, [((2,), "kv_cache")]),
    Case("concat_and_cache_mla", _mla, call_concat_and_cache_mla, [((2,), "kv_c_cache"), ((3,), "k_pe_cache")]),
    Case("copy_blocks", _cb, call_copy_blocks, [((0, 1), "key_caches[1]"), ((1, 0), "value_caches[0]")]),
    Case("swap_blocks", _swap, call_swap_blocks, [((1,), "dst_cache")]),
    Case("kv_transfer_h2d", _kv_h2d, call_kv_h2d, [((1, 0), "kv_caches[0]")]),
    Case("kv_transfer_d2h", _kv_d2h, call_kv_d2h, [((0,), "buffer")]),
    Case("block_transfer_h2d", _block_h2d, call_block_h2d, [((0, 2), "kv_caches[2]")]),
    Case("block_transfer_d2h", _block_d2h, call_block_d2h, [((1, 1), "host_blocks[1]")]),
    Case("block_transfer_staging", _block_d2h_staged, call_block_d2h_staged, [((3,), "staging")]),
    Case("rope_reshape_and_cache", _rope, call_rope_reshape_and_cache, [((5,), "key_cache"), ((6,), "value_cache")]),
    Case("rope_reshape_and_cache_merged", _rope_merged, call_rope_reshape_and_cache_merged, [((5,), "kv_cache")]),
    Case("rope_concat_and_cache_mla", _rope_mla, call_rope_concat_and_cache_mla,
         [((5,), "kv_c_cache"), ((6,), "k_pe_cache")]),
    Case("rerope_cached_keys", _rerope, call_rerope_cached_keys, [((0,), "key_cache")]),
]

#: public op name of each case (the message starts with it)
OP_NAME = {
    "kv_transfer_h2d": "multi_layer_kv_transfer", "kv_transfer_d2h": "multi_layer_kv_transfer",
    "block_transfer_h2d": "multi_layer_block_transfer", "block_transfer_d2h": "multi_layer_block_transfer",
    "block_transfer_staging": "multi_layer_block_transfer",
}


def op_name(case):
    return OP_NAME.get(case.op, case.op)


def get(args, path):
    x = args
    for i in path:
        x = x[i]
    return x


def replace_host(args, path, value):
    """``args`` with the element at ``path`` replaced (Python side)."""
    if len(path) == 1:
        return args[:path[0]] + (value,) + args[path[0] + 1:]
    inner = args[path[0]]
    return args[:path[0]] + (inner[:path[1]] + (value,) + inner[path[1] + 1:],) + args[path[0] + 1:]
