"""Data movement of the AscendC multi-layer transfer kernels, from the AscendC emulation's accounting.

For multi_layer_kv_transfer (token granularity) and multi_layer_block_transfer (block granularity,
direct and staging modes), both directions, at Llama-3-8B shapes (32 layers, 8 KV heads x 128, bf16,
1024 tokens = 8 blocks of 128) and DeepSeek-V3 MLA shapes (61 layers, kv_lora_rank 512 + rope 64, bf16,
1024 tokens = 16 blocks of 64), prints per launch: GM bytes read + written against the minimum
(2 x payload + slot_mapping / block_ids bytes; staging mode moves every byte twice on the device by
design - host -> staging, staging -> cache - so its minimum is 4 x payload), cores used / available,
DataCopy(Pad) calls per core, peak UB bytes per core; rows ``int8+scales``: the same transfers of int8 caches
with their float32 scale caches (scale_caches=; minimum over the data and scale bytes). Target: GM traffic <= 1.05 x the minimum, every
core busy.

On Atlas A2 / A3 each row also has ``pred_gbps``: the payload over the time the emulation's DMA cost model
predicts for the launch (docs/emulation.md, "The cost model"), with the host side (``buffer`` /
``host_blocks``) in host memory read over PCIe (zero-copy). Rows ``HFK [bs, L, H, D] ...`` move the blocks of
HeteroFusedKernels' published A3 table (int8, one block, h2d) with ms_kvcache's block transfer - as K and V
planes of the same total bytes - in three modes: zero-copy, staged (aclrtMemcpyAsync into HBM, then the
kernel: HFK's fused mode, what the ascend backend does for unregistered host memory) and the kernel's own
staging mode; ``ref_gbps`` is HFK's published A3 figure of that mode (the staged one for staging).

The counts are exact counts of the emulated kernels; ``pred_gbps`` is a model's prediction, calibrated on
HFK's published table, not a measurement.

    ms-kvcache bench --ops transfer_sim   # or python scripts/bench_transfer_sim.py            # Ascend910B1, 1024 tokens
    ms-kvcache bench --ops transfer_sim   # or python scripts/bench_transfer_sim.py --all-socs # + Ascend910B3, Ascend910_9391, Ascend310P3 (fp16)
    ms-kvcache bench --ops transfer_sim   # or python scripts/bench_transfer_sim.py --quick    # 256 tokens, fewer layers (seconds)
"""
import argparse

import ml_dtypes
import numpy as np

SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TARGET_RATIO = 1.05
#: SoCs of the comparison with HeteroFusedKernels (one A2, one A3; --all-socs adds Ascend910B3)
HFK_SOCS = ("Ascend910B1", "Ascend910_9391")
#: HeteroFusedKernels pcieThrough, tests/README.md "KVCache Transfer": per-op GB/s of its host -> device
#: multi_layer_block_transfer on an Atlas A3 (Ascend910_9392, CANN 8.2.RC1, int8, 4 AIV) for one host block
#: [block_size, layers, heads, head_dim]: (zero-copy "PCIEThrough", staged "FusedMemcpyKernel").
HFK_A3 = {
    (1024, 32, 1, 128): (9.65, 15.50),
    (1024, 32, 8, 128): (26.52, 19.49),
    (1024, 64, 1, 128): (22.03, 20.92),
    (1024, 64, 8, 128): (34.11, 22.55),
}
HFK_MODES = ("zero-copy", "staged", "staging")


def _status():
    return np.zeros(1, dtype=np.int32)


def _fill(shape, dtype, seed):
    """Cheap non-constant data (the emulation copies bits; values do not matter for the counts)."""
    n = int(np.prod(shape))
    if dtype == "int8":
        return ((np.arange(n, dtype=np.int64) * 31 + seed) % 256 - 128).astype(np.int8).reshape(shape)
    return (np.arange(n, dtype=np.uint16) * 2654435761 % 65521 + seed).astype(np.uint16).view(NP[dtype]).reshape(shape)


def _modelled(sim, soc):
    """Whether the emulation's cost model has parameters for the SoC (Atlas A2 / A3)."""
    try:
        sim.cost_params(soc)
    except sim.EmulationError:
        return False
    return True


def _launch(sim, soc, op, arrays, attrs, host):
    """One launch; with the cost model where it has parameters (``host``: the arguments in host memory)."""
    if _modelled(sim, soc):
        return sim.launch(op, arrays, attrs=attrs, soc=soc, gm_copy="never", cost_model=True, host=host)
    return sim.launch(op, arrays, attrs=attrs, soc=soc, gm_copy="never")


