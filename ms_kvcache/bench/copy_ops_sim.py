"""Data movement of the AscendC copy kernels, from the AscendC emulation's accounting.

For reshape_and_cache, reshape_and_cache_merged, reshape_and_cache_quant / concat_and_cache_mla_quant (float
rows into int8 caches; at most QUANT_TOKENS tokens), concat_and_cache_mla and copy_blocks at Llama-3-8B
shapes (8 KV heads x 128, bf16, block_size 128, T = 4096) and DeepSeek-V3 MLA shapes (kv_lora_rank
512, rope 64, bf16, block_size 64), on every target SoC, prints per call: GM bytes read + written
against the minimum (2 x payload + slot_mapping / block_mapping bytes), DataCopy(Pad) calls per core,
cores used / cores available, and UB bytes used per core. Targets: GM traffic <= 1.05 x the minimum;
every core busy at T >= 48.

swap_blocks has no AscendC kernel (on Ascend it is ACL runtime memcpys): its rows count the copies the
ascend backend plans and issues per call (``plan_block_copies`` / ``_copy_runs``, recorded by a stand-in
for the runtime): bytes read + written against the minimum and the number of ACL calls.

These are counts of the emulated kernels (bytes moved, instructions issued), not hardware timings.

    ms-kvcache bench --ops copy_ops_sim [--quick]   # in the summary table (emulation counts)
    python scripts/bench_copy_sim.py                # all SoCs, T in (48, 4096) (this module's main)
    python scripts/bench_copy_sim.py --quick        # Ascend910B1 only, T = 4096

``run(quick=False) -> list[dict]`` is the entry point for ``ms-kvcache bench``; the cpu backend's timings
of the same ops are ``ms_kvcache.bench.copy_ops``.
"""
import argparse

import ml_dtypes
import numpy as np

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
    rows += _quant_rows(sim, soc, min(T, QUANT_TOKENS), dtype)
    R, P, bs = 512, 64, 64                       # DeepSeek-V3 MLA
    nb = T // bs + 8
    slots = np.random.default_rng(2).permutation(nb * bs)[:T].astype(np.int64)
    kv_c, k_pe = _rand(rng, (T, R), dtype), _rand(rng, (T, 1, P), dtype)
    a, b = np.zeros((nb, bs, R), NP[dtype]), np.zeros((nb, bs, P), NP[dtype])
    st = sim.launch("MskvConcatAndCacheMla", [kv_c, k_pe, a, b, slots, _status()], soc=soc, gm_copy="never")
    rows.append(_row(sim, soc, "concat_and_cache_mla", "DeepSeek-V3 R=512 P=64 bs=64", dtype, T,
                     2 * T * (R + P) * item + slots.nbytes, st))
    rows += _mla_quant_rows(sim, soc, min(T, QUANT_TOKENS), dtype)
    return rows


def _mla_quant_rows(sim, soc, T, dtype):
    """concat_and_cache_mla_quant (DeepSeek-V3 rows into int8 MLA caches): static per-tensor and (not on
    Ascend310P) dynamic per-token scales; minimum as in _quant_rows."""
    rows = []
    R, P, bs = 512, 64, 64
    nb = T // bs + 8
    rng = np.random.default_rng(8)
    slots = rng.permutation(nb * bs)[:T].astype(np.int64)
    kv_c, k_pe = _rand(rng, (T, R), dtype), _rand(rng, (T, P), dtype)
    e = np.zeros((0,), np.float32)
    for mode in ("static",) if soc == "Ascend310P3" else ("static", "dynamic"):
        a, b = np.zeros((nb, bs, R), np.int8), np.zeros((nb, bs, P), np.int8)
        if mode == "static":
            sc = [np.array(0.02, np.float32), np.array(0.03, np.float32), e, e, e, e]
        else:
            sc = [e, e, e, e, np.zeros((nb, bs, 1), np.float32), np.zeros((nb, bs, 1), np.float32)]
        st = sim.launch("MskvConcatAndCacheMlaQuant", [kv_c, k_pe, a, b, slots] + sc + [_status()],
                        attrs={"quant_mode": mode}, soc=soc, gm_copy="never")
        minimum = T * (R + P) * (2 + 1) + slots.nbytes + (2 * T * 4 if mode == "dynamic" else 8 * int(st["cores_used"]))
        rows.append(_row(sim, soc, "concat_and_cache_mla", f"DeepSeek-V3 R=512 P=64 bs=64 -> int8, {mode} (MskvConcatAndCacheMlaQuant)",
                         dtype, T, minimum, st))
    return rows


