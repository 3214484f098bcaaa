"""Host (CPU) memory for KV offload: :func:`alloc_host_buffer`.

What holds (MindSpore 2.10 CPU, checked by tests/test_alloc_host_buffer.py):

- ``Tensor.from_numpy(array)`` does not copy: the Tensor's ``data_ptr()`` is the array's address, a
  write through either is seen by the other, and the Tensor keeps the array (and so the mapping)
  alive: the memory is unmapped only when the Tensor, every view of it and the array are gone.
- Such a Tensor passed to an op in PyNative is written in place: a d2h transfer lands in the pinned
  pages. In GRAPH_MODE / ``@ms.jit`` a tensor an op writes must be a Parameter (ms_kvcache refuses a
  Tensor argument at compile time, see docs/ops-transfer.md "In-place rules").
- ``Parameter(host_tensor)`` copies the data into new memory; ``param.set_data(host_tensor)`` keeps
  the address (whatever the shape of the placeholder the Parameter was made with). So in a graph, pass
  ``p = Parameter(Tensor(np.zeros(1, np.float32)), name=...); p.set_data(buffer)``, as a Cell attribute or
  an argument.
- PyNative launches are asynchronous: an op call returns before its kernel has run. Reading the
  Tensor (``asnumpy()``) waits; reading the same memory through another alias (the numpy array, a
  storage library given ``data_ptr()``) must call :func:`synchronize` first.

The Ascend part: on the ascend backend :func:`alloc_host_buffer` registers the pages with ``aclrtHostRegister``
(:func:`ascend_host_register`, a device context bound first) so AI cores can reach them through the mapped
address; on Linux <= 5.10 the pages are the runtime's (``aclrtMallocHost``), as CANN requires there, and
``pinned=False`` is refused. A registration the runtime refuses is warned about once and the buffer is staged.
Whether PyNative transfers hand kernels the mapped address (:func:`mapped_address`, zero-copy) or stage the
buffer through a device tensor is the ascend backend's choice (``ascend.host_memory_mode``,
``ascend.zero_copy_status``; docs/ascend.md, "Host memory"); :func:`synchronize` also waits for the device.
This module imports no backend: the ascend backend imports it.
"""
import collections
import errno as _errno
import operator
import os
import re
import resource
import warnings
import weakref

import numpy as np

from ms_kvcache._backends import _acl

__all__ = ["alloc_host_buffer", "synchronize", "online_numa_nodes", "ascend_host_register", "ascend_host_unregister",
           "ascend_device_numa_node", "mapped_address", "register_host_memory", "unregister_host_memory",
           "kernel_release", "kernel_version", "runtime_pages_required", "warn_once"]

_OP = "alloc_host_buffer"

_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


def _np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _dtype_name(dtype):
    from ms_kvcache._spec import dtype_arg_name

    name = dtype_arg_name(dtype)
    if name not in _DTYPES:
        raise TypeError(f"{_OP}: argument 'dtype': expected one of {_DTYPES} (a mindspore, numpy or str dtype), "
                        f"got {dtype!r}")
    return name


def online_numa_nodes():
    """NUMA nodes with memory that the kernel reports online (``[0]`` on a machine without NUMA)."""
    path = "/sys/devices/system/node/online"
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return [0]
    nodes = []
    for part in text.split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            nodes.extend(range(int(lo), int(hi) + 1))
        else:
            nodes.append(int(part))
    return nodes or [0]


def _current_node():
    """NUMA node of the CPU this thread runs on (0 if unknown)."""
    try:
        cpu = os.sched_getaffinity(0)
        first = min(cpu)
        for node in online_numa_nodes():
            if os.path.exists(f"/sys/devices/system/node/node{node}/cpu{first}"):
                return node
    except (OSError, ValueError):
        pass
    return 0


def _default_node():
    from ms_kvcache import _backend

    if _backend.get_backend() == "ascend":
        return ascend_device_numa_node()
    return _current_node()


def _memlock_text():
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def fmt(v):
        return "unlimited" if v == resource.RLIM_INFINITY else f"{v} bytes ({v / 2**20:.1f} MiB)"

    return f"RLIMIT_MEMLOCK soft={fmt(soft)}, hard={fmt(hard)}"


_INT64_MAX = 2**63 - 1


def _meminfo():
    """{field: bytes} of /proc/meminfo ({} where unreadable)."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _cgroup_limit():
    """The memory limit of this process's cgroup in bytes, or None (none set / not readable)."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**62:  # cgroup v1 writes a huge number for "no limit"
            return int(text)
    return None


