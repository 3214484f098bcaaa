// MskvReropeCachedKeys: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rerope_cached_keys.SPEC): key_cache [nb, bs, H, D]
// (BSND) / [nb, H, bs, D] (BNSD) / [nb, bs, D] (one head), rotated in place through its input address;
// slot_mapping [N], old_positions [N], new_positions [N] (one index dtype), cos_sin_cache
// [max_position, rd]. Output: status, int32 [1], never written. Attrs: is_neox_style, cache_layout.
//
// Tiling: the N entries over all vector cores (main/tail share); each core gathers batches of valid
// entries (slot and both positions in range), UB planned as for MskvRopeReshapeAndCache with two table rows
// per entry and the fp32 scratch of the delta rotation. Tiling key = pad * 10000 + layout * 1000 +
// dtype * 100 + table * 10 + style (as MskvRopeReshapeAndCache).
#include "rerope_cached_keys_tiling.h"
#include "rope_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvReropeCachedKeys";
enum { kCache = 0, kSlots, kOld, kNew, kTable };

ge::graphStatus ReropeCachedKeysTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  Hardware hw;
  const gert::Shape* shapes[5];
  if (GetHardwareAndShapes(context, kOp, &hw, 5, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape &kc = *shapes[kCache], &sm = *shapes[kSlots], &po = *shapes[kOld], &pn = *shapes[kNew],
                    &cs = *shapes[kTable];
  char b1[128], b2[128];

  const bool neox = BoolAttr(context, 0, true);
  bool bnsd = false;
  if (LayoutAttr(context, 1, kOp, &bnsd) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  ge::DataType dt = ge::DT_FLOAT;
  int64_t esz = 0;
  uint64_t dcode = 0;
  if (DataDType(context, kOp, hw, kCache, "key_cache", nullptr, 0, &dt, &esz, &dcode) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  int64_t slotIs64 = 0, posIs64 = 0, newIs64 = 0;
  if (IndexCode(kOp, "slot_mapping", context->GetInputDesc(kSlots)->GetDataType(), &slotIs64) != ge::GRAPH_SUCCESS ||
      IndexCode(kOp, "old_positions", context->GetInputDesc(kOld)->GetDataType(), &posIs64) != ge::GRAPH_SUCCESS ||
      IndexCode(kOp, "new_positions", context->GetInputDesc(kNew)->GetDataType(), &newIs64) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  if (newIs64 != posIs64) return Fail(kOp, "new_positions: expected the dtype of old_positions");

  // ---- cache geometry: [nb, bs, D] is one head per slot
  int64_t nb = 0, bs = 0, h = 1, d = 0;
  if (kc.GetDimNum() == 3) {
    nb = kc.GetDim(0);
    bs = kc.GetDim(1);
    d = kc.GetDim(2);
    bnsd = false;
  } else if (kc.GetDimNum() == 4) {
    nb = kc.GetDim(0);
    bs = bnsd ? kc.GetDim(2) : kc.GetDim(1);
    h = bnsd ? kc.GetDim(1) : kc.GetDim(2);
    d = kc.GetDim(3);
  } else {
    return Fail(kOp, "key_cache: expected rank 3 or 4, got shape %s", ShapeText(kc, b1, sizeof(b1)));
  }
  if (bs < 1 || h < 1 || d < 1)
    return Fail(kOp, "key_cache: empty block / head dimension in shape %s", ShapeText(kc, b1, sizeof(b1)));
  if (sm.GetDimNum() != 1)
    return Fail(kOp, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  const int64_t n = sm.GetDim(0);
  if (!SameShape(po, sm) || !SameShape(pn, sm))
    return Fail(kOp, "old_positions / new_positions: expected shape [%lld] (as slot_mapping), got %s / %s",
                static_cast<long long>(n), ShapeText(po, b1, sizeof(b1)), ShapeText(pn, b2, sizeof(b2)));

  RopeGeom g;
  if (TableGeom(kOp, cs, context->GetInputDesc(kTable)->GetDataType(), dt, esz, d, hw, &g) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;
  if (bnsd && (bs - 1) * d * esz > 0xFFFFFFFFll)
    return Fail(kOp, "block_size * head_size = %lld elements is too large for one strided copy",
                static_cast<long long>(bs * d));
  const int64_t halfPitch = AlignUp(g.rotaryDim / 2, 8);
  int64_t tree = 8;
  while (tree < halfPitch) tree *= 2;

  const CoreSplit split = SplitWork(n, hw.cores);
  PlanInputs in;
  in.g = g;
  in.rotHeads = h;
  in.csSets = 1;
  // per entry: 25 compact fp32 rows of the double-float delta (op_kernel kWork), the compact gather
  // offsets and the expansion offsets; fixed: the min tree
  in.extraBytesPerToken = (25 * halfPitch + halfPitch + g.rotPitch) * 4;
  in.extraBytes = tree * 4;
  RopePlan plan;
  if (PlanUb(kOp, hw, in, split.formerLen, &plan) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  ReropeCachedKeysTilingData td;
  td.set_numEntries(n);
  td.set_numSlots(nb * bs);
  td.set_blockSize(bs);
  SetRopeTiling(td, in, d, plan, split);
  td.set_halfPitch(halfPitch);
  td.set_heads(h);
  td.set_treeElems(tree);
  td.set_posIs64(posIs64);
  td.set_slotIs64(slotIs64);
  td.set_blockStride(bs * h * d);
  td.set_slotStride(bnsd ? d : h * d);
  td.set_headStride(bnsd ? bs * d : d);

  const bool tableIsData = context->GetInputDesc(kTable)->GetDataType() != ge::DT_FLOAT;
  return FinishTiling(context, kOp, hw, td, split.usedCoreNum, mskv_keys::RopeKey(g.pad, bnsd, dcode, tableIsData, neox));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvReropeCachedKeys : public OpDef {
 public:
  explicit MskvReropeCachedKeys(const char* name) : OpDef(name) {
    mskv_rope_tiling::DeclareGqaRopeOnEverySoc(*this, optiling::ReropeCachedKeysTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_rope_tiling::RopeRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"key_cache", r.data}, {"slot_mapping", r.slots}, {"old_positions", r.pos},
                                          {"new_positions", r.pos}, {"cos_sin_cache", r.table}},
                                          {{"status", r.status}});
  }
};
OP_ADD(MskvReropeCachedKeys);
}  // namespace ops
