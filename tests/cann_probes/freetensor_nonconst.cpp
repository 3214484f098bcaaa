// probe: TQue::FreeTensor given a non-const LocalTensor<T>& (twin of freetensor_const.cpp)
// official: accepted
// expect: accept
// run: ok
#include "kernel_operator.h"

__aicore__ inline void Release(AscendC::TQue<AscendC::TPosition::VECIN, 1>& que, AscendC::LocalTensor<float>& t) {
  que.FreeTensor(t);
}

extern "C" __global__ __aicore__ void probe_freetensor_nonconst(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TQue<AscendC::TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 256);
  AscendC::LocalTensor<float> t = que.AllocTensor<float>();
  Release(que, t);
}
