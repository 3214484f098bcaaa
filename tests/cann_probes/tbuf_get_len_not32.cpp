// probe: TBuf::Get<T>(len) with len * sizeof(T) not a multiple of 32 bytes (7 floats = 28 bytes)
// official: compiles; the CPU-debug build asserts at run time (kernel_tbuf_impl.h, TBuf<pos>::Get(uint32_t):
//           ASCENDC_DEBUG_ASSERT(dataLen % ONE_BLK_SIZE == 0, "... should be times of 32 Bytes")). The
//           run verdict is that assertion's; CANN's CPU-debug runtime is binary-only and not run here.
// expect: accept
// run: error
// twin: tbuf_get_len32.cpp
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_tbuf_get_len_not32(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 256);
  AscendC::LocalTensor<float> t = buf.Get<float>(7);
  AscendC::Duplicate(t, 0.0f, 7);
}
