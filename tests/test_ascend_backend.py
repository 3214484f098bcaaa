"""The "ascend" backend without an NPU: package discovery, reg_info derived from the OpSpec, the
no-CANN errors, and the ACL runtime calls of swap_blocks / register_host_memory against a host-only
stand-in libascendcl.so (tests/fake_acl/fake_ascendcl.c, compiled here with the system C compiler).
Tests that need a real NPU carry the ``npu`` marker and are skipped here with the reason."""
import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor

import ms_kvcache
from ms_kvcache import _host_memory, _spec
from ms_kvcache._backends import _acl
from ms_kvcache._backends import ascend as A

HERE = Path(__file__).resolve().parent
ON_NPU = ms.get_context("device_target") == "Ascend"
npu_only = pytest.mark.skipif(not ON_NPU, reason="needs an Ascend NPU with CANN and the ms_kvcache package "
                                                 "installed (device target here: "
                                                 f"{ms.get_context('device_target')})")


# ------------------------------------------------------------------------------------------ helpers
def _build_fake(tmp_path_factory, batch):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libascendcl.so")
    d = tmp_path_factory.mktemp("fake_acl_batch" if batch else "fake_acl")
    (d / "lib64").mkdir()
    out = d / "lib64" / "libascendcl.so"
    # -Bsymbolic: another stand-in loaded earlier (RTLD_GLOBAL) must not take over this copy's globals
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wl,-Bsymbolic", "-o", str(out), str(HERE / "fake_acl" / "fake_ascendcl.c"),
           "-lpthread"]
    if batch:
        cmd.insert(1, "-DFAKE_WITH_BATCH")
    subprocess.run(cmd, check=True)
    return out


@pytest.fixture(scope="module")
def fake_lib_path(tmp_path_factory):
    return _build_fake(tmp_path_factory, batch=True)


@pytest.fixture(scope="module")
def fake_lib_nobatch_path(tmp_path_factory):
    return _build_fake(tmp_path_factory, batch=False)


@pytest.fixture
def fake_acl(fake_lib_path, monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(fake_lib_path))
    _acl.reset()
    rt = _acl.load()
    yield rt
    _acl.reset()


@pytest.fixture
def fake_acl_nobatch(fake_lib_nobatch_path, monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(fake_lib_nobatch_path))
    _acl.reset()
    rt = _acl.load()
    yield rt
    _acl.reset()


def counter(rt, name, ctype=ctypes.c_long):
    return ctype.in_dll(rt.lib, name).value


def reset_counters(rt):
    for n in ("fake_memcpy_calls", "fake_memcpy_async_calls", "fake_batch_calls", "fake_batch_copies",
              "fake_sync_calls", "fake_set_device_calls", "fake_batch_rejected"):
        ctypes.c_long.in_dll(rt.lib, n).value = 0


@pytest.fixture
def no_cann(monkeypatch):
    for v in ("MS_KVCACHE_LIBASCENDCL", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_CANN_PACKAGE_PATH",
              "ASCEND_OPP_PATH", "ASCEND_CUSTOM_OPP_PATH"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(_acl, "_DEFAULT_ROOTS", ())
    _acl.reset()
    yield
    _acl.reset()


def make_vendor(root, ops=("reshape_and_cache",), name=A.VENDOR_NAME):
    v = Path(root) / "vendors" / name
    (v / "op_api" / "include").mkdir(parents=True)
    (v / "op_api" / "lib").mkdir(parents=True)
    for op in ops:
        (v / "op_api" / "include" / f"aclnn_mskv_{op}.h").write_text("// stand-in\n")
    return v


# ------------------------------------------------------------------------------------------ availability
def test_not_available_off_npu_says_why():
    ok, why = A.available()
    if ON_NPU:
        pytest.skip("runs on an NPU")
    assert not ok and "device target" in why and "'Ascend'" in why


def test_set_backend_ascend_fails_clearly_off_npu():
    if ON_NPU:
        pytest.skip("runs on an NPU")
    with pytest.raises(RuntimeError, match=r"set_backend\('ascend'\): backend unavailable: MindSpore device target"):
        ms_kvcache.set_backend("ascend")
    assert ms_kvcache.get_backend() != "ascend"


def test_default_backend_is_ascend_on_ascend_target(monkeypatch):
    from ms_kvcache import _backend

    monkeypatch.delenv("MS_KVCACHE_BACKEND", raising=False)
    monkeypatch.setattr(ms, "get_context", lambda k: "Ascend" if k == "device_target" else None)
    assert _backend._default_backend() == "ascend"


# ------------------------------------------------------------------------------------------ package discovery
def test_find_vendor_via_custom_opp_path(tmp_path, no_cann):
    v = make_vendor(tmp_path / "inst")
    other = make_vendor(tmp_path / "other", ops=(), name="customize")   # another vendor, none of our ops
    env = {"ASCEND_CUSTOM_OPP_PATH": f"{other}:{v}:"}
    pkg, notes = A.find_vendor(env)
    assert pkg is not None and pkg.path == v and pkg.source == "ASCEND_CUSTOM_OPP_PATH"
    assert pkg.ops() == {"reshape_and_cache"}


def test_find_vendor_rejects_an_install_root_in_custom_opp_path(tmp_path, no_cann):
    """CANN and MindSpore read each ASCEND_CUSTOM_OPP_PATH entry as a vendor folder (MindSpore 2.10
    CustomInfoGenerator: <entry>/op_api/include/): an install root holding vendors/ms_kvcache is not
    loaded by them, so it must not count as found (the old code accepted it)."""
    root = tmp_path / "inst"
    make_vendor(root)
    pkg, notes = A.find_vendor({"ASCEND_CUSTOM_OPP_PATH": str(root)})
    assert pkg is None
    assert any(f"entry {root} is an install root, not a vendor folder" in n and
               str(root / "vendors" / "ms_kvcache") in n for n in notes), notes


def test_find_vendor_accepts_a_renamed_vendor_folder_holding_our_ops(tmp_path, no_cann):
    v = make_vendor(tmp_path / "inst", name="mskv_copy")   # a vendor folder copied under another name
    pkg, _ = A.find_vendor({"ASCEND_CUSTOM_OPP_PATH": str(v)})
    assert pkg is not None and pkg.path == v
    empty = tmp_path / "other"
    empty.mkdir()
    assert A.find_vendor({"ASCEND_CUSTOM_OPP_PATH": str(empty)})[0] is None


def test_find_vendor_via_config_ini(tmp_path, no_cann):
    opp = tmp_path / "opp"
    v = make_vendor(opp)
    (opp / "vendors" / "config.ini").write_text("load_priority=customize,ms_kvcache\n")
    pkg, _ = A.find_vendor({"ASCEND_OPP_PATH": str(opp)})
    assert pkg is not None and pkg.path == v and pkg.source == "config.ini"
    # ASCEND_HOME_PATH/opp is the default ASCEND_OPP_PATH
    pkg2, _ = A.find_vendor({"ASCEND_HOME_PATH": str(tmp_path)})
    assert pkg2 is not None and pkg2.path == v


def test_find_vendor_not_listed_in_config_ini(tmp_path, no_cann):
    opp = tmp_path / "opp"
    make_vendor(opp)
    (opp / "vendors" / "config.ini").write_text("load_priority=customize\n")
    pkg, notes = A.find_vendor({"ASCEND_OPP_PATH": str(opp)})
    assert pkg is None
    assert any("does not list 'ms_kvcache' in load_priority" in n for n in notes)


def test_missing_package_error_names_package(no_cann, monkeypatch):
    monkeypatch.setattr(A, "WHEEL_VENDOR_DIR", Path("/nonexistent/ms_kvcache"))
    with pytest.raises(A.PackageNotFoundError) as ei:
        A.aot_func(_spec.get_spec("reshape_and_cache"))
    msg = str(ei.value)
    assert "CANN custom-op package 'ms_kvcache' not found" in msg
    assert "ASCEND_CUSTOM_OPP_PATH" in msg and "scripts/build_opp.sh" in msg and "--install-path" in msg


def test_aot_func_missing_op_in_installed_package(tmp_path, no_cann, monkeypatch):
    v = make_vendor(tmp_path, ops=("copy_blocks",))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(v))
    with pytest.raises(A.PackageNotFoundError, match=r"has no op MskvReshapeAndCache \(missing "
                                                     r"op_api/include/aclnn_mskv_reshape_and_cache\.h; installed: copy_blocks\)"):
        A.aot_func(_spec.get_spec("reshape_and_cache"))


def test_aot_func_returns_op_type_and_reg_info(tmp_path, no_cann, monkeypatch):
    v = make_vendor(tmp_path)
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(v))
    spec = _spec.get_spec("reshape_and_cache")
    func, info = A.aot_func(spec)
    assert func == "MskvReshapeAndCache" and info["op_name"] == "MskvReshapeAndCache" and info["target"] == "Ascend"


def test_wheel_vendor_is_prepended_once(tmp_path, monkeypatch):
    wheel = tmp_path / "opp" / "vendors" / "ms_kvcache"
    wheel.mkdir(parents=True)
    monkeypatch.setattr(A, "WHEEL_VENDOR_DIR", wheel)
    env = {"ASCEND_CUSTOM_OPP_PATH": "/a/vendors/x"}
    assert A._prepend_wheel_vendor(env) is True
    assert env["ASCEND_CUSTOM_OPP_PATH"] == f"{wheel}:/a/vendors/x"
    assert A._prepend_wheel_vendor(env) is False
    assert env["ASCEND_CUSTOM_OPP_PATH"].count(str(wheel)) == 1
    env2 = {}
    A._prepend_wheel_vendor(env2)
    assert env2["ASCEND_CUSTOM_OPP_PATH"] == str(wheel)
    pkg, _ = A.find_vendor(env)
    assert pkg.source == "wheel" and pkg.path == wheel


