// The AscendC kernel of MskvMultiLayerKvTransfer and MskvMultiLayerKvTransferQuant (entries
// op_kernel/multi_layer_kv_transfer.cpp, multi_layer_kv_transfer_quant.cpp): the K/V rows of T tokens of every layer between the paged
// caches and one contiguous buffer, in one launch (token granularity, LMCache "KV_2LTD" style).
//
// GM arguments follow the OpDef (op_host/multi_layer_kv_transfer.cpp): buffer, slot_mapping, the
// dynamic input kv_caches (a ListTensorDesc of num_layers * tensorsPerLayer caches, layer-major),
// [the quantized op: scale_caches, num_layers * planes float32 caches,] then the output status (never
// written), workspace and tiling. Quantized caches (int8, 1-byte elements) move as bytes: each scale cache
// is one more plane (mskv_ml::Planes) with rows of 4 * heads bytes (4 for MLA / DSA planes), in the
// buffer after the data planes (layout: docs/ops-transfer.md, "Quantized caches").
//
// Work: the L * T (layer, token) items (item = l * T + t; every plane of the token) are split over the cores
// (main/tail share), so a core owns one contiguous range: a token chunk of one layer, or the tail of one
// layer and the head of the next. When L * T < cores (a few tokens) the items are (plane, layer, token)
// instead (planeItems; item = (p * L + l) * T + t, the buffer's row order), so that every core still works.
// Inside a (plane, layer) the core walks its tokens in runs of up to maxTokensPerLoop consecutive tokens
// with valid slots (slot in [0, num_blocks * block_size)); a run is one UB buffer:
//   d2h: cache rows -> UB (one copy per run of consecutive slots for BSND/MLA/DSA, one strided copy per
//        token for BNSD), then one copy UB -> buffer rows (contiguous);
//   h2d: buffer rows -> UB (one copy), then UB -> cache rows (per run of consecutive slots / token).
// Tokens with an invalid slot: d2h writes zero rows into the buffer (from a UB buffer of zeros), h2d
// skips them. A row larger than a buffer moves by groups of heads or pieces. All offsets are 64-bit.
// Written tensors sharing memory with another tensor of the launch (one cache in two layers, h2d; a
// buffer over a cache, d2h: possible in a graph) stop the launch before any write (mskv::TrapOnAliasedWrites).
#ifndef MS_KVCACHE_OP_KERNEL_MULTI_LAYER_KV_TRANSFER_H_
#define MS_KVCACHE_OP_KERNEL_MULTI_LAYER_KV_TRANSFER_H_

#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"
#include "multi_layer_copy.h"

namespace mskv_ml {

template <typename T, typename S, bool PAD, bool SEG>
class KvTransfer {
 public:
  __aicore__ inline KvTransfer() {}

