"""The "ascend" backend: the ops of the CANN custom-op package ``ms_kvcache`` (built from op_kernel/,
op_host/, op_proto/ by ``scripts/build_opp.sh``), called through MindSpore's
``ops.Custom("<OpType>", ..., func_type="aot", reg_info=...)`` on an Ascend NPU.

Nothing in this module was run on Ascend hardware: it follows the documented conventions of CANN 8.x
(vendor folder layout, ``ASCEND_CUSTOM_OPP_PATH``, ``vendors/config.ini``, aclnn two-phase API, ACL
runtime memcpy) and of MindSpore 2.10 (``ops.Custom`` aot on Ascend with a ``CustomRegOp``).

Finding the package (first hit wins, see :func:`find_vendor`):

1. every entry of ``ASCEND_CUSTOM_OPP_PATH`` that is the package's vendor folder itself (named
   ``ms_kvcache`` or holding its ``op_api/include/aclnn_mskv_*.h``): the variable lists vendor folders
   ``<path>/vendors/<vendor>`` (what ``<path>/vendors/ms_kvcache/bin/set_env.bash`` prepends after
   ``custom_opp_<os>_<arch>.run --install-path=<path>``), and CANN's runtime and MindSpore read each
   entry as one (``<entry>/op_api/include``, ``<entry>/op_impl/...``), so an install root ``<path>`` in
   the variable is not a package they load: it is reported, not accepted. The folder
   ``ms_kvcache/opp/vendors/ms_kvcache`` shipped inside the wheel is prepended to that variable when
   this module is imported, as ms_custom_ops does with its own vendor folder;
2. ``$ASCEND_OPP_PATH/vendors/ms_kvcache`` when ``$ASCEND_OPP_PATH/vendors/config.ini`` lists it in
   ``load_priority`` (default install of the .run package).

Other hooks kept here for the op families that need the NPU runtime directly: :func:`swap_blocks`
(host <-> device block copies are ACL runtime memcpys, not a kernel) and
:func:`register_host_memory` (``aclrtHostRegister``, for pinned host KV buffers).
"""
import collections
import os
from pathlib import Path

from ms_kvcache._backends import _acl

