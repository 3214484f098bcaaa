"""ctypes bindings of the few CANN runtime (ACL) calls the "ascend" backend makes itself.

Loaded lazily, only when a caller needs the NPU runtime (``swap_blocks`` between host and device, the
host memory of ``ms_kvcache._host_memory``, the SoC name for the reg_info dtype rows). Nothing here runs at
import.

Where the library comes from, in order:

1. ``$MS_KVCACHE_LIBASCENDCL`` (a full path; used by the tests with a stand-in library),
2. ``libascendcl.so`` by name (already loaded by MindSpore on Ascend, or on ``LD_LIBRARY_PATH`` after
   ``source <cann>/set_env.sh``),
3. ``lib64/libascendcl.so`` under ``$ASCEND_HOME_PATH``, ``$ASCEND_TOOLKIT_HOME``,
   ``$ASCEND_CANN_PACKAGE_PATH``, ``/usr/local/Ascend/ascend-toolkit/latest``,
   ``/usr/local/Ascend/cann``.

Prototypes follow the CANN 8.x "AscendCL API reference" (runtime: memory management):

- ``aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)``
- ``aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
  aclrtMemcpyKind kind, aclrtStream stream)``
- ``aclError aclrtMemcpyBatchAsync(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes,
  size_t numBatches, aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs,
  size_t *failIndex, aclrtStream stream)`` -- documented from CANN 8.3.RC1 on, marked experimental,
  A2/A3 only; looked up at run time, absent on older CANN.
- ``aclError aclrtHostRegister(void *ptr, uint64_t size, aclrtHostRegisterType type, void **devPtr)``
  and ``aclError aclrtHostUnregister(void *ptr)`` -- documented from CANN 8.1.RC1 on (A2/A3).
- ``aclError aclrtMallocHost(void **hostPtr, size_t size)``, ``aclError aclrtFreeHost(void *hostPtr)``
  (page-locked host memory of the runtime).
- ``aclError aclsysGetCANNVersion(aclCANNPackageName name, aclCANNPackageVersion *version)`` (documented from
  CANN 8.2, deprecated in 9.0 for aclsysGetVersionStr; looked up at run time).
- ``aclError aclrtSynchronizeStream(aclrtStream)``, ``aclrtSetDevice(int32_t)``,
  ``aclrtGetCurrentContext(aclrtContext *)``, ``const char *aclrtGetSocName()``,
  ``const char *aclGetRecentErrMsg()``.
"""
import ctypes
import os
import re
import threading

__all__ = [
    "CannNotFoundError", "AclError", "AclRuntime", "load", "reset",
    "MEMCPY_HOST_TO_HOST", "MEMCPY_HOST_TO_DEVICE", "MEMCPY_DEVICE_TO_HOST", "MEMCPY_DEVICE_TO_DEVICE",
    "MEM_LOCATION_HOST", "MEM_LOCATION_DEVICE", "MemLocation", "MemcpyBatchAttr", "ERROR_RT_FEATURE_NOT_SUPPORT",
    "CANNPackageVersion",
]

#: aclrtMemcpyKind
MEMCPY_HOST_TO_HOST = 0
MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
#: aclrtMemLocationType
MEM_LOCATION_HOST = 0
MEM_LOCATION_DEVICE = 1
#: aclrtHostRegisterType
HOST_REGISTER_MAPPED = 0
#: aclCANNPackageName ACL_PKG_NAME_CANN (the CANN version as a whole)
PKG_NAME_CANN = 0
#: aclError ACL_ERROR_RT_FEATURE_NOT_SUPPORT (the runtime does not support the call for these arguments)
ERROR_RT_FEATURE_NOT_SUPPORT = 207000

LIB_NAME = "libascendcl.so"
_CANDIDATE_ROOTS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_CANN_PACKAGE_PATH")
_DEFAULT_ROOTS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")


class CannNotFoundError(RuntimeError):
    """The CANN runtime library (libascendcl.so) cannot be loaded on this machine."""


class AclError(RuntimeError):
    """An ACL runtime call returned a non-zero aclError."""

    def __init__(self, func, code, detail=""):
        self.func = func
        self.code = code
        msg = f"{func} failed with aclError {code}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class MemLocation(ctypes.Structure):
    """``aclrtMemLocation {uint32_t id; aclrtMemLocationType type;}`` (8 bytes)."""

    _fields_ = [("id", ctypes.c_uint32), ("type", ctypes.c_int32)]


class MemcpyBatchAttr(ctypes.Structure):
    """``aclrtMemcpyBatchAttr {aclrtMemLocation dstLoc; aclrtMemLocation srcLoc; uint8_t rsv[16];}``."""

    _fields_ = [("dstLoc", MemLocation), ("srcLoc", MemLocation), ("rsv", ctypes.c_uint8 * 16)]


