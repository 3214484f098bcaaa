// Device-side engine of the fused RoPE-write kernels (rope_reshape_and_cache, rope_reshape_and_cache_merged,
// rope_concat_and_cache_mla, rerope_cached_keys).
//
// Layout. Every rotated tensor is handled as "head rows" of D = head_size elements. In UB a head row
// occupies P elements (D rounded up to 32 bytes, and to a multiple of 8 so that its fp32 copy is 32-byte
// aligned too); rows whose bytes are not a multiple of 32 are moved with DataCopyPad (one burst per
// row, A2/A3 only). A chunk is up to `chunkElems / P` head rows: all heads of a batch of tokens, or a
// group of heads of one token when a token does not fit.
//
// Rotation (vLLM rotary_embedding). For a pair (x, y) with angle index i:
//     x' = x*cos_i - y*sin_i        y' = y*cos_i + x*sin_i
// computed in fp32 exactly as the cpu backend does (cpu_kernel/rope_body.inl): two products, each
// rounded to fp32, and one subtraction / addition, then one rounding to the output dtype (RINT).
// Vector formulation, per chunk (X = the rows in fp32, CAST_NONE from fp16 / bf16):
//   XS = Gather(X, partner)     partner(j) = j +- rd/2 (NeoX) or j ^ 1 (GPT-J), j < rd; j itself above
//   Y  = X * cc,  XS = XS * sc  cc[j] = cos_{i(j)}, sc[j] = sin_{i(j)}: the token's table row expanded to
//                               rd columns by a Gather (i(j) = j mod rd/2 for NeoX, j / 2 for GPT-J), and
//                               broadcast over the token's heads with a source repeat stride of 0
//   Y = Y - XS on the "first" columns (NeoX j < rd/2, GPT-J even j), Y = Y + XS on the others
// so output j is fl(fl(x_j * cos) -/+ fl(partner_j * sin)), bit for bit the cpu backend's value. The
// column selections are bit masks of the repeat form (one repeat = one head row, 64 fp32 columns per
// instruction, so rd is cut in groups of 64 columns). Only the rotated columns are written back: the
// output row is first a copy of the input row (UB -> UB), so the elements rd..D-1 pass through bit for
// bit (NaN payloads included).
//
// Device subset only: no std::, no exceptions, no heap, no printf.
#ifndef MS_KVCACHE_OP_KERNEL_ROPE_KERNEL_COMMON_H_
#define MS_KVCACHE_OP_KERNEL_ROPE_KERNEL_COMMON_H_

#include "kernel_operator.h"
#include "kv_copy_common.h"

namespace mskv {
namespace rope {

constexpr int64_t kMaxBatch = 64;      // = mskv_rope_tiling::kMaxBatch (op_host/rope_tiling_common.h)
constexpr int64_t kCols = 64;          // fp32 elements of one vector repeat
constexpr int32_t kMaxGroups = 32;     // rotary_dim <= head_size <= 2040 -> at most 32 groups of 64 columns
constexpr int64_t kMaxRepeat = 255;    // repeatTime is uint8
constexpr int64_t kMaxBurst = 4095;    // DataCopyParams / DataCopyExtParams blockCount

// positions / slot_mapping: int32 or int64, chosen at run time by the tiling (posIs64 / slotIs64).
class IndexGm {
 public:
  __aicore__ inline void Init(GM_ADDR p, int64_t is64) {
    is64_ = is64 != 0;
    g32_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(p));
    g64_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(p));
  }
  __aicore__ inline int64_t Get(int64_t i) const {
    return is64_ ? static_cast<int64_t>(g64_.GetValue(static_cast<uint64_t>(i)))
                 : static_cast<int64_t>(g32_.GetValue(static_cast<uint64_t>(i)));
  }

 private:
  AscendC::GlobalTensor<int32_t> g32_;
  AscendC::GlobalTensor<int64_t> g64_;
  bool is64_ = false;
};

// Geometry of the rotation (from the tiling data).
struct RotGeom {
  int64_t headSize;     // D
  int64_t pitch;        // P
  int64_t rotaryDim;    // rd
  int64_t csPitch;      // UB elements per gathered table row (table dtype)
  int64_t rotPitch;     // fp32 elements per expanded cos / sin row
  int64_t maxPosition;  // table rows
};

// Paged cache plane: slot s, head h starts at (s / bs) * blockStride + (s % bs) * slotStride + h * headStride.
// An NZ plane [nb, H*D/C0, bs, C0] (segElems = C0 > 0): its "heads" are the C0-element pieces (fractal columns),
// slotStride = C0 and headStride = bs * C0 apart; a head of D elements is D / C0 of them (CacheHeadsOut).
struct CacheGeom {
  int64_t numSlots;
  int64_t blockSize;
  int64_t blockStride;
  int64_t slotStride;
  int64_t headStride;
  int64_t heads;
  int64_t segElems = 0;
};

