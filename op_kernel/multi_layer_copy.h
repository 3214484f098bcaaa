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
// data planes (<= 3: DSA_KV), then for quantized caches their scale planes (one per data plane)
constexpr int32_t kMaxPlanes = 6;
constexpr int32_t kMaxLists = 2;  // the cache lists: kv_caches, scale_caches
constexpr int64_t kMaxRun = 128;  // = mskv_ml_tiling::kMaxRun (op_host/multi_layer_tiling_common.h)

// op_kernel/kv_copy_common.h's: this core's work items (main/tail split of the tiling, RowRange), min and max
using mskv::MaxI64;
using mskv::MinI64;
using mskv::RowRange;

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

// The planes of a transfer and the cache tensors they live in. Plane p is the data plane of list
// list[p] = 0 (kv_caches) or, for quantized caches, a scale plane of list 1 (scale_caches: float32 scales
// moved as 4 * heads bytes in the byte view of the 1-byte cache dtype, rows of their own size); its
// tensor of layer l is entry l * perLayer[list[p]] + tensorInLayer[p] of its list, the plane starting
// planeOffset[p] elements into it (the V half of a MERGED_KV tensor). All from the tiling data.
struct Planes {
  int32_t num = 0;
  int64_t numLayers = 0;
  int64_t perLayer[kMaxLists];
  RowPlan plan[kMaxPlanes];
  int64_t list[kMaxPlanes];
  int64_t tensorInLayer[kMaxPlanes];
  int64_t planeOffset[kMaxPlanes];
  AscendC::ListTensorDesc desc[kMaxLists];

  template <typename TD>
  __aicore__ inline void Init(const TD& td, GM_ADDR kvCaches, GM_ADDR scaleCaches) {
    num = static_cast<int32_t>(td.numPlanes);
    numLayers = td.numLayers;
    perLayer[0] = td.tensorsPerLayer;
    perLayer[1] = td.scalesPerLayer;
    for (int32_t p = 0; p < kMaxPlanes; ++p) {
      plan[p].rowElems = td.rowElems[p];
      plan[p].numSeg = td.numSeg[p];
      plan[p].segElems = td.segElems[p];
      plan[p].segStride = td.segStride[p];
      plan[p].rowsPerLoop = td.tokensPerInnerLoop[p];
      plan[p].segsPerLoop = td.segsPerLoop[p];
      plan[p].pieceElems = td.pieceElems[p];
      list[p] = td.planeList[p];
      tensorInLayer[p] = td.tensorInLayer[p];
      planeOffset[p] = td.planeOffset[p];
    }
    desc[0].Init(reinterpret_cast<__gm__ void*>(kvCaches));
    if (perLayer[1] > 0) desc[1].Init(reinterpret_cast<__gm__ void*>(scaleCaches));
  }

  // Every cache tensor of the launch: the kv_caches, then the scale_caches.
  __aicore__ inline int32_t Tensors() const { return static_cast<int32_t>(numLayers * (perLayer[0] + perLayer[1])); }

  template <typename T>
  __aicore__ inline __gm__ T* Cache(int32_t p, int64_t layer) {
    const int64_t c = list[p];
    return desc[c].template GetDataPtr<__gm__ T>(static_cast<uint32_t>(layer * perLayer[c] + tensorInLayer[p]));
  }

  // Index of plane p among the planes of its list (its host-block tensor: p, or p - data planes).
  __aicore__ inline int32_t IndexInList(int32_t p) const {
    int32_t k = 0;
    for (int32_t q = 0; q < p; ++q) k += list[q] == list[p] ? 1 : 0;
    return k;
  }

