"""Public operators, one module per op (the module name is the op's snake_case name)."""
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache
from ms_kvcache.ops.multi_layer_kv_transfer import multi_layer_kv_transfer, transfer_buffer_shape
from ms_kvcache.ops.multi_layer_block_transfer import multi_layer_block_transfer

__all__ = ["reshape_and_cache"]
__all__ += ["multi_layer_kv_transfer", "transfer_buffer_shape", "multi_layer_block_transfer"]
