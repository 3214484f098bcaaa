// Tiling data of MskvRopeConcatAndCacheMla (op_host/rope_concat_and_cache_mla.cpp fills it,
// op_kernel/rope_concat_and_cache_mla.cpp reads it with GET_TILING_DATA). Sizes are element counts of the
// data dtype unless named otherwise.
#ifndef MS_KVCACHE_OP_HOST_ROPE_CONCAT_AND_CACHE_MLA_TILING_H_
#define MS_KVCACHE_OP_HOST_ROPE_CONCAT_AND_CACHE_MLA_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(RopeConcatAndCacheMlaTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numRows);        // T': rows of q_pe / k_pe / kv_c / positions
  TILING_DATA_FIELD_DEF(int64_t, numWrite);       // T = len(slot_mapping)
  TILING_DATA_FIELD_DEF(int64_t, numSlots);       // num_blocks * block_size
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, maxPosition);
  TILING_DATA_FIELD_DEF(int64_t, headSize);       // rope_dim R (q_pe / k_pe heads)
  TILING_DATA_FIELD_DEF(int64_t, pitch);          // UB elements per rope head row
  TILING_DATA_FIELD_DEF(int64_t, rotaryDim);
  TILING_DATA_FIELD_DEF(int64_t, csPitch);
  TILING_DATA_FIELD_DEF(int64_t, rotPitch);
  TILING_DATA_FIELD_DEF(int64_t, qHeads);
  TILING_DATA_FIELD_DEF(int64_t, batch);
  TILING_DATA_FIELD_DEF(int64_t, headsPerChunk);
  TILING_DATA_FIELD_DEF(int64_t, chunkElems);     // UB elements of a rotated / normalised chunk buffer
  TILING_DATA_FIELD_DEF(int64_t, copyElems);      // UB elements of a kv_c pass-through buffer (no norm)
  TILING_DATA_FIELD_DEF(int64_t, partnerRows);
  TILING_DATA_FIELD_DEF(int64_t, ubBytes);        // UB bytes the kernel allocates (the plan; <= UB - 1 KiB)
  TILING_DATA_FIELD_DEF(int64_t, kvRank);         // kv_lora_rank L
  TILING_DATA_FIELD_DEF(int64_t, kvPitch);        // UB elements per kv_c row
  TILING_DATA_FIELD_DEF(int64_t, weightPitch);    // UB elements per kv_c_norm_weight row (its dtype)
  TILING_DATA_FIELD_DEF(int64_t, treeElems);      // fp32 elements of the sum-of-squares tree (8 * 2^k >= L)
  TILING_DATA_FIELD_DEF(int64_t, hasNorm);        // 1: RMSNorm of kv_c with kv_c_norm_weight
  MSKV_ROPE_SPLIT_TILING_FIELDS
  TILING_DATA_FIELD_DEF(float, epsilon);
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvRopeConcatAndCacheMla, RopeConcatAndCacheMlaTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_ROPE_CONCAT_AND_CACHE_MLA_TILING_H_
