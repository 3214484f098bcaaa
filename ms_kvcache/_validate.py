"""Eager (PyNative) argument checks shared by the public wrappers.

Shape/dtype checks are plain functions of shapes and dtype names, so the same function runs eagerly
and, wrapped in ``constexpr``, at graph compile time. Value checks (slot ranges, duplicates, block
ids) read the index tensor to the host and only run eagerly; kernels skip out-of-range indices in
every mode.
"""
import weakref

import numpy as np
import mindspore as _ms
from mindspore import Parameter, Tensor

from ms_kvcache import _pyboost_loader
from ms_kvcache._spec import dtype_name, tensor_nbytes

__all__ = [
    "require_tensor", "require_contiguous", "index_values", "check_slot_values",
    "check_block_ids", "check_block_mapping_values", "dtype_name", "cached_static", "contiguous_input",
    "check_slot_tensor", "check_block_mapping_tensor", "require_not_view", "check_block_id_tensor",
    "check_position_values", "check_position_tensor", "require_disjoint", "require_write_lands",
    "MS_VIEWS_WITHOUT_STORAGE_INFO",
]


def require_tensor(op, name, x, optional=False):
    if x is None and optional:
        return
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: argument '{name}': expected a mindspore.Tensor, got {type(x).__name__}")


def require_contiguous(op, name, x):
    """Caches must be contiguous: MindSpore would hand a kernel a contiguous copy of a view, and the
    write would be lost."""
    if hasattr(x, "is_contiguous") and not x.is_contiguous():
        raise ValueError(f"{op}: argument '{name}': expected a contiguous tensor, got a non-contiguous "
                         f"view of shape {tuple(x.shape)} (call .contiguous() on a copy, or pass the cache itself)")


def _view_info(x):
    """``(is_view, viewed shape, storage offset)`` from MindSpore's C++ storage metadata (through the
    optional ``ms_kvcache._cpu_pyboost``), or None when that module is unavailable."""
    mod = _pyboost_loader.fast_module()  # importable even when the fast path itself is turned off
    fn = getattr(mod, "view_info", None)
    if fn is None:
        return None
    info = fn(x)
    if info is None:
        return None
    return (False, None, 0) if info is False else (True, tuple(info[1]), int(info[2]))


def require_not_view(op, name, x):
    """Caches written through ops.Custom in PyNative (the sim and ascend backends, and cpu without the
    fast path) must not be views: ops.Custom runs the kernel on a copy of a view (slice, select,
    transpose, and also a contiguous reshape / view / flatten of a whole tensor), so the write is lost.

    Every view is detected from MindSpore's storage metadata (``TensorStorageInfo``, read by
    ``ms_kvcache._cpu_pyboost.view_info``; the output of a pending op is waited for). Python's Tensor has
    no such flag: a whole-tensor reshape view has storage offset 0 and is contiguous. Without that
    optional module, only views with a storage offset or needing a contiguous copy are detected. On
    MindSpore 2.7.x, where a reshape / view output has no storage info, :func:`require_write_lands`
    checks the address a kernel would write instead."""
    info = _view_info(x)
    if info is not None:
        is_view, base_shape, offset = info
    else:
        need = getattr(x, "_need_contiguous", None)
        is_view, base_shape, offset = (need is not None and need()) or x.storage_offset() != 0, None, x.storage_offset()
    if is_view:
        of = f" of a tensor of shape {list(base_shape)}" if base_shape is not None else " of another tensor"
        raise ValueError(f"{op}: argument '{name}': expected a tensor that owns its memory, got a view{of} "
                         f"(shape {list(x.shape)}, storage offset {offset}), e.g. a slice or a reshape; this "
                         f"PyNative call goes through ops.Custom, which runs the kernel on a copy of a view, so the "
                         f"write would be lost. Pass the cache tensor itself (allocate it in the shape the op "
                         f"expects)")
    if MS_VIEWS_WITHOUT_STORAGE_INFO:
        require_write_lands(op, name, x)


def _ms_version():
    try:
        return tuple(int(p) for p in _ms.__version__.split(".")[:2])
    except ValueError:  # pragma: no cover - a development build such as "2.8.0rc1"
        return (99, 0)


#: MindSpore 2.7.x: a reshape() / view() / flatten() / squeeze() output carries no TensorStorageInfo, so
#: :func:`require_not_view` cannot see that it is a view; :func:`require_write_lands` then checks where a
#: kernel's write would go (2.8+ give every view storage info).
MS_VIEWS_WITHOUT_STORAGE_INFO = _ms_version() < (2, 8)


