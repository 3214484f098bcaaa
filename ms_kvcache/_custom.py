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

Graph-mode safety (docs/design.md, "Graph mode: written tensors must be whole Parameters"): a primitive
made by a graph branch refuses in its infer step (compile time) a written input whose abstract is not a
Parameter (``RefType``), because MindSpore would hand the kernel a temporary copy (slice, view, op result,
Tensor attribute) or a view argument's base address; :func:`eager_op` instances skip that check
(PyNative wrappers check views themselves). Every primitive also carries the attributes the cpu and sim
AOT entries read to refuse, before writing, written tensors that share memory with each other or with an
input the op reads (``mskv_disjoint``, ...; :func:`_alias_sets`, :func:`_set_alias_attrs`), since graph code
sees no tensor identity. :func:`check_graph_types` is the
compile-time type check of the graph branches' arguments.

Lists of tensors (one cache per layer: ``copy_blocks``, the multi-layer transfers). A Python list of
Parameters cannot be a graph input, and an ops.Custom input that is a tuple of tensors is not written
in place (RW_WRITE does not reach the Parameters inside it; graph mode then reads stale values). So an
input declared ``TensorSpec(..., dynamic=True)`` reaches the primitive *flattened*: its n tensors are
n consecutive inputs ``<name>_0 .. <name>_{n-1}``, each its own argument (RW_WRITE if written). The
counts are per instance: ``prim_class(spec)(backend, counts, *attr_values)`` with ``counts`` one int
per dynamic input (an int alone: the same count for every dynamic input), so one class serves every
layer count and several lists of different lengths. The instance sets its signature
(``Primitive.set_signatures``) and the attribute ``dyn_input_sizes`` (one entry per input: the count of
a dynamic input, -1 otherwise): MindSpore's own convention, which its Ascend custom kernel uses to
regroup the flat inputs into aclTensorLists, which the sim AOT entry reads the same way and which the
cpu kernels read through ``mskv::InputSpans`` (the fast path passes it too). In a graph the counts
are tuple lengths (constants), e.g. ``_get_cache_prim(Prim)(graph_backend(), (len(k), len(v)))(*k, *v,
m)``: this works in a GRAPH_MODE ``Cell.construct`` with ParameterTuple attributes and in ``@ms.jit``
functions.

Attribute values as trailing inputs (backends with ``ATTRS_AS_INPUTS = True``: ascend). MindSpore's (2.7-2.10)
Ascend C custom kernel (``CustomV2AclnnKernelMod``) takes an op's attribute values from the primitive's
*inputs*, after the tensors, in the order of the generated ``aclnn<Op>GetWorkspaceSize`` prototype
(= OpDef attr order = ``spec.attrs``). The instance then declares one signature entry per attribute with
its value as default (the graph compiler appends them to every ``prim(*tensors)`` call), ends
``dyn_input_sizes`` with one -1 per attribute, strips them before the infer functions (which first refuse a
GE / jit_level O2 compile: ``ascend.infer_guard``), and copies its attributes to ``custom_pyboost``. PyNative
calls on such a backend go through its ``pynative_launcher`` (ascend: the aclnn module
``ms_kvcache._ascend_pyboost``, else :func:`graph_launcher`).

Attribute encoding. The instance takes the public attribute values (``"BNSD"``, ``"h2d"``) and hands the
kernels their ``AttrSpec.encode``-d form (``AttrSpec.codes``: named modes become ints), as primitive
attributes, as trailing inputs and on the fast path alike; the infer functions and ``inplace_if`` see the
public values. No kernel of any backend receives a string attribute, because MindSpore 2.7 / 2.8 cannot
pass one to an Ascend C op (see :class:`ms_kvcache._spec.AttrSpec`).

Inputs written only for some attribute value (``TensorSpec.inplace_if``, e.g. the buffer of a d2h
transfer) are resolved per instance from its attribute values: RW_WRITE in its signature,
``side_effect_mem`` if anything is written. An optional input that is absent is passed as an empty
``[0]`` tensor (every backend), so every instance of an op has the same inputs.

``spec.extra["infer_shape"](attrs, *shapes)`` / ``["infer_dtype"](attrs, *dtypes)``, when given, run
in MindSpore's infer step (``attrs`` = {attr name: value}, defaults filled; a dynamic input's shapes /
dtypes come as one tuple): at graph compile time and at every ops.Custom PyNative call (not on the
fast path). Ops with lists use them for the shape/dtype checks of every tensor of a list, which
costs one Python call per op at compile time instead of one constexpr per tensor.