  // Bytes cache tensor i (of Tensors()) can be touched at: every plane in it, planeElems[p] elements from
  // planeOffset[p] (for mskv::TrapOnAliasedWrites).
  template <typename T>
  __aicore__ inline void CacheSpan(int32_t i, const int64_t* planeElems, uint64_t* lo, uint64_t* hi) {
    const int64_t n0 = numLayers * perLayer[0];
    const int64_t c = i < n0 ? 0 : 1;
    const int64_t j = c == 0 ? i : i - n0;
    int64_t e = 0;
    for (int32_t p = 0; p < num; ++p) {
      if (list[p] == c && tensorInLayer[p] == j % perLayer[c]) e = MaxI64(e, planeOffset[p] + planeElems[p]);
    }
    mskv::GmRange(desc[c].template GetDataPtr<__gm__ T>(static_cast<uint32_t>(j)), e, lo, hi);
  }
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
    Strided<false>(gm, off, ub, count, len, gmStride, ubStride);
  }

  // UB -> GM strided copy.
  __aicore__ inline void UbToGm(AscendC::GlobalTensor<T>& gm, uint64_t off, const AscendC::LocalTensor<T>& ub,
                                int64_t count, int64_t len, int64_t gmStride, int64_t ubStride) {
    Strided<true>(gm, off, ub, count, len, gmStride, ubStride);
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
  // One DataCopy in the direction TO_GM (UB -> GM) or GM -> UB; `p` a count or DataCopyParams.
  template <bool TO_GM, typename P>
  __aicore__ inline static void Dma(const AscendC::GlobalTensor<T>& gm, const AscendC::LocalTensor<T>& ub, const P& p) {
    if constexpr (TO_GM) {
      AscendC::DataCopy(gm, ub, p);
    } else {
      AscendC::DataCopy(ub, gm, p);
    }
  }

  // The strided copy of both directions: bursts gmStride apart in GM, ubStride apart in UB. The source gap
  // of DataCopy(Pad) is the GM one for GM -> UB, the UB one for UB -> GM (DataCopyPad: GM gaps in bytes, UB
  // gaps in 32-byte blocks).
  template <bool TO_GM>
  __aicore__ inline void Strided(AscendC::GlobalTensor<T>& gm, uint64_t off, const AscendC::LocalTensor<T>& ub,
                                 int64_t count, int64_t len, int64_t gmStride, int64_t ubStride) {
    const int64_t sz = static_cast<int64_t>(sizeof(T));
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      const uint32_t gmGap = static_cast<uint32_t>((gmStride - len) * sz);
      const uint32_t ubGap = static_cast<uint32_t>((ubStride - Pitch(len)) * sz / kBlockBytes);
      for (int64_t g = 0; g < count; g += kMaxBurst) {
        const int64_t cnt = MinI64(kMaxBurst, count - g);
        AscendC::DataCopyExtParams p(static_cast<uint16_t>(cnt), static_cast<uint32_t>(len * sz), TO_GM ? ubGap : gmGap,
                                     TO_GM ? gmGap : ubGap, 0);
        const AscendC::GlobalTensor<T> at = gm[off + static_cast<uint64_t>(g * gmStride)];
        if constexpr (TO_GM) {
          AscendC::DataCopyPad(at, ub[static_cast<uint32_t>(g * ubStride)], p);
        } else {
          AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
          AscendC::DataCopyPad(ub[static_cast<uint32_t>(g * ubStride)], at, p, noPad);
        }
      }
      return;
    }
#endif
    if (count == 1 || (gmStride == len && ubStride == len)) {
      Dma<TO_GM>(gm[off], ub, static_cast<uint32_t>(count * len));
      return;
    }
    const int64_t gGap = (gmStride - len) * sz / kBlockBytes;
    const int64_t uGap = (ubStride - len) * sz / kBlockBytes;
    const int64_t blocks = len * sz / kBlockBytes;
    if (gGap <= kMaxGapBlocks && uGap <= kMaxGapBlocks && blocks <= kMaxGapBlocks) {
      for (int64_t g = 0; g < count; g += kMaxBurst) {
        const int64_t cnt = MinI64(kMaxBurst, count - g);
        AscendC::DataCopyParams p(static_cast<uint16_t>(cnt), static_cast<uint16_t>(blocks),
                                  static_cast<uint16_t>(TO_GM ? uGap : gGap), static_cast<uint16_t>(TO_GM ? gGap : uGap));
        Dma<TO_GM>(gm[off + static_cast<uint64_t>(g * gmStride)], ub[static_cast<uint32_t>(g * ubStride)], p);
      }
      return;
    }
    for (int64_t k = 0; k < count; ++k) {
      Dma<TO_GM>(gm[off + static_cast<uint64_t>(k * gmStride)], ub[static_cast<uint32_t>(k * ubStride)],
                 static_cast<uint32_t>(len));
    }
  }

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
