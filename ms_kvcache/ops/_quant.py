"""Shared pieces of the quantized KV-cache writes (docs/quantization.md).

The public writers (``reshape_and_cache``, ``reshape_and_cache_merged``, ``concat_and_cache_mla`` and the
fused RoPE writers) route to their quantizing variants (``reshape_and_cache_quant``,
``concat_and_cache_mla_quant``, ``rope_reshape_and_cache_quant``, ``rope_concat_and_cache_mla_quant``)
when quantization arguments are given or when float data meets an int8 / float8 cache. Each variant is
one op covering static and dynamic scales (attribute ``quant_mode``) with its scale inputs optional;
``reshape_and_cache_quant`` and ``rope_reshape_and_cache_quant`` also cover the merged cache
(attribute ``kv_format``, ``KVCacheFormat`` value 1 or 2).

Conventions of every variant:

- an absent optional input (a static scale in dynamic mode, a scale cache in static mode, an offset,
  the value cache of a merged layout) reaches the op as an empty ``[0]`` tensor, and the checks treat a
  ``[0]`` shape as absent (the AscendC OPTIONAL-input convention, docs/design.md);
- the scale caches are the data cache's plane with ``head_size`` 1: ``[nb, bs, H, 1]`` (BSND),
  ``[nb, H, bs, 1]`` (BNSD), ``[nb, bs, 1]`` (an MLA plane); float32;
- the messages name the public op the user called (``reshape_and_cache: argument 'k_scale': ...``).
"""
import math

import numpy as np
from mindspore import Tensor
from mindspore.ops.primitive import constexpr

from ms_kvcache import _validate as V
from ms_kvcache._formats import CACHE_LAYOUTS, QUANT_MODE_CODES, QUANT_MODES, KVCacheFormat
from ms_kvcache._spec import FLOAT_DTYPES, FP8_DTYPES, INDEX_DTYPES, QUANT_CACHE_DTYPES, dtype_name, kernel_pending

__all__ = [
    "MODES", "BACKENDS", "MERGED", "SEPARATE", "absent", "mode_of", "graph_mode_of", "require_backend",
    "check_attrs", "check_data_dtypes", "check_cache_dtype", "check_index_dtype", "check_plane_quant",
    "check_pairs", "ScaleValues", "PublicSlots", "PublicPositions", "renamed", "NO_F32", "routes",
    "routes_graph", "code_max", "present", "quant_prim", "scale_checks", "check_kernel_cache",
]

#: ``quant_mode`` values: static scales (``k_scale`` ...) or dynamic per-token scales (``k_scale_cache``);
#: int-coded for the kernels (``QUANT_MODE_CODES``: static 0, dynamic 1).
MODES = QUANT_MODES
MODE_CODES = QUANT_MODE_CODES
#: Backends that have the kernel of a quantizing op whose OpSpec is marked ``extra["ascend_kernel"]``
#: (kernel pending). No quantizing OpSpec carries the marker today (all six have their AscendC kernels and
#: run on cpu, sim and ascend; tests/test_kv_quant.py::test_pending_specs_refused_by_aot_and_shims); the
#: marker and :func:`require_backend` stay for an op added before its kernel.
BACKENDS = ("cpu",)
MERGED = int(KVCacheFormat.MERGED_KV)
SEPARATE = int(KVCacheFormat.SEPARATE_KV)
#: A reason to put in a quantizing OpSpec's ``extra["ascend_kernel"]`` (ms_kvcache._spec.kernel_pending)
#: while its AscendC kernel is not written (no OpSpec uses it today).
PENDING = "quantized cache writes: the AscendC kernel of this quantizing op is not written yet (issue 17, phase 2)"
#: Largest finite code value per cache dtype (the dynamic scale is max|x| / code_max).
_CODE_MAX = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
#: Stand-in for an absent float32 input (eager and graph code).
NO_F32 = Tensor(np.zeros((0,), np.float32))


def present(scale, scale2, offset, offset2, scale_cache, scale_cache2):
    """The six quantization arguments of a quantizing write (the two planes' scales, offsets and scale
    caches) with None replaced by the empty ``[0]`` float32 stand-in (:data:`NO_F32`); eager and graph
    code (each ``is None`` folds to a constant when compiled)."""
    return (NO_F32 if scale is None else scale, NO_F32 if scale2 is None else scale2,
            NO_F32 if offset is None else offset, NO_F32 if offset2 is None else offset2,
            NO_F32 if scale_cache is None else scale_cache, NO_F32 if scale_cache2 is None else scale_cache2)


def quant_prim(spec, public_names):
    """``prim_class(spec)`` whose graph-mode messages (not-a-Parameter, aliasing) name the public op and
    argument: ``public_names(attrs) -> (public op name, {internal argument: public argument})``."""
    from ms_kvcache._custom import prim_class

    prim = prim_class(spec)
    prim.public_names = staticmethod(public_names)
    return prim


