// MskvCopyBlocks AscendC kernel: for every layer's key and value cache, copy block src to block dst for
// each (src, dst) row of block_mapping (vLLM's copy_blocks).
//
// GM arguments follow the OpDef (op_host/copy_blocks.cpp): the dynamic inputs key_caches and
// value_caches (each a ListTensorDesc of one cache per layer), block_mapping [n, 2], then the output
// status (never written), then workspace and tiling. Work unit u = (cache, piece of a block), as in
// op_host/copy_blocks_tiling.h; each core takes its main/tail share of units, and a unit applies the
// pairs in order to its piece, so the result is the sequential one also for chained pairs
// (a -> b, b -> c). A pair whose src or dst is outside [0, num_blocks) is skipped (nothing outside a
// cache is written); src == dst is a no-op. Caches sharing memory (one Parameter as a key and a value
// cache, or in two layers: possible in a graph) stop the launch before any write (mskv::TrapOnAliasedWrites).
// Tiling key = dtype * 100 + index dtype * 10 + DataCopyPad.
#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"  // ListTensorDesc: not part of kernel_operator.h
#include "kv_copy_common.h"
#include "mskv_tiling_keys.h"

namespace {

template <typename T, typename S, bool PAD>
class BlockCopier {
 public:
  __aicore__ inline BlockCopier() {}

  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR keyCaches, GM_ADDR valueCaches, GM_ADDR blockMapping,
                              int64_t bufferBytes) {
    keys_.Init(reinterpret_cast<__gm__ void*>(keyCaches));
    values_.Init(reinterpret_cast<__gm__ void*>(valueCaches));
    mapGm_.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(blockMapping));
    pipe->InitBuffer(que_, mskv::kBufferNum, static_cast<uint32_t>(bufferBytes));
  }

  // Span source of mskv::TrapOnAliasedWrites: caches [0, L) key, [L, 2L) value, all written.
  __aicore__ inline void Span(int32_t i, uint64_t* lo, uint64_t* hi, bool* written) {
    __gm__ T* base = i < spanLayers_ ? keys_.template GetDataPtr<__gm__ T>(static_cast<uint32_t>(i))
                                     : values_.template GetDataPtr<__gm__ T>(static_cast<uint32_t>(i - spanLayers_));
    mskv::GmRange(base, spanElems_, lo, hi);
    *written = true;
  }

  template <typename TD>
  __aicore__ inline void Process(const TD& td, int64_t begin, int64_t end) {
    // every cache is written: one Parameter as a key and a value cache (or in two layers) would make
    // the blocks depend on the order of the cores; stop the launch before anything is written
    spanLayers_ = static_cast<int32_t>(td.numLayers);
    spanElems_ = td.numBlocks * td.blockElems;
    if (td.numPairs > 0) mskv::TrapOnAliasedWrites(*this, 2 * spanLayers_);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t c = u / td.piecesPerBlock;
      const int64_t piece = u - c * td.piecesPerBlock;
      __gm__ T* base = c < td.numLayers ? keys_.template GetDataPtr<__gm__ T>(static_cast<uint32_t>(c))
                                        : values_.template GetDataPtr<__gm__ T>(static_cast<uint32_t>(c - td.numLayers));
      AscendC::GlobalTensor<T> cache;
      cache.SetGlobalBuffer(base);
      const int64_t first = piece * td.pieceElems;
      const int64_t last = mskv::MinI64(first + td.pieceElems, td.blockElems);
      // GM ordering inside one core: a copy-in (MTE2) is ordered after every copy-out (MTE3) except
      // the previous chunk's by the queue's buffer reuse, so a pair reading the block the previous
      // pair wrote needs an MTE3 -> MTE2 barrier; two copy-outs to the same bytes need a
      // PipeBarrier<PIPE_MTE3> between them. `written` holds the dst blocks copied out since the last
      // barrier (a barrier is also issued when it is full).
      int64_t written[kMaxTracked];
      int32_t numWritten = 0;
      int64_t lastDst = -1;
      for (int64_t i = 0; i < td.numPairs; ++i) {
        const int64_t src = static_cast<int64_t>(mapGm_.GetValue(static_cast<uint64_t>(2 * i)));
        const int64_t dst = static_cast<int64_t>(mapGm_.GetValue(static_cast<uint64_t>(2 * i + 1)));
        if (src < 0 || src >= td.numBlocks || dst < 0 || dst >= td.numBlocks || src == dst) continue;
        if (src == lastDst) {
          AscendC::PipeBarrier<PIPE_ALL>();
          numWritten = 0;
        } else if (numWritten == kMaxTracked || Contains(written, numWritten, dst)) {
          AscendC::PipeBarrier<PIPE_MTE3>();
          numWritten = 0;
        }
        written[numWritten++] = dst;
        const uint64_t from = static_cast<uint64_t>(src * td.blockElems);
        const uint64_t to = static_cast<uint64_t>(dst * td.blockElems);
        for (int64_t off = first; off < last; off += td.chunkElems) {
          const int64_t len = mskv::MinI64(td.chunkElems, last - off);
          CopyChunk(cache, from + static_cast<uint64_t>(off), to + static_cast<uint64_t>(off), len);
        }
        lastDst = dst;
      }
    }
  }

 private:
  static constexpr int32_t kMaxTracked = 16;

  __aicore__ inline static bool Contains(const int64_t* v, int32_t n, int64_t x) {
    for (int32_t i = 0; i < n; ++i) {
      if (v[i] == x) return true;
    }
    return false;
  }

  __aicore__ inline void CopyChunk(AscendC::GlobalTensor<T>& cache, uint64_t from, uint64_t to, int64_t len) {
    AscendC::LocalTensor<T> buf = que_.template AllocTensor<T>();
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      AscendC::DataCopyExtParams in(1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
      AscendC::DataCopyPad(buf, cache[from], in, noPad);
    } else {
      AscendC::DataCopy(buf, cache[from], static_cast<uint32_t>(len));
    }
#else
    AscendC::DataCopy(buf, cache[from], static_cast<uint32_t>(len));
#endif
    que_.EnQue(buf);
    AscendC::LocalTensor<T> ready = que_.template DeQue<T>();
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      AscendC::DataCopyExtParams out(1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPad(cache[to], ready, out);
    } else {
      AscendC::DataCopy(cache[to], ready, static_cast<uint32_t>(len));
    }
#else
    AscendC::DataCopy(cache[to], ready, static_cast<uint32_t>(len));
#endif
    que_.FreeTensor(ready);
  }

  AscendC::ListTensorDesc keys_;
  AscendC::ListTensorDesc values_;
  int32_t spanLayers_ = 0;
  int64_t spanElems_ = 0;
  AscendC::GlobalTensor<S> mapGm_;
  AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, mskv::kBufferNum> que_;
};

}  // namespace

