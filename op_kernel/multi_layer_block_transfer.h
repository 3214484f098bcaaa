// The AscendC kernel of MskvMultiLayerBlockTransfer and MskvMultiLayerBlockTransferQuant (entries
// op_kernel/multi_layer_block_transfer.cpp, multi_layer_block_transfer_quant.cpp): whole blocks of every layer between the per-layer paged
// caches and token-major host blocks, in one launch (block granularity, pcieThrough style).
//
// GM arguments follow the OpDef (op_host/multi_layer_block_transfer.cpp): block_ids, staging
// (OPTIONAL; absent or empty = direct mode), host_blocks (DYNAMIC, one tensor per plane
// [n, block_size, L, H, D] / [n, block_size, L, hidden]), kv_caches (DYNAMIC, L * tensorsPerLayer
// caches, layer-major), [the quantized op: scale_host_blocks (DYNAMIC, one float32 tensor per plane
// [n, block_size, L, heads]), scale_caches (DYNAMIC, L * planes float32 caches),] then the output status
// (never written), workspace and tiling. Quantized caches (int8) move as bytes: each scale cache is one
// more plane (mskv_ml::Planes) of 4 * heads-byte rows, after the data planes.
//
// Work: the n * layerGroups * block_size (block, layer group, token) units (unit = (i * layerGroups + g) *
// block_size + s) are split over the cores (main/tail share), so every core has work whenever there are
// as many tokens as cores; a core's units are consecutive, and it moves its tokens of one (block, layer
// group) together. In host memory a token's rows of consecutive layers are contiguous ([block_size, L,
// hidden] per block and plane), so with the group spanning all layers (layersPerGroup = L whenever one
// token of every layer fits a UB buffer) a core's tokens of a block are one contiguous host range. Per
// plane, tokensPerInnerLoop tokens go through one UB buffer at a time:
//   host side: their rows of the group's layers as one copy (one run when the group is every layer;
//     rows 32-byte aligned per head in UB when DataCopyPad is needed);
//   device side: per layer (BSND / MLA / DSA: the tokens' rows are contiguous in the cache block) or per
//     layer and head (BNSD: [H, block_size, D], a head's rows are contiguous) one strided copy from / to UB
//     (UB-side scatter / gather: the host side never moves less than whole token rows).
// Ids outside [0, num_blocks): h2d skips the unit, d2h writes zeros into the host block.
//
// Staging mode (staging given): every core owns a slice of the staging buffer (stagingSliceElems). A core
// moves stagingTokens of its tokens of a (block, layer group) at a time; h2d: their host rows into the slice
// with large contiguous copies (the "one DMA host -> device" of the fused memcpy mode, done by the core), a
// barrier, then the device-side scatter from the slice exactly as the direct mode does it from host memory;
// d2h the reverse. Results are identical to direct mode.
// Written tensors sharing memory with another tensor of the launch (one cache in two layers, h2d; host
// blocks or staging over a cache: possible in a graph) stop the launch before any write
// (mskv::TrapOnAliasedWrites).
#ifndef MS_KVCACHE_OP_KERNEL_MULTI_LAYER_BLOCK_TRANSFER_H_
#define MS_KVCACHE_OP_KERNEL_MULTI_LAYER_BLOCK_TRANSFER_H_

#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"
#include "multi_layer_copy.h"

namespace mskv_ml {

template <typename T, typename S, bool PAD, bool SEG>
class BlockTransfer {
 public:
  __aicore__ inline BlockTransfer() {}

