"""ms_kvcache: KV-cache operators for MindSpore (paged-cache writes, block copy/swap, multi-layer KV
transfer, fused RoPE-write), with three backends: native CPU kernels ("cpu"), the AscendC kernels run
on an in-repo AscendC CPU emulation ("sim"), and the installed CANN custom-op package ("ascend").
"""
__version__ = "0.1.0"

from ms_kvcache._backend import BACKENDS, get_backend, set_backend
from ms_kvcache._backends import ascend as _ascend  # noqa: F401  (prepends a shipped CANN vendor folder to ASCEND_CUSTOM_OPP_PATH)
from ms_kvcache._formats import CACHE_LAYOUTS, KVCacheFormat
from ms_kvcache.ops import *  # noqa: F401,F403
from ms_kvcache.ops import __all__ as _ops_all
from ms_kvcache._host_memory import alloc_host_buffer, synchronize

__all__ = ["__version__", "BACKENDS", "get_backend", "set_backend", "CACHE_LAYOUTS", "KVCacheFormat"] + list(_ops_all)
__all__ += ["alloc_host_buffer", "synchronize"]
