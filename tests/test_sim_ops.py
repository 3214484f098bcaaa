"""The emulation end to end on a complete test op (OpDef + tiling + kernel), SimAxpy: z = x + alpha * y
(tests/sim_kernels/op_host/sim_axpy.cpp, op_kernel/sim_axpy.cpp), built with ms_kvcache.sim.build:
tiling on every SoC, launch over numpy arrays against a numpy reference, the three core orders, the
statistics, host-side errors, and the MindSpore AOT entry (ops.Custom) plus the "sim" backend module.
"""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ms_kvcache import sim

HERE = Path(__file__).resolve().parent
KDIR = HERE / "sim_kernels"
SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def axpy():
    return sim.build("sim_axpy", [KDIR / "op_kernel" / "sim_axpy.cpp", KDIR / "op_host" / "sim_axpy.cpp"])


def ref(x, y, alpha):
    return (x.astype(np.float32) + y.astype(np.float32) * np.float32(alpha)).astype(x.dtype)


def data(n, dt, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32).astype(dt), rng.standard_normal(n).astype(np.float32).astype(dt))


def test_registered(axpy):
    assert "SimAxpy" in sim.ops()
    assert "sim_axpy" in sim.kernels() and axpy.kernels == ["sim_axpy"] and axpy.op_types == ["SimAxpy"]
    info = sim.opdef("SimAxpy")
    assert [p["name"] for p in info["inputs"]] == ["x", "y"] and info["attrs"][0]["name"] == "alpha"
    assert sim.include_dirs()[0].endswith("ms_kvcache/sim/include")


@pytest.mark.parametrize("dt", [np.float32, np.float16, BF16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 8, 1000, 4099, 48 * 4096 + 24])
def test_axpy_matches_numpy(axpy, dt, n):
    x, y = data(n, dt, n)
    z = np.full(n, 7, dt)
    st = sim.launch("SimAxpy", [x, y, z], attrs={"alpha": -0.75})
    np.testing.assert_array_equal(z.view(np.uint8), ref(x, y, -0.75).view(np.uint8))
    es = np.dtype(dt).itemsize
    assert st["gm_read_bytes"] == 2 * n * es and st["gm_write_bytes"] == n * es
    assert st["tiling_key"] == {np.float32: 0, np.float16: 1}.get(dt, 2)
    assert st["cores_used"] == st["block_dim"] <= 48
    assert sum(st["gm_write_bytes_per_core"]) == n * es
    assert max(st["ub_bytes_per_core"]) <= 196608


@pytest.mark.parametrize("soc", SOCS)
def test_axpy_every_soc(axpy, soc):
    n = 40 * 64 + 16  # 32-byte multiple for float32: also valid on 310P
    x, y = data(n, np.float32, 3)
    z = np.zeros(n, np.float32)
    st = sim.launch("SimAxpy", [x, y, z], soc=soc)  # alpha takes its default 1.0
    np.testing.assert_array_equal(z, ref(x, y, 1.0))
    cores = sim.platform(soc)["aiv_cores"]
    assert st["block_dim"] == min(cores, st["block_dim"]) and st["soc"] == soc


def test_axpy_three_core_orders_agree(axpy):
    x, y = data(5000, np.float16, 5)
    z = np.zeros(5000, np.float16)
    st = sim.launch_all_orders("SimAxpy", [x, y, z], attrs={"alpha": 2.0})
    np.testing.assert_array_equal(z, ref(x, y, 2.0))
    assert st["order"] == "forward" and st["block_dim"] > 1


def test_axpy_tiling(axpy):
    t = sim.tiling("SimAxpy", [((1000,), "float16"), ((1000,), "float16")], {"alpha": 3.0}, "Ascend910B1")
    assert t["fields"]["blockLength"] == 32 and t["fields"]["alpha"] == 3.0 and t["block_dim"] == 32
    assert t["tiling_key"] == 1


