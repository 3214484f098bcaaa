"""multi_layer_kv_transfer / multi_layer_block_transfer with NZ device caches and the usual ND host buffer.

An independent numpy model (the caches held as ND [num_blocks, block_size, hidden] arrays, the NZ caches their
nd_to_nz; rows gathered / scattered by slot or by block), for float16, bfloat16 (not on Ascend310P) and int8,
SEPARATE_KV and MERGED_KV, both directions, with and without scale caches (int8: float32 scale caches beside
the NZ caches are ND [num_blocks, block_size, H(, 1)]); slots with -1, padding, the last slot, runs of
consecutive slots, invalid block ids; PyNative and GRAPH_MODE; the cpu backend and the AscendC kernels in the
emulation on Ascend310P3 and Ascend910B1; the round trip ND -> NZ -> host -> NZ bit-exact; the refusals (MLA /
DSA, float32, C0, block_size, host block and scale cache shapes).
"""
import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, ParameterTuple, Tensor, nn

import ms_kvcache
from ms_kvcache import KVCacheFormat, nd_to_nz, transfer_buffer_shape

from conftest import assert_bits_equal, ms_mode, random_array, to_ms, to_np

MERGED, SEPARATE = KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV
TARGETS = ("cpu", "Ascend310P3", "Ascend910B1")
H, D = 8, 32  # 8 heads: the int8 scale rows are 32 bytes (Ascend310P's rule)


@pytest.fixture(params=TARGETS)
def target(request):
    if request.param == "cpu":
        ms_kvcache.set_backend("cpu")
        yield "cpu"
        return
    try:
        import ms_kvcache.sim as sim

        ms_kvcache.set_backend("sim")
    except (ImportError, RuntimeError, ValueError) as exc:
        pytest.skip(f"sim backend unavailable: {exc}")
    old = sim.get_soc()
    sim.set_soc(request.param)
    yield request.param
    sim.set_soc(old)
    ms_kvcache.set_backend("cpu")


def assert_ran(target, op_type):
    """On sim: the emulation's last launch was ``op_type`` on the target SoC with the NZ tiling key (layout 2)."""
    if target == "cpu":
        return
    import ms_kvcache.sim as sim

    st = sim.last_launch_stats()
    assert (st["op"], st["soc"], st["tiling_key"] // 1000 % 10) == (op_type, target, 2), (st["op"], st["soc"],
                                                                                         st["tiling_key"])


def dtypes_of(target):
    return ("float16", "int8") if target == "Ascend310P3" else ("bfloat16", "int8")


# --------------------------------------------------------------------------- the model
class Caches:
    """L layers x 2 planes of ND rows [nb, bs, hidden] (numpy), their NZ tensors, optional ND scale caches."""

    def __init__(self, rng, fmt, dtype, L=3, nb=5, bs=16, scales=False):
        self.fmt, self.dtype, self.L, self.nb, self.bs, self.hidden = fmt, dtype, L, nb, bs, H * D
        self.nd = [[random_array(rng, (nb, bs, self.hidden), dtype) for _ in range(2)] for _ in range(L)]
        self.sc = [[rng.uniform(0.01, 1, (nb, bs, H, 1)).astype(np.float32) for _ in range(2)] for _ in range(L)] \
            if scales else None

    def nz_arrays(self, nd=None):
        """Per layer: MERGED one [2, nb, F, bs, C0] array, else (key, value) NZ arrays."""
        nd = self.nd if nd is None else nd
        if self.fmt == MERGED:
            return [np.stack([nd_to_nz(x) for x in layer]) for layer in nd]
        return [tuple(nd_to_nz(x) for x in layer) for layer in nd]

    def flat_nz(self, nd=None):
        out = []
        for layer in self.nz_arrays(nd):
            out += [layer] if self.fmt == MERGED else list(layer)
        return out

    def flat_scales(self, sc=None):
        sc = self.sc if sc is None else sc
        return [x for layer in sc for x in layer]


