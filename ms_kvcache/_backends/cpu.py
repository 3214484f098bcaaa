"""The "cpu" backend: native C++ kernels (cpu_kernel/*.cpp) in the ms_kvcache._cpu module, called by
MindSpore's CPU AOT loader."""

__all__ = ["available", "aot_func", "library_path", "last_error", "fast_library", "layerwise_engine", "settle_pipeline"]

from ms_kvcache._formats import planes_of, tensors_per_layer


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
    """Wait until every PyNative op launched so far has run. With the fast module: poll MindSpore's pipeline queues,
    sleeping between polls (``_cpu_pyboost.wait_idle``; a queue's worker dequeues a task only after running it, so
    empty queues mean every op ran), ~0.05 ms when idle; else (or on its timeout) MindSpore's sync, which spins the
    calling thread (a core taken from the kernels waited for) and costs ~2-4 ms per call on a loaded 2-core machine.
    An op's failure is not raised here: MindSpore raises it at the caller's next sync."""
    from ms_kvcache import _custom, _host_memory

    mod = _custom._fast_module()  # noqa: WPS437 - the package's optional module
    wait_idle = getattr(mod, "wait_idle", None) if mod is not None else None
    if wait_idle is not None and wait_idle():
        return
    _host_memory.synchronize()


class LayerwiseEngine:
    """The cpu backend's layer-wise engine (:class:`ms_kvcache.LayerwiseTransfer`): a native worker thread
    (``_cpu.LayerwiseWorker``, cpu_kernel/layerwise.h) runs the op's kernel one layer per call, without the GIL, on
    the tensors of ``call`` (an ``ops._multi_layer.EagerCall``, checked), which it keeps alive until closed.
    The kernel runs in strict mode (it re-checks the index values before writing anything).

    Issue order against the forward pass: with the PyNative fast path (``_cpu_pyboost``), ``issue(l)`` queues a
    small AOT call (``MskvLayerwiseSubmit``) in MindSpore's pipeline behind the ops launched so far, with the layer's
    tensors as inputs; when the pipeline reaches it, it hands the layer to the worker: the host does not wait (the
    cpu counterpart of recording an event on the compute stream). Without the fast path, ``settle()`` waits for the
    pipeline before the layers are handed over.

    Waits: while the pipeline is busy, ``queue_wait(l)`` queues a small AOT call (``MskvLayerwiseWait``) that blocks the
    pipeline, not the host, until the layer finished (a stream waiting for an event): the host keeps launching the
    forward pass's ops, which run after the layer moved. An idle pipeline (nothing to keep running) or no fast path:
    the host waits (``wait_layer``)."""

    def __init__(self, call):
        from ms_kvcache import _custom
        from ms_kvcache._spec import dtype_name

        spec = call.spec
        attrs = spec.kernel_attrs(spec.attr_values(call.attr_values))
        attrs["mskv_strict"] = True
        if spec.has_dynamic:
            attrs["dyn_input_sizes"] = [int(v) for v in spec.dyn_input_sizes(call.counts)]
        self._keep = call.args  # the memory the worker copies lives as long as the engine
        L = int(call.attrs["num_layers"])
        self._w = _module().LayerwiseWorker(
            spec.op_type, [_address(t) for t in call.args], [[int(d) for d in t.shape] for t in call.args],
            [dtype_name(t.dtype) for t in call.args], attrs, L)
        self._fast = _custom._fast_module() if _custom.fast_path_available("cpu")[0] else None  # noqa: WPS437
        self._signals = None
        if self._fast is not None:
            lib = library_path()
            self._run = getattr(self._fast, "run_or_queue", self._fast.run)
            self._signals = [self._fast.kernel(lib, "MskvLayerwiseSubmit", "layerwise_submit",
                                               {"mskv_worker": int(self._w.id), "mskv_layer": layer}, [])
                             for layer in range(L)]
            self._waits = [self._fast.kernel(lib, "MskvLayerwiseWait", "layerwise_wait",
                                             {"mskv_worker": int(self._w.id), "mskv_layer": layer}, [])
                           for layer in range(L)]
            self._layer_inputs = [self._inputs_of(call, layer) for layer in range(L)]

    @staticmethod
    def _inputs_of(call, layer):
        """The layer's caches (the pipeline signal's inputs: what the layer reads or writes on the device side)."""
        fmt = call.attrs["kv_format"]
        tpl = tensors_per_layer(fmt)
        first = 2 if call.spec.name.startswith("multi_layer_kv") else 2 + planes_of(fmt)
        return list(call.args[first + layer * tpl:first + (layer + 1) * tpl])

    def settle(self):
        if self._signals is None:
            settle_pipeline()

    def issue(self, layer):
        if self._signals is None:
            self._w.submit(layer)
            return
        from ms_kvcache import _custom

        self._w.expect(layer)
        with _custom._SUBMIT:  # noqa: WPS437 - one submission into MindSpore's pipeline at a time
            self._run(self._signals[layer], *self._layer_inputs[layer])

    def _flush(self, layers=None):
        """Awaiting layers: let the pipeline run their signals; any still awaiting then was dropped by MindSpore."""
        awaiting = [l for l in (range(self._w.num_layers) if layers is None else layers) if self._w.state(l) == 6]
        if not awaiting:
            return
        settle_idle = getattr(self._fast, "wait_idle", None)
        if settle_idle is not None:
            # until the signals ran or the pipeline is idle without them (dropped); a timeout of the idle poll only
            # means that the forward pass keeps the pipeline busy: the signals are still queued behind it
            while not settle_idle() and any(self._w.state(l) == 6 for l in awaiting):
                pass
        if any(self._w.state(l) == 6 for l in awaiting):
            self._w.drop_awaiting("not issued: MindSpore's pipeline dropped the ops queued after an op that failed "
                                  "(its error is raised at the next ms_kvcache.synchronize())")

    def wait_layer(self, layer):
        self._flush([layer])
        return self._w.wait(layer)

    def queue_wait(self, layer):
        """Queue a pipeline-side wait for ``layer`` and return True while the pipeline is busy (the ops launched
        afterwards run after the layer moved; a failure is raised by MindSpore at the next synchronisation); False
        (nothing queued) when the pipeline is idle or there is no fast path: the caller waits on the host."""
        if self._signals is None or self._w.state(layer) == 3 or self._fast.wait_idle(0.0):
            return False
        from ms_kvcache import _custom

        with _custom._SUBMIT:  # noqa: WPS437 - one submission into MindSpore's pipeline at a time
            self._fast.run(self._waits[layer], *self._layer_inputs[layer])
        return True

    def wait_all(self):
        self._flush()
        return self._w.wait_all()

    def all_done(self):
        if self._w.all_done():
            return True
        idle = getattr(self._fast, "pipeline_idle", None)
        awaiting = [l for l in range(self._w.num_layers) if self._w.state(l) == 6]
        if awaiting and idle is not None and idle() and all(self._w.state(l) == 6 for l in awaiting):
            self._flush(awaiting)  # the pipeline ran everything it queued without these signals: dropped
        return self._w.all_done()

    def failed_layer(self):
        return self._w.failed_layer()

    def reset(self):
        self._w.reset()

    def close(self):
        if self._signals is not None:
            self._flush()
        self._w.close()

    def state(self, layer):
        """0 not issued, 1 queued, 2 running, 3 done, 4 failed, 5 cancelled, 6 awaiting its pipeline signal."""
        return self._w.state(layer)


def layerwise_engine(call):
    """The engine :class:`ms_kvcache.LayerwiseTransfer` uses on this backend (see :class:`LayerwiseEngine`)."""
    return LayerwiseEngine(call)
