"""Discovery, execution and output of the benchmark modules (``ms-kvcache bench``)."""
import argparse
import ast
import csv
from dataclasses import dataclass
import importlib
import importlib.util
import math
from pathlib import Path
import pkgutil
import re
import sys
import textwrap
from typing import Optional

__all__ = ["ROW_KEYS", "BenchModule", "describe", "discover", "run_modules", "write_outputs", "write_report",
           "format_table", "format_tables", "print_table", "main_for", "normalise_row", "plot_panels",
           "wrapped_modules"]

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
    "memcpy_baseline": "what the row's memcpy_gbps measured (names the dashed line of its plot panel; default: "
                       "MEMCPY_BASELINES of its family)",
    "series": "legend label of the plot line this row belongs to (rows of one series differ in tokens); "
              "a module that sets it on some rows plots only those",
    # AscendC emulation rows (backend 'sim'): counts of the emulated kernels, not timings
    "soc": "CANN SoC name the emulation ran for, e.g. 'Ascend910B1'",
    "gm_bytes": "GM bytes read + written by the kernels",
    "gm_min_bytes": "the least GM bytes the op must move",
    "gm_ratio": "gm_bytes / gm_min_bytes (1.0 = the minimum)",
    "cores_used": "vector cores the tiling used",
    "cores": "vector cores of the SoC",
    "ub_bytes": "peak UB bytes used per core",
    "copies_per_core": "DataCopy(Pad) calls per core (max)",
    "pred_gbps": "payload / the time the emulation's cost model predicts, GB/s (a model, not a measurement)",
    "ref_gbps": "a published figure the row is compared with, GB/s (the row's case names it)",
}
_ORDER = ["module", "op", "case", "tokens", "backend", "dtype", "soc", "bytes", "seconds", "gbps", "memcpy_gbps",
          "ratio_memcpy", "gm_bytes", "gm_min_bytes", "gm_ratio", "cores_used", "cores", "ub_bytes",
          "copies_per_core"]


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
    """``scripts/`` of a source checkout holding this ms_kvcache (editable install / PYTHONPATH); None for
    an installed wheel."""
    import ms_kvcache

    d = Path(ms_kvcache.__file__).resolve().parent.parent / "scripts"
    return d if d.is_dir() and (d.parent / "pyproject.toml").is_file() else None


_WRAPS = re.compile(r"^\s*(?:from\s+ms_kvcache\.bench\s+import\s+([\w\s,]+?)(?:\s+as\s+\w+)?\s*$"
                    r"|from\s+ms_kvcache\.bench\.(\w+)\s+import"
                    r"|import\s+ms_kvcache\.bench\.(\w+))", re.M)


