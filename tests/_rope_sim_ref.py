"""Data builders and independent numpy models for the sim-backend tests of the fused RoPE-write AscendC
kernels (tests/test_rope*_sim.py, tests/test_rerope_cached_keys_sim.py).

The models redo the kernels' documented fp32 arithmetic with numpy float32 operations (IEEE, one rounding
per operation), so a kernel result must equal them bit for bit:

- rotation: ``rope_ref.rope_f32_model`` (two products, one add / subtract, RNE to the output dtype);
- RMSNorm (``rms_model``), fp16 / bf16: squares in fp32, a halving tree over 8 * 2^k zero-padded lanes,
  the 8 lanes summed as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), / L, + eps, sqrt, 1 / x, then (x * inv) * w;
  fp32: the same in double-float (op_kernel/rope_dd.h: exact squares, double-float tree, corrected
  quotients and root), rounded once;
- rerope delta (``delta_model``): den = co*co + so*so, cd = (cn*co + sn*so) / den, sd = (sn*co - cn*so) / den
  in double-float, rounded once to fp32.

They are also checked against float64 references (``rope_ref.rope64``, an fp64 RMSNorm) with the issue's
tolerances, so a model error cannot hide a kernel error.
"""
import numpy as np

from _copy_sim_ref import NP as _NP
from rope_ref import NP, rope_f32_model, split

F32 = np.float32


def rand(rng, shape, dtype):
    """|x| <= 1 for fp32 (the 1e-5 absolute contract), normal data for fp16 / bf16."""
    if dtype == "float32":
        return rng.uniform(-1, 1, size=shape).astype(np.float32)
    return rng.standard_normal(size=shape).astype(np.float32).astype(NP[dtype])


def make_table(max_position, rotary_dim, dtype="float32", base=10000.0):
    """cos | sin rows computed in float64, rounded to ``dtype`` (vLLM layout)."""
    inv = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.outer(np.arange(max_position, dtype=np.float64), inv)
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32).astype(NP[dtype])


def bits(x):
    x = np.ascontiguousarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


