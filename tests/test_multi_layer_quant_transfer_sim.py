"""Multi-layer transfers of int8 caches with their float32 scale caches through the AscendC kernels
(MskvMultiLayerKvTransferQuant / MskvMultiLayerBlockTransferQuant) in the emulation ("sim"): bit-exact
against an independent numpy model of the buffer / host-block layout (docs/ops-transfer.md, "Quantized
caches") for every format, both directions, -1 / out-of-range slots and block ids, direct and staged block
transfers, every SoC where legal (Ascend310P: rows of 32-byte multiples only, else a tiling error naming the
SoC), GM traffic against the minimum, and through the public ops on sim against the cpu backend (PyNative and
GRAPH_MODE)."""
import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_same_bytes, expect_tiling_error, launch, public_backend_or_skip,
                           stable_seed, status)

MERGED, SEPARATE, MLA, DSA = 1, 2, 3, 4
KV_OP, BLOCK_OP = "MskvMultiLayerKvTransferQuant", "MskvMultiLayerBlockTransferQuant"


class Geo:
    """Caches of L layers: int8 data planes and their float32 scale planes (one scale per token-head, or per
    token for MLA / DSA), in the plane's own layout (BSND [nb, bs, H, D] / BNSD [nb, H, bs, D])."""

    def __init__(self, fmt, layout, L=2, nb=6, bs=4, H=2, D=16, mla=(32, 8, 16)):
        self.fmt, self.layout, self.L, self.nb, self.bs, self.H, self.D = fmt, layout, L, nb, bs, H, D
        self.P = 3 if fmt == DSA else 2
        self.mla = mla[:self.P]
        self.bnsd = layout == "BNSD" and fmt in (MERGED, SEPARATE)

    def shapes(self, p):
        if self.fmt in (MLA, DSA):
            return (self.nb, self.bs, self.mla[p]), (self.nb, self.bs, 1)
        if self.bnsd:
            return (self.nb, self.H, self.bs, self.D), (self.nb, self.H, self.bs)
        return (self.nb, self.bs, self.H, self.D), (self.nb, self.bs, self.H)

    def random(self, rng):
        data = [[rng.integers(-128, 128, self.shapes(p)[0], dtype=np.int8) for p in range(self.P)]
                for _ in range(self.L)]
        scales = [[(rng.random(self.shapes(p)[1], dtype=np.float32) + 0.01) for p in range(self.P)]
                  for _ in range(self.L)]
        return data, scales

    def kv_list(self, data):
        if self.fmt == MERGED:
            return [np.stack(dl) for dl in data]
        return [x for dl in data for x in dl]

    def unflat(self, kv, sc):
        data = [[x for x in t] for t in kv] if self.fmt == MERGED else \
            [kv[l * self.P:(l + 1) * self.P] for l in range(self.L)]
        return data, [sc[l * self.P:(l + 1) * self.P] for l in range(self.L)]

    def row(self, x, slot):
        b, o = divmod(int(slot), self.bs)
        return (x[b, :, o] if self.bnsd else x[b, o]).reshape(-1)

    def set_row(self, x, slot, r):
        b, o = divmod(int(slot), self.bs)
        if self.bnsd:
            x[b, :, o] = r.reshape(x[b, :, o].shape)
        else:
            x[b, o] = r.reshape(x[b, o].shape)

    @property
    def slots(self):
        return self.nb * self.bs

    def valid(self, s):
        return 0 <= s < self.slots


def ref_buffer(g, data, scales, slots):
    """Data planes [L, T, hidden_p] plane after plane, then the scale planes [L, T, scales_p] as float32 bytes;
    rows of skipped slots are zeros."""
    parts = []
    for src in (data, scales):
        for p in range(g.P):
            rows = [g.row(src[l][p], s) if g.valid(s) else np.zeros_like(g.row(src[l][p], 0))
                    for l in range(g.L) for s in slots]
            parts.append(np.concatenate(rows).view(np.uint8))
    return np.concatenate(parts).view(np.int8)


def ref_scatter(g, data, scales, buf, slots):
    """h2d of ``buf`` into copies of the caches: each valid slot's rows, in slot order (no repeats)."""
    data, scales = [[x.copy() for x in dl] for dl in data], [[x.copy() for x in sl] for sl in scales]
    raw, off, T = buf.view(np.uint8), 0, len(slots)
    for src in (data, scales):
        for p in range(g.P):
            item = src[0][p].itemsize
            n = g.row(src[0][p], 0).size
            for l in range(g.L):
                for t, s in enumerate(slots):
                    r = raw[off + (l * T + t) * n * item: off + (l * T + t + 1) * n * item].view(src[0][p].dtype)
                    if g.valid(s):
                        g.set_row(src[l][p], s, r)
            off += g.L * T * n * item
    return data, scales


