// MskvMultiLayerKvTransfer AscendC kernel entry: the K/V rows of T tokens of every layer between the paged
// caches and one contiguous buffer, in one launch (the kernel: op_kernel/multi_layer_kv_transfer.h).
// Tiling key = layout (0 BSND/MLA/DSA, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32, 4 int8) * 100
// + slot dtype (0 int32, 1 int64) * 10 + DataCopyPad (1 when a row/head is not a multiple of 32 bytes).
#include "kernel_operator.h"
#include "multi_layer_kv_transfer.h"
#include "mskv_tiling_keys.h"

extern "C" __global__ __aicore__ void mskv_multi_layer_kv_transfer(GM_ADDR buffer, GM_ADDR slot_mapping, GM_ADDR kv_caches,
                                                              GM_ADDR status, GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, BNSD, T, S, PAD) \
  if (TILING_KEY_IS(K)) return mskv_ml::RunKvTransfer<T, S, PAD, BNSD>(buffer, slot_mapping, kv_caches, nullptr, td);
  MSKV_KEYS_MULTI_LAYER_KV_TRANSFER(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
