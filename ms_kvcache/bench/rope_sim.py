"""Data movement of the fused RoPE-write AscendC kernels, from the AscendC emulation's accounting.

For rope_reshape_and_cache (BSND, BNSD; and with int8 caches, static and dynamic scales, T <= 512),
rope_reshape_and_cache_merged and rerope_cached_keys at
Llama-3-8B shapes (32 query heads, 8 KV heads x 128, bf16, block_size 128, fp32 cos_sin_cache, NeoX) and
rope_concat_and_cache_mla at DeepSeek-V3 shapes (128 q_pe heads x 64, kv_lora_rank 512 with RMSNorm,
bf16, block_size 64, GPT-J; and with int8 caches, static and dynamic scales, T <= 512), T = 4096 tokens, on every target SoC (Ascend310P3: float16), prints per
call: GM bytes read + written against the minimum, DataCopy(Pad) calls per core (max / mean), vector
instructions per core, cores used / cores available, UB bytes used per core, tokens per batch.

Minimum GM bytes: every rotated tensor read and written once (q, k: all T rows), the value / kv_c rows
read once and both cache rows written once per cached token, one cos_sin_cache row per token (two for
rerope), the index tensors, the RMSNorm weight once. The kernels read the norm weight once per core and
the value rows of a whole batch when any of its tokens is cached; everything else is at the minimum.

These are counts of the emulated kernels (bytes moved, instructions issued), not hardware timings.

    ms-kvcache bench --ops rope_sim   # or python scripts/bench_rope_sim.py            # all SoCs, T = 4096 (a few minutes: the emulation runs
                                                # every vector instruction element by element)
    ms-kvcache bench --ops rope_sim   # or python scripts/bench_rope_sim.py --quick    # Ascend910B1 only, T = 512
"""
import argparse

import ml_dtypes
import numpy as np

SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _rand(rng, shape, dtype):
    return rng.standard_normal(size=shape).astype(np.float32).astype(NP[dtype])


def _table(max_position, rd):
    inv = 10000.0 ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)
    ang = np.outer(np.arange(max_position, dtype=np.float64), inv)
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)


def _common(soc, T, rot_dim, bs, seed):
    """What every row builds: the SoC's data dtype, the position range, the block count, the cos_sin_cache,
    T positions and T distinct slots (their generators seeded ``seed`` and ``seed + 1``)."""
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    maxp = 2 * T
    nb = T // bs + 8
    positions = np.random.default_rng(seed).integers(0, maxp, T).astype(np.int64)
    slots = np.random.default_rng(seed + 1).permutation(nb * bs)[:T].astype(np.int64)
    return dtype, maxp, nb, _table(maxp, rot_dim), positions, slots


def _scale_inputs(mode, scale_shape):
    """The six scale inputs of a quantizing write: static per-tensor (0.02, 0.03), or two dynamic scale
    caches of ``scale_shape``; absent ones empty."""
    e = np.zeros((0,), np.float32)
    if mode == "static":
        return [np.array(0.02, np.float32), np.array(0.03, np.float32), e, e, e, e]
    return [e, e, e, e, np.zeros(scale_shape, np.float32), np.zeros(scale_shape, np.float32)]


