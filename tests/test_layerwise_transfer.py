"""ms_kvcache.LayerwiseTransfer on the cpu backend: bit-identical to the synchronous multi-layer ops (and to numpy)
for every format, layout, dtype and direction, quantized caches with their scale caches included; a per-layer
MindSpore compute loop reading reloaded layers and writing layers being saved; out-of-order waits, rounds, errors
naming the layer (nothing written by a failed layer), drop while in flight, and the MS_KVCACHE_CHECK_LAYERWISE debug
mode. The native worker under ThreadSanitizer: tests/test_layerwise_tsan.py; sim: test_layerwise_transfer_sim.py."""
import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

import ms_kvcache as mk
from conftest import assert_bits_equal, to_np
from _layerwise_ref import DSA, MERGED, MLA, SEPARATE, BlockCase, QuantCase, TokenCase, run_layerwise
from _multi_layer_ref import FORMAT_LAYOUTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _cpu(cpu_backend, monkeypatch):
    monkeypatch.delenv("MS_KVCACHE_CHECK_LAYERWISE", raising=False)
    yield


def _ids(x):
    return getattr(x, "name", x)


# ------------------------------------------------------------------------------------------ bit-identical
TOKEN_CASES = [(f, l, d) for f, l in FORMAT_LAYOUTS for d in (("float16", "bfloat16", "float32", "int8")
                                                               if (f, l) == (SEPARATE, "BSND") else ("bfloat16",))]


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("fmt,layout,dtype", TOKEN_CASES, ids=_ids)
def test_token_transfer_matches_the_synchronous_op(rng, fmt, layout, dtype, direction):
    case = TokenCase(rng, fmt, layout, dtype, direction, host_buffer=(dtype == "float16"))
    case.run_sync()
    lt = case.make()
    # d2h: layers saved in reverse order; waits out of order
    run_layerwise(lt, direction, case.geo.L, order=[2, 0, 1], wait_order=[1, 2, 0])
    case.check()
    lt.close()


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("fmt,layout", FORMAT_LAYOUTS, ids=_ids)
def test_block_transfer_matches_the_synchronous_op(rng, fmt, layout, direction):
    case = BlockCase(rng, fmt, layout, "float16", direction, staging=(fmt == SEPARATE))
    case.run_sync()
    lt = case.make()
    run_layerwise(lt, direction, case.geo.L, use_start=(fmt == MLA))
    case.check()


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_block_transfer_dtypes(rng, dtype):
    for direction in ("d2h", "h2d"):
        case = BlockCase(rng, SEPARATE, "BNSD", dtype, direction, L=4, bs=8)
        case.run_sync()
        run_layerwise(case.make(), direction, 4, wait_order=[3, 1, 0, 2])
        case.check()


QUANT = [("token", MERGED, "BSND"), ("token", SEPARATE, "BNSD"), ("token", MLA, "BSND"), ("token", DSA, "BSND"),
         ("block", SEPARATE, "BNSD"), ("block", SEPARATE, "BSND"), ("block", MLA, "BSND"), ("block", DSA, "BSND")]


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("kind,fmt,layout", QUANT, ids=_ids)
def test_quantized_caches_with_scales_match_the_synchronous_op(rng, kind, fmt, layout, direction):
    case = QuantCase(rng, kind, fmt, layout, direction)
    case.run_sync()
    run_layerwise(case.make(), direction, case.L)
    case.check()


@pytest.mark.parametrize("kind", ["token", "block"])
def test_float8_caches_with_scales(rng, kind):
    if not hasattr(ms, "float8_e4m3fn"):
        pytest.skip(f"MindSpore {ms.__version__} has no float8_e4m3fn")
    for direction in ("d2h", "h2d"):
        case = QuantCase(rng, kind, MLA, "BSND", direction, dtype="float8_e4m3fn")
        case.run_sync()
        run_layerwise(case.make(), direction, case.L)
        case.check()


def test_zero_tokens_is_a_transfer_of_nothing(rng):
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h", T=2)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 3, 0, 32), np.float16))
    lt = mk.LayerwiseTransfer(buf, case.args("lw")[1], Tensor(np.zeros(0, np.int64)), kv_format=SEPARATE,
                              direction="h2d")
    lt.start()
    lt.wait_layer(2)
    lt.wait()
    assert lt.done()
    for layer, planes in zip(case.geo.from_ms(case.args("lw")[1]), case.planes):
        for got, want in zip(layer, planes):
            assert_bits_equal(got, want, "untouched")


