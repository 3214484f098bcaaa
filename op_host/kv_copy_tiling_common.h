// Host-side helpers shared by the tiling functions of the KV-cache copy operators
// (reshape_and_cache, reshape_and_cache_merged, concat_and_cache_mla, copy_blocks).
//
// Everything the tiling needs about the hardware comes from platform_ascendc::PlatformAscendC:
// the number of vector cores (GetCoreNumAiv: AIV cores on A2/A3, the coupled AI cores on 310P),
// the UB size (GetCoreMemSize(UB)), and the SoC (310P has neither DataCopyPad nor bfloat16).
#ifndef MS_KVCACHE_OP_HOST_KV_COPY_TILING_COMMON_H_
#define MS_KVCACHE_OP_HOST_KV_COPY_TILING_COMMON_H_

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "register/tilingdata_base.h"
#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

#include "mskv_attr_codes.h"
#include "mskv_tiling_key_check.h"

namespace mskv_tiling {

// One dtype / format column of an OpDef's dtype rows (a rows struct holds one reference per column).
using DTypes = std::vector<ge::DataType>;
using Formats = std::vector<ge::Format>;

// Double buffering: two UB buffers per queue, copy-in of chunk i+1 overlaps copy-out of chunk i.
constexpr int64_t kBufferNum = 2;
// UB bytes left unused by the kernels (the official ops keep about 1 KiB back).
constexpr int64_t kUbReserveBytes = 1024;
// UB / DataCopy granule.
constexpr int64_t kBlockBytes = 32;
// Most tokens a kernel batches into one copy-in (it keeps their slots in a local array).
constexpr int64_t kMaxRunRows = 128;
// DataCopyParams / DataCopyExtParams blockCount limit.
constexpr int64_t kMaxBurstCount = 4095;
// DataCopyParams strides are uint16 counts of 32-byte blocks.
constexpr int64_t kMaxStrideBlocks = 65535;

// Tiling-key digits shared by the copy operators (see docs/design.md, "AscendC copy kernels").
enum DTypeCode : uint64_t { kF16 = 1, kBF16 = 2, kF32 = 3, kI8 = 4 };

inline int64_t CeilDiv(int64_t a, int64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }
inline int64_t AlignUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }
inline int64_t AlignDown(int64_t a, int64_t b) { return b == 0 ? 0 : (a / b) * b; }
inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Report a tiling error: one line on stderr naming the operator, then GRAPH_FAILED.
inline ge::graphStatus Fail(const char* op, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "ms_kvcache: %s tiling: %s\n", op, msg);
  std::fflush(stderr);
  return ge::GRAPH_FAILED;
}

// cache_layout attribute at OpDef index i: an Int attribute holding mskv_attr::kLayoutBSND / kLayoutBNSD /
// kLayoutNZ (ms_kvcache AttrSpec.codes; not a String attribute, which MindSpore 2.7 / 2.8 cannot pass to an
// Ascend C op). `dflt` when absent; any other value (NZ too, unless `nzAllowed`) is a tiling error naming the
// attribute. *code is also the layout digit of the copy kernels' tiling keys.
inline ge::graphStatus LayoutCodeAttr(gert::TilingContext* context, size_t i, const char* op, int64_t dflt,
                                      bool nzAllowed, int64_t* code) {
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const int64_t* p = attrs == nullptr ? nullptr : attrs->GetAttrPointer<int64_t>(i);
  *code = p == nullptr ? dflt : *p;
  if (*code == mskv_attr::kLayoutNZ && !nzAllowed) {
    return Fail(op, "cache_layout: NZ (%lld) caches are not supported by this op; expected %lld (BSND) or %lld (BNSD)",
                static_cast<long long>(mskv_attr::kLayoutNZ), static_cast<long long>(mskv_attr::kLayoutBSND),
                static_cast<long long>(mskv_attr::kLayoutBNSD));
  }
  if (*code != mskv_attr::kLayoutBSND && *code != mskv_attr::kLayoutBNSD && *code != mskv_attr::kLayoutNZ) {
    return Fail(op, "cache_layout: expected %lld (BSND), %lld (BNSD) or %lld (NZ), got %lld",
                static_cast<long long>(mskv_attr::kLayoutBSND), static_cast<long long>(mskv_attr::kLayoutBNSD),
                static_cast<long long>(mskv_attr::kLayoutNZ), static_cast<long long>(*code));
  }
  return ge::GRAPH_SUCCESS;
}

