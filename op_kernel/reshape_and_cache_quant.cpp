// MskvReshapeAndCacheQuant AscendC kernel: reshape_and_cache / reshape_and_cache_merged with float K/V
// quantized into int8 caches on the way in (formulas: docs/quantization.md, the cpu kernel's
// cpu_kernel/quant_body.inl).
//
// GM arguments follow the OpDef (op_host/reshape_and_cache_quant.cpp): key, value, key_cache, value_cache
// (absent for MERGED_KV: the V plane follows the K plane in key_cache), slot_mapping, k_scale, v_scale,
// k_offset, v_offset (static), k_scale_cache, v_scale_cache (dynamic, written in place), then the output
// status (never written), workspace and tiling. Each core takes its main/tail share of the tokens; a token
// whose slot is negative or >= num_blocks * block_size writes nothing (its scale-cache entries included).
//
// Per token and plane, on a row of num_kv_heads head rows of P elements in UB (P = head_size, or
// head_size rounded up to 32 with DataCopyPad):
//   x = Cast(row) to fp32 (CAST_NONE: exact from float16 / bfloat16; float32 rows are used as they are)
//   dynamic: per head m = max |x| (Abs, then a halving tree of Max to 8 lanes, the last 8 on the scalar
//            unit), s = m / 127 (one fp32 division, as the cpu kernel), the divisor row = s (1 where s == 0:
//            every |x| is then below 2^-142, so its codes round to 0), s to the scale cache
//   v = x / s (Div: one IEEE fp32 division per element, the scale row expanded per tensor / head /
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
// Tiling key = quant_mode (0 static, 1 dynamic) * 10000 + layout (0 BSND, 1 BNSD) * 1000 + data dtype
// (1 fp16, 2 bf16, 3 fp32) * 100 + slot dtype (0 int32, 1 int64) * 10 + DataCopyPad (1 when head_size is
// not a multiple of 32; A2/A3 only).
#include "kernel_operator.h"
#include "kv_copy_common.h"
#include "mskv_tiling_keys.h"
#include "rope_kernel_common.h"

