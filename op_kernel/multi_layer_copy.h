// Device-side building blocks of the multi-layer transfer kernels (multi_layer_kv_transfer,
// multi_layer_block_transfer): strided row copies GM -> UB -> GM through double-buffered UB, and
// zero rows written from a UB buffer filled once with Duplicate.
//
// A "strided copy" moves `count` bursts of `len` elements; on the GM side the bursts start `gmStride`
// elements apart, in UB `ubStride` elements apart (ubStride >= Pitch(len), a multiple of 32 bytes).
// Without PAD every burst is a multiple of 32 bytes and DataCopy (contiguous or DataCopyParams with
// 32-byte-block gaps) is used; with PAD (A2/A3 only) DataCopyPad (GM gaps in bytes, UB gaps in
// blocks). Bursts are issued in groups of at most 4095 (the blockCount limit); gaps that do not fit
// the uint16 block fields fall back to one DataCopy per burst.
//
// Device subset only: no std::, no exceptions, no heap, no printf.
#ifndef MS_KVCACHE_OP_KERNEL_MULTI_LAYER_COPY_H_
#define MS_KVCACHE_OP_KERNEL_MULTI_LAYER_COPY_H_

#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"

#include "kv_copy_common.h"  // mskv::TrapOnAliasedWrites (written caches must not alias)
#include "mskv_arch.h"  // MSKV_HAS_BF16_AND_PAD: bfloat16 and DataCopyPad exist (A2/A3), not on 310P

namespace mskv_ml {

constexpr int32_t kBufferNum = 2;
constexpr int64_t kBlockBytes = 32;
constexpr int64_t kMaxBurst = 4095;
constexpr int64_t kMaxGapBlocks = 65535;
constexpr int32_t kMaxPlanes = 3;
constexpr int64_t kMaxRun = 128;  // = mskv_ml_tiling::kMaxRun (op_host/multi_layer_tiling_common.h)

__aicore__ inline int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }
__aicore__ inline int64_t MaxI64(int64_t a, int64_t b) { return a > b ? a : b; }

// Elements of the layer tensor `q` (of tpl per layer) a transfer can touch: plane q alone, or for one
// tensor per layer (tpl 1: MERGED_KV, a single MLA plane) every plane, planeOffset[p] + planeElems[p].
__aicore__ inline int64_t LayerTensorElems(int64_t q, int64_t tpl, int32_t numPlanes, const int64_t* planeOffset,
                                           const int64_t* planeElems) {
  if (tpl != 1) return planeOffset[q] + planeElems[q];
  int64_t e = 0;
  for (int32_t p = 0; p < numPlanes; ++p) e = MaxI64(e, planeOffset[p] + planeElems[p]);
  return e;
}

// Work items [begin, end) of this core under the main/tail split of the tiling.
__aicore__ inline void CoreRange(int64_t formerNum, int64_t formerLen, int64_t tailLen, int64_t* begin,
                                 int64_t* end) {
  const int64_t i = static_cast<int64_t>(AscendC::GetBlockIdx());
  if (i < formerNum) {
    *begin = i * formerLen;
    *end = *begin + formerLen;
  } else {
    *begin = formerNum * formerLen + (i - formerNum) * tailLen;
    *end = *begin + tailLen;
  }
}

// How one row (token row of one plane and layer) is moved. Sizes in elements.
//   rowElems: elements of the row (contiguous in the buffer / host blocks);
//   numSeg, segElems: the row is numSeg segments of segElems (BNSD: one per head; else 1 segment);
//   segStride: cache elements between the segments of one row (BNSD: block_size * head_size);
//   rowsPerLoop > 0: rows per UB buffer; else segsPerLoop > 0 segments per buffer; else pieces of
//   pieceElems (a segment larger than a buffer).
struct RowPlan {
  int64_t rowElems;
  int64_t numSeg;
  int64_t segElems;
  int64_t segStride;
  int64_t rowsPerLoop;
  int64_t segsPerLoop;
  int64_t pieceElems;
};

template <typename T, bool PAD>
class Mover {
 public:
  __aicore__ inline Mover() {}

  // bufferBytes: each of the two queue buffers; zeroBytes > 0: a UB buffer of zeros (for zero rows).
  __aicore__ inline void Init(AscendC::TPipe* pipe, int64_t bufferBytes, int64_t zeroBytes) {
    pipe->InitBuffer(que_, kBufferNum, static_cast<uint32_t>(bufferBytes));
    zeroElems_ = 0;
    if (zeroBytes > 0) {
      pipe->InitBuffer(zeroBuf_, static_cast<uint32_t>(zeroBytes));
      AscendC::LocalTensor<int16_t> z = zeroBuf_.Get<int16_t>();
      AscendC::Duplicate(z, static_cast<int16_t>(0), static_cast<int32_t>(zeroBytes / 2));
      AscendC::PipeBarrier<PIPE_ALL>();  // the vector fill is done before any MTE3 reads it
      zero_ = z.template ReinterpretCast<T>();
      zeroElems_ = zeroBytes / static_cast<int64_t>(sizeof(T));
    }
  }