// The same for an op without NZ caches: *bnsd.
inline ge::graphStatus LayoutAttr(gert::TilingContext* context, size_t i, const char* op, int64_t dflt,
                                  bool* bnsd) {
  int64_t code = 0;
  if (LayoutCodeAttr(context, i, op, dflt, false, &code) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  *bnsd = code == mskv_attr::kLayoutBNSD;
  return ge::GRAPH_SUCCESS;
}

// Element size and tiling-key digit of a KV dtype; 0 for anything else.
inline int64_t KvDTypeSize(ge::DataType dt, uint64_t* code) {
  switch (dt) {
    case ge::DT_FLOAT16: *code = kF16; return 2;
    case ge::DT_BF16: *code = kBF16; return 2;
    case ge::DT_FLOAT: *code = kF32; return 4;
    case ge::DT_INT8: *code = kI8; return 1;
    default: *code = 0; return 0;
  }
}

// 0 for int32, 1 for int64, -1 otherwise.
inline int IndexDTypeCode(ge::DataType dt) {
  if (dt == ge::DT_INT32) return 0;
  if (dt == ge::DT_INT64) return 1;
  return -1;
}

inline const char* DTypeName(ge::DataType dt) {
  switch (dt) {
    case ge::DT_FLOAT16: return "float16";
    case ge::DT_BF16: return "bfloat16";
    case ge::DT_FLOAT: return "float32";
    case ge::DT_INT8: return "int8";
    case ge::DT_INT32: return "int32";
    case ge::DT_INT64: return "int64";
    default: return "unsupported dtype";
  }
}

// Text of a shape for error messages.
inline const char* ShapeText(const gert::Shape& s, char* buf, size_t cap) {
  size_t n = 0;
  n += std::snprintf(buf + n, cap - n, "[");
  for (size_t i = 0; i < s.GetDimNum() && n < cap; ++i) {
    n += std::snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", static_cast<long long>(s.GetDim(i)));
  }
  if (n < cap) std::snprintf(buf + n, cap - n, "]");
  return buf;
}

// Largest tensor the tiling accepts, in bytes (2^62). Every input is checked against it before any
// product of its dims is used, so no size, stride or GM offset derived from the shapes can overflow
// int64 (offsets are at most a tensor's element count; pitches add at most 32 bytes per segment).
constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;

// Product of a shape's dims from `first` on, times `elem`; false (and *out untouched) when a dim is
// negative or the product of the dims, zeros counted as 1, exceeds kMaxTensorBytes. (Counting zeros as
// 1 keeps products of the other dims, e.g. num_blocks * block_size of a cache with head_size 0, in
// range too.)
inline bool DimProduct(const gert::Shape& s, size_t first, int64_t elem, int64_t* out) {
  int64_t bound = elem;  // product with zero dims counted as 1
  bool zero = false;
  for (size_t i = first; i < s.GetDimNum(); ++i) {
    const int64_t d = s.GetDim(i);
    if (d < 0) return false;
    if (d == 0) {
      zero = true;
      continue;
    }
    if (bound > kMaxTensorBytes / d) return false;
    bound *= d;
  }
  *out = zero ? 0 : bound;
  return true;
}

// Every dim >= 0 and the tensor at most kMaxTensorBytes (elements of elem bytes).
inline ge::graphStatus CheckTensorSize(const char* op, const char* name, const gert::Shape& s, int64_t elem) {
  int64_t bytes = 0;
  if (!DimProduct(s, 0, elem, &bytes)) {
    char b[160];
    return Fail(op, "%s: shape %s has a negative dimension, or its dimensions (zeros counted as 1) span more "
                "than 2^62 bytes", name, ShapeText(s, b, sizeof(b)));
  }
  return ge::GRAPH_SUCCESS;
}

inline bool SameShape(const gert::Shape& a, const gert::Shape& b) {
  if (a.GetDimNum() != b.GetDimNum()) return false;
  for (size_t i = 0; i < a.GetDimNum(); ++i) {
    if (a.GetDim(i) != b.GetDim(i)) return false;
  }
  return true;
}

// What the platform offers a vector kernel.
struct Hardware {
  int64_t cores = 0;        // vector cores a kernel may use (block dim upper bound)
  int64_t ubBytes = 0;      // UB bytes per core
  int64_t bufferBytes = 0;  // bytes of one of the kBufferNum UB buffers (32-byte multiple)
  bool is310P = false;      // no DataCopyPad, no bfloat16
  uint64_t sysWorkspace = 0;
};

inline ge::graphStatus GetHardware(gert::TilingContext* context, const char* op, Hardware* hw) {
  auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  hw->cores = static_cast<int64_t>(platform.GetCoreNumAiv());
  uint64_t ub = 0;
  platform.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub);
  hw->ubBytes = static_cast<int64_t>(ub);
  hw->is310P = platform.GetSocVersion() == platform_ascendc::SocVersion::ASCEND310P;
  hw->sysWorkspace = static_cast<uint64_t>(platform.GetLibApiWorkSpaceSize());
  if (hw->cores <= 0) return Fail(op, "the platform reports %lld vector cores", static_cast<long long>(hw->cores));
  const int64_t usable = hw->ubBytes - kUbReserveBytes;
  hw->bufferBytes = AlignDown(usable / kBufferNum, kBlockBytes);
  if (hw->bufferBytes < kBlockBytes) {
    return Fail(op, "the platform reports %lld bytes of UB, too small for two %lld-byte buffers",
                static_cast<long long>(hw->ubBytes), static_cast<long long>(kBlockBytes));
  }
  return ge::GRAPH_SUCCESS;
}