def _memory_limits(pinned):
    """[(bytes, what)] the machine can give one allocation now (see :func:`alloc_host_buffer`)."""
    info = _meminfo()
    limits = []
    if "MemAvailable" in info:
        avail = info["MemAvailable"]
        if pinned:
            limits.append((avail, f"the memory available now (MemAvailable {avail} bytes; a pinned buffer "
                                  f"is locked in RAM)"))
        else:
            swap = info.get("SwapFree", 0)
            limits.append((avail + swap, f"the memory available now (MemAvailable {avail} + SwapFree {swap} "
                                         f"bytes)"))
    cg = _cgroup_limit()
    if cg is not None:
        limits.append((cg, f"the cgroup memory limit ({cg} bytes)"))
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        limits.append((soft, f"RLIMIT_AS ({soft} bytes)"))
    return limits


def _check_size(shape, np_dtype, pinned):
    """Bytes of a ``shape`` buffer of ``np_dtype``; ValueError naming ``shape`` and the bytes requested when the
    element count or the bytes exceed int64 or the machine's memory (checked in Python integers, so no
    product wraps around)."""
    count = 1
    for d in shape:
        count *= d
    nbytes = count * np_dtype.itemsize
    if count > _INT64_MAX or nbytes > _INT64_MAX:
        raise ValueError(f"{_OP}: argument 'shape': expected at most 2**63-1 elements and bytes, got shape {shape} "
                         f"= {count} elements of {np_dtype.itemsize} bytes = {nbytes} bytes requested")
    for limit, what in _memory_limits(pinned):
        if nbytes > limit:
            raise ValueError(f"{_OP}: argument 'shape': shape {shape} requests {nbytes} bytes "
                             f"({nbytes / 2**30:.2f} GiB), more than {what}")
    return nbytes


def alloc_host_buffer(shape, dtype, numa_node=None, pinned=True):
    """Allocate a host buffer for KV offload, as a MindSpore Tensor over page-aligned, NUMA-bound,
    page-locked memory.

    The memory is an anonymous ``mmap`` bound to one NUMA node (``mbind``) and locked with ``mlock`` when
    ``pinned`` (unpinned pages are faulted in by touching them), wrapped zero-copy with ``Tensor.from_numpy``;
    the Tensor owns it (freed when the Tensor and every view are gone). On the ascend backend the pages are
    also registered with ``aclrtHostRegister`` (device context bound first); on Linux <= 5.10 they come from
    ``aclrtMallocHost`` instead, as CANN requires there. See docs/ascend.md, "Host memory".

    In GRAPH_MODE / ``@ms.jit`` a written tensor must be a Parameter: ``param.set_data(buffer)`` keeps the
    address (any placeholder shape); ``Parameter(buffer)`` would copy it.

    Args:
        shape (int | sequence of int): dimensions, each >= 0; the element count and bytes must fit in int64
            and in the memory the machine can give now (MemAvailable, plus free swap when not ``pinned``;
            the cgroup limit and RLIMIT_AS when set).
        dtype: mindspore / numpy dtype or name: float16, bfloat16, float32, float64, int8, uint8, int16,
            int32, int64, bool.
        numa_node (int, optional): node to bind to; default: the device's node (ascend backend) or the
            calling CPU's.
        pinned (bool | numpy.bool_): page-lock the memory (default); ``False`` skips ``mlock`` (the way out
            of a small memlock limit), refused on the ascend backend on Linux <= 5.10.

    Returns:
        mindspore.Tensor: of ``shape`` and ``dtype``, zero-filled, ``data_ptr()`` page-aligned.

    Raises:
        TypeError: unsupported ``dtype``; ``shape`` not ints; ``pinned`` not a bool or numpy.bool_.
        ValueError: negative dimensions; a size beyond int64 or the machine's memory (names ``shape`` and
            the bytes); ``numa_node`` not an online node; ``pinned=False`` on the ascend backend on Linux <= 5.10.
        OSError: ``mmap`` / ``mbind`` / ``mlock`` / ``aclrtMallocHost`` failed (the message gives the reason
            and, for ``mlock``, ``RLIMIT_MEMLOCK`` and the remedies).
        RuntimeError: ascend backend without a usable CANN runtime.
    """
    from mindspore import Tensor

    from ms_kvcache import _backend, _cpu

    name = _dtype_name(dtype)
    if not isinstance(pinned, (bool, np.bool_)):
        raise TypeError(f"{_OP}: argument 'pinned': expected a bool (or numpy.bool_), got {type(pinned).__name__} "
                        f"{pinned!r}")
    given = shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        if isinstance(shape, (str, bytes)) or any(isinstance(d, bool) for d in shape):
            raise TypeError
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{_OP}: argument 'shape': expected an int or a sequence of ints, got {given!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"{_OP}: argument 'shape': expected dimensions >= 0, got {shape}")
    nbytes = _check_size(shape, _np_dtype(name), bool(pinned))
    nodes = online_numa_nodes()
    if numa_node is None:
        node = _default_node()
    else:
        if isinstance(numa_node, bool) or not isinstance(numa_node, (int, np.integer)) or int(numa_node) not in nodes:
            raise ValueError(f"{_OP}: argument 'numa_node': expected an online NUMA node {nodes}, got {numa_node!r}")
        node = int(numa_node)
    np_dtype = _np_dtype(name)
    ascend = _backend.get_backend() == "ascend" and nbytes > 0
    old_kernel = ascend and runtime_pages_required()
    if old_kernel and not pinned:
        raise ValueError(f"{_OP}: argument 'pinned': expected True on the ascend backend on Linux {kernel_release()} "
                         f"(<= 5.10), got False: CANN documents that registering memory that is not page-locked "
                         f"causes exceptions on these kernels (aclrtHostRegister); use pinned=True (memory from "
                         f"aclrtMallocHost) or the cpu backend")
    if old_kernel:
        raw = _runtime_pinned_buffer(nbytes, node, explicit_node=numa_node is not None)
    else:
        raw, failed, err = _cpu.host_alloc(nbytes, node, bool(pinned))
        if raw is None:
            reason = os.strerror(err) if err else "unknown error"
            if failed == "mlock":
                raise OSError(err, f"{_OP}: cannot page-lock {nbytes} bytes (mlock: {reason}); {_memlock_text()}. "
                                   f"Raise the limit (ulimit -l, /etc/security/limits.conf 'memlock', docker "
                                   f"--ulimit memlock=-1, CAP_IPC_LOCK) or pass pinned=False")
            if failed == "mbind":
                raise OSError(err, f"{_OP}: cannot bind {nbytes} bytes to NUMA node {node} (mbind: {reason})")
            raise OSError(err if err else _errno.ENOMEM, f"{_OP}: cannot map {nbytes} bytes ({failed}: {reason})")
        if ascend:
            # make the pages device-accessible; when the runtime cannot register them the buffer is still
            # usable, through the staged mode (warned once, ascend.host_memory_mode / ms-kvcache info)
            if ascend_host_register(raw.ctypes.data, nbytes, fallback=True) is not None:
                weakref.finalize(raw, ascend_host_unregister, raw.ctypes.data)
    array = raw.view(np_dtype).reshape(shape)
    return Tensor.from_numpy(array)


