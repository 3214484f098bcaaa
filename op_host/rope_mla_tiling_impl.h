// Tiling of MskvRopeConcatAndCacheMla and MskvRopeConcatAndCacheMlaQuant (DeepSeek MLA RoPE writes): the inputs
// both read (ReadRopeMla) and their shared UB plan and tiling fields (PlanRopeMla). Host side only.
//
// Inputs (OpDef order): positions [T'], q_pe [T', Hq, R] or [T', Hq*R], k_pe [T', R] or [T', 1, R], kv_c [T', L],
// cos_sin_cache [max_position, rd], kv_c_cache [nb, bs, L] and k_pe_cache [nb, bs, R], slot_mapping [T],
// kv_c_norm_weight [L] (OPTIONAL: absent or an empty [0] tensor = no RMSNorm). Attrs: is_neox_style (0),
// epsilon (1).
#ifndef MS_KVCACHE_OP_HOST_ROPE_MLA_TILING_IMPL_H_
#define MS_KVCACHE_OP_HOST_ROPE_MLA_TILING_IMPL_H_

#include "rope_concat_and_cache_mla_tiling.h"
#include "rope_tiling_common.h"

namespace optiling {
namespace rope_mla {

// What the MLA RoPE writes read from their inputs (ReadRopeMla).
struct RopeMlaShapes {
  mskv_tiling::Hardware hw;
  bool neox = false;
  float eps = 1e-6f;
  ge::DataType dt = ge::DT_FLOAT;  // data dtype (q_pe, k_pe, kv_c; the caches unless quantized)
  int64_t esz = 0;
  uint64_t dcode = 0;
  int64_t posIs64 = 0, slotIs64 = 0;
  int64_t nb = 0, bs = 0, L = 0, R = 0, rows = 0, hq = 0, numWrite = 0;
  bool norm = false;
  int64_t wsz = 4;
  uint64_t wcode = 0;               // key digit: 0 no norm, 1 float32 weight, 2 the data dtype
  mskv_rope_tiling::RopeGeom g;
  int64_t kvPitch = 0, wPitch = 0, tree = 8;
  bool pad = false;                 // some rope, table, kv_c or weight row needs DataCopyPad
  bool tableIsData = false;
};

// Reads and checks the inputs 0 .. 8 and the attrs (quantized: int8 caches, their dtype checked by the caller).
inline ge::graphStatus ReadRopeMla(gert::TilingContext* context, const char* op, bool quantized, RopeMlaShapes* s) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  enum { kPos = 0, kQpe, kKpe, kKvc, kTable, kKvcCache, kKpeCache, kSlots, kWeight };
  Hardware hw;
  const gert::Shape* shapes[8];
  if (GetHardwareAndShapes(context, op, &hw, 8, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape &pos = *shapes[kPos], &qpe = *shapes[kQpe], &kpe = *shapes[kKpe], &kvc = *shapes[kKvc],
                    &cs = *shapes[kTable], &cc = *shapes[kKvcCache], &kc = *shapes[kKpeCache], &sm = *shapes[kSlots];
  char b1[128], b2[128];

  // ---- attrs
  const bool neox = BoolAttr(context, 0, false);
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const float* epsPtr = attrs == nullptr ? nullptr : attrs->GetAttrPointer<float>(1);
  const float eps = epsPtr == nullptr ? 1e-6f : *epsPtr;
  if (!(eps >= 0.0f) || eps > 3.0e38f) return Fail(op, "epsilon: expected a finite value >= 0, got %g", eps);

  // ---- dtypes
  // quantized: the caches hold int8 codes (the caller checks their dtype), not the data dtype
  const NamedInput data[4] = {{kKpe, "k_pe"}, {kKvc, "kv_c"}, {kKvcCache, "kv_c_cache"}, {kKpeCache, "k_pe_cache"}};
  ge::DataType dt = ge::DT_FLOAT;
  int64_t esz = 0;
  uint64_t dcode = 0;
  if (DataDType(context, op, hw, kQpe, "q_pe", data, quantized ? 2 : 4, &dt, &esz, &dcode) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  int64_t posIs64 = 0, slotIs64 = 0;
  if (IndexCode(op, "positions", context->GetInputDesc(kPos)->GetDataType(), &posIs64) != ge::GRAPH_SUCCESS ||
      IndexCode(op, "slot_mapping", context->GetInputDesc(kSlots)->GetDataType(), &slotIs64) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;

  // ---- caches
  if (cc.GetDimNum() != 3 || kc.GetDimNum() != 3 || cc.GetDim(0) != kc.GetDim(0) || cc.GetDim(1) != kc.GetDim(1))
    return Fail(op, "kv_c_cache / k_pe_cache: expected [num_blocks, block_size, kv_lora_rank] and [num_blocks, "
                "block_size, rope_dim], got %s and %s", ShapeText(cc, b1, sizeof(b1)), ShapeText(kc, b2, sizeof(b2)));
  const int64_t nb = cc.GetDim(0);
  const int64_t bs = cc.GetDim(1);
  const int64_t L = cc.GetDim(2);
  const int64_t R = kc.GetDim(2);
  if (bs < 1 || L < 1 || R < 1)
    return Fail(op, "kv_c_cache / k_pe_cache: empty dimension in %s / %s", ShapeText(cc, b1, sizeof(b1)),
                ShapeText(kc, b2, sizeof(b2)));

  // ---- rows
  if (pos.GetDimNum() != 1)
    return Fail(op, "positions: expected rank 1, got shape %s", ShapeText(pos, b1, sizeof(b1)));
  const int64_t rows = pos.GetDim(0);
  const int64_t hq = HeadsOf(op, "q_pe", qpe, rows, R);
  if (hq < 0) return ge::GRAPH_FAILED;
  const int64_t hk = HeadsOf(op, "k_pe", kpe, rows, R);
  if (hk < 0) return ge::GRAPH_FAILED;
  if (hk != 1) return Fail(op, "k_pe: expected [T', %lld] or [T', 1, %lld], got shape %s", static_cast<long long>(R),
                           static_cast<long long>(R), ShapeText(kpe, b1, sizeof(b1)));
  if (kvc.GetDimNum() != 2 || kvc.GetDim(0) != rows || kvc.GetDim(1) != L)
    return Fail(op, "kv_c: expected shape [%lld, %lld] (T', kv_lora_rank), got %s", static_cast<long long>(rows),
                static_cast<long long>(L), ShapeText(kvc, b1, sizeof(b1)));
  if (sm.GetDimNum() != 1 || sm.GetDim(0) > rows)
    return Fail(op, "slot_mapping: expected shape [T] with T <= %lld (rows of k_pe), got %s",
                static_cast<long long>(rows), ShapeText(sm, b1, sizeof(b1)));

  // ---- optional RMSNorm weight
  const gert::StorageShape* wShape = context->GetOptionalInputShape(kWeight);
  const gert::CompileTimeTensorDesc* wDesc = context->GetOptionalInputDesc(kWeight);
  bool norm = false;
  int64_t wsz = 4;
  uint64_t wcode = 0;
  if (wShape != nullptr && wDesc != nullptr && wShape->GetStorageShape().GetShapeSize() > 0) {
    const gert::Shape& w = wShape->GetStorageShape();
    const ge::DataType wdt = wDesc->GetDataType();
    if (w.GetDimNum() != 1 || w.GetDim(0) != L)
      return Fail(op, "kv_c_norm_weight: expected shape [%lld] (kv_lora_rank) or [0], got %s",
                  static_cast<long long>(L), ShapeText(w, b1, sizeof(b1)));
    if (wdt != ge::DT_FLOAT && wdt != dt)
      return Fail(op, "kv_c_norm_weight: expected dtype float32 or %s (the data dtype), got %s", DTypeName(dt),
                  DTypeName(wdt));
    norm = true;
    wsz = wdt == ge::DT_FLOAT ? 4 : 2;
    wcode = wdt == ge::DT_FLOAT ? 1 : 2;
  }

  // ---- geometry and SoC rules
  RopeGeom g;
  if (TableGeom(op, cs, context->GetInputDesc(kTable)->GetDataType(), dt, esz, R, hw, &g) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  const int64_t kvPitch = AlignUp(L, Max64(PerBlock(esz), 8));
  const int64_t wPitch = AlignUp(L, Max64(PerBlock(wsz), 8));
  const bool kvPad = (L * esz) % kBlockBytes != 0 || (norm && (L * wsz) % kBlockBytes != 0);
  if (kvPad && hw.is310P)
    return Fail(op, "kv_c rows of %lld bytes (or their norm weight) are not a multiple of 32 bytes; Ascend310P has no "
                "DataCopyPad, so such rows are unsupported there", static_cast<long long>(L * esz));
  const bool pad = g.pad || kvPad;
  int64_t tree = 8;
  while (tree < L) tree *= 2;

  s->hw = hw;
  s->neox = neox;
  s->eps = eps;
  s->dt = dt;
  s->esz = esz;
  s->dcode = dcode;
  s->posIs64 = posIs64;
  s->slotIs64 = slotIs64;
  s->nb = nb;
  s->bs = bs;
  s->L = L;
  s->R = R;
  s->rows = rows;
  s->hq = hq;
  s->numWrite = sm.GetDim(0);
  s->norm = norm;
  s->wsz = wsz;
  s->wcode = wcode;
  s->g = g;
  s->kvPitch = kvPitch;
  s->wPitch = wPitch;
  s->tree = tree;
  s->pad = pad;
  s->tableIsData = context->GetInputDesc(kTable)->GetDataType() != ge::DT_FLOAT;
  return ge::GRAPH_SUCCESS;
}

// The work split and UB plan (extraBytes: UB the caller's kernel allocates besides the rotation's and the
// norm's; kvViaChunks: the kv_c rows go through the rotated-chunk buffers also without a norm, as the quantizing
// kernel's do, op_kernel/rope_mla_kernel.h) and the tiling fields of MskvRopeConcatAndCacheMla into td;
// *usedCores: the block dim.
inline ge::graphStatus PlanRopeMla(const char* op, const RopeMlaShapes& s, int64_t extraBytes, bool kvViaChunks,
                                   RopeConcatAndCacheMlaTilingData& td, int64_t* usedCores) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  const CoreSplit split = SplitWork(s.rows, s.hw.cores);
  PlanInputs in;
  in.g = s.g;
  in.rotHeads = s.hq;
  in.copyHeads = 0;
  const bool viaChunks = s.norm || kvViaChunks;
  in.copyRowElems = viaChunks ? 0 : s.kvPitch;
  in.normRowElems = viaChunks ? s.kvPitch : 0;
  // norm scratch (op_kernel KvNorm): the tree (fp32 data: 5 double-float rows) and the 8-lane scalars, the
  // fp32 weight and the weight's staging row
  const bool dd = s.dt == ge::DT_FLOAT;
  const int64_t tree = s.tree;
  in.extraBytes = extraBytes +
                  (s.norm ? (dd ? 5 * tree * 4 + 16 * 32 + 32 : tree * 4 + 64) + s.wPitch * 4 + s.wPitch * s.wsz : 0);
  RopePlan plan;
  if (PlanUb(op, s.hw, in, split.formerLen, &plan) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  td.set_numRows(s.rows);
  td.set_numWrite(s.numWrite);
  td.set_numSlots(s.nb * s.bs);
  td.set_blockSize(s.bs);
  SetRopeTiling(td, in, s.R, plan, split);
  td.set_qHeads(s.hq);
  td.set_copyElems(Max64(plan.copyElems, s.kvPitch));
  td.set_kvRank(s.L);
  td.set_kvPitch(s.kvPitch);
  td.set_weightPitch(s.wPitch);
  td.set_treeElems(tree);
  td.set_hasNorm(s.norm ? 1 : 0);
  td.set_posIs64(s.posIs64);
  td.set_slotIs64(s.slotIs64);
  td.set_epsilon(s.eps);
  *usedCores = split.usedCoreNum;
  return ge::GRAPH_SUCCESS;
}

}  // namespace rope_mla
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_MLA_TILING_IMPL_H_
