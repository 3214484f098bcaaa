"""Single declaration of every operator's interface.

An :class:`OpSpec` names the op (snake_case = file names in op_kernel/, op_host/, op_proto/,
cpu_kernel/, ms_kvcache/ops/ and tests/; CamelCase ``op_type`` = OpDef type, kernel entry of the CPU
and sim libraries, MindSpore reg_info name), its tensor arguments in order with their dtype groups and
ranks, its attributes, and its dtype support per SoC. From it we derive:

- the Python dtype / rank checks of the public wrapper (:meth:`OpSpec.check_dtypes`, ``check_ranks``),
- the in-place ``__mindspore_signature__`` of the ``ops.Custom`` primitive (``inplace`` arguments),
- the Ascend ``CustomRegOp`` dtype rows (:meth:`OpSpec.dtype_rows`),
- the structural test that the C++ OpDef in op_host/ declares the same names, order and dtype rows.

The OpSpecs themselves are data in :mod:`ms_kvcache._opspecs` (one module per family), which
``import ms_kvcache`` imports: the registry (:func:`get_spec`, :func:`all_specs`) is complete without the op
wrappers, and this module imports nothing of the package (docs/design.md, "Layers").
"""
from dataclasses import dataclass, field
import itertools
import operator
import re
from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = [
    "TensorSpec", "AttrSpec", "OpSpec", "register", "attach_checks", "get_spec", "all_specs",
    "KV_DTYPES", "FLOAT_DTYPES", "INDEX_DTYPES", "SOCS", "dtype_name", "dtype_arg_name",
    "FP8_DTYPES", "QUANT_CACHE_DTYPES", "kernel_pending", "OP_TYPE_PREFIX", "camel", "snake", "op_type_of",
    "op_name_of",
]

#: Cache/data dtypes of the copy ops.
KV_DTYPES = ("float16", "bfloat16", "float32", "int8")
#: Dtypes of ops that compute (RoPE, RMSNorm).
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
#: slot_mapping / positions / block ids.
INDEX_DTYPES = ("int32", "int64")
#: MindSpore's float8 dtypes with a quantization rule (``mindspore.float8_e4m3fn`` / ``float8_e5m2``,
#: present in MindSpore 2.7.2 - 2.10; a CPU tensor can hold them, but MindSpore's CPU Cast cannot convert
#: them: docs/quantization.md).
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
#: Dtypes of a quantized cache (the quantizing writes; docs/quantization.md).
QUANT_CACHE_DTYPES = ("int8",) + FP8_DTYPES
#: SoCs the AscendC kernels target (CANN names).
SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
#: What a SoC lacks, applied to every op's dtype rows. float8: the AscendC Cast to/from fp8_e4m3fn_t /
#: fp8_e5m2_t exists only on Ascend 950 (asc-devkit Cast dtype tables), none of these SoCs.
SOC_EXCLUDED_DTYPES = {"Ascend910B1": FP8_DTYPES, "Ascend910B3": FP8_DTYPES, "Ascend910_9391": FP8_DTYPES,
                       "Ascend310P3": ("bfloat16",) + FP8_DTYPES}


#: Vendor prefix of every OpType (docs/design.md): CANN ships a built-in ``ReshapeAndCache`` op (and an
#: ``aclnnReshapeAndCache``), so an unprefixed custom op of that name would shadow or clash with it.
OP_TYPE_PREFIX = "Mskv"


def camel(op):
    """reshape_and_cache -> ReshapeAndCache (plain CamelCase; CANN's file-name <-> OpType rule)."""
    return "".join(w[:1].upper() + w[1:] for w in op.split("_") if w)


def op_type_of(op):
    """reshape_and_cache -> MskvReshapeAndCache: the OpType of a public op name (docs/design.md)."""
    return OP_TYPE_PREFIX + camel(op)