def _row(sim, soc, op, label, dtype, work, minimum, st):
    cores = int(sim.platform(soc)["aiv_cores"])
    used = int(st["cores_used"])
    copies = [a + b for a, b in zip(st["datacopy_calls_per_core"], st["datacopy_pad_calls_per_core"])][:used]
    vec = list(st.get("vector_ops_per_core", []))[:used]
    total = int(st["gm_read_bytes"]) + int(st["gm_write_bytes"])
    ub = max(st["ub_bytes_per_core"]) if st["ub_bytes_per_core"] else 0
    return {
        # the ms-kvcache bench keys (ms_kvcache.bench.ROW_KEYS)
        "case": label,
        "tokens": int(work), "backend": "sim", "gm_bytes": total, "ub_bytes": ub,
        "copies_per_core": max(copies) if copies else 0,
        "op": op, "shape": label, "soc": soc, "dtype": dtype, "work": work,
        "gm_read_bytes": int(st["gm_read_bytes"]), "gm_write_bytes": int(st["gm_write_bytes"]),
        "gm_min_bytes": int(minimum), "gm_ratio": total / minimum if minimum else float("nan"),
        "datacopy_per_core_max": max(copies) if copies else 0,
        "datacopy_per_core_mean": float(np.mean(copies)) if copies else 0.0,
        "vector_ops_per_core_max": max(vec) if vec else 0,
        "cores_used": used, "cores": cores,
        "ub_bytes_per_core": max(st["ub_bytes_per_core"]) if st["ub_bytes_per_core"] else 0,
        "ub_size": int(sim.platform(soc)["ub_size"]), "tiling_key": int(st["tiling_key"]),
        "batch": int(st["tiling_fields"].get("batch", st["tiling_fields"].get("rope.batch", 0))),
    }


def _llama(sim, soc, T, rng):
    item = 2
    Hq, Hk, D, bs = 32, 8, 128, 128
    dtype, maxp, nb, table, positions, slots = _common(soc, T, D, bs, 1)
    q, k, v = _rand(rng, (T, Hq, D), dtype), _rand(rng, (T, Hk, D), dtype), _rand(rng, (T, Hk, D), dtype)
    qo, ko = np.zeros_like(q), np.zeros_like(k)
    minimum = (2 * (q.nbytes + k.nbytes) + v.nbytes + 2 * T * Hk * D * item + T * table[0].nbytes
               + positions.nbytes + slots.nbytes)
    label = "Llama-3-8B Hq=32 Hk=8 D=128 bs=128"
    rows = []
    for layout in ("BSND", "BNSD"):
        shape = (nb, bs, Hk, D) if layout == "BSND" else (nb, Hk, bs, D)
        kc, vc = np.zeros(shape, NP[dtype]), np.zeros(shape, NP[dtype])
        st = sim.launch("MskvRopeReshapeAndCache", [positions, q, k, v, table, kc, vc, slots, qo, ko],
                        attrs={"is_neox_style": True, "cache_layout": layout}, soc=soc, gm_copy="never")
        rows.append(_row(sim, soc, "rope_reshape_and_cache", f"{label} {layout}", dtype, T, minimum, st))
    kv = np.zeros((2, nb, bs, Hk, D), NP[dtype])
    st = sim.launch("MskvRopeReshapeAndCacheMerged", [positions, q, k, v, table, kv, slots, qo, ko],
                    attrs={"is_neox_style": True, "cache_layout": "BSND"}, soc=soc, gm_copy="never")
    rows.append(_row(sim, soc, "rope_reshape_and_cache_merged", f"{label} BSND", dtype, T, minimum, st))
    # rerope of the T cached keys to shifted positions
    new = (positions + 17) % maxp
    kc = _rand(rng, (nb, bs, Hk, D), dtype)
    st = sim.launch("MskvReropeCachedKeys", [kc, slots, positions, new, table, np.zeros(1, np.int32)],
                    attrs={"is_neox_style": True, "cache_layout": "BSND"}, soc=soc, gm_copy="never")
    rr_min = 2 * T * Hk * D * item + 2 * T * table[0].nbytes + slots.nbytes + positions.nbytes + new.nbytes
    rows.append(_row(sim, soc, "rerope_cached_keys", f"{label} BSND", dtype, T, rr_min, st))
    return rows


#: rope_reshape_and_cache_quant rows use at most this many tokens: the emulation computes every vector
#: instruction element by element; the ratio does not depend on T once every core has tokens.
QUANT_TOKENS = 512


