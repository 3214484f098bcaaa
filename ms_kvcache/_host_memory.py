"""Host (CPU) memory for KV offload: :func:`alloc_host_buffer`.

What holds (MindSpore 2.10 CPU, checked by tests/test_alloc_host_buffer.py):

- ``Tensor.from_numpy(array)`` does not copy: the Tensor's ``data_ptr()`` is the array's address, a
  write through either is seen by the other, and the Tensor keeps the array (and so the mapping)
  alive: the memory is unmapped only when the Tensor, every view of it and the array are gone.
- Such a Tensor passed to an op - in PyNative, or as an argument of a GRAPH_MODE Cell / ``@ms.jit``
  function - is written in place: a d2h transfer lands in the pinned pages.
- ``Parameter(host_tensor)`` copies the data into new memory; ``param.set_data(host_tensor)`` keeps
  the address. Pass host buffers as call arguments, or ``set_data`` them into a Parameter.
- PyNative launches are asynchronous: an op call returns before its kernel has run. Reading the
  Tensor (``asnumpy()``) waits; reading the same memory through another alias (the numpy array, a
  storage library given ``data_ptr()``) must call :func:`synchronize` first.

The Ascend part (registering the pages with ``aclrtHostRegister`` so AI cores can read and write them
directly) is the hook :func:`ascend_host_register`; :func:`alloc_host_buffer` calls it on the ascend
backend, and it raises a clear RuntimeError where CANN is missing. PyNative transfers on Ascend hand
kernels the mapped address (:func:`mapped_address`, zero-copy) or stage the buffer through a device
tensor (docs/ascend.md, "Host memory"); :func:`synchronize` then also waits for the device.
"""
import errno as _errno
import operator
import os
import resource
import weakref

import numpy as np

__all__ = ["alloc_host_buffer", "synchronize", "online_numa_nodes", "ascend_host_register", "ascend_host_unregister",
           "ascend_device_numa_node", "mapped_address"]

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


def alloc_host_buffer(shape, dtype, numa_node=None, pinned=True):
    """Allocate a host buffer for KV offload, as a MindSpore Tensor over page-aligned, NUMA-bound,
    page-locked memory.

    The memory is an anonymous ``mmap`` (page-aligned), bound to one NUMA node with ``mbind(2)``
    (MPOL_BIND), locked with ``mlock(2)`` when ``pinned`` (which also faults every page in on that node;
    unpinned buffers are faulted in by touching each page), and wrapped zero-copy with
    ``Tensor.from_numpy``. The Tensor owns the memory: it is unmapped when the Tensor and every view of
    it are released. On the ascend backend the pages are also registered with ``aclrtHostRegister`` so
    kernels can read/write them directly (zero-copy transfers); see :func:`ascend_host_register`.

    Pass the Tensor as an argument of the transfer ops / of a graph Cell (written in place), or
    ``param.set_data(buffer)`` into a Parameter; ``Parameter(buffer)`` would copy it.

    Args:
        shape (int | sequence of int): dimensions, each >= 0.
        dtype: mindspore dtype (``ms.bfloat16``...), numpy dtype or name (``"float16"``, ``"bfloat16"``,
            ``"float32"``, ``"float64"``, ``"int8"``, ``"uint8"``, ``"int16"``, ``"int32"``, ``"int64"``,
            ``"bool"``).
        numa_node (int, optional): node to bind to; default: the NUMA node of the device (ascend
            backend) or of the calling CPU (node 0 on a single-node machine).
        pinned (bool | numpy.bool_): page-lock the memory (default). ``False`` skips ``mlock`` - the way out when the
            memlock limit is too small; such memory is pageable (and on Ascend registered unpinned,
            which CANN supports on kernels newer than 5.10).

    Returns:
        mindspore.Tensor: of ``shape`` and ``dtype``, zero-filled, ``data_ptr()`` page-aligned.

    Raises:
        TypeError: unsupported ``dtype``; ``shape`` not ints; ``pinned`` not a bool or numpy.bool_.
        ValueError: negative dimensions; ``numa_node`` not an online node.
        OSError: ``mmap``/``mbind`` failed, or pinning failed - the message gives ``RLIMIT_MEMLOCK``
            (soft/hard) and the remedies (``ulimit -l``, ``pinned=False``).
        RuntimeError: ascend backend without a usable CANN runtime (registration hook).
    """
    from mindspore import Tensor

    from ms_kvcache import _cpu

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
    nodes = online_numa_nodes()
    if numa_node is None:
        node = _default_node()
    else:
        if isinstance(numa_node, bool) or not isinstance(numa_node, (int, np.integer)) or int(numa_node) not in nodes:
            raise ValueError(f"{_OP}: argument 'numa_node': expected an online NUMA node {nodes}, got {numa_node!r}")
        node = int(numa_node)
    np_dtype = _np_dtype(name)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
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
    array = raw.view(np_dtype).reshape(shape)
    tensor = Tensor.from_numpy(array)
    from ms_kvcache import _backend

    if _backend.get_backend() == "ascend" and nbytes > 0:
        # ASCEND BACKEND HOOK: make the pages device-accessible (zero-copy transfers); when the runtime cannot
        # register them the buffer is still usable, through the staged mode (ascend.host_memory_mode)
        if ascend_host_register(raw.ctypes.data, nbytes, fallback=True) is not None:
            weakref.finalize(raw, ascend_host_unregister, raw.ctypes.data)
    return tensor


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
        from ms_kvcache._backends import ascend  # noqa: WPS433

        ascend._INFLIGHT.clear()  # noqa: WPS437 - host tensors kept alive for queued launches


