// MskvRopeReshapeAndCacheQuant AscendC kernel: rope_reshape_and_cache / rope_reshape_and_cache_merged with int8
// caches: vLLM's rotary_embedding on query and key, then the rotated key (as returned in key_out) and the
// value quantized into the caches (formulas: docs/quantization.md; quantize AFTER the rotation).
//
// GM arguments follow the OpDef (op_host/rope_reshape_and_cache_quant.cpp): positions, query, key, value,
// cos_sin_cache, key_cache (kv_format 1: the merged [2, nb, ...] cache), value_cache (absent for kv_format 1),
// slot_mapping, k_scale, v_scale, k_offset, v_offset (static), k_scale_cache, v_scale_cache (dynamic, written
// in place), then the outputs query_out, key_out, workspace and tiling.
//
// Per core: its main/tail share of the T' rows, in batches of tokens as rope_reshape_and_cache
// (op_kernel/rope_kernel_common.h: the engine, its numerics and the batch rules); the rotated key rows of a
// written token go from UB through the row quantizer (op_kernel/kv_quant_kernel.h, RowQuant::Quantize: its
// numerics), the value rows of a written token from GM through RowQuant::Row. A token whose position is
// outside [0, max_position) gets zero query_out / key_out rows and is not cached; a slot < 0 or
// >= num_blocks * block_size writes nothing (its scale-cache entries included).
//
// Tiling key = quant_mode (0 static, 1 dynamic) * 100000 + DataCopyPad * 10000 + layout (0 BSND, 1 BNSD) * 1000
// + dtype (1 fp16, 2 bf16, 3 fp32) * 100 + table (0 float32, 1 the data dtype) * 10 + style (1 NeoX, 0 GPT-J).
// Static keys of both layouts run one template (the layout only changes strides); dynamic BNSD scale caches
// need DataCopyPad (A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "kv_quant_kernel.h"
#include "mskv_tiling_keys.h"
#include "rope_kernel_common.h"

