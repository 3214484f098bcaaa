"""In-place ``ops.Custom`` primitives built from an :class:`~ms_kvcache._spec.OpSpec`.

How a cache is written in place in every MindSpore mode (PyNative, GRAPH_MODE, ``@ms.jit``): the
primitive subclasses ``ops.Custom``, declares a class-level ``__mindspore_signature__`` that marks the
cache arguments ``sig_rw.RW_WRITE``, sets ``side_effect_mem`` so graph mode keeps the call and orders
it before later reads of the same Parameter even when its output is unused, writes through the input
pointer, and returns a dummy int32 ``[1]`` tensor. This is the convention of MindSpore's own
ReshapeAndCache and of ms_custom_ops.

The public wrappers call :func:`eager_launcher` in PyNative and, in graph mode,
``_get_cache_prim(prim_class(spec))(backend, *attr_values)`` so the graph compiler instantiates the
primitive with constant arguments.

Lists of tensors (one cache per layer: ``copy_blocks``, multi-layer transfer). A Python list of
Parameters cannot be a graph input, and an ops.Custom input cannot be a tuple that is written in place.
So an op whose :class:`~ms_kvcache._spec.TensorSpec` has ``sequence=True`` gets a primitive
*specialised by arity*: ``prim_class(spec)(backend, L, *attr_values)`` takes the L tensors of each
sequence argument as L consecutive inputs (``key_caches_0 .. key_caches_{L-1}``), each marked
``RW_WRITE`` if the argument is in place. The signature is set per instance (``set_signatures``), so
one class serves every L; the kernel infers L from the number of parameters. In a graph, L is the
length of the (constant-length) tuple, so the wrapper writes
``_get_cache_prim(Prim)(graph_backend(), len(caches))(*caches, ...)``: this works in a GRAPH_MODE
``Cell.construct`` with the caches in a ``ParameterTuple`` attribute and in ``@ms.jit`` functions that
build the list from Parameters. In PyNative, :func:`eager_launcher` with ``arity=L`` does the same
(or the fast path takes the L tensors directly).

PyNative fast path. ``ops.Custom`` costs ~0.1-2 ms per PyNative call on this CPU. When the backend
offers an AOT library usable outside ops.Custom (``fast_library()``; the cpu backend does) and the
optional module ``ms_kvcache._cpu_pyboost`` was built for the running MindSpore version, PyNative calls
launch the same AOT entry through MindSpore's PyboostRunner API instead (a few us, asynchronous, in
order with other ops; see ms_kvcache/csrc/pyboost_module.cpp). ``MS_KVCACHE_PYNATIVE_FAST=0`` or
:func:`set_fast_path` (False) turns it off; graph mode always uses ops.Custom.

Lists of tensors (``TensorSpec(dynamic=True)``, e.g. one cache per layer): the tensors are passed
flattened, as consecutive positional arguments. The signature of the last input, when it is dynamic,
is one ``KIND_VAR_POSITIONAL`` entry, so one class serves every list length; a dynamic input that is
not last gets one entry per tensor, so its length is part of the class (``counts``). Each tensor must
be its own argument: MindSpore also accepts a (nested) tuple argument and flattens it for the kernel,
but then RW_WRITE does not reach the Parameters inside and graph mode reads stale values after the
write (checked on MindSpore 2.10). Optional inputs that are absent are left out (``absent``). Inputs
written only for some attribute value (``TensorSpec.inplace_if``) get one class per written set
(``written``).

``spec.extra["infer_shape"](attrs, *shapes)`` / ``["infer_dtype"](attrs, *dtypes)``, when given, run
in MindSpore's infer step (``attrs`` = {attr name: value}): at graph compile time and at every
PyNative call. Ops use them for the shape/dtype checks that must also run in graph mode.
"""
import functools
import os

import mindspore as ms
from mindspore import ops
from mindspore.ops import signature as sig
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend

from mindspore.ops._primitive_cache import _get_cache_prim  # noqa: F401  (re-exported)

__all__ = ["prim_class", "eager_op", "eager_launcher", "graph_backend", "_run_in_jit", "_get_cache_prim",
           "fast_path_available", "set_fast_path", "nosync_checker"]


def _probe():
    return 0


@constexpr(check=False)
def _is_unresolved(func):
    return func is None


def _run_in_jit():
    """True while MindSpore compiles a graph (GRAPH_MODE Cell or ``@ms.jit``), False in PyNative.

    The graph compiler cannot fold a Python function object to a constant, so the constexpr sees
    None; eagerly it sees the function. Callers write ``if _run_in_jit():  # @jit.cond: True`` so
    the compiler only parses the graph branch. (MindSpore's own ``_run_in_jit`` builds a new
    primitive class per call, ~50 us in PyNative; this one is built once.)
    """
    return _is_unresolved(_probe)