def _predict(row, st, payload, extra_us=0.0):
    """Adds the cost model's prediction to a row: pred_us, pred_gbps (payload bytes over the predicted time)."""
    if "cost" in st:
        t = st["cost"]["time_us"] + extra_us
        row["pred_us"] = t
        row["pred_gbps"] = payload / (t * 1e3)
    return row


def _row(sim, soc, op, label, direction, mode, dtype, work, minimum, st):
    cores = int(sim.platform(soc)["aiv_cores"])
    used = int(st["cores_used"])
    copies = [a + b for a, b in zip(st["datacopy_calls_per_core"], st["datacopy_pad_calls_per_core"])][:used]
    total = int(st["gm_read_bytes"]) + int(st["gm_write_bytes"])
    ub = max(st["ub_bytes_per_core"]) if st["ub_bytes_per_core"] else 0
    return {
        # the ms-kvcache bench keys (ms_kvcache.bench.ROW_KEYS)
        "case": f"{label} {direction}" + ("" if mode == "-" else f" {mode}"),
        "tokens": int(work), "backend": "sim", "gm_bytes": total, "ub_bytes": ub,
        "copies_per_core": max(copies) if copies else 0,
        "op": op, "shape": label, "direction": direction, "mode": mode, "soc": soc, "dtype": dtype, "work": work,
        "gm_read_bytes": int(st["gm_read_bytes"]), "gm_write_bytes": int(st["gm_write_bytes"]),
        "gm_min_bytes": int(minimum), "gm_ratio": total / minimum if minimum else float("nan"),
        "datacopy_per_core_max": max(copies) if copies else 0,
        "datacopy_per_core_mean": float(np.mean(copies)) if copies else 0.0,
        "cores_used": used, "cores": cores,
        "ub_bytes_per_core": max(st["ub_bytes_per_core"]) if st["ub_bytes_per_core"] else 0,
        "ub_size": int(sim.platform(soc)["ub_size"]), "tiling_key": int(st["tiling_key"]),
    }


def _models(quick):
    L1, L2, T = (8, 12, 256) if quick else (32, 61, 1024)
    return [
        # label, kv_format, layers, plane (heads, head) list, block_size, tokens
        (f"Llama-3-8B L={L1} H=8 D=128", 2, L1, [(8, 128), (8, 128)], 128, T),
        (f"DeepSeek-V3 MLA L={L2} 512+64", 3, L2, [(1, 512), (1, 64)], 64, T),
    ]


def _caches(fmt, L, planes, nb, bs, dtype, layout):
    out = []
    for l in range(L):
        for p, (h, d) in enumerate(planes):
            if fmt == 3:
                shape = (nb, bs, d)
            else:
                shape = (nb, h, bs, d) if layout == "BNSD" else (nb, bs, h, d)
            out.append(_fill(shape, dtype, 7 * l + p))
    return out


def run(quick=False, socs=("Ascend910B1",)):
    """One dict per (op, model, direction, mode, SoC); keys as in ms_kvcache/bench/copy_ops_sim.py plus
    direction and mode."""
    from ms_kvcache import sim

    rows = []
    for soc in socs:
        dtype = "float16" if soc == "Ascend310P3" else "bfloat16"  # 310P has no bfloat16
        for label, fmt, L, planes, bs, T in _models(quick):
            item = 2
            hidden = [h * d for h, d in planes]
            payload = L * T * sum(hidden) * item
            nblk = T // bs
            nb = nblk + 4
            # ---- token granularity (BSND caches), a sequence's consecutive slots
            caches = _caches(fmt, L, planes, nb, bs, dtype, "BSND")
            slots = np.arange(2 * bs, 2 * bs + T, dtype=np.int64)
            buf = np.zeros((2, L, T, hidden[0]) if fmt == 2 else (L * T * sum(hidden),), NP[dtype])
            for direction in ("d2h", "h2d"):
                attrs = {"kv_format": fmt, "direction": direction, "cache_layout": "BSND", "num_layers": L,
                         "aiv_num": 0}
                st = _launch(sim, soc, "MskvMultiLayerKvTransfer", [buf, slots, caches, _status()], attrs, ["buffer"])
                rows.append(_predict(_row(sim, soc, "multi_layer_kv_transfer", label + " BSND", direction, "-", dtype,
                                          T, 2 * payload + slots.nbytes, st), st, payload))
            # ---- block granularity (BNSD for Llama, MLA planes), direct and staging
            layout = "BSND" if fmt == 3 else "BNSD"
            caches = _caches(fmt, L, planes, nb, bs, dtype, layout)
            ids = np.arange(1, 1 + nblk, dtype=np.int64)[::-1].copy()
            host = [np.zeros((nblk, bs, L, h, d) if fmt == 2 else (nblk, bs, L, h * d), NP[dtype]) for h, d in planes]
            staging = np.zeros(nblk * bs * L * sum(hidden), NP[dtype])
            for direction in ("d2h", "h2d"):
                attrs = {"kv_format": fmt, "direction": direction, "cache_layout": layout, "num_layers": L,
                         "aiv_num": 0}
                for mode, stg in (("direct", None), ("staging", staging)):
                    st = _launch(sim, soc, "MskvMultiLayerBlockTransfer", [ids, stg, host, caches, _status()], attrs,
                                 ["host_blocks"])
                    factor = 2 if stg is None else 4
                    rows.append(_predict(_row(sim, soc, "multi_layer_block_transfer", f"{label} {layout} bs={bs}",
                                              direction, mode, dtype, nblk, factor * payload + ids.nbytes, st),
                                         st, payload))
            rows += _quant_rows(sim, soc, label, fmt, L, planes, bs, T)
    for soc in [x for x in SOCS if x in HFK_SOCS or (x in socs and x != "Ascend310P3")]:
        rows += hfk_rows(soc)
    return rows