// Balanced split of `units` work items over at most `cores` cores: the first formerNum cores take
// formerLen items (the main share), the remaining usedCoreNum - formerNum take tailLen =
// formerLen - 1 (the tail share). Every launched core has work, and all cores are used once
// units >= cores. units == 0 gives one core with nothing to do (a valid no-op launch).
struct CoreSplit {
  int64_t usedCoreNum = 1, formerNum = 0, formerLen = 0, tailLen = 0;
};

inline CoreSplit SplitWork(int64_t units, int64_t cores) {
  CoreSplit s;
  if (units <= 0) return s;
  s.usedCoreNum = Min64(units, cores);
  s.formerLen = CeilDiv(units, s.usedCoreNum);
  s.tailLen = units / s.usedCoreNum;
  s.formerNum = units - s.tailLen * s.usedCoreNum;  // cores that take one extra item
  if (s.formerNum == 0) {                            // even split: every core takes formerLen
    s.formerNum = s.usedCoreNum;
    s.tailLen = s.formerLen;
  }
  return s;
}

// Degenerate shapes are valid calls with nothing to move, as on the cpu backend: zero tokens, a
// zero-sized row (head_size, num_kv_heads, kv_lora_rank or rope_dim 0; one plane of an MLA call may
// be empty while the other is written), a cache without slots (num_blocks or block_size 0), no block
// pairs, or zero-sized cache blocks. The tiling then returns block dim 1 with no work (a no-op
// launch) instead of planning a row of 0 bytes; the kernels never touch GM in that case.
inline CoreSplit NoWork() { return CoreSplit(); }

// How one token's row is moved for one cache: a row is numSeg segments of segElems elements,
// contiguous in the source (key/value) and segStride elements apart in the cache (BNSD: one segment
// per head). rowsPerChunk > 0: up to that many whole rows per UB buffer; else segsPerChunk > 0:
// that many segments per buffer; else pieces of pieceElems elements (a row larger than UB).
struct RowPlan {
  int64_t rowsPerChunk = 0, segsPerChunk = 0, pieceElems = 0;
  int64_t bytesNeeded = 0;  // UB bytes one buffer actually needs under this plan
};