// The rotation geometry of a RoPE tiling TD (its headSize, pitch, rotaryDim, csPitch, rotPitch and
// maxPosition fields).
template <typename TD>
__aicore__ inline RotGeom RotGeomOf(const TD& td) {
  RotGeom g;
  g.headSize = td.headSize;
  g.pitch = td.pitch;
  g.rotaryDim = td.rotaryDim;
  g.csPitch = td.csPitch;
  g.rotPitch = td.rotPitch;
  g.maxPosition = td.maxPosition;
  return g;
}

// The cache plane of a RoPE tiling TD (its numSlots, blockSize, blockStride, slotStride and headStride
// fields) with `heads` heads per slot.
template <typename TD>
__aicore__ inline CacheGeom CacheGeomOf(const TD& td, int64_t heads) {
  CacheGeom c;
  c.numSlots = td.numSlots;
  c.blockSize = td.blockSize;
  c.blockStride = td.blockStride;
  c.slotStride = td.slotStride;
  c.headStride = td.headStride;
  c.heads = heads;
  return c;
}

__aicore__ inline uint64_t LowBits(int64_t n) { return n >= 64 ? ~0ull : ((1ull << n) - 1ull); }

// Row movement GM <-> UB: `rows` rows of d elements, UB pitch p (a 32-byte multiple). p == d: one
// DataCopy; else (PAD, A2/A3) one DataCopyPad burst per row.
template <typename T, bool PAD>
__aicore__ inline void RowsIn(const AscendC::LocalTensor<T>& ub, const AscendC::GlobalTensor<T>& gm, int64_t rows,
                              int64_t d, int64_t p) {
#if MSKV_HAS_BF16_AND_PAD
  if constexpr (PAD) {
    if (p != d) {
      AscendC::DataCopyExtParams in(static_cast<uint16_t>(rows), static_cast<uint32_t>(d * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
      AscendC::DataCopyPad(ub, gm, in, noPad);
      return;
    }
  }
#endif
  (void)p;
  AscendC::DataCopy(ub, gm, static_cast<uint32_t>(rows * d));
}

template <typename T, bool PAD>
__aicore__ inline void RowsOut(const AscendC::GlobalTensor<T>& gm, const AscendC::LocalTensor<T>& ub, int64_t rows,
                               int64_t d, int64_t p) {
#if MSKV_HAS_BF16_AND_PAD
  if constexpr (PAD) {
    if (p != d) {
      AscendC::DataCopyExtParams out(static_cast<uint16_t>(rows), static_cast<uint32_t>(d * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPad(gm, ub, out);
      return;
    }
  }
#endif
  (void)p;
  AscendC::DataCopy(gm, ub, static_cast<uint32_t>(rows * d));
}

// `cnt` heads of one slot, UB rows of pitch p <-> cache heads headStride apart (BSND: contiguous,
// BNSD: block_size * D apart). toCache selects the direction.
template <typename T, bool PAD>
__aicore__ inline void HeadsCopy(const AscendC::GlobalTensor<T>& gm, const AscendC::LocalTensor<T>& ub, int64_t cnt,
                                 int64_t d, int64_t p, int64_t headStride, bool toCache) {
  const int64_t gapElems = headStride - d;
#if MSKV_HAS_BF16_AND_PAD
  if constexpr (PAD) {
    if (p != d || (gapElems * static_cast<int64_t>(sizeof(T))) % kBlockBytes != 0) {
      const uint32_t gapBytes = static_cast<uint32_t>(gapElems * static_cast<int64_t>(sizeof(T)));
      if (toCache) {
        AscendC::DataCopyExtParams out(static_cast<uint16_t>(cnt), static_cast<uint32_t>(d * sizeof(T)), 0, gapBytes,
                                       0);
        AscendC::DataCopyPad(gm, ub, out);
      } else {
        AscendC::DataCopyExtParams in(static_cast<uint16_t>(cnt), static_cast<uint32_t>(d * sizeof(T)), gapBytes, 0, 0);
        AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
        AscendC::DataCopyPad(ub, gm, in, noPad);
      }
      return;
    }
  }
#endif
  if (cnt == 1 || gapElems == 0) {
    if (toCache) AscendC::DataCopy(gm, ub, static_cast<uint32_t>(cnt * d));
    else AscendC::DataCopy(ub, gm, static_cast<uint32_t>(cnt * d));
    return;
  }
  const int64_t gapBlocks = gapElems * static_cast<int64_t>(sizeof(T)) / kBlockBytes;
  const int64_t lenBlocks = d * static_cast<int64_t>(sizeof(T)) / kBlockBytes;
  if (gapBlocks <= kMaxStrideBlocks) {
    if (toCache) {
      AscendC::DataCopyParams out(static_cast<uint16_t>(cnt), static_cast<uint16_t>(lenBlocks), 0,
                                  static_cast<uint16_t>(gapBlocks));
      AscendC::DataCopy(gm, ub, out);
    } else {
      AscendC::DataCopyParams in(static_cast<uint16_t>(cnt), static_cast<uint16_t>(lenBlocks),
                                 static_cast<uint16_t>(gapBlocks), 0);
      AscendC::DataCopy(ub, gm, in);
    }
    return;
  }
  for (int64_t h = 0; h < cnt; ++h) {
    const uint64_t g = static_cast<uint64_t>(h * headStride);
    const uint32_t u = static_cast<uint32_t>(h * p);
    if (toCache) AscendC::DataCopy(gm[g], ub[u], static_cast<uint32_t>(d));
    else AscendC::DataCopy(ub[u], gm[g], static_cast<uint32_t>(d));
  }
}

__aicore__ inline uint64_t SlotOffset(const CacheGeom& c, int64_t slot, int64_t h0) {
  const int64_t block = slot / c.blockSize;
  const int64_t inBlock = slot - block * c.blockSize;
  return static_cast<uint64_t>(block * c.blockStride + inBlock * c.slotStride + h0 * c.headStride);
}

// `hc` head rows of d elements (heads h0 .. h0 + hc - 1, UB pitch p) of the token cached at `slot`, to the
// cache plane. An NZ plane (c.segElems > 0; then p == d, d a multiple of segElems: the tiling's rule) takes
// the rows as hc * d / segElems pieces of one 32-byte unit each, headStride apart: one strided DataCopy.
template <typename T, bool PAD>
__aicore__ inline void CacheHeadsOut(const AscendC::GlobalTensor<T>& cache, const CacheGeom& c, int64_t slot,
                                     int64_t h0, const AscendC::LocalTensor<T>& ub, int64_t hc, int64_t d, int64_t p) {
  if (c.segElems > 0) {
    const int64_t per = d / c.segElems;
    HeadsCopy<T, PAD>(cache[SlotOffset(c, slot, h0 * per)], ub, hc * per, c.segElems, c.segElems, c.headStride, true);
    return;
  }
  HeadsCopy<T, PAD>(cache[SlotOffset(c, slot, h0)], ub, hc, d, p, c.headStride, true);
}

// The rotation engine: the UB buffers, the index tables and the per-batch token state.
// T: data dtype (half, bfloat16_t, float); C: cos_sin_cache dtype (float or T); NEOX: pairing;
// PAD: rows that need DataCopyPad exist (A2/A3 only).
template <typename T, typename C, bool NEOX, bool PAD>
class RopeEngine {
 public:
  __aicore__ inline RopeEngine() {}

  // chunkElems: UB elements of one rotated chunk; batch: tokens per batch; partRows: head rows the
  // partner table covers (one Gather per partRows rows); fp32Sets: fp32 buffers of batch * rotPitch
  // (>= 2: cc, sc, then scratch for the caller).
  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR table, const RotGeom& g, int64_t chunkElems, int64_t batch,
                              int64_t partRows, int64_t fp32Sets) {
    g_ = g;
    half_ = g.rotaryDim / 2;
    partRows_ = partRows;
    batch_ = batch;
    chunkElems_ = chunkElems;
    tableGm_.SetGlobalBuffer(reinterpret_cast<__gm__ C*>(table));
    const uint32_t chunkT = static_cast<uint32_t>(chunkElems * static_cast<int64_t>(sizeof(T)));
    pipe->InitBuffer(inQ_, 2, chunkT);
    pipe->InitBuffer(outQ_, 2, chunkT);
    if constexpr (!AscendC::IsSameType<T, float>::value) {
      pipe->InitBuffer(x32Buf_, static_cast<uint32_t>(chunkElems * 4));
    }
    pipe->InitBuffer(xsBuf_, static_cast<uint32_t>(chunkElems * 4));
    pipe->InitBuffer(partBuf_, static_cast<uint32_t>(partRows * g.pitch * 4));
    pipe->InitBuffer(csQ_, 1, static_cast<uint32_t>(batch * g.csPitch * static_cast<int64_t>(sizeof(C))));
    if constexpr (!AscendC::IsSameType<C, float>::value) {
      pipe->InitBuffer(cs32Buf_, static_cast<uint32_t>(batch * g.csPitch * 4));
    }
    pipe->InitBuffer(expBuf_, static_cast<uint32_t>(batch * g.rotPitch * 4));
    pipe->InitBuffer(rotBuf_, static_cast<uint32_t>(fp32Sets * batch * g.rotPitch * 4));
    BuildMasks();
    BuildTables(partRows);
  }

  // fp32 row set k (k = 0: cc, 1: sc, others: scratch of the caller), batch * rotPitch elements.
  __aicore__ inline AscendC::LocalTensor<float> RotSet(int64_t k) {
    return rotBuf_.Get<float>()[static_cast<uint32_t>(k * batch_ * g_.rotPitch)];
  }
  __aicore__ inline int64_t RotElems(int64_t n) const { return n * g_.rotPitch; }

  // Table rows rows[0..n) -> cosDst / sinDst [n, rotPitch] fp32, expanded to rd columns (see the header).
  __aicore__ inline void GatherTable(int64_t n, const int64_t* rows, const AscendC::LocalTensor<float>& cosDst,
                                     const AscendC::LocalTensor<float>& sinDst) {
    GatherTable(n, rows, cosDst, sinDst, expBuf_.Get<uint32_t>(), g_.rotPitch);
  }

  // Same with a caller's offset table: dst[t * dstPitch + j] = row t's cos (sin) element at byte
  // offsets[t * dstPitch + j] of the fp32 table row block (rows csPitch apart).
  __aicore__ inline void GatherTable(int64_t n, const int64_t* rows, const AscendC::LocalTensor<float>& cosDst,
                                     const AscendC::LocalTensor<float>& sinDst,
                                     const AscendC::LocalTensor<uint32_t>& exp, int64_t dstPitch) {
    AscendC::LocalTensor<C> cs = csQ_.template AllocTensor<C>();
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t src = static_cast<uint64_t>(rows[i] * g_.rotaryDim);
      RowsIn<C, PAD>(cs[static_cast<uint32_t>(i * g_.csPitch)], tableGm_[src], 1, g_.rotaryDim,
                     (g_.rotaryDim * static_cast<int64_t>(sizeof(C))) % kBlockBytes == 0 ? g_.rotaryDim : g_.csPitch);
    }
    csQ_.EnQue(cs);
    cs = csQ_.template DeQue<C>();
    const uint32_t count = static_cast<uint32_t>(n * dstPitch);
    if constexpr (AscendC::IsSameType<C, float>::value) {
      AscendC::Gather(cosDst, cs, exp, 0, count);
      AscendC::Gather(sinDst, cs, exp, static_cast<uint32_t>(half_ * 4), count);
    } else {
      AscendC::LocalTensor<float> cs32 = cs32Buf_.Get<float>();
      AscendC::Cast(cs32, cs, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n * g_.csPitch));
      AscendC::Gather(cosDst, cs32, exp, 0, count);
      AscendC::Gather(sinDst, cs32, exp, static_cast<uint32_t>(half_ * 4), count);
    }
    csQ_.FreeTensor(cs);
  }

  // Rotated chunk buffers (in: VECIN, out: VECOUT), chunkElems elements of T each.
  __aicore__ inline AscendC::LocalTensor<T> AllocIn() { return inQ_.template AllocTensor<T>(); }
  __aicore__ inline AscendC::LocalTensor<T> ReadyIn(const AscendC::LocalTensor<T>& t) {
    inQ_.EnQue(t);
    return inQ_.template DeQue<T>();
  }
  // FreeTensor takes a non-const LocalTensor<T>& (official kernel_tpipe.h), so these do too.
  __aicore__ inline void FreeIn(AscendC::LocalTensor<T>& t) { inQ_.FreeTensor(t); }
  __aicore__ inline AscendC::LocalTensor<T> AllocOut() { return outQ_.template AllocTensor<T>(); }
  __aicore__ inline AscendC::LocalTensor<T> ReadyOut(const AscendC::LocalTensor<T>& t) {
    outQ_.EnQue(t);
    return outQ_.template DeQue<T>();
  }
  __aicore__ inline void FreeOut(AscendC::LocalTensor<T>& t) { outQ_.FreeTensor(t); }
  // fp32 work buffer of a chunk (the fp32 copy of non-fp32 data).
  __aicore__ inline AscendC::LocalTensor<float> Work32() { return x32Buf_.Get<float>(); }

  // Rotates a chunk of nt tokens x hc heads (head rows of pitch P, token-major) from xT into yT with
  // the expanded rows cc / sc of batch tokens ti0 .. ti0 + nt - 1.
  __aicore__ inline void Rotate(const AscendC::LocalTensor<T>& xT, const AscendC::LocalTensor<T>& yT, int64_t nt,
                                int64_t hc, int64_t ti0, const AscendC::LocalTensor<float>& cc,
                                const AscendC::LocalTensor<float>& sc) {
    const int64_t P = g_.pitch;
    const int64_t rows = nt * hc;
    const uint32_t elems = static_cast<uint32_t>(rows * P);
    AscendC::LocalTensor<float> xs = xsBuf_.Get<float>();
    AscendC::LocalTensor<uint32_t> part = partBuf_.Get<uint32_t>();
    AscendC::LocalTensor<float> x;
    AscendC::LocalTensor<float> y;
    const bool partial = g_.rotaryDim < g_.headSize;
    if constexpr (AscendC::IsSameType<T, float>::value) {
      x = xT;
      y = yT;
      if (partial) AscendC::DataCopy(yT, xT, elems);  // the pass-through columns
    } else {
      x = x32Buf_.Get<float>();
      AscendC::Cast(x, xT, AscendC::RoundMode::CAST_NONE, elems);
      y = x;
    }
    for (int64_t r = 0; r < rows; r += partRows_) {  // partner columns, partRows_ head rows per Gather
      const uint32_t o = static_cast<uint32_t>(r * P);
      AscendC::Gather(xs[o], x, part, o * 4, static_cast<uint32_t>(MinI64(partRows_, rows - r) * P));
    }
    // products: per token (its cos / sin row is broadcast over its heads: source repeat stride 0)
    const uint8_t rep = static_cast<uint8_t>(P / 8);
    for (int64_t i = 0; i < nt; ++i) {
      for (int32_t gi = 0; gi < groups_; ++gi) {
        const uint32_t off = static_cast<uint32_t>(i * hc * P + gi * kCols);
        const uint32_t coff = static_cast<uint32_t>((ti0 + i) * g_.rotPitch + gi * kCols);
        MulRows(y[off], x[off], cc[coff], colMask_[gi], hc, rep);
        MulRows(xs[off], xs[off], sc[coff], colMask_[gi], hc, rep);
      }
    }
    // y -= xs on the "first" columns of each pair, y += xs on the others
    for (int32_t gi = 0; gi < groups_; ++gi) {
      const uint32_t off = static_cast<uint32_t>(gi * kCols);
      for (int64_t r0 = 0; r0 < rows; r0 += kMaxRepeat) {
        const uint8_t nr = static_cast<uint8_t>(MinI64(kMaxRepeat, rows - r0));
        const uint32_t o = off + static_cast<uint32_t>(r0 * P);
        AscendC::BinaryRepeatParams bp(1, 1, 1, rep, rep, rep);
        if (subMask_[gi] != 0) {
          uint64_t m[2] = {subMask_[gi], 0};
          AscendC::Sub(y[o], y[o], xs[o], m, nr, bp);
        }
        if (addMask_[gi] != 0) {
          uint64_t m[2] = {addMask_[gi], 0};
          AscendC::Add(y[o], y[o], xs[o], m, nr, bp);
        }
      }
    }
    if constexpr (!AscendC::IsSameType<T, float>::value) {
      if (!partial) {
        AscendC::Cast(yT, x, OutMode(), elems);
      } else {
        AscendC::DataCopy(yT, xT, elems);  // the pass-through columns, bit for bit
        const uint8_t repT = static_cast<uint8_t>(P * static_cast<int64_t>(sizeof(T)) / kBlockBytes);
        for (int32_t gi = 0; gi < groups_; ++gi) {
          for (int64_t r0 = 0; r0 < rows; r0 += kMaxRepeat) {
            const uint8_t nr = static_cast<uint8_t>(MinI64(kMaxRepeat, rows - r0));
            const uint32_t o = static_cast<uint32_t>(gi * kCols + r0 * P);
            uint64_t m[2] = {colMask_[gi], 0};
            AscendC::Cast(yT[o], x[o], OutMode(), m, nr, AscendC::UnaryRepeatParams(1, 1, repT, rep));
          }
        }
      }
    }
  }

  // fp32 -> T rounding: nearest even. float -> half uses CAST_NONE (= RINT; the only nearest mode
  // Ascend310P has), float -> bfloat16_t CAST_RINT (CAST_NONE does not exist for it).
  __aicore__ static inline AscendC::RoundMode OutMode() {
    if constexpr (AscendC::IsSameType<T, half>::value) return AscendC::RoundMode::CAST_NONE;
    return AscendC::RoundMode::CAST_RINT;
  }

  __aicore__ inline const RotGeom& Geom() const { return g_; }

 private:
  // dst = src0 * src1row on the masked columns of `rows` head rows; src1row is one row for all of them.
  __aicore__ inline void MulRows(const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<float>& src0,
                                 const AscendC::LocalTensor<float>& src1row, uint64_t mask, int64_t rows, uint8_t rep) {
    uint64_t m[2] = {mask, 0};
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxRepeat) {
      const uint8_t nr = static_cast<uint8_t>(MinI64(kMaxRepeat, rows - r0));
      const uint32_t o = static_cast<uint32_t>(r0 * g_.pitch);
      AscendC::Mul(dst[o], src0[o], src1row, m, nr, AscendC::BinaryRepeatParams(1, 1, 1, rep, rep, 0));
    }
  }

  __aicore__ inline void BuildMasks() {
    groups_ = static_cast<int32_t>((g_.rotaryDim + kCols - 1) / kCols);
    for (int32_t gi = 0; gi < groups_; ++gi) {
      const int64_t lo = gi * kCols;
      const int64_t hi = MinI64(lo + kCols, g_.rotaryDim);
      const uint64_t cols = LowBits(hi - lo);
      uint64_t first = 0;
      if (NEOX) {
        if (half_ > lo) first = LowBits(MinI64(half_, hi) - lo);
      } else {
        first = 0x5555555555555555ull;  // even columns (lo is even)
      }
      colMask_[gi] = cols;
      subMask_[gi] = first & cols;
      addMask_[gi] = cols & ~first;
    }
  }

  // Byte offsets for the Gathers: expansion exp[t * rotPitch + j] = (t * csPitch + i(j)) * 4 and the
  // partner table part[h * P + j] = (h * P + partner(j)) * 4. Row 0 by scalar writes, the other rows by
  // adding the row's byte offset (int32 Adds).
  __aicore__ inline void BuildTables(int64_t partRows) {
    const int64_t P = g_.pitch;
    const int64_t rd = g_.rotaryDim;
    AscendC::LocalTensor<uint32_t> exp = expBuf_.Get<uint32_t>();
    for (int64_t j = 0; j < g_.rotPitch; ++j) {
      const int64_t idx = j < rd ? (NEOX ? j % half_ : j / 2) : 0;
      exp.SetValue(static_cast<uint32_t>(j), static_cast<uint32_t>(idx * 4));
    }
    AscendC::LocalTensor<int32_t> expI = exp.template ReinterpretCast<int32_t>();
    for (int64_t t = 1; t < batch_; ++t) {
      AscendC::Adds(expI[static_cast<uint32_t>(t * g_.rotPitch)], expI, static_cast<int32_t>(t * g_.csPitch * 4),
                    static_cast<int32_t>(g_.rotPitch));
    }
    AscendC::LocalTensor<uint32_t> part = partBuf_.Get<uint32_t>();
    for (int64_t j = 0; j < P; ++j) {
      int64_t src = j;
      if (j < rd) src = NEOX ? (j < half_ ? j + half_ : j - half_) : (j ^ 1);
      part.SetValue(static_cast<uint32_t>(j), static_cast<uint32_t>(src * 4));
    }
    AscendC::LocalTensor<int32_t> partI = part.template ReinterpretCast<int32_t>();
    for (int64_t h = 1; h < partRows; ++h) {
      AscendC::Adds(partI[static_cast<uint32_t>(h * P)], partI, static_cast<int32_t>(h * P * 4),
                    static_cast<int32_t>(P));
    }
  }

  RotGeom g_;
  int64_t half_ = 0;
  int64_t batch_ = 1;
  int64_t chunkElems_ = 0;
  int64_t partRows_ = 1;
  int32_t groups_ = 0;
  uint64_t colMask_[kMaxGroups];
  uint64_t subMask_[kMaxGroups];
  uint64_t addMask_[kMaxGroups];
  AscendC::GlobalTensor<C> tableGm_;
  AscendC::TQue<AscendC::TPosition::VECIN, 2> inQ_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQ_;
  AscendC::TQue<AscendC::TPosition::VECIN, 1> csQ_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> x32Buf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> xsBuf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> partBuf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> cs32Buf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> expBuf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> rotBuf_;
};

