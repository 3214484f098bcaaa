"""The copy ops' non-temporal row copies (cpu_kernel/stream_copy.h): both store paths (32-byte AVX2 stores,
for rows starting on a cache line, the default on a CPU with AVX2, and 16-byte SSE2 stores otherwise or with
MS_KVCACHE_STREAM_SSE2=1) write exactly the bytes of a plain copy, for rows of odd sizes at destinations of
every alignment (line-aligned, 16-byte aligned, 2-byte aligned), and no byte outside the rows. The cpu kernels are called directly through their AOT entry points on numpy buffers
(ctypes), in a subprocess per path (the path is chosen once per process), with calls large enough to stream.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

_CHILD = textwrap.dedent(r'''
    import ctypes, json, sys
    import numpy as np

    lib = ctypes.CDLL(sys.argv[1])

    def call(symbol, arrays):
        fn = getattr(lib, symbol)
        fn.restype = ctypes.c_int
        n = len(arrays)
        shapes = [(ctypes.c_int64 * max(1, a.ndim))(*a.shape) for a in arrays]
        rc = fn(n, (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays]), (ctypes.c_int * n)(*[a.ndim for a in arrays]),
                (ctypes.POINTER(ctypes.c_int64) * n)(*[ctypes.cast(x, ctypes.POINTER(ctypes.c_int64)) for x in shapes]),
                (ctypes.c_char_p * n)(*[a.dtype.name.encode() for a in arrays]), None, None)
        assert rc == 0, (symbol, rc)

    def view(buf, offset, shape, like=None):
        # a float16 array at `offset` bytes past the first 64-byte-aligned byte of `like` (default buf)
        start = (-(buf if like is None else like).ctypes.data) % 64 + offset
        n = int(np.prod(shape)) * 2
        return buf[start:start + n].view(np.float16).reshape(shape)

    rng = np.random.default_rng(3)
    fails = []
    for rank, rope in ((512, 64), (37, 100), (33, 129)):  # 1024 + 128 B rows, odd row sizes
        for shift in (0, 2, 16, 18, 32, 48):  # destination base: bytes past a 64-byte boundary
            T, nb, bs = 600, 40, 16
            kv_c = rng.standard_normal((T, rank)).astype(np.float16)
            k_pe = rng.standard_normal((T, rope)).astype(np.float16)
            cbuf = np.zeros(128 + shift + nb * bs * rank * 2 + 64, np.uint8)
            pbuf = np.zeros(128 + shift + nb * bs * rope * 2 + 64, np.uint8)
            cc, pc = view(cbuf, 64 + shift, (nb, bs, rank)), view(pbuf, 64 + shift, (nb, bs, rope))
            slots = rng.permutation(nb * bs)[:T].astype(np.int64)
            slots[5] = -1
            slots[7] = nb * bs - 1 if (nb * bs - 1) not in slots else slots[7]
            call("MskvConcatAndCacheMla", [kv_c, k_pe, cc, pc, slots, np.zeros(1, np.int32)])
            wc, wp = np.zeros_like(cbuf), np.zeros_like(pbuf)
            keep = slots >= 0
            view(wc, 64 + shift, (nb * bs, rank), cbuf)[slots[keep]] = kv_c[keep]
            view(wp, 64 + shift, (nb * bs, rope), pbuf)[slots[keep]] = k_pe[keep]
            if not (np.array_equal(cbuf, wc) and np.array_equal(pbuf, wp)):
                fails.append(f"concat_and_cache_mla rank {rank} rope {rope} shift {shift}")
    for block_elems in (128 * 8 * 128, 1000 * 3 + 7):  # Llama-3-8B block, an odd block
        for shift in (0, 2, 16, 34):
            nb, n = 24, 12
            src = rng.standard_normal((nb, block_elems)).astype(np.float16)
            dbuf = np.zeros(128 + shift + nb * block_elems * 2 + 64, np.uint8)
            dst = view(dbuf, 64 + shift, (nb, block_elems))
            m = np.stack([rng.permutation(nb)[:n], rng.permutation(nb)[:n]], 1).astype(np.int64)
            call("MskvSwapBlocks", [src, dst, m, np.zeros(1, np.int32)])
            want = np.zeros_like(dbuf)
            view(want, 64 + shift, (nb, block_elems), dbuf)[m[:, 1]] = src[m[:, 0]]
            if not np.array_equal(dbuf, want):
                fails.append(f"swap_blocks block {block_elems} shift {shift}")
    print(json.dumps(fails))
''')


def _cpu_library():
    try:
        from ms_kvcache import _cpu
    except ImportError:
        pytest.skip("the native cpu module is not built")
    return _cpu.__file__


@pytest.mark.parametrize("sse2", ["0", "1"], ids=["avx2-or-default", "sse2"])
def test_streamed_rows_equal_a_plain_copy(sse2):
    env = {**os.environ, "MS_KVCACHE_STREAM_SSE2": sse2, "MS_KVCACHE_STREAM_BYTES": "4096"}
    out = subprocess.run([sys.executable, "-c", _CHILD, _cpu_library()], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
