"""Public operators, one module per op (the module name is the op's snake_case name)."""
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache

__all__ = ["reshape_and_cache"]