#: reshape_and_cache_quant rows use at most this many tokens: the emulation computes every vector
#: instruction element by element (T = 4096 would take about a minute per row); the ratio does not depend on T
#: once every core has tokens.
QUANT_TOKENS = 512


def _quant_rows(sim, soc, T, dtype):
    """reshape_and_cache_quant (Llama-3-8B rows into int8 caches, BSND): static per-tensor and dynamic
    per-token scales. Minimum: the float rows of K and V read once, their codes (and dynamic scales)
    written once, slot_mapping read once, and the static scales read once per core that uses them."""
    rows = []
    H, D, bs = 8, 128, 128
    nb = T // bs + 8
    rng = np.random.default_rng(7)
    slots = rng.permutation(nb * bs)[:T].astype(np.int64)
    key, value = _rand(rng, (T, H, D), dtype), _rand(rng, (T, H, D), dtype)
    e = np.zeros((0,), np.float32)
    for mode in ("static", "dynamic"):
        kc, vc = np.zeros((nb, bs, H, D), np.int8), np.zeros((nb, bs, H, D), np.int8)
        if mode == "static":
            sc = [np.array(0.02, np.float32), np.array(0.03, np.float32), e, e, e, e]
        else:
            sc = [e, e, e, e, np.zeros((nb, bs, H, 1), np.float32), np.zeros((nb, bs, H, 1), np.float32)]
        st = sim.launch("MskvReshapeAndCacheQuant", [key, value, kc, vc, slots] + sc + [_status()],
                        attrs={"cache_layout": "BSND", "quant_mode": mode}, soc=soc, gm_copy="never")
        minimum = 2 * T * H * D * (2 + 1) + slots.nbytes + (2 * T * H * 4 if mode == "dynamic" else 8 * int(st["cores_used"]))
        rows.append(_row(sim, soc, "reshape_and_cache", f"Llama-3-8B BSND H=8 D=128 bs=128 -> int8, {mode} (MskvReshapeAndCacheQuant)",
                         dtype, T, minimum, st))
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


class _CountingAcl:
    """Records the ACL copy calls that ms_kvcache._backends.ascend._copy_runs issues (no runtime needed)."""

    has_batch = True

    def __init__(self):
        self.calls, self.bytes, self.copies = 0, 0, 0

    def memcpy(self, dst, dst_max, src, count, kind):
        self.calls, self.bytes, self.copies = self.calls + 1, self.bytes + count, self.copies + 1

    def memcpy_async(self, dst, dst_max, src, count, kind, stream):
        self.memcpy(dst, dst_max, src, count, kind)

    def memcpy_batch_async(self, dsts, dst_maxs, srcs, sizes, dst_loc, src_loc, stream):
        self.calls, self.bytes, self.copies = self.calls + 1, self.bytes + sum(sizes), self.copies + len(sizes)


