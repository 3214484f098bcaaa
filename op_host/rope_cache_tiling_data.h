// Tiling data shared by MskvRopeReshapeAndCache and MskvRopeReshapeAndCacheMerged (op_host/rope_cache_tiling_impl.h
// fills it, op_kernel/rope_reshape_and_cache*.cpp read it with GET_TILING_DATA). Sizes are element counts of
// the data dtype unless named otherwise. Each op registers it in its own <op>_tiling.h.
#ifndef MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_DATA_H_
#define MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_DATA_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(RopeReshapeAndCacheTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numRows);        // T': rows of query / key / value / positions (all rotated)
  TILING_DATA_FIELD_DEF(int64_t, numWrite);       // T = len(slot_mapping): rows that may be cached
  TILING_DATA_FIELD_DEF(int64_t, numSlots);       // num_blocks * block_size; other slots are skipped
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, maxPosition);    // rows of cos_sin_cache; other positions: zero rows, no write
  TILING_DATA_FIELD_DEF(int64_t, headSize);       // D
  TILING_DATA_FIELD_DEF(int64_t, pitch);          // P: UB elements per head row
  TILING_DATA_FIELD_DEF(int64_t, rotaryDim);      // rd
  TILING_DATA_FIELD_DEF(int64_t, csPitch);        // UB elements per gathered cos_sin_cache row
  TILING_DATA_FIELD_DEF(int64_t, rotPitch);       // fp32 elements per expanded cos / sin row
  TILING_DATA_FIELD_DEF(int64_t, qHeads);
  TILING_DATA_FIELD_DEF(int64_t, kHeads);         // num_kv_heads (key, value, caches)
  TILING_DATA_FIELD_DEF(int64_t, batch);          // tokens per batch (cos/sin gathered together)
  TILING_DATA_FIELD_DEF(int64_t, headsPerChunk);  // >= max(qHeads, kHeads): whole tokens per chunk
  TILING_DATA_FIELD_DEF(int64_t, chunkElems);     // UB elements of a rotated chunk buffer
  TILING_DATA_FIELD_DEF(int64_t, copyElems);      // UB elements of a value chunk buffer
  TILING_DATA_FIELD_DEF(int64_t, partnerRows);    // head rows per partner Gather
  TILING_DATA_FIELD_DEF(int64_t, ubBytes);        // UB bytes the kernel allocates (the plan; <= UB - 1 KiB)
  MSKV_ROPE_SPLIT_TILING_FIELDS
  TILING_DATA_FIELD_DEF(int64_t, blockStride);    // cache elements per block
  TILING_DATA_FIELD_DEF(int64_t, slotStride);     // cache elements between consecutive slots of a block
  TILING_DATA_FIELD_DEF(int64_t, headStride);     // cache elements between heads (NZ: C0 pieces) of one slot
  TILING_DATA_FIELD_DEF(int64_t, cacheSegElems);  // NZ caches: C0 (a head is headSize / C0 pieces); else 0
  TILING_DATA_FIELD_DEF(int64_t, vPlaneOffset);   // merged cache: elements from kv_cache[0] to kv_cache[1]
END_TILING_DATA_DEF;

}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_CACHE_TILING_DATA_H_
