"""Discovery, execution and output of the benchmark modules (``ms-kvcache bench``)."""
import argparse
import csv
from dataclasses import dataclass
import importlib
import importlib.util
import math
from pathlib import Path
import pkgutil
import sys
from typing import Optional

__all__ = ["ROW_KEYS", "BenchModule", "discover", "run_modules", "write_outputs", "format_table", "print_table",
           "main_for"]

#: Keys of a result row (only ``op`` is required; ``tokens`` + ``gbps`` put it on the plot).
ROW_KEYS = {
    "op": "public op name, e.g. 'reshape_and_cache' (required)",
    "case": "what is fixed besides tokens, e.g. 'llama3-8b bf16 H8 D128 bs128'",
    "tokens": "number of tokens (or blocks) moved per call: the x axis of the plot",
    "backend": "'cpu' | 'sim' | 'ascend'",
    "dtype": "data dtype",
    "bytes": "payload bytes the op must move per call (read + written)",
    "seconds": "time per call",
    "gbps": "bytes / seconds / 1e9",
    "memcpy_gbps": "memcpy of the same bytes in the same run, GB/s",
    "ratio_memcpy": "memcpy time / op time (1.0 = as fast as memcpy)",
    "speedup": "{baseline name: baseline time / op time}",
    "note": "free text",
}
_ORDER = ["module", "op", "case", "tokens", "backend", "dtype", "bytes", "seconds", "gbps", "memcpy_gbps",
          "ratio_memcpy"]


@dataclass
class BenchModule:
    """One benchmark module: ``name`` (family), ``origin`` ("package" or a file path)."""

    name: str
    origin: str
    module_name: Optional[str] = None
    path: Optional[Path] = None

    def load(self):
        if self.module_name:
            return importlib.import_module(self.module_name)
        name = f"_ms_kvcache_bench_{self.name}"
        spec = importlib.util.spec_from_file_location(name, str(self.path))
        mod = importlib.util.module_from_spec(spec)
        # registered before it runs: MindSpore's graph compiler re-imports the module of a GRAPH_MODE Cell
        # or @jit function by name (a script's Cells failed with "No module named '_ms_kvcache_bench_...'")
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return mod


def _checkout_scripts():
    """``scripts/`` of a source checkout holding this ms_kvcache (editable install / PYTHONPATH)."""
    import ms_kvcache

    d = Path(ms_kvcache.__file__).resolve().parent.parent / "scripts"
    return d if d.is_dir() and (d.parent / "pyproject.toml").is_file() else None


def discover(extra_dirs=(), include_checkout=True):
    """Benchmark modules, sorted by name: ``ms_kvcache.bench.<name>`` (not starting with "_"), then
    ``bench_<name>.py`` in the checkout's scripts/ and in ``extra_dirs`` unless a module of that name
    was already found (scripts/bench_<name>.py wrappers of a package module are not run twice)."""
    import ms_kvcache.bench as pkg

    found = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            found[info.name] = BenchModule(info.name, "package", module_name=f"ms_kvcache.bench.{info.name}")
    dirs = []
    if include_checkout:
        d = _checkout_scripts()
        if d:
            dirs.append(d)
    dirs += [Path(x) for x in extra_dirs]
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"benchmark folder {d} does not exist")
        for f in sorted(d.glob("bench_*.py")):
            name = f.stem[len("bench_"):]
            if name not in found:
                found[name] = BenchModule(name, str(f), path=f)
    return [found[k] for k in sorted(found)]


def run_modules(mods, quick=False, progress=True):
    """Run each module's ``run(quick=...)``; returns (rows, failures [(name, message)]).

    Every row gets ``module`` = the module name. A module without ``run`` or whose ``run`` raises is a
    failure (one line each); the others still run.
    """
    rows, failures = [], []
    bar = None
    if progress:
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                           TimeElapsedColumn(), transient=False, redirect_stdout=False)
        except ImportError:
            bar = None
    task = None
    if bar:
        bar.start()
        task = bar.add_task("benchmarks", total=len(mods))
    try:
        for m in mods:
            if bar:
                bar.update(task, description=f"bench {m.name}")
            try:
                mod = m.load()
                fn = getattr(mod, "run", None)
                if fn is None:
                    raise AttributeError("no run(quick=False) function (see docs/design.md, 'Benchmarks')")
                out = fn(quick=quick)
                for r in out or []:
                    if not isinstance(r, dict) or "op" not in r:
                        raise TypeError(f"run() returned a row without 'op': {r!r}"[:200])
                    rows.append({"module": m.name, **r})
            except Exception as exc:  # noqa: BLE001 - one module's failure must not stop the others
                msg = " ".join(str(exc).split()) or type(exc).__name__
                failures.append((m.name, f"{type(exc).__name__}: {msg}"[:300]))
            if bar:
                bar.advance(task)
    finally:
        if bar:
            bar.stop()
    return rows, failures


def _flat(row):
    out = {k: v for k, v in row.items() if k != "speedup"}
    for k, v in (row.get("speedup") or {}).items():
        out[f"speedup_{k}"] = v
    return out