def test_rounds_reuse_the_object_and_move_the_new_data(rng):
    case = TokenCase(rng, SEPARATE, "BSND", "float32", "d2h", L=3)
    buf, caches, slots = case.args("lw")
    lt = case.make()
    for round_ in range(3):
        for layer in range(3):  # an in-place write of the rows the transfer saves (the tensors keep their memory)
            rows = Tensor(np.full((case.T, 2, 16), round_ * 10 + layer, np.float32))
            mk.reshape_and_cache(rows, rows, caches[layer][0], caches[layer][1], slots)
        for layer in range(3):
            lt.save_layer(layer)
        lt.wait()
        got = to_np(buf)
        for layer in range(3):
            k = got[0, layer][case.slots >= 0]
            assert (k == round_ * 10 + layer).all(), (round_, layer)
    with pytest.raises(RuntimeError, match="already issued in this round"):
        lt.save_layer(1)
        lt.save_layer(1)


def test_wait_ends_a_round_of_some_layers(rng):
    """wait() ends the round even when only some layers were saved (a model that saves a subset of its layers): the
    next step may save the same layers again, and start() then issues every layer (the old code kept the round open,
    so save_layer(0) raised 'already issued in this round; wait() ends the round' right after wait())."""
    case = TokenCase(rng, SEPARATE, "BSND", "float32", "d2h", L=3)
    buf, caches, slots = case.args("lw")
    lt = case.make()
    for step in range(3):
        for layer in (0, 1):
            rows = Tensor(np.full((case.T, 2, 16), step * 10 + layer, np.float32))
            mk.reshape_and_cache(rows, rows, caches[layer][0], caches[layer][1], slots)
            lt.save_layer(layer)
        lt.wait()
        got = to_np(buf)
        for layer in (0, 1):
            assert (got[:, layer][:, case.slots >= 0] == step * 10 + layer).all(), (step, layer)
        assert not got[:, 2].any(), "layer 2 never saved"
    lt.save_layer(1)
    lt.wait()
    lt.start()  # a new round: every layer
    lt.wait()
    assert (to_np(buf)[:, 2][:, case.slots >= 0] != 0).all()
    lt.close()


# ------------------------------------------------------------------------------------------ in a layer loop
def test_reload_inside_a_per_layer_compute_loop(rng):
    """The forward pass's layer loop: wait_layer(l), then MindSpore ops read layer l's reloaded caches."""
    L, nb, bs, H, D, T = 4, 8, 16, 2, 32, 24
    src = [rng.standard_normal((2, nb, bs, H, D)).astype(np.float32) for _ in range(L)]
    slots = np.arange(3 * bs, 3 * bs + T, dtype=np.int64)   # the sequence's blocks 3 and 4
    buf = mk.alloc_host_buffer(mk.transfer_buffer_shape(MERGED, L, T, H * D), ms.float32)
    mk.multi_layer_kv_transfer(buf, [Tensor(c) for c in src], Tensor(slots), kv_format=MERGED, direction="d2h")
    caches = [Parameter(Tensor(np.zeros((2, nb, bs, H, D), np.float32)), name=f"kv{l}") for l in range(L)]
    q = Tensor(rng.standard_normal((5, H * D)).astype(np.float32))
    lt = mk.LayerwiseTransfer(buf, caches, Tensor(slots), kv_format="merged", direction="h2d").start()
    outs = []
    for layer in range(L):
        lt.wait_layer(layer)
        k = caches[layer][0].reshape(nb * bs, H * D)[Tensor(slots)]            # [T, H*D] of the reloaded keys
        outs.append(ops.matmul(q, k.T) + caches[layer][1].reshape(nb * bs, H * D)[Tensor(slots)].sum())
    lt.wait()
    for layer in range(L):
        kv = src[layer].reshape(2, nb * bs, H * D)[:, slots]
        want = q.asnumpy() @ kv[0].T + kv[1].sum(dtype=np.float32)
        np.testing.assert_allclose(outs[layer].asnumpy(), want, rtol=2e-5, atol=2e-4)