def scale_checks(scale, scale2, offset, offset2):
    """The EagerOp value checks of the two planes' static scales (finite, > 0) and offsets (finite)."""
    return (ScaleValues(scale, True), ScaleValues(scale2, True), ScaleValues(offset, False),
            ScaleValues(offset2, False))


def code_max(cache_dtype):
    """Largest finite code of a quantized cache dtype (127, 448 or 57344)."""
    return _CODE_MAX[dtype_name(cache_dtype)]


def absent(shape):
    """True for an input that was not given: None or the empty ``[0]`` stand-in."""
    return shape is None or tuple(shape) == (0,)


def mode_of(*scale_caches):
    """"dynamic" if one of the scale caches is given, else "static"."""
    return "dynamic" if any(c is not None for c in scale_caches) else "static"


@constexpr
def graph_mode_of(no_cache_0, no_cache_1):
    """:func:`mode_of` for graph code (arguments: ``x is None`` of the two scale caches)."""
    return "static" if (no_cache_0 and no_cache_1) else "dynamic"


def require_backend(op, backend, spec=None):
    """Returns ``backend``. An op whose ``spec`` has its AscendC kernel (no ``extra["ascend_kernel"]``
    marker: every quantizing op today) runs on every backend; one marked pending (or no ``spec``) raises
    NotImplementedError on a backend outside :data:`BACKENDS`, naming the op and the marker's reason."""
    reason = kernel_pending(spec) if spec is not None else "no OpSpec given"
    if not reason:
        return backend
    if backend not in BACKENDS:
        raise NotImplementedError(
            f"{op}: quantized cache writes (int8 / float8 caches, k_scale / k_scale_cache arguments): no "
            f"kernel on backend {backend!r} (its OpSpec is marked as having no AscendC kernel: {reason}; "
            f"implemented on: {', '.join(BACKENDS)}); use ms_kvcache.set_backend('cpu')")
    return backend


def check_kernel_cache(op, backend, name, cache_dtype):
    """TypeError for a float8 cache on an AscendC backend (sim, ascend): the official AscendC headers of
    Atlas A2/A3 (dav-c220) and Ascend310P (dav-m200) have no Cast to fp8_e4m3fn_t / fp8_e5m2_t, so the
    kernels quantize into int8 caches only (the cpu backend has float8)."""
    if backend == "cpu":  # (every call of a quantizing write: skip the dtype name on the cpu backend)
        return backend
    d = dtype_name(cache_dtype)
    if d in FP8_DTYPES:
        raise TypeError(f"{op}: argument '{name}': expected dtype int8 on backend {backend!r} (float8 caches have no "
                        f"AscendC kernel on Atlas A2/A3 or Ascend310P: their official AscendC headers have no Cast to "
                        f"fp8; use an int8 cache, or the cpu backend), got {d}")
    return backend


def routes(data, cache, *quant_args):
    """PyNative: whether a public writer goes to its quantizing variant - a quantization argument is
    given, or float ``data`` meets an int8 / float8 ``cache`` (the variant then says which arguments
    are missing). Cheap: identity tests only, on the plain path ~1 us."""
    for a in quant_args:
        if a is not None:
            return True
    cd = getattr(cache, "dtype", None)  # a non-Tensor argument: the plain path reports it
    return cd is not None and cd is not getattr(data, "dtype", None) and _is_quant_cache(cd)


def _is_quant_cache(d):
    import mindspore as ms

    return d is ms.int8 or d is ms.float8_e4m3fn or d is ms.float8_e5m2


@constexpr
def routes_graph(data_dtype, cache_dtype, n0, n1, n2, n3, n4, n5):
    """:func:`routes` for graph code: ``n0..n5`` are ``x is None`` of the six quantization arguments."""
    if not (n0 and n1 and n2 and n3 and n4 and n5):
        return True
    return dtype_name(cache_dtype) in QUANT_CACHE_DTYPES and dtype_name(data_dtype) != dtype_name(cache_dtype)


def renamed(exc, internal, public):
    """``exc`` with a message starting ``<internal>:`` re-prefixed ``<public>:`` (the generic checks of
    :class:`ms_kvcache._eager.EagerOp` and the sim backend's tiling check name the variant op; the user
    called the public one). A :class:`ms_kvcache.sim.TilingRejectedError` keeps its class and attributes,
    its ``op`` becoming ``public``."""
    msg = str(exc)
    if not msg.startswith(internal + ":"):
        return exc
    text = public + msg[len(internal):]
    if type(exc) in (TypeError, ValueError):
        return type(exc)(text)
    if getattr(exc, "op", None) == internal and hasattr(exc, "emulation_message"):  # sim.TilingRejectedError
        return type(exc)(text, public, exc.op_type, exc.soc, exc.rule, exc.reason, exc.emulation_message)
    return exc


