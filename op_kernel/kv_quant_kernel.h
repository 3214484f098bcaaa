// Device-side engine of the quantizing cache writes (reshape_and_cache_quant, concat_and_cache_mla_quant):
// one token row of a plane from GM, quantized into int8 codes in UB, to its slot of the cache plane, and in
// dynamic mode its per-head scales to the scale cache. The formulas are docs/quantization.md's, computed as
// the cpu kernel (cpu_kernel/quant_body.inl) does, so the codes agree bit for bit:
//
// Per token and plane, on a row of `heads` head rows of P elements in UB (P = head_size, or head_size
// rounded up to 32 with DataCopyPad):
//   x = Cast(row) to fp32 (CAST_NONE: exact from float16 / bfloat16; float32 rows are used as they are)
//   dynamic: per head m = max |x| (Abs, then a halving tree of Max to 8 lanes, the last 8 on the scalar
//            unit), s = m / 127 (one fp32 division, as the cpu kernel), the divisor row = s (1 where s == 0:
//            every |x| is then below 2^-142, so its codes round to 0), s to the scale cache
//   v = x / s (Div: one IEEE fp32 division per element, the divisor row expanded per tensor / head /
//       channel), v = v - o (Sub, with offsets)
//   v = clamp(v, -128, 127) (Maxs, Mins), then rounded to an integer half to even by v + 1.5 * 2^23 - 1.5 * 2^23
//       (two fp32 Adds, each rounded to nearest even: the cpu kernel's scalar path does the same), so that
//       no Cast has to round: fp32 -> half (exact, CAST_NONE) -> int8 (exact, CAST_NONE). There is no Cast
//       fp32 -> int8 on Atlas A2/A3 or Ascend310P (official dav-c220 / dav-m200 vconv tables), and rounding
//       in two Casts (fp32 -> half -> int8) would round twice.
// NaN: the emulation gives code 0 (a NaN stays NaN through Maxs / Mins / Adds and the Cast half -> int8
// gives 0 there; on 310P already fp32 -> half); the device's NaN behaviour of these instructions is not
// documented and has not been run. Dynamic max with a NaN element: the halving tree keeps element j in
// lane j % 8 and the emulation's Max propagates NaN, so that lane drops out of the scalar combine (NaN
// lanes skipped): the max is over the other lanes' elements; the cpu kernel skips only the NaN itself
// (docs/quantization.md).
//
// Device subset only: no std::, no exceptions, no heap, no printf.
#ifndef MS_KVCACHE_OP_KERNEL_KV_QUANT_KERNEL_H_
#define MS_KVCACHE_OP_KERNEL_KV_QUANT_KERNEL_H_

#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "rope_kernel_common.h"