def test_save_after_the_forward_writes_each_layer(rng):
    """Offload while the layer loop writes: each layer's new token rows (reshape_and_cache) are written, then
    save_layer(l) saves the sequence's rows, new ones included; the buffer equals the synchronous op's."""
    L, nb, bs, H, D, T = 5, 8, 16, 2, 32, 20
    kc = [Parameter(Tensor(rng.standard_normal((nb, bs, H, D)).astype(np.float16)), name=f"k{l}") for l in range(L)]
    vc = [Parameter(Tensor(rng.standard_normal((nb, bs, H, D)).astype(np.float16)), name=f"v{l}") for l in range(L)]
    slots = np.arange(2 * bs, 2 * bs + T, dtype=np.int64)
    new_slots = Tensor(slots[-4:])                                   # this step writes the last 4 tokens
    buf = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, T, H * D), ms.float16)
    lt = mk.LayerwiseTransfer(buf, list(zip(kc, vc)), Tensor(slots), kv_format=SEPARATE, direction="d2h")
    new = [(rng.standard_normal((4, H, D)).astype(np.float16), rng.standard_normal((4, H, D)).astype(np.float16))
           for _ in range(L)]
    for layer in range(L):
        x = ops.relu(Tensor(new[layer][0])) - ops.relu(-Tensor(new[layer][0]))  # computed, still in flight
        mk.reshape_and_cache(x, Tensor(new[layer][1]), kc[layer], vc[layer], new_slots)
        lt.save_layer(layer)
    lt.wait()
    ref = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, T, H * D), ms.float16)
    mk.multi_layer_kv_transfer(ref, list(zip(kc, vc)), Tensor(slots), kv_format=SEPARATE, direction="d2h")
    mk.synchronize()
    got, want = to_np(buf), to_np(ref)
    assert_bits_equal(got, want, "save vs sync")
    for layer in range(L):
        assert_bits_equal(got[0, layer, -4:].reshape(4, H, D), new[layer][0], f"new keys of layer {layer}")


# ------------------------------------------------------------------------------------------ errors
def test_argument_errors_are_the_synchronous_ops(rng):
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "h2d")
    buf, caches, _ = case.args("lw")
    with pytest.raises(ValueError, match=r"^LayerwiseTransfer: multi_layer_kv_transfer: argument 'slot_mapping'.*24"):
        mk.LayerwiseTransfer(buf, caches, Tensor(np.array([0, 1, 2, 3, 4, 5, 24], np.int64)), kv_format=SEPARATE,
                             direction="h2d")
    with pytest.raises(ValueError, match=r"argument 'kv_format'"):
        mk.LayerwiseTransfer(buf, caches, Tensor(case.slots), kv_format="nope", direction="h2d")
    with pytest.raises(TypeError, match=r"argument 'slot_mapping'"):
        mk.LayerwiseTransfer(buf, caches, case.slots, kv_format=SEPARATE, direction="h2d")
    bcase = BlockCase(rng, SEPARATE, "BNSD", "float16", "h2d")
    kv, host, _, _ = bcase.twins["lw"]
    with pytest.raises(ValueError, match=r"^LayerwiseTransfer: multi_layer_block_transfer: argument 'block_ids'"):
        mk.LayerwiseTransfer.blocks(kv, host, Tensor(np.array([0, 1, 2, 7], np.int64)), direction="h2d")
    lt = case.make()
    with pytest.raises(ValueError, match=r"save_layer: expected a transfer with direction='d2h'"):
        lt.save_layer(0)
    for bad in (-1, 3, 1.5, "0", True, 1.0, float("inf"), float("nan"), np.array([1]), 2 ** 70, np.float64(1)):
        with pytest.raises(ValueError, match=r"argument 'layer': expected an int in \[0, 3\)"):
            lt.wait_layer(bad)
    with pytest.raises(RuntimeError, match=r"layer 1 is not issued in this round: call start\(\) first"):
        lt.wait_layer(1)
    lt.start()
    with pytest.raises(RuntimeError, match="every layer is issued in this round"):
        lt.start()
    lt.wait()
    lt.close()
    with pytest.raises(RuntimeError, match="closed"):
        lt.start()


def test_slot_changed_after_construction_is_not_used(rng):
    """The slot values are copied at construction: changing the caller's tensor afterwards changes nothing."""
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h")
    case.run_sync()
    buf, caches, _ = case.args("lw")
    arr = case.slots.copy()
    lt = mk.LayerwiseTransfer(buf, caches, Tensor.from_numpy(arr), kv_format=SEPARATE, direction="d2h")
    arr[:] = 0  # the caller's tensor memory (Tensor.from_numpy shares it)
    run_layerwise(lt, "d2h", 3)
    case.check()


@pytest.mark.parametrize("which", ["cache", "buffer"])
def test_a_tensor_given_new_memory_after_construction_is_refused(rng, which):
    """A Parameter given new memory (set_data) after construction: the worker holds the old addresses, so the next
    issue is refused naming the argument, nothing moved (the old code moved the old, possibly released memory and
    left the new one untouched); a transfer built afterwards moves the new memory."""
    L, nb, bs, H, D, T = 3, 4, 8, 2, 16, 6
    caches = [(Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"nk{l}"),
               Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"nv{l}")) for l in range(L)]
    slots = Tensor(np.arange(8, 8 + T, dtype=np.int64))
    buf = Parameter(Tensor(np.zeros(1, np.float32)), name="nbuf")
    first = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, T, H * D), ms.float32)
    buf.set_data(first)  # (``first`` kept: the old code read it after set_data; unmapped, that was a crash)
    buf.asnumpy()[...] = 7
    lt = mk.LayerwiseTransfer(buf, caches, slots, kv_format=SEPARATE, direction="h2d")
    if which == "cache":
        caches[1][0].set_data(Tensor(np.zeros((nb, bs, H, D), np.float32)))
        name = r"kv_caches\[1\]\[0\]"
    else:
        fresh = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, T, H * D), ms.float32)
        fresh.asnumpy()[...] = 7
        buf.set_data(fresh)
        name = "buffer"
    with pytest.raises(RuntimeError, match=rf"start: argument '{name}' .*is not the memory it was at construction"):
        lt.start()
    assert not lt._issued  # noqa: SLF001 - nothing issued
    for layer in range(L):
        assert not to_np(caches[layer][0]).any() and not to_np(caches[layer][1]).any(), layer
    lt.close()
    with mk.LayerwiseTransfer(buf, caches, slots, kv_format=SEPARATE, direction="h2d") as again:
        again.start().wait()
    assert (to_np(caches[1][0]).reshape(nb * bs, H, D)[8:8 + T] == 7).all()


