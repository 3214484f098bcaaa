// Test ops for the host-side rules of the emulation (tests/test_sim_host_checks.py): each misbehaves
// in one way a real CANN would reject, plus ops written in the newer IMPL_OP_OPTILING / DYNAMIC style.
#include <cstdio>
#include <stdexcept>
#include <string>

#include "register/op_def_registry.h"
#include "register/op_impl_registry.h"
#include "register/tilingdata_base.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(SimHostFaultyTilingData)
  TILING_DATA_FIELD_DEF(uint32_t, a);
  TILING_DATA_FIELD_DEF(uint32_t, b);
  TILING_DATA_FIELD_DEF(uint64_t, c);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(SimHostFaulty, SimHostFaultyTilingData)

BEGIN_TILING_DATA_DEF(SimHostBigTilingData)
  TILING_DATA_FIELD_DEF(uint32_t, n);
  TILING_DATA_FIELD_DEF_ARR(uint8_t, 4096, blob);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(SimHostBig, SimHostBigTilingData)

static ge::graphStatus SimHostFaultyTiling(gert::TilingContext* context) {
  const std::string fault = context->GetAttrs()->GetStr(0);
  const int64_t seed = *context->GetAttrs()->GetInt(1);
  auto ascendc = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  const uint32_t aiv = ascendc.GetCoreNumAiv();
  if (fault == "fail") {
    std::fprintf(stderr, "ms_kvcache: SimHostFaulty tiling: refusing seed %lld on purpose\n",
                 static_cast<long long>(seed));
    return ge::GRAPH_FAILED;
  }
  if (fault == "throw") throw std::runtime_error("tiling blew up");
  if (fault == "save_overflow") {
    SimHostBigTilingData big;
    big.set_n(1);
    big.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
    return ge::GRAPH_SUCCESS;
  }
  SimHostFaultyTilingData td;
  td.set_a(static_cast<uint32_t>(seed));
  td.set_b(aiv);
  td.set_c(0x0123456789abcdefULL);
  if (fault == "block_dim_0") context->SetBlockDim(0);
  else if (fault == "block_dim_big") context->SetBlockDim(aiv + 1);
  else if (fault == "block_dim_65536") context->SetBlockDim(65536);
  else if (fault != "no_block_dim") context->SetBlockDim(aiv);
  td.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
  if (fault == "size_over_capacity") context->GetRawTilingData()->SetDataSize(context->GetRawTilingData()->GetCapacity() + 8);
  else if (fault == "size_short") context->GetRawTilingData()->SetDataSize(4);
  else if (fault != "size_unset") context->GetRawTilingData()->SetDataSize(td.GetDataSize());
  if (fault == "ws_unwritten") {
    size_t* ws = context->GetWorkspaceSizes(2);
    ws[0] = 16;
  } else if (fault != "no_workspace") {
    context->GetWorkspaceSizes(1)[0] = 0;
  }
  return ge::GRAPH_SUCCESS;
}
static ge::graphStatus SimHostOtherTiling(gert::TilingContext*) { return ge::GRAPH_SUCCESS; }
}  // namespace optiling

namespace ops {
static ge::graphStatus InferSame(gert::InferShapeContext* context) {
  *context->GetOutputShape(0) = *context->GetInputShape(0);
  return ge::GRAPH_SUCCESS;
}

class SimHostFaulty : public OpDef {
 public:
  explicit SimHostFaulty(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Attr("fault").AttrType(OPTIONAL).String("none");
    this->Attr("seed").AttrType(REQUIRED).Int();
    this->SetInferShape(InferSame);
    this->AICore().SetTiling(optiling::SimHostFaultyTiling);
    this->AICore().AddConfig("ascend910b").AddConfig("ascend910_93").AddConfig("ascend310p");
  }
};
OP_ADD(SimHostFaulty);

// Invalid: dtype lists of different lengths, a format list of the wrong length.
class SimHostBadRows : public OpDef {
 public:
  explicit SimHostBadRows(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->AICore().SetTiling(optiling::SimHostOtherTiling).AddConfig("ascend910b");
  }
};
OP_ADD(SimHostBadRows);

// Invalid: optional attr without default, attr type set twice, attr never typed, input without dtypes.
class SimHostBadAttr : public OpDef {
 public:
  explicit SimHostBadAttr(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Input("w").ParamType(REQUIRED);
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Attr("no_default").AttrType(OPTIONAL).Int();
    this->Attr("two_types").AttrType(OPTIONAL).Int(3).String("x");
    this->Attr("untyped").AttrType(REQUIRED);
    this->AICore().SetTiling(optiling::SimHostOtherTiling).AddConfig("Ascend910B");
  }
};
OP_ADD(SimHostBadAttr);

// Valid, but configured for no SoC.
class SimHostNoConfig : public OpDef {
 public:
  explicit SimHostNoConfig(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->SetInferShape(InferSame);
    this->AICore().SetTiling(optiling::SimHostFaultyTiling);
  }
};
OP_ADD(SimHostNoConfig);

// Two different tiling functions (OpDef and IMPL_OP_OPTILING).
class SimHostConflict : public OpDef {
 public:
  explicit SimHostConflict(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    this->SetInferShape(InferSame);
    this->AICore().SetTiling(optiling::SimHostFaultyTiling).AddConfig("ascend910b");
  }
};
OP_ADD(SimHostConflict);
}  // namespace ops
namespace optiling {
IMPL_OP_OPTILING(SimHostConflict).Tiling(SimHostOtherTiling);
}