namespace mskv {
namespace quant {

constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: v + it - it rounds |v| <= 2^22 to an integer (RNE)
constexpr float kInt8Max = 127.0f;          // the dynamic scale is max|x| / 127

__aicore__ inline int64_t Align32(int64_t n) { return (n + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }

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

// The quantizing scatter of one core. T: data dtype; S: slot dtype; DYN: dynamic scales; BNSD: cache
// layout (the scale cache's heads are block_size apart); PAD: head rows need DataCopyPad.
template <typename T, typename S, bool DYN, bool BNSD, bool PAD, typename TD>
class GqaQuant {
 public:
  __aicore__ inline GqaQuant() {}

  __aicore__ inline void Init(AscendC::TPipe* pipe, const TD& td, GM_ADDR slots, GM_ADDR kScale, GM_ADDR vScale,
                              GM_ADDR kOffset, GM_ADDR vOffset) {
    H_ = td.heads;
    D_ = td.headSize;
    P_ = td.pitch;
    row_ = H_ * P_;
    tree_ = td.treeElems;
    hasOffset_ = td.hasOffset != 0;
    slotGm_.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(slots));
    pipe->InitBuffer(inQ_, 2, static_cast<uint32_t>(Align32(row_ * static_cast<int64_t>(sizeof(T)))));
    pipe->InitBuffer(x32_, static_cast<uint32_t>(row_ * 4));
    pipe->InitBuffer(h16_, static_cast<uint32_t>(row_ * 2));
    pipe->InitBuffer(outQ_, 2, static_cast<uint32_t>(row_));
    if constexpr (DYN) {
      pipe->InitBuffer(div_, static_cast<uint32_t>(row_ * 4));
      pipe->InitBuffer(treeBuf_, static_cast<uint32_t>(tree_ * 4));
      pipe->InitBuffer(scQ_, 2, static_cast<uint32_t>(ScaleUbBytes(H_)));
    } else {
      pipe->InitBuffer(sRow_, static_cast<uint32_t>(2 * row_ * 4));
      if (hasOffset_) pipe->InitBuffer(oRow_, static_cast<uint32_t>(2 * row_ * 4));
      LoadStatic(0, kScale, kOffset, td.kScaleKind);
      LoadStatic(1, vScale, vOffset, td.vScaleKind);
      AscendC::PipeBarrier<PIPE_ALL>();  // the per-channel rows (MTE2) are in UB before the first Div
    }
  }

  // UB bytes of the scale row of one token: one float per head (BSND) or one per 32-byte block (BNSD: one
  // DataCopyPad burst per head), rounded up to whole 64-float repeats (the mask-form Duplicate).
  __aicore__ static inline int64_t ScaleUbBytes(int64_t heads) {
    const int64_t bytes = heads * (BNSD ? kBlockBytes : 4);
    return (bytes + 255) / 256 * 256;
  }

  // Quantizes token t's row of plane p (src) into its slot of the cache plane `dst` (geometry cg) and,
  // dynamic, its scales into `sc` (scale-cache strides scBlock / scSlot / scHead).
  __aicore__ inline void Row(int32_t p, AscendC::GlobalTensor<T>& src, int64_t t, AscendC::GlobalTensor<int8_t>& dst,
                             const rope::CacheGeom& cg, int64_t slot, AscendC::GlobalTensor<float>& sc, int64_t scBlock,
                             int64_t scSlot) {
    const int32_t n = static_cast<int32_t>(row_);
    AscendC::LocalTensor<T> in = inQ_.template AllocTensor<T>();
    HeadRowsIn<T, PAD>(in, src[static_cast<uint64_t>(t * H_ * D_)], H_, D_, P_);
    inQ_.EnQue(in);
    in = inQ_.template DeQue<T>();
    AscendC::LocalTensor<float> x = x32_.Get<float>();
    AscendC::LocalTensor<float> xs;
    if constexpr (AscendC::IsSameType<T, float>::value) {
      xs = in;
    } else {
      AscendC::Cast(x, in, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n));
      xs = x;
    }
    AscendC::LocalTensor<float> scUb;
    if constexpr (DYN) {
      scUb = scQ_.template AllocTensor<float>();
      AscendC::LocalTensor<float> div = div_.Get<float>();
      AscendC::LocalTensor<float> tree = treeBuf_.Get<float>();
      for (int64_t h = 0; h < H_; ++h) {
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
      AscendC::Div(x, xs, sRow_.Get<float>()[static_cast<uint32_t>(p * row_)], n);
      if (hasOffset_) AscendC::Sub(x, x, oRow_.Get<float>()[static_cast<uint32_t>(p * row_)], n);
    }
    inQ_.FreeTensor(in);
    AscendC::Maxs(x, x, -128.0f, n);
    AscendC::Mins(x, x, kInt8Max, n);
    AscendC::Adds(x, x, kRoundMagic, n);
    AscendC::Adds(x, x, -kRoundMagic, n);
    AscendC::LocalTensor<half> h16 = h16_.Get<half>();
    AscendC::Cast(h16, x, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n));
    AscendC::LocalTensor<int8_t> out = outQ_.template AllocTensor<int8_t>();
    AscendC::Cast(out, h16, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n));
    outQ_.EnQue(out);
    out = outQ_.template DeQue<int8_t>();
    rope::HeadsCopy<int8_t, PAD>(dst[rope::SlotOffset(cg, slot, 0)], out, H_, D_, P_, cg.headStride, true);
    outQ_.FreeTensor(out);
    if constexpr (DYN) {
      scQ_.EnQue(scUb);
      scUb = scQ_.template DeQue<float>();
      const int64_t block = slot / cg.blockSize;
      const uint64_t off = static_cast<uint64_t>(block * scBlock + (slot - block * cg.blockSize) * scSlot);
      ScaleOut(sc[off], scUb, cg.blockSize);
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
                                  int64_t blockSize) {
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

  // The divisor row of plane p: per tensor one value, per head one value per head row, per channel the
  // [H, D] scales in head rows of pitch P (the offset row likewise).
  __aicore__ inline void LoadStatic(int32_t p, GM_ADDR scale, GM_ADDR offset, int64_t kind) {
    AscendC::LocalTensor<float> s = sRow_.Get<float>()[static_cast<uint32_t>(p * row_)];
    FillRow(s, scale, kind);
    if (hasOffset_) FillRow(oRow_.Get<float>()[static_cast<uint32_t>(p * row_)], offset, kind);
  }

  __aicore__ inline void FillRow(const AscendC::LocalTensor<float>& dst, GM_ADDR src, int64_t kind) {
    AscendC::GlobalTensor<float> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(src));
    if (kind == 0) {
      AscendC::Duplicate(dst, g.GetValue(0), static_cast<int32_t>(row_));
    } else if (kind == 1) {
      for (int64_t h = 0; h < H_; ++h) {
        AscendC::Duplicate(dst[static_cast<uint32_t>(h * P_)], g.GetValue(static_cast<uint64_t>(h)),
                           static_cast<int32_t>(P_));
      }
    } else {
      HeadRowsIn<float, PAD>(dst, g, H_, D_, P_);
    }
  }

