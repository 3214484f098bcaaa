// AscendC CPU emulation: gert::TilingContext (CANN exe_graph/runtime/tiling_context.h), handed to an
// op's tiling function by the emulation (simhost::RunTiling). Shapes, dtypes, formats and attributes
// are those of the call; GetPlatformInfo() points at the chosen SoC's platform table entry;
// GetRawTilingData() has the capacity the op registered (default 2048 bytes, CANN's
// OpImplRegisterV2::Tiling default). After the function returns the emulation checks block dim,
// tiling data size and workspace (docs/emulation.md).
#ifndef ASCENDC_SIM_EXE_GRAPH_TILING_CONTEXT_H_
#define ASCENDC_SIM_EXE_GRAPH_TILING_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "graph/types.h"
#include "exe_graph/runtime/storage_shape.h"
#include "exe_graph/runtime/runtime_tensor.h"
#include "exe_graph/runtime/continuous_vector.h"
#include "exe_graph/runtime/extended_kernel_context.h"
#include "exe_graph/runtime/tiling_data.h"

namespace fe { class PlatFormInfos; }

namespace gert {
struct Dim3 {
  uint32_t x, y, z;
  Dim3(const uint32_t dx, const uint32_t dy = 1, const uint32_t dz = 1) : x(dx), y(dy), z(dz) {}
};

class TilingContext : public ExtendedKernelContext {
 public:
  using ExtendedKernelContext::ExtendedKernelContext;

  const void* GetCompileInfo() const;
  template <typename T>
  const T* GetCompileInfo() const { return reinterpret_cast<const T*>(GetCompileInfo()); }

  const StorageShape* GetInputShape(const size_t index) const;
  const Tensor* GetInputTensor(const size_t index) const;
  const Tensor* GetOptionalInputTensor(const size_t ir_index) const { return GetDynamicInputTensor(ir_index, 0); }
  const Tensor* GetDynamicInputTensor(const size_t ir_index, const size_t relative_index) const;
  const StorageShape* GetOptionalInputShape(const size_t ir_index) const { return GetDynamicInputShape(ir_index, 0); }
  const Tensor* GetRequiredInputTensor(const size_t ir_index) const { return GetDynamicInputTensor(ir_index, 0); }
  const StorageShape* GetRequiredInputShape(const size_t ir_index) const { return GetDynamicInputShape(ir_index, 0); }
  const StorageShape* GetDynamicInputShape(const size_t ir_index, const size_t relative_index) const;
  const StorageShape* GetOutputShape(const size_t index) const;

  ge::graphStatus SetTilingKey(const uint64_t tiling_key);
  uint64_t GetTilingKey() const;
  ge::graphStatus SetScheduleMode(const uint32_t schedule_mode);
  uint32_t GetScheduleMode() const;
  ge::graphStatus SetBlockDim(const uint32_t block_dim) { return SetSimdNumBlocks(block_dim); }
  ge::graphStatus SetSimdNumBlocks(const uint32_t num_blocks);
  uint32_t GetBlockDim() const { return GetSimdNumBlocks(); }
  uint32_t GetSimdNumBlocks() const;
  ge::graphStatus SetAicpuBlockDim(uint32_t block_dim) { return SetAicpuNumBlocks(block_dim); }
  ge::graphStatus SetAicpuNumBlocks(uint32_t num_blocks);
  uint32_t GetAicpuBlockDim() const { return GetAicpuNumBlocks(); }
  uint32_t GetAicpuNumBlocks() const;
  ge::graphStatus SetTilingCond(int32_t tiling_cond);
  int32_t GetTilingCond() const;
  ge::graphStatus SetNeedAtomic(const bool atomic);
  bool NeedAtomic() const;

  template <typename T>
  auto GetTilingData() -> T* {
    TilingData* td = GetRawTilingData();
    if (td == nullptr || td->GetCapacity() < sizeof(T)) return nullptr;
    td->SetDataSize(sizeof(T));
    return static_cast<T*>(td->GetData());
  }
  TilingData* GetRawTilingData();
  size_t* GetWorkspaceSizes(const size_t workspace_count);
  size_t GetWorkspaceNum() const;
  fe::PlatFormInfos* GetPlatformInfo() const;
  int32_t GetDeterministic() const;
  int32_t GetDeterministicLevel() const;
  ge::graphStatus SetLocalMemorySize(const uint32_t local_memory_size) { return SetDynUBufSize(local_memory_size); }
  ge::graphStatus SetDynUBufSize(const uint32_t dyn_ubuf_size);
  uint32_t GetLocalMemorySize() const { return GetDynUBufSize(); }
  uint32_t GetDynUBufSize() const;
  bool InputIsView(const size_t) const { return false; }
  bool OutputIsView(const size_t) const { return false; }
};
}  // namespace gert

#endif
