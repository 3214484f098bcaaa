"""Eager (PyNative) argument checks shared by the public wrappers.

Shape/dtype checks are plain functions of shapes and dtype names, so the same function runs eagerly
and, wrapped in ``constexpr``, at graph compile time. Value checks (slot ranges, duplicates, block
ids) read the index tensor to the host and only run eagerly; kernels skip out-of-range indices in
every mode.
"""
import numpy as np
from mindspore import Tensor

from ms_kvcache._spec import dtype_name

__all__ = [
    "require_tensor", "require_contiguous", "index_values", "check_slot_values",
    "check_block_ids", "dtype_name",
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


def index_values(x):
    """Host copy of an int32/int64 index tensor as an int64 numpy array."""
    return np.asarray(x.asnumpy(), dtype=np.int64).reshape(-1)


def check_slot_values(op, name, slots, num_slots, allow_duplicates=False):
    """Raise ValueError for slots >= num_slots or duplicated non-negative slots (slot < 0 = skip)."""
    if slots.size == 0:
        return
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


def check_block_ids(op, name, ids, num_blocks):
    """Raise ValueError unless 0 <= id < num_blocks for every id."""
    if ids.size == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= num_blocks:
        bad = int(ids[(ids < 0) | (ids >= num_blocks)][0])
        raise ValueError(f"{op}: argument '{name}': expected block ids in [0, {num_blocks}), got {bad}")
