// probe: DataCopyPad GM -> UB of a 28-byte row
// official: accepted on A2/A3; on 310P the implementation is marked [[deprecated("... DataCopyPad is an
//           unsupported API on current device ...")]] (impl/basic_api/dav_m200/kernel_operator_data_copy_impl.h),
//           which the check turns into an error
// expect[a2]: accept
// expect[310p]: reject
// run[a2]: ok
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_datacopypad_per_target(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 64);
  AscendC::TQue<AscendC::TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 256);
  AscendC::LocalTensor<float> t = que.AllocTensor<float>();
  AscendC::DataCopyExtParams in(1, 28, 0, 0, 0);
  AscendC::DataCopyPadExtParams<float> noPad(false, 0, 0, 0.0f);
  AscendC::DataCopyPad(t, g, in, noPad);
  que.EnQue(t);
  AscendC::LocalTensor<float> r = que.DeQue<float>();
  que.FreeTensor(r);
}
