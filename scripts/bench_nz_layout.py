#!/usr/bin/env python
"""Thin wrapper of ms_kvcache/bench/nz_layout.py (shipped in the package; also `ms-kvcache bench --ops nz_layout`)."""
import sys
from pathlib import Path

try:
    import ms_kvcache  # noqa: F401
except ModuleNotFoundError:  # a source checkout built with scripts/dev_build.sh, not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ms_kvcache.bench import main_for  # noqa: E402
from ms_kvcache.bench import nz_layout as mod  # noqa: E402

if __name__ == "__main__":
    sys.exit(main_for(mod))
