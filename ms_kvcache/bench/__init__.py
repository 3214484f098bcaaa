"""Benchmarks of every op family, run by ``ms-kvcache bench`` (convention: docs/design.md, "Benchmarks").

A benchmark module is ``ms_kvcache/bench/<family>.py`` (shipped in the wheel) exposing
``run(quick=False) -> list[dict]`` (one dict per measurement, keys in :data:`ROW_KEYS`) and, optionally,
``available() -> (ok, reason)`` (False: skipped with that reason, e.g. an optional extra is missing) and
``main(argv=None)`` (its own command line); the first sentence of its docstring is its ``--list`` line; ``scripts/bench_<family>.py`` is a thin wrapper calling
:func:`main_for`. ``ms-kvcache bench`` also loads ``scripts/bench_*.py`` files of a source checkout that
wrap no package module (by path) and those of ``--from DIR``.
Helpers for authors: :mod:`ms_kvcache.bench._util` (timing, memcpy baseline, row construction).
This package imports neither MindSpore nor numpy until a benchmark runs.
"""
from ms_kvcache.bench._runner import (ROW_KEYS, BenchModule, describe, discover, format_table, format_tables,
                                      main_for, normalise_row, plot_panels, print_table, run_modules,
                                      wrapped_modules, write_outputs, write_report)

__all__ = ["ROW_KEYS", "BenchModule", "describe", "discover", "main_for", "run_modules", "write_outputs",
           "write_report", "format_table", "format_tables", "print_table", "normalise_row", "plot_panels",
           "wrapped_modules"]