// ---------------------------------------------------------------------------- newer style, DYNAMIC
namespace optiling {
struct SimHostDynCompileInfo {
  uint32_t parsed = 0;
  uint32_t core_num = 0;
};
struct SimHostDynTiling {  // plain struct + GetTilingData<T>() (ops-transformer style)
  uint32_t numLayers;
  uint32_t numPairs;
  int64_t layerElems[8];
  uint32_t coreNum;
  uint32_t parsed;
  uint8_t bigPad[3000];
};
static ge::graphStatus SimHostDynParse(gert::TilingParseContext* context) {
  auto* ci = context->GetCompiledInfo<SimHostDynCompileInfo>();
  ci->parsed = 7;
  ci->core_num = platform_ascendc::PlatformAscendC(context->GetPlatformInfo()).GetCoreNumAiv();
  return ge::GRAPH_SUCCESS;
}
static ge::graphStatus SimHostDynTilingFunc(gert::TilingContext* context) {
  const auto* ci = context->GetCompileInfo<SimHostDynCompileInfo>();
  auto* t = context->GetTilingData<SimHostDynTiling>();
  if (t == nullptr || ci == nullptr) return ge::GRAPH_FAILED;
  const size_t layers = context->GetIrInputInstanceInfo(0)->GetInstanceNum();
  t->numLayers = static_cast<uint32_t>(layers);
  for (size_t i = 0; i < 8; ++i) {
    const gert::StorageShape* s = context->GetDynamicInputShape(0, i);
    t->layerElems[i] = s == nullptr ? -1 : s->GetStorageShape().GetShapeSize();
  }
  if (context->GetDynamicInputShape(0, layers) != nullptr) return ge::GRAPH_FAILED;  // past the end
  if (context->GetDynamicInputDesc(1, layers - 1)->GetDataType() != context->GetDynamicInputDesc(0, 0)->GetDataType())
    return ge::GRAPH_FAILED;
  const gert::StorageShape* mapping = context->GetRequiredInputShape(2);
  t->numPairs = static_cast<uint32_t>(mapping->GetStorageShape().GetDim(0));
  t->coreNum = ci->core_num;
  t->parsed = ci->parsed;
  context->SetBlockDim(1);
  context->GetWorkspaceSizes(1)[0] = 0;
  return ge::GRAPH_SUCCESS;
}
IMPL_OP_OPTILING(SimHostDyn).Tiling(SimHostDynTilingFunc, 4096).TilingParse<SimHostDynCompileInfo>(SimHostDynParse);
}  // namespace optiling

namespace ops {
static ge::graphStatus InferStatus(gert::InferShapeContext* context) {
  gert::Shape* s = context->GetOutputShape(0);
  s->SetDimNum(1);
  s->SetDim(0, 1);
  return ge::GRAPH_SUCCESS;
}
static ge::graphStatus InferStatusType(gert::InferDataTypeContext* context) {
  return context->SetOutputDataType(0, ge::DT_INT32);
}
IMPL_OP_INFERSHAPE(SimHostDyn).InferShape(InferStatus).InferDataType(InferStatusType);

class SimHostDyn : public OpDef {
 public:
  explicit SimHostDyn(const char* name) : OpDef(name) {
    this->Input("key_caches").ParamType(DYNAMIC).DataType({ge::DT_FLOAT16, ge::DT_INT8}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("value_caches").ParamType(DYNAMIC).DataType({ge::DT_FLOAT16, ge::DT_INT8}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("block_mapping").ParamType(REQUIRED).DataType({ge::DT_INT64, ge::DT_INT64}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("status").ParamType(REQUIRED).DataType({ge::DT_INT32, ge::DT_INT32}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->AICore().AddConfig("ascend910b").AddConfig("ascend910_93").AddConfig("ascend310p");
  }
};
OP_ADD(SimHostDyn);
}  // namespace ops

// Strict format matching, no InferShape: outputs must be passed explicitly.
namespace optiling {
static ge::graphStatus SimHostStrictTiling(gert::TilingContext* context) {
  context->SetBlockDim(1);
  context->GetWorkspaceSizes(1)[0] = 0;
  return ge::GRAPH_SUCCESS;
}
}  // namespace optiling
namespace ops {
class SimHostStrict : public OpDef {
 public:
  explicit SimHostStrict(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_INT32}).Format({ge::FORMAT_ND, ge::FORMAT_NCHW});
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_INT32}).Format({ge::FORMAT_ND, ge::FORMAT_NCHW});
    this->AICore().SetTiling(optiling::SimHostStrictTiling).AddConfig("ascend910b");
    this->FormatMatchMode(FormatCheckOption::STRICT);
  }
};
OP_ADD(SimHostStrict);
}  // namespace ops
