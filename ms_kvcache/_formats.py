"""KV-cache format enum shared by every op family."""
from enum import IntEnum

__all__ = ["KVCacheFormat", "CACHE_LAYOUTS", "CACHE_LAYOUT_CODES", "ND_CACHE_LAYOUTS", "ND_CACHE_LAYOUT_CODES",
           "NZ_C0", "DIRECTIONS", "DIRECTION_CODES", "QUANT_MODES", "QUANT_MODE_CODES"]

#: Layouts of one layer's paged cache. "BSND" = [num_blocks, block_size, num_kv_heads, head_size]
#: (vLLM "NHD", vllm-ascend, MindSpore); "BNSD" = [num_blocks, num_kv_heads, block_size, head_size]
#: (vLLM "HND"); "NZ" = FRACTAL_NZ [num_blocks, num_kv_heads * head_size // C0, block_size, C0] (what the
#: Ascend 310P paged attention reads; C0 in :data:`NZ_C0`, docs/ops-copy.md "NZ caches").
CACHE_LAYOUTS = ("BSND", "BNSD", "NZ")

#: The int each layout reaches the kernels as (``AttrSpec.codes``; the layout digit of the copy kernels'
#: tiling keys). C++: ``mskv_attr::kLayoutBSND`` / ``kLayoutBNSD`` / ``kLayoutNZ`` in op_host/mskv_attr_codes.h.
CACHE_LAYOUT_CODES = (("BSND", 0), ("BNSD", 1), ("NZ", 2))

#: The layouts of ops that take no NZ cache (rerope_cached_keys), with their codes.
ND_CACHE_LAYOUTS = ("BSND", "BNSD")
ND_CACHE_LAYOUT_CODES = (("BSND", 0), ("BNSD", 1))

#: C0 of an NZ cache per dtype: 32 bytes of elements (one fractal row of 16 x C0).
NZ_C0 = {"float16": 16, "bfloat16": 16, "int8": 32}

#: ``direction`` of the multi-layer transfers: device (cache) -> host (buffer) and back.
DIRECTIONS = ("d2h", "h2d")

#: The int each direction reaches the kernels as: the values of CANN's ``aclrtMemcpyKind``
#: (``ACL_MEMCPY_HOST_TO_DEVICE = 1``, ``ACL_MEMCPY_DEVICE_TO_HOST = 2``). C++: ``mskv_attr::kDirH2D`` /
#: ``kDirD2H``.
DIRECTION_CODES = (("h2d", 1), ("d2h", 2))

#: ``quant_mode`` of the quantized cache writes (docs/quantization.md): static scales (``k_scale`` ...) or
#: dynamic per-token scales written to scale caches (``k_scale_cache`` ...).
QUANT_MODES = ("static", "dynamic")

#: The int each quant_mode reaches the kernels as. C++: ``mskv_attr::kQuantSTATIC`` / ``kQuantDYNAMIC``.
QUANT_MODE_CODES = (("static", 0), ("dynamic", 1))


class KVCacheFormat(IntEnum):
    """How the KV cache of one layer is stored; values follow kvcache-ops for interoperability.

    - ``MERGED_KV = 1``: one tensor ``[2, num_blocks, block_size, num_kv_heads, head_size]`` per layer
      (K at index 0, V at index 1; vLLM 0.9 style).
    - ``SEPARATE_KV = 2``: ``(key_cache, value_cache)``, each ``[num_blocks, block_size, H, D]``.
    - ``MLA_KV = 3``: ``(kv_c_cache [nb, bs, kv_lora_rank], k_pe_cache [nb, bs, rope_dim])``
      (DeepSeek V2/V3 multi-head latent attention).
    - ``DSA_KV = 4``: the MLA planes plus the DeepSeek-V3.2 indexer key plane ``[nb, bs, index_head_dim]``.
    """

    MERGED_KV = 1
    SEPARATE_KV = 2
    MLA_KV = 3
    DSA_KV = 4


def planes_of(fmt):
    """Number of KV planes per layer (2, or 3 for DSA_KV)."""
    return 3 if fmt == KVCacheFormat.DSA_KV else 2


def tensors_per_layer(fmt):
    """Tensors per layer in ``kv_caches`` (1 for MERGED_KV, else the plane count)."""
    return 1 if fmt == KVCacheFormat.MERGED_KV else planes_of(fmt)
