"""AscendC CPU emulation: compile and run AscendC kernels and CANN host tiling on any x86 CPU.

The real kernel sources (``op_kernel/``), their tiling / OpDef (``op_host/``) and infer functions
(``op_proto/``) compile unchanged with g++ against the emulated AscendC / CANN headers in
:func:`include_dirs` and run core by core over real bytes. Every emulated API enforces the hardware
rules documented for it (UB budget, 32-byte alignment, DataCopy parameter ranges, queue state
machine, GM bounds, cross-core write conflicts, uninitialised UB, dtype / Cast round-mode
whitelists, SetFlag/WaitFlag pairing, pipe hazards, ...) and raises :class:`EmulationError` naming
the rule, the op, the core and the values. See ``docs/emulation.md`` for the rule table and its
sources, and for what the emulation does not prove (that bisheng compiles the code, timing,
cross-core ordering beyond the overlap check).

Typical use::

    from ms_kvcache import sim
    mod = sim.build("my_ops", ["op_kernel/add_custom.cpp", "op_host/add_custom.cpp"])
    stats = sim.launch("AddCustom", [x, y, z])          # z written in place
    sim.launch_all_orders("AddCustom", [x, y, z])      # forward / reverse / threads agree
"""
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

__all__ = [
    "EmulationError", "include_dirs", "library_dir", "library_path", "ops", "opdef", "tiling", "infer_shape",
    "platform", "platforms", "kernels", "launch", "launch_kernel", "launch_all_orders",
    "launch_kernel_all_orders", "build", "BuiltModule", "set_soc", "get_soc", "set_order", "get_order",
    "set_hazards", "get_hazards", "last_error", "last_launch_stats", "ORDERS", "GM_COPY_MODES", "check_settings",
    "check_tiling", "TilingRejectedError", "TilingDTypeRejectedError", "set_error_hint", "ARCHS", "arch_of",
    "arch_defines", "kernel_archs", "cost_params", "set_cost_model", "get_cost_model", "cost_memcpy_us",
]

_HERE = Path(__file__).resolve().parent
_PKG = _HERE.parent

#: Core orders a launch can run in; all must give identical bytes.
ORDERS = ("forward", "reverse", "threads")

#: Values of ``gm_copy=`` / ``$MS_KVCACHE_SIM_GM_COPY``.
GM_COPY_MODES = ("always", "never", "auto")

#: Values of ``$MS_KVCACHE_SIM_HAZARDS`` (unset = on).
_HAZARD_VALUES = ("0", "1")

#: Values of ``$MS_KVCACHE_SIM_COST`` (unset = off): the cost model in every launch.
_COST_VALUES = ("0", "1")


def _module():
    try:
        from ms_kvcache import _sim  # noqa: WPS433 - compiled extension
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise ImportError(
            "ms_kvcache._sim (the AscendC emulation) is not built: run scripts/dev_build.sh or reinstall "
            f"ms_kvcache ({exc})") from exc
    return _sim


_sim = _module()

#: Raised when a kernel, its tiling or a launch breaks a documented AscendC / CANN rule.
#: Attributes: ``rule`` (str), ``op`` (str or None), ``core`` (int or None), ``message`` (str).
EmulationError = _sim.EmulationError


def _error(rule, op, core, detail):
    where = f"op {op}" + (f", core {core}" if core is not None else "")
    msg = f"{rule}: {where}: {detail}"
    exc = EmulationError(msg)
    exc.rule, exc.op, exc.core, exc.message = rule, op, core, msg
    return exc


# ------------------------------------------------------------------------------------------- arch families
#: The arch families the emulation compiles every kernel for: ``{__NPU_ARCH__: macros}``, the macros
#: bisheng predefines for that target (Atlas A2/A3 vector cores; Ascend310P AI cores). A launch on a
#: SoC runs the build of the SoC's arch (:func:`arch_of`). Same table as ``MSKV_SIM_ARCHS`` in
#: cmake/sim.cmake.
from ms_kvcache.sim._archs import ARCHS  # noqa: E402  (re-exported)
from ms_kvcache.sim._archs import SOC_ARCH as _SOC_ARCH  # noqa: E402


def arch_of(soc):
    """``__NPU_ARCH__`` of a SoC (2201 for Ascend910B1 / B3 / 910_9391, 2002 for Ascend310P3).

    Raises:
        ValueError: unknown SoC (the message lists the known ones).
    """
    canon = {k.lower(): v for k, v in _SOC_ARCH.items()}
    if not isinstance(soc, str) or soc.lower() not in canon:
        raise ValueError(f"arch_of: argument 'soc': expected one of {sorted(_SOC_ARCH)}, got {soc!r}")
    return canon[soc.lower()]


def arch_defines(soc_or_arch):
    """The ``-D`` flags bisheng's predefined macros amount to for a SoC name or an ``__NPU_ARCH__`` int,
    e.g. ``["-D__NPU_ARCH__=2002", "-D__CCE_AICORE__=200", "-D__DAV_M200__"]`` for ``"Ascend310P3"``."""
    arch = soc_or_arch if isinstance(soc_or_arch, int) else arch_of(soc_or_arch)
    if arch not in ARCHS:
        raise ValueError(f"arch_defines: expected an __NPU_ARCH__ in {sorted(ARCHS)} or a SoC name, got {soc_or_arch!r}")
    return [f"-D{m}" for m in ARCHS[arch]]


def _archs_of(socs):
    if socs is None:
        return sorted(ARCHS, reverse=True)
    if isinstance(socs, str):
        socs = [socs]
    archs = []
    for x in socs:
        try:
            a = x if isinstance(x, int) and x in ARCHS else arch_of(x)
        except ValueError:
            raise ValueError(f"build: argument 'socs': expected SoC names from {sorted(_SOC_ARCH)} or __NPU_ARCH__ "
                             f"values from {sorted(ARCHS)}, got {x!r}") from None
        if a not in archs:
            archs.append(a)
    if not archs:
        raise ValueError("build: argument 'socs': expected at least one SoC name or __NPU_ARCH__, got none")
    return sorted(archs, reverse=True)


def kernel_archs(kernel):
    """``__NPU_ARCH__`` values a registered kernel entry was compiled for (``[]`` for an unknown kernel)."""
    return list(_sim.kernel_archs(kernel))


# ------------------------------------------------------------------------------------------- paths
def include_dirs():
    """Include directories of the emulated AscendC / CANN headers (like ``pybind11.get_include()``).

    Returns:
        list[str]: ``[.../ms_kvcache/sim/include]``; it holds ``kernel_operator.h``,
        ``register/op_def_registry.h``, ``register/tilingdata_base.h``,
        ``exe_graph/runtime/tiling_context.h``, ``tiling/platform/platform_ascendc.h``, ...
    """
    return [str(_HERE / "include")]


def library_path():
    """Absolute path of the emulation runtime ``libascendc_sim.so`` loaded in this process."""
    return _sim.library_path()


def library_dir():
    """Directory of ``libascendc_sim.so`` (link user modules with ``-L`` and an rpath to it)."""
    return str(Path(library_path()).parent)


