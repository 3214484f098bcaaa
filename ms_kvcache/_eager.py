"""The PyNative branch of every public wrapper, declared once per op.

A wrapper's eager branch is the same sequence for every op: argument types, shape/dtype checks
(memoised per signature), in-place arguments contiguous (and, without the fast path, not views), a
no-work early return, index *value* checks (without a pipeline sync on the fast path), read-only
inputs made contiguous, then one launch through :func:`ms_kvcache._custom.eager_launcher` (fast path or
ops.Custom). :class:`EagerOp` runs that sequence from the op's :class:`~ms_kvcache._spec.OpSpec` plus a
few declarations, so an op module only states what is particular to it::

    _EAGER = EagerOp(SPEC, _check_static,
                     index_checks=(Positions("positions", bound=1), Slots("slot_mapping", bound=0)),
                     skip_if_empty=("key",))

    def op(positions, query, ..., *, is_neox_style=True, cache_layout="BSND"):
        if _run_in_jit():  # @jit.cond: True
            ...                                   # graph branch: unchanged
        else:
            return _EAGER(backend, (is_neox_style, cache_layout), positions, query, ...)

Conventions it relies on (those of every op module):

- ``check_static(*shape_dtype_pairs, *attr_values)``: for each input in ``spec.inputs`` order its shape
  and dtype; ``(tuple of shapes, tuple of dtypes)`` for a sequence (list) input; ``(None, None)`` for
  an absent optional input; then the attribute values in ``spec.attrs`` order. It raises on bad input
  and returns the bounds the index checks need (a tuple, or one value).
- outputs are declared in the spec (``OpSpec.outputs`` + ``extra["out_shape"/"out_dtype"]``) and are
  each *like* one input (:func:`ms_kvcache._custom.output_sources`).

Sequence inputs (one tensor per layer, ``TensorSpec(sequence=True)``): pass the list; its tensors are
checked as ``name[i]`` and launched flattened (``eager_launcher(..., arity=len(list))``), so multi-layer
ops get the fast path with no extra code.
"""
from mindspore import Tensor, ops

from ms_kvcache import _backend, _layerwise_guard
from ms_kvcache import _custom
from ms_kvcache import _validate as V
from ms_kvcache._custom import eager_launcher, nosync_checker, output_sources

__all__ = ["EagerOp", "Slots", "Positions", "BlockPairs"]

#: signatures a replay plan keeps (``Plan::kMaxSigs`` in ms_kvcache/csrc/pyboost_module.cpp)
_PLAN_SIGNATURES = 16


def _is_sequence(t):
    """A list input (``TensorSpec.sequence``; ``dynamic`` on specs written for the transfer branch)."""
    return bool(getattr(t, "sequence", False) or getattr(t, "dynamic", False))


def _bound(result, where):
    """A bound from the static check's result: ``where`` is an index into a tuple result, None for the
    whole result, or a callable of the result."""
    if where is None:
        return result
    if callable(where):
        return where(result)
    return result[where]


class Slots:
    """``name`` is a slot_mapping: every slot < the bound (num_blocks * block_size), non-negative slots
    distinct unless ``allow_duplicates`` (a bool, or a function of the attribute values, e.g. True for a
    gather, False for a scatter), ``slot < 0`` = skip (:func:`ms_kvcache._validate.check_slot_tensor`)."""

    def __init__(self, name, bound=None, allow_duplicates=False):
        self.name, self.bound, self.allow_duplicates = name, bound, allow_duplicates

    def check(self, op, x, result, nosync, attr_values):
        if x.shape[0]:
            dup = self.allow_duplicates
            dup = dup(attr_values) if callable(dup) else dup
            V.check_slot_tensor(op, self.name, x, _bound(result, self.bound), nosync, dup)

    def replay(self, result, attr_values):
        """What a replay plan checks per call (see EagerOp, "Replayed calls"): ("slots", duplicates allowed,
        bound)."""
        dup = self.allow_duplicates
        return "slots", bool(dup(attr_values) if callable(dup) else dup), int(_bound(result, self.bound))


