// Device-side body of the DeepSeek MLA RoPE writes (rope_concat_and_cache_mla and its quantizing variant
// rope_concat_and_cache_mla_quant): RoPE on q_pe [T', Hq, R] and k_pe [T', R], optional RMSNorm of kv_c [T', L]
// (KvNorm), kv_c_out for every row, and the rotated k_pe row and the kv_c_out row of every written token handed
// to a sink (rope::CacheSink copies them into a cache plane; quant::QuantSink quantizes them).
//
// RMSNorm: out = (x * inv) * w in fp32 with inv = 1 / sqrt(sum(x^2) / L + eps), as the cpu backend.
// fp16 / bf16 data: inv in fp32 - squares summed by a halving tree of vector Adds down to 8 lanes
// (zero-padded to 8 * 2^k elements), the 8 lanes by the scalar unit as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)),
// then / L, + eps, Sqrt and 1 / x as vector Div / Adds / Sqrt on 8 lanes; the cpu backend sums in fp64, so
// inv can differ in its last bits and an output by 1 ulp (rarely; docs/rope.md). fp32 data: inv in
// double-float (op_kernel/rope_dd.h), the cpu backend's fp64 value rounded once. A zero mean with eps = 0
// gives inv = +inf (Sqrt of 0 is undefined on the device and is never issued), as 1 / sqrt(0) on the cpu.
//
// Device subset only: no std::, no exceptions, no heap, no printf.
#ifndef MS_KVCACHE_OP_KERNEL_ROPE_MLA_KERNEL_H_
#define MS_KVCACHE_OP_KERNEL_ROPE_MLA_KERNEL_H_

#include "kernel_operator.h"
#include "rope_dd.h"
#include "rope_kernel_common.h"

namespace mskv {
namespace rope {


// RMSNorm of kv_c rows with an fp32 copy of the weight kept in UB. For fp32 data the scale is computed in
// double-float (op_kernel/rope_dd.h) so that it is the cpu backend's fp64 value rounded to fp32.
template <typename T, typename W, bool PAD>
class KvNorm {
 public:
  static constexpr bool kDd = AscendC::IsSameType<T, float>::value;

  __aicore__ inline KvNorm() {}

  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR weight, int64_t L, int64_t wPitch, int64_t tree,
                              float eps) {
    L_ = L;
    tree_ = tree;
    eps_ = eps;
    pipe->InitBuffer(treeBuf_, static_cast<uint32_t>((kDd ? 5 : 1) * tree * 4));
    pipe->InitBuffer(smallBuf_, kDd ? 16 * 32 + 32 : 64);
    pipe->InitBuffer(w32Buf_, static_cast<uint32_t>(wPitch * 4));
    pipe->InitBuffer(wQue_, 1, static_cast<uint32_t>(wPitch * static_cast<int64_t>(sizeof(W))));
    AscendC::GlobalTensor<W> wGm;
    wGm.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(weight));
    AscendC::LocalTensor<W> w = wQue_.template AllocTensor<W>();
    const bool aligned = (L * static_cast<int64_t>(sizeof(W))) % kBlockBytes == 0;
    RowsIn<W, PAD>(w, wGm, 1, L, aligned ? L : wPitch);
    wQue_.EnQue(w);
    w = wQue_.template DeQue<W>();
    AscendC::LocalTensor<float> w32 = w32Buf_.Get<float>();
    if constexpr (AscendC::IsSameType<W, float>::value) {
      AscendC::DataCopy(w32, w, static_cast<uint32_t>(wPitch));
    } else {
      AscendC::Cast(w32, w, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(wPitch));
    }
    wQue_.FreeTensor(w);
    if constexpr (kDd) {  // lane offsets 0, 4, ..., 28 for the last three halvings (Gather with a base)
      AscendC::LocalTensor<uint32_t> id = smallBuf_.Get<uint32_t>()[16 * 8];
      for (uint32_t l = 0; l < 8; ++l) id.SetValue(l, l * 4);
    }
  }

  // y[0..L) = x * inv(x) * w (fp32 rows, 32-byte aligned; y may be x).
  __aicore__ inline void Row(const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& y) {
    float inv;
    if constexpr (kDd) {
      inv = InvDd(x);
    } else {
      inv = InvF32(x);
    }
    const int32_t L = static_cast<int32_t>(L_);
    AscendC::Muls(y, x, inv, L);
    AscendC::Mul(y, y, w32Buf_.Get<float>(), L);
  }

