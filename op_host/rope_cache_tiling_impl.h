// Tiling of MskvRopeReshapeAndCache and MskvRopeReshapeAndCacheMerged (one function, `merged` selects the cache
// argument form). Host side only.
//
// Inputs (OpDef order = ms_kvcache.ops.rope_reshape_and_cache(_merged).SPEC): positions [T'], query
// [T', Hq, D] or [T', Hq*D], key / value [T', Hk, D] or [T', Hk*D], cos_sin_cache [max_position, rd],
// then key_cache, value_cache [nb, bs, Hk, D] (BSND) / [nb, Hk, bs, D] (BNSD) / [nb, Hk*D/C0, bs, C0] (NZ, with
// key [T', Hk, D]) or kv_cache [2, nb, ...],
// then slot_mapping [T]. Attrs: is_neox_style, cache_layout.
//
// Work split: the T' rows over all vector cores (main/tail share, mskv_tiling::SplitWork). UB: the
// largest token batch whose buffers fit (mskv_rope_tiling::PlanUb). Tiling key = pad * 10000 +
// layout (0 BSND, 1 BNSD, 2 NZ) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32) * 100 + table (0 float32, 1 the data
// dtype) * 10 + style (1 NeoX, 0 GPT-J); pad = some head or table row needs DataCopyPad (A2/A3 only).
#ifndef MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_IMPL_H_
#define MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_IMPL_H_

#include "rope_cache_tiling_data.h"
#include "rope_tiling_common.h"

