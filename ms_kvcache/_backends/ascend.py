"""The "ascend" backend: the ops of the CANN custom-op package ``ms_kvcache`` (built from op_kernel/,
op_host/, op_proto/ by ``scripts/build_opp.sh``), called through MindSpore's
``ops.Custom("<OpType>", ..., func_type="aot", reg_info=...)`` on an Ascend NPU.

Nothing in this module was run on Ascend hardware: it follows the documented conventions of CANN 8.x
(vendor folder layout, ``ASCEND_CUSTOM_OPP_PATH``, ``vendors/config.ini``, aclnn two-phase API, ACL
runtime memcpy) and of MindSpore 2.10 (``ops.Custom`` aot on Ascend with a ``CustomRegOp``).

Finding the package (first hit wins, see :func:`find_vendor`):

1. every entry of ``ASCEND_CUSTOM_OPP_PATH`` (colon-separated vendor folders
   ``<path>/vendors/<vendor>``, what ``<path>/vendors/ms_kvcache/bin/set_env.bash`` prepends after
   ``custom_opp_<os>_<arch>.run --install-path=<path>``); the folder ``ms_kvcache/opp/vendors/ms_kvcache``
   shipped inside the wheel is prepended to that variable when this module is imported, as
   ms_custom_ops does with its own vendor folder;
2. ``$ASCEND_OPP_PATH/vendors/ms_kvcache`` when ``$ASCEND_OPP_PATH/vendors/config.ini`` lists it in
   ``load_priority`` (default install of the .run package).

Other hooks kept here for the op families that need the NPU runtime directly: :func:`swap_blocks`
(host <-> device block copies are ACL runtime memcpys, not a kernel) and
:func:`register_host_memory` (``aclrtHostRegister``, for pinned host KV buffers).
"""
import os
from pathlib import Path

from ms_kvcache._backends import _acl

__all__ = [
    "VENDOR_NAME", "COMPUTE_UNITS", "WHEEL_VENDOR_DIR", "available", "aot_func", "reg_info",
    "find_vendor", "VendorPackage", "PackageNotFoundError", "compute_unit", "current_soc",
    "swap_blocks", "register_host_memory", "unregister_host_memory", "plan_block_copies",
]

#: Vendor name of the CANN custom-op package (scripts/opp/CMakePresets.json ``vendor_name``).
VENDOR_NAME = "ms_kvcache"
#: snake_case of the OpType vendor prefix (``Mskv``): CANN's op build names the aclnn header
#: ``aclnn_<snake_case(OpType)>.h``.
_OPTYPE_SNAKE_PREFIX = "mskv_"


def aclnn_header_name(spec):
    """``aclnn_mskv_<op>.h``: the header CANN's op build generates for ``spec.op_type`` (MindSpore derives
    the same name from the op type, ``CustomInfoGenerator._get_aclnn_api_file_name``)."""
    return f"aclnn_{_OPTYPE_SNAKE_PREFIX}{spec.name}.h"

#: ASCEND_COMPUTE_UNIT values the package is built for (OpDef ``AddConfig`` keys).
COMPUTE_UNITS = ("ascend910b", "ascend910_93", "ascend310p")
#: Vendor folder shipped inside the wheel (filled by ``scripts/build_opp.sh --stage-into-package``).
WHEEL_VENDOR_DIR = Path(__file__).resolve().parent.parent / "opp" / "vendors" / VENDOR_NAME

#: The primitive takes the attribute values as trailing inputs, after the tensors, in OpDef attr order
#: (read by ``_custom.InplaceCustom``). MindSpore 2.10 on Ascend runs every ``func_type="aot"`` Custom as an
#: Ascend C (aclnn) op: ``Custom._generate_get_workspace_size_func`` parses the installed
#: ``op_api/include/aclnn_<op>.h`` prototype into the attribute ``custom_inputs_type``, and with it the
#: kernel factory picks ``CustomV2AclnnKernelMod``, which converts the primitive's inputs (regrouped by
#: ``dyn_input_sizes``) one by one to those types: scalars (bool, int64_t, double) included, read from the
#: inputs, not from primitive attributes. The Python half of this is the same in 2.7.0-2.10.0 (read in each
#: wheel; 2.7.0 also registers the reg_info attrs as inputs, ``Custom._convert_attr_to_input``), except that
#: a string attribute fails before 2.9 (no ``str``/``char*`` type), so named modes travel as int codes
#: (``AttrSpec.codes``).
ATTRS_AS_INPUTS = True

