"""The "sim" backend: the AscendC kernels (op_kernel/) and their CANN host tiling (op_host/) compiled
with g++ against the in-repo AscendC emulation, called by MindSpore's CPU AOT loader.

Each op's AOT entry ``<OpType>`` in ``ms_kvcache._sim`` runs the op's registered tiling function for
the shapes / dtypes / attributes MindSpore passes, then the kernel on every emulated core, in place
over MindSpore's buffers. The SoC is ``ms_kvcache.sim.set_soc`` / ``$MS_KVCACHE_SIM_SOC`` (default
Ascend910B1); the core order ``ms_kvcache.sim.set_order`` / ``$MS_KVCACHE_SIM_ORDER``. A rule
violation makes the AOT call fail; MindSpore raises it as a RuntimeError and
:func:`last_error` holds the emulation's message.

A failing AOT call throws its reason to MindSpore, which raises it as a RuntimeError whose text ends with
"Error message is <reason>" (in PyNative at the next sync); the entry also prints it once on stderr as one
line starting with ``ms_kvcache sim:`` (PyNative calls run the tiling first,
:func:`ms_kvcache.sim.check_tiling`, and raise a rejection at the call site). Before the emulation runs,
the entry refuses written tensors that share memory (the same Parameter twice in a graph: "<op>: argument
'<name>': expected a distinct cache tensor ..."), so aliasing is that error and not a GM_RACE /
GM_WRITE_CONFLICT between cores. For
ops that scatter rows by ``slot_mapping``, a cross-core write conflict or an MTE3 write-after-write
hazard means a non-negative slot is repeated (graph mode only; PyNative rejects it): the message says
so (see ``_slot_hints``). When a quantizing write's kernel traps (rule TRAP) on a bad static scale / offset, the
message ends with the cause the cpu kernel's check finds in the same inputs ("; cause: argument 'k_scale': ...",
see ``_trap_causes``).

Ops compiled later with ``ms_kvcache.sim.build`` are found too: their module's file is used.
"""
import ctypes

__all__ = ["available", "aot_func", "library_path", "last_error", "HOST_OPS", "layerwise_engine", "strided_bytes"]


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


# Rules that, for a kernel scattering token rows by slot, mean two tokens write one slot.
_DUPLICATE_SLOT_RULES = ("GM_WRITE_CONFLICT", "PIPE_HAZARD")


def _slot_hints(spec):
    """Register, for ops with a ``slot_mapping`` input, what a write conflict means for that op."""
    if not any(getattr(t, "name", None) == "slot_mapping" for t in getattr(spec, "inputs", ())):
        return
    hint = (f"{getattr(spec, 'name', spec.op_type)}: this usually means slot_mapping repeats a non-negative slot. In graph mode a "
            "duplicated slot is undefined on the AscendC backends (sim, ascend): cores race, as in vLLM's "
            "kernels, and the emulation fails the call; PyNative rejects duplicates and the cpu backend keeps "
            "the last token's row. Give each slot to at most one token (-1 skips a token)")
    for rule in _DUPLICATE_SLOT_RULES:
        _module().set_error_hint(spec.op_type, rule, hint)


#: The quantizing writes whose AscendC kernel calls AscendC::Trap() on a static scale of 0 / < 0 / NaN / inf or a
#: NaN / inf offset (op_kernel/kv_quant_kernel.h TrapOnBadStatic), and the cpu kernel's export that finds such a
#: value in the same inputs (cpu_kernel/kv_quant.cpp MskvQuantTrapCause, the rule of CheckScaleValues).
_QUANT_TRAP_OPS = frozenset({"MskvReshapeAndCacheQuant", "MskvConcatAndCacheMlaQuant", "MskvRopeReshapeAndCacheQuant",
                             "MskvRopeConcatAndCacheMlaQuant"})
_QUANT_TRAP_CAUSE = "MskvQuantTrapCause"


def _trap_causes(spec):
    """Register, for the quantizing writes, the host diagnosis the AOT entry runs after the kernel trapped: the
    message then ends with "; cause: argument 'k_scale': expected finite values > 0, got 0 at flat index 3" (the
    public argument, as the cpu backend's graph-mode error names it). Only after the launch failed with rule TRAP,
    and only as added text: what the kernel accepts or refuses does not change. No cause when the cpu module is
    missing or the trap had another reason."""
    if spec.op_type not in _QUANT_TRAP_OPS:
        return
    sim = _module()
    if not hasattr(sim, "set_error_diagnoser"):  # a module built before it existed
        return
    from ms_kvcache._backends import cpu

    try:
        path = cpu.library_path()
    except ImportError:
        return
    sim.set_error_diagnoser(spec.op_type, "TRAP", path, _QUANT_TRAP_CAUSE)


#: Ops that are a runtime memcpy on Ascend (the ascend backend's ``RUNTIME_OPS``: ``aclrtMemcpy`` per
#: block), not an AscendC kernel: there is no kernel or tiling to emulate, so the sim backend runs the
#: cpu backend's host kernel for them (same semantics, PyNative and graph mode).
HOST_OPS = ("MskvSwapBlocks",)


def _spec_kernel_pending(spec):
    from ms_kvcache._spec import kernel_pending

    return kernel_pending(spec)


