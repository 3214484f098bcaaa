// MskvReropeCachedKeys AscendC kernel: for each entry i, the cached key heads at slot_mapping[i] (rotated for
// old_positions[i]) are rotated for new_positions[i] instead, in place, in one pass
// (ms_kvcache.rerope_cached_keys).
//
// GM arguments follow the OpDef (op_host/rerope_cached_keys.cpp): inputs key_cache, slot_mapping,
// old_positions, new_positions, cos_sin_cache, output status (never written), then workspace and tiling.
// key_cache is the only tensor written, so no written-memory alias check is needed (mskv::TrapOnAliasedWrites).
// Each core takes its main/tail share of the entries and collects batches of valid ones (slot in
// [0, num_blocks * block_size), both positions in [0, max_position)); invalid entries are never read.
//
// Delta rotation R(new) R(old)^-1 per angle index, the cpu backend's formula
//   den = co*co + so*so,  cd = (cn*co + sn*so) / den,  sd = (sn*co - cn*so) / den
// evaluated in double-float (op_kernel/rope_dd.h: exact products, ~48-bit sums, a corrected quotient)
// on compact [entries, rd/2] rows and rounded once to fp32, which is what the cpu backend's fp64
// evaluation gives too (both are the correctly rounded value except when the exact quotient lies
// within ~2^-40 of a rounding boundary). The rows are then expanded to rd columns by a Gather. With
// old == new the numerator equals den bit for bit, so cd = 1 and sd = 0 exactly and the entry is left
// unchanged (up to the sign of a zero). An entry whose den has a zero (a table row with
// cos^2 + sin^2 == 0, no inverse) is skipped: min(den) over the row is taken by a halving tree of
// vector Mins and checked on the scalar unit. The heads are then rotated with (cd, sd) as in
// op_kernel/rope_kernel_common.h and written back (the pass-through elements rd..D-1 unchanged).
//
// Tiling key = pad * 10000 + layout (0 BSND or rank 3, 1 BNSD) * 1000 + dtype (1 fp16, 2 bf16, 3 fp32) * 100
// + table (0 float32, 1 the data dtype) * 10 + style (1 NeoX, 0 GPT-J); the layout only changes strides.
#include "kernel_operator.h"
#include "rope_dd.h"
#include "rope_kernel_common.h"
#include "mskv_tiling_keys.h"

namespace mskv {
namespace rope {

constexpr float kFloatMax = 3.4028234663852886e38f;

// Compact double-float work rows: kWork arrays of batch * halfPitch fp32 each (see DeltaRows).
constexpr int64_t kWork = 25;

// Byte-offset tables of the compact gathers: cmp[t * hp + i] = (t * csPitch + i) * 4 (table row t,
// column i < rd / 2, else column 0) and exp[t * rotPitch + j] = (t * hp + i(j)) * 4 (compact row t,
// pair index i(j) of column j < rd, else 0). Row 0 by scalar writes, the others by int32 Adds.
template <bool NEOX>
__aicore__ inline void BuildCompactTables(const AscendC::LocalTensor<uint32_t>& cmp,
                                          const AscendC::LocalTensor<uint32_t>& exp, int64_t batch, int64_t half,
                                          int64_t hp, int64_t csPitch, int64_t rd, int64_t rotPitch) {
  for (int64_t i = 0; i < hp; ++i) {
    cmp.SetValue(static_cast<uint32_t>(i), static_cast<uint32_t>((i < half ? i : 0) * 4));
  }
  for (int64_t j = 0; j < rotPitch; ++j) {
    const int64_t idx = j < rd ? (NEOX ? j % half : j / 2) : 0;
    exp.SetValue(static_cast<uint32_t>(j), static_cast<uint32_t>(idx * 4));
  }
  AscendC::LocalTensor<int32_t> cmpI = cmp.template ReinterpretCast<int32_t>();
  AscendC::LocalTensor<int32_t> expI = exp.template ReinterpretCast<int32_t>();
  for (int64_t t = 1; t < batch; ++t) {
    AscendC::Adds(cmpI[static_cast<uint32_t>(t * hp)], cmpI, static_cast<int32_t>(t * csPitch * 4),
                  static_cast<int32_t>(hp));
    AscendC::Adds(expI[static_cast<uint32_t>(t * rotPitch)], expI, static_cast<int32_t>(t * hp * 4),
                  static_cast<int32_t>(rotPitch));
  }
}

template <typename T, typename C, bool NEOX, bool PAD, typename TD>
__aicore__ inline void RunRerope(GM_ADDR keyCache, GM_ADDR slotMapping, GM_ADDR oldPositions, GM_ADDR newPositions,
                                 GM_ADDR table, const TD& td) {
  AscendC::TPipe pipe;
  RopeEngine<T, C, NEOX, PAD> eng;
  eng.Init(&pipe, table, RotGeomOf(td), td.chunkElems, td.batch, td.partnerRows, 2);
  const int64_t hp = td.halfPitch;
  const int64_t stride = td.batch * hp;  // elements per compact work array
  AscendC::TBuf<AscendC::TPosition::VECCALC> workBuf;
  AscendC::TBuf<AscendC::TPosition::VECCALC> cmpBuf;
  AscendC::TBuf<AscendC::TPosition::VECCALC> expBuf;
  AscendC::TBuf<AscendC::TPosition::VECCALC> treeBuf;
  pipe.InitBuffer(workBuf, static_cast<uint32_t>(kWork * stride * 4));
  pipe.InitBuffer(cmpBuf, static_cast<uint32_t>(stride * 4));
  pipe.InitBuffer(expBuf, static_cast<uint32_t>(td.batch * td.rotPitch * 4));
  pipe.InitBuffer(treeBuf, static_cast<uint32_t>(td.treeElems * 4));
  AscendC::LocalTensor<uint32_t> cmpTab = cmpBuf.Get<uint32_t>();
  AscendC::LocalTensor<uint32_t> expTab = expBuf.Get<uint32_t>();
  BuildCompactTables<NEOX>(cmpTab, expTab, td.batch, td.rotaryDim / 2, hp, td.csPitch, td.rotaryDim, td.rotPitch);

  IndexGm slots;
  IndexGm oldPos;
  IndexGm newPos;
  slots.Init(slotMapping, td.slotIs64);
  oldPos.Init(oldPositions, td.posIs64);
  newPos.Init(newPositions, td.posIs64);
  AscendC::GlobalTensor<T> cache;
  cache.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(keyCache));
  const CacheGeom cg = CacheGeomOf(td, td.heads);

