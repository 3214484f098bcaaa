"""The aclnn two-stage API CANN's op build (opbuild) generates for an op, derived from its OpSpec.

For an OpDef of type ``MskvFoo``, opbuild writes ``op_api/include/aclnn_mskv_foo.h`` with

    aclnnStatus aclnnMskvFooGetWorkspaceSize(<inputs>, <attributes>, <outputs>,
                                             uint64_t *workspaceSize, aclOpExecutor **executor);
    aclnnStatus aclnnMskvFoo(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream);

Rules (read in the public opbuild source, asc-devkit ``tools/build/opbuild/op_aclnn_generator.cpp``:
``AclnnOpGenFunProtoParam``, ``AclnnOpGenFunProtoAttrParamsImpl``, ``AclnnOpGenCodeFunInputComment`` /
``...OutputComment``; the file name from ``ConvertToSnakeCase`` in ``op_generator.cpp``):

- an input is ``const aclTensor *`` (``DYNAMIC``: ``const aclTensorList *``), named in lowerCamelCase,
  ``...Optional`` when OPTIONAL; an input that is also an output of the same name is a "ref" parameter
  ``aclTensor *<name>Ref`` and the output is not repeated;
- attributes in OpDef order: String -> ``char *``, Int -> ``int64_t``, Bool -> ``bool``, Float -> ``double``
  (an OPTIONAL String attribute is named ``...Optional``). The OpDef type is ``AttrSpec.kernel_type``: the
  named modes (``cache_layout``, ``direction``) are Int attributes carrying their codes
  (``AttrSpec.codes``; MindSpore < 2.9 cannot pass a string), so no ms_kvcache prototype has a ``char *``;
- outputs: ``const aclTensor *``, named ``out`` when there is one, else ``<name>Out``.

Every ms_kvcache OpDef declares exactly the OpSpec's inputs, attributes and outputs (the structural
check, tools/mskv_structure.py), so the prototype follows from the OpSpec. It is used three ways:

- :func:`signature`: a compact string of parameter kinds that the Ascend PyNative module
  (``ms_kvcache/csrc/ascend_pyboost_module.cpp``) compares with the prototype it was compiled for;
- :func:`shim_source`: the typed call shims of that module (``ms_kvcache/csrc/aclnn_calls.inc``, checked
  in; ``python -m ms_kvcache._aclnn --write`` regenerates it, and a test fails when it is stale);
- :func:`header_text`: the header text, for tests that compile against headers of the form CANN writes
  (the module's shims ``static_assert`` their types against the real headers when built with them).

Parameter kinds in :func:`signature`: ``T`` tensor input, ``L`` tensor-list input, ``O`` output tensor,
``s`` char*, ``i`` int64_t, ``b`` bool, ``d`` double.
"""
import sys
from pathlib import Path

from ms_kvcache import _spec

__all__ = ["params", "signature", "header_text", "header_name", "snake_case", "shim_source", "kernel_specs",
           "SHIM_PATH", "check_shim", "main"]

SHIM_PATH = Path(__file__).resolve().parent / "csrc" / "aclnn_calls.inc"

_ATTR = {"str": ("s", "char *"), "int": ("i", "int64_t "), "bool": ("b", "bool "), "float": ("d", "double ")}


def snake_case(op_type):
    """opbuild's ``ConvertToSnakeCase``: '_' before an upper-case letter that follows a lower-case one or
    starts a capitalised word after an upper-case run; all lower case. ``MskvReshapeAndCache`` ->
    ``mskv_reshape_and_cache``."""
    out = op_type[:1].lower()
    for i in range(1, len(op_type)):
        c, prev = op_type[i], op_type[i - 1]
        if c.isupper():
            if prev == "_":
                out += c.lower()
                continue
            nxt = op_type[i + 1] if i + 1 < len(op_type) else ""
            if not prev.isupper() or nxt.islower():
                out += "_"
            out += c.lower()
        else:
            out += c
    return out


def header_name(spec):
    """``aclnn_<snake_case(OpType)>.h``, the header opbuild writes for ``spec``."""
    return f"aclnn_{snake_case(spec.op_type)}.h"


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def params(spec, optional_attrs=True):
    """The GetWorkspaceSize parameters before ``workspaceSize, executor``: a list of
    ``(kind, c_type, c_name, spec_name)`` in prototype order (kinds as in the module docstring).

    ``optional_attrs``: the OpDef declares the attributes OPTIONAL (every ms_kvcache OpDef does; only the
    names of String attributes depend on it)."""
    out_names = {o.name for o in spec.outputs}
    res = []
    for t in spec.inputs:
        ref = t.name in out_names
        name = _camel(t.name) + ("Optional" if t.optional else "") + ("Ref" if ref else "")
        if t.dynamic:
            res.append(("L", "aclTensorList *" if ref else "const aclTensorList *", name, t.name))
        else:
            res.append(("T", "aclTensor *" if ref else "const aclTensor *", name, t.name))
    for a in spec.attrs:
        kt = a.kernel_type  # the OpDef's type: a coded name (cache_layout, direction) is an Int
        if kt not in _ATTR:
            raise ValueError(f"{spec.op_type}: attribute {a.name!r} of type {kt!r} has no aclnn parameter type here")
        kind, ctype = _ATTR[kt]
        name = _camel(a.name) + ("Optional" if optional_attrs and kt == "str" else "")
        res.append((kind, ctype, name, a.name))
    outs = [o for o in spec.outputs if o.name not in {t.name for t in spec.inputs}]
    for o in outs:
        res.append(("O", "const aclTensor *", "out" if len(outs) == 1 else _camel(o.name) + "Out", o.name))
    return res


