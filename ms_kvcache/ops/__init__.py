"""Public operators, one module per op (the module name is the op's snake_case name)."""
# copy family (issue #2)
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache
from ms_kvcache.ops.reshape_and_cache_merged import reshape_and_cache_merged
from ms_kvcache.ops.concat_and_cache_mla import concat_and_cache_mla
from ms_kvcache.ops.copy_blocks import copy_blocks
from ms_kvcache.ops.swap_blocks import swap_blocks

# multi-layer transfer family (issue #5)
from ms_kvcache.ops.multi_layer_kv_transfer import multi_layer_kv_transfer, transfer_buffer_shape
from ms_kvcache.ops.multi_layer_block_transfer import multi_layer_block_transfer

# fused RoPE-write family (issue #6)
from ms_kvcache.ops.rope_reshape_and_cache import rope_reshape_and_cache
from ms_kvcache.ops.rope_reshape_and_cache_merged import rope_reshape_and_cache_merged
from ms_kvcache.ops.rope_concat_and_cache_mla import rope_concat_and_cache_mla
from ms_kvcache.ops.rerope_cached_keys import rerope_cached_keys
from ms_kvcache.ops.build_cos_sin_cache import build_cos_sin_cache

# quantized cache writes (issue #17): the variants the writers above route to, and the read-back helper
from ms_kvcache.ops import reshape_and_cache_quant, concat_and_cache_mla_quant  # noqa: F401  (register the specs)
from ms_kvcache.ops import rope_reshape_and_cache_quant, rope_concat_and_cache_mla_quant  # noqa: F401
from ms_kvcache.ops.dequantize_kv_cache import dequantize_kv_cache

__all__ = [
    "reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks",
    "multi_layer_kv_transfer", "transfer_buffer_shape", "multi_layer_block_transfer",
    "rope_reshape_and_cache", "rope_reshape_and_cache_merged", "rope_concat_and_cache_mla",
    "rerope_cached_keys", "build_cos_sin_cache", "dequantize_kv_cache",
]
