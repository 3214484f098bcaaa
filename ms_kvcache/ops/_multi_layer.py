"""Shared pieces of the multi-layer ops (``multi_layer_kv_transfer``, ``multi_layer_block_transfer``).

How a list of per-layer caches reaches the kernel (docs/design.md, "Lists of tensors"): the op has one
list input ``kv_caches`` (``TensorSpec(dynamic=True)``; AscendC ``ParamType(DYNAMIC)`` / an aclnn
``aclTensorList``), whose tensors the primitive takes as consecutive inputs, in layer-major order:
layer ``l``, component ``c`` is tensor ``l * tensors_per_layer + c``, where ``tensors_per_layer`` is 1
for MERGED_KV (the ``[2, nb, ...]`` tensor) and the plane count otherwise. Every cache is its own
argument, marked RW_WRITE when the op writes caches, so graph mode orders the op against other
reads/writes of each Parameter and copies nothing; the list length is a per-instance count
(``dyn_input_sizes``), so one primitive class serves every layer count. Not chosen: a table of
per-layer base addresses (an int64 tensor) - graph mode cannot know addresses at compile time and the
compiler could no longer see which Parameters the op touches.

Users pass ``kv_caches`` either nested (one entry per layer: a tensor for MERGED_KV, a tuple of planes
otherwise) or already flat (``L * planes`` tensors in that layer-major order, e.g. one
``ParameterTuple``). In graph mode nested input is flattened by :func:`flatten_graph` (recursive
halving: about 0.8 s extra compile time for 61 layers x 3 planes on this machine; a flat tuple costs
nothing) - a nested tuple handed to the primitive as one argument would also run, but MindSpore does
not apply RW_WRITE to Parameters inside a tuple and graph mode would read stale caches.
"""
import operator

import numpy as np

from ms_kvcache._formats import CACHE_LAYOUTS, DIRECTIONS, KVCacheFormat, planes_of, tensors_per_layer
from ms_kvcache._opspecs.transfer import transfer_attrs
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, QUANT_CACHE_DTYPES
from ms_kvcache._spec import dtype_name as _dtype_name

__all__ = [
    "DIRECTIONS", "PLANE_NAMES", "planes_of", "tensors_per_layer", "format_code", "check_direction",
    "check_layout", "flatten_eager", "flatten_graph", "cache_planes", "check_index", "check_kv_dtypes",
    "check_aiv_num", "FORMAT_NAMES", "FORMAT_SPELLINGS", "transfer_attrs", "check_block_shapes", "numel",
    "check_nz_caches", "check_nz_dtype",
]

#: Names of the planes of each format (used in messages).
PLANE_NAMES = {
    KVCacheFormat.MERGED_KV: ("key", "value"),
    KVCacheFormat.SEPARATE_KV: ("key_cache", "value_cache"),
    KVCacheFormat.MLA_KV: ("kv_c_cache", "k_pe_cache"),
    KVCacheFormat.DSA_KV: ("kv_c_cache", "k_pe_cache", "indexer_k_cache"),
}


#: Accepted string spellings of ``kv_format`` (any case): the member name or its short form (the demo's
#: ``--kv-format`` spelling), e.g. ``"SEPARATE_KV"`` / ``"separate"``.
FORMAT_NAMES = {n: f for f in KVCacheFormat for n in (f.name.lower(), f.name.lower()[:-len("_kv")])}

#: One line listing every accepted ``kv_format`` spelling (used in error messages).
FORMAT_SPELLINGS = ("a KVCacheFormat member ({}), its int value ({}) or a name, any case ({})".format(
    ", ".join(f.name for f in KVCacheFormat), ", ".join(str(int(f)) for f in KVCacheFormat),
    ", ".join(f"'{f.name.lower()[:-3]}' / '{f.name}'" for f in KVCacheFormat)))