  // kWork rows of `stride` fp32 each, carved from workBuf (stride is a multiple of 8: 32-byte offsets)
  const uint32_t rowLen = static_cast<uint32_t>(stride);
  const uint32_t rowBytes = rowLen * 4;
  // cos / sin of the old and the new position
  AscendC::LocalTensor<float> Co = workBuf.GetWithOffset<float>(rowLen, 0);
  AscendC::LocalTensor<float> So = workBuf.GetWithOffset<float>(rowLen, 1 * rowBytes);
  AscendC::LocalTensor<float> Cn = workBuf.GetWithOffset<float>(rowLen, 2 * rowBytes);
  AscendC::LocalTensor<float> Sn = workBuf.GetWithOffset<float>(rowLen, 3 * rowBytes);
  // their Veltkamp splits
  AscendC::LocalTensor<float> CoH = workBuf.GetWithOffset<float>(rowLen, 4 * rowBytes);
  AscendC::LocalTensor<float> CoL = workBuf.GetWithOffset<float>(rowLen, 5 * rowBytes);
  AscendC::LocalTensor<float> SoH = workBuf.GetWithOffset<float>(rowLen, 6 * rowBytes);
  AscendC::LocalTensor<float> SoL = workBuf.GetWithOffset<float>(rowLen, 7 * rowBytes);
  AscendC::LocalTensor<float> CnH = workBuf.GetWithOffset<float>(rowLen, 8 * rowBytes);
  AscendC::LocalTensor<float> CnL = workBuf.GetWithOffset<float>(rowLen, 9 * rowBytes);
  AscendC::LocalTensor<float> SnH = workBuf.GetWithOffset<float>(rowLen, 10 * rowBytes);
  AscendC::LocalTensor<float> SnL = workBuf.GetWithOffset<float>(rowLen, 11 * rowBytes);
  // exact products p + e
  AscendC::LocalTensor<float> P1 = workBuf.GetWithOffset<float>(rowLen, 12 * rowBytes);
  AscendC::LocalTensor<float> E1 = workBuf.GetWithOffset<float>(rowLen, 13 * rowBytes);
  AscendC::LocalTensor<float> P2 = workBuf.GetWithOffset<float>(rowLen, 14 * rowBytes);
  AscendC::LocalTensor<float> E2 = workBuf.GetWithOffset<float>(rowLen, 15 * rowBytes);
  // scratch
  AscendC::LocalTensor<float> S = workBuf.GetWithOffset<float>(rowLen, 16 * rowBytes);
  AscendC::LocalTensor<float> Er = workBuf.GetWithOffset<float>(rowLen, 17 * rowBytes);
  AscendC::LocalTensor<float> Tt = workBuf.GetWithOffset<float>(rowLen, 18 * rowBytes);
  // den, cos and sin numerators (double-float)
  AscendC::LocalTensor<float> DNh = workBuf.GetWithOffset<float>(rowLen, 19 * rowBytes);
  AscendC::LocalTensor<float> DNl = workBuf.GetWithOffset<float>(rowLen, 20 * rowBytes);
  AscendC::LocalTensor<float> NCh = workBuf.GetWithOffset<float>(rowLen, 21 * rowBytes);
  AscendC::LocalTensor<float> NCl = workBuf.GetWithOffset<float>(rowLen, 22 * rowBytes);
  AscendC::LocalTensor<float> NSh = workBuf.GetWithOffset<float>(rowLen, 23 * rowBytes);
  AscendC::LocalTensor<float> NSl = workBuf.GetWithOffset<float>(rowLen, 24 * rowBytes);
  AscendC::LocalTensor<float> cc = eng.RotSet(0);
  AscendC::LocalTensor<float> sc = eng.RotSet(1);
  AscendC::LocalTensor<float> tree = treeBuf.Get<float>();

