// MskvMultiLayerBlockTransfer AscendC kernel entry: whole blocks of every layer between the per-layer paged
// caches and token-major host blocks, in one launch (the kernel: op_kernel/multi_layer_block_transfer.h).
// Tiling key = layout (0 BSND/MLA/DSA, 1 BNSD) * 1000 + dtype * 100 + id dtype * 10 + DataCopyPad.
#include "kernel_operator.h"
#include "multi_layer_block_transfer.h"
#include "mskv_tiling_keys.h"

extern "C" __global__ __aicore__ void mskv_multi_layer_block_transfer(GM_ADDR block_ids, GM_ADDR staging,
                                                                 GM_ADDR host_blocks, GM_ADDR kv_caches,
                                                                 GM_ADDR status, GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, BNSD, T, S, PAD) \
  if (TILING_KEY_IS(K)) return mskv_ml::RunBlockTransfer<T, S, PAD, BNSD>(block_ids, staging, host_blocks, kv_caches, nullptr, \
                                                                     nullptr, td);
  MSKV_KEYS_MULTI_LAYER_BLOCK_TRANSFER(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