def format_code(op, kv_format):
    """``kv_format`` -> its int value; ValueError listing every accepted spelling otherwise.

    Accepted: a :class:`KVCacheFormat` member, its int value (1-4) or a string naming it in any case,
    either the member name (``"SEPARATE_KV"``) or its short form (``"separate"``, ``"merged"``, ``"mla"``,
    ``"dsa"``)."""
    if isinstance(kv_format, KVCacheFormat):
        return int(kv_format)
    if isinstance(kv_format, str):
        fmt = FORMAT_NAMES.get(kv_format.lower())
        if fmt is not None:
            return int(fmt)
    elif isinstance(kv_format, int) and not isinstance(kv_format, bool):
        if kv_format in {int(f) for f in KVCacheFormat}:
            return int(kv_format)
    raise ValueError(f"{op}: argument 'kv_format': expected {FORMAT_SPELLINGS}, got {kv_format!r}")


def check_direction(op, direction):
    if direction not in DIRECTIONS:
        raise ValueError(f"{op}: argument 'direction': expected 'd2h' (caches -> host) or 'h2d' "
                         f"(host -> caches), got {direction!r}")


def check_layout(op, fmt, cache_layout):
    if cache_layout not in CACHE_LAYOUTS:
        raise ValueError(f"{op}: argument 'cache_layout': expected one of {CACHE_LAYOUTS}, got {cache_layout!r}")
    if fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV) and cache_layout == "NZ":
        raise ValueError(f"{op}: argument 'cache_layout': expected 'BSND' for {KVCacheFormat(fmt).name}, got 'NZ' (MLA / "
                         f"DSA caches stay ND [num_blocks, block_size, hidden]: no Ascend 310P attention reads an NZ "
                         f"MLA cache)")
    if fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV) and cache_layout != "BSND":
        raise ValueError(f"{op}: argument 'cache_layout': expected 'BSND' for {KVCacheFormat(fmt).name} "
                         f"(its caches are [num_blocks, block_size, hidden]), got {cache_layout!r}")


def check_nz_caches(op, fmt, cache_layout, shapes, dtype):
    """NZ caches (``cache_layout="NZ"``): layer 0's tensors are NZ caches ``[num_blocks, hidden // C0, block_size,
    C0]`` (MERGED_KV ``[2, ...]``) of ``dtype``, C0 its 32 bytes (ms_kvcache._nz.nz_geometry; TypeError for a
    dtype without NZ form, ValueError for a shape). Nothing for other layouts."""
    if cache_layout != "NZ":
        return
    from ms_kvcache._nz import nz_geometry

    for c in range(min(tensors_per_layer(fmt), len(shapes))):
        s = tuple(int(d) for d in shapes[c])
        nz_geometry(op, _name(fmt, c), s[1:] if fmt == KVCacheFormat.MERGED_KV else s, dtype_name(dtype))


def check_nz_dtype(op, cache_layout, dtype):
    """NZ caches are float16, bfloat16 or int8 (a TypeError naming 'kv_caches' otherwise): the dtype half of
    check_nz_caches, for the infer step's dtype function."""
    if cache_layout == "NZ":
        from ms_kvcache._nz import nz_c0

        nz_c0(op, "kv_caches", dtype_name(dtype))


def _nz_plane(op, fmt, c, s):
    """(nb, bs, hidden // C0, C0) of an NZ cache shape (the BNSD view of its C0 pieces); the dtype rules are
    check_nz_caches'."""
    from ms_kvcache._nz import NZ_BLOCK_ALIGN, NZ_RANK_TEXT

    dims = s[1:] if fmt == KVCacheFormat.MERGED_KV else s
    if len(dims) != 4 or dims[3] not in (16, 32) or (fmt == KVCacheFormat.MERGED_KV and s[0] != 2):
        lay = f"[2, {NZ_RANK_TEXT[1:]}" if fmt == KVCacheFormat.MERGED_KV else NZ_RANK_TEXT
        raise ValueError(f"{op}: argument '{_name(fmt, c)}': expected an NZ {KVCacheFormat(fmt).name} cache {lay} "
                         f"(C0 = 16 for float16 / bfloat16, 32 for int8), got shape {s}")
    nb, f, bs, c0 = dims
    if bs % NZ_BLOCK_ALIGN:
        raise ValueError(f"{op}: argument '{_name(fmt, c)}': expected block_size (dim {len(s) - 2} of an NZ cache) a "
                         f"multiple of {NZ_BLOCK_ALIGN}, got shape {s}")
    return nb, bs, f, c0