def aot_func(spec):
    """``("<library>:<OpType>", None)`` for ``ops.Custom(func_type="aot")``. An op of :data:`HOST_OPS`
    gets the cpu backend's AOT entry (a host memcpy per block).

    Raises:
        RuntimeError: no emulated kernel / OpDef is registered for ``spec.op_type``.
    """
    op = spec.op_type
    pending = _spec_kernel_pending(spec)
    if pending:
        raise NotImplementedError(f"sim backend: op {spec.name} ({op}) has no AscendC kernel yet ({pending}); "
                                  f"use ms_kvcache.set_backend('cpu')")
    if op in HOST_OPS:
        from ms_kvcache._backends import cpu

        return cpu.aot_func(spec)
    sim = _module()
    _slot_hints(spec)
    _trap_causes(spec)
    if _has_symbol(sim.__file__, op):
        return f"{sim.__file__}:{op}", None
    from ms_kvcache import sim as simpkg  # built modules

    for path in list(simpkg._LOADED):  # noqa: WPS437 - modules loaded by ms_kvcache.sim.build
        if _has_symbol(path, op):
            return f"{path}:{op}", None
    raise RuntimeError(f"sim backend: op {op!r} has no AscendC kernel in this build (expected op_kernel/"
                       f"{spec.name}.cpp with its op_host OpDef); registered ops: {sim.ops()}")


def last_error():
    """Message of the last failing emulated AOT call ('' if none): ``"<RULE>: op <OpType>...: <values>"``,
    plus the op's hint in brackets for a rule with a known meaning (e.g. a repeated slot)."""
    return _module().last_error()


# ---------------------------------------------------------------------------------------- layer-wise transfer
def strided_bytes(addr, nbytes, offset, pitch, width, height):
    """numpy uint8 view ``[height, width]`` of the rows at ``addr + offset + r * pitch`` inside the ``nbytes``
    bytes at ``addr``. Raises ValueError when the rows would reach outside them (never a write outside a tensor)."""
    import ctypes

    import numpy as np

    if height <= 0 or width <= 0:
        return np.zeros((0, 0), np.uint8)
    end = offset + (height - 1) * pitch + width
    if offset < 0 or (height > 1 and width > pitch) or end > nbytes:
        raise ValueError(f"layer-wise copy of {height} x {width} bytes at +{offset} (pitch {pitch}) reaches outside "
                         f"a tensor of {nbytes} bytes")
    base = np.ctypeslib.as_array((ctypes.c_uint8 * end).from_address(addr))
    return np.lib.stride_tricks.as_strided(base[offset:], shape=(height, width), strides=(pitch or width, 1))


class LayerwiseEngine:
    """The sim backend's layer-wise engine (:class:`ms_kvcache.LayerwiseTransfer`): synchronous. ``issue(l)`` runs
    layer ``l`` to the end before it returns: the op's AscendC kernel with L = 1 through the emulation on a
    per-layer host staging buffer, plus numpy copies between that and the layer's rows of the host side
    (``plan``: an ``ops.layerwise_transfer.StagedPlan``). A failure is kept and reported at the next wait."""

    def __init__(self, plan):
        from ms_kvcache._host_memory import alloc_host_buffer
        from ms_kvcache._spec import tensor_nbytes

        self._plan = plan
        self._staging = [alloc_host_buffer(shape, dtype, pinned=False) for shape, dtype in plan.staging_specs]
        self._host = [(int(t.data_ptr()), tensor_nbytes(t)) for t in plan.host]
        self._stg = [(int(t.data_ptr()), tensor_nbytes(t)) for t in self._staging]
        self._err, self._failed = {}, -1

    @staticmethod
    def settle():
        from ms_kvcache import _host_memory

        _host_memory.synchronize()

    def _copy(self, layer, to_staging):
        for c in self._plan.copies(layer):
            h = strided_bytes(*self._host[c.host], c.host_offset, c.host_pitch, c.width, c.height)
            s = strided_bytes(*self._stg[c.staging], c.staging_offset, c.staging_pitch, c.width, c.height)
            if to_staging:
                s[...] = h
            else:
                h[...] = s

    def issue(self, layer):
        from ms_kvcache import _host_memory

        if self._failed >= 0:
            self._err[layer] = f"layer {layer}: not run: layer {self._failed} failed first"
            return
        try:
            if self._plan.direction == "h2d":
                self._copy(layer, True)
                self._plan.launch(layer, self._staging)
                _host_memory.synchronize()
            else:
                self._plan.launch(layer, self._staging)
                _host_memory.synchronize()
                self._copy(layer, False)
        except Exception as exc:  # noqa: BLE001 - reported at the next wait, naming the layer
            self._failed = layer
            self._err[layer] = f"layer {layer}: {exc}"

    def wait_layer(self, layer):
        return self._err.get(layer, "")

    def wait_all(self):
        return self._err.get(self._failed, "") if self._failed >= 0 else ""

    @staticmethod
    def all_done():
        return True

    def failed_layer(self):
        return self._failed

    def reset(self):
        if self._failed >= 0:
            raise RuntimeError(f"layer {self._failed} failed: start a new transfer")
        self._err.clear()

    def close(self):
        pass


def layerwise_engine(plan):
    """The engine :class:`ms_kvcache.LayerwiseTransfer` uses on this backend (see :class:`LayerwiseEngine`)."""
    return LayerwiseEngine(plan)
