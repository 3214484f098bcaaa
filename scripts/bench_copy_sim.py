#!/usr/bin/env python
"""Data movement of the AscendC copy kernels, from the AscendC emulation's accounting.

For reshape_and_cache, reshape_and_cache_merged, concat_and_cache_mla and copy_blocks at Llama-3-8B
shapes (8 KV heads x 128, bf16, block_size 128, T = 4096) and DeepSeek-V3 MLA shapes (kv_lora_rank
512, rope 64, bf16, block_size 64), on every target SoC, prints per call: GM bytes read + written
against the minimum (2 x payload + slot_mapping / block_mapping bytes), DataCopy(Pad) calls per core,
cores used / cores available, and UB bytes used per core. Targets: GM traffic <= 1.05 x the minimum;
every core busy at T >= 48.

These are counts of the emulated kernels (bytes moved, instructions issued), not hardware timings.

    python scripts/bench_copy_sim.py            # all SoCs, T in (48, 4096)
    python scripts/bench_copy_sim.py --quick    # Ascend910B1 only, T = 4096
"""
import argparse
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TARGET_RATIO = 1.05


def _rand(rng, shape, dtype):
    return rng.standard_normal(size=shape).astype(np.float32).astype(NP[dtype])


def _status():
    return np.zeros(1, dtype=np.int32)


def _row(sim, soc, op, label, dtype, work, minimum, st):
    cores = int(sim.platform(soc)["aiv_cores"])
    used = int(st["cores_used"])
    copies = [a + b for a, b in zip(st["datacopy_calls_per_core"], st["datacopy_pad_calls_per_core"])][:used]
    total = int(st["gm_read_bytes"]) + int(st["gm_write_bytes"])
    return {
        "op": op, "shape": label, "soc": soc, "dtype": dtype, "work": work, "backend": "sim",
        "case": f"{label} on {soc}", "tokens": work, "bytes": int(minimum),
        "note": f"emulation: GM traffic / minimum {total / minimum if minimum else float('nan'):.4f}, "
                f"{used}/{cores} cores",
        "gm_read_bytes": int(st["gm_read_bytes"]), "gm_write_bytes": int(st["gm_write_bytes"]),
        "gm_min_bytes": int(minimum), "gm_ratio": total / minimum if minimum else float("nan"),
        "datacopy_per_core_max": max(copies) if copies else 0,
        "datacopy_per_core_mean": float(np.mean(copies)) if copies else 0.0,
        "cores_used": used, "cores": cores,
        "ub_bytes_per_core": max(st["ub_bytes_per_core"]) if st["ub_bytes_per_core"] else 0,
        "ub_size": int(sim.platform(soc)["ub_size"]), "tiling_key": int(st["tiling_key"]),
    }


def _token_ops(sim, soc, T, rng):
    """reshape_and_cache (BSND, BNSD), reshape_and_cache_merged, concat_and_cache_mla for T tokens."""
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"  # 310P has no bfloat16
    item = 2
    rows = []
    H, D, bs = 8, 128, 128                       # Llama-3-8B: 8 KV heads x 128
    nb = T // bs + 8
    slots = np.random.default_rng(1).permutation(nb * bs)[:T].astype(np.int64)
    key, value = _rand(rng, (T, H, D), dtype), _rand(rng, (T, H, D), dtype)
    payload = 2 * T * H * D * item               # key + value rows
    for layout in ("BSND", "BNSD"):
        shape = (nb, bs, H, D) if layout == "BSND" else (nb, H, bs, D)
        kc, vc = np.zeros(shape, NP[dtype]), np.zeros(shape, NP[dtype])
        st = sim.launch("MskvReshapeAndCache", [key, value, kc, vc, slots, _status()], attrs={"cache_layout": layout},
                        soc=soc, gm_copy="never")
        rows.append(_row(sim, soc, "reshape_and_cache", f"Llama-3-8B {layout} H=8 D=128 bs=128", dtype, T,
                         2 * payload + slots.nbytes, st))
    kv = np.zeros((2, nb, bs, H, D), NP[dtype])
    st = sim.launch("MskvReshapeAndCacheMerged", [key, value, kv, slots, _status()], attrs={"cache_layout": "BSND"},
                    soc=soc, gm_copy="never")
    rows.append(_row(sim, soc, "reshape_and_cache_merged", "Llama-3-8B BSND H=8 D=128 bs=128", dtype, T,
                     2 * payload + slots.nbytes, st))
    R, P, bs = 512, 64, 64                       # DeepSeek-V3 MLA
    nb = T // bs + 8
    slots = np.random.default_rng(2).permutation(nb * bs)[:T].astype(np.int64)
    kv_c, k_pe = _rand(rng, (T, R), dtype), _rand(rng, (T, 1, P), dtype)
    a, b = np.zeros((nb, bs, R), NP[dtype]), np.zeros((nb, bs, P), NP[dtype])
    st = sim.launch("MskvConcatAndCacheMla", [kv_c, k_pe, a, b, slots, _status()], soc=soc, gm_copy="never")
    rows.append(_row(sim, soc, "concat_and_cache_mla", "DeepSeek-V3 R=512 P=64 bs=64", dtype, T,
                     2 * T * (R + P) * item + slots.nbytes, st))
    return rows