def dtype_name(dtype):
    """Canonical dtype name (:func:`ms_kvcache._spec.dtype_name`, which unwraps infer-step types)."""
    return _dtype_name(dtype)


def _is_seq(x):
    return isinstance(x, (tuple, list))


def flatten_eager(op, kv_caches, fmt):
    """(flat tuple of tensors in layer-major order, num_layers); TypeError/ValueError naming the entry."""
    from mindspore import Tensor

    if not _is_seq(kv_caches):
        raise TypeError(f"{op}: argument 'kv_caches': expected a list/tuple with one entry per layer, "
                        f"got {type(kv_caches).__name__}")
    if len(kv_caches) == 0:
        raise ValueError(f"{op}: argument 'kv_caches': expected at least one layer, got an empty sequence")
    tpl = tensors_per_layer(fmt)
    fname = KVCacheFormat(fmt).name
    if tpl == 1 or not _is_seq(kv_caches[0]):
        flat = tuple(kv_caches)
        for i, x in enumerate(flat):
            if not isinstance(x, Tensor):
                what = "a Tensor per layer" if tpl == 1 else "a flat sequence of Tensors"
                raise TypeError(f"{op}: argument 'kv_caches[{i}]': expected {what} for {fname}, "
                                f"got {type(x).__name__}")
        if len(flat) % tpl:
            raise ValueError(f"{op}: argument 'kv_caches': a flat sequence for {fname} needs num_layers * {tpl} "
                             f"tensors in layer-major order, got {len(flat)}")
        return flat, len(flat) // tpl
    flat = []
    for l, layer in enumerate(kv_caches):
        if not _is_seq(layer) or len(layer) != tpl:
            got = f"{len(layer)} tensors" if _is_seq(layer) else type(layer).__name__
            raise ValueError(f"{op}: argument 'kv_caches[{l}]': expected a tuple of {tpl} tensors "
                             f"{PLANE_NAMES[fmt]} for {fname}, got {got}")
        for c, x in enumerate(layer):
            if not isinstance(x, Tensor):
                raise TypeError(f"{op}: argument 'kv_caches[{l}][{c}]': expected a Tensor, got {type(x).__name__}")
            flat.append(x)
    return tuple(flat), len(kv_caches)


def flatten_graph(kv_caches):
    """Graph-mode flattening of nested per-layer caches into one tuple (layer-major).

    Written in the subset of Python the MindSpore graph compiler accepts; recursive halving keeps the
    compiled graph small (a loop of tuple concatenations costs ~3x the compile time).
    """
    if isinstance(kv_caches[0], (tuple, list)):
        return _halve(kv_caches)
    return tuple(kv_caches)


def _halve(kv):
    n = len(kv)
    if n == 1:
        return tuple(kv[0])
    h = n // 2
    return _halve(kv[:h]) + _halve(kv[h:])


def _name(fmt, i):
    tpl = tensors_per_layer(fmt)
    if tpl == 1:
        return f"kv_caches[{i}]"
    return f"kv_caches[{i // tpl}][{i % tpl}]"


