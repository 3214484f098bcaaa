// MskvMultiLayerKvTransfer: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.multi_layer_kv_transfer.SPEC): buffer
// (MERGED/SEPARATE [2, L, T, H*D]; MLA/DSA 1-D, planes [L, T, hidden_p] one after another), written
// for direction "d2h"; slot_mapping int32/int64 [T]; kv_caches (DYNAMIC: L * tensorsPerLayer caches,
// layer-major), written for "h2d". Output: status, int32 [1], never written (docs/design.md).
// Attrs: kv_format, direction, cache_layout, num_layers, aiv_num (cap on cores, 0 = all).
//
// Tiling: the L * T (layer, token) items are split over min(aiv_num, vector cores) cores (main/tail
// share, SplitWork), so every core works also for T < cores (L = 61, T = 1 uses 48 cores) or L = 1.
// The UB budget (GetCoreMemSize(UB) - 1 KiB reserve - a 4 KiB buffer of zeros for d2h) is split into
// two buffers (perLoopBuffSize); per plane, tokensPerInnerLoop rows fit one buffer; maxTokensPerLoop
// (<= 128) tokens' slots are read per batch. Tiling key = layout * 1000 + dtype * 100 + slot dtype *
// 10 + DataCopyPad. Zero tokens or zero-sized rows: a no-op launch (block dim 1).
#include "multi_layer_kv_transfer_tiling.h"
#include "multi_layer_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvMultiLayerKvTransfer";
enum { kBuffer = 0, kSlotMapping, kKvCaches };