def require_write_lands(op, name, x):
    """MindSpore 2.7.x (:data:`MS_VIEWS_WITHOUT_STORAGE_INFO`): refuse a tensor written through
    ops.Custom whose write would not reach the memory the tensor shows.

    There a reshape() / view() / flatten() output is the output of a pending op (a "stub") without
    storage info; MindSpore's C++ side converts it to a tensor in other memory than its
    ``Tensor.data_ptr()`` (the base's), and an in-place write into it is lost (also MindSpore's own
    ``Tensor.copy_``). The decision: a Parameter, or a tensor that is not a pending op's output
    (``ms_kvcache._cpu_pyboost.data_address_nosync`` gives its address), owns its memory; for a pending
    op's output, the converted tensor's address (``converted_address``, which waits for the op) must
    equal ``x.data_ptr()``: true for an op's own output (``x * 1``, ``ops.zeros``), false for every view
    (measured on 2.7.2). Without that module (not built) only Parameters are accepted.

    Args:
        op (str), name (str): the op and argument, for the message.
        x (mindspore.Tensor): a tensor the op writes (contiguous, checked before).

    Raises:
        ValueError: ``<op>: argument '<name>': expected a tensor that owns its memory, ...``.
    """
    if isinstance(x, Parameter) or x.nbytes == 0:
        return
    mod = _pyboost_loader.fast_module()  # importable even when the fast path itself is turned off
    nosync = getattr(mod, "data_address_nosync", None)
    converted = getattr(mod, "converted_address", None)
    if nosync is None or converted is None:
        raise ValueError(f"{op}: argument '{name}': expected a Parameter: on MindSpore {_ms.__version__} a "
                         f"reshape() / view() output looks like a tensor that owns its memory, but an in-place "
                         f"write into it is lost, and without ms_kvcache._cpu_pyboost (not built: "
                         f"ms_kvcache._custom.fast_path_available('cpu')) the two cannot be told apart on this "
                         f"ops.Custom path. Pass the cache as a mindspore.Parameter, or use MindSpore >= 2.8")
    if nosync(x) is not None:
        return  # a tensor with its own memory, not a pending op's output: the kernel writes that memory
    got = converted(x)
    if got is None or got == x.data_ptr():
        return
    raise ValueError(f"{op}: argument '{name}': expected a tensor that owns its memory, got a view of another "
                     f"tensor (shape {list(x.shape)}): on MindSpore {_ms.__version__} a reshape() / view() / "
                     f"flatten() / squeeze() output carries no storage info and an in-place write into it is "
                     f"lost (this PyNative call goes through ops.Custom, which would write a copy at another "
                     f"address). Pass the cache tensor itself (allocate it in the shape the op expects), or use "
                     f"MindSpore >= 2.8")


