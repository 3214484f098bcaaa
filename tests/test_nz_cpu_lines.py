"""The cpu kernels' NZ line paths (cpu_kernel/nz_copy.cpp) at every alignment of the side they write.

The AVX2 path assembles whole 64-byte lines of the side it writes (the cache for reshape_and_cache and h2d, the
host rows for d2h) from the 32-byte pieces covering them, which depends on how far that side starts past a line
boundary (MindSpore's host tensors are 16-byte aligned: 0, 16, 32 or 48 bytes), and stores the partial lines at
the ends of each range separately. Here the caches and host buffers are numpy memory at each of those offsets
(and 2 bytes past a line: the generic path), shared with the ops through ``Tensor.from_numpy``, with guard bytes
around them; runs of consecutive slots start at odd and even offsets and have odd and even lengths, beside
scattered slots, -1, the last slot and an odd fractal count; calls both large enough to stream and small ones.
Every result is compared bit for bit with a numpy model of the NZ index formula (element (b, t, h) at
``((b * F + h // C0) * block_size + t) * C0 + h % C0``), and the guard bytes must be untouched. The same checks
run again in a child process with ``MS_KVCACHE_STREAM_SSE2=1`` (the same line code with 16-byte SSE2 stores).
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from mindspore import Tensor

import ms_kvcache

GUARD = 0xA5
SHIFTS = (0, 16, 32, 48, 2)  # bytes past a 64-byte line


def _placed(shape, dtype, shift, rng=None):
    """(array, buffer, start): a C-contiguous ``shape`` array of ``dtype`` starting ``shift`` bytes past a line
    inside ``buffer`` (guard bytes GUARD before and after), zeros or random bytes (``rng``)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.full(n + 256, GUARD, np.uint8)
    start = (-buf.ctypes.data) % 64 + 64 + shift
    body = buf[start:start + n]
    body[:] = 0 if rng is None else rng.integers(0, 256, n, dtype=np.uint8)
    return body.view(dtype).reshape(shape), buf, start


def _guards_ok(buf, start, nbytes):
    return bool((buf[:start] == GUARD).all() and (buf[start + nbytes:] == GUARD).all())


def _nd(nz):
    """[nb, F, bs, C0] -> the ND view [nb, bs, F * C0] (the index formula, numpy only)."""
    nb, f, bs, c0 = nz.shape
    return nz.transpose(0, 2, 1, 3).reshape(nb, bs, f * c0)


