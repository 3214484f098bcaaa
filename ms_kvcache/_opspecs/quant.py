"""OpSpecs of the quantizing variants the public writes and transfers route to (float K/V into int8 /
float8 caches, or caches moved with their float32 scale caches; docs/quantization.md). Each covers static
and dynamic scales (attribute ``quant_mode``) with its scale inputs optional; the GQA writes also cover
the merged cache (attribute ``kv_format``: 1 MERGED_KV, 2 SEPARATE_KV)."""
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS, QUANT_MODE_CODES, QUANT_MODES, KVCacheFormat
from ms_kvcache._opspecs.rope import COS_SIN_RULE, out_like
from ms_kvcache._opspecs.transfer import transfer_attrs
from ms_kvcache._spec import FLOAT_DTYPES, INDEX_DTYPES, QUANT_CACHE_DTYPES, AttrSpec, OpSpec, TensorSpec, register

__all__ = ["RESHAPE_AND_CACHE_QUANT", "CONCAT_AND_CACHE_MLA_QUANT", "ROPE_RESHAPE_AND_CACHE_QUANT",
           "ROPE_CONCAT_AND_CACHE_MLA_QUANT", "MULTI_LAYER_KV_TRANSFER_QUANT", "MULTI_LAYER_BLOCK_TRANSFER_QUANT"]

_MERGED = int(KVCacheFormat.MERGED_KV)
_SEPARATE = int(KVCacheFormat.SEPARATE_KV)

RESHAPE_AND_CACHE_QUANT = register(OpSpec(
    name="reshape_and_cache_quant",
    op_type="MskvReshapeAndCacheQuant",
    inputs=(
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("key_cache", "Q", (4, 5), inplace=True),
        TensorSpec("value_cache", "Q", (4,), optional=True, inplace_if=("kv_format", _SEPARATE)),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("k_scale", "F", (0, 1, 2), optional=True),
        TensorSpec("v_scale", "F", (0, 1, 2), optional=True),
        TensorSpec("k_offset", "F", (0, 1, 2), optional=True),
        TensorSpec("v_offset", "F", (0, 1, 2), optional=True),
        TensorSpec("k_scale_cache", "F", (4,), optional=True, inplace_if=("quant_mode", "dynamic")),
        TensorSpec("v_scale_cache", "F", (4,), optional=True, inplace_if=("quant_mode", "dynamic")),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "Q": QUANT_CACHE_DTYPES, "S": INDEX_DTYPES, "F": ("float32",)},
    attrs=(
        AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),  # the kernel reads the int code
        AttrSpec("kv_format", "int", _SEPARATE, (_MERGED, _SEPARATE)),
        AttrSpec("quant_mode", "str", "static", QUANT_MODES, QUANT_MODE_CODES),
    ),
    doc="reshape_and_cache(_merged) quantizing float K/V into int8 / float8 caches (static or dynamic scales).",
))

