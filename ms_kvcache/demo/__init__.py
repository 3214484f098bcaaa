"""``ms-kvcache demo``: all-MiniLM-L6-v2 run as a causal decoder over paged KV caches in MindSpore
GRAPH_MODE, with a preemption that offloads one sequence's KV to host and reloads it, every step checked
against a float64 recomputation without cache. Entry point: :func:`run_demo` (see ``docs/demo.md``)."""
from ms_kvcache.demo.pipeline import DemoError, DemoOptions, TOLERANCES, format_report, run_demo

__all__ = ["DemoError", "DemoOptions", "TOLERANCES", "format_report", "run_demo"]
