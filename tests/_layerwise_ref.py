"""Cases shared by the layer-wise transfer tests (cpu, sim, ascend stand-in): random caches, buffers and host
blocks for every format, the synchronous op's result on a twin set of tensors, and exact comparisons."""
import numpy as np

import mindspore as ms
from mindspore import Tensor

import ms_kvcache as mk
from conftest import assert_bits_equal, random_array, to_ms, to_np
from _multi_layer_ref import (DSA, MERGED, MLA, SEPARATE, Geometry, host_block_shape, pack_buffer, ref_block_gather,
                              ref_block_scatter, ref_gather, ref_scatter, unpack_buffer)

__all__ = ["TokenCase", "BlockCase", "QuantCase", "run_layerwise", "MERGED", "SEPARATE", "MLA", "DSA", "Geometry"]


def _zeros_like_np(x, dtype):
    return to_ms(np.zeros(x.shape, np.float32), dtype) if dtype == "bfloat16" else Tensor(np.zeros_like(x))


def pick_slots(rng, geo, T):
    """T distinct slots with a skipped token (-1) and the last slot of the cache."""
    slots = rng.choice(geo.slots - 1, size=T - 2, replace=False).tolist() + [-1, geo.slots - 1]
    rng.shuffle(slots)
    return np.array(slots, np.int64)


class TokenCase:
    """multi_layer_kv_transfer case: ``args(which)`` gives (buffer, kv_caches, slots) of twin ``which`` ("sync" or
    "lw"); ``check()`` compares the twins bit for bit and with the numpy reference."""

    def __init__(self, rng, fmt, layout, dtype, direction, L=3, nb=6, bs=4, T=7, host_buffer=False):
        self.geo = geo = Geometry(fmt, layout, num_layers=L, num_blocks=nb, block_size=bs)
        self.fmt, self.layout, self.dtype, self.direction = fmt, layout, dtype, direction
        self.planes = geo.random_planes(rng, dtype)
        self.slots = pick_slots(rng, geo, T)
        self.T = T
        shape = mk.transfer_buffer_shape(fmt, L, T, geo.hidden[0] if fmt in (MERGED, SEPARATE) else geo.hidden)
        if direction == "h2d":
            self.per_plane = [random_array(rng, (L, T, h), dtype) for h in geo.hidden]
            self.buf_np = pack_buffer(geo, self.per_plane)
        self.twins = {}
        for which in ("sync", "lw"):
            if direction == "d2h":
                buf = mk.alloc_host_buffer(shape, dtype) if host_buffer else to_ms(np.zeros(shape, np.float32), dtype) \
                    if dtype == "bfloat16" else Tensor(np.zeros(shape, np.dtype(dtype)))
                caches = geo.to_ms(self.planes, dtype)
            else:
                buf = to_ms(self.buf_np, dtype)
                caches = geo.to_ms(self.planes, dtype)
            self.twins[which] = (buf, caches, Tensor(self.slots))

    def args(self, which):
        return self.twins[which]

    def run_sync(self):
        buf, caches, slots = self.twins["sync"]
        mk.multi_layer_kv_transfer(buf, caches, slots, kv_format=self.fmt, direction=self.direction,
                                   cache_layout=self.layout)

    def make(self, **kw):
        buf, caches, slots = self.twins["lw"]
        return mk.LayerwiseTransfer(buf, caches, slots, kv_format=self.fmt, direction=self.direction,
                                    cache_layout=self.layout, **kw)

    def check(self, layers=None):
        """Twins equal (sync vs layer-wise) and equal to numpy; ``layers``: only these layers were moved (the
        others' caches / buffer rows must be untouched)."""
        geo = self.geo
        layers = list(range(geo.L)) if layers is None else list(layers)
        if self.direction == "d2h":
            exp = ref_gather(geo, self.planes, self.slots)
            got = unpack_buffer(geo, to_np(self.twins["lw"][0]), self.T)
            ref = unpack_buffer(geo, to_np(self.twins["sync"][0]), self.T)
            for p in range(geo.P):
                for l in range(geo.L):
                    want = exp[p][l] if l in layers else np.zeros_like(exp[p][l])
                    assert_bits_equal(got[p][l], want, f"d2h plane {p} layer {l}")
                    if l in layers:
                        assert_bits_equal(got[p][l], ref[p][l], f"d2h vs sync plane {p} layer {l}")
        else:
            exp = ref_scatter(geo, self.planes, self.per_plane, self.slots)
            got = geo.from_ms(self.twins["lw"][1])
            ref = geo.from_ms(self.twins["sync"][1])
            for l in range(geo.L):
                for p in range(geo.P):
                    want = exp[l][p] if l in layers else self.planes[l][p]
                    assert_bits_equal(got[l][p], want, f"h2d layer {l} plane {p}")
                    if l in layers:
                        assert_bits_equal(got[l][p], ref[l][p], f"h2d vs sync layer {l} plane {p}")


