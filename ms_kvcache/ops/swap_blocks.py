"""swap_blocks: copy whole blocks between two caches of the same block shape (e.g. device <-> host)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import BlockPairs, EagerOp
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, OpSpec, TensorSpec, dtype_name, register

__all__ = ["swap_blocks", "SPEC"]

#: Cache ranks accepted by the block copy ops: dim 0 is num_blocks, the rest is one block.
BLOCK_CACHE_RANKS = (2, 3, 4, 5, 6)

SPEC = register(OpSpec(
    name="swap_blocks",
    op_type="MskvSwapBlocks",
    inputs=(
        TensorSpec("src_cache", "T", BLOCK_CACHE_RANKS),
        TensorSpec("dst_cache", "T", BLOCK_CACHE_RANKS, inplace=True),
        TensorSpec("block_mapping", "S", (2,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    # src_cache may be dst_cache (or overlap it): a documented use, rows of block_mapping apply in order
    # like a Python loop (docs/design.md, "Block copies"); block_mapping may not overlap dst_cache
    read_may_alias=("src_cache",),
    # on Ascend: ACL runtime copies (ms_kvcache._backends.ascend.swap_blocks), no AscendC kernel
    extra={"ascend_runtime": "aclrtMemcpyAsync / aclrtMemcpyBatchAsync per run of blocks"},
))


def check_block_mapping_shape(op, name, shape):
    if len(shape) != 2 or shape[1] != 2:
        raise ValueError(f"{op}: argument '{name}': expected shape [n, 2] (src, dst block ids), got {tuple(shape)}")


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
    """Copy whole blocks from ``src_cache`` to ``dst_cache``, in place: for each row ``(src, dst)`` of
    ``block_mapping``, ``dst_cache[dst] = src_cache[src]``.

    Follows vLLM's ``swap_blocks`` (cache offload/reload between a device cache and a host cache).
    Rows are applied in order, as a Python loop over them would: a later row sees the blocks written by
    earlier ones (this matters only when ``src_cache`` and ``dst_cache`` are the same tensor) and a
    ``dst`` named twice ends with the block of its last row.

    Backends: on the ``cpu`` backend both caches are host memory and the copy is one native kernel
    (threads split every block by byte range). A backend module may define its own
    ``swap_blocks(src_cache, dst_cache, block_mapping)`` (e.g. one runtime memcpy per block between
    device and host memory); PyNative calls then go to it after the checks below. On Ascend it is such a
    runtime memcpy, not an AscendC kernel, so it has no tiling and nothing to emulate: the ``sim``
    backend runs the cpu backend's host kernel for it (PyNative and graph mode).

    Args:
        src_cache (Tensor | Parameter): ``[src_blocks, *block_shape]`` (any layout; a block is
            everything after dim 0), float16, bfloat16, float32 or int8; contiguous.
        dst_cache (Tensor | Parameter; a whole Parameter in a graph): ``[dst_blocks, *block_shape]``, same block
            shape and dtype as ``src_cache``; contiguous. Written in place.
        block_mapping (Tensor): int32 or int64 ``[n, 2]``, rows ``(src, dst)`` with
            ``0 <= src < src_blocks`` and ``0 <= dst < dst_blocks``. ``n = 0`` is a no-op.

    Returns:
        None. ``dst_cache`` is modified in place (no copy of either cache; in graph mode the write is
        ordered before later reads of ``dst_cache`` in the same graph).

    Raises:
        TypeError: an argument is not a Tensor; cache dtypes differ or are unsupported; block_mapping is
            not int32/int64.
        ValueError: rank outside 2..6; block shapes differ; block_mapping is not ``[n, 2]``; a block id
            out of range (PyNative only; in graph mode such rows are skipped); a non-contiguous cache.
            ``block_mapping`` sharing memory with ``dst_cache`` (PyNative; RuntimeError at launch in a
            graph on cpu / sim). ``src_cache`` may be ``dst_cache`` or overlap it: the op's one exception to
            the rule that a read input shares no memory with a written one (``OpSpec.read_may_alias``;
            rows apply in order, so a later row reads the blocks earlier rows wrote).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``dst_cache`` not a whole Parameter (a
            slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore would
            write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``): a kernel failure, with its message in the exception text
            (e.g. a repeated slot on the sim backend, a launch the AscendC tiling rejects).
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(src_cache), F.typeof(dst_cache), F.typeof(block_mapping))
        _check_static_graph(src_cache.shape, src_cache.dtype, dst_cache.shape, dst_cache.dtype,
                            block_mapping.shape, block_mapping.dtype)
        _get_cache_prim(_Prim)(graph_backend())(src_cache, dst_cache, block_mapping)
    else:
        _EAGER(_backend.get_backend(), (), src_cache, dst_cache, block_mapping)
    return None