def snake(op_type):
    """MskvReshapeAndCache -> mskv_reshape_and_cache (CANN's OpType -> aclnn_<name>.h / kernel entry rule
    for plain CamelCase names)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", op_type).lower()


def op_name_of(op_type):
    """MskvReshapeAndCache -> reshape_and_cache: the public op name (= file names) of an OpType."""
    s = snake(op_type)
    pre = snake(OP_TYPE_PREFIX) + "_"
    return s[len(pre):] if s.startswith(pre) else s


@dataclass(frozen=True)
class TensorSpec:
    """One tensor argument.

    name: argument name (Python, OpDef, reg_info).
    group: dtype group key; all tensors of a group share one dtype chosen from the op's group list.
    ranks: accepted ranks.
    inplace: the op writes this tensor in place (a cache); marked RW_WRITE for MindSpore.
    optional: may be None.
    dynamic: a list of tensors of one dtype (one cache per layer, one plane per KV plane...): AscendC
        ``ParamType(DYNAMIC)`` / aclnn ``aclTensorList`` / reg_info "dynamic". The primitive takes its
        tensors as consecutive inputs ``<name>_0 .. <name>_{n-1}``, and the count n is given per
        primitive instance (``_custom.prim_class``), so one class serves every count; an op may have
        several dynamic inputs with different counts. ``ranks`` applies to every tensor of the list.
    inplace_if: ``(attr, value)``: written in place only when attribute ``attr`` equals ``value``
        (e.g. ``("direction", "h2d")``); the written set is resolved per primitive instance.
    """

    name: str
    group: str
    ranks: Tuple[int, ...]
    inplace: bool = False
    optional: bool = False
    dynamic: bool = False
    inplace_if: Optional[Tuple[str, Any]] = None


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: name, Python type name ("str", "int", "float", "bool"), default, allowed values.

    codes: for a ``"str"`` attribute whose values are names (``cache_layout``, ``direction``), the int
        each name is passed to the kernels as, e.g. ``(("BSND", 0), ("BNSD", 1))``; ``choices`` defaults
        to the names. The Python API takes and checks the names; the OpDef attribute (``.Int(code)``),
        the reg_info attribute row, the aclnn prototype (``int64_t``), the tilings' ``GetAttrs``, the cpu
        kernels (``AotExtra::GetAttrInt``), the sim backend and the PyNative fast path all see the int
        (:attr:`kernel_type`, :meth:`encode`). Why: MindSpore 2.7.x / 2.8.0 cannot pass a string
        attribute to an Ascend C custom op at all - its aclnn code generator
        (``_custom_ops_utils.CustomCodeGenerator._get_type_declaration``) has no ``str`` type and
        raises ``RuntimeError: Unsupported type: str`` when the op is constructed, and the type table
        of its Ascend C kernel (``kernel/ascend/acl_ir/custom/custom_aclnn_utils.h``) spells the string
        type ``"string"``, not the ``char*`` of a generated prototype; both say ``char*`` from 2.9.0. ``int`` -> ``int64_t`` works in every version from 2.7.0.
        The codes are the single declaration: C++ mirrors them as constants
        (``op_host/mskv_attr_codes.h``), checked against this by tools/mskv_structure.py.
    """

    name: str
    type: str
    default: Any
    choices: Tuple[Any, ...] = ()
    codes: Tuple[Tuple[str, int], ...] = ()

    def __post_init__(self):
        if self.codes:
            if self.type != "str":
                raise ValueError(f"AttrSpec {self.name!r}: codes are for str attributes, got type {self.type!r}")
            names = tuple(n for n, _ in self.codes)
            if not self.choices:
                object.__setattr__(self, "choices", names)
            elif set(self.choices) != set(names):
                raise ValueError(f"AttrSpec {self.name!r}: choices {self.choices} differ from the coded names {names}")
            if len({c for _, c in self.codes}) != len(self.codes):
                raise ValueError(f"AttrSpec {self.name!r}: two names share one code in {self.codes}")
            if self.default not in names:
                raise ValueError(f"AttrSpec {self.name!r}: default {self.default!r} is not one of {names}")

    @property
    def kernel_type(self):
        """The attribute's type as every kernel-side declaration sees it: "int" for a coded name, else
        :attr:`type`."""
        return "int" if self.codes else self.type

    @property
    def kernel_default(self):
        """:attr:`default` as the kernels see it (the OpDef default)."""
        return self.encode(self.default)

    def encode(self, value):
        """``value`` as passed to the kernels: the code of a coded name, other values unchanged.

        Raises:
            ValueError: ``value`` is not one of the coded names (the message names the attribute).
        """
        if not self.codes:
            return value
        for n, c in self.codes:
            if value == n:
                return c
        raise ValueError(f"argument '{self.name}': expected one of {self.choices}, got {value!r}")

    def decode(self, code):
        """The name of kernel value ``code`` (inverse of :meth:`encode`; other values unchanged)."""
        for n, c in self.codes:
            if code == c and not isinstance(code, bool):
                return n
        return code


