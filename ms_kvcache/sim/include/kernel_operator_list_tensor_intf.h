// AscendC CPU emulation (ms_kvcache): CANN's kernel_operator_list_tensor_intf.h (ListTensorDesc,
// TensorDesc). As the official header it brings the tensor types (GlobalTensor, LocalTensor, TPosition,
// HardEvent, the DataCopy parameter structs: kernel_tensor.h) but not the rest of kernel_operator.h,
// and kernel_operator.h does not bring ListTensorDesc.
//
// The classes are defined once at global scope (ascendc_sim/list_tensor.h, namespace ascendc_sim_lt)
// and this header names them AscendC::ListTensorDesc / AscendC::TensorDesc where it is included.
// The emulation compiles a kernel source inside a namespace of its own (so helper classes of different
// kernels never collide); its wrapper includes list_tensor.h at global scope first, defines
// ASCENDC_SIM_KERNEL_GATE and makes namespace AscendC use that kernel namespace's `ascendc_sim_gate`,
// which this header fills when the kernel includes it. So the names exist for exactly the kernels that
// include this header. This part has no include guard: a using-declaration may be repeated.
#include "ascendc_sim/kernel_tensor.h"
#include "ascendc_sim/list_tensor.h"

#if defined(ASCENDC_SIM_KERNEL_GATE)
namespace ascendc_sim_gate {
using ::ascendc_sim_lt::ListTensorDesc;
using ::ascendc_sim_lt::TensorDesc;
}  // namespace ascendc_sim_gate
#else
namespace AscendC {
using ::ascendc_sim_lt::ListTensorDesc;
using ::ascendc_sim_lt::TensorDesc;
}  // namespace AscendC
#endif