namespace {

using mskv::rope::CacheGeom;

template <typename T, typename C, bool NEOX, bool PAD, bool DYN, bool BNSD, typename TD>
__aicore__ inline void RunRopeCacheQuant(GM_ADDR positions, GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR table,
                                         GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR slotMapping, GM_ADDR kScale,
                                         GM_ADDR vScale, GM_ADDR kOffset, GM_ADDR vOffset, GM_ADDR kScaleCache,
                                         GM_ADDR vScaleCache, GM_ADDR queryOut, GM_ADDR keyOut, const TD& td) {
  const auto& rt = td.rope;
  // the written tensors (the key and value cache planes, the scale caches, query_out, key_out) must not share
  // memory: one Parameter twice is possible in a graph; stop the launch before any write
  const int64_t numBlocks = rt.blockSize > 0 ? rt.numSlots / rt.blockSize : 0;
  __gm__ int8_t* vPlane = reinterpret_cast<__gm__ int8_t*>(rt.vPlaneOffset > 0 ? keyCache : valueCache) +
                          rt.vPlaneOffset;
  mskv::GmSpans<6> spans;
  spans.Add(reinterpret_cast<__gm__ int8_t*>(keyCache), numBlocks * rt.blockStride, true);
  spans.Add(vPlane, numBlocks * rt.blockStride, true);
  spans.Add(reinterpret_cast<__gm__ T*>(queryOut), rt.numRows * rt.qHeads * rt.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(keyOut), rt.numRows * rt.kHeads * rt.headSize, true);
  if constexpr (DYN) {
    spans.Add(reinterpret_cast<__gm__ float*>(kScaleCache), numBlocks * td.scBlockStride, true);
    spans.Add(reinterpret_cast<__gm__ float*>(vScaleCache), numBlocks * td.scBlockStride, true);
  }
  mskv::TrapOnAliasedWrites(spans);
  if (rt.numRows <= 0) return;
  AscendC::TPipe pipe;
  mskv::rope::RopeEngine<T, C, NEOX, PAD> eng;
  eng.Init(&pipe, table, mskv::rope::RotGeomOf(rt), rt.chunkElems, rt.batch, rt.partnerRows, 2);
  using Quant = mskv::quant::RowQuant<T, int32_t, DYN, BNSD, PAD>;
  Quant q;
  q.Init(&pipe, slotMapping, rt.kHeads * rt.pitch, rt.kHeads, td.treeElems, td.hasOffset != 0,
         rt.kHeads * td.outPitch);
  mskv::quant::QPlane planes[2];
  for (int32_t p = 0; p < 2; ++p) {
    planes[p].heads = rt.kHeads;
    planes[p].headSize = rt.headSize;
    planes[p].pitch = rt.pitch;
    planes[p].outPitch = td.outPitch;
    planes[p].cg = mskv::rope::CacheGeomOf(rt, rt.kHeads);
    planes[p].cg.segElems = rt.cacheSegElems;  // NZ caches: C0 (rope::CacheHeadsOut)
    planes[p].scBlock = td.scBlockStride;
    planes[p].scSlot = td.scSlotStride;
    planes[p].kind = p == 0 ? td.kScaleKind : td.vScaleKind;
  }
  if constexpr (!DYN) {
    q.LoadStatic(0, planes[0], kScale, kOffset);
    q.LoadStatic(1, planes[1], vScale, vOffset);
    q.StaticReady();
  }

  AscendC::GlobalTensor<T> qIn, kIn, vIn, qOut, kOut;
  qIn.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(query));
  kIn.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key));
  vIn.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value));
  qOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(queryOut));
  kOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(keyOut));
  AscendC::GlobalTensor<int8_t> dst[2];
  dst[0].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(keyCache));
  dst[1].SetGlobalBuffer(vPlane);
  AscendC::GlobalTensor<float> sc[2];
  sc[0].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(kScaleCache));
  sc[1].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(vScaleCache));
  mskv::quant::QuantSink<Quant> kSink{&q, 0, &planes[0], &dst[0], &sc[0]};

  mskv::rope::TokenBatches<decltype(td.rope), mskv::rope::RopeEngine<T, C, NEOX, PAD>> tb(rt, eng, positions,
                                                                                          slotMapping);
  while (tb.Next()) {
    const mskv::rope::Batch& b = tb.b;
    mskv::rope::RotatePlaneTo<T, C, NEOX, PAD, mskv::quant::QuantSink<Quant>>(
        eng, b, qIn, qOut, rt.qHeads, rt.headsPerChunk, nullptr, tb.cc, tb.sc);
    mskv::rope::RotatePlaneTo<T, C, NEOX, PAD>(eng, b, kIn, kOut, rt.kHeads, rt.headsPerChunk, &kSink, tb.cc, tb.sc);
    for (int64_t i = 0; i < b.n; ++i) {
      if (b.write[i]) q.Row(1, planes[1], vIn, b.first + i, dst[1], b.slot[i], sc[1]);
    }
  }
}

}  // namespace

extern "C" __global__ __aicore__ void mskv_rope_reshape_and_cache_quant(
    GM_ADDR positions, GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR cos_sin_cache, GM_ADDR key_cache,
    GM_ADDR value_cache, GM_ADDR slot_mapping, GM_ADDR k_scale, GM_ADDR v_scale, GM_ADDR k_offset, GM_ADDR v_offset,
    GM_ADDR k_scale_cache, GM_ADDR v_scale_cache, GM_ADDR query_out, GM_ADDR key_out, GM_ADDR workspace,
    GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, DYN, PAD, BNSD, T, TABLE_IS_DATA, NEOX)                                                     \
  if (TILING_KEY_IS(K))                                                                                           \
    return RunRopeCacheQuant<T, mskv::DataOrFloat<TABLE_IS_DATA, T>, NEOX, PAD, DYN, BNSD>(                        \
        positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping, k_scale, v_scale,       \
        k_offset, v_offset, k_scale_cache, v_scale_cache, query_out, key_out, td);
  MSKV_KEYS_ROPE_RESHAPE_AND_CACHE_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