def gather(c, slots):
    """d2h rows: [2, L, T, hidden] and (scales) [2, L, T, H]; zero rows for skipped slots."""
    slots = np.asarray(slots, np.int64)
    ok = (slots >= 0) & (slots < c.nb * c.bs)
    rows = np.zeros((2, c.L, len(slots), c.hidden), c.nd[0][0].dtype)
    sc = np.zeros((2, c.L, len(slots), H), np.float32)
    for l in range(c.L):
        for p in range(2):
            rows[p, l, ok] = c.nd[l][p].reshape(-1, c.hidden)[slots[ok]]
            if c.sc is not None:
                sc[p, l, ok] = c.sc[l][p].reshape(-1, H)[slots[ok]]
    return rows, sc


def scatter(c, rows, sc, slots):
    """h2d: copies of the ND rows (and scales) with token t's row at slots[t] >= 0."""
    slots = np.asarray(slots, np.int64)
    nd = [[x.copy() for x in layer] for layer in c.nd]
    scales = [[x.copy() for x in layer] for layer in c.sc] if c.sc is not None else None
    for t, s in enumerate(slots):
        if 0 <= s < c.nb * c.bs:
            for l in range(c.L):
                for p in range(2):
                    nd[l][p].reshape(-1, c.hidden)[s] = rows[p, l, t]
                    if scales is not None:
                        scales[l][p].reshape(-1, H)[s] = sc[p, l, t]
    return nd, scales


def pack(c, rows, sc):
    """The buffer: [2, L, T, hidden]; with scale caches 1-D bytes: the data planes, then the float32 scales."""
    if c.sc is None:
        return rows
    return np.concatenate([rows.reshape(-1).view(np.int8), sc.reshape(-1).view(np.int8)])


def unpack(c, buf, T):
    if c.sc is None:
        return buf, None
    n = 2 * c.L * T * c.hidden
    return buf[:n].reshape(2, c.L, T, c.hidden), buf[n:].view(np.float32).reshape(2, c.L, T, H)


def slots_of(rng, c, T):
    """Distinct slots: a run of consecutive slots crossing a block boundary, the last slot, random others; one
    -1 and one -7."""
    run = np.arange(c.bs - 2, c.bs + 4)
    rest = np.setdiff1d(np.arange(c.nb * c.bs - 1), run)
    s = np.concatenate([run, [c.nb * c.bs - 1], rng.choice(rest, T - len(run) - 1, replace=False)]).astype(np.int64)
    s[T - 2], s[T - 3] = -1, -7
    return s


def check_nd(c, tensors, nd, scales=None, sc_tensors=None, msg=""):
    for i, (got, want) in enumerate(zip(tensors, c.flat_nz(nd))):
        assert_bits_equal(to_np(got), want, f"{msg}: cache {i}")
    if scales is not None:
        for i, (got, want) in enumerate(zip(sc_tensors, [x for layer in scales for x in layer])):
            assert_bits_equal(to_np(got), want, f"{msg}: scale cache {i}")


def nested(c, flat):
    return list(flat) if c.fmt == MERGED else [tuple(flat[2 * l:2 * l + 2]) for l in range(c.L)]


