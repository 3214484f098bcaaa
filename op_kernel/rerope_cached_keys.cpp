// ReropeCachedKeys AscendC kernel: for each entry i, the cached key heads at slot_mapping[i] (rotated for
// old_positions[i]) are rotated for new_positions[i] instead, in place, in one pass
// (ms_kvcache.rerope_cached_keys).
//
// GM arguments follow the OpDef (op_host/rerope_cached_keys.cpp): inputs key_cache, slot_mapping,
// old_positions, new_positions, cos_sin_cache, output status (never written), then workspace and tiling.
// Each core takes its main/tail share of the entries and collects batches of valid ones (slot in
// [0, num_blocks * block_size), both positions in [0, max_position)); invalid entries are never read.
//
// Delta rotation R(new) R(old)^-1 per angle index, in fp32 vector ops on the expanded table rows:
//   den = co*co + so*so,  cd = (cn*co + sn*so) / den,  sd = (sn*co - cn*so) / den
// (the cpu backend evaluates the same formula in fp64 and rounds cd / sd once to fp32, so the two can
// differ in the last bits of cd / sd; see docs/rope.md). With old == new, the numerator of cd is the
// same fp32 computation as den, so cd = 1 and sd = 0 exactly and the entry is left unchanged (up to the
// sign of a zero). An entry whose den has a zero (a table row with cos^2 + sin^2 == 0, no inverse) is
// skipped: min(den) over the row is taken by a halving tree of vector Mins and checked on the scalar
// unit. The heads are then rotated with (cd, sd) as in op_kernel/rope_kernel_common.h and written back
// (the pass-through elements rd..D-1 unchanged).
//
// Tiling key = pad * 10000 + layout (0 BSND or rank 3, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32) * 100
// + table (0 float32, 1 the data dtype) * 10 + style (1 NeoX, 0 GPT-J); the layout only changes strides.
#include "kernel_operator.h"
#include "rope_kernel_common.h"

namespace mskv {
namespace rope {

constexpr float kFloatMax = 3.4028234663852886e38f;

template <typename T, typename C, bool NEOX, bool PAD, typename TD>
__aicore__ inline void RunRerope(GM_ADDR keyCache, GM_ADDR slotMapping, GM_ADDR oldPositions, GM_ADDR newPositions,
                                 GM_ADDR table, const TD& td) {
  AscendC::TPipe pipe;
  RotGeom g;
  g.headSize = td.headSize;
  g.pitch = td.pitch;
  g.rotaryDim = td.rotaryDim;
  g.csPitch = td.csPitch;
  g.rotPitch = td.rotPitch;
  g.maxPosition = td.maxPosition;
  RopeEngine<T, C, NEOX, PAD> eng;
  eng.Init(&pipe, table, g, td.chunkElems, td.batch, td.partnerRows, 6);
  AscendC::TBuf<AscendC::TPosition::VECCALC> treeBuf;
  pipe.InitBuffer(treeBuf, static_cast<uint32_t>(td.treeElems * 4));

  IndexGm slots;
  IndexGm oldPos;
  IndexGm newPos;
  slots.Init(slotMapping, td.slotIs64);
  oldPos.Init(oldPositions, td.posIs64);
  newPos.Init(newPositions, td.posIs64);
  AscendC::GlobalTensor<T> cache;
  cache.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(keyCache));
  CacheGeom cg;
  cg.numSlots = td.numSlots;
  cg.blockSize = td.blockSize;
  cg.blockStride = td.blockStride;
  cg.slotStride = td.slotStride;
  cg.headStride = td.headStride;
  cg.heads = td.heads;

  // expanded rows: A = cos_old, B = sin_old, Cn = cos_new, Dn = sin_new, E = den, F = scratch
  AscendC::LocalTensor<float> A = eng.RotSet(0);
  AscendC::LocalTensor<float> F = eng.RotSet(1);
  AscendC::LocalTensor<float> B = eng.RotSet(2);
  AscendC::LocalTensor<float> Cn = eng.RotSet(3);
  AscendC::LocalTensor<float> Dn = eng.RotSet(4);
  AscendC::LocalTensor<float> E = eng.RotSet(5);
  AscendC::LocalTensor<float> tree = treeBuf.Get<float>();

