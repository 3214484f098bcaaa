"""Multi-layer transfers of quantized (int8) caches with their float32 scale caches in one call
(multi_layer_kv_transfer / multi_layer_block_transfer with scale_caches): bit-exact offload then reload into
other slots / blocks against an independent numpy model of the buffer layout, PyNative and GRAPH_MODE, and
the argument checks (cpu backend; the AscendC kernels in the emulation: tests/test_multi_layer_quant_transfer_sim.py)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn

import ms_kvcache as mk
from conftest import ms_mode

MERGED, SEPARATE, MLA, DSA = (mk.KVCacheFormat.MERGED_KV, mk.KVCacheFormat.SEPARATE_KV, mk.KVCacheFormat.MLA_KV,
                              mk.KVCacheFormat.DSA_KV)
L, NB, BS, H, D = 3, 6, 4, 2, 16
MLA_HIDDEN = (32, 8, 16)  # kv_c, k_pe, indexer_k


@pytest.fixture(autouse=True)
def _cpu(cpu_backend):
    yield


def planes_of(fmt):
    return 3 if fmt == DSA else 2


def make_layers(rng, fmt, layout, scale_1=False):
    """numpy caches: per layer a list of data planes (in the plane's own layout) and of scale planes."""
    data, scales = [], []
    for _ in range(L):
        dl, sl = [], []
        for p in range(planes_of(fmt)):
            if fmt in (MLA, DSA):
                dl.append(rng.integers(-128, 128, (NB, BS, MLA_HIDDEN[p]), dtype=np.int8))
                sl.append(rng.random((NB, BS, 1), dtype=np.float32) + 0.01)
            else:
                shape = (NB, H, BS, D) if layout == "BNSD" else (NB, BS, H, D)
                dl.append(rng.integers(-128, 128, shape, dtype=np.int8))
                sshape = shape[:3] + ((1,) if scale_1 else ())
                sl.append(rng.random(sshape, dtype=np.float32) + 0.01)
        data.append(dl)
        scales.append(sl)
    return data, scales


def token_row(x, slot, layout, fmt):
    """Row of one token of a cache plane (data or scale), independent of the kernels' geometry code."""
    blk, off = divmod(int(slot), BS)
    if fmt not in (MLA, DSA) and layout == "BNSD":
        return x[blk, :, off].reshape(-1)
    return x[blk, off].reshape(-1)


def ref_buffer(fmt, layout, data, scales, slots):
    """The documented buffer: data planes [L, T, hidden_p] plane after plane, then the scale planes
    [L, T, scales_p] as float32 bytes, plane after plane; rows of slots < 0 are zeros."""
    parts = []
    for src, dt in ((data, np.int8), (scales, np.float32)):
        for p in range(planes_of(fmt)):
            rows = []
            for l in range(L):
                for s in slots:
                    r = token_row(src[l][p], max(s, 0), layout, fmt)
                    rows.append(r if s >= 0 else np.zeros_like(r))
            parts.append(np.concatenate(rows).astype(dt).view(np.uint8))
    return np.concatenate(parts).view(np.int8)


def ms_layers(fmt, data, scales):
    if fmt == MERGED:
        kv = [Tensor(np.stack(dl)) for dl in data]
    else:
        kv = [tuple(Tensor(x) for x in dl) for dl in data]
    return kv, [tuple(Tensor(x) for x in sl) for sl in scales]


def np_layers(fmt, kv, sc):
    data = [[x for x in t.asnumpy()] if fmt == MERGED else [x.asnumpy() for x in t] for t in kv]
    return data, [[x.asnumpy() for x in t] for t in sc]


def hidden_and_scales(fmt):
    if fmt in (MLA, DSA):
        return MLA_HIDDEN[:planes_of(fmt)], 1
    return H * D, H


CASES = [(MERGED, "BSND", False), (SEPARATE, "BNSD", True), (SEPARATE, "BSND", False), (MLA, "BSND", False),
         (DSA, "BSND", False)]


@pytest.mark.parametrize("fmt,layout,scale_1", CASES, ids=["merged", "separate_bnsd_1", "separate", "mla", "dsa"])
def test_kv_transfer_offload_reload_bit_exact(rng, fmt, layout, scale_1):
    data, scales = make_layers(rng, fmt, layout, scale_1)
    kv, sc = ms_layers(fmt, data, scales)
    slots = np.array([5, 6, 7, -1, 17, 0, NB * BS - 1, 12], np.int64)
    T = len(slots)
    hid, ns = hidden_and_scales(fmt)
    shape = mk.transfer_buffer_shape(fmt, L, T, hid, scale_sizes=ns)
    buf = Tensor(rng.integers(-128, 128, shape, dtype=np.int8))  # garbage: every byte is overwritten
    mk.multi_layer_kv_transfer(buf, kv, Tensor(slots), kv_format=fmt, direction="d2h", cache_layout=layout,
                               scale_caches=sc)
    expected = ref_buffer(fmt, layout, data, scales, slots)
    assert shape == expected.shape
    np.testing.assert_array_equal(buf.asnumpy().view(np.uint8), expected.view(np.uint8))
    # reload into other slots of zeroed caches: exactly those rows (data and scales) equal the offloaded ones
    zd = [[np.zeros_like(x) for x in dl] for dl in data]
    zs = [[np.zeros_like(x) for x in sl] for sl in scales]
    kv2, sc2 = ms_layers(fmt, zd, zs)
    slots2 = np.array([20, 21, 1, -1, 3, 9, 22, 2], np.int64)
    mk.multi_layer_kv_transfer(buf, kv2, Tensor(slots2), kv_format=fmt, direction="h2d", cache_layout=layout,
                               scale_caches=sc2)
    got_d, got_s = np_layers(fmt, kv2, sc2)
    for src, dst in ((data, got_d), (scales, got_s)):
        for l in range(L):
            for p in range(planes_of(fmt)):
                exp = np.zeros_like(src[l][p])
                for s, s2 in zip(slots, slots2):
                    if s < 0:
                        continue
                    b2, o2 = divmod(int(s2), BS)
                    b, o = divmod(int(s), BS)
                    if fmt not in (MLA, DSA) and layout == "BNSD":
                        exp[b2, :, o2] = src[l][p][b, :, o]
                    else:
                        exp[b2, o2] = src[l][p][b, o]
                np.testing.assert_array_equal(dst[l][p].view(np.uint8) if dst[l][p].dtype == np.float32
                                              else dst[l][p], exp.view(np.uint8) if exp.dtype == np.float32
                                              else exp, err_msg=f"layer {l} plane {p}")


def test_kv_transfer_flat_scales_and_int32_slots_match_nested(rng):
    data, scales = make_layers(rng, SEPARATE, "BSND")
    kv, sc = ms_layers(SEPARATE, data, scales)
    slots = np.array([3, -1, 11], np.int32)
    shape = mk.transfer_buffer_shape("separate", L, 3, H * D, scale_sizes=H)
    b1, b2 = Tensor(np.zeros(shape, np.int8)), Tensor(np.zeros(shape, np.int8))
    mk.multi_layer_kv_transfer(b1, kv, Tensor(slots), kv_format=SEPARATE, direction="d2h", scale_caches=sc)
    mk.multi_layer_kv_transfer(b2, [x for layer in kv for x in layer], Tensor(slots), kv_format=SEPARATE,
                               direction="d2h", scale_caches=[x for layer in sc for x in layer])
    np.testing.assert_array_equal(b1.asnumpy(), b2.asnumpy())
    np.testing.assert_array_equal(b1.asnumpy(), ref_buffer(SEPARATE, "BSND", data, scales, slots))


class QuantOffload(nn.Cell):
    """Caches and scale caches as ParameterTuples; d2h into one buffer Parameter, then h2d into others."""

    def __init__(self, fmt, layout, data, scales, buf_np):
        super().__init__()
        self.fmt, self.layout = fmt, layout
        self.kv = ParameterTuple([Parameter(Tensor(x), name=f"c{l}_{p}") for l, dl in enumerate(data)
                                  for p, x in enumerate(dl)])
        self.sc = ParameterTuple([Parameter(Tensor(x), name=f"s{l}_{p}") for l, sl in enumerate(scales)
                                  for p, x in enumerate(sl)])
        self.kv2 = ParameterTuple([Parameter(Tensor(np.zeros_like(x)), name=f"d{l}_{p}") for l, dl in
                                   enumerate(data) for p, x in enumerate(dl)])
        self.sc2 = ParameterTuple([Parameter(Tensor(np.zeros_like(x)), name=f"t{l}_{p}") for l, sl in
                                   enumerate(scales) for p, x in enumerate(sl)])
        self.buf = Parameter(Tensor(buf_np), name="buf")

    def construct(self, slots, slots2):
        mk.multi_layer_kv_transfer(self.buf, self.kv, slots, kv_format=self.fmt, direction="d2h",
                                   cache_layout=self.layout, scale_caches=self.sc)
        mk.multi_layer_kv_transfer(self.buf, self.kv2, slots2, kv_format=self.fmt, direction="h2d",
                                   cache_layout=self.layout, scale_caches=self.sc2)
        return slots


@pytest.mark.parametrize("fmt,layout", [(SEPARATE, "BNSD"), (MLA, "BSND")], ids=["separate_bnsd", "mla"])
def test_kv_transfer_graph_mode_in_place(rng, fmt, layout):
    data, scales = make_layers(rng, fmt, layout)
    slots = np.array([1, -1, 8, 9], np.int64)
    slots2 = np.array([13, 0, 14, 23], np.int64)
    hid, ns = hidden_and_scales(fmt)
    shape = mk.transfer_buffer_shape(fmt, L, 4, hid, scale_sizes=ns)
    with ms_mode("graph"):
        net = QuantOffload(fmt, layout, data, scales, np.zeros(shape, np.int8))
        net(Tensor(slots), Tensor(slots2))
        buf = net.buf.asnumpy()
        got_s = net.sc2[L * planes_of(fmt) - 1].asnumpy()
        got_d = net.kv2[0].asnumpy()
    np.testing.assert_array_equal(buf, ref_buffer(fmt, layout, data, scales, slots))
    last = scales[L - 1][planes_of(fmt) - 1]
    bnsd = layout == "BNSD"
    for s, s2 in zip(slots, slots2):
        (b, o), (b2, o2) = divmod(int(s), BS), divmod(int(s2), BS)
        src_s = last[b, :, o] if bnsd else last[b, o]
        dst_s = got_s[b2, :, o2] if bnsd else got_s[b2, o2]
        src_d = data[0][0][b, :, o] if bnsd else data[0][0][b, o]
        dst_d = got_d[b2, :, o2] if bnsd else got_d[b2, o2]
        if s < 0:  # skipped: the target row stays zero
            assert not dst_s.any() and not dst_d.any()
        else:
            np.testing.assert_array_equal(dst_s.view(np.uint32), src_s.view(np.uint32))
            np.testing.assert_array_equal(dst_d, src_d)


# ------------------------------------------------------------------------------------------------ block op
def ref_host_blocks(fmt, layout, src_layers, ids, p, dtype):
    """Host blocks of plane p: [n, bs, L, row] token-major; ids out of range give zero blocks."""
    n = len(ids)
    row = token_row(src_layers[0][p], 0, layout, fmt).size
    out = np.zeros((n, BS, L, row), dtype)
    for i, b in enumerate(ids):
        for s in range(BS):
            for l in range(L):
                out[i, s, l] = token_row(src_layers[l][p], int(b) * BS + s, layout, fmt)
    return out


@pytest.mark.parametrize("fmt,layout,staged", [(SEPARATE, "BNSD", False), (MERGED, "BSND", True), (MLA, "BSND", False),
                                                (DSA, "BSND", True)], ids=["separate_bnsd", "merged_staged", "mla",
                                                                           "dsa_staged"])
def test_block_transfer_offload_reload_bit_exact(rng, fmt, layout, staged):
    data, scales = make_layers(rng, fmt, layout)
    kv, sc = ms_layers(fmt, data, scales)
    ids = np.array([4, 1, 5], np.int64)
    n, P = len(ids), planes_of(fmt)
    host = [ref_host_blocks(fmt, layout, data, ids, p, np.int8) for p in range(P)]
    if fmt not in (MLA, DSA):
        host = [h.reshape(n, BS, L, H, D) for h in host]
    shost = [ref_host_blocks(fmt, layout, scales, ids, p, np.float32) for p in range(P)]
    host_t = [Tensor(rng.integers(-128, 128, h.shape, dtype=np.int8)) for h in host]
    shost_t = [Tensor(rng.random(h.shape, dtype=np.float32)) for h in shost]
    per_block = BS * L * (sum(h[0, 0, 0].size for h in host) + 4 * sum(h.shape[-1] for h in shost))
    staging = Tensor(np.zeros(per_block, np.int8)) if staged else None
    mk.multi_layer_block_transfer(kv, host_t, Tensor(ids), direction="d2h", kv_format=fmt, cache_layout=layout,
                                  staging=staging, scale_caches=sc, scale_host_blocks=shost_t)
    for p in range(P):
        np.testing.assert_array_equal(host_t[p].asnumpy(), host[p])
        np.testing.assert_array_equal(shost_t[p].asnumpy().view(np.uint32), shost[p].view(np.uint32))
    zd = [[np.zeros_like(x) for x in dl] for dl in data]
    zs = [[np.zeros_like(x) for x in sl] for sl in scales]
    kv2, sc2 = ms_layers(fmt, zd, zs)
    ids2 = np.array([0, 3, 2], np.int64)
    mk.multi_layer_block_transfer(kv2, host_t, Tensor(ids2), direction="h2d", kv_format=fmt, cache_layout=layout,
                                  staging=staging, scale_caches=sc2, scale_host_blocks=shost_t)
    got_d, got_s = np_layers(fmt, kv2, sc2)
    for src, dst in ((data, got_d), (scales, got_s)):
        for l in range(L):
            for p in range(P):
                exp = np.zeros_like(src[l][p])
                exp[ids2] = src[l][p][ids]
                np.testing.assert_array_equal(dst[l][p].view(np.uint8), exp.view(np.uint8))


class BlockQuant(nn.Cell):
    def __init__(self, data, scales, host_np, shost_np):
        super().__init__()
        self.kv = ParameterTuple([Parameter(Tensor(x), name=f"c{l}_{p}") for l, dl in enumerate(data)
                                  for p, x in enumerate(dl)])
        self.sc = ParameterTuple([Parameter(Tensor(x), name=f"s{l}_{p}") for l, sl in enumerate(scales)
                                  for p, x in enumerate(sl)])
        self.host = ParameterTuple([Parameter(Tensor(x), name=f"h{p}") for p, x in enumerate(host_np)])
        self.shost = ParameterTuple([Parameter(Tensor(x), name=f"sh{p}") for p, x in enumerate(shost_np)])

    def construct(self, ids):
        mk.multi_layer_block_transfer(self.kv, self.host, ids, direction="d2h", kv_format=mk.KVCacheFormat.MLA_KV,
                                      scale_caches=self.sc, scale_host_blocks=self.shost)
        return ids


def test_block_transfer_graph_mode(rng):
    data, scales = make_layers(rng, MLA, "BSND")
    ids = np.array([2, 5], np.int64)
    host = [ref_host_blocks(MLA, "BSND", data, ids, p, np.int8) for p in range(2)]
    shost = [ref_host_blocks(MLA, "BSND", scales, ids, p, np.float32) for p in range(2)]
    with ms_mode("graph"):
        net = BlockQuant(data, scales, [np.zeros_like(h) for h in host], [np.zeros_like(h) for h in shost])
        net(Tensor(ids))
        got = [x.asnumpy() for x in net.host], [x.asnumpy() for x in net.shost]
    for p in range(2):
        np.testing.assert_array_equal(got[0][p], host[p])
        np.testing.assert_array_equal(got[1][p].view(np.uint32), shost[p].view(np.uint32))


# ------------------------------------------------------------------------------------------------ errors
def _kv_args(rng, fmt=SEPARATE, layout="BSND"):
    data, scales = make_layers(rng, fmt, layout)
    kv, sc = ms_layers(fmt, data, scales)
    hid, ns = hidden_and_scales(fmt)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(fmt, L, 2, hid, scale_sizes=ns), np.int8))
    return kv, sc, buf, Tensor(np.array([1, 2], np.int64))


