"""OpSpecs of the multi-layer transfer family (docs/ops-transfer.md). The shape / dtype checks of the
primitive's infer step are the wrappers' (ms_kvcache/ops/multi_layer_*_transfer.py attach them)."""
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS, DIRECTION_CODES, DIRECTIONS, KVCacheFormat
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, AttrSpec, OpSpec, TensorSpec, register

__all__ = ["MULTI_LAYER_KV_TRANSFER", "MULTI_LAYER_BLOCK_TRANSFER", "transfer_attrs"]


def transfer_attrs(direction, cache_layout):
    """The AttrSpecs of a multi-layer transfer (with or without scale caches), OpDef order: kv_format,
    direction, cache_layout (defaults given), num_layers, aiv_num."""
    return (
        AttrSpec("kv_format", "int", int(KVCacheFormat.MERGED_KV), tuple(int(f) for f in KVCacheFormat)),
        AttrSpec("direction", "str", direction, DIRECTIONS, DIRECTION_CODES),
        AttrSpec("cache_layout", "str", cache_layout, CACHE_LAYOUTS, CACHE_LAYOUT_CODES),
        AttrSpec("num_layers", "int", 1),
        AttrSpec("aiv_num", "int", 0),
    )


MULTI_LAYER_KV_TRANSFER = register(OpSpec(
    name="multi_layer_kv_transfer",
    op_type="MskvMultiLayerKvTransfer",
    inputs=(
        TensorSpec("buffer", "T", (1, 4), inplace_if=("direction", "d2h")),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("kv_caches", "T", (3, 4, 5), dynamic=True, inplace_if=("direction", "h2d")),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=transfer_attrs("d2h", "BSND"),
    doc="All layers' K/V rows of T tokens between paged caches and one contiguous buffer.",
))

MULTI_LAYER_BLOCK_TRANSFER = register(OpSpec(
    name="multi_layer_block_transfer",
    op_type="MskvMultiLayerBlockTransfer",
    inputs=(
        TensorSpec("block_ids", "S", (1,)),
        TensorSpec("staging", "T", (1, 2, 3, 4, 5), inplace=True, optional=True),
        TensorSpec("host_blocks", "T", (4, 5), dynamic=True, inplace_if=("direction", "d2h")),
        TensorSpec("kv_caches", "T", (3, 4, 5), dynamic=True, inplace_if=("direction", "h2d")),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=transfer_attrs("h2d", "BNSD"),
    doc="Whole blocks of every layer between per-layer paged caches and token-major host blocks.",
))
