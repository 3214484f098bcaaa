// Host-side helpers shared by the tilings of the multi-layer transfers (multi_layer_kv_transfer,
// multi_layer_block_transfer): attributes, the per-layer cache list (a DYNAMIC input of
// num_layers * tensorsPerLayer caches, layer-major) and the per-plane row plans.
//
// Planes: MERGED_KV (1) has one [2, nb, ...] tensor per layer whose halves are the K and V planes;
// SEPARATE_KV (2) key_cache, value_cache; MLA_KV (3) kv_c, k_pe ([nb, bs, hidden] or [nb, bs, 1,
// hidden]); DSA_KV (4) adds indexer_k. BSND caches [nb, bs, H, D], BNSD [nb, H, bs, D], NZ [nb, H*D/C0, bs, C0]
// (the BNSD geometry of its C0 pieces: one 32-byte unit per token and fractal; its scale caches are BSND).
// With scale caches (the *Quant ops; int8 caches): one float32 scale cache per data plane and layer
// (BSND [nb, bs, H(, 1)], BNSD [nb, H, bs(, 1)], MLA / DSA [nb, bs, 1]), planes P..2P-1 of the transfer in
// the byte view of the caches: heads H (1 for MLA / DSA), head size 4 bytes (ReadScales).
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_COMMON_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_COMMON_H_

#include "kv_copy_tiling_common.h"

