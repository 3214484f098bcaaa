"""alloc_host_buffer: page-aligned, NUMA-bound, pinned host memory as a zero-copy MindSpore Tensor."""
import ctypes
import gc
import mmap
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, nn

import ms_kvcache as mk
from ms_kvcache import _cpu, _host_memory
from conftest import NP_DTYPES, assert_bits_equal, ms_mode, random_array, to_np

PAGE = mmap.PAGESIZE


def alias(t, np_dtype):
    """A numpy array over the Tensor's memory (independent of the allocator's own array)."""
    n = int(np.prod(t.shape)) * np.dtype(np_dtype).itemsize
    raw = (ctypes.c_uint8 * n).from_address(t.data_ptr())
    return np.frombuffer(raw, dtype=np.uint8).view(np_dtype).reshape(t.shape)


def vm_locked_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "int32", "int64"])
def test_shape_dtype_alignment_node(dtype):
    t = mk.alloc_host_buffer((3, 1000), getattr(ms, dtype))
    assert tuple(t.shape) == (3, 1000) and t.dtype == getattr(ms, dtype)
    assert t.data_ptr() % PAGE == 0
    assert _cpu.host_node_of(t.data_ptr()) == 0  # this machine: one node, node 0
    assert not np.any(to_np(t).astype(np.float64))


def test_dtype_spellings_and_explicit_node():
    for d in ("bfloat16", np.float16, np.dtype("int8"), ms.float32):
        t = mk.alloc_host_buffer(16, d, numa_node=0)
        assert t.shape == (16,)
    assert mk.alloc_host_buffer((0, 8), "float32").shape == (0, 8)


def test_pinned_memory_is_locked_and_released():
    base_live = _cpu.host_live()
    before = vm_locked_kib()
    t = mk.alloc_host_buffer((1 << 20,), "int8")  # 1 MiB, under the default 8 MiB memlock limit
    assert vm_locked_kib() - before >= 1024
    assert _cpu.host_live()["bytes"] == base_live["bytes"] + (1 << 20)
    view = t[16:]  # a view keeps the memory alive
    del t
    gc.collect()
    assert _cpu.host_live()["bytes"] == base_live["bytes"] + (1 << 20)
    del view
    gc.collect()
    assert _cpu.host_live() == base_live
    assert vm_locked_kib() == before


def test_unpinned_is_not_locked():
    before = vm_locked_kib()
    t = mk.alloc_host_buffer((4 << 20,), "int8", pinned=False)
    assert vm_locked_kib() == before
    assert t.data_ptr() % PAGE == 0
    del t


def test_zero_copy_both_ways_and_kernel_writes_visible():
    t = mk.alloc_host_buffer((2, 1, 4, 32), ms.bfloat16)
    view = alias(t, NP_DTYPES["bfloat16"])
    view[0, 0, 1, 3] = 2.5
    assert float(to_np(t)[0, 0, 1, 3]) == 2.5  # numpy write -> Tensor
    rng = np.random.default_rng(3)
    k = random_array(rng, (2, 4, 2, 16), "bfloat16")
    v = random_array(rng, (2, 4, 2, 16), "bfloat16")
    caches = [(Tensor(k.astype(np.float32), ms.bfloat16), Tensor(v.astype(np.float32), ms.bfloat16))]
    slots = np.array([7, 0, -1, 2])
    mk.multi_layer_kv_transfer(t, caches, Tensor(slots), kv_format=mk.KVCacheFormat.SEPARATE_KV, direction="d2h")
    mk.synchronize()  # PyNative launches are asynchronous; we read through another alias
    expected = np.zeros((2, 1, 4, 32), NP_DTYPES["bfloat16"])
    for i, s in enumerate(slots):
        if s >= 0:
            expected[0, 0, i] = k.reshape(8, 32)[s]
            expected[1, 0, i] = v.reshape(8, 32)[s]
    assert_bits_equal(view, expected, "kernel write seen through the numpy alias")
    assert_bits_equal(to_np(t), expected, "and through the Tensor")


class Offload(nn.Cell):
    def __init__(self, k, v):
        super().__init__()
        self.k, self.v = Parameter(k, name="k"), Parameter(v, name="v")

    def construct(self, buf, slots):
        mk.multi_layer_kv_transfer(buf, ((self.k, self.v),), slots, kv_format=2, direction="d2h")
        return slots