class CANNPackageVersion(ctypes.Structure):
    """``aclCANNPackageVersion``: ``char version[128]`` (e.g. "8.2.RC1"), ``majorVersion``, ``minorVersion``,
    ``releaseVersion``, ``patchVersion`` (``char[64]`` each), ``char reserved[128]``."""

    _fields_ = [("version", ctypes.c_char * 128), ("majorVersion", ctypes.c_char * 64),
                ("minorVersion", ctypes.c_char * 64), ("releaseVersion", ctypes.c_char * 64),
                ("patchVersion", ctypes.c_char * 64), ("reserved", ctypes.c_char * 128)]


_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_err = ctypes.c_int


def _bind(lib, name, restype, argtypes, required=True):
    try:
        f = getattr(lib, name)
    except AttributeError:
        if required:
            raise CannNotFoundError(f"{LIB_NAME} at {getattr(lib, '_name', '?')} has no symbol {name}; "
                                    f"the CANN runtime is too old or not a CANN library")
        return None
    f.restype = restype
    f.argtypes = argtypes
    return f


class AclRuntime:
    """Thin, checked wrappers over the ACL calls above. Every failing call raises :class:`AclError`."""

    def __init__(self, lib, path):
        self.lib = lib
        self.path = path
        self._memcpy = _bind(lib, "aclrtMemcpy", _err, [_vp, _sz, _vp, _sz, ctypes.c_int])
        self._memcpy_async = _bind(lib, "aclrtMemcpyAsync", _err, [_vp, _sz, _vp, _sz, ctypes.c_int, _vp])
        self._sync_stream = _bind(lib, "aclrtSynchronizeStream", _err, [_vp])
        self._memcpy_batch_async = _bind(
            lib, "aclrtMemcpyBatchAsync", _err,
            [ctypes.POINTER(_vp), ctypes.POINTER(_sz), ctypes.POINTER(_vp), ctypes.POINTER(_sz), _sz,
             ctypes.POINTER(MemcpyBatchAttr), ctypes.POINTER(_sz), _sz, ctypes.POINTER(_sz), _vp],
            required=False)
        self._host_register = _bind(lib, "aclrtHostRegister", _err,
                                    [_vp, ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(_vp)], required=False)
        self._host_unregister = _bind(lib, "aclrtHostUnregister", _err, [_vp], required=False)
        self._malloc_host = _bind(lib, "aclrtMallocHost", _err, [ctypes.POINTER(_vp), _sz], required=False)
        self._free_host = _bind(lib, "aclrtFreeHost", _err, [_vp], required=False)
        self._cann_version = _bind(lib, "aclsysGetCANNVersion", _err,
                                   [ctypes.c_int, ctypes.POINTER(CANNPackageVersion)], required=False)
        self._set_device = _bind(lib, "aclrtSetDevice", _err, [ctypes.c_int32], required=False)
        self._get_ctx = _bind(lib, "aclrtGetCurrentContext", _err, [ctypes.POINTER(_vp)], required=False)
        self._soc_name = _bind(lib, "aclrtGetSocName", ctypes.c_char_p, [], required=False)
        self._recent_err = _bind(lib, "aclGetRecentErrMsg", ctypes.c_char_p, [], required=False)

    # ------------------------------------------------------------------ helpers
    def _recent_error(self):
        if self._recent_err is None:
            return ""
        try:
            raw = self._recent_err()
        except Exception:  # pragma: no cover - diagnostics only
            return ""
        return raw.decode(errors="replace").strip() if raw else ""

    def _check(self, func, ret, extra=""):
        if ret != 0:
            detail = "; ".join(p for p in (self._recent_error(), extra) if p)
            raise AclError(func, int(ret), detail)

    @property
    def has_batch(self):
        """True when this CANN exports aclrtMemcpyBatchAsync."""
        return self._memcpy_batch_async is not None

    @property
    def has_host_register(self):
        return self._host_register is not None

    # ------------------------------------------------------------------ calls
    def memcpy(self, dst, dst_max, src, count, kind):
        self._check("aclrtMemcpy", self._memcpy(dst, dst_max, src, count, kind))

    def memcpy_async(self, dst, dst_max, src, count, kind, stream):
        self._check("aclrtMemcpyAsync", self._memcpy_async(dst, dst_max, src, count, kind, stream))

    def memcpy_batch_async(self, dsts, dst_maxs, srcs, sizes, dst_loc, src_loc, stream):
        """One aclrtMemcpyBatchAsync over ``len(dsts)`` copies sharing one (dst, src) location pair.

        dst_loc / src_loc: ``(location type, device id)``.
        """
        n = len(dsts)
        if not (len(dst_maxs) == len(srcs) == len(sizes) == n):
            raise ValueError("memcpy_batch_async: dsts, dst_maxs, srcs and sizes must have equal lengths")
        if self._memcpy_batch_async is None:
            raise AclError("aclrtMemcpyBatchAsync", -1, "not exported by this CANN (needs CANN >= 8.3)")
        c_dsts = (_vp * n)(*dsts)
        c_srcs = (_vp * n)(*srcs)
        c_max = (_sz * n)(*dst_maxs)
        c_sizes = (_sz * n)(*sizes)
        attr = MemcpyBatchAttr()
        attr.dstLoc.type, attr.dstLoc.id = dst_loc
        attr.srcLoc.type, attr.srcLoc.id = src_loc
        attrs = (MemcpyBatchAttr * 1)(attr)
        idx = (_sz * 1)(0)
        fail = _sz(ctypes.c_size_t(-1).value)
        ret = self._memcpy_batch_async(c_dsts, c_max, c_srcs, c_sizes, n, attrs, idx, 1,
                                       ctypes.byref(fail), stream)
        none = ctypes.c_size_t(-1).value
        self._check("aclrtMemcpyBatchAsync", ret, "" if fail.value == none else f"failing copy #{fail.value}")

    def synchronize_stream(self, stream):
        self._check("aclrtSynchronizeStream", self._sync_stream(stream))

    def host_register(self, ptr, size):
        if self._host_register is None:
            raise AclError("aclrtHostRegister", -1, "not exported by this CANN (needs CANN >= 8.1.RC1)")
        dev = _vp()
        self._check("aclrtHostRegister", self._host_register(ptr, size, HOST_REGISTER_MAPPED, ctypes.byref(dev)))
        return dev.value or 0

    def host_unregister(self, ptr):
        if self._host_unregister is None:
            raise AclError("aclrtHostUnregister", -1, "not exported by this CANN (needs CANN >= 8.1.RC1)")
        self._check("aclrtHostUnregister", self._host_unregister(ptr))

    def malloc_host(self, size):
        """``aclrtMallocHost``: ``size`` bytes of page-locked host memory; returns its address."""
        if self._malloc_host is None:
            raise AclError("aclrtMallocHost", -1, "not exported by this library")
        ptr = _vp()
        self._check("aclrtMallocHost", self._malloc_host(ctypes.byref(ptr), int(size)))
        if not ptr.value:
            raise AclError("aclrtMallocHost", -1, "returned a null pointer")
        return ptr.value

    def free_host(self, ptr):
        if self._free_host is None:
            raise AclError("aclrtFreeHost", -1, "not exported by this library")
        self._check("aclrtFreeHost", self._free_host(ptr))

    def cann_version(self):
        """``((major, minor), text)`` of the CANN package (``aclsysGetCANNVersion(ACL_PKG_NAME_CANN)``), or None
        when this runtime does not export the call or it fails (the version is then unknown)."""
        if self._cann_version is None:
            return None
        v = CANNPackageVersion()
        try:
            if self._cann_version(PKG_NAME_CANN, ctypes.byref(v)) != 0:
                return None
        except Exception:  # noqa: BLE001 - diagnostics only
            return None
        text = v.version.decode(errors="replace").strip()
        try:
            return (int(v.majorVersion.decode()), int(v.minorVersion.decode())), text
        except ValueError:
            pass
        m = re.match(r"^(\d+)\.(\d+)", text)
        return ((int(m.group(1)), int(m.group(2))), text) if m else None

    def soc_name(self):
        """CANN SoC version name of the current device (e.g. "Ascend910B1"), or None."""
        if self._soc_name is None:
            return None
        raw = self._soc_name()
        return raw.decode() if raw else None

    def ensure_context(self, device_id):
        """Bind a device context to the calling thread unless one is bound already."""
        if self._get_ctx is not None:
            ctx = _vp()
            if self._get_ctx(ctypes.byref(ctx)) == 0 and ctx.value:
                return
        if self._set_device is not None:
            self._check("aclrtSetDevice", self._set_device(int(device_id)))