# ------------------------------------------------------------------------------------------ reg_info
@pytest.mark.parametrize("soc", [None, "Ascend910B1", "Ascend910_9391", "Ascend310P3"])
def test_reg_info_derived_from_spec(soc):
    # expected values written out here (vLLM's reshape_and_cache interface, docs/ops-copy.md), not
    # computed from the OpSpec reg_info is built from
    info = A.reg_info(_spec.get_spec("reshape_and_cache"), soc)
    assert [(i["index"], i["name"], i["paramType"]) for i in info["inputs"]] == [
        (0, "key", "required"), (1, "value", "required"), (2, "key_cache", "required"),
        (3, "value_cache", "required"), (4, "slot_mapping", "required")]
    assert [o["name"] for o in info["outputs"]] == ["status"]
    # int-coded (BSND 0, BNSD 1): MindSpore 2.7 / 2.8 have no str attribute type for Ascend C ops
    assert [(a["name"], a["type"]) for a in info["attr"]] == [("cache_layout", "int")]
    rows = [tuple(d for d, _ in row) for row in info["dtype_format"]]
    kv = ("float16", "float32", "int8") if soc == "Ascend310P3" else ("float16", "bfloat16", "float32", "int8")
    # cache dtype outer, slot dtype inner (the row order of the OpDef's DataType lists); status int32
    assert rows == [(d, d, d, d, s, "int32") for d in kv for s in ("int32", "int64")]
    assert all(f == "DefaultFormat" for row in info["dtype_format"] for _, f in row)
    has_bf16 = any("bfloat16" in r for r in rows)
    assert has_bf16 == (soc != "Ascend310P3")
    # one row per combination of the dtype groups: 4 (or 3 without bf16) KV dtypes x 2 slot dtypes
    assert len(rows) == (3 if soc == "Ascend310P3" else 4) * 2


def test_reg_info_follows_a_changed_spec():
    spec = _spec.OpSpec(
        name="fixture_copy", op_type="MskvFixtureCopy",
        inputs=(_spec.TensorSpec("x", "T", (2,)), _spec.TensorSpec("cache", "T", (3,), inplace=True),
                _spec.TensorSpec("idx", "S", (1,), optional=True)),
        dtype_groups={"T": ("float16", "int8"), "S": ("int64",)},
        attrs=(_spec.AttrSpec("mode", "int", 0), _spec.AttrSpec("flag", "bool", False)))
    info = A.reg_info(spec)
    assert [i["name"] for i in info["inputs"]] == ["x", "cache", "idx"]
    assert info["inputs"][2]["paramType"] == "optional"
    assert [(a["name"], a["type"]) for a in info["attr"]] == [("mode", "int"), ("flag", "bool")]
    assert [tuple(d for d, _ in r) for r in info["dtype_format"]] == [
        ("float16", "float16", "int64", "int32"), ("int8", "int8", "int64", "int32")]


def test_compute_unit_mapping():
    assert A.compute_unit("Ascend910B1") == "ascend910b"
    assert A.compute_unit("Ascend910B3") == "ascend910b"
    assert A.compute_unit("Ascend910_9391") == "ascend910_93"
    assert A.compute_unit("Ascend310P3") == "ascend310p"
    assert A.compute_unit("Ascend310B4") is None and A.compute_unit(None) is None
    assert {A.compute_unit(s) for s in _spec.SOCS} == set(A.COMPUTE_UNITS)


# ------------------------------------------------------------------------------------------ no CANN
def test_acl_missing_is_a_clear_error(no_cann):
    with pytest.raises(_acl.CannNotFoundError, match=r"cannot load the CANN runtime library libascendcl\.so; "
                                                     r"tried: libascendcl\.so"):
        _acl.load()
    with pytest.raises(RuntimeError, match="set_env.sh"):
        _host_memory.register_host_memory(4096 * 4, 4096)


def test_register_host_memory_argument_checks():
    with pytest.raises(ValueError, match=r"argument 'ptr': expected a 4096-byte aligned"):
        _host_memory.register_host_memory(4097, 10)
    with pytest.raises(ValueError, match=r"argument 'nbytes': expected > 0, got 0"):
        _host_memory.register_host_memory(8192, 0)


# ------------------------------------------------------------------------------------------ ACL calls (stand-in)
def test_struct_layouts_match_c():
    assert ctypes.sizeof(_acl.MemLocation) == 8
    assert ctypes.sizeof(_acl.MemcpyBatchAttr) == 32
    assert _acl.MemcpyBatchAttr.srcLoc.offset == 8 and _acl.MemcpyBatchAttr.rsv.offset == 16


def test_register_host_memory_calls_acl(fake_acl):
    buf = ctypes.create_string_buffer(3 * 4096)
    ptr = (ctypes.addressof(buf) + 4095) // 4096 * 4096
    dev = _host_memory.register_host_memory(ptr, 4096)
    assert dev == ptr + 0x10000000000
    assert counter(fake_acl, "fake_last_registered", ctypes.c_size_t) == ptr
    _host_memory.unregister_host_memory(ptr)
    with pytest.raises(_acl.AclError, match=r"aclrtHostUnregister failed with aclError 100000: not registered"):
        _host_memory.unregister_host_memory(ptr)


def test_plan_block_copies_merges_in_row_order_and_validates():
    assert A.plan_block_copies(np.zeros((0, 2), np.int64), 4, 4) == ([], True)
    # consecutive rows advancing together merge; row order is kept
    assert A.plan_block_copies([[3, 0], [0, 4], [1, 5], [2, 6]], 4, 8) == ([(3, 0, 1), (0, 4, 3)], True)
    # a destination named twice: kept in order (the last row wins), not order-free
    assert A.plan_block_copies([[0, 2], [1, 2]], 4, 8) == ([(0, 2, 1), (1, 2, 1)], False)
    # one buffer: a chain a->b, b->c must stay sequential, self-copies are dropped
    assert A.plan_block_copies([[0, 1], [1, 2], [3, 3]], 4, 4, same_buffer=True) == ([(0, 1, 1), (1, 2, 1)], False)
    assert A.plan_block_copies([[0, 2], [1, 3]], 4, 4, same_buffer=True) == ([(0, 2, 2)], True)
    assert A.plan_block_copies([[2, 2]], 4, 4, same_buffer=True) == ([], True)
    with pytest.raises(ValueError, match=r"expected source block ids in \[0, 4\), got 4 at row 1"):
        A.plan_block_copies([[0, 0], [4, 1]], 4, 8)
    with pytest.raises(ValueError, match=r"expected destination block ids in \[0, 8\), got -1 at row 0"):
        A.plan_block_copies([[0, -1]], 4, 8)
    with pytest.raises(ValueError, match=r"expected integer shape \[N, 2\]"):
        A.plan_block_copies([[0.5, 1.0]], 4, 8)


def _np_swap_reference(src, dst, mapping):
    out = dst.copy()
    for s, d in mapping:
        out[d] = src[s]
    return out


@pytest.mark.parametrize("use_batch", [True, False])
def test_copy_runs_bytes_and_call_counts(fake_acl, rng, use_batch):
    src = rng.standard_normal((16, 4, 8)).astype(np.float32)
    dst = rng.standard_normal((12, 4, 8)).astype(np.float32)
    mapping = np.array([[0, 3], [1, 4], [2, 5], [15, 0], [7, 11], [8, 9]], np.int64)
    runs, order_free = A.plan_block_copies(mapping, 16, 12)
    assert len(runs) == 4 and order_free
    reset_counters(fake_acl)
    block_bytes = src[0].nbytes
    calls = A._copy_runs(fake_acl, runs, src_ptr=src.ctypes.data, src_bytes=src.nbytes, dst_ptr=dst.ctypes.data,
                         dst_bytes=dst.nbytes, block_bytes=block_bytes, kind=_acl.MEMCPY_HOST_TO_DEVICE,
                         stream=0x1234, src_loc=(_acl.MEM_LOCATION_HOST, 0),
                         dst_loc=(_acl.MEM_LOCATION_DEVICE, 3), use_batch=use_batch)
    expect = _np_swap_reference(src, dst.copy(), mapping)
    # dst was written in place
    np.testing.assert_array_equal(dst.view(np.uint32), expect.view(np.uint32))
    assert counter(fake_acl, "fake_last_stream", ctypes.c_size_t) == 0x1234
    if use_batch:
        assert calls == 1 and counter(fake_acl, "fake_batch_calls") == 1
        assert counter(fake_acl, "fake_batch_copies") == 4 and counter(fake_acl, "fake_memcpy_async_calls") == 0
        assert counter(fake_acl, "fake_last_dst_type", ctypes.c_int) == _acl.MEM_LOCATION_DEVICE
        assert counter(fake_acl, "fake_last_src_type", ctypes.c_int) == _acl.MEM_LOCATION_HOST
        assert counter(fake_acl, "fake_last_dst_id", ctypes.c_uint32) == 3
        assert counter(fake_acl, "fake_last_rsv_nonzero", ctypes.c_int) == 0
    else:
        assert calls == 4 and counter(fake_acl, "fake_memcpy_async_calls") == 4
        assert counter(fake_acl, "fake_last_kind", ctypes.c_int) == _acl.MEMCPY_HOST_TO_DEVICE


