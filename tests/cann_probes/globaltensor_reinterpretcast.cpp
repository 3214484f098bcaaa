// probe: GlobalTensor::ReinterpretCast<U>()
// official: rejected on A2/A3 and 310P (kernel_tensor.h declares it only for __NPU_ARCH__ 3510 / 5102)
// expect: reject
// twin: globaltensor_retype.cpp
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_globaltensor_reinterpretcast(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  AscendC::GlobalTensor<int32_t> i = g.ReinterpretCast<int32_t>();
  (void)i;
}