def test_a_layer_failing_in_the_kernel_writes_nothing_and_is_named(rng):
    """A bad index reaching the kernel (the private copy corrupted, as memory corruption would) fails the first
    layer in the kernel's strict check: the wait names layer 0, every later layer is not run, no cache changes."""
    case = TokenCase(rng, SEPARATE, "BNSD", "float32", "h2d", L=4)
    lt = case.make()
    lt._keep[2] = 10 ** 6  # noqa: SLF001 - the snapshot the worker reads
    lt.start()
    with pytest.raises(RuntimeError, match=r"layer 0: multi_layer_kv_transfer: argument 'slot_mapping'.*1000000"):
        lt.wait_layer(0)
    with pytest.raises(RuntimeError, match=r"layer 3: not run: layer 0 failed first"):
        lt.wait_layer(3)
    with pytest.raises(RuntimeError, match="layer 0 failed"):
        lt.start()
    case.check(layers=[])  # nothing written anywhere
    lt.close()  # the failure was reported: no second report


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_failure_in_a_middle_layer(rng, direction):
    """Layers before the failed one are complete, the failed one and the later ones untouched; out-of-order
    waits see each layer's own result; wait() names the failed layer."""
    case = TokenCase(rng, MLA, "BSND", "float16", direction, L=5)
    case.run_sync()
    lt = case.make()
    lt._engine._w.fail_layer_for_test(2, "injected copy failure")  # noqa: SLF001
    lt.start()
    lt.wait_layer(1)
    with pytest.raises(RuntimeError, match=r"layer 4: not run: layer 2 failed first"):
        lt.wait_layer(4)
    lt.wait_layer(0)
    with pytest.raises(RuntimeError, match=r"LayerwiseTransfer\(multi_layer_kv_transfer, .*\): layer 2: injected "
                                           r"copy failure \(a failed layer writes nothing outside the rows it targets"):
        lt.wait()
    case.check(layers=[0, 1])


def test_an_unreported_failure_is_raised_at_close_and_warned_at_drop(rng):
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "h2d")
    lt = case.make()
    lt._engine._w.fail_layer_for_test(1, "boom")  # noqa: SLF001
    lt.start()
    with pytest.raises(RuntimeError, match=r"layer 1: boom \(reported at close\)"):
        lt.close()
    lt2 = case.make()
    lt2._engine._w.fail_layer_for_test(0, "boom2")  # noqa: SLF001
    lt2.start()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del lt2
        gc.collect()
    assert any("layer 0 failed and no wait reported it: layer 0: boom2" in str(x.message) for x in w), w


