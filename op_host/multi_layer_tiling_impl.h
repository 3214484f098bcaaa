// The tilings of the multi-layer transfers, one function per transfer for both of its ops: the plain op
// (MskvMultiLayerKvTransfer, MskvMultiLayerBlockTransfer) and the op with scale caches (...Quant: int8 caches
// and their float32 scale caches in one launch, the scale caches as extra planes of 4 * heads-byte rows;
// docs/ops-transfer.md, "Quantized caches"). The op_host/<op>.cpp files hold the OpDefs and call these.
//
// MultiLayerKvTransferTiling: the L * T (layer, token) items - (plane, layer, token) items when L * T < cores
// (planeItems) - are split over min(aiv_num, vector cores) cores (main/tail share, SplitWork), so every core
// works also for T < cores (L = 32 or 61, T = 1 use 48 cores) or L = 1. The UB budget (GetCoreMemSize(UB) - 1 KiB reserve - a 4 KiB buffer of zeros for d2h) is split into
// two buffers (perLoopBuffSize); per plane, tokensPerInnerLoop rows fit one buffer; maxTokensPerLoop (<= 128)
// tokens' slots are read per batch. Zero tokens or zero-sized rows: a no-op launch (block dim 1).
//
// MultiLayerBlockTransferTiling: the n * layerGroups * block_size (block, layer group, token) units are split
// over min(aiv_num, vector cores) cores (main/tail share), so every core works whenever n * block_size covers
// them; a group is every layer when one token of all layers of every plane fits a UB buffer (LayersPerGroup),
// and a core's tokens of a block then are one contiguous host range. Per plane, tokensPerInnerLoop tokens
// (of a group) fit one of the two UB buffers. Staging: each core owns stagingSliceElems = staging elements /
// cores and stages stagingTokens tokens at a time; the cores are capped so that every slice holds one token of
// a group. n = 0 or zero-sized blocks: a no-op launch.
//
// Tiling key of all four = layout (0 BSND, 1 BNSD, 2 NZ) * 1000 + dtype * 100 + index dtype * 10 + DataCopyPad
// (LayoutCopyKey; the ops with scale caches: dtype 4, the byte view of int8).
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_IMPL_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_IMPL_H_

#include "multi_layer_tiling_common.h"
#include "multi_layer_tiling_data.h"

