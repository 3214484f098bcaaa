"""``ms-kvcache demo``: SmolLM2-135M-Instruct generating text through paged KV caches in MindSpore
GRAPH_MODE (continuous batching, prefix sharing with copy-on-write, a preemption offloaded to host and
reloaded), every generated token checked against a numpy model without cache. Entry point:
:func:`run_demo` (see ``docs/demo.md``)."""
from ms_kvcache.demo.pipeline import DemoError, DemoOptions, TOLERANCES, format_report, run_demo

__all__ = ["DemoError", "DemoOptions", "TOLERANCES", "format_report", "run_demo"]