def test_kv_transfer_errors(rng):
    kv, sc, buf, slots = _kv_args(rng)
    op = mk.multi_layer_kv_transfer
    kw = dict(kv_format=SEPARATE, direction="h2d")
    with pytest.raises(ValueError, match=r"multi_layer_kv_transfer: argument 'scale_caches': expected one entry per "
                                         r"layer of 'kv_caches' \(3 layers\), got 2"):
        op(buf, kv, slots, scale_caches=sc[:2], **kw)
    with pytest.raises(TypeError, match=r"'scale_caches\[1\]\[1\]' \(v_scale_cache of layer 1\): expected a float32 "
                                        r"Tensor, got NoneType"):
        op(buf, kv, slots, scale_caches=[sc[0], (sc[1][0], None), sc[2]], **kw)
    bad = [sc[0], sc[1], (sc[2][0], Tensor(np.zeros((NB, BS, H + 1), np.float32)))]
    with pytest.raises(ValueError, match=r"'scale_caches\[2\]\[1\] \(v_scale_cache of layer 2\)': expected shape "
                                         r"\[6, 4, 2, 1\] or \[6, 4, 2\]"):
        op(buf, kv, slots, scale_caches=bad, **kw)
    f16 = [tuple(Tensor(x.asnumpy().astype(np.float16)) for x in layer) for layer in sc]
    with pytest.raises(TypeError, match=r"'scale_caches\[0\]\[0\] \(k_scale_cache of layer 0\)': expected dtype "
                                        r"float32, got float16"):
        op(buf, kv, slots, scale_caches=f16, **kw)
    with pytest.raises(ValueError, match=r"argument 'buffer': expected shape \(480,\) with scale caches"):
        op(Tensor(np.zeros(10, np.int8)), kv, slots, scale_caches=sc, **kw)
    fkv = [tuple(Tensor(x.asnumpy().astype(np.float16)) for x in layer) for layer in kv]
    with pytest.raises(TypeError, match=r"argument 'scale_caches': scale caches go with quantized caches"):
        op(Tensor(np.zeros(480, np.float16)), fkv, slots, scale_caches=sc, **kw)
    with pytest.raises(ValueError, match=r"transfer_buffer_shape: argument 'scale_sizes'"):
        mk.transfer_buffer_shape(SEPARATE, L, 2, H * D, scale_sizes=0)
    with pytest.raises(ValueError, match=r"scale_caches \(tensor \d+ in layer-major order\)': expected a distinct cache tensor"):
        op(buf, kv, slots, scale_caches=[sc[0], sc[0], sc[2]], **kw)