_lock = threading.Lock()
_runtime = None


def _candidates():
    env = os.environ.get("MS_KVCACHE_LIBASCENDCL")
    if env:
        return [env]
    out = [LIB_NAME]
    roots = [os.environ.get(v) for v in _CANDIDATE_ROOTS] + list(_DEFAULT_ROOTS)
    for r in roots:
        if r:
            p = os.path.join(r, "lib64", LIB_NAME)
            if p not in out:
                out.append(p)
    return out


def load():
    """The process-wide :class:`AclRuntime`; raises :class:`CannNotFoundError` naming what is missing."""
    global _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        tried = []
        for cand in _candidates():
            if os.sep in cand and not os.path.exists(cand):
                tried.append(f"{cand} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                tried.append(f"{cand} ({exc})")
                continue
            _runtime = AclRuntime(lib, cand)
            return _runtime
        raise CannNotFoundError(
            "ms_kvcache 'ascend' backend: cannot load the CANN runtime library " + LIB_NAME
            + "; tried: " + "; ".join(tried)
            + ". Install the CANN toolkit and run `source <cann>/set_env.sh` (sets ASCEND_HOME_PATH "
              "and LD_LIBRARY_PATH)")


def reset():
    """Forget the loaded runtime (tests only; the library itself stays mapped)."""
    global _runtime
    with _lock:
        _runtime = None
