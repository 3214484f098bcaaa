"""The ascend backend's PyNative path, ms_kvcache._ascend_pyboost, on MindSpore CPU with a stand-in NPU.

The module itself is the one built for the Ascend backend (MindSpore's PyboostRunner, the aclnn
two-stage API resolved from the vendor's libcust_opapi.so); only the CANN libraries are stand-ins
(tests/_fake_ascend.py: a libascendcl / libnnopbase pair and a libcust_opapi.so compiled against headers
of the form CANN's opbuild writes, whose launch runs the op's cpu kernel on the translated addresses).
What runs here: argument marshalling (prototype order, attribute values, tensor lists, outputs, optional
inputs), workspace and stream hand-over, handle lifetimes, no graph compile per shape, and the host-memory
data paths (zero-copy through the mapped address of registered memory; staged through a device tensor and
aclrtMemcpyAsync on the launch's stream). What only an NPU can confirm is listed in docs/ascend.md.
"""
import os
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

import ms_kvcache
import _fake_ascend as FA
from conftest import assert_bits_equal, random_array, to_ms, to_np
from ms_kvcache import _aclnn, _backend, _custom, _host_memory, _spec
from ms_kvcache._backends import _acl
from ms_kvcache._backends import ascend as A
from ms_kvcache._backends import cpu

MAP_OFFSET = 1 << 40  # where the stand-in aclrtHostRegister maps host pages (fake_ascendcl.c)


def _module_or_skip():
    mod = A._pyboost_module()
    if mod is None:
        pytest.skip(f"ms_kvcache._ascend_pyboost not usable: {A._PYBOOST['why']}")
    return mod


@pytest.fixture(scope="module")
def npu_files(tmp_path_factory):
    _module_or_skip()
    try:
        return FA.build(tmp_path_factory.mktemp("fake_npu"))
    except RuntimeError as exc:
        pytest.skip(f"cannot build the stand-in CANN libraries: {exc}")


@pytest.fixture
def npu(npu_files, monkeypatch):
    """The ascend backend active, CANN = the stand-ins; ``npu.host(t)`` marks ``t`` as host memory (on
    this CPU machine every tensor is, so the test says which ones play the host side)."""
    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(npu_files["ascendcl"]))
    monkeypatch.setenv("FAKE_ACL_LIB", str(npu_files["ascendcl"]))
    monkeypatch.setenv("MS_KVCACHE_LIBNNOPBASE", str(npu_files["nnopbase"]))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(npu_files["vendor"]))
    monkeypatch.setenv("FAKE_OPAPI_CPU_LIB", cpu.library_path())
    monkeypatch.delenv(A.HOST_MEMORY_ENV, raising=False)
    monkeypatch.delenv(A.PYBOOST_ENV, raising=False)
    # a CANN whose runtime documents kernel access to the mapped address (the auto mode's zero-copy also runs
    # its self-test on the stand-ins)
    monkeypatch.setenv("FAKE_CANN_VERSION", "9.1.0")
    monkeypatch.setitem(A._ZERO_COPY, "state", None)
    monkeypatch.setattr(_host_memory, "_WARNED", set())
    _acl.reset()
    monkeypatch.setitem(A._PYBOOST, "runtime", None)
    monkeypatch.setattr(_backend, "_current", "ascend")
    monkeypatch.setattr(_custom, "_LAUNCHERS", {})
    hosts = []
    monkeypatch.setattr(A, "_is_host_tensor", lambda t: any(t is h for h in hosts))
    rt = FA.FakeRuntime(npu_files["ascendcl"], npu_files["nnopbase"])
    ok, why = A.zero_copy_status()   # the auto mode's one-shot self-test, run here so the tests' logs start empty
    assert ok, why
    rt.clear()
    ns = SimpleNamespace(rt=rt, files=npu_files, host=lambda t: (hosts.append(t), t)[1], hosts=hosts)
    yield ns
    ms_kvcache.synchronize()
    hosts.clear()       # free the host buffers (unregistering them) while the stand-in runtime is loaded
    _host_memory._INFLIGHT.clear()
    import gc

    gc.collect()
    _acl.reset()


def _launch_paths(op):
    return {getattr(f, "ascend_path", None) for k, f in _custom._LAUNCHERS.items() if k[0] == op and callable(f)}


def _ran_ok(rt, n=None):
    launches = rt.events("launch")
    assert launches and all(e.get("ran") and e.get("rc") == 0 for e in launches), launches
    if n is not None:
        assert len(launches) == n
    return launches


# ------------------------------------------------------------------------------------------ the shims
def test_shim_file_is_generated_from_the_opspecs():
    """ms_kvcache/csrc/aclnn_calls.inc is what `python -m ms_kvcache._aclnn --write` writes (an OpSpec
    change, e.g. an attribute's type, needs a regenerated shim and a rebuild)."""
    assert _aclnn.check_shim() == ""


