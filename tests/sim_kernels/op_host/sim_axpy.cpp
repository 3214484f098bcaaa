// Host side of the emulation test op SimAxpy: z = x + alpha * y over float32 / float16 / bfloat16,
// computed in float32. Tiling: elements split evenly over the vector cores in 32-byte multiples,
// UB tiles sized from the platform's UB. Tiling key = dtype (0 float32, 1 float16, 2 bfloat16).
#include <algorithm>
#include <cstdio>

#include "register/op_def_registry.h"
#include "sim_axpy_tiling.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
static ge::graphStatus SimAxpyTiling(gert::TilingContext* context) {
  auto ascendc = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  const uint32_t cores = ascendc.GetCoreNumAiv();
  uint64_t ub = 0;
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub);
  const ge::DataType dt = context->GetInputDesc(0)->GetDataType();
  uint32_t esize = 4, key = 0;
  if (dt == ge::DT_FLOAT16) {
    esize = 2;
    key = 1;
  } else if (dt == ge::DT_BF16) {
    esize = 2;
    key = 2;
  }
  const uint64_t total = context->GetInputShape(0)->GetStorageShape().GetShapeSize();
  const bool pad = ascendc.GetSocVersion() != platform_ascendc::SocVersion::ASCEND310P;
  if (!pad && (total * esize) % 32 != 0) {
    std::fprintf(stderr, "ms_kvcache: SimAxpy tiling: %llu elements of %u bytes are not 32-byte aligned and this SoC "
                 "has no DataCopyPad\n", static_cast<unsigned long long>(total), esize);
    return ge::GRAPH_FAILED;
  }
  const uint32_t align = 32 / esize;
  uint64_t per = (total + cores - 1) / cores;
  per = (per + align - 1) / align * align;
  if (per == 0) per = align;
  const uint32_t used = static_cast<uint32_t>(std::max<uint64_t>(1, (total + per - 1) / per));
  // UB: x, y, z queues double-buffered (6 tiles of T) + two float scratch tiles
  const uint64_t per_elem = 6ull * esize + 2ull * 4;
  uint64_t tile = (ub - 1024) / per_elem;
  tile = std::min<uint64_t>(tile, 4096) / 64 * 64;
  tile = std::min<uint64_t>(tile, per);
  SimAxpyTilingData tiling;
  tiling.set_totalLength(total);
  tiling.set_blockLength(static_cast<uint32_t>(per));
  tiling.set_tileLength(static_cast<uint32_t>(tile));
  const float* alpha = context->GetAttrs()->GetAttrPointer<float>(0);
  tiling.set_alpha(alpha ? *alpha : 1.0f);
  tiling.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
  context->GetRawTilingData()->SetDataSize(tiling.GetDataSize());
  context->SetBlockDim(used);
  context->SetTilingKey(key);
  size_t* ws = context->GetWorkspaceSizes(1);
  ws[0] = 0;
  return ge::GRAPH_SUCCESS;
}
}  // namespace optiling

namespace ge {
static graphStatus SimAxpyInferShape(gert::InferShapeContext* context) {
  *context->GetOutputShape(0) = *context->GetInputShape(0);
  return GRAPH_SUCCESS;
}
static graphStatus SimAxpyInferDataType(gert::InferDataTypeContext* context) {
  context->SetOutputDataType(0, context->GetInputDataType(0));
  return GRAPH_SUCCESS;
}
}  // namespace ge

namespace ops {
class SimAxpy : public OpDef {
 public:
  explicit SimAxpy(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("z").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("alpha").AttrType(OPTIONAL).Float(1.0f);
    this->SetInferShape(ge::SimAxpyInferShape).SetInferDataType(ge::SimAxpyInferDataType);
    this->AICore().SetTiling(optiling::SimAxpyTiling);
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    OpAICoreConfig p310;
    p310.Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    p310.Input("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    p310.Output("z").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->AICore().AddConfig("ascend310p", p310);
  }
};
OP_ADD(SimAxpy);
}  // namespace ops