// Token state of one batch: which tokens have a valid position (else: zero output rows, no cache
// write), which are written to the caches and where.
struct Batch {
  int64_t n = 0;
  int64_t first = 0;  // first token of the batch
  int64_t rows[kMaxBatch];   // table row (the position, or 0 for an invalid one: never read out of bounds)
  bool valid[kMaxBatch];
  bool write[kMaxBatch];
  int64_t slot[kMaxBatch];
  bool anyWrite = false;
  bool allValid = true;
};

// Fills `b` for tokens [first, first + n): positions outside [0, maxPosition) are invalid; tokens
// t < numWrite with a valid position and a slot in [0, numSlots) are written.
__aicore__ inline void ReadBatch(Batch* b, int64_t first, int64_t n, const IndexGm& pos, const IndexGm& slots,
                                 int64_t maxPosition, int64_t numWrite, int64_t numSlots) {
  b->n = n;
  b->first = first;
  b->anyWrite = false;
  b->allValid = true;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = first + i;
    const int64_t p = pos.Get(t);
    const bool v = p >= 0 && p < maxPosition;
    b->valid[i] = v;
    b->rows[i] = v ? p : 0;
    b->allValid = b->allValid && v;
    b->write[i] = false;
    b->slot[i] = -1;
    if (v && t < numWrite) {
      const int64_t s = slots.Get(t);
      if (s >= 0 && s < numSlots) {
        b->write[i] = true;
        b->slot[i] = s;
        b->anyWrite = true;
      }
    }
  }
}

