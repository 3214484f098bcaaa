"""Public operators, one module per op (the module name is the op's snake_case name). A writer routes
quantizing calls to its ``<op>_quant`` module (imported by the writer); the declarations (OpSpecs) are in
:mod:`ms_kvcache._opspecs`."""
# copy family
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache
from ms_kvcache.ops.reshape_and_cache_merged import reshape_and_cache_merged
from ms_kvcache.ops.concat_and_cache_mla import concat_and_cache_mla
from ms_kvcache.ops.copy_blocks import copy_blocks
from ms_kvcache.ops.swap_blocks import swap_blocks

# multi-layer transfer family
from ms_kvcache.ops.multi_layer_kv_transfer import multi_layer_kv_transfer, transfer_buffer_shape
from ms_kvcache.ops.multi_layer_block_transfer import multi_layer_block_transfer

# fused RoPE-write family
from ms_kvcache.ops.rope_reshape_and_cache import rope_reshape_and_cache
from ms_kvcache.ops.rope_reshape_and_cache_merged import rope_reshape_and_cache_merged
from ms_kvcache.ops.rope_concat_and_cache_mla import rope_concat_and_cache_mla
from ms_kvcache.ops.rerope_cached_keys import rerope_cached_keys
from ms_kvcache.ops.build_cos_sin_cache import build_cos_sin_cache

# quantized caches: the read-back helper (the writes above route to their <op>_quant modules)
from ms_kvcache.ops.dequantize_kv_cache import dequantize_kv_cache

__all__ = [
    "reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks",
    "multi_layer_kv_transfer", "transfer_buffer_shape", "multi_layer_block_transfer",
    "rope_reshape_and_cache", "rope_reshape_and_cache_merged", "rope_concat_and_cache_mla",
    "rerope_cached_keys", "build_cos_sin_cache", "dequantize_kv_cache",
]