class OffloadIntoParam(Offload):
    def __init__(self, k, v, host):
        super().__init__(k, v)
        self.host = Parameter(Tensor(np.zeros(host.shape, np.float32)), name="host")
        self.host.set_data(host)  # set_data keeps the address; Parameter(host) would copy

    def construct(self, slots):
        mk.multi_layer_kv_transfer(self.host, ((self.k, self.v),), slots, kv_format=2, direction="d2h")
        return slots


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_mode_writes_land_in_host_memory(mode):
    rng = np.random.default_rng(5)
    k, v = (rng.standard_normal((2, 4, 1, 8)).astype(np.float32) for _ in range(2))
    slots = np.array([5, 1, 6])
    expected = np.stack([k.reshape(8, 8)[slots], v.reshape(8, 8)[slots]])[:, None]
    with ms_mode(mode):
        host = mk.alloc_host_buffer((2, 1, 3, 8), "float32")
        view = alias(host, np.float32)
        net = Offload(Tensor(k), Tensor(v))
        if mode == "jit":
            net.construct = ms.jit(net.construct)
        # a plain Tensor argument is refused at compile time (it could be a view, which MindSpore would
        # hand the kernel by its base address); the buffer wrapped in a Parameter without a copy works
        with pytest.raises(TypeError, match=r"multi_layer_kv_transfer: argument 'buffer': expected a Parameter "
                                            r"\(a whole Parameter, not a slice or a computed tensor\)"):
            net(host, Tensor(slots))
        assert not view.any(), "nothing written by the refused call"
        arg = Parameter(Tensor(np.zeros((1,), np.float32)), name="host_arg")
        arg.set_data(host)  # keeps the address, whatever the placeholder's shape
        assert arg.data_ptr() == host.data_ptr()
        net(arg, Tensor(slots))
        mk.synchronize()
        assert_bits_equal(view, expected, "host buffer as a Parameter argument")
        host2 = mk.alloc_host_buffer((2, 1, 3, 8), "float32")
        view2 = alias(host2, np.float32)
        net2 = OffloadIntoParam(Tensor(k), Tensor(v), host2)
        assert net2.host.data_ptr() == host2.data_ptr()
        if mode == "jit":
            net2.construct = ms.jit(net2.construct)
        net2(Tensor(slots))
        mk.synchronize()
        assert_bits_equal(view2, expected, "Parameter.set_data(host buffer)")


def test_parameter_constructor_copies():
    """Documented behaviour: Parameter(host_tensor) copies (so set_data a buffer into a Parameter)."""
    host = mk.alloc_host_buffer((64,), "float32")
    p = Parameter(host, name="p")
    assert p.data_ptr() != host.data_ptr()


@pytest.mark.parametrize("kw,exc,match", [
    (dict(shape=(-1, 4), dtype="float16"), ValueError, "argument 'shape'"),
    (dict(shape="abc", dtype="float16"), TypeError, "argument 'shape'"),
    (dict(shape=(4,), dtype="complex64"), TypeError, "argument 'dtype'"),
    (dict(shape=(4,), dtype="float16", numa_node=999), ValueError, "argument 'numa_node'"),
    (dict(shape=(4,), dtype="float16", numa_node="0"), ValueError, "argument 'numa_node'"),
])
def test_bad_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        mk.alloc_host_buffer(**kw)


@pytest.mark.parametrize("shape,dtype,count", [
    ((2**40, 2**40), "float32", 2**80),        # element count beyond int64 (was: numpy "cannot reshape array of size 0")
    ((2**62,), "float32", 2**62),              # bytes beyond int64 (was: pybind "host_alloc(): incompatible function arguments")
    ((2**61, 2), "float64", 2**62),
    ((2**63 - 1,), "int8", 2**63 - 1),         # fits int64, not the machine
])
def test_huge_shapes_name_shape_and_bytes(shape, dtype, count):
    itemsize = np.dtype(dtype).itemsize
    with pytest.raises(ValueError, match=rf"alloc_host_buffer: argument 'shape': .*{count * itemsize} bytes"):
        mk.alloc_host_buffer(shape, dtype)