def _swap_blocks(soc):
    """swap_blocks has no AscendC kernel on Ascend: the ascend backend plans ACL runtime copies
    (plan_block_copies: rows merged into runs of consecutive blocks) and issues them (_copy_runs: one
    aclrtMemcpyBatchAsync on A2/A3 when the rows are order-free, else one aclrtMemcpyAsync per run).
    Its per-call traffic and call counts, with a recording stand-in for the ACL runtime."""
    from ms_kvcache._backends import _acl, ascend

    rows = []
    block_bytes = 128 * 8 * 128 * 2  # Llama-3-8B block [128, 8, 128] bf16 (one layer, one plane)
    batch = ascend.compute_unit(soc) in ("ascend910b", "ascend910_93")
    for label, n, mapping in (("16 random blocks", 16, None), ("64 random blocks", 64, None),
                              ("64 blocks, 4 runs of 16", 64, "runs")):
        nb = 4 * n
        r = np.random.default_rng(4)
        if mapping is None:
            bm = np.stack([r.permutation(nb)[:n], r.permutation(nb)[:n]], 1).astype(np.int64)
        else:
            src = np.concatenate([np.arange(s, s + 16) for s in (96, 0, 64, 32)])  # 4 runs, first half
            bm = np.stack([src, src + nb // 2], 1).astype(np.int64)  # ... copied to the second half
        runs, order_free = ascend.plan_block_copies(bm, nb, nb)
        acl = _CountingAcl()
        ascend._copy_runs(acl, runs, src_ptr=0, src_bytes=nb * block_bytes, dst_ptr=1 << 40, dst_bytes=nb * block_bytes,
                          block_bytes=block_bytes, kind=_acl.MEMCPY_DEVICE_TO_HOST, stream=1, src_loc=None,
                          dst_loc=None, use_batch=batch and order_free)
        minimum = 2 * n * block_bytes + bm.nbytes
        total = 2 * acl.bytes + bm.nbytes  # each copied byte is read once and written once
        rows.append({
            "op": "swap_blocks", "shape": f"Llama-3-8B [128, 8, 128], {label}", "soc": soc,
            "dtype": "float16" if soc == "Ascend310P3" else "bfloat16", "work": n, "backend": "sim", "case": f"{label} on {soc}", "tokens": n, "bytes": int(minimum),
            "note": f"ascend backend's ACL copies (no AscendC kernel): traffic / minimum {total / minimum:.4f}, "
                    f"{acl.calls} ACL call(s), {acl.copies} copies",
            "gm_read_bytes": int(acl.bytes + bm.nbytes), "gm_write_bytes": int(acl.bytes), "gm_min_bytes": int(minimum),
            "gm_ratio": total / minimum, "acl_calls": acl.calls, "acl_copies": acl.copies, "runs": len(runs),
            # no kernel: no cores, UB or DataCopy calls (left out, not 0, so the table leaves them blank)
        })
    return rows


def run(quick=False):
    """Launch every copy op through the emulation and return one dict per (op, shape, SoC, T):
    op, shape, soc, dtype, work (tokens or pairs), gm_read_bytes, gm_write_bytes, gm_min_bytes,
    gm_ratio, datacopy_per_core_max / _mean, cores_used, cores, ub_bytes_per_core, ub_size, tiling_key
    (swap_blocks rows, ACL copies and no kernel: acl_calls, acl_copies, runs instead of the per-core keys).

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
        rows += _swap_blocks(soc)
    return rows


def _print(rows):
    hdr = (f"{'op':<25} {'shape':<52} {'soc':<14} {'work':>5} {'GM MB':>8} {'min MB':>8} {'ratio':>6} "
           f"{'copies/core max':>15} {'mean':>7} {'cores':>7} {'UB KiB':>7}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        total = (r["gm_read_bytes"] + r["gm_write_bytes"]) / 1e6
        head = (f"{r['op']:<25} {r['shape']:<52} {r['soc']:<14} {r['work']:>5} {total:>8.2f} "
                f"{r['gm_min_bytes'] / 1e6:>8.2f} {r['gm_ratio']:>6.3f} ")
        if "acl_calls" in r:  # swap_blocks: runtime copies, no kernel (no DataCopy, cores or UB)
            print(head + f"{'ACL calls ' + str(r['acl_calls']) + ', copies ' + str(r['acl_copies']):>39}")
            continue
        print(head + f"{r['datacopy_per_core_max']:>15} {r['datacopy_per_core_mean']:>7.1f} "
              f"{r['cores_used']:>3}/{r['cores']:<3} {r['ub_bytes_per_core'] / 1024:>7.1f}")
    worst = max(r["gm_ratio"] for r in rows)
    kernels = [r for r in rows if "acl_calls" not in r]  # swap_blocks rows: ACL copies, no cores
    idle = [r for r in kernels if r["work"] >= 48 and r["op"] != "copy_blocks" and r["cores_used"] < r["cores"]]
    idle += [r for r in kernels if r["op"] == "copy_blocks" and r["cores_used"] < r["cores"]]
    print(f"\nworst GM traffic / minimum: {worst:.4f} (target <= {TARGET_RATIO}): "
          f"{'met' if worst <= TARGET_RATIO else 'NOT met'}")
    print(f"launches leaving cores idle (token ops at T >= 48, copy_blocks): {len(idle)}"
          + "".join(f"\n  {r['op']} {r['shape']} {r['soc']}: {r['cores_used']}/{r['cores']}" for r in idle))
    print("(counts from the AscendC emulation, and for swap_blocks of the ascend backend's planned ACL copies; "
          "not hardware measurements)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Ascend910B1 only, T = 4096")
    args = ap.parse_args(argv)
    _print(run(quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
