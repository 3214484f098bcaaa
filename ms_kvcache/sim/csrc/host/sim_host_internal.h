// Internal state of the emulated CANN host API (not part of the interface; see sim_host.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sim_host.h"
#include "graph/types.h"
#include "exe_graph/runtime/compute_node_info.h"
#include "exe_graph/runtime/runtime_attrs.h"
#include "exe_graph/runtime/runtime_tensor.h"
#include "exe_graph/runtime/tiling_data.h"
#include "register/op_impl_registry.h"
#include "register/op_def.h"
#include "platform/platform_info.h"

namespace simhost {
namespace detail {

// Values of the attributes of one call, in OpDef order (nullptr = not representable, e.g. ListListInt).
struct AttrStore {
  std::vector<std::unique_ptr<uint8_t[]>> holders;
  std::vector<const void*> ptrs;
};

// Everything a gert context exposes for one call.
struct ContextData {
  std::string op_type, node_name;
  std::vector<gert::AnchorInstanceInfo> ir_inputs, ir_outputs;
  std::vector<gert::CompileTimeTensorDesc> in_desc, out_desc;  // per instance
  std::vector<gert::StorageShape> in_shape, out_shape;         // per instance
  std::vector<gert::Tensor> in_tensor;
  std::vector<gert::Shape> infer_out_shape;                     // InferShape outputs
  std::vector<ge::DataType> infer_out_dtype;                    // InferDataType outputs
  AttrStore attrs;
  std::unique_ptr<gert::RuntimeAttrs> runtime_attrs;
  std::unique_ptr<gert::ComputeNodeInfo> node_info;
  fe::PlatFormInfos* platform = nullptr;
  void* compile_info = nullptr;
  // tiling outputs
  std::unique_ptr<uint8_t[]> tiling_holder;
  gert::TilingData* tiling_data = nullptr;
  uint64_t tiling_key = 0;
  bool tiling_key_set = false;
  uint32_t block_dim = 0;
  bool block_dim_set = false;
  uint32_t aicpu_block_dim = 0;
  uint32_t schedule_mode = 0;
  int32_t tiling_cond = -1;
  bool need_atomic = false;
  uint32_t dyn_ubuf_size = 0;
  std::unique_ptr<uint8_t[]> workspace_holder;  // TypedContinuousVector<size_t>
  bool workspace_requested = false;

  ContextData();
};

constexpr size_t kWorkspaceCapacity = 64;
constexpr size_t kWorkspaceUnset = ~static_cast<size_t>(0);

// Per-op-type functions registered through OpImplRegisterV2 (IMPL_OP_* macros).
struct ImplFuncs {
  gert::OpImplRegisterV2::InferShapeKernelFunc infer_shape = nullptr;
  gert::OpImplRegisterV2::InferDataTypeKernelFunc infer_dtype = nullptr;
  bool infer_dtype_same_as_first_input = false;
  gert::OpImplRegisterV2::TilingKernelFunc tiling = nullptr;
  size_t max_tiling_data_size = kDefaultTilingCapacity;
  bool max_tiling_data_size_set = false;
  gert::OpImplRegisterV2::TilingParseFunc tiling_parse = nullptr;
  gert::OpImplRegisterV2::CompileInfoCreatorFunc compile_info_creator = nullptr;
  gert::OpImplRegisterV2::CompileInfoDeleterFunc compile_info_deleter = nullptr;
};
std::recursive_mutex& RegistryMutex();
ImplFuncs& MutableImpl(const std::string& op_type);  // caller holds RegistryMutex()
// FindImpl locks RegistryMutex() itself.
bool FindImpl(const std::string& op_type, ImplFuncs* out);

// The op's definition as created by its OP_ADD creator (validated). Throws HostError.
const ops::OpDef& GetRawOpDef(const std::string& op_type);

// Effective inputs/outputs of an op on a SoC family (AddConfig key): the OpDef's, with the
// parameters of an AddConfig(soc, OpAICoreConfig) override replaced by name.
void EffectiveParams(const ops::OpDef& def, const std::string& short_soc, std::vector<ParamInfo>* inputs,
                     std::vector<ParamInfo>* outputs);
ParamInfo ToParamInfo(const ops::OpParamDef::Data& d);

std::string ShapeStr(const std::vector<int64_t>& shape);
std::string AttrValueStr(const AttrValue& v);
[[noreturn]] void Fail(const std::string& rule, const std::string& op, const std::string& message);

fe::PlatFormInfos* PlatformInfosFor(const std::string& soc);
}  // namespace detail
}  // namespace simhost
