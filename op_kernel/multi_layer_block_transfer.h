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
// more plane (mskv_ml::Planes) of 4 * heads-byte rows, staged after the data planes.
//
// Work: the n * L * tokenChunks (block, layer, token chunk) units (unit = (i * L + l) * tokenChunks + k;
// tokenChunks > 1 only when n * L alone would leave cores idle) are split over the cores (main/tail
// share). A unit moves tokensPerChunk token rows of every plane between host block i (rows L * hidden apart) and
// device block block_ids[i] of layer l (contiguous [bs, H, D], or [H, bs, D] for BNSD), in chunks of
// tokensPerInnerLoop rows per UB buffer: one strided copy on the host side and one contiguous copy
// (BNSD: one per head) on the device side per chunk. Ids outside [0, num_blocks): h2d skips the
// unit, d2h writes zeros into the host block.
//
// Staging mode (staging given): every core owns a slice of the staging buffer (stagingSliceElems).
// A group = up to layersPerStage consecutive units of one block. h2d: the group's host rows are first
// copied into the slice with few large strided copies (the "one DMA host -> device" of the fused
// memcpy mode; in this kernel it is a GM -> UB -> GM copy by the same core), a barrier, then the
// scatter from the slice into the caches; d2h the reverse. Results are identical to direct mode.
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
    layersPerStage_ = td.layersPerStage < 1 ? 1 : td.layersPerStage;
    chunks_ = td.tokenChunks < 1 ? 1 : td.tokenChunks;
    tokensPerChunk_ = td.tokensPerChunk;
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

  __aicore__ inline void Process(int64_t begin, int64_t end) {
    const int64_t L = numLayers_;
    int64_t u = begin;
    while (u < end) {
      const int64_t i = u / (L * chunks_);
      const int64_t l0 = u - i * L;  // staging mode: chunks_ == 1
      const int64_t blk = static_cast<int64_t>(idGm_.GetValue(static_cast<uint64_t>(i)));
      const bool valid = blk >= 0 && blk < numBlocks_;
      if (!staged_) {  // unit = (block i, layer, token chunk)
        const int64_t rem = u - i * L * chunks_;
        const int64_t l = rem / chunks_;
        const int64_t k = rem - l * chunks_;
        const int64_t sb = k * tokensPerChunk_;
        const int64_t se = mskv_ml::MinI64(sb + tokensPerChunk_, blockSize_);
        for (int32_t p = 0; p < numPlanes_; ++p) {
          const uint64_t hostOff = static_cast<uint64_t>((i * blockSize_ * L + l) * pl_.plan[p].rowElems);
          if (valid) {
            Unit(p, l, blk, hostGm_[p], hostOff, L * pl_.plan[p].rowElems, sb, se);
          } else if (d2h_) {
            mover_.ZeroRows(hostGm_[p], hostOff + static_cast<uint64_t>(sb * L * pl_.plan[p].rowElems), se - sb,
                            pl_.plan[p].rowElems, L * pl_.plan[p].rowElems);
          }
        }
        u += 1;
        continue;
      }
      const int64_t nl = mskv_ml::MinI64(mskv_ml::MinI64(end - u, L - l0), layersPerStage_);
      if (!valid) {
        if (d2h_) {
          for (int32_t p = 0; p < numPlanes_; ++p) {
            const int64_t hid = pl_.plan[p].rowElems;
            mover_.ZeroRows(hostGm_[p], static_cast<uint64_t>((i * blockSize_ * L + l0) * hid), blockSize_, nl * hid,
                            L * hid);
          }
        }
        u += nl;
        continue;
      }
      StagedGroup(i, l0, nl, blk);
      u += nl;
    }
  }

 private:
  // The host blocks of plane p: host_blocks[p], or scale_host_blocks[q] for the scale plane of data plane q.
  __aicore__ inline __gm__ T* HostPtr(int32_t p) {
    return host_[pl_.list[p]].template GetDataPtr<__gm__ T>(static_cast<uint32_t>(pl_.IndexInList(p)));
  }

  // Host rows of block i, layers [l0, l0 + nl) <-> this core's staging slice ([bs, nl, hidden_p] per
  // plane, planes one after another), then the units from / to the slice.
  __aicore__ inline void StagedGroup(int64_t i, int64_t l0, int64_t nl, int64_t blk) {
    const int64_t L = numLayers_;
    const uint64_t slice = static_cast<uint64_t>(static_cast<int64_t>(AscendC::GetBlockIdx()) * sliceElems_);
    if (d2h_) {
      for (int64_t l = l0; l < l0 + nl; ++l) {
        for (int32_t p = 0; p < numPlanes_; ++p) {
          const int64_t hid = pl_.plan[p].rowElems;
          Unit(p, l, blk, stagingGm_, slice + static_cast<uint64_t>(blockSize_ * nl * prefix_[p] + (l - l0) * hid),
               nl * hid, 0, blockSize_);
        }
      }
      AscendC::PipeBarrier<PIPE_ALL>();  // the slice is written before it is read back
    }
    for (int32_t p = 0; p < numPlanes_; ++p) {
      const int64_t hid = pl_.plan[p].rowElems;
      const int64_t len = nl * hid;
      if (len <= 0) continue;
      const uint64_t hostOff = static_cast<uint64_t>((i * blockSize_ * L + l0) * hid);
      const uint64_t sliceOff = slice + static_cast<uint64_t>(blockSize_ * nl * prefix_[p]);
      const int64_t pitchBytes = mover_.Pitch(len) * static_cast<int64_t>(sizeof(T));
      const int64_t rows = bufferBytes_ / pitchBytes;
      const int64_t piece = bufferBytes_ / static_cast<int64_t>(sizeof(T));
      if (d2h_) mover_.Copy2D(stagingGm_, sliceOff, len, hostGm_[p], hostOff, L * hid, blockSize_, len, rows, piece);
      else mover_.Copy2D(hostGm_[p], hostOff, L * hid, stagingGm_, sliceOff, len, blockSize_, len, rows, piece);
    }
    AscendC::PipeBarrier<PIPE_ALL>();  // the slice is complete before the scatter (h2d) / reuse (d2h)
    if (!d2h_) {
      for (int64_t l = l0; l < l0 + nl; ++l) {
        for (int32_t p = 0; p < numPlanes_; ++p) {
          const int64_t hid = pl_.plan[p].rowElems;
          Unit(p, l, blk, stagingGm_, slice + static_cast<uint64_t>(blockSize_ * nl * prefix_[p] + (l - l0) * hid),
               nl * hid, 0, blockSize_);
        }
      }
      AscendC::PipeBarrier<PIPE_ALL>();  // the slice is read before the next group overwrites it
    }
  }

  // Tokens [sb, se) of block `blk` of plane p, layer l <-> host rows at hostOff (token 0), hostStride
  // elements apart.
  __aicore__ inline void Unit(int32_t p, int64_t l, int64_t blk, AscendC::GlobalTensor<T>& host, uint64_t hostOff,
                              int64_t hostStride, int64_t sb, int64_t se) {
    const mskv_ml::RowPlan& rp = pl_.plan[p];
    if (rp.rowElems <= 0) return;
    AscendC::GlobalTensor<T> dev;
    dev.SetGlobalBuffer(pl_.template Cache<T>(p, l));
    const int64_t hid = rp.rowElems;
    const uint64_t devOff = static_cast<uint64_t>(pl_.planeOffset[p] + blk * blockSize_ * hid);
    // SEG: device block [H, bs, D], token s of head h at h * segStride + s * D; else [bs, hid].
    const int64_t tokStride = SEG ? rp.segElems : hid;
    if (rp.rowsPerLoop <= 0) {  // a row larger than a buffer: token by token
      for (int64_t s = sb; s < se; ++s) {
        const uint64_t h = hostOff + static_cast<uint64_t>(s * hostStride);
        const uint64_t d = devOff + static_cast<uint64_t>(s * tokStride);
        if (d2h_) mover_.BigRow(rp, dev, d, rp.segStride, host, h, rp.segElems);
        else mover_.BigRow(rp, host, h, rp.segElems, dev, d, rp.segStride);
      }
      return;
    }
    const int64_t segPitch = mover_.Pitch(rp.segElems);
    const int64_t rowPitch = rp.numSeg * segPitch;
    const bool wholeRows = !SEG || segPitch == rp.segElems;  // host rows move as one burst each
    for (int64_t s0 = sb; s0 < se; s0 += rp.rowsPerLoop) {
      const int64_t k = mskv_ml::MinI64(rp.rowsPerLoop, se - s0);
      const uint64_t h = hostOff + static_cast<uint64_t>(s0 * hostStride);
      const uint64_t d = devOff + static_cast<uint64_t>(s0 * tokStride);
      AscendC::LocalTensor<T> buf = mover_.Alloc();
      if (d2h_) {
        if (SEG) {
          for (int64_t hh = 0; hh < rp.numSeg; ++hh) {
            mover_.GmToUb(buf[static_cast<uint32_t>(hh * segPitch)], dev, d + static_cast<uint64_t>(hh * rp.segStride),
                          k, rp.segElems, rp.segElems, rowPitch);
          }
        } else {
          mover_.GmToUb(buf, dev, d, k, hid, hid, rowPitch);
        }
        AscendC::LocalTensor<T> ready = mover_.Ready(buf);
        if (wholeRows) {
          mover_.UbToGm(host, h, ready, k, hid, hostStride, rowPitch);
        } else {
          for (int64_t hh = 0; hh < rp.numSeg; ++hh) {
            mover_.UbToGm(host, h + static_cast<uint64_t>(hh * rp.segElems), ready[static_cast<uint32_t>(hh * segPitch)],
                          k, rp.segElems, hostStride, rowPitch);
          }
        }
        mover_.Free(ready);
      } else {
        if (wholeRows) {
          mover_.GmToUb(buf, host, h, k, hid, hostStride, rowPitch);
        } else {
          for (int64_t hh = 0; hh < rp.numSeg; ++hh) {
            mover_.GmToUb(buf[static_cast<uint32_t>(hh * segPitch)], host, h + static_cast<uint64_t>(hh * rp.segElems),
                          k, rp.segElems, hostStride, rowPitch);
          }
        }
        AscendC::LocalTensor<T> ready = mover_.Ready(buf);
        if (SEG) {
          for (int64_t hh = 0; hh < rp.numSeg; ++hh) {
            mover_.UbToGm(dev, d + static_cast<uint64_t>(hh * rp.segStride), ready[static_cast<uint32_t>(hh * segPitch)],
                          k, rp.segElems, rp.segElems, rowPitch);
          }
        } else {
          mover_.UbToGm(dev, d, ready, k, hid, hid, rowPitch);
        }
        mover_.Free(ready);
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
  int64_t layersPerStage_ = 1;
  int64_t chunks_ = 1;
  int64_t tokensPerChunk_ = 0;
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
  RowRange(td, td.numIds * td.numLayers * (td.tokenChunks < 1 ? 1 : td.tokenChunks), &begin, &end);
  op.Process(begin, end);
}

}  // namespace mskv_ml

#endif  // MS_KVCACHE_OP_KERNEL_MULTI_LAYER_BLOCK_TRANSFER_H_