def test_block_transfer_errors(rng):
    data, scales = make_layers(rng, MLA, "BSND")
    kv, sc = ms_layers(MLA, data, scales)
    ids = Tensor(np.array([1], np.int64))
    host = [Tensor(np.zeros((1, BS, L, MLA_HIDDEN[p]), np.int8)) for p in range(2)]
    shost = [Tensor(np.zeros((1, BS, L, 1), np.float32)) for _ in range(2)]
    op = mk.multi_layer_block_transfer
    with pytest.raises(ValueError, match=r"multi_layer_block_transfer: argument 'scale_host_blocks': expected it "
                                         r"together with 'scale_caches'"):
        op(kv, host, ids, direction="d2h", scale_caches=sc)
    with pytest.raises(ValueError, match=r"argument 'scale_host_blocks\[1\]': expected the host blocks of "
                                         r"k_pe_scale_cache"):
        op(kv, host, ids, direction="d2h", scale_caches=sc,
           scale_host_blocks=[shost[0], Tensor(np.zeros((1, BS, L, 2), np.float32))])
    with pytest.raises(ValueError, match=r"argument 'staging': expected at least one block of every data and scale"):
        op(kv, host, ids, direction="d2h", scale_caches=sc, scale_host_blocks=shost,
           staging=Tensor(np.zeros(BS * L * sum(MLA_HIDDEN[:2]), np.int8)))