  // Elements a burst of len elements occupies in UB.
  __aicore__ inline static int64_t Pitch(int64_t len) {
    if (!PAD) return len;
    const int64_t bytes = len * static_cast<int64_t>(sizeof(T));
    return ((bytes + kBlockBytes - 1) / kBlockBytes) * kBlockBytes / static_cast<int64_t>(sizeof(T));
  }

  __aicore__ inline AscendC::LocalTensor<T> Alloc() { return que_.template AllocTensor<T>(); }
  __aicore__ inline AscendC::LocalTensor<T> Ready(AscendC::LocalTensor<T>& buf) {
    que_.EnQue(buf);
    return que_.template DeQue<T>();
  }
  __aicore__ inline void Free(AscendC::LocalTensor<T>& buf) { que_.FreeTensor(buf); }

  // GM -> UB strided copy (see the file comment).
  __aicore__ inline void GmToUb(const AscendC::LocalTensor<T>& ub, AscendC::GlobalTensor<T>& gm, uint64_t off,
                                int64_t count, int64_t len, int64_t gmStride, int64_t ubStride) {
    const int64_t sz = static_cast<int64_t>(sizeof(T));
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      for (int64_t g = 0; g < count; g += kMaxBurst) {
        const int64_t cnt = MinI64(kMaxBurst, count - g);
        AscendC::DataCopyExtParams p(static_cast<uint16_t>(cnt), static_cast<uint32_t>(len * sz),
                                     static_cast<uint32_t>((gmStride - len) * sz),
                                     static_cast<uint32_t>((ubStride - Pitch(len)) * sz / kBlockBytes), 0);
        AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
        AscendC::DataCopyPad(ub[static_cast<uint32_t>(g * ubStride)], gm[off + static_cast<uint64_t>(g * gmStride)], p,
                             noPad);
      }
      return;
    }
#endif
    if (count == 1 || (gmStride == len && ubStride == len)) {
      AscendC::DataCopy(ub, gm[off], static_cast<uint32_t>(count * len));
      return;
    }
    const int64_t gGap = (gmStride - len) * sz / kBlockBytes;
    const int64_t uGap = (ubStride - len) * sz / kBlockBytes;
    const int64_t blocks = len * sz / kBlockBytes;
    if (gGap <= kMaxGapBlocks && uGap <= kMaxGapBlocks && blocks <= kMaxGapBlocks) {
      for (int64_t g = 0; g < count; g += kMaxBurst) {
        const int64_t cnt = MinI64(kMaxBurst, count - g);
        AscendC::DataCopyParams p(static_cast<uint16_t>(cnt), static_cast<uint16_t>(blocks),
                                  static_cast<uint16_t>(gGap), static_cast<uint16_t>(uGap));
        AscendC::DataCopy(ub[static_cast<uint32_t>(g * ubStride)], gm[off + static_cast<uint64_t>(g * gmStride)], p);
      }
      return;
    }
    for (int64_t k = 0; k < count; ++k) {
      AscendC::DataCopy(ub[static_cast<uint32_t>(k * ubStride)], gm[off + static_cast<uint64_t>(k * gmStride)],
                        static_cast<uint32_t>(len));
    }
  }

  // UB -> GM strided copy.
  __aicore__ inline void UbToGm(AscendC::GlobalTensor<T>& gm, uint64_t off, const AscendC::LocalTensor<T>& ub,
                                int64_t count, int64_t len, int64_t gmStride, int64_t ubStride) {
    const int64_t sz = static_cast<int64_t>(sizeof(T));
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      for (int64_t g = 0; g < count; g += kMaxBurst) {
        const int64_t cnt = MinI64(kMaxBurst, count - g);
        AscendC::DataCopyExtParams p(static_cast<uint16_t>(cnt), static_cast<uint32_t>(len * sz),
                                     static_cast<uint32_t>((ubStride - Pitch(len)) * sz / kBlockBytes),
                                     static_cast<uint32_t>((gmStride - len) * sz), 0);
        AscendC::DataCopyPad(gm[off + static_cast<uint64_t>(g * gmStride)], ub[static_cast<uint32_t>(g * ubStride)], p);
      }
      return;
    }