def test_copy_runs_sync_path_without_stream(fake_acl, rng):
    src = rng.integers(-128, 128, size=(5, 33), dtype=np.int8)   # odd block size
    dst = np.zeros((5, 33), np.int8)
    runs, _ = A.plan_block_copies([[4, 0], [0, 4]], 5, 5)
    reset_counters(fake_acl)
    A._copy_runs(fake_acl, runs, src_ptr=src.ctypes.data, src_bytes=src.nbytes, dst_ptr=dst.ctypes.data,
                 dst_bytes=dst.nbytes, block_bytes=33, kind=_acl.MEMCPY_DEVICE_TO_HOST, stream=None,
                 src_loc=(1, 0), dst_loc=(0, 0), use_batch=True)
    assert counter(fake_acl, "fake_memcpy_calls") == 2 and counter(fake_acl, "fake_batch_calls") == 0
    np.testing.assert_array_equal(dst[0], src[4])
    np.testing.assert_array_equal(dst[4], src[0])
    assert not dst[1:4].any()


def test_copy_runs_never_passes_out_of_bounds(fake_acl):
    src = np.zeros((2, 8), np.float32)
    dst = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="exceeds the buffers"):
        A._copy_runs(fake_acl, [(1, 0, 2)], src_ptr=src.ctypes.data, src_bytes=src.nbytes, dst_ptr=dst.ctypes.data,
                     dst_bytes=dst.nbytes, block_bytes=32, kind=0, stream=None, src_loc=(0, 0), dst_loc=(0, 0),
                     use_batch=False)


def test_batch_error_reports_failing_copy(fake_acl):
    a = np.zeros(64, np.uint8)
    with pytest.raises(_acl.AclError, match=r"aclrtMemcpyBatchAsync failed with aclError 100000: "
                                            r"size exceeds destMax; failing copy #1"):
        fake_acl.memcpy_batch_async([a.ctypes.data, a.ctypes.data], [8, 4], [a.ctypes.data, a.ctypes.data],
                                    [8, 8], (1, 0), (0, 0), 0x1)


