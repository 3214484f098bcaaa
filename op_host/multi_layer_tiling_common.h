// Host-side helpers shared by the tilings of the multi-layer transfers (multi_layer_kv_transfer,
// multi_layer_block_transfer): attributes, the per-layer cache list (a DYNAMIC input of
// num_layers * tensorsPerLayer caches, layer-major) and the per-plane row plans.
//
// Planes: MERGED_KV (1) has one [2, nb, ...] tensor per layer whose halves are the K and V planes;
// SEPARATE_KV (2) key_cache, value_cache; MLA_KV (3) kv_c, k_pe ([nb, bs, hidden] or [nb, bs, 1,
// hidden]); DSA_KV (4) adds indexer_k. BSND caches [nb, bs, H, D], BNSD [nb, H, bs, D].
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_COMMON_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_COMMON_H_

#include "kv_copy_tiling_common.h"

namespace mskv_ml_tiling {

using namespace mskv_tiling;

constexpr int kMaxPlanes = 3;
constexpr int64_t kMaxRun = 128;  // = mskv_ml::kMaxRun (op_kernel/multi_layer_copy.h)
// UB bytes of the buffer of zeros (d2h zero rows); taken from the UB budget before the two buffers.
constexpr int64_t kZeroBuffBytes = 4096;
enum KvFormat : int64_t { kMerged = 1, kSeparate = 2, kMla = 3, kDsa = 4 };

inline int PlanesOf(int64_t fmt) { return fmt == kDsa ? 3 : 2; }
inline int64_t TensorsPerLayer(int64_t fmt) { return fmt == kMerged ? 1 : PlanesOf(fmt); }

struct Attrs {
  int64_t fmt = kMerged;
  bool d2h = true;
  bool bnsd = false;
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
  if (LayoutAttr(context, 2, op, defaultLayout, &a->bnsd) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (a->bnsd && (a->fmt == kMla || a->fmt == kDsa)) {
    return Fail(op, "cache_layout: MLA_KV / DSA_KV caches are [num_blocks, block_size, hidden]; expected \"BSND\", "
                "got \"BNSD\"");
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
};

struct CacheList {
  uint64_t dcode = 0;
  int64_t elem = 0;
  ge::DataType dt = ge::DT_UNDEFINED;
  int planes = 2;
  int64_t tpl = 1;
  PlaneGeom plane[kMaxPlanes];
};

// Checks the kv_caches list (IR input `ir`): count = num_layers * tensorsPerLayer, one dtype, every
// layer shaped like layer 0, per-format ranks; fills the plane geometry.
inline ge::graphStatus ReadCaches(gert::TilingContext* context, const char* op, int ir, const Attrs& a, bool is310P,
                                  CacheList* cl) {
  char b1[160], b2[160];
  cl->planes = PlanesOf(a.fmt);
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
    g.rowElems = g.heads * g.headSize;
    g.blockStride = g.blockSize * g.rowElems;
    if (a.bnsd) {
      g.numSeg = g.heads; g.segElems = g.headSize; g.segStride = g.blockSize * g.headSize; g.slotStride = g.headSize;
    } else {
      g.numSeg = 1; g.segElems = g.rowElems; g.segStride = g.rowElems; g.slotStride = g.rowElems;
    }
    g.planeOffset = (a.fmt == kMerged && p == 1) ? g.numBlocks * g.blockStride : 0;
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

// Cores a launch may use: every vector core, or aiv_num when it is smaller.
inline int64_t CoreCap(const Hardware& hw, const Attrs& a) {
  return a.aivNum > 0 ? Min64(a.aivNum, hw.cores) : hw.cores;
}

// UB plan of a row of numSeg segments of segElems elements (see mskv_ml::RowPlan): whole rows per
// buffer (at most maxRows), else segments per buffer, else 32-byte-multiple pieces.
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

}  // namespace mskv_ml_tiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_COMMON_H_
