"""In-place ``ops.Custom`` primitives built from an :class:`~ms_kvcache._spec.OpSpec`.

How a cache is written in place in every MindSpore mode (PyNative, GRAPH_MODE, ``@ms.jit``): the
primitive subclasses ``ops.Custom``, declares a class-level ``__mindspore_signature__`` that marks the
cache arguments ``sig_rw.RW_WRITE``, sets ``side_effect_mem`` so graph mode keeps the call and orders
it before later reads of the same Parameter even when its output is unused, writes through the input
pointer, and returns a dummy int32 ``[1]`` tensor. This is the convention of MindSpore's own
ReshapeAndCache and of ms_custom_ops.

The public wrappers call :func:`eager_op` in PyNative (cached instances) and, in graph mode,
``_get_cache_prim(prim_class(spec))(backend, *attr_values)`` so the graph compiler instantiates the
primitive with constant arguments.
"""
import mindspore as ms
from mindspore import ops
from mindspore.ops import signature as sig
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend

from mindspore.ops._primitive_cache import _get_cache_prim  # noqa: F401  (re-exported)

__all__ = ["prim_class", "eager_op", "graph_backend", "_run_in_jit", "_get_cache_prim"]

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


class InplaceCustom(ops.Custom):
    """Base of every ms_kvcache primitive; subclasses set ``SPEC`` and ``__mindspore_signature__``."""

    SPEC = None

    def __init__(self, backend, *attr_values):
        spec = self.SPEC
        func, reg_info = _backend.backend_module(backend).aot_func(spec)
        kwargs = {}
        if reg_info is not None:
            kwargs["reg_info"] = reg_info
        out_shape = spec.extra.get("out_shape", _status_shape)
        out_dtype = spec.extra.get("out_dtype", _status_dtype)
        super().__init__(func, out_shape=out_shape, out_dtype=out_dtype, func_type="aot", **kwargs)
        if spec.inplace_inputs:
            self.add_prim_attr("side_effect_mem", True)
        for attr, value in zip(spec.attrs, attr_values):
            self.add_prim_attr(attr.name, value)
        self.add_prim_attr("ms_kvcache_backend", backend)


def prim_class(spec):
    """The ops.Custom subclass for ``spec`` (one class per op, created once)."""
    cls = _CLASSES.get(spec.name)
    if cls is None:
        sigs = tuple(
            sig.make_sig(t.name, sig.sig_rw.RW_WRITE if t.inplace else sig.sig_rw.RW_READ)
            for t in spec.inputs
        )
        cls = type(spec.op_type, (InplaceCustom,), {"SPEC": spec, "__mindspore_signature__": sigs})
        _CLASSES[spec.name] = cls
    return cls


def eager_op(spec, backend, attr_values=()):
    """Cached primitive instance for PyNative calls."""
    key = (spec.name, backend, attr_values)
    op = _EAGER.get(key)
    if op is None:
        op = _EAGER[key] = prim_class(spec)(backend, *attr_values)
    return op


@constexpr(reuse_result=False)
def graph_backend():
    """The active backend, folded to a constant when a graph is compiled."""
    return _backend.get_backend()