def test_no_batch_symbol_means_per_run_copies(fake_acl_nobatch):
    assert not fake_acl_nobatch.has_batch
    with pytest.raises(_acl.AclError, match="needs CANN >= 8.3"):
        fake_acl_nobatch.memcpy_batch_async([1], [1], [1], [1], (0, 0), (0, 0), 0x1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8"])
def test_swap_blocks_end_to_end_host_tensors(fake_acl, rng, dtype):
    from conftest import random_array, to_ms, to_np, assert_bits_equal

    src_np = random_array(rng, (9, 3, 16, 5), dtype)
    dst_np = random_array(rng, (7, 3, 16, 5), dtype)
    mapping = np.array([[8, 0], [2, 3], [3, 4], [0, 6]], np.int64)
    src, dst = to_ms(src_np), to_ms(dst_np)
    reset_counters(fake_acl)
    A.swap_blocks(src, dst, Tensor(mapping))
    assert_bits_equal(to_np(dst), _np_swap_reference(src_np, dst_np, mapping), f"swap_blocks {dtype}")
    assert_bits_equal(to_np(src), src_np, "source untouched")
    # host tensors here are pageable -> synchronous aclrtMemcpy, one per run ([2,3]+[3,4] merged)
    assert counter(fake_acl, "fake_memcpy_calls") == 3
    assert counter(fake_acl, "fake_last_kind", ctypes.c_int) == _acl.MEMCPY_HOST_TO_HOST


def test_swap_blocks_same_buffer_rows_in_order(fake_acl, rng):
    from conftest import to_np

    base = rng.standard_normal((6, 4)).astype(np.float32)
    t = Tensor(base.copy())
    mapping = np.array([[0, 1], [1, 2], [5, 5], [2, 3], [4, 0], [0, 4]], np.int64)
    A.swap_blocks(t, t, mapping)
    ref = base.copy()
    for s_, d_ in mapping:   # a Python loop over the rows, as the public op documents
        ref[d_] = ref[s_]
    np.testing.assert_array_equal(to_np(t).view(np.uint32), ref.view(np.uint32))


def test_swap_blocks_duplicate_destination_last_row_wins(fake_acl, rng):
    from conftest import to_np

    src_np = rng.standard_normal((4, 8)).astype(np.float32)
    dst = Tensor(np.zeros((4, 8), np.float32))
    A.swap_blocks(Tensor(src_np), dst, [[0, 1], [2, 1], [3, 0]])
    out = to_np(dst)
    np.testing.assert_array_equal(out[1], src_np[2])
    np.testing.assert_array_equal(out[0], src_np[3])
    assert not out[2:].any()


def test_swap_blocks_rejects_block_shape_mismatch(fake_acl):
    a = Tensor(np.zeros((4, 8), np.float32))
    b = Tensor(np.zeros((4, 9), np.float32))
    with pytest.raises(ValueError, match=r"argument 'dst_cache': expected blocks of shape \(8,\)"):
        A.swap_blocks(a, b, [[0, 0]])


def test_public_swap_blocks_dispatches_to_the_ascend_hook(fake_acl, rng, monkeypatch):
    """ms_kvcache.swap_blocks (PyNative) with the ascend backend active calls ascend.swap_blocks."""
    from conftest import to_np
    from ms_kvcache import _backend

    if not hasattr(ms_kvcache, "swap_blocks"):
        pytest.skip("ms_kvcache.swap_blocks is not on this branch yet (copy-ops work)")
    calls = []
    real = A.swap_blocks
    monkeypatch.setattr(A, "swap_blocks", lambda *a: (calls.append(a), real(*a))[1])
    monkeypatch.setattr(_backend, "_current", "ascend")
    src_np = rng.standard_normal((5, 2, 16)).astype(np.float16)
    dst = Tensor(np.zeros((3, 2, 16), np.float16))
    ms_kvcache.swap_blocks(Tensor(src_np), dst, Tensor(np.array([[4, 0], [1, 2]], np.int64)))
    assert len(calls) == 1
    out = to_np(dst)
    np.testing.assert_array_equal(out[0], src_np[4])
    np.testing.assert_array_equal(out[2], src_np[1])
    assert not out[1].any()


def test_batch_copy_allowed_only_between_host_and_device():
    """aclrtMemcpyBatchAsync only for H2D / D2H (vllm-ascend's swap_blocks_batch rule), order-free rows,
    a runtime that exports it and an A2/A3 SoC."""
    h2d, d2h, d2d, h2h = (_acl.MEMCPY_HOST_TO_DEVICE, _acl.MEMCPY_DEVICE_TO_HOST, _acl.MEMCPY_DEVICE_TO_DEVICE,
                          _acl.MEMCPY_HOST_TO_HOST)
    assert A.batch_copy_allowed(h2d, True, True, "Ascend910B1")
    assert A.batch_copy_allowed(d2h, True, True, "Ascend910_9391")
    assert not A.batch_copy_allowed(d2d, True, True, "Ascend910B1")
    assert not A.batch_copy_allowed(h2h, True, True, "Ascend910B1")
    assert not A.batch_copy_allowed(h2d, False, True, "Ascend910B1")
    assert not A.batch_copy_allowed(h2d, True, False, "Ascend910B1")
    assert not A.batch_copy_allowed(h2d, True, True, "Ascend310P3")
    assert not A.batch_copy_allowed(h2d, True, True, None)


def _swap_on_fake_npu(monkeypatch, src_dev, dst_dev):
    """swap_blocks as on an A2 NPU: tensors reported on device / pinned host, MindSpore's raw stream 0x77."""
    monkeypatch.setattr(A, "_is_device_tensor", lambda t: t is src_dev or t is dst_dev)
    monkeypatch.setattr(A, "_is_pinned", lambda t: True)
    monkeypatch.setattr(A, "_current_stream_ptr", lambda: 0x77)
    monkeypatch.setattr(A, "current_soc", lambda: "Ascend910B1")


def test_swap_blocks_device_to_device_is_never_batched(fake_acl, rng, monkeypatch):
    """Same-device D2D swap_blocks: one aclrtMemcpyAsync per run on MindSpore's stream, no batch call
    (the old code sent order-free D2D rows to aclrtMemcpyBatchAsync)."""
    from conftest import to_np

    src_np = rng.standard_normal((8, 2, 16)).astype(np.float32)
    src, dst = Tensor(src_np), Tensor(np.zeros((8, 2, 16), np.float32))
    _swap_on_fake_npu(monkeypatch, src, dst)
    reset_counters(fake_acl)
    mapping = np.array([[0, 4], [1, 5], [7, 0]], np.int64)   # order-free: two runs
    A.swap_blocks(src, dst, Tensor(mapping))
    assert counter(fake_acl, "fake_batch_calls") == 0
    assert counter(fake_acl, "fake_memcpy_async_calls") == 2
    assert counter(fake_acl, "fake_last_kind", ctypes.c_int) == _acl.MEMCPY_DEVICE_TO_DEVICE
    assert counter(fake_acl, "fake_last_stream", ctypes.c_size_t) == 0x77
    np.testing.assert_array_equal(to_np(dst), _np_swap_reference(src_np, np.zeros_like(src_np), mapping))


def test_swap_blocks_host_to_device_is_batched(fake_acl, rng, monkeypatch):
    from conftest import to_np

    src_np = rng.standard_normal((8, 2, 16)).astype(np.float32)
    src, dst = Tensor(src_np), Tensor(np.zeros((8, 2, 16), np.float32))
    _swap_on_fake_npu(monkeypatch, None, dst)   # src on (pinned) host, dst on device
    reset_counters(fake_acl)
    mapping = np.array([[0, 4], [1, 5], [7, 0]], np.int64)
    A.swap_blocks(src, dst, Tensor(mapping))
    assert counter(fake_acl, "fake_batch_calls") == 1 and counter(fake_acl, "fake_memcpy_async_calls") == 0
    assert counter(fake_acl, "fake_last_src_type", ctypes.c_int) == _acl.MEM_LOCATION_HOST
    assert counter(fake_acl, "fake_last_dst_type", ctypes.c_int) == _acl.MEM_LOCATION_DEVICE
    np.testing.assert_array_equal(to_np(dst), _np_swap_reference(src_np, np.zeros_like(src_np), mapping))


def test_batch_rejected_by_runtime_falls_back_to_single_copies(fake_acl, rng):
    """A batch the runtime answers with ACL_ERROR_RT_FEATURE_NOT_SUPPORT (nothing copied) is redone with one
    aclrtMemcpyAsync per run; any other error still raises."""
    src = rng.standard_normal((6, 8)).astype(np.float32)
    dst = np.zeros((6, 8), np.float32)
    runs, _ = A.plan_block_copies([[0, 3], [5, 1]], 6, 6)
    flag = ctypes.c_int.in_dll(fake_acl.lib, "fake_batch_reject_d2d")
    flag.value = 1
    try:
        reset_counters(fake_acl)
        calls = A._copy_runs(fake_acl, runs, src_ptr=src.ctypes.data, src_bytes=src.nbytes, dst_ptr=dst.ctypes.data,
                             dst_bytes=dst.nbytes, block_bytes=32, kind=_acl.MEMCPY_DEVICE_TO_DEVICE, stream=0x5,
                             src_loc=(_acl.MEM_LOCATION_DEVICE, 0), dst_loc=(_acl.MEM_LOCATION_DEVICE, 0),
                             use_batch=True)
    finally:
        flag.value = 0
    assert counter(fake_acl, "fake_batch_rejected") >= 1 and calls == 2
    assert counter(fake_acl, "fake_memcpy_async_calls") == 2
    np.testing.assert_array_equal(dst[3], src[0])
    np.testing.assert_array_equal(dst[1], src[5])


def test_swap_blocks_in_a_graph_is_a_clear_error():
    spec = _spec.get_spec("swap_blocks")
    assert _spec.ascend_runtime(spec)   # the OpSpec's marker: no kernel, no OpDef, no aclnn shim
    with pytest.raises(RuntimeError, match="ACL runtime copy, not a kernel .* call it in PyNative mode"):
        A.aot_func(spec)


# ------------------------------------------------------------------------------------------ NPU only
@npu_only
@pytest.mark.npu
def test_reshape_and_cache_on_npu_matches_cpu(rng):  # pragma: no cover - needs hardware
    from conftest import random_array, to_ms, to_np, assert_bits_equal

    k = random_array(rng, (7, 2, 64), "float16")
    v = random_array(rng, (7, 2, 64), "float16")
    kc = np.zeros((4, 16, 2, 64), np.float16)
    vc = np.zeros_like(kc)
    slots = np.array([0, 17, -1, 33, 5, 63, 2], np.int32)
    ms_kvcache.set_backend("ascend")
    kc_t, vc_t = ms.Parameter(to_ms(kc), name="kc"), ms.Parameter(to_ms(vc), name="vc")
    ms_kvcache.reshape_and_cache(to_ms(k), to_ms(v), kc_t, vc_t, Tensor(slots))
    ref_k = kc.copy()
    for t, s in enumerate(slots):
        if s >= 0:
            ref_k[s // 16, s % 16] = k[t]
    assert_bits_equal(to_np(kc_t), ref_k, "key_cache on NPU")


def test_alloc_host_buffer_registration_hooks_use_the_acl_runtime(fake_acl):
    """ms_kvcache._host_memory's Ascend hooks go through the package's one ACL loader: aclrtHostRegister
    (MAPPED) of a page-aligned address returns the device address, the unregister hook undoes it once."""
    from ms_kvcache import _host_memory

    ctypes.c_long.in_dll(fake_acl.lib, "fake_register_calls").value = 0
    ctypes.c_long.in_dll(fake_acl.lib, "fake_unregister_calls").value = 0
    buf = np.zeros(2 * 4096 + 4096, np.uint8)
    addr = (buf.ctypes.data + 4095) // 4096 * 4096
    dev = _host_memory.ascend_host_register(addr, 8192)
    assert dev == addr + 0x10000000000  # what the stand-in maps it to
    assert counter(fake_acl, "fake_register_calls") == 1
    _host_memory.ascend_host_unregister(addr)
    _host_memory.ascend_host_unregister(addr)  # second time: not registered any more, no ACL call
    assert counter(fake_acl, "fake_unregister_calls") == 1
    with pytest.raises(ValueError, match="4096-byte aligned"):
        _host_memory.ascend_host_register(addr + 8, 4096)


def host_events(rt, ev=None):
    """The stand-in runtime's host-memory log (set_device, malloc_host, register, unregister, free_host)."""
    import json

    rt.lib.fake_host_log_get.restype = ctypes.c_char_p
    lines = [json.loads(x) for x in rt.lib.fake_host_log_get().decode().splitlines() if x.strip()]
    return [x for x in lines if ev is None or x["ev"] == ev]


@pytest.fixture
def ascend_host(fake_acl, monkeypatch):
    """The ascend backend active (alloc_host_buffer registers), CANN = the stand-in, no device context bound."""
    from ms_kvcache import _backend

    monkeypatch.setattr(_backend, "_current", "ascend")
    monkeypatch.setattr(_host_memory, "_WARNED", set(), raising=False)
    monkeypatch.setitem(_host_memory.REGISTER_FALLBACK, "why", "")
    fake_acl.lib.fake_unbind_context()
    fake_acl.lib.fake_host_log_clear()
    yield fake_acl
    import gc

    gc.collect()   # free the buffers (unregistering them) while the stand-in is loaded


def test_register_and_unregister_bind_a_device_context_first(ascend_host):
    """aclrtHostRegister / aclrtHostUnregister run with a device context bound to the calling thread (the old
    code called them on whatever thread allocated, with no context: aclrtSetDevice came only with swap_blocks)."""
    buf = ms_kvcache.alloc_host_buffer((4096,), "int8")
    addr = buf.data_ptr()
    assert [e["ev"] for e in host_events(ascend_host)] == ["set_device", "register"]
    (reg,) = host_events(ascend_host, "register")
    assert reg["ptr"] == addr and reg["context"] == 1
    ascend_host.lib.fake_unbind_context()   # e.g. the buffer dies on another thread
    del buf
    import gc

    gc.collect()
    assert [e["ev"] for e in host_events(ascend_host)][-2:] == ["set_device", "unregister"]
    assert host_events(ascend_host, "unregister")[-1]["context"] == 1


def test_a_registration_failure_warns_once(ascend_host):
    """A registration the runtime refuses leaves the buffer usable (staged) and says so once (it was silent)."""
    import warnings

    ctypes.c_int.in_dll(ascend_host.lib, "fake_register_fail").value = 1
    try:
        with pytest.warns(RuntimeWarning, match=r"alloc_host_buffer could not register its pages for device access "
                                                r"\(aclrtHostRegister failed with aclError 100000: the stand-in refuses"):
            a = ms_kvcache.alloc_host_buffer((4096,), "int8")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            b = ms_kvcache.alloc_host_buffer((4096,), "int8")   # no second warning
    finally:
        ctypes.c_int.in_dll(ascend_host.lib, "fake_register_fail").value = 0
    assert _host_memory.mapped_address(a.data_ptr(), 1) is None and _host_memory.mapped_address(b.data_ptr(), 1) is None
    assert "the stand-in refuses" in _host_memory.REGISTER_FALLBACK["why"]


def test_info_reports_the_last_registration_not_an_earlier_failure(ascend_host):
    """`ms-kvcache info` says "aclrtHostRegister failed for the last alloc_host_buffer": after a later buffer
    registered fine, that is no longer true and its buffers do get the mapped address (the old code kept the first
    failure for the life of the process, and info reported zero_copy mode as unavailable)."""
    ctypes.c_int.in_dll(ascend_host.lib, "fake_register_fail").value = 1
    try:
        with pytest.warns(RuntimeWarning, match="could not register its pages"):
            a = ms_kvcache.alloc_host_buffer((4096,), "int8")
    finally:
        ctypes.c_int.in_dll(ascend_host.lib, "fake_register_fail").value = 0
    assert "the stand-in refuses" in A._host_memory_report("zero_copy", True)["why"]
    b = ms_kvcache.alloc_host_buffer((4096,), "int8")
    assert _host_memory.mapped_address(b.data_ptr(), 1) is not None
    assert _host_memory.REGISTER_FALLBACK["why"] == ""
    rep = A._host_memory_report("zero_copy", True)
    assert rep["effective"] == "zero_copy", rep
    del a, b


def test_cann_version_from_the_runtime(fake_acl, monkeypatch):
    monkeypatch.setenv("FAKE_CANN_VERSION", "8.2.RC1")
    assert fake_acl.cann_version() == ((8, 2), "8.2.RC1")
    monkeypatch.setenv("FAKE_CANN_VERSION", "9.1.0")
    assert fake_acl.cann_version() == ((9, 1), "9.1.0")
    monkeypatch.delenv("FAKE_CANN_VERSION")
    assert fake_acl.cann_version() is None      # the call fails: unknown
    assert ctypes.sizeof(_acl.CANNPackageVersion) == 128 + 4 * 64 + 128


def test_the_three_modules_import_one_way():
    """_aclnn, _backends/ascend and _host_memory: no import between two of them goes both ways (module level or
    inside a function): _aclnn and _host_memory import neither other, ascend imports both."""
    import ast

    root = Path(ms_kvcache.__file__).parent
    mods = {"ms_kvcache._aclnn": root / "_aclnn.py", "ms_kvcache._backends.ascend": root / "_backends" / "ascend.py",
            "ms_kvcache._host_memory": root / "_host_memory.py"}
    edges = set()
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            edges |= {(name, t) for t in targets if t in mods and t != name}
    assert not {(a, b) for a, b in edges if (b, a) in edges}, edges
    assert ("ms_kvcache._backends.ascend", "ms_kvcache._host_memory") in edges
    assert ("ms_kvcache._backends.ascend", "ms_kvcache._aclnn") in edges


# ------------------------------------------------------------------------------------------ zero-copy decision
@pytest.fixture(scope="module")
def npu_files(tmp_path_factory):
    import _fake_ascend as FA

    if A._pyboost_module() is None:
        pytest.skip(f"ms_kvcache._ascend_pyboost not usable: {A._PYBOOST['why']}")
    try:
        return FA.build(tmp_path_factory.mktemp("fake_npu"))
    except RuntimeError as exc:
        pytest.skip(f"cannot build the stand-in CANN libraries: {exc}")


@pytest.fixture
def npu(npu_files, monkeypatch):
    """The ascend backend's PyNative path on the stand-in NPU (tests/_fake_ascend.py), with the CANN version of
    the test (``$FAKE_CANN_VERSION``); the zero-copy decision not made yet."""
    import _fake_ascend as FA
    from ms_kvcache import _backend, _custom
    from ms_kvcache._backends import cpu

    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(npu_files["ascendcl"]))
    monkeypatch.setenv("FAKE_ACL_LIB", str(npu_files["ascendcl"]))
    monkeypatch.setenv("MS_KVCACHE_LIBNNOPBASE", str(npu_files["nnopbase"]))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(npu_files["vendor"]))
    monkeypatch.setenv("FAKE_OPAPI_CPU_LIB", cpu.library_path())
    for v in (A.HOST_MEMORY_ENV, A.PYBOOST_ENV, "FAKE_CANN_VERSION"):
        monkeypatch.delenv(v, raising=False)
    _acl.reset()
    monkeypatch.setitem(A._PYBOOST, "runtime", None)
    monkeypatch.setattr(A, "_ZERO_COPY", {"state": None}, raising=False)
    monkeypatch.setattr(_host_memory, "_WARNED", set(), raising=False)
    monkeypatch.setitem(_host_memory.REGISTER_FALLBACK, "why", "")
    monkeypatch.setattr(_backend, "_current", "ascend")
    monkeypatch.setattr(_custom, "_LAUNCHERS", {})
    hosts = []
    monkeypatch.setattr(A, "_is_host_tensor", lambda t: any(t is h for h in hosts))
    rt = FA.FakeRuntime(npu_files["ascendcl"], npu_files["nnopbase"])
    rt.clear()
    yield SimpleNamespace(rt=rt, host=lambda t: (hosts.append(t), t)[1], hosts=hosts)
    ms_kvcache.synchronize()
    hosts.clear()
    getattr(_host_memory, "_INFLIGHT", []).clear()
    import gc

    gc.collect()
    ctypes.c_int.in_dll(ctypes.CDLL(str(npu_files["ascendcl"])), "fake_mapped_reads_zero").value = 0
    _acl.reset()


