// Kernel of the host-API test op SimHostAdd: z = alpha * (x + y [+ bias]), computed in float32.
// It reads its work split from the nested tiling struct (split.blockFactor / tailFactor / usedCores)
// and its UB tile, buffer count, alpha and bias flag from fields of every size, so a host/kernel
// layout mismatch of SimHostAddTilingData shows up as wrong output.
#include "kernel_operator.h"

using namespace AscendC;

template <typename T>
class KernelSimHostAdd {
 public:
  __aicore__ inline KernelSimHostAdd() {}
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR bias, GM_ADDR z, const SimHostAddTilingData& t) {
    const uint32_t idx = GetBlockIdx();
    if (idx >= t.split.usedCores) return;
    const uint64_t start = static_cast<uint64_t>(t.split.blockFactor) * idx;
    len_ = idx + 1 == t.split.usedCores ? t.split.tailFactor : t.split.blockFactor;
    tile_ = static_cast<uint32_t>(t.tileElems);
    alpha_ = t.alpha;
    bias_ = t.hasBias != 0;
    xGm_.SetGlobalBuffer((__gm__ T*)x + start, len_);
    yGm_.SetGlobalBuffer((__gm__ T*)y + start, len_);
    zGm_.SetGlobalBuffer((__gm__ T*)z + start, len_);
    pipe_.InitBuffer(inX_, t.bufferNum, tile_ * sizeof(T));
    pipe_.InitBuffer(inY_, t.bufferNum, tile_ * sizeof(T));
    pipe_.InitBuffer(outZ_, t.bufferNum, tile_ * sizeof(T));
    if (bias_) {
      bGm_.SetGlobalBuffer((__gm__ T*)bias + start, len_);
      pipe_.InitBuffer(inB_, t.bufferNum, tile_ * sizeof(T));
    }
    if constexpr (!IsSameType<T, float>::value) {
      pipe_.InitBuffer(fx_, tile_ * sizeof(float));
      pipe_.InitBuffer(fy_, tile_ * sizeof(float));
      pipe_.InitBuffer(fb_, tile_ * sizeof(float));
    }
  }
  __aicore__ inline void Process() {
    for (uint32_t off = 0; off < len_; off += tile_) {
      const uint32_t n = len_ - off < tile_ ? len_ - off : tile_;
      CopyIn(off, n);
      Compute(n);
      CopyOut(off, n);
    }
  }

 private:
  __aicore__ inline void Load(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t n) {
    if ((n * sizeof(T)) % 32 == 0) {
      DataCopy(dst, src, n);
    } else {
#if __CCE_AICORE__ >= 220  // DataCopyPad: A2/A3 only (it does not compile for 310P)
      DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
      DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
      DataCopyPad(dst, src, p, pad);
#else  // never reached on 310P (no DataCopyPad there): DataCopy would report DATACOPY_ALIGN
      DataCopy(dst, src, n);
#endif
    }
  }
  __aicore__ inline void CopyIn(uint32_t off, uint32_t n) {
    LocalTensor<T> x = inX_.AllocTensor<T>();
    LocalTensor<T> y = inY_.AllocTensor<T>();
    Load(x, xGm_[off], n);
    Load(y, yGm_[off], n);
    inX_.EnQue(x);
    inY_.EnQue(y);
    if (bias_) {
      LocalTensor<T> b = inB_.AllocTensor<T>();
      Load(b, bGm_[off], n);
      inB_.EnQue(b);
    }
  }
  __aicore__ inline void Compute(uint32_t n) {
    LocalTensor<T> x = inX_.DeQue<T>();
    LocalTensor<T> y = inY_.DeQue<T>();
    LocalTensor<T> z = outZ_.AllocTensor<T>();
    if constexpr (IsSameType<T, float>::value) {
      Add(z, x, y, n);
      if (bias_) {
        LocalTensor<T> b = inB_.DeQue<T>();
        Add(z, z, b, n);
        inB_.FreeTensor(b);
      }
      Muls(z, z, alpha_, n);
    } else {
      LocalTensor<float> fx = fx_.Get<float>();
      LocalTensor<float> fy = fy_.Get<float>();
      Cast(fx, x, RoundMode::CAST_NONE, n);
      Cast(fy, y, RoundMode::CAST_NONE, n);
      Add(fx, fx, fy, n);
      if (bias_) {
        LocalTensor<T> b = inB_.DeQue<T>();
        LocalTensor<float> fb = fb_.Get<float>();
        Cast(fb, b, RoundMode::CAST_NONE, n);
        Add(fx, fx, fb, n);
        inB_.FreeTensor(b);
      }
      Muls(fx, fx, alpha_, n);
      // float -> half: CAST_NONE rounds to nearest even; float -> bfloat16 needs an explicit mode
      Cast(z, fx, IsSameType<T, half>::value ? RoundMode::CAST_NONE : RoundMode::CAST_RINT, n);
    }
    outZ_.EnQue(z);
    inX_.FreeTensor(x);
    inY_.FreeTensor(y);
  }
  __aicore__ inline void CopyOut(uint32_t off, uint32_t n) {
    LocalTensor<T> z = outZ_.DeQue<T>();
    if ((n * sizeof(T)) % 32 == 0) {
      DataCopy(zGm_[off], z, n);
    } else {
#if __CCE_AICORE__ >= 220
      DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
      DataCopyPad(zGm_[off], z, p);
#else
      DataCopy(zGm_[off], z, n);
#endif
    }
    outZ_.FreeTensor(z);
  }

  TPipe pipe_;
  TQue<TPosition::VECIN, 1> inX_, inY_, inB_;
  TQue<TPosition::VECOUT, 1> outZ_;
  TBuf<TPosition::VECCALC> fx_, fy_, fb_;
  GlobalTensor<T> xGm_, yGm_, bGm_, zGm_;
  uint32_t len_ = 0, tile_ = 0;
  float alpha_ = 1.0f;
  bool bias_ = false;
};

extern "C" __global__ __aicore__ void sim_host_add(GM_ADDR x, GM_ADDR y, GM_ADDR bias, GM_ADDR z, GM_ADDR workspace,
                                                   GM_ADDR tiling) {
  GET_TILING_DATA(t, tiling);
  if (TILING_KEY_IS(0) || TILING_KEY_IS(10)) {
    KernelSimHostAdd<half> op;
    op.Init(x, y, bias, z, t);
    op.Process();
  } else if (TILING_KEY_IS(1) || TILING_KEY_IS(11)) {
    KernelSimHostAdd<float> op;
    op.Init(x, y, bias, z, t);
    op.Process();
#if __CCE_AICORE__ >= 220  // bfloat16 Cast: A2/A3 only (the 310P OpDef config has no DT_BF16)
  } else if (TILING_KEY_IS(2) || TILING_KEY_IS(12)) {
    KernelSimHostAdd<bfloat16_t> op;
    op.Init(x, y, bias, z, t);
    op.Process();
#endif
  }
}