namespace mskv {
namespace quant {

constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: v + it - it rounds |v| <= 2^22 to an integer (RNE)
constexpr float kInt8Max = 127.0f;          // the dynamic scale is max|x| / 127

constexpr float kF32Max = 3.40282347e+38f;   // largest finite float32

__aicore__ inline int64_t Align32(int64_t n) { return (n + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }

// A static scale value (`positive`: finite and > 0) or offset value (finite). Scalar IEEE compares, all
// false for NaN. The cpu kernel and PyNative accept the same values (cpu_kernel/kv_quant.cpp
// CheckScaleValues, ms_kvcache/ops/_quant.py ScaleValues).
__aicore__ inline bool StaticValueOk(float v, bool positive) {
  return positive ? (v > 0.0f && v <= kF32Max) : (v >= -kF32Max && v <= kF32Max);
}

// Stops the launch (AscendC::Trap) on a static scale of 0, < 0, NaN or inf, or a NaN / inf offset: in a
// graph the values reach no host code, and dividing by them would write saturated or zero codes. Call it
// on every value a core uses before that core's first write (RowQuant::LoadStatic / StaticReady do); as
// every core reads the same values, no core writes anything then. (On an NPU the AI Core stops and the
// launch fails without the reason; the emulation reports rule TRAP. Only the emulation has run it.)
__aicore__ inline void TrapOnBadStatic(float v, bool positive) {
  if (!StaticValueOk(v, positive)) AscendC::Trap();
}

// GM -> UB: `heads` head rows of d elements (contiguous in GM) into UB rows of pitch p elements
// (p == d: one DataCopy; else one DataCopyPad burst per head, A2/A3 only).
template <typename T, bool PAD>
__aicore__ inline void HeadRowsIn(const AscendC::LocalTensor<T>& ub, const AscendC::GlobalTensor<T>& gm, int64_t heads,
                                  int64_t d, int64_t p) {
#if MSKV_HAS_BF16_AND_PAD
  if constexpr (PAD) {
    const int64_t sz = static_cast<int64_t>(sizeof(T));
    const uint32_t gap = static_cast<uint32_t>((p * sz - Align32(d * sz)) / kBlockBytes);
    AscendC::DataCopyExtParams in(static_cast<uint16_t>(heads), static_cast<uint32_t>(d * sz), 0, gap, 0);
    AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
    AscendC::DataCopyPad(ub, gm, in, noPad);
    return;
  }
#endif
  (void)p;
  AscendC::DataCopy(ub, gm, static_cast<uint32_t>(heads * d));
}

// One quantized plane of a write (K / V of reshape_and_cache_quant, kv_c / k_pe of
// concat_and_cache_mla_quant): source rows of heads x headSize elements (contiguous, token-major), UB head
// rows of `pitch` elements, the cache plane's geometry, the scale cache's strides (dynamic: scale of (slot,
// head) at block * scBlock + (slot % block_size) * scSlot + head * (BNSD ? block_size : 1)) and the static
// scale kind (0 per tensor, 1 per head, 2 per channel).
struct QPlane {
  int64_t heads;
  int64_t headSize;
  int64_t pitch;
  rope::CacheGeom cg;
  int64_t scBlock;
  int64_t scSlot;
  int64_t kind;
  // UB elements per head row of codes (a multiple of 32); 0: = pitch. The fused RoPE writes quantize the
  // rotated rows at the rotation's pitch (head_size rounded up to 32 bytes of the data dtype) and place each
  // head's codes at this pitch (one Cast fp32 -> half per head).
  int64_t outPitch = 0;
};

// The quantizing scatter of one core over up to two planes. T: data dtype; S: slot dtype; DYN: dynamic
// scales; BNSD: cache layout (the scale cache's heads are block_size apart); PAD: head rows need
// DataCopyPad. UB is sized for the larger plane (maxRow = max heads * pitch, maxHeads, tree = the max tree).
template <typename T, typename S, bool DYN, bool BNSD, bool PAD>
class RowQuant {
 public:
  __aicore__ inline RowQuant() {}

  // maxOutRow: UB elements of the largest row of codes (0: = maxRow; QPlane::outPitch).
  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR slots, int64_t maxRow, int64_t maxHeads, int64_t tree,
                              bool hasOffset, int64_t maxOutRow = 0) {
    row_ = maxRow;
    outRow_ = maxOutRow > 0 ? maxOutRow : maxRow;
    tree_ = tree;
    hasOffset_ = hasOffset;
    slotGm_.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(slots));
    pipe->InitBuffer(inQ_, 2, static_cast<uint32_t>(Align32(row_ * static_cast<int64_t>(sizeof(T)))));
    pipe->InitBuffer(x32_, static_cast<uint32_t>(row_ * 4));
    pipe->InitBuffer(h16_, static_cast<uint32_t>(outRow_ * 2));
    pipe->InitBuffer(outQ_, 2, static_cast<uint32_t>(outRow_));
    if constexpr (DYN) {
      pipe->InitBuffer(div_, static_cast<uint32_t>(row_ * 4));
      pipe->InitBuffer(treeBuf_, static_cast<uint32_t>(tree_ * 4));
      pipe->InitBuffer(scQ_, 2, static_cast<uint32_t>(ScaleUbBytes(maxHeads)));
    } else {
      pipe->InitBuffer(sRow_, static_cast<uint32_t>(2 * row_ * 4));
      if (hasOffset_) pipe->InitBuffer(oRow_, static_cast<uint32_t>(2 * row_ * 4));
    }
  }