def wrapped_modules(path):
    """Names of ``ms_kvcache.bench`` modules a script imports (read from its text, not run): a
    ``scripts/bench_<x>.py`` that imports a package module is its thin wrapper."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return set()
    text = re.sub(r"#.*", "", text)
    names = set()
    for m in _WRAPS.finditer(text):
        if m.group(1):
            names.update(x.strip() for x in m.group(1).split(","))
        names.update(g for g in m.groups()[1:] if g)
    return names


def discover(extra_dirs=(), include_checkout=True):
    """Benchmark modules, sorted by name: every ``ms_kvcache.bench.<name>`` (not starting with "_"; they
    ship in the wheel), then ``bench_<name>.py`` in the checkout's scripts/ and in ``extra_dirs``, except
    a script named like a package module or importing one (a thin wrapper: not run twice)."""
    found = {}
    for info in pkgutil.iter_modules([str(Path(__file__).resolve().parent)]):  # this package's modules
        if not info.name.startswith("_"):
            found[info.name] = BenchModule(info.name, "package", module_name=f"ms_kvcache.bench.{info.name}")
    package = set(found)
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
            if name in found or wrapped_modules(f) & package:
                continue
            found[name] = BenchModule(name, str(f), path=f)
    return [found[k] for k in sorted(found)]


def run_modules(mods, quick=False, progress=True):
    """Run each module's ``run(quick=...)``; returns ``(rows, failures, skipped)``, the last two
    ``[(name, message)]``.

    Every row gets ``module`` = the module name. A module may define ``available() -> (ok, reason)``:
    when it says no (an optional extra missing, e.g. Mooncake for ``disagg``) the module is skipped with
    that reason instead of run. A module without ``run``, whose ``run`` raises or returns no rows, or a
    row without ``op``, is a failure (one line each); the others still run.
    """
    rows, failures, skipped = [], [], []
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
                check = getattr(mod, "available", None)
                ok, why = check() if callable(check) else (True, "")
                if not ok:
                    skipped.append((m.name, " ".join(str(why).split()) or "available() said no"))
                    continue
                fn = getattr(mod, "run", None)
                if fn is None:
                    raise AttributeError("no run(quick=False) function (see docs/design.md, 'Benchmarks')")
                out = list(fn(quick=quick) or [])
                if not out:
                    raise RuntimeError("run() returned no rows (a module that cannot run here says why in "
                                       "available())")
                for r in out:
                    if not isinstance(r, dict) or "op" not in r:
                        raise TypeError(f"run() returned a row without 'op': {r!r}"[:200])
                rows += [{"module": m.name, **normalise_row(r)} for r in out]
            except Exception as exc:  # noqa: BLE001 - one module's failure must not stop the others
                msg = " ".join(str(exc).split()) or type(exc).__name__
                failures.append((m.name, f"{type(exc).__name__}: {msg}"[:300]))
            finally:
                if bar:
                    bar.advance(task)
    finally:
        if bar:
            bar.stop()
    return rows, failures, skipped


def describe(module):
    """One line saying what a benchmark module measures: the first sentence of its docstring, read from
    its source without importing it (``ms-kvcache bench --list`` stays free of MindSpore)."""
    path = module.path
    if path is None:
        spec = importlib.util.find_spec(module.module_name)
        path = spec.origin if spec else None
    try:
        doc = ast.get_docstring(ast.parse(Path(path).read_text(errors="replace"))) or ""
    except (OSError, SyntaxError, TypeError, ValueError):
        doc = ""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")
    m = re.match(r"(.+?[.!?])(?:\s|$)", text)
    return (m.group(1) if m else text) or "(no description: the module has no docstring)"


def normalise_row(row):
    """A copy of ``row`` with the standard keys filled from the older key names of emulation rows
    (``shape`` -> ``case``, ``work`` -> ``tokens``, ``gm_read_bytes + gm_write_bytes`` -> ``gm_bytes``,
    ``ub_bytes_per_core`` -> ``ub_bytes``, ``datacopy_per_core_max`` -> ``copies_per_core``; backend "sim"
    for a row with GM counts). Rows that already have a key keep their value."""
    r = dict(row)
    emu = "gm_bytes" in r or "gm_read_bytes" in r
    if emu:
        r.setdefault("backend", "sim")
        if "gm_bytes" not in r and "gm_write_bytes" in r:
            r["gm_bytes"] = int(r["gm_read_bytes"]) + int(r["gm_write_bytes"])
        if "gm_ratio" not in r and r.get("gm_min_bytes"):
            r["gm_ratio"] = r["gm_bytes"] / r["gm_min_bytes"]
        for new, old in (("ub_bytes", "ub_bytes_per_core"), ("copies_per_core", "datacopy_per_core_max")):
            if new not in r and old in r:
                r[new] = r[old]
    if "case" not in r and "shape" in r:
        r["case"] = str(r["shape"])
    if "tokens" not in r and "work" in r:
        r["tokens"] = r["work"]
    return r


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
    if isinstance(v, bool):
        return str(v)
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


def _fmt_time(s):
    if not isinstance(s, (int, float)) or s <= 0:
        return ""
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_mb(b):
    return "" if not isinstance(b, (int, float)) else f"{b / 1e6:.2f}"


#: The one ratio convention of the table (every ratio column and note): above 1 the op is faster.
RATIO_NOTE = ("ratios: x memcpy = memcpy time / op time, speed-up = baseline time / op time "
              "(above 1 the op is faster)")
EMULATION_NOTE = ("emulation counts: bytes and calls of the AscendC kernels run through the in-repo emulation "
                  "(sim backend), not hardware timings; GM / min = GM bytes / the least the op must move; "
                  "pred GB/s: the emulation's cost model (docs/emulation.md), a prediction, not a measurement; "
                  "ref GB/s: the published figure the case names (HFK: HeteroFusedKernels' table, measured on "
                  "Atlas A3, shown on the A2 rows too)")


def is_emulation_row(row):
    """A row of AscendC emulation counts (GM bytes, cores, UB) rather than a timing."""
    return row.get("backend") == "sim" and ("gm_bytes" in row or "gm_read_bytes" in row)


def _timing_cells(r):
    sp = ", ".join(f"{k} {v:.2f}x" for k, v in (r.get("speedup") or {}).items() if v is not None)
    return [str(r.get("op", "")), str(r.get("case", "")), _fmt(r.get("tokens")), str(r.get("backend", "")),
            _fmt_time(r.get("seconds")), _fmt(r.get("gbps")), _fmt(r.get("memcpy_gbps")), _fmt(r.get("ratio_memcpy")),
            sp, str(r.get("note", ""))]


def _emulation_cells(r):
    used, cores = r.get("cores_used"), r.get("cores")
    cores_s = f"{used}/{cores}" if used is not None and cores is not None else _fmt(used)
    ub = r.get("ub_bytes")
    return [str(r.get("op", "")), str(r.get("case", "")), _fmt(r.get("tokens")), str(r.get("soc", "")),
            _fmt_mb(r.get("gm_bytes")), _fmt_mb(r.get("gm_min_bytes")),
            "" if r.get("gm_ratio") is None else f"{r['gm_ratio']:.3f}", cores_s,
            "" if ub is None else f"{ub / 1024:.1f}", _fmt(r.get("copies_per_core")), _fmt(r.get("pred_gbps")),
            _fmt(r.get("ref_gbps")), str(r.get("note", ""))]


_TIMING_HEADERS = ["op", "case", "tokens", "backend", "time", "GB/s", "memcpy GB/s", "x memcpy",
                   "speed-up over baselines", "note"]
_EMULATION_HEADERS = ["op", "case", "tokens", "soc", "GM MB", "min MB", "GM / min", "cores", "UB KiB",
                      "copies/core", "pred GB/s", "ref GB/s", "note"]


def format_tables(rows):
    """The summary tables: ``[(title, headers, cells, note)]``, one for timings (cpu backend) and one for
    AscendC emulation counts, each with only the columns some of its rows fill. Every row shows its op,
    its case and at least one figure or note."""
    rows = [normalise_row(r) for r in rows]
    out = []
    groups = (("CPU timings (the machine that ran the command; not NPU figures)", _TIMING_HEADERS, _timing_cells,
               [r for r in rows if not is_emulation_row(r)], RATIO_NOTE),
              ("AscendC kernels through the emulation (counts, not timings)", _EMULATION_HEADERS, _emulation_cells,
               [r for r in rows if is_emulation_row(r)], EMULATION_NOTE))
    for title, headers, fn, sub, note in groups:
        if not sub:
            continue
        cells = [fn(r) for r in sub]
        keep = [i for i, h in enumerate(headers) if i < 2 or any(c[i] for c in cells)]
        out.append((title, [headers[i] for i in keep], [[c[i] for i in keep] for c in cells], note))
    return out


def format_table(rows):
    """(headers, cells) of the first summary table (see :func:`format_tables`)."""
    tables = format_tables(rows)
    if not tables:
        return list(_TIMING_HEADERS[:2]), []
    return tables[0][1], tables[0][2]


def print_table(rows, file=None):
    """Print the summary tables (rich tables when rich is installed, plain text otherwise)."""
    out = file or sys.stdout
    for title, headers, cells, note in format_tables(rows):
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            w = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
            print(title, file=out)
            print("  ".join(h.ljust(w[i]) for i, h in enumerate(headers)), file=out)
            for c in cells:
                print("  ".join(x.ljust(w[i]) for i, x in enumerate(c)), file=out)
            print(f"({note})\n", file=out)
            continue
        left = ("op", "case", "note", "speed-up over baselines", "backend", "soc")
        t = Table(title=title, caption=note)
        for h in headers:
            t.add_column(h, justify="left" if h in left else "right")
        for c in cells:
            t.add_row(*c)
        Console(file=out, width=180).print(t)


def machine_description(load=True):
    """One line naming the machine: CPU model, logical cores, OS / arch and (``load``) the 1-min load
    average."""
    import os
    import platform

    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    model = " ".join(model.replace("(R)", "").replace("(TM)", "").replace("CPU ", "").split())
    try:
        load = f", load {os.getloadavg()[0]:.1f}" if load else ""
    except OSError:
        load = ""
    return f"{model or 'unknown CPU'}, {os.cpu_count()} logical cores, {platform.system()} {platform.machine()}{load}"


def write_outputs(rows, out_dir):
    """Write ``bench.csv`` (every key of every row), ``bench.md`` (the summary tables) and, when rows have
    tokens and GB/s, ``bench.png`` to ``out_dir``; returns {"csv": path, "md": path, "png": path or None}
    (plus "png_skipped": the reason when there is no plot)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [normalise_row(r) for r in rows]
    flat = [_flat(r) for r in rows]
    cols = _columns(flat)
    paths = {"csv": out / "bench.csv", "md": out / "bench.md", "png": None}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in flat:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    with open(paths["md"], "w") as f:
        f.write(f"# ms-kvcache bench\n\nMachine: {machine_description()}. Full data: bench.csv.\n")
        for title, headers, cells, note in format_tables(rows):
            f.write(f"\n## {title}\n\n{note[0].upper() + note[1:]}.\n\n")
            f.write("| " + " | ".join(headers) + " |\n|" + "|".join("---" for _ in headers) + "|\n")
            for c in cells:
                f.write("| " + " | ".join(x.replace("|", "\\|") for x in c) + " |\n")
    panels = plot_panels(rows)
    if not panels:
        paths["png_skipped"] = "no series with GB/s at two or more token counts"
    else:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            paths["png_skipped"] = "matplotlib not installed (pip install matplotlib)"
        else:
            paths["png"] = out / "bench.png"
            _plot(panels, paths["png"])
    return paths