namespace optiling {
namespace rope_cache {

// What the fused GQA RoPE writes read from their inputs (ReadRopeCache).
struct RopeCacheShapes {
  bool neox = true;
  bool bnsd = false;
  int64_t layout = 0;  // the cache_layout code (0 BSND, 1 BNSD, 2 NZ): the key's layout digit
  int64_t c0 = 0;      // NZ caches [nb, Hk*D/C0, bs, C0]: C0 (32 bytes of the cache dtype); else 0
  ge::DataType dt = ge::DT_FLOAT;     // data dtype (query, key, value; the caches unless quantized)
  ge::DataType csDt = ge::DT_FLOAT;   // cos_sin_cache dtype
  int64_t esz = 0;
  uint64_t dcode = 0;
  int64_t posIs64 = 0, slotIs64 = 0;
  int64_t nb = 0, bs = 0, hk = 0, hq = 0, d = 0;
  int64_t rows = 0;                    // T'
  int64_t numWrite = 0;                // T
  mskv_rope_tiling::RopeGeom g;
};

// Reads and checks positions, query, key, value, cos_sin_cache, the caches and slot_mapping of
// MskvRopeReshapeAndCache(Merged) (quantized = false: caches of the data dtype; inputs 0 .. 7, merged: 0 .. 6)
// or MskvRopeReshapeAndCacheQuant (quantized = true: int8 caches; value_cache OPTIONAL at 6, absent with
// `merged`; slot_mapping at IR index 7). Attrs: is_neox_style (0), cache_layout (1).
inline ge::graphStatus ReadRopeCache(gert::TilingContext* context, const char* op, const mskv_tiling::Hardware& hw,
                                     bool merged, bool quantized, RopeCacheShapes* s) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  const int kPos = 0, kQuery = 1, kKey = 2, kValue = 3, kTable = 4, kCache = 5;
  const int kSlots = quantized ? 7 : (merged ? 6 : 7);
  const gert::StorageShape* shapes[8] = {};
  if (GetInputShapes(context, op, quantized ? 6 : kSlots + 1, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::CompileTimeTensorDesc* smDesc = nullptr;
  const gert::Shape* vcShape = nullptr;
  if (!quantized) {
    smDesc = context->GetInputDesc(kSlots);
    if (!merged) vcShape = &shapes[6]->GetStorageShape();
  } else {
    // slot_mapping follows the OPTIONAL value_cache: read both by IR index
    const gert::StorageShape* sm = context->GetRequiredInputShape(kSlots);
    smDesc = context->GetRequiredInputDesc(kSlots);
    if (sm == nullptr || smDesc == nullptr) return Fail(op, "input %d (slot_mapping) is missing", kSlots);
    shapes[kSlots] = sm;
    const gert::StorageShape* vc = context->GetOptionalInputShape(6);
    vcShape = vc == nullptr ? nullptr : &vc->GetStorageShape();
    if (vcShape != nullptr && vcShape->GetDimNum() == 1 && vcShape->GetDim(0) == 0) vcShape = nullptr;
    if (merged && vcShape != nullptr) return Fail(op, "value_cache: expected absent ([0]) with kv_format 1 (MERGED_KV)");
    if (!merged && vcShape == nullptr) return Fail(op, "value_cache: expected a cache with kv_format 2, got none");
  }
  const gert::Shape& pos = shapes[kPos]->GetStorageShape();
  const gert::Shape& q = shapes[kQuery]->GetStorageShape();
  const gert::Shape& k = shapes[kKey]->GetStorageShape();
  const gert::Shape& v = shapes[kValue]->GetStorageShape();
  const gert::Shape& cs = shapes[kTable]->GetStorageShape();
  const gert::Shape& kc = shapes[kCache]->GetStorageShape();
  const gert::Shape& sm = shapes[kSlots]->GetStorageShape();
  char b1[128], b2[128];

  // ---- attrs
  s->neox = BoolAttr(context, 0, true);
  if (LayoutCodeAttr(context, 1, op, mskv_attr::kLayoutBSND, true, &s->layout) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  s->bnsd = s->layout == mskv_attr::kLayoutBNSD;
  const bool bnsd = s->bnsd;
  const bool nz = s->layout == mskv_attr::kLayoutNZ;

  // ---- dtypes (quantized: the caches are checked by the caller)
  const NamedInput data[4] = {{kKey, "key"}, {kValue, "value"}, {kCache, merged ? "kv_cache" : "key_cache"},
                              {merged ? kCache : 6, merged ? "kv_cache" : "value_cache"}};
  if (DataDType(context, op, hw, kQuery, "query", data, quantized ? 2 : 4, &s->dt, &s->esz, &s->dcode) !=
      ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  s->csDt = context->GetInputDesc(kTable)->GetDataType();
  if (IndexCode(op, "positions", context->GetInputDesc(kPos)->GetDataType(), &s->posIs64) != ge::GRAPH_SUCCESS ||
      IndexCode(op, "slot_mapping", smDesc->GetDataType(), &s->slotIs64) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;

  // ---- cache geometry
  const size_t first = merged ? 1 : 0;
  if (kc.GetDimNum() != 4 + first || (merged && kc.GetDim(0) != 2)) {
    return Fail(op, "%s: expected %s, got shape %s", merged ? "kv_cache" : "key_cache",
                merged ? "rank 5 [2, num_blocks, ...]" : "rank 4", ShapeText(kc, b1, sizeof(b1)));
  }
  if (!merged && !SameShape(*vcShape, kc))
    return Fail(op, "value_cache: expected shape %s (as key_cache), got %s", ShapeText(kc, b1, sizeof(b1)),
                ShapeText(*vcShape, b2, sizeof(b2)));
  if (nz) {
    // [nb, Hk*D/C0, bs, C0]: Hk and D from the key rows [T', Hk, D] (the rotation works per head); each head
    // a whole number of C0 pieces
    const ge::DataType cdt = context->GetInputDesc(kCache)->GetDataType();
    if (CheckNzCache(op, merged ? "kv_cache" : "key_cache", kc, first, cdt, quantized ? 1 : s->esz) !=
        ge::GRAPH_SUCCESS) {
      return ge::GRAPH_FAILED;
    }
    s->c0 = kc.GetDim(first + 3);
    if (k.GetDimNum() != 3 || k.GetDim(1) * k.GetDim(2) != kc.GetDim(first + 1) * s->c0 || k.GetDim(2) % s->c0 != 0) {
      return Fail(op, "key: with an NZ cache expected [T', num_kv_heads, head_size] with num_kv_heads * head_size = "
                  "%lld and head_size a multiple of C0 = %lld, got shape %s",
                  static_cast<long long>(kc.GetDim(first + 1) * s->c0), static_cast<long long>(s->c0),
                  ShapeText(k, b1, sizeof(b1)));
    }
    s->nb = kc.GetDim(first);
    s->bs = kc.GetDim(first + 2);
    s->hk = k.GetDim(1);
    s->d = k.GetDim(2);
  } else {
    s->nb = kc.GetDim(first);
    s->bs = bnsd ? kc.GetDim(first + 2) : kc.GetDim(first + 1);
    s->hk = bnsd ? kc.GetDim(first + 1) : kc.GetDim(first + 2);
    s->d = kc.GetDim(first + 3);
  }
  const int64_t d = s->d;
  if (s->bs < 1 || s->hk < 1 || d < 1)
    return Fail(op, "%s: empty block / head dimension in shape %s", merged ? "kv_cache" : "key_cache",
                ShapeText(kc, b1, sizeof(b1)));

  // ---- token rows
  if (pos.GetDimNum() != 1) return Fail(op, "positions: expected rank 1, got shape %s", ShapeText(pos, b1, sizeof(b1)));
  s->rows = pos.GetDim(0);
  s->hq = HeadsOf(op, "query", q, s->rows, d);
  if (s->hq < 0) return ge::GRAPH_FAILED;
  const int64_t hkk = HeadsOf(op, "key", k, s->rows, d);
  if (hkk < 0) return ge::GRAPH_FAILED;
  const int64_t hv = HeadsOf(op, "value", v, s->rows, d);
  if (hv < 0) return ge::GRAPH_FAILED;
  if (hkk != s->hk || hv != s->hk)
    return Fail(op, "key / value: expected num_kv_heads = %lld (heads of the cache), got %lld / %lld",
                static_cast<long long>(s->hk), static_cast<long long>(hkk), static_cast<long long>(hv));
  if (sm.GetDimNum() != 1 || sm.GetDim(0) > s->rows)
    return Fail(op, "slot_mapping: expected shape [T] with T <= %lld (rows of key), got %s",
                static_cast<long long>(s->rows), ShapeText(sm, b1, sizeof(b1)));
  s->numWrite = sm.GetDim(0);

  // ---- rotation geometry, SoC rules
  if (TableGeom(op, cs, s->csDt, s->dt, s->esz, d, hw, &s->g) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t gapBytes = (s->bs - 1) * d * (quantized ? 1 : s->esz);
  if (bnsd && gapBytes > 0xFFFFFFFFll)
    return Fail(op, "block_size * head_size = %lld elements is too large for one strided copy",
                static_cast<long long>(s->bs * d));
  return ge::GRAPH_SUCCESS;
}

// The RopeReshapeAndCacheTilingData fields of shapes `s`, UB plan `plan` (of `in`) and work split.
inline void SetRopeCacheTiling(RopeReshapeAndCacheTilingData& td, const RopeCacheShapes& s,
                               const mskv_rope_tiling::PlanInputs& in, const mskv_rope_tiling::RopePlan& plan,
                               const mskv_tiling::CoreSplit& split, bool merged) {
  const int64_t d = s.d;
  td.set_numRows(s.rows);
  td.set_numWrite(s.numWrite);
  td.set_numSlots(s.nb * s.bs);
  td.set_blockSize(s.bs);
  mskv_rope_tiling::SetRopeTiling(td, in, d, plan, split);
  td.set_qHeads(s.hq);
  td.set_kHeads(s.hk);
  td.set_copyElems(mskv_tiling::Max64(plan.copyElems, s.g.pitch));
  td.set_posIs64(s.posIs64);
  td.set_slotIs64(s.slotIs64);
  td.set_blockStride(s.bs * s.hk * d);
  if (s.c0 > 0) {  // NZ: the C0 pieces of a slot are block_size * C0 apart (rope::CacheHeadsOut)
    td.set_slotStride(s.c0);
    td.set_headStride(s.bs * s.c0);
  } else {
    td.set_slotStride(s.bnsd ? d : s.hk * d);
    td.set_headStride(s.bnsd ? s.bs * d : d);
  }
  td.set_cacheSegElems(s.c0);
  td.set_vPlaneOffset(merged ? s.nb * s.bs * s.hk * d : 0);
}

inline ge::graphStatus RopeCacheTiling(gert::TilingContext* context, const char* op, bool merged) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  Hardware hw;
  if (GetHardware(context, op, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  RopeCacheShapes s;
  if (ReadRopeCache(context, op, hw, merged, false, &s) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- work split and UB plan
  const CoreSplit split = SplitWork(s.rows, hw.cores);
  PlanInputs in;
  in.g = s.g;
  in.rotHeads = Max64(s.hq, s.hk);
  in.copyHeads = s.hk;
  RopePlan plan;
  if (PlanUb(op, hw, in, split.formerLen, &plan) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  RopeReshapeAndCacheTilingData td;
  SetRopeCacheTiling(td, s, in, plan, split, merged);
  return FinishTiling(context, op, hw, td, split.usedCoreNum,
                      mskv_keys::RopeKey(s.g.pad, static_cast<uint64_t>(s.layout), s.dcode, s.csDt != ge::DT_FLOAT,
                                         s.neox));
}

// The SetTiling functions of MskvRopeReshapeAndCache (kMerged false: key_cache and value_cache) and
// MskvRopeReshapeAndCacheMerged (kMerged true: one kv_cache [2, nb, ...]).
template <bool kMerged>
ge::graphStatus RopeCacheTilingOf(gert::TilingContext* context) {
  return RopeCacheTiling(context, kMerged ? "MskvRopeReshapeAndCacheMerged" : "MskvRopeReshapeAndCache", kMerged);
}

}  // namespace rope_cache
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_IMPL_H_
