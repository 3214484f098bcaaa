// AscendC CPU emulation runtime: the runner (tiling + launch of a kernel on every core) as used by
// the pybind11 module `_sim` and by the MindSpore AOT entry points.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ascendc_sim/rt.h"
#include "runtime_internal.h"
#include "sim_host.h"

namespace ascendc_sim {

// One tensor handed to a launch: a host buffer (numpy array data, MindSpore buffer) with its
// description. data == nullptr with present == false: an absent OPTIONAL input.
struct TensorArg {
  std::string dtype;            // canonical name ("float16", "bfloat16", ...)
  std::vector<int64_t> shape;
  void* data = nullptr;
  uint64_t nbytes = 0;
  bool present = true;
  bool writable = true;
};
// One OpDef parameter: a single tensor, or the instances of a DYNAMIC input.
struct ParamArg {
  bool dynamic = false;
  std::vector<TensorArg> items;  // exactly 1 unless dynamic
};

struct LaunchOptions {
  std::string soc;            // "" -> the default SoC (set_soc / MS_KVCACHE_SIM_SOC)
  std::string order;          // "" -> default; "forward" | "reverse" | "threads"
  int hazards = -1;           // -1 default, 0 off, 1 on (pipe hazard tracker)
  std::string gm_copy;        // "" -> default; "always" | "never" | "auto"
  uint64_t seed = 0;          // UB / workspace garbage seed (0: fixed default)
  int cost = -1;              // cost model: -1 default ($MS_KVCACHE_SIM_COST), 0 off, 1 on
  std::vector<std::pair<std::string, double>> cost_params;  // overrides of the SoC's cost-model table
  std::vector<std::string> host;  // cost model: arguments in host memory (OpDef / kernel parameter names or indices)
};

struct LaunchResult {
  std::string op, kernel, soc, order;
  uint32_t npu_arch = 0;  // the arch build of the kernel that ran (2201 A2/A3, 2002 310P)
  uint32_t block_dim = 0;
  uint64_t tiling_key = 0;
  uint64_t workspace_bytes = 0;
  std::vector<CoreStats> cores;
  std::vector<std::pair<std::string, std::string>> tiling_fields;
  bool gm_copied = false;
  // cost model (docs/emulation.md, "The cost model"); cost false: it was off
  bool cost = false;
  std::vector<std::pair<std::string, double>> cost_params;
  double cost_time_ns = 0;               // launch_us + the slowest core (never less than a link's aggregate time)
  double cost_core_ns = 0;               // the slowest core
  double cost_link_ns[kNLinks] = {0, 0}; // bytes of all cores / the link's aggregate rate (HBM, host)
};

// One row of a SoC's cost-model table.
struct CostParamInfo {
  std::string name;
  double value = 0;
  std::string unit, source;
};
// The cost-model parameters of a SoC (COST_MODEL_SOC: none for it), with `overrides` applied (checked as a
// launch checks them: COST_MODEL_PARAM naming `op` for an unknown name or a value out of range).
ASCENDC_SIM_API std::vector<CostParamInfo> CostParamTable(
    const std::string& soc, const std::vector<std::pair<std::string, double>>& overrides = {},
    const std::string& op = "");
// Fills res.cost* from the per-core statistics (cost.cpp).
void CostSummary(const LaunchCtx& L, LaunchResult& res);

// Runs op `op_type`: its registered tiling for these tensors/attrs on the SoC, then its kernel
// (snake_case(op_type)) on every core. inputs / outputs follow the OpDef order; an output whose name
// equals an input name and has no data aliases that input. Buffers are updated in place on success
// and left untouched when an EmulationError is raised (when GM is copied, the default).
ASCENDC_SIM_API LaunchResult RunOp(const std::string& op_type, std::vector<ParamArg>& inputs,
                                   std::vector<ParamArg>& outputs, const std::map<std::string, simhost::AttrValue>& attrs,
                                   const LaunchOptions& opt);

// Launches a registered kernel directly (no OpDef / tiling function): args are the kernel's GM_ADDR
// parameters except the trailing workspace and tiling, which the runner appends when `with_ws_tiling`.
ASCENDC_SIM_API LaunchResult RunKernel(const std::string& kernel, std::vector<TensorArg>& args, uint32_t block_dim,
                                       const std::vector<uint8_t>& tiling, uint64_t tiling_key,
                                       uint64_t workspace_bytes, bool with_ws_tiling, const LaunchOptions& opt);

ASCENDC_SIM_API std::vector<std::string> ListKernels();
ASCENDC_SIM_API std::string KernelSource(const std::string& kernel);
// __NPU_ARCH__ values a kernel entry was compiled for (empty: unknown kernel).
ASCENDC_SIM_API std::vector<int> KernelArchs(const std::string& kernel);
ASCENDC_SIM_API std::string SnakeCase(const std::string& op_type);

// Process-wide defaults (also read by the MindSpore AOT entry points).
ASCENDC_SIM_API void SetDefaultSoc(const std::string& soc);
ASCENDC_SIM_API std::string DefaultSoc();
ASCENDC_SIM_API void SetDefaultOrder(const std::string& order);
ASCENDC_SIM_API std::string DefaultOrder();
ASCENDC_SIM_API void SetDefaultHazards(bool on);
ASCENDC_SIM_API bool DefaultHazards();
ASCENDC_SIM_API void SetDefaultCost(bool on);
ASCENDC_SIM_API bool DefaultCost();
ASCENDC_SIM_API void SetDefaultGmCopy(const std::string& mode);
ASCENDC_SIM_API std::string DefaultGmCopy();

ASCENDC_SIM_API std::string LastError();
ASCENDC_SIM_API void SetLastError(const std::string& msg);
// A sentence appended to the message of a failing AOT call of `op` whose error has rule `rule`
// (what the rule usually means for that op, e.g. a repeated slot); "" removes it.
ASCENDC_SIM_API void SetErrorHint(const std::string& op, const std::string& rule, const std::string& hint);
ASCENDC_SIM_API std::string ErrorHint(const std::string& op, const std::string& rule);
// A host-side diagnosis of a failing AOT call of `op` whose error has rule `rule`, run only after the
// emulation failed (it changes nothing about what is accepted or refused): extern "C" function `symbol` of
// shared object `library` (loaded here), called with the AOT call's arguments, writes the cause into buf
// (NUL-terminated) and returns its length, 0 for none; the AOT entry then appends "; cause: <it>" to the
// message. An empty `library` removes it. Throws std::runtime_error if the library or symbol is missing.
using AotDiagnoser = int (*)(const char* op_type, int nparam, void** params, int* ndims, int64_t** shapes,
                             const char** dtypes, void* extra, char* buf, int buflen);
ASCENDC_SIM_API void SetErrorDiagnoser(const std::string& op, const std::string& rule, const std::string& library,
                                       const std::string& symbol);
ASCENDC_SIM_API AotDiagnoser ErrorDiagnoser(const std::string& op, const std::string& rule);
ASCENDC_SIM_API LaunchResult LastLaunch();

}  // namespace ascendc_sim