// This core's tokens of [0, td.numRows) (RowRange) in batches of td.batch, for the ops that rotate token rows
// by their positions and write them by slot_mapping: Next() fills `b` with the next batch (ReadBatch against
// td.maxPosition, td.numWrite, td.numSlots; positions and slots of the index dtypes td.posIs64 / td.slotIs64)
// and gathers its cos / sin rows into the rotation sets cc / sc of the engine; false when the core is done.
template <typename TD, typename ENG>
class TokenBatches {
 public:
  __aicore__ inline TokenBatches(const TD& td, ENG& eng, GM_ADDR positions, GM_ADDR slotMapping)
      : cc(eng.RotSet(0)), sc(eng.RotSet(1)), td_(td), eng_(eng) {
    pos_.Init(positions, td.posIs64);
    slots_.Init(slotMapping, td.slotIs64);
    RowRange(td, td.numRows, &next_, &end_);
  }

  __aicore__ inline bool Next() {
    if (next_ >= end_) return false;
    const int64_t n = MinI64(td_.batch, end_ - next_);
    ReadBatch(&b, next_, n, pos_, slots_, td_.maxPosition, td_.numWrite, td_.numSlots);
    eng_.GatherTable(n, b.rows, cc, sc);
    next_ += n;
    return true;
  }