PyNative fast path. ``ops.Custom`` costs ~0.1-2 ms per PyNative call on this CPU. When the backend
offers an AOT library usable outside ops.Custom (``fast_library()``; the cpu backend does) and the
optional module ``ms_kvcache._cpu_pyboost`` was built for the running MindSpore version, PyNative calls
launch the same AOT entry through MindSpore's PyboostRunner API instead (a few us, asynchronous, in
order with other ops; see ms_kvcache/csrc/pyboost_module.cpp). ``MS_KVCACHE_PYNATIVE_FAST=0`` or
:func:`set_fast_path` (False) turns it off; graph mode always uses ops.Custom.
"""
import functools
import sys
import threading

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore.common import dtype as mstype
from mindspore.ops import signature as sig
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend, _layerwise_guard, _pyboost_loader

from mindspore.ops._primitive_cache import _get_cache_prim  # noqa: F401  (re-exported)

__all__ = ["prim_class", "eager_op", "eager_launcher", "graph_backend", "_run_in_jit", "_get_cache_prim",
           "graph_launcher", "fast_path_available", "set_fast_path", "nosync_checker", "empty_input",
           "empty_input_graph", "output_sources", "check_graph_types", "check_written_are_parameters"]


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


def _regroup(spec, counts, flat):
    """Flat infer-step arguments -> one per spec input (a dynamic input's as one tuple)."""
    if counts is None:
        return flat
    out, i, it = [], 0, iter(counts)
    for t in spec.inputs:
        if t.dynamic:
            n = next(it)
            out.append(tuple(flat[i:i + n]))
            i += n
        else:
            out.append(flat[i])
            i += 1
    return out


class InplaceCustom(ops.Custom):
    """Base of every ms_kvcache primitive; subclasses set ``SPEC`` (and, for a spec without dynamic or
    conditionally written inputs, a class-level ``__mindspore_signature__``).

    ``__init__(backend, *attr_values)``, or ``__init__(backend, counts, *attr_values)`` when the spec
    has dynamic inputs (``counts``: one int per dynamic input, or one int for all of them).
    """

    SPEC = None

    def __init__(self, backend, *init_args):
        spec = self.SPEC
        counts = None
        attr_values = init_args
        if spec.has_dynamic:
            counts, attr_values = spec.counts(init_args[0]), init_args[1:]
        bmod = _backend.backend_module(backend)
        func, reg_info = bmod.aot_func(spec)
        kwargs = {}
        if reg_info is not None:
            kwargs["reg_info"] = reg_info
        out_shape = spec.extra.get("out_shape", _status_shape)
        out_dtype = spec.extra.get("out_dtype", _status_dtype)
        attrs = spec.attr_values(attr_values)  # public values (names): what the infer functions see
        kattrs = spec.kernel_attrs(attrs)      # what the kernels see (AttrSpec.codes encoded)
        if "infer_shape" in spec.extra:
            shape_fn = spec.extra["infer_shape"]

            def out_shape(*shapes):
                return shape_fn(attrs, *_regroup(spec, counts, shapes))
        if "infer_dtype" in spec.extra:
            dtype_fn = spec.extra["infer_dtype"]

            def out_dtype(*dtypes):
                return dtype_fn(attrs, *_regroup(spec, counts, dtypes))
        # Backends whose kernel takes the attribute values as trailing inputs (ascend: MindSpore's Ascend C
        # custom kernel reads them there, see attrs_as_inputs below): the infer functions see them too.
        n_attr = len(spec.attrs) if getattr(bmod, "ATTRS_AS_INPUTS", False) else 0
        if n_attr:
            out_shape, out_dtype = _drop_trailing(out_shape, n_attr), _drop_trailing(out_dtype, n_attr)
        guard = getattr(bmod, "infer_guard", None)
        if guard is not None:  # ascend: refuse a jit level the primitive cannot run under, at compile time
            out_shape = guard(spec, out_shape)
        super().__init__(func, out_shape=out_shape, out_dtype=out_dtype, func_type="aot", **kwargs)
        sigs = None
        if spec.has_dynamic or spec.has_conditional_writes or n_attr:
            sigs = _signatures(spec.expanded_inputs(counts, attrs))
        if n_attr:
            # the attribute values as trailing inputs with defaults: the graph compiler appends them to
            # every call ``prim(*tensors)`` (MindSpore fills missing arguments from signature defaults)
            sigs += tuple(sig.make_sig(a.name, default=kattrs[a.name]) for a in spec.attrs)
        if sigs is not None:
            self.set_signatures(sigs)
        if counts is not None:
            self.add_prim_attr("dyn_input_sizes", spec.dyn_input_sizes(counts) + [-1] * n_attr)
        if spec.written_inputs(attrs):
            self.add_prim_attr("side_effect_mem", True)
        for attr, value in zip(spec.attrs, attr_values):
            self.add_prim_attr(attr.name, kattrs[attr.name])
        self.add_prim_attr("ms_kvcache_backend", backend)
        #: (flat input index, argument name) of every tensor this instance writes; an instance made by a
        #: graph branch (the default) refuses, in its infer step, a written tensor that is not a Parameter
        #: (see :func:`check_written_are_parameters`); :func:`eager_op` turns that off for its instances
        #: public op name and argument renames for the messages (``public_names`` of an internal op such as
        #: the quantizing writes: ``reshape_and_cache_quant`` with kv_format MERGED is ``reshape_and_cache_merged``
        #: and its ``key_cache`` is ``kv_cache``)
        names = type(self).public_names
        self.public_op, renames = names(attrs) if names is not None else (spec.name, {})
        self.written_args = tuple((i, renames.get(n, n)) for i, n in _written_args(spec, counts, attrs))
        self.require_parameters = True
        _set_alias_attrs(self, spec, counts, attrs)
        if renames or self.public_op != spec.name:
            if self.get_attr_dict().get("mskv_op_name") is not None:
                self.add_prim_attr("mskv_op_name", self.public_op)
                self.add_prim_attr("mskv_arg_names", ";".join(renames.get(n, n) for n in _display_names(spec, counts)))
        #: attribute values (kernel encoding) the primitive takes as trailing inputs (spec order), () if none
        self.attr_inputs = tuple(kattrs[a.name] for a in spec.attrs) if n_attr else ()
        pyboost = getattr(self, "custom_pyboost", None)
        if pyboost is not None:
            # ops.Custom on Ascend copies the attributes to its PyNative twin (``_CustomExt``) at the end of
            # its own __init__; the ones set above (and custom_callback_func / custom_inputs_type, set
            # after that copy) would be missing there
            for key, value in self.get_attr_dict().items():
                pyboost.add_prim_attr(key, value)

    #: optional ``staticmethod(attrs -> (public op name, {argument: public argument name}))`` set on the
    #: class of an internal op (see __init__)
    public_names = None

    def __infer__(self, *args):
        out = super().__infer__(*args)  # shape / dtype checks of the infer functions first
        if self.require_parameters:
            check_written_are_parameters(self.public_op, self.written_args, args)
        return out


def _display_names(spec, counts):
    """Argument name of each flat primitive input: ``name`` or ``name[j]`` for a list input."""
    it = iter(spec.counts(counts)) if spec.has_dynamic else iter(())
    out = []
    for t in spec.inputs:
        if t.dynamic:
            out.extend(f"{t.name}[{j}]" for j in range(next(it)))
        else:
            out.append(t.name)
    return out


def _written_args(spec, counts, attrs):
    names = _display_names(spec, counts)
    return tuple((i, names[i]) for i, t in enumerate(spec.expanded_inputs(counts, attrs)) if t.inplace)


def _numel(shape):
    n = 1
    for d in shape or ():
        n *= int(d)
    return n


#: Why a graph refuses a written tensor that is not a Parameter (tests match the first sentence).
NOT_A_PARAMETER = (
    "expected a Parameter (a whole Parameter, not a slice or a computed tensor), got a tensor that is not a "
    "Parameter. In GRAPH_MODE and @ms.jit a tensor the op writes must be a mindspore.Parameter passed whole: a "
    "Cell attribute, an item of a ParameterTuple, a Parameter argument of the Cell or jit function, or a "
    "Parameter the function refers to. MindSpore hands an in-place op a temporary copy of a slice or view of "
    "a Parameter (self.kv[0], ops.split, reshape), of an op's result or of a Tensor attribute, and a Tensor "
    "argument may be a view whose base address it passes, so the write would be lost or land elsewhere. "
    "Make each cache its own Parameter (e.g. a ParameterTuple of the K and V planes), or call the op in "
    "PyNative")


def check_written_are_parameters(op, written_args, args):
    """Infer-step check of a graph-branch primitive: every written input (``written_args``: (flat index,
    name)) must be a Parameter, which MindSpore's abstract value marks with a ``RefType`` dtype at compile
    time (what ``ops.IsParameter`` reads), and a contiguous one (:func:`check_written_are_contiguous`). A
    zero-element tensor (the ``[0]`` stand-in of an absent optional input) is exempt: nothing is written to
    it. Raises TypeError (not a Parameter) or ValueError (not contiguous) naming the op and argument."""
    refs = []
    for i, name in written_args:
        if i >= len(args):
            continue
        a = args[i]
        if _numel(a.get("shape")) == 0:
            continue
        if not isinstance(a.get("dtype"), mstype.RefType):
            raise TypeError(f"{op}: argument '{name}': {NOT_A_PARAMETER}")
        refs.append((name, a))
    if refs:
        check_written_are_contiguous(op, refs, _compiling_parameters())


def check_written_are_contiguous(op, refs, params):
    """Refuse a graph whose written Parameter is not contiguous (a view given with ``Parameter.set_data``): MindSpore
    runs the graph on a contiguous copy of it, so the write would not reach the memory the view shows (PyNative
    refuses such a cache the same way). The graph's abstract values carry no Parameter identity, so the
    Parameters of the graph being compiled (``params``, :func:`_compiling_parameters`) that are not contiguous
    and have a written argument's shape and dtype are the ones refused.

    Args:
        refs: ``(argument name, abstract dict)`` of the written Parameter arguments.
        params: the Parameters of the graph being compiled.

    Raises:
        ValueError: naming the op, the argument, the Parameter and its strides.
    """
    strided = [p for p in params if hasattr(p, "is_contiguous") and not p.is_contiguous()]
    if not strided:
        return
    for p in strided:
        names = [n for n, a in refs if tuple(a.get("shape") or ()) == tuple(p.shape)
                 and a["dtype"].element_type() == p.dtype]
        if not names:
            continue
        which = "' / '".join(names)
        among = ("" if len(names) == 1 else
                 " (one of these arguments: a graph's abstract values do not say which Parameter each one is)")
        raise ValueError(
            f"{op}: argument '{which}': expected a contiguous Parameter, got Parameter '{p.name}' (shape "
            f"{tuple(p.shape)}, {p.dtype}) with strides {tuple(p.stride())}{among}: a view given with set_data. "
            f"MindSpore's graph runs on a contiguous copy of it, so the write would not reach the memory it views. "
            f"Give the Parameter its own memory (p.set_data(view.contiguous()) copies) or call the op in PyNative")


def _compile_frame():
    """The ``compile`` frame of ``mindspore/graph/api.py`` (``_CellGraphExecutor.compile`` /
    ``_JitExecutor.compile``) on the calling thread's stack, or None when MindSpore is not compiling a graph.
    (No import in here: the graph parser may read this function.)"""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "compile" and code.co_filename.replace("\\", "/").endswith(
                ("mindspore/graph/api.py", "mindspore/common/api.py")):
            return f
        f = f.f_back
    return None


def graph_compiling():
    """Whether this Python code runs while MindSpore compiles a graph (a GRAPH_MODE ``construct`` or a ``@ms.jit``
    function: the parser runs what it cannot compile once, at compile time, not at each call)."""
    return _compile_frame() is not None


def _compiling_parameters():
    """The Parameters of the graph MindSpore is compiling now: those of the Cell (with its sub-cells), the
    Parameter arguments, and for a ``@ms.jit`` function the Parameters its code names as globals or closure
    variables; read from the ``compile`` frame of ``mindspore/graph/api.py`` (``_CellGraphExecutor.compile`` /
    ``_JitExecutor.compile``), [] when there is none (not compiling, another MindSpore layout)."""
    from mindspore import Parameter

    f = _compile_frame()
    if f is None:
        return []
    loc = f.f_locals
    owner = loc.get("self")
    found, seen = [], set()

    def add(x):
        if isinstance(x, Parameter):
            if id(x) not in seen:
                seen.add(id(x))
                found.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                add(y)
        elif isinstance(x, dict):
            for y in x.values():
                add(y)

    for cell in (loc.get("obj"), getattr(owner, "obj", None)):
        if cell is not None and hasattr(cell, "parameters_and_names"):
            add([q for _, q in cell.parameters_and_names()])
    add(list(loc.get("args", ())))
    fn = getattr(owner, "fn", None)
    fn = getattr(fn, "__wrapped__", fn)
    if callable(fn) and hasattr(fn, "__code__"):
        glb = getattr(fn, "__globals__", {})
        add([glb[n] for n in fn.__code__.co_names if n in glb])
        add([c.cell_contents for c in (fn.__closure__ or ()) if _has_contents(c)])
    return found


def _has_contents(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _alias_sets(spec, counts, attrs):
    """(flat indices of the written inputs, flat indices of the inputs that must not overlap them): the
    alias rule, as the PyNative wrappers (:func:`ms_kvcache._validate.require_disjoint`), the graph-mode
    launch check (:func:`_set_alias_attrs`), the fast-path kernels (:func:`alias_attrs`) and the replayed
    calls' Plan apply it. Written tensors share no byte with each other, and no input the op only reads
    (key, value, slot_mapping, positions, cos_sin_cache, scales and offsets, block ids and mappings, a
    transfer's buffer or caches of the other direction, ...) may share a byte with a written one: the
    kernel would read rows it has already overwritten. Read inputs may overlap each other (key and value
    two slices of one qkv tensor). Exempt: the inputs of ``spec.read_may_alias`` (swap_blocks'
    ``src_cache``, which may be its ``dst_cache``)."""
    written, read = [], []
    it = iter(spec.counts(counts)) if spec.has_dynamic else iter(())
    wnames = set(spec.written_inputs(attrs))
    free = set(spec.read_may_alias)
    i = 0
    for t in spec.inputs:
        n = next(it) if t.dynamic else 1
        for _ in range(n):
            if t.name in wnames:
                written.append(i)
            elif t.name not in free:
                read.append(i)
            i += 1
    return written, read


def alias_attrs(spec, counts, attrs, renames=None, op_name=None):
    """The primitive attributes of the alias rule (``mskv_disjoint``, ``mskv_disjoint_read``,
    ``mskv_arg_names``, ``mskv_op_name``) for these counts and (public) attribute values, ``{}`` when
    there is nothing to check; ``renames`` / ``op_name``: public argument / op names of an internal op
    (:attr:`InplaceCustom.public_names`). The cpu and sim AOT entries read them at launch and refuse,
    before writing anything, a launch whose tensors break the rule (``mskv::CheckDisjointArgs``,
    ``AliasProblem``). Set on every primitive (graph mode, ops.Custom) and given to the PyNative fast
    path's kernels too (:func:`eager_launcher`), which then catch a read input the Python check could not
    see without a pipeline sync (the output of a still-pending op)."""
    written, read = _alias_sets(spec, counts, attrs)
    if len(written) + len(read) < 2 or not written:
        return {}
    renames = renames or {}
    return {"mskv_disjoint": written, "mskv_disjoint_read": read,
            "mskv_arg_names": ";".join(renames.get(n, n) for n in _display_names(spec, counts)),
            "mskv_op_name": op_name or spec.name}


def _set_alias_attrs(prim, spec, counts, attrs):
    """Attributes the cpu and sim AOT entries read to refuse, before writing anything, a launch that
    breaks the alias rule (graph mode, where the wrapper cannot see tensor identity): see
    :func:`alias_attrs` (``mskv_disjoint`` / ``mskv_disjoint_read``: flat input indices from
    :func:`_alias_sets`; ``mskv_arg_names``, the argument names of the flat inputs joined by ``;``, and
    ``mskv_op_name`` for the message)."""
    for key, value in alias_attrs(spec, counts, attrs).items():
        prim.add_prim_attr(key, value)


def _drop_trailing(fn, n):
    """``fn`` called without its last ``n`` arguments (the attribute inputs' shapes / dtypes)."""
    if not callable(fn):
        return fn

    def wrapped(*args):
        return fn(*args[:-n])
    return wrapped


def prim_class(spec):
    """The ops.Custom subclass for ``spec`` (one class per op, created once).

    Instantiate it as ``cls(backend, *attr_values)``, or ``cls(backend, counts, *attr_values)`` for a
    spec with dynamic inputs. Graph-mode code calls it through a module-level name bound to the class:
    ``_get_cache_prim(_Prim)(graph_backend(), ...)``.
    """
    cls = _CLASSES.get(spec.name)
    if cls is None:
        ns = {"SPEC": spec}
        if not (spec.has_dynamic or spec.has_conditional_writes):
            ns["__mindspore_signature__"] = _signatures(spec.expanded_inputs())
        cls = type(spec.op_type, (InplaceCustom,), ns)
        _CLASSES[spec.name] = cls
    return cls


def eager_op(spec, backend, attr_values=(), counts=None):
    """Cached ops.Custom primitive instance for PyNative calls (``counts`` for specs with dynamic
    inputs, as :class:`InplaceCustom`)."""
    key = (spec.name, backend, attr_values, counts)
    op = _EAGER.get(key)
    if op is None:
        args = (backend,) + ((spec.counts(counts),) if spec.has_dynamic else ()) + tuple(attr_values)
        op = prim_class(spec)(*args)
        op.require_parameters = False  # PyNative: views and aliases are checked by the wrapper (EagerOp)
        _EAGER[key] = op
    return op


def graph_launcher(prim):
    """``f(*tensors)``: ``prim(*tensors)`` compiled as a graph (``ms.jit``), for PyNative calls on a backend
    whose primitive takes the attribute values as trailing inputs (ascend).

    Why: on Ascend, ``ops.Custom.__call__`` (PyNative) hands its arguments to ``pyboost_custom_ext``,
    whose converter accepts tensors only (MindSpore 2.10 ``custom_ext_op.yaml``: ``tuple[tensor]``; an
    int, bool, str or tuple argument is a TypeError, tested in tests/test_ascend_backend.py), and whose
    kernel is the templated ``CustomAclnnPyboostKernelMod<N>`` (N <= 12, no aclTensorList regrouping, no
    RW_WRITE bookkeeping). In a graph the call gets its attribute inputs from the signature defaults and
    runs on ``CustomV2AclnnKernelMod`` (see docs/design.md "In-place ops in CANN OpDefs"). Each tensor is
    its own graph input, so in-place writes reach the caller's tensors. One compile per new input
    shape/dtype combination (MindSpore's jit cache). Compiled for jit_level O0 on MindSpore's own backend
    (never GE). On the ascend backend this is the fallback when ms_kvcache._ascend_pyboost is not built
    (``ascend.pynative_launcher``).
    """
    def launch(*tensors):
        return prim(*tensors)
    try:  # the kernel-by-kernel runtime whatever the global jit_config says (O2 / GE cannot run it)
        return ms.jit(launch, jit_level="O0", backend="ms_backend")
    except TypeError:  # a MindSpore whose jit() has no such keywords
        return ms.jit(launch)


# ---------------------------------------------------------------------------- PyNative fast path
_FAST = _pyboost_loader.FAST  # the switch and the loaded module (ms_kvcache/_pyboost_loader.py)
_LAUNCHERS = {}


def _fast_module():
    """ms_kvcache._cpu_pyboost if it was built for the running MindSpore, else None (reason in _FAST)."""
    return _pyboost_loader.fast_module()


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
    from ms_kvcache import _validate

    if _validate.MS_VIEWS_WITHOUT_STORAGE_INFO:
        # the fast path hands the kernel the memory MindSpore converts a tensor to: for a reshape() / view()
        # output that is a copy, and the write into it is lost; ops.Custom's view checks refuse those
        return False, (f"MindSpore {_ms_version_str()}: a reshape() / view() output carries no storage info, "
                       f"and the fast path's write into one would be lost (the ops.Custom path, which refuses "
                       f"such views, is used; MindSpore >= 2.8 has the fast path)")
    return True, ""


def _ms_version_str():
    import mindspore

    return mindspore.__version__


def set_fast_path(enabled):
    """Turn the PyNative fast path on or off (for tests and benchmarks); returns the previous setting."""
    old = _FAST["enabled"]
    _FAST["enabled"] = bool(enabled)
    _LAUNCHERS.clear()
    return old


def output_sources(spec, counts=None):
    """For each real output of ``spec`` (``OpSpec.outputs`` without the dummy status), the index of the
    primitive input (dynamic inputs flattened for ``counts``) whose shape and dtype it has.

    Derived from the same ``extra["out_shape"]`` / ``["out_dtype"]`` callables ops.Custom uses, by calling
    them once on one marker per input: an output must be *like* an input (the rope ops' ``query_out``
    is like ``query``, ...). Raises ValueError for an output that is computed otherwise (the fast path
    then does not serve the op). ``()`` for ops without real outputs.
    """
    if "out_shape" not in spec.extra:
        return ()
    n = len(spec.expanded_inputs(counts) if spec.has_dynamic else spec.inputs)
    marks = [_Mark(i) for i in range(n)]
    found = []
    for key in ("out_shape", "out_dtype"):
        try:
            res = spec.extra[key](*marks)
        except Exception as exc:  # noqa: BLE001 - any failure means "not a copy of an input"
            raise ValueError(f"{spec.name}: {key} is not 'like an input' ({exc})") from None
        res = res if isinstance(res, (tuple, list)) else (res,)
        if not all(isinstance(r, _Mark) for r in res):
            raise ValueError(f"{spec.name}: {key} is not 'like an input'")
        found.append(tuple(r.index for r in res))
    if found[0] != found[1]:
        raise ValueError(f"{spec.name}: outputs take shape and dtype from different inputs ({found})")
    return found[0]


class _Mark:
    """Stand-in for an input's shape/dtype when probing out_shape/out_dtype (see output_sources)."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def eager_launcher(spec, backend, attr_values=(), counts=None):
    """Callable ``f(*tensors)`` that runs ``spec`` in PyNative on its inputs in primitive order
    (dynamic inputs flattened; ``counts`` as for :class:`InplaceCustom`). Uses the fast path when
    available, else the ops.Custom primitive. Returns what the primitive returns: the output tensor or
    the tuple of output tensors for ops with real outputs (``OpSpec.outputs``), else None (fast path) or
    the dummy status tensor (ops.Custom).

    On the fast path the kernel runs in strict mode (attribute ``mskv_strict``): it re-checks the index
    values it reads at launch and fails the op, writing nothing, if one is invalid (see
    :func:`nosync_checker`); it also gets the alias rule's attributes (:func:`alias_attrs`). It gets the
    attributes the primitive would set, ``dyn_input_sizes`` included.
    Outputs are new tensors allocated in MindSpore's pipeline with the shape and dtype of the input given
    by :func:`output_sources`."""
    key = (spec.name, backend, attr_values, counts)
    f = _LAUNCHERS.get(key)
    if f is None:
        if fast_path_available(backend)[0]:
            mod = _fast_module()
            lib = _backend.backend_module(backend).fast_library()
            public = spec.attr_values(attr_values)
            attrs = spec.kernel_attrs({a.name: v for a, v in zip(spec.attrs, attr_values)})
            attrs["mskv_strict"] = True
            if spec.has_dynamic:
                attrs["dyn_input_sizes"] = spec.dyn_input_sizes(counts)
            # the alias rule at launch too (a read input that was a pending op's output when the Python
            # check ran: refused before anything is written, MindSpore raises at the next sync); the op
            # name stays the kernel's, as in the kernel's other messages on this path
            names = prim_class(spec).public_names
            renames = names(public)[1] if names is not None else None
            alias = alias_attrs(spec, spec.counts(counts) if spec.has_dynamic else None, public, renames)
            alias.pop("mskv_op_name", None)
            attrs.update(alias)
            # run_or_queue: a writer runs at once when MindSpore's pipeline is idle (same order; see
            # ms_kvcache/csrc/pyboost_module.cpp, "direct launch"), else it is queued like run()
            run = getattr(mod, "run_or_queue", mod.run)
            kernel = mod.kernel(lib, spec.op_type, spec.name, attrs, list(output_sources(spec, counts)))
            f = _serialised(functools.partial(run, kernel))
            f.kernel = kernel  # what EagerOp's replay plans launch (ms_kvcache._eager, "replayed calls")
        else:
            bmod = _backend.backend_module(backend)
            if getattr(bmod, "pynative_launcher", None) is not None:
                # ascend: aclnn launches through MindSpore's PyboostRunner (ms_kvcache._ascend_pyboost) when
                # built, else the primitive in a jit graph (see graph_launcher)
                f = bmod.pynative_launcher(spec, attr_values, counts,
                                           lambda: graph_launcher(eager_op(spec, backend, attr_values, counts)))
            else:
                f = eager_op(spec, backend, attr_values, counts)
                if backend == "sim":
                    f = _sim_checked(spec, f, attr_values, counts)
                elif getattr(bmod, "ATTRS_AS_INPUTS", False):
                    f = graph_launcher(f)
        _LAUNCHERS[key] = f
    if _layerwise_guard.pending():  # MS_KVCACHE_CHECK_LAYERWISE=1 and a LayerwiseTransfer layer not waited for
        return _layerwise_checked(spec, attr_values, counts, f)
    return f


def _layerwise_checked(spec, attr_values, counts, f):
    """``f`` preceded by the debug check of :mod:`ms_kvcache._layerwise_guard` (no tensor a pending layer-wise
    transfer uses)."""
    norm = spec.counts(counts) if spec.has_dynamic else None
    names = _display_names(spec, norm)
    written = {i for i, _ in _written_args(spec, norm, spec.attr_values(attr_values))}

    def run(*tensors):
        _layerwise_guard.check_launch(spec.name, names, written, tensors)
        return f(*tensors)

    return run


#: One submission at a time into MindSpore's PyNative pipeline from the fast path: MindSpore's frontend is
#: not thread-safe, and a race between two Python threads submitting through PyboostRunner raised a C++
#: exception on a pipeline thread that aborted the process (MindSpore's own ops raise RuntimeError there).
_SUBMIT = threading.Lock()


def _serialised(run):
    def call(*tensors):
        with _SUBMIT:
            return run(*tensors)

    call.fast_path = True  # what is_fast_launcher() reads
    return call


def is_fast_launcher(f):
    """True if ``f`` (from :func:`eager_launcher`) launches through the PyNative fast path."""
    return bool(getattr(f, "fast_path", False))


def _sim_checked(spec, launch, attr_values, counts):
    """``launch`` preceded by the op's AscendC tiling on the emulated SoC (:func:`ms_kvcache.sim.check_tiling`,
    memoised per signature), so that a call the tiling rejects (bfloat16 or unaligned rows on
    Ascend310P3, ...) raises its reason at the call site instead of MindSpore's generic failed-AOT error at
    the next sync."""
    from ms_kvcache import sim  # noqa: WPS433 - only for the sim backend

    attrs = spec.kernel_attrs(spec.attr_values(attr_values))
    norm = spec.counts(counts) if spec.has_dynamic else None

    optional = [t.optional for t in spec.inputs]

    def run(*tensors):
        grouped = _regroup(spec, norm, list(tensors))
        # an absent OPTIONAL input travels as an empty [0] tensor: the tiling is told "absent" (so a
        # rejection names the inputs the user passed, not the stand-in)
        grouped = [None if opt and not isinstance(x, (tuple, list)) and tuple(x.shape) == (0,) else x
                   for opt, x in zip(optional, grouped)]
        try:
            sim.check_tiling(spec.op_type, grouped, attrs)
        except KeyError:  # no kernel in the emulation: the launch reports it
            pass
        return launch(*tensors)

    return run


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


_EMPTY = {}


def empty_input(dtype):
    """The empty ``[0]`` tensor of ``dtype`` passed in place of an absent optional input (eager code;
    one cached tensor per dtype)."""
    t = _EMPTY.get(dtype)
    if t is None:
        t = _EMPTY[dtype] = Tensor(np.zeros((0,), np.float32), dtype=dtype)
    return t


def _check_graph_types(op, names, *types):
    """Argument types of a graph branch, at compile time: ``types[i]`` is ``F.typeof`` of the argument
    named ``names[i]``; a name ending in ``?`` may be None, one ending in ``[]`` is a list or tuple (its
    tensors are checked by the op). Raises TypeError naming the op and argument (a Python list or a numpy
    array reaching ``construct`` otherwise fails inside MindSpore, e.g. "'List' object has no attribute
    'shape'" or "The prim is not a PrimitivePy"). Returns True."""
    for name, t in zip(names, types):
        kind = "sequence" if name.endswith("[]") else ("optional" if name.endswith("?") else "tensor")
        name = name.rstrip("?[]")
        if kind == "sequence":
            if isinstance(t, (mstype.Tuple, mstype.List)):
                continue
            raise TypeError(f"{op}: argument '{name}': expected a list or tuple of Tensors (one per layer or "
                            f"plane), got {_graph_type_name(t)}")
        if isinstance(t, mstype.TensorType) or (kind == "optional" and type(t).__name__ == "TypeNone"):
            continue
        what = "a mindspore.Tensor or None" if kind == "optional" else "a mindspore.Tensor"
        raise TypeError(f"{op}: argument '{name}': expected {what}, got {_graph_type_name(t)}")
    return True


def _graph_type_name(t):
    """What a graph-mode type is, in user terms."""
    s = str(t)
    if isinstance(t, mstype.List):
        return f"a Python list ({s}); pass a Tensor, e.g. mindspore.Tensor(np.array(values, np.int32))"
    if s == "External":
        return ("a Python object that is not a Tensor (e.g. a numpy array given to the Cell or jit function); "
                "convert it with mindspore.Tensor(...) before the call")
    return s


#: :func:`_check_graph_types` folded at graph compile time: ``check_graph_types(op, names, F.typeof(a), ...)``.
check_graph_types = constexpr(_check_graph_types)


_EMPTY_F16 = empty_input(ms.float16)
_EMPTY_BF16 = empty_input(ms.bfloat16)
_EMPTY_F32 = empty_input(ms.float32)
_EMPTY_I8 = empty_input(ms.int8)


def empty_input_graph(dtype):
    """:func:`empty_input` for graph-mode code: the empty ``[0]`` tensor of ``dtype`` (float16, bfloat16,
    float32 or int8, the cache dtypes; float32 for any other dtype, which the op's dtype check rejects
    anyway), a constant of the compiled graph.

    Written as comparisons of ``dtype`` against constants selecting module-level Tensors, which every
    MindSpore from 2.7 folds at compile time. Not a ``constexpr`` returning a Tensor: MindSpore 2.7.x /
    2.8.0 keep such a constexpr as a primitive in the graph ("Unsupported op [empty_input] on CPU" at
    kernel selection); only 2.9+ folds it."""
    if dtype == ms.float16:
        return _EMPTY_F16
    if dtype == ms.bfloat16:
        return _EMPTY_BF16
    if dtype == ms.int8:
        return _EMPTY_I8
    return _EMPTY_F32


@constexpr(reuse_result=False)
def graph_backend():
    """The active backend, folded to a constant when a graph is compiled."""
    return _backend.get_backend()
