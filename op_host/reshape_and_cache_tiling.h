// Tiling data of MskvReshapeAndCache (op_host/reshape_and_cache.cpp fills it, op_kernel/reshape_and_cache.cpp
// reads it with GET_TILING_DATA).
#ifndef MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_H_
#define MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_H_

#include "register/tilingdata_base.h"
#include "reshape_and_cache_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(ReshapeAndCacheTilingData)
  MSKV_SCATTER_TILING_FIELDS  // op_host/reshape_and_cache_tiling_fields.h
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvReshapeAndCache, ReshapeAndCacheTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_H_
