"""The "cpu" backend: native C++ kernels (cpu_kernel/*.cpp) in the ms_kvcache._cpu module, called by
MindSpore's CPU AOT loader."""

__all__ = ["available", "aot_func", "library_path", "last_error", "fast_library", "layerwise_engine", "settle_pipeline"]


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


def _address(t):
    """First byte of tensor ``t`` (0 for an empty tensor)."""
    if int(t.size) == 0:
        return 0
    return int(t.data_ptr())


def settle_pipeline():
    """Wait until every PyNative op launched so far has run (sleeping between polls, not spinning, where the fast
    module offers it: a spinning wait takes a core from the kernels waited for), then collect errors."""
    from ms_kvcache import _custom, _host_memory

    mod = _custom._fast_module()  # noqa: WPS437 - the package's optional module
    wait_idle = getattr(mod, "wait_idle", None) if mod is not None else None
    if wait_idle is not None:
        wait_idle()
    _host_memory.synchronize()


class LayerwiseEngine:
    """The cpu backend's layer-wise engine (:class:`ms_kvcache.LayerwiseTransfer`): a native worker thread
    (``_cpu.LayerwiseWorker``, cpu_kernel/layerwise.h) runs the op's kernel one layer per call, without the GIL, on
    the tensors of ``call`` (an ``ops._multi_layer.EagerCall``, checked), which it keeps alive until closed.
    The kernel runs in strict mode (it re-checks the index values before writing anything)."""

    def __init__(self, call):
        from ms_kvcache._spec import dtype_name

        spec = call.spec
        attrs = spec.kernel_attrs(spec.attr_values(call.attr_values))
        attrs["mskv_strict"] = True
        if spec.has_dynamic:
            attrs["dyn_input_sizes"] = [int(v) for v in spec.dyn_input_sizes(call.counts)]
        self._keep = call.args  # the memory the worker copies lives as long as the engine
        self._w = _module().LayerwiseWorker(
            spec.op_type, [_address(t) for t in call.args], [[int(d) for d in t.shape] for t in call.args],
            [dtype_name(t.dtype) for t in call.args], attrs, int(call.attrs["num_layers"]))

    settle = staticmethod(settle_pipeline)

    def issue(self, layer):
        self._w.submit(layer)

    def wait_layer(self, layer):
        return self._w.wait(layer)

    def wait_all(self):
        return self._w.wait_all()

    def all_done(self):
        return self._w.all_done()

    def failed_layer(self):
        return self._w.failed_layer()

    def reset(self):
        self._w.reset()

    def close(self):
        self._w.close()

    def state(self, layer):
        """0 not issued, 1 queued, 2 running, 3 done, 4 failed, 5 cancelled (tests)."""
        return self._w.state(layer)


def layerwise_engine(call):
    """The engine :class:`ms_kvcache.LayerwiseTransfer` uses on this backend (see :class:`LayerwiseEngine`)."""
    return LayerwiseEngine(call)
