"""NZ caches (``cache_layout="NZ"``, FRACTAL_NZ): the cache writes and the multi-layer transfers on the cpu backend
against memcpy of the same bytes in the same run, and the AscendC kernels' data movement in the emulation.

cpu (CPU figures of the machine it runs on), Llama-3-8B rows (8 KV heads x 128, bfloat16, block_size 128; NZ caches
``[num_blocks, 64, 128, 16]``):

- reshape_and_cache into NZ caches, with prefill slots (a sequence's tokens fill its blocks in order, blocks in
  random order: runs of 128 consecutive slots) and scattered slots (random distinct slots), each timed call
  writing cold memory (K disjoint slot sets over >= 64 MiB, interleaved with the baselines exactly as
  ``ms_kvcache.bench.copy_ops``): memcpy of the same bytes (numpy, one thread) and numpy's fancy-index write of the
  same rows into an NZ array; ``ratio_memcpy`` = memcpy time / op time;
- for scattered slots also the hardware reference, a row of its own (op "reference"): a C scatter of the same
  32-byte pieces to the same addresses over the kernel threads, addresses precomputed, the better of plain and
  non-temporal stores (``_piece_scatter``); the op's row lists it as the baseline "C piece scatter" (time of
  the reference / time of the op);
- multi_layer_kv_transfer (token granularity, prefill slot mapping) and multi_layer_block_transfer (whole
  blocks) of 32 layers of SEPARATE_KV NZ caches and the ND host buffer / host blocks, d2h and h2d, against memcpy
  of the same bytes between host buffers (the better of the kernels' threads and numpy's one thread), interleaved
  as ``ms_kvcache.bench.transfer``.

emulation (counts, not hardware timings): the same NZ writes and transfers through the AscendC kernels on
Ascend310P3 (float16) and Ascend910B1 (bfloat16): GM bytes read + written against the minimum, DataCopy and
DataCopyPad calls per core, cores used.

    ms-kvcache bench --ops nz_layout [--quick]   # in the summary tables and plot
    python scripts/bench_nz_layout.py [--quick]  # this module's main

``run(quick=False) -> list[dict]`` is the entry point for ``ms-kvcache bench``.
"""
import argparse
import gc

import numpy as np

HEADS, HEAD_SIZE, BLOCK_SIZE, C0 = 8, 128, 128, 16
HIDDEN = HEADS * HEAD_SIZE
TOKENS = (1024, 4096, 16384)
QUICK_TOKENS = (256, 1024, 2048)
LAYERS = 32
TRANSFER_TOKENS = (1024, 2048)
QUICK_TRANSFER = (4, (256, 1024))  # layers, tokens
SIM_SOCS = ("Ascend310P3", "Ascend910B1")


