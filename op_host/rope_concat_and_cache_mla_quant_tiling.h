// Tiling data of MskvRopeConcatAndCacheMlaQuant (op_host/rope_concat_and_cache_mla_quant.cpp fills it,
// op_kernel/rope_concat_and_cache_mla_quant.cpp reads it with GET_TILING_DATA): the fields of the unquantized MLA
// RoPE write (`rope`, op_host/rope_concat_and_cache_mla_tiling.h; cache offsets count int8 codes) and the
// quantization's of the two planes, 0 kv_c and 1 k_pe.
#ifndef MS_KVCACHE_OP_HOST_ROPE_CONCAT_AND_CACHE_MLA_QUANT_TILING_H_
#define MS_KVCACHE_OP_HOST_ROPE_CONCAT_AND_CACHE_MLA_QUANT_TILING_H_

#include "register/tilingdata_base.h"
#include "rope_concat_and_cache_mla_tiling.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(RopeConcatAndCacheMlaQuantTilingData)
  TILING_DATA_FIELD_DEF_STRUCT(RopeConcatAndCacheMlaTilingData, rope);
  TILING_DATA_FIELD_DEF(int64_t, cOutPitch);     // UB codes of a kv_c row (kv_lora_rank rounded up to 32)
  TILING_DATA_FIELD_DEF(int64_t, pOutPitch);     // UB codes of a k_pe row (rope_dim rounded up to 32)
  TILING_DATA_FIELD_DEF(int64_t, quantRow);      // UB elements of the quantizer's largest source row
  TILING_DATA_FIELD_DEF(int64_t, quantOutRow);   // UB codes of its largest code row
  TILING_DATA_FIELD_DEF(int64_t, quantTree);     // dynamic: power of two >= max(quantRow, 8), the max tree
  TILING_DATA_FIELD_DEF(int64_t, cScaleKind);    // static, kv_c plane: 0 per tensor, 2 per channel
  TILING_DATA_FIELD_DEF(int64_t, pScaleKind);    // static, k_pe plane
  TILING_DATA_FIELD_DEF(int64_t, hasOffset);     // static: 1 when kv_c_offset / k_pe_offset are given
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvRopeConcatAndCacheMlaQuant, RopeConcatAndCacheMlaQuantTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_CONCAT_AND_CACHE_MLA_QUANT_TILING_H_