def cache_planes(op, fmt, cache_layout, num_layers, shapes):
    """Check the flat per-layer cache shapes; return one (nb, bs, heads, head) tuple per plane.

    shapes: the ``num_layers * tensors_per_layer`` cache shapes in layer-major order. Every layer must
    have the shapes of layer 0; MERGED_KV is ``[2, nb, bs, H, D]`` (BSND) / ``[2, nb, H, bs, D]`` (BNSD);
    SEPARATE_KV planes ``[nb, bs, H, D]`` / ``[nb, H, bs, D]`` with key and value of one shape; MLA/DSA
    planes ``[nb, bs, hidden]`` (or ``[nb, bs, 1, hidden]``) sharing nb and bs.
    """
    tpl = tensors_per_layer(fmt)
    if len(shapes) != num_layers * tpl:
        raise ValueError(f"{op}: argument 'kv_caches': expected {num_layers} layers x {tpl} tensors = "
                         f"{num_layers * tpl} caches for {KVCacheFormat(fmt).name}, got {len(shapes)} tensors")
    shapes = [tuple(int(d) for d in s) for s in shapes]
    for i in range(tpl, len(shapes)):
        if shapes[i] != shapes[i % tpl]:
            raise ValueError(f"{op}: argument '{_name(fmt, i)}': expected shape {shapes[i % tpl]} (same as "
                             f"'{_name(fmt, i % tpl)}': every layer has the same cache shape), got {shapes[i]}")
    if cache_layout == "NZ" and fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV):
        planes = [_nz_plane(op, fmt, c, shapes[c]) for c in range(tpl)]
        if fmt == KVCacheFormat.SEPARATE_KV and shapes[1] != shapes[0]:
            raise ValueError(f"{op}: argument 'kv_caches[0][1]': expected shape {shapes[0]} (same as the key cache), "
                             f"got {shapes[1]}")
        return planes * (2 // tpl)
    bnsd = cache_layout == "BNSD"
    lay = "[2, num_blocks, num_kv_heads, block_size, head_size]" if bnsd else \
        "[2, num_blocks, block_size, num_kv_heads, head_size]"
    if fmt == KVCacheFormat.MERGED_KV:
        s = shapes[0]
        if len(s) != 5 or s[0] != 2:
            raise ValueError(f"{op}: argument 'kv_caches[0]': expected a {cache_layout} MERGED_KV cache {lay}, "
                             f"got shape {s}")
        nb, bs, h, d = (s[1], s[3], s[2], s[4]) if bnsd else (s[1], s[2], s[3], s[4])
        return [(nb, bs, h, d)] * 2
    if fmt == KVCacheFormat.SEPARATE_KV:
        k, v = shapes[0], shapes[1]
        for c, s in enumerate((k, v)):
            if len(s) != 4:
                exp = "[num_blocks, num_kv_heads, block_size, head_size]" if bnsd else \
                    "[num_blocks, block_size, num_kv_heads, head_size]"
                raise ValueError(f"{op}: argument 'kv_caches[0][{c}]': expected a {cache_layout} cache {exp}, "
                                 f"got shape {s}")
        if v != k:
            raise ValueError(f"{op}: argument 'kv_caches[0][1]': expected shape {k} (same as the key cache), got {v}")
        nb, bs, h, d = (k[0], k[2], k[1], k[3]) if bnsd else k
        return [(nb, bs, h, d)] * 2
    planes = []
    for c in range(tpl):
        s = shapes[c]
        if not (len(s) == 3 or (len(s) == 4 and s[2] == 1)):
            raise ValueError(f"{op}: argument 'kv_caches[0][{c}]': expected a {KVCacheFormat(fmt).name} "
                             f"{PLANE_NAMES[fmt][c]} [num_blocks, block_size, hidden] (or [num_blocks, block_size, "
                             f"1, hidden]), got shape {s}")
        planes.append((s[0], s[1], 1, s[-1]))
        if (s[0], s[1]) != (planes[0][0], planes[0][1]):
            raise ValueError(f"{op}: argument 'kv_caches[0][{c}]': expected num_blocks, block_size = "
                             f"{planes[0][0]}, {planes[0][1]} (same as '{PLANE_NAMES[fmt][0]}'), got shape {s}")
    return planes


def check_kv_dtypes(op, fmt, cache_dtypes, others, allowed=KV_DTYPES):
    """All caches share one dtype from ``allowed`` (KV_DTYPES; the transfers with scale caches: int8 and
    the float8 types); ``others`` ({arg name: dtype}) must equal it."""
    names = [dtype_name(d) for d in cache_dtypes]
    first = names[0]
    if first not in allowed and first in QUANT_CACHE_DTYPES and allowed == KV_DTYPES:
        # a float8 cache moved without its scales (the transfers without scale_caches take KV_DTYPES)
        raise TypeError(f"{op}: argument 'kv_caches': {first} caches move with their scale caches: pass "
                        f"scale_caches (the k / v scale-cache Parameters of every layer, as the quantizing writes "
                        f"filled them); without scale_caches the caches' dtype must be in {allowed}, got {first}")
    if first not in allowed and first in KV_DTYPES + QUANT_CACHE_DTYPES:
        raise TypeError(f"{op}: argument 'scale_caches': scale caches go with quantized caches (dtype in "
                        f"{allowed}), but 'kv_caches' are {first}")
    if first not in allowed:
        raise TypeError(f"{op}: argument '{_name(fmt, 0)}': expected dtype in {allowed}, got {first}")
    for i, d in enumerate(names):
        if d != first:
            raise TypeError(f"{op}: argument '{_name(fmt, i)}': expected dtype {first} (same as "
                            f"'{_name(fmt, 0)}': every layer and plane has one dtype), got {d}")
    for name, d in others.items():
        d = dtype_name(d)
        if d != first:
            raise TypeError(f"{op}: argument '{name}': expected dtype {first} (the caches' dtype), got {d}")
    return first


def check_index(op, name, shape, dtype):
    """A rank-1 int32/int64 index tensor; returns its length."""
    d = dtype_name(dtype)
    if d not in INDEX_DTYPES:
        raise TypeError(f"{op}: argument '{name}': expected dtype in {INDEX_DTYPES}, got {d}")
    if len(shape) != 1:
        raise ValueError(f"{op}: argument '{name}': expected rank 1, got rank {len(shape)} (shape {tuple(shape)})")
    return int(shape[0])


def check_aiv_num(op, aiv_num):
    """``aiv_num``: an int >= 0 (0 = every core / thread); raises ValueError naming the argument."""
    try:
        iv = operator.index(aiv_num)
    except TypeError:
        iv = None
    if iv is None or isinstance(aiv_num, bool) or iv < 0 or iv > 2**31 - 1:
        raise ValueError(f"{op}: argument 'aiv_num': expected an int >= 0 (a cap on the vector cores, 0 = all), "
                         f"got {aiv_num!r}")


# ----------------------------------------------------------------------- scale caches (quantized caches)
#: Names of the scale caches of each format, one per data plane (used in messages).
SCALE_PLANE_NAMES = {
    KVCacheFormat.MERGED_KV: ("k_scale_cache", "v_scale_cache"),
    KVCacheFormat.SEPARATE_KV: ("k_scale_cache", "v_scale_cache"),
    KVCacheFormat.MLA_KV: ("kv_c_scale_cache", "k_pe_scale_cache"),
    KVCacheFormat.DSA_KV: ("kv_c_scale_cache", "k_pe_scale_cache", "indexer_k_scale_cache"),
}

#: Bytes of one scale (float32).
SCALE_BYTES = 4


def flatten_scales_eager(op, scale_caches, fmt, num_layers, name="scale_caches"):
    """The scale caches (one per data plane and layer) as a flat layer-major tuple.

    Accepted: one entry per layer, a tuple of ``planes_of(fmt)`` float32 scale caches (MERGED_KV too: its
    K and V scale caches are separate tensors), or the flat ``num_layers * planes`` sequence. Raises
    TypeError / ValueError naming ``<name>[l][p]`` (e.g. a None entry: a layer without its scale cache).
    """
    from mindspore import Tensor

    P = planes_of(fmt)
    fname = KVCacheFormat(fmt).name
    if not _is_seq(scale_caches):
        raise TypeError(f"{op}: argument '{name}': expected a list/tuple with one entry per layer (a tuple of "
                        f"{P} scale caches {SCALE_PLANE_NAMES[fmt]}), got {type(scale_caches).__name__}")
    if len(scale_caches) and _is_seq(scale_caches[0]):
        if len(scale_caches) != num_layers:
            raise ValueError(f"{op}: argument '{name}': expected one entry per layer of 'kv_caches' ({num_layers} "
                             f"layers), got {len(scale_caches)}; every layer's caches need their scale caches")
        flat = []
        for l, layer in enumerate(scale_caches):
            if not _is_seq(layer) or len(layer) != P:
                got = f"{len(layer)} tensors" if _is_seq(layer) else type(layer).__name__
                raise ValueError(f"{op}: argument '{name}[{l}]': expected a tuple of {P} scale caches "
                                 f"{SCALE_PLANE_NAMES[fmt]} for {fname}, got {got}")
            for p, x in enumerate(layer):
                if not isinstance(x, Tensor):
                    raise TypeError(f"{op}: argument '{name}[{l}][{p}]' ({SCALE_PLANE_NAMES[fmt][p]} of layer {l}): "
                                    f"expected a float32 Tensor, got {type(x).__name__}")
                flat.append(x)
        return tuple(flat)
    flat = tuple(scale_caches)
    if len(flat) != num_layers * P:
        raise ValueError(f"{op}: argument '{name}': expected {num_layers} layers x {P} scale caches "
                         f"{SCALE_PLANE_NAMES[fmt]} = {num_layers * P} tensors (flat, layer-major) for {fname}, "
                         f"got {len(flat)}; every layer's caches need their scale caches")
    for i, x in enumerate(flat):
        if not isinstance(x, Tensor):
            raise TypeError(f"{op}: argument '{name}[{i}]' ({SCALE_PLANE_NAMES[fmt][i % P]} of layer {i // P}): "
                            f"expected a float32 Tensor, got {type(x).__name__}")
    return flat


def _scale_name(fmt, i, name="scale_caches"):
    P = planes_of(fmt)
    return f"{name}[{i // P}][{i % P}] ({SCALE_PLANE_NAMES[fmt][i % P]} of layer {i // P})"


def expected_scale_shapes(fmt, cache_layout, planes):
    """Accepted shapes of the scale cache of each data plane: a list (per plane) of shape tuples.

    BSND ``[nb, bs, H]`` or ``[nb, bs, H, 1]``; BNSD ``[nb, H, bs]`` or ``[nb, H, bs, 1]``; MLA / DSA
    planes ``[nb, bs, 1]`` (one scale per token and plane), the shapes of the quantized writes'
    ``*_scale_cache`` arguments (docs/quantization.md)."""
    out = []
    for (nb, bs, h, _d) in planes:
        if fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV):
            out.append([(nb, bs, 1)])
        elif cache_layout == "BNSD":
            out.append([(nb, h, bs, 1), (nb, h, bs)])
        else:
            out.append([(nb, bs, h, 1), (nb, bs, h)])
    return out