# --------------------------------------------------------------------------- token transfer
@pytest.mark.parametrize("fmt", [SEPARATE, MERGED], ids=["separate", "merged"])
@pytest.mark.parametrize("scales", [False, True], ids=["plain", "scales"])
def test_kv_transfer_both_directions(target, fmt, scales, rng):
    for dtype in dtypes_of(target):
        if scales and dtype != "int8":
            continue
        c = Caches(rng, fmt, dtype, scales=scales)
        T = 13
        slots = slots_of(rng, c, T)
        caches = [Parameter(to_ms(x)) for x in c.flat_nz()]
        sc = [Parameter(Tensor(x)) for x in c.flat_scales()] if scales else None
        kw = {"scale_caches": nested(c, sc) if fmt == SEPARATE else [tuple(sc[2 * l:2 * l + 2]) for l in range(c.L)]} \
            if scales else {}
        shape = transfer_buffer_shape(fmt, c.L, T, c.hidden, **({"scale_sizes": H} if scales else {}))
        buf = Parameter(to_ms(np.zeros(shape, np.int8 if scales else random_array(rng, (1,), dtype).dtype)))
        ms_kvcache.multi_layer_kv_transfer(buf, nested(c, caches), Tensor(slots), kv_format=fmt, direction="d2h",
                                           cache_layout="NZ", **kw)
        rows, srows = gather(c, slots)
        assert_bits_equal(to_np(buf), pack(c, rows, srows), f"{target} {dtype} d2h buffer")
        # h2d of an independent buffer
        new_rows = random_array(rng, rows.shape, dtype)
        new_sc = rng.uniform(0.01, 1, srows.shape).astype(np.float32)
        src = to_ms(pack(c, new_rows, new_sc))
        ms_kvcache.multi_layer_kv_transfer(src, nested(c, caches), Tensor(slots.astype(np.int32)), kv_format=fmt,
                                           direction="h2d", cache_layout="NZ", **kw)
        nd, scs = scatter(c, new_rows, new_sc, slots)
        check_nd(c, caches, nd, scs, sc, f"{target} {dtype} h2d")
        assert_ran(target, "MskvMultiLayerKvTransferQuant" if scales else "MskvMultiLayerKvTransfer")


def test_kv_round_trip_nd_nz_host_nz(target, rng):
    """ND cache -> nd_to_nz -> d2h to the host buffer (= the ND rows) -> h2d into zeroed NZ caches: the
    written slots come back bit-exact, nothing else is touched."""
    dtype = dtypes_of(target)[0]
    c = Caches(rng, SEPARATE, dtype, L=2)
    T = 40
    slots = rng.permutation(c.nb * c.bs)[:T].astype(np.int64)
    src = [Parameter(to_ms(x)) for x in c.flat_nz()]
    buf = Parameter(to_ms(np.zeros((2, c.L, T, c.hidden), random_array(rng, (1,), dtype).dtype)))
    ms_kvcache.multi_layer_kv_transfer(buf, nested(c, src), Tensor(slots), kv_format=SEPARATE, direction="d2h",
                                       cache_layout="NZ")
    rows, _ = gather(c, slots)
    assert_bits_equal(to_np(buf), rows, "host rows are the ND rows")
    zero = [Parameter(to_ms(np.zeros_like(x))) for x in c.flat_nz()]
    ms_kvcache.multi_layer_kv_transfer(buf, nested(c, zero), Tensor(slots), kv_format=SEPARATE, direction="h2d",
                                       cache_layout="NZ")
    want = [[np.zeros_like(x) for x in layer] for layer in c.nd]
    for l in range(c.L):
        for p in range(2):
            want[l][p].reshape(-1, c.hidden)[slots] = c.nd[l][p].reshape(-1, c.hidden)[slots]
    check_nd(c, zero, want, msg="round trip")


class KvCell(nn.Cell):
    """GRAPH_MODE: caches and the d2h buffer are Parameters; h2d of buf_in, then d2h of the result."""

    def __init__(self, fmt, caches, scale_caches, buf_out):
        super().__init__()
        self.fmt = fmt
        self.caches = ParameterTuple(caches)
        self.scales = ParameterTuple(scale_caches) if scale_caches else None
        self.buf_out = buf_out

    def construct(self, buf_in, slots):
        if self.scales is None:
            ms_kvcache.multi_layer_kv_transfer(buf_in, self.caches, slots, kv_format=self.fmt, direction="h2d",
                                               cache_layout="NZ")
            ms_kvcache.multi_layer_kv_transfer(self.buf_out, self.caches, slots, kv_format=self.fmt, direction="d2h",
                                               cache_layout="NZ")
        else:
            ms_kvcache.multi_layer_kv_transfer(buf_in, self.caches, slots, kv_format=self.fmt, direction="h2d",
                                               cache_layout="NZ", scale_caches=self.scales)
            ms_kvcache.multi_layer_kv_transfer(self.buf_out, self.caches, slots, kv_format=self.fmt, direction="d2h",
                                               cache_layout="NZ", scale_caches=self.scales)
        return slots