# ------------------------------------------------------------------------------------------- host side
opdef = _sim.opdef


def ops():
    """Names of the op types registered in the emulation (their ``OP_ADD(...)``), sorted.

    Returns:
        list[str]: CamelCase op types, e.g. ``["MskvConcatAndCacheMla", ..., "MskvReshapeAndCache", ...]``; the
        ops of modules loaded later with :func:`build` are included once loaded.
    """
    return _sim.ops()


def tiling(op, inputs, attrs=None, soc="Ascend910B1", outputs=None, kernel_type="aiv"):
    """Run op ``op``'s registered host tiling function as CANN would, check its result, and return it.

    Args:
        op (str): op type as registered (CamelCase, e.g. ``"MskvReshapeAndCache"``; see :func:`ops`).
        inputs (list): one entry per OpDef input, in order: ``(shape, dtype[, format])``, a dict, a numpy
            array, or None for an absent OPTIONAL input; a DYNAMIC input takes a list of such entries.
        attrs (dict | None): ``{name: value}``; unset optional attributes take their OpDef default. The
            named modes of ms_kvcache's ops (``cache_layout``, ``direction``: Int attributes in the OpDef)
            may be given by name (``"BNSD"``) or code (``1``); see ``AttrSpec.codes``.
        soc (str): ``"Ascend910B1"`` (default; not the :func:`set_soc` default), ``"Ascend910B3"``,
            ``"Ascend910_9391"`` or ``"Ascend310P3"``.
        outputs (list | None): same form as ``inputs``, or None to infer them with the op's InferShape /
            InferDataType.
        kernel_type (str): ``"aiv"`` | ``"aic"`` | ``"mix"`` | ``"any"``: which core count bounds the block dim.

    Returns:
        dict: ``fields`` ({tiling-data field: value}), ``block_dim``, ``tiling_key``, ``workspace_bytes``,
        ``workspace_sizes``, ``schedule_mode``, ``tiling_bytes``, ``tiling_size``, ``tiling_capacity``,
        ``tiling_struct``, ``field_info``, ``outputs``.

    Raises:
        EmulationError: (a RuntimeError) the message starts with the broken rule, e.g.
            ``OPDEF_UNKNOWN_OP`` (no such op), ``INPUT_COUNT`` (wrong number of inputs),
            ``PLATFORM_UNKNOWN_SOC`` (unknown ``soc``), ``SOC_BF16`` / ``OPDEF_DTYPE_ROW`` (dtypes the OpDef
            has no row for on that SoC), ``TILING_FAILED`` (the tiling function rejected the shapes or
            attributes; its reason follows), or a check of the returned tiling (block dim, workspace,
            tiling-data size). :func:`check_tiling` turns these into ``TilingRejectedError`` /
            ``TilingDTypeRejectedError``.
        TypeError: an argument of the wrong type (e.g. ``op`` not a str).
    """
    return _sim.tiling(op, inputs, _kernel_attrs(op, attrs), soc, outputs, kernel_type)


infer_shape = _sim.infer_shape
platform = _sim.platform
platforms = _sim.platforms
kernels = _sim.kernels
last_error = _sim.last_error
last_launch_stats = _sim.last_launch_stats


def set_error_hint(op, rule, hint):
    """Append ``hint`` in brackets to the message of a failing MindSpore AOT call of ``op`` whose error
    has rule ``rule`` (see :func:`last_error`); ``""`` removes it. The sim backend uses it to say what a
    rule means for an op, e.g. that GM_WRITE_CONFLICT in a slot scatter is a repeated slot."""
    _sim.set_error_hint(str(op), str(rule), str(hint))


# ------------------------------------------------------------------------------------------- eager tiling check
class TilingRejectedError(ValueError):
    """The op's AscendC host tiling (or its OpDef) rejects a call on a SoC (:func:`check_tiling`).

    Attributes: ``op`` (public snake_case name), ``op_type``, ``soc``, ``rule`` (the emulation's rule,
    e.g. ``TILING_FAILED``, ``SOC_BF16``, ``OPDEF_DTYPE_ROW``), ``reason`` (the tiling's own sentence),
    ``emulation_message`` (the full :class:`EmulationError` text).
    """

    def __init__(self, message, op, op_type, soc, rule, reason, emulation_message):
        super().__init__(message)
        self.op, self.op_type, self.soc, self.rule = op, op_type, soc, rule
        self.reason, self.emulation_message = reason, emulation_message


class TilingDTypeRejectedError(TilingRejectedError, TypeError):
    """A :class:`TilingRejectedError` about dtypes (no OpDef row / no bfloat16 on the SoC); also a TypeError."""


_DTYPE_RULES = ("SOC_BF16", "OPDEF_DTYPE_ROW", "INPUT_DTYPE")
_TILING_CACHE = {}
_TILING_CACHE_MAX = 4096
_OP_DYNAMIC = {}  # name as given -> (OpType, DYNAMIC flag per OpDef input)
_STDERR_MARK = "the tiling function wrote to stderr:"


def _norm_dtype(dt):
    if isinstance(dt, str):
        return dt.lower()
    if isinstance(dt, np.dtype) or (isinstance(dt, type) and issubclass(dt, np.generic)):
        return np.dtype(dt).name
    return str(dt).lower()  # MindSpore dtypes: Float16 -> float16, BFloat16 -> bfloat16


def _norm_tensor(x, what):
    if x is None:
        return None
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (tuple, list)):
        return (tuple(int(d) for d in x.shape), _norm_dtype(x.dtype))
    if isinstance(x, (tuple, list)) and len(x) == 2:
        return (tuple(int(d) for d in x[0]), _norm_dtype(x[1]))
    raise TypeError(f"check_tiling: {what}: expected a tensor, an array, (shape, dtype) or None, got {x!r}")


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v  # attribute lists


def _reason(rule, op_type, msg):
    """The tiling's own sentence out of an EmulationError message."""
    if _STDERR_MARK in msg:
        lines = [ln.strip() for ln in msg.split(_STDERR_MARK, 1)[1].splitlines() if ln.strip()]
        if lines:
            text = lines[-1]
            tag = f"{op_type} tiling: "
            return text.split(tag, 1)[1] if tag in text else text
    head = f"{rule}: op {op_type}: "
    return msg[len(head):] if msg.startswith(head) else msg


