// Host side of the emulation test op SimSumList: out = bias + srcs[0] + ... + srcs[k-1] (float32),
// with `srcs` a DYNAMIC input followed by a REQUIRED input (IR indices 0 and 1).
#include <cstdio>

#include "register/op_def_registry.h"
#include "sim_sum_list_tiling.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
static ge::graphStatus SimSumListTiling(gert::TilingContext* context) {
  auto ascendc = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  const uint32_t cores = ascendc.GetCoreNumAiv();
  uint32_t count = 0;
  while (context->GetDynamicInputShape(0, count) != nullptr) ++count;
  const uint64_t n = context->GetRequiredInputShape(1)->GetStorageShape().GetShapeSize();
  if (n % 8 != 0 || n == 0) {
    std::fprintf(stderr, "ms_kvcache: SimSumList tiling: n = %llu must be a positive multiple of 8\n",
                 static_cast<unsigned long long>(n));
    return ge::GRAPH_FAILED;
  }
  uint64_t per = (n + cores - 1) / cores;
  per = (per + 7) / 8 * 8;
  SimSumListTilingData t;
  t.set_n(static_cast<uint32_t>(n));
  t.set_count(count);
  t.set_blockLength(static_cast<uint32_t>(per));
  t.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
  context->GetRawTilingData()->SetDataSize(t.GetDataSize());
  context->SetBlockDim(static_cast<uint32_t>((n + per - 1) / per));
  context->SetTilingKey(0);
  size_t* ws = context->GetWorkspaceSizes(1);
  ws[0] = 0;
  return ge::GRAPH_SUCCESS;
}
}  // namespace optiling

namespace ops {
class SimSumList : public OpDef {
 public:
  explicit SimSumList(const char* name) : OpDef(name) {
    this->Input("srcs").ParamType(DYNAMIC).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Input("bias").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Output("out").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->AICore().SetTiling(optiling::SimSumListTiling);
    this->AICore().AddConfig("ascend910b");
  }
};
OP_ADD(SimSumList);
}  // namespace ops
