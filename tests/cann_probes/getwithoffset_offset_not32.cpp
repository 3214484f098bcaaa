// probe: TBuf::GetWithOffset<T>(size, bufOffset) with bufOffset not a multiple of 32 bytes (16)
// official: compiles; the API reference (TBuf GetWithOffset) requires bufOffset to be 32-byte aligned:
//           UB operands must start on 32-byte boundaries. The official CPU-debug build does not assert
//           it (kernel_tbuf_impl.h), so the run verdict is the documented rule.
// expect: accept
// run: error
// twin: getwithoffset_offset32.cpp
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_getwithoffset_offset_not32(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  AscendC::LocalTensor<float> t = buf.GetWithOffset<float>(8, 16);
  AscendC::Duplicate(t, 0.0f, 8);
}