def test_module_has_a_shim_per_kernel_op():
    mod = _module_or_skip()
    compiled = dict(mod.ops())
    assert compiled == {s.op_type: _aclnn.signature(s) for s in FA.kernel_specs()}
    assert compiled["MskvReshapeAndCache"] == "TTTTTiO"  # cache_layout: an int code
    assert compiled["MskvMultiLayerKvTransfer"] == "TTLiiiiiO"  # direction, cache_layout: int codes
    assert compiled["MskvRopeConcatAndCacheMla"] == "TTTTTTTTTbdOOO"


def _param_types(header_text, api):
    body = header_text.split(f"{api}GetWorkspaceSize(")[1].split(");")[0]
    return [" ".join(p.replace("*", " * ").split()[:-1]).replace(" *", "*").replace("const ", "")
            for p in body.split(",")]


def test_prototypes_agree_with_an_independent_header_writer():
    """_aclnn.params (what the module's shims are generated from) and tests/_fake_ascend.aclnn_header
    (written apart, from the opbuild rules) give the same parameter types for every op."""
    for spec in FA.kernel_specs():
        api = f"aclnn{spec.op_type}"
        ours = _param_types(_aclnn.header_text(spec), api)
        theirs = _param_types(FA.aclnn_header(spec), api)
        assert ours == theirs, spec.name
        assert ours[-2:] == ["uint64_t*", "aclOpExecutor**"]


def test_snake_case_follows_opbuild():
    assert _aclnn.snake_case("MskvReshapeAndCache") == "mskv_reshape_and_cache"
    assert _aclnn.snake_case("MskvConcatAndCacheMla") == "mskv_concat_and_cache_mla"
    assert _aclnn.snake_case("MLAPrologV3") == "mla_prolog_v3"      # an upper-case run, then a word
    assert _aclnn.snake_case("AddRmsNorm") == "add_rms_norm"
    for spec in FA.kernel_specs():
        assert _aclnn.header_name(spec) == A.aclnn_header_name(spec)