template <typename T, typename S, bool PAD, typename TD>
__aicore__ inline void RunCopyBlocks(GM_ADDR key_caches, GM_ADDR value_caches, GM_ADDR block_mapping, const TD& td) {
  AscendC::TPipe pipe;
  BlockCopier<T, S, PAD> copier;
  copier.Init(&pipe, key_caches, value_caches, block_mapping, td.bufferBytes);
  int64_t begin = 0;
  int64_t end = 0;
  mskv::RowRange(td, td.numPairs > 0 ? 2 * td.numLayers * td.piecesPerBlock : 0, &begin, &end);
  copier.Process(td, begin, end);
}

extern "C" __global__ __aicore__ void mskv_copy_blocks(GM_ADDR key_caches, GM_ADDR value_caches, GM_ADDR block_mapping,
                                                  GM_ADDR status, GM_ADDR workspace, GM_ADDR tiling) {
  MSKV_UNUSED(status, workspace);
  GET_TILING_DATA(td, tiling);
  // one branch per tiling key of op_kernel/mskv_tiling_keys.h for this target; any other key traps
#define MSKV_BRANCH(K, T, S, PAD) \
  if (TILING_KEY_IS(K)) return RunCopyBlocks<T, S, PAD>(key_caches, value_caches, block_mapping, td);
  MSKV_KEYS_COPY_BLOCKS(MSKV_BRANCH)
#undef MSKV_BRANCH
  MSKV_UNKNOWN_TILING_KEY();
}