# ---------------------------------------------------------------------------------------------- checks
def check_attrs(op, cache_layout=None, quant_mode=None, kv_format=None):
    if cache_layout is not None and cache_layout not in CACHE_LAYOUTS:
        raise ValueError(f"{op}: argument 'cache_layout': expected one of {CACHE_LAYOUTS}, got {cache_layout!r}")
    if quant_mode is not None and quant_mode not in MODES:
        raise ValueError(f"{op}: argument 'quant_mode': expected one of {MODES}, got {quant_mode!r}")
    if kv_format is not None and kv_format not in (MERGED, SEPARATE):
        raise ValueError(f"{op}: argument 'kv_format': expected {MERGED} (MERGED_KV) or {SEPARATE} (SEPARATE_KV), "
                         f"got {kv_format!r}")


def check_data_dtypes(op, named):
    """The float inputs (``{name: dtype}``, first entry first): float16 / bfloat16 / float32, all one dtype."""
    first = None
    for name, d in named.items():
        d = dtype_name(d)
        if d not in FLOAT_DTYPES:
            raise TypeError(f"{op}: argument '{name}': expected dtype in {FLOAT_DTYPES} for a quantized cache write "
                            f"(the op quantizes float data into int8 / float8 codes), got {d}")
        if first is None:
            first = (name, d)
        elif d != first[1]:
            raise TypeError(f"{op}: argument '{name}': expected dtype {first[1]} (same as '{first[0]}'), got {d}")
    return first[1]


def check_cache_dtype(op, named):
    """Quantized caches (``{name: dtype}``): int8, float8_e4m3fn or float8_e5m2, all one dtype."""
    first = None
    for name, d in named.items():
        d = dtype_name(d)
        if d not in QUANT_CACHE_DTYPES:
            why = "" if d not in ("hifloat8",) else " (hifloat8 has no quantization rule here)"
            raise TypeError(f"{op}: argument '{name}': expected dtype in {QUANT_CACHE_DTYPES} when quantizing (scales "
                            f"given, or float data into a non-float cache){why}, got {d}")
        if first is None:
            first = (name, d)
        elif d != first[1]:
            raise TypeError(f"{op}: argument '{name}': expected dtype {first[1]} (same as '{first[0]}'), got {d}")
    return first[1]


def check_index_dtype(op, name, shape, dtype, rank=1):
    d = dtype_name(dtype)
    if d not in INDEX_DTYPES:
        raise TypeError(f"{op}: argument '{name}': expected dtype in {INDEX_DTYPES}, got {d}")
    if len(shape) != rank:
        raise ValueError(f"{op}: argument '{name}': expected rank {rank}, got rank {len(shape)} (shape {tuple(shape)})")


def _scale_shapes(channels):
    """Accepted static scale shapes: per tensor ``[]`` / ``[1]``, per channel ``channels``, and for a
    ``[num_kv_heads, head_size]`` plane per head ``[num_kv_heads]``."""
    out = ((), (1,), tuple(channels))
    return out + ((channels[0],),) if len(channels) == 2 else out


def _shape_list(shapes):
    return " or ".join(str(list(s)) for s in shapes)


def _scale_shape_text(channels):
    """The accepted static scale shapes of :func:`_scale_shapes`, for messages."""
    head = f", [{channels[0]}] (per head)" if len(channels) == 2 else ""
    return f"[] or [1] (per tensor){head} or {list(channels)} (per channel)"