@pytest.mark.slow
def test_module_compiles_against_cann_form_headers(npu_files, tmp_path):
    """With -DMSKV_ACLNN_HEADERS the shims static_assert their function types against the installed
    aclnn_mskv_<op>.h (on a CANN machine: the headers opbuild wrote). Here: the independent header writer's
    headers pass, and one with a wrong attribute type fails to compile."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    ms_dir = os.path.dirname(ms.__file__)
    incs = [ms_dir, f"{ms_dir}/include", f"{ms_dir}/include/third_party",
            f"{ms_dir}/include/third_party/robin_hood_hashing", f"{ms_dir}/include/third_party/securec/include"]
    incs += [f"{ms_dir}/include/mindspore/{d}" for d in ("include", "core/include", "core/mindrt/include",
                                                           "core/mindrt", "ops", "ops/include", "ops/kernel/include",
                                                           "ccsrc", "ccsrc/include")]
    import sysconfig

    src = FA.ROOT / "ms_kvcache" / "csrc" / "ascend_pyboost_module.cpp"

    def compile_with(inc):
        cmd = [cxx, "-fsyntax-only", "-std=c++17", "-w", "-D_GLIBCXX_USE_CXX11_ABI=0", "-DENABLE_FAST_HASH_TABLE=1",
               "-DMSKV_ACLNN_HEADERS", f"-I{inc}", f"-I{src.parent}"] + [f"-I{i}" for i in incs]
        cmd += ["-isystem", sysconfig.get_paths()["include"], str(src)]
        return subprocess.run(cmd, capture_output=True, text=True)

    res = compile_with(npu_files["include"])
    assert res.returncode == 0, res.stderr[-3000:]
    bad = tmp_path / "inc"
    shutil.copytree(npu_files["include"], bad)
    h = bad / "aclnn_mskv_reshape_and_cache.h"
    text = h.read_text()
    assert "int64_t cacheLayout" in text
    h.write_text(text.replace("int64_t cacheLayout", "char *cacheLayout"))  # the string form: must not compile
    res = compile_with(bad)
    assert res.returncode != 0 and "aclnnMskvReshapeAndCacheGetWorkspaceSize differs from the OpSpec" in res.stderr


# ------------------------------------------------------------------------------------------ launches
def test_reshape_and_cache_through_aclnn(npu, rng):
    """Values: numpy reference. Launch: prototype order, attribute value, status output, workspace and
    stream handed from the two stages, every handle destroyed, the pyboost launcher (not a jit graph)."""
    k, v = random_array(rng, (5, 2, 16), "float16"), random_array(rng, (5, 2, 16), "float16")
    kc, vc = Tensor(np.zeros((3, 2, 4, 16), np.float16)), Tensor(np.zeros((3, 2, 4, 16), np.float16))
    slots = np.array([0, 7, -1, 11, 5], np.int64)
    ms_kvcache.reshape_and_cache(Tensor(k), Tensor(v), kc, vc, Tensor(slots), cache_layout="BNSD")
    ms_kvcache.synchronize()
    ref_k, ref_v = np.zeros((3, 2, 4, 16), np.float16), np.zeros((3, 2, 4, 16), np.float16)
    for t, s in enumerate(slots):
        if s >= 0:
            ref_k[s // 4, :, s % 4], ref_v[s // 4, :, s % 4] = k[t], v[t]
    assert_bits_equal(to_np(kc), ref_k, "key_cache")
    assert_bits_equal(to_np(vc), ref_v, "value_cache")
    assert _launch_paths("reshape_and_cache") == {"pyboost"}
    (ws,) = npu.rt.events("ws")
    assert [(p["k"], p["name"]) for p in ws["params"]] == [
        ("T", "key"), ("T", "value"), ("T", "key_cache"), ("T", "value_cache"), ("T", "slot_mapping"),
        ("i", "cache_layout"), ("O", "status")]
    params = ws["params"]
    assert params[5]["v"] == 1  # "BNSD" as its code (op_host/mskv_attr_codes.h: kLayoutBNSD)
    assert params[0]["v"]["shape"] == [5, 2, 16] and params[0]["v"]["dtype"] == 1  # ACL_FLOAT16
    assert params[0]["v"]["strides"] == [32, 16, 1] and params[0]["v"]["format"] == 2  # ND
    assert params[4]["v"]["dtype"] == 9                                                # ACL_INT64
    assert params[6]["v"]["shape"] == [1] and params[6]["v"]["dtype"] == 3             # int32 [1] status
    assert params[2]["v"]["data"] == kc.data_ptr()
    (launch,) = _ran_ok(npu.rt)
    assert launch["ws_size"] == ws["ws"] == 256 and launch["ws"] != 0
    assert npu.rt.live_handles() == (0, 0)


def test_no_graph_compile_per_shape(npu, rng, monkeypatch):
    """Ten calls with ten token counts: ten aclnn launches and no ms.jit graph (the fallback compiles one
    graph per new shape)."""
    monkeypatch.setattr(_custom, "graph_launcher", lambda prim: pytest.fail("a jit graph was built"))
    kc, vc = Tensor(np.zeros((8, 4, 2, 16), np.float32)), Tensor(np.zeros((8, 4, 2, 16), np.float32))
    ref = np.zeros((8, 4, 2, 16), np.float32)
    for t in range(1, 11):
        k = random_array(rng, (t, 2, 16), "float32")
        slots = rng.permutation(32)[:t].astype(np.int32)
        ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(slots))
        for j, s in enumerate(slots):
            ref[s // 4, s % 4] = k[j]
    ms_kvcache.synchronize()
    assert_bits_equal(to_np(kc), ref, "key_cache after 10 shapes")
    _ran_ok(npu.rt, 10)
    assert [e["params"][0]["v"]["shape"][0] for e in npu.rt.events("ws")] == list(range(1, 11))


def test_zero_workspace(npu, rng, monkeypatch):
    monkeypatch.setenv("FAKE_OPAPI_WS", "0")
    kc = Tensor(np.zeros((2, 4, 1, 8), np.float16))
    k = random_array(rng, (1, 1, 8), "float16")
    ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, Tensor(np.zeros((2, 4, 1, 8), np.float16)),
                                 Tensor(np.array([6], np.int32)))
    ms_kvcache.synchronize()
    (launch,) = _ran_ok(npu.rt)
    assert launch["ws_size"] == 0 and launch["ws"] == 0
    assert_bits_equal(to_np(kc)[1, 2], k[0], "row")


def test_copy_blocks_lists(npu, rng):
    """Two tensor lists of L = 3 (aclTensorList each), values against a loop over the pairs."""
    kcs = [random_array(rng, (6, 4, 2, 8), "bfloat16") for _ in range(3)]
    vcs = [random_array(rng, (6, 4, 2, 8), "bfloat16") for _ in range(3)]
    kt, vt = [to_ms(x) for x in kcs], [to_ms(x) for x in vcs]
    mapping = np.array([[0, 3], [5, 1], [3, 4]], np.int64)
    ms_kvcache.copy_blocks(kt, vt, Tensor(mapping))
    ms_kvcache.synchronize()
    for src, out in zip(kcs + vcs, kt + vt):
        ref = src.copy()
        for s, d in mapping:
            ref[d] = ref[s]
        assert_bits_equal(to_np(out), ref, "cache")
    (ws,) = npu.rt.events("ws")
    assert [p["k"] for p in ws["params"]] == ["L", "L", "T", "O"]
    assert [len(ws["params"][0]["v"]), len(ws["params"][1]["v"])] == [3, 3]
    assert [t["data"] for t in ws["params"][0]["v"]] == [t.data_ptr() for t in kt]
    _ran_ok(npu.rt, 1)
    assert npu.rt.live_handles() == (0, 0)


def _rope_runners():
    from test_fast_path import ROPE_OPS

    return ROPE_OPS


@pytest.mark.parametrize("op", ["rope_reshape_and_cache", "rope_reshape_and_cache_merged",
                                "rope_concat_and_cache_mla", "rerope_cached_keys"])
def test_rope_family_same_bits_as_the_cpu_backend(npu, op, monkeypatch):
    """Ops with real outputs (new tensors returned to Python), bool / float attributes and an optional
    input: every output and cache bit-identical to the cpu backend on the same inputs."""
    runners = _rope_runners()
    got = [to_np(t) for t in runners[op](np.random.default_rng(7), "float16")]
    assert _launch_paths(op) == {"pyboost"}
    _ran_ok(npu.rt, 1)
    monkeypatch.setattr(_backend, "_current", "cpu")
    want = [to_np(t) for t in runners[op](np.random.default_rng(7), "float16")]
    for i, (a, b) in enumerate(zip(got, want)):
        assert_bits_equal(a, b, f"{op}: result {i}, ascend (stand-in NPU) vs cpu")
    if op == "rope_concat_and_cache_mla":
        (ws,) = npu.rt.events("ws")
        kinds = {p["name"]: (p["k"], p["v"]) for p in ws["params"]}
        assert kinds["is_neox_style"] == ("b", False) and kinds["epsilon"][0] == "d"
        assert abs(kinds["epsilon"][1] - 1e-5) < 1e-12
        assert [p["k"] for p in ws["params"]][-3:] == ["O", "O", "O"]


def test_optional_input_absent_is_a_null_tensor(npu, rng):
    """An OPTIONAL input the caller leaves out (passed as an empty [0] tensor inside ms_kvcache) reaches
    aclnn as nullptr, aclnn's convention for an absent optional input."""
    _rope_runners()["rope_concat_and_cache_mla"](rng, "float32", norm=False)
    ms_kvcache.synchronize()
    (ws,) = npu.rt.events("ws")
    (w,) = [p for p in ws["params"] if p["name"] == "kv_c_norm_weight"]
    assert w["v"] is None
    _ran_ok(npu.rt, 1)