@dataclass(frozen=True)
class OpSpec:
    """Declaration of one operator (see the module docstring)."""

    name: str
    op_type: str
    inputs: Tuple[TensorSpec, ...]
    dtype_groups: Mapping[str, Tuple[str, ...]]
    attrs: Tuple[AttrSpec, ...] = ()
    #: outputs of the primitive; in-place ops return a dummy int32 [1] ("status").
    outputs: Tuple[TensorSpec, ...] = (TensorSpec("status", "__status__", (1,)),)
    #: dtype groups whose dtype must be equal (e.g. data and cache): already implied by one group.
    doc: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Constraints between groups: ``{group: (choice, ...)}`` where a choice is a dtype name or
    #: ``"=G"`` ("the dtype of group G"). E.g. ``{"C": ("float32", "=T")}``: group C is float32 or
    #: the dtype of group T. Applied by :meth:`check_dtypes` and :meth:`dtype_rows`.
    group_rules: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    #: The alias rule (docs/design.md, "Tensors an op writes never share memory"): no tensor the op only
    #: reads (key, value, slot_mapping, positions, cos_sin_cache, scales, block ids, ...) may share a byte
    #: with a tensor it writes, since the kernel would read rows it has already overwritten. Inputs named
    #: here are exempt because their aliasing a written tensor is a defined use (``swap_blocks``'
    #: ``src_cache`` may be ``dst_cache``: rows of block_mapping apply in order). Applied by
    #: ``_custom._alias_sets`` (PyNative checks, graph-mode launch attributes, replayed calls).
    read_may_alias: Tuple[str, ...] = ()

    def __post_init__(self):
        names = {t.name for t in self.inputs}
        for n in self.read_may_alias:
            if n not in names or any(t.name == n and (t.inplace or t.inplace_if is not None) for t in self.inputs):
                raise ValueError(f"{self.name}: read_may_alias: {n!r} is not an input the op only reads")

    # ------------------------------------------------------------------ derived views
    def input(self, name) -> TensorSpec:
        for t in self.inputs:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def inplace_inputs(self):
        """Inputs the op may write (unconditionally or for some attribute value)."""
        return tuple(t.name for t in self.inputs if t.inplace or t.inplace_if is not None)

    def written_inputs(self, attr_values: Optional[Mapping[str, Any]] = None):
        """Inputs written for these attribute values ({name: value}; defaults fill the gaps)."""
        values = {a.name: a.default for a in self.attrs}
        values.update(attr_values or {})
        return tuple(t.name for t in self.inputs
                     if t.inplace or (t.inplace_if is not None and values.get(t.inplace_if[0]) == t.inplace_if[1]))

    @property
    def has_dynamic(self):
        """True if some input is a list of tensors (``dynamic``): the primitive then takes per-instance
        counts (see ``_custom.prim_class``)."""
        return any(t.dynamic for t in self.inputs)

    @property
    def has_conditional_writes(self):
        """True if some input is written only for some attribute values (``inplace_if``)."""
        return any(t.inplace_if is not None for t in self.inputs)

    def attr_values(self, values=()):
        """{attr name: value} for positional attribute ``values`` (spec order); defaults fill the rest."""
        out = {a.name: a.default for a in self.attrs}
        out.update(zip((a.name for a in self.attrs), values))
        return out

    def kernel_attrs(self, values: Mapping[str, Any]):
        """``{name: value}`` with every coded attribute encoded (:meth:`AttrSpec.encode`); names that
        are not attributes of this op and values of uncoded attributes pass unchanged."""
        by_name = {a.name: a for a in self.attrs}
        try:
            return {k: (by_name[k].encode(v) if k in by_name else v) for k, v in values.items()}
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None

    def counts(self, counts):
        """Normalise the per-instance counts of the dynamic inputs to a tuple (one int >= 1 per dynamic
        input, in input order). An int means "every dynamic input has this many tensors"."""
        n = sum(1 for t in self.inputs if t.dynamic)
        if isinstance(counts, int) and not isinstance(counts, bool):
            counts = (counts,) * n
        try:
            counts = tuple(operator.index(c) for c in counts)
        except TypeError:
            raise ValueError(f"{self.name}: expected a count per dynamic input, got {counts!r}") from None
        if len(counts) != n or any(c < 1 for c in counts):
            names = [t.name for t in self.inputs if t.dynamic]
            raise ValueError(f"{self.name}: expected one count >= 1 per dynamic input {names}, got {counts}")
        return counts

    def dyn_input_sizes(self, counts):
        """MindSpore's ``dyn_input_sizes`` for these counts: one entry per input, the number of tensors
        of a dynamic input and -1 for a plain one (how MindSpore, the sim AOT entry and the cpu
        kernels regroup the flat primitive inputs)."""
        it = iter(self.counts(counts))
        return [next(it) if t.dynamic else -1 for t in self.inputs]

    def expanded_inputs(self, counts=None, attr_values=None):
        """The primitive's inputs in order: a dynamic input repeated ``counts[i]`` times as
        ``<name>_<j>``; ``inplace`` set for the inputs written with ``attr_values`` ({name: value})."""
        written = set(self.written_inputs(attr_values))
        it = iter(self.counts(counts)) if self.has_dynamic else iter(())
        out = []
        for t in self.inputs:
            w = t.name in written
            if t.dynamic:
                out.extend(TensorSpec(f"{t.name}_{j}", t.group, t.ranks, w, t.optional) for j in range(next(it)))
            else:
                out.append(TensorSpec(t.name, t.group, t.ranks, w, t.optional))
        return tuple(out)

    def group_dtypes(self, group, soc: Optional[str] = None):
        if group == "__status__":
            return ("int32",)
        allowed = tuple(self.dtype_groups[group])
        if soc is not None:
            allowed = tuple(d for d in allowed if d not in SOC_EXCLUDED_DTYPES.get(soc, ()))
        return allowed

    def dtype_rows(self, soc: Optional[str] = None):
        """All supported dtype combinations, one tuple per row covering inputs then outputs."""
        groups = []
        for t in self.inputs + self.outputs:
            if t.group not in groups:
                groups.append(t.group)
        choices = [self.group_dtypes(g, soc) for g in groups]
        rows = []
        for combo in itertools.product(*choices):
            pick = dict(zip(groups, combo))
            if all(self._rule_ok(g, pick) for g in self.group_rules):
                rows.append(tuple(pick[t.group] for t in self.inputs + self.outputs))
        return rows

    def _rule_choices(self, group, pick):
        """Dtypes group ``group`` may take given the other groups' dtypes in ``pick``."""
        out = []
        for c in self.group_rules[group]:
            d = pick.get(c[1:]) if c.startswith("=") else c
            if d is not None and d not in out:
                out.append(d)
        return tuple(out)

    def _rule_ok(self, group, pick):
        return group not in pick or pick[group] in self._rule_choices(group, pick)

    # ------------------------------------------------------------------ checks
    def check_dtypes(self, dtypes: Mapping[str, str]):
        """Raise TypeError unless every given input dtype is allowed and each group agrees.

        dtypes: {input name: canonical dtype name}; missing/None entries (optional inputs) are ignored.
        """
        seen: Dict[str, Tuple[str, str]] = {}
        for t in self.inputs:
            d = dtypes.get(t.name)
            if d is None:
                continue
            allowed = self.group_dtypes(t.group)
            if d not in allowed:
                raise TypeError(f"{self.name}: argument '{t.name}': expected dtype in {allowed}, got {d}")
            if t.group in seen and seen[t.group][1] != d:
                first = seen[t.group][0]
                raise TypeError(f"{self.name}: argument '{t.name}': expected dtype {seen[t.group][1]} "
                                f"(same as '{first}'), got {d}")
            seen.setdefault(t.group, (t.name, d))
        pick = {g: v[1] for g, v in seen.items()}
        for g in self.group_rules:
            if not self._rule_ok(g, pick):
                name, d = seen[g]
                refs = [c[1:] for c in self.group_rules[g] if c.startswith("=")]
                same = ", ".join(f"same as '{seen[r][0]}'" for r in refs if r in seen)
                allowed = self._rule_choices(g, pick)
                raise TypeError(f"{self.name}: argument '{name}': expected dtype in {allowed}"
                                f"{' (' + same + ')' if same else ''}, got {d}")

    def check_ranks(self, shapes: Mapping[str, Tuple[int, ...]]):
        """Raise ValueError unless every given input has one of its declared ranks."""
        for t in self.inputs:
            s = shapes.get(t.name)
            if s is None:
                continue
            if len(s) not in t.ranks:
                exp = " or ".join(str(r) for r in t.ranks)
                raise ValueError(f"{self.name}: argument '{t.name}': expected rank {exp}, "
                                 f"got rank {len(s)} (shape {tuple(s)})")

    def check_attrs(self, values: Mapping[str, Any]):
        for a in self.attrs:
            if a.name in values and a.choices and values[a.name] not in a.choices:
                raise ValueError(f"{self.name}: argument '{a.name}': expected one of {a.choices}, "
                                 f"got {values[a.name]!r}")