def require_disjoint(op, named, read=()):
    """The alias rule: the tensors an op writes must not share memory with each other nor with a tensor it
    reads. ``named`` is ``[(argument name, tensor), ...]`` of the written tensors in argument order, ``read``
    the same for the tensors the op only reads (key, value, slot_mapping, scales, the caches of a d2h
    transfer, ...: every read input but ``OpSpec.read_may_alias``, see ``_custom._alias_sets``): the kernel
    would read rows it has already overwritten. Read tensors may share memory with each other (key and value
    two slices of one qkv tensor). The same tensor twice (``reshape_and_cache(k, v, c, c, s)``,
    ``reshape_and_cache(c.reshape(-1, h, d)[:n], v, c, c2, s)``) or two views of one storage whose bytes
    overlap raise ValueError naming both arguments. Written tensors are contiguous (checked before), so
    each spans ``[address, address + nbytes)``; a read tensor that is not contiguous is skipped (the
    wrappers give the kernel a contiguous copy of it, made before the launch). The address is read
    without a pipeline sync through ``ms_kvcache._cpu_pyboost.data_address_nosync`` (``data_ptr()`` waits
    for every pending op, ~3 ms) except for a written tensor a pending op still has to produce; a *read*
    tensor that is a pending op's output (``key = linear(x)``, a whole-tensor reshape) is waited for only
    when MindSpore's pipeline is idle (then nothing waits), else skipped here: the fast-path kernel and
    the AOT entries check the same rule at launch (``_custom.alias_attrs``) and fail, writing nothing,
    MindSpore raising at the next sync. Graph mode cannot check this (a graph sees no tensor identity or
    address): the launch does (see the ops' docstrings). The written tensors found disjoint are remembered
    by identity (weak references) with their byte ranges, so a loop passing the same caches pays ~2 us per
    call plus ~0.5 us per read tensor (compared every call: a decode step passes new key / value / slot
    tensors); with more than ``_FEW_READS`` read tensors (the caches of a d2h transfer) the whole set found
    disjoint (none skipped) is remembered instead."""
    if len(named) + len(read) < 2 or not named:
        return
    if len(read) > _FEW_READS:  # e.g. the caches a d2h transfer reads: the whole set is remembered
        every = list(named) + list(read)
        key = (len(named),) + tuple(id(x) for _, x in every)
        hit = _DISJOINT.get(key)
        if hit is not None and all(r() is x for r, (_, x) in zip(hit, every)):
            return  # these very tensors were checked before (a loop passing the same caches every step)
        if _check_disjoint(op, named, read):  # (False: a read tensor was pending: checked again next time)
            _remember(key, every, True)
        return
    # a few read tensors (key, value, slot_mapping, ...: new ones at every step of a decode loop, and a weak
    # reference to a new tensor costs ~3 us): the written tensors' byte ranges are remembered, the read ones
    # compared with them on every call
    key = (len(named),) + tuple(id(x) for _, x in named)
    hit = _DISJOINT.get(key)
    if hit is not None and all(r() is x for r, (_, x) in zip(hit[0], named)):
        spans = hit[1]
    else:
        spans = _check_disjoint(op, named, (), want_spans=True)
        _remember(key, named, spans)
    if read and _reads_overlap(spans, read):
        _check_disjoint(op, named, read)  # raises the error naming both arguments


def _remember(key, pairs, value):
    try:
        refs = tuple(weakref.ref(x) for _, x in pairs)
    except TypeError:  # pragma: no cover - MindSpore tensors accept weak references
        return
    if len(_DISJOINT) >= 1024:
        _DISJOINT.clear()
    _DISJOINT[key] = (refs, value) if value is not True else refs


#: Above this many read tensors require_disjoint remembers the whole set instead of the written ones only.
_FEW_READS = 6

#: require_disjoint memo: tuple of tensor ids -> weak references to those tensors (and, for the written
#: tensors alone, their byte ranges); an id is only trusted while its weak reference still returns the same
#: object, so a reused id never matches.
_DISJOINT = {}


def _reads_overlap(spans, read):
    """Whether a read tensor (contiguous, its address known without waiting for a busy pipeline; see
    :func:`require_disjoint`) shares a byte with one of the written ranges ``spans`` ([(start, end)])."""
    mod = _pyboost_loader.fast_module()
    nosync = getattr(mod, "data_address_nosync", None)
    idle = None
    for _, x in read:
        n = tensor_nbytes(x)
        if not n or not x.is_contiguous():
            continue
        p = nosync(x) if nosync is not None else None
        if p is None:
            if nosync is not None:
                if idle is None:
                    idle = bool(mod.pipeline_idle())
                if not idle:
                    continue  # a pending op's output: the launch checks it
            p = x.data_ptr()
        for lo, hi in spans:
            if p < hi and lo < p + n:
                return True
    return False


def _check_disjoint(op, named, read=(), want_spans=False):
    """Raise the alias error of ``named`` / ``read`` (see :func:`require_disjoint`); returns False if a
    read tensor was skipped because its address is not known without waiting for a busy pipeline, else
    True (with ``want_spans``: the byte ranges [(start, end)] of the tensors instead)."""
    mod = _pyboost_loader.fast_module()  # importable even when the fast path itself is turned off
    nosync = getattr(mod, "data_address_nosync", None)
    idle = None
    complete = True
    spans = []  # (start, end, argument order, name, tensor, written)
    nw = len(named)
    for order, (name, x) in enumerate(list(named) + list(read)):
        n = tensor_nbytes(x)
        if not n:
            continue
        written = order < nw
        if not written and not x.is_contiguous():
            continue  # copied to a contiguous tensor before the launch: the kernel never reads these bytes
        p = nosync(x) if nosync is not None else None
        if p is None and not written and nosync is not None:
            if idle is None:
                idle = bool(mod.pipeline_idle())
            if not idle:  # a pending op's output: left to the launch-time check (no sync here)
                complete = False
                continue
        if p is None:  # output of a pending op (or no fast module): Tensor.data_ptr() waits for it
            p = x.data_ptr()
        spans.append((p, p + n, order, name, x, written))
    spans.sort(key=lambda s: (s[0], s[2]))
    last_any = last_written = None  # the spans reaching furthest so far (of any kind / written)
    for s in spans:
        other = last_any if s[5] else last_written  # a written span may meet anything, a read one only writes
        if other is not None and s[0] < other[1]:
            _overlap_error(op, s, other)
        if last_any is None or s[1] > last_any[1]:
            last_any = s
        if s[5] and (last_written is None or s[1] > last_written[1]):
            last_written = s
    if want_spans:
        return [(s[0], s[1]) for s in spans]
    return complete