# ------------------------------------------------------------------------------------------------ Ascend
# Hooks for the ascend backend (ms_kvcache/_backends/ascend.py calls these). They use the CANN runtime
# (libascendcl.so) through ctypes; nothing here runs on a machine without CANN.
_REGISTERED = {}  # host address -> (device address from aclrtHostRegister, bytes)
#: why the last registration fell back to unregistered memory ('' if none did)
REGISTER_FALLBACK = {"why": ""}


def ascend_host_register(address, nbytes, fallback=False):
    """ASCEND BACKEND HOOK: register ``nbytes`` of page-aligned host memory at ``address`` with
    ``aclrtHostRegister(ptr, size, ACL_HOST_REGISTER_MAPPED, &dev_ptr)`` so AI cores can access it;
    returns the device-side address (the one kernels get for zero-copy access). The ACL call is
    :func:`ms_kvcache._backends.ascend.register_host_memory` (one ACL loader for the package).

    ``fallback=True`` (what :func:`alloc_host_buffer` passes): when the runtime lacks the call (CANN < 8.1)
    or refuses it, return None and note why in ``REGISTER_FALLBACK``; the memory is then used through
    the staged mode (a device staging tensor and ``aclrtMemcpyAsync``).

    Raises:
        RuntimeError: CANN's libascendcl.so cannot be loaded (``CannNotFoundError``), or (without
            ``fallback``) the call fails (``AclError`` with the ACL error code).
    """
    from ms_kvcache._backends import _acl, ascend  # noqa: WPS433 - only on the Ascend path

    try:
        dev = ascend.register_host_memory(address, nbytes)
    except _acl.AclError as exc:
        if not fallback:
            raise
        REGISTER_FALLBACK["why"] = str(exc)
        return None
    _REGISTERED[address] = (dev, int(nbytes))
    return dev


def mapped_address(address, nbytes):
    """The device address of host bytes ``[address, address + nbytes)`` when they lie inside one region
    registered by :func:`ascend_host_register` (a view of an :func:`alloc_host_buffer` buffer included), else
    None."""
    for host, (dev, size) in _REGISTERED.items():
        if host <= address and address + nbytes <= host + size:
            return dev + (address - host)
    return None


def ascend_host_unregister(address):
    """ASCEND BACKEND HOOK: undo :func:`ascend_host_register` (called before the memory is unmapped). The
    device is synchronised first, so no queued kernel or copy still uses the mapping."""
    if _REGISTERED.pop(address, None) is None:
        return
    from ms_kvcache._backends import ascend  # noqa: WPS433

    try:
        import mindspore as ms

        ms.runtime.synchronize()
    except Exception:  # noqa: BLE001 - interpreter shutdown / no device: nothing can be in flight
        pass
    from ms_kvcache._backends import _acl  # noqa: WPS433

    try:
        ascend.unregister_host_memory(address)
    except _acl.CannNotFoundError:  # the runtime is gone (interpreter shutdown): so is the mapping
        pass


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
