// MskvRopeConcatAndCacheMla: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_concat_and_cache_mla.SPEC): positions [T'],
// q_pe [T', Hq, R] or [T', Hq*R], k_pe [T', R] or [T', 1, R], kv_c [T', L], cos_sin_cache [max_position, rd],
// kv_c_cache [nb, bs, L] and k_pe_cache [nb, bs, R] (written in place through their input addresses),
// slot_mapping [T], kv_c_norm_weight [L] (OPTIONAL: absent or an empty [0] tensor = no RMSNorm).
// Outputs: q_pe_out, k_pe_out, kv_c_out (kv_c normalised, or a copy). Attrs: is_neox_style, epsilon.
//
// Tiling: the T' rows over all vector cores (main/tail share); UB batches as for MskvRopeReshapeAndCache
// (op_host/rope_tiling_common.h), the kv_c rows (RMSNorm) going through the rotated-chunk buffers.
// Tiling key = pad * 10000 + weight (0 none, 1 float32, 2 the data dtype) * 1000 + dtype * 100 +
// table * 10 + style (1 NeoX, 0 GPT-J).
#include "rope_concat_and_cache_mla_tiling.h"
#include "rope_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvRopeConcatAndCacheMla";
enum { kPos = 0, kQpe, kKpe, kKvc, kTable, kKvcCache, kKpeCache, kSlots, kWeight };

ge::graphStatus RopeConcatAndCacheMlaTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  Hardware hw;
  const gert::Shape* shapes[8];
  if (GetHardwareAndShapes(context, kOp, &hw, 8, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape &pos = *shapes[kPos], &qpe = *shapes[kQpe], &kpe = *shapes[kKpe], &kvc = *shapes[kKvc],
                    &cs = *shapes[kTable], &cc = *shapes[kKvcCache], &kc = *shapes[kKpeCache], &sm = *shapes[kSlots];
  char b1[128], b2[128];

  // ---- attrs
  const bool neox = BoolAttr(context, 0, false);
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const float* epsPtr = attrs == nullptr ? nullptr : attrs->GetAttrPointer<float>(1);
  const float eps = epsPtr == nullptr ? 1e-6f : *epsPtr;
  if (!(eps >= 0.0f) || eps > 3.0e38f) return Fail(kOp, "epsilon: expected a finite value >= 0, got %g", eps);

  // ---- dtypes
  const NamedInput data[4] = {{kKpe, "k_pe"}, {kKvc, "kv_c"}, {kKvcCache, "kv_c_cache"}, {kKpeCache, "k_pe_cache"}};
  ge::DataType dt = ge::DT_FLOAT;
  int64_t esz = 0;
  uint64_t dcode = 0;
  if (DataDType(context, kOp, hw, kQpe, "q_pe", data, 4, &dt, &esz, &dcode) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  int64_t posIs64 = 0, slotIs64 = 0;
  if (IndexCode(kOp, "positions", context->GetInputDesc(kPos)->GetDataType(), &posIs64) != ge::GRAPH_SUCCESS ||
      IndexCode(kOp, "slot_mapping", context->GetInputDesc(kSlots)->GetDataType(), &slotIs64) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;

  // ---- caches
  if (cc.GetDimNum() != 3 || kc.GetDimNum() != 3 || cc.GetDim(0) != kc.GetDim(0) || cc.GetDim(1) != kc.GetDim(1))
    return Fail(kOp, "kv_c_cache / k_pe_cache: expected [num_blocks, block_size, kv_lora_rank] and [num_blocks, "
                "block_size, rope_dim], got %s and %s", ShapeText(cc, b1, sizeof(b1)), ShapeText(kc, b2, sizeof(b2)));
  const int64_t nb = cc.GetDim(0);
  const int64_t bs = cc.GetDim(1);
  const int64_t L = cc.GetDim(2);
  const int64_t R = kc.GetDim(2);
  if (bs < 1 || L < 1 || R < 1)
    return Fail(kOp, "kv_c_cache / k_pe_cache: empty dimension in %s / %s", ShapeText(cc, b1, sizeof(b1)),
                ShapeText(kc, b2, sizeof(b2)));

  // ---- rows
  if (pos.GetDimNum() != 1)
    return Fail(kOp, "positions: expected rank 1, got shape %s", ShapeText(pos, b1, sizeof(b1)));
  const int64_t rows = pos.GetDim(0);
  const int64_t hq = HeadsOf(kOp, "q_pe", qpe, rows, R);
  if (hq < 0) return ge::GRAPH_FAILED;
  const int64_t hk = HeadsOf(kOp, "k_pe", kpe, rows, R);
  if (hk < 0) return ge::GRAPH_FAILED;
  if (hk != 1) return Fail(kOp, "k_pe: expected [T', %lld] or [T', 1, %lld], got shape %s", static_cast<long long>(R),
                           static_cast<long long>(R), ShapeText(kpe, b1, sizeof(b1)));
  if (kvc.GetDimNum() != 2 || kvc.GetDim(0) != rows || kvc.GetDim(1) != L)
    return Fail(kOp, "kv_c: expected shape [%lld, %lld] (T', kv_lora_rank), got %s", static_cast<long long>(rows),
                static_cast<long long>(L), ShapeText(kvc, b1, sizeof(b1)));
  if (sm.GetDimNum() != 1 || sm.GetDim(0) > rows)
    return Fail(kOp, "slot_mapping: expected shape [T] with T <= %lld (rows of k_pe), got %s",
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
      return Fail(kOp, "kv_c_norm_weight: expected shape [%lld] (kv_lora_rank) or [0], got %s",
                  static_cast<long long>(L), ShapeText(w, b1, sizeof(b1)));
    if (wdt != ge::DT_FLOAT && wdt != dt)
      return Fail(kOp, "kv_c_norm_weight: expected dtype float32 or %s (the data dtype), got %s", DTypeName(dt),
                  DTypeName(wdt));
    norm = true;
    wsz = wdt == ge::DT_FLOAT ? 4 : 2;
    wcode = wdt == ge::DT_FLOAT ? 1 : 2;
  }

  // ---- geometry and SoC rules
  RopeGeom g;
  if (TableGeom(kOp, cs, context->GetInputDesc(kTable)->GetDataType(), dt, esz, R, hw, &g) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  const int64_t kvPitch = AlignUp(L, Max64(PerBlock(esz), 8));
  const int64_t wPitch = AlignUp(L, Max64(PerBlock(wsz), 8));
  const bool kvPad = (L * esz) % kBlockBytes != 0 || (norm && (L * wsz) % kBlockBytes != 0);
  if (kvPad && hw.is310P)
    return Fail(kOp, "kv_c rows of %lld bytes (or their norm weight) are not a multiple of 32 bytes; Ascend310P has no "
                "DataCopyPad, so such rows are unsupported there", static_cast<long long>(L * esz));
  const bool pad = g.pad || kvPad;
  int64_t tree = 8;
  while (tree < L) tree *= 2;

  // ---- work split and UB plan
  const CoreSplit split = SplitWork(rows, hw.cores);
  PlanInputs in;
  in.g = g;
  in.rotHeads = hq;
  in.copyHeads = 0;
  in.copyRowElems = norm ? 0 : kvPitch;
  in.normRowElems = norm ? kvPitch : 0;
  // norm scratch (op_kernel KvNorm): the tree (fp32 data: 5 double-float rows) and the 8-lane scalars, the
  // fp32 weight and the weight's staging row
  const bool dd = dt == ge::DT_FLOAT;
  in.extraBytes = norm ? (dd ? 5 * tree * 4 + 16 * 32 + 32 : tree * 4 + 64) + wPitch * 4 + wPitch * wsz : 0;
  RopePlan plan;
  if (PlanUb(kOp, hw, in, split.formerLen, &plan) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  RopeConcatAndCacheMlaTilingData td;
  td.set_numRows(rows);
  td.set_numWrite(sm.GetDim(0));
  td.set_numSlots(nb * bs);
  td.set_blockSize(bs);
  SetRopeTiling(td, in, R, plan, split);
  td.set_qHeads(hq);
  td.set_copyElems(Max64(plan.copyElems, kvPitch));
  td.set_kvRank(L);
  td.set_kvPitch(kvPitch);
  td.set_weightPitch(wPitch);
  td.set_treeElems(tree);
  td.set_hasNorm(norm ? 1 : 0);
  td.set_posIs64(posIs64);
  td.set_slotIs64(slotIs64);
  td.set_epsilon(eps);

  const bool tableIsData = context->GetInputDesc(kTable)->GetDataType() != ge::DT_FLOAT;
  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::RopeKey(pad, wcode, dcode, tableIsData, neox));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvRopeConcatAndCacheMla : public OpDef {
 public:
  explicit MskvRopeConcatAndCacheMla(const char* name) : OpDef(name) {
    this->Attr("is_neox_style").AttrType(OPTIONAL).Bool(false);
    this->Attr("epsilon").AttrType(OPTIONAL).Float(1e-6);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_rope_tiling::kRopeMlaRows, mskv_rope_tiling::kRopeMlaRows310P,
                                   optiling::RopeConcatAndCacheMlaTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_rope_tiling::RopeMlaRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"positions", r.pos}, {"q_pe", r.data}, {"k_pe", r.data}, {"kv_c", r.data},
                                          {"cos_sin_cache", r.table}, {"kv_c_cache", r.data}, {"k_pe_cache", r.data},
                                          {"slot_mapping", r.slots}, {"kv_c_norm_weight", r.weight, OPTIONAL}},
                                          {{"q_pe_out", r.data}, {"k_pe_out", r.data}, {"kv_c_out", r.data}});
  }
};
OP_ADD(MskvRopeConcatAndCacheMla);
}  // namespace ops
