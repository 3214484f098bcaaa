// Tiling data of MskvMultiLayerBlockTransfer (op_host/multi_layer_block_transfer.cpp fills it,
// op_kernel/multi_layer_block_transfer.cpp reads it with GET_TILING_DATA). Sizes are element counts
// of the cache dtype unless named *Size / *Bytes. Per-plane arrays have 3 entries (DSA_KV).
//
// Work unit = (block, layer, token chunk): unit = (i * numLayers + layer) * tokenChunks + chunk (i indexes
// block_ids / the host blocks);
// cores [0, formerNum) take formerLen units, the others tailLen, each a contiguous range.
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_BLOCK_TRANSFER_TILING_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_BLOCK_TRANSFER_TILING_H_

#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(MultiLayerBlockTransferTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numLayers);
  TILING_DATA_FIELD_DEF(int64_t, numIds);            // n = len(block_ids)
  TILING_DATA_FIELD_DEF(int64_t, numBlocks);         // ids outside [0, numBlocks): skipped (h2d) / zeros (d2h)
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, numPlanes);
  TILING_DATA_FIELD_DEF(int64_t, tensorsPerLayer);
  TILING_DATA_FIELD_DEF(int64_t, direction);         // 0 d2h (caches -> host blocks), 1 h2d
  TILING_DATA_FIELD_DEF(int64_t, usedCoreNum);
  TILING_DATA_FIELD_DEF(int64_t, formerNum);
  TILING_DATA_FIELD_DEF(int64_t, formerLen);         // (block, layer, token chunk) units of a main core
  TILING_DATA_FIELD_DEF(int64_t, tailLen);
  TILING_DATA_FIELD_DEF(int64_t, tokenChunks);       // token chunks per block (1 unless n * L < cores; staging 1)
  TILING_DATA_FIELD_DEF(int64_t, tokensPerChunk);    // tokens of a chunk (the last may be shorter)
  TILING_DATA_FIELD_DEF(int64_t, perLoopBuffSize);   // bytes of each of the two UB buffers
  TILING_DATA_FIELD_DEF(int64_t, zeroBuffSize);      // bytes of the UB buffer of zeros (d2h), else 0
  TILING_DATA_FIELD_DEF(int64_t, staging);           // 1: host rows go through the staging buffer
  TILING_DATA_FIELD_DEF(int64_t, stagingSliceElems); // staging elements owned by each core
  TILING_DATA_FIELD_DEF(int64_t, layersPerStage);    // units of one block staged together
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, rowElems);   // per plane: hidden = H * D
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, numSeg);     // 1, or num_kv_heads (BNSD)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, segElems);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, segStride);  // device elements between the heads of a token
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, planeOffset);         // plane start inside the layer's tensor
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, hiddenPrefix);        // sum of the hidden sizes of earlier planes
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, tokensPerInnerLoop);  // token rows per UB buffer (0: a row is larger)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, segsPerLoop);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, pieceElems);
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvMultiLayerBlockTransfer, MultiLayerBlockTransferTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_BLOCK_TRANSFER_TILING_H_
