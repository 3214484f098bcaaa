// probe: AscendC::ListTensorDesc with only kernel_operator.h included
// official: rejected (kernel_operator.h does not include kernel_operator_list_tensor_intf.h; the
//           ListTensorDesc API page says to include it)
// expect: reject
// twin: listtensordesc_include.cpp
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void probe_listtensordesc_no_include(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::ListTensorDesc list;
  list.Init(reinterpret_cast<__gm__ void*>(x));
  (void)list.GetDataPtr<__gm__ float>(0);
}