def scale_planes(op, fmt, cache_layout, num_layers, planes, shapes, name="scale_caches"):
    """Check the flat scale-cache shapes against the data planes; return the scales per token row of each
    plane (num_kv_heads, or 1 for MLA / DSA)."""
    P = planes_of(fmt)
    if len(shapes) != num_layers * P:
        raise ValueError(f"{op}: argument '{name}': expected {num_layers} layers x {P} scale caches = "
                         f"{num_layers * P} tensors, got {len(shapes)}")
    exp = expected_scale_shapes(fmt, cache_layout, planes)
    shapes = [tuple(int(d) for d in s) for s in shapes]
    if cache_layout == "NZ":  # the scale caches of NZ data planes are BSND [nb, bs, H(, 1)], H the real heads
        for p in range(min(P, len(shapes))):
            nb, bs, f, c0 = planes[p]
            s = shapes[p]
            if len(s) in (3, 4) and s[:2] == (nb, bs) and s[2] >= 1 and (f * c0) % s[2] == 0:
                exp[p] = [(nb, bs, s[2], 1), (nb, bs, s[2])]
            else:
                exp[p] = [(nb, bs, "num_kv_heads", 1), (nb, bs, "num_kv_heads")]
    for i, s in enumerate(shapes):
        p = i % P
        if s not in exp[p]:
            alts = " or ".join(str(list(e)) for e in exp[p])
            if cache_layout == "NZ":
                nb, bs, f, c0 = planes[p]
                raise ValueError(f"{op}: argument '{_scale_name(fmt, i, name)}': expected shape {alts} (beside the NZ "
                                 f"data plane {PLANE_NAMES[fmt][p]} of hidden size {f * c0}: an ND scale cache with "
                                 f"one float32 scale per token-head, num_kv_heads dividing {f * c0}), got {list(s)}")
            raise ValueError(f"{op}: argument '{_scale_name(fmt, i, name)}': expected shape {alts} (the "
                             f"{cache_layout} data plane {PLANE_NAMES[fmt][p]} {list(planes[p])} as (num_blocks, "
                             f"block_size, heads, head_size) with one float32 scale per token-head), got {list(s)}")
        if i >= P and s != shapes[p]:
            raise ValueError(f"{op}: argument '{_scale_name(fmt, i, name)}': expected shape {list(shapes[p])} (same "
                             f"as '{_scale_name(fmt, p, name)}': every layer has the same scale-cache shape), "
                             f"got {list(s)}")
    if cache_layout == "NZ":
        return [shapes[p][2] for p in range(P)]
    return [1 if fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV) else h for (_nb, _bs, h, _d) in planes]


