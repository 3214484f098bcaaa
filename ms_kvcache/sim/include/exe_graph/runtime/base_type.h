// AscendC CPU emulation: CANN's exe_graph/runtime/base_type.h (kernel function return type).
#ifndef ASCENDC_SIM_EXE_GRAPH_BASE_TYPE_H_
#define ASCENDC_SIM_EXE_GRAPH_BASE_TYPE_H_
typedef unsigned int UINT32;
typedef UINT32 KernelStatus;
#endif
