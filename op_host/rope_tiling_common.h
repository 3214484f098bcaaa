// Host-side helpers shared by the tiling functions of the fused RoPE-write operators
// (rope_reshape_and_cache, rope_reshape_and_cache_merged, rope_concat_and_cache_mla, rerope_cached_keys).
//
// The kernels (op_kernel/rope_kernel_common.h) move token rows as "head rows" of head_size elements,
// each at a pitch of P elements in UB (P = head_size rounded up to 32 bytes), rotate the first
// rotary_dim elements of every head in fp32 and write the rows back. The tiling decides how many
// tokens share one batch (their cos/sin rows are gathered together) and how many head rows share one
// UB chunk, from the UB the platform reports (PlatformAscendC), and checks every SoC rule: bfloat16
// and DataCopyPad (rows that are not a multiple of 32 bytes) do not exist on Ascend310P.
#ifndef MS_KVCACHE_OP_HOST_ROPE_TILING_COMMON_H_
#define MS_KVCACHE_OP_HOST_ROPE_TILING_COMMON_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "kv_copy_tiling_common.h"

namespace mskv_rope_tiling {

using mskv_tiling::AlignUp;
using mskv_tiling::CeilDiv;
using mskv_tiling::Fail;
using mskv_tiling::Max64;
using mskv_tiling::Min64;

// Tokens of one batch (= mskv::rope::kMaxBatch in op_kernel/rope_kernel_common.h): the kernel keeps
// their positions / slots in local arrays.
constexpr int64_t kMaxBatch = 64;
// Vector repeat strides are uint8 counts of 32-byte blocks: an fp32 head row of P elements needs
// P * 4 / 32 <= 255.
constexpr int64_t kMaxPitch = 2040;
// DataCopyPad / DataCopyParams blockCount limit (one burst per head row).
constexpr int64_t kMaxRowsPerChunk = 4095;
// Head rows covered by the partner-offset table of the Gather (one Gather per this many rows).
constexpr int64_t kPartnerRows = 16;
// A vector repeat processes 64 fp32 elements: the rotary part of a head is cut into groups of 64
// columns (op_kernel kMaxGroups = kMaxPitch / 64 + 1).
constexpr int64_t kColsPerGroup = 64;

// Tiling-key digits of the RoPE family (docs/rope.md, "AscendC kernels").
enum DataCode : uint64_t { kF16 = 1, kBF16 = 2, kF32 = 3 };

// Element size and key digit of a data dtype (float16 / bfloat16 / float32), 0 for anything else.
inline int64_t FloatSize(ge::DataType dt, uint64_t* code) {
  switch (dt) {
    case ge::DT_FLOAT16: *code = kF16; return 2;
    case ge::DT_BF16: *code = kBF16; return 2;
    case ge::DT_FLOAT: *code = kF32; return 4;
    default: *code = 0; return 0;
  }
}

// The data dtype of input `ref` (float16, bfloat16 or float32; else "<refName>: expected float16, bfloat16 or
// float32, got <dtype>"): the dtype, its element size and tiling-key digit (FloatSize); the `n` inputs of
// `same` have it too (mskv_tiling::CheckSameDType, which also refuses bfloat16 on Ascend310P).
inline ge::graphStatus DataDType(gert::TilingContext* context, const char* op, const mskv_tiling::Hardware& hw,
                                 int ref, const char* refName, const mskv_tiling::NamedInput* same, int n,
                                 ge::DataType* dt, int64_t* esz, uint64_t* dcode) {
  *dt = context->GetInputDesc(ref)->GetDataType();
  *esz = FloatSize(*dt, dcode);
  if (*esz == 0) {
    return Fail(op, "%s: expected float16, bfloat16 or float32, got %s", refName, mskv_tiling::DTypeName(*dt));
  }
  return mskv_tiling::CheckSameDType(context, op, hw, *dt, refName, same, n);
}

// Elements per 32-byte block of an element of `elem` bytes.
inline int64_t PerBlock(int64_t elem) { return mskv_tiling::kBlockBytes / elem; }

// Everything one kernel needs to know about the rotation and its UB layout.
struct RopeGeom {
  int64_t esz = 0;          // bytes of a data element
  int64_t csz = 0;          // bytes of a cos_sin_cache element
  int64_t headSize = 0;     // D
  int64_t pitch = 0;        // P: UB elements per head row (D rounded up to 32 bytes; also a multiple of 8)
  int64_t rotaryDim = 0;    // rd (even, <= D)
  int64_t maxPosition = 0;  // rows of cos_sin_cache
  int64_t csPitch = 0;      // UB elements per gathered cos/sin row (rd rounded up to 32 bytes of the table dtype)
  int64_t rotPitch = 0;     // fp32 elements per expanded cos / sin row (rd rounded up to 8)
  bool pad = false;         // some row is not a multiple of 32 bytes: DataCopyPad (A2/A3 only)
};

// Reads cos_sin_cache ([max_position, rotary_dim], float32 or the data dtype) against head size D.
inline ge::graphStatus TableGeom(const char* op, const gert::Shape& cs, ge::DataType csDt, ge::DataType dataDt,
                                 int64_t esz, int64_t headSize, const mskv_tiling::Hardware& hw, RopeGeom* g) {
  char b[128];
  if (cs.GetDimNum() != 2)
    return Fail(op, "cos_sin_cache: expected rank 2 [max_position, rotary_dim], got shape %s",
                mskv_tiling::ShapeText(cs, b, sizeof(b)));
  if (csDt != ge::DT_FLOAT && csDt != dataDt)
    return Fail(op, "cos_sin_cache: expected dtype float32 or %s (the data dtype), got %s",
                mskv_tiling::DTypeName(dataDt), mskv_tiling::DTypeName(csDt));
  g->esz = esz;
  g->csz = csDt == ge::DT_FLOAT ? 4 : 2;
  g->headSize = headSize;
  g->maxPosition = cs.GetDim(0);
  g->rotaryDim = cs.GetDim(1);
  if (g->maxPosition < 1) return Fail(op, "cos_sin_cache: expected at least one row, got shape %s",
                                      mskv_tiling::ShapeText(cs, b, sizeof(b)));
  if (g->rotaryDim < 2 || g->rotaryDim % 2 != 0 || g->rotaryDim > headSize)
    return Fail(op, "cos_sin_cache: rotary_dim (shape[1]) must be even and in [2, head_size = %lld], got %lld",
                static_cast<long long>(headSize), static_cast<long long>(g->rotaryDim));
  if (headSize < 1) return Fail(op, "head_size must be >= 1, got %lld", static_cast<long long>(headSize));
  g->pitch = AlignUp(headSize, Max64(PerBlock(esz), 8));
  if (g->pitch > kMaxPitch)
    return Fail(op, "head_size = %lld (padded to %lld elements per UB row) exceeds %lld: a head row exceeds the "
                "255-block vector repeat stride",
                static_cast<long long>(headSize), static_cast<long long>(g->pitch), static_cast<long long>(kMaxPitch));
  g->csPitch = AlignUp(g->rotaryDim, Max64(PerBlock(g->csz), 8));
  g->rotPitch = AlignUp(g->rotaryDim, 8);
  const bool rowPad = (headSize * esz) % mskv_tiling::kBlockBytes != 0;
  const bool csPad = (g->rotaryDim * g->csz) % mskv_tiling::kBlockBytes != 0;
  g->pad = rowPad || csPad;
  if (g->pad && hw.is310P) {
    return Fail(op, "%s of %lld bytes are not a multiple of 32 bytes; Ascend310P has no DataCopyPad, so such rows are "
                "unsupported there (use a head_size / rotary_dim whose bytes are a multiple of 32)",
                rowPad ? "head rows (head_size x dtype)" : "cos_sin_cache rows (rotary_dim x table dtype)",
                static_cast<long long>(rowPad ? headSize * esz : g->rotaryDim * g->csz));
  }
  return ge::GRAPH_SUCCESS;
}

// One UB plan: `batch` tokens share their cos/sin rows; a chunk of the rotated tensors holds
// `rowsPerChunk` head rows: all heads of `batch` tokens, or (batch = 1) a group of `headsPerChunk` heads.
struct RopePlan {
  int64_t batch = 0;
  int64_t headsPerChunk = 0;  // heads of one token processed together (<= the largest head count)
  int64_t chunkElems = 0;     // UB elements of one rotated chunk (in, out and fp32 work buffers)
  int64_t copyElems = 0;      // UB elements of one pass-through chunk (value rows / kv_c rows)
  int64_t bytes = 0;          // UB bytes the kernel allocates
};

// What a kernel allocates besides the engine's fixed set (op_kernel/rope_kernel_common.h,
// RopeEngine::Init, and the op's own buffers); PlanBytes sums exactly the kernel's InitBuffer sizes.
struct PlanInputs {
  RopeGeom g;
  int64_t rotHeads = 1;
  int64_t copyHeads = 0;     // heads of the pass-through tensor (copied in head rows of pitch P)
  int64_t copyRowElems = 0;  // or: elements of one pass-through row (pitch already applied)
  int64_t normRowElems = 0;  // > 0: RMSNorm rows of this pitch go through the rotated chunk buffers
  int64_t csSets = 1;        // gathered cos/sin rows per token held at once
  int64_t fp32Work = 2;      // fp32 buffers of chunkElems (X32 when the data is not fp32, XS)
  int64_t expandedSets = 3;  // fp32 / uint32 buffers of batch * rotPitch (cc, sc, the expansion offsets)
  int64_t extraBytes = 0;
  int64_t extraBytesPerToken = 0;  // other buffers that grow with the batch (rerope double-float rows)
  int64_t maxBatch = kMaxBatch;
};

// Rows of the partner-offset table (op_kernel RopeEngine::Init partRows).
inline int64_t PartnerRows(int64_t rotHeads, int64_t headsPerChunk) {
  return Min64(kPartnerRows, Max64(1, Min64(rotHeads, headsPerChunk)));
}

// The fields every rotary tiling data has: the table geometry, the head size, the UB plan of `in` and the
// work split (rerope_cached_keys, rope_reshape_and_cache(_merged), rope_concat_and_cache_mla).
template <typename TD>
inline void SetRopeTiling(TD& td, const PlanInputs& in, int64_t headSize, const RopePlan& plan,
                          const mskv_tiling::CoreSplit& split) {
  td.set_maxPosition(in.g.maxPosition);
  td.set_headSize(headSize);
  td.set_pitch(in.g.pitch);
  td.set_rotaryDim(in.g.rotaryDim);
  td.set_csPitch(in.g.csPitch);
  td.set_rotPitch(in.g.rotPitch);
  td.set_batch(plan.batch);
  td.set_headsPerChunk(plan.headsPerChunk);
  td.set_chunkElems(plan.chunkElems);
  td.set_partnerRows(PartnerRows(in.rotHeads, plan.headsPerChunk));
  td.set_ubBytes(plan.bytes);
  mskv_tiling::SetCoreSplit(td, split);
}

inline int64_t PlanBytes(const PlanInputs& in, int64_t batch, int64_t heads, RopePlan* p) {
  const RopeGeom& g = in.g;
  const int64_t rotRows = heads >= in.rotHeads ? batch * in.rotHeads : heads;
  int64_t chunk = rotRows * g.pitch;
  if (in.normRowElems > 0) chunk = Max64(chunk, batch * in.normRowElems);
  int64_t copy = 0;
  if (in.copyHeads > 0) copy = (heads >= in.copyHeads ? batch * in.copyHeads : heads) * g.pitch;
  if (in.copyRowElems > 0) copy = Max64(copy, batch * in.copyRowElems);
  const int64_t fp32Bufs = (g.esz == 4 ? in.fp32Work - 1 : in.fp32Work);
  int64_t bytes = 0;
  bytes += 2 * 2 * chunk * g.esz;                                    // in / out queues, double buffered
  bytes += fp32Bufs * chunk * 4;                                     // X32 (non-fp32 data), XS
  bytes += PartnerRows(in.rotHeads, heads) * g.pitch * 4;             // partner offsets
  bytes += in.csSets * batch * g.csPitch * g.csz;                    // gathered table rows
  bytes += (g.csz == 4 ? 0 : in.csSets * batch * g.csPitch * 4);     // their fp32 cast
  bytes += in.expandedSets * batch * g.rotPitch * 4;                 // expanded cos / sin / offsets
  bytes += 2 * copy * g.esz;                                         // pass-through queue, double buffered
  bytes += in.extraBytes + batch * in.extraBytesPerToken;
  p->batch = batch;
  p->headsPerChunk = heads;
  p->chunkElems = chunk;
  p->copyElems = copy;
  p->bytes = bytes;
  return bytes;
}

// Largest batch (whole tokens, all heads) that fits; else one token in the largest head groups that fit.
inline ge::graphStatus PlanUb(const char* op, const mskv_tiling::Hardware& hw, const PlanInputs& in,
                              int64_t tokensPerCore, RopePlan* plan) {
  const int64_t budget = hw.ubBytes - mskv_tiling::kUbReserveBytes;
  const int64_t maxHeads = Max64(in.rotHeads, in.copyHeads);
  const int64_t top = Max64(1, Min64(in.maxBatch, tokensPerCore));
  for (int64_t b = top; b >= 1; --b) {
    if (b * maxHeads > kMaxRowsPerChunk) continue;
    if (PlanBytes(in, b, maxHeads, plan) <= budget) return ge::GRAPH_SUCCESS;
  }
  for (int64_t h = Min64(maxHeads - 1, kMaxRowsPerChunk); h >= 1; --h) {
    if (PlanBytes(in, 1, h, plan) <= budget) return ge::GRAPH_SUCCESS;
  }
  PlanBytes(in, 1, 1, plan);
  return Fail(op, "the smallest UB plan (one token: one head row of %lld elements plus the op's other rows, "
                  "e.g. MLA's kv_c row) needs %lld bytes of UB, more than the %lld bytes %s offers",
              static_cast<long long>(in.g.headSize), static_cast<long long>(plan->bytes),
              static_cast<long long>(budget), hw.is310P ? "Ascend310P" : "this SoC");
}

// Bool attribute at OpDef index i (is_neox_style), `dflt` when absent.
inline bool BoolAttr(gert::TilingContext* context, size_t i, bool dflt) {
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const bool* v = attrs == nullptr ? nullptr : attrs->GetAttrPointer<bool>(i);
  return v == nullptr ? dflt : *v;
}

// cache_layout attribute at OpDef index i (Int code, default BSND): mskv_tiling::LayoutAttr.
inline ge::graphStatus LayoutAttr(gert::TilingContext* context, size_t i, const char* op, bool* bnsd) {
  return mskv_tiling::LayoutAttr(context, i, op, mskv_attr::kLayoutBSND, bnsd);
}

// Number of heads of a [T', H, D] or [T', H * D] tensor with T' = rows; -1 (after an error line) if not.
inline int64_t HeadsOf(const char* op, const char* name, const gert::Shape& x, int64_t rows, int64_t headSize) {
  char b[128];
  const size_t r = x.GetDimNum();
  if (r != 2 && r != 3) {
    Fail(op, "%s: expected rank 2 or 3, got shape %s", name, mskv_tiling::ShapeText(x, b, sizeof(b)));
    return -1;
  }
  if (x.GetDim(0) != rows) {
    Fail(op, "%s: expected %lld rows (T'), got shape %s", name, static_cast<long long>(rows),
         mskv_tiling::ShapeText(x, b, sizeof(b)));
    return -1;
  }
  int64_t row = 1;
  for (size_t i = 1; i < r; ++i) row *= x.GetDim(i);
  if ((r == 3 && x.GetDim(2) != headSize) || row == 0 || row % headSize != 0) {
    Fail(op, "%s: expected [T', heads, %lld] or [T', heads * %lld] (head_size of the cache), got shape %s", name,
         static_cast<long long>(headSize), static_cast<long long>(headSize), mskv_tiling::ShapeText(x, b, sizeof(b)));
    return -1;
  }
  return row / headSize;
}

inline ge::graphStatus IndexCode(const char* op, const char* name, ge::DataType dt, int64_t* is64) {
  const int c = mskv_tiling::IndexDTypeCode(dt);
  if (c < 0) return Fail(op, "%s: expected int32 or int64, got %s", name, mskv_tiling::DTypeName(dt));
  *is64 = c;
  return ge::GRAPH_SUCCESS;
}

// ------------------------------------------------------------------ OpDef dtype rows
// One row per combination of the OpSpec groups (ms_kvcache._spec.OpSpec.dtype_rows): P = positions
// (int32/int64), T = data (float16/bfloat16/float32), C = cos_sin_cache (float32 or T), S = slots
// (int32/int64), MLA also W = kv_c_norm_weight (float32 or T). Ascend310P has no bfloat16 (the *310P
// lists, used through an OpAICoreConfig). Literal named lists, so that the structural check
// (ms_kvcache/_structure.py) can read them from the source.
// kRope*: 20 rows
static const std::vector<ge::DataType> kRopePDTypes = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64};
static const std::vector<ge::DataType> kRopeTDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16,
    ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeCDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeSDTypes = {
    ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32,
    ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64,
    ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kRopeStatusDTypes = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kRopeFormats = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND};
