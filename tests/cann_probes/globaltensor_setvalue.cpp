// probe: GlobalTensor::SetValue through a non-const GlobalTensor (twin of globaltensor_setvalue_const.cpp)
// official: accepted
// expect: accept
// run: ok
#include "kernel_operator.h"

__aicore__ inline void Store(AscendC::GlobalTensor<float>& g) { g.SetValue(0, 1.0f); }

extern "C" __global__ __aicore__ void probe_globaltensor_setvalue(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  Store(g);
}
