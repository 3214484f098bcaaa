// MskvRopeReshapeAndCache AscendC kernel: vLLM's rotary_embedding on query and key fused with reshape_and_cache
// of the rotated key and the value into a paged cache (ms_kvcache.rope_reshape_and_cache).
//
// GM arguments follow the OpDef (op_host/rope_reshape_and_cache.cpp): inputs positions, query, key, value,
// cos_sin_cache, key_cache, value_cache, slot_mapping; outputs query_out, key_out, then workspace
// and tiling. The work is op_kernel/rope_cache_kernel.h (shared by the separate-cache and merged-cache
// ops; the engine and the numerics are described in op_kernel/rope_kernel_common.h).
//
// Tiling key = pad * 10000 + layout (0 BSND, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32) * 100 +
// table (0 float32, 1 the data dtype) * 10 + style (1 NeoX, 0 GPT-J). The layout only changes strides
// (tiling data), so both layout keys run one template. bfloat16 and DataCopyPad (pad = 1) templates are
// compiled only where MSKV_HAS_BF16_AND_PAD (op_kernel/mskv_arch.h: not for Ascend310P).
#include "kernel_operator.h"
#include "rope_cache_kernel.h"
#include "mskv_tiling_keys.h"


extern "C" __global__ __aicore__ void mskv_rope_reshape_and_cache(GM_ADDR positions, GM_ADDR query, GM_ADDR key,
                                                             GM_ADDR value, GM_ADDR cos_sin_cache, GM_ADDR key_cache,
                                                             GM_ADDR value_cache, GM_ADDR slot_mapping,
                                                             GM_ADDR query_out, GM_ADDR key_out, GM_ADDR workspace,
                                                             GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, PAD, LAYOUT, T, TABLE_IS_DATA, NEOX) \
  if (TILING_KEY_IS(K)) return mskv::rope::RunRopeCache<T, mskv::DataOrFloat<TABLE_IS_DATA, T>, NEOX, PAD> \
      (positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping, query_out, key_out, td);
  MSKV_KEYS_ROPE_RESHAPE_AND_CACHE(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
