"""Public docstrings are compact Google-style references (napoleon reads them for docs/api/).

Every public function and class (``ms_kvcache.__all__``, ``ms_kvcache.disagg.__all__``) and every public
method of those classes: a docstring of at most MAX_LINES lines; ``Args:`` (classes: ``Args:`` or
``Attributes:``) and ``Returns:`` where it takes arguments; a ``Raises:`` section names each exception class
once. The long behavioural notes live in docs/ (ops-copy.md, ops-rope.md, ops-transfer.md, quantization.md),
which the docstrings link.
"""
import enum
import inspect
import re

import pytest

import ms_kvcache
import ms_kvcache.disagg

MAX_LINES = 40


def _public_objects():
    out = []
    for mod in (ms_kvcache, ms_kvcache.disagg):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                out.append((f"{mod.__name__}.{name}", obj))
                if inspect.isclass(obj) and not issubclass(obj, (BaseException, enum.Enum)):
                    for mname, member in vars(obj).items():
                        if mname.startswith("_"):
                            continue
                        if isinstance(member, (staticmethod, classmethod)):
                            member = member.__func__
                        if inspect.isfunction(member) or isinstance(member, property):
                            out.append((f"{mod.__name__}.{name}.{mname}", member))
    return out


PUBLIC = _public_objects()


def _params(obj):
    """Parameters a caller passes (self / cls, *args, **kwargs left out); () for a property."""
    if isinstance(obj, property):
        return ()
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ()
    return tuple(p for n, p in sig.parameters.items()
                 if n not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def _section(doc, title):
    """Lines of the Google-style section ``title`` (indented entries), or None when absent."""
    lines = doc.splitlines()
    try:
        i = lines.index(f"{title}:")
    except ValueError:
        return None
    out = []
    for line in lines[i + 1:]:
        if line and not line.startswith(" "):
            break
        out.append(line)
    return out


def test_the_public_surface_is_covered():
    names = {n for n, _ in PUBLIC}
    assert "ms_kvcache.reshape_and_cache" in names and "ms_kvcache.disagg.KVSender.send" in names
    assert len(PUBLIC) > 40


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_docstring_is_short(name, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    n = len(doc.splitlines())
    assert n <= MAX_LINES, f"{name}: {n} docstring lines (at most {MAX_LINES}: move long notes to docs/ and link)"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_docstring_has_args_and_returns(name, obj):
    doc = inspect.getdoc(obj) or ""
    params = _params(obj)
    if inspect.isclass(obj):
        if params and not issubclass(obj, (BaseException, enum.Enum)):
            assert _section(doc, "Args") is not None or _section(doc, "Attributes") is not None, \
                f"{name}: takes {[p.name for p in params]}: needs an Args: (or Attributes:) section"
        return
    if params:
        args = _section(doc, "Args")
        assert args is not None, f"{name}: takes {[p.name for p in params]}: needs an Args: section"
        text = "\n".join(args)
        missing = [p.name for p in params if not re.search(rf"(^|[\s,]){re.escape(p.name)}[\s,(:]", text)]
        assert not missing, f"{name}: Args: does not describe {missing}"
        assert _section(doc, "Returns") is not None, f"{name}: needs a Returns: section (None: say what is written)"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_raises_names_each_exception_once(name, obj):
    raises = _section(inspect.getdoc(obj) or "", "Raises")
    if raises is None:
        return
    heads = [m.group(1) for m in (re.match(r"^    ([A-Z]\w*(?:\s*[/,]\s*[A-Z]\w*)*):", ln) for ln in raises) if m]
    assert heads, f"{name}: Raises: has no 'ExceptionClass: causes' entry"
    seen = [c.strip() for h in heads for c in re.split(r"[/,]", h)]
    dup = sorted({c for c in seen if seen.count(c) > 1})
    assert not dup, f"{name}: Raises: lists {dup} more than once (one entry per exception class)"


def test_the_checks_can_fail():
    def undocumented_return(a):
        """Summary.

        Args:
            a: x.

        Raises:
            ValueError: one.
            TypeError / ValueError: two.
        """

    doc = inspect.getdoc(undocumented_return)
    assert _section(doc, "Args") == ["    a: x.", ""] and _section(doc, "Returns") is None
    assert [p.name for p in _params(undocumented_return)] == ["a"]
    with pytest.raises(AssertionError, match="needs a Returns: section"):
        test_docstring_has_args_and_returns("f", undocumented_return)
    with pytest.raises(AssertionError, match=r"lists \['ValueError'\] more than once"):
        test_raises_names_each_exception_once("f", undocumented_return)
    undocumented_return.__doc__ = "x\n" * (MAX_LINES + 1)
    with pytest.raises(AssertionError, match="41 docstring lines"):
        test_docstring_is_short("f", undocumented_return)
