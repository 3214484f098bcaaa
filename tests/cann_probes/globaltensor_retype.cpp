// probe: viewing GM as another element type the way every SoC allows: a second GlobalTensor over the
// same address (twin of globaltensor_reinterpretcast.cpp)
// official: accepted
// expect: accept
// run: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_globaltensor_retype(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::GlobalTensor<int32_t> i;
  i.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(x), 64);
  i.SetValue(1, i.GetValue(0));
}