ge::graphStatus MultiLayerKvTransferTiling(gert::TilingContext* context) {
  using namespace mskv_ml_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  Attrs a;
  if (ReadAttrs(context, kOp, mskv_attr::kDirD2H, mskv_attr::kLayoutBSND, &a) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  CacheList cl;
  if (ReadCaches(context, kOp, kKvCaches, a, hw.is310P, &cl) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  char b1[160];

  // ---- slot_mapping
  const gert::Shape* smp = nullptr;
  int scode = 0;
  if (RequiredIndexInput(context, kOp, kSlotMapping, "slot_mapping", &smp, &scode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  const gert::Shape& sm = *smp;
  if (sm.GetDimNum() != 1) return Fail(kOp, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  if (CheckTensorSize(kOp, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t T = sm.GetDim(0);
  const int64_t L = a.numLayers;

  // ---- buffer: dtype of the caches, shape transfer_buffer_shape(...)
  const gert::StorageShape* bss = context->GetRequiredInputShape(kBuffer);
  const gert::CompileTimeTensorDesc* bsd = context->GetRequiredInputDesc(kBuffer);
  if (bss == nullptr || bsd == nullptr) return Fail(kOp, "buffer is missing");
  const gert::Shape& bs = bss->GetStorageShape();
  if (bsd->GetDataType() != cl.dt) {
    return Fail(kOp, "buffer: expected dtype %s (as the caches), got %s", DTypeName(cl.dt), DTypeName(bsd->GetDataType()));
  }
  if (CheckTensorSize(kOp, "buffer", bs, cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  int64_t sumHidden = 0;
  for (int p = 0; p < cl.planes; ++p) sumHidden += cl.plane[p].rowElems;
  if (a.fmt == kMerged || a.fmt == kSeparate) {
    const int64_t hid = cl.plane[0].rowElems;
    if (bs.GetDimNum() != 4 || bs.GetDim(0) != 2 || bs.GetDim(1) != L || bs.GetDim(2) != T || bs.GetDim(3) != hid) {
      return Fail(kOp, "buffer: expected shape [2, %lld, %lld, %lld] (2, num_layers, num_tokens, H * D), got %s",
                  static_cast<long long>(L), static_cast<long long>(T), static_cast<long long>(hid),
                  ShapeText(bs, b1, sizeof(b1)));
    }
  } else {
    int64_t numel = 0;
    DimProduct(bs, 0, 1, &numel);
    // L * T * sumHidden: each factor is bounded by a checked tensor, compare without overflow
    const bool ok = bs.GetDimNum() == 1 && (L * sumHidden == 0 ? numel == 0 :
                                           (numel % (L * sumHidden) == 0 && numel / (L * sumHidden) == T));
    if (!ok) {
      return Fail(kOp, "buffer: expected shape [%lld * %lld * %lld] (num_layers * num_tokens * sum(hidden)), got %s",
                  static_cast<long long>(L), static_cast<long long>(T), static_cast<long long>(sumHidden),
                  ShapeText(bs, b1, sizeof(b1)));
    }
  }

  // ---- work split and UB plan
  const int64_t numSlots = cl.plane[0].numBlocks * cl.plane[0].blockSize;
  // A cache without slots still gets a d2h launch: every token is skipped and its buffer rows are zeroed.
  const bool noWork = T == 0 || sumHidden == 0 || (numSlots == 0 && !a.d2h);
  bool pad = false;
  for (int p = 0; p < cl.planes && !noWork; ++p) {
    const PlaneGeom& g = cl.plane[p];
    if (g.rowElems == 0) continue;
    if ((g.segElems * cl.elem) % kBlockBytes != 0) pad = true;
    if (CheckGap(kOp, "kv_caches", (g.segStride - g.segElems) * cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  if (pad && hw.is310P) {
    return Fail(kOp, "rows of a plane (%s) are not a multiple of 32 bytes; Ascend310P has no DataCopyPad, so such "
                "caches are unsupported there", a.bnsd ? "one head of a BNSD cache" : "one token row");
  }
  const CoreSplit split = noWork ? NoWork() : SplitWork(L * T, CoreCap(hw, a));
  const int64_t zeroBytes = (a.d2h && !noWork) ? kZeroBuffBytes : 0;
  const int64_t loopBytes = LoopBufferBytes(hw, zeroBytes);
  if (loopBytes < kBlockBytes) return Fail(kOp, "UB of %lld bytes is too small", static_cast<long long>(hw.ubBytes));
  const int64_t maxRows = Min64(kMaxRun, Max64(split.formerLen, 1));

  MultiLayerKvTransferTilingData td;
  int64_t rowElems[kMaxPlanes] = {0}, numSeg[kMaxPlanes] = {0}, segElems[kMaxPlanes] = {0};
  int64_t segStride[kMaxPlanes] = {0}, blockStride[kMaxPlanes] = {0}, slotStride[kMaxPlanes] = {0};
  int64_t planeOffset[kMaxPlanes] = {0}, bufOffset[kMaxPlanes] = {0}, rows[kMaxPlanes] = {0};
  int64_t segs[kMaxPlanes] = {0}, pieces[kMaxPlanes] = {0};
  int64_t maxRun = kMaxRun, needed = kBlockBytes, prefix = 0;
  for (int p = 0; p < cl.planes; ++p) {
    const PlaneGeom& g = cl.plane[p];
    rowElems[p] = g.rowElems;
    numSeg[p] = g.numSeg;
    segElems[p] = g.segElems;
    segStride[p] = g.segStride;
    blockStride[p] = g.blockStride;
    slotStride[p] = g.slotStride;
    planeOffset[p] = g.planeOffset;
    bufOffset[p] = (a.fmt == kMerged || a.fmt == kSeparate) ? p * L * T * g.rowElems : L * T * prefix;
    prefix += g.rowElems;
    if (noWork || g.rowElems == 0) continue;
    const MlRowPlan rp = PlanMlRow(g.numSeg, g.segElems, cl.elem, loopBytes, maxRows);
    rows[p] = rp.rowsPerLoop;
    segs[p] = rp.segsPerLoop;
    pieces[p] = rp.pieceElems;
    needed = Max64(needed, rp.bytesNeeded);
    if (rp.rowsPerLoop > 0) maxRun = Min64(maxRun, rp.rowsPerLoop);
  }
  td.set_numLayers(L);
  td.set_numTokens(T);
  td.set_numPlanes(cl.planes);
  td.set_tensorsPerLayer(cl.tpl);
  td.set_direction(a.d2h ? 0 : 1);
  td.set_numSlots(numSlots);
  td.set_blockSize(cl.plane[0].blockSize);
  SetCoreSplit(td, split);
  td.set_maxTokensPerLoop(noWork ? 0 : Max64(Min64(maxRun, maxRows), 1));
  td.set_perLoopBuffSize(AlignUp(needed, kBlockBytes));
  td.set_zeroBuffSize(zeroBytes);
  td.set_rowElems(rowElems);
  td.set_numSeg(numSeg);
  td.set_segElems(segElems);
  td.set_segStride(segStride);
  td.set_blockStride(blockStride);
  td.set_slotStride(slotStride);
  td.set_planeOffset(planeOffset);
  td.set_bufOffset(bufOffset);
  td.set_tokensPerInnerLoop(rows);
  td.set_segsPerLoop(segs);
  td.set_pieceElems(pieces);

  // noWork: usedCoreNum 1 with formerLen 0 - the kernel's item range is empty
  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::LayoutCopyKey(a.bnsd, cl.dcode, static_cast<uint64_t>(scode), pad));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvMultiLayerKvTransfer : public OpDef {
 public:
  explicit MskvMultiLayerKvTransfer(const char* name) : OpDef(name) {
    this->Attr("kv_format").AttrType(OPTIONAL).Int(1);
    this->Attr("direction").AttrType(OPTIONAL).Int(mskv_attr::kDirD2H);         // op_host/mskv_attr_codes.h
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBSND);
    this->Attr("num_layers").AttrType(OPTIONAL).Int(1);
    this->Attr("aiv_num").AttrType(OPTIONAL).Int(0);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::MultiLayerKvTransferTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def>
  static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    d.Input("buffer").ParamType(REQUIRED).DataType(r.kv).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Input("slot_mapping").ParamType(REQUIRED).DataType(r.index).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Input("kv_caches").ParamType(DYNAMIC).DataType(r.kv).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Output("status").ParamType(REQUIRED).DataType(r.status).Format(r.fmt).UnknownShapeFormat(r.fmt);
  }
};
OP_ADD(MskvMultiLayerKvTransfer);
}  // namespace ops
