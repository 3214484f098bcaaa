"""Public operators, one module per op (the module name is the op's snake_case name)."""
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache
from ms_kvcache.ops.reshape_and_cache_merged import reshape_and_cache_merged
from ms_kvcache.ops.concat_and_cache_mla import concat_and_cache_mla
from ms_kvcache.ops.copy_blocks import copy_blocks
from ms_kvcache.ops.swap_blocks import swap_blocks

__all__ = ["reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks"]
