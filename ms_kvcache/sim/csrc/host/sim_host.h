// Host side of the AscendC CPU emulation: the C++ interface between the emulated CANN host API
// (OpDef registry, tiling / infer-shape contexts, platform table; headers under sim/include/) and the
// rest of the emulation (runner, pybind11 module `_sim`, sim backend).
//
// Everything here runs the op's *own* registered functions (op_host tiling, op_proto infer shape /
// data type) exactly as CANN would call them, and rejects what a real CANN would reject at that
// point (see docs/emulation.md, "host side").
//
// dtype strings are the canonical names: "float16", "bfloat16", "float32", "float64", "int8",
// "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool".
// format strings: "ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_NZ", ... (ge::Format names without FORMAT_).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace pybind11 { class module_; }

namespace simhost {

// ------------------------------------------------------------------------------------ errors
// Thrown by every host-side check. rule: short stable identifier (e.g. "tiling.failed",
// "tiling.block_dim", "opdef.dtype_row"); op: OpDef type; message: full human-readable text that
// already names the rule, the op and the offending values (what() returns it).
struct HostError : std::runtime_error {
  std::string rule, op;
  HostError(std::string rule_, std::string op_, const std::string& message)
      : std::runtime_error(message), rule(std::move(rule_)), op(std::move(op_)) {}
};

// ------------------------------------------------------------------------------------ tensors / attrs
struct TensorDesc {
  std::vector<int64_t> shape;
  std::string dtype;           // canonical dtype name
  std::string format = "ND";   // ge::Format name without "FORMAT_"
  bool present = true;         // false: an absent OPTIONAL input
};

// bool, int, float, string, list of int, list of float (CANN's Bool/Int/Float/String/ListInt/ListFloat)
using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

// ------------------------------------------------------------------------------------ platform
struct Platform {
  std::string soc;          // CANN SoC version name, e.g. "Ascend910B1"
  std::string short_soc;    // OpDef AddConfig key of the SoC family, e.g. "ascend910b", "ascend910_93"
  std::string short_soc_version;  // platform ini [version] Short_SoC_version, e.g. "Ascend910B"
  uint32_t npu_arch = 0;        // ini NpuArch (2201 = A2/A3, 2002 = 310P)
  uint32_t aiv_cores = 0;       // GetCoreNumAiv(): vector cores; on coupled 310P the AI core count
  uint32_t aic_cores = 0;       // GetCoreNumAic(): cube cores; on coupled 310P the AI core count
  uint32_t ai_core_cnt = 0;     // ini [SoCInfo] ai_core_cnt
  uint32_t vector_core_cnt = 0; // ini [SoCInfo] vector_core_cnt (310P: the separate vector cores)
  uint64_t ub_size = 0;         // physical unified buffer bytes per core (ini ub_size); GetCoreMemSize(UB)
                                // returns ub_size - ub_kfc_reserved
  uint64_t l1_size = 0;         // L1 bytes per AI core
  uint64_t l0a_size = 0, l0b_size = 0, l0c_size = 0;
  uint64_t l2_size = 0;         // on-chip L2 cache bytes
  uint64_t hbm_size = 0;        // device memory bytes (informative)
  bool has_datacopy_pad = false;    // DataCopyPad available
  bool has_bf16 = false;            // bfloat16 vector/cast support
  bool split_core = false;          // AIC/AIV separated (A2/A3); false = coupled AI cores (310P)
  uint64_t ub_kfc_reserved = 0; // bytes GetCoreMemSize(UB/L1) holds back on ASCEND910B-class SoCs (256)
  uint64_t sys_workspace_size = 0;  // GetLibApiWorkSpaceSize(): 16 MiB on NpuArch 2201, else 2 MiB
  std::string source;       // where the numbers come from
  std::string unverified;   // fields whose value is not backed by a cited source ("" if none)
};
// soc: full name ("Ascend910B1") or, for convenience, case-insensitive. Throws HostError
// (rule "platform.unknown_soc") for an unknown SoC.
const Platform& GetPlatform(const std::string& soc);
std::vector<std::string> ListPlatforms();

// ------------------------------------------------------------------------------------ OpDef
struct ParamInfo {
  std::string name;
  std::string param_type;             // "required" | "optional" | "dynamic"
  std::vector<std::string> dtypes;    // one entry per row
  std::vector<std::string> formats;   // one entry per row (same length as dtypes)
  std::vector<std::string> unknown_shape_formats;  // may be empty
  bool dtype_is_list = false;         // DataTypeList(): any listed dtype with every row
  bool format_is_list = false;        // FormatList()
  bool value_depend = false;
};
struct AttrInfo {
  std::string name;
  std::string type;                   // "bool" | "int" | "float" | "str" | "list_int" | "list_float"
  bool required = false;
  bool has_default = false;
  AttrValue default_value;            // valid when has_default
};
struct ConfigInfo {
  std::string soc;                    // AddConfig key, e.g. "ascend910b"
  // present when AddConfig(soc, OpAICoreConfig) overrides the op's inputs/outputs for this SoC
  bool has_override = false;
  std::vector<ParamInfo> inputs, outputs;
};
struct OpDefInfo {
  std::string type;
  std::vector<ParamInfo> inputs;
  std::vector<ParamInfo> outputs;
  std::vector<AttrInfo> attrs;        // OpDef order = RuntimeAttrs index
  std::vector<ConfigInfo> configs;
  bool has_tiling = false;
  bool has_infer_shape = false;
  bool has_infer_dtype = false;
};
// Registered op types, sorted.
std::vector<std::string> ListOps();
// Throws HostError ("opdef.unknown_op") for an unregistered op. Validates the OpDef on first use
// (throws "opdef.invalid" naming the op and the violation).
const OpDefInfo& GetOpDef(const std::string& op_type);

// ------------------------------------------------------------------------------------ tiling
// One decoded tiling field (nested struct fields are flattened as "outer.inner").
struct TilingField {
  std::string name;
  std::string dtype;                  // C type as written in the TilingData definition, e.g. "uint32_t"
  size_t offset = 0;                  // byte offset in the tiling data
  size_t elem_size = 0;
  size_t count = 0;                   // 0 for a scalar, n for TILING_DATA_FIELD_DEF_ARR(type, n, ...)
  std::vector<uint8_t> raw;           // elem_size * max(count, 1) bytes
};
struct TilingOptions {
  // Which cores the kernel runs on, for the block dim limit: "aiv" (vector-only kernel: at most
  // GetCoreNumAiv()), "aic" (cube-only: GetCoreNumAic()), "mix" (AIC+AIV groups: GetCoreNumAic()),
  // "any" (only CANN's hard range [1, 65535]). On coupled SoCs (310P) all but "any" mean the AI cores.
  std::string kernel_type = "aiv";
  // Instances per IR input (one entry per OpDef input; empty = 1 each). `inputs` then holds the
  // instances flattened in IR order; a DYNAMIC input takes instance_counts[i] entries, a REQUIRED or
  // OPTIONAL input exactly 1 (an absent OPTIONAL input: one entry with present=false).
  std::vector<uint32_t> instance_counts;
};
struct TilingResult {
  std::vector<uint8_t> tiling_data;   // exactly the bytes the tiling function wrote (SetDataSize)
  uint32_t block_dim = 0;
  uint64_t tiling_key = 0;
  std::vector<int64_t> workspace_sizes;
  // tiling fields as (name, value-as-text) decoded through the registered TilingData class;
  // arrays as "[a, b, ...]", nested structs as "name.field".
  std::vector<std::pair<std::string, std::string>> fields;
  std::string tiling_struct;          // registered TilingData class name ("" if none registered)
  std::vector<TilingField> field_list;
  size_t tiling_capacity = 0;         // capacity handed to the tiling function
  uint32_t schedule_mode = 0;
  bool tiling_key_set = false;
  std::vector<TensorDesc> outputs;    // output descs used (given or inferred)
};
// Runs the op's registered tiling function for these inputs/outputs/attrs on `soc` and checks the
// result (block dim range, tiling size vs capacity, workspace set, ...). outputs may be empty: they
// are then inferred with the op's InferShape / InferDataType if registered. Throws HostError.
TilingResult RunTiling(const std::string& op_type, const std::vector<TensorDesc>& inputs,
                       const std::vector<TensorDesc>& outputs,
                       const std::map<std::string, AttrValue>& attrs, const std::string& soc);
TilingResult RunTiling(const std::string& op_type, const std::vector<TensorDesc>& inputs,
                       const std::vector<TensorDesc>& outputs,
                       const std::map<std::string, AttrValue>& attrs, const std::string& soc,
                       const TilingOptions& options);

// Runs the op's registered InferShape and InferDataType. Throws HostError. instance_counts as in
// TilingOptions.
std::vector<TensorDesc> RunInferShape(const std::string& op_type, const std::vector<TensorDesc>& inputs,
                                      const std::map<std::string, AttrValue>& attrs,
                                      const std::vector<uint32_t>& instance_counts = {});

// Tiling data capacity when the op registers none (CANN OpImplRegisterV2::Tiling default, bytes).
// The capacity actually used for a call is TilingResult::tiling_capacity.
constexpr size_t kDefaultTilingCapacity = 2048;
constexpr size_t kTilingCapacity = kDefaultTilingCapacity;  // (name used by the runner)
// Canonical dtype name <-> ge::DataType value; ParseDType throws HostError ("input.dtype").
int ParseDType(const std::string& name);
std::string DTypeName(int ge_dtype);
int ParseFormat(const std::string& name);
std::string FormatName(int ge_format);

// ------------------------------------------------------------------------------------ python
// (implemented in py_bind.cpp, compiled into the _sim module, not the runtime library)
// Adds ops(), opdef(op), tiling(op, inputs, attrs=None, soc="Ascend910B1", outputs=None),
// infer_shape(op, inputs, attrs=None), platform(soc), platforms() to the `_sim` module.
// Errors are raised as the module's exception type (see INTERFACE.md).
void BindHost(pybind11::module_& m);

}  // namespace simhost