def _d2h(npu, rng):
    """One multi_layer_kv_transfer d2h into an alloc_host_buffer buffer; (buffer address, the kernel's address of
    it, the staging copies, the numpy check passed)."""
    caches = [[rng.standard_normal((4, 4, 2, 8)).astype(np.float16) for _ in range(2)]]
    kv = [[Tensor(c) for c in layer] for layer in caches]
    slots = np.array([3, 9, 14], np.int64)
    buf = npu.host(ms_kvcache.alloc_host_buffer((2, 1, 3, 16), "float16"))
    npu.rt.clear()
    ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(slots), kv_format="separate", direction="d2h")
    ms_kvcache.synchronize()
    want = np.stack([np.stack([c.reshape(16, 16)[slots] for c in layer]) for layer in caches], axis=1)
    np.testing.assert_array_equal(buf.asnumpy(), want)
    data = npu.rt.events("ws")[-1]["params"][0]["v"]["data"]
    return buf.data_ptr(), data, npu.rt.events("memcpy_async")


MAP = 1 << 40   # where the stand-in maps registered pages


@pytest.mark.parametrize("version", ["8.2.RC1", "8.5.0", "9.0.0", None])
def test_auto_mode_stages_below_cann_9_1(npu, rng, monkeypatch, version):
    """Registered buffers go the staged way where the CANN runtime does not document kernel access to the mapped
    address (before 9.1, or the version unknown), warned once; the old code handed kernels the mapped address
    whenever the registration succeeded."""
    if version:
        monkeypatch.setenv("FAKE_CANN_VERSION", version)
    with pytest.warns(RuntimeWarning, match="go through a device staging copy, not their mapped address"):
        addr, data, copies = _d2h(npu, rng)
    assert data not in (addr, addr + MAP) and len(copies) == 1 and copies[0]["dst"] == addr
    ok, why = A.zero_copy_status()
    assert not ok
    assert (f"CANN {version}: its runtime documents" in why) if version else ("CANN version is unknown" in why)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _d2h(npu, rng)   # once only


def test_auto_mode_zero_copy_on_cann_9_1_after_the_self_test(npu, rng, monkeypatch):
    monkeypatch.setenv("FAKE_CANN_VERSION", "9.1.0")
    addr, data, copies = _d2h(npu, rng)
    assert data == addr + MAP and copies == []
    ok, why = A.zero_copy_status()
    assert ok and why == ("CANN 9.1.0; self-test: an h2d kernel reading a registered page by its mapped address got "
                          "all 1024 bytes")


def test_a_failing_self_test_means_staged(npu, rng, monkeypatch):
    """CANN 9.1 but the AI core reads zeros at the mapped address (the stand-in's fake_mapped_reads_zero): the
    self-test compares the bytes, fails, and the buffers are staged."""
    monkeypatch.setenv("FAKE_CANN_VERSION", "9.1.0")
    ctypes.c_int.in_dll(ctypes.CDLL(os.environ["FAKE_ACL_LIB"]), "fake_mapped_reads_zero").value = 1
    ok, why = A.zero_copy_status()
    assert not ok and re.search(r"CANN 9\.1\.0; self-test: an h2d kernel reading a registered page by its mapped "
                                r"address got \d+ of 1024 bytes wrong", why), why
    ctypes.c_int.in_dll(ctypes.CDLL(os.environ["FAKE_ACL_LIB"]), "fake_mapped_reads_zero").value = 0
    with pytest.warns(RuntimeWarning, match="bytes wrong"):
        addr, data, copies = _d2h(npu, rng)
    assert data != addr + MAP and len(copies) == 1


def test_info_says_staged_or_zero_copy_and_why(npu, monkeypatch, capsys):
    from ms_kvcache.cli import main

    monkeypatch.setattr(A, "_device_target", lambda: "Ascend")
    monkeypatch.setenv("FAKE_CANN_VERSION", "8.2.RC1")
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"host memory \(mode auto\): staged - alloc_host_buffer memory is staged through a device "
                     r"tensor: CANN 8\.2\.RC1: its runtime documents", text), text
    assert re.search(r"host buffers: mmap \+ mbind \+ mlock, then aclrtHostRegister \(Linux [^,]+, CANN 8\.2\.RC1\)",
                     text), text
    monkeypatch.setenv("FAKE_CANN_VERSION", "9.1.0")
    monkeypatch.setattr(A, "_ZERO_COPY", {"state": None})
    monkeypatch.setattr(_host_memory, "kernel_release", lambda: "5.10.0-60.18.0.50.oe2203.aarch64")
    rep = A.report()["host_memory"]
    assert rep["effective"] == "zero_copy" and "self-test" in rep["why"] and rep["cann_version"] == "9.1.0"
    assert rep["allocation"].startswith("aclrtMallocHost, then aclrtHostRegister (Linux <= 5.10")


# ------------------------------------------------------------------------------------------ MindSpore's Ascend C path
# MindSpore 2.10 on device target "Ascend" turns every ops.Custom(func_type="aot") into an Ascend C (aclnn)
# op (custom_ops.py, Custom.__init__: is_ascend_c): it reads the installed op's
# aclnn<Op>GetWorkspaceSize prototype from the vendor folder (_custom_ops_utils.py CustomInfoGenerator),
# generates and compiles (g++) a callback calling it, and sets the primitive attributes
# custom_callback_func and custom_inputs_type, which select CustomV2AclnnKernelMod at graph kernel build.
# The tests below run that branch on this CPU machine: device target patched to "Ascend" where
# custom_ops.py reads it, a fake CANN root (ASCEND_OPP_PATH; only include/acl/acl_base.h, stubbed) and a fake
# vendor folder whose op_api/include/aclnn_<op>.h carry the prototypes CANN's op build would generate
# from our OpDefs. They stop before any launch (the graph-mode calls fail at the CPU kernel build).

#: the types MindSpore reads from the prototype's parameters (const and spaces dropped)
_MS_TYPE = {"int": "int64_t", "bool": "bool", "float": "double", "str": "char*"}

from _fake_ascend import aclnn_header  # noqa: E402  (the independent writer of CANN's header form)


def _kernel_specs():
    return [s for s in _spec.all_specs() if not _spec.ascend_runtime(s) and not _spec.kernel_pending(s)]


def _expected_types(spec):
    """custom_inputs_type for ``spec``: the prototype's parameter types without the last two."""
    return ([("aclTensorList*" if t.dynamic else "aclTensor*") for t in spec.inputs]
            + [_MS_TYPE[a.kernel_type] for a in spec.attrs] + ["aclTensor*"] * len(spec.outputs))


