"""Loads ``ms_kvcache._cpu_pyboost``, the optional compiled module of the PyNative fast path (and of the
storage metadata ``_validate`` reads: views, addresses), for the running MindSpore. A base module:
``_validate`` (checks) and ``_custom`` (launchers) both use it, so neither reaches the other for it.

``MS_KVCACHE_PYNATIVE_FAST=0`` or ``ms_kvcache._custom.set_fast_path(False)`` turns the fast path off
(:data:`FAST` ``["enabled"]``); the module stays importable for the metadata.
"""
import os

__all__ = ["FAST", "fast_module", "build_failure"]

#: The switch and the loaded module (or why there is none): ``enabled`` (the fast path is on),
#: ``module`` (``ms_kvcache._cpu_pyboost`` or None), ``why`` (the reason it is None, once tried).
FAST = {"enabled": os.environ.get("MS_KVCACHE_PYNATIVE_FAST", "1") != "0", "module": None, "why": None}


def fast_module():
    """ms_kvcache._cpu_pyboost if it was built for the running MindSpore, else None (reason in FAST)."""
    if FAST["module"] is None and FAST["why"] is None:
        import mindspore as ms

        try:
            from ms_kvcache import _cpu_pyboost as mod  # noqa: WPS433 - optional compiled extension
        except ImportError as exc:
            FAST["why"] = build_failure() or f"ms_kvcache._cpu_pyboost not importable ({exc})"
        else:
            if mod.mindspore_version != ms.__version__:
                FAST["why"] = (f"ms_kvcache._cpu_pyboost was built for MindSpore {mod.mindspore_version}, "
                               f"running {ms.__version__}; reinstall ms_kvcache")
            else:
                FAST["module"] = mod
    return FAST["module"]


def build_failure():
    """Why the build left no ``_cpu_pyboost`` module, from the ``_cpu_pyboost.build-failed.log`` it writes next
    to the package (cmake/pyboost.cmake: MindSpore not found or without the headers at build time, or a
    compile error against them), or None when there is no such log."""
    import sysconfig

    dirs = [os.path.dirname(os.path.abspath(__file__))]
    dirs += [os.path.join(sysconfig.get_paths()[k], "ms_kvcache") for k in ("platlib", "purelib")]  # editable installs
    for d in dirs:
        log = os.path.join(d, "_cpu_pyboost.build-failed.log")
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            break
        except OSError:
            continue
    else:
        return None
    if not lines:
        return None
    first = lines[0]
    err = next((ln for ln in lines[1:] if "error" in ln), None)
    detail = f"{first} {err}" if err else first
    if len(detail) > 400:
        detail = detail[:400] + "..."
    return f"ms_kvcache._cpu_pyboost was not built: {detail} (log: {log})"