#: Markers around one family's section of a ``--report`` file (the text between is rewritten by each run).
_SECTION_BEGIN, _SECTION_END = "<!-- bench-report: {} -->", "<!-- /bench-report: {} -->"
_SECTION_RE = re.compile(r"<!-- bench-report: (\S+) -->\n.*?<!-- /bench-report: \1 -->\n?", re.S)
REPORT_INTRO = """# Benchmarks

CPU figures of the machine named in each section, measured by `ms-kvcache bench`: not NPU figures (no
Ascend hardware was used), and the AscendC emulation's tables are counts (bytes, cores, calls), not
timings. Each section names the date, the command and the machine that made it, and the code it measured.

Regenerate every section with `ms-kvcache bench --report docs/benchmarks.md` (a few minutes; `--ops FAMILY
...` rewrites only those sections, `ms-kvcache bench --list` names the families). Every ratio is reference
time / op time: above 1 the op is faster. The CSV of the same run (`--out DIR`, default `bench_out/`) has
every field of every row.
"""


def code_description():
    """``"ms_kvcache 0.1.0 (commit abc1234), MindSpore 2.10.0"``: the code a figure measured (the commit of
    the checkout this ms_kvcache runs from, ``+ local changes`` when tracked files other than docs and tests
    differ from it)."""
    import os
    import subprocess

    import ms_kvcache

    text = f"ms_kvcache {getattr(ms_kvcache, '__version__', '?')}"
    root = Path(ms_kvcache.__file__).resolve().parent.parent
    if (root / ".git").exists():
        try:
            env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True, timeout=10, env=env).stdout.strip()
            # changes to what runs (not to docs or tests) make the figures those of other code than HEAD's
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                    ".", ":(exclude)docs", ":(exclude)tests", ":(exclude)*.md", ":(exclude).ci"],
                                   capture_output=True, text=True, timeout=10, env=env).stdout.strip()
            if head:
                text += f" (commit {head}{' + local changes' if dirty else ''})"
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from importlib.metadata import version

        text += f", MindSpore {version('mindspore')}"
    except Exception:  # noqa: BLE001 - a report without the MindSpore version is still a report
        pass
    return text


