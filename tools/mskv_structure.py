"""Structural check: every AscendC op agrees across its declarations.

For each op (``op_kernel/<op>.cpp``) the following must describe the same interface as its
:class:`~ms_kvcache._spec.OpSpec` (names, order, param types, dtype rows per SoC, formats, attrs):

- ``op_kernel/<op>.cpp``: entry ``extern "C" __global__ __aicore__ void <op>(GM_ADDR ...)`` whose
  parameters are the inputs, then the outputs, then ``workspace`` and ``tiling``; quoted includes resolve
  inside op_kernel/ (the CANN kernel build copies op_kernel/ only);
- ``op_host/<op>.cpp``: ``class <OpType> : public OpDef`` (inputs, outputs, dtype rows, formats, attrs,
  ``AddConfig`` for every compute unit, ``SetTiling``), ``OP_ADD(<OpType>)``, and
  ``REGISTER_TILING_DATA_CLASS(<OpType>, <Data>)`` with ``BEGIN_TILING_DATA_DEF(<Data>)`` in op_host/;
- ``op_proto/<op>.cpp``: ``IMPL_OP_INFERSHAPE(<OpType>)`` with ``.InferShape(...)`` and ``.InferDataType(...)``;
- the MindSpore reg_info the ascend backend derives from the OpSpec (:func:`ascend.reg_info`);
- the emulation's OpDef registry (``ms_kvcache._sim.opdef(<OpType>)``), when the emulation is built;
- for attributes with named values (``AttrSpec.codes``: ``cache_layout``, ``direction``): the OpDef declares
  an Int attribute whose default is the code of the spec default, and the C++ constants of
  ``op_host/mskv_attr_codes.h`` equal the codes (:func:`check_attr_codes`).

The OpDef is read twice, independently: by the emulation (which runs the C++ registration) and by the
small source parser below, so a mismatch is caught even if either reader were lenient. The parser reads
what CANN's own op_host files are made of: ``this->Input("x").ParamType(REQUIRED).DataType(...)
.Format(...)`` chains, or the rows of a ``mskv_tiling::DeclareParams(d, fmt, {{"x", r.kv}, {"w", r.w, OPTIONAL}},
{{"y", r.status}})`` call, read as the chain ``Input("x").ParamType(REQUIRED).DataType(r.kv).Format(fmt)`` per
input row and ``Output(...)`` per output row (also inside a helper ``Declare(Def& d, ...)`` called with ``*this`` or an
``OpAICoreConfig``, also through a helper of an included op_host header such as
``mskv_tiling::DeclareOnEverySoc(*this, rows, rows310p, tiling)``, whose ``AICore().AddConfig`` calls and
``OpAICoreConfig`` variables are read as if they stood in the constructor), ``DataType``/``DataTypeList``/
``Format``/``FormatList`` arguments written as literal ``{ge::DT_..., ...}`` lists or as named
``std::vector<ge::DataType>`` / ``std::vector<ge::Format>`` constants (in the op's file or an op_host header
it includes, possibly passed through the helper's parameters, or a member ``r.kv`` of a constant of a struct of
such list references, ``static const CopyRows kCopyRows = {kKvDTypes, ...}``), ``Attr("n").AttrType(OPTIONAL).Int(v)`` (``v`` a literal or a named ``constexpr`` integer of an
included header) / ``.Bool(...)`` / ``.Float(...)`` / ``.String("v")``, ``OpAICoreConfig`` overrides added with
``AddConfig("ascend310p", cfg)``. Anything else is reported as unreadable (one line), never guessed.

Every problem is one line: ``<OpType>: <where>: <what>``. Run ``python tools/mskv_structure.py``.

A developer check (tests/test_structure.py runs it in CI): it lives in tools/, outside the installed
package (the wheel ships ms_kvcache/ only).
"""
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ["check_repository", "check_op", "check_attr_codes", "parse_opdef", "opdef_from_sim", "OpDefFacts",
           "Param", "Attr", "camel", "snake", "op_type_of", "op_name_of", "OP_TYPE_PREFIX", "main", "LAYERS",
           "import_graph", "import_problems", "import_cycles", "layer_of"]

DTYPES = {
    "DT_FLOAT16": "float16", "DT_BF16": "bfloat16", "DT_FLOAT": "float32", "DT_DOUBLE": "float64",
    "DT_INT8": "int8", "DT_UINT8": "uint8", "DT_INT16": "int16", "DT_UINT16": "uint16", "DT_INT32": "int32",
    "DT_UINT32": "uint32", "DT_INT64": "int64", "DT_UINT64": "uint64", "DT_BOOL": "bool",
}
ATTR_TYPES = {"String": "str", "Int": "int", "Float": "float", "Bool": "bool", "ListInt": "list_int",
              "ListFloat": "list_float"}
# Headers the CANN kernel toolchain provides (not looked for in op_kernel/): kernel_operator.h and the
# interface headers it does not include itself (kernel_operator_list_tensor_intf.h for ListTensorDesc).
CANN_KERNEL_HEADERS = ("kernel_operator.h", "kernel_operator_list_tensor_intf.h", "kernel_tiling/", "lib/",
                       "adv_api/", "basic_api/")


# OpType <-> op name rules (docs/design.md), shared with the runtime package.
from ms_kvcache._spec import OP_TYPE_PREFIX, camel, op_name_of, op_type_of, snake  # noqa: E402,F401


# ---------------------------------------------------------------------------------------------- model
@dataclass
class Param:
    name: str
    param_type: str = "required"          # required | optional | dynamic
    dtypes: Optional[List[str]] = None    # one per row (DataType) or the factor list (DataTypeList)
    dtype_list: bool = False              # DataTypeList: combines with every row of the others
    formats: Optional[List[str]] = None
    format_list: bool = False
    problems: List[str] = field(default_factory=list)


@dataclass
class Attr:
    name: str
    type: Optional[str] = None            # str | int | float | bool | list_int | list_float
    required: Optional[bool] = None
    default: object = None
    has_default: bool = False