def hfk_case(shape, mode, soc):
    """ms_kvcache's block transfer moving the block of HeteroFusedKernels' table row ``shape`` = [bs, L, H, D]
    (int8, one block, h2d, BNSD caches) as K and V planes of the same total bytes (H / 2 heads each; for H = 1
    head_dim / 2), in ``mode`` ("zero-copy", "staged" or "staging"). Returns (payload bytes, launch stats,
    predicted us); "staged" adds the cost model's aclrtMemcpyAsync of the payload."""
    from ms_kvcache import sim

    bs, L, H, D = shape
    heads, hd = (H // 2, D) if H > 1 else (1, D // 2)
    host = [_fill((1, bs, L, heads, hd), "int8", p) for p in range(2)]
    caches = [np.zeros((2, heads, bs, hd), np.int8) for _ in range(2 * L)]
    ids = np.array([1], np.int32)
    payload = sum(h.nbytes for h in host)
    staging = np.zeros(payload, np.int8) if mode == "staging" else None
    attrs = {"kv_format": 2, "direction": "h2d", "cache_layout": "BNSD", "num_layers": L, "aiv_num": 0}
    st = sim.launch("MskvMultiLayerBlockTransfer", [ids, staging, host, caches, _status()], attrs=attrs, soc=soc,
                    gm_copy="never", cost_model=True, host=[] if mode == "staged" else ["host_blocks"])
    t = st["cost"]["time_us"] + (sim.cost_memcpy_us(payload, soc) if mode == "staged" else 0.0)
    return payload, st, t


def hfk_rows(soc):
    """The rows ``HFK [bs, L, H, D] <mode>`` of one SoC (see the module docstring)."""
    from ms_kvcache import sim

    rows = []
    for shape, ref in HFK_A3.items():
        for mode in HFK_MODES:
            payload, st, t = hfk_case(shape, mode, soc)
            minimum = (4 if mode == "staging" else 2) * payload + 4
            row = _row(sim, soc, "multi_layer_block_transfer", f"HFK {list(shape)} int8 BNSD", "h2d", mode, "int8",
                       1, minimum, st)
            row["pred_us"] = t
            row["pred_gbps"] = payload / (t * 1e3)
            row["ref_gbps"] = ref[1] if mode != "zero-copy" else ref[0]
            rows.append(row)
    return rows


def _quant_rows(sim, soc, label, fmt, L, planes, bs, T):
    """The same transfers of int8 caches with their float32 scale caches (one per token-head, MLA one per
    token; rows ``+scales``): the scale planes are extra planes of 4 * heads-byte rows. Ascend310P only where
    every row is a multiple of 32 bytes (the BSND token transfer of the 8-head model)."""
    rows = []
    nblk = T // bs
    nb = nblk + 4
    heads = [1 if fmt == 3 else h for h, _ in planes]
    payload = L * T * (sum(h * d for h, d in planes) + 4 * sum(heads))
    for layout in ("BSND",) if fmt == 3 else ("BSND", "BNSD"):
        if soc == "Ascend310P3" and (fmt == 3 or layout == "BNSD"):
            continue  # 4-byte scale rows need DataCopyPad, which 310P lacks (a tiling error)
        bnsd = layout == "BNSD"
        caches = _caches(fmt, L, planes, nb, bs, "int8", layout)
        sshape = [(nb, h, bs) if bnsd else (nb, bs, h) for h in heads]
        scales = [np.ones(sshape[p], np.float32) for _ in range(L) for p in range(len(planes))]
        attrs = {"kv_format": fmt, "cache_layout": layout, "num_layers": L, "aiv_num": 0}
        name = f"{label} {layout} int8+scales"
        if not bnsd:
            slots = np.arange(2 * bs, 2 * bs + T, dtype=np.int64)
            buf = np.zeros(payload, np.int8)
            for direction in ("d2h", "h2d"):
                st = _launch(sim, soc, "MskvMultiLayerKvTransferQuant", [buf, slots, caches, scales, _status()],
                             dict(attrs, direction=direction), ["buffer"])
                rows.append(_predict(_row(sim, soc, "multi_layer_kv_transfer", name, direction, "-", "int8", T,
                                          2 * payload + slots.nbytes, st), st, payload))
        if fmt == 2 and not bnsd:
            continue  # block granularity: BNSD for the GQA model, as above
        ids = np.arange(1, 1 + nblk, dtype=np.int64)[::-1].copy()
        host = [np.zeros((nblk, bs, L, h, d) if fmt == 2 else (nblk, bs, L, h * d), np.int8) for h, d in planes]
        shost = [np.zeros((nblk, bs, L, h), np.float32) for h in heads]
        staging = np.zeros(payload, np.int8)
        for direction in ("d2h", "h2d"):
            for mode, stg in (("direct", None), ("staging", staging)):
                st = _launch(sim, soc, "MskvMultiLayerBlockTransferQuant",
                             [ids, stg, host, caches, shost, scales, _status()], dict(attrs, direction=direction),
                             ["host_blocks", "scale_host_blocks"])
                rows.append(_predict(_row(sim, soc, "multi_layer_block_transfer", f"{name} bs={bs}", direction, mode,
                                          "int8", nblk, (2 if stg is None else 4) * payload + ids.nbytes, st),
                                     st, payload))
    return rows


def _print(rows):
    hdr = (f"{'op':<27} {'shape':<38} {'dir':<4} {'mode':<9} {'soc':<14} {'work':>5} {'GM MB':>8} {'min MB':>8} "
           f"{'ratio':>6} {'copies/core max':>15} {'mean':>7} {'cores':>7} {'UB KiB':>7} {'pred GB/s':>9} "
           f"{'HFK A3':>7}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        total = (r["gm_read_bytes"] + r["gm_write_bytes"]) / 1e6
        pred = f"{r['pred_gbps']:>9.2f}" if "pred_gbps" in r else f"{'-':>9}"
        ref = f"{r['ref_gbps']:>7.2f}" if "ref_gbps" in r else ""
        print(f"{r['op']:<27} {r['shape']:<38} {r['direction']:<4} {r['mode']:<9} {r['soc']:<14} {r['work']:>5} "
              f"{total:>8.2f} {r['gm_min_bytes'] / 1e6:>8.2f} {r['gm_ratio']:>6.3f} {r['datacopy_per_core_max']:>15} "
              f"{r['datacopy_per_core_mean']:>7.1f} {r['cores_used']:>3}/{r['cores']:<3} "
              f"{r['ub_bytes_per_core'] / 1024:>7.1f} {pred} {ref}")
    worst = max(r["gm_ratio"] for r in rows)
    idle = [r for r in rows if r["cores_used"] < r["cores"]]
    print(f"\nworst GM traffic / minimum: {worst:.4f} (target <= {TARGET_RATIO}): "
          f"{'met' if worst <= TARGET_RATIO else 'NOT met'}")
    print(f"launches leaving cores idle: {len(idle)}"
          + "".join(f"\n  {r['op']} {r['shape']} {r['direction']} {r['mode']} {r['soc']}: "
                    f"{r['cores_used']}/{r['cores']}" for r in idle))
    hfk = [r for r in rows if "ref_gbps" in r]
    behind = [r for r in hfk if r["pred_gbps"] < r["ref_gbps"]]
    if hfk:
        print(f"HFK rows predicted below HeteroFusedKernels' published A3 figure: {len(behind)} of {len(hfk)}"
              + "".join(f"\n  {r['shape']} {r['mode']} {r['soc']}: {r['pred_gbps']:.2f} < {r['ref_gbps']}"
                        for r in behind))
    print("(counts from the AscendC emulation, not hardware measurements; work = tokens or blocks; pred GB/s: the "
          "emulation's cost model with the host side in host memory (zero-copy), a model calibrated on "
          "HeteroFusedKernels' published A3 table, not a measurement)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 tokens, 8 / 12 layers")
    ap.add_argument("--all-socs", action="store_true", help="every emulated SoC (310P3 in float16)")
    args = ap.parse_args(argv)
    _print(run(quick=args.quick, socs=SOCS if args.all_socs else SOCS[:1]))


if __name__ == "__main__":
    main()