def _short_note(note, limit=110):
    """The first clause of a row's note (up to a top-level "; "), at most ``limit`` characters."""
    depth, cut = 0, len(note)
    for i, ch in enumerate(note):
        depth += ch in "([" 
        depth -= ch in ")]"
        if ch == ";" and depth == 0:
            cut = i
            break
    text = note[:cut].strip()
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def report_section(family, rows, *, description, command, date, machine, code):
    """The Markdown of one family's ``--report`` section (markers included): heading, what it measures,
    date / command / machine / code, then its summary tables (notes cut to their first clause)."""
    rows = [normalise_row(r) for r in rows]
    out = [_SECTION_BEGIN.format(family), f"## {family}", "", description, "",
           f"Measured on {date} with `{command}` on {machine}; {code}."]
    if any(isinstance(r.get("memcpy_gbps"), (int, float)) for r in rows):
        base = next((str(r["memcpy_baseline"]) for r in rows if r.get("memcpy_baseline")),
                    MEMCPY_BASELINES.get(family, _DEFAULT_BASELINE))
        out[-1] += f" memcpy column: {base}."
    for title, headers, cells, note in format_tables(rows):
        if "note" in headers:
            i = headers.index("note")
            cells = [c[:i] + [_short_note(c[i])] + c[i + 1:] for c in cells]
        out += ["", f"### {title}", "", f"{note[0].upper() + note[1:]}.", "",
                "| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(x.replace("|", "\\|") for x in c) + " |" for c in cells]
    out.append(_SECTION_END.format(family))
    return "\n".join(out) + "\n"


def write_report(path, rows, families, command, date=None, load_before=None):
    """Write (or update) the Markdown report ``path``: one section per family in ``families``
    ``[(name, description)]`` with rows, each with its date, command, machine (with the 1-min load average
    at the start, ``load_before``, and now) and code. Sections of other families already in the file, and
    any text outside the sections, are kept; a new file starts with :data:`REPORT_INTRO`. Returns the
    families written."""
    import os
    import time

    path = Path(path)
    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    machine, code = machine_description(load=False), code_description()
    try:
        now = os.getloadavg()[0]
        machine += (f", load average {load_before:.1f} at the start, {now:.1f} at the end"
                    if load_before is not None else f", load average {now:.1f} at the end")
    except OSError:
        pass
    text = path.read_text() if path.is_file() else REPORT_INTRO
    written = []
    for name, description in families:
        sub = [r for r in rows if r.get("module") == name]
        if not sub:
            continue
        section = report_section(name, sub, description=description, command=command, date=date,
                                 machine=machine, code=code)
        found = [m for m in _SECTION_RE.finditer(text) if m.group(1) == name]
        if found:
            m = found[0]
            text = text[:m.start()] + section + text[m.end():]
        else:
            text = text.rstrip("\n") + "\n\n" + section
        written.append(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return written


#: Most lines per plot panel (the legend stays readable); the others stay in the table and the CSV.
MAX_SERIES = 6

#: What the dashed "memcpy" line of each family's panel is (the ``memcpy_gbps`` its rows carry); a row's
#: ``memcpy_baseline`` key overrides it (a ``--from`` script's family has no entry here).
MEMCPY_BASELINES = {
    "copy_ops": "numpy memcpy of the op's bytes (1 thread) into a cold buffer as large as its caches",
    "disagg": "numpy memcpy of the same bytes in one process (1 thread); raw Mooncake is in the table",
    "rope": "numpy memcpy of the bytes the op reads and writes (the faster of 1 and 2 threads)",
    "transfer": "memcpy of the same bytes between two host buffers (the faster of 1 thread and the op's threads)",
}
_DEFAULT_BASELINE = "memcpy of the same bytes, timed in the same run"


def _panel_title(fam, ops):
    """``"<family>: op"``, ``"<family>: op_a, op_b"`` or ``"<family>: 3 ops: a, b, c"`` (the ops drawn)."""
    names = ", ".join(ops)
    return f"{fam}: {names}" if len(ops) <= 2 else f"{fam}: {len(ops)} ops: {names}"


def plot_panels(rows):
    """What bench.png draws: ``[(title, [(label, [(tokens, gbps, memcpy_gbps, bytes)])], dropped, baseline)]``,
    one panel per benchmark module (op family) with timing rows. A series is a legend label: the row's
    ``series`` (a module that sets it on some rows plots only those rows), else ``op: case``; only series
    with GB/s at two or more token counts are drawn (lines, not dots), at most :data:`MAX_SERIES` per
    panel (the ones with the most points); ``dropped`` counts the series left out. ``title`` is the family
    and the ops of the drawn lines; ``baseline`` says what the panel's memcpy line is
    (:data:`MEMCPY_BASELINES`)."""
    timing = [r for r in rows if not is_emulation_row(r) and isinstance(r.get("tokens"), (int, float))
              and isinstance(r.get("gbps"), (int, float)) and r["tokens"] > 0 and r["gbps"] > 0]
    families = []
    for fam in sorted({str(r.get("module", r.get("op", ""))) for r in timing}):
        sub = [r for r in timing if str(r.get("module", r.get("op", ""))) == fam]
        if any(r.get("series") for r in sub):
            sub = [r for r in sub if r.get("series")]
            label = (lambda r: str(r["series"]))
        else:
            many_ops = len({r["op"] for r in sub}) > 1
            label = (lambda r, m=many_ops: (f"{r['op']}: {r.get('case', '')}" if m else str(r.get("case", "")))
                     or r["op"])
        series, series_ops = {}, {}
        for r in sub:
            pts = series.setdefault(label(r), {})
            pts[r["tokens"]] = (r["tokens"], r["gbps"], r.get("memcpy_gbps"), r.get("bytes"))
            series_ops.setdefault(label(r), [])
            if r["op"] not in series_ops[label(r)]:
                series_ops[label(r)].append(r["op"])
        lines = [(k, sorted(v.values())) for k, v in series.items() if len(v) >= 2]
        if not lines:
            continue
        order = {k: i for i, k in enumerate(series)}
        lines.sort(key=lambda kv: (-len(kv[1]), order[kv[0]]))
        kept = sorted(lines[:MAX_SERIES], key=lambda kv: order[kv[0]])
        ops = []
        for k, _ in kept:
            ops += [o for o in series_ops[k] if o not in ops]
        baseline = next((str(r["memcpy_baseline"]) for r in sub if r.get("memcpy_baseline")),
                        MEMCPY_BASELINES.get(fam, _DEFAULT_BASELINE))
        families.append((_panel_title(fam, ops), kept, len(lines) - len(kept), baseline))
    return families


_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
_MARKERS = ["o", "s", "^", "D", "v", "P"]


def _plot(panels, path):
    import matplotlib.pyplot as plt

    fig = plot_figure(panels)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_figure(panels):
    """The matplotlib figure of bench.png for :func:`plot_panels`' panels: one axes per panel, titled by
    its family and the ops drawn, "higher is better", and the memcpy baseline named in its legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    n = len(panels)
    ncol = min(3, n)
    nrow = -(-n // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 4.9 * nrow), squeeze=False)
    for ax, (title, lines, dropped, baseline) in zip(axes.flat, panels):
        handles = []
        for i, (label, pts) in enumerate(lines):
            c, m = _COLORS[i % len(_COLORS)], _MARKERS[i % len(_MARKERS)]
            h, = ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, marker=m, linewidth=1.8, markersize=6,
                         label=label)
            handles.append(h)
        # memcpy of the same bytes: one reference line per distinct byte count curve (usually one per panel)
        groups = {}
        for i, (label, pts) in enumerate(lines):
            mem = [(p[0], p[2], p[3]) for p in pts if p[2]]
            if mem:
                groups.setdefault(tuple((t, b) for t, _, b in mem), []).append((i, {t: g for t, g, _ in mem}))
        for k, (key, members) in enumerate(groups.items()):
            xs = [t for t, _ in key]
            ys = [sum(d[t] for _, d in members) / len(members) for t in xs]
            color = "0.35" if len(groups) == 1 else _COLORS[members[0][0] % len(_COLORS)]
            ax.plot(xs, ys, color=color, linestyle="--", linewidth=1.3, marker="x", markersize=5, alpha=0.8)
        if groups:
            what = "memcpy baseline" + ("" if len(groups) == 1 else " (colour of its line)")
            handles.append(Line2D([], [], color="0.35", linestyle="--", marker="x",
                                  label=f"{what}:\n" + "\n".join(textwrap.wrap(baseline, 48))))
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_title("\n".join(textwrap.wrap(title, 64)) + "\nGB/s against tokens per call: higher is better",
                     fontsize=10, fontweight="bold")
        ax.set_xlabel("tokens per call (log scale)")
        ax.set_ylabel("GB/s = bytes read + written / time (higher is better)")
        ax.grid(True, which="both", alpha=0.3)
        if dropped:
            ax.text(0.99, 0.01, f"{dropped} more series in bench.csv", transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=7, color="0.4")
        ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.85)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("ms-kvcache bench: CPU figures of the cpu backend (not NPU timings)\n" + machine_description(),
                 fontsize=11)
    fig.tight_layout()
    return fig


def main_for(module, argv=None):
    """Body of a ``scripts/bench_<family>.py`` wrapper: the module's own ``main(argv)`` when it has one
    (its options and printout), else ``[--quick] [--out DIR]`` printing the summary table."""
    if callable(getattr(module, "main", None)):
        return module.main(argv) or 0
    p = argparse.ArgumentParser(description=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
    p.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    p.add_argument("--out", help="also write bench.csv / bench.md / bench.png to this folder")
    a = p.parse_args(argv)
    rows = module.run(quick=a.quick)
    print_table(rows)
    if a.out:
        print(write_outputs(rows, a.out))
    return 0