// kRope*310P: 12 rows
static const std::vector<ge::DataType> kRopePDTypes310P = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64};
static const std::vector<ge::DataType> kRopeTDTypes310P = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16,
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeCDTypes310P = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16,
    ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeSDTypes310P = {
    ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32,
    ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kRopeStatusDTypes310P = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kRopeFormats310P = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND};
// kRopeMla*: 36 rows
static const std::vector<ge::DataType> kRopeMlaPDTypes = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64,
    ge::DT_INT64};
static const std::vector<ge::DataType> kRopeMlaTDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16,
    ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16,
    ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeMlaCDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16, ge::DT_BF16,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeMlaSDTypes = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT32,
    ge::DT_INT64};
static const std::vector<ge::DataType> kRopeMlaWDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16,
    ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT, ge::DT_BF16,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT,
    ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT, ge::DT_BF16,
    ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::Format> kRopeMlaFormats = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND};
// kRopeMla*310P: 20 rows
static const std::vector<ge::DataType> kRopeMlaPDTypes310P = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64};
static const std::vector<ge::DataType> kRopeMlaTDTypes310P = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeMlaCDTypes310P = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeMlaSDTypes310P = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64,
    ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64,
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kRopeMlaWDTypes310P = {
    ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT,
    ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::Format> kRopeMlaFormats310P = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND,
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND};