CONCAT_AND_CACHE_MLA_QUANT = register(OpSpec(
    name="concat_and_cache_mla_quant",
    op_type="MskvConcatAndCacheMlaQuant",
    inputs=(
        TensorSpec("kv_c", "T", (2,)),
        TensorSpec("k_pe", "T", (2, 3)),
        TensorSpec("kv_c_cache", "Q", (3,), inplace=True),
        TensorSpec("k_pe_cache", "Q", (3,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("kv_c_scale", "F", (0, 1), optional=True),
        TensorSpec("k_pe_scale", "F", (0, 1), optional=True),
        TensorSpec("kv_c_offset", "F", (0, 1), optional=True),
        TensorSpec("k_pe_offset", "F", (0, 1), optional=True),
        TensorSpec("kv_c_scale_cache", "F", (3,), optional=True, inplace_if=("quant_mode", "dynamic")),
        TensorSpec("k_pe_scale_cache", "F", (3,), optional=True, inplace_if=("quant_mode", "dynamic")),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "Q": QUANT_CACHE_DTYPES, "S": INDEX_DTYPES, "F": ("float32",)},
    attrs=(AttrSpec("quant_mode", "str", "static", QUANT_MODES, QUANT_MODE_CODES),),
    doc="concat_and_cache_mla quantizing float kv_c / k_pe into int8 / float8 caches (static or dynamic scales).",
))

ROPE_RESHAPE_AND_CACHE_QUANT = register(OpSpec(
    name="rope_reshape_and_cache_quant",
    op_type="MskvRopeReshapeAndCacheQuant",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("query", "T", (2, 3)),
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("key_cache", "Q", (4, 5), inplace=True),
        TensorSpec("value_cache", "Q", (4,), optional=True, inplace_if=("kv_format", _SEPARATE)),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("k_scale", "F", (0, 1, 2), optional=True),
        TensorSpec("v_scale", "F", (0, 1, 2), optional=True),
        TensorSpec("k_offset", "F", (0, 1, 2), optional=True),
        TensorSpec("v_offset", "F", (0, 1, 2), optional=True),
        TensorSpec("k_scale_cache", "F", (4,), optional=True, inplace_if=("quant_mode", "dynamic")),
        TensorSpec("v_scale_cache", "F", (4,), optional=True, inplace_if=("quant_mode", "dynamic")),
    ),
    outputs=(
        TensorSpec("query_out", "T", (2, 3)),
        TensorSpec("key_out", "T", (2, 3)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES, "Q": QUANT_CACHE_DTYPES,
                  "F": ("float32",)},
    group_rules=COS_SIN_RULE,
    attrs=(
        AttrSpec("is_neox_style", "bool", True, (True, False)),
        AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),  # the kernel reads the int code
        AttrSpec("kv_format", "int", _SEPARATE, (_MERGED, _SEPARATE)),
        AttrSpec("quant_mode", "str", "static", QUANT_MODES, QUANT_MODE_CODES),
    ),
    doc="rope_reshape_and_cache(_merged) quantizing the rotated key and the value into int8 / float8 caches.",
    extra={"out_shape": out_like(1, 2), "out_dtype": out_like(1, 2)},
))

ROPE_CONCAT_AND_CACHE_MLA_QUANT = register(OpSpec(
    name="rope_concat_and_cache_mla_quant",
    op_type="MskvRopeConcatAndCacheMlaQuant",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("q_pe", "T", (2, 3)),
        TensorSpec("k_pe", "T", (2, 3)),
        TensorSpec("kv_c", "T", (2,)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("kv_c_cache", "Q", (3,), inplace=True),
        TensorSpec("k_pe_cache", "Q", (3,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("kv_c_norm_weight", "W", (1,), optional=True),
        TensorSpec("kv_c_scale", "F", (0, 1), optional=True),
        TensorSpec("k_pe_scale", "F", (0, 1), optional=True),
        TensorSpec("kv_c_offset", "F", (0, 1), optional=True),
        TensorSpec("k_pe_offset", "F", (0, 1), optional=True),
        TensorSpec("kv_c_scale_cache", "F", (3,), optional=True, inplace_if=("quant_mode", "dynamic")),
        TensorSpec("k_pe_scale_cache", "F", (3,), optional=True, inplace_if=("quant_mode", "dynamic")),
    ),
    outputs=(
        TensorSpec("q_pe_out", "T", (2, 3)),
        TensorSpec("k_pe_out", "T", (2, 3)),
        TensorSpec("kv_c_out", "T", (2,)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "W": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES,
                  "Q": QUANT_CACHE_DTYPES, "F": ("float32",)},
    group_rules={"C": ("float32", "=T"), "W": ("float32", "=T")},
    attrs=(
        AttrSpec("is_neox_style", "bool", False, (True, False)),
        AttrSpec("epsilon", "float", 1e-6),
        AttrSpec("quant_mode", "str", "static", QUANT_MODES, QUANT_MODE_CODES),
    ),
    doc="rope_concat_and_cache_mla quantizing kv_c_out and k_pe_out into int8 / float8 caches.",
    extra={"out_shape": out_like(1, 2, 3), "out_dtype": out_like(1, 2, 3)},
))

MULTI_LAYER_KV_TRANSFER_QUANT = register(OpSpec(
    name="multi_layer_kv_transfer_quant",
    op_type="MskvMultiLayerKvTransferQuant",
    inputs=(
        TensorSpec("buffer", "Q", (1,), inplace_if=("direction", "d2h")),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("kv_caches", "Q", (3, 4, 5), dynamic=True, inplace_if=("direction", "h2d")),
        TensorSpec("scale_caches", "F", (3, 4), dynamic=True, inplace_if=("direction", "h2d")),
    ),
    dtype_groups={"Q": QUANT_CACHE_DTYPES, "S": INDEX_DTYPES, "F": ("float32",)},
    attrs=transfer_attrs("d2h", "BSND"),
    doc="multi_layer_kv_transfer of int8 / float8 caches with their float32 scale caches in one buffer.",
))

MULTI_LAYER_BLOCK_TRANSFER_QUANT = register(OpSpec(
    name="multi_layer_block_transfer_quant",
    op_type="MskvMultiLayerBlockTransferQuant",
    inputs=(
        TensorSpec("block_ids", "S", (1,)),
        TensorSpec("staging", "Q", (1, 2, 3, 4, 5), inplace=True, optional=True),
        TensorSpec("host_blocks", "Q", (4, 5), dynamic=True, inplace_if=("direction", "d2h")),
        TensorSpec("kv_caches", "Q", (3, 4, 5), dynamic=True, inplace_if=("direction", "h2d")),
        TensorSpec("scale_host_blocks", "F", (4,), dynamic=True, inplace_if=("direction", "d2h")),
        TensorSpec("scale_caches", "F", (3, 4), dynamic=True, inplace_if=("direction", "h2d")),
    ),
    dtype_groups={"Q": QUANT_CACHE_DTYPES, "S": INDEX_DTYPES, "F": ("float32",)},
    attrs=transfer_attrs("h2d", "BNSD"),
    doc="multi_layer_block_transfer of int8 / float8 caches with their float32 scale caches and host blocks.",
))