#: Ops implemented on Ascend by the ACL runtime (backend functions of this module), not by a kernel.
RUNTIME_OPS = ("swap_blocks",)

_MS_DTYPE_PREFIX = {
    "float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64", "int8": "I8",
    "uint8": "U8", "int16": "I16", "int32": "I32", "int64": "I64", "bool": "BOOL",
}
#: reg_info attribute type of an AttrSpec kernel type. No "str": MindSpore 2.7.x / 2.8.0's aclnn code generator
#: raises "Unsupported type: str" for it (named modes are int-coded, ``AttrSpec.codes``).
_MS_ATTR_TYPE = {"int": "int", "float": "float", "bool": "bool"}


class PackageNotFoundError(RuntimeError):
    """The CANN custom-op package ``ms_kvcache`` (or one of its ops) is not installed."""


# ---------------------------------------------------------------------------------------- SoC
def compute_unit(soc):
    """ASCEND_COMPUTE_UNIT / OpDef AddConfig key of a CANN SoC name, or None if not targeted.

    "Ascend910B1".."Ascend910B4" -> "ascend910b"; "Ascend910_93xx" -> "ascend910_93";
    "Ascend310P1".."Ascend310P3" -> "ascend310p".
    """
    if not soc:
        return None
    s = soc.lower()
    if s.startswith("ascend910_93"):
        return "ascend910_93"
    if s.startswith("ascend910b"):
        return "ascend910b"
    if s.startswith("ascend310p"):
        return "ascend310p"
    return None


def current_soc():
    """SoC name of the NPU this process runs on (``aclrtGetSocName``), or None off-NPU."""
    if _device_target() != "Ascend":
        return None
    try:
        return _acl.load().soc_name()
    except _acl.CannNotFoundError:
        return None


def _device_target():
    try:
        import mindspore as ms

        return ms.get_context("device_target")
    except Exception as exc:  # pragma: no cover - MindSpore missing / not initialised
        return f"unknown ({exc})"


# ---------------------------------------------------------------------------------------- package
class VendorPackage:
    """An installed vendor folder of the CANN custom-op package.

    path: the vendor folder (``.../vendors/ms_kvcache``); source: how it was found.
    """

    def __init__(self, path, source):
        self.path = Path(path)
        self.source = source

    def ops(self):
        """Public snake_case names of the ops whose aclnn header is installed
        (``op_api/include/aclnn_mskv_<op>.h``: CANN names it after the snake_case of the OpType, and every
        ms_kvcache OpType carries the vendor prefix ``Mskv``)."""
        inc = self.path / "op_api" / "include"
        if not inc.is_dir():
            return set()
        pre = "aclnn_" + _OPTYPE_SNAKE_PREFIX
        return {p.name[len(pre):-2] for p in inc.glob(pre + "*.h")}

    def opapi_library(self):
        return self.path / "op_api" / "lib" / "libcust_opapi.so"

    def __repr__(self):
        return f"VendorPackage({str(self.path)!r}, source={self.source!r})"


def _prepend_wheel_vendor(env=None):
    """Prepend the wheel's vendor folder to ASCEND_CUSTOM_OPP_PATH (once) if the wheel ships one."""
    env = os.environ if env is None else env
    if not WHEEL_VENDOR_DIR.is_dir():
        return False
    here = str(WHEEL_VENDOR_DIR)
    entries = [e for e in env.get("ASCEND_CUSTOM_OPP_PATH", "").split(":") if e]
    if here in entries:
        return False
    env["ASCEND_CUSTOM_OPP_PATH"] = ":".join([here] + entries)
    return True


def _read_load_priority(config_ini):
    try:
        text = Path(config_ini).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "load_priority":
            return [v.strip() for v in value.split(",") if v.strip()]
    return None


