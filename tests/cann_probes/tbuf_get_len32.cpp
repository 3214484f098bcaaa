// probe: TBuf::Get<T>(len) with len * sizeof(T) a multiple of 32 bytes (8 floats; twin of tbuf_get_len_not32.cpp)
// official: accepted (compile and the CPU-debug run-time assertion)
// expect: accept
// run: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_tbuf_get_len32(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  AscendC::LocalTensor<float> t = buf.Get<float>(8);
  AscendC::Duplicate(t, 0.0f, 8);
}