def _llama_quant(sim, soc, T, rng):
    """rope_reshape_and_cache with int8 caches (MskvRopeReshapeAndCacheQuant, BSND): static per-tensor and
    dynamic per-token scales. Minimum: q, k read and written once, the value rows read once and their codes
    (and dynamic scales) written once per cached token, one table row per token, positions and slots, the
    static scales once per core that uses them."""
    T = min(T, QUANT_TOKENS)
    Hq, Hk, D, bs = 32, 8, 128, 128
    dtype, maxp, nb, table, positions, slots = _common(soc, T, D, bs, 5)
    q, k, v = _rand(rng, (T, Hq, D), dtype), _rand(rng, (T, Hk, D), dtype), _rand(rng, (T, Hk, D), dtype)
    rows = []
    for mode in ("static", "dynamic"):
        kc, vc = np.zeros((nb, bs, Hk, D), np.int8), np.zeros((nb, bs, Hk, D), np.int8)
        sc = _scale_inputs(mode, (nb, bs, Hk, 1))
        qo, ko = np.zeros_like(q), np.zeros_like(k)
        st = sim.launch("MskvRopeReshapeAndCacheQuant", [positions, q, k, v, table, kc, vc, slots] + sc + [qo, ko],
                        attrs={"is_neox_style": True, "cache_layout": "BSND", "quant_mode": mode}, soc=soc,
                        gm_copy="never")
        minimum = (2 * (q.nbytes + k.nbytes) + v.nbytes + 2 * T * Hk * D + T * table[0].nbytes + positions.nbytes
                   + slots.nbytes + (2 * T * Hk * 4 if mode == "dynamic" else 8 * int(st["cores_used"])))
        rows.append(_row(sim, soc, "rope_reshape_and_cache", f"Llama-3-8B Hq=32 Hk=8 D=128 bs=128 BSND -> int8, {mode} "
                         f"(MskvRopeReshapeAndCacheQuant)", dtype, T, minimum, st))
    return rows


def _mla(sim, soc, T, rng):
    item = 2
    Hq, R, L, bs = 128, 64, 512, 64
    dtype, maxp, nb, table, positions, slots = _common(soc, T, R, bs, 3)
    q, k, kvc = _rand(rng, (T, Hq, R), dtype), _rand(rng, (T, R), dtype), _rand(rng, (T, L), dtype)
    w = np.ones(L, np.float32)
    outs = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(kvc)]
    a, b = np.zeros((nb, bs, L), NP[dtype]), np.zeros((nb, bs, R), NP[dtype])
    st = sim.launch("MskvRopeConcatAndCacheMla", [positions, q, k, kvc, table, a, b, slots, w, *outs],
                    attrs={"is_neox_style": False, "epsilon": 1e-6}, soc=soc, gm_copy="never")
    minimum = (2 * (q.nbytes + k.nbytes + kvc.nbytes) + T * (L + R) * item + T * table[0].nbytes
               + positions.nbytes + slots.nbytes + w.nbytes)
    return [_row(sim, soc, "rope_concat_and_cache_mla", "DeepSeek-V3 Hq=128 R=64 L=512 norm bs=64", dtype, T,
                 minimum, st)]