def signature(spec):
    """Kinds of the GetWorkspaceSize parameters, e.g. ``"TTTTTsO"`` for reshape_and_cache."""
    return "".join(p[0] for p in params(spec))


def header_text(spec):
    """Text of ``op_api/include/aclnn_mskv_<op>.h`` as opbuild writes it (prototypes only)."""
    lines = [f"    {ctype}{name}" for _, ctype, name, _ in params(spec)]
    lines += ["    uint64_t *workspaceSize", "    aclOpExecutor **executor"]
    guard = f"ACLNN_{snake_case(spec.op_type).upper()}_H_"
    api = f"aclnn{spec.op_type}"
    return (f"#ifndef {guard}\n#define {guard}\n\n#include \"aclnn/acl_meta.h\"\n\n#ifdef __cplusplus\n"
            f"extern \"C\" {{\n#endif\n\n/* function: {api}GetWorkspaceSize */\n"
            f"__attribute__((visibility(\"default\")))\naclnnStatus {api}GetWorkspaceSize(\n"
            + ",\n".join(lines) + ");\n\n"
            f"/* function: {api} */\n__attribute__((visibility(\"default\")))\naclnnStatus {api}(\n"
            f"    void *workspace,\n    uint64_t workspaceSize,\n    aclOpExecutor *executor,\n"
            f"    aclrtStream stream);\n\n#ifdef __cplusplus\n}}\n#endif\n\n#endif\n")


def kernel_specs():
    """The specs of ops that have an AscendC kernel (every registered op but the ascend backend's runtime ops,
    ``_spec.ascend_runtime``: swap_blocks), sorted by name."""
    return [s for s in _spec.all_specs() if not _spec.ascend_runtime(s) and not _spec.kernel_pending(s)]


_ACCESS = {"T": "t", "L": "l", "O": "t", "s": "s", "i": "i", "b": "b", "d": "d"}


def shim_source(specs=None):
    """C++ text of ``ms_kvcache/csrc/aclnn_calls.inc``: per op a function-pointer type with the exact
    prototype, a shim calling a resolved ``aclnn<Op>GetWorkspaceSize`` with the values of an
    ``mskv_aclnn::Args`` (one per parameter), a ``static_assert`` against the real header when built with
    ``MSKV_ACLNN_HEADERS`` (``#include "aclnn_mskv_<op>.h"``), and the table ``kAclnnOps``."""
    specs = kernel_specs() if specs is None else specs
    out = ["// Generated by `python -m ms_kvcache._aclnn --write` from the OpSpecs (ms_kvcache/_aclnn.py): the",
           "// aclnn GetWorkspaceSize prototype of every op as CANN's opbuild writes it for our OpDefs. Do not edit.",
           "// Included by ascend_pyboost_module.cpp inside namespace mskv_aclnn.", ""]
    table = []
    for spec in specs:
        ps = params(spec)
        op = spec.op_type
        types = ", ".join(p[1].strip() for p in ps) + ", uint64_t *, aclOpExecutor **"
        args = ", ".join(f"a.{_ACCESS[k]}({j})" for j, (k, *_) in enumerate(ps))
        proto = ", ".join(f"{p[1]}{p[2]}" for p in ps)
        out += [f"// aclnn{op}GetWorkspaceSize({proto}, uint64_t *workspaceSize, aclOpExecutor **executor)",
                f"using WsFn_{op} = aclnnStatus (*)({types});",
                f"inline aclnnStatus Ws_{op}(void* fn, const Args& a, uint64_t* ws, aclOpExecutor** ex) {{",
                f"  return reinterpret_cast<WsFn_{op}>(fn)({args}, ws, ex);",
                "}",
                "#ifdef MSKV_ACLNN_HEADERS",
                "}  // namespace mskv_aclnn",
                f"#include \"{header_name(spec)}\"",
                "namespace mskv_aclnn {",
                f"static_assert(std::is_same<decltype(&::aclnn{op}GetWorkspaceSize), WsFn_{op}>::value,",
                f"              \"{header_name(spec)}: aclnn{op}GetWorkspaceSize differs from the OpSpec's prototype\");",
                f"static_assert(std::is_same<decltype(&::aclnn{op}), LaunchFn>::value, \"{header_name(spec)}: aclnn{op}\");",
                "#endif",
                ""]
        table.append(f"    {{\"{op}\", \"{signature(spec)}\", &Ws_{op}}},")
    out += ["static const OpEntry kAclnnOps[] = {"] + table + ["};", ""]
    return "\n".join(out)


def check_shim(path=SHIM_PATH):
    """'' if the checked-in shim file is what :func:`shim_source` generates, else a one-line reason."""
    want = shim_source()
    try:
        have = Path(path).read_text()
    except OSError as exc:
        return f"{path}: cannot read ({exc})"
    if have != want:
        return f"{path} is stale: regenerate it with `python -m ms_kvcache._aclnn --write`"
    return ""


def main(argv=None):
    """``python -m ms_kvcache._aclnn [--write | --check | --header OP]``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--write"]:
        SHIM_PATH.write_text(shim_source())
        print(f"wrote {SHIM_PATH}")
        return 0
    if argv[:1] == ["--header"] and len(argv) == 2:
        print(header_text(_spec.get_spec(argv[1])), end="")
        return 0
    why = check_shim()
    print(why or f"{SHIM_PATH} is up to date")
    return 1 if why else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