def test_axpy_310p_rejects_unaligned_rows_and_bf16(axpy):
    x, y = data(1001, np.float16, 9)
    z = np.zeros(1001, np.float16)
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch("SimAxpy", [x, y, z], soc="Ascend310P3")
    assert "no DataCopyPad" in str(ei.value) and ei.value.core is None and ei.value.op == "SimAxpy"
    assert np.all(z == 0)
    xb, yb = data(1024, BF16, 9)
    with pytest.raises(sim.EmulationError):
        sim.launch("SimAxpy", [xb, yb, np.zeros(1024, BF16)], soc="Ascend310P3")


def test_launch_argument_errors(axpy):
    x, y = data(64, np.float32, 1)
    with pytest.raises(ValueError, match="expected 3 arrays"):
        sim.launch("SimAxpy", [x, y])
    with pytest.raises(ValueError, match="C-contiguous"):
        sim.launch("SimAxpy", [x[::2], y[::2], np.zeros(32, np.float32)])
    z = np.zeros(64, np.float32)
    sim.launch("SimAxpy", {"x": x, "y": y, "z": z})
    np.testing.assert_array_equal(z, ref(x, y, 1.0))


def test_build_is_cached(axpy):
    again = sim.build("sim_axpy", [KDIR / "op_kernel" / "sim_axpy.cpp", KDIR / "op_host" / "sim_axpy.cpp"])
    assert again.path == axpy.path


# ----------------------------------------------------------------------------------- MindSpore
def _custom(axpy, alpha):
    from mindspore import ops

    op = ops.Custom(axpy.aot_func("SimAxpy"), out_shape=lambda x, y: x, out_dtype=lambda x, y: x, func_type="aot")
    op.add_prim_attr("alpha", alpha)
    return op


def test_mindspore_aot_entry_pynative(axpy):
    import mindspore as ms
    from mindspore import Tensor

    x, y = data(3000, np.float32, 11)
    sim.set_soc("Ascend910B1")
    out = _custom(axpy, 0.25)(Tensor(x), Tensor(y))
    np.testing.assert_array_equal(out.asnumpy(), ref(x, y, 0.25))
    st = sim.last_launch_stats()
    assert st["op"] == "SimAxpy" and st["gm_write_bytes"] == 3000 * 4
    xh, yh = data(3000, np.float16, 12)
    out = _custom(axpy, 1.5)(Tensor(xh), Tensor(yh))
    np.testing.assert_array_equal(out.asnumpy(), ref(xh, yh, 1.5))
    assert ms.get_context("mode") == ms.PYNATIVE_MODE


def test_mindspore_aot_entry_graph_mode_and_errors(axpy):
    import mindspore as ms
    from mindspore import Tensor, nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = _custom(axpy, -2.0)

        def construct(self, x, y):
            return self.op(x, y)

    x, y = data(777, np.float32, 13)
    old = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        out = Net()(Tensor(x), Tensor(y))
        np.testing.assert_array_equal(out.asnumpy(), ref(x, y, -2.0))
    finally:
        ms.set_context(mode=old)
    # a rule violation surfaces as a MindSpore error; the emulation message is kept
    sim.set_soc("Ascend310P3")
    try:
        xh, yh = data(1001, np.float16, 14)
        with pytest.raises(Exception):
            _custom(axpy, 1.0)(Tensor(xh), Tensor(yh)).asnumpy()
        assert "no DataCopyPad" in sim.last_error()
    finally:
        sim.set_soc("Ascend910B1")


def test_sim_backend_module(axpy):
    import ms_kvcache
    from ms_kvcache._backends import sim as backend
    from ms_kvcache._spec import get_spec

    ok, why = backend.available()
    assert ok, why

    class Spec:
        op_type = "SimAxpy"

    func, reg = backend.aot_func(Spec)
    assert func == f"{axpy.path}:SimAxpy" and reg is None
    if "MskvReshapeAndCache" not in sim.ops():  # before the copy kernels land
        with pytest.raises(RuntimeError, match="no AscendC kernel"):
            backend.aot_func(get_spec("reshape_and_cache"))
    ms_kvcache.set_backend("sim")
    assert ms_kvcache.get_backend() == "sim"
    ms_kvcache.set_backend("cpu")