def find_vendor(env=None):
    """Locate the installed package. Returns ``(VendorPackage or None, notes)``.

    notes: one string per place looked at, saying what was (not) found there; used in error messages.
    """
    env = os.environ if env is None else env
    notes = []
    custom = [e for e in env.get("ASCEND_CUSTOM_OPP_PATH", "").split(":") if e]
    wheel = str(WHEEL_VENDOR_DIR)
    for entry in custom:
        p = Path(entry)
        for cand in (p, p / "vendors" / VENDOR_NAME):
            if cand.name == VENDOR_NAME and cand.is_dir():
                src = "wheel" if str(cand) == wheel else "ASCEND_CUSTOM_OPP_PATH"
                return VendorPackage(cand, src), notes
    notes.append(f"ASCEND_CUSTOM_OPP_PATH has no '{VENDOR_NAME}' vendor folder"
                 + (f" (entries: {', '.join(custom)})" if custom else " (unset)"))
    opp = env.get("ASCEND_OPP_PATH")
    if not opp and env.get("ASCEND_HOME_PATH"):
        opp = str(Path(env["ASCEND_HOME_PATH"]) / "opp")
    if opp:
        vendors = Path(opp) / "vendors"
        prio = _read_load_priority(vendors / "config.ini")
        cand = vendors / VENDOR_NAME
        if cand.is_dir() and prio is not None and VENDOR_NAME in prio:
            return VendorPackage(cand, "config.ini"), notes
        if cand.is_dir():
            notes.append(f"{cand} exists but {vendors / 'config.ini'} does not list '{VENDOR_NAME}' in "
                         f"load_priority (reinstall the .run package)")
        else:
            notes.append(f"no {cand}")
    else:
        notes.append("ASCEND_OPP_PATH and ASCEND_HOME_PATH unset (CANN set_env.sh not sourced)")
    if not WHEEL_VENDOR_DIR.is_dir():
        notes.append("this ms_kvcache wheel ships no prebuilt vendor folder")
    return None, notes


def _missing_package_message(notes):
    return (f"CANN custom-op package '{VENDOR_NAME}' not found: " + "; ".join(notes)
            + ". Build it with scripts/build_opp.sh, install build_out/custom_opp_<os>_<arch>.run "
              f"(--install-path=<dir>) and `source <dir>/vendors/{VENDOR_NAME}/bin/set_env.bash`")


def require_vendor():
    """The installed :class:`VendorPackage`; raises :class:`PackageNotFoundError` naming what is missing."""
    pkg, notes = find_vendor()
    if pkg is None:
        raise PackageNotFoundError(_missing_package_message(notes))
    return pkg


# ---------------------------------------------------------------------------------------- backend API
def available():
    """``(True, "")`` on an Ascend device with the package installed, else ``(False, why)``."""
    target = _device_target()
    if target != "Ascend":
        return False, (f"MindSpore device target is {target!r}, not 'Ascend' (needs an Ascend NPU, CANN and "
                       f"ms.set_device('Ascend'))")
    pkg, notes = find_vendor()
    if pkg is None:
        return False, _missing_package_message(notes)
    return True, ""


def _dtype_format(dtype, fmt="ND"):
    from mindspore.ops import DataType

    prefix = _MS_DTYPE_PREFIX.get(dtype)
    if prefix is None or fmt != "ND":
        raise ValueError(f"reg_info: no MindSpore DataType for dtype {dtype!r} format {fmt!r}")
    return getattr(DataType, f"{prefix}_Default")


def _param_type(t):
    """reg_info / OpDef param type of a TensorSpec: a list of tensors (``dynamic``) is "dynamic".

    MindSpore passes a list's tensors as consecutive inputs; the primitive's ``dyn_input_sizes``
    attribute (set by ``_custom.InplaceCustom``: the count of each dynamic input, -1 for the other inputs
    and for each trailing attribute input) tells MindSpore's Ascend custom kernel
    (``CustomV2AclnnKernelMod::GetCustomInputs``) how to regroup them into the aclTensorLists of the
    aclnn call.
    """
    if t.dynamic:
        return "dynamic"
    return "optional" if t.optional else "required"