def check_tiling(op, inputs, attrs=None, soc=None):
    """Run op ``op``'s AscendC host tiling for these input shapes / dtypes, as a launch would, and raise
    its rejection as a Python exception at the call site.

    The sim backend's MindSpore AOT entry runs the same tiling inside the launch, where a rejection
    surfaces as a RuntimeError carrying the reason only at the next sync in PyNative. A
    PyNative wrapper calls this first (shapes only, no data; results are memoised per signature, so a
    repeated call costs one dict lookup), e.g. to report bfloat16 or rows that are not a multiple of
    32 bytes on Ascend310P3 where the user made the call.

    Args:
        op (str): public snake_case name (``"reshape_and_cache"``) or OpDef type (``"MskvReshapeAndCache"``).
        inputs (list): one entry per OpDef input, in order: a MindSpore Tensor / Parameter, a numpy
            array, a ``(shape, dtype)`` pair (dtype a name, numpy or MindSpore dtype) or None for an
            absent optional input; a list of such entries for a DYNAMIC input (e.g. copy_blocks'
            ``key_caches``).
        attrs (dict): attribute values by OpDef name (missing optional ones take their default); named
            modes by name or int code, as for :func:`tiling`.
        soc (str): SoC name; default :func:`get_soc` (what the sim backend launches on).

    Returns:
        dict: the tiling result (as :func:`tiling`; shared by later calls with the same signature, do
        not modify it).

    Raises:
        TilingDTypeRejectedError: (a TypeError and ValueError) no OpDef dtype row for these dtypes on
            the SoC, e.g. bfloat16 on Ascend310P3.
        TilingRejectedError: (a ValueError) any other rejection by the tiling or the OpDef checks;
            the message is ``"<op>: the AscendC tiling for <soc> rejects this call: <reason> (<RULE>)"``.
        KeyError: no such op in the emulation.
    """
    dyn_inputs = _OP_DYNAMIC.get(op)
    if dyn_inputs is None:
        op_type = _resolve_op_type(op)
        if op_type not in _sim.ops():
            raise KeyError(f"check_tiling: no op {op!r} in the AscendC emulation; registered ops: {_sim.ops()}")
        dyn_inputs = (op_type, tuple(p["param_type"] == "dynamic" for p in _sim.opdef(op_type)["inputs"]))
        _OP_DYNAMIC[op] = dyn_inputs
    op_type, dyn = dyn_inputs
    soc = soc or _sim.get_soc()
    norm = []
    for i, x in enumerate(inputs):
        if i < len(dyn) and dyn[i] and isinstance(x, (list, tuple)) and not (len(x) == 2 and isinstance(x[1], str)):
            norm.append(tuple(_norm_tensor(y, f"inputs[{i}][{j}]") for j, y in enumerate(x)))
        else:
            norm.append(_norm_tensor(x, f"inputs[{i}]"))
    attrs = _kernel_attrs(op_type, dict(attrs or {}))
    key = (op_type, soc, tuple(norm), tuple(sorted((k, _freeze(v)) for k, v in attrs.items())))
    hit = _TILING_CACHE.get(key)
    if hit is None:
        name = _public_name(op_type)
        try:
            hit = _sim.tiling(op_type, [list(x) if d else x for x, d in zip(norm, dyn + (False,) * len(norm))],
                              attrs or None, soc)
        except EmulationError as exc:
            msg = str(exc)
            rule = getattr(exc, "rule", "") or msg.split(":", 1)[0]
            reason = _reason(rule, op_type, msg)
            cls = TilingDTypeRejectedError if rule in _DTYPE_RULES else TilingRejectedError
            hit = (cls, (f"{name}: the AscendC tiling for {soc} rejects this call: {reason} ({rule})", name,
                         op_type, soc, rule, reason, msg))
        if len(_TILING_CACHE) >= _TILING_CACHE_MAX:
            _TILING_CACHE.clear()
        _TILING_CACHE[key] = hit
    if isinstance(hit, tuple):  # a memoised rejection: a fresh exception per call
        raise hit[0](*hit[1]) from None
    return hit


def set_soc(name):
    """Select the SoC of later launches and of the MindSpore AOT entries ("sim" backend).

    Args:
        name (str): ``"Ascend910B1"`` (default, also ``$MS_KVCACHE_SIM_SOC``), ``"Ascend910B3"``,
            ``"Ascend910_9391"`` or ``"Ascend310P3"``.

    The name is matched case-insensitively and stored in its canonical spelling (``get_soc()`` returns
    e.g. ``"Ascend310P3"`` after ``set_soc("ascend310p3")``).

    Raises:
        TypeError: ``name`` is not a str.
        EmulationError: unknown SoC (rule ``platform.unknown_soc``).
    """
    if not isinstance(name, str):
        raise TypeError(f"set_soc: argument 'name': expected a SoC name (str), one of {list(_sim.platforms())}, "
                        f"got {type(name).__name__}")
    canon = {p.lower(): p for p in _sim.platforms()}
    _sim.set_soc(canon.get(name.lower(), name))


def get_soc():
    """The default SoC of launches and of the sim backend's MindSpore AOT entries.

    Returns:
        str: e.g. ``"Ascend910B1"``: the last :func:`set_soc` value (canonical spelling), else
        ``$MS_KVCACHE_SIM_SOC`` as given (:func:`check_settings` validates it), else ``"Ascend910B1"``.
    """
    return _sim.get_soc()


def set_order(order):
    """Set the default core order of launches and AOT entries (also ``$MS_KVCACHE_SIM_ORDER``).

    Args:
        order (str): ``"forward"`` (core 0 first), ``"reverse"`` or ``"threads"`` (one thread per core).

    Raises:
        EmulationError: ``order`` is not one of these names (rule ``LAUNCH``).
        TypeError: ``order`` is not a str.
    """
    _sim.set_order(order)


def get_order():
    """The current default core order."""
    return _sim.get_order()


def set_hazards(on):
    """Enable (default) or disable the intra-core pipe hazard tracker of later launches
    (also ``$MS_KVCACHE_SIM_HAZARDS=0``).

    Args:
        on: taken as its truth value (``bool(on)``).

    Raises:
        Nothing for any value (anything with a truth value is accepted); an object whose ``bool()``
        raises propagates that error.
    """
    _sim.set_hazards(bool(on))


def get_hazards():
    """Whether the pipe hazard tracker is on by default."""
    return _sim.get_hazards()


# ------------------------------------------------------------------------------------------- cost model
def set_cost_model(on):
    """Run the DMA cost model in later launches (also ``$MS_KVCACHE_SIM_COST=1``; default off).

    The model predicts a launch's time from the DataCopies, vector instructions and synchronisations the
    kernel issues; it is a model calibrated on published figures, not a measurement (docs/emulation.md,
    "The cost model"). With it off, launches behave and run exactly as without it.
    """
    _sim.set_cost_model(bool(on))


def get_cost_model():
    """Whether the cost model runs in launches by default."""
    return _sim.get_cost_model()


def cost_params(soc=None):
    """The cost model's parameter table of a SoC: ``{name: {"value", "unit", "source"}}``.

    Args:
        soc (str): SoC name (default :func:`get_soc`); Atlas A2 and A3 have parameters.

    Raises:
        EmulationError: rule ``COST_MODEL_SOC`` for a SoC without parameters (Ascend310P3),
            ``PLATFORM_UNKNOWN_SOC`` for an unknown one.
    """
    return _sim.cost_params(soc or _sim.get_soc())