@pytest.mark.parametrize("scales", [False, True], ids=["plain", "scales"])
def test_kv_transfer_graph_mode(target, scales, rng):
    dtype = "int8" if scales else dtypes_of(target)[0]
    fmt = SEPARATE if scales else MERGED
    c = Caches(rng, fmt, dtype, L=2, scales=scales)
    T = 11
    slots = slots_of(rng, c, T)
    rows, srows = random_array(rng, (2, c.L, T, c.hidden), dtype), rng.uniform(0.01, 1, (2, c.L, T, H)).astype(np.float32)
    buf_in = pack(c, rows, srows)
    with ms_mode("graph"):
        caches = [Parameter(to_ms(x), name=f"nzc{i}") for i, x in enumerate(c.flat_nz())]
        sc = [Parameter(Tensor(x), name=f"nzs{i}") for i, x in enumerate(c.flat_scales())] if scales else None
        out = Parameter(to_ms(np.zeros_like(buf_in)), name="nz_buf_out")
        KvCell(fmt, caches, sc, out)(to_ms(buf_in), Tensor(slots))
    nd, scs = scatter(c, rows, srows, slots)
    check_nd(c, caches, nd, scs, sc, f"{target} graph h2d")
    c.nd, c.sc = nd, scs
    g, gs = gather(c, slots)
    assert_bits_equal(to_np(out), pack(c, g, gs), f"{target} graph d2h")
    assert_ran(target, "MskvMultiLayerKvTransferQuant" if scales else "MskvMultiLayerKvTransfer")


# --------------------------------------------------------------------------- block transfer
def block_ids_of(rng, c, n):
    ids = np.concatenate([[c.nb - 1], rng.permutation(c.nb - 1)[:n - 1]]).astype(np.int64)  # the last block too
    return ids[rng.permutation(n)]


def host_of(c, ids):
    """d2h model: per plane [n, bs, L, H, D] (zeros for an invalid id) and scale blocks [n, bs, L, H]."""
    n = len(ids)
    host = [np.zeros((n, c.bs, c.L, c.hidden), c.nd[0][0].dtype) for _ in range(2)]
    shost = [np.zeros((n, c.bs, c.L, H), np.float32) for _ in range(2)]
    for i, b in enumerate(ids):
        if 0 <= b < c.nb:
            for l in range(c.L):
                for p in range(2):
                    host[p][i, :, l] = c.nd[l][p][b]
                    if c.sc is not None:
                        shost[p][i, :, l] = c.sc[l][p][b].reshape(c.bs, H)
    return [h.reshape(n, c.bs, c.L, H, D) for h in host], shost


def blocks_to_nd(c, host, shost, ids):
    nd = [[x.copy() for x in layer] for layer in c.nd]
    sc = [[x.copy() for x in layer] for layer in c.sc] if c.sc is not None else None
    for i, b in enumerate(ids):
        for l in range(c.L):
            for p in range(2):
                nd[l][p][b] = host[p][i, :, l].reshape(c.bs, c.hidden)
                if sc is not None:
                    sc[l][p][b] = shost[p][i, :, l].reshape(sc[l][p][b].shape)
    return nd, sc