def test_disabled_module_falls_back_to_a_graph(npu, monkeypatch):
    monkeypatch.setenv(A.PYBOOST_ENV, "0")
    ok, why = A.pyboost_status()
    assert not ok and A.PYBOOST_ENV in why
    spec = _spec.get_spec("reshape_and_cache")
    made = []
    monkeypatch.setattr(_custom, "graph_launcher", lambda prim: made.append(prim) or (lambda *t: None))
    monkeypatch.setattr(_custom, "eager_op", lambda *a, **k: "prim")
    f = _custom.eager_launcher(spec, "ascend", ("BSND",))
    assert f.ascend_path == "jit" and made == ["prim"]


# ------------------------------------------------------------------------------------------ host memory
L, NB, BS, H, D = 2, 4, 4, 2, 8


def _caches(rng, dtype="float16"):
    return [[random_array(rng, (NB, BS, H, D), dtype) for _ in range(2)] for _ in range(L)]


def _gather_ref(caches, slots):
    buf = np.zeros((2, L, len(slots), H * D), caches[0][0].dtype)
    for l in range(L):
        for p in range(2):
            for t, s in enumerate(slots):
                if s >= 0:
                    buf[p, l, t] = caches[l][p][s // BS, s % BS].reshape(-1)
    return buf


def _host_buffer(shape, dtype=ms.float16):
    return ms_kvcache.alloc_host_buffer(shape, dtype, pinned=False)


def _registered(npu, t):
    addr = t.data_ptr()
    return _host_memory.mapped_address(addr, t.nbytes)


def test_alloc_host_buffer_registers_on_the_ascend_backend(npu):
    buf = _host_buffer((2, L, 3, H * D))
    addr = buf.data_ptr()
    assert _host_memory.mapped_address(addr, buf.nbytes) == addr + MAP_OFFSET
    assert _host_memory.mapped_address(addr + 64, 32) == addr + 64 + MAP_OFFSET   # inside: a view's bytes
    assert _host_memory.mapped_address(addr, buf.nbytes + 4096 * 1024) is None    # past the end


@pytest.mark.parametrize("mode", ["auto", "staged"])
def test_d2h_transfer_lands_in_host_memory(npu, rng, monkeypatch, mode):
    """multi_layer_kv_transfer d2h into an alloc_host_buffer buffer. auto: the kernel gets the mapped device
    address of the registered pages and no copy runs; staged: the kernel writes a device staging tensor and
    one aclrtMemcpyAsync D2H on the launch's stream, after the launch, copies it into the host buffer. Both:
    after ms_kvcache.synchronize() the host memory (read through numpy, not MindSpore) holds the rows."""
    monkeypatch.setenv(A.HOST_MEMORY_ENV, mode)
    caches = _caches(rng)
    kv = [[Tensor(c) for c in layer] for layer in caches]
    slots = np.array([3, -1, 9, 14, 0], np.int64)
    buf = npu.host(_host_buffer((2, L, len(slots), H * D)))
    host_view = buf.asnumpy()       # the same pages (Tensor.from_numpy, no copy)
    addr = buf.data_ptr()
    ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(slots), kv_format="separate", direction="d2h")
    ms_kvcache.synchronize()
    np.testing.assert_array_equal(host_view, _gather_ref(caches, slots))
    (ws,) = npu.rt.events("ws")
    data = ws["params"][0]["v"]["data"]
    copies = npu.rt.events("memcpy_async")
    if mode == "auto":
        assert data == addr + MAP_OFFSET and copies == []
    else:
        assert data not in (addr, addr + MAP_OFFSET)
        (c,) = copies
        assert (c["kind"], c["dst"], c["src"], c["n"]) == (_acl.MEMCPY_DEVICE_TO_HOST, addr, data, buf.nbytes)
        (launch,) = _ran_ok(npu.rt)
        assert c["stream"] == launch["stream"]
        log = npu.rt.events()
        assert [e["ev"] for e in log] == ["ws", "launch", "memcpy_async"]   # the copy after the kernel