  // Static: plane p's divisor (and offset) row from its scale / offset input; call for every plane, then
  // StaticReady() before the first Row. Every value is checked (TrapOnBadStatic) before the first Row:
  // per tensor / per head here, per channel in StaticReady (the rows are then in UB).
  __aicore__ inline void LoadStatic(int32_t p, const QPlane& q, GM_ADDR scale, GM_ADDR offset) {
    AscendC::LocalTensor<float> s = sRow_.Get<float>()[static_cast<uint32_t>(p * row_)];
    FillRow(q, s, scale, true);
    if (hasOffset_) FillRow(q, oRow_.Get<float>()[static_cast<uint32_t>(p * row_)], offset, false);
    if (q.kind == 2 && p >= 0 && p < 2) chk_[p] = q;
  }
  __aicore__ inline void StaticReady() {
    AscendC::PipeBarrier<PIPE_ALL>();  // the per-channel rows (MTE2) are in UB before the first Div
    for (int32_t p = 0; p < 2; ++p) {
      if (chk_[p].kind != 2) continue;
      CheckRow(chk_[p], sRow_.Get<float>()[static_cast<uint32_t>(p * row_)], true);
      if (hasOffset_) CheckRow(chk_[p], oRow_.Get<float>()[static_cast<uint32_t>(p * row_)], false);
    }
  }

  // Static: both planes' rows (LoadStatic; a plane of headSize 0 is skipped), then StaticReady.
  __aicore__ inline void LoadStatic2(const QPlane* planes, GM_ADDR scale0, GM_ADDR offset0, GM_ADDR scale1,
                                     GM_ADDR offset1) {
    if (planes[0].headSize > 0) LoadStatic(0, planes[0], scale0, offset0);
    if (planes[1].headSize > 0) LoadStatic(1, planes[1], scale1, offset1);
    StaticReady();
  }

  // UB bytes of the scale row of one token: one float per head (BSND) or one per 32-byte block (BNSD: one
  // DataCopyPad burst per head), rounded up to whole 64-float repeats (the mask-form Duplicate).
  __aicore__ static inline int64_t ScaleUbBytes(int64_t heads) {
    const int64_t bytes = heads * (BNSD ? kBlockBytes : 4);
    return (bytes + 255) / 256 * 256;
  }

  // Quantizes token t's row of plane p (geometry q, source src) into its slot of the cache plane `dst`
  // and, dynamic, its scales into `sc`.
  __aicore__ inline void Row(int32_t p, const QPlane& q, AscendC::GlobalTensor<T>& src, int64_t t,
                             AscendC::GlobalTensor<int8_t>& dst, int64_t slot, AscendC::GlobalTensor<float>& sc) {
    AscendC::LocalTensor<T> in = inQ_.template AllocTensor<T>();
    HeadRowsIn<T, PAD>(in, src[static_cast<uint64_t>(t * q.heads * q.headSize)], q.heads, q.headSize, q.pitch);
    inQ_.EnQue(in);
    in = inQ_.template DeQue<T>();
    Quantize(p, q, in, q.heads, 0, dst, slot, sc);
    inQ_.FreeTensor(in);
  }

