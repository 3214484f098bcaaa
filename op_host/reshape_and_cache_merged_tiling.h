// Tiling data of MskvReshapeAndCacheMerged (op_host/reshape_and_cache_merged.cpp fills it, op_kernel/reshape_and_cache_merged.cpp
// reads it with GET_TILING_DATA).
#ifndef MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_MERGED_TILING_H_
#define MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_MERGED_TILING_H_

#include "register/tilingdata_base.h"
#include "reshape_and_cache_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(ReshapeAndCacheMergedTilingData)
  MSKV_SCATTER_TILING_FIELDS  // op_host/reshape_and_cache_tiling_fields.h
  TILING_DATA_FIELD_DEF(int64_t, valueOffset);   // elements from kv_cache[0] to kv_cache[1]
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvReshapeAndCacheMerged, ReshapeAndCacheMergedTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_MERGED_TILING_H_
