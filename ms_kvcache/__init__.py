"""ms_kvcache: KV-cache operators for MindSpore (paged-cache writes, block copy/swap, multi-layer KV
transfer and its layer-wise form that overlaps the forward pass, fused RoPE-write), with three backends:
native CPU kernels ("cpu"), the AscendC kernels run on an in-repo AscendC CPU emulation ("sim"), and the
installed CANN custom-op package ("ascend").

``import ms_kvcache`` is light: the ops (and with them MindSpore) are imported at the first use of one
of the names below (``ms_kvcache.reshape_and_cache``, ``from ms_kvcache import ...``), so the command line
(``ms-kvcache --help``) starts without MindSpore.
"""
import importlib as _importlib

__version__ = "0.1.0"

from ms_kvcache import _opspecs  # noqa: F401  (declares every op: fills ms_kvcache._spec's registry; no MindSpore)
from ms_kvcache import _backend
from ms_kvcache._backend import BACKENDS, get_backend, set_backend
from ms_kvcache._backends import ascend as _ascend  # (prepends a shipped CANN vendor folder to ASCEND_CUSTOM_OPP_PATH)
from ms_kvcache._backends import cpu as _cpu_backend, sim as _sim_backend
from ms_kvcache._formats import CACHE_LAYOUTS, KVCacheFormat

for _name, _module in (("cpu", _cpu_backend), ("sim", _sim_backend), ("ascend", _ascend)):
    _backend.register_backend_module(_name, _module)  # the lower layers never import a backend module
del _name, _module

#: The public ops, imported from ms_kvcache.ops on first use (keep equal to ms_kvcache.ops.__all__;
#: tests/test_cli.py checks it).
_OPS = ("reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks",
        "multi_layer_kv_transfer", "transfer_buffer_shape", "multi_layer_block_transfer",
        "rope_reshape_and_cache", "rope_reshape_and_cache_merged", "rope_concat_and_cache_mla",
        "rerope_cached_keys", "build_cos_sin_cache", "dequantize_kv_cache")
_LAZY = {**{name: "ms_kvcache.ops" for name in _OPS},
         "alloc_host_buffer": "ms_kvcache._host_memory", "synchronize": "ms_kvcache._host_memory",
         "LayerwiseTransfer": "ms_kvcache.ops.layerwise_transfer",
         "nd_to_nz": "ms_kvcache._nz", "nz_to_nd": "ms_kvcache._nz"}

__all__ = ["__version__", "BACKENDS", "get_backend", "set_backend", "CACHE_LAYOUTS", "KVCacheFormat"] + list(_OPS)
__all__ += ["alloc_host_buffer", "synchronize", "LayerwiseTransfer", "nd_to_nz", "nz_to_nd"]


def __getattr__(name):
    where = _LAZY.get(name)
    if where is None:
        if name.startswith("__"):
            raise AttributeError(f"module 'ms_kvcache' has no attribute {name!r}")
        try:  # a submodule (ms_kvcache.ops, ms_kvcache._custom, ...), as when the ops were imported eagerly
            return _importlib.import_module(f"ms_kvcache.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"ms_kvcache.{name}":
                raise
            raise AttributeError(f"module 'ms_kvcache' has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(where), name)
    globals()[name] = value  # later lookups (and MindSpore's graph parser) see a plain module attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
