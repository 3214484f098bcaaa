"""copy_blocks: copy blocks within every layer's key and value caches (copy-on-write of shared blocks).

How a list of L per-layer caches reaches ONE kernel launch in every MindSpore mode
---------------------------------------------------------------------------------
``key_caches`` and ``value_caches`` are list inputs (``TensorSpec(dynamic=True)``, see
``ms_kvcache._custom``): the primitive takes the 2L caches as ``2L`` consecutive inputs, every one
marked ``RW_WRITE`` with ``side_effect_mem`` set, so graph mode keeps the call and orders it before
later reads of each cache. One class serves every L: ``MskvCopyBlocks(backend, (L, L))``; the counts reach
every backend as the ``dyn_input_sizes`` attribute ``[L, L, -1]`` (AscendC: two DYNAMIC inputs).

- GRAPH_MODE: keep the caches as Cell attributes, e.g. ``self.key_caches = ParameterTuple(...)``, and
  call ``copy_blocks(self.key_caches, self.value_caches, block_mapping)`` in ``construct``. L is the
  (constant) tuple length; the wrapper unpacks the tuples into the primitive call, and the per-cache
  shape/dtype checks run once in the primitive's infer step (not one constexpr per cache).
- ``@ms.jit``: the same inside a jitted Cell method, or pass the Parameters individually and build the
  lists inside the function: ``copy_blocks([k0, k1], [v0, v1], bm)``.
- PyNative: lists or tuples of Tensors/Parameters; the fast path takes the 2L tensors directly, the
  ops.Custom fallback uses the primitive for that L (cached per L).

Overlapping pairs: rows of block_mapping are applied in order, exactly as a Python loop over them
would (a dst written by an earlier row is the new content when a later row reads it as src; a dst
named twice ends with the block of its last row). vLLM launches all pairs in parallel and leaves such
overlaps undefined; here they are defined and tested. The kernel stays parallel: threads split every
block by byte range and each applies all pairs in order to its range.
"""
import mindspore as ms
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import BlockPairs, EagerOp
from ms_kvcache._opspecs.copy import COPY_BLOCKS
from ms_kvcache._spec import KV_DTYPES, attach_checks, dtype_name
from ms_kvcache.ops._kv_shapes import BLOCK_CACHE_RANKS, check_block_mapping_shape

__all__ = ["copy_blocks", "SPEC"]

# The 2L per-cache checks run in the primitive's infer step (graph compile, ops.Custom PyNative): one
# Python call per op instead of one constexpr per cache (see _check_shapes / _check_dtypes below).
_INFERRED = {}


def _infer_shape(_attrs, k_shapes, v_shapes, _m_shape):
    """Infer step (graph compile, ops.Custom PyNative): the per-cache shape checks, one call for 2L caches."""
    V.cached_static(_INFERRED, _check_shapes, (tuple(map(tuple, k_shapes)), tuple(map(tuple, v_shapes))))
    return [1]


def _infer_dtype(_attrs, k_dtypes, v_dtypes, _m_dtype):
    V.cached_static(_INFERRED, _check_dtypes, (tuple(k_dtypes), tuple(v_dtypes)))
    return ms.int32


SPEC = attach_checks(COPY_BLOCKS, infer_shape=_infer_shape, infer_dtype=_infer_dtype)


def _check_counts(num_keys, num_values, m_shape, m_dtype):
    op = SPEC.name
    if num_keys != num_values:
        raise ValueError(f"{op}: argument 'value_caches': expected {num_keys} caches (one per layer, "
                         f"as 'key_caches'), got {num_values}")
    SPEC.check_ranks({"block_mapping": m_shape})
    SPEC.check_dtypes({"block_mapping": dtype_name(m_dtype)})
    check_block_mapping_shape(op, "block_mapping", m_shape)
    return 0


def _check_cache_dtype(name, dtype, ref_dtype):
    op = SPEC.name
    d, ref_d = dtype_name(dtype), dtype_name(ref_dtype)
    if d not in KV_DTYPES:
        raise TypeError(f"{op}: argument '{name}': expected dtype in {KV_DTYPES}, got {d}")
    if d != ref_d:
        raise TypeError(f"{op}: argument '{name}': expected dtype {ref_d} (same as 'key_caches[0]'), got {d}")


def _check_cache_shape(name, shape, ref_shape):
    op = SPEC.name
    if len(shape) not in BLOCK_CACHE_RANKS:
        raise ValueError(f"{op}: argument '{name}': expected rank in {BLOCK_CACHE_RANKS} ([num_blocks, "
                         f"*block_shape]), got rank {len(shape)} (shape {tuple(shape)})")
    if tuple(shape) != tuple(ref_shape):
        raise ValueError(f"{op}: argument '{name}': expected shape {tuple(ref_shape)} (same as 'key_caches[0]'), "
                         f"got {tuple(shape)}")