# ------------------------------------------------------------------------------------------ lifetime
_DROP_CHILD = textwrap.dedent(r"""
    import gc, json, sys
    import numpy as np, mindspore as ms
    from mindspore import Tensor
    import ms_kvcache as mk
    mk.set_backend("cpu")
    L, nb, bs, H, D, T = 8, 64, 16, 8, 128, 512
    direction = sys.argv[1]
    rng = np.random.default_rng(3)
    slots = np.arange(T, dtype=np.int64)
    bad = 0
    for it in range(6):
        src = rng.standard_normal((L, 2, nb, bs, H, D)).astype(np.float16)
        caches = [(Tensor(src[l, 0].copy()), Tensor(src[l, 1].copy())) if direction == "d2h" else
                  (Tensor(np.zeros((nb, bs, H, D), np.float16)), Tensor(np.zeros((nb, bs, H, D), np.float16)))
                  for l in range(L)]
        buf = mk.alloc_host_buffer(mk.transfer_buffer_shape("separate", L, T, H * D), ms.float16, pinned=False)
        if direction == "h2d":
            buf.asnumpy()[:] = src[:, :, :T // bs].transpose(1, 0, 2, 3, 4, 5).reshape(2, L, T, H * D)
        keep = None if direction == "h2d" else buf      # h2d: the transfer holds the buffer's last reference
        lt = mk.LayerwiseTransfer(buf, caches, Tensor(slots), kv_format="separate", direction=direction)
        del buf
        if direction == "d2h":
            for l in range(L):
                lt.save_layer(l)
        else:
            lt.start()
        del lt                                          # in flight: the drop waits, then frees the buffer
        gc.collect()
        for l in range(L):                              # complete right after the drop, without a wait
            if direction == "h2d":
                got = caches[l][0].asnumpy().reshape(nb * bs, H, D)[:T]
                bad += int(not np.array_equal(got, src[l, 0].reshape(nb * bs, H, D)[:T]))
            else:
                got = keep.asnumpy()[1, l].reshape(T, H, D)
                bad += int(not np.array_equal(got, src[l, 1].reshape(nb * bs, H, D)[:T]))
    print(json.dumps({"bad": bad}))
""")


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_drop_while_in_flight_waits_for_the_layers(direction):
    """Dropping a transfer with layers in flight (the last reference to an h2d buffer with it) waits for them: the
    caches / buffer are complete right after the drop and no freed memory is read (a crash otherwise). Runs in a
    fresh process (a crash must not take pytest with it)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), GLOG_v="3")
    p = subprocess.run([sys.executable, "-c", _DROP_CHILD, direction], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"bad": 0}


def test_context_manager_waits_and_reports(rng):
    case = TokenCase(rng, DSA, "BSND", "float32", "h2d")
    with case.make() as lt:
        lt.start()
    case.run_sync()
    case.check()
    assert "closed" in repr(lt)


# ------------------------------------------------------------------------------------------ debug mode
def test_debug_mode_refuses_ms_kvcache_ops_on_pending_layers(rng, monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_CHECK_LAYERWISE", "1")
    L, nb, bs, H, D = 3, 4, 8, 2, 16
    src = [(Tensor(rng.standard_normal((nb, bs, H, D)).astype(np.float16)),
            Tensor(rng.standard_normal((nb, bs, H, D)).astype(np.float16))) for _ in range(L)]
    slots = Tensor(np.arange(8, 14, dtype=np.int64))
    buf = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, 6, H * D), ms.float16)
    mk.multi_layer_kv_transfer(buf, src, slots, kv_format=SEPARATE, direction="d2h")
    dst = [(Parameter(Tensor(np.zeros((nb, bs, H, D), np.float16)), name=f"dk{l}"),
            Parameter(Tensor(np.zeros((nb, bs, H, D), np.float16)), name=f"dv{l}")) for l in range(L)]
    lt = mk.LayerwiseTransfer(buf, dst, slots, kv_format=SEPARATE, direction="h2d").start()
    out = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, 1, 6, H * D), ms.float16)
    # reading layer 1's caches (an ms_kvcache op) before wait_layer(1): refused, nothing runs
    with pytest.raises(RuntimeError, match=r"multi_layer_kv_transfer: argument 'kv_caches\[0\]' reads memory that "
                                           r"kv_caches\[1\]\[0\] of layer 1 of LayerwiseTransfer.*is still writing: "
                                           r"call wait_layer\(1\)"):
        mk.multi_layer_kv_transfer(out, [dst[1]], slots, kv_format=SEPARATE, direction="d2h")
    lt.wait_layer(1)
    mk.multi_layer_kv_transfer(out, [dst[1]], slots, kv_format=SEPARATE, direction="d2h")  # fine now
    # writing the host buffer a pending load still reads: refused too
    with pytest.raises(RuntimeError, match=r"argument 'buffer' writes memory that buffer of layer (0|2) .*is still "
                                           r"reading"):
        mk.multi_layer_kv_transfer(buf, src, slots, kv_format=SEPARATE, direction="d2h")
    lt.wait()
    mk.synchronize()
    np.testing.assert_array_equal(to_np(out), to_np(buf)[:, 1:2])
    # d2h: a cache row being saved is not overwritten before its save completed
    save = mk.LayerwiseTransfer(buf, dst, slots, kv_format=SEPARATE, direction="d2h")
    save.save_layer(2)
    key = Tensor(np.ones((1, H, D), np.float16))
    with pytest.raises(RuntimeError, match=r"reshape_and_cache: argument 'key_cache' writes memory that "
                                           r"kv_caches\[2\]\[0\] of layer 2 of .*d2h\) is still reading: call "
                                           r"wait_layer\(2\)"):
        mk.reshape_and_cache(key, key, dst[2][0], dst[2][1], Tensor(np.array([9], np.int64)))
    mk.reshape_and_cache(key, key, dst[0][0], dst[0][1], Tensor(np.array([9], np.int64)))  # another layer: fine
    save.wait_layer(2)
    mk.reshape_and_cache(key, key, dst[2][0], dst[2][1], Tensor(np.array([9], np.int64)))
    save.close()
    lt.close()


def test_debug_mode_off_checks_nothing_and_bad_values_are_refused(rng, monkeypatch):
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "h2d")
    buf, caches, slots = case.args("lw")
    lt = case.make().start()
    out = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 1, case.T, 32), np.float16))
    lt.wait_layer(0)
    lt.wait()
    mk.multi_layer_kv_transfer(out, [caches[2]], slots, kv_format=SEPARATE, direction="d2h")  # no check when off
    for bad in ("yes", "2", "true"):
        monkeypatch.setenv("MS_KVCACHE_CHECK_LAYERWISE", bad)
        with pytest.raises(ValueError, match=rf"\$MS_KVCACHE_CHECK_LAYERWISE: expected 0 or 1, got '{bad}'"):
            case.make()


# ------------------------------------------------------------------------------------------ order against the forward pass
def _slow_ops(n=6, size=1024):
    a = Tensor(np.random.default_rng(0).random((size, size), dtype=np.float32))
    for _ in range(n):
        a = ops.matmul(a, a) * 1e-3
    return a


def test_save_layer_is_queued_behind_the_forward_without_blocking(rng):
    """With the PyNative fast path, save_layer(l) queues the layer behind the ops launched before it (MindSpore's
    pipeline hands it to the worker when it gets there): the host does not wait for those ops, and the save still
    sees their writes."""
    from ms_kvcache import _custom

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    L, nb, bs, H, D = 2, 4, 8, 2, 16
    kc = [Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"sk{l}") for l in range(L)]
    vc = [Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"sv{l}") for l in range(L)]
    slots = Tensor(np.arange(8, 12, dtype=np.int64))
    buf = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, 4, H * D), ms.float32)
    lt = mk.LayerwiseTransfer(buf, list(zip(kc, vc)), slots, kv_format=SEPARATE, direction="d2h")
    seen = []
    for layer in range(L):
        x = _slow_ops()                                              # the forward pass, still running
        rows = ops.ones((4, H, D), ms.float32) * (layer + 1) + x[:4, :H * D].reshape(4, H, D) * 0
        mk.reshape_and_cache(rows, rows, kc[layer], vc[layer], slots)  # queued behind the matmuls
        lt.save_layer(layer)
        seen.append(lt._engine.state(layer))  # noqa: SLF001 - 6: awaiting its turn in the pipeline
    lt.wait()
    got = to_np(buf)
    for layer in range(L):
        assert (got[:, layer] == layer + 1).all(), layer
    assert 6 in seen, seen  # at least one save_layer returned before the forward's ops ran


def test_without_the_fast_path_the_host_waits_for_the_forward(rng):
    from ms_kvcache import _custom

    _custom.set_fast_path(False)
    try:
        case = TokenCase(rng, SEPARATE, "BNSD", "float16", "d2h")
        case.run_sync()
        lt = case.make()
        assert lt._engine._signals is None  # noqa: SLF001
        run_layerwise(lt, "d2h", 3)
        case.check()
    finally:
        _custom.set_fast_path(True)


def test_a_signal_the_pipeline_dropped_fails_its_layer_instead_of_hanging(rng):
    """MindSpore drops the ops queued behind an op that failed; a layer whose signal was among them is reported (it
    would otherwise be waited for forever)."""
    from ms_kvcache import _custom

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h")
    lt = case.make()
    lt._engine._w.expect(1)  # noqa: SLF001 - issued, but its signal never reaches the pipeline
    lt._issued.add(1)  # noqa: SLF001
    with pytest.raises(RuntimeError, match=r"layer 1: not issued: MindSpore's pipeline dropped the ops queued"):
        lt.wait_layer(1)


def test_done_sees_a_signal_the_pipeline_dropped(rng):
    """done() polled in a loop ends when the pipeline dropped a layer's signal (the old done() returned False for
    ever: only a wait looked for dropped signals); the failure is then raised by the next wait."""
    from ms_kvcache import _custom

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h")
    lt = case.make()
    lt._engine._w.expect(1)  # noqa: SLF001 - issued, but its signal never reaches the pipeline
    lt._issued.add(1)  # noqa: SLF001
    mk.synchronize()
    assert lt.done()
    with pytest.raises(RuntimeError, match=r"layer 1: not issued: MindSpore's pipeline dropped the ops queued"):
        lt.wait()


def test_a_pipeline_busy_longer_than_a_poll_does_not_fail_a_layer(rng):
    """A save queued behind a forward pass that keeps MindSpore's pipeline busy longer than one idle poll (wait_idle
    timing out: 60 s by default, simulated here) is waited for, not failed: the old code took the timeout for a
    dropped signal and failed the layer ('MindSpore's pipeline dropped the ops queued ...'), and the signal arriving
    later then made MindSpore raise at the next sync."""
    from ms_kvcache import _custom

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h")
    case.run_sync()
    lt = case.make()
    real = lt._engine._fast  # noqa: SLF001

    class Busy:  # the module, with a first wait_idle that times out
        calls = 0

        def __getattr__(self, name):
            return getattr(real, name)

        def wait_idle(self, *a, **kw):
            Busy.calls += 1
            return False if Busy.calls == 1 else real.wait_idle(*a, **kw)

    lt._engine._fast = Busy()  # noqa: SLF001
    _slow_ops(n=12)
    for layer in range(3):
        lt.save_layer(layer)
    states = [lt._engine.state(layer) for layer in range(3)]  # noqa: SLF001
    for layer in (2, 0, 1):
        lt.wait_layer(layer)
    lt.wait()
    case.check()
    assert 6 in states, states  # a layer was awaiting its signal when the poll timed out
    mk.synchronize()  # no late signal failing in the pipeline


def test_inside_a_compiled_graph_is_refused(rng):
    """Called inside an @ms.jit function or a GRAPH_MODE construct, a LayerwiseTransfer would run once at compile
    time and never again (the old code: built and run inside @ms.jit, the first call moved the data at compile time
    and later calls moved nothing, silently; save_layer inside @ms.jit failed with MindSpore's "'builtin_function_or_
    method' object has no attribute '__code__'"). Refused with a message naming what works; nothing moved."""
    from conftest import ms_mode

    case = TokenCase(rng, SEPARATE, "BSND", "float32", "d2h", L=2)
    buf, caches, slots = case.args("lw")
    lt = case.make()

    @ms.jit
    def build_and_run(x):
        t = mk.LayerwiseTransfer(buf, caches, slots, kv_format=SEPARATE, direction="d2h")
        t.start()
        t.wait()
        return x + 1

    @ms.jit
    def save(x):
        lt.save_layer(0)
        return x + 1

    class Save(nn.Cell):
        def construct(self, x):
            lt.start()
            return x + 1

    for fn, where in ((build_and_run, "LayerwiseTransfer"), (save, r"LayerwiseTransfer\(multi_layer_kv_transfer, "
                                                                     r"d2h\)\.save_layer")):
        with pytest.raises(RuntimeError, match=rf"{where}: called inside a graph being compiled .* multi_layer_kv_"
                                               rf"transfer / multi_layer_block_transfer inside the graph"):
            fn(Tensor(1.0, ms.float32))
    with ms_mode("graph"):
        with pytest.raises(RuntimeError, match=r"\.start: called inside a graph being compiled"):
            Save()(Tensor(1.0, ms.float32))
    assert not to_np(buf).any(), "nothing moved"
    run_layerwise(lt, "d2h", 2)  # the object still works from Python
    case.run_sync()
    case.check()


class _LayerScores(nn.Cell):
    """One layer's compute as a GRAPH_MODE Cell: scores against the layer's reloaded keys."""

    def __init__(self, key_cache):
        super().__init__()
        self.k = key_cache

    def construct(self, q, slots):
        return ops.matmul(q, ops.gather(self.k.reshape(-1, q.shape[1]), slots, 0).T)


class _LayerWrite(nn.Cell):
    def __init__(self, k, v):
        super().__init__()
        self.k, self.v = k, v

    def construct(self, x, slots):
        mk.reshape_and_cache(x, x, self.k, self.v, slots)
        return slots


def test_between_graph_mode_cells_of_each_layer(rng):
    """In GRAPH_MODE the transfer is driven between the compiled Cells of each layer (a single graph of the whole
    forward pass cannot hold the waits): saves see each layer's graph writes, loads are complete for the next Cell."""
    from conftest import ms_mode

    L, nb, bs, H, D, T = 3, 8, 16, 2, 32, 20
    src = [rng.standard_normal((nb, bs, H, D)).astype(np.float32) for _ in range(2 * L)]
    caches = [(Parameter(Tensor(src[2 * l]), name=f"gk{l}"), Parameter(Tensor(src[2 * l + 1]), name=f"gv{l}"))
              for l in range(L)]
    slots = Tensor(np.arange(16, 16 + T, dtype=np.int64))
    buf = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, T, H * D), ms.float32)
    zero = [(Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"zk{l}"),
             Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"zv{l}")) for l in range(L)]
    new = Tensor(rng.standard_normal((4, H, D)).astype(np.float32))
    q = Tensor(rng.standard_normal((3, H * D)).astype(np.float32))
    with ms_mode("graph"):
        save = mk.LayerwiseTransfer(buf, caches, slots, kv_format=SEPARATE, direction="d2h")
        for layer in range(L):
            _LayerWrite(*caches[layer])(new, Tensor(np.arange(32, 36, dtype=np.int64)))
            save.save_layer(layer)
        save.wait()
        load = mk.LayerwiseTransfer(buf, zero, slots, kv_format=SEPARATE, direction="h2d").start()
        scores = []
        for layer in range(L):
            load.wait_layer(layer)
            scores.append(_LayerScores(zero[layer][0])(q, slots).asnumpy())
        load.wait()
    for layer in range(L):
        keys = src[2 * layer].reshape(nb * bs, H * D).copy()
        keys[32:36] = new.asnumpy().reshape(4, H * D)
        np.testing.assert_allclose(scores[layer], q.asnumpy() @ keys[16:16 + T].T, rtol=2e-5, atol=2e-4)


