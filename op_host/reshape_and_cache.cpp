// MskvReshapeAndCache: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.reshape_and_cache.SPEC): key, value
// [T', H, D] or [T', H*D]; key_cache, value_cache [nb, bs, H, D] ("BSND") or [nb, H, bs, D] ("BNSD"),
// written in place through their input addresses; slot_mapping int32/int64 [T]. Output: status,
// int32 [1], never written (the in-place convention, docs/design.md). Attr: cache_layout.
//
// Tiling: op_host/reshape_and_cache_tiling_impl.h (shared with the merged-cache op).
#include "reshape_and_cache_tiling.h"
#include "reshape_and_cache_tiling_impl.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvReshapeAndCache";

ge::graphStatus ReshapeAndCacheTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  ScatterTilingPlan s;
  if (PlanReshapeAndCache(context, kOp, /*merged=*/false, &s) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  ReshapeAndCacheTilingData td;
  SetScatterTiling(td, s.g, s.split, s.plan);
  return FinishTiling(context, kOp, s.hw, td, s.split.usedCoreNum, s.key);
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvReshapeAndCache : public OpDef {
 public:
  explicit MskvReshapeAndCache(const char* name) : OpDef(name) {
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBSND);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::ReshapeAndCacheTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"key", r.kv}, {"value", r.kv}, {"key_cache", r.kv}, {"value_cache", r.kv},
                                          {"slot_mapping", r.index}}, {{"status", r.status}});
  }
};
OP_ADD(MskvReshapeAndCache);
}  // namespace ops
