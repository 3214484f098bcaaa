// MskvRopeConcatAndCacheMlaQuant AscendC kernel: rope_concat_and_cache_mla with int8 caches: RoPE on q_pe / k_pe,
// optional RMSNorm of kv_c, then kv_c_out and the rotated k_pe_out of every written token (as returned)
// quantized into the kv_c / k_pe cache planes, one "head" per plane (formulas: docs/quantization.md; quantize
// AFTER the norm and the rotation).
//
// GM arguments follow the OpDef (op_host/rope_concat_and_cache_mla_quant.cpp): positions, q_pe, k_pe, kv_c,
// cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping, kv_c_norm_weight (may be absent / empty), kv_c_scale,
// k_pe_scale, kv_c_offset, k_pe_offset (static), kv_c_scale_cache, k_pe_scale_cache (dynamic [nb, bs, 1], written
// in place), then the outputs q_pe_out, k_pe_out, kv_c_out, workspace and tiling.
//
// Per core: rope_concat_and_cache_mla's rows and batches (op_kernel/rope_mla_kernel.h, RopeMlaRows); its sinks
// are the row quantizer's (op_kernel/kv_quant_kernel.h, QuantSink / RowQuant::Quantize: its numerics) instead
// of cache copies. A token whose position is outside [0, max_position) gets zero q_pe_out / k_pe_out rows and
// is not cached; a slot < 0 or >= num_blocks * block_size writes nothing (its scale-cache entries included).
//
// Tiling key = quant_mode (0 static, 1 dynamic) * 100000 + rope_concat_and_cache_mla's key (DataCopyPad * 10000
// + weight * 1000 + dtype * 100 + table * 10 + style). Dynamic scales need DataCopyPad (A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "kv_quant_kernel.h"
#include "mskv_tiling_keys.h"
#include "rope_mla_kernel.h"

namespace {

template <typename T, typename C, typename W, bool NEOX, bool PAD, bool DYN, typename TD>
__aicore__ inline void RunRopeMlaQuant(GM_ADDR positions, GM_ADDR qPe, GM_ADDR kPe, GM_ADDR kvC, GM_ADDR table,
                                       GM_ADDR kvCCache, GM_ADDR kPeCache, GM_ADDR slotMapping, GM_ADDR weight,
                                       GM_ADDR cScale, GM_ADDR pScale, GM_ADDR cOffset, GM_ADDR pOffset,
                                       GM_ADDR cScaleCache, GM_ADDR pScaleCache, GM_ADDR qPeOut, GM_ADDR kPeOut,
                                       GM_ADDR kvCOut, const TD& td) {
  const auto& rt = td.rope;
  // the written tensors (the two cache planes, the scale caches and the three outputs) must not share memory:
  // one Parameter twice is possible in a graph; stop the launch before any write
  mskv::GmSpans<7> spans;
  spans.Add(reinterpret_cast<__gm__ int8_t*>(kvCCache), rt.numSlots * rt.kvRank, true);
  spans.Add(reinterpret_cast<__gm__ int8_t*>(kPeCache), rt.numSlots * rt.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(qPeOut), rt.numRows * rt.qHeads * rt.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(kPeOut), rt.numRows * rt.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(kvCOut), rt.numRows * rt.kvRank, true);
  if constexpr (DYN) {
    spans.Add(reinterpret_cast<__gm__ float*>(cScaleCache), rt.numSlots, true);
    spans.Add(reinterpret_cast<__gm__ float*>(pScaleCache), rt.numSlots, true);
  }
  mskv::TrapOnAliasedWrites(spans);
  if (rt.numRows <= 0) return;
  AscendC::TPipe pipe;
  mskv::rope::RopeEngine<T, C, NEOX, PAD> eng;
  eng.Init(&pipe, table, mskv::rope::RotGeomOf(rt), rt.chunkElems, rt.batch, rt.partnerRows, 2);
  using Quant = mskv::quant::RowQuant<T, int32_t, DYN, false, PAD>;
  Quant q;
  q.Init(&pipe, slotMapping, td.quantRow, 1, td.quantTree, td.hasOffset != 0, td.quantOutRow);
  // plane 0: the kv_c_out row at the norm / copy pitch; plane 1: the rotated k_pe row at the rotation's pitch
  const mskv::quant::QPlane planes[2] = {
      mskv::quant::MlaQPlane(rt.numSlots, rt.blockSize, rt.kvRank, rt.kvPitch, td.cScaleKind, td.cOutPitch),
      mskv::quant::MlaQPlane(rt.numSlots, rt.blockSize, rt.headSize, rt.pitch, td.pScaleKind, td.pOutPitch)};
  if constexpr (!DYN) q.LoadStatic2(planes, cScale, cOffset, pScale, pOffset);
  mskv::quant::QuantDst out;
  out.Init(kvCCache, kPeCache, cScaleCache, pScaleCache);
  mskv::quant::QuantSink<Quant> cSink{&q, 0, &planes[0], &out.cache[0], &out.scale[0]};
  mskv::quant::QuantSink<Quant> kSink{&q, 1, &planes[1], &out.cache[1], &out.scale[1]};
  mskv::rope::RopeMlaRows<T, C, W, NEOX, PAD>(pipe, eng, positions, qPe, kPe, kvC, slotMapping, weight, qPeOut,
                                              kPeOut, kvCOut, rt, &kSink, &cSink);
}

}  // namespace

extern "C" __global__ __aicore__ void mskv_rope_concat_and_cache_mla_quant(
    GM_ADDR positions, GM_ADDR q_pe, GM_ADDR k_pe, GM_ADDR kv_c, GM_ADDR cos_sin_cache, GM_ADDR kv_c_cache,
    GM_ADDR k_pe_cache, GM_ADDR slot_mapping, GM_ADDR kv_c_norm_weight, GM_ADDR kv_c_scale, GM_ADDR k_pe_scale,
    GM_ADDR kv_c_offset, GM_ADDR k_pe_offset, GM_ADDR kv_c_scale_cache, GM_ADDR k_pe_scale_cache, GM_ADDR q_pe_out,
    GM_ADDR k_pe_out, GM_ADDR kv_c_out, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, DYN, PAD, WEIGHT_IS_DATA, T, TABLE_IS_DATA, NEOX)                                        \
  if (TILING_KEY_IS(K))                                                                                          \
    return RunRopeMlaQuant<T, mskv::DataOrFloat<TABLE_IS_DATA, T>, mskv::DataOrFloat<WEIGHT_IS_DATA, T>, NEOX, PAD, \
                           DYN>(positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping,  \
                                kv_c_norm_weight, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset,                \
                                kv_c_scale_cache, k_pe_scale_cache, q_pe_out, k_pe_out, kv_c_out, td);
  MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