def synchronize():
    """Wait until every op launched from PyNative so far has run.

    Needed before host memory written by an op (e.g. a d2h transfer into an :func:`alloc_host_buffer`
    Tensor) is read through another alias of it - the numpy array, or a pointer given to a storage
    library; ``Tensor.asnumpy()`` waits by itself on the cpu backend, but on Ascend a host buffer written
    by a kernel is not MindSpore's to wait for, so call this. (``mindspore.runtime.synchronize()`` rejects
    the CPU device in MindSpore 2.10; this uses the PyNative executor's sync, and on the ascend backend
    also ``mindspore.runtime.synchronize()``, which waits for the device streams.)

    Args:
        None.

    Returns:
        None, once every PyNative op launched before the call has run.

    Raises:
        RuntimeError: an op queued earlier failed; MindSpore raises its error at this sync.
    """
    try:
        from mindspore.graph.api import _pynative_executor
    except ImportError:  # pragma: no cover - other MindSpore layouts
        from mindspore.common.api import _pynative_executor
    _pynative_executor.sync()
    from ms_kvcache import _backend

    if _backend.get_backend() == "ascend":
        # the device stream too: a d2h transfer into host memory is done once the stream has run it
        import mindspore as ms

        ms.runtime.synchronize()
        _INFLIGHT.clear()  # nothing queued refers to these host tensors any more


# ------------------------------------------------------------------------------------------------ Ascend
# The ascend backend's host memory (ms_kvcache/_backends/ascend.py uses these). They call the CANN runtime
# (libascendcl.so) through ms_kvcache._backends._acl; nothing here runs on a machine without CANN.
_REGISTERED = {}  # host address -> (device address from aclrtHostRegister, bytes)
#: why the last registration fell back to unregistered memory ('' if it succeeded or none was made)
REGISTER_FALLBACK = {"why": ""}
#: Host tensors a queued PyNative launch refers to by address (``ascend.host_arg`` appends them): kept alive
#: until the next :func:`synchronize` (or this many later host launches), so memory a queued kernel or copy
#: still uses is not freed under it. Registered memory is also protected by a device synchronisation before
#: it is unregistered and freed.
_INFLIGHT = collections.deque(maxlen=4096)
#: Linux kernels up to this (major, minor) need aclrtMallocHost memory for aclrtHostRegister (CANN 8.1-9.1
#: aclrtHostRegister: "when the OS kernel is 5.10 or older, memory that is not page-locked causes exceptions").
OLD_KERNEL = (5, 10)
_WARNED = set()


