// probe: GlobalTensor::SetValue through a const GlobalTensor
// official: rejected (kernel_tensor.h: SetValue is a non-const member of GlobalTensor)
// expect: reject
// twin: globaltensor_setvalue.cpp
#include "kernel_operator.h"

__aicore__ inline void Store(const AscendC::GlobalTensor<float>& g) { g.SetValue(0, 1.0f); }

extern "C" __global__ __aicore__ void probe_globaltensor_setvalue_const(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  Store(g);
}