def _slots(rng, nb, bs, runs):
    """Distinct slots: the given (block, first offset, length) runs in token order, then scattered slots of
    other blocks, -1 twice and the last slot."""
    used = set()
    out = []
    for b, o, n in runs:
        out += [b * bs + o + i for i in range(n)]
    used.update(out)
    rest = [s for s in rng.permutation(nb * bs - 1).tolist() if s not in used and s // bs not in {r[0] for r in runs}]
    out += rest[:9]
    out.insert(3, -1)
    out.append(-1)
    out.append(nb * bs - 1)
    return np.array(out, np.int64)


RUNS = [(1, 1, 22), (4, 0, 32), (2, 7, 3), (0, 30, 2), (3, 0, 1), (6, 5, 27), (5, 2, 30)]  # block_size 32
# block_size 144: runs longer than the kernels' tiles (64 slots for d2h), whole blocks, odd lengths and starts
LONG_RUNS = [(1, 1, 143), (0, 0, 144), (2, 5, 70), (3, 64, 65), (5, 17, 1), (6, 100, 44)]


def check_writes(seed=0):
    """reshape_and_cache into NZ caches at every shift; returns the failures (strings)."""
    rng = np.random.default_rng(seed)
    fails = []
    nb = 8
    # (dtype, C0, F, repeats of the runs, block_size): 2 KiB rows streamed (>= 256 KiB written), an odd F
    # streamed, small calls (plain stores), int8 with its 32-element C0, runs longer than a tile
    cases = [("float16", 16, 64, 3, 32), ("float16", 16, 67, 3, 32), ("float16", 16, 3, 1, 32),
             ("float16", 16, 8, 1, 32), ("int8", 32, 3, 1, 32), ("float16", 16, 64, 1, 144)]
    for dtype, c0, f, reps, bs in cases:
        base_runs = RUNS if bs == 32 else LONG_RUNS
        for shift in SHIFTS:
            nbk = nb * reps
            runs = [(b + r * nb, o, n) for r in range(reps) for b, o, n in base_runs]
            slots = _slots(rng, nbk, bs, runs)
            t = len(slots)
            key = rng.integers(-100, 100, (t, f * c0)).astype(dtype)
            value = rng.integers(-100, 100, (t, f * c0)).astype(dtype)
            caches = [_placed((nbk, f, bs, c0), dtype, shift, rng) for _ in range(2)]
            want = [_nd(c[0]).copy() for c in caches]
            for w, rows in zip(want, (key, value)):
                ok = slots >= 0
                w.reshape(nbk * bs, f * c0)[slots[ok]] = rows[ok]
            ms_kvcache.reshape_and_cache(Tensor(key), Tensor(value), Tensor.from_numpy(caches[0][0]),
                                         Tensor.from_numpy(caches[1][0]), Tensor(slots), cache_layout="NZ")
            ms_kvcache.synchronize()
            for (arr, buf, start), w, name in zip(caches, want, ("key", "value")):
                what = f"reshape_and_cache {dtype} F={f} x{reps} bs={bs} shift {shift} {name}_cache"
                if not np.array_equal(_nd(arr).view(np.uint8), w.view(np.uint8)):
                    fails.append(what)
                if not _guards_ok(buf, start, arr.nbytes):
                    fails.append(what + ": bytes outside the cache written")
    return fails


def check_transfers(seed=1):
    """multi_layer_kv_transfer / multi_layer_block_transfer of NZ caches, both directions, caches and host
    memory at every shift; returns the failures."""
    rng = np.random.default_rng(seed)
    fails = []
    nb = 8
    # (dtype, C0, F, repeats of the runs, block_size, layers): 2 KiB rows (the calls move >= 4 MiB: streamed), an
    # odd F (rows not a whole number of lines), a small call, runs longer than a tile
    cases = (("float16", 16, 64, 8, 32, 2), ("float16", 16, 67, 8, 32, 2), ("int8", 32, 3, 1, 32, 2),
             ("float16", 16, 64, 1, 144, 3))
    for dtype, c0, f, reps, bs, L in cases:
        hidden = f * c0
        nbk = nb * reps
        base_runs = RUNS if bs == 32 else LONG_RUNS
        for cshift, hshift in zip(SHIFTS, (0, 48, 16, 32, 2)):
            caches = [[_placed((nbk, f, bs, c0), dtype, cshift, rng) for _ in range(2)] for _ in range(L)]
            nested = [tuple(Tensor.from_numpy(c[0]) for c in layer) for layer in caches]
            runs = [(b + r * nb, o, n) for r in range(reps) for b, o, n in base_runs]
            slots = _slots(rng, nbk, bs, runs)
            t = len(slots)
            tag = f"{dtype} F={f} bs={bs} L={L} cache shift {cshift} host shift {hshift}"

            def nd(layer, plane):
                return _nd(caches[layer][plane][0]).reshape(nbk * bs, hidden)

            # token d2h: buffer [2, L, T, hidden]
            buf, bbuf, bstart = _placed((2, L, t, hidden), dtype, hshift, rng)
            ms_kvcache.multi_layer_kv_transfer(Tensor.from_numpy(buf), nested, Tensor(slots), kv_format="separate",
                                               direction="d2h", cache_layout="NZ")
            ms_kvcache.synchronize()
            want = np.zeros_like(buf)
            ok = slots >= 0
            for p in range(2):
                for l in range(L):
                    want[p, l][ok] = nd(l, p)[slots[ok]]
            if not np.array_equal(buf.view(np.uint8), want.view(np.uint8)):
                fails.append(f"kv d2h {tag}")
            if not _guards_ok(bbuf, bstart, buf.nbytes):
                fails.append(f"kv d2h {tag}: bytes outside the buffer written")
            # token h2d
            buf[:] = rng.integers(-100, 100, buf.shape).astype(dtype)
            want = [[nd(l, p).copy() for p in range(2)] for l in range(L)]
            for p in range(2):
                for l in range(L):
                    want[l][p][slots[ok]] = buf[p, l][ok]
            ms_kvcache.multi_layer_kv_transfer(Tensor.from_numpy(buf), nested, Tensor(slots), kv_format="separate",
                                               direction="h2d", cache_layout="NZ")
            ms_kvcache.synchronize()
            for l in range(L):
                for p in range(2):
                    if not np.array_equal(nd(l, p).view(np.uint8), want[l][p].view(np.uint8)):
                        fails.append(f"kv h2d {tag} layer {l} plane {p}")
                    arr, cbuf, cstart = caches[l][p]
                    if not _guards_ok(cbuf, cstart, arr.nbytes):
                        fails.append(f"kv h2d {tag}: bytes outside cache {l},{p} written")
            # block d2h / h2d: host blocks [n, bs, L, 1, hidden] per plane
            ids = rng.permutation(nbk)[:max(2, nbk - 3)].astype(np.int64)
            n = len(ids)
            host = [_placed((n, bs, L, 1, hidden), dtype, hshift, rng) for _ in range(2)]
            ms_kvcache.multi_layer_block_transfer(nested, [Tensor.from_numpy(h[0]) for h in host], Tensor(ids),
                                                  direction="d2h", kv_format="separate", cache_layout="NZ")
            ms_kvcache.synchronize()
            for p in range(2):
                want = np.stack([_nd(caches[l][p][0])[ids] for l in range(L)], axis=2).reshape(n, bs, L, 1, hidden)
                if not np.array_equal(host[p][0].view(np.uint8), want.view(np.uint8)):
                    fails.append(f"block d2h {tag} plane {p}")
                if not _guards_ok(host[p][1], host[p][2], host[p][0].nbytes):
                    fails.append(f"block d2h {tag}: bytes outside host plane {p} written")
            for h in host:
                h[0][:] = rng.integers(-100, 100, h[0].shape).astype(dtype)
            want = [[_nd(caches[l][p][0]).copy() for p in range(2)] for l in range(L)]
            for l in range(L):
                for p in range(2):
                    want[l][p][ids] = host[p][0][:, :, l, 0]
            ms_kvcache.multi_layer_block_transfer(nested, [Tensor.from_numpy(h[0]) for h in host], Tensor(ids),
                                                  direction="h2d", kv_format="separate", cache_layout="NZ")
            ms_kvcache.synchronize()
            for l in range(L):
                for p in range(2):
                    if not np.array_equal(_nd(caches[l][p][0]).view(np.uint8), want[l][p].view(np.uint8)):
                        fails.append(f"block h2d {tag} layer {l} plane {p}")
                    arr, cbuf, cstart = caches[l][p]
                    if not _guards_ok(cbuf, cstart, arr.nbytes):
                        fails.append(f"block h2d {tag}: bytes outside cache {l},{p} written")
    return fails


@pytest.fixture
def cpu():
    old = ms_kvcache.get_backend()
    ms_kvcache.set_backend("cpu")
    yield
    ms_kvcache.set_backend(old)


def test_nz_writes_at_every_alignment(cpu):
    assert check_writes() == []


def test_nz_transfers_at_every_alignment(cpu):
    assert check_transfers() == []


_CHILD = textwrap.dedent('''
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("nz_lines", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import ms_kvcache
    ms_kvcache.set_backend("cpu")
    print(json.dumps(mod.check_writes() + mod.check_transfers()))
''')


def test_nz_generic_tiles_sse2():
    """The same checks with MS_KVCACHE_STREAM_SSE2=1: the line code with 16-byte stores (chosen once per process)."""
    try:
        from ms_kvcache import _cpu  # noqa: F401
    except ImportError:
        pytest.skip("the native cpu module is not built")
    env = {**os.environ, "MS_KVCACHE_STREAM_SSE2": "1"}
    out = subprocess.run([sys.executable, "-c", _CHILD, __file__], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