  int64_t H_ = 0, D_ = 0, P_ = 0, row_ = 0, tree_ = 8;
  bool hasOffset_ = false;
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

}  // namespace quant
}  // namespace mskv

template <typename T, typename S, bool DYN, bool BNSD, bool PAD, typename TD>
__aicore__ inline void RunReshapeAndCacheQuant(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache, GM_ADDR value_cache,
                                               GM_ADDR slot_mapping, GM_ADDR k_scale, GM_ADDR v_scale, GM_ADDR k_offset,
                                               GM_ADDR v_offset, GM_ADDR k_scale_cache, GM_ADDR v_scale_cache,
                                               const TD& td) {
  if (td.numTokens <= 0) return;  // nothing to write (the tiling's no-op launch)
  int64_t begin = 0;
  int64_t end = 0;
  mskv::CoreRange(td.formerNum, td.formerLen, td.tailLen, &begin, &end);
  end = mskv::MinI64(end, td.numTokens);
  if (begin >= end) return;
  AscendC::TPipe pipe;
  mskv::quant::GqaQuant<T, S, DYN, BNSD, PAD, TD> q;
  q.Init(&pipe, td, slot_mapping, k_scale, v_scale, k_offset, v_offset);
  AscendC::GlobalTensor<T> src[2];
  src[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key));
  src[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value));
  AscendC::GlobalTensor<int8_t> dst[2];
  dst[0].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(key_cache));
  if (td.planeElems > 0) {
    dst[1].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(key_cache) + td.planeElems);
  } else {
    dst[1].SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(value_cache));
  }
  AscendC::GlobalTensor<float> sc[2];
  sc[0].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(k_scale_cache));
  sc[1].SetGlobalBuffer(reinterpret_cast<__gm__ float*>(v_scale_cache));
  mskv::rope::CacheGeom cg;
  cg.numSlots = td.numSlots;
  cg.blockSize = td.blockSize;
  cg.blockStride = td.blockStride;
  cg.slotStride = td.slotStride;
  cg.headStride = td.headStride;
  cg.heads = td.heads;
  for (int64_t t = begin; t < end; ++t) {
    int64_t slot = -1;
    if (!q.ValidSlot(t, td.numSlots, &slot)) continue;
    for (int32_t p = 0; p < 2; ++p) q.Row(p, src[p], t, dst[p], cg, slot, sc[p], td.scBlockStride, td.scSlotStride);
  }
}

extern "C" __global__ __aicore__ void mskv_reshape_and_cache_quant(GM_ADDR key, GM_ADDR value, GM_ADDR key_cache,
                                                                   GM_ADDR value_cache, GM_ADDR slot_mapping,
                                                                   GM_ADDR k_scale, GM_ADDR v_scale, GM_ADDR k_offset,
                                                                   GM_ADDR v_offset, GM_ADDR k_scale_cache,
                                                                   GM_ADDR v_scale_cache, GM_ADDR status,
                                                                   GM_ADDR workspace, GM_ADDR tiling) {
  (void)status;
  (void)workspace;
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, DYN, BNSD, T, S, PAD)                                                                      \
  if (TILING_KEY_IS(K))                                                                                           \
    return RunReshapeAndCacheQuant<T, S, DYN, BNSD, PAD>(key, value, key_cache, value_cache, slot_mapping, k_scale, \
                                                         v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache, td);
  MSKV_KEYS_RESHAPE_AND_CACHE_QUANT(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