def _copy_blocks(sim, soc, rng, quick):
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    rows = []
    cases = [("Llama-3-8B 32 layers, block [128, 8, 128]", 32, (128, 8, 128), 16),
             ("DeepSeek-V3 MLA 61 layers, block [64, 576]", 61, (64, 576), 16),
             ("Llama-3-8B 1 layer, block [128, 8, 128]", 1, (128, 8, 128), 4)]
    if quick:
        cases = cases[:1]
    for label, L, block, n in cases:
        nb = 2 * n + 1
        kcs = [np.zeros((nb,) + block, NP[dtype]) for _ in range(L)]
        vcs = [np.zeros((nb,) + block, NP[dtype]) for _ in range(L)]
        perm = np.random.default_rng(3).permutation(nb)
        bm = np.stack([perm[:n], perm[n:2 * n]], axis=1).astype(np.int64)
        st = sim.launch("MskvCopyBlocks", [kcs, vcs, bm, _status()], soc=soc, gm_copy="never")
        block_bytes = int(np.prod(block)) * 2
        rows.append(_row(sim, soc, "copy_blocks", f"{label}, {n} pairs", dtype, n,
                         2 * 2 * L * n * block_bytes + bm.nbytes, st))
    return rows


def run(quick=False):
    """Launch every copy op through the emulation and return one dict per (op, shape, SoC, T):
    op, shape, soc, dtype, work (tokens or pairs), gm_read_bytes, gm_write_bytes, gm_min_bytes,
    gm_ratio, datacopy_per_core_max / _mean, cores_used, cores, ub_bytes_per_core, ub_size, tiling_key.

    Args:
        quick (bool): Ascend910B1 only and T = 4096 only (a few seconds).
    """
    from ms_kvcache import sim

    rng = np.random.default_rng(0)
    rows = []
    for soc in (SOCS[:1] if quick else SOCS):
        for T in ((4096,) if quick else (48, 4096)):
            rows += _token_ops(sim, soc, T, rng)
        rows += _copy_blocks(sim, soc, rng, quick)
    return rows


def _print(rows):
    hdr = (f"{'op':<25} {'shape':<52} {'soc':<14} {'work':>5} {'GM MB':>8} {'min MB':>8} {'ratio':>6} "
           f"{'copies/core max':>15} {'mean':>7} {'cores':>7} {'UB KiB':>7}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        total = (r["gm_read_bytes"] + r["gm_write_bytes"]) / 1e6
        print(f"{r['op']:<25} {r['shape']:<52} {r['soc']:<14} {r['work']:>5} {total:>8.2f} "
              f"{r['gm_min_bytes'] / 1e6:>8.2f} {r['gm_ratio']:>6.3f} {r['datacopy_per_core_max']:>15} "
              f"{r['datacopy_per_core_mean']:>7.1f} {r['cores_used']:>3}/{r['cores']:<3} "
              f"{r['ub_bytes_per_core'] / 1024:>7.1f}")
    worst = max(r["gm_ratio"] for r in rows)
    idle = [r for r in rows if r["work"] >= 48 and r["op"] != "copy_blocks" and r["cores_used"] < r["cores"]]
    idle += [r for r in rows if r["op"] == "copy_blocks" and r["cores_used"] < r["cores"]]
    print(f"\nworst GM traffic / minimum: {worst:.4f} (target <= {TARGET_RATIO}): "
          f"{'met' if worst <= TARGET_RATIO else 'NOT met'}")
    print(f"launches leaving cores idle (token ops at T >= 48, copy_blocks): {len(idle)}"
          + "".join(f"\n  {r['op']} {r['shape']} {r['soc']}: {r['cores_used']}/{r['cores']}" for r in idle))
    print("(counts from the AscendC emulation, not hardware measurements)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Ascend910B1 only, T = 4096")
    args = ap.parse_args(argv)
    _print(run(quick=args.quick))


if __name__ == "__main__":
    main()