def test_wait_layer_with_a_busy_pipeline_is_queued_and_orders_the_ops_after_it(rng):
    """While MindSpore's pipeline is busy, wait_layer(l) queues a wait in the pipeline (the host does not block, as a
    stream waits for an event on ascend): ops launched after it read the loaded layer; a new round after waits
    through wait_layer alone (no wait()) starts once the layers finished."""
    from ms_kvcache import _custom

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    L, nb, bs, H, D, T = 3, 4, 8, 2, 16, 12
    src = rng.standard_normal((2, L, T, H * D)).astype(np.float32)
    buf = mk.alloc_host_buffer(mk.transfer_buffer_shape(SEPARATE, L, T, H * D), ms.float32)
    buf.asnumpy()[...] = src
    caches = [(Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"qk{l}"),
               Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name=f"qv{l}")) for l in range(L)]
    slots = np.arange(3, 3 + T)
    lt = mk.LayerwiseTransfer(buf, caches, Tensor(slots.astype(np.int64)), kv_format=SEPARATE, direction="h2d")
    for rnd in range(2):
        _slow_ops()  # the forward pass, still running
        lt.start()
        outs, states = [], []
        for layer in range(L):
            lt.wait_layer(layer)  # queued behind the forward's ops
            states.append(lt._engine.state(layer))  # noqa: SLF001
            outs.append(ops.gather(caches[layer][0].reshape(nb * bs, H * D), Tensor(slots.astype(np.int32)), 0) + 0)
        assert 6 in states, states  # wait_layer returned with its layer still awaiting its turn: the host went on
        for layer in range(L):
            assert np.array_equal(outs[layer].asnumpy(), src[0, layer]), (rnd, layer)
    lt.wait()
    lt.close()