// The rotary ops' dtype rows by column (mskv_tiling::CopyRows, for DeclareOnEverySoc): positions, data,
// cos_sin_cache, slots, then the status output (rerope_cached_keys) or kv_c_norm_weight (MLA); the formats.
struct RopeRows {
  const mskv_tiling::DTypes &pos, &data, &table, &slots, &status;
  const mskv_tiling::Formats &fmt;
};
static const RopeRows kRopeRows = {kRopePDTypes, kRopeTDTypes, kRopeCDTypes, kRopeSDTypes, kRopeStatusDTypes,
                                   kRopeFormats};
static const RopeRows kRopeRows310P = {kRopePDTypes310P, kRopeTDTypes310P, kRopeCDTypes310P, kRopeSDTypes310P,
                                       kRopeStatusDTypes310P, kRopeFormats310P};
struct RopeMlaRows {
  const mskv_tiling::DTypes &pos, &data, &table, &slots, &weight;
  const mskv_tiling::Formats &fmt;
};
static const RopeMlaRows kRopeMlaRows = {kRopeMlaPDTypes, kRopeMlaTDTypes, kRopeMlaCDTypes, kRopeMlaSDTypes,
                                         kRopeMlaWDTypes, kRopeMlaFormats};
static const RopeMlaRows kRopeMlaRows310P = {kRopeMlaPDTypes310P, kRopeMlaTDTypes310P, kRopeMlaCDTypes310P,
                                             kRopeMlaSDTypes310P, kRopeMlaWDTypes310P, kRopeMlaFormats310P};