def cost_memcpy_us(nbytes, soc=None, params=None):
    """Predicted time (us) of one ``aclrtMemcpyAsync`` of ``nbytes`` between pinned host memory and HBM
    (``memcpy_us + nbytes / memcpy_gbps``), as the staged host-memory mode adds it before / after a launch.

    Args:
        nbytes (int | float): bytes copied (>= 0).
        soc (str): SoC name (default :func:`get_soc`).
        params (dict): overrides of the table's values by name (as ``cost_model=`` of :func:`launch`).

    Raises:
        ValueError: ``nbytes`` not a finite number >= 0.
        TypeError: ``params`` not a dict of numbers.
        EmulationError: ``COST_MODEL_PARAM`` for an unknown parameter or a value a launch would refuse
            (not finite, negative, or 0 for a rate), ``COST_MODEL_SOC`` as :func:`cost_params`.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating)) or \
            not 0 <= nbytes < float("inf"):
        raise ValueError(f"cost_memcpy_us: argument 'nbytes': expected a number of bytes >= 0, got {nbytes!r}")
    overrides = _cost_overrides(params, "cost_memcpy_us", "params") if params is not None else None
    table = {k: v["value"] for k, v in _sim.cost_params(soc or _sim.get_soc(), overrides, "cost_memcpy_us").items()}
    return table["memcpy_us"] + float(nbytes) / (table["memcpy_gbps"] * 1e3)


def _cost_overrides(params, what, arg):
    """``{name: float}`` of a dict of parameter overrides; TypeError naming ``arg`` for a value that is not a
    real number (a bool, a str, None). Names and ranges are checked by the emulation (COST_MODEL_PARAM)."""
    if not isinstance(params, dict):
        raise TypeError(f"{what}: argument '{arg}': expected a dict of cost-model parameter overrides, got "
                        f"{type(params).__name__}")
    out = {}
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{what}: argument '{arg}': parameter {str(k)!r}: expected a number, got {v!r}")
        out[str(k)] = float(v)
    return out


def _cost_args(cost_model, host, what):
    """(cost, cost_params, host) of the low-level launch from the public arguments."""
    if cost_model is None:
        cost = -1
        overrides = None
    elif isinstance(cost_model, dict):
        cost = 1
        overrides = _cost_overrides(cost_model, what, "cost_model")
    elif isinstance(cost_model, bool):
        cost = int(cost_model)
        overrides = None
    else:
        raise TypeError(f"{what}: argument 'cost_model': expected None, a bool or a dict of parameter overrides, "
                        f"got {type(cost_model).__name__}")
    if host is not None:
        if isinstance(host, (str, int)):
            host = [host]
        host = [str(h) for h in host]
        if cost == -1:
            cost = 1 if _sim.get_cost_model() else 0
        if host and cost != 1:
            raise ValueError(f"{what}: argument 'host': names arguments in host memory for the cost model, which is "
                             "off (pass cost_model=True)")
    return cost, overrides, host


#: Largest ``$MS_KVCACHE_SIM_SPIN_LIMIT`` accepted (a larger value would never catch a spinning core).
MAX_SPIN_LIMIT = 10 ** 12


def _has_cost_params(soc):
    try:
        _sim.cost_params(soc)
    except EmulationError:
        return False
    return True


def check_settings():
    """Check the emulation's default settings, which come from the environment unless set in Python.

    ``set_soc`` / ``set_order`` validate their argument, but ``$MS_KVCACHE_SIM_SOC``,
    ``$MS_KVCACHE_SIM_ORDER``, ``$MS_KVCACHE_SIM_GM_COPY``, ``$MS_KVCACHE_SIM_HAZARDS``,
    ``$MS_KVCACHE_SIM_COST`` and the watchdog's
    ``$MS_KVCACHE_SIM_SPIN_LIMIT`` / ``$MS_KVCACHE_SIM_WATCHDOG_S`` are only read (a bad watchdog value
    falls back to its default at launch);
    ``ms_kvcache.set_backend("sim")`` calls this so that a typo is reported there and not as a failed
    launch later.

    Raises:
        ValueError: names every bad variable, its value and the accepted values.
    """
    problems = []
    soc = _sim.get_soc()
    if soc not in _sim.platforms():
        src = f"MS_KVCACHE_SIM_SOC={soc!r}" if os.environ.get("MS_KVCACHE_SIM_SOC") == soc else f"sim.set_soc({soc!r})"
        problems.append(f"{src}: expected one of {list(_sim.platforms())}")
    order = _sim.get_order()
    if order not in ORDERS:
        problems.append(f"MS_KVCACHE_SIM_ORDER={order!r}: expected one of {list(ORDERS)}")
    gm_copy = _sim.get_gm_copy()
    if gm_copy not in GM_COPY_MODES:
        problems.append(f"MS_KVCACHE_SIM_GM_COPY={gm_copy!r}: expected one of {list(GM_COPY_MODES)}")
    hz = os.environ.get("MS_KVCACHE_SIM_HAZARDS")
    if hz and hz not in _HAZARD_VALUES:
        problems.append(f"MS_KVCACHE_SIM_HAZARDS={hz!r}: expected '0' (off) or '1' (on)")
    cm = os.environ.get("MS_KVCACHE_SIM_COST")
    if cm and cm not in _COST_VALUES:
        problems.append(f"MS_KVCACHE_SIM_COST={cm!r}: expected '0' (off) or '1' (on)")
    if _sim.get_cost_model() and soc in _sim.platforms() and not _has_cost_params(soc):
        src = "MS_KVCACHE_SIM_COST=1" if os.environ.get("MS_KVCACHE_SIM_COST") == "1" else "sim.set_cost_model(True)"
        problems.append(f"{src} with SoC {soc!r}: the cost model has parameters for "
                        f"{[s for s in _sim.platforms() if _has_cost_params(s)]} only (every launch would fail with "
                        f"COST_MODEL_SOC); unset it or choose one of those SoCs")
    spin = os.environ.get("MS_KVCACHE_SIM_SPIN_LIMIT")
    if spin and not (spin.isdigit() and 0 < int(spin) <= MAX_SPIN_LIMIT):
        problems.append(f"MS_KVCACHE_SIM_SPIN_LIMIT={spin!r}: expected an integer in 1..{MAX_SPIN_LIMIT} (GM reads)")
    wd = os.environ.get("MS_KVCACHE_SIM_WATCHDOG_S")
    if wd:
        try:
            ok = float(wd) > 0 and float(wd) != float("inf")
        except ValueError:
            ok = False
        if not ok:
            problems.append(f"MS_KVCACHE_SIM_WATCHDOG_S={wd!r}: expected a positive number of seconds")
    if problems:
        raise ValueError("AscendC emulation settings: " + "; ".join(problems))


# ------------------------------------------------------------------------------------------- launches
def _dtype_name(a):
    name = a.dtype.name
    return "bool" if name == "bool" else name


def _tensor(a, what, op):
    if a is None:
        return None
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{op}: argument '{what}': expected a numpy array or None, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{op}: argument '{what}': expected a C-contiguous array, got strides {a.strides}")
    return (a, _dtype_name(a))


def _split_arrays(op, arrays):
    info = _sim.opdef(op)
    names_in = [p["name"] for p in info["inputs"]]
    names_out = [p["name"] for p in info["outputs"]]
    if isinstance(arrays, dict):
        unknown = set(arrays) - set(names_in) - set(names_out)
        if unknown:
            raise ValueError(f"{op}: unknown tensor name(s) {sorted(unknown)}; inputs {names_in}, outputs {names_out}")
        ins = [arrays.get(n) for n in names_in]
        outs = [arrays.get(n) if n not in names_in else arrays.get(n, None) for n in names_out]
    else:
        arrays = list(arrays)
        want = len(names_in) + len(names_out)
        if len(arrays) != want:
            raise ValueError(f"{op}: expected {want} arrays (inputs {names_in} then outputs {names_out}), "
                             f"got {len(arrays)}")
        ins, outs = arrays[:len(names_in)], arrays[len(names_in):]
    cin = []
    for p, a in zip(info["inputs"], ins):
        if p["param_type"] == "dynamic":
            if not isinstance(a, (list, tuple)):
                raise TypeError(f"{op}: argument '{p['name']}': DYNAMIC input, expected a list of arrays")
            cin.append([_tensor(x, f"{p['name']}[{i}]", op) for i, x in enumerate(a)])
        else:
            cin.append(_tensor(a, p["name"], op))
    cout = []
    for p, a in zip(info["outputs"], outs):
        if a is not None and p["name"] in names_in and a is ins[names_in.index(p["name"])]:
            a = None  # ref output passed as the same array: alias the input
        cout.append(_tensor(a, p["name"], op))
    return cin, cout


def launch(op, arrays, attrs=None, soc=None, order=None, hazards=None, seed=0, gm_copy=None, cost_model=None,
           host=None):
    """Run op ``op``'s registered tiling, then its kernel on every core, over numpy arrays.

    Args:
        op (str): OpDef type (CamelCase, e.g. ``"MskvReshapeAndCache"``); its kernel entry is
            ``snake_case(op)``.
        arrays (list | dict): the op's tensors in OpDef order, inputs then outputs (or a dict by
            name). ``None`` for an absent OPTIONAL input, a list of arrays for a DYNAMIC input,
            ``None`` (or the input array itself) for an output named like an input (CANN "ref"
            output, aliased). C-contiguous numpy arrays; bfloat16 via ``ml_dtypes``. Outputs and
            in-place inputs are written in place; nothing is written when an error is raised.
        attrs (dict): attribute values by OpDef name; missing optional ones take their default; named
            modes by name or int code, as for :func:`tiling`.
        soc (str): SoC name (default :func:`get_soc`).
        order (str): ``"forward"``, ``"reverse"`` or ``"threads"`` (default :func:`get_order`).
        hazards (bool): run the pipe hazard tracker (default :func:`get_hazards`).
        seed (int): seed of the garbage that fills UB and workspace at kernel start.
        gm_copy (str): ``"always"`` (copy tensors into guarded emulated GM, default for numpy),
            ``"never"`` (run on the arrays' memory), ``"auto"`` (copy up to 256 MiB).
            A read-only array (``flags.writeable`` False) may be passed for a tensor the kernel only
            reads; a kernel write into it raises rule ``GM_READONLY`` naming the argument.
        cost_model (bool | dict): run the DMA cost model (default :func:`get_cost_model`); a dict
            turns it on with overrides of the SoC's parameters (:func:`cost_params`).
        host (list of str): OpDef names of the tensors in host memory that the kernel reaches through
            PCIe (zero-copy), for the cost model; the others are device HBM.

    Returns:
        dict: launch statistics: ``block_dim``, ``tiling_key``, ``cores_used``, ``gm_read_bytes``,
        ``gm_write_bytes`` (totals) and per core ``gm_read_bytes_per_core``,
        ``gm_write_bytes_per_core``, ``datacopy_calls_per_core``, ``datacopy_pad_calls_per_core``,
        ``ub_bytes_per_core`` (peak InitBuffer bytes), ``scalar_gm_reads_per_core``, ... plus
        ``tiling_fields``; with the cost model ``cost``: ``time_us`` (predicted), ``core_us``,
        ``pcie_link_us``, ``hbm_link_us``, per core ``core_end_us``, pipe busy times and
        bytes / runs / copies per link, and the ``params`` used (docs/emulation.md, "The cost model").

    Raises:
        EmulationError: a documented rule was broken (attributes ``rule``, ``op``, ``core``).
        TypeError, ValueError: wrong argument types / counts / non-contiguous arrays.
    """
    cin, cout = _split_arrays(op, arrays)
    cost, overrides, hosts = _cost_args(cost_model, host, op)
    return _sim.launch(op, cin, cout, _kernel_attrs(op, attrs), soc or "", order or "",
                       -1 if hazards is None else int(bool(hazards)),
                       int(seed), gm_copy or "always", cost, overrides, hosts)


def launch_kernel(kernel, args, block_dim, tiling=b"", tiling_key=0, workspace_bytes=0, with_ws_tiling=True,
                  soc=None, order=None, hazards=None, seed=0, gm_copy=None, cost_model=None, host=None):
    """Launch a registered kernel entry directly, without OpDef or tiling function.

    Args:
        kernel (str): kernel entry name (``extern "C" __global__ __aicore__ void <kernel>(GM_ADDR...)``).
        args (list): one numpy array (or None = null GM_ADDR) per GM_ADDR parameter, without the
            trailing workspace and tiling parameters when ``with_ws_tiling`` (the runner appends them).
        block_dim (int): number of cores to run (GetBlockNum()).
        tiling (bytes | numpy array | ctypes struct): bytes handed to GET_TILING_DATA.
        tiling_key (int): value TILING_KEY_IS compares against.
        workspace_bytes (int): size of the workspace GM buffer (0: null pointer).
        host (list): kernel parameter names or indices of ``args`` in host memory (cost model).
        Other arguments as in :func:`launch`.

    Returns:
        dict: launch statistics (see :func:`launch`).

    Raises:
        EmulationError: a documented rule was broken.
    """
    if isinstance(tiling, np.ndarray):
        tiling = tiling.tobytes()
    elif not isinstance(tiling, (bytes, bytearray)):
        tiling = bytes(tiling)
    targs = [_tensor(a, f"args[{i}]", kernel) for i, a in enumerate(args)]
    cost, overrides, hosts = _cost_args(cost_model, host, kernel)
    return _sim.launch_kernel(kernel, targs, int(block_dim), bytes(tiling), int(tiling_key), int(workspace_bytes),
                              bool(with_ws_tiling), soc or "", order or "",
                              -1 if hazards is None else int(bool(hazards)), int(seed), gm_copy or "always",
                              cost, overrides, hosts)


def _flatten(arrays):
    if isinstance(arrays, dict):
        return [a for k in sorted(arrays) for a in _flatten([arrays[k]])]
    out = []
    for a in arrays:
        if isinstance(a, (list, tuple)):
            out.extend(_flatten(a))
        elif a is not None:
            out.append(a)
    return out


def _copy_leaf(a):
    """A copy that keeps a read-only array read-only (so a kernel write into it is still GM_READONLY)."""
    if a is None:
        return None
    c = a.copy()
    if isinstance(a, np.ndarray) and not a.flags.writeable:
        c.setflags(write=False)
    return c


def _copy_tree(arrays):
    if isinstance(arrays, dict):
        return {k: _copy_tree(v) if isinstance(v, (list, tuple)) else _copy_leaf(v) for k, v in arrays.items()}
    out = []
    for a in arrays:
        if isinstance(a, (list, tuple)):
            out.append(_copy_tree(a))
        else:
            out.append(_copy_leaf(a))
    return out


def _all_orders(name, arrays, run):
    results = {}
    stats = None
    for order in ORDERS:
        copies = _copy_tree(arrays)
        st = run(copies, order)
        results[order] = copies
        if stats is None:
            stats = st
    ref = _flatten(results["forward"])
    for order in ORDERS[1:]:
        for i, (a, b) in enumerate(zip(ref, _flatten(results[order]))):
            av, bv = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
            if not np.array_equal(av, bv):
                first = int(np.nonzero(av != bv)[0][0])
                raise _error("ORDER_DEPENDENT", name, None,
                             f"array {i} differs between core orders 'forward' and '{order}' (first differing byte "
                             f"{first} of {av.size}): the result depends on which core runs first")
    for dst, src in zip(_flatten(arrays), ref):
        if dst.flags.writeable:
            np.copyto(dst, src)
    return stats


def launch_all_orders(op, arrays, **kwargs):
    """Run :func:`launch` once per core order (forward, reverse, threads) on copies of ``arrays``,
    check that all three give identical bytes, then store the result in ``arrays``.

    Returns:
        dict: the statistics of the forward run.

    Raises:
        EmulationError: a rule was broken in any order, or rule ``ORDER_DEPENDENT`` when the orders
            disagree (a cross-core race).
    """
    kwargs.pop("order", None)
    return _all_orders(op, arrays, lambda a, order: launch(op, a, order=order, **kwargs))


def launch_kernel_all_orders(kernel, args, block_dim, **kwargs):
    """:func:`launch_kernel` in all three core orders on copies; see :func:`launch_all_orders`."""
    kwargs.pop("order", None)
    return _all_orders(kernel, args, lambda a, order: launch_kernel(kernel, a, block_dim, order=order, **kwargs))


# ------------------------------------------------------------------------------------------- build
_ENTRY_RE = re.compile(r"\bascendc_sim_global_marker\s+void\s+([A-Za-z_]\w*)\s*\(")
_LOADED = {}
_BUILD_LOCK = threading.Lock()


def _camel(snake):
    return "".join(p[:1].upper() + p[1:] for p in snake.split("_") if p)


def _op_type_of_kernel(stem, entries):
    """OpType of a kernel file: the CamelCase of its (first) kernel entry, CANN's entry =
    snake_case(OpType) rule (``mskv_reshape_and_cache`` -> ``MskvReshapeAndCache``); the file stem if the
    file has no entry."""
    return _camel(entries[0] if entries else stem)


#: ms_kvcache's own OpTypes carry this vendor prefix (docs/design.md); their public snake_case names
#: (``"reshape_and_cache"``) are accepted wherever an op is named.
OP_TYPE_PREFIX = "Mskv"


def _public_name(op_type):
    """snake_case name of an OpType without ms_kvcache's vendor prefix (``MskvReshapeAndCache`` ->
    ``reshape_and_cache``): the public op name the rejection errors report."""
    s = _sim.snake_case(op_type)
    pre = _sim.snake_case(OP_TYPE_PREFIX) + "_"
    return s[len(pre):] if op_type.startswith(OP_TYPE_PREFIX) and s.startswith(pre) else s


def _kernel_attrs(op, attrs):
    """``attrs`` with the names of an ms_kvcache op's int-coded attributes replaced by their codes
    (``{"cache_layout": "BNSD"}`` -> ``{"cache_layout": 1}``; ``AttrSpec.codes``), so callers may name
    modes as the Python API does. The emulated OpDef declares those attributes Int, as CANN does, and its
    tiling reads (and range-checks) the int. Ops without an OpSpec (modules of :func:`build`) pass
    unchanged.

    Raises:
        ValueError: a str that is not one of the attribute's names (the message names op and attribute).
    """
    if not attrs:
        return attrs
    op_type = _resolve_op_type(op) if isinstance(op, str) else op
    if not op_type.startswith(OP_TYPE_PREFIX):
        return attrs
    import ms_kvcache._opspecs  # noqa: F401,WPS433 - registers the public ops' OpSpecs (declared as data)
    from ms_kvcache._spec import all_specs  # noqa: WPS433

    spec = next((s for s in all_specs() if s.op_type == op_type), None)
    if spec is None or not any(a.codes for a in spec.attrs):
        return attrs
    coded = {a.name: a for a in spec.attrs if a.codes}
    out = dict(attrs)
    for k, v in attrs.items():
        if k in coded and isinstance(v, str):
            a = coded[k]
            if v not in a.choices:
                raise ValueError(f"{spec.name}: attribute '{k}': expected one of {a.choices} or its int code "
                                 f"({', '.join(f'{n} = {c}' for n, c in a.codes)}), got {v!r}")
            out[k] = a.encode(v)
    return out


def _resolve_op_type(op):
    """``op`` as registered, else its CamelCase, else the prefixed CamelCase (an ms_kvcache op's public
    name); the CamelCase form when none is registered (the caller reports it)."""
    registered = _sim.ops()
    if op in registered:
        return op
    for cand in (_camel(op), OP_TYPE_PREFIX + _camel(op)):
        if cand in registered:
            return cand
    return _camel(op)


def _cache_dir():
    env = os.environ.get("MS_KVCACHE_SIM_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(tempfile.gettempdir(), f"ms_kvcache-{os.getuid()}")
    return Path(base) / "ms_kvcache_sim"


class BuiltModule:
    """A module compiled by :func:`build` and loaded into this process.

    Attributes:
        name (str): the name given to :func:`build`.
        path (str): the shared object (also usable as a MindSpore AOT library).
        kernels (list[str]): kernel entries it registered.
        op_types (list[str]): CamelCase op types of its kernel files (AOT entry symbols).
        archs (list[int]): the ``__NPU_ARCH__`` values its kernels were compiled for.
    """

    def __init__(self, name, path, kernels, op_types, handle, archs=()):
        self.name, self.path, self.kernels, self.op_types, self._handle = name, path, kernels, op_types, handle
        self.archs = list(archs)

    def aot_func(self, op_type):
        """``"<path>:<op_type>"``: the ``func`` argument of ``ops.Custom(func_type="aot")``."""
        if op_type not in self.op_types:
            raise ValueError(f"{self.name}: no AOT entry {op_type!r}; entries: {self.op_types}")
        return f"{self.path}:{op_type}"

    def __repr__(self):
        return f"BuiltModule({self.name!r}, path={self.path!r}, kernels={self.kernels})"


def _entry_params(text, start):
    """``"x;y;workspace;tiling"``: the parameter names of the entry whose ``(`` is at ``text[start - 1]``
    (the last identifier of each parameter; "" for an unnamed one)."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    params = text[start:i - 1]
    names = []
    for part in params.split(",") if params.strip() else []:
        part = part.split("=")[0].strip()
        ids = re.findall(r"[A-Za-z_]\w*", part)
        named = len(ids) > 1 and re.search(r"[A-Za-z_]\w*$", part) is not None  # "GM_ADDR x", not "uint8_t*"
        names.append(ids[-1] if named else "")
    return ";".join(names)


def _scan_entries(cxx, src, incs, arch):
    """Kernel entries of ``src`` for one arch, ``{name: "param;names"}`` in name order: preprocess it with
    ``__global__`` turned into a marker."""
    cmd = [cxx, "-std=c++17", "-E", "-P", "-DASCENDC_SIM_SCAN", "-D_GLIBCXX_USE_CXX11_ABI=0"] + arch_defines(arch)
    cmd += [f"-I{d}" for d in include_dirs()] + [f"-I{d}" for d in incs] + [f"-I{src.parent}", str(src)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"build: preprocessing {src} for __NPU_ARCH__ {arch} failed:\n{p.stderr}")
    found = {}
    for m in _ENTRY_RE.finditer(p.stdout):
        found.setdefault(m.group(1), _entry_params(p.stdout, m.end()))
    return {k: found[k] for k in sorted(found)}


def _tiling_header_candidates(src, stem, extra_dirs):
    cands = [src.parent / f"{stem}_tiling.h", src.parent.parent / "op_host" / f"{stem}_tiling.h"]
    return cands + [Path(d) / f"{stem}_tiling.h" for d in extra_dirs]


def _find_tiling_header(src, stem, extra_dirs):
    for c in _tiling_header_candidates(src, stem, extra_dirs):
        if c.is_file():
            return c.resolve()
    return None


_GET_TILING_RE = re.compile(r"\bGET_TILING_DATA\s*\(")
_TILING_INCLUDE_RE = re.compile(r'#\s*include\s*[<"][^>"]*tiling[^>"]*[>"]')


def _check_tiling_header(name, src, stem, text, header, extra_dirs):
    """A kernel using GET_TILING_DATA(var, tiling) needs its op's ``<stem>_tiling.h`` (the TilingData
    definition); without it g++ reports a cascade of undeclared names, so say what is missing first."""
    if header is not None or not _GET_TILING_RE.search(text):
        return
    if "BEGIN_TILING_DATA_DEF" in text or _TILING_INCLUDE_RE.search(text):
        return  # the kernel defines or includes its TilingData itself
    looked = ", ".join(str(c) for c in _tiling_header_candidates(src, stem, extra_dirs))
    raise ValueError(
        f"build({name!r}): {src} uses GET_TILING_DATA but no {stem}_tiling.h was found (looked for {looked}); put "
        f"the op's TilingData header (BEGIN_TILING_DATA_DEF ... REGISTER_TILING_DATA_CLASS({_camel(stem)}, ...)) "
        "next to the kernel, in ../op_host, or in one of include_dirs")


def _hash_tree(h, root):
    root = Path(root)
    if not root.is_dir():
        return
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in (".h", ".hpp", ".inl", ".cpp", ".cc") and p.stat().st_size < (1 << 22):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())