@pytest.mark.parametrize("fmt", [SEPARATE, MERGED], ids=["separate", "merged"])
@pytest.mark.parametrize("scales", [False, True], ids=["plain", "scales"])
@pytest.mark.parametrize("staging", [False, True], ids=["direct", "staged"])
def test_block_transfer_both_directions(target, fmt, scales, staging, rng):
    for dtype in dtypes_of(target):
        if scales and dtype != "int8":
            continue
        c = Caches(rng, fmt, dtype, scales=scales)
        n = 3
        ids = block_ids_of(rng, c, n)
        caches = [Parameter(to_ms(x)) for x in c.flat_nz()]
        sc = [Parameter(Tensor(x)) for x in c.flat_scales()] if scales else None
        host = [Parameter(to_ms(np.zeros((n, c.bs, c.L, H, D), c.nd[0][0].dtype))) for _ in range(2)]
        shost = [Parameter(Tensor(np.zeros((n, c.bs, c.L, H), np.float32))) for _ in range(2)] if scales else None
        kw = {"scale_caches": [tuple(sc[2 * l:2 * l + 2]) for l in range(c.L)], "scale_host_blocks": shost} \
            if scales else {}
        if staging:
            per_block = c.bs * c.L * 2 * (c.hidden + (4 * H if scales else 0))
            kw["staging"] = Parameter(to_ms(np.zeros((per_block * 2,), c.nd[0][0].dtype)))
        ms_kvcache.multi_layer_block_transfer(nested(c, caches), host, Tensor(ids), direction="d2h", kv_format=fmt,
                                              cache_layout="NZ", **kw)
        want, swant = host_of(c, ids)
        for p in range(2):
            assert_bits_equal(to_np(host[p]), want[p], f"{target} {dtype} d2h host plane {p}")
            if scales:
                assert_bits_equal(to_np(shost[p]), swant[p], f"{target} d2h scale plane {p}")
        new = [random_array(rng, (n, c.bs, c.L, H, D), dtype) for _ in range(2)]
        snew = [rng.uniform(0.01, 1, (n, c.bs, c.L, H)).astype(np.float32) for _ in range(2)]
        for p in range(2):
            host[p].set_data(to_ms(new[p]))
            if scales:
                shost[p].set_data(Tensor(snew[p]))
        ms_kvcache.multi_layer_block_transfer(nested(c, caches), host, Tensor(ids.astype(np.int32)), direction="h2d",
                                              kv_format=fmt, cache_layout="NZ", **kw)
        nd, scs = blocks_to_nd(c, new, snew, ids)
        check_nd(c, caches, nd, scs, sc, f"{target} {dtype} h2d")
        assert_ran(target, "MskvMultiLayerBlockTransferQuant" if scales else "MskvMultiLayerBlockTransfer")


def test_block_d2h_invalid_id_gives_zero_blocks_in_graph_mode(target, rng):
    dtype = dtypes_of(target)[0]
    c = Caches(rng, SEPARATE, dtype, L=2)
    ids = np.array([2, c.nb + 3, 0], np.int64)  # an id past the cache (graph mode cannot check values)

    class Offload(nn.Cell):
        def __init__(self):
            super().__init__()
            self.caches = ParameterTuple([Parameter(to_ms(x), name=f"bc{i}") for i, x in enumerate(c.flat_nz())])
            self.host = ParameterTuple([Parameter(to_ms(np.ones((3, c.bs, c.L, H, D), c.nd[0][0].dtype)),
                                                  name=f"bh{p}") for p in range(2)])

        def construct(self, block_ids):
            ms_kvcache.multi_layer_block_transfer(self.caches, self.host, block_ids, direction="d2h",
                                                  kv_format=SEPARATE, cache_layout="NZ")
            return block_ids

    with ms_mode("graph"):
        net = Offload()
        net(Tensor(ids))
    want, _ = host_of(c, ids)
    for p in range(2):
        assert_bits_equal(to_np(net.host[p]), want[p], f"{target} graph d2h plane {p}")