def assert_same(actual, expected, what):
    a, e = bits(actual), bits(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    if not np.array_equal(a, e):
        bad = np.argwhere(a != e)
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {bad[:3].tolist()}")


def rotate_model(x, table, rows, rd, neox, dtype):
    """Rows x [T', H, D] (or [T', D]) rotated with table rows ``rows`` (fp32 model)."""
    c, s = split(table[rows].astype(np.float32), rd)
    if x.ndim == 3:
        c, s = c[:, None, :], s[:, None, :]
    return rope_f32_model(x, c, s, rd, neox, dtype)


def positions_with_edges(rng, rows, max_position, dtype, bad=True):
    """Random positions with 0 and max-1, and (bad=True) graph-mode values outside [0, max_position)."""
    p = rng.integers(0, max_position, size=rows).astype(np.int64)
    if rows == 0:
        return p.astype(_NP[dtype])
    p[0] = 0
    if rows > 1:
        p[-1] = max_position - 1
    if bad and rows >= 6:
        p[2] = -1
        p[4] = max_position + (1 << 33 if dtype == "int64" else 7)
    return p.astype(_NP[dtype])


def slots_with_edges(rng, tokens, num_slots, dtype, pad=True, out_of_range=True):
    """Distinct slots with -1 padding, the last slot, and (graph mode) one past the cache."""
    s = rng.permutation(num_slots)[:tokens].astype(np.int64)
    if pad and tokens > 3:
        s[1] = -1
        s[3] = num_slots - 1 if (num_slots - 1) not in s else s[3]
    if out_of_range and tokens >= 7:
        s[5] = num_slots + 11
    return s.astype(_NP[dtype])


def write_rows(cache, rows, slots, valid, layout="BSND"):
    """cache with row t written at slots[t] for every t with 0 <= slot < num_slots and valid[t]."""
    out = cache.copy()
    if out.ndim == 3:
        nb, bs = out.shape[:2]
        flat = out.reshape(nb * bs, -1)
        for t, s in enumerate(np.asarray(slots, dtype=np.int64)):
            if 0 <= s < nb * bs and valid[t]:
                flat[s] = rows[t].reshape(-1)
        return out
    if layout == "BSND":
        nb, bs, h, d = out.shape
    else:
        nb, h, bs, d = out.shape
    for t, s in enumerate(np.asarray(slots, dtype=np.int64)):
        if not (0 <= s < nb * bs) or not valid[t]:
            continue
        b, o = divmod(int(s), bs)
        row = rows[t].reshape(h, d)
        if layout == "BSND":
            out[b, o] = row
        else:
            out[b, :, o] = row
    return out


# ----------------------------------------------------------------- double-float (op_kernel/rope_dd.h)
def dd_split(a):
    c = F32(4097) * a
    hi = c - (c - a)
    return hi, a - hi


def dd_prod(a, b):
    """p + e == a * b exactly (Dekker, the kernel's operation order)."""
    ah, al = dd_split(a)
    bh, bl = dd_split(b)
    p = a * b
    e = ah * bh - p
    e = e + ah * bl
    e = e + al * bh
    e = e + al * bl
    return p, e


def dd_add(ah, al, bh, bl):
    s = ah + bh
    t = s - ah
    e = ah - (s - t)
    e = e + (bh - t)
    e = e + al
    e = e + bl
    rh = s + e
    return rh, e - (rh - s)


def dd_quotient(nh, nl, dh, dl):
    dhh, dhl = dd_split(dh)
    q1 = nh / dh
    qh, ql = dd_split(q1)
    p = q1 * dh
    pe = qh * dhh - p
    pe = pe + qh * dhl
    pe = pe + ql * dhh
    pe = pe + ql * dhl
    t = nh - p
    t = t - pe
    t = t + nl
    t = t - q1 * dl
    return q1 + t / dh


def _inv_dd(s_hi, s_lo, L, eps):
    """The kernel's double-float 1 / sqrt(S / L + eps) from the sum S = s_hi + s_lo (float32 arrays)."""
    Lv = np.full_like(s_hi, F32(L))
    q1 = s_hi / Lv
    p, pe = dd_prod(q1, Lv)
    r = ((s_hi - p) - pe) + s_lo
    r = r / Lv
    mh = q1 + r
    ml = r - (mh - q1)
    mh, ml = dd_add(mh, ml, np.full_like(mh, F32(eps)), np.zeros_like(mh))
    pos = mh > 0
    s1 = np.sqrt(np.where(pos, mh, F32(1)))
    p, pe = dd_prod(s1, s1)
    r = ((mh - p) - pe) + ml
    r = r / (s1 * F32(2))
    yh = s1 + r
    yl = r - (yh - s1)
    inv = dd_quotient(np.ones_like(yh), np.zeros_like(yh), yh, yl)
    return np.where(pos, inv, np.where(mh == 0, F32(np.inf), mh)).astype(F32)


def rms_model(x, w, eps, dtype):
    """The kernel's RMSNorm of rows x [T', L] with weight w [L] (see the module docstring); fp32 data
    uses the double-float scale."""
    x32 = np.asarray(x).astype(F32)
    w32 = np.asarray(w).astype(F32)
    n, L = x32.shape
    lanes = 8
    while lanes < L:
        lanes *= 2
    if dtype == "float32":
        with np.errstate(over="ignore", invalid="ignore"):
            sh = np.zeros((n, lanes), F32)
            sl = np.zeros((n, lanes), F32)
            sh[:, :L], sl[:, :L] = dd_prod(x32, x32)
            while lanes > 1:
                lanes //= 2
                sh[:, :lanes], sl[:, :lanes] = dd_add(sh[:, :lanes], sl[:, :lanes], sh[:, lanes:2 * lanes],
                                                      sl[:, lanes:2 * lanes])
            inv = _inv_dd(sh[:, 0], sl[:, 0], L, eps)
            return ((x32 * inv[:, None]) * w32).astype(F32)
    sq = np.zeros((n, lanes), F32)
    sq[:, :L] = x32 * x32
    while lanes > 8:
        lanes //= 2
        sq[:, :lanes] = sq[:, :lanes] + sq[:, lanes:2 * lanes]
    s = ((sq[:, 0] + sq[:, 1]) + (sq[:, 2] + sq[:, 3])) + ((sq[:, 4] + sq[:, 5]) + (sq[:, 6] + sq[:, 7]))
    with np.errstate(divide="ignore", invalid="ignore"):
        m = s / F32(L) + F32(eps)
        inv = np.where(m > 0, F32(1) / np.sqrt(np.where(m > 0, m, F32(1))), np.where(m == 0, F32(np.inf), m))
        y = (x32 * inv.astype(F32)[:, None]) * w32
    return y.astype(NP[dtype])


def rms64(x, w, eps):
    x = np.asarray(x).astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * np.asarray(w).astype(np.float64)


def delta_model(table, old, new, rd):
    """(cd, sd, ok): the kernel's double-float delta rotation rows (rounded to fp32) and whether every
    den > 0 (its high part)."""
    co, so = split(table[old].astype(F32), rd)
    cn, sn = split(table[new].astype(F32), rd)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dh, dl = dd_add(*dd_prod(co, co), *dd_prod(so, so))
        nh, nl = dd_add(*dd_prod(cn, co), *dd_prod(sn, so))
        p, e = dd_prod(cn, so)
        mh, ml = dd_add(*dd_prod(sn, co), -p, -e)
        cd = dd_quotient(nh, nl, dh, dl)
        sd = dd_quotient(mh, ml, dh, dl)
    return cd, sd, (dh > 0).all(axis=1)


def heads_of_slot(cache, slot, layout):
    """[H, D] heads stored at ``slot`` (rank 3 caches: [1, D])."""
    if cache.ndim == 3:
        nb, bs, d = cache.shape
        return cache.reshape(nb * bs, 1, d)[slot]
    if layout == "BSND":
        nb, bs, h, d = cache.shape
        return cache.reshape(nb * bs, h, d)[slot]
    nb, h, bs, d = cache.shape
    b, o = divmod(int(slot), bs)
    return cache[b, :, o]
