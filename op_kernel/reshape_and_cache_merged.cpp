// MskvReshapeAndCacheMerged AscendC kernel: write the key and value rows of the first T tokens into one
// merged paged cache kv_cache[2, ...] at slot_mapping[t]: keys into kv_cache[0], values into
// kv_cache[1] (vLLM 0.9 style merged KV tensor per layer).
//
// GM arguments follow the OpDef (op_host/reshape_and_cache_merged.cpp): inputs key, value, kv_cache,
// slot_mapping, then the output status (never written), then workspace and tiling.
// Each core takes its main/tail share of the tokens; a token whose slot is negative or
// >= num_blocks * block_size is skipped and nothing outside the caches is ever written. All GM
// offsets are 64-bit. Tiling key = layout (0 BSND, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32,
// 4 int8) * 100 + slot dtype (0 int32, 1 int64) * 10 + DataCopyPad (1 when a row/head is not a
// multiple of 32 bytes; A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "mskv_tiling_keys.h"

template <typename T, typename S, bool PAD, bool SEG, typename TD>
__aicore__ inline void RunReshapeAndCacheMerged(GM_ADDR key, GM_ADDR value, GM_ADDR kv_cache, GM_ADDR slot_mapping,
                                                const TD& td) {
  // the key plane is kv_cache[0], the value plane kv_cache[1], td.valueOffset elements further: disjoint
  // by construction (valueOffset is one plane), and kv_cache is the only tensor written, so no alias
  // check is needed (the rule of mskv::TrapOnAliasedWrites leaves the read key / value unconstrained)
  mskv::ScatterKeyValue<T, S, PAD, SEG>(key, value, reinterpret_cast<__gm__ T*>(kv_cache),
                                        reinterpret_cast<__gm__ T*>(kv_cache) + td.valueOffset, slot_mapping, td);
}

extern "C" __global__ __aicore__ void mskv_reshape_and_cache_merged(GM_ADDR key, GM_ADDR value, GM_ADDR kv_cache,
                                                               GM_ADDR slot_mapping, GM_ADDR status, GM_ADDR workspace,
                                                               GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, BNSD, T, S, PAD) \
  if (TILING_KEY_IS(K)) return RunReshapeAndCacheMerged<T, S, PAD, BNSD>(key, value, kv_cache, slot_mapping, td);
  MSKV_KEYS_RESHAPE_AND_CACHE_MERGED(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