__all__ = [
    "VENDOR_NAME", "COMPUTE_UNITS", "WHEEL_VENDOR_DIR", "available", "aot_func", "reg_info",
    "find_vendor", "VendorPackage", "PackageNotFoundError", "compute_unit", "current_soc",
    "swap_blocks", "register_host_memory", "unregister_host_memory", "plan_block_copies", "batch_copy_allowed",
    "pyboost_status", "pynative_launcher", "host_memory_mode", "host_arg", "nnopbase_path", "HOST_SIDE_INPUTS",
    "check_jit_level", "infer_guard", "report",
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
        if p.is_dir() and (p.name == VENDOR_NAME or VendorPackage(p, "").ops()):
            src = "wheel" if str(p) == wheel else "ASCEND_CUSTOM_OPP_PATH"
            return VendorPackage(p, src), notes
        if (p / "vendors" / VENDOR_NAME).is_dir():
            # CANN's runtime and MindSpore (CustomInfoGenerator) read every entry as a vendor folder
            # (<entry>/op_api/include, <entry>/op_impl/...): an install root is not searched below
            notes.append(f"ASCEND_CUSTOM_OPP_PATH entry {p} is an install root, not a vendor folder; CANN and "
                         f"MindSpore only read vendor folders there: use {p / 'vendors' / VENDOR_NAME}")
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
    if soc is None:  # every targeted SoC's rows, once each (a dtype no SoC has, e.g. float8, has no row)
        from ms_kvcache._spec import SOCS

        rows = list(dict.fromkeys(r for s in SOCS for r in spec.dtype_rows(s)))
    else:
        rows = spec.dtype_rows(soc)
    for row in rows:
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
    from ms_kvcache._spec import kernel_pending

    if kernel_pending(spec):
        raise NotImplementedError(f"ascend backend: op {spec.name} ({spec.op_type}) has no AscendC kernel yet "
                                  f"({kernel_pending(spec)}); use ms_kvcache.set_backend('cpu')")
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
        try:
            acl.memcpy_batch_async(list(dsts), list(dmaxs), list(srcs), list(sizes), dst_loc, src_loc, stream)
            return 1
        except _acl.AclError as exc:
            if exc.code != _acl.ERROR_RT_FEATURE_NOT_SUPPORT:
                raise
            # this runtime / device rejects the batch for these locations: nothing was queued, copy one by one
    for dst, dmax, src, nb in copies:
        acl.memcpy_async(dst, dmax, src, nb, kind, stream)
    return len(copies)


def batch_copy_allowed(kind, order_free, has_batch, soc):
    """Whether ``swap_blocks`` may issue its copies as one ``aclrtMemcpyBatchAsync``.

    Only for host <-> device copies (``kind`` H2D or D2H), as vllm-ascend's ``swap_blocks_batch`` does
    (vllm-project/vllm-ascend ``csrc/torch_binding.cpp``: the batch path is skipped for
    ``ACL_MEMCPY_DEVICE_TO_DEVICE``); device-to-device batches are reported to fail with
    ``ACL_ERROR_RT_FEATURE_NOT_SUPPORT`` (207000), and Mooncake's Ascend transport falls back to
    ``aclrtMemcpyAsync`` on that code (kvcache-ai/Mooncake pull request 963). Also needs order-free rows
    (see :func:`plan_block_copies`), a runtime that exports the call (CANN >= 8.3) and an A2/A3 SoC (the
    products it is documented for).
    """
    return (kind in (_acl.MEMCPY_HOST_TO_DEVICE, _acl.MEMCPY_DEVICE_TO_HOST) and bool(order_free) and bool(has_batch)
            and compute_unit(soc) in ("ascend910b", "ascend910_93"))


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
    on that stream see them. Host <-> device: one ``aclrtMemcpyBatchAsync`` for the whole mapping where
    the CANN runtime exports it (documented from CANN 8.3.RC1, experimental, A2/A3), the device is A2/A3
    and the rows are order-free (no destination twice, no block both read and written); a batch the
    runtime rejects with ``ACL_ERROR_RT_FEATURE_NOT_SUPPORT`` is redone copy by copy. Device -> device,
    and every other case: one ``aclrtMemcpyAsync`` per run of consecutive blocks, in row order (see
    :func:`batch_copy_allowed` for why device-to-device copies are never batched). A host destination is synchronised before returning.
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
    use_batch = batch_copy_allowed(kind, order_free, acl.has_batch, current_soc())
    _copy_runs(acl, runs, src_ptr=src_ptr, src_bytes=int(src.shape[0]) * block_bytes, dst_ptr=dst_ptr,
               dst_bytes=int(dst.shape[0]) * block_bytes, block_bytes=block_bytes, kind=kind, stream=stream,
               src_loc=loc(src_dev), dst_loc=loc(dst_dev), use_batch=use_batch)
    if stream is not None and not dst_dev:
        acl.synchronize_stream(stream)
    return None


def _itemsize(t):
    from ms_kvcache._spec import DTYPE_BYTES, dtype_name

    name = dtype_name(t.dtype)
    if name not in DTYPE_BYTES:
        raise ValueError(f"swap_blocks: argument 'src': unsupported dtype {name}")
    return DTYPE_BYTES[name]


def _is_pinned(t):
    """Page-locked host memory the runtime knows: MindSpore's pinned tensors, and memory registered with
    aclrtHostRegister (alloc_host_buffer on the ascend backend), with which aclrtMemcpyAsync is asynchronous."""
    f = getattr(t, "is_pinned", None)
    try:
        if callable(f) and f():
            return True
    except Exception:  # noqa: BLE001 - a MindSpore without is_pinned
        pass
    try:
        from ms_kvcache import _host_memory
        from ms_kvcache._spec import tensor_nbytes

        return _host_memory.mapped_address(int(t.data_ptr()), tensor_nbytes(t)) is not None
    except Exception:  # noqa: BLE001
        return False


_prepend_wheel_vendor()


# ---------------------------------------------------------------------------------------- PyNative (pyboost)
#: ``0`` turns the PyNative aclnn module off (PyNative calls then compile a jit graph per shape).
PYBOOST_ENV = "MS_KVCACHE_ASCEND_PYBOOST"
#: ``auto`` (default), ``zero_copy`` or ``staged``: how host-memory arguments reach the kernels.
HOST_MEMORY_ENV = "MS_KVCACHE_HOST_MEMORY"
HOST_MEMORY_MODES = ("auto", "zero_copy", "staged")
#: Inputs that live in host memory in the intended use (the transfer ops' host side) and that the
#: kernel writes completely in d2h (so a staged d2h need not copy them in first).
HOST_SIDE_INPUTS = {"multi_layer_kv_transfer": ("buffer",), "multi_layer_block_transfer": ("host_blocks",)}
#: Host tensors a PyNative launch refers to by address stay referenced here until the next
#: :func:`ms_kvcache.synchronize` (or until this many later host launches), so that memory a queued
#: kernel or copy still uses is not freed under it. Memory from alloc_host_buffer is also protected by
#: a device synchronisation before it is unregistered and unmapped.
_INFLIGHT = collections.deque(maxlen=4096)
_PYBOOST = {"module": None, "why": None, "runtime": None}


def host_memory_mode(env=None):
    """The host-memory mode in force (``$MS_KVCACHE_HOST_MEMORY``, default ``auto``).

    - ``auto``: zero-copy for host memory registered with ``aclrtHostRegister`` (what
      :func:`ms_kvcache.alloc_host_buffer` returns on the ascend backend), staged for other host memory;
    - ``zero_copy``: registered host memory only (other host memory raises ValueError);
    - ``staged``: always through a device staging tensor and ``aclrtMemcpyAsync``.

    Raises:
        ValueError: an unknown value.
    """
    env = os.environ if env is None else env
    mode = (env.get(HOST_MEMORY_ENV) or "auto").strip().lower()
    if mode not in HOST_MEMORY_MODES:
        raise ValueError(f"${HOST_MEMORY_ENV}: expected one of {HOST_MEMORY_MODES}, got {mode!r}")
    return mode


def nnopbase_path(env=None):
    """Path of CANN's libnnopbase.so (aclCreateTensor & co.): ``$MS_KVCACHE_LIBNNOPBASE`` (tests), else
    ``lib64/libnnopbase.so`` under ``$ASCEND_HOME_PATH`` / ``$ASCEND_TOOLKIT_HOME``, else the bare name
    (found through ``LD_LIBRARY_PATH`` after ``source set_env.sh``)."""
    env = os.environ if env is None else env
    if env.get("MS_KVCACHE_LIBNNOPBASE"):
        return env["MS_KVCACHE_LIBNNOPBASE"]
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if env.get(var):
            p = Path(env[var]) / "lib64" / "libnnopbase.so"
            if p.exists():
                return str(p)
    return "libnnopbase.so"


def _pyboost_module():
    """ms_kvcache._ascend_pyboost if importable and built for the running MindSpore, else None
    (reason in ``_PYBOOST["why"]``)."""
    if _PYBOOST["module"] is None and _PYBOOST["why"] is None:
        try:
            from ms_kvcache import _ascend_pyboost as mod  # noqa: WPS433 - optional compiled extension
        except ImportError as exc:
            _PYBOOST["why"] = f"ms_kvcache._ascend_pyboost is not built ({exc})"
        else:
            import mindspore as ms

            if mod.mindspore_version != ms.__version__:
                _PYBOOST["why"] = (f"ms_kvcache._ascend_pyboost was built for MindSpore {mod.mindspore_version}, "
                                   f"running {ms.__version__}; reinstall ms_kvcache")
            else:
                _PYBOOST["module"] = mod
    return _PYBOOST["module"]


def _pyboost_runtime(mod):
    """Load libnnopbase / libascendcl into the module once; returns None or raises with the reason."""
    if _PYBOOST["runtime"] is None:
        acl = _acl.load()
        mod.init(nnopbase_path(), acl.path)
        _PYBOOST["runtime"] = (nnopbase_path(), acl.path)
    return _PYBOOST["runtime"]


def pyboost_status(spec=None):
    """``(ok, why)``: whether PyNative calls (of ``spec``, or of any op) on the ascend backend use the aclnn
    module ``ms_kvcache._ascend_pyboost`` (no graph compile per shape) instead of a jit graph.

    Needs: the module built for the running MindSpore (``scripts/dev_build.sh`` / the wheel build, like
    the cpu fast path), the fast path not disabled (``MS_KVCACHE_PYNATIVE_FAST=0``, ``set_fast_path``,
    ``$MS_KVCACHE_ASCEND_PYBOOST=0``), the CANN package with ``op_api/lib/libcust_opapi.so``, and the
    CANN runtime libraries (libascendcl.so, libnnopbase.so). For ``spec``: the module has a shim for the
    op's aclnn prototype (:func:`ms_kvcache._aclnn.signature`).
    """
    from ms_kvcache import _aclnn, _custom

    if os.environ.get(PYBOOST_ENV, "1") == "0":
        return False, f"disabled (${PYBOOST_ENV}=0)"
    if not _custom._FAST["enabled"]:  # noqa: WPS437 - the package's own switch
        return False, "disabled (MS_KVCACHE_PYNATIVE_FAST=0 or set_fast_path(False))"
    mod = _pyboost_module()
    if mod is None:
        return False, _PYBOOST["why"]
    pkg, notes = find_vendor()
    if pkg is None:
        return False, _missing_package_message(notes)
    if not pkg.opapi_library().is_file():
        return False, f"the CANN package at {pkg.path} has no {pkg.opapi_library().relative_to(pkg.path)}"
    try:
        _pyboost_runtime(mod)
    except (RuntimeError, OSError) as exc:
        return False, f"CANN runtime libraries not usable by ms_kvcache._ascend_pyboost: {exc}"
    if spec is not None:
        compiled = dict(mod.ops())
        want = _aclnn.signature(spec)
        if compiled.get(spec.op_type) != want:
            return False, (f"ms_kvcache._ascend_pyboost has no shim for {spec.op_type} with prototype {want} "
                           f"(built with {compiled.get(spec.op_type)}); rebuild ms_kvcache")
    return True, ""


def _plan(spec, attr_values, counts):
    """The module's per-parameter plan (prototype order), the flat input count and the output sources."""
    from ms_kvcache import _custom

    attrs = spec.kernel_attrs(spec.attr_values(attr_values))  # coded names as their ints (AttrSpec.codes)
    it = iter(spec.counts(counts)) if spec.has_dynamic else iter(())
    plan, j = [], 0
    for t in spec.inputs:
        if t.dynamic:
            n = next(it)
            plan.append(("L", j, n))
            j += n
        else:
            plan.append(("T", j, bool(t.optional)))
            j += 1
    kinds = {"str": "s", "int": "i", "bool": "b", "float": "d"}
    for a in spec.attrs:
        v = attrs[a.name]
        k = kinds[a.kernel_type]
        plan.append((k, {"s": str, "i": int, "b": bool, "d": float}[k](v)))
    out_like = list(_custom.output_sources(spec, counts))
    if out_like:
        plan += [("O", k) for k in range(len(out_like))]
    else:
        plan.append(("O", -1))  # the int32 [1] status, allocated by the module
    return plan, j, out_like


def _host_slots(spec, attr_values, counts):
    """(flat index, display name, written, written completely) of every input a host tensor may be
    given for: the inputs this call writes and the op's host-side inputs."""
    attrs = spec.attr_values(attr_values)
    written = set(spec.written_inputs(attrs))
    host_side = set(HOST_SIDE_INPUTS.get(spec.name, ()))
    it = iter(spec.counts(counts)) if spec.has_dynamic else iter(())
    out, j = [], 0
    for t in spec.inputs:
        n = next(it) if t.dynamic else 1
        if t.name in written or t.name in host_side:
            for k in range(n):
                name = f"{t.name}[{k}]" if t.dynamic else t.name
                out.append((j + k, name, t.name in written, t.name in host_side))
        j += n
    return tuple(out)


def _is_host_tensor(t):
    """True for a Tensor whose memory is host memory while MindSpore runs on Ascend (it would copy such a
    tensor to the device for a kernel, and a write would land in the copy)."""
    return _device_target() == "Ascend" and not _is_device_tensor(t)


def _data_address(t):
    """Address of the first byte of a host tensor, without waiting for MindSpore's pipeline when possible."""
    try:
        from ms_kvcache import _cpu_pyboost  # noqa: WPS433 - optional

        addr = _cpu_pyboost.data_address_nosync(t)
        if addr is not None:
            return int(addr)
    except ImportError:
        pass
    return int(t.data_ptr())


def host_arg(mod, op, name, t, copy_in, copy_out, mode=None):
    """The module's HostArg for host tensor ``t`` (argument ``name`` of ``op``): zero-copy with the mapped
    device address when the memory is registered (and ``mode`` allows), else staged.

    Raises:
        ValueError: ``t`` not contiguous; ``mode == "zero_copy"`` and ``t`` not in registered memory.
    """
    from ms_kvcache import _host_memory
    from ms_kvcache._spec import dtype_name, tensor_nbytes

    mode = host_memory_mode() if mode is None else mode
    if not t.is_contiguous():
        raise ValueError(f"{op}: argument '{name}': expected a contiguous host tensor, got strides {t.stride()}")
    addr = _data_address(t)
    nbytes = tensor_nbytes(t)
    mapped = _host_memory.mapped_address(addr, nbytes)
    if mode == "zero_copy" and mapped is None:
        raise ValueError(f"{op}: argument '{name}': expected host memory registered for device access "
                         f"(ms_kvcache.alloc_host_buffer on the ascend backend) because ${HOST_MEMORY_ENV}=zero_copy, "
                         f"got an unregistered host tensor at {addr:#x}")
    dev = mapped if (mapped is not None and mode != "staged") else 0
    _INFLIGHT.append(t)
    return mod.HostArg(addr, dev, [int(d) for d in t.shape], dtype_name(t.dtype), nbytes, bool(copy_in),
                       bool(copy_out))


def pynative_launcher(spec, attr_values, counts, fallback):
    """``f(*flat_tensors)`` for PyNative calls of ``spec`` on the ascend backend (called by
    ``_custom.eager_launcher``, result cached per op / attributes / counts).

    With the aclnn module (:func:`pyboost_status`): one asynchronous two-stage aclnn launch in MindSpore's
    PyNative pipeline, no graph compile; host tensors the op writes, and the transfer ops' host side
    (:data:`HOST_SIDE_INPUTS`), become HostArgs (:func:`host_arg`). Without it: ``fallback()`` (the
    ``ms.jit`` launcher of the ops.Custom primitive), refusing a host tensor the op would write, which
    MindSpore would copy to the device and whose write would be lost.
    """
    from ms_kvcache import _aclnn, _custom

    slots = _host_slots(spec, attr_values, counts)
    ok, why = pyboost_status(spec)
    if not ok:
        launch = fallback()

        def guarded(*flat):
            for j, name, written, _ in slots:
                if written and _is_host_tensor(flat[j]):
                    raise RuntimeError(
                        f"{spec.name}: argument '{name}' is host memory the op would write, but without the "
                        f"PyNative aclnn module MindSpore copies it to the device and the write would be lost "
                        f"({why}). Build ms_kvcache with its Ascend PyNative module, or pass a device tensor")
            return launch(*flat)

        guarded.ascend_path = "jit"
        guarded.ascend_why = why
        return guarded
    mod = _pyboost_module()
    plan, n_flat, out_like = _plan(spec, attr_values, counts)
    kernel = mod.kernel(str(require_vendor().opapi_library()), spec.op_type, _aclnn.signature(spec), plan, n_flat,
                        out_like)
    run = mod.run
    op = spec.name

    def launch(*flat):
        args = list(flat)
        for j, name, written, complete in slots:
            t = args[j]
            if _is_host_tensor(t):
                args[j] = host_arg(mod, op, name, t, copy_in=not (written and complete), copy_out=written)
        return run(kernel, *args)

    f = _custom._serialised(launch)  # noqa: WPS437 - one submission at a time, as the cpu fast path
    f.ascend_path = "pyboost"
    return f


# ---------------------------------------------------------------------------------------- graph jit level
def _graph_jit_config():
    """(jit_level, backend) of the graph MindSpore is compiling: the per-graph config MindSpore hands its
    compiler (``JitExecutor_.get_jit_config()``: a Cell's ``set_jit_config``, ``ms.jit(jit_level=, backend=)``),
    with the global ``set_context(jit_config=...)`` level where the graph sets none."""
    level, backend = "", ""
    try:
        from mindspore._c_expression import JitExecutor_  # noqa: WPS433 - MindSpore internals, 2.10

        cfg = JitExecutor_.get_instance().get_jit_config() or {}
        level, backend = str(cfg.get("jit_level", "") or ""), str(cfg.get("backend", "") or "")
    except (ImportError, AttributeError, RuntimeError):
        pass
    if not level:
        try:
            import mindspore as ms

            level = str((ms.get_context("jit_config") or {}).get("jit_level", "") or "")
        except Exception:  # noqa: BLE001 - context key absent in this MindSpore
            level = ""
    return level, backend


def check_jit_level(op):
    """Refuse a graph compiled for GE (``jit_level="O2"`` / ``backend="GE"``) at compile time.

    The ascend primitives take the attribute values as trailing scalar inputs and write the caches through
    input addresses (docs/design.md, "In-place ops in CANN OpDefs"): that is what MindSpore's kernel-by-
    kernel runtime (jit_level O0 / O1, ``CustomV2AclnnKernelMod``) calls. GE (O2) takes Tensor inputs only,
    reads attributes from the op's GE attributes and knows a written input only as an input and an output
    of the same name; our OpDefs declare neither, so GE would fail late or write an untracked copy.

    Raises:
        RuntimeError: the graph being compiled uses jit_level O2 / the GE backend.
    """
    level, backend = _graph_jit_config()
    if level == "O2" or backend.upper() == "GE":
        raise RuntimeError(
            f"{op}: GRAPH_MODE with jit_level='O2' (the GE backend) is not supported on the ascend backend "
            f"(jit_level={level or 'default'!r}, backend={backend or 'default'!r}): the ops need MindSpore's "
            f"kernel-by-kernel runtime. Compile with jit_level='O0' or 'O1': set_context(jit_config="
            f"{{'jit_level': 'O0'}}), Cell.set_jit_config(JitConfig(jit_level='O0')) or "
            f"@ms.jit(backend='ms_backend'); see docs/ascend.md, 'Graph mode and jit levels'")


def infer_guard(spec, infer):
    """``infer`` (the primitive's shape infer function) preceded by :func:`check_jit_level`; MindSpore runs
    it while it compiles a graph, before any GE lowering."""
    if not callable(infer):
        return infer

    def guarded(*shapes):
        check_jit_level(spec.name)
        return infer(*shapes)
    return guarded


# ---------------------------------------------------------------------------------------- report
def report():
    """What the ascend backend will use on this machine, and why (``ms-kvcache info``).

    Returns:
        dict: ``device_target``; ``backend``: ``{"available", "why"}`` (:func:`available`); ``pynative``: ``{"path": "pyboost" | "jit", "why": ...}`` (pyboost =
        ms_kvcache._ascend_pyboost, one aclnn launch per call; jit = a graph compiled per input shape);
        ``module``: the module's build (MindSpore version, shims checked against CANN headers);
        ``host_memory``: ``{"mode": $MS_KVCACHE_HOST_MEMORY, "effective": "zero_copy" | "staged" |
        "unavailable", "why": ...}`` for host buffers from alloc_host_buffer in PyNative;
        ``graph_mode``: the jit levels the ops run under.
    """
    out = {"device_target": _device_target()}
    avail, why_not = available()
    out["backend"] = {"available": avail, "why": why_not or "Ascend device and the CANN package found"}
    ok, why = pyboost_status()
    out["pynative"] = {"path": "pyboost" if ok else "jit",
                       "why": ("aclnn launches through MindSpore's PyboostRunner (ms_kvcache._ascend_pyboost): "
                               "no graph compile per input shape") if ok else
                       f"{why}; PyNative calls compile the ops.Custom primitive in a jit graph per input shape"}
    mod = _pyboost_module()
    out["module"] = ({"built": True, "mindspore_version": mod.mindspore_version,
                      "checked_against_cann_headers": bool(mod.checked_against_headers),
                      "ops": len(mod.ops())} if mod is not None else {"built": False, "why": _PYBOOST["why"]})
    try:
        mode = host_memory_mode()
    except ValueError as exc:
        out["host_memory"] = {"mode": os.environ.get(HOST_MEMORY_ENV), "effective": "unavailable", "why": str(exc)}
        mode = None
    if mode is not None:
        out["host_memory"] = _host_memory_report(mode, ok)
    out["graph_mode"] = ("jit_level O0 / O1 (MindSpore's kernel-by-kernel runtime, CustomV2AclnnKernelMod); "
                         "O2 (GE) is refused at compile time")
    return out


def _host_memory_report(mode, pyboost_ok):
    from ms_kvcache import _host_memory

    res = {"mode": mode}
    if not pyboost_ok:
        res.update(effective="unavailable", why="PyNative host transfers need ms_kvcache._ascend_pyboost (see "
                   "'pynative'); without it an op that writes a host tensor raises instead of losing the data")
        return res
    if mode == "staged":
        res.update(effective="staged", why=f"${HOST_MEMORY_ENV}=staged: a device staging tensor and aclrtMemcpyAsync "
                   "on MindSpore's current stream, before (h2d) / after (d2h) the kernel")
        return res
    try:
        acl = _acl.load()
    except _acl.CannNotFoundError as exc:
        res.update(effective="unavailable", why=str(exc))
        return res
    if not acl.has_host_register:
        res.update(effective="staged" if mode == "auto" else "unavailable",
                   why="aclrtHostRegister is not exported by this CANN (needs CANN >= 8.1.RC1): alloc_host_buffer "
                       "cannot map its pages for the device"
                       + ("; host buffers go through a device staging tensor" if mode == "auto" else
                          f"; ${HOST_MEMORY_ENV}=zero_copy then refuses every host tensor"))
        return res
    fallback = _host_memory.REGISTER_FALLBACK["why"]
    if fallback:
        res.update(effective="staged" if mode == "auto" else "unavailable",
                   why=f"aclrtHostRegister failed for the last alloc_host_buffer ({fallback}); such buffers are staged")
        return res
    res.update(effective="zero_copy", why="alloc_host_buffer registers its pages (aclrtHostRegister, MAPPED) and "
               "kernels get the mapped device address; other host tensors are staged"
               + ("" if mode == "auto" else " - no: zero_copy mode refuses them"))
    return res


# ---------------------------------------------------------------------------------------- layer-wise transfer
def layerwise_engine(plan):
    """The engine :class:`ms_kvcache.LayerwiseTransfer` uses on this backend: a MindSpore side stream with one event
    per layer (:mod:`ms_kvcache._backends.ascend_layerwise`; not run on hardware)."""
    from ms_kvcache._backends import ascend_layerwise

    return ascend_layerwise.LayerwiseEngine(plan)