def test_shape_beyond_available_memory(monkeypatch):
    """Checked against what the machine can give now: MemAvailable (pinned: locked in RAM) plus free swap
    (unpinned), the cgroup limit and RLIMIT_AS, each named in the message."""
    info = {"MemAvailable": 1 << 30, "SwapFree": 1 << 30, "MemTotal": 4 << 30}
    monkeypatch.setattr(_host_memory, "_meminfo", lambda: dict(info))
    monkeypatch.setattr(_host_memory, "_cgroup_limit", lambda: None)
    with pytest.raises(ValueError, match=r"argument 'shape': shape \(1536, 1048576\) requests 1610612736 bytes "
                                         r"\(1.50 GiB\), more than the memory available now \(MemAvailable "
                                         r"1073741824 bytes; a pinned buffer"):
        mk.alloc_host_buffer((1536, 1 << 20), "int8")
    # unpinned: swap counts, so the same request passes the check (not allocated here: the limits are fake)
    assert _host_memory._check_size((1536, 1 << 20), np.dtype("int8"), pinned=False) == 1536 << 20
    monkeypatch.setattr(_host_memory, "_cgroup_limit", lambda: 1 << 29)
    with pytest.raises(ValueError, match=r"more than the cgroup memory limit \(536870912 bytes\)"):
        _host_memory._check_size((1 << 30,), np.dtype("int8"), pinned=False)
    assert _host_memory._check_size((0, 1 << 40), np.dtype("float32"), pinned=True) == 0  # empty: fine


def test_real_limits_are_read():
    """On this machine /proc/meminfo is readable: MemAvailable is one of the limits."""
    limits = _host_memory._memory_limits(True)
    assert any("MemAvailable" in what and n > 0 for n, what in limits), limits


