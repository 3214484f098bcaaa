"""Sphinx configuration: the API reference (autodoc + napoleon over the docstrings) and the markdown pages
(myst-parser). Build: ``python -m sphinx -W -b html docs docs/_build/html`` (tests/test_docs_build.py does,
warnings as errors). Needs the package importable (an install, or PYTHONPATH at the checkout with the
native modules built) and its dependencies (MindSpore): the ops are imported to read their docstrings."""
import os
import re
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import ms_kvcache  # noqa: E402

project = "ms_kvcache"
author = "ms_kvcache authors"
copyright = "ms_kvcache authors, Apache-2.0"  # noqa: A001 - Sphinx's name
release = version = ms_kvcache.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Google-style docstrings (Args / Returns / Raises). Attributes as fields, not as object descriptions: the
# classes document their attributes in the docstring, and autodoc's :members: would describe them twice.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "none"

# The markdown pages link to each other's sections as page.md#heading-slug (GitHub's anchors).
myst_heading_anchors = 4



def _literal_numpy_bool(app, what, name, obj, options, lines):
    """Docstrings name the type ``numpy.bool_`` plainly (read as is by help()); in reST a word ending in
    ``_`` is a link to a target of that name, which does not exist: show it as a literal instead."""
    for i, line in enumerate(lines):
        lines[i] = re.sub(r"(?<![`\w])numpy\.bool_(?![`\w])", "``numpy.bool_``", line)


def setup(app):
    app.connect("autodoc-process-docstring", _literal_numpy_bool)


html_theme = "alabaster"
html_title = f"ms_kvcache {release}"