inline RowPlan PlanRow(int64_t numSeg, int64_t segElems, int64_t elem, int64_t bufferBytes, bool pad,
                       int64_t maxRows) {
  RowPlan p;
  const int64_t segBytes = segElems * elem;
  const int64_t segPitch = AlignUp(segBytes, kBlockBytes);  // bytes a segment occupies in UB
  const int64_t rowPitch = numSeg * segPitch;
  if (rowPitch <= 0 || elem <= 0) return p;
  int64_t rows = bufferBytes / rowPitch;
  rows = Min64(rows, Min64(kMaxRunRows, Max64(maxRows, 1)));
  if (pad) rows = Min64(rows, kMaxBurstCount / numSeg);  // one DataCopyPad burst per segment
  if (rows >= 1) {
    p.rowsPerChunk = rows;
    p.bytesNeeded = rows * rowPitch;
    return p;
  }
  const int64_t segs = Min64(Min64(bufferBytes / segPitch, numSeg), kMaxBurstCount);
  if (segs >= 1) {
    p.segsPerChunk = segs;
    p.bytesNeeded = segs * segPitch;
    return p;
  }
  // A single segment is larger than a buffer: move it in 32-byte-multiple pieces.
  p.pieceElems = AlignDown(bufferBytes, kBlockBytes) / elem;
  p.bytesNeeded = AlignDown(bufferBytes, kBlockBytes);
  return p;
}
// (Callers plan only rows with numSeg >= 1 and segElems >= 1; a zero-sized row is a no-op launch,
// see NoWork below. PlanRow still returns an empty plan for one instead of dividing by zero.)

// Where one token's row of one cache goes (element units). Slot s lands at
//   (s / blockSize) * blockStride + (s % blockSize) * slotStride
// and its numSeg segments of segElems elements are segStride elements apart.
struct ScatterGeom {
  int64_t numTokens = 0, numSlots = 0, blockSize = 1;
  int64_t rowElems = 0, numSeg = 1, segElems = 0, segStride = 0, blockStride = 0, slotStride = 0;
};

// Geometry of a paged cache whose dims from `first` on are [nb, bs, H, D] ("BSND") or [nb, H, bs, D]
// ("BNSD"): first = 0 for a rank-4 cache, 1 for one half of a merged [2, nb, ...] cache.
inline void CacheGeom(const gert::Shape& c, size_t first, bool bnsd, ScatterGeom* g) {
  const int64_t nb = c.GetDim(first);
  const int64_t bs = bnsd ? c.GetDim(first + 2) : c.GetDim(first + 1);
  const int64_t h = bnsd ? c.GetDim(first + 1) : c.GetDim(first + 2);
  const int64_t d = c.GetDim(first + 3);
  g->blockSize = bs;
  g->numSlots = nb * bs;
  g->rowElems = h * d;
  g->blockStride = bs * h * d;
  if (bnsd) {
    g->numSeg = h; g->segElems = d; g->segStride = bs * d; g->slotStride = d;
  } else {
    g->numSeg = 1; g->segElems = h * d; g->segStride = h * d; g->slotStride = h * d;
  }
}

// An NZ cache (cache_layout NZ) [nb, H*D/C0, bs, C0] from dim `first` on (1: one half of a merged [2, ...]
// cache) of dtype dt (elem bytes): C0 is 32 bytes of float16 / bfloat16 / int8 (float32 has no NZ form here),
// block_size a multiple of 16 (the fractal's height) and H*D/C0 segments per row at most kMaxBurstCount (one
// strided copy per token). Its geometry is then CacheGeom's BNSD one: H*D/C0 "heads" of C0 elements.
constexpr int64_t kNzBlockAlign = 16;
inline ge::graphStatus CheckNzCache(const char* op, const char* name, const gert::Shape& c, size_t first,
                                    ge::DataType dt, int64_t elem) {
  char b[160];
  if (dt != ge::DT_FLOAT16 && dt != ge::DT_BF16 && dt != ge::DT_INT8) {
    return Fail(op, "%s: an NZ cache is float16, bfloat16 or int8 (C0 = 32 bytes), got %s", name, DTypeName(dt));
  }
  if (c.GetDimNum() != first + 4 || c.GetDim(first + 3) * elem != kBlockBytes) {
    return Fail(op, "%s: expected an NZ cache [num_blocks, num_kv_heads * head_size / C0, block_size, C0] with C0 = "
                "%lld for %s, got shape %s", name, static_cast<long long>(kBlockBytes / elem), DTypeName(dt),
                ShapeText(c, b, sizeof(b)));
  }
  if (c.GetDim(first + 2) % kNzBlockAlign != 0) {
    return Fail(op, "%s: expected block_size (dim %zu of an NZ cache) a multiple of %lld, got shape %s", name,
                first + 2, static_cast<long long>(kNzBlockAlign), ShapeText(c, b, sizeof(b)));
  }
  if (c.GetDim(first + 1) > kMaxBurstCount) {
    return Fail(op, "%s: num_kv_heads * head_size / C0 = %lld exceeds %lld for an NZ cache (one strided copy per "
                "token)", name, static_cast<long long>(c.GetDim(first + 1)), static_cast<long long>(kMaxBurstCount));
  }
  return ge::GRAPH_SUCCESS;
}

