// probe: Cast with RoundMode::CAST_HYBRID
// official: rejected on A2/A3 and 310P (kernel_utils_mode.h: the enumerator exists only for
//           __NPU_ARCH__ 3510 / 5102 / 3003)
// expect: reject
// twin: roundmode_cast_none.cpp
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_roundmode_cast_hybrid(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
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
  AscendC::Cast(dst, src, AscendC::RoundMode::CAST_HYBRID, 64);
}