class SlicedScales(nn.Cell):
    """Written scale tensors that are slices of one Parameter (not Parameters): the graph must refuse them
    naming the public op and argument."""

    def __init__(self, block, data, scales, buf_np):
        super().__init__()
        self.block = block
        self.kv = ParameterTuple([Parameter(Tensor(x), name=f"gc{l}_{p}") for l, dl in enumerate(data)
                                  for p, x in enumerate(dl)])
        self.sc = ParameterTuple([Parameter(Tensor(x), name=f"gs{l}_{p}") for l, sl in enumerate(scales)
                                  for p, x in enumerate(sl)])
        self.whole = Parameter(Tensor(np.stack([x for sl in scales for x in sl])), name="gwhole")
        self.host = ParameterTuple([Parameter(Tensor(np.zeros((1, BS, L, MLA_HIDDEN[p]), np.int8)), name=f"gh{p}")
                                    for p in range(2)])
        self.shost = Parameter(Tensor(np.zeros((2, 1, BS, L, 1), np.float32)), name="gsh")
        self.buf = Parameter(Tensor(buf_np), name="gbuf")

    def construct(self, idx):
        if self.block:  # d2h writes the scale host blocks: two slices of one Parameter
            mk.multi_layer_block_transfer(self.kv, self.host, idx, direction="d2h", kv_format=MLA,
                                          scale_caches=self.sc, scale_host_blocks=(self.shost[0], self.shost[1]))
        else:  # h2d writes the scale caches: L * 2 slices of one Parameter
            w = self.whole
            mk.multi_layer_kv_transfer(self.buf, self.kv, idx, kv_format=MLA, direction="h2d",
                                       scale_caches=(w[0], w[1], w[2], w[3], w[4], w[5]))
        return idx