def check_plane_quant(op, mode, cache_dtype, scale, offset, scale_cache, channels, scale_cache_shape, why_layout):
    """One plane's quantization inputs. ``scale`` / ``offset`` / ``scale_cache``: ``(name, shape, dtype)``
    (shape None or ``(0,)`` = absent); ``channels``: the per-channel scale shape (``(H, D)`` or
    ``(hidden,)``); ``scale_cache_shape``: the expected scale cache shape (the cache plane with head_size
    1; for a 4-d one the same without the trailing 1 is accepted too), ``why_layout`` says why."""
    sc_shapes = (tuple(scale_cache_shape),) + ((tuple(scale_cache_shape[:-1]),) if len(scale_cache_shape) == 4 else ())
    (sn, ss, sd), (on, os_, od), (cn, cs, cdt) = scale, offset, scale_cache
    if mode == "dynamic":
        for n, s in ((sn, ss), (on, os_)):
            if not absent(s):
                raise ValueError(f"{op}: argument '{n}': expected None with dynamic scales ('{cn}' given: the op "
                                 f"computes each token's scale), got a tensor of shape {tuple(s)}")
        if absent(cs):
            raise ValueError(f"{op}: argument '{cn}': expected a float32 scale cache {_shape_list(sc_shapes)} "
                             f"({why_layout}) for dynamic scales, got None")
        if dtype_name(cdt) != "float32":
            raise TypeError(f"{op}: argument '{cn}': expected dtype float32, got {dtype_name(cdt)}")
        if tuple(cs) not in sc_shapes:
            raise ValueError(f"{op}: argument '{cn}': expected shape {_shape_list(sc_shapes)} ({why_layout}), got "
                             f"{list(cs)}")
        return
    if absent(ss):
        raise ValueError(f"{op}: argument '{sn}': expected a float32 scale, shape {_scale_shape_text(channels)}, "
                         f"for a quantized cache write (or '{cn}' for dynamic per-token scales), got None")
    if dtype_name(sd) != "float32":
        raise TypeError(f"{op}: argument '{sn}': expected dtype float32, got {dtype_name(sd)}")
    if tuple(ss) not in _scale_shapes(channels):
        raise ValueError(f"{op}: argument '{sn}': expected shape {_scale_shape_text(channels)}, got {list(ss)}")
    if not absent(os_):
        if dtype_name(cache_dtype) in FP8_DTYPES:
            raise ValueError(f"{op}: argument '{on}': expected None for a {dtype_name(cache_dtype)} cache (offsets "
                             f"apply to int8 caches only; float8 is symmetric, as in vLLM), got a tensor")
        if dtype_name(od) != "float32":
            raise TypeError(f"{op}: argument '{on}': expected dtype float32, got {dtype_name(od)}")
        if tuple(os_) != tuple(ss):
            raise ValueError(f"{op}: argument '{on}': expected shape {list(ss)} (same as '{sn}'), got {list(os_)}")


def check_pairs(op, pairs):
    """Arguments that go together (``[((name, shape), (name, shape)), ...]``): both given or neither (as
    fused_infer_attention_score requires of its key / value antiquant scales and offsets)."""
    for (an, a), (bn, b) in pairs:
        if absent(a) != absent(b):
            given, missing = (an, bn) if not absent(a) else (bn, an)
            raise ValueError(f"{op}: argument '{missing}': expected a tensor since '{given}' is given (both or "
                             f"neither), got None")


# ------------------------------------------------------------------------------- eager value checks
class ScaleValues:
    """EagerOp index check of a static scale (``positive``: finite and > 0) or offset (finite) tensor; an
    absent one (empty) is skipped. Reads a host tensor without a pipeline sync on the fast path
    (``_cpu_pyboost.check_scales_nosync``; the strict kernel re-checks at launch), else with
    ``asnumpy()``. ``where``: index of the public op name in the static check's result."""

    def __init__(self, name, positive, where=1):
        self.name, self.positive, self.where = name, positive, where

    def check(self, op, x, result, nosync, attr_values):
        if x.shape == (0,) or (len(x.shape) and 0 in x.shape):
            return
        op = result[self.where]
        f = getattr(nosync, "check_scales_nosync", None) if nosync is not None else None
        r = f(x, self.positive) if f is not None else None
        if r is not None and r[0] == 0:
            return
        vals = np.asarray(x.asnumpy(), np.float32).reshape(-1)
        bad = ~np.isfinite(vals) | ((vals <= 0) if self.positive else False)
        if bad.any():
            i = int(np.argmax(bad))
            what = "finite values > 0" if self.positive else "finite values"
            raise ValueError(f"{op}: argument '{self.name}': expected {what}, got {vals[i]!r} at flat index {i}")

    def replay(self, result, attr_values):
        """EagerOp replay plan entry: ("scale", must be > 0)."""
        return "scale", bool(self.positive)


class PublicSlots:
    """``Slots`` naming the public op (index 1 of the static check's result); bound at index 0."""

    def __init__(self, name="slot_mapping", bound=0, where=1):
        self.name, self.bound, self.where = name, bound, where

    def check(self, op, x, result, nosync, attr_values):
        if x.shape[0]:
            V.check_slot_tensor(result[self.where], self.name, x, result[self.bound], nosync, False)

    def replay(self, result, attr_values):
        """EagerOp replay plan entry: ("slots", duplicates allowed, bound)."""
        return "slots", False, int(result[self.bound])


class PublicPositions:
    """``Positions`` naming the public op; bound (max_position) at ``bound`` of the static result."""

    def __init__(self, name="positions", bound=2, where=1):
        self.name, self.bound, self.where = name, bound, where

    def check(self, op, x, result, nosync, attr_values):
        if x.shape[0]:
            V.check_position_tensor(result[self.where], self.name, x, result[self.bound], nosync)


def finite_float(op, name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: argument '{name}': expected a float, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{op}: argument '{name}': expected a finite float, got {value!r}")
    return float(value)
