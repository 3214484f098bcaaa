"""OpSpecs of the copy family: paged-cache writes, block copy and swap (docs/ops-copy.md)."""
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, AttrSpec, OpSpec, TensorSpec, register

__all__ = ["RESHAPE_AND_CACHE", "RESHAPE_AND_CACHE_MERGED", "CONCAT_AND_CACHE_MLA", "COPY_BLOCKS", "SWAP_BLOCKS",
           "BLOCK_CACHE_RANKS"]

#: Cache ranks accepted by the block copy ops: dim 0 is num_blocks, the rest is one block.
BLOCK_CACHE_RANKS = (2, 3, 4, 5, 6)

RESHAPE_AND_CACHE = register(OpSpec(
    name="reshape_and_cache",
    op_type="MskvReshapeAndCache",
    inputs=(
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("key_cache", "T", (4,), inplace=True),
        TensorSpec("value_cache", "T", (4,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=(AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),),
))

RESHAPE_AND_CACHE_MERGED = register(OpSpec(
    name="reshape_and_cache_merged",
    op_type="MskvReshapeAndCacheMerged",
    inputs=(
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("kv_cache", "T", (5,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=(AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),),
))

CONCAT_AND_CACHE_MLA = register(OpSpec(
    name="concat_and_cache_mla",
    op_type="MskvConcatAndCacheMla",
    inputs=(
        TensorSpec("kv_c", "T", (2,)),
        TensorSpec("k_pe", "T", (2, 3)),
        TensorSpec("kv_c_cache", "T", (3,), inplace=True),
        TensorSpec("k_pe_cache", "T", (3,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
))

#: The per-cache shape / dtype checks run in the primitive's infer step; the wrapper
#: (ms_kvcache/ops/copy_blocks.py) attaches them (``extra["infer_shape"]`` / ``["infer_dtype"]``).
COPY_BLOCKS = register(OpSpec(
    name="copy_blocks",
    op_type="MskvCopyBlocks",
    inputs=(
        TensorSpec("key_caches", "T", BLOCK_CACHE_RANKS, inplace=True, dynamic=True),
        TensorSpec("value_caches", "T", BLOCK_CACHE_RANKS, inplace=True, dynamic=True),
        TensorSpec("block_mapping", "S", (2,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
))

SWAP_BLOCKS = register(OpSpec(
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
))