  // Quantizes `hc` head rows (heads h0 .. h0 + hc - 1 of plane p, pitch q.pitch) already in UB into their
  // slot of `dst` and, dynamic, their scales into `sc` (the fused RoPE writes pass the rotated rows).
  __aicore__ inline void Quantize(int32_t p, const QPlane& q, const AscendC::LocalTensor<T>& in, int64_t hc,
                                  int64_t h0, AscendC::GlobalTensor<int8_t>& dst, int64_t slot,
                                  AscendC::GlobalTensor<float>& sc) {
    const int64_t D_ = q.headSize;
    const int64_t P_ = q.pitch;
    const int64_t O_ = q.outPitch > 0 ? q.outPitch : P_;
    const rope::CacheGeom& cg = q.cg;
    const int32_t n = static_cast<int32_t>(hc * P_);
    AscendC::LocalTensor<float> x = x32_.Get<float>();
    AscendC::LocalTensor<float> xs;
    if constexpr (AscendC::IsSameType<T, float>::value) {
      xs = in;
    } else {
      AscendC::Cast(x, in, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n));
      xs = x;
    }
    AscendC::LocalTensor<float> scUb;
    const uint32_t rowOff = static_cast<uint32_t>(p * row_ + h0 * P_);  // the plane's divisor / offset rows
    if constexpr (DYN) {
      scUb = scQ_.template AllocTensor<float>();
      AscendC::LocalTensor<float> div = div_.Get<float>();
      AscendC::LocalTensor<float> tree = treeBuf_.Get<float>();
      for (int64_t h = 0; h < hc; ++h) {
        AscendC::Duplicate(tree, 0.0f, static_cast<int32_t>(tree_));
        AscendC::Abs(tree, xs[static_cast<uint32_t>(h * P_)], static_cast<int32_t>(D_));
        for (int64_t len = tree_; len > 8;) {
          len /= 2;
          AscendC::Max(tree, tree, tree[static_cast<uint32_t>(len)], static_cast<int32_t>(len));
        }
        float m = 0.0f;  // lanes holding a NaN are skipped (a comparison with NaN is false)
        for (uint32_t l = 0; l < 8; ++l) {
          const float v = tree.GetValue(l);
          m = v > m ? v : m;
        }
        const float s = m / kInt8Max;
        // s == 0 (every |x| below 127 * 2^-150): divide by 1 instead; those x round to code 0 (the cpu
        // kernel's "all-zero row: codes 0, never 0 / 0")
        AscendC::Duplicate(div[static_cast<uint32_t>(h * P_)], s == 0.0f ? 1.0f : s, static_cast<int32_t>(P_));
        const int64_t u = BNSD ? h * 8 : h;  // the scale's UB element
        uint64_t mask[2] = {1ull << static_cast<uint32_t>(u % 64), 0};
        AscendC::Duplicate(scUb[static_cast<uint32_t>(u / 64 * 64)], s, mask, 1, 1, 8);
      }
      AscendC::Div(x, xs, div, n);
    } else {
      AscendC::Div(x, xs, sRow_.Get<float>()[rowOff], n);
      if (hasOffset_) AscendC::Sub(x, x, oRow_.Get<float>()[rowOff], n);
    }
    AscendC::Maxs(x, x, -128.0f, n);
    AscendC::Mins(x, x, kInt8Max, n);
    AscendC::Adds(x, x, kRoundMagic, n);
    AscendC::Adds(x, x, -kRoundMagic, n);
    AscendC::LocalTensor<half> h16 = h16_.Get<half>();
    if (O_ == P_) {
      AscendC::Cast(h16, x, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n));
    } else {
      for (int64_t h = 0; h < hc; ++h) {
        AscendC::Cast(h16[static_cast<uint32_t>(h * O_)], x[static_cast<uint32_t>(h * P_)],
                      AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(P_));
      }
    }
    AscendC::LocalTensor<int8_t> out = outQ_.template AllocTensor<int8_t>();
    AscendC::Cast(out, h16, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(hc * O_));
    outQ_.EnQue(out);
    out = outQ_.template DeQue<int8_t>();
    rope::CacheHeadsOut<int8_t, PAD>(dst, cg, slot, h0, out, hc, D_, O_);
    outQ_.FreeTensor(out);
    if constexpr (DYN) {
      scQ_.EnQue(scUb);
      scUb = scQ_.template DeQue<float>();
      const int64_t block = slot / cg.blockSize;
      const uint64_t off = static_cast<uint64_t>(block * q.scBlock + (slot - block * cg.blockSize) * q.scSlot +
                                                 h0 * (BNSD ? cg.blockSize : 1));
      ScaleOut(sc[off], scUb, hc, cg.blockSize);
      scQ_.FreeTensor(scUb);
    }
  }

  __aicore__ inline bool ValidSlot(int64_t t, int64_t numSlots, int64_t* slot) {
    const int64_t s = static_cast<int64_t>(slotGm_.GetValue(static_cast<uint64_t>(t)));
    *slot = s;
    return s >= 0 && s < numSlots;
  }

 private:
  // The token's scale row to the scale cache: BSND num_kv_heads contiguous floats, BNSD one float per head,
  // block_size apart (one 4-byte DataCopyPad burst each, A2/A3 only: the tiling refuses it on 310P).
  __aicore__ inline void ScaleOut(const AscendC::GlobalTensor<float>& gm, const AscendC::LocalTensor<float>& ub,
                                  int64_t H_, int64_t blockSize) {
    const int64_t bytes = H_ * 4;
#if MSKV_HAS_BF16_AND_PAD
    if (BNSD) {
      AscendC::DataCopyExtParams out(static_cast<uint16_t>(H_), 4, 0, static_cast<uint32_t>((blockSize - 1) * 4), 0);
      AscendC::DataCopyPad(gm, ub, out);
      return;
    }
    if (bytes % kBlockBytes != 0) {
      AscendC::DataCopyExtParams out(1, static_cast<uint32_t>(bytes), 0, 0, 0);
      AscendC::DataCopyPad(gm, ub, out);
      return;
    }
#endif
    (void)blockSize;
    AscendC::DataCopy(gm, ub, static_cast<uint32_t>(H_));
  }

  // A divisor row of plane q: per tensor one value, per head one value per head row, per channel the
  // [heads, headSize] values in head rows of pitch P.
  // (positive: a scale row; else an offset row. Per tensor / per head values are checked as read.)
  __aicore__ inline void FillRow(const QPlane& q, const AscendC::LocalTensor<float>& dst, GM_ADDR src,
                                 bool positive) {
    AscendC::GlobalTensor<float> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(src));
    if (q.kind == 0) {
      const float v = g.GetValue(0);
      TrapOnBadStatic(v, positive);
      AscendC::Duplicate(dst, v, static_cast<int32_t>(q.heads * q.pitch));
    } else if (q.kind == 1) {
      for (int64_t h = 0; h < q.heads; ++h) {
        const float v = g.GetValue(static_cast<uint64_t>(h));
        TrapOnBadStatic(v, positive);
        AscendC::Duplicate(dst[static_cast<uint32_t>(h * q.pitch)], v, static_cast<int32_t>(q.pitch));
      }
    } else {
      HeadRowsIn<float, PAD>(dst, g, q.heads, q.headSize, q.pitch);
    }
  }

  // The heads x headSize values of a per-channel row in UB (head rows of pitch P; the padding is not
  // read), one scalar read each, once per core: heads * headSize reads per plane and row.
  __aicore__ inline void CheckRow(const QPlane& q, const AscendC::LocalTensor<float>& row, bool positive) {
    for (int64_t h = 0; h < q.heads; ++h) {
      for (int64_t i = 0; i < q.headSize; ++i) {
        TrapOnBadStatic(row.GetValue(static_cast<uint32_t>(h * q.pitch + i)), positive);
      }
    }
  }

  int64_t row_ = 0, outRow_ = 0, tree_ = 8;
  bool hasOffset_ = false;
  QPlane chk_[2] = {};  // planes with a per-channel row to check in StaticReady (kind 2)
  AscendC::GlobalTensor<S> slotGm_;
  AscendC::TQue<AscendC::TPosition::VECIN, 2> inQ_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQ_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 2> scQ_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> x32_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> h16_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> div_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> treeBuf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> sRow_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> oRow_;
};