@pytest.mark.parametrize("mode", ["auto", "staged"])
def test_h2d_transfer_reads_host_memory(npu, rng, monkeypatch, mode):
    """h2d from a host buffer written through numpy: zero-copy (mapped address, no copy) or staged (one H2D
    copy before the launch); the caches then hold the host rows (numpy reference scatter)."""
    monkeypatch.setenv(A.HOST_MEMORY_ENV, mode)
    caches = _caches(rng)
    kv = [[Tensor(c.copy()) for c in layer] for layer in caches]
    slots = np.array([5, 12, -1, 2], np.int64)
    buf = npu.host(_host_buffer((2, L, len(slots), H * D)))
    rows = random_array(rng, (2, L, len(slots), H * D), "float16")
    buf.asnumpy()[...] = rows        # write the host pages directly
    addr = buf.data_ptr()
    ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(slots), kv_format="separate", direction="h2d")
    ms_kvcache.synchronize()
    for l in range(L):
        for p in range(2):
            ref = caches[l][p].copy()
            for t, s in enumerate(slots):
                if s >= 0:
                    ref[s // BS, s % BS] = rows[p, l, t].reshape(H, D)
            assert_bits_equal(to_np(kv[l][p]), ref, f"layer {l} plane {p}")
    data = npu.rt.events("ws")[0]["params"][0]["v"]["data"]
    copies = npu.rt.events("memcpy_async")
    if mode == "auto":
        assert data == addr + MAP_OFFSET and copies == []
    else:
        (c,) = copies
        assert (c["kind"], c["dst"], c["src"], c["n"]) == (_acl.MEMCPY_HOST_TO_DEVICE, data, addr, buf.nbytes)
        assert [e["ev"] for e in npu.rt.events()] == ["ws", "memcpy_async", "launch"]   # the copy before


def test_unregistered_host_tensor_is_staged_and_written_back(npu, rng):
    """A host tensor that is not registered memory (here a plain Tensor over numpy) goes the staged way in
    auto mode; a d2h still ends in its memory."""
    caches = _caches(rng)
    kv = [[Tensor(c) for c in layer] for layer in caches]
    slots = np.array([1, 6], np.int64)
    arr = np.full((2, L, 2, H * D), 7, np.float16)
    buf = npu.host(Tensor.from_numpy(arr))
    assert _registered(npu, buf) is None
    ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(slots), kv_format="separate", direction="d2h")
    ms_kvcache.synchronize()
    np.testing.assert_array_equal(arr, _gather_ref(caches, slots))
    assert [e["ev"] for e in npu.rt.events()] == ["ws", "launch", "memcpy_async"]


def test_zero_copy_mode_refuses_unregistered_memory(npu, rng, monkeypatch):
    monkeypatch.setenv(A.HOST_MEMORY_ENV, "zero_copy")
    kv = [[Tensor(c) for c in layer] for layer in _caches(rng)]
    buf = npu.host(Tensor.from_numpy(np.zeros((2, L, 1, H * D), np.float16)))
    with pytest.raises(ValueError, match=r"multi_layer_kv_transfer: argument 'buffer': expected host memory "
                                         r"registered for device access"):
        ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(np.array([0], np.int64)), kv_format="separate",
                                           direction="d2h")