def reg_info(spec, soc=None):
    """MindSpore ``CustomRegOp`` registration of ``spec`` for the CANN op ``spec.op_type``.

    Derived from the OpSpec only: inputs then outputs in spec order (names = OpDef names),
    ``optional`` inputs as "optional", ``dynamic`` inputs (lists of tensors) as "dynamic", one
    ``dtype_format`` row per ``spec.dtype_rows(soc)`` (all ND
    = MindSpore "DefaultFormat"), attrs in spec order (= OpDef attr order, which is also the order of
    the attribute parameters of the generated aclnn API; type ``AttrSpec.kernel_type``, so a named mode is
    an "int") as "required" with no value: their values
    are trailing inputs of the primitive (:data:`ATTRS_AS_INPUTS`). MindSpore counts the reg_info attrs
    as inputs (``CustomCodeGenerator._get_input_output_types``) and checks that inputs + attrs +
    outputs + 2 equals the number of parameters of the installed aclnn prototype.

    Args:
        spec (OpSpec): the op.
        soc (str | None): CANN SoC name; None = all rows of every targeted SoC.

    Returns:
        dict: ``CustomRegOp(...).get_op_info()``.
    """
    from mindspore.ops import CustomRegOp

    r = CustomRegOp(spec.op_type)
    for i, t in enumerate(spec.inputs):
        r.input(i, t.name, _param_type(t))
    for i, t in enumerate(spec.outputs):
        r.output(i, t.name, "required")
    for a in spec.attrs:
        if a.kernel_type not in _MS_ATTR_TYPE:
            raise ValueError(f"reg_info: attr {a.name!r} of {spec.op_type} has unsupported type {a.kernel_type!r}")
        r.attr(a.name, "required", _MS_ATTR_TYPE[a.kernel_type])
    fmts = spec.extra.get("formats", {})
    for row in spec.dtype_rows(soc):
        names = [t.name for t in spec.inputs + spec.outputs]
        r.dtype_format(*[_dtype_format(d, fmts.get(n, "ND")) for d, n in zip(row, names)])
    r.target("Ascend")
    return r.get_op_info()


def aot_func(spec):
    """``(spec.op_type, reg_info)`` for ``ops.Custom(func_type="aot")`` on Ascend.

    Raises:
        PackageNotFoundError: the package, or this op inside it, is not installed.
    """
    if spec.name in RUNTIME_OPS:
        raise RuntimeError(f"{spec.name}: on the 'ascend' backend this op is an ACL runtime copy, not a kernel of the "
                           f"CANN package, so it cannot be compiled into a graph; call it in PyNative mode")
    pkg = require_vendor()
    if _device_target() == "Ascend" and not os.environ.get("ASCEND_OPP_PATH"):
        # ops.Custom on Ascend compiles its aclnn callback with -I${ASCEND_OPP_PATH%opp*}/include and looks
        # up vendors/config.ini under it; without it MindSpore fails with an AttributeError on None
        raise PackageNotFoundError("ASCEND_OPP_PATH is not set: source the CANN toolkit's set_env.sh (MindSpore "
                                   "compiles each Ascend custom op's aclnn callback against its headers)")
    ops = pkg.ops()
    if spec.name not in ops:
        raise PackageNotFoundError(
            f"CANN custom-op package '{VENDOR_NAME}' at {pkg.path} (found via {pkg.source}) has no op "
            f"{spec.op_type} (missing op_api/include/{aclnn_header_name(spec)}; installed: "
            f"{', '.join(sorted(ops)) or 'none'}). Rebuild it with scripts/build_opp.sh")
    return spec.op_type, reg_info(spec, current_soc())