  int64_t begin = 0;
  int64_t end = 0;
  CoreRange(td.formerNum, td.formerLen, td.tailLen, &begin, &end);
  end = MinI64(end, td.numEntries);
  int64_t oldRows[kMaxBatch];
  int64_t newRows[kMaxBatch];
  int64_t slot[kMaxBatch];
  bool ok[kMaxBatch];
  const int64_t H = td.heads;
  const int64_t P = td.pitch;
  int64_t e = begin;
  while (e < end) {
    int64_t n = 0;
    for (; e < end && n < td.batch; ++e) {
      const int64_t s = slots.Get(e);
      if (s < 0 || s >= td.numSlots) continue;
      const int64_t po = oldPos.Get(e);
      const int64_t pn = newPos.Get(e);
      if (po < 0 || po >= td.maxPosition || pn < 0 || pn >= td.maxPosition) continue;
      oldRows[n] = po;
      newRows[n] = pn;
      slot[n] = s;
      ++n;
    }
    if (n == 0) break;
    // ---- delta cos / sin, expanded: cd -> A, sd -> F
    eng.GatherTable(n, oldRows, A, B);
    eng.GatherTable(n, newRows, Cn, Dn);
    const int32_t cnt = static_cast<int32_t>(eng.RotElems(n));
    AscendC::Mul(E, A, A, cnt);     // co*co
    AscendC::Mul(F, B, B, cnt);     // so*so
    AscendC::Add(E, E, F, cnt);     // den
    AscendC::Mul(F, Dn, A, cnt);    // sn*co
    AscendC::Mul(A, Cn, A, cnt);    // cn*co
    AscendC::Mul(Cn, Cn, B, cnt);   // cn*so
    AscendC::Mul(B, Dn, B, cnt);    // sn*so
    AscendC::Add(A, A, B, cnt);     // cn*co + sn*so
    AscendC::Sub(F, F, Cn, cnt);    // sn*co - cn*so
    AscendC::Div(A, A, E, cnt);     // cd
    AscendC::Div(F, F, E, cnt);     // sd
    for (int64_t i = 0; i < n; ++i) {  // den > 0 everywhere on the row (NaN: no)
      AscendC::Duplicate(tree, kFloatMax, static_cast<int32_t>(td.treeElems));
      AscendC::DataCopy(tree, E[static_cast<uint32_t>(i * td.rotPitch)], static_cast<uint32_t>(td.rotPitch));
      for (int64_t len = td.treeElems; len > 8;) {
        len /= 2;
        AscendC::Min(tree, tree, tree[static_cast<uint32_t>(len)], static_cast<int32_t>(len));
      }
      float m = tree.GetValue(0);
      for (uint32_t l = 1; l < 8; ++l) {
        const float v = tree.GetValue(l);
        m = (v < m || v != v) ? v : m;
      }
      ok[i] = m > 0.0f;
    }
    // ---- the heads of every entry: read, rotate, write back
    const bool whole = H <= td.headsPerChunk;
    const int64_t nChunks = whole ? 1 : n;
    for (int64_t c = 0; c < nChunks; ++c) {
      const int64_t nt = whole ? n : 1;
      const int64_t ti0 = whole ? 0 : c;
      for (int64_t h0 = 0; h0 < H; h0 += td.headsPerChunk) {
        const int64_t hc = MinI64(td.headsPerChunk, H - h0);
        AscendC::LocalTensor<T> xT = eng.AllocIn();
        for (int64_t i = 0; i < nt; ++i) {
          HeadsCopy<T, PAD>(cache[SlotOffset(cg, slot[ti0 + i], h0)], xT[static_cast<uint32_t>(i * hc * P)], hc,
                            td.headSize, P, cg.headStride, false);
        }
        xT = eng.ReadyIn(xT);
        AscendC::LocalTensor<T> yT = eng.AllocOut();
        eng.Rotate(xT, yT, nt, hc, ti0, A, F);
        yT = eng.ReadyOut(yT);
        eng.FreeIn(xT);
        for (int64_t i = 0; i < nt; ++i) {
          if (!ok[ti0 + i]) continue;
          HeadsCopy<T, PAD>(cache[SlotOffset(cg, slot[ti0 + i], h0)], yT[static_cast<uint32_t>(i * hc * P)], hc,
                            td.headSize, P, cg.headStride, true);
        }
        eng.FreeOut(yT);
      }
    }
  }
}

}  // namespace rope
}  // namespace mskv