// The attributes every rotary op of a family starts with, in OpSpec order: the GQA ops
// (rope_reshape_and_cache[_merged][_quant], rerope_cached_keys) is_neox_style (default NeoX) and cache_layout
// (default BSND), attributes 0 and 1 of their tilings; the MLA ops (rope_concat_and_cache_mla[_quant])
// is_neox_style (default GPT-J) and epsilon. A quantizing op's own attributes (kv_format, quant_mode) follow.
template <typename Def>
inline void DeclareGqaRopeAttrs(Def& d) {
  d.Attr("is_neox_style").AttrType(ops::OPTIONAL).Bool(true);
  d.Attr("cache_layout").AttrType(ops::OPTIONAL).Int(mskv_attr::kLayoutBSND);
}
template <typename Def>
inline void DeclareMlaRopeAttrs(Def& d) {
  d.Attr("is_neox_style").AttrType(ops::OPTIONAL).Bool(false);
  d.Attr("epsilon").AttrType(ops::OPTIONAL).Float(1e-6);
}

// The OpDef of an unquantized rotary op but for its parameters (the op's Declare(d, rows)): the family's
// attributes, then the parameters with the family's dtype rows (kRopeRows / kRopeMlaRows), the compute units
// and `tiling` (mskv_tiling::DeclareOnEverySoc). The readers of OpDefs follow these helpers
// (tools/mskv_structure.py, scripts/check_cann_headers.py; cmake/sim.cmake by the OnEverySoc of their names).
template <typename Op, typename TilingFunc>
inline void DeclareGqaRopeOnEverySoc(Op& op, TilingFunc tiling) {
  DeclareGqaRopeAttrs(op);
  mskv_tiling::DeclareOnEverySoc(op, kRopeRows, kRopeRows310P, tiling);
}
template <typename Op, typename TilingFunc>
inline void DeclareMlaRopeOnEverySoc(Op& op, TilingFunc tiling) {
  DeclareMlaRopeAttrs(op);
  mskv_tiling::DeclareOnEverySoc(op, kRopeMlaRows, kRopeMlaRows310P, tiling);
}

}  // namespace mskv_rope_tiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_TILING_COMMON_H_