def _overlap_error(op, s, last):
    first, second = (last, s) if last[2] < s[2] else (s, last)
    how = ("the same tensor as" if first[4] is second[4] else
           f"a tensor sharing memory with (bytes {max(s[0], last[0]) - first[0]}.."
           f"{min(s[1], last[1]) - first[0]} of)")
    if first[5] and second[5]:
        raise ValueError(f"{op}: argument '{second[3]}': expected a distinct cache tensor (no memory shared with "
                         f"another argument the op writes), got {how} '{first[3]}'; both would be written "
                         f"through one buffer")
    written, other = (first, second) if first[5] else (second, first)
    rel = "the same tensor as" if written[4] is other[4] else "memory shared with"
    raise ValueError(f"{op}: argument '{written[3]}': expected a tensor sharing no memory with the tensors the op "
                     f"reads, got {rel} '{other[3]}'; writing it would change the data being read")


def index_values(x):
    """Host copy of an int32/int64 index tensor as a flat numpy array of its own dtype (waits for the
    tensor if an earlier asynchronous op produces it)."""
    return x.asnumpy().reshape(-1)


def _native():
    try:
        from ms_kvcache import _cpu  # noqa: WPS433 - compiled extension

        return _cpu
    except ImportError:  # pragma: no cover - the package is unusable without it anyway
        return None


def check_slot_values(op, name, slots, num_slots, allow_duplicates=False):
    """Raise ValueError for slots >= num_slots or duplicated non-negative slots (slot < 0 = skip)."""
    if slots.size == 0:
        return
    nat = _native()
    if nat is not None:
        code, i, j, v = nat.check_slots(slots, int(num_slots))
        if code == 1:
            raise ValueError(f"{op}: argument '{name}': expected every slot < num_blocks*block_size = "
                             f"{num_slots}, got {v} at index {i}")
        if code == 2 and not allow_duplicates:
            raise ValueError(f"{op}: argument '{name}': expected distinct non-negative slots, got "
                             f"slot {v} at indices {[i, j]}")
        return
    slots = np.asarray(slots, dtype=np.int64)
    hi = int(slots.max())
    if hi >= num_slots:
        idx = int(np.argmax(slots >= num_slots))
        raise ValueError(f"{op}: argument '{name}': expected every slot < num_blocks*block_size = "
                         f"{num_slots}, got {int(slots[idx])} at index {idx}")
    if not allow_duplicates and slots.size > 1:
        valid = slots[slots >= 0]
        if valid.size > 1:
            uniq, counts = np.unique(valid, return_counts=True)
            if uniq.size != valid.size:
                dup = int(uniq[np.argmax(counts > 1)])
                where = np.nonzero(slots == dup)[0][:2].tolist()
                raise ValueError(f"{op}: argument '{name}': expected distinct non-negative slots, got "
                                 f"slot {dup} at indices {where}")