  Batch b;                            // the current batch: tokens [b.first, b.first + b.n)
  AscendC::LocalTensor<float> cc;     // its cos rows
  AscendC::LocalTensor<float> sc;     // its sin rows

 private:
  const TD& td_;
  ENG& eng_;
  IndexGm pos_;
  IndexGm slots_;
  int64_t next_ = 0;
  int64_t end_ = 0;
};

// Where RotatePlane puts the rotated head rows of a written token: the cache plane, copied as they are.
// (The quantizing writes have their own sink, op_kernel/kv_quant_kernel.h QuantSink.)
template <typename T, bool PAD>
struct CacheSink {
  static constexpr bool kVectorRead = false;  // the rows leave UB through MTE3 only
  AscendC::GlobalTensor<T>* cache;
  const CacheGeom* cg;
  int64_t d;
  int64_t p;
  // hc head rows (heads h0 .. h0 + hc - 1, UB pitch p) of the token cached at `slot`
  __aicore__ inline void Put(const AscendC::LocalTensor<T>& rows, int64_t slot, int64_t h0, int64_t hc) {
    CacheHeadsOut<T, PAD>(*cache, *cg, slot, h0, rows, hc, d, p);
  }
};

// A rotated tensor of the fused ops: rows [T', heads, D] in GM (src), rotated rows to `out`, and for
// the written tokens to `sink` (nullptr: none).
template <typename T, typename C, bool NEOX, bool PAD, typename SINK>
__aicore__ inline void RotatePlaneTo(RopeEngine<T, C, NEOX, PAD>& eng, const Batch& b, AscendC::GlobalTensor<T>& src,
                                     AscendC::GlobalTensor<T>& out, int64_t heads, int64_t headsPerChunk, SINK* sink,
                                     const AscendC::LocalTensor<float>& cc, const AscendC::LocalTensor<float>& sc) {
  const RotGeom& g = eng.Geom();
  const bool whole = heads <= headsPerChunk;
  const int64_t nChunks = whole ? 1 : b.n;
  for (int64_t c = 0; c < nChunks; ++c) {
    const int64_t nt = whole ? b.n : 1;
    const int64_t ti0 = whole ? 0 : c;
    for (int64_t h0 = 0; h0 < heads; h0 += headsPerChunk) {
      const int64_t hc = MinI64(headsPerChunk, heads - h0);
      const int64_t rows = nt * hc;
      const uint64_t gmOff = static_cast<uint64_t>(((b.first + ti0) * heads + h0) * g.headSize);
      AscendC::LocalTensor<T> xT = eng.AllocIn();
      RowsIn<T, PAD>(xT, src[gmOff], rows, g.headSize, g.pitch);
      xT = eng.ReadyIn(xT);
      AscendC::LocalTensor<T> yT = eng.AllocOut();
      eng.Rotate(xT, yT, nt, hc, ti0, cc, sc);
      if (!b.allValid) {
        for (int64_t i = 0; i < nt; ++i) {
          if (!b.valid[ti0 + i]) AscendC::Duplicate(yT[static_cast<uint32_t>(i * hc * g.pitch)], T(0),
                                                    static_cast<int32_t>(hc * g.pitch));
        }
      }
      yT = eng.ReadyOut(yT);
      eng.FreeIn(xT);
      RowsOut<T, PAD>(out[gmOff], yT, rows, g.headSize, g.pitch);
      if (sink != nullptr) {
        for (int64_t i = 0; i < nt; ++i) {
          if (b.write[ti0 + i]) sink->Put(yT[static_cast<uint32_t>(i * hc * g.pitch)], b.slot[ti0 + i], h0, hc);
        }
      }
      eng.FreeOut(yT);
    }
  }
}

