"""OpSpecs of the fused RoPE-write family (docs/ops-rope.md)."""
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS, ND_CACHE_LAYOUT_CODES, ND_CACHE_LAYOUTS
from ms_kvcache._spec import FLOAT_DTYPES, INDEX_DTYPES, AttrSpec, OpSpec, TensorSpec, register

__all__ = ["ROPE_RESHAPE_AND_CACHE", "ROPE_RESHAPE_AND_CACHE_MERGED", "ROPE_CONCAT_AND_CACHE_MLA", "REROPE_CACHED_KEYS",
           "COS_SIN_RULE", "out_like"]

#: group rule of OpSpec: the cos_sin_cache group "C" is float32 or the data group "T"'s dtype.
COS_SIN_RULE = {"C": ("float32", "=T")}


def out_like(*idx):
    """out_shape / out_dtype callables of ops.Custom: the outputs copy inputs ``idx``'s shape/dtype."""
    def f(*args):
        return tuple(args[i] for i in idx)
    return f


ROPE_RESHAPE_AND_CACHE = register(OpSpec(
    name="rope_reshape_and_cache",
    op_type="MskvRopeReshapeAndCache",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("query", "T", (2, 3)),
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("key_cache", "T", (4,), inplace=True),
        TensorSpec("value_cache", "T", (4,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    outputs=(
        TensorSpec("query_out", "T", (2, 3)),
        TensorSpec("key_out", "T", (2, 3)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES},
    group_rules=COS_SIN_RULE,
    attrs=(
        AttrSpec("is_neox_style", "bool", True, (True, False)),
        AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),
    ),
    extra={"out_shape": out_like(1, 2), "out_dtype": out_like(1, 2)},
))

ROPE_RESHAPE_AND_CACHE_MERGED = register(OpSpec(
    name="rope_reshape_and_cache_merged",
    op_type="MskvRopeReshapeAndCacheMerged",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("query", "T", (2, 3)),
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("kv_cache", "T", (5,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    outputs=(
        TensorSpec("query_out", "T", (2, 3)),
        TensorSpec("key_out", "T", (2, 3)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES},
    group_rules=COS_SIN_RULE,
    attrs=(
        AttrSpec("is_neox_style", "bool", True, (True, False)),
        AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),
    ),
    extra={"out_shape": out_like(1, 2), "out_dtype": out_like(1, 2)},
))

ROPE_CONCAT_AND_CACHE_MLA = register(OpSpec(
    name="rope_concat_and_cache_mla",
    op_type="MskvRopeConcatAndCacheMla",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("q_pe", "T", (2, 3)),
        TensorSpec("k_pe", "T", (2, 3)),
        TensorSpec("kv_c", "T", (2,)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("kv_c_cache", "T", (3,), inplace=True),
        TensorSpec("k_pe_cache", "T", (3,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
        # Absent = no RMSNorm. The cpu backend receives an empty float32 [0] tensor in its place;
        # an AscendC OpDef declares it OPTIONAL.
        TensorSpec("kv_c_norm_weight", "W", (1,), optional=True),
    ),
    outputs=(
        TensorSpec("q_pe_out", "T", (2, 3)),
        TensorSpec("k_pe_out", "T", (2, 3)),
        TensorSpec("kv_c_out", "T", (2,)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "W": FLOAT_DTYPES, "P": INDEX_DTYPES,
                  "S": INDEX_DTYPES},
    group_rules={"C": ("float32", "=T"), "W": ("float32", "=T")},
    attrs=(
        AttrSpec("is_neox_style", "bool", False, (True, False)),
        AttrSpec("epsilon", "float", 1e-6),
    ),
    extra={"out_shape": out_like(1, 2, 3), "out_dtype": out_like(1, 2, 3)},
))

REROPE_CACHED_KEYS = register(OpSpec(
    name="rerope_cached_keys",
    op_type="MskvReropeCachedKeys",
    inputs=(
        TensorSpec("key_cache", "T", (3, 4), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("old_positions", "P", (1,)),
        TensorSpec("new_positions", "P", (1,)),
        TensorSpec("cos_sin_cache", "C", (2,)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES},
    group_rules=COS_SIN_RULE,
    attrs=(
        AttrSpec("is_neox_style", "bool", True, (True, False)),
        # no NZ: the op re-rotates cached key heads in place, NZ caches are refused (ops/rerope_cached_keys.py)
        AttrSpec("cache_layout", "str", "BSND", ND_CACHE_LAYOUTS, ND_CACHE_LAYOUT_CODES),
    ),
))