def warn_once(key, message):
    """A RuntimeWarning with ``message``, the first time ``key`` is given in this process."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def kernel_release():
    """``uname -r`` of the running Linux kernel."""
    return os.uname().release


def kernel_version(release=None):
    """``(major, minor)`` of a kernel release string (default: the running kernel), or None if unparsable."""
    m = re.match(r"^(\d+)\.(\d+)", release if release is not None else kernel_release())
    return (int(m.group(1)), int(m.group(2))) if m else None


def runtime_pages_required():
    """True where host buffers for the ascend backend must be the runtime's page-locked memory
    (``aclrtMallocHost``) before ``aclrtHostRegister``: a Linux kernel <= 5.10 (or an unparsable release)
    and a runtime that exports aclrtHostRegister (an older runtime registers nothing).

    Raises:
        RuntimeError: CANN's libascendcl.so cannot be loaded (``CannNotFoundError``).
    """
    ver = kernel_version()
    if ver is not None and ver > OLD_KERNEL:
        return False
    return _acl.load().has_host_register


def _device_id():
    try:
        import mindspore as ms

        return int(ms.get_context("device_id") or 0)
    except Exception:  # noqa: BLE001 - context unavailable
        return 0


def register_host_memory(ptr, nbytes, device_id=None):
    """Map ``nbytes`` of host memory at ``ptr`` for device access (``aclrtHostRegister``, MAPPED), with a
    device context bound to the calling thread first (``aclrtSetDevice(device_id)`` unless one is bound;
    default: MindSpore's ``device_id``).

    Args:
        ptr (int): host address, 4 KiB aligned (CANN requirement).
        nbytes (int): size in bytes, > 0.
        device_id (int, optional): the device whose context is bound.

    Returns:
        int: the device-side address of the mapping (usable by kernels, not by memcpy).

    Raises:
        ValueError: ``ptr`` not 4 KiB aligned or ``nbytes`` <= 0.
        RuntimeError: CANN runtime missing (:class:`~ms_kvcache._backends._acl.CannNotFoundError`), or
            the call failed (:class:`~ms_kvcache._backends._acl.AclError`, with the aclError code).
    """
    ptr, nbytes = int(ptr), int(nbytes)
    if ptr <= 0 or ptr % 4096:
        raise ValueError(f"register_host_memory: argument 'ptr': expected a 4096-byte aligned host address, "
                         f"got {ptr:#x}")
    if nbytes <= 0:
        raise ValueError(f"register_host_memory: argument 'nbytes': expected > 0, got {nbytes}")
    acl = _acl.load()
    acl.ensure_context(_device_id() if device_id is None else device_id)
    return acl.host_register(ptr, nbytes)


def unregister_host_memory(ptr, device_id=None):
    """Undo :func:`register_host_memory` (``aclrtHostUnregister``, device context bound first). Same errors."""
    acl = _acl.load()
    acl.ensure_context(_device_id() if device_id is None else device_id)
    acl.host_unregister(int(ptr))


def ascend_host_register(address, nbytes, fallback=False):
    """Register ``nbytes`` of page-aligned host memory at ``address`` (:func:`register_host_memory`) and
    remember the device address for :func:`mapped_address`; returns it.

    ``fallback=True`` (what :func:`alloc_host_buffer` passes): when the runtime lacks the call (CANN < 8.1)
    or refuses it, return None, note why in ``REGISTER_FALLBACK`` and warn once; the memory is then used
    through the staged mode (a device staging tensor and ``aclrtMemcpyAsync``).

    Raises:
        RuntimeError: CANN's libascendcl.so cannot be loaded (``CannNotFoundError``), or (without
            ``fallback``) the call fails (``AclError`` with the ACL error code).
    """
    try:
        dev = register_host_memory(address, nbytes)
    except _acl.AclError as exc:
        if not fallback:
            raise
        REGISTER_FALLBACK["why"] = str(exc)
        warn_once("register", f"ms_kvcache: alloc_host_buffer could not register its pages for device access "
                              f"({exc}); such buffers go through a device staging copy (see `ms-kvcache info`)")
        return None
    _REGISTERED[address] = (dev, int(nbytes))
    REGISTER_FALLBACK["why"] = ""  # "the last registration failed" no longer holds (ms-kvcache info)
    return dev


def mapped_address(address, nbytes):
    """The device address of host bytes ``[address, address + nbytes)`` when they lie inside one region
    registered by :func:`ascend_host_register` (a view of an :func:`alloc_host_buffer` buffer included), else
    None."""
    for host, (dev, size) in tuple(_REGISTERED.items()):  # a snapshot: other threads register / free buffers
        if host <= address and address + nbytes <= host + size:
            return dev + (address - host)
    return None


def ascend_host_unregister(address):
    """Undo :func:`ascend_host_register` (called before the memory is freed). The device is synchronised
    first, so no queued kernel or copy still uses the mapping."""
    if _REGISTERED.pop(address, None) is None:
        return
    try:
        import mindspore as ms

        ms.runtime.synchronize()
    except Exception:  # noqa: BLE001 - interpreter shutdown / no device: nothing can be in flight
        pass
    try:
        unregister_host_memory(address)
    except _acl.CannNotFoundError:  # the runtime is gone (interpreter shutdown): so is the mapping
        pass


class _RuntimeHostBlock:
    """Page-locked host memory of the CANN runtime (``aclrtMallocHost``) exposed to numpy (the buffer's base
    object): freed, after unregistering it, when the last array over it goes away."""

    def __init__(self, ptr, nbytes):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def _release_runtime_block(ptr, base, registered):
    if registered:
        ascend_host_unregister(ptr)
    try:
        _acl.load().free_host(base)
    except (_acl.CannNotFoundError, _acl.AclError):  # interpreter shutdown: the runtime frees its memory
        pass


_PAGE = 4096


def _runtime_pinned_buffer(nbytes, node, explicit_node):
    """A zero-filled uint8 array over ``nbytes`` of ``aclrtMallocHost`` memory (device context bound first),
    starting on a 4 KiB page (aclrtHostRegister's requirement; aclrtMallocHost documents 64-byte alignment only,
    so the block is one page larger), its pages moved to NUMA ``node`` (an error only when the caller named the
    node) and registered (a registration failure: warned once, staged mode)."""
    import ctypes

    from ms_kvcache import _cpu

    acl = _acl.load()
    acl.ensure_context(_device_id())
    try:
        base = acl.malloc_host(nbytes + _PAGE)
    except _acl.AclError as exc:
        raise OSError(_errno.ENOMEM, f"{_OP}: cannot allocate {nbytes} bytes of page-locked host memory "
                                     f"(aclrtMallocHost: {exc})") from None
    ptr = (base + _PAGE - 1) // _PAGE * _PAGE
    try:
        err = _cpu.host_bind(ptr, nbytes, node)
        if err and explicit_node:
            raise OSError(err, f"{_OP}: cannot bind {nbytes} bytes of aclrtMallocHost memory to NUMA node {node} "
                               f"(mbind: {os.strerror(err)})")
        ctypes.memset(ptr, 0, nbytes)
        registered = ascend_host_register(ptr, nbytes, fallback=True) is not None
    except BaseException:
        acl.free_host(base)
        raise
    block = _RuntimeHostBlock(ptr, nbytes)
    weakref.finalize(block, _release_runtime_block, ptr, base, registered)
    return np.asarray(block)


def ascend_device_numa_node(device_id=None):
    """ASCEND BACKEND HOOK: NUMA node of the NPU ``device_id`` (default: MindSpore's ``device_id``),
    read from ``/sys/bus/pci/devices/<bdf>/numa_node`` of the Huawei (vendor 0x19e5) PCI devices in bus
    order; 0 when it cannot be determined."""
    if device_id is None:
        try:
            import mindspore as ms

            device_id = int(ms.get_context("device_id"))
        except Exception:  # pragma: no cover - context unavailable
            device_id = 0
    root = "/sys/bus/pci/devices"
    try:
        npus = []
        for bdf in sorted(os.listdir(root)):
            with open(os.path.join(root, bdf, "vendor")) as f:
                if f.read().strip() != "0x19e5":
                    continue
            with open(os.path.join(root, bdf, "class")) as f:
                if not f.read().strip().startswith("0x12"):  # processing accelerator
                    continue
            npus.append(bdf)
        with open(os.path.join(root, npus[device_id], "numa_node")) as f:
            node = int(f.read().strip())
        return node if node >= 0 else 0
    except (OSError, IndexError, ValueError):
        return 0