@pytest.mark.parametrize("block", [False, True], ids=["kv_transfer", "block_transfer"])
def test_graph_mode_refusal_names_the_public_op(rng, block):
    """A written scale tensor that is not a Parameter: the message names multi_layer_kv_transfer /
    multi_layer_block_transfer, not the internal spec (..._quant)."""
    data, scales = make_layers(rng, MLA, "BSND")
    buf = np.zeros(mk.transfer_buffer_shape(MLA, L, 2, MLA_HIDDEN[:2], scale_sizes=1), np.int8)
    op, arg = ("multi_layer_block_transfer", r"scale_host_blocks\[0\]") if block else \
        ("multi_layer_kv_transfer", r"scale_caches\[0\]")
    with ms_mode("graph"):
        net = SlicedScales(block, data, scales, buf)
        with pytest.raises(TypeError, match=rf"^{op}: argument '{arg}': expected a Parameter"):
            net(Tensor(np.array([1] if block else [1, 2], np.int64)))


def _fp8(codes_u8):
    """A float8_e4m3fn Tensor over the given bytes (MindSpore's CPU cannot Cast to float8; 2.7 cannot view)."""
    t = Tensor(np.ascontiguousarray(codes_u8, np.uint8))
    try:
        return t.view(ms.float8_e4m3fn)
    except TypeError:
        if tuple(int(x) for x in ms.__version__.split(".")[:2]) < (2, 8):
            pytest.skip(f"MindSpore {ms.__version__}: no float8 tensor can be built on CPU (Tensor.view(dtype))")
        raise


