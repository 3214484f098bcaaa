// MskvReshapeAndCache AscendC kernel: write the key and value rows of the first T tokens into a paged
// key/value cache at slot_mapping[t] (vLLM's reshape_and_cache / reshape_and_cache_flash).
//
// GM arguments follow the OpDef (op_host/reshape_and_cache.cpp): inputs key, value, key_cache,
// value_cache, slot_mapping, then the output status (never written), then workspace and tiling.
// Each core takes its main/tail share of the tokens; a token whose slot is negative or
// >= num_blocks * block_size is skipped and nothing outside the caches is ever written. All GM
// offsets are 64-bit. Tiling key = layout (0 BSND, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32,
// 4 int8) * 100 + slot dtype (0 int32, 1 int64) * 10 + DataCopyPad (1 when a row/head is not a
// multiple of 32 bytes; A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"

template <typename T, typename S, bool PAD, bool SEG, typename TD>
__aicore__ inline void RunReshapeAndCache(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache, GM_ADDR value_cache,
                                          GM_ADDR slot_mapping, const TD& td) {
  AscendC::TPipe pipe;
  mskv::SlotScatter<T, S, PAD, SEG> scatter;
  scatter.Init(&pipe, slot_mapping, td.bufferBytes, td.numSlots, td.blockSize);
  mskv::PlaneDesc plane;
  plane.rowElems = td.rowElems;
  plane.numSeg = td.numSeg;
  plane.segElems = td.segElems;
  plane.segStride = td.segStride;
  plane.blockStride = td.blockStride;
  plane.slotStride = td.slotStride;
  plane.segsPerChunk = td.segsPerChunk;
  plane.pieceElems = td.pieceElems;
  mskv::PlaneDesc planes[2] = {plane, plane};
  AscendC::GlobalTensor<T> src[2];
  AscendC::GlobalTensor<T> dst[2];
  src[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key));
  src[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value));
  dst[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key_cache));
  dst[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value_cache));
  int64_t begin = 0;
  int64_t end = 0;
  mskv::CoreRange(td.formerNum, td.formerLen, td.tailLen, &begin, &end);
  end = mskv::MinI64(end, td.numTokens);
  scatter.Process(begin, end, td.rowsPerChunk, planes, src, dst, 2);
}

extern "C" __global__ __aicore__ void mskv_reshape_and_cache(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache,
                                                        GM_ADDR value_cache, GM_ADDR slot_mapping, GM_ADDR status,
                                                        GM_ADDR workspace, GM_ADDR tiling) {
  (void)status;
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  if (TILING_KEY_IS(100)) {
    RunReshapeAndCache<half, int32_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(101)) {
    RunReshapeAndCache<half, int32_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(110)) {
    RunReshapeAndCache<half, int64_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(111)) {
    RunReshapeAndCache<half, int64_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(200)) {
    RunReshapeAndCache<bfloat16_t, int32_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(201)) {
    RunReshapeAndCache<bfloat16_t, int32_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(210)) {
    RunReshapeAndCache<bfloat16_t, int64_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(211)) {
    RunReshapeAndCache<bfloat16_t, int64_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(300)) {
    RunReshapeAndCache<float, int32_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(301)) {
    RunReshapeAndCache<float, int32_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(310)) {
    RunReshapeAndCache<float, int64_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(311)) {
    RunReshapeAndCache<float, int64_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(400)) {
    RunReshapeAndCache<int8_t, int32_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(401)) {
    RunReshapeAndCache<int8_t, int32_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(410)) {
    RunReshapeAndCache<int8_t, int64_t, false, false>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(411)) {
    RunReshapeAndCache<int8_t, int64_t, true, false>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(1100)) {
    RunReshapeAndCache<half, int32_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(1101)) {
    RunReshapeAndCache<half, int32_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(1110)) {
    RunReshapeAndCache<half, int64_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(1111)) {
    RunReshapeAndCache<half, int64_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(1200)) {
    RunReshapeAndCache<bfloat16_t, int32_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(1201)) {
    RunReshapeAndCache<bfloat16_t, int32_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(1210)) {
    RunReshapeAndCache<bfloat16_t, int64_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
  } else if (TILING_KEY_IS(1211)) {
    RunReshapeAndCache<bfloat16_t, int64_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(1300)) {
    RunReshapeAndCache<float, int32_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(1301)) {
    RunReshapeAndCache<float, int32_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(1310)) {
    RunReshapeAndCache<float, int64_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(1311)) {
    RunReshapeAndCache<float, int64_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(1400)) {
    RunReshapeAndCache<int8_t, int32_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(1401)) {
    RunReshapeAndCache<int8_t, int32_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  } else if (TILING_KEY_IS(1410)) {
    RunReshapeAndCache<int8_t, int64_t, false, true>(key, value, key_cache, value_cache, slot_mapping, td);
#if MSKV_HAS_BF16_AND_PAD
  } else if (TILING_KEY_IS(1411)) {
    RunReshapeAndCache<int8_t, int64_t, true, true>(key, value, key_cache, value_cache, slot_mapping, td);
#endif
  }
}