  // scaleHost, scaleCaches: the scale_host_blocks / scale_caches lists of a quantized transfer
  // (td.scalesPerLayer > 0), else unused.
  template <typename TD>
  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR blockIds, GM_ADDR staging, GM_ADDR hostBlocks,
                              GM_ADDR kvCaches, GM_ADDR scaleHost, GM_ADDR scaleCaches, const TD& td) {
    pl_.Init(td, kvCaches, scaleCaches);  // the caches, then the host blocks of the same planes
    host_[0].Init(reinterpret_cast<__gm__ void*>(hostBlocks));
    if (td.scalesPerLayer > 0) host_[1].Init(reinterpret_cast<__gm__ void*>(scaleHost));
    mover_.Init(pipe, td.perLoopBuffSize, td.zeroBuffSize);
    idGm_.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(blockIds));
    staged_ = td.staging != 0;
    if (staged_) stagingGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(staging));
    numPlanes_ = pl_.num;
    numLayers_ = td.numLayers;
    numBlocks_ = td.numBlocks;
    blockSize_ = td.blockSize;
    d2h_ = td.direction == 0;
    bufferBytes_ = td.perLoopBuffSize;
    sliceElems_ = td.stagingSliceElems;
    groups_ = td.layerGroups < 1 ? 1 : td.layerGroups;
    perGroup_ = td.layersPerGroup < 1 ? 1 : td.layersPerGroup;
    stageTokens_ = td.stagingTokens < 1 ? 1 : td.stagingTokens;
    for (int32_t p = 0; p < mskv_ml::kMaxPlanes; ++p) prefix_[p] = td.hiddenPrefix[p];
    for (int32_t p = 0; p < numPlanes_; ++p) hostGm_[p].SetGlobalBuffer(HostPtr(p));
    // h2d writes every cache (one Parameter in two layers would race), d2h the host blocks (over a
    // cache they would overwrite blocks still to be read), both the staging slices: stop the launch
    // before anything is written
    stagingPtr_ = staged_ ? reinterpret_cast<__gm__ T*>(staging) : nullptr;
    numIds_ = td.numIds;
    stagingElems_ = staged_ ? td.usedCoreNum * td.stagingSliceElems : 0;
    mskv::TrapOnAliasedWrites(*this, pl_.Tensors() + numPlanes_ + (staged_ ? 1 : 0));
  }

  // Span source of mskv::TrapOnAliasedWrites: the cache tensors (kv_caches, scale_caches), the host blocks
  // (one per plane: host_blocks, scale_host_blocks), then the staging buffer.
  __aicore__ inline void Span(int32_t i, uint64_t* lo, uint64_t* hi, bool* written) {
    const int32_t nc = pl_.Tensors();
    if (i < nc) {
      int64_t planeElems[mskv_ml::kMaxPlanes];
      for (int32_t p = 0; p < numPlanes_; ++p) planeElems[p] = numBlocks_ * blockSize_ * pl_.plan[p].rowElems;
      pl_.template CacheSpan<T>(i, planeElems, lo, hi);
      *written = !d2h_;
    } else if (i < nc + numPlanes_) {
      const int32_t p = i - nc;
      mskv::GmRange(HostPtr(p), numIds_ * blockSize_ * numLayers_ * pl_.plan[p].rowElems, lo, hi);
      *written = d2h_;
    } else {
      mskv::GmRange(stagingPtr_, stagingElems_, lo, hi);
      *written = true;
    }
  }

  // Units [begin, end): runs of consecutive tokens of one (block, layer group).
  __aicore__ inline void Process(int64_t begin, int64_t end) {
    const int64_t bs = blockSize_;
    int64_t u = begin;
    while (u < end && bs > 0) {
      const int64_t ig = u / bs;
      const int64_t s0 = u - ig * bs;
      const int64_t s1 = mskv_ml::MinI64(bs, s0 + (end - u));
      const int64_t i = ig / groups_;
      const int64_t l0 = (ig - i * groups_) * perGroup_;
      const int64_t nl = mskv_ml::MinI64(perGroup_, numLayers_ - l0);
      const int64_t blk = static_cast<int64_t>(idGm_.GetValue(static_cast<uint64_t>(i)));
      const bool valid = blk >= 0 && blk < numBlocks_;
      if (nl > 0) {
        if (!valid) ZeroHost(i, l0, nl, s0, s1);
        else if (staged_) Staged(i, l0, nl, s0, s1, blk);
        else Direct(i, l0, nl, s0, s1, blk);
      }
      u += s1 - s0;
    }
  }

 private:
  // The host blocks of plane p: host_blocks[p], or scale_host_blocks[q] for the scale plane of data plane q.
  __aicore__ inline __gm__ T* HostPtr(int32_t p) {
    return host_[pl_.list[p]].template GetDataPtr<__gm__ T>(static_cast<uint32_t>(pl_.IndexInList(p)));
  }

  // Element offset of token s, layer l of host block i of plane p.
  __aicore__ inline uint64_t HostOff(int32_t p, int64_t i, int64_t s, int64_t l) const {
    return static_cast<uint64_t>(((i * blockSize_ + s) * numLayers_ + l) * pl_.plan[p].rowElems);
  }

  // d2h of an id outside [0, num_blocks): zero host rows (tokens [s0, s1), layers [l0, l0 + nl)); h2d: nothing.
  __aicore__ inline void ZeroHost(int64_t i, int64_t l0, int64_t nl, int64_t s0, int64_t s1) {
    if (!d2h_) return;
    for (int32_t p = 0; p < numPlanes_; ++p) {
      const int64_t hid = pl_.plan[p].rowElems;
      if (hid <= 0) continue;
      mover_.ZeroRows(hostGm_[p], HostOff(p, i, s0, l0), s1 - s0, nl * hid, numLayers_ * hid);
    }
  }

  // Direct mode: the tokens [s0, s1) of layers [l0, l0 + nl) between host block i and device block blk.
  __aicore__ inline void Direct(int64_t i, int64_t l0, int64_t nl, int64_t s0, int64_t s1, int64_t blk) {
    for (int32_t p = 0; p < numPlanes_; ++p) {
      Rows(p, l0, nl, blk, s0, s1, hostGm_[p], HostOff(p, i, s0, l0), numLayers_ * pl_.plan[p].rowElems);
    }
  }

  // Staging mode: stagingTokens tokens at a time through this core's slice of the staging buffer
  // ([k, nl, hidden_p] per plane, planes one after another).
  __aicore__ inline void Staged(int64_t i, int64_t l0, int64_t nl, int64_t s0, int64_t s1, int64_t blk) {
    const uint64_t slice = static_cast<uint64_t>(static_cast<int64_t>(AscendC::GetBlockIdx()) * sliceElems_);
    for (int64_t s = s0; s < s1; s += stageTokens_) {
      const int64_t k = mskv_ml::MinI64(stageTokens_, s1 - s);
      if (d2h_) {
        for (int32_t p = 0; p < numPlanes_; ++p) {
          const int64_t len = nl * pl_.plan[p].rowElems;
          Rows(p, l0, nl, blk, s, s + k, stagingGm_, slice + static_cast<uint64_t>(k * nl * prefix_[p]), len);
        }
        AscendC::PipeBarrier<PIPE_ALL>();  // the slice is written before it is read back
        for (int32_t p = 0; p < numPlanes_; ++p) SliceHost(p, i, l0, nl, s, k, slice);
      } else {
        for (int32_t p = 0; p < numPlanes_; ++p) SliceHost(p, i, l0, nl, s, k, slice);
        AscendC::PipeBarrier<PIPE_ALL>();  // the slice is complete before the scatter
        for (int32_t p = 0; p < numPlanes_; ++p) {
          const int64_t len = nl * pl_.plan[p].rowElems;
          Rows(p, l0, nl, blk, s, s + k, stagingGm_, slice + static_cast<uint64_t>(k * nl * prefix_[p]), len);
        }
      }
      AscendC::PipeBarrier<PIPE_ALL>();  // the slice is read before the next piece overwrites it
    }
  }

  // Staging: k token rows of nl layers of plane p between host block i and the slice (rows nl * hidden long,
  // contiguous in the slice; L * hidden apart in the host block, one range when nl = L).
  __aicore__ inline void SliceHost(int32_t p, int64_t i, int64_t l0, int64_t nl, int64_t s, int64_t k, uint64_t slice) {
    const int64_t hid = pl_.plan[p].rowElems;
    const int64_t len = nl * hid;
    if (len <= 0) return;
    const uint64_t sliceOff = slice + static_cast<uint64_t>(k * nl * prefix_[p]);
    const int64_t pitchBytes = mover_.Pitch(len) * static_cast<int64_t>(sizeof(T));
    const int64_t rows = bufferBytes_ / pitchBytes;
    const int64_t piece = bufferBytes_ / static_cast<int64_t>(sizeof(T));
    if (d2h_) mover_.Copy2D(stagingGm_, sliceOff, len, hostGm_[p], HostOff(p, i, s, l0), numLayers_ * hid, k, len, rows, piece);
    else mover_.Copy2D(hostGm_[p], HostOff(p, i, s, l0), numLayers_ * hid, stagingGm_, sliceOff, len, k, len, rows, piece);
  }

  // Tokens [s0, s1) of layers [l0, l0 + nl) of plane p between device block blk and the "outside" rows at
  // ext[extOff] (token s0, layer l0; a token's nl layer rows contiguous, tokens extStride apart): host memory
  // (direct) or the staging slice. tokensPerInnerLoop tokens per UB buffer: the outside side in one copy,
  // the device side one copy per layer (and head, BNSD).
  __aicore__ inline void Rows(int32_t p, int64_t l0, int64_t nl, int64_t blk, int64_t s0, int64_t s1,
                              AscendC::GlobalTensor<T>& ext, uint64_t extOff, int64_t extStride) {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    if (rp.rowElems <= 0) return;
    if (rp.rowsPerLoop <= 0) {  // a row larger than a buffer: token by token, layer by layer
      BigRows(p, l0, nl, blk, s0, s1, ext, extOff, extStride);
      return;
    }
    const int64_t segPitch = mover_.Pitch(rp.segElems);
    const int64_t rowPitch = nl * rp.numSeg * segPitch;  // UB elements of one token (nl layers)
    for (int64_t s = s0; s < s1; s += rp.rowsPerLoop) {
      const int64_t k = mskv_ml::MinI64(rp.rowsPerLoop, s1 - s);
      const uint64_t off = extOff + static_cast<uint64_t>((s - s0) * extStride);
      AscendC::LocalTensor<T> buf = mover_.Alloc();
      if (d2h_) {
        for (int64_t q = 0; q < nl; ++q) DevToUb(p, l0 + q, blk, s, k, buf[static_cast<uint32_t>(q * rp.numSeg * segPitch)], rowPitch);
        AscendC::LocalTensor<T> ready = mover_.Ready(buf);
        UbToExt(rp, ext, off, extStride, k, nl, ready, rowPitch);
        mover_.Free(ready);
      } else {
        ExtToUb(rp, ext, off, extStride, k, nl, buf, rowPitch);
        AscendC::LocalTensor<T> ready = mover_.Ready(buf);
        for (int64_t q = 0; q < nl; ++q) UbToDev(p, l0 + q, blk, s, k, ready[static_cast<uint32_t>(q * rp.numSeg * segPitch)], rowPitch);
        mover_.Free(ready);
      }
    }
  }

  // ---- outside side (host memory or the staging slice): k token rows of nl layers, whole rows per copy
  __aicore__ inline void ExtToUb(const mskv_ml::RowPlan& rp, AscendC::GlobalTensor<T>& ext, uint64_t off,
                                 int64_t extStride, int64_t k, int64_t nl, const AscendC::LocalTensor<T>& ub,
                                 int64_t rowPitch) {
    const int64_t len = nl * rp.rowElems;
    const int64_t segPitch = mover_.Pitch(rp.segElems);
    if (segPitch == rp.segElems) {  // UB holds the rows as they are outside
      mover_.GmToUb(ub, ext, off, k, len, extStride, rowPitch);
    } else if (extStride == len) {  // every segment 32-byte aligned in UB, one contiguous outside range
      mover_.GmToUb(ub, ext, off, k * nl * rp.numSeg, rp.segElems, rp.segElems, segPitch);
    } else {
      for (int64_t j = 0; j < k; ++j) {
        mover_.GmToUb(ub[static_cast<uint32_t>(j * rowPitch)], ext, off + static_cast<uint64_t>(j * extStride),
                      nl * rp.numSeg, rp.segElems, rp.segElems, segPitch);
      }
    }
  }

  __aicore__ inline void UbToExt(const mskv_ml::RowPlan& rp, AscendC::GlobalTensor<T>& ext, uint64_t off,
                                 int64_t extStride, int64_t k, int64_t nl, const AscendC::LocalTensor<T>& ub,
                                 int64_t rowPitch) {
    const int64_t len = nl * rp.rowElems;
    const int64_t segPitch = mover_.Pitch(rp.segElems);
    if (segPitch == rp.segElems) {
      mover_.UbToGm(ext, off, ub, k, len, extStride, rowPitch);
    } else if (extStride == len) {
      mover_.UbToGm(ext, off, ub, k * nl * rp.numSeg, rp.segElems, rp.segElems, segPitch);
    } else {
      for (int64_t j = 0; j < k; ++j) {
        mover_.UbToGm(ext, off + static_cast<uint64_t>(j * extStride), ub[static_cast<uint32_t>(j * rowPitch)],
                      nl * rp.numSeg, rp.segElems, rp.segElems, segPitch);
      }
    }
  }

  // ---- device side: k tokens from token s of layer l's cache block blk <-> UB rows rowPitch apart
  // Element offset of token s (head 0) in the cache block: BSND [bs, hidden], BNSD [H, bs, D].
  __aicore__ inline uint64_t DevOff(int32_t p, int64_t blk, int64_t s) const {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    return static_cast<uint64_t>(pl_.planeOffset[p] + blk * blockSize_ * rp.rowElems + s * (SEG ? rp.segElems : rp.rowElems));
  }

  __aicore__ inline void DevToUb(int32_t p, int64_t l, int64_t blk, int64_t s, int64_t k,
                                 const AscendC::LocalTensor<T>& ub, int64_t rowPitch) {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    AscendC::GlobalTensor<T> dev;
    dev.SetGlobalBuffer(pl_.template Cache<T>(p, l));
    const uint64_t d = DevOff(p, blk, s);
    if (SEG) {  // BNSD: one copy per head, the tokens of a head contiguous in the cache
      const int64_t segPitch = mover_.Pitch(rp.segElems);
      for (int64_t h = 0; h < rp.numSeg; ++h) {
        mover_.GmToUb(ub[static_cast<uint32_t>(h * segPitch)], dev, d + static_cast<uint64_t>(h * rp.segStride), k,
                      rp.segElems, rp.segElems, rowPitch);
      }
    } else {  // BSND / MLA / DSA: the tokens' rows contiguous in the cache
      mover_.GmToUb(ub, dev, d, k, rp.rowElems, rp.rowElems, rowPitch);
    }
  }

  __aicore__ inline void UbToDev(int32_t p, int64_t l, int64_t blk, int64_t s, int64_t k,
                                 const AscendC::LocalTensor<T>& ub, int64_t rowPitch) {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    AscendC::GlobalTensor<T> dev;
    dev.SetGlobalBuffer(pl_.template Cache<T>(p, l));
    const uint64_t d = DevOff(p, blk, s);
    if (SEG) {
      const int64_t segPitch = mover_.Pitch(rp.segElems);
      for (int64_t h = 0; h < rp.numSeg; ++h) {
        mover_.UbToGm(dev, d + static_cast<uint64_t>(h * rp.segStride), ub[static_cast<uint32_t>(h * segPitch)], k,
                      rp.segElems, rp.segElems, rowPitch);
      }
    } else {
      mover_.UbToGm(dev, d, ub, k, rp.rowElems, rp.rowElems, rowPitch);
    }
  }

  // A row (one token, one layer) larger than a buffer: by groups of segments or pieces (mskv_ml::Mover::BigRow).
  __aicore__ inline void BigRows(int32_t p, int64_t l0, int64_t nl, int64_t blk, int64_t s0, int64_t s1,
                                 AscendC::GlobalTensor<T>& ext, uint64_t extOff, int64_t extStride) {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    for (int64_t q = 0; q < nl; ++q) {
      AscendC::GlobalTensor<T> dev;
      dev.SetGlobalBuffer(pl_.template Cache<T>(p, l0 + q));
      for (int64_t s = s0; s < s1; ++s) {
        const uint64_t e = extOff + static_cast<uint64_t>((s - s0) * extStride + q * rp.rowElems);
        const uint64_t d = DevOff(p, blk, s);
        if (d2h_) mover_.BigRow(rp, dev, d, rp.segStride, ext, e, rp.segElems);
        else mover_.BigRow(rp, ext, e, rp.segElems, dev, d, rp.segStride);
      }
    }
  }

  mskv_ml::Mover<T, PAD> mover_;
  AscendC::GlobalTensor<S> idGm_;
  AscendC::GlobalTensor<T> stagingGm_;
  AscendC::ListTensorDesc host_[mskv_ml::kMaxLists];
  AscendC::GlobalTensor<T> hostGm_[mskv_ml::kMaxPlanes];
  mskv_ml::Planes pl_;
  int64_t prefix_[mskv_ml::kMaxPlanes];
  __gm__ T* stagingPtr_ = nullptr;
  int64_t numIds_ = 0;
  int64_t stagingElems_ = 0;
  int32_t numPlanes_ = 0;
  int64_t numLayers_ = 1;
  int64_t numBlocks_ = 0;
  int64_t blockSize_ = 0;
  int64_t bufferBytes_ = 0;
  int64_t sliceElems_ = 0;
  int64_t groups_ = 1;
  int64_t perGroup_ = 1;
  int64_t stageTokens_ = 1;
  bool staged_ = false;
  bool d2h_ = false;
};

template <typename T, typename S, bool PAD, bool SEG, typename TD>
__aicore__ inline void RunBlockTransfer(GM_ADDR block_ids, GM_ADDR staging, GM_ADDR host_blocks, GM_ADDR kv_caches,
                                        GM_ADDR scale_host_blocks, GM_ADDR scale_caches, const TD& td) {
  AscendC::TPipe pipe;
  BlockTransfer<T, S, PAD, SEG> op;
  op.Init(&pipe, block_ids, staging, host_blocks, kv_caches, scale_host_blocks, scale_caches, td);
  int64_t begin = 0;
  int64_t end = 0;
  RowRange(td, td.numIds * (td.layerGroups < 1 ? 1 : td.layerGroups) * td.blockSize, &begin, &end);
  op.Process(begin, end);
}

}  // namespace mskv_ml

#endif  // MS_KVCACHE_OP_KERNEL_MULTI_LAYER_BLOCK_TRANSFER_H_
