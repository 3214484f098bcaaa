// Tiling data of MskvRopeReshapeAndCache: RopeReshapeAndCacheTilingData (op_host/rope_cache_tiling_data.h).
#ifndef MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_TILING_H_
#define MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_TILING_H_

#include "register/tilingdata_base.h"
#include "rope_cache_tiling_data.h"

namespace optiling {
REGISTER_TILING_DATA_CLASS(MskvRopeReshapeAndCache, RopeReshapeAndCacheTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_TILING_H_
