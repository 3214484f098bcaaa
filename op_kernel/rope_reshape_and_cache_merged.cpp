// MskvRopeReshapeAndCacheMerged AscendC kernel: as rope_reshape_and_cache, with the merged per-layer cache
// kv_cache [2, nb, ...] (K plane 0, V plane 1; ms_kvcache.rope_reshape_and_cache_merged).
//
// GM arguments follow the OpDef (op_host/rope_reshape_and_cache_merged.cpp): inputs positions, query, key, value,
// cos_sin_cache, kv_cache, slot_mapping; outputs query_out, key_out, then workspace
// and tiling. The work is op_kernel/rope_cache_kernel.h (shared by the separate-cache and merged-cache
// ops; the engine and the numerics are described in op_kernel/rope_kernel_common.h).
//
// Tiling key = pad * 10000 + layout (0 BSND, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32) * 100 +
// table (0 float32, 1 the data dtype) * 10 + style (1 NeoX, 0 GPT-J). The layout only changes strides
// (tiling data), so both layout keys run one template. bfloat16 and DataCopyPad (pad = 1) templates are
// compiled only where MSKV_HAS_BF16_AND_PAD (op_kernel/mskv_arch.h: not for Ascend310P).
#include "kernel_operator.h"
#include "rope_cache_kernel.h"

#define MSKV_ROPE_RUN(T, C, NEOX, PAD)                                                                       \
  mskv::rope::RunRopeCache<T, C, NEOX, PAD>(positions, query, key, value, cos_sin_cache, kv_cache, kv_cache,\
                                            slot_mapping, query_out, key_out, td)

extern "C" __global__ __aicore__ void mskv_rope_reshape_and_cache_merged(GM_ADDR positions, GM_ADDR query, GM_ADDR key,
                                                                    GM_ADDR value, GM_ADDR cos_sin_cache,
                                                                    GM_ADDR kv_cache, GM_ADDR slot_mapping,
                                                                    GM_ADDR query_out, GM_ADDR key_out,
                                                                    GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  if (TILING_KEY_IS(100) || TILING_KEY_IS(1100)) return MSKV_ROPE_RUN(half, float, false, false);
  if (TILING_KEY_IS(101) || TILING_KEY_IS(1101)) return MSKV_ROPE_RUN(half, float, true, false);
  if (TILING_KEY_IS(110) || TILING_KEY_IS(1110)) return MSKV_ROPE_RUN(half, half, false, false);
  if (TILING_KEY_IS(111) || TILING_KEY_IS(1111)) return MSKV_ROPE_RUN(half, half, true, false);
#if MSKV_HAS_BF16_AND_PAD
  if (TILING_KEY_IS(200) || TILING_KEY_IS(1200)) return MSKV_ROPE_RUN(bfloat16_t, float, false, false);
  if (TILING_KEY_IS(201) || TILING_KEY_IS(1201)) return MSKV_ROPE_RUN(bfloat16_t, float, true, false);
  if (TILING_KEY_IS(210) || TILING_KEY_IS(1210)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, false, false);
  if (TILING_KEY_IS(211) || TILING_KEY_IS(1211)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, true, false);
#endif
  if (TILING_KEY_IS(300) || TILING_KEY_IS(1300)) return MSKV_ROPE_RUN(float, float, false, false);
  if (TILING_KEY_IS(301) || TILING_KEY_IS(1301)) return MSKV_ROPE_RUN(float, float, true, false);
#if MSKV_HAS_BF16_AND_PAD
  if (TILING_KEY_IS(10100) || TILING_KEY_IS(11100)) return MSKV_ROPE_RUN(half, float, false, true);
  if (TILING_KEY_IS(10101) || TILING_KEY_IS(11101)) return MSKV_ROPE_RUN(half, float, true, true);
  if (TILING_KEY_IS(10110) || TILING_KEY_IS(11110)) return MSKV_ROPE_RUN(half, half, false, true);
  if (TILING_KEY_IS(10111) || TILING_KEY_IS(11111)) return MSKV_ROPE_RUN(half, half, true, true);
  if (TILING_KEY_IS(10200) || TILING_KEY_IS(11200)) return MSKV_ROPE_RUN(bfloat16_t, float, false, true);
  if (TILING_KEY_IS(10201) || TILING_KEY_IS(11201)) return MSKV_ROPE_RUN(bfloat16_t, float, true, true);
  if (TILING_KEY_IS(10210) || TILING_KEY_IS(11210)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, false, true);
  if (TILING_KEY_IS(10211) || TILING_KEY_IS(11211)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, true, true);
  if (TILING_KEY_IS(10300) || TILING_KEY_IS(11300)) return MSKV_ROPE_RUN(float, float, false, true);
  if (TILING_KEY_IS(10301) || TILING_KEY_IS(11301)) return MSKV_ROPE_RUN(float, float, true, true);
#endif
}
#undef MSKV_ROPE_RUN
