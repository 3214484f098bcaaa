// Tiling data of MskvRopeReshapeAndCacheQuant (op_host/rope_reshape_and_cache_quant.cpp fills it,
// op_kernel/rope_reshape_and_cache_quant.cpp reads it with GET_TILING_DATA): the fields of the unquantized
// fused RoPE writes (`rope`, op_host/rope_cache_tiling_data.h; cache offsets count int8 codes) and the
// quantization's (scale-cache offsets count float32 scales).
#ifndef MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_QUANT_TILING_H_
#define MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_QUANT_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"
#include "rope_cache_tiling_data.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(RopeReshapeAndCacheQuantTilingData)
  TILING_DATA_FIELD_DEF_STRUCT(RopeReshapeAndCacheTilingData, rope);
  TILING_DATA_FIELD_DEF(int64_t, outPitch);      // UB codes per head row (head_size rounded up to 32)
  MSKV_GQA_QUANT_TILING_FIELDS
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvRopeReshapeAndCacheQuant, RopeReshapeAndCacheQuantTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_QUANT_TILING_H_