def kv_attrs(g, direction):
    return {"kv_format": g.fmt, "direction": direction, "cache_layout": g.layout, "num_layers": g.L, "aiv_num": 0}


def kv_round_trip(g, rng, slots, soc="Ascend910B1", all_orders=False):
    data, scales = g.random(rng)
    kv, sc = g.kv_list(data), [x for sl in scales for x in sl]
    before = [x.copy() for x in kv + sc]
    expected = ref_buffer(g, data, scales, slots)
    buf = rng.integers(-128, 128, expected.shape, dtype=np.int8)  # garbage: every byte is written
    st = launch(KV_OP, [buf, slots, kv, sc, status()], kv_attrs(g, "d2h"), soc, all_orders=all_orders)
    assert_same_bytes(buf, expected, f"d2h buffer ({soc})")
    for a, b in zip(kv + sc, before):
        assert_same_bytes(a, b, "a cache changed by d2h")
    fresh_d, fresh_s = g.random(rng)
    kv2, sc2 = g.kv_list(fresh_d), [x for sl in fresh_s for x in sl]
    launch(KV_OP, [buf, slots, kv2, sc2, status()], kv_attrs(g, "h2d"), soc, all_orders=all_orders)
    got_d, got_s = g.unflat(kv2, sc2)
    exp_d, exp_s = ref_scatter(g, fresh_d, fresh_s, buf, slots)
    for l in range(g.L):
        for p in range(g.P):
            assert_same_bytes(got_d[l][p], exp_d[l][p], f"h2d data layer {l} plane {p} ({soc})")
            assert_same_bytes(got_s[l][p], exp_s[l][p], f"h2d scales layer {l} plane {p} ({soc})")
    return st