def test_kv_transfer_float8_caches_with_scales(rng):
    """float8 caches move as their bytes, with the scale caches, through a float8 buffer (PyNative)."""
    data, scales = make_layers(rng, MLA, "BSND")
    kv = [tuple(_fp8(x.view(np.uint8)) for x in dl) for dl in data]
    sc = [tuple(Tensor(x) for x in sl) for sl in scales]
    slots = np.array([2, -1, 19, 20], np.int64)
    shape = mk.transfer_buffer_shape(MLA, L, 4, MLA_HIDDEN[:2], scale_sizes=1)
    buf = _fp8(np.zeros(shape, np.uint8))
    mk.multi_layer_kv_transfer(buf, kv, Tensor(slots), kv_format=MLA, direction="d2h", scale_caches=sc)
    got = buf.view(ms.uint8).asnumpy()
    np.testing.assert_array_equal(got, ref_buffer(MLA, "BSND", data, scales, slots).view(np.uint8))


def test_float8_caches_without_scale_caches_name_the_missing_argument(rng):
    """float8 caches given without scale_caches: the error names kv_caches and says to pass scale_caches (was:
    'argument scale_caches: scale caches go with quantized caches (float16, ...)', an argument never given),
    and nothing is written."""
    data, _ = make_layers(rng, MLA, "BSND")
    kv = [tuple(_fp8(x.view(np.uint8)) for x in dl) for dl in data]
    slots = Tensor(np.array([2, 19], np.int64))
    buf = _fp8(np.zeros(mk.transfer_buffer_shape(MLA, L, 2, MLA_HIDDEN[:2]), np.uint8))
    want = (r"argument 'kv_caches': float8_e4m3fn caches move with their scale caches: pass scale_caches.*"
            r"got float8_e4m3fn")
    with pytest.raises(TypeError, match=want):
        mk.multi_layer_kv_transfer(buf, kv, slots, kv_format=MLA, direction="d2h")
    with pytest.raises(TypeError, match=want):
        mk.multi_layer_kv_transfer(buf, kv, slots, kv_format=MLA, direction="h2d")
    for dl, layer in zip(data, kv):
        for x, t in zip(dl, layer):
            np.testing.assert_array_equal(t.view(ms.uint8).asnumpy(), x.view(np.uint8))
    assert not buf.view(ms.uint8).asnumpy().any()
    host = [_fp8(np.zeros((1, BS, L, MLA_HIDDEN[p]), np.uint8)) for p in range(2)]
    with pytest.raises(TypeError, match=want):
        mk.multi_layer_block_transfer(kv, host, Tensor(np.array([1], np.int64)), direction="d2h", kv_format=MLA)