def build(name, sources, include_dirs=(), kernels=None, cxxflags=(), force=False, jobs=2, verbose=False, lint=True,
          socs=None):
    """Compile AscendC kernel / host / proto sources against the emulation and load the result.

    Every source containing ``__global__ __aicore__`` entries (or listed in ``kernels``) is compiled
    like CANN compiles an op_kernel file, once per arch family (:data:`ARCHS`: ``__NPU_ARCH__`` 2201
    for Atlas A2/A3, 2002 for Ascend310P, with the macros bisheng predefines for that target, so
    ``#if __CCE_AICORE__ ...`` branches are compiled and an API the official headers do not offer on
    an arch fails to compile for it): through a wrapper that includes ``kernel_operator.h``, the op's
    ``<stem>_tiling.h`` (found next to the source, in ``../op_host`` or in ``include_dirs``) in kernel
    mode, the source inside its own namespace, and registers each entry for that arch. A launch on a
    SoC runs its arch's build. Other sources (op_host OpDef + tiling, op_proto infer shape) are
    compiled once as host code, so their ops appear in :func:`ops`. The module also exports a
    MindSpore AOT entry ``<OpType>`` per kernel file. Builds are cached by content hash
    (``$MS_KVCACHE_SIM_CACHE`` or a per-user temp dir).

    Args:
        name (str): module name (letters, digits, underscore).
        sources (list[str | Path]): .cpp files.
        include_dirs (list): extra include directories.
        kernels (list): sources to treat as kernels (default: detected by their entries).
        cxxflags (list[str]): extra compiler flags (``$MS_KVCACHE_SIM_CXXFLAGS`` is appended too).
        force (bool): rebuild even if cached.
        jobs (int): parallel compiler processes.
        lint (bool): check every kernel source (and the op's own headers it includes) against the
            device-code subset of :mod:`ms_kvcache.sim.lint` before compiling (default). g++ accepts
            what bisheng rejects (std::, heap, exceptions, host I/O, includes outside the allowlist),
            so a kernel that fails the lint would run here but not build for an NPU; ``False``
            builds it anyway.
        socs (list | None): compile the kernels only for the arch families of these SoC names (or
            ``__NPU_ARCH__`` ints), e.g. ``["Ascend910B1"]`` for a kernel that targets Atlas A2/A3 only;
            default every family. Launching a kernel on a SoC whose arch was not built raises
            ``KERNEL_NOT_FOUND``.

    Returns:
        BuiltModule

    Raises:
        ValueError: bad name / missing source; a kernel that uses ``GET_TILING_DATA`` without a
            ``<stem>_tiling.h`` (the message lists where it looked).
        ms_kvcache.sim.lint.KernelLintError: (a ValueError) a kernel source breaks the device-code
            subset; ``problems`` lists ``(path, line, rule, message)``.
        RuntimeError: the compiler failed (the message names the arch and holds the compiler's output;
            an API the official headers do not declare or mark unsupported for that arch fails there
            with a static_assert naming it).
    """
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"build: argument 'name': expected an identifier, got {name!r}")
    srcs = [Path(s).resolve() for s in sources]
    for s in srcs:
        if not s.is_file():
            raise ValueError(f"build: argument 'sources': no such file {s}")
    kset = {Path(k).resolve() for k in kernels} if kernels is not None else None
    incs = [str(Path(d).resolve()) for d in include_dirs]
    flags = list(cxxflags) + os.environ.get("MS_KVCACHE_SIM_CXXFLAGS", "").split()
    libdir = library_dir()
    cxx = os.environ.get("CXX", "g++")

    archs = _archs_of(socs)
    plan = []  # (kind, source, stem, {arch: entries}, tiling header)
    for s in srcs:
        text = s.read_text(errors="replace")
        is_kernel = (s in kset) if kset is not None else "__global__" in text
        entries = {}
        if is_kernel:  # one preprocessor run per arch family, side by side
            with ThreadPoolExecutor(max_workers=len(archs)) as ex:
                entries = dict(zip(archs, ex.map(lambda a, src=s: _scan_entries(cxx, src, incs, a), archs)))
        if is_kernel:
            th = _find_tiling_header(s, s.stem, incs)
            _check_tiling_header(name, s, s.stem, text, th, incs)
            plan.append(("kernel", s, s.stem, entries, th))
        else:
            plan.append(("host", s, s.stem, [], None))

    h = hashlib.sha256()
    h.update(f"{name}|{cxx}|{flags}|{incs}|{libdir}|{sys.version_info[:2]}|lint={bool(lint)}|{archs}".encode())
    _hash_tree(h, _HERE / "include")
    for d in incs:
        _hash_tree(h, d)
    for kind, s, stem, entries, th in plan:
        h.update(f"{kind}|{s}|{entries}".encode())
        h.update(s.read_bytes())
        if th is not None:
            h.update(th.read_bytes())
        for p in sorted(s.parent.glob("*.h")):
            h.update(p.read_bytes())
    key = h.hexdigest()[:20]
    cache = _cache_dir()
    out = cache / f"{name}-{key}.so"
    op_types = [_op_type_of_kernel(stem, _all_entries(entries)) for kind, _, stem, entries, _ in plan if kind == "kernel"]
    entry_names = [e for kind, _, _, entries, _ in plan if kind == "kernel" for e in _all_entries(entries)]

    with _BUILD_LOCK:
        if force or not out.is_file():
            if lint:
                _lint_kernels(name, [s for kind, s, _, _, _ in plan if kind == "kernel"])
            _compile(name, plan, incs, flags, libdir, cxx, out, jobs, verbose, archs)
        path = str(out)
        handle = _LOADED.get(path)
        if handle is None:
            handle = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            _LOADED[path] = handle
    return BuiltModule(name, path, entry_names, op_types, handle, archs)