// The written GM tensors of a two-plane quantizing write: the int8 cache planes and their scale caches.
struct QuantDst {
  AscendC::GlobalTensor<int8_t> cache[2];
  AscendC::GlobalTensor<float> scale[2];
  __aicore__ inline void Init(GM_ADDR cache0, GM_ADDR cache1, GM_ADDR scale0, GM_ADDR scale1) {
    cache[0].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(cache0));
    cache[1].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(cache1));
    scale[0].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(scale0));
    scale[1].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(scale1));
  }
};

// An MLA plane (kv_c or k_pe of concat_and_cache_mla(_quant) / rope_concat_and_cache_mla_quant): one "head" of d
// elements per slot of a cache [nb, bs, d], UB rows of pitch p, codes at outPitch (0: = p), its scale cache
// [nb, bs, 1] and its static scale kind.
__aicore__ inline QPlane MlaQPlane(int64_t numSlots, int64_t blockSize, int64_t d, int64_t p, int64_t kind,
                                   int64_t outPitch = 0) {
  QPlane q;
  q.heads = 1;
  q.headSize = d;
  q.pitch = p;
  q.cg.numSlots = numSlots;
  q.cg.blockSize = blockSize;
  q.cg.blockStride = blockSize * d;
  q.cg.slotStride = d;
  q.cg.headStride = d;
  q.cg.heads = 1;
  q.scBlock = blockSize;
  q.scSlot = 1;
  q.kind = kind;
  q.outPitch = outPitch;
  return q;
}

// The sink of rope::RotatePlaneTo for a quantized cache plane: the rotated head rows of a written token
// (as returned in key_out / k_pe_out) quantized by `q` into the plane `plane` (index p of q's planes).
template <typename Q>
struct QuantSink {
  static constexpr bool kVectorRead = true;  // the rows are read by vector instructions (rope_mla_kernel.h)
  Q* q;
  int32_t p;
  const QPlane* plane;
  AscendC::GlobalTensor<int8_t>* dst;
  AscendC::GlobalTensor<float>* sc;
  template <typename T>
  __aicore__ inline void Put(const AscendC::LocalTensor<T>& rows, int64_t slot, int64_t h0, int64_t hc) {
    q->Quantize(p, *plane, rows, hc, h0, *dst, slot, *sc);
  }
};

}  // namespace quant
}  // namespace mskv

#endif  // MS_KVCACHE_OP_KERNEL_KV_QUANT_KERNEL_H_
