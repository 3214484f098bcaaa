"""Tiling keys: what every op's host tiling can produce on each SoC == what its kernel has branches for.

The kernel side is the op's declaration in op_kernel/mskv_tiling_keys.h (``MSKV_KEYS_<OP>``), preprocessed
for each arch family (g++ -E of the header alone, :func:`check_cann_headers.declared_tiling_keys`); every
kernel entry expands exactly that declaration (tools/mskv_structure.py checks it, tests/test_structure.py;
scripts/check_cann_headers.py checks the official .i). The host side is the real op_host tiling run through
the emulation (``ms_kvcache.sim.tiling``) over every dtype row of the op's OpDef on that SoC, both layouts,
rotary styles, weights, and a row size with and without DataCopyPad; a tiling that refuses a case on a
SoC (unaligned rows on Ascend310P) produces no key there.
"""
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import check_cann_headers as cch  # noqa: E402

from ms_kvcache._formats import NZ_C0  # noqa: E402
from ms_kvcache._spec import SOCS, get_spec, op_type_of  # noqa: E402

sim = pytest.importorskip("ms_kvcache.sim")
if not hasattr(sim, "tiling"):
    pytest.skip("ms_kvcache.sim was built without the emulation module", allow_module_level=True)

from _multi_layer_ref import SEPARATE, Geometry, host_block_shape  # noqa: E402

OPS = sorted(p.stem for p in (ROOT / "op_kernel").glob("*.cpp"))
ARCH_TARGET = {2201: "a2", 2002: "310p"}
T, NB, BS, H = 4, 2, 4, 2
#: head sizes: 32 elements (a multiple of 32 bytes for every dtype) and 3 (never one: DataCopyPad)
HEAD_SIZES = (32, 3)
LAYOUTS = ("BSND", "BNSD")


def _rows(op, soc):
    """{input name: dtype} for every dtype row the OpDef declares on soc."""
    spec = get_spec(op)
    names = [t.name for t in spec.inputs + spec.outputs]
    return [dict(zip(names, row)) for row in spec.dtype_rows(soc)]


def _cache(layout, d, heads=H, merged=False):
    shape = (NB, heads, BS, d) if layout == "BNSD" else (NB, BS, heads, d)
    return (2,) + shape if merged else shape


#: NZ caches: block_size a multiple of 16; head_size 32 (a whole number of C0 pieces for every NZ dtype)
NZ_BS, NZ_D = 16, 32