#define MSKV_ROPE_RUN(T, C, NEOX, PAD) \
  mskv::rope::RunRerope<T, C, NEOX, PAD>(key_cache, slot_mapping, old_positions, new_positions, cos_sin_cache, td)

extern "C" __global__ __aicore__ void rerope_cached_keys(GM_ADDR key_cache, GM_ADDR slot_mapping, GM_ADDR old_positions,
                                                         GM_ADDR new_positions, GM_ADDR cos_sin_cache, GM_ADDR status,
                                                         GM_ADDR workspace, GM_ADDR tiling) {
  (void)status;
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  if (TILING_KEY_IS(100) || TILING_KEY_IS(1100)) return MSKV_ROPE_RUN(half, float, false, false);
  if (TILING_KEY_IS(101) || TILING_KEY_IS(1101)) return MSKV_ROPE_RUN(half, float, true, false);
  if (TILING_KEY_IS(110) || TILING_KEY_IS(1110)) return MSKV_ROPE_RUN(half, half, false, false);
  if (TILING_KEY_IS(111) || TILING_KEY_IS(1111)) return MSKV_ROPE_RUN(half, half, true, false);
#if MSKV_HAS_BF16_AND_PAD
  if (TILING_KEY_IS(200) || TILING_KEY_IS(1200)) return MSKV_ROPE_RUN(bfloat16_t, float, false, false);
  if (TILING_KEY_IS(201) || TILING_KEY_IS(1201)) return MSKV_ROPE_RUN(bfloat16_t, float, true, false);
  if (TILING_KEY_IS(210) || TILING_KEY_IS(1210)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, false, false);
  if (TILING_KEY_IS(211) || TILING_KEY_IS(1211)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, true, false);
#endif
  if (TILING_KEY_IS(300) || TILING_KEY_IS(1300)) return MSKV_ROPE_RUN(float, float, false, false);
  if (TILING_KEY_IS(301) || TILING_KEY_IS(1301)) return MSKV_ROPE_RUN(float, float, true, false);
#if MSKV_HAS_BF16_AND_PAD
  if (TILING_KEY_IS(10100) || TILING_KEY_IS(11100)) return MSKV_ROPE_RUN(half, float, false, true);
  if (TILING_KEY_IS(10101) || TILING_KEY_IS(11101)) return MSKV_ROPE_RUN(half, float, true, true);
  if (TILING_KEY_IS(10110) || TILING_KEY_IS(11110)) return MSKV_ROPE_RUN(half, half, false, true);
  if (TILING_KEY_IS(10111) || TILING_KEY_IS(11111)) return MSKV_ROPE_RUN(half, half, true, true);
  if (TILING_KEY_IS(10200) || TILING_KEY_IS(11200)) return MSKV_ROPE_RUN(bfloat16_t, float, false, true);
  if (TILING_KEY_IS(10201) || TILING_KEY_IS(11201)) return MSKV_ROPE_RUN(bfloat16_t, float, true, true);
  if (TILING_KEY_IS(10210) || TILING_KEY_IS(11210)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, false, true);
  if (TILING_KEY_IS(10211) || TILING_KEY_IS(11211)) return MSKV_ROPE_RUN(bfloat16_t, bfloat16_t, true, true);
  if (TILING_KEY_IS(10300) || TILING_KEY_IS(11300)) return MSKV_ROPE_RUN(float, float, false, true);
  if (TILING_KEY_IS(10301) || TILING_KEY_IS(11301)) return MSKV_ROPE_RUN(float, float, true, true);
#endif
}
#undef MSKV_ROPE_RUN