def test_block_round_trip_nd_nz_host_nz(target, rng):
    dtype = "int8"
    c = Caches(rng, MERGED, dtype, L=2)
    ids = block_ids_of(rng, c, 2)
    src = [Parameter(to_ms(x)) for x in c.flat_nz()]
    host = [Parameter(to_ms(np.zeros((2, c.bs, c.L, H, D), np.int8))) for _ in range(2)]
    ms_kvcache.multi_layer_block_transfer(src, host, Tensor(ids), direction="d2h", kv_format=MERGED, cache_layout="NZ")
    zero = [Parameter(to_ms(np.zeros_like(x))) for x in c.flat_nz()]
    ms_kvcache.multi_layer_block_transfer(zero, host, Tensor(ids), direction="h2d", kv_format=MERGED, cache_layout="NZ")
    want = [[np.zeros_like(x) for x in layer] for layer in c.nd]
    for l in range(c.L):
        for p in range(2):
            want[l][p][ids] = c.nd[l][p][ids]
    check_nd(c, zero, want, msg="block round trip")


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("kind", ["token", "block"])
def test_layerwise_transfer_of_nz_caches(target, kind, rng):
    """ms_kvcache.LayerwiseTransfer with cache_layout="NZ" (int8 with scale caches): layers issued and waited
    out of order, the same bytes as the model, both directions."""
    c = Caches(rng, SEPARATE, "int8", scales=True)
    caches = [Parameter(to_ms(x)) for x in c.flat_nz()]
    sc = [Parameter(Tensor(x)) for x in c.flat_scales()]
    kw = {"kv_format": SEPARATE, "cache_layout": "NZ", "scale_caches": [tuple(sc[2 * l:2 * l + 2])
                                                                       for l in range(c.L)]}

    def run(lt, direction):
        if direction == "d2h":
            for layer in (2, 0, 1):
                lt.save_layer(layer)
        else:
            lt.start()
        for layer in (1, 2, 0):
            lt.wait_layer(layer)
        lt.wait()
        lt.close()

    if kind == "token":
        T = 24
        slots = slots_of(rng, c, T)
        buf = Parameter(to_ms(np.zeros(pack(c, *gather(c, slots)).shape, np.int8)))
        run(ms_kvcache.LayerwiseTransfer(buf, nested(c, caches), Tensor(slots), direction="d2h", **kw), "d2h")
        assert_bits_equal(to_np(buf), pack(c, *gather(c, slots)), f"{target} layer-wise d2h")
        rows = random_array(rng, (2, c.L, T, c.hidden), "int8")
        srows = rng.uniform(0.01, 1, (2, c.L, T, H)).astype(np.float32)
        slots[slots >= 0] = rng.permutation(c.nb * c.bs)[:int((slots >= 0).sum())]  # distinct for h2d
        run(ms_kvcache.LayerwiseTransfer(Tensor(pack(c, rows, srows)), nested(c, caches), Tensor(slots),
                                         direction="h2d", **kw), "h2d")
        nd, scs = scatter(c, rows, srows, slots)
    else:
        ids = block_ids_of(rng, c, 3)
        host = [Parameter(to_ms(np.zeros((3, c.bs, c.L, H, D), np.int8))) for _ in range(2)]
        shost = [Parameter(Tensor(np.zeros((3, c.bs, c.L, H), np.float32))) for _ in range(2)]
        run(ms_kvcache.LayerwiseTransfer.blocks(nested(c, caches), host, Tensor(ids), direction="d2h",
                                                scale_host_blocks=shost, **kw), "d2h")
        want, swant = host_of(c, ids)
        for p in range(2):
            assert_bits_equal(to_np(host[p]), want[p], f"{target} layer-wise block d2h plane {p}")
            assert_bits_equal(to_np(shost[p]), swant[p], f"{target} layer-wise block d2h scales {p}")
        new = [random_array(rng, (3, c.bs, c.L, H, D), "int8") for _ in range(2)]
        snew = [rng.uniform(0.01, 1, (3, c.bs, c.L, H)).astype(np.float32) for _ in range(2)]
        run(ms_kvcache.LayerwiseTransfer.blocks(nested(c, caches), [to_ms(x) for x in new], Tensor(ids),
                                                direction="h2d", scale_host_blocks=[Tensor(x) for x in snew], **kw),
            "h2d")
        nd, scs = blocks_to_nd(c, new, snew, ids)
    check_nd(c, caches, nd, scs, sc, f"{target} layer-wise h2d")
    assert_ran(target, "MskvMultiLayerKvTransferQuant" if kind == "token" else "MskvMultiLayerBlockTransferQuant")