class Positions:
    """``name`` holds positions: every value in [0, bound) (rows of cos_sin_cache)."""

    def __init__(self, name, bound=None):
        self.name, self.bound = name, bound

    def check(self, op, x, result, nosync, attr_values):
        if x.shape[0]:
            V.check_position_tensor(op, self.name, x, _bound(result, self.bound), nosync)


class BlockPairs:
    """``name`` is an [n, 2] block mapping: rows (src, dst) with src < src bound, dst < dst bound."""

    def __init__(self, name, src=0, dst=1, src_name="src", dst_name="dst"):
        self.name, self.src, self.dst, self.src_name, self.dst_name = name, src, dst, src_name, dst_name

    def check(self, op, x, result, nosync, attr_values):
        V.check_block_mapping_tensor(op, self.name, x, _bound(result, self.src), _bound(result, self.dst), nosync,
                                     self.src_name, self.dst_name)


class EagerOp:
    """The PyNative implementation of one op (see the module docstring).

    Args:
        spec: the op's OpSpec (inputs, in-place inputs, sequences, optional inputs, attrs, outputs).
        check_static: the op's shape/dtype/attr check (the function the graph branch wraps in constexpr).
        index_checks: :class:`Slots` / :class:`Positions` / :class:`BlockPairs` (or any object with
            ``name`` and ``check(op, tensor, static_result, nosync, attr_values)``), run in order.
        skip_if_empty: inputs whose dim 0 being 0 (or, for a sequence, the list being empty) means no
            work: nothing is launched and the outputs are zeros shaped like their source inputs.
        absent: ``{optional input: tensor}`` passed to the kernel in place of a None argument (the CPU
            AOT ABI cannot express a missing input).
        launch_attrs: ``f(static_result, attr_values) -> attr_values`` for the kernel when the static
            check normalises an attribute (e.g. ``float(epsilon)``); default: the values as given.
        distinct: read-only inputs that must not share memory with each other either (no read input may share
            memory with a written one, nor written ones with each other: the alias rule,
            :func:`ms_kvcache._validate.require_disjoint` runs on every call with the inputs of
            ``_custom._alias_sets``).
        contiguous: read-only inputs that must be contiguous (raise) instead of being copied (e.g. a
            whole source cache, where a silent copy would cost more than the op); in-place inputs always
            must be.
        backend_impl: name of an optional function of the backend module that replaces the kernel
            (called with the inputs after the checks, which then read index tensors with a sync).

    Replayed calls. The Python checks above cost ~15-40 us per call (a quantizing write: 11 inputs, five
    value checks), a large part of a copy op's time at a few hundred tokens. For an op whose inputs are
    all single tensors, without outputs, whose index checks all have a ``replay`` form (:class:`Slots`,
    and the quantizing writes' slot / scale checks), a call the Python path accepted and launched on the
    fast path records its signature (shapes, dtypes, slot bounds) in a C++ plan
    (``ms_kvcache._cpu_pyboost.Plan``, one per op, backend and attribute values). A later call first
    tries the plan: with the pipeline idle and a recorded signature it re-checks in C++ what can differ
    between such calls (every input a realised contiguous host tensor, written tensors disjoint from each
    other and from the read ones, slot and scale values) and launches directly; anything else returns to
    the Python path unchanged, which then raises its usual error for bad input or queues the launch. Plans
    live in ``ms_kvcache._custom._LAUNCHERS`` (cleared by ``set_fast_path``).
    """

    def __init__(self, spec, check_static, index_checks=(), skip_if_empty=(), absent=None, launch_attrs=None,
                 distinct=(), contiguous=(), backend_impl=None):
        self.spec = spec
        self.check_static = check_static
        self.index_checks = tuple(index_checks)
        self.absent = dict(absent or {})
        self.launch_attrs = launch_attrs
        self.backend_impl = backend_impl
        names = [t.name for t in spec.inputs]
        pos = {n: i for i, n in enumerate(names)}
        # an input written only for some attribute value (TensorSpec.inplace_if = (attr, value), e.g. a
        # transfer buffer written for direction="d2h") counts as in place when that value is given
        attr_pos = {a.name: j for j, a in enumerate(spec.attrs)}
        self._cond = tuple((i, attr_pos[t.inplace_if[0]], t.inplace_if[1]) for i, t in enumerate(spec.inputs)
                           if getattr(t, "inplace_if", None) is not None)
        self._inputs = tuple((t.name, _is_sequence(t), t.optional, t.inplace) for t in spec.inputs)
        self._index = tuple((pos[c.name], c) for c in self.index_checks)
        self._skip = tuple(pos[n] for n in skip_if_empty)
        self._distinct = tuple(pos[n] for n in distinct)
        self._contiguous = frozenset(contiguous)
        self._inplace = tuple(i for i, t in enumerate(spec.inputs) if t.inplace)
        # inputs the op only reads that may not share memory with a written one (the alias rule:
        # _custom._alias_sets; every read input but spec.read_may_alias), for the unconditional writes
        self._free = frozenset(pos[n] for n in spec.read_may_alias)
        self._read = tuple(i for i in range(len(names)) if i not in self._inplace and i not in self._free)
        self._contig = tuple(i for i, t in enumerate(spec.inputs) if t.inplace or t.name in contiguous)
        self._sequence = next((i for i, t in enumerate(spec.inputs) if _is_sequence(t)), None)
        self._optional = tuple(i for i, t in enumerate(spec.inputs) if t.optional)
        self._plain = self._sequence is None
        self._ro = {}
        self._static = {}
        self._written_memo = {}
        self._has_outputs = "out_shape" in spec.extra
        self._outs = None if self._sequence is not None else output_sources(spec)
        self._replayable = (self._plain and not self._has_outputs and not self._distinct and backend_impl is None
                            and launch_attrs is None
                            and all(hasattr(c, "replay") for c in self.index_checks))
        # static key (attribute values included) -> the launcher whose plan has its signature. Keyed to the
        # launcher, not just the key: set_fast_path() clears the plans with the launchers, and the next call's
        # new launcher records the signature again (a plain set kept it "planned" forever: no more replays)
        self._planned = {}

    # ------------------------------------------------------------------ helpers
    def _static_result(self, key, args, attr_values):
        """``check_static(*args())`` memoised on ``key`` (shapes, ``id`` of the dtypes, attribute values)
        plus the attribute types (True == 1 for a dict, but is_neox_style=1 must still raise). Only
        successful checks are stored.

        Dtypes are keyed by identity because hashing a MindSpore dtype costs ~0.6 us (a Python-level
        ``__hash__``; 5 us for an op with 8 inputs, a tenth of a decode step's budget). MindSpore hands
        out its dtype singletons (``t.dtype is ms.bfloat16``); the stored entry keeps the dtype objects
        of its key alive (callers read each dtype once and build both the key and ``args()`` from that
        object), so an ``id`` in a stored key can never be reused by another object."""
        key = (*key, *map(type, attr_values))
        try:
            return self._static[key][0]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute value: let the check report it
            return self.check_static(*args())
        full = args()
        out = self.check_static(*full)
        if len(self._static) >= 4096:
            self._static.clear()
        self._static[key] = (out, full)
        return out

    def _written(self, attr_values):
        """(in-place input indices, indices that must be contiguous, read input indices constrained by the
        alias rule) for these attribute values (memoised per attribute values: a quantizing write asks
        three times per call)."""
        if not self._cond:
            return self._inplace, self._contig, self._read
        try:
            return self._written_memo[attr_values]
        except KeyError:
            out = self._written_memo[attr_values] = self._compute_written(attr_values)
            return out
        except TypeError:  # an unhashable attribute value
            return self._compute_written(attr_values)

    def _compute_written(self, attr_values):
        extra = tuple(i for i, j, v in self._cond if attr_values[j] == v)
        inplace = tuple(sorted(set(self._inplace + extra)))
        contig = tuple(i for i, t in enumerate(self._inputs) if i in inplace or t[0] in self._contiguous)
        read = tuple(i for i in range(len(self._inputs)) if i not in inplace and i not in self._free)
        return inplace, contig, read

    def _types(self, args):
        op = self.spec.name
        for (name, seq, optional, _), x in zip(self._inputs, args):
            if seq:
                if not isinstance(x, (list, tuple)):
                    raise TypeError(f"{op}: argument '{name}': expected a list or tuple of Tensors (one per layer), "
                                    f"got {type(x).__name__}")
                for i, c in enumerate(x):
                    if not isinstance(c, Tensor):
                        raise TypeError(f"{op}: argument '{name}[{i}]': expected a mindspore.Tensor, got "
                                        f"{type(c).__name__}")
            elif not isinstance(x, Tensor) and not (optional and x is None):
                raise TypeError(f"{op}: argument '{name}': expected a mindspore.Tensor, got {type(x).__name__}")

    def _each(self, idx, args):
        """(display name, tensor) of input ``idx`` (every element of a sequence)."""
        name, seq, _, _ = self._inputs[idx]
        if seq:
            return [(f"{name}[{i}]", c) for i, c in enumerate(args[idx])]
        return [(name, args[idx])] if args[idx] is not None else []

    def _empty_outputs(self, args):
        outs = self._outs if self._outs is not None else ()
        if not outs:
            return None
        flat = self._flatten(args)
        res = tuple(ops.zeros_like(flat[j]) for j in outs)
        return res[0] if len(res) == 1 else res

    def _flatten(self, args):
        """The primitive's inputs: sequences expanded, absent optional inputs substituted."""
        flat = []
        for (name, seq, _, _), x in zip(self._inputs, args):
            if seq:
                flat.extend(x)
            elif x is None:
                flat.append(self.absent[name])
            else:
                flat.append(x)
        return flat

    # ------------------------------------------------------------------ the eager branch
    def __call__(self, backend, attr_values, *args):
        """Run the op in PyNative on ``args`` (the inputs in ``spec.inputs`` order) with ``attr_values``
        (in ``spec.attrs`` order) on ``backend``; returns None, the output or the tuple of outputs."""
        if self._replayable and not _layerwise_guard.pending():  # the debug check runs on the Python path
            try:
                plan = _custom._LAUNCHERS.get(("replay", id(self), backend, attr_values, *map(type, attr_values)))
            except TypeError:  # an unhashable attribute value: the checks report it
                plan = None
            if plan is not None:
                with _custom._SUBMIT:
                    if plan(*args):
                        return None
        if self._plain and not any(args[i] is None for i in self._optional):
            return self._call_plain(backend, attr_values, args)
        return self._call_general(backend, attr_values, args)

    def _call_plain(self, backend, attr_values, args):
        """Every input is one Tensor (no sequence, no absent optional): the per-call cost of a decode
        step is mostly this function, so it is written out flat (~2x faster than the general loop)."""
        for x in args:
            if not isinstance(x, Tensor):
                self._types(args)
        sd = [(x.shape, x.dtype) for x in args]  # each dtype read once: its id is the key, the object is stored
        key = (*[v for s, d in sd for v in (s, id(d))], *attr_values)
        result = self._static_result(key, lambda: (*[v for p in sd for v in p], *attr_values), attr_values)
        for i in (self._contig if not self._cond else self._written(attr_values)[1]):
            if not args[i].is_contiguous():
                V.require_contiguous(self.spec.name, self._inputs[i][0], args[i])
        written, _, read = self._written(attr_values)
        if len(written) > 1 or (written and read):
            V.require_disjoint(self.spec.name, [(self._inputs[i][0], args[i]) for i in written],
                               [(self._inputs[i][0], args[i]) for i in read])
        for i in self._skip:
            if args[i].shape[0] == 0:
                return self._empty_outputs(args)
        return self._launch(backend, attr_values, args, result, list(args), key if self._replayable else None)

    def _call_general(self, backend, attr_values, args):
        op = self.spec.name
        self._types(args)
        sd = []  # (shape, dtype) per input, each dtype read once (see _static_result)
        for (_, seq, _, _), x in zip(self._inputs, args):
            if seq:
                sd.append((tuple(c.shape for c in x), tuple(c.dtype for c in x)))
            else:
                sd.append((None, None) if x is None else (x.shape, x.dtype))

        def ident(d):
            return tuple(map(id, d)) if isinstance(d, tuple) else id(d)

        key = (*[v for s, d in sd for v in (s, ident(d))], *attr_values)
        result = self._static_result(key, lambda: (*[v for p in sd for v in p], *attr_values), attr_values)
        for i in self._written(attr_values)[1]:
            for name, x in self._each(i, args):
                V.require_contiguous(op, name, x)
        inplace, _, reads = self._written(attr_values)
        written = [nx for i in inplace for nx in self._each(i, args)]
        written += [nx for i in self._distinct if i not in inplace for nx in self._each(i, args)]
        read = [nx for i in reads if i not in self._distinct for nx in self._each(i, args)]
        V.require_disjoint(op, written, read)
        for i in self._skip:
            x = args[i]
            if (len(x) == 0) if self._inputs[i][1] else (x.shape[0] == 0):
                return self._empty_outputs(args)
        return self._launch(backend, attr_values, args, result, self._flatten(args))

    def _launch(self, backend, attr_values, args, result, flat, replay_key=None):
        """Index checks, read-only inputs made contiguous, then the launch (or the backend's own impl);
        ``replay_key``: the static key of a replayable call (see "Replayed calls")."""
        impl = getattr(_backend.backend_module(backend), self.backend_impl, None) if self.backend_impl else None
        nosync = None if impl is not None else nosync_checker(backend)
        inplace = self._inplace if not self._cond else self._written(attr_values)[0]
        if nosync is None and impl is None:  # ops.Custom would write into a copy of a view
            for i in inplace:
                for name, x in self._each(i, args):
                    V.require_not_view(self.spec.name, name, x)
        for i, check in self._index:
            check.check(self.spec.name, args[i], result, nosync, attr_values)
        for j in self._readonly_flat(len(flat), inplace):
            x = flat[j]
            if not x.is_contiguous():
                flat[j] = x.contiguous()
        if impl is not None:
            return impl(*flat)
        if self.launch_attrs is not None:
            attr_values = self.launch_attrs(result, attr_values)
        arity = None if self._sequence is None else len(args[self._sequence])
        f = eager_launcher(self.spec, backend, tuple(attr_values), arity)
        out = f(*flat)
        if replay_key is not None and nosync is not None and self._planned.get(replay_key) is not f:
            self._remember(f, backend, attr_values, args, result, replay_key)
        return out if self._has_outputs else None

    def _remember(self, f, backend, attr_values, args, result, replay_key):
        """Record the signature of an accepted fast-path call in the op's replay plan ("Replayed calls")."""
        kernel = getattr(f, "kernel", None)
        cls = getattr(_custom._fast_module(), "Plan", None)
        if kernel is None or cls is None or not getattr(f, "fast_path", False):
            return
        try:
            key = ("replay", id(self), backend, attr_values, *map(type, attr_values))
            plan = _custom._LAUNCHERS.get(key)
        except TypeError:
            return
        specs = [(i, c.replay(result, attr_values)) for i, c in self._index]
        if plan is None:
            written, _, read = self._written(attr_values)
            plan = cls(kernel, len(args), list(written), [(i, r[1]) for i, r in specs if r[0] == "slots"],
                       [(i, r[1]) for i, r in specs if r[0] == "scale"], list(read))
            _custom._LAUNCHERS[key] = plan
        full = plan.num_signatures >= _PLAN_SIGNATURES
        if not plan.add(list(args), [r[2] for _, r in specs if r[0] == "slots"]):
            return  # an input is a pending op's output: recorded by a later call
        if full or len(self._planned) >= 4096:
            # a full plan dropped its oldest signature for this one (or this one was there): forget which
            # keys were given to plans, so a dropped signature is recorded again on its next Python-path call
            self._planned.clear()
        self._planned[replay_key] = f

    def _readonly_flat(self, n, inplace):
        """Positions of read-only tensors in the flattened input list of length ``n`` (cached)."""
        r = self._ro.get((n, inplace))
        if r is None:
            arity = (n - sum(1 for t in self._inputs if not t[1])) // max(1, sum(1 for t in self._inputs if t[1]))
            r, j = [], 0
            for i, (_, seq, _, _) in enumerate(self._inputs):
                for _ in range(arity if seq else 1):
                    if i not in inplace:
                        r.append(j)
                    j += 1
            r = self._ro[(n, inplace)] = tuple(r)
        return r