  int64_t begin = 0;
  int64_t end = 0;
  RowRange(td, td.numEntries, &begin, &end);
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
    // ---- delta cos / sin in double-float on compact rows: cd -> Co, sd -> So, then expanded into cc / sc
    eng.GatherTable(n, oldRows, Co, So, cmpTab, hp);
    eng.GatherTable(n, newRows, Cn, Sn, cmpTab, hp);
    const int32_t cnt = static_cast<int32_t>(n * hp);
    dd::Split(Co, CoH, CoL, Tt, cnt);
    dd::Split(So, SoH, SoL, Tt, cnt);
    dd::Split(Cn, CnH, CnL, Tt, cnt);
    dd::Split(Sn, SnH, SnL, Tt, cnt);
    dd::Prod(Co, CoH, CoL, Co, CoH, CoL, P1, E1, Tt, cnt);  // co*co
    dd::Prod(So, SoH, SoL, So, SoH, SoL, P2, E2, Tt, cnt);  // so*so
    dd::Add2(P1, E1, P2, E2, DNh, DNl, S, Er, Tt, cnt);
    dd::Prod(Cn, CnH, CnL, Co, CoH, CoL, P1, E1, Tt, cnt);  // cn*co
    dd::Prod(Sn, SnH, SnL, So, SoH, SoL, P2, E2, Tt, cnt);  // sn*so
    dd::Add2(P1, E1, P2, E2, NCh, NCl, S, Er, Tt, cnt);
    dd::Prod(Sn, SnH, SnL, Co, CoH, CoL, P1, E1, Tt, cnt);  // sn*co
    dd::Prod(Cn, CnH, CnL, So, SoH, SoL, P2, E2, Tt, cnt);  // cn*so
    AscendC::Muls(P2, P2, -1.0f, cnt);
    AscendC::Muls(E2, E2, -1.0f, cnt);
    dd::Add2(P1, E1, P2, E2, NSh, NSl, S, Er, Tt, cnt);
    dd::Split(DNh, CoH, CoL, Tt, cnt);
    dd::Quotient(NCh, NCl, DNh, DNl, CoH, CoL, Co, SoH, SoL, CnH, CnL, SnH, SnL, cnt);  // cd
    dd::Quotient(NSh, NSl, DNh, DNl, CoH, CoL, So, SoH, SoL, CnH, CnL, SnH, SnL, cnt);  // sd
    const uint32_t expCount = static_cast<uint32_t>(n * td.rotPitch);
    AscendC::Gather(cc, Co, expTab, 0, expCount);
    AscendC::Gather(sc, So, expTab, 0, expCount);
    for (int64_t i = 0; i < n; ++i) {  // den > 0 on the whole row (NaN: no)
      AscendC::Duplicate(tree, kFloatMax, static_cast<int32_t>(td.treeElems));
      AscendC::DataCopy(tree, DNh[static_cast<uint32_t>(i * hp)], static_cast<uint32_t>(hp));
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
        eng.Rotate(xT, yT, nt, hc, ti0, cc, sc);
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


extern "C" __global__ __aicore__ void mskv_rerope_cached_keys(GM_ADDR key_cache, GM_ADDR slot_mapping, GM_ADDR old_positions,
                                                         GM_ADDR new_positions, GM_ADDR cos_sin_cache, GM_ADDR status,
                                                         GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, PAD, LAYOUT, T, TABLE_IS_DATA, NEOX) \
  if (TILING_KEY_IS(K)) return mskv::rope::RunRerope<T, mskv::DataOrFloat<TABLE_IS_DATA, T>, NEOX, PAD> \
      (key_cache, slot_mapping, old_positions, new_positions, cos_sin_cache, td);
  MSKV_KEYS_REROPE_CACHED_KEYS(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
