// probe: AscendC::ListTensorDesc with kernel_operator_list_tensor_intf.h included (twin of
// listtensordesc_no_include.cpp)
// official: accepted
// expect: accept
#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"

extern "C" __global__ __aicore__ void probe_listtensordesc_include(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  AscendC::ListTensorDesc list;
  list.Init(reinterpret_cast<__gm__ void*>(x));
  (void)list.GetDataPtr<__gm__ float>(0);
}