# ---------------------------------------------------------------------------------------- host memory
def register_host_memory(ptr, nbytes):
    """Map ``nbytes`` of host memory at ``ptr`` for device access (``aclrtHostRegister``, MAPPED).

    Args:
        ptr (int): host address, 4 KiB aligned (CANN requirement).
        nbytes (int): size in bytes, > 0.

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
    return _acl.load().host_register(ptr, nbytes)


def unregister_host_memory(ptr):
    """Undo :func:`register_host_memory` (``aclrtHostUnregister``). Same errors."""
    _acl.load().host_unregister(int(ptr))


# ---------------------------------------------------------------------------------------- swap_blocks
def plan_block_copies(block_mapping, src_blocks, dst_blocks, same_buffer=False):
    """Validate ``block_mapping`` and turn it into copies, keeping the row order semantics.

    Rows are applied in order, as ``swap_blocks`` documents: a destination named twice ends with the
    block of its last row, and when source and destination are one buffer a row sees the blocks
    written by earlier rows. Consecutive rows whose source and destination blocks both advance by one
    are merged into one copy (unless, in one buffer, the merged ranges would overlap); a row copying a
    block onto itself in one buffer is dropped.

    Args:
        block_mapping: ``[N, 2]`` integers (src block, dst block); Tensor, numpy array or nested list.
        src_blocks / dst_blocks (int): number of blocks of the source / destination.
        same_buffer (bool): source and destination are the same memory.

    Returns:
        (runs, order_free): ``runs`` is a list of ``(src_block, dst_block, n_blocks)`` in row order;
        ``order_free`` is True when the runs may execute in any order with the same result (no
        destination written twice, and in one buffer no block both read and written), which is what an
        unordered batch copy needs.

    Raises:
        ValueError: wrong shape or dtype, or a block id out of range.
    """
    import numpy as np

    m = block_mapping
    if hasattr(m, "asnumpy"):
        m = m.asnumpy()
    m = np.asarray(m)
    if m.size == 0:
        return [], True
    if m.ndim != 2 or m.shape[1] != 2 or m.dtype.kind not in "iu":
        raise ValueError(f"swap_blocks: argument 'block_mapping': expected integer shape [N, 2], got "
                         f"{m.dtype} {tuple(m.shape)}")
    m = m.astype(np.int64)
    for col, name, limit in ((0, "source", src_blocks), (1, "destination", dst_blocks)):
        bad = np.nonzero((m[:, col] < 0) | (m[:, col] >= limit))[0]
        if bad.size:
            raise ValueError(f"swap_blocks: argument 'block_mapping': expected {name} block ids in [0, {limit}), "
                             f"got {int(m[bad[0], col])} at row {int(bad[0])}")
    rows = m.tolist()
    if same_buffer:
        rows = [(s, d) for s, d in rows if s != d]
        if not rows:
            return [], True
    runs = []
    s0, d0 = rows[0]
    n = 1
    for s, d in rows[1:]:
        grow = s == s0 + n and d == d0 + n
        if grow and same_buffer and not (s0 + n + 1 <= d0 or d0 + n + 1 <= s0):
            grow = False  # merged ranges would overlap inside one buffer: keep row order exact
        if grow:
            n += 1
        else:
            runs.append((s0, d0, n))
            s0, d0, n = s, d, 1
    runs.append((s0, d0, n))
    dsts = [d for _, d in rows]
    order_free = len(set(dsts)) == len(dsts)
    if order_free and same_buffer:
        order_free = not ({s for s, _ in rows} & set(dsts))
    return runs, order_free


def _copy_runs(acl, runs, *, src_ptr, src_bytes, dst_ptr, dst_bytes, block_bytes, kind, stream,
               src_loc, dst_loc, use_batch):
    """Issue the copies of ``runs`` (see :func:`plan_block_copies`), in order unless ``use_batch``.

    stream None: synchronous ``aclrtMemcpy`` per run. ``use_batch`` (only for order-free runs): one
    ``aclrtMemcpyBatchAsync``. Otherwise one ``aclrtMemcpyAsync`` per run on ``stream`` (a stream runs
    its copies in issue order). Returns the number of ACL copy calls.
    """
    copies = []
    for s, d, n in runs:
        so, do, nb = s * block_bytes, d * block_bytes, n * block_bytes
        if so + nb > src_bytes or do + nb > dst_bytes:  # plan_block_copies checked ids; keep a hard stop
            raise ValueError(f"swap_blocks: copy of {nb} bytes at src+{so} / dst+{do} exceeds the buffers "
                             f"({src_bytes} / {dst_bytes} bytes)")
        copies.append((dst_ptr + do, dst_bytes - do, src_ptr + so, nb))
    if not copies:
        return 0
    if stream is None:
        for dst, dmax, src, nb in copies:
            acl.memcpy(dst, dmax, src, nb, kind)
        return len(copies)
    if use_batch and len(copies) > 1:
        dsts, dmaxs, srcs, sizes = zip(*copies)
        acl.memcpy_batch_async(list(dsts), list(dmaxs), list(srcs), list(sizes), dst_loc, src_loc, stream)
        return 1
    for dst, dmax, src, nb in copies:
        acl.memcpy_async(dst, dmax, src, nb, kind, stream)
    return len(copies)


def _is_device_tensor(t):
    dev = str(getattr(t, "device", "CPU"))
    return dev.lower().startswith(("ascend", "npu"))


def _current_stream_ptr():
    """Raw aclrtStream of MindSpore's current stream, or None when MindSpore does not expose it."""
    try:
        import mindspore as ms

        s = ms.runtime.current_stream()
        sp = getattr(s, "stream_ptr", None)
        sp = sp() if callable(sp) else sp
        return int(sp) if sp else None
    except Exception:
        return None


