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
  std::string short_soc;    // CANN short SoC version / AddConfig key, e.g. "ascend910b"
  uint32_t aiv_cores;       // vector cores (GetCoreNumAiv)
  uint32_t aic_cores;       // cube cores (GetCoreNumAic); on 310P the coupled AI cores
  uint64_t ub_size;         // unified buffer bytes per core (GetCoreMemSize(UB))
  uint64_t l1_size;         // L1 bytes per AI core
  uint64_t l0a_size, l0b_size, l0c_size;
  uint64_t l2_size;         // on-chip L2 cache bytes
  uint64_t hbm_size;        // device memory bytes (informative)
  bool has_datacopy_pad;    // DataCopyPad available
  bool has_bf16;            // bfloat16 vector/cast support
  bool split_core;          // AIC/AIV separated (A2/A3); false = coupled AI cores (310P)
  std::string source;       // where the numbers come from
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
struct TilingResult {
  std::vector<uint8_t> tiling_data;   // exactly the bytes the tiling function wrote (SetDataSize)
  uint32_t block_dim = 0;
  uint64_t tiling_key = 0;
  std::vector<int64_t> workspace_sizes;
  // tiling fields as (name, value-as-text) decoded through the registered TilingData class;
  // arrays as "[a, b, ...]", nested structs as "name.field".
  std::vector<std::pair<std::string, std::string>> fields;
  std::string tiling_struct;          // registered TilingData class name ("" if none registered)
  bool schedule_mode_set = false;
};
// Runs the op's registered tiling function for these inputs/outputs/attrs on `soc` and checks the
// result (block dim range, tiling size vs capacity, workspace set, ...). outputs may be empty: they
// are then inferred with the op's InferShape / InferDataType if registered. Throws HostError.
TilingResult RunTiling(const std::string& op_type, const std::vector<TensorDesc>& inputs,
                       const std::vector<TensorDesc>& outputs,
                       const std::map<std::string, AttrValue>& attrs, const std::string& soc);

// Runs the op's registered InferShape and InferDataType. Throws HostError.
std::vector<TensorDesc> RunInferShape(const std::string& op_type, const std::vector<TensorDesc>& inputs,
                                      const std::map<std::string, AttrValue>& attrs);

// Tiling data capacity handed to tiling functions by the emulation (bytes).
constexpr size_t kTilingCapacity = 64 * 1024;

// ------------------------------------------------------------------------------------ python
// Adds ops(), opdef(op), tiling(op, inputs, attrs=None, soc="Ascend910B1", outputs=None),
// infer_shape(op, inputs, attrs=None), platform(soc), platforms() to the `_sim` module.
// Errors are raised as the module's exception type (see INTERFACE.md).
void BindHost(pybind11::module_& m);

}  // namespace simhost