def test_mla_and_dsa_refuse_nz(rng):
    ms_kvcache.set_backend("cpu")
    kv_c = Tensor(np.zeros((2, 16, 64), np.float16))
    k_pe = Tensor(np.zeros((2, 16, 32), np.float16))
    buf = Tensor(np.zeros(transfer_buffer_shape("mla", 1, 1, (64, 32)), np.float16))
    with pytest.raises(ValueError, match=r"multi_layer_kv_transfer: argument 'cache_layout': expected 'BSND' for MLA_KV, "
                                         r"got 'NZ' \(MLA / DSA caches stay ND"):
        ms_kvcache.multi_layer_kv_transfer(buf, [(kv_c, k_pe)], Tensor(np.array([0])), kv_format="mla",
                                           direction="d2h", cache_layout="NZ")
    with pytest.raises(ValueError, match=r"multi_layer_block_transfer: argument 'cache_layout': expected 'BSND' for "
                                         r"DSA_KV, got 'NZ'"):
        ms_kvcache.multi_layer_block_transfer([(kv_c, k_pe, k_pe)], [Tensor(np.zeros((1, 16, 1, 64), np.float16))] * 3,
                                              Tensor(np.array([0])), direction="d2h", kv_format="dsa",
                                              cache_layout="NZ")


def test_transfer_refusals(rng):
    ms_kvcache.set_backend("cpu")
    ok = Tensor(nd_to_nz(np.zeros((2, 16, 64), np.float16)))
    buf = Tensor(np.zeros((2, 1, 1, 64), np.float16))
    s = Tensor(np.array([0]))

    def call(cache, b=buf, **kw):
        ms_kvcache.multi_layer_kv_transfer(b, [(cache, cache.copy())], s, kv_format="separate", direction="d2h",
                                           cache_layout="NZ", **kw)

    with pytest.raises(TypeError, match=r"argument 'kv_caches': expected dtype float16, bfloat16 or int8 for an NZ cache"):
        call(Tensor(np.zeros((2, 8, 16, 8), np.float32)), Tensor(np.zeros((2, 1, 1, 64), np.float32)))
    with pytest.raises(ValueError, match=r"argument 'kv_caches\[0\]\[0\]': expected an NZ cache .* with C0 = 16 for "
                                         r"float16, got shape \(2, 2, 16, 32\)"):
        call(Tensor(np.zeros((2, 2, 16, 32), np.float16)))
    with pytest.raises(ValueError, match=r"block_size \(dim 2 of an NZ cache\) a multiple of 16"):
        call(Tensor(np.zeros((2, 4, 8, 16), np.float16)))
    host = [Tensor(np.zeros((1, 16, 1, 60), np.float16))] * 2
    with pytest.raises(ValueError, match=r"argument 'host_blocks\[0\]': expected the key_cache host blocks \[n, "
                                         r"block_size, num_layers, num_kv_heads, head_size\] = \(1, 16, 1\) \+ \(H, D\) "
                                         r"with H \* D = 64"):
        ms_kvcache.multi_layer_block_transfer([(ok, ok.copy())], [Tensor(np.zeros((1, 16, 1, 2, 30), np.float16))] * 2,
                                              s, direction="d2h", kv_format="separate", cache_layout="NZ")
    i8 = Tensor(nd_to_nz(np.zeros((2, 16, 64), np.int8)))
    with pytest.raises(ValueError, match=r"scale_caches\[0\]\[0\] .*beside the NZ data plane key_cache of hidden size "
                                         r"64"):
        ms_kvcache.multi_layer_kv_transfer(
            Tensor(np.zeros((1 * 1 * (128 + 4 * 2 * 3),), np.int8)), [(i8, i8.copy())], s, kv_format="separate",
            direction="d2h", cache_layout="NZ", scale_caches=[(Tensor(np.zeros((2, 16, 3), np.float32)),
                                                               Tensor(np.zeros((2, 16, 3), np.float32)))])
    del host


