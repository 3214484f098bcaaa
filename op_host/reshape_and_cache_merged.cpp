// MskvReshapeAndCacheMerged: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.reshape_and_cache_merged.SPEC): key, value
// [T', H, D] or [T', H*D]; kv_cache [2, nb, bs, H, D] ("BSND") or [2, nb, H, bs, D] ("BNSD"), keys in
// kv_cache[0] and values in kv_cache[1], written in place through its input address; slot_mapping
// int32/int64 [T]. Output: status, int32 [1], never written (the in-place convention,
// docs/design.md). Attr: cache_layout.
//
// Tiling: op_host/reshape_and_cache_tiling_impl.h (shared with the separate-cache op).
#include "reshape_and_cache_merged_tiling.h"
#include "reshape_and_cache_tiling_impl.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvReshapeAndCacheMerged";

ge::graphStatus ReshapeAndCacheMergedTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  ScatterTilingPlan s;
  if (PlanReshapeAndCache(context, kOp, /*merged=*/true, &s) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  ReshapeAndCacheMergedTilingData td;
  SetScatterTiling(td, s.g, s.split, s.plan);
  td.set_valueOffset(s.g.numSlots * s.g.rowElems);
  return FinishTiling(context, kOp, s.hw, td, s.split.usedCoreNum, s.key);
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvReshapeAndCacheMerged : public OpDef {
 public:
  explicit MskvReshapeAndCacheMerged(const char* name) : OpDef(name) {
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBSND);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::ReshapeAndCacheMergedTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"key", r.kv}, {"value", r.kv}, {"kv_cache", r.kv},
                                          {"slot_mapping", r.index}}, {{"status", r.status}});
  }
};
OP_ADD(MskvReshapeAndCacheMerged);
}  // namespace ops