# --------------------------------------------------------------------------- cpu: reshape_and_cache
def _prefill_sets(rng, num_blocks, k, t):
    """K disjoint slot sets of T tokens: whole blocks in random order, tokens consecutive inside a block."""
    per = -(-t // BLOCK_SIZE)
    blocks = rng.permutation(num_blocks)[:k * per].reshape(k, per)
    return (blocks[:, :, None] * BLOCK_SIZE + np.arange(BLOCK_SIZE)).reshape(k, -1)[:, :t].astype(np.int64)


def bench_reshape_and_cache(tokens, reps, rng):
    import mindspore as ms

    import ms_kvcache
    from ms_kvcache.bench import _util
    from ms_kvcache.bench import copy_ops as C

    rows = []
    row_bytes = HIDDEN * 2
    for t in tokens:
        nbytes = 2 * t * row_bytes
        k = C._rotations(nbytes)
        nb = -(-k * t // BLOCK_SIZE) + k
        num_slots = nb * BLOCK_SIZE
        shape = (nb, HIDDEN // C0, BLOCK_SIZE, C0)
        key_np, value_np = C._bf16((t, HEADS, HEAD_SIZE), rng), C._bf16((t, HEADS, HEAD_SIZE), rng)
        key, value = C._tensor(key_np, ms.bfloat16), C._tensor(value_np, ms.bfloat16)
        memcpy = C._kv_memcpy(key, value, k, num_slots, row_bytes, f"nz_md{t}")
        k16 = key_np.view(np.uint16).reshape(t, HIDDEN // C0, C0)
        v16 = value_np.view(np.uint16).reshape(t, HIDDEN // C0, C0)
        for pattern in ("prefill", "scattered"):
            sets = _prefill_sets(rng, nb, k, t) if pattern == "prefill" else C._slot_sets(rng, num_slots, k, t)
            slots = [ms.Tensor(s) for s in sets]
            kc, vc = C._param(shape, f"nz_kc{t}{pattern}"), C._param(shape, f"nz_vc{t}{pattern}")
            np_k = C._u8(C._param(shape, f"nz_nk{t}{pattern}")).view(np.uint16).reshape(shape)
            np_v = C._u8(C._param(shape, f"nz_nv{t}{pattern}")).view(np.uint16).reshape(shape)
            blk = [s // BLOCK_SIZE for s in sets]
            off = [s % BLOCK_SIZE for s in sets]

            def fancy(i, np_k=np_k, np_v=np_v, blk=blk, off=off):  # numpy's NZ write of the same rows
                np_k[blk[i], :, off[i], :] = k16
                np_v[blk[i], :, off[i], :] = v16

            def op(i, kc=kc, vc=vc, slots=slots):
                ms_kvcache.reshape_and_cache(key, value, kc, vc, slots[i], "NZ")

            if pattern == "prefill":
                best = C._time_rotated(k, nbytes, op, kc, memcpy, fancy, reps)
                ref = None
            else:
                ref_fns, ref_check = _piece_scatter(shape, sets, key_np, value_np, f"nz_r{t}")
                cases = {"op": (C._Cycle(k, op), lambda kc=kc: C._polite_sync(kc), C._inner_for(nbytes)),
                         "memcpy": (C._Cycle(k, memcpy), C._no_sync, C._inner_for(nbytes)),
                         "numpy": (C._Cycle(k, fancy), C._no_sync, C._inner_for(nbytes))}
                cases.update({name: (C._Cycle(k, fn), C._no_sync, C._inner_for(nbytes)) for name, fn in ref_fns.items()})
                best = C._timeit_interleaved(cases, reps + 2, warmup=k)
                ref = min(best[name] for name in ref_fns)
            got = C._u8(kc).view(np.uint16).reshape(shape)[blk[0], :, off[0], :]
            baselines = {"numpy": best["numpy"]} if ref is None else {"numpy": best["numpy"], "C piece scatter": ref}
            row = _util.make_row("reshape_and_cache", f"NZ llama3-8b bf16 bs128 {pattern} slots", t, nbytes,
                                 best["op"], memcpy_s=best["memcpy"], baselines=baselines,
                                 dtype="bfloat16", note="" if np.array_equal(got, k16) else "WRONG RESULT")
            row.update(layout="NZ", pattern=pattern, rotations=k, series=f"reshape_and_cache NZ {pattern}")
            rows.append(row)
            if ref is not None:  # the hardware reference as a row of its own (not an op)
                store = min(ref_fns, key=lambda name: best[name])
                row = _util.make_row("reference", f"C scatter of the same 32-byte pieces ({store} stores, kernel "
                                     "threads)", t, nbytes, ref, memcpy_s=best["memcpy"], dtype="bfloat16",
                                     note="" if ref_check() else "WRONG RESULT")
                row.update(layout="NZ", pattern=pattern, rotations=k, series="reference: C scatter of 32-byte pieces")
                rows.append(row)
            del kc, vc, np_k, np_v
        del memcpy
        gc.collect()
    return rows


def _piece_scatter(shape, sets, key_np, value_np, name):
    """The hardware reference of a scattered NZ write: ``ms_kvcache._cpu.scatter_pieces`` (C, the kernel threads)
    of the same 32-byte pieces of ``key`` and ``value`` to the same addresses of two NZ caches like the op's
    (``shape``, MindSpore memory), rotated over the same K slot sets, with each token's fractal-0 address worked
    out beforehand (numpy): what writing these half-line pieces costs without any of the kernel's work. Returns
    ({"non-temporal": fn(i), "plain": fn(i)}, check), check() comparing the key cache with the NZ index formula."""
    from ms_kvcache import _cpu
    from ms_kvcache.bench import copy_ops as C

    nb, fractals, bs, c0 = shape
    rk, rv = C._param(shape, name + "k"), C._param(shape, name + "v")
    dk, dv = C._u8(rk), C._u8(rv)
    src_k, src_v = key_np.view(np.uint8).reshape(len(key_np), -1), value_np.view(np.uint8).reshape(len(value_np), -1)
    piece = c0 * 2
    offsets = [((s // bs) * fractals * bs + s % bs) * piece for s in sets]  # fractal 0 of each slot, in bytes

    def fn(nontemporal):
        def run(i, keep=(rk, rv)):
            _cpu.scatter_pieces(dk, src_k, offsets[i], piece, bs * piece, nontemporal)
            _cpu.scatter_pieces(dv, src_v, offsets[i], piece, bs * piece, nontemporal)
        return run

    def check():
        s = sets[0]
        got = dk.view(np.uint16).reshape(shape)[s // bs, :, s % bs, :]
        return np.array_equal(got, key_np.view(np.uint16).reshape(len(s), fractals, c0))

    return {"non-temporal": fn(True), "plain": fn(False)}, check


# --------------------------------------------------------------------------- cpu: the transfers
def bench_transfers(layers, tokens, repeats):
    import mindspore as ms
    from mindspore import Tensor

    import ms_kvcache as mk
    from ms_kvcache import _cpu
    from ms_kvcache.bench import _util
    from ms_kvcache.bench import transfer as TR

    rows = []
    rng = np.random.default_rng(1)
    for t in tokens:
        nb = t // BLOCK_SIZE
        ids = rng.permutation(nb).astype(np.int64)
        slots = (ids[:, None] * BLOCK_SIZE + np.arange(BLOCK_SIZE)).reshape(-1)[:t]

        def cache():
            x = rng.integers(-2000, 2000, size=(nb, HIDDEN // C0, BLOCK_SIZE, C0), dtype=np.int16)
            return Tensor(x.view(TR._bf16()).astype(np.float32), ms.bfloat16)

        caches = [(cache(), cache()) for _ in range(layers)]
        buffer, pinned = TR._host(mk.transfer_buffer_shape("separate", layers, t, HIDDEN), ms.bfloat16)
        host = [TR._host((nb, BLOCK_SIZE, layers, HEADS, HEAD_SIZE), ms.bfloat16)[0] for _ in range(2)]
        nbytes = 2 * layers * t * HIDDEN * 2
        src = TR._alias(buffer)
        pairs = [(TR._alias(h), src[p * nbytes // 2:(p + 1) * nbytes // 2]) for p, h in enumerate(host)]

        def mem_multi():
            import time
            t0 = time.perf_counter()
            for d, s in pairs:
                _cpu.copy_buffers(d, s, 0)
            return time.perf_counter() - t0

        def mem_single():
            import time
            t0 = time.perf_counter()
            for d, s in pairs:
                np.copyto(d, s)
            return time.perf_counter() - t0

        slot_t, ids_t = Tensor(slots), Tensor(ids)
        for op in ("multi_layer_kv_transfer", "multi_layer_block_transfer"):
            for direction in ("d2h", "h2d"):
                if op == "multi_layer_kv_transfer":
                    def call(direction=direction):
                        mk.multi_layer_kv_transfer(buffer, caches, slot_t, kv_format="separate", direction=direction,
                                                   cache_layout="NZ")
                else:
                    def call(direction=direction):
                        mk.multi_layer_block_transfer(caches, host, ids_t, direction=direction, kv_format="separate",
                                                      cache_layout="NZ")
                secs, tm, ts = TR._best_interleaved([lambda: TR._timed_nospin(call), mem_multi, mem_single], repeats)
                mem = min(tm, ts)
                row = _util.make_row(op, f"NZ llama3-8b bf16 L{layers} {direction}", t, nbytes, secs, memcpy_s=mem,
                                     dtype="bfloat16", note="" if pinned else "unpinned host memory")
                row.update(layout="NZ", direction=direction, num_layers=layers,
                           series=f"{'token' if op == 'multi_layer_kv_transfer' else 'block'} NZ {direction}")
                rows.append(row)
        del caches, buffer, host, pairs, src
        gc.collect()
    return rows


# --------------------------------------------------------------------------- emulation
def _sim_rows(quick):
    from ms_kvcache import sim
    from ms_kvcache import nd_to_nz
    from ms_kvcache.bench.copy_ops_sim import _row, _status

    import ml_dtypes

    rows = []
    rng = np.random.default_rng(2)
    for soc in SIM_SOCS[:1] if quick else SIM_SOCS:
        dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
        npd = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
        T = 4096
        nb = T // BLOCK_SIZE + 8
        key = rng.standard_normal((T, HIDDEN)).astype(npd)
        value = rng.standard_normal((T, HIDDEN)).astype(npd)
        payload = 2 * T * HIDDEN * 2
        for pattern in ("prefill", "scattered"):
            slots = _prefill_sets(rng, nb, 1, T)[0] if pattern == "prefill" else \
                rng.permutation(nb * BLOCK_SIZE)[:T].astype(np.int64)
            kc = nd_to_nz(np.zeros((nb, BLOCK_SIZE, HIDDEN), npd))
            vc = kc.copy()
            st = sim.launch("MskvReshapeAndCache", [key, value, kc, vc, slots, _status()],
                            attrs={"cache_layout": "NZ"}, soc=soc, gm_copy="never")
            r = _row(sim, soc, "reshape_and_cache", f"NZ Llama-3-8B H=8 D=128 bs=128 {pattern}", dtype, T,
                     2 * payload + slots.nbytes, st)
            r["datacopy_pad_calls"] = int(sum(st["datacopy_pad_calls_per_core"]))
            rows.append(r)
        # the transfers: 4 layers, T tokens (prefill slots), NZ SEPARATE_KV
        L, Tt = 4, 1024
        nbt = Tt // BLOCK_SIZE
        ids = rng.permutation(nbt).astype(np.int64)
        slots = (ids[:, None] * BLOCK_SIZE + np.arange(BLOCK_SIZE)).reshape(-1)
        caches = [nd_to_nz(rng.standard_normal((nbt, BLOCK_SIZE, HIDDEN)).astype(npd)) for _ in range(2 * L)]
        attrs = {"kv_format": 2, "cache_layout": "NZ", "num_layers": L, "aiv_num": 0}
        data = 2 * L * Tt * HIDDEN * 2
        for direction in ("d2h", "h2d"):
            a = dict(attrs, direction=direction)
            buf = np.zeros((2, L, Tt, HIDDEN), npd)
            st = sim.launch("MskvMultiLayerKvTransfer", [buf, slots, caches, _status()], attrs=a, soc=soc,
                            gm_copy="never")
            r = _row(sim, soc, "multi_layer_kv_transfer", f"NZ Llama-3-8B L={L} bs=128 {direction}", dtype, Tt,
                     2 * data + slots.nbytes, st)
            r["datacopy_pad_calls"] = int(sum(st["datacopy_pad_calls_per_core"]))
            rows.append(r)
            host = [np.zeros((nbt, BLOCK_SIZE, L, HEADS, HEAD_SIZE), npd) for _ in range(2)]
            st = sim.launch("MskvMultiLayerBlockTransfer", [ids, None, host, caches, _status()], attrs=a, soc=soc,
                            gm_copy="never")
            r = _row(sim, soc, "multi_layer_block_transfer", f"NZ Llama-3-8B L={L} bs=128 {direction}", dtype, Tt,
                     2 * data + ids.nbytes, st)
            r["datacopy_pad_calls"] = int(sum(st["datacopy_pad_calls_per_core"]))
            rows.append(r)
    return rows


def run(quick=False):
    """Every row: the cpu timings (reshape_and_cache, the transfers) and the emulation counts.

    Args:
        quick (bool): reshape_and_cache at T = 256, 1024, 2048, the transfers with 4 layers at T = 256 and 1024,
            the emulation on Ascend310P3 only.
    """
    import mindspore as ms

    import ms_kvcache

    old_mode, old_backend = ms.get_context("mode"), ms_kvcache.get_backend()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms_kvcache.set_backend("cpu")
    try:
        rng = np.random.default_rng(0)
        rows = bench_reshape_and_cache(QUICK_TOKENS if quick else TOKENS, 3 if quick else 5, rng)
        layers, tokens = QUICK_TRANSFER if quick else (LAYERS, TRANSFER_TOKENS)
        rows += bench_transfers(layers, tokens, 2 if quick else 5)
        try:
            rows += _sim_rows(quick)
        except ImportError:  # a build without the emulation
            pass
        return rows
    finally:
        ms.set_context(mode=old_mode)
        ms_kvcache.set_backend(old_backend)


def _print(rows):
    cpu = [r for r in rows if r.get("backend") == "cpu"]
    print(f"{'op':<27} {'case':<44} {'T':>6} {'GB/s':>7} {'memcpy':>7} {'x memcpy':>8}")
    for r in cpu:
        print(f"{r['op']:<27} {r['case']:<44} {r['tokens']:>6} {r['gbps']:>7.2f} {r['memcpy_gbps']:>7.2f} "
              f"{r['ratio_memcpy']:>8.2f}{'  ' + r['note'] if r.get('note') else ''}")
    sim = [r for r in rows if r.get("backend") == "sim"]
    if sim:
        print(f"\n{'op':<27} {'case':<40} {'soc':<12} {'GM/min':>7} {'copies/core':>11} {'pad':>4} {'cores':>6}")
        for r in sim:
            print(f"{r['op']:<27} {r['shape']:<40} {r['soc']:<12} {r['gm_ratio']:>7.4f} "
                  f"{r['datacopy_per_core_max']:>11} {r['datacopy_pad_calls']:>4} {r['cores_used']:>3}/{r['cores']}")
        print("(CPU figures of this machine; emulation counts, not hardware measurements)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and layers, the emulation on Ascend310P3 only")
    args = ap.parse_args(argv)
    _print(run(quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