namespace optiling {
namespace mskv_ml_impl {

using namespace mskv_ml_tiling;

// The layout digit of the tiling key: the cache_layout code (0 BSND, 1 BNSD, 2 NZ).
inline uint64_t LayoutDigit(const Attrs& a) {
  return static_cast<uint64_t>(a.nz ? mskv_attr::kLayoutNZ : (a.bnsd ? mskv_attr::kLayoutBNSD : mskv_attr::kLayoutBSND));
}

// The start of every transfer tiling (non-zero: failed): the SoC, the attributes (the defaults of the block
// transfer's OpDef for `blocks`, else the token transfer's), the kv_caches list at IR input kvIr and, when scaleIr >= 0, the scale_caches list there.
inline ge::graphStatus ReadTransfer(gert::TilingContext* context, const char* op, bool blocks, int kvIr, int scaleIr,
                                    Hardware* hw, Attrs* a, CacheList* cl) {
  if (GetHardware(context, op, hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (ReadAttrs(context, op, blocks ? mskv_attr::kDirH2D : mskv_attr::kDirD2H,
                blocks ? mskv_attr::kLayoutBNSD : mskv_attr::kLayoutBSND, a) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  if (ReadCaches(context, op, kvIr, *a, hw->is310P, cl) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (scaleIr >= 0 && ReadScales(context, op, scaleIr, *a, hw->is310P, cl) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  return ge::GRAPH_SUCCESS;
}

// Inputs: buffer, slot_mapping, kv_caches[, scale_caches].
inline ge::graphStatus MultiLayerKvTransferTiling(gert::TilingContext* context, const char* op, bool scales) {
  enum { kBuffer = 0, kSlotMapping, kKvCaches, kScaleCaches };
  Hardware hw;
  Attrs a;
  CacheList cl;
  if (ReadTransfer(context, op, false, kKvCaches, scales ? kScaleCaches : -1, &hw, &a, &cl)) return ge::GRAPH_FAILED;

  // ---- slot_mapping
  const gert::Shape* smp = nullptr;
  int scode = 0;
  char b1[160];
  if (RequiredIndexInput(context, op, kSlotMapping, "slot_mapping", &smp, &scode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  const gert::Shape& sm = *smp;
  if (sm.GetDimNum() != 1) return Fail(op, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  if (CheckTensorSize(op, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t T = sm.GetDim(0);
  const int64_t L = a.numLayers;

  // ---- buffer: dtype of the caches, shape transfer_buffer_shape(...)
  const gert::StorageShape* bss = context->GetRequiredInputShape(kBuffer);
  const gert::CompileTimeTensorDesc* bsd = context->GetRequiredInputDesc(kBuffer);
  if (bss == nullptr || bsd == nullptr) return Fail(op, "buffer is missing");
  const gert::Shape& bs = bss->GetStorageShape();
  if (bsd->GetDataType() != cl.dt) {
    return Fail(op, "buffer: expected dtype %s (as the caches), got %s", DTypeName(cl.dt), DTypeName(bsd->GetDataType()));
  }
  if (CheckTensorSize(op, "buffer", bs, cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t sumHidden = cl.SumRows();
  if (!scales && (a.fmt == kMerged || a.fmt == kSeparate)) {
    const int64_t hid = cl.plane[0].rowElems;
    if (bs.GetDimNum() != 4 || bs.GetDim(0) != 2 || bs.GetDim(1) != L || bs.GetDim(2) != T || bs.GetDim(3) != hid) {
      return Fail(op, "buffer: expected shape [2, %lld, %lld, %lld] (2, num_layers, num_tokens, H * D), got %s",
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
      return Fail(op, "buffer: expected shape [%lld * %lld * %lld] (num_layers * num_tokens * sum(%s)), got %s",
                  static_cast<long long>(L), static_cast<long long>(T), static_cast<long long>(sumHidden),
                  scales ? "hidden + 4 * scales per token" : "hidden", ShapeText(bs, b1, sizeof(b1)));
    }
  }

  // ---- work split and UB plan
  const int64_t numSlots = cl.plane[0].numBlocks * cl.plane[0].blockSize;
  // A cache without slots still gets a d2h launch: every token is skipped and its buffer rows are zeroed.
  const bool noWork = T == 0 || sumHidden == 0 || (numSlots == 0 && !a.d2h);
  bool pad = false;
  if (!noWork && NeedPad(op, cl, a, hw.is310P, &pad) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  for (int p = 0; p < cl.planes && !noWork; ++p) {
    const PlaneGeom& g = cl.plane[p];
    if (CheckGap(op, "kv_caches", (g.segStride - g.segElems) * cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  // (layer, token) items with every plane keep the cores' bytes even when planes differ in size (MLA); a few
  // tokens (L * T < cores) are split by plane as well so that every core works.
  const int64_t cap = CoreCap(hw, a);
  const bool planeItems = !noWork && L * T < cap;
  const CoreSplit split = noWork ? NoWork() : SplitWork((planeItems ? cl.planes : 1) * L * T, cap);
  const int64_t zeroBytes = (a.d2h && !noWork) ? kZeroBuffBytes : 0;
  const int64_t loopBytes = LoopBufferBytes(hw, zeroBytes);
  if (loopBytes < kBlockBytes) return Fail(op, "UB of %lld bytes is too small", static_cast<long long>(hw.ubBytes));
  const int64_t maxRows = Min64(kMaxRun, Max64(split.formerLen, 1));

  MultiLayerKvTransferTilingData td;
  int64_t blockStride[kMaxPlanes] = {0}, slotStride[kMaxPlanes] = {0}, bufOffset[kMaxPlanes] = {0};
  int64_t maxRun = kMaxRun, needed = kBlockBytes, prefix = 0;
  for (int p = 0; p < cl.planes; ++p) {
    blockStride[p] = cl.plane[p].blockStride;
    slotStride[p] = cl.plane[p].slotStride;
    bufOffset[p] = L * T * prefix;  // the planes one after another (MERGED / SEPARATE: [2, L, T, H * D])
    prefix += cl.plane[p].rowElems;
  }
  SetPlanes(td, cl, noWork, loopBytes, maxRows, &needed, &maxRun);
  td.set_numLayers(L);
  td.set_numTokens(T);
  td.set_direction(a.d2h ? 0 : 1);
  td.set_numSlots(numSlots);
  SetCoreSplit(td, split);
  td.set_maxTokensPerLoop(noWork ? 0 : Max64(Min64(maxRun, maxRows), 1));
  td.set_perLoopBuffSize(AlignUp(needed, kBlockBytes));
  td.set_zeroBuffSize(zeroBytes);
  td.set_planeItems(planeItems ? 1 : 0);
  td.set_blockStride(blockStride);
  td.set_slotStride(slotStride);
  td.set_bufOffset(bufOffset);

  // noWork: usedCoreNum 1 with formerLen 0 - the kernel's item range is empty
  return FinishTiling(context, op, hw, td, split.usedCoreNum,
                      mskv_keys::LayoutCopyKey(LayoutDigit(a), cl.dcode, static_cast<uint64_t>(scode), pad));
}

// The host-block tensors of the planes of list `list` (host_blocks: the data planes; scale_host_blocks: the
// scale planes) at IR input `ir`: one per plane, [n, bs, L, H, D] / [n, bs, L, hidden] (data), [n, bs, L,
// heads] float32 (scales).
inline ge::graphStatus CheckHostBlocks(gert::TilingContext* context, const char* op, int ir, const char* name,
                                       const CacheList& cl, const Attrs& a, int64_t n, int first, int count) {
  char b1[160];
  int64_t hp = 0;
  while (context->GetDynamicInputShape(ir, hp) != nullptr) ++hp;
  if (hp != count) return Fail(op, "%s: expected %d planes, got %lld", name, count, static_cast<long long>(hp));
  const bool scale = first > 0;
  const ge::DataType dt = scale ? ge::DT_FLOAT : cl.dt;
  for (int q = 0; q < count; ++q) {
    const PlaneGeom& g = cl.plane[first + q];
    const gert::Shape& h = context->GetDynamicInputShape(ir, q)->GetStorageShape();
    const gert::CompileTimeTensorDesc* hd = context->GetDynamicInputDesc(ir, q);
    if (hd == nullptr || hd->GetDataType() != dt) {
      return Fail(op, "%s[%d]: expected dtype %s, got %s", name, q, DTypeName(dt),
                  hd == nullptr ? "none" : DTypeName(hd->GetDataType()));
    }
    if (CheckTensorSize(op, name, h, scale ? kScaleBytes : cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    bool ok = h.GetDimNum() >= 4 && h.GetDim(0) == n && h.GetDim(1) == g.blockSize && h.GetDim(2) == a.numLayers;
    if (ok && !scale && a.nz) {  // NZ caches: the usual ND host blocks [n, bs, L, H, D], any H * D = hidden
      ok = h.GetDimNum() == 5 && h.GetDim(3) * h.GetDim(4) == g.rowElems;
    } else if (ok && !scale && (a.fmt == kMerged || a.fmt == kSeparate)) {
      ok = h.GetDimNum() == 5 && h.GetDim(3) == g.heads && h.GetDim(4) == g.headSize;
    } else if (ok) {
      ok = h.GetDimNum() == 4 && h.GetDim(3) == (scale ? g.heads : g.rowElems);
    }
    if (!ok) {
      return Fail(op, "%s[%d]: expected [n, block_size, num_layers, %s] = [%lld, %lld, %lld, ...] matching the caches, "
                  "got %s", name, q, scale ? "scales per token" : (a.fmt <= kSeparate ? "H, D" : "hidden"),
                  static_cast<long long>(n), static_cast<long long>(g.blockSize), static_cast<long long>(a.numLayers),
                  ShapeText(h, b1, sizeof(b1)));
    }
  }
  return ge::GRAPH_SUCCESS;
}

// Inputs: block_ids, staging, host_blocks, kv_caches[, scale_host_blocks, scale_caches].
inline ge::graphStatus MultiLayerBlockTransferTiling(gert::TilingContext* context, const char* op, bool scales) {
  enum { kBlockIds = 0, kStaging, kHostBlocks, kKvCaches, kScaleHost, kScaleCaches };
  Hardware hw;
  Attrs a;
  CacheList cl;
  if (ReadTransfer(context, op, true, kKvCaches, scales ? kScaleCaches : -1, &hw, &a, &cl)) return ge::GRAPH_FAILED;
  char b1[160];
  const int64_t L = a.numLayers;

  // ---- block_ids
  const gert::Shape* isp = nullptr;
  int icode = 0;
  if (RequiredIndexInput(context, op, kBlockIds, "block_ids", &isp, &icode) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape& is = *isp;
  if (is.GetDimNum() != 1) return Fail(op, "block_ids: expected rank 1, got shape %s", ShapeText(is, b1, sizeof(b1)));
  if (CheckTensorSize(op, "block_ids", is, icode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t n = is.GetDim(0);

  // ---- host_blocks (and scale_host_blocks): one per plane
  if (CheckHostBlocks(context, op, kHostBlocks, "host_blocks", cl, a, n, 0, cl.dataPlanes) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  if (scales && CheckHostBlocks(context, op, kScaleHost, "scale_host_blocks", cl, a, n, cl.dataPlanes,
                                cl.dataPlanes) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- staging (optional)
  const int64_t sumHidden = cl.SumRows();
  const int64_t bs = cl.plane[0].blockSize;
  const int64_t unitElems = bs * sumHidden;  // one (block, layer) unit of every plane
  int64_t stagingElems = 0;
  const gert::StorageShape* sts = context->GetOptionalInputShape(kStaging);
  if (sts != nullptr) {
    const gert::CompileTimeTensorDesc* std_ = context->GetOptionalInputDesc(kStaging);
    const gert::Shape& st = sts->GetStorageShape();
    if (CheckTensorSize(op, "staging", st, cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    DimProduct(st, 0, 1, &stagingElems);
    if (stagingElems > 0) {
      if (std_ == nullptr || std_->GetDataType() != cl.dt) {
        return Fail(op, "staging: expected dtype %s (as the caches), got %s", DTypeName(cl.dt),
                    std_ == nullptr ? "none" : DTypeName(std_->GetDataType()));
      }
      if (stagingElems < L * unitElems) {
        return Fail(op, "staging: expected at least block_size * num_layers * sum(hidden%s) = %lld elements (one block "
                    "of every plane), got %lld", scales ? " + 4 * scales per token" : "",
                    static_cast<long long>(L * unitElems), static_cast<long long>(stagingElems));
      }
    }
  }
  const bool staged = stagingElems > 0;

  // ---- work split and UB plan
  // A cache without blocks still gets a d2h launch: every id is out of range and its host block is zeroed.
  const bool noWork = n == 0 || unitElems == 0 || (cl.plane[0].numBlocks == 0 && !a.d2h);
  bool pad = false;
  if (!noWork && NeedPad(op, cl, a, hw.is310P, &pad) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  for (int p = 0; p < cl.planes && !noWork; ++p) {
    if (CheckGap(op, "host_blocks", (L * cl.plane[p].rowElems) * cl.elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  const int64_t zeroBytes = (a.d2h && !noWork) ? kZeroBuffBytes : 0;
  const int64_t loopBytes = LoopBufferBytes(hw, zeroBytes);
  if (loopBytes < kBlockBytes) return Fail(op, "UB of %lld bytes is too small", static_cast<long long>(hw.ubBytes));
  // Units: (block, layer group, token); a group spans every layer when a token of all of them fits a buffer
  // and the n * block_size tokens alone give every core work; else layers are split further.
  int64_t cores = CoreCap(hw, a);
  int64_t perGroup = noWork ? 1 : LayersPerGroup(cl, L, loopBytes);
  if (!noWork && n * bs < cores) perGroup = Min64(perGroup, Max64(L / CeilDiv(cores, n * bs), 1));
  const int64_t groups = CeilDiv(L, perGroup);
  perGroup = CeilDiv(L, groups);
  const int64_t groupElems = perGroup * sumHidden;  // one token of a group, every plane
  if (staged && !noWork) cores = Max64(Min64(cores, stagingElems / groupElems), 1);
  const CoreSplit split = noWork ? NoWork() : SplitWork(n * groups * bs, cores);
  int64_t sliceElems = 0, stagingTokens = 0;
  if (staged && !noWork) {
    sliceElems = stagingElems / split.usedCoreNum;
    stagingTokens = Min64(bs, sliceElems / groupElems);
  }

  MultiLayerBlockTransferTilingData td;
  int64_t prefix[kMaxPlanes] = {0}, run = 0, maxRun = bs;
  for (int p = 0; p < cl.planes; ++p) {
    prefix[p] = run;
    run += cl.plane[p].rowElems;
  }
  // Staging copies move rows of layersPerGroup * hidden elements through the same buffers: the buffer stays
  // the full budget then. Else only what the token rows need.
  int64_t needed = staged ? loopBytes : kBlockBytes;
  const int64_t maxRows = Max64(Min64(bs, split.formerLen), 1);
  SetPlanes(td, cl, noWork, loopBytes, maxRows, &needed, &maxRun, perGroup);
  td.set_numLayers(L);
  td.set_numIds(n);
  td.set_numBlocks(cl.plane[0].numBlocks);
  td.set_direction(a.d2h ? 0 : 1);
  SetCoreSplit(td, split);
  td.set_layerGroups(groups);
  td.set_layersPerGroup(perGroup);
  td.set_perLoopBuffSize(AlignUp(needed, kBlockBytes));
  td.set_zeroBuffSize(zeroBytes);
  td.set_staging(staged && !noWork ? 1 : 0);
  td.set_stagingSliceElems(sliceElems);
  td.set_stagingTokens(stagingTokens);
  td.set_hiddenPrefix(prefix);

  return FinishTiling(context, op, hw, td, split.usedCoreNum,
                      mskv_keys::LayoutCopyKey(LayoutDigit(a), cl.dcode, static_cast<uint64_t>(icode), pad));
}

// The tiling functions of the four OpDefs.
inline ge::graphStatus KvTransferTiling(gert::TilingContext* c) {
  return MultiLayerKvTransferTiling(c, "MskvMultiLayerKvTransfer", false);
}
inline ge::graphStatus KvTransferQuantTiling(gert::TilingContext* c) {
  return MultiLayerKvTransferTiling(c, "MskvMultiLayerKvTransferQuant", true);
}
inline ge::graphStatus BlockTransferTiling(gert::TilingContext* c) {
  return MultiLayerBlockTransferTiling(c, "MskvMultiLayerBlockTransfer", false);
}
inline ge::graphStatus BlockTransferQuantTiling(gert::TilingContext* c) {
  return MultiLayerBlockTransferTiling(c, "MskvMultiLayerBlockTransferQuant", true);
}

}  // namespace mskv_ml_impl
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_IMPL_H_
