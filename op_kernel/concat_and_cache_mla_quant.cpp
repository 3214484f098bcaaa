// MskvConcatAndCacheMlaQuant AscendC kernel: concat_and_cache_mla with float kv_c / k_pe quantized into int8 MLA
// caches on the way in (formulas: docs/quantization.md; the row quantizer and its numerics:
// op_kernel/kv_quant_kernel.h).
//
// GM arguments follow the OpDef (op_host/concat_and_cache_mla_quant.cpp): kv_c, k_pe, kv_c_cache, k_pe_cache,
// slot_mapping, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset (static), kv_c_scale_cache, k_pe_scale_cache
// (dynamic: one scale per token and plane, written in place), then the output status (never written),
// workspace and tiling. Each plane is one "head" of kv_lora_rank / rope_dim elements. Each core takes its
// main/tail share of the tokens; a token whose slot is negative or >= num_blocks * block_size writes nothing
// (its scale-cache entries included); an empty plane (size 0) is skipped, the other still written.
//
// Tiling key = quant_mode (0 static, 1 dynamic) * 1000 + data dtype (1 fp16, 2 bf16, 3 fp32) * 100 + slot
// dtype (0 int32, 1 int64) * 10 + DataCopyPad (1 when a plane's size is not a multiple of 32; A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "kv_quant_kernel.h"
#include "mskv_tiling_keys.h"

template <typename T, typename S, bool DYN, bool PAD, typename TD>
__aicore__ inline void RunConcatAndCacheMlaQuant(GM_ADDR kv_c, GM_ADDR k_pe, GM_ADDR kv_c_cache, GM_ADDR k_pe_cache,
                                                 GM_ADDR slot_mapping, GM_ADDR kv_c_scale, GM_ADDR k_pe_scale,
                                                 GM_ADDR kv_c_offset, GM_ADDR k_pe_offset, GM_ADDR kv_c_scale_cache,
                                                 GM_ADDR k_pe_scale_cache, const TD& td) {
  if (td.numTokens <= 0) return;  // nothing to write (the tiling's no-op launch)
  // written tensors that share memory (one Parameter as kv_c_cache and k_pe_cache, or as a data and a scale
  // cache: possible in a graph) would overwrite each other's rows; stop the launch before any write
  const int64_t numBlocks = td.blockSize > 0 ? td.numSlots / td.blockSize : 0;
  mskv::GmSpans<4> spans;
  spans.Add(reinterpret_cast<__gm__ int8_t*>(kv_c_cache), numBlocks * td.blockSize * td.cDim, true);
  spans.Add(reinterpret_cast<__gm__ int8_t*>(k_pe_cache), numBlocks * td.blockSize * td.pDim, true);
  if constexpr (DYN) {
    spans.Add(reinterpret_cast<__gm__ float*>(kv_c_scale_cache), td.cDim > 0 ? numBlocks * td.blockSize : 0, true);
    spans.Add(reinterpret_cast<__gm__ float*>(k_pe_scale_cache), td.pDim > 0 ? numBlocks * td.blockSize : 0, true);
  }
  mskv::TrapOnAliasedWrites(spans);
  int64_t begin = 0;
  int64_t end = 0;
  mskv::RowRange(td, td.numTokens, &begin, &end);
  if (begin >= end) return;
  const int64_t dims[2] = {td.cDim, td.pDim};
  const int64_t pitches[2] = {td.cPitch, td.pPitch};
  const mskv::quant::QPlane planes[2] = {
      mskv::quant::MlaQPlane(td.numSlots, td.blockSize, dims[0], pitches[0], td.cScaleKind),
      mskv::quant::MlaQPlane(td.numSlots, td.blockSize, dims[1], pitches[1], td.pScaleKind)};
  const int64_t maxRow = pitches[0] > pitches[1] ? pitches[0] : pitches[1];
  AscendC::TPipe pipe;
  mskv::quant::RowQuant<T, S, DYN, false, PAD> q;
  q.Init(&pipe, slot_mapping, maxRow, 1, td.treeElems, td.hasOffset != 0);
  if constexpr (!DYN) q.LoadStatic2(planes, kv_c_scale, kv_c_offset, k_pe_scale, k_pe_offset);
  AscendC::GlobalTensor<T> src[2];
  src[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kv_c));
  src[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(k_pe));
  mskv::quant::QuantDst out;
  out.Init(kv_c_cache, k_pe_cache, kv_c_scale_cache, k_pe_scale_cache);
  for (int64_t t = begin; t < end; ++t) {
    int64_t slot = -1;
    if (!q.ValidSlot(t, td.numSlots, &slot)) continue;
    for (int32_t p = 0; p < 2; ++p) {
      if (dims[p] > 0) q.Row(p, planes[p], src[p], t, out.cache[p], slot, out.scale[p]);
    }
  }
}

extern "C" __global__ __aicore__ void mskv_concat_and_cache_mla_quant(GM_ADDR kv_c, GM_ADDR k_pe, GM_ADDR kv_c_cache,
                                                                      GM_ADDR k_pe_cache, GM_ADDR slot_mapping,
                                                                      GM_ADDR kv_c_scale, GM_ADDR k_pe_scale,
                                                                      GM_ADDR kv_c_offset, GM_ADDR k_pe_offset,
                                                                      GM_ADDR kv_c_scale_cache,
                                                                      GM_ADDR k_pe_scale_cache, GM_ADDR status,
                                                                      GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, DYN, T, S, PAD)                                                                          \
  if (TILING_KEY_IS(K))                                                                                         \
    return RunConcatAndCacheMlaQuant<T, S, DYN, PAD>(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, kv_c_scale, \
                                                     k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache,      \
                                                     k_pe_scale_cache, td);
  MSKV_KEYS_CONCAT_AND_CACHE_MLA_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