def _names(k_count, v_count):
    return [f"key_caches[{i}]" for i in range(k_count)] + [f"value_caches[{i}]" for i in range(v_count)]


def _check_shapes(k_shapes, v_shapes):
    shapes = tuple(k_shapes) + tuple(v_shapes)
    for name, shp in zip(_names(len(k_shapes), len(v_shapes)), shapes):
        _check_cache_shape(name, shp, shapes[0])


def _check_dtypes(k_dtypes, v_dtypes):
    dtypes = tuple(k_dtypes) + tuple(v_dtypes)
    for name, dt in zip(_names(len(k_dtypes), len(v_dtypes)), dtypes):
        _check_cache_dtype(name, dt, dtypes[0])


def _check_static(k_shapes, k_dtypes, v_shapes, v_dtypes, m_shape, m_dtype):
    """Shape/dtype checks of L layers (PyNative); returns num_blocks (0 if L = 0)."""
    _check_counts(len(k_shapes), len(v_shapes), m_shape, m_dtype)
    if not k_shapes:
        return 0
    _check_dtypes(k_dtypes, v_dtypes)
    _check_shapes(k_shapes, v_shapes)
    return k_shapes[0][0]


# Graph mode: one constexpr for the counts and block_mapping; the 2L cache checks run in the infer step.
_check_counts_graph = constexpr(_check_counts)
_Prim = prim_class(SPEC)
#: PyNative branch (fast path when available; the 2L caches are launched flattened): static check ->
#: num_blocks; every cache a distinct tensor; no layers or no pairs launches nothing.
_EAGER = EagerOp(SPEC, _check_static, index_checks=(BlockPairs("block_mapping", None, None),),
                 skip_if_empty=("key_caches", "block_mapping"), distinct=("key_caches", "value_caches"))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'copy_blocks', ('key_caches[]', 'value_caches[]', 'block_mapping')

def copy_blocks(key_caches, value_caches, block_mapping):
    """Copy block ``src`` to block ``dst`` of every layer's key and value cache, in place, for each row
    ``(src, dst)`` of ``block_mapping``, in one kernel launch for all layers.

    vLLM ``copy_blocks`` (copy-on-write of blocks shared by forked sequences), except that overlapping rows
    are defined: they apply in order, as a Python loop over them would (docs/ops-copy.md, "Semantics").

    Args:
        key_caches (list | tuple of Tensor or Parameter): L caches, one per layer, each
            ``[num_blocks, *block_shape]`` (any layout: a block is everything after dim 0; rank 2 to 6); float16,
            bfloat16, float32 or int8; contiguous, distinct; written in place. In a graph each a whole Parameter: a
            ``ParameterTuple`` attribute of the Cell (or a list built in ``@ms.jit``).
        value_caches (list | tuple of Tensor or Parameter): L caches, shape and dtype of ``key_caches[0]``; written
            in place (in a graph each a whole Parameter).
        block_mapping (Tensor): ``[n, 2]`` int32 or int64, rows ``(src, dst)`` with ``0 <= src, dst <
            num_blocks``. ``n = 0`` and ``L = 0`` are no-ops.

    Returns:
        None: the caches are written in place; in a graph the writes are ordered before later reads of them.

    Raises:
        TypeError: caches not in a list or tuple; a non-Tensor element; mixed or unsupported dtypes; in a
            graph, a cache that is not a whole Parameter.
        ValueError: different numbers of key and value caches; differing shapes; ``block_mapping`` not
            ``[n, 2]``; in PyNative a block id out of range, a non-contiguous cache, memory shared between two
            caches or between a cache and ``block_mapping``.
        RuntimeError: in a graph, at launch: caches sharing memory (cpu, sim; nothing written), a kernel
            failure. Per mode and backend: docs/ops-copy.md, "Errors".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(key_caches), F.typeof(value_caches),
                          F.typeof(block_mapping))
        _check_counts_graph(len(key_caches), len(value_caches), block_mapping.shape, block_mapping.dtype)
        if len(key_caches) > 0:
            _get_cache_prim(_Prim)(graph_backend(), (len(key_caches), len(value_caches)))(
                *key_caches, *value_caches, block_mapping)
    else:
        _EAGER(_backend.get_backend(), (), key_caches, value_caches, block_mapping)
    return None
