"""The C++ index checks behind the PyNative value checks (ms_kvcache._cpu.check_slots /
check_block_mapping, also compiled into the kernels' strict mode) against numpy, on all three duplicate
detection strategies (small n, bitmap, sort)."""
import numpy as np
import pytest

from ms_kvcache import _cpu


def ref_slots(s, num_slots):
    s = np.asarray(s, np.int64)
    big = np.nonzero(s >= num_slots)[0]
    if big.size:
        return 1, int(big[0]), -1, int(s[big[0]])
    first = {}
    for j, v in enumerate(s):
        if v < 0:
            continue
        if v in first:
            return 2, first[v], j, int(v)
        first[v] = j
    return 0, -1, -1, 0


@pytest.mark.parametrize("n,num_slots", [(1, 4), (20, 64), (32, 10**6), (500, 4096), (3000, 10**9), (2000, 2001)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_check_slots(n, num_slots, dtype, rng):
    for trial in range(30):
        hi = min(num_slots, 2**31 - 1) if dtype == np.int32 else num_slots
        s = rng.choice(hi, size=n, replace=n > hi).astype(np.int64)
        if trial % 3 == 0 and n > 1:
            s[rng.integers(n)] = s[rng.integers(n)]  # maybe a duplicate
        if trial % 5 == 0:
            s[rng.integers(n)] = num_slots + trial  # out of range
        s[rng.random(n) < 0.1] = -1
        s = s.astype(dtype) if (s.max() < 2**31 or dtype == np.int64) else s
        got = _cpu.check_slots(s, num_slots)
        assert tuple(got) == ref_slots(s, num_slots), (n, num_slots, trial)


def test_check_block_mapping(rng):
    m = np.array([[0, 1], [3, 2], [4, 0]], np.int32)
    assert tuple(_cpu.check_block_mapping(m, 5, 3)) == (0, -1, -1, 0)
    assert tuple(_cpu.check_block_mapping(m, 4, 3)) == (1, 2, 0, 4)
    assert tuple(_cpu.check_block_mapping(m.astype(np.int64), 5, 2)) == (1, 1, 1, 2)
    assert tuple(_cpu.check_block_mapping(np.array([[0, -1]], np.int64), 5, 2)) == (1, 0, 1, -1)
    with pytest.raises(TypeError):
        _cpu.check_block_mapping(m.astype(np.float32), 5, 3)
