"""Backend selection: "cpu" (native C++ kernels), "sim" (AscendC kernels + op_host tiling run on the
AscendC CPU emulation) and "ascend" (the installed CANN custom-op package).

The backend is read when an op is built: in PyNative at every call, in GRAPH_MODE / ``@ms.jit`` when
the graph is compiled. Set it before compiling a graph; a compiled graph keeps its backend.
"""
import os

__all__ = ["set_backend", "get_backend", "BACKENDS", "backend_module", "register_backend_module"]

#: Names accepted by :func:`set_backend`.
BACKENDS = ("cpu", "sim", "ascend")

_current = None
#: The module implementing each backend (``ms_kvcache._backends.<name>``). The package root registers them
#: (``ms_kvcache/__init__.py``; they import no MindSpore at module level), so this base module imports none of
#: them: the layers point one way (docs/design.md, "Layers").
_MODULES = {}


def _default_backend():
    env = os.environ.get("MS_KVCACHE_BACKEND")
    if env:
        if env not in BACKENDS:
            raise ValueError(f"MS_KVCACHE_BACKEND: expected one of {BACKENDS}, got {env!r}")
        if env == "sim":  # report a missing build or bad MS_KVCACHE_SIM_* settings here, not at launch
            ok, why = backend_module(env).available()
            if not ok:
                raise RuntimeError(f"MS_KVCACHE_BACKEND='sim': backend unavailable: {why}")
        return env
    try:
        import mindspore as ms

        if ms.get_context("device_target") == "Ascend":
            return "ascend"
    except Exception:  # pragma: no cover - MindSpore missing or not initialised
        pass
    return "cpu"


def set_backend(name):
    """Select the implementation behind every public op.

    Args:
        name (str): ``"cpu"``, ``"sim"`` or ``"ascend"``.

    Returns:
        None: every later PyNative call, and every graph compiled later, uses this backend.

    Raises:
        ValueError: ``name`` is not one of :data:`BACKENDS`.
        RuntimeError: the backend cannot run on this machine (the message says what is missing,
            e.g. the emulation module was not built, or no CANN custom-op package is installed).
    """
    global _current
    if name not in BACKENDS:
        raise ValueError(f"set_backend: argument 'name': expected one of {BACKENDS}, got {name!r}")
    mod = backend_module(name)
    ok, why = mod.available()
    if not ok:
        raise RuntimeError(f"set_backend({name!r}): backend unavailable: {why}")
    _current = name


def get_backend():
    """Return the active backend name: the one every public op launches on.

    Returns:
        str: ``"cpu"``, ``"sim"`` or ``"ascend"``: the last :func:`set_backend` value; before any, the
        default, decided once on first use: ``$MS_KVCACHE_BACKEND`` if set, else ``"ascend"`` when
        MindSpore's device target is Ascend, else ``"cpu"``.

    Raises:
        ValueError: on first use, ``$MS_KVCACHE_BACKEND`` is not one of :data:`BACKENDS`.
        RuntimeError: on first use, ``$MS_KVCACHE_BACKEND=sim`` but the emulation is unavailable (not
            built, or bad ``$MS_KVCACHE_SIM_*`` settings). A default of ``"ascend"`` is not checked here.
    """
    global _current
    if _current is None:
        _current = _default_backend()
    return _current


def register_backend_module(name, module):
    """Record ``module`` (``available()``, ``aot_func(spec)``, ...) as the implementation of backend ``name``."""
    if name not in BACKENDS:
        raise ValueError(f"register_backend_module: argument 'name': expected one of {BACKENDS}, got {name!r}")
    _MODULES[name] = module


def backend_module(name):
    """Return the module implementing backend ``name`` (``ms_kvcache._backends.<name>``)."""
    try:
        return _MODULES[name]
    except KeyError:
        raise ValueError(f"backend_module: argument 'name': expected one of {tuple(_MODULES)} (registered by "
                         f"ms_kvcache/__init__.py), got {name!r}") from None
