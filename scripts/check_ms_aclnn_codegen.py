#!/usr/bin/env python3
"""Run each MindSpore version's own aclnn code generator on ms_kvcache's ops (no NPU needed).

    python scripts/check_ms_aclnn_codegen.py ROOT [ROOT ...]

ROOT is the ``mindspore`` package folder of an installed MindSpore or of an unzipped wheel
(``pip download mindspore==X --no-deps`` and unzip), e.g. ``/tmp/ms-2.7.0/mindspore``. Run it with a
Python where ms_kvcache is importable (e.g. ``PYTHONPATH=$PWD`` in the dev venv): the ops' reg_info and
aclnn headers come from this checkout, the generator from ROOT.

What MindSpore does when an Ascend C custom op is constructed on Ascend
(``ops.Custom._generate_get_workspace_size_func``, the same steps in 2.7.0-2.10.0), done here for every
kernel op of ms_kvcache, with that version's code:

1. ``CustomInfoGenerator(op_type).get_aclnn_api_types()`` reads the op's ``aclnn_mskv_<op>.h`` from the
   vendor folder in ``ASCEND_CUSTOM_OPP_PATH`` (written here by ``ms_kvcache._aclnn.header_text``, the
   form CANN's opbuild writes for our OpDefs);
2. ``CustomCodeGenerator().generate_callback_by_types(op_type, reg_info, api_types)`` writes the C++
   callback (it maps every reg_info attribute type, ``_get_type_declaration``, and every prototype type);
3. the callback is compiled (``g++ -fsyntax-only``, with an empty stand-in for CANN's ``acl/acl_base.h``),
   as ``_compile_aot`` would;
4. every prototype type before ``workspaceSize, executor`` (what MindSpore stores as ``custom_inputs_type``)
   is one of the type names of that version's Ascend C kernel (``kTypeAclNN*`` in
   ``include/mindspore/ops/kernel/ascend/acl_ir/custom/custom_aclnn_utils.h``), which converts each input to it.

Each step is also run on the *old* form (the named modes ``cache_layout`` / ``direction`` as string
attributes, ``char *`` parameters), to show what int codes fix. ``_custom_ops_utils.py`` is loaded from
ROOT by path; its few imports of MindSpore (logger, CustomRegOp) resolve to the running MindSpore and are
not used by these two classes. Not checked here: anything after the callback (the kernel mod's
conversion code itself, CANN, the device).

Prints a Markdown table; exit code 0 if the current form passes every step on every ROOT.
"""
import copy
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL_TYPES_H = "include/mindspore/ops/kernel/ascend/acl_ir/custom/custom_aclnn_utils.h"


def ms_version(root):
    text = (root / "version.py").read_text()
    return re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text).group(1)