  // scaleCaches: the scale_caches list of a quantized transfer (td.scalesPerLayer > 0), else unused.
  template <typename TD>
  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR buffer, GM_ADDR slotMapping, GM_ADDR kvCaches,
                              GM_ADDR scaleCaches, const TD& td) {
    mover_.Init(pipe, td.perLoopBuffSize, td.zeroBuffSize);
    bufGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(buffer));
    slotGm_.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(slotMapping));
    pl_.Init(td, kvCaches, scaleCaches);
    numTokens_ = td.numTokens;
    numSlots_ = td.numSlots;
    blockSize_ = td.blockSize;
    d2h_ = td.direction == 0;
    maxRun_ = MinRun(td.maxTokensPerLoop);
    planeItems_ = td.planeItems != 0;
    for (int32_t p = 0; p < mskv_ml::kMaxPlanes; ++p) {
      blockStride_[p] = td.blockStride[p];
      slotStride_[p] = td.slotStride[p];
      bufOffset_[p] = td.bufOffset[p];
    }
    // h2d writes every cache (one Parameter in two layers would race), d2h the buffer (over a cache it
    // would overwrite rows still to be read): stop the launch before anything is written
    bufPtr_ = reinterpret_cast<__gm__ T*>(buffer);
    mskv::TrapOnAliasedWrites(*this, pl_.Tensors() + 1);
  }

  // Span source of mskv::TrapOnAliasedWrites: the cache tensors (kv_caches, scale_caches), then the buffer.
  __aicore__ inline void Span(int32_t i, uint64_t* lo, uint64_t* hi, bool* written) {
    const int64_t numBlocks = blockSize_ > 0 ? numSlots_ / blockSize_ : 0;
    int64_t planeElems[mskv_ml::kMaxPlanes];
    int64_t e = 0;
    for (int32_t p = 0; p < pl_.num; ++p) {
      planeElems[p] = numBlocks * blockStride_[p];
      e = mskv_ml::MaxI64(e, bufOffset_[p] + pl_.numLayers * numTokens_ * pl_.plan[p].rowElems);
    }
    if (i >= pl_.Tensors()) {
      mskv::GmRange(bufPtr_, e, lo, hi);
      *written = d2h_;
      return;
    }
    pl_.template CacheSpan<T>(i, planeElems, lo, hi);
    *written = !d2h_;
  }

  // Items [begin, end): item = layer * T + token (every plane), or with planeItems (plane * L + layer) * T + token.
  __aicore__ inline void Process(int64_t begin, int64_t end) {
    if (numTokens_ <= 0 || begin >= end) return;
    for (int64_t r = begin / numTokens_; r * numTokens_ < end; ++r) {  // r: a layer, or a (plane, layer)
      const int64_t t0 = mskv_ml::MaxI64(begin - r * numTokens_, 0);
      const int64_t t1 = mskv_ml::MinI64(end - r * numTokens_, numTokens_);
      if (planeItems_) {
        const int32_t p = static_cast<int32_t>(r / pl_.numLayers);
        Tokens(r - p * pl_.numLayers, t0, t1, p, p + 1);
      } else {
        Tokens(r, t0, t1, 0, pl_.num);
      }
    }
  }

 private:
  __aicore__ inline static int64_t MinRun(int64_t r) {
    return r < 1 ? 1 : (r > mskv_ml::kMaxRun ? mskv_ml::kMaxRun : r);
  }
  __aicore__ inline int64_t ReadSlot(int64_t t) {
    return static_cast<int64_t>(slotGm_.GetValue(static_cast<uint64_t>(t)));
  }
  __aicore__ inline bool Valid(int64_t s) const { return s >= 0 && s < numSlots_; }
  __aicore__ inline uint64_t CacheOff(int32_t p, int64_t slot) const {
    const int64_t block = slot / blockSize_;
    return static_cast<uint64_t>(pl_.planeOffset[p] + block * blockStride_[p] + (slot - block * blockSize_) * slotStride_[p]);
  }

  // Tokens [t0, t1) of layer l, planes [p0, p1) (the slots are read once for them).
  __aicore__ inline void Tokens(int64_t l, int64_t t0, int64_t t1, int32_t p0, int32_t p1) {
    for (int32_t p = p0; p < p1; ++p) {
      cache_[p].SetGlobalBuffer(pl_.template Cache<T>(p, l));
      rowBase_[p] = bufOffset_[p] + l * numTokens_ * pl_.plan[p].rowElems;
    }
    int64_t slots[mskv_ml::kMaxRun];
    int64_t t = t0;
    while (t < t1) {
      const int64_t s = ReadSlot(t);
      if (!Valid(s)) {  // a run of skipped tokens: zero rows in the buffer (d2h), nothing (h2d)
        int64_t n = 1;
        while (t + n < t1 && !Valid(ReadSlot(t + n))) ++n;
        if (d2h_) {
          for (int32_t p = p0; p < p1; ++p) {
            mover_.ZeroRows(bufGm_, static_cast<uint64_t>(rowBase_[p] + t * pl_.plan[p].rowElems), n,
                            pl_.plan[p].rowElems, pl_.plan[p].rowElems);
          }
        }
        t += n;
        continue;
      }
      slots[0] = s;
      int64_t n = 1;
      while (n < maxRun_ && t + n < t1) {
        const int64_t sn = ReadSlot(t + n);
        if (!Valid(sn)) break;
        slots[n++] = sn;
      }
      for (int32_t p = p0; p < p1; ++p) Run(p, t, n, slots);
      t += n;
    }
  }

  // Consecutive slots from slots[j] on (BSND / MLA rows are linear in the slot), at most n - j.
  __aicore__ inline int64_t Consecutive(const int64_t* slots, int64_t j, int64_t n) const {
    if (SEG) return 1;
    int64_t m = 1;
    while (j + m < n && slots[j + m] == slots[j] + m) ++m;
    return m;
  }

  // Tokens [t, t + n) of plane p, all with valid slots.
  __aicore__ inline void Run(int32_t p, int64_t t, int64_t n, const int64_t* slots) {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    if (rp.rowElems <= 0) return;  // an empty plane (e.g. hidden size 0): nothing to move
    const uint64_t bufRow = static_cast<uint64_t>(rowBase_[p] + t * rp.rowElems);
    if (rp.rowsPerLoop <= 0) {  // rows larger than a buffer: token by token
      for (int64_t j = 0; j < n; ++j) {
        const uint64_t b = bufRow + static_cast<uint64_t>(j * rp.rowElems);
        if (d2h_) mover_.BigRow(rp, cache_[p], CacheOff(p, slots[j]), rp.segStride, bufGm_, b, rp.segElems);
        else mover_.BigRow(rp, bufGm_, b, rp.segElems, cache_[p], CacheOff(p, slots[j]), rp.segStride);
      }
      return;
    }
    const int64_t segPitch = mover_.Pitch(rp.segElems);
    const int64_t rowPitch = rp.numSeg * segPitch;  // BSND/MLA: numSeg = 1
    for (int64_t j0 = 0; j0 < n; j0 += rp.rowsPerLoop) {
      const int64_t k = mskv_ml::MinI64(rp.rowsPerLoop, n - j0);
      const uint64_t b = bufRow + static_cast<uint64_t>(j0 * rp.rowElems);
      AscendC::LocalTensor<T> buf = mover_.Alloc();
      if (d2h_) {
        for (int64_t j = j0; j < j0 + k;) {
          const int64_t m = Consecutive(slots, j, j0 + k);
          AscendC::LocalTensor<T> at = buf[static_cast<uint32_t>((j - j0) * rowPitch)];
          if (SEG) mover_.GmToUb(at, cache_[p], CacheOff(p, slots[j]), rp.numSeg, rp.segElems, rp.segStride, segPitch);
          else mover_.GmToUb(at, cache_[p], CacheOff(p, slots[j]), m, rp.rowElems, rp.rowElems, rowPitch);
          j += m;
        }
        AscendC::LocalTensor<T> ready = mover_.Ready(buf);
        mover_.UbToGm(bufGm_, b, ready, k * rp.numSeg, rp.segElems, rp.segElems, segPitch);
        mover_.Free(ready);
      } else {
        mover_.GmToUb(buf, bufGm_, b, k * rp.numSeg, rp.segElems, rp.segElems, segPitch);
        AscendC::LocalTensor<T> ready = mover_.Ready(buf);
        for (int64_t j = j0; j < j0 + k;) {
          const int64_t m = Consecutive(slots, j, j0 + k);
          AscendC::LocalTensor<T> at = ready[static_cast<uint32_t>((j - j0) * rowPitch)];
          if (SEG) mover_.UbToGm(cache_[p], CacheOff(p, slots[j]), at, rp.numSeg, rp.segElems, rp.segStride, segPitch);
          else mover_.UbToGm(cache_[p], CacheOff(p, slots[j]), at, m, rp.rowElems, rp.rowElems, rowPitch);
          j += m;
        }
        mover_.Free(ready);
      }
    }
  }

  mskv_ml::Mover<T, PAD> mover_;
  AscendC::GlobalTensor<T> bufGm_;
  AscendC::GlobalTensor<S> slotGm_;
  AscendC::GlobalTensor<T> cache_[mskv_ml::kMaxPlanes];
  mskv_ml::Planes pl_;
  int64_t blockStride_[mskv_ml::kMaxPlanes];
  int64_t slotStride_[mskv_ml::kMaxPlanes];
  int64_t bufOffset_[mskv_ml::kMaxPlanes];
  int64_t rowBase_[mskv_ml::kMaxPlanes];
  __gm__ T* bufPtr_ = nullptr;
  int64_t numTokens_ = 0;
  int64_t numSlots_ = 0;
  int64_t blockSize_ = 1;
  int64_t maxRun_ = 1;
  bool planeItems_ = false;
  bool d2h_ = true;
};

template <typename T, typename S, bool PAD, bool SEG, typename TD>
__aicore__ inline void RunKvTransfer(GM_ADDR buffer, GM_ADDR slot_mapping, GM_ADDR kv_caches, GM_ADDR scale_caches,
                                     const TD& td) {
  AscendC::TPipe pipe;
  KvTransfer<T, S, PAD, SEG> op;
  op.Init(&pipe, buffer, slot_mapping, kv_caches, scale_caches, td);
  int64_t begin = 0;
  int64_t end = 0;
  RowRange(td, (td.planeItems != 0 ? td.numPlanes : 1) * td.numLayers * td.numTokens, &begin, &end);
  op.Process(begin, end);
}

}  // namespace mskv_ml

#endif  // MS_KVCACHE_OP_KERNEL_MULTI_LAYER_KV_TRANSFER_H_