 private:
  // fp32: squares, a halving tree of Adds to 8 lanes, ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) on the scalar
  // unit, then / L, + eps, Sqrt, 1 / x on 8 lanes.
  __aicore__ inline float InvF32(const AscendC::LocalTensor<float>& x) {
    AscendC::LocalTensor<float> sq = treeBuf_.Get<float>();
    AscendC::Duplicate(sq, 0.0f, static_cast<int32_t>(tree_));
    AscendC::Mul(sq, x, x, static_cast<int32_t>(L_));
    for (int64_t len = tree_; len > 8;) {
      len /= 2;
      AscendC::Add(sq, sq, sq[static_cast<uint32_t>(len)], static_cast<int32_t>(len));
    }
    const float s = ((sq.GetValue(0) + sq.GetValue(1)) + (sq.GetValue(2) + sq.GetValue(3))) +
                    ((sq.GetValue(4) + sq.GetValue(5)) + (sq.GetValue(6) + sq.GetValue(7)));
    AscendC::LocalTensor<float> t8 = smallBuf_.Get<float>();
    AscendC::LocalTensor<float> c8 = t8[8];
    AscendC::Duplicate(t8, s, 8);
    AscendC::Duplicate(c8, static_cast<float>(L_), 8);
    AscendC::Div(t8, t8, c8, 8);
    AscendC::Adds(t8, t8, eps_, 8);
    const float m = t8.GetValue(0);
    if (!(m > 0.0f)) return m == 0.0f ? __builtin_inff() : m;  // 1 / sqrt(0) = inf; NaN stays NaN
    AscendC::Sqrt(t8, t8, 8);
    AscendC::Duplicate(c8, 1.0f, 8);
    AscendC::Div(t8, c8, t8, 8);
    return t8.GetValue(0);
  }

