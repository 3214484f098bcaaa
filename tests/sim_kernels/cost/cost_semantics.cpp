// Test kernels of the cost model's rules (tests/test_sim_cost_model.py): each core copies its own `chunks`
// chunks of `chunkBytes` GM -> UB -> GM (src and dst [cores, chunks * chunkBytes] int8).
//   cost_copy_single: one UB buffer (TQueBind depth 1): the copy-in of chunk i + 1 waits for the copy-out of i.
//   cost_copy_double: two buffers: the copy-in of chunk i + 1 overlaps the copy-out of chunk i.
//   cost_copy_barrier: two buffers and a PipeBarrier<PIPE_ALL> after every chunk (no overlap left).
//   cost_copy_flags: one TBuf, ordered by SetFlag/WaitFlag<MTE2_MTE3> and <MTE3_MTE2> (serial like one buffer).
//   cost_copy_strided: one chunk per core, read as `rows` rows of chunkBytes / rows bytes that are
//     `gapBytes` apart in src (a strided DataCopyParams copy), written back contiguously.
#include "kernel_operator.h"

using namespace AscendC;

struct CostTiling {
  uint32_t chunkBytes;
  uint32_t chunks;
  uint32_t rows;
  uint32_t gapBytes;
};

template <int32_t BUFS, bool BARRIER>
__aicore__ inline void CopyChunks(GM_ADDR dst, GM_ADDR src, const CostTiling& t) {
  const uint64_t per = static_cast<uint64_t>(t.chunkBytes) * t.chunks;
  const uint64_t base = static_cast<uint64_t>(GetBlockIdx()) * per;
  GlobalTensor<int8_t> s, d;
  s.SetGlobalBuffer((__gm__ int8_t*)src);
  d.SetGlobalBuffer((__gm__ int8_t*)dst);
  TPipe pipe;
  TQueBind<TPosition::VECIN, TPosition::VECOUT, BUFS> que;
  pipe.InitBuffer(que, BUFS, t.chunkBytes);
  for (uint32_t c = 0; c < t.chunks; ++c) {
    const uint64_t off = base + static_cast<uint64_t>(c) * t.chunkBytes;
    LocalTensor<int8_t> buf = que.template AllocTensor<int8_t>();
    DataCopy(buf, s[off], t.chunkBytes);
    que.EnQue(buf);
    LocalTensor<int8_t> in = que.template DeQue<int8_t>();
    DataCopy(d[off], in, t.chunkBytes);
    que.FreeTensor(in);
    if (BARRIER) PipeBarrier<PIPE_ALL>();
  }
}

extern "C" __global__ __aicore__ void cost_copy_single(GM_ADDR dst, GM_ADDR src, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(CostTiling, t, tiling);
  CopyChunks<1, false>(dst, src, t);
}

extern "C" __global__ __aicore__ void cost_copy_double(GM_ADDR dst, GM_ADDR src, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(CostTiling, t, tiling);
  CopyChunks<2, false>(dst, src, t);
}

extern "C" __global__ __aicore__ void cost_copy_barrier(GM_ADDR dst, GM_ADDR src, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(CostTiling, t, tiling);
  CopyChunks<2, true>(dst, src, t);
}

extern "C" __global__ __aicore__ void cost_copy_strided(GM_ADDR dst, GM_ADDR src, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(CostTiling, t, tiling);
  const uint32_t row = t.chunkBytes / t.rows;
  const uint64_t core = static_cast<uint64_t>(GetBlockIdx());
  GlobalTensor<int8_t> s, d;
  s.SetGlobalBuffer((__gm__ int8_t*)src);
  d.SetGlobalBuffer((__gm__ int8_t*)dst);
  TPipe pipe;
  TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> que;
  pipe.InitBuffer(que, 1, t.chunkBytes);
  LocalTensor<int8_t> buf = que.AllocTensor<int8_t>();
  DataCopy(buf, s[core * t.rows * (row + t.gapBytes)],
           DataCopyParams(static_cast<uint16_t>(t.rows), static_cast<uint16_t>(row / 32),
                          static_cast<uint16_t>(t.gapBytes / 32), 0));
  que.EnQue(buf);
  LocalTensor<int8_t> in = que.DeQue<int8_t>();
  DataCopy(d[core * t.chunkBytes], in, t.chunkBytes);
  que.FreeTensor(in);
}

extern "C" __global__ __aicore__ void cost_copy_flags(GM_ADDR dst, GM_ADDR src, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(CostTiling, t, tiling);
  const uint64_t base = static_cast<uint64_t>(GetBlockIdx()) * t.chunkBytes * t.chunks;
  GlobalTensor<int8_t> s, d;
  s.SetGlobalBuffer((__gm__ int8_t*)src);
  d.SetGlobalBuffer((__gm__ int8_t*)dst);
  TPipe pipe;
  TBuf<TPosition::VECCALC> tb;
  pipe.InitBuffer(tb, t.chunkBytes);
  LocalTensor<int8_t> buf = tb.Get<int8_t>();
  for (uint32_t c = 0; c < t.chunks; ++c) {
    const uint64_t off = base + static_cast<uint64_t>(c) * t.chunkBytes;
    if (c > 0) WaitFlag<HardEvent::MTE3_MTE2>(0);  // the previous copy-out has read the buffer
    DataCopy(buf, s[off], t.chunkBytes);
    SetFlag<HardEvent::MTE2_MTE3>(0);
    WaitFlag<HardEvent::MTE2_MTE3>(0);
    DataCopy(d[off], buf, t.chunkBytes);
    if (c + 1 < t.chunks) SetFlag<HardEvent::MTE3_MTE2>(0);
  }
}