_CLASSES = {}
_EAGER = {}


def _status_shape(*_shapes):
    return [1]


def _status_dtype(*_dtypes):
    return ms.int32


def _signatures(inputs):
    return tuple(sig.make_sig(t.name, sig.sig_rw.RW_WRITE if t.inplace else sig.sig_rw.RW_READ) for t in inputs)


class InplaceCustom(ops.Custom):
    """Base of every ms_kvcache primitive; subclasses set ``SPEC``, ``WRITTEN`` and (unless the spec has
    sequence inputs) a class-level ``__mindspore_signature__``.

    ``__init__(backend, *attr_values)``, or ``__init__(backend, arity, *attr_values)`` when the spec has
    sequence inputs (the primitive then has ``arity`` inputs per sequence argument).
    """

    SPEC = None
    #: names of the inputs this class writes (None: every ``inplace`` input of the spec)
    WRITTEN = None

    def __init__(self, backend, *init_args):
        spec = self.SPEC
        arity = None
        attr_values = init_args
        if spec.has_sequences:
            arity, attr_values = int(init_args[0]), init_args[1:]
        func, reg_info = _backend.backend_module(backend).aot_func(spec)
        kwargs = {}
        if reg_info is not None:
            kwargs["reg_info"] = reg_info
        out_shape = spec.extra.get("out_shape", _status_shape)
        out_dtype = spec.extra.get("out_dtype", _status_dtype)
        attrs = {a.name: v for a, v in zip(spec.attrs, attr_values)}
        if "infer_shape" in spec.extra:
            shape_fn = spec.extra["infer_shape"]

            def out_shape(*shapes):
                return shape_fn(attrs, *shapes)
        if "infer_dtype" in spec.extra:
            dtype_fn = spec.extra["infer_dtype"]

            def out_dtype(*dtypes):
                return dtype_fn(attrs, *dtypes)
        super().__init__(func, out_shape=out_shape, out_dtype=out_dtype, func_type="aot", **kwargs)
        if arity is not None:
            self.set_signatures(_signatures(spec.expanded_inputs(arity)))
            self.add_prim_attr("ms_kvcache_arity", arity)
        written = spec.inplace_inputs if self.WRITTEN is None else self.WRITTEN
        if written:
            self.add_prim_attr("side_effect_mem", True)
        for attr, value in zip(spec.attrs, attr_values):
            self.add_prim_attr(attr.name, value)
        self.add_prim_attr("ms_kvcache_backend", backend)


def prim_class(spec, written=None, counts=None, absent=()):
    """The ops.Custom subclass for ``spec`` (one class per op and variant, created once).

    Args:
        spec: the op's OpSpec.
        written: names of the inputs written in place (default: the ``inplace`` inputs); use
            ``spec.written_inputs(attrs)`` for inputs with ``inplace_if``.
        counts: {name: number of tensors} for each dynamic input that is not the last input.
        absent: names of optional inputs left out of the call.

    Call graph-mode code through a module-level name bound to the returned class.
    """
    written = tuple(t.name for t in spec.inputs if t.inplace) if written is None else tuple(written)
    counts = dict(counts or {})
    absent = tuple(absent)
    key = (spec.name, frozenset(written), tuple(sorted(counts.items())), frozenset(absent))
    cls = _CLASSES.get(key)
    if cls is None and spec.has_sequences:  # arity-specialised: the signature is set per instance
        cls = _CLASSES[key] = type(spec.op_type, (InplaceCustom,), {"SPEC": spec, "WRITTEN": written})
    if cls is None:
        present = [t for t in spec.inputs if t.name not in absent]
        sigs = []
        for i, t in enumerate(present):
            rw = sig.sig_rw.RW_WRITE if t.name in written else sig.sig_rw.RW_READ
            if t.dynamic and i == len(present) - 1:
                sigs.append(sig.make_sig(t.name, rw, sig.sig_kind.KIND_VAR_POSITIONAL))
            elif t.dynamic:
                if t.name not in counts:
                    raise ValueError(f"prim_class({spec.name}): dynamic input {t.name!r} is not last; "
                                     f"give its length in counts")
                sigs.extend(sig.make_sig(f"{t.name}{j}", rw) for j in range(counts[t.name]))
            else:
                sigs.append(sig.make_sig(t.name, rw))
        # distinct names: _get_cache_prim keys PyNative instances by str(cls)
        default = (frozenset(t.name for t in spec.inputs if t.inplace), (), frozenset())
        suffix = "" if key[1:] == default else "[" + ";".join(
            [f"writes={','.join(sorted(written)) or '-'}"] + [f"{n}={c}" for n, c in sorted(counts.items())]
            + ([f"absent={','.join(sorted(absent))}"] if absent else [])) + "]"
        cls = type(spec.op_type + suffix, (InplaceCustom,),
                   {"SPEC": spec, "WRITTEN": written, "__mindspore_signature__": tuple(sigs)})
        _CLASSES[key] = cls
    return cls