@dataclass
class OpDefFacts:
    """What an OpDef declares, from either reader."""

    type: str
    source: str
    inputs: List[Param] = field(default_factory=list)
    outputs: List[Param] = field(default_factory=list)
    attrs: List[Attr] = field(default_factory=list)
    # compute unit -> None (base definition) or {"inputs": [...], "outputs": [...]} override
    configs: Dict[str, Optional[dict]] = field(default_factory=dict)
    has_tiling: bool = False
    problems: List[str] = field(default_factory=list)
    found: bool = True                    # False: no OpDef class of that type was found

    def params_for(self, unit):
        ov = self.configs.get(unit)
        if not ov:
            return self.inputs, self.outputs
        merge = lambda base, new: [next((p for p in new if p.name == b.name), b) for b in base]  # noqa: E731
        return merge(self.inputs, ov["inputs"]), merge(self.outputs, ov["outputs"])

    def rows_for(self, unit):
        """(dtype rows, format rows, problem) for compute unit ``unit``."""
        ins, outs = self.params_for(unit)
        params = ins + outs
        for p in params:
            if p.dtypes is None:
                return None, None, f"{p.name}: dtypes not readable"
        fixed = [p for p in params if not p.dtype_list]
        n = {len(p.dtypes) for p in fixed}
        if len(n) > 1:
            lens = ", ".join(f"{p.name}={len(p.dtypes)}" for p in fixed)
            return None, None, f"DataType lists of different lengths ({lens})"
        n_rows = n.pop() if n else 1
        base = [tuple(p.dtypes[i] if not p.dtype_list else None for p in params) for i in range(n_rows)]
        factors = [(k, p.dtypes) for k, p in enumerate(params) if p.dtype_list]
        rows = []
        for b in base:
            for combo in itertools.product(*[f for _, f in factors]) if factors else [()]:
                r = list(b)
                for (k, _), v in zip(factors, combo):
                    r[k] = v
                rows.append(tuple(r))
        fmt_rows = []
        for i in range(len(rows)):
            row = []
            for p in params:
                if p.formats is None:
                    row.append(None)
                elif not p.formats:
                    return rows, None, f"{p.name}: empty Format list"
                elif p.format_list or len(p.formats) == 1:
                    row.append(p.formats[0])
                elif len(p.formats) == n_rows and not factors:
                    row.append(p.formats[i])
                elif len(p.formats) == len(rows):
                    row.append(p.formats[i])
                else:
                    return rows, None, f"{p.name}: {len(p.formats)} formats for {len(rows)} dtype rows"
            fmt_rows.append(tuple(row))
        return rows, fmt_rows, None


