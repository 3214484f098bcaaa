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
    """Base of every ms_kvcache primitive; subclasses set ``SPEC``, ``WRITTEN`` and
    ``__mindspore_signature__``."""

    SPEC = None
    #: names of the inputs this class writes (None: every ``inplace`` input of the spec)
    WRITTEN = None

    def __init__(self, backend, *attr_values):
        spec = self.SPEC
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


def eager_op(spec, backend, attr_values=(), cls=None):
    """Cached primitive instance for PyNative calls (``cls``: a variant from :func:`prim_class`)."""
    key = (spec.name, backend, attr_values, cls)
    op = _EAGER.get(key)
    if op is None:
        op = _EAGER[key] = (prim_class(spec) if cls is None else cls)(backend, *attr_values)
    return op


@constexpr(reuse_result=False)
def graph_backend():
    """The active backend, folded to a constant when a graph is compiled."""
    return _backend.get_backend()