def _nz(dtype, heads, merged=False):
    """An NZ cache [NB, heads * NZ_D / C0, NZ_BS, C0] of ``dtype`` (None: the dtype has no NZ form)."""
    c0 = NZ_C0.get(dtype)
    if c0 is None:
        return None
    shape = (NB, heads * NZ_D // c0, NZ_BS, c0)
    return (2,) + shape if merged else shape


def _variants(op, dt):
    """(inputs in OpDef order as sim.tiling takes them, attrs) for one dtype row ``dt``."""
    S = dt.get("slot_mapping")
    if op in ("reshape_and_cache", "reshape_and_cache_merged"):
        for layout, d in itertools.product(LAYOUTS, HEAD_SIZES):
            kv = dt["key"]
            if op == "reshape_and_cache":
                caches = [(_cache(layout, d), kv), (_cache(layout, d), kv)]
            else:
                caches = [(_cache(layout, d, merged=True), kv)]
            yield [((T, H, d), kv), ((T, H, d), kv)] + caches + [((T,), S)], {"cache_layout": layout}
        if _nz(dt["key"], H) is not None:  # NZ caches (float16, bfloat16, int8)
            kv = dt["key"]
            caches = [(_nz(kv, H), kv)] * 2 if op == "reshape_and_cache" else [(_nz(kv, H, True), kv)]
            yield [((T, H, NZ_D), kv), ((T, H * NZ_D), kv)] + caches + [((T,), S)], {"cache_layout": "NZ"}
    elif op == "reshape_and_cache_quant":
        # separate and merged caches, static (per tensor) and dynamic scales; 8 heads: the dynamic scale row of
        # a BSND token is a multiple of 32 bytes (Ascend310P refuses the others)
        for layout, d, mode, merged in itertools.product(LAYOUTS, HEAD_SIZES, ("static", "dynamic"), (False, True)):
            x, c, f = dt["key"], dt["key_cache"], dt["k_scale"]
            h = 8
            kc = _cache(layout, d, heads=h, merged=merged)
            vc = None if merged else (_cache(layout, d, heads=h), c)
            sc = (((NB, BS, h, 1) if layout == "BSND" else (NB, h, BS, 1)), f)
            scales = [((), f), ((), f), None, None, None, None] if mode == "static" else [None] * 4 + [sc, sc]
            attrs = {"cache_layout": layout, "kv_format": 1 if merged else 2, "quant_mode": mode}
            yield [((T, h, d), x), ((T, h, d), x), (kc, c), vc, ((T,), S)] + scales, attrs
        for mode, merged in itertools.product(("static", "dynamic"), (False, True)):  # NZ int8 caches, BSND scales
            x, c, f, h = dt["key"], dt["key_cache"], dt["k_scale"], 8
            vc = None if merged else (_nz(c, h), c)
            sc = ((NB, NZ_BS, h, 1), f)
            scales = [((), f), ((), f), None, None, None, None] if mode == "static" else [None] * 4 + [sc, sc]
            attrs = {"cache_layout": "NZ", "kv_format": 1 if merged else 2, "quant_mode": mode}
            yield [((T, h, NZ_D), x), ((T, h, NZ_D), x), (_nz(c, h, merged), c), vc, ((T,), S)] + scales, attrs
    elif op == "rope_reshape_and_cache_quant":
        # both styles and tables, separate and merged caches, static and dynamic scales; 8 kv heads (Ascend310P's
        # dynamic BSND rule)
        for layout, d, neox, mode in itertools.product(LAYOUTS, HEAD_SIZES, (False, True), ("static", "dynamic")):
            rd = d - d % 2 if d > 3 else 2
            x, c, f = dt["key"], dt["key_cache"], dt["k_scale"]
            h, merged = 8, neox
            kc = _cache(layout, d, heads=h, merged=merged)
            vc = None if merged else (_cache(layout, d, heads=h), c)
            sc = (((NB, BS, h, 1) if layout == "BSND" else (NB, h, BS, 1)), f)
            scales = [((), f), ((), f), None, None, None, None] if mode == "static" else [None] * 4 + [sc, sc]
            attrs = {"is_neox_style": neox, "cache_layout": layout, "kv_format": 1 if merged else 2,
                     "quant_mode": mode}
            yield [((T,), dt["positions"]), ((T, H, d), x), ((T, h, d), x), ((T, h, d), x),
                   ((16, rd), dt["cos_sin_cache"]), (kc, c), vc, ((T,), S)] + scales, attrs
        # NZ int8 caches (BSND scale caches); rotary dim 2: a table row of DataCopyPad (A2/A3)
        for rd, neox, mode in itertools.product((NZ_D, 2), (False, True), ("static", "dynamic")):
            x, c, f, h, merged = dt["key"], dt["key_cache"], dt["k_scale"], 8, neox
            vc = None if merged else (_nz(c, h), c)
            sc = ((NB, NZ_BS, h), f)
            scales = [((), f), ((), f), None, None, None, None] if mode == "static" else [None] * 4 + [sc, sc]
            attrs = {"is_neox_style": neox, "cache_layout": "NZ", "kv_format": 1 if merged else 2, "quant_mode": mode}
            yield [((T,), dt["positions"]), ((T, H, NZ_D), x), ((T, h, NZ_D), x), ((T, h, NZ_D), x),
                   ((16, rd), dt["cos_sin_cache"]), (_nz(c, h, merged), c), vc, ((T,), S)] + scales, attrs
    elif op == "concat_and_cache_mla_quant":
        for d, mode in itertools.product(HEAD_SIZES, ("static", "dynamic")):
            x, c, f = dt["kv_c"], dt["kv_c_cache"], dt["kv_c_scale"]
            sc = ((NB, BS, 1), f)
            scales = [((), f), ((), f), None, None, None, None] if mode == "static" else [None] * 4 + [sc, sc]
            yield [((T, d), x), ((T, d), x), ((NB, BS, d), c), ((NB, BS, d), c), ((T,), S)] + scales, \
                {"quant_mode": mode}
    elif op == "concat_and_cache_mla":
        for d in HEAD_SIZES:
            kv = dt["kv_c"]
            yield [((T, d), kv), ((T, d), kv), ((NB, BS, d), kv), ((NB, BS, d), kv), ((T,), S)], {}
    elif op == "copy_blocks":
        for d in HEAD_SIZES:
            c = [((NB, 1, 1, d), dt["key_caches"])] * 2
            yield [c, c, ((1, 2), dt["block_mapping"])], {}
    elif op in ("multi_layer_kv_transfer", "multi_layer_block_transfer"):
        for layout, d in itertools.product(LAYOUTS, HEAD_SIZES):
            geo = Geometry(SEPARATE, layout, 1, NB, BS, heads=H, head_size=d)
            kv = dt["kv_caches"]
            caches = [(geo.plane_shape(p), kv) for p in range(geo.P)]
            attrs = {"kv_format": int(geo.fmt), "direction": "d2h", "cache_layout": layout, "num_layers": 1,
                     "aiv_num": 0}
            if op == "multi_layer_kv_transfer":
                yield [((2, 1, T, geo.hidden[0]), kv), ((T,), S), caches], attrs
            else:
                host = [(host_block_shape(geo, p, 1), kv) for p in range(geo.P)]
                yield [((1,), dt["block_ids"]), None, host, caches], attrs
        kv = dt["kv_caches"]
        if _nz(kv, H) is not None:  # NZ caches, the ND host side
            attrs = {"kv_format": int(SEPARATE), "direction": "d2h", "cache_layout": "NZ", "num_layers": 1,
                     "aiv_num": 0}
            caches = [(_nz(kv, H), kv)] * 2
            if op == "multi_layer_kv_transfer":
                yield [((2, 1, T, H * NZ_D), kv), ((T,), S), caches], attrs
            else:
                yield [((1,), dt["block_ids"]), None, [((1, NZ_BS, 1, H, NZ_D), kv)] * 2, caches], attrs
    elif op in ("multi_layer_kv_transfer_quant", "multi_layer_block_transfer_quant"):
        # int8 caches with float32 scale caches: 8 heads BSND (32-byte scale rows), 2 heads BSND (8-byte rows,
        # DataCopyPad), BNSD (4-byte scale heads, DataCopyPad)
        for layout, heads in (("BSND", 8), ("BSND", 2), ("BNSD", 8)):
            geo = Geometry(SEPARATE, layout, 1, NB, BS, heads=heads, head_size=32)
            kv = dt["kv_caches"]
            caches = [(geo.plane_shape(p), kv) for p in range(geo.P)]
            sshape = (NB, heads, BS) if layout == "BNSD" else (NB, BS, heads)
            scales = [(sshape, "float32")] * geo.P
            attrs = {"kv_format": int(geo.fmt), "direction": "d2h", "cache_layout": layout, "num_layers": 1,
                     "aiv_num": 0}
            if op == "multi_layer_kv_transfer_quant":
                yield [((T * 2 * (geo.hidden[0] + 4 * heads),), kv), ((T,), S), caches, scales], attrs
            else:
                host = [(host_block_shape(geo, p, 1), kv) for p in range(geo.P)]
                shost = [((1, BS, 1, heads), "float32")] * geo.P
                yield [((1,), dt["block_ids"]), None, host, caches, shost, scales], attrs
        # NZ int8 caches with ND (BSND) scale caches: 8 heads (32-byte scale rows), 2 heads (DataCopyPad, A2/A3)
        for heads in (8, 2):
            kv = dt["kv_caches"]
            attrs = {"kv_format": int(SEPARATE), "direction": "d2h", "cache_layout": "NZ", "num_layers": 1,
                     "aiv_num": 0}
            caches = [(_nz(kv, heads), kv)] * 2
            scales = [((NB, NZ_BS, heads), "float32")] * 2
            if op == "multi_layer_kv_transfer_quant":
                yield [((T * 2 * (heads * NZ_D + 4 * heads),), kv), ((T,), S), caches, scales], attrs
            else:
                host = [((1, NZ_BS, 1, heads, NZ_D), kv)] * 2
                yield [((1,), dt["block_ids"]), None, host, caches, [((1, NZ_BS, 1, heads), "float32")] * 2, scales], \
                    attrs
    elif op in ("rerope_cached_keys", "rope_reshape_and_cache", "rope_reshape_and_cache_merged"):
        for layout, d, neox in itertools.product(LAYOUTS, HEAD_SIZES, (False, True)):
            rd = d - d % 2 if d > 3 else 2  # rotary dim: even, <= head size
            x, c = dt.get("key", dt.get("key_cache")), dt["cos_sin_cache"]
            p = dt.get("positions", dt.get("old_positions"))
            table = ((16, rd), c)
            attrs = {"is_neox_style": neox, "cache_layout": layout}
            if op == "rerope_cached_keys":
                yield [(_cache(layout, d), x), ((T,), S), ((T,), p), ((T,), p), table], attrs
                continue
            rows = [((T,), p), ((T, H, d), x), ((T, H, d), x), ((T, H, d), x), table]
            if op == "rope_reshape_and_cache":
                caches = [(_cache(layout, d), x), (_cache(layout, d), x)]
            else:
                caches = [(_cache(layout, d, merged=True), x)]
            yield rows + caches + [((T,), S)], attrs
        x = dt.get("key")
        if op != "rerope_cached_keys" and _nz(x, H) is not None:  # NZ caches; rotary dim 2: DataCopyPad table rows
            for rd, neox in itertools.product((NZ_D, 2), (False, True)):
                rows = [((T,), dt["positions"]), ((T, H, NZ_D), x), ((T, H, NZ_D), x), ((T, H, NZ_D), x),
                        ((16, rd), dt["cos_sin_cache"])]
                merged = op == "rope_reshape_and_cache_merged"
                caches = [(_nz(x, H, True), x)] if merged else [(_nz(x, H), x)] * 2
                yield rows + caches + [((T,), S)], {"is_neox_style": neox, "cache_layout": "NZ"}
    elif op == "rope_concat_and_cache_mla":
        for d, neox, weight in itertools.product(HEAD_SIZES, (False, True), (False, True)):
            x, c = dt["q_pe"], dt["cos_sin_cache"]
            rd = 32 if d == 32 else 2
            ins = [((T,), dt["positions"]), ((T, H, rd), x), ((T, rd), x), ((T, d), x), ((16, rd), c),
                   ((NB, BS, d), x), ((NB, BS, rd), x), ((T,), S),
                   ((d,), dt["kv_c_norm_weight"]) if weight else None]
            yield ins, {"is_neox_style": neox, "epsilon": 1e-6}
    elif op == "rope_concat_and_cache_mla_quant":
        # both styles, with and without the norm, static and dynamic scales (one per token and plane)
        for d, neox, weight, mode in itertools.product(HEAD_SIZES, (False, True), (False, True), ("static", "dynamic")):
            x, c, f = dt["q_pe"], dt["cos_sin_cache"], dt["kv_c_scale"]
            rd = 32 if d == 32 else 2
            sc = ((NB, BS, 1), f)
            scales = [((), f), ((), f), None, None, None, None] if mode == "static" else [None] * 4 + [sc, sc]
            ins = [((T,), dt["positions"]), ((T, H, rd), x), ((T, rd), x), ((T, d), x), ((16, rd), c),
                   ((NB, BS, d), dt["kv_c_cache"]), ((NB, BS, rd), dt["k_pe_cache"]), ((T,), S),
                   ((d,), dt["kv_c_norm_weight"]) if weight else None] + scales
            yield ins, {"is_neox_style": neox, "epsilon": 1e-6, "quant_mode": mode}
    else:
        raise AssertionError(f"tests/test_tiling_keys.py: no input builder for op {op!r}: add one")


def host_keys(op, soc):
    """Keys the op's host tiling sets on soc over all variants, and how many variants it refused."""
    keys, refused = set(), 0
    for dt in _rows(op, soc):
        for ins, attrs in _variants(op, dt):
            try:
                r = sim.tiling(op_type_of(op), ins, attrs, soc)
            except sim.EmulationError:
                refused += 1
                continue
            keys.add(int(r["tiling_key"]))
    return keys, refused


@pytest.mark.parametrize("op", OPS)
def test_host_keys_equal_kernel_keys_on_every_soc(op):
    for soc in SOCS:
        want = cch.declared_tiling_keys(op, ARCH_TARGET[sim.arch_of(soc)])
        assert want is not None, f"op_kernel/mskv_tiling_keys.h declares no {cch.keys_macro(op)}"
        assert len(want) == len(set(want)), f"{op}: a key declared twice for {soc}: {sorted(want)}"
        got, refused = host_keys(op, soc)
        assert got, f"{op} on {soc}: the tiling refused every variant"
        assert got - set(want) == set(), f"{op} on {soc}: host keys without a kernel branch {sorted(got - set(want))}"
        assert set(want) - got == set(), f"{op} on {soc}: kernel branches the host never selects {sorted(set(want) - got)}"
        if soc == "Ascend310P3":
            assert refused > 0  # unaligned rows: no DataCopyPad there


def test_declared_keys_are_decimal_literals_per_arch():
    """The declaration's keys as the preprocessor writes them: 310P lacks exactly the bf16 and pad keys."""
    a2 = cch.declared_tiling_keys("reshape_and_cache", "a2")
    p310 = cch.declared_tiling_keys("reshape_and_cache", "310p")
    ref = [l * 1000 + d * 100 + s * 10 + p for l in (0, 1) for d in (1, 2, 3, 4) for s in (0, 1) for p in (0, 1)]
    nz = [2000 + d * 100 + s * 10 for d in (1, 2, 4) for s in (0, 1)]  # NZ: no float32, no DataCopyPad
    assert sorted(a2) == sorted(ref + nz)
    assert sorted(p310) == sorted(k for k in ref + nz if k // 100 % 10 != 2 and k % 10 == 0)
    rope = cch.declared_tiling_keys("rope_concat_and_cache_mla", "a2")
    assert 12211 in rope and 2100 in rope and 2300 not in rope and 310 not in rope and len(rope) == 56


def test_preprocessed_key_reader_is_strict():
    keys, problems = cch.preprocessed_tiling_keys(
        "if ((g_tilingKey == (100))) f(); if ((g_tilingKey == (1100))) g();")
    assert (keys, problems) == ([100, 1100], [])
    keys, problems = cch.preprocessed_tiling_keys("if ((g_tilingKey == ((1) * 100 + 0))) f();")
    assert keys == [] and "not a decimal literal" in problems[0]
    keys, problems = cch.preprocessed_tiling_keys("if ((g_tilingKey == (0100))) f();")
    assert keys == [] and "leading 0" in problems[0]
    keys, problems = cch.preprocessed_tiling_keys("if ((g_tilingKey == (100 + x))) f();")
    assert keys == [] and "not a decimal literal" in problems[0]


def test_unknown_key_traps_in_the_kernel():
    """A key without a branch stops the core (AscendC::Trap; the emulation: rule TRAP) instead of a no-op:
    an undeclared key on A2, and a bfloat16 key on Ascend310P, whose branches are not compiled there."""
    spec_ins = [((T, H, 16), "float16")] * 2 + [((NB, BS, H, 16), "float16")] * 2 + [((T,), "int32")]
    r = sim.tiling("MskvReshapeAndCache", spec_ins, {"cache_layout": "BSND"}, "Ascend910B1")
    assert r["tiling_key"] == 100
    args = [np.zeros(s, np.float16) for s, _ in spec_ins[:4]] + [np.zeros(T, np.int32), np.zeros(1, np.int32)]
    sim.launch_kernel("mskv_reshape_and_cache", args, 1, tiling=r["tiling_bytes"], tiling_key=100,
                      soc="Ascend910B1")
    for soc, key in (("Ascend910B1", 999), ("Ascend910B1", 500), ("Ascend310P3", 200), ("Ascend310P3", 101)):
        with pytest.raises(sim.EmulationError, match=rf"tiling key {key}\b") as ei:
            sim.launch_kernel("mskv_reshape_and_cache", args, 1, tiling=r["tiling_bytes"], tiling_key=key, soc=soc)
        assert ei.value.rule == "TRAP"


def test_structure_check_refuses_a_hand_written_ladder(tmp_path):
    """tools/mskv_structure.py: a kernel entry with a literal TILING_KEY_IS(<key>) branch, or one that does
    not expand its op's declaration or has no failure branch, is reported."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mskv_structure as S

    spec = get_spec("copy_blocks")
    good = (ROOT / "op_kernel" / "copy_blocks.cpp").read_text()
    (tmp_path / "op_kernel").mkdir()
    for h in (ROOT / "op_kernel").glob("*.h"):
        (tmp_path / "op_kernel" / h.name).write_text(h.read_text())
    k = tmp_path / "op_kernel" / "copy_blocks.cpp"
    k.write_text(good)
    assert S._check_kernel(spec, tmp_path) == []
    k.write_text(good.replace("  MSKV_KEYS_COPY_BLOCKS(MSKV_BRANCH)\n",
                              "  MSKV_KEYS_COPY_BLOCKS(MSKV_BRANCH)\n  if (TILING_KEY_IS(100)) return;\n"))
    assert any("hand-written tiling-key branch" in l for l in S._check_kernel(spec, tmp_path))
    k.write_text(good.replace("MSKV_KEYS_COPY_BLOCKS(MSKV_BRANCH)", "MSKV_KEYS_CONCAT_AND_CACHE_MLA(MSKV_BRANCH)"))
    assert any("does not expand MSKV_KEYS_COPY_BLOCKS" in l for l in S._check_kernel(spec, tmp_path))
    k.write_text(good.replace("  MSKV_UNKNOWN_TILING_KEY();\n", ""))
    assert any("no MSKV_UNKNOWN_TILING_KEY()" in l for l in S._check_kernel(spec, tmp_path))


# ------------------------------------------------------------------------- the host's view of the declaration
_HOST_DRIVER = r"""
#include <cstdio>
#include "mskv_tiling_key_check.h"
// the key functions are the digits of their op's MSKV_KEYS_<OP>, most significant first
static_assert(mskv_keys::CopyKey(4, 1, true) == 411, "CopyKey");
static_assert(mskv_keys::LayoutCopyKey(true, 2, 0, true) == 1201, "LayoutCopyKey");
static_assert(mskv_keys::RopeKey(true, 2, 1, false, true) == 12101, "RopeKey");
static_assert(mskv_keys::RopeKey(false, 0, 3, false, false) == 300, "RopeKey");
static_assert(mskv_keys::RopeQuantKey(true, false, true, 2, true, false) == 101210, "RopeQuantKey");
static_assert(mskv_keys::RopeQuantKey(true, true, 2, 1, false, true) == 112101, "RopeQuantKey (MLA)");
int main() {
  for (const mskv_keys::DeclaredKeys& d : mskv_keys::kDeclaredKeys) {
    std::printf("%s %s a2", d.op, d.keySet);
    for (size_t i = 0; i < d.numA2; ++i) std::printf(" %llu", d.a2[i]);
    std::printf(" 310p");
    for (size_t i = 0; i < d.num310P; ++i) std::printf(" %llu", d.p310[i]);
    std::printf("\n");
  }
  const mskv_keys::DeclaredKeys* r = mskv_keys::FindDeclaredKeys("MskvReshapeAndCache");
  std::printf("check %d %d %d %d %d\n", r != nullptr && mskv_keys::IsDeclaredKey(*r, false, 1211),
              r != nullptr && mskv_keys::IsDeclaredKey(*r, true, 1211), r != nullptr && mskv_keys::IsDeclaredKey(*r, true, 1100),
              r != nullptr && mskv_keys::IsDeclaredKey(*r, false, 999), mskv_keys::FindDeclaredKeys("MskvNoSuchOp") == nullptr);
  return 0;
}
"""


@pytest.mark.parametrize("std", ["c++11", "c++17"])
def test_host_key_tables_are_the_kernel_declaration(tmp_path, std):
    """op_host/mskv_tiling_key_check.h expands every op's MSKV_KEYS_<OP> on the host for both targets (host
    C++11 and C++17, no warning): the tables are the keys the kernel header gives for each arch, every kernel
    has an entry, and the lookup answers per target."""
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    src = tmp_path / "driver.cpp"
    src.write_text(_HOST_DRIVER)
    exe = tmp_path / "driver"
    cmd = ["g++", f"-std={std}", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'op_host'}", str(src), "-o", str(exe)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[-1] == "check 1 0 1 0 1"
    tables = {}
    for line in out[:-1]:
        op_type, key_set, rest = line.split(" ", 2)
        a2, p310 = rest[len("a2"):].split(" 310p")
        tables[op_type] = (key_set, [int(k) for k in a2.split()], [int(k) for k in p310.split()])
    assert sorted(tables) == sorted(op_type_of(op) for op in OPS)
    for op in OPS:
        key_set, a2, p310 = tables[op_type_of(op)]
        assert key_set == cch.keys_macro(op)
        assert a2 == cch.declared_tiling_keys(op, "a2"), op
        assert p310 == cch.declared_tiling_keys(op, "310p"), op


@pytest.mark.slow
def test_finish_tiling_refuses_a_key_without_a_kernel_branch():
    """Every tiling ends with mskv_tiling::FinishTiling, which sets a key only if the op's declaration has a
    branch for it on the SoC: a test op (tests/sim_kernels/key_check) calls it with any op type and
    key. (A one-off build of the probe through ms_kvcache.sim.build: marked slow.)"""
    sim.build("mskv_key_probe", [ROOT / "tests" / "sim_kernels" / "key_check" / "mskv_key_probe.cpp"],
              include_dirs=[ROOT / "op_host"])

    def probe(op_type, key, soc):
        return sim.tiling("MskvKeyProbe", [((1,), "float16")], {"op": op_type, "key": key}, soc,
                          outputs=[((1,), "float16")])

    assert probe("MskvCopyBlocks", 211, "Ascend910B1")["tiling_key"] == 211
    assert probe("MskvReshapeAndCache", 1100, "Ascend310P3")["tiling_key"] == 1100
    for op_type, key, soc, msg in (
            ("MskvCopyBlocks", 211, "Ascend310P3", "tiling key 211 has no kernel branch on Ascend310P: MSKV_KEYS_COPY_BLOCKS"),
            ("MskvCopyBlocks", 999, "Ascend910B1", "tiling key 999 has no kernel branch on Atlas A2/A3"),
            ("MskvRopeConcatAndCacheMla", 2300, "Ascend910B3", "MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA"),
            ("MskvNoSuchOp", 100, "Ascend910B1", "no tiling keys are declared for this op")):
        with pytest.raises(sim.EmulationError, match=msg) as ei:
            probe(op_type, key, soc)
        assert ei.value.rule == "TILING_FAILED"