# ---------------------------------------------------------------------------------------------- C++ reading
def _strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * text.count("\n", i, j))  # keep line numbers
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _match_close(text, i, open_c="(", close_c=")"):
    """Index just past the bracket matching text[i] (which is open_c)."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _split_args(s):
    """Split a C++ argument list at top-level commas."""
    args, depth, cur = [], 0, []
    for c in s:
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        args.append("".join(cur).strip())
    return args


def _last_identifier(decl):
    ids = re.findall(r"([A-Za-z_]\w*)", decl.split("=")[0])
    return ids[-1] if ids else ""


_CHAIN_START = re.compile(r"(\bthis\s*->|\*\s*this\s*\.|\b([A-Za-z_]\w*)\s*\.)\s*(Input|Output|Attr|AICore)\s*\(")


_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")
_LINK = re.compile(r"\s*(\.|->)")


def _read_chain(text, i):
    """Read ``Name(args).Name(args)...`` from text[i]. Returns (calls, end)."""
    calls = []
    while True:
        m = _CALL.match(text, i)
        if not m:
            break
        open_at = m.end() - 1
        close = _match_close(text, open_at)
        calls.append((m.group(1), text[open_at + 1:close - 1].strip()))
        i = close
        m2 = _LINK.match(text, i)
        if not m2:
            break
        i = m2.end()
    return calls, i


def _constants(text):
    """Named dtype / format lists: std::vector<ge::DataType> NAME = {...}; or C arrays."""
    consts = {}
    pat = re.compile(r"(?:std::)?vector\s*<\s*(?:ge::)?(?:DataType|Format)\s*>\s+([A-Za-z_]\w*)\s*(?:=\s*)?[({]")
    for m in pat.finditer(text):
        start = m.end() - 1
        if text[start] == "(":
            inner_start = text.find("{", start)
            end = _match_close(text, inner_start, "{", "}")
            consts[m.group(1)] = text[inner_start:end]
        else:
            end = _match_close(text, start, "{", "}")
            consts[m.group(1)] = text[start:end]
    arr = re.compile(r"(?:ge::)?(?:DataType|Format)\s+([A-Za-z_]\w*)\s*\[\s*\w*\s*\]\s*=\s*\{")
    for m in arr.finditer(text):
        start = m.end() - 1
        consts.setdefault(m.group(1), text[start:_match_close(text, start, "{", "}")])
    return consts


_ROWS_STRUCT = re.compile(r"\bstruct\s+([A-Za-z_]\w*)\s*\{")
_ROWS_MEMBER = re.compile(r"^\s*const\s+(?:(?:std::)?vector\s*<\s*(?:ge::)?(?:DataType|Format)\s*>|(?:mskv_tiling::)?(?:DTypes|Formats))"
                          r"\s*((?:&\s*[A-Za-z_]\w*\s*,\s*)*&\s*[A-Za-z_]\w*)\s*$")


def _row_constants(text):
    """Members of named dtype-row structs: ``struct R { const std::vector<ge::DataType>& kv; ... };`` (or
    ``const mskv_tiling::DTypes &kv, &index;``, the aliases of op_host/kv_copy_tiling_common.h) and
    ``static const R kRows = {kKvDTypes, ...};`` give {"kRows.kv": "kKvDTypes", ...} (resolved further as
    names of lists, :meth:`_Resolver.values`)."""
    members = {}
    for m in _ROWS_STRUCT.finditer(text):
        start = m.end() - 1
        body = text[start + 1:_match_close(text, start, "{", "}") - 1]
        decls = [d for d in body.split(";") if d.strip()]
        groups = [_ROWS_MEMBER.match(d) for d in decls]
        if decls and all(groups):
            members[m.group(1)] = [n.strip().lstrip("&").strip() for g in groups for n in g.group(1).split(",")]
    out = {}
    for sname, names in members.items():
        pat = re.compile(r"\b" + re.escape(sname) + r"\s+([A-Za-z_]\w*)\s*=\s*\{")
        for m in pat.finditer(text):
            start = m.end() - 1
            vals = _split_args(text[start + 1:_match_close(text, start, "{", "}") - 1])
            if len(vals) == len(names):
                out.update({f"{m.group(1)}.{n}": v for n, v in zip(names, vals)})
    return out


_INT_CONST = re.compile(r"\bconstexpr\s+(?:std::)?(?:u?int(?:8|16|32|64)_t|int|long)\s+([A-Za-z_]\w*)\s*=\s*(-?\d+)\s*;")


def _int_constants(text):
    """``constexpr int64_t NAME = <int>;`` constants of a source text: {NAME: value}."""
    return {m.group(1): int(m.group(2)) for m in _INT_CONST.finditer(text)}


def _tokens(list_text):
    return re.findall(r"(?:ge::)?((?:DT|FORMAT)_[A-Z0-9_]+)", list_text)


class _Resolver:
    def __init__(self, consts, ints=None):
        self.consts = consts
        #: integer constants (``constexpr int64_t kName = 1;``) of the file and its headers
        self.ints = ints or {}

    def literal(self, v):
        """An attribute default: a C++ literal, or a named integer constant (``mskv_attr::kLayoutBNSD``)."""
        key = v.strip().split("::")[-1].strip()
        if key in self.ints:
            return self.ints[key]
        return _literal(v)

    def values(self, expr, bindings, kind):
        """Resolve a DataType/Format argument to a list of canonical names, or (None, why)."""
        expr = expr.strip()
        seen = 0
        while not expr.startswith("{") and seen < 8:
            seen += 1
            key = expr.split("::")[-1].strip()
            if "." in key:  # r.kv: a member of a dtype-row struct constant (_row_constants), maybe bound
                base, member = (s.strip() for s in key.rsplit(".", 1))
                base = bindings.get(base, base).split("::")[-1].strip()
                if f"{base}.{member}" not in self.consts:
                    return None, "unresolved"
                expr = self.consts[f"{base}.{member}"]
            elif key in bindings:
                expr = bindings[key].strip()
            elif key in self.consts:
                expr = self.consts[key]
            else:
                return None, "unresolved"
        toks = _tokens(expr)
        out = []
        for t in toks:
            if t.startswith("DT_"):
                if t not in DTYPES:
                    return None, f"unknown dtype ge::{t}"
                out.append(DTYPES[t])
            else:
                out.append(t[len("FORMAT_"):])
        return out, None


def _functions(text):
    """Helper functions whose first parameter is a reference (``Declare(Def& d, ...)``): name ->
    (first param name, [other param names], body)."""
    funcs = {}
    pat = re.compile(r"\b(?:static\s+)?(?:inline\s+)?void\s+([A-Za-z_]\w*)\s*\(")
    for m in pat.finditer(text):
        open_at = m.end() - 1
        close = _match_close(text, open_at)
        params = _split_args(text[open_at + 1:close - 1])
        body_m = re.compile(r"\s*(?:const\s*)?\{").match(text, close)
        if not params or not body_m or "&" not in params[0]:
            continue
        names = [_last_identifier(p) for p in params]
        b0 = body_m.end() - 1
        body = text[b0:_match_close(text, b0, "{", "}")]
        funcs[m.group(1)] = (names[0], names[1:], body)
    return funcs


def _interpret_chain(calls, resolver, bindings, facts, where, attr_target):
    head, arg = calls[0]
    if head in ("Input", "Output"):
        m = re.fullmatch(r'"([^"]*)"', arg)
        if not m:
            facts.problems.append(f"{where}: {head}({arg}): name is not a string literal")
            return None
        p = Param(m.group(1))
        for name, a in calls[1:]:
            if name == "ParamType":
                p.param_type = a.split("::")[-1].strip().lower()
            elif name in ("DataType", "DataTypeList"):
                vals, why = resolver.values(a, bindings, name)
                if vals is None:
                    p.problems.append(("unresolved", a.strip()) if why == "unresolved" else
                                      f"{head.lower()} '{p.name}': {why}")
                p.dtypes, p.dtype_list = vals, name == "DataTypeList"
            elif name in ("Format", "FormatList"):
                vals, why = resolver.values(a, bindings, name)
                if vals is None:
                    p.problems.append(("unresolved", a.strip()) if why == "unresolved" else
                                      f"{head.lower()} '{p.name}': {why}")
                p.formats, p.format_list = vals, name == "FormatList"
        if p.dtypes is None and not p.problems:
            p.problems.append(f"{head.lower()} '{p.name}': no DataType(...) / DataTypeList(...)")
        if p.formats is None and not p.problems:
            p.problems.append(f"{head.lower()} '{p.name}': no Format(...) / FormatList(...)")
        return (head, p)
    if head == "Attr":
        m = re.fullmatch(r'"([^"]*)"', arg)
        if not m:
            facts.problems.append(f"{where}: Attr({arg}): name is not a string literal")
            return None
        a = Attr(m.group(1))
        for name, v in calls[1:]:
            if name == "AttrType":
                a.required = v.split("::")[-1].strip().upper() == "REQUIRED"
            elif name in ATTR_TYPES:
                a.type = ATTR_TYPES[name]
                if v != "":  # a literal, a named constant, or a helper's parameter bound to one
                    a.has_default, a.default = True, resolver.literal(bindings.get(v.strip(), v))
        return ("Attr", a) if attr_target else None
    if head == "AICore":
        out = []
        for name, v in calls[1:]:
            if name == "SetTiling":
                facts.has_tiling = True
            elif name == "AddConfig":
                args = _split_args(v)
                unit = args[0].strip().strip('"') if args else ""
                out.append((unit, args[1].strip() if len(args) > 1 else None))
        return ("AICore", out)
    return None


def _literal(v):
    v = v.strip()
    if v.startswith('"') and v.endswith('"'):
        return v[1:-1]
    if v in ("true", "false"):
        return v == "true"
    if v.startswith("{"):
        return [_literal(x) for x in _split_args(v[1:-1])]
    try:
        return int(v)
    except ValueError:
        try:
            return float(v.rstrip("fF"))
        except ValueError:
            return v


def _included_headers(path, text, seen=None):
    """op_host headers included (transitively, quoted includes resolved next to the file)."""
    seen = set() if seen is None else seen
    out = []
    for inc in re.findall(r'#\s*include\s*"([^"]+)"', text):
        p = (path.parent / inc).resolve()
        if p.is_file() and p not in seen:
            seen.add(p)
            t = _strip_comments(p.read_text(errors="replace"))
            out.append((p, t))
            out.extend(_included_headers(p, t, seen))
    return out


def parse_opdef(path, op_type):
    """Read the OpDef of ``op_type`` from ``path`` (op_host/<op>.cpp) without compiling it."""
    path = Path(path)
    rel = f"{path.parent.name}/{path.name}"
    facts = OpDefFacts(op_type, rel)
    text = _strip_comments(path.read_text(errors="replace"))
    headers = _included_headers(path, text)
    consts, ints = {}, {}
    for _, t in headers:
        consts.update(_constants(t))
        consts.update(_row_constants(t))
        ints.update(_int_constants(t))
    consts.update(_constants(text))
    consts.update(_row_constants(text))
    ints.update(_int_constants(text))
    resolver = _Resolver(consts, ints)
    m = re.search(r"\bclass\s+" + re.escape(op_type) + r"\s*:\s*public\s+(?:ops::)?OpDef\b", text)
    if not m:
        facts.problems.append(f"{rel}: no 'class {op_type} : public OpDef'")
        facts.found = False
        return facts
    body_start = text.find("{", m.end())
    cls = text[body_start:_match_close(text, body_start, "{", "}")]
    funcs = _functions(cls)
    funcs.update({k: v for k, v in _functions(text).items() if k not in funcs})
    # helpers of the op_host headers the file includes (mskv_tiling::DeclareOnEverySoc: the parameters and
    # the compute units of every op), run through their calls like the file's own
    for _, t in headers:
        funcs.update({k: v for k, v in _functions(t).items() if k not in funcs})
    config_vars = set(re.findall(r"\bOpAICoreConfig\s+([A-Za-z_]\w*)\s*[;({]", cls))
    for _, (_, _, fbody) in funcs.items():
        config_vars.update(re.findall(r"\bOpAICoreConfig\s+([A-Za-z_]\w*)\s*[;({]", fbody))
    overrides = {v: {"inputs": [], "outputs": []} for v in config_vars}

    def param_table(tgt, args, bindings):
        # mskv_tiling::DeclareParams(d, fmt, {{"name", dtypes[, TYPE]}, ...}, {...outputs}): each row is the
        # chain Input(name).ParamType(TYPE, default REQUIRED).DataType(dtypes).Format(fmt).UnknownShapeFormat(fmt)
        if len(args) != 4:
            facts.problems.append(f"{rel}: DeclareParams({', '.join(args)}): expected (target, formats, "
                                  f"{{inputs}}, {{outputs}})")
            return
        for kind, table in (("Input", args[2]), ("Output", args[3])):
            table = table.strip()
            if not (table.startswith("{") and table.endswith("}")):
                facts.problems.append(f"{rel}: DeclareParams: {kind.lower()}s {table}: not a {{...}} list")
                continue
            for row in _split_args(table[1:-1]):
                cols = _split_args(row.strip()[1:-1]) if row.strip().startswith("{") else []
                if len(cols) not in (2, 3):
                    facts.problems.append(f"{rel}: DeclareParams: {kind.lower()} {row}: expected "
                                          f"{{\"name\", dtypes[, param type]}}")
                    continue
                calls = [(kind, cols[0]), ("ParamType", cols[2] if len(cols) == 3 else "REQUIRED"),
                         ("DataType", cols[1]), ("Format", args[1]), ("UnknownShapeFormat", args[1])]
                record(tgt, calls, bindings)

    def record(tgt, calls, bindings):
        if tgt != "this" and tgt not in overrides:
            return
        res = _interpret_chain(calls, resolver, bindings, facts, rel, attr_target=(tgt == "this"))
        if res is None:
            return
        kind, val = res
        if kind in ("Input", "Output"):
            lst = (facts.inputs if kind == "Input" else facts.outputs) if tgt == "this" else \
                overrides[tgt]["inputs" if kind == "Input" else "outputs"]
            if any(p.name == val.name for p in lst):
                facts.problems.append(f"{rel}: {kind.lower()} '{val.name}' declared twice")
            lst.append(val)
        elif kind == "Attr":
            facts.attrs.append(val)
        elif kind == "AICore":
            for unit, var in val:
                facts.configs[unit] = overrides.get(var) if var else None
                if var and var not in overrides:
                    facts.problems.append(f"{rel}: AddConfig(\"{unit}\", {var}): {var} is not an OpAICoreConfig")

    def run(body, target_map, bindings, depth=0):
        # helper calls: Name(<target>, args...)
        for fname, (p0, pnames, fbody) in funcs.items():
            for cm in re.finditer(r"(?<![\w.>])" + re.escape(fname) + r"\s*\(", body):
                if re.search(r"\bvoid\s*$", body[:cm.start()]):
                    continue  # the definition, not a call
                close = _match_close(body, cm.end() - 1)
                args = _split_args(body[cm.end():close - 1])
                if not args or depth > 3:
                    continue
                tgt = args[0].replace(" ", "")
                tgt = "this" if tgt in ("*this", "this") else target_map.get(tgt, tgt)
                if fname == "DeclareParams":
                    param_table(tgt, args, bindings)
                    continue
                b = {pn: bindings.get(a.strip(), a) for pn, a in zip(pnames, args[1:])}
                run(fbody, {p0: tgt}, b, depth + 1)
        for cm in _CHAIN_START.finditer(body):
            raw = cm.group(1).replace(" ", "")
            tgt = "this" if raw in ("this->", "*this.") else target_map.get(cm.group(2), cm.group(2))
            calls, _ = _read_chain(body, cm.start(3))
            record(tgt, calls, bindings)

    # the constructor (and anything else in the class) -- helper bodies are run through their calls
    ctor_text = cls
    for _, (_, _, fbody) in funcs.items():
        ctor_text = ctor_text.replace(fbody, "{}")
    run(ctor_text, {}, {})
    unresolved = []
    for p in facts.inputs + facts.outputs + [q for o in overrides.values() for q in o["inputs"] + o["outputs"]]:
        for x in p.problems:
            if isinstance(x, tuple):
                if x[1] not in unresolved:
                    unresolved.append(x[1])
            elif f"{rel}: {x}" not in facts.problems:
                facts.problems.append(f"{rel}: {x}")
    if unresolved:
        facts.problems.append(
            f"{rel}: cannot read the DataType/Format arguments {', '.join(unresolved)}: write them as literal "
            f"{{ge::DT_..., ...}} lists or named std::vector<ge::DataType> / std::vector<ge::Format> constants "
            f"(in this file or an op_host header it includes), passed by name through helpers")
    if not re.search(r"\bOP_ADD\s*\(\s*" + re.escape(op_type) + r"\s*\)", text):
        facts.problems.append(f"{rel}: no OP_ADD({op_type})")
    return facts


def opdef_from_sim(info, op_type):
    """Normalise ``ms_kvcache._sim.opdef(op_type)`` into :class:`OpDefFacts`.

    ``info`` is the dict of ms_kvcache/sim/csrc/host/py_bind.cpp: type; inputs / outputs as dicts
    (name, param_type, dtypes, formats, dtype_is_list, format_is_list); attrs (name, type, required,
    default -- None when the attr has none); configs (soc, override, inputs, outputs); has_tiling.
    Objects with the same attribute names (simhost::OpDefInfo) are accepted too.
    """
    def g(o, k, d=None):
        return o.get(k, d) if isinstance(o, dict) else getattr(o, k, d)

    def params(lst):
        return [Param(g(p, "name"), str(g(p, "param_type", "required")).lower(), list(g(p, "dtypes", []) or []),
                      bool(g(p, "dtype_is_list", False)), list(g(p, "formats", []) or []),
                      bool(g(p, "format_is_list", False))) for p in (lst or [])]

    facts = OpDefFacts(g(info, "type", op_type), "emulation opdef")
    facts.inputs = params(g(info, "inputs"))
    facts.outputs = params(g(info, "outputs"))
    for a in g(info, "attrs", []) or []:
        default = g(a, "default", g(a, "default_value"))
        has_default = bool(g(a, "has_default", default is not None))
        facts.attrs.append(Attr(g(a, "name"), g(a, "type"), bool(g(a, "required", False)), default, has_default))
    for c in g(info, "configs", []) or []:
        over = None
        if g(c, "override", g(c, "has_override", False)):
            over = {"inputs": params(g(c, "inputs")), "outputs": params(g(c, "outputs"))}
        facts.configs[g(c, "soc")] = over
    facts.has_tiling = bool(g(info, "has_tiling", False))
    return facts


# ---------------------------------------------------------------------------------------------- comparisons
def _expected_param_type(t):
    if t.dynamic:
        return "dynamic"
    return "optional" if t.optional else "required"


def _rows_text(rows, limit=3):
    rows = sorted(rows)
    s = ", ".join("(" + ",".join(r) + ")" for r in rows[:limit])
    return s + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _same_default(attr, value):
    """OpAttrDef::Float stores a C++ float: compare float attributes at float32 precision."""
    want = attr.kernel_default
    if attr.kernel_type == "float" and isinstance(value, (int, float)) and isinstance(want, (int, float)):
        import struct

        return struct.pack("<f", float(value)) == struct.pack("<f", float(want))
    return value == want and isinstance(value, bool) == isinstance(want, bool)


def compare_opdef(spec, facts):
    """Lines where ``facts`` (one reader's view of the OpDef) disagrees with ``spec``."""
    from ms_kvcache._backends.ascend import COMPUTE_UNITS, compute_unit
    from ms_kvcache._spec import SOCS

    out = []
    pre = f"{spec.op_type}: {facts.source}"
    out.extend(f"{spec.op_type}: {p}" for p in facts.problems)
    if not facts.found:
        return out
    for kind, exp, got in (("inputs", spec.inputs, facts.inputs), ("outputs", spec.outputs, facts.outputs)):
        en, gn = [t.name for t in exp], [p.name for p in got]
        if en != gn:
            out.append(f"{pre}: {kind}: expected {en} (OpSpec order), got {gn}")
            continue
        for t, p in zip(exp, got):
            if _expected_param_type(t) != p.param_type:
                out.append(f"{pre}: {kind[:-1]} '{t.name}': expected ParamType {_expected_param_type(t).upper()}, "
                           f"got {p.param_type.upper()}")
    an, gn = [a.name for a in spec.attrs], [a.name for a in facts.attrs]
    if an != gn:
        out.append(f"{pre}: attrs: expected {an}, got {gn}")
    else:
        for a, f in zip(spec.attrs, facts.attrs):
            if f.type is not None and f.type != a.kernel_type:
                coded = f" (named values {a.choices} are int-coded, AttrSpec.codes)" if a.codes else ""
                out.append(f"{pre}: attr '{a.name}': expected type {a.kernel_type}{coded}, got {f.type}")
            want_required = a.default is None
            if f.required is not None and f.required != want_required:
                out.append(f"{pre}: attr '{a.name}': expected AttrType "
                           f"{'REQUIRED' if want_required else 'OPTIONAL'}, got {'REQUIRED' if f.required else 'OPTIONAL'}")
            if not want_required and f.has_default and not _same_default(a, f.default):
                out.append(f"{pre}: attr '{a.name}': expected default {a.kernel_default!r}"
                           f"{f' ({a.default!r})' if a.codes else ''}, got {f.default!r}")
    for unit in COMPUTE_UNITS:
        if unit not in facts.configs:
            out.append(f"{pre}: no AICore().AddConfig(\"{unit}\")")
    for unit in sorted(set(facts.configs) - set(COMPUTE_UNITS)):
        out.append(f"{pre}: AddConfig(\"{unit}\") is not one of the package's compute units {list(COMPUTE_UNITS)}")
    if not facts.has_tiling:
        out.append(f"{pre}: no AICore().SetTiling(...)")
    if [t.name for t in spec.inputs] != [p.name for p in facts.inputs] or \
            [t.name for t in spec.outputs] != [p.name for p in facts.outputs]:
        return out
    per_unit = {}
    for soc in SOCS:
        unit = compute_unit(soc)
        if unit in per_unit or unit not in facts.configs:
            continue
        msgs = per_unit[unit] = []
        rows, fmts, why = facts.rows_for(unit)
        if why:
            if "not readable" not in why:  # unreadable params are already reported from facts.problems
                msgs.append(why)
            continue
        exp = set(spec.dtype_rows(soc))
        got = set(rows)
        if len(rows) != len(got):
            msgs.append("duplicated dtype rows")
        if exp - got:
            msgs.append(f"missing dtype rows {_rows_text(exp - got)} "
                        f"(columns {[t.name for t in spec.inputs + spec.outputs]})")
        if got - exp:
            msgs.append(f"dtype rows not in the OpSpec {_rows_text(got - exp)}")
        if fmts is None:
            msgs.append("formats not readable")
        else:
            bad = sorted({f for r in fmts for f in r if f != "ND"}, key=str)
            if bad:
                msgs.append(f"expected format ND everywhere, got {bad}")
    # one line per distinct problem, naming every compute unit it applies to
    grouped = {}
    for unit, msgs in per_unit.items():
        for m in msgs:
            grouped.setdefault(m, []).append(unit)
    out.extend(f"{pre}: {', '.join(units)}: {m}" for m, units in grouped.items())
    return out


def compare_reg_info(spec, facts):
    """Lines where the ascend backend's reg_info disagrees with the OpDef ``facts``."""
    from ms_kvcache._backends import ascend
    from ms_kvcache._spec import SOCS

    out = []
    pre = f"{spec.op_type}: reg_info vs {facts.source}"
    seen = set()
    for soc in SOCS:
        unit = ascend.compute_unit(soc)
        if unit in seen:
            continue
        seen.add(unit)
        info = ascend.reg_info(spec, soc)
        if info["op_name"] != facts.type:
            out.append(f"{pre}: op name {info['op_name']!r} != OpDef type {facts.type!r}")
            return out
        ins, outs = facts.params_for(unit)
        for kind, regs, params in (("inputs", info["inputs"], ins), ("outputs", info["outputs"], outs)):
            rn = [(r["name"], r["paramType"]) for r in regs]
            pn = [(p.name, p.param_type) for p in params]
            if rn != pn:
                out.append(f"{pre}: {unit}: {kind}: reg_info {rn}, OpDef {pn}")
        ra = [(a["name"], a["type"]) for a in info.get("attr", [])]
        fa = [(a.name, a.type) for a in facts.attrs]
        if ra != fa:
            out.append(f"{pre}: attrs: reg_info {ra}, OpDef {fa}")
        if unit not in facts.configs:
            continue
        rows, fmts, why = facts.rows_for(unit)
        if why:
            continue  # already reported by compare_opdef
        reg_rows = {tuple(d for d, _ in r) for r in info["dtype_format"]}
        if reg_rows != set(rows):
            out.append(f"{pre}: {unit}: dtype rows differ: reg_info only {_rows_text(reg_rows - set(rows)) or '-'}; "
                       f"OpDef only {_rows_text(set(rows) - reg_rows) or '-'}")
        reg_fmts = {f for r in info["dtype_format"] for _, f in r}
        if reg_fmts != {"DefaultFormat"}:
            out.append(f"{pre}: {unit}: reg_info formats {sorted(reg_fmts)} (expected DefaultFormat = ND)")
    return out


def _check_kernel(spec, root):
    out = []
    rel = f"op_kernel/{spec.name}.cpp"
    path = root / rel
    if not path.is_file():
        return [f"{spec.op_type}: {rel}: missing"]
    text = _strip_comments(path.read_text(errors="replace"))
    m = re.search(r'extern\s+"C"\s+__global__\s+__aicore__\s+void\s+([A-Za-z_]\w*)\s*\(', text)
    if not m:
        return [f"{spec.op_type}: {rel}: no 'extern \"C\" __global__ __aicore__ void {snake(spec.op_type)}(...)' entry"]
    if m.group(1) != snake(spec.op_type):
        out.append(f"{spec.op_type}: {rel}: kernel entry is '{m.group(1)}', expected '{snake(spec.op_type)}' "
                   "(snake_case of the OpType)")
    params = _split_args(text[m.end():_match_close(text, m.end() - 1) - 1])
    names = []
    for p in params:
        if not re.match(r"(GM_ADDR|__gm__\s+uint8_t\s*\*)", p.strip()):
            out.append(f"{spec.op_type}: {rel}: kernel parameter '{p}' is not GM_ADDR")
        names.append(re.findall(r"([A-Za-z_]\w*)\s*$", p)[0] if re.findall(r"([A-Za-z_]\w*)\s*$", p) else p)
    expect = [t.name for t in spec.inputs + spec.outputs] + ["workspace", "tiling"]
    norm = lambda s: s.replace("_", "").lower()  # noqa: E731
    if len(names) != len(expect) or any(not norm(a).endswith(norm(b)) and norm(a) != norm(b)
                                        for a, b in zip(names, expect)):
        out.append(f"{spec.op_type}: {rel}: kernel parameters {names}, expected inputs then outputs then "
                   f"workspace, tiling: {expect}")
    # tiling-key dispatch: generated from the op's declaration in op_kernel/mskv_tiling_keys.h, never a
    # hand-written ladder (docs/design.md, "Tiling keys")
    for km in re.finditer(r"\bTILING_KEY_IS\s*\(\s*\d", text):
        ln = text.count("\n", 0, km.start()) + 1
        out.append(f"{spec.op_type}: {rel}:{ln}: hand-written tiling-key branch; declare the key in "
                   f"op_kernel/mskv_tiling_keys.h (MSKV_KEYS_{spec.name.upper()}) and expand it")
    if "TILING_KEY_IS" in text:
        want = f"MSKV_KEYS_{spec.name.upper()}"
        used = set(re.findall(r"\b(MSKV_KEYS_\w+)\s*\(", text))
        if want not in used:
            out.append(f"{spec.op_type}: {rel}: the branch ladder does not expand {want} (its keys in "
                       f"op_kernel/mskv_tiling_keys.h); expands {sorted(used) or 'none'}")
        if not re.search(r"\bMSKV_UNKNOWN_TILING_KEY\s*\(\s*\)", text):
            out.append(f"{spec.op_type}: {rel}: no MSKV_UNKNOWN_TILING_KEY() after the branch ladder (an unknown "
                       "tiling key must trap, not return silently)")
    # includes: the CANN kernel build sees op_kernel/ only; anything else must be guarded
    depth = 0
    for ln, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if re.match(r"#\s*if", s):
            depth += 1
        elif re.match(r"#\s*endif", s):
            depth -= 1
        im = re.match(r'#\s*include\s*"([^"]+)"', s)
        if im and depth == 0:
            inc = im.group(1)
            if inc.startswith(CANN_KERNEL_HEADERS):
                continue
            if not (path.parent / inc).resolve().is_file() or ".." in Path(inc).parts:
                out.append(f"{spec.op_type}: {rel}:{ln}: includes \"{inc}\" which is not in op_kernel/ (the CANN "
                           f"kernel build copies op_kernel/ only; the tiling struct comes from GET_TILING_DATA)")
    return out


def _check_tiling_and_proto(spec, root):
    out = []
    host = root / "op_host" / f"{spec.name}.cpp"
    texts = []
    if host.is_file():
        t = _strip_comments(host.read_text(errors="replace"))
        texts = [t] + [h for _, h in _included_headers(host, t)]
    tiling_h = root / "op_host" / f"{spec.name}_tiling.h"
    if tiling_h.is_file():
        texts.append(_strip_comments(tiling_h.read_text(errors="replace")))
    blob = "\n".join(texts)
    regs = re.findall(r"REGISTER_TILING_DATA_CLASS\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", blob)
    mine = [d for o, d in regs if o == spec.op_type]
    if not mine:
        out.append(f"{spec.op_type}: op_host: no REGISTER_TILING_DATA_CLASS({spec.op_type}, <TilingData>) in "
                   f"op_host/{spec.name}.cpp, op_host/{spec.name}_tiling.h or the op_host headers they include")
    for d in mine:
        if not re.search(r"BEGIN_TILING_DATA_DEF\s*\(\s*" + re.escape(d) + r"\s*\)", blob):
            out.append(f"{spec.op_type}: op_host: REGISTER_TILING_DATA_CLASS({spec.op_type}, {d}) but no "
                       f"BEGIN_TILING_DATA_DEF({d})")
    proto = root / "op_proto" / f"{spec.name}.cpp"
    rel = f"op_proto/{spec.name}.cpp"
    if not proto.is_file():
        out.append(f"{spec.op_type}: {rel}: missing")
        return out
    pt = _strip_comments(proto.read_text(errors="replace"))
    m = re.search(r"\bIMPL_OP(?:_INFERSHAPE)?\s*\(\s*" + re.escape(spec.op_type) + r"\s*\)", pt)
    if not m:
        out.append(f"{spec.op_type}: {rel}: no IMPL_OP_INFERSHAPE({spec.op_type})")
        return out
    stmt_end = pt.find(";", m.end())
    chain = pt[m.end():len(pt) if stmt_end < 0 else stmt_end]
    calls = re.findall(r"\.\s*([A-Za-z_]\w*)\s*\(", chain)
    names = set(calls)
    for need in ("InferShape", "InferDataType"):
        if need not in names:
            out.append(f"{spec.op_type}: {rel}: IMPL_OP_INFERSHAPE({spec.op_type}) registers no .{need}(...)")
    return out


def _load_sim():
    try:
        from ms_kvcache import _sim  # noqa: WPS433 - optional compiled extension
    except ImportError as exc:
        return None, f"emulation module ms_kvcache._sim not built ({exc})"
    if not hasattr(_sim, "opdef"):
        return None, "ms_kvcache._sim has no opdef()"
    return _sim, ""


def check_op(spec, root, sim="auto"):
    """All mismatch lines of one op. ``sim``: "auto" (use ms_kvcache._sim if built), None (skip), or a
    callable ``opdef(op_type)``."""
    root = Path(root)
    out = []
    if spec.op_type != op_type_of(spec.name) or op_name_of(spec.op_type) != spec.name:
        out.append(f"{spec.op_type}: OpSpec: op_type must be {OP_TYPE_PREFIX!r} + the CamelCase of name "
                   f"{spec.name!r} (and back: aclnn_{snake(spec.op_type)}.h)")
    out.extend(_check_kernel(spec, root))
    host = root / "op_host" / f"{spec.name}.cpp"
    if not host.is_file():
        out.append(f"{spec.op_type}: op_host/{spec.name}.cpp: missing")
    else:
        facts = parse_opdef(host, spec.op_type)
        lines = compare_opdef(spec, facts)
        out.extend(lines)
        if not lines:  # reg_info derives from the OpSpec: only check it once OpSpec == OpDef
            out.extend(compare_reg_info(spec, facts))
    out.extend(_check_tiling_and_proto(spec, root))
    if sim == "auto":
        mod, _ = _load_sim()
        sim = mod.opdef if mod is not None else None
    if sim is not None:
        try:
            info = sim(spec.op_type)
        except Exception as exc:  # the registry raises for an unregistered / invalid OpDef
            out.append(f"{spec.op_type}: emulation opdef: {exc}")
        else:
            sf = opdef_from_sim(info, spec.op_type)
            lines = compare_opdef(spec, sf)
            out.extend(lines)
            if not lines:
                out.extend(compare_reg_info(spec, sf))
    return out


def repository_ops(root):
    return sorted(p.stem for p in (Path(root) / "op_kernel").glob("*.cpp"))


#: C++ constant of each coded attribute value in op_host/mskv_attr_codes.h: name template per attribute,
#: filled with the value's name in upper case (``cache_layout`` "BNSD" -> ``kLayoutBNSD``).
ATTR_CODE_CONSTANTS = {"cache_layout": "kLayout{}", "direction": "kDir{}", "quant_mode": "kQuant{}"}
ATTR_CODES_HEADER = "op_host/mskv_attr_codes.h"


def check_attr_codes(root, specs):
    """Lines where the int codes of named attributes (``AttrSpec.codes``) disagree between ops or with the
    C++ constants of op_host/mskv_attr_codes.h (which the OpDefs, tilings and cpu kernels use). An op may take
    a subset of an attribute's names (rerope_cached_keys: no "NZ" cache_layout); a name has one code."""
    out, seen = [], {}
    for spec in specs:
        for a in spec.attrs:
            if not a.codes:
                continue
            first = seen.setdefault(a.name, (spec.op_type, {}))
            for value, code in a.codes:
                known = first[1].setdefault(value, (code, spec.op_type))
                if known[0] != code:
                    out.append(f"{spec.op_type}: attr '{a.name}': code of {value!r} is {code}, {known[1]}'s is "
                               f"{known[0]}")
    seen = {name: (op_type, tuple((v, c) for v, (c, _) in codes.items())) for name, (op_type, codes) in seen.items()}
    header = Path(root) / ATTR_CODES_HEADER
    if not seen:
        return out
    if not header.is_file():
        return out + [f"{ATTR_CODES_HEADER}: missing (C++ constants of the coded attributes {sorted(seen)})"]
    ints = _int_constants(_strip_comments(header.read_text(errors="replace")))
    for name, (op_type, codes) in sorted(seen.items()):
        tmpl = ATTR_CODE_CONSTANTS.get(name)
        if tmpl is None:
            out.append(f"{op_type}: attr '{name}' is int-coded but tools/mskv_structure.py ATTR_CODE_CONSTANTS "
                       f"names no C++ constant for it")
            continue
        for value, code in codes:
            const = tmpl.format(value.upper())
            if const not in ints:
                out.append(f"{ATTR_CODES_HEADER}: no constant {const} ({name} {value!r} = {code})")
            elif ints[const] != code:
                out.append(f"{ATTR_CODES_HEADER}: {const} = {ints[const]}, but AttrSpec codes {name} {value!r} = {code}")
    return out


def kernel_coverage(root, specs):
    """Lines for registered ops whose AscendC kernel presence disagrees with their OpSpec: an op must
    have op_kernel/<op>.cpp unless it is a runtime op of the ascend backend
    (``extra["ascend_runtime"]``, :func:`ms_kvcache._spec.ascend_runtime`, e.g. swap_blocks: an ACL memcpy, no kernel) or its spec declares the kernel pending
    (``extra["ascend_kernel"] = "<reason>"``, :func:`ms_kvcache._spec.kernel_pending`: the quantized
    writes until their AscendC phase); a pending op must not have one yet (drop the marker with the
    kernel)."""
    from ms_kvcache._spec import ascend_runtime, kernel_pending

    have = set(repository_ops(root))
    out = []
    for spec in specs:
        why = kernel_pending(spec)
        if why and spec.name in have:
            out.append(f"{spec.op_type}: op_kernel/{spec.name}.cpp exists but its OpSpec declares the AscendC kernel "
                       f"pending ({why!r}): drop extra['ascend_kernel'] now that the kernel is there")
        elif not why and not ascend_runtime(spec) and spec.name not in have:
            out.append(f"{spec.op_type}: no op_kernel/{spec.name}.cpp (an op without an AscendC kernel yet declares "
                       f"extra['ascend_kernel'] = '<reason>' in its OpSpec)")
    return out


def check_repository(root=None, specs=None, sim="auto"):
    """Mismatch lines for every op of ``root``/op_kernel (default: this checkout), and, with the registered
    specs (``specs`` None), the kernel coverage of every op (:func:`kernel_coverage`)."""
    if root is None:
        root = Path(__file__).resolve().parent.parent
    if specs is None:
        import ms_kvcache  # noqa: F401 - registers every public op
        from ms_kvcache._spec import all_specs

        specs = all_specs()
        out = kernel_coverage(root, specs)
    else:
        out = []
    by_name = {s.name: s for s in specs}
    for op in repository_ops(root):
        spec = by_name.get(op)
        if spec is None:
            out.append(f"{op_type_of(op)}: op_kernel/{op}.cpp has no registered OpSpec named {op!r}")
            continue
        out.extend(check_op(spec, root, sim))
    out.extend(check_attr_codes(root, specs))
    return out


# ------------------------------------------------------------------------------------ Python import layers
#: The import layers of the ms_kvcache package, lowest first (docs/design.md, "Layers"). A module imports only
#: modules of its own layer or lower ones, at module level and inside functions alike, and the imports form no
#: cycle (:func:`import_problems`). Each module belongs to the first layer with a matching pattern (relative
#: to ``ms_kvcache``; ``""`` is the package itself, ``x.*`` any module below ``x``); every module must match one.
LAYERS = (
    ("base: formats, backend selection, ctypes ACL, the fast-path module loader",
     ("_formats", "_backend", "_backends", "_backends._acl", "_pyboost_loader")),
    ("declarations: OpSpec machinery and registry, the OpSpecs as data", ("_spec", "_opspecs", "_opspecs.*")),
    ("checks and host memory", ("_validate", "_host_memory", "_layerwise_guard", "_nz")),
    ("AscendC emulation", ("sim", "sim.*")),
    ("primitives, launchers, fast path", ("_custom",)),
    ("backends", ("_backends.cpu", "_backends.sim", "_aclnn", "_backends.ascend", "_backends.ascend_layerwise")),
    ("the PyNative branch", ("_eager",)),
    ("op helpers: shared checks", ("ops._kv_shapes", "ops._rope_common", "ops._quant", "ops._multi_layer")),
    ("quantizing variants", ("ops.*_quant",)),
    ("public ops", ("ops.*", "ops")),
    ("the package", ("",)),
    ("applications", ("disagg", "disagg.*", "demo", "demo.*", "bench", "bench.*", "cli")),
)

#: Compiled extension modules of the package (built by CMake; no Python imports of their own).
EXTENSIONS = ("_cpu", "_sim", "_cpu_pyboost", "_ascend_pyboost")

#: Calls that import a module named at run time, per module, and why; not edges of the graph.
#: :func:`import_graph` reports any other ``importlib.import_module`` / ``__import__`` call.
DYNAMIC_IMPORTS = {
    "ms_kvcache": "the lazy public names (_LAZY, counted as edges) and ms_kvcache.<submodule> by attribute",
    "ms_kvcache.bench._runner": "benchmark modules found by name (ms_kvcache.bench.<name>) or file",
    "ms_kvcache.disagg._mooncake": "the optional Mooncake package, imported when a sender / receiver is created",
}


def _package_modules(pkg_dir):
    """{dotted name: (path, is_package)} of every .py module under ``pkg_dir`` (``ms_kvcache/``)."""
    pkg_dir = Path(pkg_dir)
    out = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        parts = list(path.relative_to(pkg_dir.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


def _lazy_names(init_tree):
    """The root package's lazy public names: ``({name: module}, line of _LAZY)``, read from its ``_OPS`` /
    ``_LAZY`` assignments."""
    import ast

    ops, lazy, line = (), {}, 0
    for node in init_tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "_OPS":
                ops = ast.literal_eval(node.value)
            elif name == "_LAZY" and isinstance(node.value, ast.Dict):
                line = node.lineno
                for k, v in zip(node.value.keys, node.value.values):
                    if k is None:  # **{name: "ms_kvcache.ops" for name in _OPS}
                        lazy.update({n: "ms_kvcache.ops" for n in ops})
                    else:
                        lazy[ast.literal_eval(k)] = ast.literal_eval(v)
    return lazy, line


def import_graph(root=None):
    """The import graph of the ms_kvcache package of ``root`` (default: this checkout), read from the source
    with ``ast`` (nothing is imported): ``(modules, edges, problems)``. ``modules`` = {dotted name: path};
    ``edges`` = {(importer, imported): first line}; every ``import`` / ``from ... import`` anywhere in a
    module (module level, functions, classes, try blocks) is an edge, relative imports resolved, and
    ``from pkg import name`` goes to the submodule ``pkg.name`` when there is one, else to ``pkg``. A lazy
    public name of the package (``ms_kvcache.reshape_and_cache``, ``from ms_kvcache import ...``) is also an
    edge to the module that defines it. Imports of compiled extensions (:data:`EXTENSIONS`) and of other
    packages are not edges. ``problems``: lines for unknown ``ms_kvcache`` names and for run-time imports
    outside :data:`DYNAMIC_IMPORTS`."""
    import ast

    root = Path(root) if root else Path(__file__).resolve().parent.parent
    mods = _package_modules(root / "ms_kvcache")
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, (p, _) in mods.items()}
    lazy, lazy_line = _lazy_names(trees["ms_kvcache"])
    edges, problems = {}, []

    def add(src, dst, line):
        if dst != src:
            edges.setdefault((src, dst), line)

    def target(src, name, line):
        """Edge(s) for the imported dotted ``name``; returns False for a name outside the package."""
        if name != "ms_kvcache" and not name.startswith("ms_kvcache."):
            return False
        if name in mods:
            add(src, name, line)
            return True
        parent, _, last = name.rpartition(".")
        if parent == "ms_kvcache" and last in EXTENSIONS:
            return True
        if parent in mods and mods[parent][1]:
            add(src, parent, line)  # a name defined in the package's __init__
            if parent == "ms_kvcache" and last in lazy:
                add(src, lazy[last], line)
            elif parent == "ms_kvcache" and not last.startswith("__"):
                ok = any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == last or
                         isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == last for a in n.names)
                         or isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == last for t in n.targets)
                         for n in trees["ms_kvcache"].body)
                if not ok:
                    problems.append(f"{src}:{line}: imports {name}, which is neither a module, a compiled extension "
                                    f"({', '.join(EXTENSIONS)}) nor a name of ms_kvcache/__init__.py")
            return True
        problems.append(f"{src}:{line}: imports {name}, which is not a module of the package")
        return True

    for src, tree in trees.items():
        is_pkg = mods[src][1]
        imports_root = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    target(src, a.name, node.lineno)
                    imports_root |= a.name == "ms_kvcache" and a.asname is None
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = src.split(".") if is_pkg else src.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module
                for a in node.names:
                    full = f"{module}.{a.name}"
                    if full in mods or (module == "ms_kvcache" and a.name in EXTENSIONS):
                        target(src, full, node.lineno)
                    elif module == "ms_kvcache":
                        target(src, full, node.lineno)  # a name of the package's __init__ (lazy ones too)
                    else:
                        target(src, module, node.lineno)
            elif isinstance(node, ast.Call):
                f = node.func
                fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if fname in ("import_module", "__import__") and src not in DYNAMIC_IMPORTS:
                    problems.append(f"{src}:{node.lineno}: imports a module named at run time ({fname}); import it "
                                    f"by name, or add the module to DYNAMIC_IMPORTS in tools/mskv_structure.py "
                                    f"with the reason")
        if imports_root:  # ms_kvcache.<lazy name> through `import ms_kvcache`
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id == "ms_kvcache" and node.attr in lazy):
                    add(src, lazy[node.attr], node.lineno)
    for name, where in lazy.items():  # the package's own lazy names (ms_kvcache.__getattr__)
        add("ms_kvcache", where, lazy_line)
    return {m: p for m, (p, _) in mods.items()}, edges, problems


