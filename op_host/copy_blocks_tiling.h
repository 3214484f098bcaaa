// Tiling data of MskvCopyBlocks (op_host/copy_blocks.cpp fills it, op_kernel/copy_blocks.cpp reads it with
// GET_TILING_DATA). Sizes are element counts of the cache dtype unless named *Bytes.
//
// Work unit = one byte range ("piece") of the blocks of one cache: u = c * piecesPerBlock + k, where
// caches c < numLayers are key_caches[c] and c >= numLayers are value_caches[c - numLayers]. A unit
// applies every (src, dst) pair of block_mapping, in order, to its piece, so units never touch the
// same bytes and the result is the sequential one (as the cpu backend), also for chained pairs.
#ifndef MS_KVCACHE_OP_HOST_COPY_BLOCKS_TILING_H_
#define MS_KVCACHE_OP_HOST_COPY_BLOCKS_TILING_H_

#include "register/tilingdata_base.h"
#include "mskv_tiling_fields.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(CopyBlocksTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numLayers);       // caches per list
  TILING_DATA_FIELD_DEF(int64_t, numPairs);        // rows of block_mapping
  TILING_DATA_FIELD_DEF(int64_t, numBlocks);       // block ids outside [0, numBlocks) are skipped
  TILING_DATA_FIELD_DEF(int64_t, blockElems);      // elements per block (all dims but the first)
  TILING_DATA_FIELD_DEF(int64_t, piecesPerBlock);  // a block is split over cores when pairs are few
  TILING_DATA_FIELD_DEF(int64_t, pieceElems);      // elements per piece (last piece may be shorter)
  TILING_DATA_FIELD_DEF(int64_t, chunkElems);      // elements per UB buffer
  TILING_DATA_FIELD_DEF(int64_t, bufferBytes);     // bytes of each of the two UB buffers
  MSKV_CORE_SPLIT_TILING_FIELDS
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvCopyBlocks, CopyBlocksTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_COPY_BLOCKS_TILING_H_
