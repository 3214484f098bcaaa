// Kernel of the emulation test op SimAxpy: z = x + alpha * y, computed in float32.
// Double-buffered copy-in / compute / copy-out through TQue; tails that are not a multiple of
// 32 bytes move with DataCopyPad (tiling rejects them on SoCs without DataCopyPad; the 310P build has
// no DataCopyPad: it does not compile there).
#include "kernel_operator.h"

using namespace AscendC;

constexpr int32_t kBufferNum = 2;

template <typename T>
class KernelSimAxpy {
 public:
  __aicore__ inline KernelSimAxpy() {}
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint64_t total, uint32_t blockLength,
                              uint32_t tileLength, float alpha) {
    const uint64_t start = static_cast<uint64_t>(blockLength) * GetBlockIdx();
    length_ = start >= total ? 0 : (total - start < blockLength ? static_cast<uint32_t>(total - start) : blockLength);
    tile_ = tileLength;
    alpha_ = alpha;
    xGm_.SetGlobalBuffer((__gm__ T*)x + start, length_);
    yGm_.SetGlobalBuffer((__gm__ T*)y + start, length_);
    zGm_.SetGlobalBuffer((__gm__ T*)z + start, length_);
    pipe_.InitBuffer(inX_, kBufferNum, tile_ * sizeof(T));
    pipe_.InitBuffer(inY_, kBufferNum, tile_ * sizeof(T));
    pipe_.InitBuffer(outZ_, kBufferNum, tile_ * sizeof(T));
    pipe_.InitBuffer(fx_, tile_ * sizeof(float));
    pipe_.InitBuffer(fy_, tile_ * sizeof(float));
  }
  __aicore__ inline void Process() {
    for (uint32_t off = 0; off < length_; off += tile_) {
      const uint32_t n = length_ - off < tile_ ? length_ - off : tile_;
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
#if __CCE_AICORE__ >= 220  // DataCopyPad: A2/A3 only
      DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
      DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
      DataCopyPad(dst, src, p, pad);
#else  // the 310P tiling rejects such rows; if one came, DataCopy would report DATACOPY_ALIGN
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
  }
  __aicore__ inline void Compute(uint32_t n) {
    LocalTensor<T> x = inX_.DeQue<T>();
    LocalTensor<T> y = inY_.DeQue<T>();
    LocalTensor<T> z = outZ_.AllocTensor<T>();
    if constexpr (IsSameType<T, float>::value) {
      Muls(z, y, alpha_, n);
      Add(z, x, z, n);
    } else {
      LocalTensor<float> fx = fx_.Get<float>();
      LocalTensor<float> fy = fy_.Get<float>();
      Cast(fx, x, RoundMode::CAST_NONE, n);
      Cast(fy, y, RoundMode::CAST_NONE, n);
      Muls(fy, fy, alpha_, n);
      Add(fx, fx, fy, n);
      Cast(z, fx, RoundMode::CAST_RINT, n);
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
  TQue<TPosition::VECIN, 1> inX_, inY_;
  TQue<TPosition::VECOUT, 1> outZ_;
  TBuf<TPosition::VECCALC> fx_, fy_;
  GlobalTensor<T> xGm_, yGm_, zGm_;
  uint32_t length_ = 0, tile_ = 0;
  float alpha_ = 1.0f;
};

extern "C" __global__ __aicore__ void sim_axpy(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling) {
  GET_TILING_DATA(t, tiling);
  if (TILING_KEY_IS(0)) {
    KernelSimAxpy<float> op;
    op.Init(x, y, z, t.totalLength, t.blockLength, t.tileLength, t.alpha);
    op.Process();
  } else if (TILING_KEY_IS(1)) {
    KernelSimAxpy<half> op;
    op.Init(x, y, z, t.totalLength, t.blockLength, t.tileLength, t.alpha);
    op.Process();
#if __CCE_AICORE__ >= 220  // bfloat16 Cast: A2/A3 only (the 310P OpDef has no DT_BF16)
  } else if (TILING_KEY_IS(2)) {
    KernelSimAxpy<bfloat16_t> op;
    op.Init(x, y, z, t.totalLength, t.blockLength, t.tileLength, t.alpha);
    op.Process();
#endif
  }
}