  // Double-float: exact squares, a halving tree of double-float sums (the last three halvings on 8
  // lanes through Gathers), then / L, + eps, sqrt (corrected with its exact residual) and 1 / x
  // (a corrected quotient), rounded once to fp32.
  __aicore__ inline float InvDd(const AscendC::LocalTensor<float>& x) {
    AscendC::LocalTensor<float> tb = treeBuf_.Get<float>();
    const uint32_t t = static_cast<uint32_t>(tree_);
    AscendC::LocalTensor<float> sh = tb, sl = tb[t], x1 = tb[2 * t], x2 = tb[3 * t], x3 = tb[4 * t];
    const int32_t L = static_cast<int32_t>(L_);
    AscendC::Duplicate(sh, 0.0f, static_cast<int32_t>(tree_));
    AscendC::Duplicate(sl, 0.0f, static_cast<int32_t>(tree_));
    dd::Split(x, x1, x2, x3, L);
    dd::Prod(x, x1, x2, x, x1, x2, sh, sl, x3, L);
    int64_t len = tree_;
    while (len > 8) {
      len /= 2;
      const uint32_t o = static_cast<uint32_t>(len);
      dd::Add2(sh, sl, sh[o], sl[o], sh, sl, x1, x2, x3, static_cast<int32_t>(len));
    }
    AscendC::LocalTensor<float> small = smallBuf_.Get<float>();
    AscendC::LocalTensor<float> v[16];
    for (uint32_t k = 0; k < 16; ++k) v[k] = small[k * 8];
    AscendC::LocalTensor<uint32_t> id = smallBuf_.Get<uint32_t>()[16 * 8];
    for (uint32_t k = 4; k >= 1; k /= 2) {  // lanes k..2k-1 onto lanes 0..k-1
      AscendC::Gather(v[0], sh, id, k * 4, k);
      AscendC::Gather(v[1], sl, id, k * 4, k);
      dd::Add2(sh, sl, v[0], v[1], sh, sl, v[2], v[3], v[4], static_cast<int32_t>(k));
    }
    // m = sum / L + eps (lane 0; the other lanes carry partial sums and are never read)
    AscendC::Duplicate(v[0], static_cast<float>(L_), 8);
    dd::Split(v[0], v[1], v[2], v[3], 8);
    AscendC::Div(v[4], sh, v[0], 8);
    dd::Split(v[4], v[5], v[6], v[3], 8);
    dd::Prod(v[4], v[5], v[6], v[0], v[1], v[2], v[7], v[8], v[3], 8);
    AscendC::Sub(v[9], sh, v[7], 8);
    AscendC::Sub(v[9], v[9], v[8], 8);
    AscendC::Add(v[9], v[9], sl, 8);
    AscendC::Div(v[9], v[9], v[0], 8);
    AscendC::Add(v[10], v[4], v[9], 8);  // FastTwoSum(q1, q2) -> (mh, ml)
    AscendC::Sub(v[11], v[10], v[4], 8);
    AscendC::Sub(v[11], v[9], v[11], 8);
    AscendC::Duplicate(v[0], eps_, 8);
    AscendC::Duplicate(v[1], 0.0f, 8);
    dd::Add2(v[10], v[11], v[0], v[1], v[10], v[11], v[2], v[3], v[4], 8);
    const float m = v[10].GetValue(0);
    if (!(m > 0.0f)) return m == 0.0f ? __builtin_inff() : m;  // 1 / sqrt(0) = inf; NaN stays NaN
    // y = sqrt(m): s1 = Sqrt(mh), s2 = (m - s1*s1) / (2 s1) with s1*s1 exact
    AscendC::Sqrt(v[5], v[10], 8);
    dd::Split(v[5], v[6], v[7], v[3], 8);
    dd::Prod(v[5], v[6], v[7], v[5], v[6], v[7], v[8], v[9], v[3], 8);
    AscendC::Sub(v[12], v[10], v[8], 8);
    AscendC::Sub(v[12], v[12], v[9], 8);
    AscendC::Add(v[12], v[12], v[11], 8);
    AscendC::Muls(v[13], v[5], 2.0f, 8);
    AscendC::Div(v[12], v[12], v[13], 8);
    AscendC::Add(v[14], v[5], v[12], 8);  // FastTwoSum(s1, s2) -> (yh, yl)
    AscendC::Sub(v[15], v[14], v[5], 8);
    AscendC::Sub(v[15], v[12], v[15], 8);
    // inv = 1 / y
    AscendC::Duplicate(v[0], 1.0f, 8);
    AscendC::Duplicate(v[1], 0.0f, 8);
    dd::Split(v[14], v[2], v[3], v[4], 8);
    dd::Quotient(v[0], v[1], v[14], v[15], v[2], v[3], v[5], v[6], v[7], v[8], v[9], v[10], v[11], 8);
    return v[5].GetValue(0);
  }

  int64_t L_ = 0;
  int64_t tree_ = 8;
  float eps_ = 0.0f;
  AscendC::TBuf<AscendC::TPosition::VECCALC> treeBuf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> smallBuf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> w32Buf_;
  AscendC::TQue<AscendC::TPosition::VECIN, 1> wQue_;
};

// An MLA cache plane [nb, bs, d] of the tiling TD (its numSlots, blockSize): one head of d elements per slot.
template <typename TD>
__aicore__ inline CacheGeom MlaPlaneGeom(const TD& td, int64_t d) {
  CacheGeom c;
  c.numSlots = td.numSlots;
  c.blockSize = td.blockSize;
  c.blockStride = td.blockSize * d;
  c.slotStride = d;
  c.headStride = d;
  c.heads = 1;
  return c;
}