class BlockCase:
    """multi_layer_block_transfer case (same interface as :class:`TokenCase`)."""

    def __init__(self, rng, fmt, layout, dtype, direction, L=3, nb=7, bs=4, ids=(5, 0, 6, 2), staging=False):
        self.geo = geo = Geometry(fmt, layout, num_layers=L, num_blocks=nb, block_size=bs)
        self.fmt, self.layout, self.dtype, self.direction = fmt, layout, dtype, direction
        self.planes = geo.random_planes(rng, dtype)
        self.ids = np.array(ids, np.int64)
        n = len(ids)
        if direction == "h2d":
            self.host_np = [random_array(rng, host_block_shape(geo, p, n), dtype) for p in range(geo.P)]
        self.twins = {}
        for which in ("sync", "lw"):
            if direction == "d2h":
                host = [_zeros_like_np(np.zeros(host_block_shape(geo, p, n)), dtype) if dtype == "bfloat16" else
                        Tensor(np.zeros(host_block_shape(geo, p, n), np.dtype(dtype))) for p in range(geo.P)]
            else:
                host = [to_ms(h, dtype) for h in self.host_np]
            stg = None
            if staging:
                k = bs * L * sum(geo.hidden)
                stg = to_ms(np.zeros(k, np.float32), dtype) if dtype == "bfloat16" else Tensor(np.zeros(k, np.dtype(dtype)))
            self.twins[which] = (geo.to_ms(self.planes, dtype), host, Tensor(self.ids), stg)

    def run_sync(self):
        caches, host, ids, stg = self.twins["sync"]
        mk.multi_layer_block_transfer(caches, host, ids, direction=self.direction, staging=stg, kv_format=self.fmt,
                                      cache_layout=self.layout)

    def make(self, **kw):
        caches, host, ids, stg = self.twins["lw"]
        return mk.LayerwiseTransfer.blocks(caches, host, ids, direction=self.direction, staging=stg,
                                           kv_format=self.fmt, cache_layout=self.layout, **kw)

    def check(self, layers=None):
        geo = self.geo
        layers = list(range(geo.L)) if layers is None else list(layers)
        if self.direction == "d2h":
            exp = ref_block_gather(geo, self.planes, self.ids)
            for p in range(geo.P):
                got = to_np(self.twins["lw"][1][p])
                ref = to_np(self.twins["sync"][1][p])
                for l in range(geo.L):
                    want = exp[p][:, :, l] if l in layers else np.zeros_like(exp[p][:, :, l])
                    assert_bits_equal(got[:, :, l], want, f"d2h plane {p} layer {l}")
                    if l in layers:
                        assert_bits_equal(got[:, :, l], ref[:, :, l], f"d2h vs sync plane {p} layer {l}")
        else:
            exp = ref_block_scatter(geo, self.planes, self.host_np, self.ids)
            got = geo.from_ms(self.twins["lw"][0])
            ref = geo.from_ms(self.twins["sync"][0])
            for l in range(geo.L):
                for p in range(geo.P):
                    want = exp[l][p] if l in layers else self.planes[l][p]
                    assert_bits_equal(got[l][p], want, f"h2d layer {l} plane {p}")
                    if l in layers:
                        assert_bits_equal(got[l][p], ref[l][p], f"h2d vs sync layer {l} plane {p}")


def _fp8(u8):
    return Tensor(np.ascontiguousarray(u8, np.uint8)).view(ms.float8_e4m3fn)