def layer_of(module):
    """Index in :data:`LAYERS` of the first layer with a pattern matching ``module`` (a dotted name), or None."""
    import fnmatch

    rel = module[len("ms_kvcache."):] if module.startswith("ms_kvcache.") else "" if module == "ms_kvcache" else None
    if rel is None:
        return None
    for i, (_, patterns) in enumerate(LAYERS):
        if any(rel == p if "*" not in p else fnmatch.fnmatchcase(rel, p) for p in patterns):
            return i
    return None


def import_cycles(edges):
    """The strongly connected components of more than one module (sorted lists), i.e. the import cycles."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):  # Tarjan, iterative over the successors to stay clear of the recursion limit
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def import_problems(root=None, allowed=()):
    """One line per import that breaks the layering: a module in no layer, an import of a higher layer, an
    import cycle (naming its edges), an unknown name or an unlisted run-time import (:func:`import_graph`).
    ``allowed``: (importer, imported) edges left out (e.g. ones another change removes)."""
    modules, edges, problems = import_graph(root)
    allowed = set(allowed)
    edges = {e: line for e, line in edges.items() if e not in allowed}
    out = list(problems)
    for m in sorted(modules):
        if layer_of(m) is None:
            out.append(f"{m}: in no layer of LAYERS (tools/mskv_structure.py): add it where it belongs")
    for (a, b), line in sorted(edges.items()):
        la, lb = layer_of(a), layer_of(b)
        if la is not None and lb is not None and lb > la:
            out.append(f"{a}:{line}: imports {b}, a higher layer ({LAYERS[lb][0]!r} above {LAYERS[la][0]!r})")
    for comp in import_cycles(edges):
        inner = [f"{a} -> {b} (line {edges[(a, b)]})" for (a, b) in sorted(edges) if a in comp and b in comp]
        out.append(f"import cycle among {', '.join(comp)}: {'; '.join(inner)}")
    return out


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=None, help="checkout to check (default: this one)")
    ap.add_argument("--no-sim", action="store_true", help="do not consult the emulation's OpDef registry")
    ap.add_argument("--imports", action="store_true",
                    help="check the Python import layers of ms_kvcache instead (LAYERS: no upward import, no cycle)")
    args = ap.parse_args(argv)
    if args.imports:
        lines = import_problems(args.root)
        for line in lines:
            print(line)
        if not lines:
            modules, edges, _ = import_graph(args.root)
            print(f"OK: {len(modules)} modules of ms_kvcache import downward only ({len(LAYERS)} layers, "
                  f"{len(edges)} imports, no cycle)")
        return 1 if lines else 0
    lines = check_repository(args.root, sim=None if args.no_sim else "auto")
    for line in lines:
        print(line)
    if not lines:
        root = Path(args.root) if args.root else Path(__file__).resolve().parent.parent
        ops = repository_ops(root)
        print(f"OK: {len(ops)} AscendC op(s) in {root} agree with their OpSpec (kernel entry, OpDef, tiling, "
              f"infer shape, reg_info): {', '.join(ops) or 'none'}")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
