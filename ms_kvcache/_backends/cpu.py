"""The "cpu" backend: native C++ kernels (cpu_kernel/*.cpp) in the ms_kvcache._cpu module, called by
MindSpore's CPU AOT loader."""

__all__ = ["available", "aot_func", "library_path", "last_error", "fast_library"]


def _module():
    from ms_kvcache import _cpu  # noqa: WPS433 - compiled extension

    return _cpu


def available():
    try:
        _module()
    except ImportError as exc:
        return False, f"native CPU library ms_kvcache._cpu not importable ({exc}); reinstall ms_kvcache"
    return True, ""


def library_path():
    """Absolute path of the shared object holding the AOT entry points."""
    return _module().__file__


def aot_func(spec):
    return f"{library_path()}:{spec.op_type}", None


def last_error():
    """Message of the last failing CPU kernel call ('' if none)."""
    return _module().last_error()


def fast_library():
    """The AOT library the PyNative fast path (ms_kvcache._cpu_pyboost) may call directly."""
    return library_path()