def _mla_quant(sim, soc, T, rng):
    """rope_concat_and_cache_mla with int8 caches (MskvRopeConcatAndCacheMlaQuant, DeepSeek-V3 shapes as
    _mla): static per-tensor and (not on Ascend310P) dynamic per-token scales, one per token and plane.
    Minimum: q_pe, k_pe, kv_c read and their outputs written once, one int8 code per element of both cache
    rows per cached token (and its two dynamic scales), one table row per token, positions, slots, the
    RMSNorm weight once, the static scales once per core that uses them."""
    T = min(T, QUANT_TOKENS)
    Hq, R, L, bs = 128, 64, 512, 64
    dtype, maxp, nb, table, positions, slots = _common(soc, T, R, bs, 7)
    q, k, kvc = _rand(rng, (T, Hq, R), dtype), _rand(rng, (T, R), dtype), _rand(rng, (T, L), dtype)
    w = np.ones(L, np.float32)
    rows = []
    for mode in ("static",) if soc == "Ascend310P3" else ("static", "dynamic"):
        a, b = np.zeros((nb, bs, L), np.int8), np.zeros((nb, bs, R), np.int8)
        sc = _scale_inputs(mode, (nb, bs, 1))
        outs = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(kvc)]
        st = sim.launch("MskvRopeConcatAndCacheMlaQuant", [positions, q, k, kvc, table, a, b, slots, w] + sc + outs,
                        attrs={"is_neox_style": False, "epsilon": 1e-6, "quant_mode": mode}, soc=soc, gm_copy="never")
        minimum = (2 * (q.nbytes + k.nbytes + kvc.nbytes) + T * (L + R) + T * table[0].nbytes + positions.nbytes
                   + slots.nbytes + w.nbytes + (2 * T * 4 if mode == "dynamic" else 8 * int(st["cores_used"])))
        rows.append(_row(sim, soc, "rope_concat_and_cache_mla", f"DeepSeek-V3 Hq=128 R=64 L=512 norm bs=64 -> int8, "
                         f"{mode} (MskvRopeConcatAndCacheMlaQuant)", dtype, T, minimum, st))
    return rows


def run(quick=False):
    """Launch every RoPE-write op through the emulation and return one dict per (op, shape, SoC):
    op, shape, soc, dtype, work (tokens / entries), gm_read_bytes, gm_write_bytes, gm_min_bytes, gm_ratio,
    datacopy_per_core_max / _mean, vector_ops_per_core_max, cores_used, cores, ub_bytes_per_core, ub_size,
    tiling_key, batch.

    Args:
        quick (bool): Ascend910B1 only and T = 512 (a few seconds).
    """
    from ms_kvcache import sim

    rng = np.random.default_rng(0)
    T = 512 if quick else 4096
    rows = []
    for soc in (SOCS[:1] if quick else SOCS):
        rows += _llama(sim, soc, T, rng)
        rows += _llama_quant(sim, soc, T, rng)
        rows += _mla(sim, soc, T, rng)
        rows += _mla_quant(sim, soc, T, rng)
    return rows


def _print(rows):
    hdr = (f"{'op':<30} {'shape':<44} {'soc':<14} {'T':>5} {'GM MB':>8} {'min MB':>8} {'ratio':>6} "
           f"{'copies/core max':>15} {'mean':>7} {'vec/core':>8} {'cores':>7} {'UB KiB':>7} {'batch':>5}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        total = (r["gm_read_bytes"] + r["gm_write_bytes"]) / 1e6
        print(f"{r['op']:<30} {r['shape']:<44} {r['soc']:<14} {r['work']:>5} {total:>8.2f} "
              f"{r['gm_min_bytes'] / 1e6:>8.2f} {r['gm_ratio']:>6.3f} {r['datacopy_per_core_max']:>15} "
              f"{r['datacopy_per_core_mean']:>7.1f} {r['vector_ops_per_core_max']:>8} "
              f"{r['cores_used']:>3}/{r['cores']:<3} "
              f"{r['ub_bytes_per_core'] / 1024:>7.1f} {r['batch']:>5}")
    worst = max(r["gm_ratio"] for r in rows)
    idle = [r for r in rows if r["cores_used"] < r["cores"]]
    print(f"\nworst GM traffic / minimum: {worst:.4f}")
    print(f"launches leaving cores idle: {len(idle)}"
          + "".join(f"\n  {r['op']} {r['shape']} {r['soc']}: {r['cores_used']}/{r['cores']}" for r in idle))
    print("(counts from the AscendC emulation, not hardware measurements)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Ascend910B1 only, T = 512")
    args = ap.parse_args(argv)
    _print(run(quick=args.quick))


if __name__ == "__main__":
    main()
