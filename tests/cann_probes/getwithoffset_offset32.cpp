// probe: TBuf::GetWithOffset<T>(size, bufOffset) with a 32-byte multiple offset (twin of
// getwithoffset_offset_not32.cpp)
// official: accepted
// expect: accept
// run: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_getwithoffset_offset32(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  AscendC::LocalTensor<float> t = buf.GetWithOffset<float>(8, 32);
  AscendC::Duplicate(t, 0.0f, 8);
}