# ----------------------------------------------------------------------------------- DYNAMIC inputs
@pytest.fixture(scope="module")
def sum_list():
    return sim.build("sim_sum_list", [KDIR / "op_kernel" / "sim_sum_list.cpp", KDIR / "op_host" / "sim_sum_list.cpp"])


def _sum_ref(srcs, bias):
    acc = bias.copy()
    for s in srcs:
        acc = acc + s
    return acc


@pytest.mark.parametrize("k", [1, 3, 7])
def test_dynamic_input_through_list_tensor_desc(sum_list, k):
    rng = np.random.default_rng(k)
    n = 8 * 97
    srcs = [rng.standard_normal(n).astype(np.float32) for _ in range(k)]
    bias = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    st = sim.launch_all_orders("SimSumList", [srcs, bias, out])
    np.testing.assert_array_equal(out, _sum_ref(srcs, bias))
    assert st["gm_read_bytes"] == (k + 1) * n * 4 + sum(st["scalar_gm_reads_per_core"]) * 8


def test_dynamic_input_aot_entry_splits_flat_params(sum_list):
    """MindSpore passes DYNAMIC instances flattened; without dyn_input_sizes they are split evenly."""
    import ctypes

    rng = np.random.default_rng(3)
    n, k = 64, 4
    arrays = [rng.standard_normal(n).astype(np.float32) for _ in range(k)] + [
        rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)]
    fn = getattr(ctypes.CDLL(sum_list.path), "SimSumList")
    fn.restype = ctypes.c_int
    nparam = len(arrays)
    params = (ctypes.c_void_p * nparam)(*[a.ctypes.data for a in arrays])
    ndims = (ctypes.c_int * nparam)(*([1] * nparam))
    shape = (ctypes.c_int64 * 1)(n)
    shapes = (ctypes.POINTER(ctypes.c_int64) * nparam)(*([ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))] * nparam))
    dtypes = (ctypes.c_char_p * nparam)(*([b"float32"] * nparam))
    assert fn(nparam, params, ndims, shapes, dtypes, None, None) == 0, sim.last_error()
    np.testing.assert_array_equal(arrays[-1], _sum_ref(arrays[:k], arrays[k]))
    # one parameter cannot hold the bias, the output and the list
    assert fn(1, params, ndims, shapes, dtypes, None, None) != 0
    assert "SimSumList" in sim.last_error() and "cannot be split" in sim.last_error()


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_dynamic_input_from_mindspore_with_dyn_input_sizes(sum_list, mode):
    """MindSpore hands k0..k2, bias flattened; the prim attr dyn_input_sizes (what every ms_kvcache
    primitive with list inputs sets) says how many belong to srcs. A wrong count gives another result,
    so the attribute really reaches the AOT entry in both modes."""
    from mindspore import Tensor, nn, ops

    from conftest import ms_mode

    rng = np.random.default_rng(21)
    n = 8 * 40
    srcs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    bias = rng.standard_normal(n).astype(np.float32)

    class Net(nn.Cell):
        def __init__(self, sizes):
            super().__init__()
            self.op = ops.Custom(sum_list.aot_func("SimSumList"), out_shape=lambda *shapes: shapes[-1],
                                 out_dtype=lambda *types: types[-1], func_type="aot")
            self.op.add_prim_attr("dyn_input_sizes", sizes)

        def construct(self, a, b, c, d):
            return self.op(a, b, c, d)

    args = [Tensor(s) for s in srcs] + [Tensor(bias)]
    with ms_mode(mode):
        out = Net([3, -1])(*args)
        np.testing.assert_array_equal(out.asnumpy(), _sum_ref(srcs, bias))
        wrong = Net([2, -1])(*args)  # srcs = k0, k1; bias = k2; the real output is not the kernel's output
        assert not np.array_equal(wrong.asnumpy(), _sum_ref(srcs, bias))