// One core's rows of an MLA RoPE write (tiling TD of MskvRopeConcatAndCacheMla; `eng` initialised on `pipe`):
// q_pe / k_pe rotated to q_pe_out / k_pe_out, the rotated k_pe row of a written token to kSink; kv_c
// normalised (weight present) or copied to kv_c_out for every row, and the kv_c_out row of a written token to
// cSink (Put(row, slot, 0, 1): one "head" of L elements at pitch kvPitch; CSINK::kVectorRead: the sink reads
// the row on the vector pipe, so the row is written by it too, through the chunk buffers).
template <typename T, typename C, typename W, bool NEOX, bool PAD, typename TD, typename KSINK, typename CSINK>
__aicore__ inline void RopeMlaRows(AscendC::TPipe& pipe, RopeEngine<T, C, NEOX, PAD>& eng, GM_ADDR positions,
                                   GM_ADDR qPe, GM_ADDR kPe, GM_ADDR kvC, GM_ADDR slotMapping, GM_ADDR weight,
                                   GM_ADDR qPeOut, GM_ADDR kPeOut, GM_ADDR kvCOut, const TD& td, KSINK* kSink,
                                   CSINK* cSink) {
  const bool norm = td.hasNorm != 0;
  // a sink that reads the kv_c_out rows on the vector pipe (the quantizer) gets them through the chunk buffers
  // (copied UB -> UB without a norm); a copying sink without a norm, through a VECIN -> VECOUT queue
  const bool viaChunks = norm || CSINK::kVectorRead;
  KvNorm<T, W, PAD> kvNorm;
  AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2> kvQue;
  if (norm) {
    kvNorm.Init(&pipe, weight, td.kvRank, td.weightPitch, td.treeElems, td.epsilon);
  } else if (!viaChunks) {
    pipe.InitBuffer(kvQue, 2, static_cast<uint32_t>(td.copyElems * static_cast<int64_t>(sizeof(T))));
  }

  AscendC::GlobalTensor<T> q, k, kv, qOut, kOut, kvOut;
  q.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(qPe));
  k.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kPe));
  kv.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kvC));
  qOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(qPeOut));
  kOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kPeOut));
  kvOut.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(kvCOut));
  const int64_t L = td.kvRank;
  const int64_t Lp = td.kvPitch;

  TokenBatches<TD, RopeEngine<T, C, NEOX, PAD>> tb(td, eng, positions, slotMapping);
  while (tb.Next()) {
    const Batch& b = tb.b;
    const int64_t n = b.n;
    RotatePlaneTo<T, C, NEOX, PAD, KSINK>(eng, b, q, qOut, td.qHeads, td.headsPerChunk, nullptr, tb.cc, tb.sc);
    RotatePlaneTo<T, C, NEOX, PAD>(eng, b, k, kOut, 1, td.headsPerChunk, kSink, tb.cc, tb.sc);
    const uint64_t off = static_cast<uint64_t>(b.first * L);
    AscendC::LocalTensor<T> ready;
    if (viaChunks) {
      AscendC::LocalTensor<T> xT = eng.AllocIn();
      RowsIn<T, PAD>(xT, kv[off], n, L, Lp);
      xT = eng.ReadyIn(xT);
      AscendC::LocalTensor<T> yT = eng.AllocOut();
      if (!norm) {
        AscendC::DataCopy(yT, xT, static_cast<uint32_t>(n * Lp));
      } else if constexpr (AscendC::IsSameType<T, float>::value) {
        for (int64_t i = 0; i < n; ++i) {
          kvNorm.Row(xT[static_cast<uint32_t>(i * Lp)], yT[static_cast<uint32_t>(i * Lp)]);
        }
      } else {
        AscendC::LocalTensor<float> x32 = eng.Work32();
        AscendC::Cast(x32, xT, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n * Lp));
        for (int64_t i = 0; i < n; ++i) {
          kvNorm.Row(x32[static_cast<uint32_t>(i * Lp)], x32[static_cast<uint32_t>(i * Lp)]);
        }
        AscendC::Cast(yT, x32, RopeEngine<T, C, NEOX, PAD>::OutMode(), static_cast<uint32_t>(n * Lp));
      }
      ready = eng.ReadyOut(yT);
      eng.FreeIn(xT);
    } else {
      AscendC::LocalTensor<T> buf = kvQue.template AllocTensor<T>();
      RowsIn<T, PAD>(buf, kv[off], n, L, Lp);
      kvQue.EnQue(buf);
      ready = kvQue.template DeQue<T>();
    }
    RowsOut<T, PAD>(kvOut[off], ready, n, L, Lp);
    for (int64_t i = 0; i < n; ++i) {
      if (b.write[i]) cSink->Put(ready[static_cast<uint32_t>(i * Lp)], b.slot[i], 0, 1);
    }
    if (viaChunks) eng.FreeOut(ready);
    else kvQue.FreeTensor(ready);
  }
}

}  // namespace rope
}  // namespace mskv

#endif  // MS_KVCACHE_OP_KERNEL_ROPE_MLA_KERNEL_H_
