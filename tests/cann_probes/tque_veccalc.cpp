// probe: a TQue over TPosition::VECCALC (VECCALC is a TBuf position, not a queue position)
// official: rejected at compile time (kernel_tpipe.h: TQue<pos> is TQueBind<GetBufferLogicPos(pos, true),
//           GetBufferLogicPos(pos, false)>, and GetBufferLogicPos has no queue position for VECCALC)
// expect: reject
// twin: tque_vecin.cpp
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_tque_veccalc(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TQue<AscendC::TPosition::VECCALC, 1> que;
  pipe.InitBuffer(que, 1, 256);
  AscendC::LocalTensor<float> t = que.AllocTensor<float>();
  que.FreeTensor(t);
}