def check_scale_dtypes(op, fmt, cache_dtype, scale_dtypes, name="scale_caches"):
    """Scale caches go with int8 / float8 data caches and are float32; TypeError naming the argument."""
    from ms_kvcache._spec import QUANT_CACHE_DTYPES

    cd = dtype_name(cache_dtype)
    if cd not in QUANT_CACHE_DTYPES:
        raise TypeError(f"{op}: argument '{name}': scale caches go with quantized caches (dtype in "
                        f"{QUANT_CACHE_DTYPES}), but 'kv_caches' are {cd}")
    for i, d in enumerate(scale_dtypes):
        d = dtype_name(d)
        if d != "float32":
            raise TypeError(f"{op}: argument '{_scale_name(fmt, i, name)}': expected dtype float32, got {d}")



def require_quant_backend(op, backend, cache_dtype):
    """The backend of a transfer with scale caches, returned: every backend has int8 caches; float8 caches
    are cpu only (not an OpDef dtype of the AscendC SoCs: ms_kvcache._spec.SOC_EXCLUDED_DTYPES), a TypeError
    naming the public op and 'kv_caches' on sim / ascend (ops._quant.check_kernel_cache)."""
    from ms_kvcache.ops._quant import check_kernel_cache

    return check_kernel_cache(op, backend, "kv_caches", cache_dtype)