def test_bad_host_memory_mode_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(A.HOST_MEMORY_ENV, "fast")
    with pytest.raises(ValueError, match=r"MS_KVCACHE_HOST_MEMORY: expected one of \('auto', 'zero_copy', 'staged'\)"):
        A.host_memory_mode()


def test_a_host_address_handed_to_the_kernel_is_caught(npu, rng, monkeypatch):
    """The stand-in refuses a launch that gets the host address of registered memory (an AI core reaches
    host pages only through the mapped address): had the module passed the host pointer, this is how the
    launch would fail, so the zero-copy test above would have caught it."""
    monkeypatch.setattr(_host_memory, "mapped_address", lambda addr, n: addr)   # the wrong address
    kv = [[Tensor(c) for c in layer] for layer in _caches(rng)]
    buf = npu.host(_host_buffer((2, L, 2, H * D)))
    ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(np.array([0, 1], np.int64)), kv_format="separate",
                                       direction="d2h")
    with pytest.raises(RuntimeError):
        ms_kvcache.synchronize()
    (launch,) = npu.rt.events("launch")
    assert "host address of registered memory" in launch["error"]


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_block_transfer_host_blocks_zero_copy(npu, rng, direction):
    """multi_layer_block_transfer: each host plane of the list is its own host argument at its mapped
    address; d2h fills the host blocks, h2d fills the device blocks (numpy references)."""
    caches = _caches(rng)
    kv = [[Tensor(c.copy()) for c in layer] for layer in caches]
    ids = np.array([3, 0, 2], np.int64)
    host = [npu.host(_host_buffer((len(ids), BS, L, H, D))) for _ in range(2)]
    views = [h.asnumpy() for h in host]
    if direction == "h2d":
        for v in views:
            v[...] = random_array(rng, v.shape, "float16")
    ms_kvcache.multi_layer_block_transfer(kv, host, Tensor(ids), direction=direction, kv_format="separate",
                                          cache_layout="BSND")
    ms_kvcache.synchronize()
    (ws,) = npu.rt.events("ws")
    (plist,) = [p for p in ws["params"] if p["name"] == "host_blocks"]
    assert [t["data"] for t in plist["v"]] == [h.data_ptr() + MAP_OFFSET for h in host]
    assert npu.rt.events("memcpy_async") == []
    for l in range(L):
        for p in range(2):
            if direction == "d2h":
                for i, b in enumerate(ids):
                    np.testing.assert_array_equal(views[p][i, :, l], caches[l][p][b])
            else:
                ref = caches[l][p].copy()
                for i, b in enumerate(ids):
                    ref[b] = views[p][i, :, l]
                assert_bits_equal(to_np(kv[l][p]), ref, f"layer {l} plane {p}")


def test_without_the_module_a_host_write_is_refused(npu, rng, monkeypatch):
    """Without ms_kvcache._ascend_pyboost a host tensor the op writes would reach MindSpore, which copies it
    to the device: the d2h would write the copy and the data would be lost. It raises instead (the old
    code ran it)."""
    monkeypatch.setenv(A.PYBOOST_ENV, "0")
    monkeypatch.setattr(_custom, "graph_launcher", lambda prim: (lambda *t: pytest.fail("launched")))
    monkeypatch.setattr(_custom, "eager_op", lambda *a, **k: "prim")
    kv = [[Tensor(c) for c in layer] for layer in _caches(rng)]
    buf = npu.host(_host_buffer((2, L, 1, H * D)))
    with pytest.raises(RuntimeError, match=r"argument 'buffer' is host memory the op would write, but without the "
                                           r"PyNative aclnn module MindSpore copies it to the device"):
        ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(np.array([0], np.int64)), kv_format="separate",
                                           direction="d2h")


def test_freeing_a_registered_buffer_synchronises_first(npu, monkeypatch):
    """The unregister hook waits for the device (a queued kernel may still use the mapping), then calls
    aclrtHostUnregister."""
    order = []
    monkeypatch.setattr(ms.runtime, "synchronize", lambda: order.append("sync"))
    real = _host_memory.unregister_host_memory
    monkeypatch.setattr(_host_memory, "unregister_host_memory", lambda p: (order.append("unregister"), real(p)))
    buf = _host_buffer((4096,), ms.int8)
    addr = buf.data_ptr()
    del buf
    import gc

    gc.collect()
    assert order == ["sync", "unregister"] and _host_memory.mapped_address(addr, 1) is None