// RotatePlaneTo with the rotated rows copied to a cache plane (cache == nullptr: none).
template <typename T, typename C, bool NEOX, bool PAD>
__aicore__ inline void RotatePlane(RopeEngine<T, C, NEOX, PAD>& eng, const Batch& b, AscendC::GlobalTensor<T>& src,
                                   AscendC::GlobalTensor<T>& out, int64_t heads, int64_t headsPerChunk,
                                   AscendC::GlobalTensor<T>* cache, const CacheGeom& cg,
                                   const AscendC::LocalTensor<float>& cc, const AscendC::LocalTensor<float>& sc) {
  CacheSink<T, PAD> sink{cache, &cg, eng.Geom().headSize, eng.Geom().pitch};
  RotatePlaneTo<T, C, NEOX, PAD>(eng, b, src, out, heads, headsPerChunk, cache == nullptr ? nullptr : &sink, cc, sc);
}

// A pass-through tensor (value rows): rows [T', heads, d] copied to a cache plane for the written
// tokens only, through a VECIN -> VECOUT queue (no vector work).
template <typename T, bool PAD>
__aicore__ inline void CopyPlane(AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2>& que,
                                 const Batch& b, AscendC::GlobalTensor<T>& src, int64_t heads, int64_t d, int64_t p,
                                 int64_t headsPerChunk, AscendC::GlobalTensor<T>& cache, const CacheGeom& cg) {
  if (!b.anyWrite) return;
  if (heads <= headsPerChunk) {
    AscendC::LocalTensor<T> buf = que.template AllocTensor<T>();
    RowsIn<T, PAD>(buf, src[static_cast<uint64_t>(b.first * heads * d)], b.n * heads, d, p);
    que.EnQue(buf);
    buf = que.template DeQue<T>();
    for (int64_t i = 0; i < b.n; ++i) {
      if (!b.write[i]) continue;
      CacheHeadsOut<T, PAD>(cache, cg, b.slot[i], 0, buf[static_cast<uint32_t>(i * heads * p)], heads, d, p);
    }
    que.FreeTensor(buf);
    return;
  }
  for (int64_t i = 0; i < b.n; ++i) {
    if (!b.write[i]) continue;
    for (int64_t h0 = 0; h0 < heads; h0 += headsPerChunk) {
      const int64_t hc = MinI64(headsPerChunk, heads - h0);
      AscendC::LocalTensor<T> buf = que.template AllocTensor<T>();
      RowsIn<T, PAD>(buf, src[static_cast<uint64_t>(((b.first + i) * heads + h0) * d)], hc, d, p);
      que.EnQue(buf);
      buf = que.template DeQue<T>();
      CacheHeadsOut<T, PAD>(cache, cg, b.slot[i], h0, buf, hc, d, p);
      que.FreeTensor(buf);
    }
  }
}

}  // namespace rope
}  // namespace mskv

#endif  // MS_KVCACHE_OP_KERNEL_ROPE_KERNEL_COMMON_H_
