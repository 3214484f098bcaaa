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
  const std::vector<ge::DataType>& data;
  const std::vector<ge::DataType>& cache;
  const std::vector<ge::DataType>& index;
  const std::vector<ge::DataType>& scale;
  const std::vector<ge::DataType>& status;
  const std::vector<ge::Format>& fmt;
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

}  // namespace mskv_quant_tiling

#endif  // MS_KVCACHE_OP_HOST_KV_QUANT_TILING_COMMON_H_