@pytest.mark.parametrize("op", ["token", "block"])
def test_large_transfers_threads_and_streaming_stores(op, rng):
    """>= 4 MiB moved: the threaded, non-temporal path of the cpu kernels (nz_copy.cpp tiles), prefill-style
    slots (whole blocks in random order) and scattered ones, both directions, against the model."""
    ms_kvcache.set_backend("cpu")
    c = Caches(rng, SEPARATE, "float16", L=2, nb=40, bs=128)
    c.hidden = 1024  # 8 heads x 128
    c.nd = [[random_array(rng, (c.nb, c.bs, c.hidden), "float16") for _ in range(2)] for _ in range(c.L)]
    caches = [Parameter(to_ms(x)) for x in c.flat_nz()]
    if op == "token":
        T = 4096
        ids = rng.permutation(c.nb)[:T // c.bs]
        slots = (ids[:, None] * c.bs + np.arange(c.bs)).reshape(-1).astype(np.int64)
        slots[1000:1100] = rng.permutation(np.arange(c.nb * c.bs))[:100]  # some scattered (may repeat: d2h only)
        slots[7] = -1
        buf = Parameter(to_ms(np.zeros((2, c.L, T, c.hidden), np.float16)))
        ms_kvcache.multi_layer_kv_transfer(buf, nested(c, caches), Tensor(slots), kv_format=SEPARATE,
                                           direction="d2h", cache_layout="NZ")
        assert_bits_equal(to_np(buf), gather(c, slots)[0], "large d2h")
        slots = (ids[:, None] * c.bs + np.arange(c.bs)).reshape(-1).astype(np.int64)
        slots[7] = -1
        rows = random_array(rng, (2, c.L, T, c.hidden), "float16")
        ms_kvcache.multi_layer_kv_transfer(to_ms(rows), nested(c, caches), Tensor(slots), kv_format=SEPARATE,
                                           direction="h2d", cache_layout="NZ")
        check_nd(c, caches, scatter(c, rows, None, slots)[0], msg="large h2d")
        return
    ids = rng.permutation(c.nb)[:24].astype(np.int64)
    host = [Parameter(to_ms(np.zeros((24, c.bs, c.L, 8, 128), np.float16))) for _ in range(2)]
    ms_kvcache.multi_layer_block_transfer(nested(c, caches), host, Tensor(ids), direction="d2h", kv_format=SEPARATE,
                                          cache_layout="NZ")
    want = [np.stack([np.stack([c.nd[l][p][b] for l in range(c.L)], axis=1) for b in ids]) for p in range(2)]
    for p in range(2):
        assert_bits_equal(to_np(host[p]).reshape(want[p].shape), want[p], f"large block d2h plane {p}")
    new = [random_array(rng, (24, c.bs, c.L, 8, 128), "float16") for _ in range(2)]
    for p in range(2):
        host[p].set_data(to_ms(new[p]))
    ms_kvcache.multi_layer_block_transfer(nested(c, caches), host, Tensor(ids), direction="h2d", kv_format=SEPARATE,
                                          cache_layout="NZ")
    nd, _ = blocks_to_nd(c, new, None, ids)
    check_nd(c, caches, nd, msg="large block h2d")
