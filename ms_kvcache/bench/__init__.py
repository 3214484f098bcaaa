"""Benchmarks of every op family, run by ``ms-kvcache bench`` (convention: docs/design.md, "Benchmarks").

A benchmark module is ``ms_kvcache/bench/<family>.py`` (shipped in the wheel) exposing
``run(quick=False) -> list[dict]`` (one dict per measurement, keys in :data:`ROW_KEYS`); the script
``scripts/bench_<family>.py`` is a thin wrapper calling :func:`main_for`. ``ms-kvcache bench`` also
loads ``scripts/bench_*.py`` files of a source checkout (by path) and of ``--from DIR``.
Helpers for authors: :mod:`ms_kvcache.bench._util` (timing, memcpy baseline, row construction).
"""
from ms_kvcache.bench._runner import (ROW_KEYS, BenchModule, discover, format_table, main_for, print_table,
                                      run_modules, write_outputs)

__all__ = ["ROW_KEYS", "BenchModule", "discover", "main_for", "run_modules", "write_outputs", "format_table",
           "print_table"]
