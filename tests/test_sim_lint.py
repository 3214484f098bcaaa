"""scripts/lint_op_kernel.py keeps op_kernel/ (and the test kernels meant to be legal) inside the C++
subset the AscendC device compiler accepts, and rejects each forbidden construct."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = ROOT / "scripts" / "lint_op_kernel.py"


def _lint_module():
    spec = importlib.util.spec_from_file_location("lint_op_kernel", LINT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


lint = _lint_module()


@pytest.mark.parametrize("where", ["op_kernel", "tests/sim_kernels/op_kernel", "tests/sim_kernels/good"])
def test_legal_kernels_pass(where):
    p = subprocess.run([sys.executable, str(LINT), str(ROOT / where)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


BAD = {
    "std": "int f() { return std::max(1, 2); }",
    "heap": "void f() { int* p = new int[4]; delete[] p; }",
    "exceptions": "void f() { try { g(); } catch (...) {} }",
    "host-io": 'void f() { printf("%d", 1); }',
    "rtti": "void f(A* a) { auto* b = dynamic_cast<B*>(a); }",
    "include": "#include <vector>\n",
}


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_rule_rejects(tmp_path, rule):
    f = tmp_path / "k.cpp"
    f.write_text('#include "kernel_operator.h"\n' + BAD[rule] + "\n")
    problems = lint.lint_file(f)
    assert [r for _, _, r, _ in problems] == [rule], problems
    p = subprocess.run([sys.executable, str(LINT), str(f)], capture_output=True, text=True)
    assert p.returncode == 1 and f"[{rule}]" in p.stdout


def test_comments_strings_and_allowed_forms_pass(tmp_path):
    (tmp_path / "my_helpers.h").write_text("#pragma once\n")
    f = tmp_path / "k.cpp"
    f.write_text(
        '#include "kernel_operator.h"\n#include "lib/matmul_intf.h"\n#include "my_helpers.h"\n'
        "// std::vector and new/delete in a comment\n/* try { throw 1; } */\n"
        'const char* s = "printf std:: new";\n'
        'void f() { AscendC::printf("x"); int renew = 0; int freed = renew; (void)freed; }\n')
    assert lint.lint_file(f) == []
