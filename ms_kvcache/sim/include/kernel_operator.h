// AscendC CPU emulation (ms_kvcache): drop-in for CANN's kernel_operator.h.
//
// Kernel sources written for the AscendC compiler (bisheng) compile unchanged with g++ against this
// header and run on the emulation runtime (libascendc_sim.so), core by core, over real bytes. Every
// API enforces the hardware rules documented for it (see docs/emulation.md); a violation raises
// ascendc_sim::EmulationError naming the rule, the op, the core and the values.
#ifndef ASCENDC_SIM_KERNEL_OPERATOR_H_
#define ASCENDC_SIM_KERNEL_OPERATOR_H_

#include "ascendc_sim/kernel_api.h"
#include "ascendc_sim/list_tensor.h"

#endif  // ASCENDC_SIM_KERNEL_OPERATOR_H_
