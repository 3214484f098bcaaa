// probe: a TQue over TPosition::VECIN: alloc, copy in, enqueue, dequeue, free (twin of tque_veccalc.cpp)
// official: accepted (the documented TQue use)
// expect: accept
// run: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_tque_vecin(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  AscendC::TQue<AscendC::TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 256);
  AscendC::LocalTensor<float> t = que.AllocTensor<float>();
  AscendC::DataCopy(t, g, 64);
  que.EnQue(t);
  AscendC::LocalTensor<float> r = que.DeQue<float>();
  que.FreeTensor(r);
}
