// probe: DataCacheCleanAndInvalid<T, CacheLine> (no dcciDst) after a SetValue
// official: implemented for every arch the package targets (2201 and 2002)
// expect[a2]: accept
// expect[310p]: accept
// run[a2]: ok
// run[310p]: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_dcci_entire(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  g.SetValue(0, 1.0f);
  AscendC::DataCacheCleanAndInvalid<float, AscendC::CacheLine::ENTIRE_DATA_CACHE>(g);
}
