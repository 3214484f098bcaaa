"""Independent numpy references and data builders for the sim-backend tests of the AscendC copy
kernels (tests/test_*_sim.py). Pure numpy: every reference works on raw element bits (it never
does arithmetic), so comparisons can be byte-exact for every dtype, bfloat16 included."""
import zlib

import ml_dtypes
import numpy as np

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "int8": np.int8,
      "int32": np.int32, "int64": np.int64}


def stable_seed(*parts):
    """A seed that is the same in every process (Python's str hash is randomised per process)."""
    return zlib.crc32(repr(parts).encode())


def rand(rng, shape, dtype):
    """Random non-constant data; float dtypes get arbitrary bit patterns except NaN-free normals."""
    if dtype == "int8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    return rng.standard_normal(size=shape).astype(np.float32).astype(NP[dtype])


def make_slots(rng, num_tokens, num_slots, dtype, pad_frac=0.2, out_of_range=True):
    """Distinct slots in [0, num_slots) for num_tokens tokens with ~pad_frac of them negative
    (-1 and other negative values) and, if out_of_range, one slot >= num_slots (graph-mode input that
    the kernel must skip)."""
    assert num_tokens <= num_slots
    s = rng.permutation(num_slots)[:num_tokens].astype(np.int64)
    if num_tokens >= 3 and pad_frac > 0:
        idx = rng.choice(num_tokens, size=max(1, int(num_tokens * pad_frac)), replace=False)
        s[idx] = -1
        s[idx[: max(1, len(idx) // 3)]] = -rng.integers(2, 1 << 30, size=max(1, len(idx) // 3))
    if out_of_range and num_tokens >= 5:
        s[num_tokens // 2] = num_slots + int(rng.integers(0, 1000))
    return s.astype(NP[dtype])


def _rows(x, t, width):
    return np.asarray(x).reshape(x.shape[0], -1)[t].reshape(width)


def ref_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, layout="BSND"):
    """New (key_cache, value_cache) after vLLM's reshape_and_cache with cache_layout ``layout``."""
    kc, vc = key_cache.copy(), value_cache.copy()
    if layout == "BSND":
        nb, bs, h, d = kc.shape
    else:
        nb, h, bs, d = kc.shape
    for t, s in enumerate(np.asarray(slot_mapping, dtype=np.int64)):
        if s < 0 or s >= nb * bs:
            continue
        b, o = divmod(int(s), bs)
        for cache, x in ((kc, key), (vc, value)):
            row = np.asarray(x).reshape(x.shape[0], h, d)[t]
            if layout == "BSND":
                cache[b, o] = row
            else:
                cache[b, :, o] = row
    return kc, vc


def ref_reshape_and_cache_merged(key, value, kv_cache, slot_mapping, layout="BSND"):
    kc, vc = ref_reshape_and_cache(key, value, kv_cache[0], kv_cache[1], slot_mapping, layout)
    return np.stack([kc, vc])


def ref_concat_and_cache_mla(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping):
    a, b = kv_c_cache.copy(), k_pe_cache.copy()
    nb, bs, r = a.shape
    p = b.shape[2]
    for t, s in enumerate(np.asarray(slot_mapping, dtype=np.int64)):
        if 0 <= s < nb * bs:
            a.reshape(nb * bs, r)[s] = np.asarray(kv_c).reshape(kv_c.shape[0], r)[t]
            b.reshape(nb * bs, p)[s] = np.asarray(k_pe).reshape(k_pe.shape[0], p)[t]
    return a, b


def ref_copy_blocks(key_caches, value_caches, block_mapping):
    """Pairs applied in order to every cache (ms_kvcache's copy_blocks semantics); ids outside
    [0, num_blocks) skipped."""
    out = [c.copy() for c in list(key_caches) + list(value_caches)]
    for src, dst in np.asarray(block_mapping, dtype=np.int64).reshape(-1, 2):
        for c in out:
            if 0 <= src < c.shape[0] and 0 <= dst < c.shape[0]:
                c[dst] = c[src]
    n = len(key_caches)
    return out[:n], out[n:]


def bits(x):
    """View as unsigned integers of the same size (byte-exact comparisons, NaN/-0.0 safe)."""
    x = np.ascontiguousarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def assert_same_bytes(actual, expected, what):
    a, e = bits(actual), bits(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    if not np.array_equal(a, e):
        bad = np.argwhere(a != e)
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {bad[:3].tolist()}")


# ----------------------------------------------------------------------------- emulation helpers
SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
KV_DTYPES = ("float16", "bfloat16", "float32", "int8")
INDEX_DTYPES = ("int32", "int64")


def status():
    """The op's int32 [1] output (never written by the kernels)."""
    return np.zeros(1, dtype=np.int32)


def sim_module():
    """ms_kvcache.sim, or skip the calling test when the emulation is not built."""
    import pytest

    try:
        from ms_kvcache import sim
    except ImportError as exc:  # pragma: no cover - depends on the build
        pytest.skip(f"AscendC emulation not built: {exc}")
    return sim


def launch(op, arrays, attrs=None, soc="Ascend910B1", all_orders=False, **kw):
    """Tiling + kernel of ``op`` through the emulation; with all_orders, forward/reverse/threads must
    give identical bytes. Returns the launch statistics."""
    sim = sim_module()
    if all_orders:
        return sim.launch_all_orders(op, arrays, attrs=attrs, soc=soc, **kw)
    return sim.launch(op, arrays, attrs=attrs, soc=soc, **kw)


def platform(soc):
    """The emulation's platform table entry of ``soc`` (aiv_cores, ub_size, ...)."""
    return sim_module().platform(soc)


def cores_of(soc):
    return int(platform(soc)["aiv_cores"])


def expect_tiling_error(op, arrays, attrs, soc, *words):
    """The launch must fail in the tiling with a message containing every word; nothing written."""
    import pytest

    sim = sim_module()
    before = [a.copy() if isinstance(a, np.ndarray) else None for a in arrays]
    with pytest.raises(sim.EmulationError) as info:
        sim.launch(op, arrays, attrs=attrs, soc=soc)
    msg = str(info.value)
    for w in words:
        assert w in msg, f"expected {w!r} in the error, got: {msg}"
    for a, b in zip(arrays, before):
        if b is not None:
            assert_same_bytes(a, b, "an array changed although the launch failed")
    return msg


def public_backend_or_skip(name):
    """Skip unless ms_kvcache has public op ``name`` and the sim backend can be selected."""
    import pytest

    import ms_kvcache

    if not hasattr(ms_kvcache, name):
        pytest.skip(f"ms_kvcache.{name} is not in this build yet")
    try:
        ms_kvcache.set_backend("sim")
    except (RuntimeError, ValueError, ImportError) as exc:
        pytest.skip(f"sim backend unavailable: {exc}")
    finally:
        ms_kvcache.set_backend("cpu")
    return ms_kvcache


def reset_last_launch(other_than):
    """Make the emulation's last launch a trivial one of an op other than ``other_than``, so a test
    can then prove that the public op really ran through the sim backend."""
    sim = sim_module()
    if other_than != "MskvCopyBlocks":
        c = np.zeros((2, 32), np.float16)
        sim.launch("MskvCopyBlocks", [[c], [c.copy()], np.zeros((0, 2), np.int64), status()])
    else:
        kc = np.zeros((2, 16, 1, 16), np.float16)
        sim.launch("MskvReshapeAndCache", [np.zeros((0, 1, 16), np.float16), np.zeros((0, 1, 16), np.float16), kc,
                                       kc.copy(), np.zeros(0, np.int64), status()])


def assert_last_launch(op, **fields):
    """The emulation's most recent launch was ``op`` with these tiling field values."""
    st = sim_module().last_launch_stats()
    assert st["op"] == op, f"expected the sim backend to launch {op}, last launch was {st['op']!r}"
    for k, v in fields.items():
        assert st["tiling_fields"][k] == str(v), (k, st["tiling_fields"][k], v)


def expect_sim_graph_trap(mk, make_net, run, cause, kept):
    """GRAPH_MODE on set_backend("sim"): ``run(make_net())`` must raise a RuntimeError that reports the kernel's
    rule TRAP (``AscendC::Trap()``) and then ``cause`` (the host diagnosis of the same inputs), and
    ``kept(net)`` = [(Parameter, its bytes before)] must be unchanged. Restores the cpu backend. Returns the
    message."""
    import pytest

    from conftest import ms_mode, to_np

    mk.set_backend("sim")
    try:
        with ms_mode("graph"):
            net = make_net()
            with pytest.raises(RuntimeError) as ei:
                run(net)
            msg = str(ei.value)
            assert "TRAP" in msg and "AscendC::Trap()" in msg, msg
            assert cause in msg, msg
            assert msg.index("AscendC::Trap()") < msg.index("cause:"), msg
            for p, before in kept(net):
                np.testing.assert_array_equal(to_np(p), before)
    finally:
        mk.set_backend("cpu")
    return msg
