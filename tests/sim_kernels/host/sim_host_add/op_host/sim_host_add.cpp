// Test op: z = alpha * (x + y) [+ bias]. OpDef + tiling written to CANN's documented host API only.
#include <cstdio>
#include <string>
#include "sim_host_add_tiling.h"
#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
static ge::graphStatus SimHostAddTiling(gert::TilingContext* context) {
  auto ascendc = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  const uint32_t cores = ascendc.GetCoreNumAiv();
  uint64_t ub = 0;
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub);

  const gert::StorageShape* xs = context->GetInputShape(0);
  const gert::StorageShape* ys = context->GetInputShape(1);
  if (xs == nullptr || ys == nullptr || xs->GetStorageShape() != ys->GetStorageShape()) {
    std::fprintf(stderr, "ms_kvcache: SimHostAdd tiling: x and y must have the same shape\n");
    return ge::GRAPH_FAILED;
  }
  const ge::DataType dt = context->GetInputDesc(0)->GetDataType();
  const int64_t elem = ge::GetSizeByDataType(dt);
  const uint64_t total = static_cast<uint64_t>(xs->GetStorageShape().GetShapeSize());
  const gert::StorageShape* bias = context->GetOptionalInputShape(2);

  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const float alpha = *attrs->GetFloat(0);
  const char* layout = attrs->GetStr(1);
  const int64_t tile = *attrs->GetAttrPointer<int64_t>(2);
  const gert::TypedContinuousVector<int64_t>* flags = attrs->GetListInt(3);
  const bool* dbl = attrs->GetBool(4);
  if (layout == nullptr || (std::string(layout) != "ND" && std::string(layout) != "BSND")) {
    std::fprintf(stderr, "ms_kvcache: SimHostAdd tiling: layout must be ND or BSND\n");
    return ge::GRAPH_FAILED;
  }

  const uint64_t align = 32 / static_cast<uint64_t>(elem);
  uint64_t factor = (total + cores - 1) / cores;
  factor = (factor + align - 1) / align * align;
  const uint32_t used = factor == 0 ? 1 : static_cast<uint32_t>((total + factor - 1) / factor);
  const uint16_t buffers = *dbl ? 2 : 1;
  uint64_t tile_elems = tile > 0 ? static_cast<uint64_t>(tile)
                                 : (ub / (3U * buffers * static_cast<uint64_t>(elem))) / align * align;

  SimHostAddTilingData td;
  td.set_hasBias(bias != nullptr ? 1 : 0);
  td.set_totalLength(static_cast<uint32_t>(total));
  td.set_tileElems(tile_elems);
  td.set_alpha(alpha);
  td.set_dtypeCode(static_cast<int16_t>(dt));
  uint8_t f[3] = {0, 0, 0};
  for (size_t i = 0; i < 3 && i < flags->GetSize(); ++i) f[i] = static_cast<uint8_t>(flags->GetData()[i]);
  td.set_flags(f);
  td.set_ubBytes(static_cast<int64_t>(ub));
  td.split.set_blockFactor(static_cast<uint32_t>(factor));
  td.split.set_tailFactor(static_cast<uint32_t>(total - factor * (used - 1)));
  td.split.set_usedCores(static_cast<uint8_t>(used));
  td.set_bufferNum(buffers);
  const gert::Shape& s = xs->GetStorageShape();
  int32_t tail[2] = {static_cast<int32_t>(s.GetDimNum()),
                     static_cast<int32_t>(s.GetDimNum() ? s.GetDim(s.GetDimNum() - 1) : 0)};
  td.set_shapeTail(tail);

  context->SetBlockDim(used);
  const uint64_t key = (dt == ge::DT_FLOAT16 ? 0 : dt == ge::DT_FLOAT ? 1 : 2) + (bias != nullptr ? 10 : 0);
  context->SetTilingKey(key);
  td.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
  context->GetRawTilingData()->SetDataSize(td.GetDataSize());
  size_t* ws = context->GetWorkspaceSizes(1);
  ws[0] = ascendc.GetLibApiWorkSpaceSize();
  return ge::GRAPH_SUCCESS;
}
}  // namespace optiling

namespace ops {
class SimHostAdd : public OpDef {
 public:
  explicit SimHostAdd(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND}).UnknownShapeFormat({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("bias").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("z").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("alpha").AttrType(OPTIONAL).Float(1.0f);
    this->Attr("layout").AttrType(OPTIONAL).String("ND");
    this->Attr("tile_len").AttrType(OPTIONAL).Int(0);
    this->Attr("flags").AttrType(OPTIONAL).ListInt({1, 2});
    this->Attr("double_buffer").AttrType(OPTIONAL).Bool(true);
    this->AICore().SetTiling(optiling::SimHostAddTiling);
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    OpAICoreConfig cfg310p;
    cfg310p.Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    cfg310p.Input("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    cfg310p.Input("bias").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_FLOAT}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    cfg310p.Output("z").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    cfg310p.DynamicCompileStaticFlag(true).DynamicFormatFlag(false).DynamicRankSupportFlag(true)
        .DynamicShapeSupportFlag(true).NeedCheckSupportFlag(false).PrecisionReduceFlag(true);
    this->AICore().AddConfig("ascend310p", cfg310p);
  }
};
OP_ADD(SimHostAdd);
}  // namespace ops