def _all_entries(per_arch):
    """Entries of a kernel file over all its arch builds, in first-seen order."""
    seen = []
    for a in sorted(per_arch, reverse=True):
        for e in per_arch[a]:
            if e not in seen:
                seen.append(e)
    return seen


def _kernel_wrapper(src, stem, op_type, tiling_header, entries, arch):
    """Source of the TU that compiles kernel file ``src`` for one arch (cmake/sim.cmake writes the same)."""
    ns = f"ascendc_sim_k_{stem}_{arch}"
    w = [f"// generated by ms_kvcache.sim.build from {src} for __NPU_ARCH__ {arch}"]
    w += ["#define " + m.replace("=", " ") for m in ARCHS[arch]]
    w += ["#define ASCENDC_SIM_KERNEL_SIDE 1", f"#define ASCENDC_SIM_OP_TYPE {op_type}",
          '#include "kernel_operator.h"', '#include "ascendc_sim/list_tensor.h"', '#include "register/tilingdata_base.h"',
          # ListTensorDesc becomes visible only if the kernel includes kernel_operator_list_tensor_intf.h
          f"namespace {ns} {{ namespace ascendc_sim_gate {{}} }}",
          f"namespace AscendC {{ using namespace ::{ns}::ascendc_sim_gate; }}", "#define ASCENDC_SIM_KERNEL_GATE 1",
          f"namespace {ns} {{", "namespace optiling {}", "using namespace optiling;"]
    if tiling_header is not None:
        w.append(f'#include "{tiling_header}"')
    # extern "C" entries of the two arch builds would share one symbol: rename them per arch
    w += [f"#define {e} ascendc_sim_entry_{e}_{arch}" for e in entries]
    w += [f'#include "{src}"']
    w += [f"#undef {e}" for e in entries]
    w += [f"}}  // namespace {ns}"]
    w += [f'ASCENDC_SIM_REGISTER_KERNEL({e}, {ns}::ascendc_sim_entry_{e}_{arch}, "{entries[e]}")' for e in entries]
    return "\n".join(w) + "\n"