_REGISTRY: Dict[str, OpSpec] = {}


def kernel_pending(spec) -> str:
    """Why ``spec`` has no AscendC kernel yet ('' if it has one, or is not meant to): ops declared with
    ``extra={"ascend_kernel": "<reason>"}`` (none today: every quantizing op has its AscendC kernel; the
    marker is for an op added before its kernel). The structural check expects no op_kernel/ file for them, the sim and ascend
    backends refuse them naming the op, and no aclnn shim is generated."""
    return str(spec.extra.get("ascend_kernel", "")) if hasattr(spec, "extra") else ""


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec`` to the registry (one entry per snake_case name) and return it. Called by the
    declarations in :mod:`ms_kvcache._opspecs`."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] != spec:
        raise ValueError(f"op {spec.name!r} registered twice with different specs")
    _REGISTRY[spec.name] = spec
    return spec


def attach_checks(spec: OpSpec, **callbacks) -> OpSpec:
    """Give a declared spec its wrapper's Python callbacks and return it: ``infer_shape(attrs, *shapes)``
    / ``infer_dtype(attrs, *dtypes)``, the checks MindSpore's infer step runs (``ms_kvcache._custom``).
    They live with the wrapper (they use its checks), the declaration stays data."""
    unknown = set(callbacks) - {"infer_shape", "infer_dtype"}
    if unknown:
        raise ValueError(f"{spec.name}: attach_checks: unknown callbacks {sorted(unknown)}")
    spec.extra.update(callbacks)
    return spec