def test_kv_transfer_jit_and_zero_tokens(rng):
    data, scales = make_layers(rng, SEPARATE, "BSND")
    kv = ParameterTuple([Parameter(Tensor(x), name=f"jc{l}_{p}") for l, dl in enumerate(data)
                         for p, x in enumerate(dl)])
    sc = ParameterTuple([Parameter(Tensor(x), name=f"js{l}_{p}") for l, sl in enumerate(scales)
                         for p, x in enumerate(sl)])
    slots = np.array([7, -1, 0], np.int64)
    buf = Parameter(Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, L, 3, H * D, scale_sizes=H), np.int8)),
                    name="jbuf")

    @ms.jit
    def offload(s):
        mk.multi_layer_kv_transfer(buf, kv, s, kv_format=SEPARATE, direction="d2h", scale_caches=sc)
        return s

    offload(Tensor(slots))
    np.testing.assert_array_equal(buf.asnumpy(), ref_buffer(SEPARATE, "BSND", data, scales, slots))
    # zero tokens: a zero-sized buffer, nothing moves, no error
    empty = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, L, 0, H * D, scale_sizes=H), np.int8))
    mk.multi_layer_kv_transfer(empty, list(kv), Tensor(np.zeros(0, np.int64)), kv_format=SEPARATE, direction="h2d",
                               scale_caches=list(sc))