# ------------------------------------------------------------------------------------------ the emulated kernel
def _array_at(rt, tensor_desc, np_dtype):
    """numpy view of the memory a launch parameter points to, after the stand-in runtime's translation of
    a mapped device address back to the host pages."""
    import ctypes

    rt.acl.fake_translate.restype = ctypes.c_size_t
    rt.acl.fake_translate.argtypes = [ctypes.c_size_t, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    shape = tensor_desc["shape"]
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(np_dtype).itemsize
    err = ctypes.c_int(0)
    addr = rt.acl.fake_translate(tensor_desc["data"], n, ctypes.byref(err))
    assert err.value == 0
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(addr)).view(np_dtype).reshape(shape)


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_sim_kernel_on_the_launch_address_table(npu, rng, direction):
    """The argument table a zero-copy launch handed aclnn (every tensor's GM address, shape, dtype and the
    attribute values, as recorded by the stand-in opapi), replayed through the AscendC kernel and tiling
    under the emulation (ms_kvcache.sim, gm_copy="never": the kernel runs on that memory): the host buffer
    is reached through its mapped address as one GM region of the launch, every other GM access is checked
    against the launch's tensors, and d2h leaves the cache rows in the host pages / h2d the host rows in
    the caches (numpy references)."""
    sim = pytest.importorskip("ms_kvcache.sim")
    try:
        sim.opdef("MskvMultiLayerKvTransfer")
    except Exception as exc:  # noqa: BLE001 - emulation built without this op
        pytest.skip(f"emulation has no MskvMultiLayerKvTransfer ({exc})")
    caches = _caches(rng)
    kv = [[Tensor(c.copy()) for c in layer] for layer in caches]
    slots = Tensor(np.array([3, -1, 9, 14], np.int64))
    buf = npu.host(_host_buffer((2, L, 4, H * D)))
    host = buf.asnumpy()
    if direction == "h2d":
        host[...] = random_array(rng, host.shape, "float16")
    ms_kvcache.multi_layer_kv_transfer(buf, kv, slots, kv_format="separate", direction=direction)
    ms_kvcache.synchronize()
    (ws,) = npu.rt.events("ws")
    p = {q["name"]: q for q in ws["params"]}
    assert p["buffer"]["v"]["data"] == buf.data_ptr() + MAP_OFFSET
    arr_buf = _array_at(npu.rt, p["buffer"]["v"], np.float16)
    assert arr_buf.ctypes.data == host.ctypes.data           # the mapped address leads to the host pages
    arr_slots = _array_at(npu.rt, p["slot_mapping"]["v"], np.int64)
    arr_caches = [_array_at(npu.rt, t, np.float16) for t in p["kv_caches"]["v"]]
    attrs = {k: p[k]["v"] for k in ("kv_format", "direction", "cache_layout", "num_layers", "aiv_num")}
    assert attrs["direction"] == {"h2d": 1, "d2h": 2}[direction] and attrs["num_layers"] == L  # int codes
    expect_caches = [a.copy() for a in arr_caches]
    expect_host = host.copy()
    if direction == "d2h":
        host[...] = 0                                        # the emulated kernel must write it again
        for a, c in zip(arr_caches, [c for layer in caches for c in layer]):
            a[...] = c
        expect_host = _gather_ref(caches, arr_slots)
    else:
        expect_caches = []
        for i, (a, c) in enumerate(zip(arr_caches, [c for layer in caches for c in layer])):
            a[...] = c                                       # back to the state before the transfer
            ref = c.copy()
            for t, s in enumerate(arr_slots):
                if s >= 0:
                    ref[s // BS, s % BS] = host[i % 2, i // 2, t].reshape(H, D)
            expect_caches.append(ref)
    status = np.zeros((1,), np.int32)
    sim.launch("MskvMultiLayerKvTransfer", [arr_buf, arr_slots, arr_caches, status], attrs=attrs, gm_copy="never")
    np.testing.assert_array_equal(host, expect_host)
    for a, e in zip(arr_caches, expect_caches):
        np.testing.assert_array_equal(a, e)


# ------------------------------------------------------------------------------------------ ms-kvcache info
def _on_npu(monkeypatch):
    monkeypatch.setattr(A, "_device_target", lambda: "Ascend")


def test_info_reports_pyboost_and_zero_copy_on_an_npu(npu, monkeypatch, capsys):
    """`ms-kvcache info` on an Ascend machine (device target faked, CANN = the stand-ins): PyNative path
    pyboost, host memory zero-copy, GRAPH_MODE levels; the text names them too."""
    import json

    from ms_kvcache.cli import main

    _on_npu(monkeypatch)
    assert main(["info", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["ascend"]
    assert rep["device_target"] == "Ascend" and rep["backend"]["available"]
    assert rep["pynative"]["path"] == "pyboost" and "no graph compile per input shape" in rep["pynative"]["why"]
    assert rep["module"]["built"] and rep["module"]["ops"] == len(FA.kernel_specs())
    assert rep["host_memory"]["effective"] == "zero_copy" and rep["host_memory"]["mode"] == "auto"
    assert "O2 (GE) is refused" in rep["graph_mode"]
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert "PyNative: pyboost" in text and "host memory (mode auto): zero_copy" in text


def test_info_reports_why_it_falls_back(npu, monkeypatch, tmp_path):
    _on_npu(monkeypatch)
    monkeypatch.setenv(A.HOST_MEMORY_ENV, "staged")
    rep = A.report()
    assert rep["host_memory"]["effective"] == "staged" and "MS_KVCACHE_HOST_MEMORY=staged" in rep["host_memory"]["why"]
    monkeypatch.setenv(A.PYBOOST_ENV, "0")
    rep = A.report()
    assert rep["pynative"]["path"] == "jit" and "MS_KVCACHE_ASCEND_PYBOOST=0" in rep["pynative"]["why"]
    assert rep["host_memory"]["effective"] == "unavailable"
    monkeypatch.delenv(A.PYBOOST_ENV)
    monkeypatch.delenv(A.HOST_MEMORY_ENV)
    # a CANN older than 8.1: no aclrtHostRegister -> alloc_host_buffer memory goes the staged way
    old = tmp_path / "libascendcl.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-Wl,-Bsymbolic", "-DFAKE_NO_HOST_REGISTER",
                    "-o", str(old), str(FA.HERE / "fake_acl" / "fake_ascendcl.c"), "-lpthread"], check=True)
    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(old))
    _acl.reset()
    rep = A.report()
    assert rep["host_memory"]["effective"] == "staged" and "CANN >= 8.1.RC1" in rep["host_memory"]["why"]
    with pytest.warns(RuntimeWarning, match="could not register its pages"):
        buf = _host_buffer((4096,), ms.int8)   # allocation still works, unregistered (warned once)
    assert _host_memory.mapped_address(buf.data_ptr(), 1) is None
    assert "not exported" in _host_memory.REGISTER_FALLBACK["why"]
    _host_memory.REGISTER_FALLBACK["why"] = ""   # (monkeypatch.setitem would restore the fallback at teardown)


