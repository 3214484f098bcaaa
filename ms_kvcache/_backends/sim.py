"""The "sim" backend: the AscendC kernels (op_kernel/) and their CANN host tiling (op_host/) compiled
with g++ against the in-repo AscendC emulation, called by MindSpore's CPU AOT loader.

Each op's AOT entry ``<OpType>`` in ``ms_kvcache._sim`` runs the op's registered tiling function for
the shapes / dtypes / attributes MindSpore passes, then the kernel on every emulated core, in place
over MindSpore's buffers. The SoC is ``ms_kvcache.sim.set_soc`` / ``$MS_KVCACHE_SIM_SOC`` (default
Ascend910B1); the core order ``ms_kvcache.sim.set_order`` / ``$MS_KVCACHE_SIM_ORDER``. A rule
violation makes the AOT call fail; MindSpore raises it as a RuntimeError and
:func:`last_error` holds the emulation's message.

Ops compiled later with ``ms_kvcache.sim.build`` are found too: their module's file is used.
"""
import ctypes

__all__ = ["available", "aot_func", "library_path", "last_error"]


def _module():
    from ms_kvcache import _sim  # noqa: WPS433 - compiled extension

    return _sim


def available():
    """``(ok, why)``: the emulation module is built and its settings (``$MS_KVCACHE_SIM_SOC``,
    ``$MS_KVCACHE_SIM_ORDER``, ``$MS_KVCACHE_SIM_GM_COPY``, ``$MS_KVCACHE_SIM_HAZARDS``) are valid."""
    try:
        _module()
    except ImportError as exc:
        return False, (f"the AscendC emulation module ms_kvcache._sim is not importable ({exc}); "
                       "build it with scripts/dev_build.sh or reinstall ms_kvcache")
    from ms_kvcache import sim as simpkg

    try:
        simpkg.check_settings()
    except ValueError as exc:
        return False, str(exc)
    return True, ""


def library_path():
    """Absolute path of the shared object holding the repository's sim AOT entry points."""
    return _module().__file__


def _has_symbol(path, name):
    try:
        return hasattr(ctypes.CDLL(path), name)
    except OSError:
        return False


def aot_func(spec):
    """``("<library>:<OpType>", None)`` for ``ops.Custom(func_type="aot")``.

    Raises:
        RuntimeError: no emulated kernel / OpDef is registered for ``spec.op_type``.
    """
    sim = _module()
    op = spec.op_type
    if _has_symbol(sim.__file__, op):
        return f"{sim.__file__}:{op}", None
    from ms_kvcache import sim as simpkg  # built modules

    for path in list(simpkg._LOADED):  # noqa: WPS437 - modules loaded by ms_kvcache.sim.build
        if _has_symbol(path, op):
            return f"{path}:{op}", None
    raise RuntimeError(f"sim backend: op {op!r} has no AscendC kernel in this build (expected op_kernel/"
                       f"{sim.snake_case(op)}.cpp with its op_host OpDef); registered ops: {sim.ops()}")


def last_error():
    """Message of the last failing emulated AOT call ('' if none)."""
    return _module().last_error()