@pytest.fixture(scope="module")
def _ascend_c_files():
    """Fake CANN root and vendor folder (one per module: MindSpore compiles each op's callback once)."""
    import tempfile

    from ms_kvcache import _custom

    if shutil.which("g++") is None:
        pytest.skip("no g++: MindSpore compiles the aclnn callback with it")
    for _ in range(5):   # MindSpore derives the CANN root as ASCEND_OPP_PATH.split('opp')[0]
        base = Path(tempfile.mkdtemp(prefix="mskv_ascend_c_"))
        if "opp" not in str(base):
            break
        shutil.rmtree(base)
    cann = base / "cann"
    (cann / "opp" / "vendors").mkdir(parents=True)
    (cann / "include" / "acl").mkdir(parents=True)
    # the only CANN header the generated callback includes; it needs nothing from it but <cstdint>
    (cann / "include" / "acl" / "acl_base.h").write_text("#pragma once\n#include <cstdint>\n")
    vendor = base / "vendors" / A.VENDOR_NAME
    inc = vendor / "op_api" / "include"
    inc.mkdir(parents=True)
    for spec in _kernel_specs():
        (inc / A.aclnn_header_name(spec)).write_text(aclnn_header(spec))
    yield base, cann, vendor
    for cache in (_custom._EAGER, _custom._LAUNCHERS):
        for key in [k for k in cache if "ascend" in k]:
            del cache[key]
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def ascend_c(_ascend_c_files, monkeypatch):
    """MindSpore's Ascend branch of ops.Custom, on this machine (see the comment above)."""
    from mindspore import context

    base, cann, vendor = _ascend_c_files
    real_get_context = context.get_context
    monkeypatch.setenv("ASCEND_OPP_PATH", str(cann / "opp"))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(vendor))
    monkeypatch.setenv("MS_COMPILER_CACHE_PATH", str(base / "kernel_meta"))
    # custom_ops.py reads `context.get_context("device_target")` (is_ascend_c, _compile_aot)
    monkeypatch.setattr(context, "get_context",
                        lambda key: "Ascend" if key == "device_target" else real_get_context(key))
    return vendor


def _ascend_prim(spec, counts=None):
    from ms_kvcache._custom import prim_class

    args = ("ascend",) + ((counts,) if spec.has_dynamic else ()) + tuple(a.default for a in spec.attrs)
    return prim_class(spec)(*args)


def _counts_for(spec, layers):
    """Per-dynamic-input counts for ``layers`` layers (K and V planes per layer for the transfers)."""
    return {"copy_blocks": (layers, layers), "multi_layer_kv_transfer": (2 * layers,),
            "multi_layer_block_transfer": (2, 2 * layers),
            # with scale caches: one per layer and plane (and, block op, one scale host tensor per plane)
            "multi_layer_kv_transfer_quant": (2 * layers, 2 * layers),
            "multi_layer_block_transfer_quant": (2, 2 * layers, 2, 2 * layers)}.get(spec.name)


def test_aclnn_header_text_matches_cann_form():
    # written out by hand from op_host/reshape_and_cache.cpp / copy_blocks.cpp (not from the OpSpec)
    h = aclnn_header(_spec.get_spec("reshape_and_cache"))
    assert ("aclnnStatus aclnnMskvReshapeAndCacheGetWorkspaceSize(\n    const aclTensor *key,\n    const aclTensor *value,\n"
            "    const aclTensor *keyCache,\n    const aclTensor *valueCache,\n    const aclTensor *slotMapping,\n"
            "    int64_t cacheLayout,\n    const aclTensor *status,\n    uint64_t *workspaceSize,\n"
            "    aclOpExecutor **executor);") in h
    h = aclnn_header(_spec.get_spec("copy_blocks"))
    assert ("aclnnMskvCopyBlocksGetWorkspaceSize(\n    const aclTensorList *keyCaches,\n    const aclTensorList *valueCaches,\n"
            "    const aclTensor *blockMapping,\n    const aclTensor *status,\n") in h
    h = aclnn_header(_spec.get_spec("rope_concat_and_cache_mla"))
    assert "const aclTensor *kvCNormWeightOptional,\n    bool isNeoxStyle,\n    double epsilon,\n    const aclTensor *qPeOut," in h


#: The attribute types MindSpore 2.7.0 - 2.8.0's aclnn code generator maps (``_custom_ops_utils.py``,
#: ``CustomCodeGenerator._get_type_declaration``, read in each wheel; 2.9.0 adds "str" -> "char*"), and the
#: scalar parameter types their generated callback accepts (``supported_input_scalar_type``).
_MS27_ATTR_TYPES = {"tensor": "aclTensor*", "int": "int64_t", "float": "float", "double": "double", "bool": "bool",
                    "number": "aclScalar*", "listInt": "aclIntArray*", "listBool": "aclBoolArray*",
                    "listFloat": "aclFloatArray*"}
_MS27_SCALAR_PARAMS = {"int64_t", "uint64_t", "float", "double", "bool", "aclDataType"}


@pytest.mark.parametrize("name", [s.name for s in _spec.all_specs()
                                  if not _spec.ascend_runtime(s) and not _spec.kernel_pending(s)])
def test_attributes_pass_on_every_supported_mindspore(name):
    """Every reg_info attribute type is one the oldest supported MindSpore (2.7.0) can generate the aclnn
    callback for, and every aclnn attribute parameter is a scalar type its callback takes: a str attribute
    (``char *``) made 8 of the 10 ops fail on 2.7.x / 2.8.0 with "RuntimeError: Unsupported type: str" when
    constructed on Ascend. Also run through the installed MindSpore's own generator."""
    from mindspore.ops.operations._custom_ops_utils import CustomCodeGenerator

    spec = _spec.get_spec(name)
    info = A.reg_info(spec)
    for a in info.get("attr", []):
        assert a["type"] in _MS27_ATTR_TYPES, (name, a)
    for a in spec.attrs:
        assert _MS_TYPE[a.kernel_type] in _MS27_SCALAR_PARAMS, (name, a.name, a.kernel_type)
        assert a.codes or a.type != "str", (name, a.name)
    ins, outs = CustomCodeGenerator()._get_input_output_types(info)   # raises on an unsupported type
    assert ins[len(spec.inputs):] == [_MS27_ATTR_TYPES[a.kernel_type] if a.kernel_type != "float" else "float"
                                      for a in spec.attrs]
    assert len(outs) == len(spec.outputs)