def _slots(g, rng, T, dtype=np.int64):
    s = rng.permutation(g.slots)[:T].astype(np.int64)
    s[rng.choice(T, size=max(T // 4, 1), replace=False)] = -1  # padding tokens
    s[0] = g.slots  # out of range: skipped like -1
    return s.astype(dtype)


CASES = [(MERGED, "BSND"), (SEPARATE, "BNSD"), (SEPARATE, "BSND"), (MLA, "BSND"), (DSA, "BSND")]
IDS = ["merged", "separate_bnsd", "separate", "mla", "dsa"]


@pytest.mark.parametrize("fmt,layout", CASES, ids=IDS)
def test_kv_transfer_every_format_bit_exact(fmt, layout):
    rng = np.random.default_rng(stable_seed("kvq", fmt, layout))
    g = Geo(fmt, layout)
    st = kv_round_trip(g, rng, _slots(g, rng, 12, np.int32 if fmt == MLA else np.int64))
    # digits: layout, 4 (int8 bytes), slot dtype, DataCopyPad (the 8-byte scale rows need it)
    assert st["tiling_key"] == 1000 * g.bnsd + 400 + 10 * (fmt != MLA) + 1


@pytest.mark.parametrize("soc", SOCS)
def test_kv_transfer_every_soc(soc):
    """Ascend310P: 8 heads x 4-byte scales = 32-byte BSND scale rows, no DataCopyPad needed; every core order."""
    rng = np.random.default_rng(stable_seed("kvq", soc))
    g = Geo(SEPARATE, "BSND", L=3, nb=8, bs=8, H=8, D=32)
    st = kv_round_trip(g, rng, _slots(g, rng, 30), soc, all_orders=True)
    assert st["tiling_key"] % 10 == 0  # no DataCopyPad


@pytest.mark.parametrize("fmt,layout,H,what", [(SEPARATE, "BSND", 2, "one token row of 8 bytes"),
                                               (MERGED, "BNSD", 8, "one head of a BNSD cache of 4 bytes"),
                                               (MLA, "BSND", 1, "one token row of 4 bytes")],
                         ids=["bsnd_h2", "bnsd", "mla"])
def test_310p_refuses_unaligned_scale_rows(fmt, layout, H, what):
    rng = np.random.default_rng(3)
    g = Geo(fmt, layout, H=H, D=32, mla=(32, 32))  # data rows of 32-byte multiples: only the scales refuse
    data, scales = g.random(rng)
    slots = np.array([1, 5], np.int64)
    buf = np.zeros(ref_buffer(g, data, scales, slots).shape, np.int8)
    expect_tiling_error(KV_OP, [buf, slots, g.kv_list(data), [x for sl in scales for x in sl], status()],
                        kv_attrs(g, "d2h"), "Ascend310P3", "scale plane 0", what, "Ascend310P has no DataCopyPad")


def test_kv_transfer_gm_traffic_near_minimum():
    """Every payload byte read once and written once, plus the slots: <= 1.05 x that minimum."""
    rng = np.random.default_rng(11)
    g = Geo(SEPARATE, "BNSD", L=4, nb=16, bs=16, H=8, D=128)
    slots = np.arange(16, 16 + 128, dtype=np.int64)
    data, scales = g.random(rng)
    payload = ref_buffer(g, data, scales, slots).nbytes
    for direction in ("d2h", "h2d"):
        buf = np.zeros(payload, np.int8)
        st = launch(KV_OP, [buf, slots, g.kv_list(data), [x for sl in scales for x in sl], status()],
                    kv_attrs(g, direction), "Ascend910B1", gm_copy="never")
        total = st["gm_read_bytes"] + st["gm_write_bytes"]
        assert total <= 1.05 * (2 * payload + slots.nbytes), (direction, total, payload)


# ------------------------------------------------------------------------------------------------ blocks
def ref_host(g, src, ids, p):
    """Host blocks of plane p: [n, bs, L, row] token-major; ids out of range give zero blocks."""
    row = g.row(src[0][p], 0)
    out = np.zeros((len(ids), g.bs, g.L, row.size), row.dtype)
    for i, b in enumerate(ids):
        if 0 <= b < g.nb:
            for s in range(g.bs):
                for l in range(g.L):
                    out[i, s, l] = g.row(src[l][p], int(b) * g.bs + s)
    return out


def host_shape(g, p, n):
    if g.fmt in (MLA, DSA):
        return (n, g.bs, g.L, g.mla[p])
    return (n, g.bs, g.L, g.H, g.D)


def block_round_trip(g, rng, ids, ids2, staged, soc="Ascend910B1", all_orders=False):
    data, scales = g.random(rng)
    kv, sc = g.kv_list(data), [x for sl in scales for x in sl]
    n = len(ids)
    host = [rng.integers(-128, 128, host_shape(g, p, n), dtype=np.int8) for p in range(g.P)]
    spt = 1 if g.fmt in (MLA, DSA) else g.H  # scales per token
    shost = [rng.random((n, g.bs, g.L, spt), dtype=np.float32) for p in range(g.P)]
    per_block = g.bs * g.L * (sum(h[0, 0, 0].size for h in host) + 4 * sum(h.shape[-1] for h in shost))
    staging = np.zeros(per_block, np.int8) if staged else None
    attrs = {"kv_format": g.fmt, "direction": "d2h", "cache_layout": g.layout, "num_layers": g.L, "aiv_num": 0}
    launch(BLOCK_OP, [ids, staging, host, kv, shost, sc, status()], attrs, soc, all_orders=all_orders)
    for p in range(g.P):
        assert_same_bytes(host[p].reshape(n, g.bs, g.L, -1), ref_host(g, data, ids, p), f"host_blocks[{p}] ({soc})")
        assert_same_bytes(shost[p], ref_host(g, scales, ids, p), f"scale_host_blocks[{p}] ({soc})")
    fresh_d, fresh_s = g.random(rng)
    kv2, sc2 = g.kv_list(fresh_d), [x for sl in fresh_s for x in sl]
    attrs["direction"] = "h2d"
    launch(BLOCK_OP, [ids2, staging, host, kv2, shost, sc2, status()], attrs, soc, all_orders=all_orders)
    got_d, got_s = g.unflat(kv2, sc2)
    for src, fresh, got in ((data, fresh_d, got_d), (scales, fresh_s, got_s)):
        for l in range(g.L):
            for p in range(g.P):
                exp = fresh[l][p].copy()
                for i, b2 in enumerate(ids2):
                    if 0 <= b2 < g.nb and 0 <= ids[i] < g.nb:
                        exp[b2] = src[l][p][ids[i]]
                assert_same_bytes(got[l][p], exp, f"h2d layer {l} plane {p} ({soc})")


@pytest.mark.parametrize("fmt,layout,staged", [(SEPARATE, "BNSD", False), (MERGED, "BSND", True),
                                               (MLA, "BSND", False), (DSA, "BSND", True), (SEPARATE, "BNSD", True)],
                         ids=["separate_bnsd", "merged_staged", "mla", "dsa_staged", "separate_bnsd_staged"])
def test_block_transfer_every_format_bit_exact(fmt, layout, staged):
    rng = np.random.default_rng(stable_seed("bq", fmt, layout, staged))
    g = Geo(fmt, layout)
    ids = np.array([4, -1, 1, 5], np.int64)  # -1: d2h writes zero host blocks
    ids2 = np.array([0, -1, 3, 2], np.int32 if fmt == MLA else np.int64)  # -1: h2d skips
    block_round_trip(g, rng, ids, ids2.astype(ids.dtype), staged)


@pytest.mark.parametrize("soc", SOCS)
def test_block_transfer_every_soc(soc):
    rng = np.random.default_rng(stable_seed("bq", soc))
    g = Geo(SEPARATE, "BSND", L=2, nb=6, bs=8, H=8, D=32)
    block_round_trip(g, rng, np.array([5, 0, 2], np.int64), np.array([1, 3, 4], np.int64), soc == "Ascend910B3",
                     soc, all_orders=True)


def test_block_transfer_gm_traffic_near_minimum():
    rng = np.random.default_rng(12)
    g = Geo(SEPARATE, "BNSD", L=4, nb=12, bs=16, H=8, D=128)
    data, scales = g.random(rng)
    ids = np.arange(8, dtype=np.int64)[::-1].copy()
    n = len(ids)
    host = [np.zeros(host_shape(g, p, n), np.int8) for p in range(g.P)]
    shost = [np.zeros((n, g.bs, g.L, g.H), np.float32) for _ in range(g.P)]
    payload = sum(h.nbytes for h in host + shost)
    for direction in ("d2h", "h2d"):
        attrs = {"kv_format": g.fmt, "direction": direction, "cache_layout": g.layout, "num_layers": g.L,
                 "aiv_num": 0}
        st = launch(BLOCK_OP, [ids, None, host, g.kv_list(data), shost, [x for sl in scales for x in sl], status()],
                    attrs, "Ascend910B1", gm_copy="never")
        total = st["gm_read_bytes"] + st["gm_write_bytes"]
        assert total <= 1.05 * (2 * payload + ids.nbytes), (direction, total, payload)


# ------------------------------------------------------------------------------------------------ public ops
@pytest.fixture
def mk():
    ms_kvcache = public_backend_or_skip("multi_layer_kv_transfer")
    yield ms_kvcache
    ms_kvcache.set_backend("cpu")


def _public_kv(mk, backend, g, data, scales, slots, slots2):
    import mindspore as ms

    mk.set_backend(backend)
    T = len(slots)
    hid = list(g.mla) if g.fmt in (MLA, DSA) else g.H * g.D
    shape = mk.transfer_buffer_shape(g.fmt, g.L, T, hid, scale_sizes=1 if g.fmt in (MLA, DSA) else g.H)
    buf = ms.Tensor(np.zeros(shape, np.int8))
    kv = [ms.Tensor(x) for x in g.kv_list(data)]
    sc = [ms.Tensor(x) for sl in scales for x in sl]
    mk.multi_layer_kv_transfer(buf, kv, ms.Tensor(slots), kv_format=g.fmt, direction="d2h", cache_layout=g.layout,
                               scale_caches=sc)
    zd = [[np.zeros_like(x) for x in dl] for dl in data]
    zs = [[np.zeros_like(x) for x in sl] for sl in scales]
    kv2 = [ms.Tensor(x) for x in g.kv_list(zd)]
    sc2 = [ms.Tensor(x) for sl in zs for x in sl]
    mk.multi_layer_kv_transfer(buf, kv2, ms.Tensor(slots2), kv_format=g.fmt, direction="h2d",
                               cache_layout=g.layout, scale_caches=sc2)
    return buf.asnumpy(), [x.asnumpy() for x in kv2 + sc2]


@pytest.mark.parametrize("fmt,layout", [(SEPARATE, "BNSD"), (DSA, "BSND")], ids=["separate_bnsd", "dsa"])
def test_public_kv_transfer_sim_equals_cpu(mk, fmt, layout):
    rng = np.random.default_rng(stable_seed("pub", fmt))
    g = Geo(fmt, layout)
    data, scales = g.random(rng)
    slots = np.array([5, -1, 7, 17, 0, g.slots - 1], np.int64)
    slots2 = np.array([20, 2, 1, 3, 9, 22], np.int64)
    buf_sim, caches_sim = _public_kv(mk, "sim", g, data, scales, slots, slots2)
    buf_cpu, caches_cpu = _public_kv(mk, "cpu", g, data, scales, slots, slots2)
    assert_same_bytes(buf_sim, ref_buffer(g, data, scales, slots), "sim buffer")
    assert_same_bytes(buf_sim, buf_cpu, "sim buffer vs cpu")
    for a, b in zip(caches_sim, caches_cpu):
        assert_same_bytes(a, b, "sim caches vs cpu")


def test_public_block_transfer_sim_equals_cpu(mk):
    import mindspore as ms

    rng = np.random.default_rng(21)
    g = Geo(MLA, "BSND")
    data, scales = g.random(rng)
    ids = np.array([3, 5, 0], np.int64)
    out = {}
    for backend in ("sim", "cpu"):
        mk.set_backend(backend)
        host = [ms.Tensor(np.ones(host_shape(g, p, 3), np.int8)) for p in range(g.P)]
        shost = [ms.Tensor(np.ones((3, g.bs, g.L, 1), np.float32)) for _ in range(g.P)]
        staging = ms.Tensor(np.zeros(g.bs * g.L * (sum(g.mla) + 4 * g.P), np.int8))
        mk.multi_layer_block_transfer([tuple(ms.Tensor(x) for x in dl) for dl in data], host, ms.Tensor(ids),
                                      direction="d2h", kv_format=g.fmt, cache_layout="BSND", staging=staging,
                                      scale_caches=[tuple(ms.Tensor(x) for x in sl) for sl in scales],
                                      scale_host_blocks=shost)
        out[backend] = [x.asnumpy() for x in host + shost]
    for p, (a, b) in enumerate(zip(out["sim"], out["cpu"])):
        assert_same_bytes(a, b, f"sim vs cpu host tensor {p}")
    assert_same_bytes(out["sim"][g.P], ref_host(g, scales, ids, 0), "scale host blocks")


def test_public_kv_transfer_graph_mode_on_sim(mk):
    """GRAPH_MODE on sim: ParameterTuples of caches and scale caches, offload then reload, as on cpu."""
    from mindspore import Tensor

    from conftest import ms_mode
    from test_multi_layer_quant_transfer import L as QL
    from test_multi_layer_quant_transfer import QuantOffload, make_layers, planes_of, ref_buffer as cpu_ref

    import mindspore as ms  # noqa: F401

    rng = np.random.default_rng(31)
    data, scales = make_layers(rng, MLA, "BSND")
    slots, slots2 = np.array([1, -1, 8, 9], np.int64), np.array([13, 0, 14, 23], np.int64)
    shape = mk.transfer_buffer_shape(MLA, QL, 4, [32, 8], scale_sizes=1)
    mk.set_backend("sim")
    with ms_mode("graph"):
        net = QuantOffload(MLA, "BSND", data, scales, np.zeros(shape, np.int8))
        net(Tensor(slots), Tensor(slots2))
        buf = net.buf.asnumpy()
        got = net.sc2[QL * planes_of(MLA) - 1].asnumpy()
    assert_same_bytes(buf, cpu_ref(MLA, "BSND", data, scales, slots), "graph buffer")
    last = scales[QL - 1][planes_of(MLA) - 1]
    for s, s2 in zip(slots, slots2):
        if s >= 0:
            assert_same_bytes(got[s2 // 4, s2 % 4], last[s // 4, s % 4], "graph reload of a scale row")


def test_public_float8_caches_refused_on_sim(mk):
    import mindspore as ms

    if not hasattr(ms, "float8_e4m3fn"):
        pytest.skip("no float8 in this MindSpore")
    g = Geo(MLA, "BSND")
    data, scales = g.random(np.random.default_rng(2))
    try:
        kv = [ms.Tensor(x.view(np.uint8)).view(ms.float8_e4m3fn) for x in g.kv_list(data)]
    except TypeError:
        pytest.skip("no float8 tensor on CPU in this MindSpore")
    mk.set_backend("sim")
    with pytest.raises(TypeError, match=r"multi_layer_kv_transfer: argument 'kv_caches': expected dtype int8 on "
                                        r"backend 'sim' .* got float8_e4m3fn"):
        mk.multi_layer_kv_transfer(ms.Tensor(np.zeros(96, np.uint8)).view(ms.float8_e4m3fn), kv,
                                   ms.Tensor(np.array([1], np.int64)), kv_format=MLA, direction="d2h",
                                   scale_caches=[ms.Tensor(x) for sl in scales for x in sl])