def eager_op(spec, backend, attr_values=(), arity=None, cls=None):
    """Cached ops.Custom primitive instance for PyNative calls (``arity`` for sequence specs; ``cls``: a
    variant from :func:`prim_class`)."""
    key = (spec.name, backend, attr_values, arity, cls)
    op = _EAGER.get(key)
    if op is None:
        args = (backend,) + ((arity,) if spec.has_sequences else ()) + tuple(attr_values)
        op = _EAGER[key] = (prim_class(spec) if cls is None else cls)(*args)
    return op


# ---------------------------------------------------------------------------- PyNative fast path
_FAST = {"enabled": os.environ.get("MS_KVCACHE_PYNATIVE_FAST", "1") != "0", "module": None, "why": None}
_LAUNCHERS = {}


def _fast_module():
    """ms_kvcache._cpu_pyboost if it was built for the running MindSpore, else None (reason in _FAST)."""
    if _FAST["module"] is None and _FAST["why"] is None:
        try:
            from ms_kvcache import _cpu_pyboost as mod  # noqa: WPS433 - optional compiled extension
        except ImportError as exc:
            _FAST["why"] = f"ms_kvcache._cpu_pyboost not importable ({exc})"
        else:
            if mod.mindspore_version != ms.__version__:
                _FAST["why"] = (f"ms_kvcache._cpu_pyboost was built for MindSpore {mod.mindspore_version}, "
                                f"running {ms.__version__}; reinstall ms_kvcache")
            else:
                _FAST["module"] = mod
    return _FAST["module"]


def fast_path_available(backend=None):
    """(ok, why): whether PyNative calls of ``backend`` (default: the active one) use the fast path."""
    backend = backend or _backend.get_backend()
    if not _FAST["enabled"]:
        return False, "disabled (MS_KVCACHE_PYNATIVE_FAST=0 or set_fast_path(False))"
    lib = getattr(_backend.backend_module(backend), "fast_library", None)
    if lib is None or lib() is None:
        return False, f"backend {backend!r} has no AOT library for the fast path"
    if _fast_module() is None:
        return False, _FAST["why"]
    return True, ""


def set_fast_path(enabled):
    """Turn the PyNative fast path on or off (for tests and benchmarks); returns the previous setting."""
    old = _FAST["enabled"]
    _FAST["enabled"] = bool(enabled)
    _LAUNCHERS.clear()
    return old


def eager_launcher(spec, backend, attr_values=(), arity=None):
    """Callable ``f(*tensors)`` that runs ``spec`` in PyNative on its inputs in primitive order
    (sequence arguments flattened). Uses the fast path when available, else the ops.Custom primitive.

    On the fast path the kernel runs in strict mode (attribute ``mskv_strict``): it re-checks the index
    values it reads at launch and fails the op, writing nothing, if one is invalid (see
    :func:`nosync_checker`)."""
    key = (spec.name, backend, attr_values, arity)
    f = _LAUNCHERS.get(key)
    if f is None:
        if fast_path_available(backend)[0]:
            mod = _fast_module()
            lib = _backend.backend_module(backend).fast_library()
            attrs = {a.name: v for a, v in zip(spec.attrs, attr_values)}
            attrs["mskv_strict"] = True
            f = functools.partial(mod.run, mod.kernel(lib, spec.op_type, spec.name, attrs))
        else:
            f = eager_op(spec, backend, attr_values, arity)
        _LAUNCHERS[key] = f
    return f


def nosync_checker(backend):
    """The module whose ``check_*_nosync`` functions read host index tensors without waiting for
    MindSpore's pipeline, or None.

    Reading an index tensor with ``asnumpy()`` waits for every pending PyNative op: ~2-4 ms on a
    2-core machine, 50x an ``ops.add``. When the fast path is active, the wrappers may read a *host*
    index tensor (not the output of a MindSpore op) directly instead, because the strict kernel checks
    the same values again at launch: a value changed in place by a still-pending op is then reported
    by the kernel (the op fails and writes nothing; MindSpore raises at the next sync) instead of being
    skipped. A problem seen on the direct read is confirmed with a waiting read before raising.
    """
    key = ("nosync", backend)
    mod = _LAUNCHERS.get(key, False)
    if mod is False:
        mod = _fast_module() if fast_path_available(backend)[0] else None
        _LAUNCHERS[key] = mod
    return mod


@constexpr(reuse_result=False)
def graph_backend():
    """The active backend, folded to a constant when a graph is compiled."""
    return _backend.get_backend()
