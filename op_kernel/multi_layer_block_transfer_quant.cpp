// MskvMultiLayerBlockTransferQuant AscendC kernel entry: multi_layer_block_transfer of int8 caches with their
// float32 scale caches and the scales' host blocks in one launch; the scale caches are extra planes of
// 4 * heads-byte rows, moved as bytes (the kernel: op_kernel/multi_layer_block_transfer.h).
// Tiling key = layout * 1000 + 4 (int8: the byte view) * 100 + id dtype * 10 + DataCopyPad (A2/A3 only).
#include "kernel_operator.h"
#include "multi_layer_block_transfer.h"
#include "mskv_tiling_keys.h"

extern "C" __global__ __aicore__ void mskv_multi_layer_block_transfer_quant(GM_ADDR block_ids, GM_ADDR staging,
                                                                       GM_ADDR host_blocks, GM_ADDR kv_caches,
                                                                       GM_ADDR scale_host_blocks, GM_ADDR scale_caches,
                                                                       GM_ADDR status, GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, BNSD, T, S, PAD) \
  if (TILING_KEY_IS(K)) return mskv_ml::RunBlockTransfer<T, S, PAD, BNSD>(block_ids, staging, host_blocks, kv_caches, \
                                                                     scale_host_blocks, scale_caches, td);
  MSKV_KEYS_MULTI_LAYER_BLOCK_TRANSFER_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
