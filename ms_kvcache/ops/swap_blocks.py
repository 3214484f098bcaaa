"""swap_blocks: copy whole blocks between two caches of the same block shape (e.g. device <-> host)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import BlockPairs, EagerOp
from ms_kvcache._opspecs.copy import SWAP_BLOCKS as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops._kv_shapes import check_block_mapping_shape

__all__ = ["swap_blocks", "SPEC"]




def _check_static(s_shape, s_dtype, d_shape, d_dtype, m_shape, m_dtype):
    op = SPEC.name
    SPEC.check_ranks({"src_cache": s_shape, "dst_cache": d_shape, "block_mapping": m_shape})
    SPEC.check_dtypes({"src_cache": dtype_name(s_dtype), "dst_cache": dtype_name(d_dtype),
                       "block_mapping": dtype_name(m_dtype)})
    if tuple(d_shape[1:]) != tuple(s_shape[1:]):
        raise ValueError(f"{op}: argument 'dst_cache': expected shape [num_blocks, {', '.join(map(str, s_shape[1:]))}] "
                         f"(block shape of 'src_cache'), got {tuple(d_shape)}")
    check_block_mapping_shape(op, "block_mapping", m_shape)
    return s_shape[0], d_shape[0]


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)
#: PyNative branch: static check -> (src_blocks, dst_blocks); a backend module's own
#: ``swap_blocks(src_cache, dst_cache, block_mapping)`` replaces the kernel; the source cache must be
#: contiguous (never silently copied); no pairs launches nothing.
_EAGER = EagerOp(SPEC, _check_static, index_checks=(BlockPairs("block_mapping", 0, 1),),
                 skip_if_empty=("block_mapping",), contiguous=("src_cache",), backend_impl="swap_blocks")


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'swap_blocks', ('src_cache', 'dst_cache', 'block_mapping')

def swap_blocks(src_cache, dst_cache, block_mapping):
    """Copy whole blocks from ``src_cache`` to ``dst_cache``, in place: ``dst_cache[dst] = src_cache[src]``
    for each row ``(src, dst)`` of ``block_mapping``.

    vLLM ``swap_blocks`` (offload and reload between a device cache and a host cache). Rows apply in order,
    as a Python loop over them would; ``src_cache`` may be ``dst_cache``. What each backend runs (a native
    kernel on cpu and sim, runtime copies on ascend): docs/ops-copy.md, "swap_blocks on each backend".

    Args:
        src_cache (Tensor): ``[src_blocks, *block_shape]`` (any layout: a block is everything after dim 0;
            rank 2 to 6); float16, bfloat16, float32 or int8; contiguous; only read.
        dst_cache (Tensor | Parameter): ``[dst_blocks, *block_shape]``, block shape and dtype of ``src_cache``;
            contiguous; written in place (in a graph: a whole Parameter).
        block_mapping (Tensor): ``[n, 2]`` int32 or int64, rows ``(src, dst)`` with ``0 <= src < src_blocks``
            and ``0 <= dst < dst_blocks``. ``n = 0`` is a no-op.

    Returns:
        None: ``dst_cache`` is written in place; in a graph the write is ordered before later reads of it.

    Raises:
        TypeError: a non-Tensor argument; mixed or unsupported dtypes; in a graph, a ``dst_cache`` that is
            not a whole Parameter.
        ValueError: a rank outside 2..6 or differing block shapes; ``block_mapping`` not ``[n, 2]``; in
            PyNative a block id out of range, a non-contiguous cache, ``block_mapping`` over ``dst_cache``.
        RuntimeError: in a graph, at launch: ``block_mapping`` over ``dst_cache`` (cpu, sim), a kernel
            failure. Per mode and backend: docs/ops-copy.md, "Errors".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(src_cache), F.typeof(dst_cache), F.typeof(block_mapping))
        _check_static_graph(src_cache.shape, src_cache.dtype, dst_cache.shape, dst_cache.dtype,
                            block_mapping.shape, block_mapping.dtype)
        _get_cache_prim(_Prim)(graph_backend())(src_cache, dst_cache, block_mapping)
    else:
        _EAGER(_backend.get_backend(), (), src_cache, dst_cache, block_mapping)
    return None