def public_prim(spec, op):
    """``prim_class(spec)`` of an internal transfer spec whose graph-mode messages (not-a-Parameter,
    aliasing) name the public op ``op`` (multi_layer_kv_transfer, multi_layer_block_transfer)."""
    from ms_kvcache.ops._quant import quant_prim

    return quant_prim(spec, lambda attrs: (op, {}))


def host_plane_shape(fmt, n, plane, num_layers):
    nb, bs, h, d = plane
    if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV):
        return (n, bs, num_layers, h, d)
    return (n, bs, num_layers, h * d)


def check_block_shapes(op, attrs, ids_shape, staging_shape, host_shapes, cache_shapes, has_staging):
    """Shape checks of multi_layer_block_transfer (eager and infer; the data planes of its quantizing variant
    too); returns (planes, n, staging elements needed per block)."""
    fmt, layout, num_layers = attrs["kv_format"], attrs["cache_layout"], attrs["num_layers"]
    planes_n = planes_of(fmt)
    if len(host_shapes) != planes_n:
        raise ValueError(f"{op}: argument 'host_blocks': expected {planes_n} planes {PLANE_NAMES[fmt]} for "
                         f"{KVCacheFormat(fmt).name}, got {len(host_shapes)}")
    planes = cache_planes(op, fmt, layout, num_layers, cache_shapes)
    if len(ids_shape) != 1:
        raise ValueError(f"{op}: argument 'block_ids': expected rank 1, got shape {tuple(ids_shape)}")
    n = int(ids_shape[0])
    names = PLANE_NAMES[fmt]
    for p in range(planes_n):
        expected = host_plane_shape(fmt, n, planes[p], num_layers)
        got = tuple(int(d) for d in host_shapes[p])
        if layout == "NZ" and len(got) == 5 and got[:3] == expected[:3] and got[3] * got[4] == expected[3] * expected[4]:
            continue  # NZ caches: the usual ND host blocks [n, bs, L, H, D], any H * D = the NZ hidden size
        if layout == "NZ":
            hid = expected[3] * expected[4]
            raise ValueError(f"{op}: argument 'host_blocks[{p}]': expected the {names[p]} host blocks [n, block_size, "
                             f"num_layers, num_kv_heads, head_size] = {expected[:3]} + (H, D) with H * D = {hid} (the "
                             f"NZ caches' hidden size), got {got}")
        if got != expected:
            layout_txt = "[n, block_size, num_layers, num_kv_heads, head_size]" if len(expected) == 5 else \
                "[n, block_size, num_layers, hidden]"
            raise ValueError(f"{op}: argument 'host_blocks[{p}]': expected the {names[p]} host blocks "
                             f"{layout_txt} = {expected} (n = len(block_ids), geometry of the caches read as "
                             f"cache_layout={layout!r} - this op's default is BNSD for MERGED_KV / SEPARATE_KV, "
                             f"pass cache_layout='BSND' for [num_blocks, block_size, num_kv_heads, head_size] caches "
                             f"- num_layers = {num_layers}), got {got}")
    per_block = sum(bs * num_layers * h * d for (_, bs, h, d) in planes)
    if has_staging:
        size = numel(staging_shape)
        if size < per_block:
            raise ValueError(f"{op}: argument 'staging': expected at least one block of every plane, "
                             f"block_size * num_layers * sum(hidden) = {per_block} elements, got {size} "
                             f"(shape {tuple(staging_shape)})")
    return planes, n, per_block


