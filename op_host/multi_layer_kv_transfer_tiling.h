// Tiling data of MskvMultiLayerKvTransfer (op_host/multi_layer_kv_transfer.cpp fills it,
// op_kernel/multi_layer_kv_transfer.cpp reads it with GET_TILING_DATA). Sizes are element counts of
// the cache dtype unless named *Size / *Bytes. Per-plane arrays have 3 entries (DSA_KV); unused ones
// are 0.
//
// Work item = (layer, token): item = layer * numTokens + token; cores [0, formerNum) take formerLen
// (tokensPerCore) items, the others tailLen, each a contiguous range.
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_KV_TRANSFER_TILING_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_KV_TRANSFER_TILING_H_

#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(MultiLayerKvTransferTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numLayers);
  TILING_DATA_FIELD_DEF(int64_t, numTokens);         // len(slot_mapping)
  TILING_DATA_FIELD_DEF(int64_t, numPlanes);         // 2, or 3 for DSA_KV
  TILING_DATA_FIELD_DEF(int64_t, tensorsPerLayer);   // kv_caches entries per layer (1 for MERGED_KV)
  TILING_DATA_FIELD_DEF(int64_t, direction);         // 0 d2h (caches -> buffer), 1 h2d
  TILING_DATA_FIELD_DEF(int64_t, numSlots);          // num_blocks * block_size; other slots are skipped
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, usedCoreNum);       // block dim (<= aiv_num when it is set)
  TILING_DATA_FIELD_DEF(int64_t, formerNum);
  TILING_DATA_FIELD_DEF(int64_t, formerLen);         // tokensPerCore: (layer, token) items of a main core
  TILING_DATA_FIELD_DEF(int64_t, tailLen);
  TILING_DATA_FIELD_DEF(int64_t, maxTokensPerLoop);  // longest run of tokens read per slot batch (<= 128)
  TILING_DATA_FIELD_DEF(int64_t, perLoopBuffSize);   // bytes of each of the two UB buffers
  TILING_DATA_FIELD_DEF(int64_t, zeroBuffSize);      // bytes of the UB buffer of zeros (d2h), else 0
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, rowElems);   // per plane: elements of a token row (H * D)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, numSeg);     // 1, or num_kv_heads (BNSD)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, segElems);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, segStride);  // cache elements between the segments of a row
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, blockStride);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, slotStride);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, planeOffset);         // plane start inside the layer's tensor
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, bufOffset);           // plane start in the buffer
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, tokensPerInnerLoop);  // rows per UB buffer (0: a row is larger)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, segsPerLoop);         // tokensPerInnerLoop 0: segments per buffer
  TILING_DATA_FIELD_DEF_ARR(int64_t, 3, pieceElems);          // both 0: pieces of one segment
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MskvMultiLayerKvTransfer, MultiLayerKvTransferTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_KV_TRANSFER_TILING_H_
