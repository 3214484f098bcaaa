// AscendC CPU emulation: old include path of gert::Tensor (CANN keeps exe_graph/runtime/tensor.h).
#ifndef ASCENDC_SIM_EXE_GRAPH_TENSOR_H_
#define ASCENDC_SIM_EXE_GRAPH_TENSOR_H_
#include "exe_graph/runtime/runtime_tensor.h"
#endif
