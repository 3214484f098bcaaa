"""``ms-kvcache demo --disagg``: prefill and decode in two processes on 127.0.0.1 with the KV handed over
by Mooncake, a shared prefix reloaded from Mooncake Store, all checked bit for bit against a
single-process run; every process gone afterwards. The fault-injection run proves those checks fail
when the received KV is wrong (on the tiny seeded model, so it does not depend on the model package).
The passing run uses 2 layers of SmolLM2 when the model package is installed, else the tiny model.

Skipped (with the reason) only when Mooncake cannot be imported.
"""
import json
import os

import pytest

from ms_kvcache import disagg

_OK, _WHY = disagg.mooncake_available()
if not _OK:
    pytest.skip(f"Mooncake cannot be imported: {_WHY}", allow_module_level=True)

from ms_kvcache.cli import main  # noqa: E402
from ms_kvcache.demo.disagg import DisaggOptions, expected_reuse, run_disagg_demo  # noqa: E402
from ms_kvcache.demo.model import find_model_file  # noqa: E402

HAVE_MODEL = find_model_file() is not None


def _children():
    """PIDs of live processes whose parent is this one (zombies and multiprocessing's resource tracker,
    which lives as long as this process once a spawn context was used, excluded)."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        if b"resource_tracker" in f.read():
                            continue
                except OSError:
                    continue
                out.append(int(d))
    return out


def test_disagg_demo_checks_pass_and_every_process_stops():
    before = set(_children())
    r = run_disagg_demo(DisaggOptions(layers=2, random_weights=not HAVE_MODEL, max_new_tokens=12, timeout=120))
    failed = [c["name"] for c in r["checks"] if not c["passed"]]
    assert failed == [] and r["ok"]
    assert len(r["checks"]) == 11
    p = r["prefix"]
    assert p["tokens_not_recomputed"] == 16 and p["chunks_loaded"] == 1 and p["tokens_computed"] > 0
    h, q, m = r["handoff"], r["requests"], r["model"]
    assert h["tokens"] == q["A"]["prompt_tokens"]
    assert h["bytes"] == h["tokens"] * 2 * 2 * m["kv_heads"] * m["head_size"] * 4  # 2 layers x K, V x float32
    assert not set(h["prefill_blocks"][:len(h["decode_blocks"])]) & set(h["decode_blocks"])
    assert 1 <= len(q["A"]["tokens"]) <= 12 and 1 <= len(q["B"]["tokens"]) <= 12
    assert r["reference"]["tokens"] == len(q["A"]["tokens"]) + len(q["B"]["tokens"])
    assert all(a.startswith("127.0.0.1:") for a in r["addresses"].values())
    assert set(r["exit_codes"]) == {"prefill", "decode", "single", "mooncake_master"}
    assert all(r["exit_codes"][k] == 0 for k in ("prefill", "decode", "single"))
    assert set(_children()) <= before, "a process of the demo is still running"
    assert r["logs"] is None  # logs are removed when everything passed


def test_expected_reuse_counts_whole_shared_chunks():
    a = list(range(100, 158)) + [1, 2, 3]
    b = list(range(100, 158)) + [4, 5]
    assert expected_reuse(a, b, 16) == 48  # 3 whole chunks of the 58 shared tokens
    assert expected_reuse(a, b, 8) == 56
    assert expected_reuse(a, b, 64) == 0
    assert expected_reuse(a, a[:33], 16) == 32  # at most len(B) - 1 tokens: the last one is computed


@pytest.mark.slow
def test_disagg_demo_fault_makes_checks_fail(capsys):
    """One bit of the KV the decode process received is flipped after the handoff's checksum check: exactly
    the decode's bit-exact comparison and the KV checksum comparison fail (exit 1); request B, whose KV
    came from the store, and the single-process reference still pass. The tiny seeded model, so the
    outcome does not depend on whether the model package is installed."""
    rc = main(["demo", "--disagg", "--random-weights", "--max-new-tokens", "8", "--json", "--inject-fault",
               "corrupt-kv", "--timeout", "120"])
    assert rc == 1
    r = json.loads(capsys.readouterr().out)
    failed = [c["name"] for c in r["checks"] if not c["passed"]]
    assert len(failed) == 2 and failed[0].startswith("request A: decode logits") and \
        failed[1].startswith("handoff: KV in the decode process's blocks"), failed
    assert r["logs"] and os.path.isdir(r["logs"])
    import shutil

    shutil.rmtree(r["logs"], ignore_errors=True)
