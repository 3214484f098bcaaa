// ReshapeAndCacheMergedMerged: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.reshape_and_cache_merged.SPEC): key, value
// [T', H, D] or [T', H*D]; kv_cache [2, nb, bs, H, D] ("BSND") or [2, nb, H, bs, D] ("BNSD"), keys in
// kv_cache[0] and values in kv_cache[1], written in place through its input address; slot_mapping
// int32/int64 [T]. Output: status, int32 [1], never written (the in-place convention,
// docs/design.md). Attr: cache_layout.
//
// Tiling: T tokens are split over all vector cores (main/tail share, SplitWork); each core batches
// runs of consecutive valid tokens into double-buffered UB chunks sized from the platform's UB.
// Tiling key = layout * 1000 + dtype * 100 + slot dtype * 10 + DataCopyPad (see docs/design.md).
#include "reshape_and_cache_merged_tiling.h"
#include "kv_copy_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvReshapeAndCacheMerged";
enum { kKey = 0, kValue, kKvCache, kSlotMapping, kNumInputs };

ge::graphStatus ReshapeAndCacheMergedTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  const gert::StorageShape* shapes[kNumInputs];
  if (GetInputShapes(context, kOp, kNumInputs, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape& key = shapes[kKey]->GetStorageShape();
  const gert::Shape& value = shapes[kValue]->GetStorageShape();
  const gert::Shape& kv = shapes[kKvCache]->GetStorageShape();
  const gert::Shape& sm = shapes[kSlotMapping]->GetStorageShape();

  // ---- attrs
  bool bnsd = false;
  if (LayoutAttr(context, 0, kOp, mskv_attr::kLayoutBSND, &bnsd) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- dtypes
  const char* names[3] = {"key", "value", "kv_cache"};
  const NamedInput data[3] = {{kKey, names[0]}, {kValue, names[1]}, {kKvCache, names[2]}};
  int64_t elem = 0;
  uint64_t dcode = 0;
  int scode = 0;
  if (KvDType(context, kOp, hw, kKvCache, "kv_cache", data, 3, &elem, &dcode) != ge::GRAPH_SUCCESS ||
      IndexDType(context, kOp, kSlotMapping, "slot_mapping", &scode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- shapes
  char b1[128];
  if (kv.GetDimNum() != 5 || kv.GetDim(0) != 2) {
    return Fail(kOp, "kv_cache: expected shape [2, num_blocks, ...] of rank 5, got %s", ShapeText(kv, b1, sizeof(b1)));
  }
  if (sm.GetDimNum() != 1) return Fail(kOp, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  for (int i = 0; i < 3; ++i) {
    if (CheckTensorSize(kOp, names[i], shapes[i]->GetStorageShape(), elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  if (CheckTensorSize(kOp, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  ScatterGeom g;
  CacheGeom(kv, 1, bnsd, &g);
  g.numTokens = sm.GetDim(0);
  if (CheckTokenRows(kOp, "key", key, g.numTokens, g.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CheckTokenRows(kOp, "value", value, g.numTokens, g.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- work split and UB plan (nothing to write: zero-sized rows or no slots -> no-op launch)
  const bool noWork = g.rowElems == 0 || g.numSlots == 0;
  const CoreSplit split = noWork ? NoWork() : SplitWork(g.numTokens, hw.cores);
  bool pad = false;
  RowPlan plan;
  if (!noWork && PlanScatter(kOp, hw, elem, g, split.formerLen, &pad, &plan) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  ReshapeAndCacheMergedTilingData td;
  SetScatterTiling(td, g, split, plan);
  td.set_valueOffset(g.numSlots * g.rowElems);

  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      (bnsd ? 1000u : 0u) + dcode * 100u + static_cast<uint64_t>(scode) * 10u + (pad ? 1u : 0u));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvReshapeAndCacheMerged : public OpDef {
 public:
  explicit MskvReshapeAndCacheMerged(const char* name) : OpDef(name) {
    Declare(*this, mskv_tiling::kKvDTypes, mskv_tiling::kIndexDTypes, mskv_tiling::kStatusDTypes,
            mskv_tiling::kNdFormats);
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBSND);
    this->AICore().SetTiling(optiling::ReshapeAndCacheMergedTiling);
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    OpAICoreConfig cfg310p;
    Declare(cfg310p, mskv_tiling::kKvDTypes310P, mskv_tiling::kIndexDTypes310P, mskv_tiling::kStatusDTypes310P,
            mskv_tiling::kNdFormats310P);
    mskv_tiling::SetStaticCompileFlags(cfg310p);
    this->AICore().AddConfig("ascend310p", cfg310p);
  }

 private:
  template <typename Def>
  static void Declare(Def& d, const std::vector<ge::DataType>& kv, const std::vector<ge::DataType>& index,
                      const std::vector<ge::DataType>& status, const std::vector<ge::Format>& fmt) {
    d.Input("key").ParamType(REQUIRED).DataType(kv).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("value").ParamType(REQUIRED).DataType(kv).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("kv_cache").ParamType(REQUIRED).DataType(kv).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("slot_mapping").ParamType(REQUIRED).DataType(index).Format(fmt).UnknownShapeFormat(fmt);
    d.Output("status").ParamType(REQUIRED).DataType(status).Format(fmt).UnknownShapeFormat(fmt);
  }
};
OP_ADD(MskvReshapeAndCacheMerged);
}  // namespace ops
