// Tiling data of MskvConcatAndCacheMlaQuant (op_host/concat_and_cache_mla_quant.cpp fills it,
// op_kernel/concat_and_cache_mla_quant.cpp reads it with GET_TILING_DATA). Element counts: cache offsets count
// int8 codes, scale-cache offsets float32 scales.
#ifndef MS_KVCACHE_OP_HOST_CONCAT_AND_CACHE_MLA_QUANT_TILING_H_
#define MS_KVCACHE_OP_HOST_CONCAT_AND_CACHE_MLA_QUANT_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(ConcatAndCacheMlaQuantTilingData)
  MSKV_SLOT_TILING_FIELDS
  TILING_DATA_FIELD_DEF(int64_t, cDim);         // kv_lora_rank (kv_c row, kv_c_cache hidden)
  TILING_DATA_FIELD_DEF(int64_t, cPitch);       // UB elements of a kv_c row (cDim, or rounded up to 32 with PAD)
  TILING_DATA_FIELD_DEF(int64_t, pDim);         // rope_dim (k_pe row, k_pe_cache hidden)
  TILING_DATA_FIELD_DEF(int64_t, pPitch);
  TILING_DATA_FIELD_DEF(int64_t, treeElems);    // dynamic: power of two >= max(pitches, 8)
  TILING_DATA_FIELD_DEF(int64_t, cScaleKind);   // static, kv_c plane: 0 per tensor, 2 per channel
  TILING_DATA_FIELD_DEF(int64_t, pScaleKind);   // static, k_pe plane
  TILING_DATA_FIELD_DEF(int64_t, hasOffset);    // static: 1 when kv_c_offset / k_pe_offset are given
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvConcatAndCacheMlaQuant, ConcatAndCacheMlaQuantTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_CONCAT_AND_CACHE_MLA_QUANT_TILING_H_
