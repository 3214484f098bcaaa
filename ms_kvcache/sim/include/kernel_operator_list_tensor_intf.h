// AscendC CPU emulation (ms_kvcache): CANN's kernel_operator_list_tensor_intf.h (ListTensorDesc).
#ifndef ASCENDC_SIM_KERNEL_OPERATOR_LIST_TENSOR_INTF_H_
#define ASCENDC_SIM_KERNEL_OPERATOR_LIST_TENSOR_INTF_H_
#include "kernel_operator.h"
#endif
