// probe: DataCacheCleanAndInvalid<T, CacheLine, DcciDst> after a SetValue
// official: the dcciDst forms are implemented for __NPU_ARCH__ 2201 / 3002 / 3510 / 5102 / 3003 / 3113
//           (impl/basic_api/kernel_operator_cache_intf_impl.h); on 310P (2002) only the declaration in
//           include/basic_api/kernel_operator_cache_intf.h exists, so the call compiles but the kernel
//           cannot link (undefined template); the emulation rejects it at compile time (DIVERGENCES)
// expect[a2]: accept
// expect[310p]: accept
// run[a2]: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_dcci_dst_per_target(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  g.SetValue(0, 1.0f);
  AscendC::DataCacheCleanAndInvalid<float, AscendC::CacheLine::SINGLE_CACHE_LINE, AscendC::DcciDst::CACHELINE_OUT>(g);
}
