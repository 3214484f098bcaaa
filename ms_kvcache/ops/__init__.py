"""Public operators, one module per op (the module name is the op's snake_case name)."""
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache

__all__ = ["reshape_and_cache"]

# fused RoPE-write family (issue #6)
from ms_kvcache.ops.rope_reshape_and_cache import rope_reshape_and_cache  # noqa: E402
from ms_kvcache.ops.rope_reshape_and_cache_merged import rope_reshape_and_cache_merged  # noqa: E402
from ms_kvcache.ops.rope_concat_and_cache_mla import rope_concat_and_cache_mla  # noqa: E402
from ms_kvcache.ops.rerope_cached_keys import rerope_cached_keys  # noqa: E402
from ms_kvcache.ops.build_cos_sin_cache import build_cos_sin_cache  # noqa: E402

__all__ += ["rope_reshape_and_cache", "rope_reshape_and_cache_merged", "rope_concat_and_cache_mla", "rerope_cached_keys",
            "build_cos_sin_cache"]
