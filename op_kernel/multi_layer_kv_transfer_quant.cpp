// MskvMultiLayerKvTransferQuant AscendC kernel entry: multi_layer_kv_transfer of int8 caches with their
// float32 scale caches (scale_caches) in one launch; the scale caches are extra planes of 4 * heads-byte
// rows, moved as bytes (the kernel: op_kernel/multi_layer_kv_transfer.h).
// Tiling key = layout (0 BSND/MLA/DSA, 1 BNSD) * 1000 + 4 (int8: the byte view) * 100 + slot dtype * 10
// + DataCopyPad (1 when a data or scale row/head is not a multiple of 32 bytes; A2/A3 only).
#include "kernel_operator.h"
#include "multi_layer_kv_transfer.h"
#include "mskv_tiling_keys.h"

extern "C" __global__ __aicore__ void mskv_multi_layer_kv_transfer_quant(GM_ADDR buffer, GM_ADDR slot_mapping,
                                                                    GM_ADDR kv_caches, GM_ADDR scale_caches,
                                                                    GM_ADDR status, GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, BNSD, T, S, PAD) \
  if (TILING_KEY_IS(K)) return mskv_ml::RunKvTransfer<T, S, PAD, BNSD>(buffer, slot_mapping, kv_caches, scale_caches, td);
  MSKV_KEYS_MULTI_LAYER_KV_TRANSFER_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
