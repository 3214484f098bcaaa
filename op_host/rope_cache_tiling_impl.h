// Tiling of MskvRopeReshapeAndCache and MskvRopeReshapeAndCacheMerged (one function, `merged` selects the cache
// argument form). Host side only.
//
// Inputs (OpDef order = ms_kvcache.ops.rope_reshape_and_cache(_merged).SPEC): positions [T'], query
// [T', Hq, D] or [T', Hq*D], key / value [T', Hk, D] or [T', Hk*D], cos_sin_cache [max_position, rd],
// then key_cache, value_cache [nb, bs, Hk, D] (BSND) / [nb, Hk, bs, D] (BNSD) or kv_cache [2, nb, ...],
// then slot_mapping [T]. Attrs: is_neox_style, cache_layout.
//
// Work split: the T' rows over all vector cores (main/tail share, mskv_tiling::SplitWork). UB: the
// largest token batch whose buffers fit (mskv_rope_tiling::PlanUb). Tiling key = pad * 10000 +
// layout (0 BSND, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32) * 100 + table (0 float32, 1 the data
// dtype) * 10 + style (1 NeoX, 0 GPT-J); pad = some head or table row needs DataCopyPad (A2/A3 only).
#ifndef MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_IMPL_H_
#define MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_IMPL_H_

#include "rope_cache_tiling_data.h"
#include "rope_tiling_common.h"

namespace optiling {
namespace rope_cache {

inline ge::graphStatus RopeCacheTiling(gert::TilingContext* context, const char* op, bool merged) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  Hardware hw;
  const int nIn = merged ? 7 : 8;
  const gert::Shape* shapes[8] = {};
  if (GetHardwareAndShapes(context, op, &hw, nIn, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int kPos = 0, kQuery = 1, kKey = 2, kValue = 3, kTable = 4, kCache = 5;
  const int kSlots = merged ? 6 : 7;
  const gert::Shape &pos = *shapes[kPos], &q = *shapes[kQuery], &k = *shapes[kKey], &v = *shapes[kValue],
                    &cs = *shapes[kTable], &kc = *shapes[kCache], &sm = *shapes[kSlots];
  char b1[128], b2[128];

  // ---- attrs
  const bool neox = BoolAttr(context, 0, true);
  bool bnsd = false;
  if (LayoutAttr(context, 1, op, &bnsd) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- dtypes
  const NamedInput data[4] = {{kKey, "key"}, {kValue, "value"}, {kCache, merged ? "kv_cache" : "key_cache"},
                              {merged ? kCache : 6, merged ? "kv_cache" : "value_cache"}};
  ge::DataType dt = ge::DT_FLOAT;
  int64_t esz = 0;
  uint64_t dcode = 0;
  if (DataDType(context, op, hw, kQuery, "query", data, 4, &dt, &esz, &dcode) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  const ge::DataType csDt = context->GetInputDesc(kTable)->GetDataType();
  int64_t posIs64 = 0, slotIs64 = 0;
  if (IndexCode(op, "positions", context->GetInputDesc(kPos)->GetDataType(), &posIs64) != ge::GRAPH_SUCCESS ||
      IndexCode(op, "slot_mapping", context->GetInputDesc(kSlots)->GetDataType(), &slotIs64) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;

  // ---- cache geometry
  const size_t first = merged ? 1 : 0;
  if (kc.GetDimNum() != 4 + first || (merged && kc.GetDim(0) != 2)) {
    return Fail(op, "%s: expected %s, got shape %s", merged ? "kv_cache" : "key_cache",
                merged ? "rank 5 [2, num_blocks, ...]" : "rank 4", ShapeText(kc, b1, sizeof(b1)));
  }
  if (!merged) {
    const gert::Shape& vc = *shapes[6];
    if (!SameShape(vc, kc))
      return Fail(op, "value_cache: expected shape %s (as key_cache), got %s", ShapeText(kc, b1, sizeof(b1)),
                  ShapeText(vc, b2, sizeof(b2)));
  }
  const int64_t nb = kc.GetDim(first);
  const int64_t bs = bnsd ? kc.GetDim(first + 2) : kc.GetDim(first + 1);
  const int64_t hk = bnsd ? kc.GetDim(first + 1) : kc.GetDim(first + 2);
  const int64_t d = kc.GetDim(first + 3);
  if (bs < 1 || hk < 1 || d < 1)
    return Fail(op, "%s: empty block / head dimension in shape %s", merged ? "kv_cache" : "key_cache",
                ShapeText(kc, b1, sizeof(b1)));

  // ---- token rows
  if (pos.GetDimNum() != 1) return Fail(op, "positions: expected rank 1, got shape %s", ShapeText(pos, b1, sizeof(b1)));
  const int64_t rows = pos.GetDim(0);
  const int64_t hq = HeadsOf(op, "query", q, rows, d);
  if (hq < 0) return ge::GRAPH_FAILED;
  const int64_t hkk = HeadsOf(op, "key", k, rows, d);
  if (hkk < 0) return ge::GRAPH_FAILED;
  const int64_t hv = HeadsOf(op, "value", v, rows, d);
  if (hv < 0) return ge::GRAPH_FAILED;
  if (hkk != hk || hv != hk)
    return Fail(op, "key / value: expected num_kv_heads = %lld (heads of the cache), got %lld / %lld",
                static_cast<long long>(hk), static_cast<long long>(hkk), static_cast<long long>(hv));
  if (sm.GetDimNum() != 1 || sm.GetDim(0) > rows)
    return Fail(op, "slot_mapping: expected shape [T] with T <= %lld (rows of key), got %s",
                static_cast<long long>(rows), ShapeText(sm, b1, sizeof(b1)));

  // ---- rotation geometry, SoC rules
  RopeGeom g;
  if (TableGeom(op, cs, csDt, dt, esz, d, hw, &g) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t gapBytes = (bs - 1) * d * esz;
  if (bnsd && gapBytes > 0xFFFFFFFFll)
    return Fail(op, "block_size * head_size = %lld elements is too large for one strided copy",
                static_cast<long long>(bs * d));

  // ---- work split and UB plan
  const CoreSplit split = SplitWork(rows, hw.cores);
  PlanInputs in;
  in.g = g;
  in.rotHeads = Max64(hq, hk);
  in.copyHeads = hk;
  RopePlan plan;
  if (PlanUb(op, hw, in, split.formerLen, &plan) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  RopeReshapeAndCacheTilingData td;
  td.set_numRows(rows);
  td.set_numWrite(sm.GetDim(0));
  td.set_numSlots(nb * bs);
  td.set_blockSize(bs);
  SetRopeTiling(td, in, d, plan, split);
  td.set_qHeads(hq);
  td.set_kHeads(hk);
  td.set_copyElems(Max64(plan.copyElems, g.pitch));
  td.set_posIs64(posIs64);
  td.set_slotIs64(slotIs64);
  td.set_blockStride(bs * hk * d);
  td.set_slotStride(bnsd ? d : hk * d);
  td.set_headStride(bnsd ? bs * d : d);
  td.set_vPlaneOffset(merged ? nb * bs * hk * d : 0);

  return FinishTiling(context, op, hw, td, split.usedCoreNum,
                      mskv_keys::RopeKey(g.pad, bnsd, dcode, csDt != ge::DT_FLOAT, neox));
}

}  // namespace rope_cache
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_IMPL_H_