def swap_blocks(src_cache, dst_cache, block_mapping):
    """Backend implementation of :func:`ms_kvcache.swap_blocks` on Ascend: whole-block copies with the
    ACL runtime, not a kernel (vLLM's ``swap_blocks``). Called by the public op in PyNative after its
    checks; ``dst_cache[d] = src_cache[s]`` for every row ``(s, d)`` of ``block_mapping``, in row order.

    Host <-> device and device -> device copies are queued on MindSpore's current stream, so later ops
    on that stream see them: one ``aclrtMemcpyBatchAsync`` for the whole mapping where the CANN runtime
    exports it (documented from CANN 8.3.RC1, experimental, A2/A3), the device is A2/A3 and the rows are
    order-free (no destination twice, no block both read and written); else one ``aclrtMemcpyAsync``
    per run of consecutive blocks, in row order. A host destination is synchronised before returning.
    A pageable (not pinned) host cache, or a MindSpore that does not expose its raw stream, makes the
    call synchronous (``ms.runtime.synchronize()``, then ``aclrtMemcpy`` per run).

    Args:
        src_cache (Tensor): ``[src_blocks, ...]`` on host or device, contiguous.
        dst_cache (Tensor): ``[dst_blocks, ...]`` same dtype and block shape, contiguous; written in place.
        block_mapping (Tensor | numpy.ndarray | list): ``[N, 2]`` int32/int64 rows ``(src, dst)``.

    Raises:
        ValueError: block shapes / dtypes differ or a block id is out of range.
        RuntimeError: CANN runtime missing (``CannNotFoundError``) or an ACL call failed (``AclError``).

    Not run on hardware (no NPU here); the copy planning and the ctypes calls are tested against a
    stand-in runtime library on the host.
    """
    import numpy as np

    src, dst = src_cache, dst_cache
    if tuple(src.shape[1:]) != tuple(dst.shape[1:]) or src.dtype != dst.dtype:
        raise ValueError(f"swap_blocks: argument 'dst_cache': expected blocks of shape {tuple(src.shape[1:])} and "
                         f"dtype {src.dtype} (as 'src_cache'), got {tuple(dst.shape[1:])} {dst.dtype}")
    src_ptr, dst_ptr = int(src.data_ptr()), int(dst.data_ptr())
    runs, order_free = plan_block_copies(block_mapping, int(src.shape[0]), int(dst.shape[0]),
                                         same_buffer=src_ptr == dst_ptr)
    if not runs:
        return None
    block_bytes = int(np.prod(src.shape[1:], dtype=np.int64)) * _itemsize(src)
    src_dev, dst_dev = _is_device_tensor(src), _is_device_tensor(dst)
    kind = {(False, False): _acl.MEMCPY_HOST_TO_HOST, (False, True): _acl.MEMCPY_HOST_TO_DEVICE,
            (True, False): _acl.MEMCPY_DEVICE_TO_HOST, (True, True): _acl.MEMCPY_DEVICE_TO_DEVICE}[(src_dev, dst_dev)]
    acl = _acl.load()
    import mindspore as ms

    device_id = int(ms.get_context("device_id") or 0)
    if src_dev or dst_dev:
        acl.ensure_context(device_id)
    host_pageable = any(not d and not _is_pinned(t) for t, d in ((src, src_dev), (dst, dst_dev)))
    stream = None if host_pageable else _current_stream_ptr()
    if stream is None:
        ms.runtime.synchronize()
    loc = lambda dev: (_acl.MEM_LOCATION_DEVICE, device_id) if dev else (_acl.MEM_LOCATION_HOST, 0)  # noqa: E731
    use_batch = order_free and acl.has_batch and compute_unit(current_soc()) in ("ascend910b", "ascend910_93")
    _copy_runs(acl, runs, src_ptr=src_ptr, src_bytes=int(src.shape[0]) * block_bytes, dst_ptr=dst_ptr,
               dst_bytes=int(dst.shape[0]) * block_bytes, block_bytes=block_bytes, kind=kind, stream=stream,
               src_loc=loc(src_dev), dst_loc=loc(dst_dev), use_batch=use_batch)
    if stream is not None and not dst_dev:
        acl.synchronize_stream(stream)
    return None


def _itemsize(t):
    from ms_kvcache._spec import dtype_name

    sizes = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
             "int32": 4, "int64": 8, "bool": 1}
    name = dtype_name(t.dtype)
    if name not in sizes:
        raise ValueError(f"swap_blocks: argument 'src': unsupported dtype {name}")
    return sizes[name]


def _is_pinned(t):
    f = getattr(t, "is_pinned", None)
    try:
        return bool(f()) if callable(f) else False
    except Exception:
        return False


_prepend_wheel_vendor()