def check_block_ids(op, name, ids, num_blocks, distinct=False):
    """Raise ValueError unless 0 <= id < num_blocks for every id and, with ``distinct``, no id repeats."""
    if ids.size == 0:
        return
    ids = np.asarray(ids, dtype=np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= num_blocks:
        bad = int(ids[(ids < 0) | (ids >= num_blocks)][0])
        raise ValueError(f"{op}: argument '{name}': expected block ids in [0, {num_blocks}), got {bad}")
    if distinct and ids.size > 1:
        uniq, counts = np.unique(ids, return_counts=True)
        if uniq.size != ids.size:
            dup = int(uniq[np.argmax(counts > 1)])
            where = np.nonzero(ids == dup)[0][:2].tolist()
            raise ValueError(f"{op}: argument '{name}': expected distinct ids for h2d (two host blocks cannot load "
                             f"into one device block), got {dup} at indices {where}")


def check_block_mapping_values(op, name, mapping, src_blocks, dst_blocks, src_name="src", dst_name="dst"):
    """Raise ValueError unless every row (src, dst) of an [n, 2] block mapping has 0 <= src < src_blocks
    and 0 <= dst < dst_blocks."""
    if mapping.size == 0:
        return
    nat = _native()
    if nat is not None:
        code, row, col, v = nat.check_block_mapping(mapping, int(src_blocks), int(dst_blocks))
    else:
        m = np.asarray(mapping, dtype=np.int64).reshape(-1, 2)
        bad = (m < 0) | (m >= np.array([src_blocks, dst_blocks]))
        code = int(bad.any())
        if code:
            row, col = (int(x) for x in np.argwhere(bad)[0])
            v = int(m[row, col])
    if code:
        limit = src_blocks if col == 0 else dst_blocks
        which = src_name if col == 0 else dst_name
        raise ValueError(f"{op}: argument '{name}': expected {which} block ids in [0, {limit}), got {v} "
                         f"at row {row} (column {col})")


def check_slot_tensor(op, name, slots, num_slots, nosync=None, allow_duplicates=False):
    """Value check of a slot_mapping tensor (see :func:`check_slot_values`).

    nosync: ``_custom.nosync_checker(backend)``; if given, a host tensor is read without waiting for
    the PyNative pipeline, and only a reported problem is confirmed by a waiting read (the strict
    fast-path kernel re-checks the values at launch).
    """
    if nosync is not None:
        r = nosync.check_slots_nosync(slots, int(num_slots))
        if r is not None and (r[0] == 0 or (r[0] == 2 and allow_duplicates)):
            return
    check_slot_values(op, name, index_values(slots), num_slots, allow_duplicates)


def check_block_id_tensor(op, name, ids, num_blocks, distinct=False, nosync=None):
    """Value check of a block id tensor [n] (see :func:`check_block_ids` and, for ``nosync``,
    :func:`check_slot_tensor`)."""
    f = getattr(nosync, "check_block_ids_nosync", None)
    if f is not None:
        r = f(ids, int(num_blocks), bool(distinct))
        if r is not None and r[0] == 0:
            return
    check_block_ids(op, name, index_values(ids), num_blocks, distinct)


def check_position_values(op, name, values, max_position):
    """Raise ValueError unless every position is in [0, max_position) (rows of a cos_sin_cache)."""
    if values.size == 0:
        return
    bad = (values < 0) | (values >= max_position)
    if bad.any():
        idx = int(np.argmax(bad))
        raise ValueError(f"{op}: argument '{name}': expected positions in [0, {max_position}) (rows of "
                         f"cos_sin_cache), got {int(values[idx])} at index {idx}")


def check_position_tensor(op, name, positions, max_position, nosync=None):
    """Value check of a positions tensor (see :func:`check_position_values`; ``nosync`` as in
    :func:`check_slot_tensor`)."""
    if nosync is not None:
        r = nosync.check_positions_nosync(positions, int(max_position))
        if r is not None and r[0] == 0:
            return
    check_position_values(op, name, index_values(positions), max_position)


def check_block_mapping_tensor(op, name, mapping, src_blocks, dst_blocks, nosync=None, src_name="src",
                               dst_name="dst"):
    """Value check of a block_mapping tensor [n, 2] (see :func:`check_block_mapping_values` and, for
    ``nosync``, :func:`check_slot_tensor`)."""
    if nosync is not None:
        r = nosync.check_block_mapping_nosync(mapping, int(src_blocks), int(dst_blocks))
        if r is not None and r[0] == 0:
            return
    check_block_mapping_values(op, name, index_values(mapping), src_blocks, dst_blocks, src_name, dst_name)


def cached_static(cache, check, args, limit=4096):
    """``check(*args)`` memoised on ``args`` (shapes, dtypes, attribute values: all hashable).

    The PyNative wrappers call their shape/dtype check through this so a repeated call with the same
    shapes costs one dict lookup; only successful results are stored, so bad input raises every time.
    """
    try:
        return cache[args]
    except KeyError:
        pass
    except TypeError:  # an unhashable argument (e.g. a list as attribute): let the check report it
        return check(*args)
    out = check(*args)
    if len(cache) >= limit:
        cache.clear()
    cache[args] = out
    return out


def contiguous_input(x):
    """``x`` itself if contiguous, else a contiguous copy (for read-only inputs such as key/value)."""
    return x if x.is_contiguous() else x.contiguous()