class QuantCase:
    """Quantized caches (int8 or float8_e4m3fn) with their float32 scale caches, token or block transfer; compared
    with the synchronous op on a twin set (the synchronous op's layout is checked against numpy in
    tests/test_multi_layer_quant_transfer.py)."""

    def __init__(self, rng, kind, fmt, layout, direction, dtype="int8", L=3, nb=6, bs=4, T=6, ids=(4, 1, 5)):
        self.kind, self.fmt, self.layout, self.direction, self.dtype = kind, fmt, layout, direction, dtype
        P = 3 if fmt == DSA else 2
        H, D = 2, 16
        hid = [16, 8, 12][:P] if fmt in (MLA, DSA) else [H * D] * 2
        self.L = L
        self.data = []
        self.scales = []
        for _ in range(L):
            if fmt in (MLA, DSA):
                self.data.append([rng.integers(-128, 128, (nb, bs, hid[p]), dtype=np.int8) for p in range(P)])
                self.scales.append([rng.random((nb, bs, 1), dtype=np.float32) + 0.01 for _ in range(P)])
            else:
                shape = (nb, H, bs, D) if layout == "BNSD" else (nb, bs, H, D)
                self.data.append([rng.integers(-128, 128, shape, dtype=np.int8) for _ in range(P)])
                self.scales.append([rng.random(shape[:3], dtype=np.float32) + 0.01 for _ in range(P)])
        ns = 1 if fmt in (MLA, DSA) else H
        self.slots = pick_slots(rng, Geometry(fmt, layout, L, nb, bs), T)
        self.ids = np.array(ids, np.int64)
        n = len(ids)
        if kind == "token":
            hs = hid if fmt in (MLA, DSA) else hid[0]
            shape = mk.transfer_buffer_shape(fmt, L, T, hs, scale_sizes=ns)
            self.host_np = [rng.integers(-128, 128, shape, dtype=np.int8) if direction == "h2d" else
                            np.zeros(shape, np.int8)]
            if direction == "h2d":  # finite scale bytes (any bytes move, but keep them readable)
                nd = L * T * sum(hid)
                self.host_np[0][nd:] = (rng.random((self.host_np[0].size - nd) // 4, dtype=np.float32) + 0.5).view(np.int8)
            self.shost_np = []
        else:
            hshape = [(n, bs, L, H, D) if fmt in (MERGED, SEPARATE) else (n, bs, L, hid[p]) for p in range(P)]
            sshape = [(n, bs, L, ns)] * P
            rnd = direction == "h2d"
            self.host_np = [rng.integers(-128, 128, s, dtype=np.int8) if rnd else np.zeros(s, np.int8) for s in hshape]
            self.shost_np = [rng.random(s, dtype=np.float32) if rnd else np.zeros(s, np.float32) for s in sshape]
        self.twins = {w: self._tensors() for w in ("sync", "lw")}

    def _t8(self, x):
        return _fp8(x.view(np.uint8)) if self.dtype == "float8_e4m3fn" else Tensor(x.copy())

    def _tensors(self):
        if self.fmt == MERGED:
            kv = [self._t8(np.stack(dl)) for dl in self.data]
        else:
            kv = [tuple(self._t8(x) for x in dl) for dl in self.data]
        sc = [tuple(Tensor(x.copy()) for x in sl) for sl in self.scales]
        host = [self._t8(h) for h in self.host_np]
        shost = [Tensor(h.copy()) for h in self.shost_np]
        return kv, sc, host, shost

    def _call(self, which, layerwise, **kw):
        kv, sc, host, shost = self.twins[which]
        if self.kind == "token":
            args = (host[0], kv, Tensor(self.slots))
            kwargs = dict(kv_format=self.fmt, direction=self.direction, cache_layout=self.layout, scale_caches=sc)
            return mk.LayerwiseTransfer(*args, **kwargs, **kw) if layerwise else \
                mk.multi_layer_kv_transfer(*args, **kwargs)
        args = (kv, host, Tensor(self.ids))
        kwargs = dict(direction=self.direction, kv_format=self.fmt, cache_layout=self.layout, scale_caches=sc,
                      scale_host_blocks=shost)
        return mk.LayerwiseTransfer.blocks(*args, **kwargs, **kw) if layerwise else \
            mk.multi_layer_block_transfer(*args, **kwargs)

    def run_sync(self):
        self._call("sync", False)

    def make(self, **kw):
        return self._call("lw", True, **kw)

    def check(self):
        def raw(t):
            return t.view(ms.uint8).asnumpy() if self.dtype == "float8_e4m3fn" else t.asnumpy()

        a, b = self.twins["lw"], self.twins["sync"]
        groups = (2, 3) if self.direction == "d2h" else (0, 1)
        for g in groups:
            for x, y in zip(_leaves(a[g]), _leaves(b[g])):
                assert_bits_equal(raw(x), raw(y), f"{self.kind} {self.direction} group {g}")
        # and the transfer moved something: the twins differ from their starting values
        if self.direction == "d2h":
            assert any(raw(x).any() for x in _leaves(a[2])), "nothing was saved"
        else:
            start = self._tensors()
            assert any(not np.array_equal(raw(x), raw(y)) for x, y in zip(_leaves(a[0]), _leaves(start[0])))


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [y for z in x for y in _leaves(z)]
    return [x]


def run_layerwise(lt, direction, num_layers, order=None, wait_order=None, use_start=False):
    """Issue every layer (d2h: save_layer in ``order`` unless ``use_start``) and wait for them in ``wait_order``
    (default: reversed), then wait()."""
    order = list(range(num_layers)) if order is None else list(order)
    wait_order = list(reversed(range(num_layers))) if wait_order is None else list(wait_order)
    if direction == "h2d" or use_start:
        lt.start()
    else:
        for layer in order:
            lt.save_layer(layer)
    for layer in wait_order:
        lt.wait_layer(layer)
    lt.wait()
    assert lt.done()
