// Tiling data of the multi-layer transfers (op_host/multi_layer_tiling_impl.h fills them, op_kernel/
// multi_layer_kv_transfer.h / multi_layer_block_transfer.h read them with GET_TILING_DATA); each op registers
// its struct in its own <op>_tiling.h: MultiLayerKvTransferTilingData for MskvMultiLayerKvTransfer and
// MskvMultiLayerKvTransferQuant, MultiLayerBlockTransferTilingData for MskvMultiLayerBlockTransfer and
// MskvMultiLayerBlockTransferQuant. Sizes are element counts of the cache dtype unless named *Size / *Bytes
// (with scale caches the caches are int8: bytes). Per-plane arrays have 6 entries: the data planes (3 for
// DSA_KV), then with scale caches one scale plane per data plane (rows of 4 * heads bytes); unused ones are 0.
//
// multi_layer_kv_transfer: work item = (layer, token): item = layer * numTokens + token (every plane), or with
// planeItems (fewer items than cores) (plane, layer, token): item = (plane * numLayers + layer) * numTokens +
// token; cores [0, formerNum) take formerLen (tokensPerCore) items, the others tailLen, each a contiguous range.
// multi_layer_block_transfer: work unit = (block, layer group, token): unit = (i * layerGroups + group) *
// blockSize + token (i indexes block_ids / the host blocks), split the same way; a core moves its consecutive
// tokens of a (block, layer group) together.
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_DATA_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_DATA_H_

#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(MultiLayerKvTransferTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numLayers);
  TILING_DATA_FIELD_DEF(int64_t, numTokens);         // len(slot_mapping)
  TILING_DATA_FIELD_DEF(int64_t, numPlanes);         // 2, or 3 for DSA_KV; twice that with scale caches
  TILING_DATA_FIELD_DEF(int64_t, tensorsPerLayer);   // kv_caches entries per layer (1 for MERGED_KV)
  TILING_DATA_FIELD_DEF(int64_t, scalesPerLayer);    // scale_caches entries per layer (0: no scale caches)
  TILING_DATA_FIELD_DEF(int64_t, direction);         // 0 d2h (caches -> buffer), 1 h2d
  TILING_DATA_FIELD_DEF(int64_t, numSlots);          // num_blocks * block_size; other slots are skipped
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, usedCoreNum);       // block dim (<= aiv_num when it is set)
  TILING_DATA_FIELD_DEF(int64_t, formerNum);
  TILING_DATA_FIELD_DEF(int64_t, formerLen);         // tokensPerCore: items of a main core
  TILING_DATA_FIELD_DEF(int64_t, tailLen);
  TILING_DATA_FIELD_DEF(int64_t, maxTokensPerLoop);  // longest run of tokens read per slot batch (<= 128)
  TILING_DATA_FIELD_DEF(int64_t, perLoopBuffSize);   // bytes of each of the two UB buffers
  TILING_DATA_FIELD_DEF(int64_t, zeroBuffSize);      // bytes of the UB buffer of zeros (d2h), else 0
  TILING_DATA_FIELD_DEF(int64_t, planeItems);        // 1: items are (plane, layer, token) (L * T < cores)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, rowElems);   // per plane: elements of a token row (H * D)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, numSeg);     // 1, or num_kv_heads (BNSD)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, segElems);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, segStride);  // cache elements between the segments of a row
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, blockStride);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, slotStride);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, planeOffset);         // plane start inside the layer's tensor
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, bufOffset);           // plane start in the buffer
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, tokensPerInnerLoop);  // rows per UB buffer (0: a row is larger)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, segsPerLoop);         // tokensPerInnerLoop 0: segments per buffer
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, pieceElems);          // both 0: pieces of one segment
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, planeList);           // 0: a kv_caches plane, 1: a scale_caches plane
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, tensorInLayer);       // its tensor: layer * (per layer of its list) + this
END_TILING_DATA_DEF;

BEGIN_TILING_DATA_DEF(MultiLayerBlockTransferTilingData)
  TILING_DATA_FIELD_DEF(int64_t, numLayers);
  TILING_DATA_FIELD_DEF(int64_t, numIds);            // n = len(block_ids)
  TILING_DATA_FIELD_DEF(int64_t, numBlocks);         // ids outside [0, numBlocks): skipped (h2d) / zeros (d2h)
  TILING_DATA_FIELD_DEF(int64_t, blockSize);
  TILING_DATA_FIELD_DEF(int64_t, numPlanes);         // 2, or 3 for DSA_KV; twice that with scale caches
  TILING_DATA_FIELD_DEF(int64_t, tensorsPerLayer);   // kv_caches entries per layer (1 for MERGED_KV)
  TILING_DATA_FIELD_DEF(int64_t, scalesPerLayer);    // scale_caches entries per layer (0: no scale caches)
  TILING_DATA_FIELD_DEF(int64_t, direction);         // 0 d2h (caches -> host blocks), 1 h2d
  TILING_DATA_FIELD_DEF(int64_t, usedCoreNum);
  TILING_DATA_FIELD_DEF(int64_t, formerNum);
  TILING_DATA_FIELD_DEF(int64_t, formerLen);         // (block, layer group, token) units of a main core
  TILING_DATA_FIELD_DEF(int64_t, tailLen);
  TILING_DATA_FIELD_DEF(int64_t, layerGroups);       // groups of consecutive layers a unit covers
  TILING_DATA_FIELD_DEF(int64_t, layersPerGroup);    // layers of a group (the last may have fewer)
  TILING_DATA_FIELD_DEF(int64_t, perLoopBuffSize);   // bytes of each of the two UB buffers
  TILING_DATA_FIELD_DEF(int64_t, zeroBuffSize);      // bytes of the UB buffer of zeros (d2h), else 0
  TILING_DATA_FIELD_DEF(int64_t, staging);           // 1: host rows go through the staging buffer
  TILING_DATA_FIELD_DEF(int64_t, stagingSliceElems); // staging elements owned by each core
  TILING_DATA_FIELD_DEF(int64_t, stagingTokens);     // tokens of a (block, layer group) staged at a time
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, rowElems);   // per plane: hidden = H * D
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, numSeg);     // 1, or num_kv_heads (BNSD)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, segElems);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, segStride);  // device elements between the heads of a token
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, planeOffset);         // plane start inside the layer's tensor
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, hiddenPrefix);        // sum of the hidden sizes of earlier planes
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, tokensPerInnerLoop);  // tokens (of a layer group) per UB buffer (0: a row is larger)
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, segsPerLoop);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, pieceElems);
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, planeList);           // 0: a kv_caches plane, 1: a scale_caches plane
  TILING_DATA_FIELD_DEF_ARR(int64_t, 6, tensorInLayer);       // its tensor: layer * (per layer of its list) + this
END_TILING_DATA_DEF;
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_TILING_DATA_H_
