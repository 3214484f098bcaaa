// The tiling of MskvReshapeAndCache and MskvReshapeAndCacheMerged (one row scatter, two cache forms).
//
// Inputs in OpDef order: key, value [T', H, D] or [T', H*D], then the cache(s), then slot_mapping
// int32/int64 [T]. Separate caches: key_cache, value_cache [nb, bs, H, D] ("BSND"), [nb, H, bs, D]
// ("BNSD") or [nb, H*D/C0, bs, C0] ("NZ": the BNSD geometry with H*D/C0 heads of C0 elements, CheckNzCache) of
// one shape; merged: kv_cache [2, nb, ...] (keys in kv_cache[0], values in kv_cache[1]).
// Attr 0: cache_layout. T tokens are split over all vector cores (main/tail share, SplitWork); each core
// batches runs of consecutive valid tokens into double-buffered UB chunks sized from the platform's UB.
// Tiling key: mskv_keys::LayoutCopyKey (op_kernel/mskv_tiling_keys.h, MSKV_KEYS_LAYOUT_COPY(_NZ)).
#ifndef MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_IMPL_H_
#define MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_IMPL_H_

#include "kv_copy_tiling_common.h"

namespace mskv_tiling {

// What both ops' tiling data take: the platform, the geometry of one cache, the split, the UB plan, the key.
struct ScatterTilingPlan {
  Hardware hw;
  ScatterGeom g;
  CoreSplit split;
  RowPlan plan;
  uint64_t key = 0;
};

// Checks the inputs of a reshape_and_cache call (merged: one kv_cache instead of key_cache, value_cache)
// and plans it; every refusal is a tiling error naming `op` and the input.
inline ge::graphStatus PlanReshapeAndCache(gert::TilingContext* context, const char* op, bool merged,
                                           ScatterTilingPlan* out) {
  Hardware& hw = out->hw;
  if (GetHardware(context, op, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int numCaches = merged ? 1 : 2;
  const int numData = 2 + numCaches;  // key, value, the caches
  const int slotInput = numData;
  const gert::StorageShape* shapes[5];
  if (GetInputShapes(context, op, numData + 1, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape& key = shapes[0]->GetStorageShape();
  const gert::Shape& value = shapes[1]->GetStorageShape();
  const gert::Shape& cache = shapes[2]->GetStorageShape();
  const gert::Shape& sm = shapes[slotInput]->GetStorageShape();

  // ---- attrs
  int64_t layout = 0;
  if (LayoutCodeAttr(context, 0, op, mskv_attr::kLayoutBSND, true, &layout) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  const bool nz = layout == mskv_attr::kLayoutNZ;
  const bool bnsd = layout != mskv_attr::kLayoutBSND;  // NZ: the BNSD geometry of [nb, H*D/C0, bs, C0]

  // ---- dtypes
  const char* names[4] = {"key", "value", merged ? "kv_cache" : "key_cache", "value_cache"};
  const NamedInput data[4] = {{0, names[0]}, {1, names[1]}, {2, names[2]}, {3, names[3]}};
  int64_t elem = 0;
  uint64_t dcode = 0;
  int scode = 0;
  if (KvDType(context, op, hw, 2, names[2], data, numData, &elem, &dcode) != ge::GRAPH_SUCCESS ||
      IndexDType(context, op, slotInput, "slot_mapping", &scode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- shapes
  char b1[128], b2[128];
  if (merged && (cache.GetDimNum() != 5 || cache.GetDim(0) != 2)) {
    return Fail(op, "kv_cache: expected shape [2, num_blocks, ...] of rank 5, got %s", ShapeText(cache, b1, sizeof(b1)));
  }
  if (!merged) {
    const gert::Shape& vc = shapes[3]->GetStorageShape();
    if (cache.GetDimNum() != 4) return Fail(op, "key_cache: expected rank 4, got shape %s", ShapeText(cache, b1, sizeof(b1)));
    if (!SameShape(vc, cache)) {
      return Fail(op, "value_cache: expected shape %s (as key_cache), got %s", ShapeText(cache, b1, sizeof(b1)),
                  ShapeText(vc, b2, sizeof(b2)));
    }
  }
  if (sm.GetDimNum() != 1) return Fail(op, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  for (int i = 0; i < numData; ++i) {
    if (CheckTensorSize(op, names[i], shapes[i]->GetStorageShape(), elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  if (CheckTensorSize(op, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (nz && CheckNzCache(op, names[2], cache, merged ? 1 : 0, context->GetInputDesc(2)->GetDataType(), elem) !=
                ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  ScatterGeom& g = out->g;
  CacheGeom(cache, merged ? 1 : 0, bnsd, &g);
  g.numTokens = sm.GetDim(0);
  if (CheckTokenRows(op, "key", key, g.numTokens, g.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CheckTokenRows(op, "value", value, g.numTokens, g.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- work split and UB plan (nothing to write: zero-sized rows or no slots -> no-op launch)
  const bool noWork = g.rowElems == 0 || g.numSlots == 0;
  out->split = noWork ? NoWork() : SplitWork(g.numTokens, hw.cores);
  bool pad = false;
  if (!noWork && PlanScatter(op, hw, elem, g, out->split.formerLen, &pad, &out->plan) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  out->key = mskv_keys::LayoutCopyKey(static_cast<uint64_t>(layout), dcode, static_cast<uint64_t>(scode), pad);
  return ge::GRAPH_SUCCESS;
}

}  // namespace mskv_tiling

#endif  // MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_IMPL_H_
