// MskvReshapeAndCache AscendC kernel: write the key and value rows of the first T tokens into a paged
// key/value cache at slot_mapping[t] (vLLM's reshape_and_cache / reshape_and_cache_flash).
//
// GM arguments follow the OpDef (op_host/reshape_and_cache.cpp): inputs key, value, key_cache,
// value_cache, slot_mapping, then the output status (never written), then workspace and tiling.
// Each core takes its main/tail share of the tokens; a token whose slot is negative or
// >= num_blocks * block_size is skipped and nothing outside the caches is ever written. Caches that
// share memory (one Parameter as key_cache and value_cache: possible in a graph) stop the launch
// before any write (mskv::TrapOnAliasedWrites). All GM offsets are 64-bit. Tiling key = layout
// (0 BSND, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32, 4 int8) * 100 + slot dtype (0 int32,
// 1 int64) * 10 + DataCopyPad (1 when a row/head is not a multiple of 32 bytes; A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "mskv_tiling_keys.h"

template <typename T, typename S, bool PAD, bool SEG, typename TD>
__aicore__ inline void RunReshapeAndCache(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache, GM_ADDR value_cache,
                                          GM_ADDR slot_mapping, const TD& td) {
  // one Parameter (or two over one buffer) as key_cache and value_cache, possible in a graph: the value
  // rows would overwrite the key rows in an order-dependent way; stop the launch before any write
  const int64_t cacheElems = td.blockSize > 0 ? (td.numSlots / td.blockSize) * td.blockStride : 0;
  mskv::GmSpans<2> spans;
  spans.Add(reinterpret_cast<__gm__ T*>(key_cache), cacheElems, true);
  spans.Add(reinterpret_cast<__gm__ T*>(value_cache), cacheElems, true);
  mskv::TrapOnAliasedWrites(spans);
  mskv::ScatterKeyValue<T, S, PAD, SEG>(key, value, reinterpret_cast<__gm__ T*>(key_cache),
                                        reinterpret_cast<__gm__ T*>(value_cache), slot_mapping, td);
}

extern "C" __global__ __aicore__ void mskv_reshape_and_cache(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache,
                                                        GM_ADDR value_cache, GM_ADDR slot_mapping, GM_ADDR status,
                                                        GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, BNSD, T, S, PAD) \
  if (TILING_KEY_IS(K)) return RunReshapeAndCache<T, S, PAD, BNSD>(key, value, key_cache, value_cache, slot_mapping, \
                                                                    td);
  MSKV_KEYS_RESHAPE_AND_CACHE(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
