// probe: Cast float -> half with RoundMode::CAST_NONE (twin of roundmode_cast_hybrid.cpp; CAST_NONE is
// the float -> half mode both A2/A3 and 310P support)
// official: accepted
// expect: accept
// run: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_roundmode_cast_none(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> a;
  AscendC::TBuf<AscendC::TPosition::VECCALC> b;
  pipe.InitBuffer(a, 256);
  pipe.InitBuffer(b, 256);
  AscendC::LocalTensor<float> src = a.Get<float>();
  AscendC::LocalTensor<half> dst = b.Get<half>();
  AscendC::Duplicate(src, 1.0f, 64);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Cast(dst, src, AscendC::RoundMode::CAST_NONE, 64);
}
