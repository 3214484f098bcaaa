// Kernel body of MskvRopeReshapeAndCache and MskvRopeReshapeAndCacheMerged (op_kernel/rope_kernel_common.h has
// the engine). Per core: its main/tail share of the T' rows, in batches of `batch` tokens:
//   positions (and, for rows < T, slots) read with GetValue; cos/sin rows gathered by position;
//   query rows -> rotated -> query_out; key rows -> rotated -> key_out and, for the written tokens,
//   the key cache; value rows -> the value cache (written tokens only; nothing is loaded for a batch
//   without one). A token whose position is outside [0, max_position) gets zero query_out / key_out
//   rows and is not cached; a slot < 0 or >= num_blocks * block_size is skipped. The cache layout
//   (BSND / BNSD / NZ) only changes the strides (tiling data), not the code. Written tensors that share memory
//   (one Parameter as both caches: possible in a graph) stop the launch before any write
//   (TrapOnAliasedWrites, op_kernel/kv_copy_common.h).
#ifndef MS_KVCACHE_OP_KERNEL_ROPE_CACHE_KERNEL_H_
#define MS_KVCACHE_OP_KERNEL_ROPE_CACHE_KERNEL_H_

#include "kernel_operator.h"
#include "rope_kernel_common.h"

namespace mskv {
namespace rope {

template <typename T, typename C, bool NEOX, bool PAD, typename TD>
__aicore__ inline void RunRopeCache(GM_ADDR positions, GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR table,
                                    GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR slotMapping, GM_ADDR queryOut,
                                    GM_ADDR keyOut, const TD& td) {
  // the written tensors (the key and value cache planes, query_out, key_out) must not share memory: one
  // Parameter as key_cache and value_cache is possible in a graph; stop the launch before any write
  const int64_t planeElems = td.blockSize > 0 ? (td.numSlots / td.blockSize) * td.blockStride : 0;
  GmSpans<4> spans;
  spans.Add(reinterpret_cast<__gm__ T*>(keyCache), planeElems, true);
  spans.Add(reinterpret_cast<__gm__ T*>(valueCache) + td.vPlaneOffset, planeElems, true);
  spans.Add(reinterpret_cast<__gm__ T*>(queryOut), td.numRows * td.qHeads * td.headSize, true);
  spans.Add(reinterpret_cast<__gm__ T*>(keyOut), td.numRows * td.kHeads * td.headSize, true);
  TrapOnAliasedWrites(spans);
  AscendC::TPipe pipe;
  RopeEngine<T, C, NEOX, PAD> eng;
  eng.Init(&pipe, table, RotGeomOf(td), td.chunkElems, td.batch, td.partnerRows, 2);
  AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2> valueQue;
  pipe.InitBuffer(valueQue, 2, static_cast<uint32_t>(td.copyElems * static_cast<int64_t>(sizeof(T))));

  AscendC::GlobalTensor<T> q, k, v, qOut, kOut, kCache, vCache;
  q.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(query));
  k.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key));
  v.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value));
  qOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(queryOut));
  kOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(keyOut));
  kCache.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(keyCache));
  vCache.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(valueCache) + td.vPlaneOffset);
  CacheGeom cg = CacheGeomOf(td, td.kHeads);
  cg.segElems = td.cacheSegElems;  // NZ caches: C0 (CacheHeadsOut)

  TokenBatches<TD, RopeEngine<T, C, NEOX, PAD>> tb(td, eng, positions, slotMapping);
  while (tb.Next()) {
    RotatePlane<T, C, NEOX, PAD>(eng, tb.b, q, qOut, td.qHeads, td.headsPerChunk, nullptr, cg, tb.cc, tb.sc);
    RotatePlane<T, C, NEOX, PAD>(eng, tb.b, k, kOut, td.kHeads, td.headsPerChunk, &kCache, cg, tb.cc, tb.sc);
    CopyPlane<T, PAD>(valueQue, tb.b, v, td.kHeads, td.headSize, td.pitch, td.headsPerChunk, vCache, cg);
  }
}

}  // namespace rope
}  // namespace mskv

#endif  // MS_KVCACHE_OP_KERNEL_ROPE_CACHE_KERNEL_H_
