// probe: Cast bfloat16_t -> float (CAST_NONE)
// official: accepted on A2/A3; 310P has no bfloat16 vector support
// expect[a2]: accept
// expect[310p]: reject
// run[a2]: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_bf16_cast_per_target(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> a;
  AscendC::TBuf<AscendC::TPosition::VECCALC> b;
  pipe.InitBuffer(a, 256);
  pipe.InitBuffer(b, 256);
  AscendC::LocalTensor<bfloat16_t> src = a.Get<bfloat16_t>();
  AscendC::LocalTensor<float> dst = b.Get<float>();
  AscendC::Duplicate(src.ReinterpretCast<uint16_t>(), static_cast<uint16_t>(0x3f80), 64);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Cast(dst, src, AscendC::RoundMode::CAST_NONE, 64);
}
