// MskvRopeConcatAndCacheMla AscendC kernel: DeepSeek MLA. RoPE on q_pe [T', Hq, R] and k_pe [T', R], optional
// RMSNorm of kv_c [T', L], then the kv_c row and the rotated k_pe row of every written token into their
// cache planes (ms_kvcache.rope_concat_and_cache_mla).
//
// GM arguments follow the OpDef (op_host/rope_concat_and_cache_mla.cpp): inputs positions, q_pe, k_pe,
// kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping, kv_c_norm_weight (may be absent / empty),
// outputs q_pe_out, k_pe_out, kv_c_out, then workspace and tiling. Rotation: op_kernel/rope_kernel_common.h.
// kv_c_out is written for every row (normalised or copied), also for tokens with an invalid position
// (those get zero q_pe_out / k_pe_out rows and are not cached), as on the cpu backend. Written tensors that
// share memory (one Parameter as both caches: possible in a graph) stop the launch before any write
// (mskv::TrapOnAliasedWrites).
//
// RMSNorm and the per-core loop: op_kernel/rope_mla_kernel.h (shared with rope_concat_and_cache_mla_quant).
//
// Tiling key = pad * 10000 + weight (0 none, 1 float32, 2 the data dtype) * 1000 + dtype (1 fp16, 2 bf16,
// 3 fp32) * 100 + table (0 float32, 1 the data dtype) * 10 + style (1 NeoX, 0 GPT-J). bfloat16 and
// DataCopyPad templates are compiled only where MSKV_HAS_BF16_AND_PAD (op_kernel/mskv_arch.h: not for Ascend310P).
#include "kernel_operator.h"
#include "mskv_tiling_keys.h"
#include "rope_mla_kernel.h"

namespace mskv {
namespace rope {

template <typename T, typename C, typename W, bool NEOX, bool PAD, typename TD>
__aicore__ inline void RunRopeMla(GM_ADDR positions, GM_ADDR qPe, GM_ADDR kPe, GM_ADDR kvC, GM_ADDR table,
                                  GM_ADDR kvCCache, GM_ADDR kPeCache, GM_ADDR slotMapping, GM_ADDR weight,
                                  GM_ADDR qPeOut, GM_ADDR kPeOut, GM_ADDR kvCOut, const TD& td) {
  // the written tensors (the two caches and the three outputs) must not share memory: one Parameter as
  // kv_c_cache and k_pe_cache is possible in a graph; stop the launch before any write
  GmSpans<5> spans;
  spans.Add(reinterpret_cast<__gm__ T*>(kvCCache), td.numSlots * td.kvRank, true);
  spans.Add(reinterpret_cast<__gm__ T*>(kPeCache), td.numSlots * td.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(qPeOut), td.numRows * td.qHeads * td.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(kPeOut), td.numRows * td.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(kvCOut), td.numRows * td.kvRank, true);
  TrapOnAliasedWrites(spans);
  AscendC::TPipe pipe;
  RopeEngine<T, C, NEOX, PAD> eng;
  eng.Init(&pipe, table, RotGeomOf(td), td.chunkElems, td.batch, td.partnerRows, 2);
  AscendC::GlobalTensor<T> kvCache, kCache;
  kvCache.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kvCCache));
  kCache.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kPeCache));
  const CacheGeom kg = MlaPlaneGeom(td, td.headSize);  // k_pe_cache [nb, bs, R]
  const CacheGeom cg = MlaPlaneGeom(td, td.kvRank);    // kv_c_cache [nb, bs, L]
  CacheSink<T, PAD> kSink{&kCache, &kg, td.headSize, td.pitch};
  CacheSink<T, PAD> cSink{&kvCache, &cg, td.kvRank, td.kvPitch};
  RopeMlaRows<T, C, W, NEOX, PAD>(pipe, eng, positions, qPe, kPe, kvC, slotMapping, weight, qPeOut, kPeOut, kvCOut,
                                  td, &kSink, &cSink);
}

}  // namespace rope
}  // namespace mskv


extern "C" __global__ __aicore__ void mskv_rope_concat_and_cache_mla(GM_ADDR positions, GM_ADDR q_pe, GM_ADDR k_pe,
                                                                GM_ADDR kv_c, GM_ADDR cos_sin_cache,
                                                                GM_ADDR kv_c_cache, GM_ADDR k_pe_cache,
                                                                GM_ADDR slot_mapping, GM_ADDR kv_c_norm_weight,
                                                                GM_ADDR q_pe_out, GM_ADDR k_pe_out, GM_ADDR kv_c_out,
                                                                GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, PAD, WEIGHT_IS_DATA, T, TABLE_IS_DATA, NEOX) \
  if (TILING_KEY_IS(K))                                                                                  \
    return mskv::rope::RunRopeMla<T, mskv::DataOrFloat<TABLE_IS_DATA, T>, mskv::DataOrFloat<WEIGHT_IS_DATA, T>, NEOX,  \
                                  PAD> \
      (positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping, kv_c_norm_weight, \
       q_pe_out, k_pe_out, kv_c_out, td);
  MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
