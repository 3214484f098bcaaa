// Test-only kernel for the cost model's calibration (tests/test_sim_cost_model.py): a host -> device block
// transfer with the structure HeteroFusedKernels' pcieThrough multi_layer_block_transfer documents for its
// published A3 figures - written here from that description, not copied:
//   one host block [block_size, L, H, D] (token-major); the device block of layer l is [H, block_size, D] at
//   layer l's offset of `dev` ([L, H, block_size, D]);
//   the block's tokens are split over the cores (tokensPerCore each); a core moves tokensPerInnerLoop tokens
//   per step through one of two UB buffers (TQueBind<VECIN, VECOUT, 2>): one DataCopy of the step's whole
//   token rows from the host block (contiguous), then per (layer, head) one strided DataCopy of the step's
//   tokens of that head into the device block.
// Zero-copy mode: `host` is host memory read over PCIe; staged mode: `host` is a device copy of the block
// (made by aclrtMemcpyAsync before the launch, priced separately by the test).
#include "kernel_operator.h"

using namespace AscendC;

struct HfkTiling {
  uint32_t numLayers;
  uint32_t numHeads;
  uint32_t headDims;
  uint32_t blockSize;
  uint32_t tokensPerCore;
  uint32_t tokensPerInnerLoop;
  uint32_t bufferBytes;
  uint32_t pad;
};

extern "C" __global__ __aicore__ void hfk_block_transfer(GM_ADDR dev, GM_ADDR host, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(HfkTiling, t, tiling);
  const uint32_t rowBytes = t.numLayers * t.numHeads * t.headDims;  // one token of every layer (int8)
  GlobalTensor<int8_t> hostGm, devGm;
  hostGm.SetGlobalBuffer((__gm__ int8_t*)host, static_cast<uint64_t>(t.blockSize) * rowBytes);
  devGm.SetGlobalBuffer((__gm__ int8_t*)dev, static_cast<uint64_t>(t.blockSize) * rowBytes);
  TPipe pipe;
  TQueBind<TPosition::VECIN, TPosition::VECOUT, 2> que;
  pipe.InitBuffer(que, 2, t.bufferBytes);
  const uint32_t first = static_cast<uint32_t>(GetBlockIdx()) * t.tokensPerCore;
  uint32_t last = first + t.tokensPerCore;
  if (last > t.blockSize) last = t.blockSize;
  const uint16_t headBlocks = static_cast<uint16_t>(t.headDims / 32);
  const uint16_t ubGap = static_cast<uint16_t>((t.numLayers * t.numHeads - 1) * t.headDims / 32);
  for (uint32_t tok = first; tok < last; tok += t.tokensPerInnerLoop) {
    const uint32_t m = (last - tok < t.tokensPerInnerLoop) ? last - tok : t.tokensPerInnerLoop;
    LocalTensor<int8_t> buf = que.AllocTensor<int8_t>();
    DataCopy(buf, hostGm[static_cast<uint64_t>(tok) * rowBytes],
             DataCopyParams(static_cast<uint16_t>(m), static_cast<uint16_t>(rowBytes / 32), 0, 0));
    que.EnQue(buf);
    LocalTensor<int8_t> in = que.DeQue<int8_t>();
    for (uint32_t l = 0; l < t.numLayers; ++l) {
      for (uint32_t h = 0; h < t.numHeads; ++h) {
        const uint64_t d = (static_cast<uint64_t>(l * t.numHeads + h) * t.blockSize + tok) * t.headDims;
        DataCopy(devGm[d], in[(l * t.numHeads + h) * t.headDims], DataCopyParams(static_cast<uint16_t>(m), headBlocks, ubGap, 0));
      }
    }
    que.FreeTensor(in);
  }
}