def _columns(flat_rows):
    cols = [c for c in _ORDER if any(c in r for r in flat_rows)]
    extra = []
    for r in flat_rows:
        for k in r:
            if k not in cols and k not in extra:
                extra.append(k)
    sp = [k for k in extra if k.startswith("speedup_")]
    rest = [k for k in extra if not k.startswith("speedup_") and k != "note"]
    tail = ["note"] if any("note" in r for r in flat_rows) else []
    return cols + sp + rest + tail


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v == 0:
            return "0"
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 1:
            return f"{v:.3g}" if a < 100 else f"{v:.0f}"
        return f"{v:.3g}"
    return str(v)


#: The one ratio convention of the table (every ratio column and note): above 1 the op is faster.
RATIO_NOTE = ("ratios: x memcpy = memcpy time / op time, speed-up = baseline time / op time "
              "(above 1 the op is faster)")


def format_table(rows):
    """(headers, cells) of the summary table: op, case, tokens, GB/s, memcpy GB/s, ratio, speed-ups."""
    headers = ["op", "case", "tokens", "GB/s", "memcpy GB/s", "x memcpy", "speed-up over baselines", "note"]
    cells = []
    for r in rows:
        sp = ", ".join(f"{k} {v:.2f}x" for k, v in (r.get("speedup") or {}).items() if v is not None)
        cells.append([str(r.get("op", "")), str(r.get("case", "")), _fmt(r.get("tokens")), _fmt(r.get("gbps")),
                      _fmt(r.get("memcpy_gbps")), _fmt(r.get("ratio_memcpy")), sp, str(r.get("note", ""))])
    keep = [i for i, h in enumerate(headers) if i < 3 or any(c[i] for c in cells)]
    return [headers[i] for i in keep], [[c[i] for i in keep] for c in cells]


def print_table(rows, file=None):
    headers, cells = format_table(rows)
    try:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="ms-kvcache bench (CPU figures unless the backend says otherwise)", caption=RATIO_NOTE)
        for h in headers:
            t.add_column(h, justify="right" if h not in ("op", "case", "note", "speed-up over baselines") else "left")
        for c in cells:
            t.add_row(*c)
        Console(file=file or sys.stdout, width=160).print(t)
    except ImportError:
        w = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
        out = file or sys.stdout
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(headers)), file=out)
        for c in cells:
            print("  ".join(x.ljust(w[i]) for i, x in enumerate(c)), file=out)
        print(RATIO_NOTE, file=out)


def write_outputs(rows, out_dir):
    """Write ``bench.csv``, ``bench.md`` and (when rows have tokens and gbps) ``bench.png`` to
    ``out_dir``; returns {"csv": path, "md": path, "png": path or None} (plus "png_skipped": reason
    when matplotlib is missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    flat = [_flat(r) for r in rows]
    cols = _columns(flat)
    paths = {"csv": out / "bench.csv", "md": out / "bench.md", "png": None}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in flat:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    headers, cells = format_table(rows)
    with open(paths["md"], "w") as f:
        f.write("# ms-kvcache bench\n\nCPU figures measured on the machine that ran the command, unless the "
                "backend column says otherwise. Full data: bench.csv. " + RATIO_NOTE[0].upper() + RATIO_NOTE[1:]
                + ".\n\n")
        f.write("| " + " | ".join(headers) + " |\n|" + "|".join("---" for _ in headers) + "|\n")
        for c in cells:
            f.write("| " + " | ".join(x.replace("|", "\\|") for x in c) + " |\n")
    plot = [r for r in rows if isinstance(r.get("tokens"), (int, float)) and isinstance(r.get("gbps"), (int, float))]
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            paths["png_skipped"] = "matplotlib not installed (pip install 'ms_kvcache[bench]')"
        else:
            paths["png"] = out / "bench.png"
            _plot(plot, paths["png"])
    return paths


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({r["op"] for r in rows})
    ncol = min(3, len(ops))
    nrow = -(-len(ops) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.5 * ncol, 5 * nrow), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        sub = [r for r in rows if r["op"] == op]
        for case in sorted({str(r.get("case", "")) for r in sub}):
            pts = sorted((r["tokens"], r["gbps"], r.get("memcpy_gbps")) for r in sub if str(r.get("case", "")) == case)
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=case or op)
            mem = [(p[0], p[2]) for p in pts if p[2]]
            if mem:
                ax.plot([m[0] for m in mem], [m[1] for m in mem], linestyle="--", marker="x", color=line.get_color(),
                        alpha=0.5, label=f"memcpy ({case})" if case else "memcpy")
        ax.set_xscale("log", base=2)
        ax.set_title(op)
        ax.set_xlabel("tokens per call")
        ax.set_ylabel("GB/s")
        ax.grid(True, alpha=0.3)
        # below the axes, never over the data
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    fig.suptitle("ms-kvcache bench: throughput vs tokens (dashed: memcpy of the same bytes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main_for(module, argv=None):
    """Body of a ``scripts/bench_<family>.py`` wrapper: ``[--quick] [--out DIR]``, prints the table."""
    p = argparse.ArgumentParser(description=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
    p.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    p.add_argument("--out", help="also write bench.csv / bench.md / bench.png to this folder")
    a = p.parse_args(argv)
    rows = module.run(quick=a.quick)
    print_table(rows)
    if a.out:
        print(write_outputs(rows, a.out))
    return 0