def test_installed_mindspore_codegen_script(tmp_path, monkeypatch):
    """scripts/check_ms_aclnn_codegen.py on the installed MindSpore: its own CustomInfoGenerator /
    CustomCodeGenerator read our header of every kernel op and generate the callback, and every prototype
    type is in its kernel's type table; the old form (a named mode as a str attribute / char *) of one op is
    judged as that version judges it (refused before 2.9: "Unsupported type: str"). Without compiling, so
    it stays cheap; the ascend_c tests compile MindSpore's callbacks. The README table runs it on every
    supported version's wheel."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / "check_ms_aclnn_codegen.py"
    sp = importlib.util.spec_from_file_location("check_ms_aclnn_codegen", path)
    cg = importlib.util.module_from_spec(sp)
    sp.loader.exec_module(cg)
    root = Path(ms.__file__).resolve().parent
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", "")  # check_one sets both; monkeypatch restores them
    monkeypatch.setenv("ASCEND_OPP_PATH", "")
    version = cg.ms_version(root)
    gen, ktypes = cg.load_generator(root, version), cg.kernel_type_names(root)
    from ms_kvcache import _aclnn

    for spec in _aclnn.kernel_specs():
        assert cg.check_one(gen, ktypes, spec.op_type, A.reg_info(spec), _aclnn.header_text(spec), tmp_path,
                            None) == "", spec.name
    spec = _spec.get_spec("reshape_and_cache")
    info, header = cg.old_form(spec, A.reg_info(spec), _aclnn.header_text(spec))
    assert "char *cacheLayoutOptional," in header and info["attr"][0]["type"] == "str"
    why = cg.check_one(gen, ktypes, spec.op_type, info, header, tmp_path, None)
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    if major_minor < (2, 9):
        assert "Unsupported type: str" in why
    else:
        assert why == ""


def test_coded_attribute_values_reach_the_aclnn_inputs(ascend_c):
    """A named mode given to the primitive arrives as its code among the trailing attribute inputs (the
    values CustomV2AclnnKernelMod converts to the prototype's int64_t), in the primitive attributes and on
    the PyNative twin; written inputs still follow the public value (``inplace_if``)."""
    from ms_kvcache._custom import prim_class

    spec = _spec.get_spec("multi_layer_kv_transfer")
    for direction, code in (("d2h", 2), ("h2d", 1)):
        prim = prim_class(spec)("ascend", (4,), 2, direction, "BNSD", 2, 0)
        assert prim.attr_inputs == (2, code, 1, 2, 0)
        assert prim.attrs["direction"] == code and prim.attrs["cache_layout"] == 1
        assert prim.custom_pyboost.get_attr_dict()["direction"] == code
        # buffer, slot_mapping, kv_caches (one aclTensorList), 5 attributes, status
        assert list(prim.attrs["custom_inputs_type"]) == ["aclTensor*", "aclTensor*", "aclTensorList*"] + \
            ["int64_t"] * 5 + ["aclTensor*"]
        assert prim.attrs["side_effect_mem"]
    spec = _spec.get_spec("reshape_and_cache")
    assert prim_class(spec)("ascend", "BNSD").attr_inputs == (1,)
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'cache_layout': expected one of \('BSND', 'BNSD', 'NZ'\), got 'NHD'"):
        prim_class(spec)("ascend", "NHD")


def test_mindspore_finds_each_header_by_op_type():
    """MindSpore derives the header name from the op type (CustomInfoGenerator._get_aclnn_api_file_name);
    it must be the aclnn_mskv_<op>.h the package installs (ascend.VendorPackage.ops)."""
    from mindspore.ops.operations._custom_ops_utils import CustomInfoGenerator

    for spec in _kernel_specs():
        assert CustomInfoGenerator._get_aclnn_api_file_name(f"aclnn{spec.op_type}") == A.aclnn_header_name(spec)


@pytest.mark.parametrize("name,layers", [(s.name, l) for s in _spec.all_specs()
                                         if not _spec.ascend_runtime(s) and not _spec.kernel_pending(s)
                                         for l in ((32, 61) if s.has_dynamic else (None,))])
def test_primitive_inputs_line_up_with_aclnn_prototype(ascend_c, name, layers):
    spec = _spec.get_spec(name)
    counts = _counts_for(spec, layers) if spec.has_dynamic else None
    prim = _ascend_prim(spec, counts)
    assert prim.is_ascend_c
    attrs = prim.attrs
    # MindSpore parsed the installed prototype: types in order, without workspaceSize / executor
    assert list(attrs["custom_inputs_type"]) == _expected_types(spec)
    if name == "reshape_and_cache":
        assert list(attrs["custom_inputs_type"]) == ["aclTensor*"] * 5 + ["int64_t", "aclTensor*"]
    if name == "copy_blocks":
        assert list(attrs["custom_inputs_type"]) == ["aclTensorList*", "aclTensorList*", "aclTensor*", "aclTensor*"]
    # the compiled callback exports <OpType>GetWorkSpaceSize
    so, func = attrs["custom_callback_func"].rsplit(":", 1)
    assert func == spec.op_type and hasattr(ctypes.CDLL(so), f"{spec.op_type}GetWorkSpaceSize")
    # the primitive's inputs as called: the tensors (lists flattened), then the attribute values,
    # filled in from the signature defaults (spec order = prototype order)
    n_tensors = len(spec.expanded_inputs(counts) if spec.has_dynamic else spec.inputs)
    assert prim.attr_inputs == tuple(a.kernel_default for a in spec.attrs)
    assert not any(isinstance(v, str) for v in prim.attr_inputs)
    called = [("tensor", None)] * n_tensors + [("attr", v) for v in prim.attr_inputs]
    # regroup them as CustomV2AclnnKernelMod::GetCustomInputs does (dyn_input_sizes, else one each)
    sizes = list(attrs["dyn_input_sizes"]) if "dyn_input_sizes" in attrs else [-1] * len(called)
    assert sum(max(s, 1) for s in sizes) == len(called)
    groups, off = [], 0
    for s in sizes:
        groups.append(called[off:off + max(s, 1)])
        off += max(s, 1)
    # 2.10's GetWorkSpaceInfo: grouped inputs + outputs must equal custom_inputs_type, one for one
    types = list(attrs["custom_inputs_type"])
    assert len(groups) + len(spec.outputs) == len(types)
    scalar_type = {bool: "bool", int: "int64_t", float: "double", str: "char*"}
    for g, t, i in zip(groups, types, range(len(groups))):
        kind, value = g[0]
        if kind == "tensor":
            want = "aclTensorList*" if spec.inputs[i].dynamic else "aclTensor*"
            assert t == want, (name, i, t)
            if not spec.inputs[i].dynamic:
                assert len(g) == 1
            else:
                assert len(g) == counts[sum(1 for x in spec.inputs[:i] if x.dynamic)]
        else:
            assert t == scalar_type[type(value)], (name, i, t, value)
    assert types[len(groups):] == ["aclTensor*"] * len(spec.outputs)
    # what the kernel needs is also on the PyNative twin (Custom copies its attrs before ours exist)
    pyboost = prim.custom_pyboost.get_attr_dict()
    for key in ("dyn_input_sizes", "side_effect_mem", "custom_inputs_type", "custom_callback_func"):
        if key in attrs:
            assert key in pyboost and pyboost[key] == attrs[key], key
    if spec.has_dynamic:
        assert "dyn_input_sizes" in pyboost
    for a in spec.attrs:
        assert pyboost[a.name] == a.kernel_default


def _spy_infer(monkeypatch):
    """Record the argument shapes/dtypes MindSpore's infer step passes to ascend primitives built from now on."""
    from ms_kvcache import _custom

    seen = []
    real = _custom._drop_trailing

    def spy(fn, n):
        inner = real(fn, n)

        def wrapped(*args):
            seen.append(args)
            return inner(*args)
        return wrapped
    monkeypatch.setattr(_custom, "_drop_trailing", spy)
    return seen


def _run_until_kernel_build(f, *args):
    """Compile and run ``f``; on this CPU machine the Ascend C primitive fails at its CPU kernel build,
    after the infer step (no launch)."""
    with pytest.raises(RuntimeError, match="user defined function path '.*' is illegal"):
        f(*args)


def test_graph_mode_appends_attribute_inputs(ascend_c, monkeypatch, tmp_path):
    """The public op's graph branch calls the primitive with the tensors only; the compiled call has the
    attribute value after them (MindSpore fills it from the signature default)."""
    from ms_kvcache import _backend

    monkeypatch.chdir(tmp_path)        # MindSpore writes rank_0/om/analyze_fail.ir on the failure
    seen = _spy_infer(monkeypatch)
    monkeypatch.setattr(_backend, "_current", "ascend")
    k = Tensor(np.ones((3, 2, 16), np.float16))
    kc = ms.Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float16)), name="kc")  # graph mode writes Parameters only
    vc = ms.Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float16)), name="vc")

    @ms.jit
    def g(k, v, kc, vc, s):
        ms_kvcache.reshape_and_cache(k, v, kc, vc, s, cache_layout="BSND")
        return kc

    _run_until_kernel_build(g, k, k, kc, vc, Tensor(np.array([0, 5, -1], np.int32)))
    shapes, dtypes = seen[0], seen[1]
    assert len(shapes) == 6 and list(shapes[:5]) == [[3, 2, 16], [3, 2, 16], [2, 4, 2, 16], [2, 4, 2, 16], [3]]
    assert str(dtypes[5]) == "Int64"  # cache_layout "BSND" as its code


@pytest.mark.parametrize("how", ["cell_jit_config", "jit_backend_ge", "context"])
def test_graph_mode_o2_is_refused_at_compile_time(ascend_c, monkeypatch, tmp_path, how):
    """jit_level O2 (GE) cannot run the ascend primitives (scalar attribute inputs, caches written through
    input addresses): the compile stops with an error naming jit_level, in MindSpore's infer step, for
    each way to ask for it. (The old code went on to the kernel build.)"""
    from ms_kvcache import _backend

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_backend, "_current", "ascend")
    k = Tensor(np.ones((3, 2, 16), np.float16))
    kc = ms.Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float16)), name="kc")
    vc = ms.Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float16)), name="vc")
    slots = Tensor(np.array([0, 5, -1], np.int32))

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc, self.vc = kc, vc

        def construct(self, k, s):
            ms_kvcache.reshape_and_cache(k, k, self.kc, self.vc, s)
            return s

    if how == "jit_backend_ge":
        @ms.jit(backend="GE")
        def run(k, s):
            ms_kvcache.reshape_and_cache(k, k, kc, vc, s)
            return s
    else:
        run = Net()
        if how == "cell_jit_config":
            run.set_jit_config(ms.JitConfig(jit_level="O2"))
        ms.set_context(mode=ms.GRAPH_MODE)
    old_cfg = ms.get_context("jit_config")
    if how == "context":
        ms.set_context(jit_config={"jit_level": "O2"})
    try:
        with pytest.raises(RuntimeError, match=r"reshape_and_cache: GRAPH_MODE with jit_level='O2' \(the GE backend\) "
                                               r"is not supported on the ascend backend"):
            run(k, slots)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        if how == "context":  # back to the unset default (set_context accepts only O0 / O1 / O2)
            from mindspore import context as ctx
            from mindspore._c_expression import ms_ctx_param

            ctx._context().set_param(ms_ctx_param.jit_level, old_cfg.get("jit_level", ""))
            ctx._context().jit_config = old_cfg


def test_jit_level_o0_o1_are_accepted(monkeypatch):
    monkeypatch.setattr(A, "_graph_jit_config", lambda: ("O1", "ms_backend"))
    A.check_jit_level("x")
    monkeypatch.setattr(A, "_graph_jit_config", lambda: ("", "GE"))
    with pytest.raises(RuntimeError, match="jit_level"):
        A.check_jit_level("x")


def test_graph_mode_copy_blocks_32_layers(ascend_c, monkeypatch, tmp_path):
    """copy_blocks at L = 32 (66 primitive inputs, far over the templated kernel's 12) compiles with the
    Ascend C primitive: infer sees both lists of 32, the primitive has dyn_input_sizes [32, 32, -1]."""
    from ms_kvcache import _backend, _custom

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_backend, "_current", "ascend")
    made = []
    real_init = _custom.InplaceCustom.__init__
    monkeypatch.setattr(_custom.InplaceCustom, "__init__", lambda self, *a: (real_init(self, *a), made.append(self))[0])
    spec = _spec.get_spec("copy_blocks")
    seen = []
    real = spec.extra["infer_shape"]
    monkeypatch.setitem(spec.extra, "infer_shape", lambda attrs, *a: (seen.append(a), real(attrs, *a))[1])
    caches = [ms.Parameter(Tensor(np.zeros((4, 2, 8), np.float16)), name=f"c{i}") for i in range(64)]

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.k = ms.ParameterTuple(caches[:32])
            self.v = ms.ParameterTuple(caches[32:])

        def construct(self, m):
            ms_kvcache.copy_blocks(self.k, self.v, m)
            return m

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        _run_until_kernel_build(Net(), Tensor(np.array([[0, 1]], np.int64)))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert seen and [len(seen[0][0]), len(seen[0][1])] == [32, 32] and list(seen[0][2]) == [1, 2]
    assert len(made) == 1 and type(made[0]).__name__ == "MskvCopyBlocks" and made[0].is_ascend_c
    assert list(made[0].attrs["dyn_input_sizes"]) == [32, 32, -1]
    assert list(made[0].custom_pyboost.get_attr_dict()["dyn_input_sizes"]) == [32, 32, -1]