def _lint_kernels(name, kernel_sources):
    from ms_kvcache.sim import lint as _lint

    problems = []
    for s in kernel_sources:
        problems.extend(_lint.lint_file(s))
    if problems:
        raise _lint.KernelLintError(
            f"build({name!r}): {len(problems)} kernel lint problem(s): the emulation would run this code but the "
            f"AscendC device compiler rejects it (pass lint=False to build anyway):\n{_lint.format_problems(problems)}",
            problems)


def _compile(name, plan, incs, flags, libdir, cxx, out, jobs, verbose, archs):
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=str(out.parent)))
    try:
        base = [cxx, "-std=c++17", "-fPIC", "-O1", "-D_GLIBCXX_USE_CXX11_ABI=0", "-ffp-contract=off",
                "-fno-strict-aliasing", "-Wall"]
        inc = [f"-I{d}" for d in include_dirs()] + [f"-I{d}" for d in incs]
        jobsl = []
        what = []  # what each job compiles (for the error message)
        aot = ['// generated by ms_kvcache.sim.build', '#include "ascendc_sim/aot.h"']
        for i, (kind, s, stem, entries, th) in enumerate(plan):
            local = [f"-I{s.parent}"]
            if (s.parent.parent / "op_host").is_dir():
                local.append(f"-I{s.parent.parent / 'op_host'}")
            if kind == "kernel":
                op_type = _op_type_of_kernel(stem, _all_entries(entries))
                for arch in archs:
                    wf = work / f"k{i}_{stem}_{arch}.cpp"
                    wf.write_text(_kernel_wrapper(s, stem, op_type, th, entries[arch], arch))
                    jobsl.append(base + ["-fvisibility=hidden"] + inc + local + flags +
                                 ["-c", str(wf), "-o", str(work / f"k{i}_{arch}.o")])
                    what.append(f"{s} for __NPU_ARCH__ {arch} ({', '.join(m for m in ARCHS[arch][1:])})")
                aot.append(f"ASCENDC_SIM_AOT_ENTRY({op_type})")
            else:
                jobsl.append(base + inc + local + flags + ["-c", str(s), "-o", str(work / f"h{i}.o")])
                what.append(str(s))
        af = work / "aot_entries.cpp"
        af.write_text("\n".join(aot) + "\n")
        jobsl.append(base + inc + flags + ["-c", str(af), "-o", str(work / "aot.o")])
        what.append(str(af))

        def run(cmd):
            if verbose:
                print(" ".join(cmd), file=sys.stderr)
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            return cmd, p.returncode, p.stdout

        with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as ex:
            results = list(ex.map(run, jobsl))
        failed = [f"compiling {w} failed:\n{log}" for (cmd, rc, log), w in zip(results, what) if rc != 0]
        if failed:  # every failing compile (e.g. each arch build of a kernel), not just the first
            raise RuntimeError(f"build({name!r}): " + f"\nbuild({name!r}): ".join(failed))
        objs = [c[-1] for c in jobsl]
        tmp_so = work / "module.so"
        link = [cxx, "-shared", "-o", str(tmp_so)] + objs + [f"-L{libdir}", "-lascendc_sim",
                                                             f"-Wl,-rpath,{libdir}"] + flags
        _, rc, log = run(link)
        if rc != 0:
            raise RuntimeError(f"build({name!r}): linking failed:\n{log}")
        os.replace(tmp_so, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
