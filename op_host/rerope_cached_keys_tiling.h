// Tiling data of MskvReropeCachedKeys (op_host/rerope_cached_keys.cpp fills it, op_kernel/rerope_cached_keys.cpp
// reads it with GET_TILING_DATA). Sizes are element counts of the cache dtype unless named otherwise.
#ifndef MS_KVCACHE_OP_HOST_REROPE_CACHED_KEYS_TILING_H_
#define MS_KVCACHE_OP_HOST_REROPE_CACHED_KEYS_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(ReropeCachedKeysTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numEntries);     // N = len(slot_mapping)
  TILING_DATA_FIELD_DEF(int64_t, numSlots);       // num_blocks * block_size; other slots are skipped
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, maxPosition);    // entries with a position outside [0, max_position) are skipped
  TILING_DATA_FIELD_DEF(int64_t, headSize);
  TILING_DATA_FIELD_DEF(int64_t, pitch);
  TILING_DATA_FIELD_DEF(int64_t, rotaryDim);
  TILING_DATA_FIELD_DEF(int64_t, csPitch);
  TILING_DATA_FIELD_DEF(int64_t, rotPitch);
  TILING_DATA_FIELD_DEF(int64_t, halfPitch);      // fp32 elements per compact delta row (rd / 2 rounded up to 8)
  TILING_DATA_FIELD_DEF(int64_t, heads);          // heads per slot (1 for a rank-3 plane)
  TILING_DATA_FIELD_DEF(int64_t, batch);          // entries per batch
  TILING_DATA_FIELD_DEF(int64_t, headsPerChunk);
  TILING_DATA_FIELD_DEF(int64_t, chunkElems);
  TILING_DATA_FIELD_DEF(int64_t, partnerRows);
  TILING_DATA_FIELD_DEF(int64_t, ubBytes);        // UB bytes the kernel allocates (the plan; <= UB - 1 KiB)
  TILING_DATA_FIELD_DEF(int64_t, treeElems);      // fp32 elements of the min tree over one compact delta row
  MSKV_ROPE_SPLIT_TILING_FIELDS
  TILING_DATA_FIELD_DEF(int64_t, blockStride);
  TILING_DATA_FIELD_DEF(int64_t, slotStride);
  TILING_DATA_FIELD_DEF(int64_t, headStride);
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvReropeCachedKeys, ReropeCachedKeysTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_REROPE_CACHED_KEYS_TILING_H_
