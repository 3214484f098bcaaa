"""The documentation builds with Sphinx, warnings as errors, and the API reference names every public name.

``sphinx-build -W`` over docs/ (docs/conf.py: autodoc + napoleon over the docstrings, myst-parser for the
markdown pages) into a temporary directory, in a fresh process; then every name of ``ms_kvcache.__all__``
and ``ms_kvcache.disagg.__all__`` must be an entry of the generated API pages.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="sphinx is in the test extra: pip install -e '.[test]'")
pytest.importorskip("myst_parser", reason="myst-parser is in the test extra: pip install -e '.[test]'")

import ms_kvcache  # noqa: E402
import ms_kvcache.disagg  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               GLOG_v="3")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-E",
                          "-d", str(out / ".doctrees"), str(DOCS), str(out)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert res.returncode == 0, f"sphinx-build -W failed:\n{res.stderr[-6000:]}\n{res.stdout[-2000:]}"
    return out


def _ids(built):
    ids = set()
    for page in (built / "api").glob("*.html"):
        ids.update(re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', page.read_text(encoding="utf-8")))
    return ids


def test_every_public_name_is_in_the_api_reference(built):
    ids = _ids(built)
    want = [f"ms_kvcache.{n}" for n in ms_kvcache.__all__] + \
        [f"ms_kvcache.disagg.{n}" for n in ms_kvcache.disagg.__all__]
    missing = [n for n in want if n not in ids]
    assert not missing, f"not in docs/api/*.rst: {missing}"
    # the methods of the public classes come with them (autodoc :members:)
    assert {"ms_kvcache.disagg.KVSender.send", "ms_kvcache.disagg.KVReceiver.receive",
            "ms_kvcache.disagg.KVPrefixStore.load"} <= ids


def test_api_pages_render_the_docstrings(built):
    page = (built / "api" / "copy.html").read_text(encoding="utf-8")
    # napoleon turned the Google sections into fields: the parameters, the return and the raised classes
    start = page.index('id="ms_kvcache.reshape_and_cache"')
    entry = page[start:page.index('id="ms_kvcache.', start + 1)]
    for word in ("slot_mapping", "Returns", "Raises", "ValueError"):
        assert word in entry


def test_every_markdown_page_is_built(built):
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert "design" in pages and "ops-copy" in pages
    assert [p for p in pages if not (built / f"{p}.html").is_file()] == []