#endif
    if (count == 1 || (gmStride == len && ubStride == len)) {
      AscendC::DataCopy(gm[off], ub, static_cast<uint32_t>(count * len));
      return;
    }
    const int64_t gGap = (gmStride - len) * sz / kBlockBytes;
    const int64_t uGap = (ubStride - len) * sz / kBlockBytes;
    const int64_t blocks = len * sz / kBlockBytes;
    if (gGap <= kMaxGapBlocks && uGap <= kMaxGapBlocks && blocks <= kMaxGapBlocks) {
      for (int64_t g = 0; g < count; g += kMaxBurst) {
        const int64_t cnt = MinI64(kMaxBurst, count - g);
        AscendC::DataCopyParams p(static_cast<uint16_t>(cnt), static_cast<uint16_t>(blocks),
                                  static_cast<uint16_t>(uGap), static_cast<uint16_t>(gGap));
        AscendC::DataCopy(gm[off + static_cast<uint64_t>(g * gmStride)], ub[static_cast<uint32_t>(g * ubStride)], p);
      }
      return;
    }
    for (int64_t k = 0; k < count; ++k) {
      AscendC::DataCopy(gm[off + static_cast<uint64_t>(k * gmStride)], ub[static_cast<uint32_t>(k * ubStride)],
                        static_cast<uint32_t>(len));
    }
  }

  // `rows` rows of rowElems elements: source rows srcStride apart, destination rows dstStride apart,
  // through UB: rowsPerLoop rows per buffer, or (rowsPerLoop == 0) each row in pieces of pieceElems.
  __aicore__ inline void Copy2D(AscendC::GlobalTensor<T>& src, uint64_t srcOff, int64_t srcStride,
                                AscendC::GlobalTensor<T>& dst, uint64_t dstOff, int64_t dstStride, int64_t rows,
                                int64_t rowElems, int64_t rowsPerLoop, int64_t pieceElems) {
    if (rowsPerLoop > 0) {
      const int64_t pitch = Pitch(rowElems);
      for (int64_t r = 0; r < rows; r += rowsPerLoop) {
        const int64_t k = MinI64(rowsPerLoop, rows - r);
        AscendC::LocalTensor<T> buf = Alloc();
        GmToUb(buf, src, srcOff + static_cast<uint64_t>(r * srcStride), k, rowElems, srcStride, pitch);
        AscendC::LocalTensor<T> ready = Ready(buf);
        UbToGm(dst, dstOff + static_cast<uint64_t>(r * dstStride), ready, k, rowElems, dstStride, pitch);
        Free(ready);
      }
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < rowElems; o += pieceElems) {
        const int64_t len = MinI64(pieceElems, rowElems - o);
        AscendC::LocalTensor<T> buf = Alloc();
        GmToUb(buf, src, srcOff + static_cast<uint64_t>(r * srcStride + o), 1, len, len, Pitch(len));
        AscendC::LocalTensor<T> ready = Ready(buf);
        UbToGm(dst, dstOff + static_cast<uint64_t>(r * dstStride + o), ready, 1, len, len, Pitch(len));
        Free(ready);
      }
    }
  }

  // One row too large for a buffer (RowPlan.rowsPerLoop == 0): by groups of segments, or pieces.
  // The source segments are srcSegStride apart, the destination segments dstSegStride apart.
  __aicore__ inline void BigRow(const RowPlan& rp, AscendC::GlobalTensor<T>& src, uint64_t srcOff,
                                int64_t srcSegStride, AscendC::GlobalTensor<T>& dst, uint64_t dstOff,
                                int64_t dstSegStride) {
    Copy2D(src, srcOff, srcSegStride, dst, dstOff, dstSegStride, rp.numSeg, rp.segElems, rp.segsPerLoop,
           rp.pieceElems);
  }

  // `rows` rows of rowElems zeros, rows stride apart in GM.
  __aicore__ inline void ZeroRows(AscendC::GlobalTensor<T>& gm, uint64_t off, int64_t rows, int64_t rowElems,
                                  int64_t stride) {
    if (stride == rowElems) {  // contiguous: one region
      ZeroSpan(gm, off, rows * rowElems);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) ZeroSpan(gm, off + static_cast<uint64_t>(r * stride), rowElems);
  }

 private:
  __aicore__ inline void ZeroSpan(AscendC::GlobalTensor<T>& gm, uint64_t off, int64_t elems) {
    for (int64_t o = 0; o < elems; o += zeroElems_) {
      const int64_t len = MinI64(zeroElems_, elems - o);
      UbToGm(gm, off + static_cast<uint64_t>(o), zero_, 1, len, len, Pitch(len));
    }
  }

  AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, kBufferNum> que_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> zeroBuf_;
  AscendC::LocalTensor<T> zero_;
  int64_t zeroElems_ = 0;
};

}  // namespace mskv_ml

#endif  // MS_KVCACHE_OP_KERNEL_MULTI_LAYER_COPY_H_
