// Tiling data of MskvConcatAndCacheMla (op_host/concat_and_cache_mla.cpp fills it,
// op_kernel/concat_and_cache_mla.cpp reads it with GET_TILING_DATA). Sizes are element counts.
// Plane "kv" is kv_c -> kv_c_cache (kv_lora_rank per token), plane "pe" is k_pe -> k_pe_cache
// (rope dim per token); both caches are [num_blocks, block_size, row].
#ifndef MS_KVCACHE_OP_HOST_CONCAT_AND_CACHE_MLA_TILING_H_
#define MS_KVCACHE_OP_HOST_CONCAT_AND_CACHE_MLA_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(ConcatAndCacheMlaTilingData)
  MSKV_SLOT_TILING_FIELDS
  TILING_DATA_FIELD_DEF(int64_t, rowsPerChunk);  // > 0: runs of whole rows of both planes per buffer
  TILING_DATA_FIELD_DEF(int64_t, bufferBytes);
  TILING_DATA_FIELD_DEF(int64_t, kvRowElems);    // kv_lora_rank
  TILING_DATA_FIELD_DEF(int64_t, kvSegsPerChunk);  // rowsPerChunk == 0: 1 if a kv row fits a buffer
  TILING_DATA_FIELD_DEF(int64_t, kvPieceElems);  // else the row moves in pieces of this size
  TILING_DATA_FIELD_DEF(int64_t, peRowElems);    // rope dim
  TILING_DATA_FIELD_DEF(int64_t, peSegsPerChunk);
  TILING_DATA_FIELD_DEF(int64_t, pePieceElems);
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvConcatAndCacheMla, ConcatAndCacheMlaTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_CONCAT_AND_CACHE_MLA_TILING_H_
