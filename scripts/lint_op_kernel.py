#!/usr/bin/env python3
"""Thin wrapper of the kernel lint shipped in the package (ms_kvcache/sim/lint.py; see its docstring):
reject what the AscendC device compiler does not accept in kernel code.

Usage: scripts/lint_op_kernel.py [--no-expand] [PATH ...]   (default: op_kernel/ of this checkout)
Same as `python -m ms_kvcache.sim.lint`, but loads the lint file directly (no MindSpore import).
"""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("ms_kvcache_sim_lint", ROOT / "ms_kvcache" / "sim" / "lint.py")
lint = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lint)
lint_file, lint_paths, RULES = lint.lint_file, lint.lint_paths, lint.RULES

if __name__ == "__main__":
    sys.exit(lint.main(default_paths=[str(ROOT / "op_kernel")]))