def test_a_layer_failing_under_a_queued_wait_is_raised_at_the_next_sync(rng):
    """A queued wait for a layer that failed fails in the pipeline: MindSpore raises the layer's message at the next
    synchronisation (the ops queued behind it do not run), and wait() names the layer."""
    from ms_kvcache import _custom

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    case = TokenCase(rng, SEPARATE, "BSND", "float32", "h2d", L=3)
    case.run_sync()
    lt = case.make()
    lt._engine._w.fail_layer_for_test(1, "injected copy failure")  # noqa: SLF001
    _slow_ops()
    lt.start()
    lt.wait_layer(0)
    lt.wait_layer(1)  # queued: the host cannot know yet
    with pytest.raises(RuntimeError, match=r"layer 1: injected copy failure"):
        mk.synchronize()
    with pytest.raises(RuntimeError, match=r"layer 1: injected copy failure"):
        lt.wait()
    case.check(layers=[0])



def _worker_tids():
    out = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == "mskv_layerwise":
                    out.add(int(tid))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return out



@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a Linux process allowed on at least 2 CPUs")
def test_the_worker_runs_on_the_cpus_of_the_thread_that_built_it(rng):
    """The first submission may come from a thread bound to other cores (MindSpore binds its pipeline threads with
    mindspore.runtime.set_cpu_affinity): the worker must not inherit that binding (the copy would then share
    MindSpore's cores), but run where the thread that built the transfer may run."""
    import threading

    mine = os.sched_getaffinity(0)
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h")
    case.run_sync()
    before = _worker_tids()
    lt = case.make()
    errors = []

    def first_submission_from_a_bound_thread():
        try:
            os.sched_setaffinity(0, {min(mine)})  # this thread only
            lt.save_layer(0)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=first_submission_from_a_bound_thread)
    t.start()
    t.join()
    assert not errors, errors
    lt.wait_layer(0)
    new = _worker_tids() - before
    assert len(new) == 1, new
    assert os.sched_getaffinity(new.pop()) == mine
    for layer in range(1, lt.num_layers):
        lt.save_layer(layer)
    lt.wait()
    lt.close()
    case.check()

