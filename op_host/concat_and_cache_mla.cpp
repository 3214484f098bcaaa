// MskvConcatAndCacheMla: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.concat_and_cache_mla.SPEC): kv_c [T', R]
// (R = kv_lora_rank), k_pe [T', P] or [T', 1, P] (P = rope dim), kv_c_cache [nb, bs, R],
// k_pe_cache [nb, bs, P] (both written in place through their input addresses), slot_mapping
// int32/int64 [T]. Output: status, int32 [1], never written (docs/design.md). No attributes.
//
// Tiling: tokens split over all vector cores (main/tail share); a run of consecutive valid tokens is
// copied in with one DataCopy per plane and scattered out one row per token. Tiling key =
// dtype * 100 + slot dtype * 10 + DataCopyPad.
#include "concat_and_cache_mla_tiling.h"
#include "kv_copy_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvConcatAndCacheMla";
enum { kKvC = 0, kKPe, kKvCCache, kKPeCache, kSlotMapping, kNumInputs };

ge::graphStatus ConcatAndCacheMlaTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  Hardware hw;
  const gert::Shape* shapes[kNumInputs];
  if (GetHardwareAndShapes(context, kOp, &hw, kNumInputs, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape &kvc = *shapes[kKvC], &kpe = *shapes[kKPe], &kvcc = *shapes[kKvCCache],
                    &kpec = *shapes[kKPeCache], &sm = *shapes[kSlotMapping];

  // ---- dtypes
  const char* names[4] = {"kv_c", "k_pe", "kv_c_cache", "k_pe_cache"};
  const NamedInput data[4] = {{kKvC, names[0]}, {kKPe, names[1]}, {kKvCCache, names[2]}, {kKPeCache, names[3]}};
  int64_t elem = 0;
  uint64_t dcode = 0;
  int scode = 0;
  if (KvDType(context, kOp, hw, kKvCCache, "kv_c_cache", data, 4, &elem, &dcode) != ge::GRAPH_SUCCESS ||
      IndexDType(context, kOp, kSlotMapping, "slot_mapping", &scode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- shapes
  char b1[128], b2[128];
  if (kvcc.GetDimNum() != 3) return Fail(kOp, "kv_c_cache: expected rank 3, got shape %s", ShapeText(kvcc, b1, sizeof(b1)));
  if (kpec.GetDimNum() != 3) return Fail(kOp, "k_pe_cache: expected rank 3, got shape %s", ShapeText(kpec, b1, sizeof(b1)));
  if (kpec.GetDim(0) != kvcc.GetDim(0) || kpec.GetDim(1) != kvcc.GetDim(1)) {
    return Fail(kOp, "k_pe_cache: expected [num_blocks, block_size] = [%lld, %lld] (as kv_c_cache), got shape %s",
                static_cast<long long>(kvcc.GetDim(0)), static_cast<long long>(kvcc.GetDim(1)),
                ShapeText(kpec, b2, sizeof(b2)));
  }
  if (sm.GetDimNum() != 1) return Fail(kOp, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  for (int i = 0; i < 4; ++i) {
    if (CheckTensorSize(kOp, names[i], *shapes[i], elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  if (CheckTensorSize(kOp, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t numTokens = sm.GetDim(0);
  const int64_t bs = kvcc.GetDim(1);
  ScatterGeom gkv, gpe;
  gkv.numTokens = gpe.numTokens = numTokens;
  gkv.blockSize = gpe.blockSize = bs;
  gkv.numSlots = gpe.numSlots = kvcc.GetDim(0) * bs;
  gkv.rowElems = gkv.segElems = gkv.segStride = gkv.slotStride = kvcc.GetDim(2);
  gkv.blockStride = bs * gkv.rowElems;
  gpe.rowElems = gpe.segElems = gpe.segStride = gpe.slotStride = kpec.GetDim(2);
  gpe.blockStride = bs * gpe.rowElems;
  if (CheckTokenRows(kOp, "kv_c", kvc, numTokens, gkv.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CheckTokenRows(kOp, "k_pe", kpe, numTokens, gpe.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- work split and UB plan (one buffer size for both planes). A plane with zero-sized rows
  // (kv_lora_rank or rope_dim 0) is not moved (its row length 0 tells the kernel); nothing to write at
  // all (both planes empty, or no slots) is a no-op launch.
  const bool kvOn = gkv.rowElems > 0, peOn = gpe.rowElems > 0;
  const bool noWork = (!kvOn && !peOn) || gkv.numSlots == 0;
  const CoreSplit split = noWork ? NoWork() : SplitWork(numTokens, hw.cores);
  bool padKv = false, padPe = false;
  RowPlan pkv, ppe;
  if (!noWork && kvOn && PlanScatter(kOp, hw, elem, gkv, split.formerLen, &padKv, &pkv) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  if (!noWork && peOn && PlanScatter(kOp, hw, elem, gpe, split.formerLen, &padPe, &ppe) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  const bool pad = padKv || padPe;
  int64_t rows = 0, bytes = 0;
  if (noWork) {
    bytes = kBlockBytes;
  } else if ((!kvOn || pkv.rowsPerChunk > 0) && (!peOn || ppe.rowsPerChunk > 0)) {
    rows = Min64(kvOn ? pkv.rowsPerChunk : kMaxRunRows, peOn ? ppe.rowsPerChunk : kMaxRunRows);
    bytes = rows * Max64(AlignUp(gkv.rowElems * elem, kBlockBytes), AlignUp(gpe.rowElems * elem, kBlockBytes));
  } else {
    // A row of one plane is larger than a buffer: every token is moved plane by plane; a plane whose
    // row fits moves it as one chunk (segsPerChunk = 1), the other in pieces.
    if (pkv.rowsPerChunk > 0) { pkv.segsPerChunk = 1; pkv.pieceElems = 0; }
    if (ppe.rowsPerChunk > 0) { ppe.segsPerChunk = 1; ppe.pieceElems = 0; }
    bytes = hw.bufferBytes;
  }

  ConcatAndCacheMlaTilingData td;
  td.set_numTokens(numTokens);
  td.set_numSlots(gkv.numSlots);
  td.set_blockSize(bs);
  SetCoreSplit(td, split);
  td.set_rowsPerChunk(rows);
  td.set_bufferBytes(Max64(bytes, kBlockBytes));
  td.set_kvRowElems(gkv.rowElems);
  td.set_kvSegsPerChunk(pkv.segsPerChunk);
  td.set_kvPieceElems(pkv.pieceElems);
  td.set_peRowElems(gpe.rowElems);
  td.set_peSegsPerChunk(ppe.segsPerChunk);
  td.set_pePieceElems(ppe.pieceElems);

  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::CopyKey(dcode, static_cast<uint64_t>(scode), pad));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvConcatAndCacheMla : public OpDef {
 public:
  explicit MskvConcatAndCacheMla(const char* name) : OpDef(name) {
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::ConcatAndCacheMlaTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"kv_c", r.kv}, {"k_pe", r.kv}, {"kv_c_cache", r.kv}, {"k_pe_cache", r.kv},
                                          {"slot_mapping", r.index}}, {{"status", r.status}});
  }
};
OP_ADD(MskvConcatAndCacheMla);
}  // namespace ops