def test_swap_blocks_treats_registered_host_memory_as_pinned(npu, rng, monkeypatch):
    """swap_blocks into an alloc_host_buffer buffer (registered, hence page-locked for the runtime): the
    asynchronous copies on MindSpore's stream, not the synchronous fallback for pageable memory."""
    dst = _host_buffer((6, 4, 8), ms.float32)
    src_np = rng.standard_normal((6, 4, 8)).astype(np.float32)
    src = Tensor(src_np)
    monkeypatch.setattr(A, "_is_device_tensor", lambda t: t is src)
    monkeypatch.setattr(A, "_current_stream_ptr", lambda: 0x99)
    monkeypatch.setattr(A, "current_soc", lambda: "Ascend910B1")
    assert A._is_pinned(dst) and not A._is_pinned(Tensor(src_np))
    A.swap_blocks(src, dst, np.array([[0, 5], [3, 2]], np.int64))
    out = dst.asnumpy()
    np.testing.assert_array_equal(out[5], src_np[0])
    np.testing.assert_array_equal(out[2], src_np[3])
    assert npu.rt.counter("fake_memcpy_calls", "acl") == 0


def test_aliased_and_view_caches_refused_before_launch(npu, rng):
    """In-place rules on the ascend backend's PyNative path (issue 15), as on cpu and sim: the same tensor
    for two written arguments, one tensor repeated across layers of copy_blocks, and a view as a cache
    are ValueErrors before anything is launched (no aclnn call), the caches untouched."""
    k = Tensor(random_array(rng, (3, 2, 16), "float16"))
    c0 = random_array(rng, (3, 4, 2, 16), "float16")
    kc = to_ms(c0)
    slots = Tensor(np.array([0, 5, 11], np.int64))
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'value_cache': .*'key_cache'"):
        ms_kvcache.reshape_and_cache(k, k, kc, kc, slots)
    with pytest.raises(ValueError, match=r"copy_blocks: argument '(key|value)_caches\[\d\]'"):
        ms_kvcache.copy_blocks([kc, to_ms(c0)], [to_ms(c0), kc], Tensor(np.array([[0, 1]], np.int64)))
    big = to_ms(np.stack([c0, c0]))
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'key_cache': expected a tensor that owns "
                                         r"its memory"):
        ms_kvcache.reshape_and_cache(k, k, big[1], to_ms(c0), slots)
    ms_kvcache.synchronize()
    assert not npu.rt.events("ws") and not npu.rt.events("launch"), "nothing reached aclnn"
    assert_bits_equal(to_np(kc), c0, "key_cache untouched")
    assert_bits_equal(to_np(big), np.stack([c0, c0]), "viewed tensor untouched")
