"""The RoPE kernels' fp16/bf16 <-> fp32 conversions: exhaustive over all 16-bit patterns, and over a
large sample of fp32 patterns (subnormals included: the AVX512_BF16 path takes its integer fallback for
16-lane groups holding one), on every instruction-set path the CPU runs (portable, AVX2/F16C, AVX-512,
AVX-512 + AVX512_BF16), against numpy / ml_dtypes (round to nearest even) and against each other bit for
bit (NaN payloads included)."""
import ml_dtypes
import numpy as np
import pytest

from rope_ref import available_isas, convert, reset_isa, set_isa

pytestmark = pytest.mark.usefixtures("cpu_backend")


@pytest.fixture(params=[0, 1, 2, 3], ids=["portable", "avx2", "avx512", "avx512bf16"])
def isa(request):
    active = set_isa(request.param)
    if active != request.param:
        reset_isa()
        pytest.skip("CPU lacks this instruction set")
    yield active
    reset_isa()


def _f32_samples():
    rng = np.random.default_rng(7)
    u = rng.integers(0, 2 ** 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    # every fp16/bf16 value and the midpoints between neighbours (ties), +-1 bit around them
    h = np.arange(1 << 16, dtype=np.uint32)
    bf_mid = (h << 16) | 0x8000
    f16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    f16_mid = f16 + (1 << 12)
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFBFFFFF, 0x477FEFFF,
                        0x477FF000, 0x477FF001, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001, 0x32FFFFFF,
                        0x00000001, 0x807FFFFF, 0x7F7FFFFF], np.uint32)
    return np.concatenate([u, bf_mid, bf_mid - 1, bf_mid + 1, f16_mid, f16_mid - 1, f16_mid + 1, special])


def test_half_to_float_exhaustive(isa):
    h = np.arange(1 << 16, dtype=np.uint16)
    got = convert(0, h, np.float32)
    exp = h.view(np.float16).astype(np.float32)
    nan = np.isnan(exp)
    assert np.array_equal(got[~nan].view(np.uint32), exp[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()
    got_b = convert(1, h, np.float32)
    exp_b = h.view(ml_dtypes.bfloat16).astype(np.float32)
    nan_b = np.isnan(exp_b)
    assert np.array_equal(got_b[~nan_b].view(np.uint32), exp_b[~nan_b].view(np.uint32))
    assert np.isnan(got_b[nan_b]).all()


def test_float_to_half_rne(isa):
    u = _f32_samples()
    f = u.view(np.float32)
    nan = np.isnan(f)
    got = convert(2, f, np.uint16)
    with np.errstate(over="ignore"):
        exp = f.astype(np.float16).view(np.uint16)
    assert np.array_equal(got[~nan], exp[~nan]), np.nonzero(got[~nan] != exp[~nan])[0][:5]
    assert np.isnan(got[nan].view(np.float16)).all()
    got_b = convert(3, f, np.uint16)
    with np.errstate(invalid="ignore"):
        exp_b = f.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(got_b[~nan], exp_b[~nan]), np.nonzero(got_b[~nan] != exp_b[~nan])[0][:5]
    assert np.isnan(got_b[nan].view(ml_dtypes.bfloat16).astype(np.float32)).all()


def test_paths_bit_identical_including_nan():
    isas = available_isas()
    if len(isas) < 2:
        pytest.skip("only the portable path runs on this CPU")
    u = _f32_samples()
    h = np.arange(1 << 16, dtype=np.uint16)
    outs = []
    try:
        for isa in isas:
            set_isa(isa)
            outs.append([convert(0, h, np.float32).view(np.uint32), convert(1, h, np.float32).view(np.uint32),
                         convert(2, u.view(np.float32), np.uint16), convert(3, u.view(np.float32), np.uint16)])
    finally:
        reset_isa()
    for isa, other in zip(isas[1:], outs[1:]):
        for a, b, name in zip(outs[0], other, ("f16->f32", "bf16->f32", "f32->f16", "f32->bf16")):
            assert np.array_equal(a, b), f"{name}: portable and path {isa} differ at {np.nonzero(a != b)[0][:5]}"
