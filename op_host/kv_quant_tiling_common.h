// Host-side pieces shared by the tilings of the quantizing cache writes (reshape_and_cache_quant,
// concat_and_cache_mla_quant; docs/quantization.md): the OpDef dtype rows, the cache-dtype rule and the
// optional-input convention.
#ifndef MS_KVCACHE_OP_HOST_KV_QUANT_TILING_COMMON_H_
#define MS_KVCACHE_OP_HOST_KV_QUANT_TILING_COMMON_H_

#include <vector>

#include "kv_copy_tiling_common.h"

namespace mskv_quant_tiling {

// OpDef dtype rows in the order of ms_kvcache._spec.OpSpec.dtype_rows(): data (float16, bfloat16,
// float32) outer, index dtype (int32, int64) inner; caches int8 (float8 has no AscendC Cast on these SoCs:
// ms_kvcache._spec.SOC_EXCLUDED_DTYPES), scales float32, status int32. Ascend310P: no bfloat16.
static const std::vector<ge::DataType> kQuantDataDTypes = {
    ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kQuantCacheDTypes = {
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kQuantIndexDTypes = {
    ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kQuantScaleDTypes = {
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kQuantStatusDTypes = {
    ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kQuantFormats = {
    ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND};
static const std::vector<ge::DataType> kQuantDataDTypes310P = {ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kQuantCacheDTypes310P = {ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kQuantIndexDTypes310P = {ge::DT_INT32, ge::DT_INT64, ge::DT_INT32, ge::DT_INT64};
static const std::vector<ge::DataType> kQuantScaleDTypes310P = {ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kQuantStatusDTypes310P = {ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32};
static const std::vector<ge::Format> kQuantFormats310P = {ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND};

// The dtype rows of a quantizing write on one compute unit, by column (an OpDef's Declare gives each of its
// parameters one: `DataType(r.scale)`): the float data, the int8 cache, the index, the scales and offsets,
// the status output; the formats. kQuantRows310P are the Ascend310P rows (no bfloat16).
struct QuantRows {
  const mskv_tiling::DTypes &data, &cache, &index, &scale, &status;
  const mskv_tiling::Formats &fmt;
};
static const QuantRows kQuantRows = {kQuantDataDTypes,  kQuantCacheDTypes,  kQuantIndexDTypes,
                                     kQuantScaleDTypes, kQuantStatusDTypes, kQuantFormats};
static const QuantRows kQuantRows310P = {kQuantDataDTypes310P,  kQuantCacheDTypes310P,  kQuantIndexDTypes310P,
                                         kQuantScaleDTypes310P, kQuantStatusDTypes310P, kQuantFormats310P};

inline const char* SocName(const mskv_tiling::Hardware& hw) { return hw.is310P ? "Ascend310P" : "Atlas A2/A3"; }

// The cache dtype of a quantizing write: int8 only. float8_e4m3fn / float8_e5m2 caches are refused
// naming the SoC: the official AscendC headers have no Cast to fp8_e4m3fn_t / fp8_e5m2_t on Atlas A2/A3
// (dav-c220) or Ascend310P (dav-m200), only on Ascend 950.
inline ge::graphStatus CacheDType(const char* op, const mskv_tiling::Hardware& hw, const char* name, ge::DataType dt) {
  if (dt == ge::DT_INT8) return ge::GRAPH_SUCCESS;
  if (dt == ge::DT_FLOAT8_E4M3FN || dt == ge::DT_FLOAT8_E5M2) {
    return mskv_tiling::Fail(op, "%s: float8 caches have no AscendC kernel on %s (the official AscendC headers have no "
                             "Cast to fp8_e4m3fn_t / fp8_e5m2_t there; use an int8 cache, or the cpu backend)",
                             name, SocName(hw));
  }
  return mskv_tiling::Fail(op, "%s: expected dtype int8 for a quantized cache, got %s", name,
                           mskv_tiling::DTypeName(dt));
}

// The data dtype (float16, bfloat16 or float32; bfloat16 not on Ascend310P): element size and key digit.
inline ge::graphStatus DataDType(const char* op, const mskv_tiling::Hardware& hw, const char* name, ge::DataType dt,
                                 int64_t* elem, uint64_t* code) {
  *elem = mskv_tiling::KvDTypeSize(dt, code);
  if (*elem == 0 || dt == ge::DT_INT8) {
    return mskv_tiling::Fail(op, "%s: expected dtype float16, bfloat16 or float32 (float data is quantized into the "
                             "int8 cache), got %s", name, mskv_tiling::DTypeName(dt));
  }
  if (dt == ge::DT_BF16 && hw.is310P) return mskv_tiling::Fail(op, "%s: bfloat16 is not supported on Ascend310P", name);
  return ge::GRAPH_SUCCESS;
}

// An OPTIONAL input: nullptr when absent or the empty [0] tensor (the stand-in of the cpu / sim AOT paths and
// of ms_kvcache's ops.Custom calls); else its storage shape and dtype.
inline const gert::Shape* Optional(gert::TilingContext* context, int i, ge::DataType* dt) {
  const gert::StorageShape* s = context->GetOptionalInputShape(i);
  const gert::CompileTimeTensorDesc* d = context->GetOptionalInputDesc(i);
  if (s == nullptr || d == nullptr) return nullptr;
  const gert::Shape& sh = s->GetStorageShape();
  if (sh.GetDimNum() == 1 && sh.GetDim(0) == 0) return nullptr;
  *dt = d->GetDataType();
  return &s->GetStorageShape();
}

// The kind of a static scale of shape s: 0 per tensor ([] / [1]), 1 per head ([H]), 2 per channel ([H, D]);
// -1 otherwise.
inline int ScaleKind(const gert::Shape& s, int64_t h, int64_t d) {
  if (s.GetDimNum() == 0 || (s.GetDimNum() == 1 && s.GetDim(0) == 1)) return 0;
  if (s.GetDimNum() == 1 && s.GetDim(0) == h) return 1;
  if (s.GetDimNum() == 2 && s.GetDim(0) == h && s.GetDim(1) == d) return 2;
  return -1;
}

// The attribute quant_mode (at i: static / dynamic int codes, static when absent).
inline ge::graphStatus QuantModeAttr(gert::TilingContext* context, size_t i, const char* op, bool* dynamic) {
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const int64_t* m = attrs == nullptr ? nullptr : attrs->GetAttrPointer<int64_t>(i);
  const int64_t mode = m == nullptr ? mskv_attr::kQuantSTATIC : *m;
  if (mode != mskv_attr::kQuantSTATIC && mode != mskv_attr::kQuantDYNAMIC) {
    return mskv_tiling::Fail(op, "quant_mode: expected %lld (static) or %lld (dynamic), got %lld",
                             static_cast<long long>(mskv_attr::kQuantSTATIC),
                             static_cast<long long>(mskv_attr::kQuantDYNAMIC), static_cast<long long>(mode));
  }
  *dynamic = mode == mskv_attr::kQuantDYNAMIC;
  return ge::GRAPH_SUCCESS;
}

// The six OPTIONAL float32 quantization inputs from index `first` (names sn): q[i] nullptr when absent.
inline ge::graphStatus QuantInputs(gert::TilingContext* context, const char* op, int first, const char* const sn[6],
                                   const gert::Shape* q[6]) {
  for (int i = 0; i < 6; ++i) {
    ge::DataType dt = ge::DT_UNDEFINED;
    q[i] = Optional(context, first + i, &dt);
    if (q[i] != nullptr && dt != ge::DT_FLOAT) {
      return mskv_tiling::Fail(op, "%s: expected dtype float32, got %s", sn[i], mskv_tiling::DTypeName(dt));
    }
    if (q[i] != nullptr && mskv_tiling::CheckTensorSize(op, sn[i], *q[i], 4) != ge::GRAPH_SUCCESS) {
      return ge::GRAPH_FAILED;
    }
  }
  return ge::GRAPH_SUCCESS;
}

// The attributes kv_format (at i: 1 MERGED_KV, 2 SEPARATE_KV) and quant_mode (at i + 1: static / dynamic
// codes) of the GQA quantizing writes.
inline ge::graphStatus GqaQuantAttrs(gert::TilingContext* context, size_t i, const char* op, bool* merged,
                                     bool* dynamic) {
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const int64_t* f = attrs == nullptr ? nullptr : attrs->GetAttrPointer<int64_t>(i);
  const int64_t kvFormat = f == nullptr ? 2 : *f;
  if (kvFormat != 1 && kvFormat != 2) {
    return mskv_tiling::Fail(op, "kv_format: expected 1 (MERGED_KV) or 2 (SEPARATE_KV), got %lld",
                             static_cast<long long>(kvFormat));
  }
  *merged = kvFormat == 1;
  return QuantModeAttr(context, i + 1, op, dynamic);
}

// The checks of plane p's quantization inputs (scale q[p], offset q[2 + p], scale cache q[4 + p], names sn,
// from QuantInputs) common to the GQA and MLA writes: quant_mode dynamic takes a scale cache and neither scale
// nor offset, static a scale and no scale cache, an offset shaped like its scale, both offsets or neither.
inline ge::graphStatus PlaneScaleInputs(const char* op, const char* const sn[6], const gert::Shape* const q[6], int p,
                                        bool dynamic) {
  using mskv_tiling::Fail;
  using mskv_tiling::ShapeText;
  const gert::Shape* s = q[p];
  const gert::Shape* o = q[2 + p];
  if (dynamic) {
    if (s != nullptr || o != nullptr) return Fail(op, "%s: expected absent with quant_mode dynamic", s ? sn[p] : sn[2 + p]);
    if (q[4 + p] == nullptr) {
      return Fail(op, "%s: expected a float32 scale cache for quant_mode dynamic, got none", sn[4 + p]);
    }
    return ge::GRAPH_SUCCESS;
  }
  if (q[4 + p] != nullptr) return Fail(op, "%s: expected absent with quant_mode static", sn[4 + p]);
  if (s == nullptr) return Fail(op, "%s: expected a float32 scale for quant_mode static, got none", sn[p]);
  char b1[160], b2[160];
  if (o != nullptr && !mskv_tiling::SameShape(*o, *s)) {
    return Fail(op, "%s: expected shape %s (as %s), got %s", sn[2 + p], ShapeText(*s, b1, sizeof(b1)), sn[p],
                ShapeText(*o, b2, sizeof(b2)));
  }
  if ((o != nullptr) != (q[3 - p] != nullptr)) return Fail(op, "%s, %s: expected both or neither", sn[2], sn[3]);
  return ge::GRAPH_SUCCESS;
}

// The six quantization inputs of a two-plane write from index `first` (names sn: the two scales, the two
// offsets, the two scale caches; q[i] nullptr when absent), checked as far as the GQA and MLA writes agree
// (QuantInputs, PlaneScaleInputs); whether offsets exist. The shapes of the static scales (their kinds) and
// of the scale caches are the caller's to check.
inline ge::graphStatus ScaleInputs(gert::TilingContext* context, const char* op, int first, const char* const sn[6],
                                   bool dynamic, const gert::Shape* q[6], bool* hasOffset) {
  if (QuantInputs(context, op, first, sn, q) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  for (int p = 0; p < 2; ++p) {
    if (PlaneScaleInputs(op, sn, q, p, dynamic) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  *hasOffset = q[2] != nullptr;
  return ge::GRAPH_SUCCESS;
}

// The quantization inputs of a GQA write (the K and V planes of caches [nb, bs, H, D] / [nb, H, bs, D]): six
// OPTIONAL inputs from index `first`, k_scale, v_scale, k_offset, v_offset (static: [] / [1], [H] or [H, D],
// offsets shaped like their scale, both or neither), k_scale_cache, v_scale_cache (dynamic:
// [nb, bs, H(, 1)] / [nb, H, bs(, 1)]). Sets the static scale kinds (ScaleKind) and whether offsets exist.
inline ge::graphStatus GqaScales(gert::TilingContext* context, const char* op, int first, bool dynamic, bool bnsd,
                                 int64_t nb, int64_t bs, int64_t H, int64_t D, int kinds[2], bool* hasOffset) {
  using mskv_tiling::Fail;
  using mskv_tiling::ShapeText;
  const char* sn[6] = {"k_scale", "v_scale", "k_offset", "v_offset", "k_scale_cache", "v_scale_cache"};
  const gert::Shape* q[6];
  if (ScaleInputs(context, op, first, sn, dynamic, q, hasOffset) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  char b1[160];
  kinds[0] = kinds[1] = 0;
  for (int p = 0; p < 2; ++p) {
    if (dynamic) {
      const gert::Shape* c = q[4 + p];
      const int64_t want[4] = {nb, bnsd ? H : bs, bnsd ? bs : H, 1};
      bool ok = c->GetDimNum() == 3 || c->GetDimNum() == 4;
      for (size_t i = 0; ok && i < c->GetDimNum(); ++i) ok = c->GetDim(i) == want[i];
      if (!ok) {
        return Fail(op, "%s: expected shape [%lld, %lld, %lld(, 1)] (the %s cache with head_size 1), got %s", sn[4 + p],
                    static_cast<long long>(want[0]), static_cast<long long>(want[1]), static_cast<long long>(want[2]),
                    bnsd ? "BNSD" : "BSND", ShapeText(*c, b1, sizeof(b1)));
      }
      continue;
    }
    kinds[p] = ScaleKind(*q[p], H, D);
    if (kinds[p] < 0) {
      return Fail(op, "%s: expected shape [] or [1] (per tensor), [%lld] (per head) or [%lld, %lld] (per channel), got %s",
                  sn[p], static_cast<long long>(H), static_cast<long long>(H), static_cast<long long>(D),
                  ShapeText(*q[p], b1, sizeof(b1)));
    }
  }
  return ge::GRAPH_SUCCESS;
}

// The MSKV_GQA_QUANT_TILING_FIELDS (op_host/mskv_tiling_fields.h) of a GQA quantizing write into caches of H
// heads and block size bs (layout bnsd): the dynamic scale caches' strides, the max-reduction tree, the
// static scale kinds (GqaScales) and whether offsets are given.
template <typename TD>
inline void SetGqaQuantTiling(TD& td, int64_t bs, int64_t H, bool bnsd, int64_t tree, const int kinds[2],
                              bool hasOffset) {
  td.set_scBlockStride(bs * H);
  td.set_scSlotStride(bnsd ? 1 : H);
  td.set_treeElems(tree);
  td.set_kScaleKind(kinds[0]);
  td.set_vScaleKind(kinds[1]);
  td.set_hasOffset(hasOffset ? 1 : 0);
}

// The quantization inputs of an MLA write (planes kv_c [nb, bs, L] and k_pe [nb, bs, R], one "head" each): six
// OPTIONAL inputs from index `first`, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset (static: [] / [1] per
// tensor or [L] / [R] per channel, offsets shaped like their scale, both or neither), kv_c_scale_cache,
// k_pe_scale_cache (dynamic: [nb, bs, 1]). Sets the static scale kinds (0 per tensor, 2 per channel) and
// whether offsets exist.
inline ge::graphStatus MlaScales(gert::TilingContext* context, const char* op, int first, bool dynamic, int64_t nb,
                                 int64_t bs, int64_t L, int64_t R, int kinds[2], bool* hasOffset) {
  using mskv_tiling::Fail;
  using mskv_tiling::ShapeText;
  const char* sn[6] = {"kv_c_scale", "k_pe_scale", "kv_c_offset", "k_pe_offset", "kv_c_scale_cache", "k_pe_scale_cache"};
  const gert::Shape* q[6];
  if (ScaleInputs(context, op, first, sn, dynamic, q, hasOffset) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  char b1[160];
  const int64_t dims[2] = {L, R};
  kinds[0] = kinds[1] = 0;
  for (int p = 0; p < 2; ++p) {
    const gert::Shape* s = q[p];
    if (dynamic) {
      const gert::Shape* c = q[4 + p];
      if (c->GetDimNum() != 3 || c->GetDim(0) != nb || c->GetDim(1) != bs || c->GetDim(2) != 1) {
        return Fail(op, "%s: expected shape [%lld, %lld, 1], got %s", sn[4 + p], static_cast<long long>(nb),
                    static_cast<long long>(bs), ShapeText(*c, b1, sizeof(b1)));
      }
      continue;
    }
    if (s->GetDimNum() == 0 || (s->GetDimNum() == 1 && s->GetDim(0) == 1)) {
      kinds[p] = 0;
    } else if (s->GetDimNum() == 1 && s->GetDim(0) == dims[p]) {
      kinds[p] = 2;
    } else {
      return Fail(op, "%s: expected shape [] or [1] (per tensor) or [%lld] (per channel), got %s", sn[p],
                  static_cast<long long>(dims[p]), ShapeText(*s, b1, sizeof(b1)));
    }
  }
  return ge::GRAPH_SUCCESS;
}

// The SoC rules of an MLA quantizing write (kv_lora_rank L, rope_dim R): rows of int8 codes that are not a
// multiple of 32 bytes and dynamic scales (one 4-byte write per token and plane) need DataCopyPad (A2/A3).
inline ge::graphStatus MlaQuantRules(const char* op, const mskv_tiling::Hardware& hw, bool dynamic, int64_t L,
                                     int64_t R) {
  using mskv_tiling::Fail;
  const bool pad = (L % mskv_tiling::kBlockBytes) != 0 || (R % mskv_tiling::kBlockBytes) != 0;
  if (pad && hw.is310P) {
    return Fail(op, "kv_lora_rank %lld / rope_dim %lld: a row of int8 codes that is not a multiple of 32 bytes needs "
                "DataCopyPad, which Ascend310P does not have (use sizes that are multiples of 32)",
                static_cast<long long>(L), static_cast<long long>(R));
  }
  if (dynamic && hw.is310P) {
    return Fail(op, "dynamic scales on Ascend310P: a token's scale is one 4-byte write per plane, which needs "
                "DataCopyPad (not on Ascend310P; a 32-byte read-modify-write would race with the other cores, "
                "docs/quantization.md); use static scales there");
  }
  return ge::GRAPH_SUCCESS;
}

// The SoC rules of a GQA quantizing write with H heads of D codes: DataCopyPad rows (D not a multiple of 32)
// and dynamic scale rows that are not whole 32-byte blocks need Atlas A2/A3; the burst and stride limits.
inline ge::graphStatus GqaQuantRules(const char* op, const mskv_tiling::Hardware& hw, bool dynamic, bool bnsd,
                                     int64_t H, int64_t D, int64_t blockSize) {
  using mskv_tiling::Fail;
  if (D % mskv_tiling::kBlockBytes != 0 && hw.is310P) {
    return Fail(op, "head_size %lld: a head of int8 codes is not a multiple of 32 bytes; Ascend310P has no "
                "DataCopyPad, so such rows are unsupported there (use a head_size that is a multiple of 32)",
                static_cast<long long>(D));
  }
  if (dynamic && hw.is310P && (bnsd || (H * 4) % mskv_tiling::kBlockBytes != 0)) {
    return Fail(op, "dynamic scales on Ascend310P: the scale cache row of a token (%s) is not a multiple of 32 "
                "bytes and Ascend310P has no DataCopyPad (supported there: BSND with num_kv_heads a multiple of 8)",
                bnsd ? "one float32 per head, block_size apart: BNSD" : "num_kv_heads float32");
  }
  if (H > mskv_tiling::kMaxBurstCount) {
    return Fail(op, "num_kv_heads = %lld exceeds %lld", static_cast<long long>(H),
                static_cast<long long>(mskv_tiling::kMaxBurstCount));
  }
  if (bnsd && (blockSize - 1) * D > 0xFFFFFFFFll) {
    return Fail(op, "block_size * head_size = %lld is too large for one strided copy",
                static_cast<long long>(blockSize * D));
  }
  return ge::GRAPH_SUCCESS;
}

// UB bytes of mskv::quant::RowQuant (op_kernel/kv_quant_kernel.h, Init) for rows of H heads at pitch P
// (elements of `elem` bytes) and codes at pitch O: source row x2 (double-buffered queue), fp32 row, half
// row, codes x2, then per mode the divisor rows (static: scale and offset rows of both planes; dynamic: one
// divisor row, the max tree, the scale rows x2: one float per head, BNSD one per 32-byte block, in whole
// 256-byte repeats).
inline int64_t QuantUbBytes(int64_t H, int64_t P, int64_t O, int64_t elem, bool dynamic, bool bnsd, bool hasOffset,
                            int64_t tree) {
  using mskv_tiling::AlignUp;
  const int64_t row = H * P;
  const int64_t out = H * O;
  int64_t need = 2 * AlignUp(row * elem, mskv_tiling::kBlockBytes) + row * 4 + out * 2 + 2 * out;
  if (dynamic) need += row * 4 + tree * 4 + 2 * AlignUp(H * (bnsd ? mskv_tiling::kBlockBytes : 4), 256);
  else need += (hasOffset ? 4 : 2) * row * 4;
  return need;
}

// Elements of the dynamic max tree: a power of two >= max(P, 8).
inline int64_t TreeElems(int64_t P) {
  int64_t tree = 8;
  while (tree < P) tree *= 2;
  return tree;
}

}  // namespace mskv_quant_tiling

#endif  // MS_KVCACHE_OP_HOST_KV_QUANT_TILING_COMMON_H_
