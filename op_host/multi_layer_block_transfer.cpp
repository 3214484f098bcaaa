// MskvMultiLayerBlockTransfer: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.multi_layer_block_transfer.SPEC): block_ids
// int32/int64 [n]; staging (OPTIONAL, written: absent or an empty [0] tensor = direct mode);
// host_blocks (DYNAMIC: one tensor per plane, [n, block_size, L, H, D] for MERGED/SEPARATE,
// [n, block_size, L, hidden] for MLA/DSA), written for "d2h"; kv_caches (DYNAMIC: L * tensorsPerLayer
// caches, layer-major), written for "h2d". Output: status, int32 [1], never written.
// Attrs: kv_format, direction, cache_layout (default BNSD), num_layers, aiv_num (0 = all cores).
//
// Tiling: the n * L (block, layer) units - times tokenChunks token chunks per block when n * L < cores
// (direct mode) - are split over min(aiv_num, vector cores) cores (main/tail
// share); per plane, tokensPerInnerLoop token rows fit one of the two UB buffers (perLoopBuffSize,
// from GetCoreMemSize(UB) - 1 KiB reserve - a 4 KiB buffer of zeros for d2h). Staging: each core owns
// stagingSliceElems = staging elements / cores and stages layersPerStage units of one block at a time;
// the cores are capped so that every slice holds at least one unit (block_size * sum(hidden)).
// Tiling key = layout * 1000 + dtype * 100 + id dtype * 10 + DataCopyPad. n = 0 or zero-sized blocks:
// a no-op launch.
#include "multi_layer_block_transfer_tiling.h"
#include "multi_layer_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvMultiLayerBlockTransfer";
enum { kBlockIds = 0, kStaging, kHostBlocks, kKvCaches };