def test_pin_failure_reports_memlock_limit():
    """In a child process limited to 64 KiB of locked memory (and, when root, without CAP_IPC_LOCK), pinning
    1 MiB fails with the limit in the message; pinned=False still works."""
    code = textwrap.dedent("""
        import os, resource
        os.environ["GLOG_v"] = "3"
        import ms_kvcache as mk
        # load every lazily imported module (the native _cpu library ...) while this process may still
        # read them: the checkout can be private to its owner (e.g. a clone in a mktemp -d directory)
        mk.alloc_host_buffer((4096,), "int8", pinned=False)
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))
        if os.geteuid() == 0:
            os.setgid(65534); os.setuid(65534)   # drops CAP_IPC_LOCK
        try:
            mk.alloc_host_buffer((1 << 20,), "int8")
            print("PINNED")
        except OSError as e:
            print("ERR", e)
        t = mk.alloc_host_buffer((1 << 20,), "int8", pinned=False)
        print("UNPINNED", t.shape)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    lines = [l for l in out.stdout.splitlines() if l.startswith(("ERR", "PINNED", "UNPINNED"))]
    assert lines and lines[0].startswith("ERR"), out.stdout + out.stderr[-2000:]
    assert "RLIMIT_MEMLOCK soft=65536 bytes" in lines[0] and "pinned=False" in lines[0], lines[0]
    assert lines[1] == "UNPINNED (1048576,)", lines


def test_ascend_hooks_without_cann():
    with pytest.raises(RuntimeError, match="libascendcl.so"):
        _host_memory.ascend_host_register(0x1000, 4096)
    assert _host_memory.ascend_device_numa_node(0) == 0
    _host_memory.ascend_host_unregister(0x1000)  # never registered: a no-op


# ------------------------------------------------------------------------------------------ ascend backend, Linux <= 5.10
# CANN's aclrtHostRegister (8.1-9.1): on OS kernels 5.10 and older memory that is not page-locked causes exceptions,
# so it must come from aclrtMallocHost. The stand-in runtime (tests/fake_acl/fake_ascendcl.c) logs each host-memory
# call; the kernel release is mocked.
def _fake_acl_lib(tmp_path_factory):
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libascendcl.so")
    out = tmp_path_factory.mktemp("fake_acl_host") / "libascendcl.so"
    src = os.path.join(os.path.dirname(__file__), "fake_acl", "fake_ascendcl.c")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-Bsymbolic", "-o", str(out), src, "-lpthread"], check=True)
    return out


@pytest.fixture(scope="module")
def fake_acl_path(tmp_path_factory):
    return _fake_acl_lib(tmp_path_factory)


@pytest.fixture
def ascend_on(fake_acl_path, monkeypatch):
    """The ascend backend with the stand-in runtime; ``ascend_on.linux(release)`` mocks the kernel release."""
    import json
    from types import SimpleNamespace

    from ms_kvcache import _backend
    from ms_kvcache._backends import _acl

    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(fake_acl_path))
    _acl.reset()
    rt = _acl.load()
    rt.lib.fake_host_log_get.restype = ctypes.c_char_p
    rt.lib.fake_host_log_clear()
    monkeypatch.setattr(_backend, "_current", "ascend")
    monkeypatch.setattr(_host_memory, "_WARNED", set(), raising=False)

    def events():
        return [json.loads(x) for x in rt.lib.fake_host_log_get().decode().splitlines() if x.strip()]

    yield SimpleNamespace(rt=rt, events=events,
                          linux=lambda r: monkeypatch.setattr(_host_memory, "kernel_release", lambda: r, raising=False))
    gc.collect()
    _acl.reset()


OPENEULER_2203 = "5.10.0-60.18.0.50.oe2203.aarch64"


def test_old_kernel_buffers_are_runtime_page_locked_memory(ascend_on, rng):
    """Linux 5.10 (openEuler 22.03, Kylin V10): the pages come from aclrtMallocHost, zero-filled (the runtime's
    memory is not), then registered; freeing unregisters before aclrtFreeHost. The old code registered mmap +
    mlock memory there."""
    ascend_on.linux(OPENEULER_2203)
    t = mk.alloc_host_buffer((3, 1000), ms.float16)
    addr = t.data_ptr()
    ev = ascend_on.events()
    assert [e["ev"] for e in ev] == ["set_device", "malloc_host", "register"], ev
    assert ev[1]["ptr"] <= addr and ev[1]["n"] >= 6000 and ev[2]["ptr"] == addr and ev[2]["context"] == 1
    assert addr % PAGE == 0 and tuple(t.shape) == (3, 1000) and t.dtype == ms.float16
    assert not alias(t, np.float16).any(), "zero-filled"
    x = random_array(rng, (3, 1000), "float16")
    alias(t, np.float16)[...] = x
    assert_bits_equal(to_np(t), x, "the Tensor is the runtime's memory")
    assert _host_memory.mapped_address(addr, 6000) == addr + (1 << 40)
    view = t[1:]
    del t
    gc.collect()
    assert [e["ev"] for e in ascend_on.events()][3:] == [], "a view keeps the memory"
    del view
    gc.collect()
    rest = ascend_on.events()[3:]
    assert [e["ev"] for e in rest] == ["unregister", "free_host"] and rest[0]["context"] == 1, rest
    assert _host_memory.mapped_address(addr, 1) is None


def test_old_kernel_buffers_start_on_a_page_whatever_aclrtMallocHost_returns(ascend_on, rng):
    """aclrtMallocHost documents 64-byte alignment only, aclrtHostRegister wants a 4 KiB page: the buffer starts on
    the first page boundary of a block one page larger, that address is registered, the block freed from its own
    start (the old code registered the runtime's address as is: alloc_host_buffer raised register_host_memory's
    "expected a 4096-byte aligned host address" for a runtime returning such memory)."""
    ascend_on.linux(OPENEULER_2203)
    ctypes.c_int.in_dll(ascend_on.rt.lib, "fake_malloc_host_misalign").value = 1
    try:
        t = mk.alloc_host_buffer((3, 1000), ms.float16)
    finally:
        ctypes.c_int.in_dll(ascend_on.rt.lib, "fake_malloc_host_misalign").value = 0
    addr = t.data_ptr()
    ev = [e for e in ascend_on.events() if e["ev"] != "set_device"]
    assert [e["ev"] for e in ev] == ["malloc_host", "register"], ev
    base = ev[0]["ptr"]
    assert base % PAGE == 64 and ev[0]["n"] >= 6000 + PAGE - 64
    assert addr % PAGE == 0 and base <= addr and addr + 6000 <= base + ev[0]["n"]
    assert ev[1]["ptr"] == addr and ev[1]["n"] == 6000
    ascend_on.rt.lib.fake_host_log_clear()
    x = random_array(rng, (3, 1000), "float16")
    alias(t, np.float16)[...] = x
    assert_bits_equal(to_np(t), x, "the Tensor is the runtime's memory")
    assert _host_memory.mapped_address(addr, 6000) == addr + (1 << 40)
    del t
    gc.collect()
    rest = [e for e in ascend_on.events() if e["ev"] != "set_device"]
    assert [e["ev"] for e in rest] == ["unregister", "free_host"], rest
    assert rest[0]["ptr"] == addr and rest[1]["ptr"] == base


def test_old_kernel_refuses_unpinned_buffers(ascend_on):
    ascend_on.linux(OPENEULER_2203)
    with pytest.raises(ValueError, match=r"alloc_host_buffer: argument 'pinned': expected True on the ascend backend "
                                         r"on Linux 5\.10\.0-60\.18\.0\.50\.oe2203\.aarch64 \(<= 5\.10\), got False"):
        mk.alloc_host_buffer((4096,), "int8", pinned=False)
    assert ascend_on.events() == [], "nothing allocated or registered"


@pytest.mark.parametrize("release", ["5.15.0-105-generic", "6.6.0-28.0.0.34.oe2403.aarch64"])
def test_newer_kernels_keep_mmap_memory(ascend_on, release):
    """After 5.10 CANN registers memory that is not page-locked: mmap (+ mlock when pinned) as before, pinned=False
    allowed, both registered."""
    ascend_on.linux(release)
    a = mk.alloc_host_buffer((4096,), "int8")
    b = mk.alloc_host_buffer((4096,), "int8", pinned=False)
    ev = ascend_on.events()
    assert "malloc_host" not in [e["ev"] for e in ev]
    assert [e["ptr"] for e in ev if e["ev"] == "register"] == [a.data_ptr(), b.data_ptr()]


def test_old_kernel_explicit_numa_node_is_applied(ascend_on, monkeypatch):
    """The runtime's pages are moved to the node asked for (host_bind: mbind MPOL_MF_MOVE); a failure is an
    OSError naming the node (not a silently ignored request)."""
    ascend_on.linux(OPENEULER_2203)
    calls = []
    real = _cpu.host_bind
    monkeypatch.setattr(_cpu, "host_bind", lambda a, n, node: (calls.append((a, n, node)), real(a, n, node))[1])
    t = mk.alloc_host_buffer((8192,), "int8", numa_node=0)
    assert calls == [(t.data_ptr(), 8192, 0)]
    assert _cpu.host_node_of(t.data_ptr()) == 0
    monkeypatch.setattr(_cpu, "host_bind", lambda a, n, node: 22)
    with pytest.raises(OSError, match=r"cannot bind 8192 bytes of aclrtMallocHost memory to NUMA node 0 \(mbind: "
                                      r"Invalid argument\)"):
        mk.alloc_host_buffer((8192,), "int8", numa_node=0)
    assert [e["ev"] for e in ascend_on.events()][-1] == "free_host", "the refused buffer is given back"


def test_mapped_address_while_another_thread_frees_a_buffer(monkeypatch):
    """mapped_address runs on every ascend PyNative launch with a host tensor while other threads allocate and free
    buffers (register / unregister change the registry): it must not fail with "dictionary changed size during
    iteration". The other thread is simulated at the point the GIL may switch, inside the lookup's comparison."""
    registry = {}
    monkeypatch.setattr(_host_memory, "_REGISTERED", registry)

    class FreedMeanwhile(int):
        def __le__(self, other):
            registry.pop(0x20000, None)  # another thread's buffer is freed (ascend_host_unregister) right now
            return int(self) <= other

    registry[FreedMeanwhile(0x10000)] = (0x7000_0000, 4096)
    registry[0x20000] = (0x8000_0000, 4096)
    registry[0x30000] = (0x9000_0000, 4096)
    assert _host_memory.mapped_address(0x30010, 16) == 0x9000_0010
    assert _host_memory.mapped_address(0x10000, 4096) == 0x7000_0000
