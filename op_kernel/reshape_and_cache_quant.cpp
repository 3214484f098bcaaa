// MskvReshapeAndCacheQuant AscendC kernel: reshape_and_cache / reshape_and_cache_merged with float K/V
// quantized into int8 caches on the way in (formulas: docs/quantization.md, the cpu kernel's
// cpu_kernel/quant_body.inl).
//
// GM arguments follow the OpDef (op_host/reshape_and_cache_quant.cpp): key, value, key_cache, value_cache
// (absent for MERGED_KV: the V plane follows the K plane in key_cache), slot_mapping, k_scale, v_scale,
// k_offset, v_offset (static), k_scale_cache, v_scale_cache (dynamic, written in place), then the output
// status (never written), workspace and tiling. Each core takes its main/tail share of the tokens; a token
// whose slot is negative or >= num_blocks * block_size writes nothing (its scale-cache entries included).
//
// Per token and plane: op_kernel/kv_quant_kernel.h (RowQuant), the formulas and their numerics.
//
// Tiling key = quant_mode (0 static, 1 dynamic) * 10000 + layout (0 BSND, 1 BNSD, 2 NZ) * 1000 + data dtype
// (1 fp16, 2 bf16, 3 fp32) * 100 + slot dtype (0 int32, 1 int64) * 10 + DataCopyPad (1 when head_size is
// not a multiple of 32; A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "kv_quant_kernel.h"
#include "mskv_tiling_keys.h"

template <typename T, typename S, bool DYN, bool BNSD, bool PAD, typename TD>
__aicore__ inline void RunReshapeAndCacheQuant(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache, GM_ADDR value_cache,
                                               GM_ADDR slot_mapping, GM_ADDR k_scale, GM_ADDR v_scale, GM_ADDR k_offset,
                                               GM_ADDR v_offset, GM_ADDR k_scale_cache, GM_ADDR v_scale_cache,
                                               const TD& td) {
  if (td.numTokens <= 0) return;  // nothing to write (the tiling's no-op launch)
  // written tensors that share memory (one Parameter as key_cache and value_cache, or as a data and a scale
  // cache: possible in a graph) would overwrite each other's rows in a core-order-dependent way; stop the
  // launch before any write. A merged cache is one tensor (its planes never overlap).
  const int64_t numBlocks = td.blockSize > 0 ? td.numSlots / td.blockSize : 0;
  mskv::GmSpans<4> spans;
  if (td.planeElems > 0) {
    spans.Add(reinterpret_cast<__gm__ int8_t*>(key_cache), 2 * td.planeElems, true);
  } else {
    spans.Add(reinterpret_cast<__gm__ int8_t*>(key_cache), numBlocks * td.blockStride, true);
    spans.Add(reinterpret_cast<__gm__ int8_t*>(value_cache), numBlocks * td.blockStride, true);
  }
  if constexpr (DYN) {
    spans.Add(reinterpret_cast<__gm__ float*>(k_scale_cache), numBlocks * td.scBlockStride, true);
    spans.Add(reinterpret_cast<__gm__ float*>(v_scale_cache), numBlocks * td.scBlockStride, true);
  }
  mskv::TrapOnAliasedWrites(spans);
  int64_t begin = 0;
  int64_t end = 0;
  mskv::RowRange(td, td.numTokens, &begin, &end);
  if (begin >= end) return;
  mskv::quant::QPlane plane;
  plane.heads = td.heads;
  plane.headSize = td.headSize;
  plane.pitch = td.pitch;
  plane.cg.numSlots = td.numSlots;
  plane.cg.blockSize = td.blockSize;
  plane.cg.blockStride = td.blockStride;
  plane.cg.slotStride = td.slotStride;
  plane.cg.headStride = td.headStride;
  plane.cg.heads = td.heads;
  plane.cg.segElems = td.segElems;  // NZ caches: C0 (rope::CacheHeadsOut)
  plane.scBlock = td.scBlockStride;
  plane.scSlot = td.scSlotStride;
  mskv::quant::QPlane planes[2] = {plane, plane};
  planes[0].kind = td.kScaleKind;
  planes[1].kind = td.vScaleKind;
  AscendC::TPipe pipe;
  mskv::quant::RowQuant<T, S, DYN, BNSD, PAD> q;
  q.Init(&pipe, slot_mapping, td.heads * td.pitch, td.heads, td.treeElems, td.hasOffset != 0);
  if constexpr (!DYN) q.LoadStatic2(planes, k_scale, k_offset, v_scale, v_offset);
  AscendC::GlobalTensor<T> src[2];
  src[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key));
  src[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value));
  AscendC::GlobalTensor<int8_t> dst[2];
  dst[0].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(key_cache));
  if (td.planeElems > 0) {
    dst[1].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(key_cache) + td.planeElems);
  } else {
    dst[1].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(value_cache));
  }
  AscendC::GlobalTensor<float> sc[2];
  sc[0].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(k_scale_cache));
  sc[1].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(v_scale_cache));
  for (int64_t t = begin; t < end; ++t) {
    int64_t slot = -1;
    if (!q.ValidSlot(t, td.numSlots, &slot)) continue;
    for (int32_t p = 0; p < 2; ++p) q.Row(p, planes[p], src[p], t, dst[p], slot, sc[p]);
  }
}

extern "C" __global__ __aicore__ void mskv_reshape_and_cache_quant(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache,
                                                                   GM_ADDR value_cache, GM_ADDR slot_mapping,
                                                                   GM_ADDR k_scale, GM_ADDR v_scale, GM_ADDR k_offset,
                                                                   GM_ADDR v_offset, GM_ADDR k_scale_cache,
                                                                   GM_ADDR v_scale_cache, GM_ADDR status,
                                                                   GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, DYN, BNSD, T, S, PAD)                                                                      \
  if (TILING_KEY_IS(K))                                                                                           \
    return RunReshapeAndCacheQuant<T, S, DYN, BNSD, PAD>(key, value, key_cache, value_cache, slot_mapping, k_scale, \
                                                         v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache, td);
  MSKV_KEYS_RESHAPE_AND_CACHE_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