def load_generator(root, version):
    path = root / "ops" / "operations" / "_custom_ops_utils.py"
    spec = importlib.util.spec_from_file_location(f"_mskv_custom_ops_utils_{version.replace('.', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kernel_type_names(root):
    """The prototype type names that version's Ascend C kernel converts inputs to (None if no header)."""
    p = root / KERNEL_TYPES_H
    if not p.is_file():
        return None
    return set(re.findall(r'constexpr auto kTypeAclNN\w+ = "([^"]+)";', p.read_text()))


def old_form(spec, info, header):
    """reg_info and header text as before the int codes: coded attributes as str / char *...Optional."""
    from ms_kvcache import _aclnn

    info = copy.deepcopy(info)
    coded = {a.name for a in spec.attrs if a.codes}
    for a in info.get("attr", []):
        if a["name"] in coded:
            a["type"] = "str"
    for a in spec.attrs:
        if a.codes:
            camel = _aclnn._camel(a.name)  # noqa: SLF001 - the same naming as the shims
            header = header.replace(f"int64_t {camel},", f"char *{camel}Optional,")
    return info, header


def check_one(gen, ktypes, op_type, info, header, work, cxx):
    """'' if every step passes, else the first failure (one line)."""
    vendor = work / "vendor"
    inc = vendor / "op_api" / "include"
    if vendor.exists():
        shutil.rmtree(vendor)
    inc.mkdir(parents=True)
    (inc / gen.CustomInfoGenerator._get_aclnn_api_file_name(f"aclnn{op_type}")).write_text(header)  # noqa: SLF001
    os.environ["ASCEND_CUSTOM_OPP_PATH"] = str(vendor)
    os.environ["ASCEND_OPP_PATH"] = str(work / "opp")
    try:
        api_types = gen.CustomInfoGenerator(op_type).get_aclnn_api_types()
        if not api_types:
            return "header not found by CustomInfoGenerator"
        code = gen.CustomCodeGenerator().generate_callback_by_types(op_type, info, api_types)
    except (RuntimeError, ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    if ktypes is not None:
        bad = [t for t in api_types[:-2] if t not in ktypes]
        if bad:
            return f"kernel type table has no {sorted(set(bad))}"
    if cxx:
        src = work / f"{op_type}_callback.cc"
        src.write_text(code)
        r = subprocess.run([cxx, "-fsyntax-only", "-std=c++17", f"-I{work / 'stub'}", str(src)],
                           capture_output=True, text=True)
        if r.returncode:
            return "callback does not compile: " + r.stderr.strip().splitlines()[0][:160]
    return ""


def main(argv=None):
    roots = [Path(a).resolve() for a in (sys.argv[1:] if argv is None else argv)]
    if not roots:
        print(__doc__)
        return 2
    sys.path.insert(0, str(ROOT))
    from ms_kvcache import _aclnn
    from ms_kvcache._backends import ascend as A

    specs = _aclnn.kernel_specs()
    cxx = shutil.which("g++") or shutil.which("c++")
    rows, ok_all = [], True
    saved = {k: os.environ.get(k) for k in ("ASCEND_CUSTOM_OPP_PATH", "ASCEND_OPP_PATH")}
    with tempfile.TemporaryDirectory(prefix="mskv-ms-codegen-") as tmp:
        work = Path(tmp)
        (work / "stub" / "acl").mkdir(parents=True)
        (work / "stub" / "acl" / "acl_base.h").write_text("#pragma once\n#include <cstdint>\n")
        for root in roots:
            version = ms_version(root)
            gen = load_generator(root, version)
            ktypes = kernel_type_names(root)
            new_fail, old_fail = [], []
            for spec in specs:
                info, header = A.reg_info(spec), _aclnn.header_text(spec)
                why = check_one(gen, ktypes, spec.op_type, info, header, work, cxx)
                if why:
                    new_fail.append(f"{spec.name}: {why}")
                if any(a.codes for a in spec.attrs):
                    oi, oh = old_form(spec, info, header)
                    why = check_one(gen, ktypes, spec.op_type, oi, oh, work, cxx)
                    if why:
                        old_fail.append(f"{spec.name}: {why}")
            n_coded = sum(1 for s in specs if any(a.codes for a in s.attrs))
            ok_all = ok_all and not new_fail
            new = f"{len(specs) - len(new_fail)}/{len(specs)} ops" + (f" ({new_fail[0]})" if new_fail else "")
            old = f"{n_coded - len(old_fail)}/{n_coded} ops" + (f" (first: {old_fail[0]})" if old_fail else "")
            kt = "string type " + ('"char*"' if ktypes and "char*" in ktypes else
                                   ('"string"' if ktypes and "string" in ktypes else "?")) if ktypes else "no header"
            rows.append(f"| {version} | {new} | {old} | {kt} |")
            print(rows[-1], flush=True)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    print(f"\n| MindSpore | int-coded attributes (this code): callback generated{', compiled' if cxx else ''}, types "
          f"known to the kernel | string attributes (the old form) | kernel's string type |\n|---|---|---|---|")
    print("\n".join(rows))
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