def test_pynative_goes_through_a_graph(ascend_c, monkeypatch, tmp_path):
    """PyNative on Ascend: the launcher is a jit graph with the attribute inputs appended, because the
    pyboost path of ops.Custom (pyboost_custom_ext) takes tensors only."""
    from mindspore._c_expression import pyboost_custom_ext
    from ms_kvcache import _custom

    monkeypatch.chdir(tmp_path)
    spec = _spec.get_spec("rope_reshape_and_cache")
    prim = _ascend_prim(spec)
    x = Tensor(np.ones((3,), np.float32))
    # MindSpore 2.10's converter for CustomExt (custom_ext_op.yaml: tuple[tensor]) rejects a scalar input
    for extra in ("BSND", True, 3, (x, x)):
        with pytest.raises(TypeError, match="Failed calling CustomExt"):
            pyboost_custom_ext(prim.custom_pyboost, [(x, extra)])
    seen = _spy_infer(monkeypatch)
    launcher = _custom.eager_launcher(_spec.get_spec("reshape_and_cache"), "ascend", ("BSND",))
    assert not isinstance(launcher, ms.ops.Custom)
    k = Tensor(np.ones((3, 2, 16), np.float16))
    c = Tensor(np.zeros((2, 4, 2, 16), np.float16))
    _run_until_kernel_build(launcher, k, k, c, c, Tensor(np.array([0, 5, -1], np.int32)))
    assert len(seen[0]) == 6 and str(seen[1][5]) == "Int64"


def test_graph_launcher_writes_in_place_cpu(rng):
    """The PyNative jit launcher keeps in-place writes (run here with the cpu backend's primitive)."""
    from ms_kvcache import _custom

    spec = _spec.get_spec("reshape_and_cache")
    f = _custom.graph_launcher(_custom.eager_op(spec, "cpu", ("BSND",)))
    k = rng.standard_normal((3, 2, 16)).astype(np.float16)
    v = rng.standard_normal((3, 2, 16)).astype(np.float16)
    kc = ms.Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float16)), name="kc")   # a Parameter and a Tensor
    vc = Tensor(np.zeros((2, 4, 2, 16), np.float16))
    f(Tensor(k), Tensor(v), kc, vc, Tensor(np.array([0, 5, -1], np.int32)))
    ref = np.zeros((2, 4, 2, 16), np.float16)
    ref[0, 0], ref[1, 1] = k[0], k[1]
    np.testing.assert_array_equal(kc.asnumpy(), ref)
    ref[0, 0], ref[1, 1] = v[0], v[1]
    np.testing.assert_array_equal(vc.asnumpy(), ref)


# ------------------------------------------------------------------------- lists of tensors (M3)
@pytest.fixture
def ascend_prims(tmp_path, no_cann, monkeypatch):
    """The ascend backend active with a stand-in vendor package holding the list-input ops; every
    ops.Custom primitive the public ops build is the real ascend one (op type + reg_info), but its launch
    is recorded instead of run (no NPU). Yields the list of (primitive, flat inputs) launched."""
    from ms_kvcache import _backend, _custom

    v = make_vendor(tmp_path, ops=("copy_blocks", "multi_layer_kv_transfer", "multi_layer_block_transfer"))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(v))
    monkeypatch.setattr(_backend, "_current", "ascend")  # as if set_backend("ascend") had succeeded on an NPU
    launched = []
    real_eager_op = _custom.eager_op

    def recording_eager_op(spec, backend, attr_values=(), counts=None):
        prim = real_eager_op(spec, backend, attr_values, counts)
        return lambda *flat: launched.append((prim, flat))

    monkeypatch.setattr(_custom, "eager_op", recording_eager_op)
    monkeypatch.setattr(_custom, "graph_launcher", lambda f: f)  # record the primitive, not a jit graph of it
    monkeypatch.setattr(_custom, "_LAUNCHERS", {})
    monkeypatch.setattr(_custom, "_EAGER", {})
    yield launched


def _tensor_sizes(prim):
    """dyn_input_sizes of the tensor inputs: on the ascend backend the attribute values follow them as
    scalar inputs (ATTRS_AS_INPUTS, MindSpore 2.10's Ascend C path), one trailing -1 each."""
    sizes = list(prim.attrs["dyn_input_sizes"])
    spec = _spec.get_spec(prim.SPEC.name)
    assert sizes[len(spec.inputs):] == [-1] * len(spec.attrs), sizes
    return sizes[:len(spec.inputs)]


def _regroup_like_mindspore(prim, flat):
    """What MindSpore's Ascend custom kernel does with the flat tensor inputs: one group per
    dyn_input_sizes entry (a list of n tensors for n >= 0, one tensor for -1)."""
    sizes = _tensor_sizes(prim)
    assert sum(1 if n == -1 else n for n in sizes) == len(flat), (sizes, len(flat))
    out, i = [], 0
    for n in sizes:
        out.append(flat[i] if n == -1 else list(flat[i:i + n]))
        i += 1 if n == -1 else n
    return out


def _check_against_reg_info(prim, spec):
    """reg_info's "dynamic" inputs are exactly the inputs dyn_input_sizes gives a count."""
    assert prim.reg_info["op_name"].endswith(spec.op_type)  # MindSpore may prefix it when registering
    dyn = [e["paramType"] == "dynamic" for e in prim.reg_info["inputs"]]
    assert dyn == [n != -1 for n in _tensor_sizes(prim)]


@pytest.mark.parametrize("layers", [1, 3, 40])
def test_ascend_copy_blocks_prim_gets_dyn_input_sizes(ascend_prims, layers):
    """copy_blocks on the ascend backend: the primitive handed to MindSpore (op type CopyBlocks with its
    reg_info) carries dyn_input_sizes [L, L, -1], so MindSpore regroups the 2L + 1 flat inputs into the
    OpDef's two DYNAMIC lists (M3: this attribute used to be built by a helper nothing called)."""
    k = [Tensor(np.full((4, 2, 8), i, np.float16)) for i in range(layers)]
    v = [Tensor(np.full((4, 2, 8), 100 + i, np.float16)) for i in range(layers)]
    bm = Tensor(np.array([[0, 1], [2, 3]], np.int32))
    ms_kvcache.copy_blocks(k, v, bm)
    (prim, flat), = ascend_prims
    assert prim.func == "MskvCopyBlocks"  # the CANN op type (the cpu / sim backends give "<library>:CopyBlocks")
    assert _tensor_sizes(prim) == [layers, layers, -1]
    assert prim.attrs["ms_kvcache_backend"] == "ascend" and prim.attrs["side_effect_mem"]
    groups = _regroup_like_mindspore(prim, flat)
    assert [x is y for x, y in zip(groups[0], k)] == [True] * layers
    assert [x is y for x, y in zip(groups[1], v)] == [True] * layers
    assert groups[2] is bm
    _check_against_reg_info(prim, _spec.get_spec("copy_blocks"))


def test_ascend_graph_prims_get_dyn_input_sizes(no_cann, tmp_path, monkeypatch):
    """The graph branches build their primitive as ``_get_cache_prim(_Prim)("ascend", counts, *attrs)``:
    the same attribute for every list-input op and count."""
    from ms_kvcache._custom import prim_class

    v = make_vendor(tmp_path, ops=("copy_blocks", "multi_layer_kv_transfer", "multi_layer_block_transfer"))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(v))
    cb = prim_class(_spec.get_spec("copy_blocks"))("ascend", (61, 61))
    assert _tensor_sizes(cb) == [61, 61, -1]
    kt = prim_class(_spec.get_spec("multi_layer_kv_transfer"))("ascend", (80,), 2, "h2d", "BSND", 40, 0)
    assert _tensor_sizes(kt) == [-1, -1, 80]
    bt = prim_class(_spec.get_spec("multi_layer_block_transfer"))("ascend", (2, 122), 2, "d2h", "BSND", 61, 0)
    assert _tensor_sizes(bt) == [-1, -1, 2, 122]
    for prim, name in ((cb, "copy_blocks"), (kt, "multi_layer_kv_transfer"), (bt, "multi_layer_block_transfer")):
        _check_against_reg_info(prim, _spec.get_spec(name))


def test_ascend_kv_transfer_prim_gets_dyn_input_sizes(ascend_prims):
    """multi_layer_kv_transfer (SEPARATE_KV, 3 layers) on the ascend backend: dyn_input_sizes [-1, -1, 6]."""
    layers, nb, bs, h, d, t = 3, 4, 8, 2, 16, 5
    caches = [(Tensor(np.zeros((nb, bs, h, d), np.float16)), Tensor(np.zeros((nb, bs, h, d), np.float16)))
              for _ in range(layers)]
    buf = Tensor(np.zeros((2, layers, t, h * d), np.float16))
    slots = Tensor(np.array([0, 9, 17, -1, 31], np.int32))
    ms_kvcache.multi_layer_kv_transfer(buf, caches, slots, kv_format="SEPARATE_KV", direction="d2h")
    (prim, flat), = ascend_prims
    assert _tensor_sizes(prim) == [-1, -1, 2 * layers]
    groups = _regroup_like_mindspore(prim, flat)
    assert groups[0] is buf and [x is y for x, y in zip(groups[2], [c for kv in caches for c in kv])] == [True] * 6
    _check_against_reg_info(prim, _spec.get_spec("multi_layer_kv_transfer"))