// key / value rows: [T', H, D] or [T', H*D] with T' >= numTokens and H*D == rowElems.
inline ge::graphStatus CheckTokenRows(const char* op, const char* name, const gert::Shape& x, int64_t numTokens,
                                      int64_t rowElems) {
  char b[128];
  const size_t r = x.GetDimNum();
  if (r < 2 || r > 3) return Fail(op, "%s: expected rank 2 or 3, got shape %s", name, ShapeText(x, b, sizeof(b)));
  int64_t row = 0;
  if (!DimProduct(x, 1, 1, &row) || row != rowElems) {
    return Fail(op, "%s: expected %lld elements per token (as in the cache), got shape %s", name,
                static_cast<long long>(rowElems), ShapeText(x, b, sizeof(b)));
  }
  if (x.GetDim(0) < numTokens) {
    return Fail(op, "%s: expected at least len(slot_mapping) = %lld rows, got shape %s", name,
                static_cast<long long>(numTokens), ShapeText(x, b, sizeof(b)));
  }
  return ge::GRAPH_SUCCESS;
}

// Checks every SoC rule for a scatter of rows with geometry g and element size elem, and plans the
// UB chunks. pad: rows need DataCopyPad (a segment is not a multiple of 32 bytes).
inline ge::graphStatus PlanScatter(const char* op, const Hardware& hw, int64_t elem, const ScatterGeom& g,
                                   int64_t maxRows, bool* pad, RowPlan* plan) {
  const int64_t segBytes = g.segElems * elem;
  *pad = (segBytes % kBlockBytes) != 0;
  if (*pad && hw.is310P) {
    return Fail(op, "rows of %lld bytes (%s) are not a multiple of 32 bytes; Ascend310P has no DataCopyPad, "
                "so such rows are unsupported there (use a head_size whose bytes are a multiple of 32)",
                static_cast<long long>(segBytes), g.numSeg > 1 ? "one head of a BNSD cache" : "one token row");
  }
  if (g.numSeg > kMaxBurstCount) {
    return Fail(op, "num_kv_heads = %lld exceeds %lld for a BNSD cache", static_cast<long long>(g.numSeg),
                static_cast<long long>(kMaxBurstCount));
  }
  const int64_t gapBytes = (g.segStride - g.segElems) * elem;
  if (g.numSeg > 1 && gapBytes > 0xFFFFFFFFll) {
    return Fail(op, "block_size * head_size = %lld elements is too large for one strided copy",
                static_cast<long long>(g.segStride));
  }
  *plan = PlanRow(g.numSeg, g.segElems, elem, hw.bufferBytes, *pad, maxRows);
  return ge::GRAPH_SUCCESS;
}

// ------------------------------------------------------------------ what every tiling function repeats
// The storage shapes of inputs [0, n) (shapes[i]); a tiling error "input <i> is missing" when an input or
// its desc is absent.
inline ge::graphStatus GetInputShapes(gert::TilingContext* context, const char* op, int n,
                                      const gert::StorageShape** shapes) {
  for (int i = 0; i < n; ++i) {
    shapes[i] = context->GetInputShape(i);
    if (shapes[i] == nullptr || context->GetInputDesc(i) == nullptr) return Fail(op, "input %d is missing", i);
  }
  return ge::GRAPH_SUCCESS;
}

// The same, as the storage shapes themselves (`const gert::Shape &key = *shapes[kKey], ...`).
inline ge::graphStatus GetInputShapes(gert::TilingContext* context, const char* op, int n, const gert::Shape** shapes) {
  for (int i = 0; i < n; ++i) {
    const gert::StorageShape* s = context->GetInputShape(i);
    if (s == nullptr || context->GetInputDesc(i) == nullptr) return Fail(op, "input %d is missing", i);
    shapes[i] = &s->GetStorageShape();
  }
  return ge::GRAPH_SUCCESS;
}

