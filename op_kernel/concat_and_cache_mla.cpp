// MskvConcatAndCacheMla AscendC kernel: write the compressed latent kv_c and the rotary part k_pe of the
// first T tokens into the MLA paged caches kv_c_cache [nb, bs, kv_lora_rank] and
// k_pe_cache [nb, bs, rope_dim] at slot_mapping[t] (vLLM's concat_and_cache_mla, with the two parts
// kept in separate caches as in ms_kvcache's MLA_KV format).
//
// GM arguments follow the OpDef (op_host/concat_and_cache_mla.cpp): inputs kv_c, k_pe, kv_c_cache,
// k_pe_cache, slot_mapping, then the output status (never written), then workspace and tiling.
// Slots < 0 or >= num_blocks * block_size are skipped; 64-bit GM offsets. Caches that share memory (one
// Parameter as both: possible in a graph) stop the launch before any write (mskv::TrapOnAliasedWrites). Tiling key = dtype * 100 +
// slot dtype * 10 + DataCopyPad.
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "mskv_tiling_keys.h"

template <typename T, typename S, bool PAD, typename TD>
__aicore__ inline void RunConcatAndCacheMla(GM_ADDR kv_c, GM_ADDR k_pe, GM_ADDR kv_c_cache, GM_ADDR k_pe_cache,
                                            GM_ADDR slot_mapping, const TD& td) {
  // one Parameter (or two over one buffer) as kv_c_cache and k_pe_cache, possible in a graph: the rows
  // of the two planes would overwrite each other in an order-dependent way; stop before any write
  mskv::GmSpans<2> spans;
  spans.Add(reinterpret_cast<__gm__ T*>(kv_c_cache), td.numSlots * td.kvRowElems, true);
  spans.Add(reinterpret_cast<__gm__ T*>(k_pe_cache), td.numSlots * td.peRowElems, true);
  mskv::TrapOnAliasedWrites(spans);
  AscendC::TPipe pipe;
  mskv::SlotScatter<T, S, PAD, false> scatter;
  scatter.Init(&pipe, slot_mapping, td.bufferBytes, td.numSlots, td.blockSize);
  // Plane 0: kv_c -> kv_c_cache, plane 1: k_pe -> k_pe_cache; a plane whose rows have 0 elements
  // (kv_lora_rank or rope_dim 0) is left out.
  const int64_t rowElems[2] = {td.kvRowElems, td.peRowElems};
  const int64_t segsPerChunk[2] = {td.kvSegsPerChunk, td.peSegsPerChunk};
  const int64_t pieceElems[2] = {td.kvPieceElems, td.pePieceElems};
  GM_ADDR srcAddr[2] = {kv_c, k_pe};
  GM_ADDR dstAddr[2] = {kv_c_cache, k_pe_cache};
  mskv::PlaneDesc planes[2];
  AscendC::GlobalTensor<T> src[2];
  AscendC::GlobalTensor<T> dst[2];
  int32_t numPlanes = 0;
  for (int32_t i = 0; i < 2; ++i) {  // one contiguous segment per row, [nb, bs, row] caches
    if (rowElems[i] <= 0) continue;
    mskv::PlaneDesc& p = planes[numPlanes];
    p.rowElems = rowElems[i];
    p.segsPerChunk = segsPerChunk[i];
    p.pieceElems = pieceElems[i];
    p.numSeg = 1;
    p.segElems = p.rowElems;
    p.segStride = p.rowElems;
    p.slotStride = p.rowElems;
    p.blockStride = td.blockSize * p.rowElems;
    src[numPlanes].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(srcAddr[i]));
    dst[numPlanes].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dstAddr[i]));
    ++numPlanes;
  }
  int64_t begin = 0;
  int64_t end = 0;
  mskv::RowRange(td, td.numTokens, &begin, &end);
  if (numPlanes > 0) scatter.Process(begin, end, td.rowsPerChunk, planes, src, dst, numPlanes);
}

extern "C" __global__ __aicore__ void mskv_concat_and_cache_mla(GM_ADDR kv_c, GM_ADDR k_pe, GM_ADDR kv_c_cache,
                                                           GM_ADDR k_pe_cache, GM_ADDR slot_mapping, GM_ADDR status,
                                                           GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, T, S, PAD) \
  if (TILING_KEY_IS(K)) return RunConcatAndCacheMla<T, S, PAD>(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, td);
  MSKV_KEYS_CONCAT_AND_CACHE_MLA(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
