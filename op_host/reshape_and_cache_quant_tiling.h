// Tiling data of MskvReshapeAndCacheQuant (op_host/reshape_and_cache_quant.cpp fills it,
// op_kernel/reshape_and_cache_quant.cpp reads it with GET_TILING_DATA). Element counts unless named *Bytes;
// cache offsets count int8 codes, scale-cache offsets float32 scales.
#ifndef MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_QUANT_TILING_H_
#define MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_QUANT_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(ReshapeAndCacheQuantTilingData)
  MSKV_SLOT_TILING_FIELDS
  TILING_DATA_FIELD_DEF(int64_t, heads);         // num_kv_heads
  TILING_DATA_FIELD_DEF(int64_t, headSize);      // D
  TILING_DATA_FIELD_DEF(int64_t, pitch);         // P: UB elements per head row (D, or D rounded up to 32 with PAD)
  TILING_DATA_FIELD_DEF(int64_t, blockStride);   // cache codes per block
  TILING_DATA_FIELD_DEF(int64_t, slotStride);    // cache codes between consecutive slots of a block
  TILING_DATA_FIELD_DEF(int64_t, headStride);    // cache codes between the heads (NZ: the 32-code pieces) of one slot
  TILING_DATA_FIELD_DEF(int64_t, segElems);      // NZ caches: C0 = 32 (a head is headSize / 32 pieces); else 0
  TILING_DATA_FIELD_DEF(int64_t, planeElems);    // MERGED_KV: codes of the K plane (the V plane follows); else 0
  TILING_DATA_FIELD_DEF(int64_t, scHeadStride);  // dynamic: between the heads of one slot (1 BSND, block_size BNSD)
  MSKV_GQA_QUANT_TILING_FIELDS
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvReshapeAndCacheQuant, ReshapeAndCacheQuantTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_QUANT_TILING_H_
