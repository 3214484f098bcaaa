"""No deprecated MindSpore settings in our code; our own deprecation warnings fail the tests.

MindSpore 2.10 reports a deprecated ``set_context`` key (``pynative_synchronize``, ``device_target``, ...)
through its logger, not through ``warnings``: a bench run printed 98 such lines. The static check below
asks MindSpore's own deprecation table (``mindspore.context._check_context_deprecated``) about every
``set_context(key=...)`` in ms_kvcache/, scripts/ and tests/. Python warnings raised from ms_kvcache
modules are errors in the suite (pyproject.toml, ``filterwarnings``).
"""
import ast
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _set_context_keys():
    """(file, line, key) of every keyword of a ``set_context(...)`` call in our Python sources, plus the
    keys named in ``set_context(key=...)`` text of the docs' Python snippets."""
    found = []
    files = [p for d in ("ms_kvcache", "scripts", "tests") for p in (ROOT / d).rglob("*.py")]
    for f in files:
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if name == "set_context":
                    found += [(f, node.lineno, kw.arg) for kw in node.keywords if kw.arg]
    for f in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            for m in re.finditer(r"set_context\((\w+)=", line):
                found.append((f, i, m.group(1)))
    return found


def test_no_deprecated_set_context_keys():
    from mindspore import context

    keys = _set_context_keys()
    assert any(k == "mode" for _, _, k in keys)  # the scan sees our set_context calls
    said = []
    real = context.logger.warning
    context.logger.warning = lambda msg, *a, **k: said.append(str(msg))
    try:
        bad = []
        for f, line, key in keys:
            said.clear()
            try:
                context._check_context_deprecated(key)
            except ValueError as exc:  # a key MindSpore removed
                said.append(str(exc))
            if said:
                bad.append(f"{f.relative_to(ROOT)}:{line}: {key}: {said[0]}")
    finally:
        context.logger.warning = real
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_deprecated_key():
    """The check above can fail: MindSpore's table does flag pynative_synchronize."""
    from mindspore import context

    said = []
    real = context.logger.warning
    context.logger.warning = lambda msg, *a, **k: said.append(str(msg))
    try:
        context._check_context_deprecated("pynative_synchronize")
    finally:
        context.logger.warning = real
    assert said and "launch_blocking" in said[0]


def test_our_deprecation_warnings_are_errors():
    """pyproject.toml turns a DeprecationWarning / FutureWarning raised from an ms_kvcache module into an
    error; one from elsewhere stays a warning."""
    for cat in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        with pytest.raises(cat):
            warnings.warn_explicit("old API", cat, "ms_kvcache/_custom.py", 1, module="ms_kvcache._custom")
    with pytest.warns(DeprecationWarning):
        warnings.warn_explicit("old API", DeprecationWarning, "other.py", 1, module="some_other_package")
