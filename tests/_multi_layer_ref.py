"""Numpy references and cache builders shared by the multi-layer transfer tests."""
import numpy as np
import ml_dtypes  # noqa: F401

from conftest import random_array, to_ms
from ms_kvcache import KVCacheFormat

MERGED, SEPARATE, MLA, DSA = (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV, KVCacheFormat.MLA_KV,
                              KVCacheFormat.DSA_KV)

#: (format, layout) combinations the ops support.
FORMAT_LAYOUTS = [(MERGED, "BSND"), (MERGED, "BNSD"), (SEPARATE, "BSND"), (SEPARATE, "BNSD"), (MLA, "BSND"),
                  (DSA, "BSND")]
DTYPES = ("float16", "bfloat16", "float32", "int8")
#: dtype digit of the transfer kernels' tiling keys (op_host: dcode)
DCODE = {"float16": 1, "bfloat16": 2, "float32": 3, "int8": 4}


class Geometry:
    """Cache geometry of a test: planes, per-plane (H, D) and the layout."""

    def __init__(self, fmt, layout, num_layers, num_blocks, block_size, heads=2, head_size=16, mla=(16, 8),
                 dsa_index=12):
        self.fmt, self.layout, self.L, self.nb, self.bs = fmt, layout, num_layers, num_blocks, block_size
        if fmt in (MERGED, SEPARATE):
            self.plane_hd = [(heads, head_size)] * 2
        elif fmt == MLA:
            self.plane_hd = [(1, mla[0]), (1, mla[1])]
        else:
            self.plane_hd = [(1, mla[0]), (1, mla[1]), (1, dsa_index)]
        self.P = len(self.plane_hd)

    @property
    def hidden(self):
        return [h * d for h, d in self.plane_hd]

    @property
    def slots(self):
        return self.nb * self.bs

    def plane_shape(self, p):
        h, d = self.plane_hd[p]
        if self.fmt in (MLA, DSA):
            return (self.nb, self.bs, d)
        return (self.nb, h, self.bs, d) if self.layout == "BNSD" else (self.nb, self.bs, h, d)

    def random_planes(self, rng, dtype):
        """numpy planes [L][P] in cache layout."""
        return [[random_array(rng, self.plane_shape(p), dtype) for p in range(self.P)] for _ in range(self.L)]

    def rows(self, plane):
        """[nb*bs, hidden] view of a numpy plane in slot order (a copy for BNSD)."""
        if self.fmt in (MLA, DSA) or self.layout == "BSND":
            return plane.reshape(self.slots, -1)
        nb, h, bs, d = plane.shape
        return plane.transpose(0, 2, 1, 3).reshape(self.slots, h * d)

    def set_rows(self, plane, slots, rows):
        """Write rows [len(slots), hidden] at slots into a numpy plane (in place)."""
        if self.fmt in (MLA, DSA) or self.layout == "BSND":
            plane.reshape(self.slots, -1)[slots] = rows
            return
        nb, h, bs, d = plane.shape
        for s, r in zip(slots, rows):
            plane[s // bs, :, s % bs, :] = r.reshape(h, d)

    def to_ms(self, planes, dtype):
        """Nested per-layer entries of mindspore Tensors (MERGED: one [2, ...] tensor per layer)."""
        if self.fmt == MERGED:
            return [to_ms(np.stack(layer), dtype) for layer in planes]
        return [tuple(to_ms(x, dtype) for x in layer) for layer in planes]

    def from_ms(self, caches):
        """Nested Tensors -> numpy planes [L][P] with exact bits."""
        from conftest import to_np

        if self.fmt == MERGED:
            return [[to_np(c)[0], to_np(c)[1]] for c in caches]
        return [[to_np(x) for x in layer] for layer in caches]


def ref_gather(geo, planes, slots):
    """Reference d2h: list over planes of [L, T, hidden_p] arrays (zero rows for slot < 0)."""
    slots = np.asarray(slots, np.int64)
    out = []
    for p in range(geo.P):
        dt = planes[0][p].dtype
        arr = np.zeros((geo.L, len(slots), geo.hidden[p]), dt)
        for l in range(geo.L):
            rows = geo.rows(planes[l][p])
            ok = slots >= 0
            arr[l, ok] = rows[slots[ok]]
        out.append(arr)
    return out


def pack_buffer(geo, per_plane):
    """Planes [L, T, hidden_p] -> the buffer layout of multi_layer_kv_transfer."""
    if geo.fmt in (MERGED, SEPARATE):
        return np.stack(per_plane)
    return np.concatenate([x.reshape(-1) for x in per_plane])


def unpack_buffer(geo, buf, num_tokens):
    if geo.fmt in (MERGED, SEPARATE):
        return [buf[p] for p in range(geo.P)]
    out, off = [], 0
    for p in range(geo.P):
        n = geo.L * num_tokens * geo.hidden[p]
        out.append(buf[off:off + n].reshape(geo.L, num_tokens, geo.hidden[p]))
        off += n
    return out


def ref_scatter(geo, planes, per_plane, slots):
    """Reference h2d: copies of planes with buffer rows written at slots >= 0."""
    slots = np.asarray(slots, np.int64)
    out = [[x.copy() for x in layer] for layer in planes]
    ok = slots >= 0
    for l in range(geo.L):
        for p in range(geo.P):
            geo.set_rows(out[l][p], slots[ok], per_plane[p][l][ok])
    return out


def ref_block_gather(geo, planes, block_ids):
    """Reference block d2h: per plane host blocks [n, bs, L, H, D] (MLA/DSA [n, bs, L, hidden])."""
    out = []
    for p in range(geo.P):
        h, d = geo.plane_hd[p]
        n = len(block_ids)
        host = np.zeros((n, geo.bs, geo.L, geo.hidden[p]), planes[0][p].dtype)
        for l in range(geo.L):
            rows = geo.rows(planes[l][p]).reshape(geo.nb, geo.bs, -1)
            host[:, :, l] = rows[np.asarray(block_ids, np.int64)]
        if geo.fmt in (MERGED, SEPARATE):
            host = host.reshape(n, geo.bs, geo.L, h, d)
        out.append(host)
    return out


def ref_block_scatter(geo, planes, host, block_ids):
    out = [[x.copy() for x in layer] for layer in planes]
    for p in range(geo.P):
        hb = host[p].reshape(len(block_ids), geo.bs, geo.L, -1)
        for i, b in enumerate(block_ids):
            slots = np.arange(b * geo.bs, (b + 1) * geo.bs)
            for l in range(geo.L):
                geo.set_rows(out[l][p], slots, hb[i, :, l])
    return out


def host_block_shape(geo, p, n):
    h, d = geo.plane_hd[p]
    if geo.fmt in (MERGED, SEPARATE):
        return (n, geo.bs, geo.L, h, d)
    return (n, geo.bs, geo.L, h * d)


def flat_caches(geo, planes):
    """The kv_caches list as the kernels get it: layer-major, MERGED one [2, ...] tensor per layer."""
    if geo.fmt == MERGED:
        return [np.stack(layer) for layer in planes]
    return [x for layer in planes for x in layer]


def unflat(geo, flat):
    """Inverse of flat_caches: per layer, the list of its planes."""
    if geo.fmt == MERGED:
        return [[c[0], c[1]] for c in flat]
    return [flat[l * geo.P:(l + 1) * geo.P] for l in range(geo.L)]