def numel(shape):
    """Elements of a tensor of ``shape`` (1 for a scalar)."""
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


class EagerCall:
    """A checked PyNative call of a multi-layer transfer, ready to launch: what the public ops launch at once and
    :class:`ms_kvcache.LayerwiseTransfer` runs layer by layer.

    Attributes: ``spec``, ``backend``, ``attr_values`` (spec order, kv_format as its int), ``counts`` (the list
    inputs' lengths), ``args`` (the flat primitive inputs, lists expanded), ``planes`` (per data plane
    ``(num_blocks, block_size, heads, head_size)``), ``n`` (tokens or blocks; 0: nothing to launch),
    ``written`` / ``read`` (``(argument name, tensor)`` the call writes / reads)."""

    __slots__ = ("spec", "backend", "attr_values", "counts", "args", "planes", "n", "written", "read")

    def __init__(self, spec, backend, attr_values, counts, args, planes, n, written, read):
        self.spec, self.backend, self.attr_values, self.counts = spec, backend, attr_values, counts
        self.args, self.planes, self.n, self.written, self.read = tuple(args), planes, n, written, read

    @property
    def attrs(self):
        """``{attribute name: public value}``."""
        return self.spec.attr_values(self.attr_values)

    def launch(self):
        """Launch the call in PyNative (nothing when ``n == 0``); returns None."""
        if self.n == 0:
            return None
        from ms_kvcache._custom import eager_launcher

        eager_launcher(self.spec, self.backend, self.attr_values, self.counts)(*self.args)
        return None


def finish(call, prepare):
    """End of a transfer's PyNative branch: ``call`` (an :class:`EagerCall`) when ``prepare``, else launch it."""
    return call if prepare else call.launch()