// The start of most tiling functions: the SoC's facts (GetHardware), then the storage shapes of inputs 0..n-1.
inline ge::graphStatus GetHardwareAndShapes(gert::TilingContext* context, const char* op, Hardware* hw, int n,
                                            const gert::Shape** shapes) {
  if (GetHardware(context, op, hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  return GetInputShapes(context, op, n, shapes);
}

// An input that must have the dtype of a reference input: index and name (for the message).
struct NamedInput {
  int index;
  const char* name;
};

// Every input of `same` has dtype dt, the dtype of input `refName`; else "<name>: expected dtype <dt> (as
// <refName>), got <its dtype>". Then bfloat16 is refused on Ascend310P (no bfloat16 vector data there).
inline ge::graphStatus CheckSameDType(gert::TilingContext* context, const char* op, const Hardware& hw,
                                      ge::DataType dt, const char* refName, const NamedInput* same, int n) {
  for (int i = 0; i < n; ++i) {
    const ge::DataType di = context->GetInputDesc(same[i].index)->GetDataType();
    if (di != dt) {
      return Fail(op, "%s: expected dtype %s (as %s), got %s", same[i].name, DTypeName(dt), refName, DTypeName(di));
    }
  }
  if (dt == ge::DT_BF16 && hw.is310P) return Fail(op, "bfloat16 is not supported on Ascend310P");
  return ge::GRAPH_SUCCESS;
}

// The KV dtype of input `ref` (float16, bfloat16, float32 or int8): element size and tiling-key digit
// (DTypeCode); the inputs of `same` have it too (CheckSameDType).
inline ge::graphStatus KvDType(gert::TilingContext* context, const char* op, const Hardware& hw, int ref,
                               const char* refName, const NamedInput* same, int n, int64_t* elem, uint64_t* dcode) {
  const ge::DataType dt = context->GetInputDesc(ref)->GetDataType();
  *elem = KvDTypeSize(dt, dcode);
  if (*elem == 0) return Fail(op, "%s: expected float16, bfloat16, float32 or int8, got %s", refName, DTypeName(dt));
  return CheckSameDType(context, op, hw, dt, refName, same, n);
}

// Tiling-key digit of an index input (slot_mapping, block_mapping, ...): 0 int32, 1 int64; else an error.
inline ge::graphStatus IndexDType(gert::TilingContext* context, const char* op, int i, const char* name, int* code) {
  const ge::DataType dt = context->GetInputDesc(i)->GetDataType();
  *code = IndexDTypeCode(dt);
  if (*code < 0) return Fail(op, "%s: expected int32 or int64, got %s", name, DTypeName(dt));
  return ge::GRAPH_SUCCESS;
}

// A REQUIRED index input (slot_mapping, block_mapping, block_ids) by its IR index, as ops with DYNAMIC
// inputs must address it (GetRequiredInputShape): its shape and tiling-key digit (0 int32, 1 int64); a
// tiling error "<name> is missing" or "<name>: expected int32 or int64, got <dtype>" otherwise.
inline ge::graphStatus RequiredIndexInput(gert::TilingContext* context, const char* op, size_t irIndex,
                                          const char* name, const gert::Shape** shape, int* code) {
  const gert::StorageShape* s = context->GetRequiredInputShape(irIndex);
  const gert::CompileTimeTensorDesc* d = context->GetRequiredInputDesc(irIndex);
  if (s == nullptr || d == nullptr) return Fail(op, "%s is missing", name);
  *shape = &s->GetStorageShape();
  *code = IndexDTypeCode(d->GetDataType());
  if (*code < 0) return Fail(op, "%s: expected int32 or int64, got %s", name, DTypeName(d->GetDataType()));
  return ge::GRAPH_SUCCESS;
}

// Write a registered TilingData object into the context's raw tiling buffer.
template <typename TD>
inline ge::graphStatus SaveTiling(gert::TilingContext* context, TD& td, const char* op) {
  auto* raw = context->GetRawTilingData();
  if (raw == nullptr) return Fail(op, "no tiling buffer");
  if (td.GetDataSize() > raw->GetCapacity()) {
    return Fail(op, "tiling data of %zu bytes exceeds the %zu-byte buffer", static_cast<size_t>(td.GetDataSize()),
                static_cast<size_t>(raw->GetCapacity()));
  }
  td.SaveToBuffer(raw->GetData(), raw->GetCapacity());
  raw->SetDataSize(td.GetDataSize());
  return ge::GRAPH_SUCCESS;
}

inline ge::graphStatus SetSystemWorkspace(gert::TilingContext* context, const Hardware& hw) {
  size_t* ws = context->GetWorkspaceSizes(1);
  if (ws == nullptr) return ge::GRAPH_FAILED;
  ws[0] = static_cast<size_t>(hw.sysWorkspace);
  return ge::GRAPH_SUCCESS;
}

// The work split fields every tiling data has (usedCoreNum, formerNum, formerLen, tailLen).
template <typename TD>
inline void SetCoreSplit(TD& td, const CoreSplit& s) {
  td.set_usedCoreNum(s.usedCoreNum);
  td.set_formerNum(s.formerNum);
  td.set_formerLen(s.formerLen);
  td.set_tailLen(s.tailLen);
}

// The fields of a row scatter (reshape_and_cache, reshape_and_cache_merged): geometry g, UB plan, split.
template <typename TD>
inline void SetScatterTiling(TD& td, const ScatterGeom& g, const CoreSplit& split, const RowPlan& plan) {
  td.set_numTokens(g.numTokens);
  td.set_numSlots(g.numSlots);
  td.set_blockSize(g.blockSize);
  SetCoreSplit(td, split);
  td.set_rowElems(g.rowElems);
  td.set_numSeg(g.numSeg);
  td.set_segElems(g.segElems);
  td.set_segStride(g.segStride);
  td.set_blockStride(g.blockStride);
  td.set_slotStride(g.slotStride);
  td.set_rowsPerChunk(plan.rowsPerChunk);
  td.set_segsPerChunk(plan.segsPerChunk);
  td.set_pieceElems(plan.pieceElems);
  td.set_bufferBytes(Max64(plan.bytesNeeded, kBlockBytes));
}

// The end of every tiling function: block dim, tiling key (docs/design.md, "Tiling keys"; computed with the
// op's key function of op_kernel/mskv_tiling_keys.h, mskv_keys::CopyKey, ...), the tiling data and the
// system workspace. A key the op's declaration (MSKV_OP_KEY_SETS) has no kernel branch for on this SoC is
// a tiling error naming the key, the target and the key set (op_host/mskv_tiling_key_check.h).
template <typename TD>
inline ge::graphStatus FinishTiling(gert::TilingContext* context, const char* op, const Hardware& hw, TD& td,
                                    int64_t blockDim, uint64_t key) {
  const mskv_keys::DeclaredKeys* declared = mskv_keys::FindDeclaredKeys(op);
  if (declared == nullptr) {
    return Fail(op, "no tiling keys are declared for this op (add it to MSKV_OP_KEY_SETS, op_kernel/mskv_tiling_keys.h)");
  }
  if (!mskv_keys::IsDeclaredKey(*declared, hw.is310P, key)) {
    return Fail(op, "tiling key %llu has no kernel branch on %s: %s (op_kernel/mskv_tiling_keys.h) does not declare it",
                static_cast<unsigned long long>(key), hw.is310P ? "Ascend310P" : "Atlas A2/A3", declared->keySet);
  }
  context->SetBlockDim(static_cast<uint32_t>(blockDim));
  context->SetTilingKey(key);
  if (SaveTiling(context, td, op) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  return SetSystemWorkspace(context, hw);
}

// ------------------------------------------------------------------ OpDef dtype rows
// One row per supported combination, in the order of ms_kvcache._spec.OpSpec.dtype_rows(): the cache
// dtype (float16, bfloat16, float32, int8) outer, the index dtype (int32, int64) inner; the status
// output is int32 in every row. Ascend310P has no bfloat16, so its rows (the *310P lists, used through
// an OpAICoreConfig) leave it out. Literal named lists, so that the structural check
// (ms_kvcache/_structure.py) can read them from the source.
static const std::vector<ge::DataType> kKvDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kIndexDTypes = {
    ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kStatusDTypes = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kNdFormats = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND};
static const std::vector<ge::DataType> kKvDTypes310P = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kIndexDTypes310P = {
    ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kStatusDTypes310P = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kNdFormats310P = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND};

// Compile flags of every op's Ascend310P AICore config (static-shape binaries, ND only, no precision
// checks), the msopgen defaults for that compute unit; one place for all OpDefs.
inline void SetStaticCompileFlags(ops::OpAICoreConfig& cfg) {
  cfg.DynamicCompileStaticFlag(true).DynamicFormatFlag(false).DynamicRankSupportFlag(true)
      .DynamicShapeSupportFlag(true).NeedCheckSupportFlag(false).PrecisionReduceFlag(true);
}

// The dtype rows of a copy op on one compute unit, by column: the cache / data dtype, the index dtype
// (slot_mapping, block_mapping, block_ids), the status output; the formats. An OpDef's Declare gives each
// of its parameters one column (`DataType(r.kv)`); kCopyRows310P are the Ascend310P rows (no bfloat16).
struct CopyRows {
  const DTypes &kv, &index, &status;
  const Formats &fmt;
};
static const CopyRows kCopyRows = {kKvDTypes, kIndexDTypes, kStatusDTypes, kNdFormats};
static const CopyRows kCopyRows310P = {kKvDTypes310P, kIndexDTypes310P, kStatusDTypes310P, kNdFormats310P};

// One parameter of an OpDef: its name, its dtype column of one compute unit (a list of the rows struct,
// `r.kv`) and its ParamType (REQUIRED unless given).
struct Param {
  Param(const char* n, const std::vector<ge::DataType>& d, ops::Option t = ops::REQUIRED)
      : name(n), dtypes(d), type(t) {}
  const char* name;
  const std::vector<ge::DataType>& dtypes;
  ops::Option type;
};

// An OpDef's parameters, in ops.Custom order: CANN's Input(name).ParamType(type).DataType(dtypes)
// .Format(fmt).UnknownShapeFormat(fmt) chain for every input, then the same chain with Output for every
// output. An op's Declare(d, r) is one call: DeclareParams(d, r.fmt, {{"key", r.kv}, ...}, {{"status",
// r.status}}); the readers of OpDefs read the two lists (tools/mskv_structure.py).
template <typename Def>
inline void DeclareParams(Def& d, const std::vector<ge::Format>& fmt, std::initializer_list<Param> inputs,
                          std::initializer_list<Param> outputs) {
  for (const Param& p : inputs) d.Input(p.name).ParamType(p.type).DataType(p.dtypes).Format(fmt).UnknownShapeFormat(fmt);
  for (const Param& p : outputs) {
    d.Output(p.name).ParamType(p.type).DataType(p.dtypes).Format(fmt).UnknownShapeFormat(fmt);
  }
}

// The parameters and compute units of an OpDef, one place for every op (ms_kvcache._backends.ascend
// COMPUTE_UNITS): Op::Declare(d, rows) declares the op's inputs and outputs with the dtype rows of one
// compute unit. Atlas A2 and A3 (ascend910b, ascend910_93) take the OpDef's own parameters (`rows`),
// Ascend310P an OpAICoreConfig with the parameters of `rows310p` and the static-shape compile flags; every
// unit runs `tiling`. The readers of OpDefs follow this function (tools/mskv_structure.py,
// scripts/check_cann_headers.py op_soc_configs, cmake/sim.cmake): an op that calls it configures all three.
template <typename Op, typename Rows, typename TilingFunc>
inline void DeclareOnEverySoc(Op& op, const Rows& rows, const Rows& rows310p, TilingFunc tiling) {
  Op::Declare(op, rows);
  op.AICore().SetTiling(tiling);
  op.AICore().AddConfig("ascend910b");
  op.AICore().AddConfig("ascend910_93");
  ops::OpAICoreConfig cfg310p;
  Op::Declare(cfg310p, rows310p);
  SetStaticCompileFlags(cfg310p);
  op.AICore().AddConfig("ascend310p", cfg310p);
}

}  // namespace mskv_tiling

#endif  // MS_KVCACHE_OP_HOST_KV_COPY_TILING_COMMON_H_
