"""Degenerate shapes through the AscendC copy ops' host tiling and kernels (emulation, "sim").

Zero-sized rows (head_size, num_kv_heads, kv_lora_rank or rope_dim 0), caches without slots
(num_blocks or block_size 0) and zero-sized cache blocks are valid calls with nothing to move, as on
the cpu backend: the tiling returns a no-op launch (block dim 1, no work) and nothing is written. One
empty MLA plane does not stop the other plane from being written. Dimensions whose product does not
fit the 2^62-byte tensor limit are a clear tiling error, never an overflow. Before the fix the tiling
divided by zero (SIGFPE), so the CLI and public-op checks run in a subprocess.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_same_bytes, launch, rand, ref_concat_and_cache_mla, ref_copy_blocks, sim_module,
                           status)

ROOT = Path(__file__).resolve().parents[1]


def _noop(st):
    assert st["block_dim"] == 1, st["block_dim"]
    assert st["gm_write_bytes"] == 0, st["gm_write_bytes"]
    assert st["tiling_fields"]["formerLen"] == "0" and st["tiling_fields"]["tailLen"] == "0"


def _unchanged(arrays, before):
    for i, (a, b) in enumerate(zip(arrays, before)):
        if isinstance(a, np.ndarray):
            assert_same_bytes(a, b, f"array {i}")
        elif isinstance(a, list):
            for j, (x, y) in enumerate(zip(a, b)):
                assert_same_bytes(x, y, f"array {i}[{j}]")


def _copies(arrays):
    return [[x.copy() for x in a] if isinstance(a, list) else a.copy() for a in arrays]


# ----------------------------------------------------------------------------- reshape_and_cache(_merged)
@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("H,D,nb,bs", [(2, 0, 4, 8), (0, 16, 4, 8), (0, 0, 4, 8), (2, 16, 0, 8), (2, 16, 4, 0)])
def test_reshape_and_cache_zero_sized_dims_are_noop_launches(soc, layout, H, D, nb, bs):
    rng = np.random.default_rng(7)
    dtype = "float16"
    T = 5
    shape = (nb, bs, H, D) if layout == "BSND" else (nb, H, bs, D)
    key, value = rand(rng, (T, H, D), dtype), rand(rng, (T, H * D), dtype)
    kc, vc = rand(rng, shape, dtype), rand(rng, shape, dtype)
    slots = np.array([0, 3, -1, 7, 1], np.int64)  # graph-mode input: in range for no cache here
    arrays = [key, value, kc, vc, slots, status()]
    before = _copies(arrays)
    _noop(launch("MskvReshapeAndCache", arrays, {"cache_layout": layout}, soc, all_orders=True))
    _unchanged(arrays, before)


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("H,D", [(2, 0), (0, 8)])
def test_reshape_and_cache_merged_zero_sized_rows(layout, H, D):
    rng = np.random.default_rng(8)
    shape = (2, 3, 4, H, D) if layout == "BSND" else (2, 3, H, 4, D)
    kv = rand(rng, shape, "float32")
    arrays = [rand(rng, (6, H, D), "float32"), rand(rng, (6, H, D), "float32"), kv,
              np.arange(6, dtype=np.int32), status()]
    before = _copies(arrays)
    _noop(launch("MskvReshapeAndCacheMerged", arrays, {"cache_layout": layout}, "Ascend310P3", all_orders=True))
    _unchanged(arrays, before)


# ----------------------------------------------------------------------------- concat_and_cache_mla
@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("R,P", [(0, 64), (512, 0), (0, 0), (0, 4096 * 12)])
def test_concat_and_cache_mla_one_empty_plane_writes_the_other(soc, R, P):
    rng = np.random.default_rng(R + P)
    T, nb, bs = 50, 5, 16
    kv_c, k_pe = rand(rng, (T + 1, R), "float16"), rand(rng, (T + 1, 1, P), "float16")
    kvcc, kpec = rand(rng, (nb, bs, R), "float16"), rand(rng, (nb, bs, P), "float16")
    slots = rng.permutation(nb * bs)[:T].astype(np.int32)
    slots[3], slots[10] = -1, nb * bs + 2
    e1, e2 = ref_concat_and_cache_mla(kv_c, k_pe, kvcc, kpec, slots)
    st = launch("MskvConcatAndCacheMla", [kv_c, k_pe, kvcc, kpec, slots, status()], None, soc, all_orders=True)
    assert_same_bytes(kvcc, e1, "kv_c_cache")
    assert_same_bytes(kpec, e2, "k_pe_cache")
    if R == 0 and P == 0:
        _noop(st)
    else:
        written = int(np.count_nonzero((slots >= 0) & (slots < nb * bs)))
        assert st["gm_write_bytes"] == written * (R + P) * 2
        assert st["block_dim"] > 1


def test_concat_and_cache_mla_no_slots():
    rng = np.random.default_rng(3)
    arrays = [rand(rng, (4, 8), "int8"), rand(rng, (4, 32), "int8"), rand(rng, (0, 16, 8), "int8"),
              rand(rng, (0, 16, 32), "int8"), np.array([0, 1, 2, 3], np.int64), status()]
    before = _copies(arrays)
    _noop(launch("MskvConcatAndCacheMla", arrays, None, "Ascend910B1", all_orders=True))
    _unchanged(arrays, before)


# ----------------------------------------------------------------------------- copy_blocks
@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("block_shape,nb", [((0, 4), 6), ((16, 0, 8), 6), ((16, 3), 0), ((3,), 6)])
def test_copy_blocks_zero_sized_blocks_or_no_blocks(soc, block_shape, nb):
    rng = np.random.default_rng(nb)
    kcs = [rand(rng, (nb,) + block_shape, "float16") for _ in range(2)]
    vcs = [rand(rng, (nb,) + block_shape, "float16") for _ in range(2)]
    bm = np.array([[0, 1], [2, 3], [4, 5]], np.int64)
    if int(np.prod(block_shape)) and nb:  # 6-byte blocks: not a multiple of 32 bytes
        if soc == "Ascend310P3":
            with pytest.raises(sim_module().EmulationError, match="Ascend310P"):
                launch("MskvCopyBlocks", [kcs, vcs, bm, status()], None, soc)
            return
        ek, ev = ref_copy_blocks(kcs, vcs, bm)  # the control case: an ordinary unaligned copy on A2
        launch("MskvCopyBlocks", [kcs, vcs, bm, status()], None, soc)
        for a, e in zip(kcs + vcs, ek + ev):
            assert_same_bytes(a, e, "cache")
        return
    arrays = [kcs, vcs, bm, status()]
    before = _copies(arrays)
    _noop(launch("MskvCopyBlocks", arrays, None, soc, all_orders=True))
    _unchanged(arrays, before)


# ----------------------------------------------------------------------------- sizes beyond int64
BIG = 1 << 40


@pytest.mark.parametrize("op,inputs,attrs,name", [
    ("MskvReshapeAndCache", [((1, BIG, BIG), "float16"), ((1, BIG, BIG), "float16"), ((1, 1, BIG, BIG), "float16"),
                         ((1, 1, BIG, BIG), "float16"), ((1,), "int32")], {"cache_layout": "BSND"}, "key"),
    # head_size 0: the cache holds 0 bytes, but num_blocks * block_size would overflow int64
    ("MskvReshapeAndCache", [((1, 2, 0), "float16"), ((1, 2, 0), "float16"), ((BIG, BIG, 2, 0), "float16"),
                         ((BIG, BIG, 2, 0), "float16"), ((1,), "int64")], {"cache_layout": "BNSD"}, "key_cache"),
    ("MskvReshapeAndCacheMerged", [((1, 8), "int8"), ((1, 8), "int8"), ((2, BIG, BIG, 1, 8), "int8"), ((1,), "int32")],
     {"cache_layout": "BSND"}, "kv_cache"),
    ("MskvConcatAndCacheMla", [((1, 0), "float32"), ((1, 64), "float32"), ((BIG, BIG, 0), "float32"),
                           ((BIG, BIG, 64), "float32"), ((1,), "int32")], None, "kv_c_cache"),
    ("MskvCopyBlocks", [[((4, BIG, BIG), "float32")], [((4, BIG, BIG), "float32")], ((3, 2), "int64")], None,
     "key_caches"),
    ("MskvCopyBlocks", [[((4, 8), "float32")], [((4, 8), "float32")], ((1 << 61, 2), "int64")], None,
     "block_mapping"),
])
def test_dims_beyond_int64_are_a_tiling_error(op, inputs, attrs, name):
    sim = sim_module()
    with pytest.raises(sim.EmulationError) as info:
        sim.tiling(op, inputs, attrs, "Ascend910B1")
    msg = str(info.value)
    assert info.value.rule == "TILING_FAILED", msg
    assert f"{name}: shape" in msg and "2^62 bytes" in msg, msg


# ----------------------------------------------------------------------------- CLI and public op
def _run(code, tmp_path):
    script = tmp_path / "probe.py"  # a file: MindSpore's graph compiler needs the source
    script.write_text(textwrap.dedent(code))
    p = subprocess.run([sys.executable, str(script)], cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def test_cli_tiling_zero_head_size_does_not_crash(tmp_path):
    rc, out = _run("""
        from ms_kvcache.cli import main
        raise SystemExit(main(["tiling", "reshape_and_cache", "--json", "--shape", "key=16x8x0",
                               "--shape", "value=16x8x0", "--shape", "key_cache=64x128x8x0",
                               "--shape", "value_cache=64x128x8x0", "--shape", "slot_mapping=16"]))
    """, tmp_path)
    assert rc == 0, out
    assert '"block_dim": 1' in out, out


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_ops_zero_sized_rows_on_sim(mode, tmp_path):
    sim_module()
    rc, out = _run(f"""
        import numpy as np, mindspore as ms, ms_kvcache
        from ms_kvcache import sim
        from mindspore import Tensor, Parameter, nn
        ms.set_context(mode=ms.{'GRAPH_MODE' if mode == 'graph' else 'PYNATIVE_MODE'})
        ms_kvcache.set_backend("sim")
        kc = Parameter(Tensor(np.zeros((4, 8, 2, 0), np.float32)), name="k")
        vc = Parameter(Tensor(np.zeros((4, 8, 2, 0), np.float32)), name="v")
        pe = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16)
        kvcc = Parameter(Tensor(np.zeros((4, 8, 0), np.float32)), name="c")
        kpec = Parameter(Tensor(pe), name="p")
        x = Tensor(np.zeros((3, 2, 0), np.float32))
        k_pe = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.kc, self.vc, self.kvcc, self.kpec = kc, vc, kvcc, kpec

            def construct(self, x, c, p, s):
                ms_kvcache.reshape_and_cache(x, x, self.kc, self.vc, s)
                ms_kvcache.concat_and_cache_mla(c, p, self.kvcc, self.kpec, s)
                return s

        s = Tensor(np.array([0, 9, 2], np.int32))
        Net()(x, Tensor(np.zeros((3, 0), np.float32)), Tensor(k_pe), s)
        got = kpec.asnumpy()
        want = pe.reshape(32, 16).copy()
        want[[0, 9, 2]] = k_pe
        assert np.array_equal(got.reshape(32, 16), want), "k_pe_cache"
        assert kc.asnumpy().shape == (4, 8, 2, 0)
        print("OK", sim.last_launch_stats()["op"])
    """, tmp_path)
    assert rc == 0, out
    assert "OK MskvConcatAndCacheMla" in out, out