def get_spec(name) -> OpSpec:
    """The spec of op ``name`` (snake_case); KeyError if no such op. The registry holds every declared op
    once ``ms_kvcache`` is imported (its ``__init__`` imports :mod:`ms_kvcache._opspecs`, which needs
    neither the wrappers nor MindSpore)."""
    return _REGISTRY[name]


def all_specs():
    """All registered specs, sorted by name (every declared op, as for :func:`get_spec`)."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


_MS_NAMES = {
    "Float16": "float16", "BFloat16": "bfloat16", "Float32": "float32", "Float64": "float64",
    "Int8": "int8", "UInt8": "uint8", "Int16": "int16", "Int32": "int32", "Int64": "int64",
    "Bool": "bool", "Float8E4M3FN": "float8_e4m3fn", "Float8E5M2": "float8_e5m2", "HiFloat8": "hifloat8",
}


def dtype_name(dtype) -> str:
    """Canonical lower-case name of a MindSpore or numpy dtype ("float16", "bfloat16", ...); also
    unwraps the ``tensor[...]`` / ``ref[tensor[...]]`` types MindSpore's infer step passes."""
    if hasattr(dtype, "element_type"):
        dtype = dtype.element_type()
    s = str(dtype)
    if s in _MS_NAMES:
        return _MS_NAMES[s]
    if s.startswith("mindspore."):
        s = s[len("mindspore."):]
    return s.lower()


#: Bytes per element of the dtypes :func:`dtype_name` names.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
               "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1, "float8_e4m3fn": 1,
               "float8_e5m2": 1, "hifloat8": 1, "complex64": 8, "complex128": 16}


def tensor_nbytes(t) -> int:
    """Bytes a (contiguous) MindSpore tensor spans: ``size x`` the element size of its dtype.

    Not ``Tensor.nbytes``: on MindSpore 2.10 a dtype view (``Tensor.view(mindspore.float32)`` of an int8
    tensor) keeps the base's ``itemsize``, so its ``nbytes`` is a quarter of the bytes the float32 view
    really covers (and an int8 view of a float32 tensor reports 4x too many). A dtype without an entry in
    :data:`DTYPE_BYTES` falls back to ``Tensor.nbytes``."""
    dt = t.dtype
    hit = _BYTES_OF.get(id(dt))
    if hit is None:
        hit = _BYTES_OF[id(dt)] = (dt, DTYPE_BYTES.get(dtype_name(dt), 0))
    if not hit[1]:
        return int(t.nbytes)
    return t.size * hit[1]


#: id(dtype object) -> (the object, its DTYPE_BYTES entry or 0): tensor_nbytes runs per read tensor per call
#: and hashing a MindSpore dtype costs ~0.8 us; the stored object keeps its id from being reused.
_BYTES_OF = {}


def dtype_arg_name(dtype):
    """Canonical lower-case name of a ``dtype`` argument given as a MindSpore dtype (``ms.bfloat16``), a
    numpy dtype or scalar type (``np.dtype("float16")``, ``np.float32``, ``ml_dtypes.bfloat16``) or a
    name string in any case (``"float32"``, ``"BFloat16"``); None when ``dtype`` is none of these (the
    caller raises TypeError). The name is not checked against a list of supported dtypes: callers do that
    (:func:`ms_kvcache.alloc_host_buffer`, :func:`ms_kvcache.build_cos_sin_cache`)."""
    import numpy as np

    if isinstance(dtype, str):
        return dtype.lower()
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return np.dtype(dtype).name
    from mindspore.common import dtype as mstype

    if isinstance(dtype, mstype.Type):
        return dtype_name(dtype)
    return None
