// Tiling data of MskvRopeReshapeAndCacheMerged: the fields of MskvRopeReshapeAndCache
// (op_host/rope_cache_tiling_data.h); the merged cache is the planes kv_cache[0] / kv_cache[1],
// vPlaneOffset elements apart.
#ifndef MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_MERGED_TILING_H_
#define MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_MERGED_TILING_H_

#include "register/tilingdata_base.h"
#include "rope_cache_tiling_data.h"

namespace optiling {
REGISTER_TILING_DATA_CLASS(MskvRopeReshapeAndCacheMerged, RopeReshapeAndCacheTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_RESHAPE_AND_CACHE_MERGED_TILING_H_