ge::graphStatus MultiLayerBlockTransferTiling(gert::TilingContext* context) {
  using namespace mskv_ml_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  Attrs a;
  if (ReadAttrs(context, kOp, mskv_attr::kDirH2D, mskv_attr::kLayoutBNSD, &a) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  CacheList cl;
  if (ReadCaches(context, kOp, kKvCaches, a, hw.is310P, &cl) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  char b1[160];
  const int64_t L = a.numLayers;

  // ---- block_ids
  const gert::Shape* isp = nullptr;
  int icode = 0;
  if (RequiredIndexInput(context, kOp, kBlockIds, "block_ids", &isp, &icode) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape& is = *isp;
  if (is.GetDimNum() != 1) return Fail(kOp, "block_ids: expected rank 1, got shape %s", ShapeText(is, b1, sizeof(b1)));
  if (CheckTensorSize(kOp, "block_ids", is, icode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t n = is.GetDim(0);

  // ---- host_blocks: one per plane, [n, bs, L, H, D] / [n, bs, L, hidden]
  int64_t hp = 0;
  while (context->GetDynamicInputShape(kHostBlocks, hp) != nullptr) ++hp;
  if (hp != cl.planes) return Fail(kOp, "host_blocks: expected %d planes, got %lld", cl.planes, static_cast<long long>(hp));
  for (int p = 0; p < cl.planes; ++p) {
    const gert::Shape& h = context->GetDynamicInputShape(kHostBlocks, p)->GetStorageShape();
    const gert::CompileTimeTensorDesc* hd = context->GetDynamicInputDesc(kHostBlocks, p);
    if (hd == nullptr || hd->GetDataType() != cl.dt) {
      return Fail(kOp, "host_blocks[%d]: expected dtype %s (as the caches), got %s", p, DTypeName(cl.dt),
                  hd == nullptr ? "none" : DTypeName(hd->GetDataType()));
    }
    if (CheckTensorSize(kOp, "host_blocks", h, cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    const PlaneGeom& g = cl.plane[p];
    bool ok = h.GetDimNum() >= 4 && h.GetDim(0) == n && h.GetDim(1) == g.blockSize && h.GetDim(2) == L;
    if (ok && (a.fmt == kMerged || a.fmt == kSeparate)) {
      ok = h.GetDimNum() == 5 && h.GetDim(3) == g.heads && h.GetDim(4) == g.headSize;
    } else if (ok) {
      ok = h.GetDimNum() == 4 && h.GetDim(3) == g.rowElems;
    }
    if (!ok) {
      return Fail(kOp, "host_blocks[%d]: expected [n, block_size, num_layers, %s] = [%lld, %lld, %lld, ...] "
                  "matching the caches, got %s", p, a.fmt <= kSeparate ? "H, D" : "hidden", static_cast<long long>(n),
                  static_cast<long long>(g.blockSize), static_cast<long long>(L), ShapeText(h, b1, sizeof(b1)));
    }
  }

  // ---- staging (optional)
  int64_t sumHidden = 0;
  for (int p = 0; p < cl.planes; ++p) sumHidden += cl.plane[p].rowElems;
  const int64_t bs = cl.plane[0].blockSize;
  const int64_t unitElems = bs * sumHidden;  // one (block, layer) unit of every plane
  int64_t stagingElems = 0;
  const gert::StorageShape* sts = context->GetOptionalInputShape(kStaging);
  if (sts != nullptr) {
    const gert::CompileTimeTensorDesc* std_ = context->GetOptionalInputDesc(kStaging);
    const gert::Shape& st = sts->GetStorageShape();
    if (CheckTensorSize(kOp, "staging", st, cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    DimProduct(st, 0, 1, &stagingElems);
    if (stagingElems > 0) {
      if (std_ == nullptr || std_->GetDataType() != cl.dt) {
        return Fail(kOp, "staging: expected dtype %s (as the caches), got %s", DTypeName(cl.dt),
                    std_ == nullptr ? "none" : DTypeName(std_->GetDataType()));
      }
      if (stagingElems < L * unitElems) {
        return Fail(kOp, "staging: expected at least block_size * num_layers * sum(hidden) = %lld elements (one block "
                    "of every plane), got %lld", static_cast<long long>(L * unitElems),
                    static_cast<long long>(stagingElems));
      }
    }
  }
  const bool staged = stagingElems > 0;

  // ---- work split and UB plan
  // A cache without blocks still gets a d2h launch: every id is out of range and its host block is zeroed.
  const bool noWork = n == 0 || unitElems == 0 || (cl.plane[0].numBlocks == 0 && !a.d2h);
  bool pad = false;
  for (int p = 0; p < cl.planes && !noWork; ++p) {
    const PlaneGeom& g = cl.plane[p];
    if (g.rowElems == 0) continue;
    if ((g.segElems * cl.elem) % kBlockBytes != 0) pad = true;
    if (CheckGap(kOp, "host_blocks", (L * g.rowElems) * cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  if (pad && hw.is310P) {
    return Fail(kOp, "rows of a plane (%s) are not a multiple of 32 bytes; Ascend310P has no DataCopyPad, so such "
                "caches are unsupported there", a.bnsd ? "one head of a BNSD cache" : "one token row");
  }
  int64_t cores = CoreCap(hw, a);
  if (staged && !noWork) cores = Max64(Min64(cores, stagingElems / unitElems), 1);
  // Token chunks per block: 1 when the n * L units fill the cores; else the fewest chunks that give every
  // core work and keep >= 95% of the cores' work slots busy (direct mode only; chunks of >= 8 tokens).
  int64_t chunks = 1, perChunk = bs;
  if (!staged && !noWork && n * L < cores) {
    double best = -1.0;
    for (int64_t c = 1; c <= Max64(bs / 8, 1); ++c) {
      const int64_t tpc = CeilDiv(bs, c);
      const int64_t actual = CeilDiv(bs, tpc);
      const int64_t units = n * L * actual;
      const double eff = static_cast<double>(units) / static_cast<double>(CeilDiv(units, cores) * cores);
      if (eff > best + 1e-9) {
        best = eff;
        chunks = actual;
        perChunk = tpc;
      }
      if (best >= 0.95 && n * L * chunks >= cores) break;
    }
  }
  const CoreSplit split = noWork ? NoWork() : SplitWork(n * L * chunks, cores);
  const int64_t zeroBytes = (a.d2h && !noWork) ? kZeroBuffBytes : 0;
  const int64_t loopBytes = LoopBufferBytes(hw, zeroBytes);
  if (loopBytes < kBlockBytes) return Fail(kOp, "UB of %lld bytes is too small", static_cast<long long>(hw.ubBytes));
  int64_t sliceElems = 0, layersPerStage = 0;
  if (staged && !noWork) {
    sliceElems = stagingElems / split.usedCoreNum;
    layersPerStage = Min64(L, sliceElems / unitElems);
  }

  MultiLayerBlockTransferTilingData td;
  int64_t rowElems[kMaxPlanes] = {0}, numSeg[kMaxPlanes] = {0}, segElems[kMaxPlanes] = {0};
  int64_t segStride[kMaxPlanes] = {0}, planeOffset[kMaxPlanes] = {0}, prefix[kMaxPlanes] = {0};
  int64_t rows[kMaxPlanes] = {0}, segs[kMaxPlanes] = {0}, pieces[kMaxPlanes] = {0};
  // Staging copies move rows of layersPerStage * hidden elements through the same buffers: the
  // buffer stays the full budget then. Else only what the unit chunks need.
  int64_t needed = staged ? loopBytes : kBlockBytes, run = 0;
  for (int p = 0; p < cl.planes; ++p) {
    const PlaneGeom& g = cl.plane[p];
    rowElems[p] = g.rowElems;
    numSeg[p] = g.numSeg;
    segElems[p] = g.segElems;
    segStride[p] = g.segStride;
    planeOffset[p] = g.planeOffset;
    prefix[p] = run;
    run += g.rowElems;
    if (noWork || g.rowElems == 0) continue;
    const MlRowPlan rp = PlanMlRow(g.numSeg, g.segElems, cl.elem, loopBytes, perChunk);
    rows[p] = rp.rowsPerLoop;
    segs[p] = rp.segsPerLoop;
    pieces[p] = rp.pieceElems;
    needed = Max64(needed, rp.bytesNeeded);
  }
  td.set_numLayers(L);
  td.set_numIds(n);
  td.set_numBlocks(cl.plane[0].numBlocks);
  td.set_blockSize(bs);
  td.set_numPlanes(cl.planes);
  td.set_tensorsPerLayer(cl.tpl);
  td.set_direction(a.d2h ? 0 : 1);
  SetCoreSplit(td, split);
  td.set_tokenChunks(chunks);
  td.set_tokensPerChunk(perChunk);
  td.set_perLoopBuffSize(AlignUp(needed, kBlockBytes));
  td.set_zeroBuffSize(zeroBytes);
  td.set_staging(staged && !noWork ? 1 : 0);
  td.set_stagingSliceElems(sliceElems);
  td.set_layersPerStage(layersPerStage);
  td.set_rowElems(rowElems);
  td.set_numSeg(numSeg);
  td.set_segElems(segElems);
  td.set_segStride(segStride);
  td.set_planeOffset(planeOffset);
  td.set_hiddenPrefix(prefix);
  td.set_tokensPerInnerLoop(rows);
  td.set_segsPerLoop(segs);
  td.set_pieceElems(pieces);

  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::LayoutCopyKey(a.bnsd, cl.dcode, static_cast<uint64_t>(icode), pad));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvMultiLayerBlockTransfer : public OpDef {
 public:
  explicit MskvMultiLayerBlockTransfer(const char* name) : OpDef(name) {
    this->Attr("kv_format").AttrType(OPTIONAL).Int(1);
    this->Attr("direction").AttrType(OPTIONAL).Int(mskv_attr::kDirH2D);         // op_host/mskv_attr_codes.h
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBNSD);
    this->Attr("num_layers").AttrType(OPTIONAL).Int(1);
    this->Attr("aiv_num").AttrType(OPTIONAL).Int(0);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::MultiLayerBlockTransferTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def>
  static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    d.Input("block_ids").ParamType(REQUIRED).DataType(r.index).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Input("staging").ParamType(OPTIONAL).DataType(r.kv).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Input("host_blocks").ParamType(DYNAMIC).DataType(r.kv).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Input("kv_caches").ParamType(DYNAMIC).DataType(r.kv).Format(r.fmt).UnknownShapeFormat(r.fmt);
    d.Output("status").ParamType(REQUIRED).DataType(r.status).Format(r.fmt).UnknownShapeFormat(r.fmt);
  }
};
OP_ADD(MskvMultiLayerBlockTransfer);
}  // namespace ops