namespace mskv_ml_tiling {

using namespace mskv_tiling;

constexpr int kMaxPlanes = 6;  // = mskv_ml::kMaxPlanes: data planes, then their scale planes
constexpr int64_t kScaleBytes = 4;  // one float32 scale
constexpr int64_t kMaxRun = 128;  // = mskv_ml::kMaxRun (op_kernel/multi_layer_copy.h)
// UB bytes of the buffer of zeros (d2h zero rows); taken from the UB budget before the two buffers.
constexpr int64_t kZeroBuffBytes = 4096;
enum KvFormat : int64_t { kMerged = 1, kSeparate = 2, kMla = 3, kDsa = 4 };

inline int PlanesOf(int64_t fmt) { return fmt == kDsa ? 3 : 2; }
inline int64_t TensorsPerLayer(int64_t fmt) { return fmt == kMerged ? 1 : PlanesOf(fmt); }

struct Attrs {
  int64_t fmt = kMerged;
  bool d2h = true;
  bool bnsd = false;  // head-major data planes: BNSD, and NZ (the BNSD geometry of its C0 pieces)
  bool nz = false;    // NZ caches [nb, H*D/C0, bs, C0] (CheckNzCache); their scale caches are BSND
  int64_t numLayers = 0;
  int64_t aivNum = 0;
};

// Attributes in OpDef order: kv_format, direction, cache_layout, num_layers, aiv_num.
// direction and cache_layout are Int codes (op_host/mskv_attr_codes.h); the defaults are the OpDef's.
inline ge::graphStatus ReadAttrs(gert::TilingContext* context, const char* op, int64_t defaultDirection,
                                 int64_t defaultLayout, Attrs* a) {
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  if (attrs == nullptr) return Fail(op, "no attributes");
  const int64_t* fmt = attrs->GetAttrPointer<int64_t>(0);
  const int64_t* dir = attrs->GetAttrPointer<int64_t>(1);  // mskv_attr::kDirH2D / kDirD2H
  const int64_t* layers = attrs->GetAttrPointer<int64_t>(3);
  const int64_t* aiv = attrs->GetAttrPointer<int64_t>(4);
  a->fmt = fmt == nullptr ? kMerged : *fmt;
  if (a->fmt < kMerged || a->fmt > kDsa) {
    return Fail(op, "kv_format: expected 1 (MERGED_KV), 2 (SEPARATE_KV), 3 (MLA_KV) or 4 (DSA_KV), got %lld",
                static_cast<long long>(a->fmt));
  }
  const int64_t d = dir == nullptr ? defaultDirection : *dir;
  if (d != mskv_attr::kDirD2H && d != mskv_attr::kDirH2D) {
    return Fail(op, "direction: expected %lld (h2d) or %lld (d2h), got %lld", static_cast<long long>(mskv_attr::kDirH2D),
                static_cast<long long>(mskv_attr::kDirD2H), static_cast<long long>(d));
  }
  a->d2h = d == mskv_attr::kDirD2H;
  int64_t layout = 0;
  if (LayoutCodeAttr(context, 2, op, defaultLayout, true, &layout) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  a->nz = layout == mskv_attr::kLayoutNZ;
  a->bnsd = layout != mskv_attr::kLayoutBSND;
  if (a->bnsd && (a->fmt == kMla || a->fmt == kDsa)) {
    return Fail(op, "cache_layout: MLA_KV / DSA_KV caches are [num_blocks, block_size, hidden] (no NZ form); expected "
                "\"BSND\", got \"%s\"", mskv_attr::LayoutName(layout));
  }
  a->numLayers = layers == nullptr ? 0 : *layers;
  if (a->numLayers < 1) return Fail(op, "num_layers: expected >= 1, got %lld", static_cast<long long>(a->numLayers));
  a->aivNum = aiv == nullptr ? 0 : *aiv;
  if (a->aivNum < 0) return Fail(op, "aiv_num: expected >= 0 (0 = every vector core), got %lld",
                                 static_cast<long long>(a->aivNum));
  return ge::GRAPH_SUCCESS;
}

// One plane of the caches (element units, within the layer's cache tensor).
struct PlaneGeom {
  int64_t numBlocks = 0, blockSize = 0, heads = 1, headSize = 0;
  int64_t rowElems = 0, numSeg = 1, segElems = 0, segStride = 0, blockStride = 0, slotStride = 0;
  int64_t planeOffset = 0;  // elements from the tensor start (the V half of a MERGED_KV tensor)
  int64_t list = 0;           // 0 kv_caches, 1 scale_caches
  int64_t tensorInLayer = 0;  // its tensor of layer l: l * (tensors per layer of its list) + tensorInLayer

  // The row geometry of heads x headSize (BNSD: one segment per head, block_size rows apart).
  void SetRows(bool bnsd) {
    rowElems = heads * headSize;
    blockStride = blockSize * rowElems;
    if (bnsd) {
      numSeg = heads; segElems = headSize; segStride = blockSize * headSize; slotStride = headSize;
    } else {
      numSeg = 1; segElems = rowElems; segStride = rowElems; slotStride = rowElems;
    }
  }
};

struct CacheList {
  uint64_t dcode = 0;
  int64_t elem = 0;
  ge::DataType dt = ge::DT_UNDEFINED;
  int planes = 2;          // every plane: data planes, then scale planes
  int dataPlanes = 2;
  int64_t tpl = 1;
  int64_t scalesPerLayer = 0;  // scale caches per layer (0 without scale caches)
  PlaneGeom plane[kMaxPlanes];

  int64_t SumRows() const {
    int64_t s = 0;
    for (int p = 0; p < planes; ++p) s += plane[p].rowElems;
    return s;
  }
};

// Checks the kv_caches list (IR input `ir`): count = num_layers * tensorsPerLayer, one dtype, every
// layer shaped like layer 0, per-format ranks; fills the plane geometry.
inline ge::graphStatus ReadCaches(gert::TilingContext* context, const char* op, int ir, const Attrs& a, bool is310P,
                                  CacheList* cl) {
  char b1[160], b2[160];
  cl->planes = PlanesOf(a.fmt);
  cl->dataPlanes = cl->planes;
  cl->tpl = TensorsPerLayer(a.fmt);
  int64_t count = 0;
  while (context->GetDynamicInputShape(ir, count) != nullptr) ++count;
  if (count != a.numLayers * cl->tpl) {
    return Fail(op, "kv_caches: expected num_layers * %lld = %lld caches, got %lld", static_cast<long long>(cl->tpl),
                static_cast<long long>(a.numLayers * cl->tpl), static_cast<long long>(count));
  }
  const gert::CompileTimeTensorDesc* d0 = context->GetDynamicInputDesc(ir, 0);
  if (d0 == nullptr) return Fail(op, "kv_caches[0]: no tensor description");
  cl->dt = d0->GetDataType();
  cl->elem = KvDTypeSize(cl->dt, &cl->dcode);
  if (cl->elem == 0) {
    return Fail(op, "kv_caches[0]: expected float16, bfloat16, float32 or int8, got %s", DTypeName(cl->dt));
  }
  if (cl->dt == ge::DT_BF16 && is310P) return Fail(op, "bfloat16 is not supported on Ascend310P");
  for (int64_t i = 0; i < count; ++i) {
    const gert::Shape& ci = context->GetDynamicInputShape(ir, i)->GetStorageShape();
    const gert::Shape& c0 = context->GetDynamicInputShape(ir, i % cl->tpl)->GetStorageShape();
    const gert::CompileTimeTensorDesc* di = context->GetDynamicInputDesc(ir, i);
    if (di == nullptr) return Fail(op, "kv_caches[%lld]: no tensor description", static_cast<long long>(i));
    if (di->GetDataType() != cl->dt) {
      return Fail(op, "kv_caches[%lld]: expected dtype %s (as kv_caches[0]), got %s", static_cast<long long>(i),
                  DTypeName(cl->dt), DTypeName(di->GetDataType()));
    }
    if (i < cl->tpl && CheckTensorSize(op, "kv_caches", ci, cl->elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    if (!SameShape(ci, c0)) {
      return Fail(op, "kv_caches[%lld]: expected shape %s (as the same plane of layer 0), got %s",
                  static_cast<long long>(i), ShapeText(c0, b1, sizeof(b1)), ShapeText(ci, b2, sizeof(b2)));
    }
  }
  for (int p = 0; p < cl->planes; ++p) {
    PlaneGeom& g = cl->plane[p];
    const gert::Shape& s = context->GetDynamicInputShape(ir, a.fmt == kMerged ? 0 : p)->GetStorageShape();
    if (a.fmt == kMerged || a.fmt == kSeparate) {
      const size_t first = a.fmt == kMerged ? 1 : 0;
      if (s.GetDimNum() != first + 4 || (a.fmt == kMerged && s.GetDim(0) != 2)) {
        return Fail(op, "kv_caches[%d]: expected a %s %s cache %s, got shape %s", a.fmt == kMerged ? 0 : p,
                    a.bnsd ? "BNSD" : "BSND", a.fmt == kMerged ? "MERGED_KV" : "SEPARATE_KV",
                    a.fmt == kMerged ? "[2, nb, bs, H, D] / [2, nb, H, bs, D]" : "[nb, bs, H, D] / [nb, H, bs, D]",
                    ShapeText(s, b1, sizeof(b1)));
      }
      if (a.nz && CheckNzCache(op, "kv_caches", s, first, cl->dt, cl->elem) != ge::GRAPH_SUCCESS) {
        return ge::GRAPH_FAILED;
      }
      g.numBlocks = s.GetDim(first);
      g.blockSize = a.bnsd ? s.GetDim(first + 2) : s.GetDim(first + 1);
      g.heads = a.bnsd ? s.GetDim(first + 1) : s.GetDim(first + 2);
      g.headSize = s.GetDim(first + 3);
    } else {
      const bool ok = s.GetDimNum() == 3 || (s.GetDimNum() == 4 && s.GetDim(2) == 1);
      if (!ok) {
        return Fail(op, "kv_caches[%d]: expected [num_blocks, block_size, hidden] (or [num_blocks, block_size, 1, "
                    "hidden]), got shape %s", p, ShapeText(s, b1, sizeof(b1)));
      }
      g.numBlocks = s.GetDim(0);
      g.blockSize = s.GetDim(1);
      g.heads = 1;
      g.headSize = s.GetDim(s.GetDimNum() - 1);
    }
    g.SetRows(a.bnsd);
    g.planeOffset = (a.fmt == kMerged && p == 1) ? g.numBlocks * g.blockStride : 0;
    g.tensorInLayer = a.fmt == kMerged ? 0 : p;
    if (g.numBlocks != cl->plane[0].numBlocks || g.blockSize != cl->plane[0].blockSize) {
      return Fail(op, "kv_caches[%d]: expected num_blocks, block_size = %lld, %lld (as plane 0), got shape %s", p,
                  static_cast<long long>(cl->plane[0].numBlocks), static_cast<long long>(cl->plane[0].blockSize),
                  ShapeText(s, b1, sizeof(b1)));
    }
  }
  if (a.fmt == kSeparate) {
    const gert::Shape& k = context->GetDynamicInputShape(ir, 0)->GetStorageShape();
    const gert::Shape& v = context->GetDynamicInputShape(ir, 1)->GetStorageShape();
    if (!SameShape(k, v)) {
      return Fail(op, "kv_caches[1]: expected shape %s (as the key cache), got %s", ShapeText(k, b1, sizeof(b1)),
                  ShapeText(v, b2, sizeof(b2)));
    }
  }
  return ge::GRAPH_SUCCESS;
}

// The scale_caches list (IR input `ir`) of a quantized transfer: num_layers * planes float32 caches,
// layer-major, each shaped for its data plane (file comment), every layer like layer 0; appends the scale
// planes (4-byte heads in the byte view of the int8 caches). The caches must be int8: float8 caches have no
// AscendC kernel on these SoCs (as for the quantizing writes), a tiling error naming the SoC.
inline ge::graphStatus ReadScales(gert::TilingContext* context, const char* op, int ir, const Attrs& a, bool is310P,
                                  CacheList* cl) {
  char b1[160];
  if (cl->dt == ge::DT_FLOAT8_E4M3FN || cl->dt == ge::DT_FLOAT8_E5M2) {
    return Fail(op, "kv_caches: float8 caches with scale caches have no AscendC kernel on %s (float8 is not an "
                "OpDef dtype there); use int8 caches, or the cpu backend", is310P ? "Ascend310P" : "Atlas A2/A3");
  }
  if (cl->dt != ge::DT_INT8) {
    return Fail(op, "kv_caches: scale caches go with int8 caches, got %s", DTypeName(cl->dt));
  }
  const int P = cl->dataPlanes;
  int64_t count = 0;
  while (context->GetDynamicInputShape(ir, count) != nullptr) ++count;
  if (count != a.numLayers * P) {
    return Fail(op, "scale_caches: expected num_layers * %d = %lld scale caches, got %lld", P,
                static_cast<long long>(a.numLayers * P), static_cast<long long>(count));
  }
  const bool mla = a.fmt == kMla || a.fmt == kDsa;
  const bool bnsdScales = a.bnsd && !a.nz;  // an NZ data plane's scale cache is BSND [nb, bs, H(, 1)]
  int64_t nzHeads[kMaxPlanes] = {0};       // NZ: H of each plane's scale cache (the data plane has no head split)
  for (int64_t i = 0; i < count && a.nz && i < P; ++i) {
    const gert::Shape& s = context->GetDynamicInputShape(ir, i)->GetStorageShape();
    nzHeads[i] = s.GetDimNum() >= 3 ? s.GetDim(2) : 0;
    if (nzHeads[i] < 1 || cl->plane[i].rowElems % nzHeads[i] != 0) {
      return Fail(op, "scale_caches[%lld]: expected [num_blocks, block_size, num_kv_heads(, 1)] beside an NZ cache, "
                  "num_kv_heads dividing its hidden size %lld, got %s", static_cast<long long>(i),
                  static_cast<long long>(cl->plane[i].rowElems), ShapeText(s, b1, sizeof(b1)));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const int p = static_cast<int>(i % P);
    const PlaneGeom& d = cl->plane[p];
    const gert::Shape& s = context->GetDynamicInputShape(ir, i)->GetStorageShape();
    const gert::CompileTimeTensorDesc* di = context->GetDynamicInputDesc(ir, i);
    if (di == nullptr || di->GetDataType() != ge::DT_FLOAT) {
      return Fail(op, "scale_caches[%lld]: expected dtype float32, got %s", static_cast<long long>(i),
                  di == nullptr ? "none" : DTypeName(di->GetDataType()));
    }
    if (CheckTensorSize(op, "scale_caches", s, kScaleBytes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    const int64_t heads = mla ? 1 : (a.nz ? nzHeads[p] : d.heads);
    const int64_t d1 = bnsdScales ? heads : d.blockSize, d2 = bnsdScales ? d.blockSize : heads;
    const bool ok = (s.GetDimNum() == 3 || (s.GetDimNum() == 4 && s.GetDim(3) == 1 && !mla)) &&
                    s.GetDim(0) == d.numBlocks && s.GetDim(1) == d1 && s.GetDim(2) == d2;
    if (!ok) {
      return Fail(op, "scale_caches[%lld]: expected [%lld, %lld, %lld] (one float32 scale per token%s of data plane %d), "
                  "got %s", static_cast<long long>(i), static_cast<long long>(d.numBlocks), static_cast<long long>(d1),
                  static_cast<long long>(d2), mla ? "" : "-head", p, ShapeText(s, b1, sizeof(b1)));
    }
  }
  for (int p = 0; p < P; ++p) {
    PlaneGeom g;
    g.numBlocks = cl->plane[p].numBlocks;
    g.blockSize = cl->plane[p].blockSize;
    g.heads = mla ? 1 : (a.nz ? nzHeads[p] : cl->plane[p].heads);
    g.headSize = kScaleBytes;
    g.SetRows(bnsdScales);
    g.list = 1;
    g.tensorInLayer = p;
    cl->plane[P + p] = g;
  }
  cl->planes = 2 * P;
  cl->scalesPerLayer = P;
  return ge::GRAPH_SUCCESS;
}

// DataCopyPad is needed when a row (BNSD: a head) of a plane is not a multiple of 32 bytes; Ascend310P has
// none (a tiling error naming the SoC and the plane); every stride must fit a strided copy.
inline ge::graphStatus NeedPad(const char* op, const CacheList& cl, const Attrs& a, bool is310P, bool* pad) {
  *pad = false;
  for (int p = 0; p < cl.planes; ++p) {
    const PlaneGeom& g = cl.plane[p];
    if (g.rowElems == 0) continue;
    if ((g.segElems * cl.elem) % kBlockBytes == 0) continue;
    *pad = true;
    if (is310P) {
      return Fail(op, "rows of %s %d (%s of %lld bytes) are not a multiple of 32 bytes; Ascend310P has no DataCopyPad, "
                  "so such caches are unsupported there", g.list == 1 ? "scale plane" : "plane",
                  g.list == 1 ? p - cl.dataPlanes : p,
                  g.numSeg > 1 ? "one head of a BNSD cache" : (a.nz ? "one token row beside NZ caches" : "one token row"),
                  static_cast<long long>(g.segElems * cl.elem));
    }
  }
  return ge::GRAPH_SUCCESS;
}

// Cores a launch may use: every vector core, or aiv_num when it is smaller.
inline int64_t CoreCap(const Hardware& hw, const Attrs& a) {
  return a.aivNum > 0 ? Min64(a.aivNum, hw.cores) : hw.cores;
}

// UB plan of a row of numSeg segments of segElems elements (see mskv_ml::RowPlan): whole rows per
// buffer (at most maxRows), else segments per buffer, else 32-byte-multiple pieces.
// (The block transfer plans rows of a layer group: numSeg = heads * layers.)
struct MlRowPlan {
  int64_t rowsPerLoop = 0, segsPerLoop = 0, pieceElems = 0, bytesNeeded = 0;
};

inline MlRowPlan PlanMlRow(int64_t numSeg, int64_t segElems, int64_t elem, int64_t bufferBytes, int64_t maxRows) {
  MlRowPlan p;
  const int64_t segPitch = AlignUp(segElems * elem, kBlockBytes);
  const int64_t rowPitch = numSeg * segPitch;
  if (rowPitch <= 0) return p;
  const int64_t rows = Min64(bufferBytes / rowPitch, Max64(maxRows, 1));
  if (rows >= 1) {
    p.rowsPerLoop = rows;
    p.bytesNeeded = rows * rowPitch;
    return p;
  }
  const int64_t segs = bufferBytes / segPitch;
  if (segs >= 1) {
    p.segsPerLoop = Min64(segs, numSeg);
    p.bytesNeeded = p.segsPerLoop * segPitch;
    return p;
  }
  p.pieceElems = AlignDown(bufferBytes, kBlockBytes) / elem;
  p.bytesNeeded = AlignDown(bufferBytes, kBlockBytes);
  return p;
}

// UB bytes of one layer row of plane g (every segment 32-byte aligned).
inline int64_t RowPitchBytes(const PlaneGeom& g, int64_t elem) {
  return g.numSeg * AlignUp(g.segElems * elem, kBlockBytes);
}

// The layers of a block-transfer group: as many consecutive layers as one token's rows of every plane fit a
// buffer of loopBytes (all L when they fit: the host rows of a token, and of consecutive tokens, are then
// one contiguous range), evened out over the groups; 1 when not even one layer row of a plane fits (such a
// plane moves row by row in pieces).
inline int64_t LayersPerGroup(const CacheList& cl, int64_t L, int64_t loopBytes) {
  int64_t fit = L;
  for (int p = 0; p < cl.planes; ++p) {
    const PlaneGeom& g = cl.plane[p];
    if (g.rowElems <= 0) continue;
    const int64_t f = loopBytes / RowPitchBytes(g, cl.elem);
    if (f >= 1) fit = Min64(fit, f);
  }
  fit = Max64(fit, 1);
  return CeilDiv(L, CeilDiv(L, fit));
}

// The UB budget: `zeroBytes` for the buffer of zeros, the rest in two equal 32-byte-multiple buffers.
inline int64_t LoopBufferBytes(const Hardware& hw, int64_t zeroBytes) {
  return AlignDown((hw.ubBytes - kUbReserveBytes - zeroBytes) / kBufferNum, kBlockBytes);
}

// DataCopyPad gaps are uint32 bytes; reject geometries whose strides do not fit.
inline ge::graphStatus CheckGap(const char* op, const char* what, int64_t gapBytes) {
  if (gapBytes > 0xFFFFFFFFll) {
    return Fail(op, "%s: a stride of %lld bytes is too large for one strided copy", what,
                static_cast<long long>(gapBytes));
  }
  return ge::GRAPH_SUCCESS;
}

// The per-plane fields both tilings share: cache geometry, list, and the UB plan of each plane's rows
// (PlanMlRow: at most maxRows rows per buffer of loopBytes; none for noWork or an empty plane). A UB row is
// `layers` consecutive layer rows of one token (the block transfer's layer group; 1 for the token transfer);
// a plane whose single layer row does not fit a buffer gets the segments / pieces plan of one layer row.
// *needed grows to the largest buffer a plane needs, *maxRun shrinks to the fewest whole rows a buffer holds.
template <typename TD>
inline void SetPlanes(TD& td, const CacheList& cl, bool noWork, int64_t loopBytes, int64_t maxRows, int64_t* needed,
                      int64_t* maxRun, int64_t layers = 1) {
  int64_t rowElems[kMaxPlanes] = {0}, numSeg[kMaxPlanes] = {0}, segElems[kMaxPlanes] = {0};
  int64_t segStride[kMaxPlanes] = {0}, planeOffset[kMaxPlanes] = {0}, list[kMaxPlanes] = {0}, til[kMaxPlanes] = {0};
  int64_t rows[kMaxPlanes] = {0}, segs[kMaxPlanes] = {0}, pieces[kMaxPlanes] = {0};
  for (int p = 0; p < cl.planes; ++p) {
    const PlaneGeom& g = cl.plane[p];
    if (!noWork && g.rowElems > 0) {
      MlRowPlan rp = PlanMlRow(g.numSeg * layers, g.segElems, cl.elem, loopBytes, maxRows);
      if (rp.rowsPerLoop <= 0 && layers > 1) rp = PlanMlRow(g.numSeg, g.segElems, cl.elem, loopBytes, maxRows);
      rows[p] = rp.rowsPerLoop;
      segs[p] = rp.segsPerLoop;
      pieces[p] = rp.pieceElems;
      *needed = Max64(*needed, rp.bytesNeeded);
      if (rp.rowsPerLoop > 0) *maxRun = Min64(*maxRun, rp.rowsPerLoop);
    }
    rowElems[p] = g.rowElems;
    numSeg[p] = g.numSeg;
    segElems[p] = g.segElems;
    segStride[p] = g.segStride;
    planeOffset[p] = g.planeOffset;
    list[p] = g.list;
    til[p] = g.tensorInLayer;
  }
  td.set_numPlanes(cl.planes);
  td.set_tensorsPerLayer(cl.tpl);
  td.set_scalesPerLayer(cl.scalesPerLayer);
  td.set_blockSize(cl.plane[0].blockSize);
  td.set_rowElems(rowElems);
  td.set_numSeg(numSeg);
  td.set_segElems(segElems);
  td.set_segStride(segStride);
  td.set_planeOffset(planeOffset);
  td.set_planeList(list);
  td.set_tensorInLayer(til);
  td.set_tokensPerInnerLoop(rows);
  td.set_segsPerLoop(segs);
  td.set_pieceElems(pieces);
}

// ------------------------------------------------------------------ OpDefs
// The OpDef dtype rows of the transfers with scale caches (MskvMultiLayer*TransferQuant), the same on every
// SoC: int8 caches (float8 has no kernel: ms_kvcache._spec.SOC_EXCLUDED_DTYPES), index int32 / int64, float32
// scales, int32 status. The columns of CopyRows (op_host/kv_copy_tiling_common.h) plus the scales.
static const std::vector<ge::DataType> kQuantMlKvDTypes = {ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kQuantMlIndexDTypes = {ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kQuantMlScaleDTypes = {ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kQuantMlStatusDTypes = {ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kQuantMlFormats = {ge::FORMAT_ND, ge::FORMAT_ND};
struct ScaleRows {
  const mskv_tiling::DTypes &kv, &index, &status;
  const mskv_tiling::Formats &fmt;
  const mskv_tiling::DTypes &scale;
};
static const ScaleRows kScaleRows = {kQuantMlKvDTypes, kQuantMlIndexDTypes, kQuantMlStatusDTypes, kQuantMlFormats,
                                     kQuantMlScaleDTypes};

// The attributes of a multi-layer transfer OpDef (with or without scale caches), in OpSpec order, with the
// op's default direction and cache_layout codes (op_host/mskv_attr_codes.h).
template <typename Def>
inline void DeclareTransferAttrs(Def& d, int64_t direction, int64_t cacheLayout) {
  d.Attr("kv_format").AttrType(ops::OPTIONAL).Int(1);
  d.Attr("direction").AttrType(ops::OPTIONAL).Int(direction);
  d.Attr("cache_layout").AttrType(ops::OPTIONAL).Int(cacheLayout);
  d.Attr("num_layers").AttrType(ops::OPTIONAL).Int(1);
  d.Attr("aiv_num").AttrType(ops::OPTIONAL).Int(0);
}

}  // namespace mskv_ml_tiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_COMMON_H_
