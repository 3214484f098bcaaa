// AscendC CPU emulation (ms_kvcache): drop-in for CANN's kernel_operator.h.
//
// Kernel sources written for the AscendC compiler (bisheng) compile unchanged with g++ against this
// header and run on the emulation runtime (libascendc_sim.so), core by core, over real bytes. Every
// API enforces the hardware rules documented for it (see docs/emulation.md); a violation raises
// ascendc_sim::EmulationError naming the rule, the op, the core and the values.
//
// As the official kernel_operator.h, it does NOT provide ListTensorDesc / TensorDesc: include
// "kernel_operator_list_tensor_intf.h" for them. The target arch comes from __NPU_ARCH__ and friends
// (ascendc_sim/arch.h), defined on the command line per arch family as bisheng does.
#ifndef ASCENDC_SIM_KERNEL_OPERATOR_H_
#define ASCENDC_SIM_KERNEL_OPERATOR_H_

#include "ascendc_sim/kernel_api.h"

#endif  // ASCENDC_SIM_KERNEL_OPERATOR_H_
